//! RFC 8785 text straight from a log line, for the verifier's hot loop.
//!
//! Parsing a line into a `serde_json::Value` and canonicalizing that costs an
//! allocation per key and string, which alone would cap verify far below its target.
//! This reads the JSON text once and writes the canonical text as it goes: strings
//! without escapes are copied as they are (their canonical form is the same text),
//! members are sorted by reference to the bytes already written, and only numbers and
//! escaped strings go through [`airlock_core::canonical`]'s own writers. It gives the
//! same text as `serde_json` parsing followed by
//! [`airlock_core::canonical::write_canonical`] (a property test checks this), and it is
//! stricter in one place: a repeated member name is an error rather than "last wins".

use std::cmp::Ordering;
use std::ops::Range;

use airlock_core::canonical;

/// How deep objects and arrays may nest (serde_json's own limit).
const MAX_DEPTH: usize = 128;

/// The top-level members the verifier needs.
const CHAIN_FIELDS: [&str; 3] = ["seq", "prev_hash", "event_hash"];

/// Why a line has no canonical text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// The line is not the JSON text of an object (as serde_json reads JSON: a number
    /// beyond the range of a double is an error too).
    #[error("{0}")]
    Json(String),
}

/// The chain fields of a line, as found in it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ChainFields {
    /// `seq` when it is a non-negative integer.
    pub(crate) seq: Option<u64>,
    /// Where the text of `prev_hash` is in the line, when it is a string without
    /// escapes (every real hash is).
    pub(crate) prev_hash: Option<Range<usize>>,
    /// Where the text of `event_hash` is in the line, likewise.
    pub(crate) event_hash: Option<Range<usize>>,
}

/// The scratch space of one nesting level, reused from line to line.
#[derive(Default)]
struct Level {
    /// The canonical values of the object's members, one after another.
    buffer: Vec<u8>,
    members: Vec<Member>,
    /// The decoded names of members whose names have escapes.
    names: Vec<u8>,
    /// The order the members were sorted into last time: records of one log mostly
    /// share their shape, so it is tried first (and checked) before sorting again.
    order: Vec<u32>,
}

/// Reusable scratch space: one set of buffers per nesting level, so a line allocates
/// nothing once the buffers have grown.
pub(crate) struct LineCanonicalizer {
    levels: Vec<Level>,
    /// The decoded text of the last string with escapes.
    scratch: String,
}

impl LineCanonicalizer {
    pub(crate) fn new() -> Self {
        LineCanonicalizer {
            levels: (0..=MAX_DEPTH).map(|_| Level::default()).collect(),
            scratch: String::new(),
        }
    }

    /// Writes to `out` the canonical text of the object in `line` without its
    /// `event_hash` member, and returns the chain fields.
    pub(crate) fn canonicalize(
        &mut self,
        line: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<ChainFields, LineError> {
        let text = std::str::from_utf8(line)
            .map_err(|error| LineError::Json(format!("not utf-8: {error}")))?;
        let mut parser = Parser {
            text,
            bytes: text.as_bytes(),
            position: 0,
            scratch: std::mem::take(&mut self.scratch),
        };
        let result = parser.record(&mut self.levels, out);
        self.scratch = parser.scratch;
        result
    }
}

struct Parser<'text> {
    text: &'text str,
    bytes: &'text [u8],
    position: usize,
    /// Where [`Parser::string`] decodes a string with escapes.
    scratch: String,
}

/// Where the text of a string is.
#[derive(Clone, Copy)]
enum Text {
    /// In the line, between these offsets: it has no escapes.
    Raw(usize, usize),
    /// Decoded in the parser's scratch.
    Decoded,
}

/// One member of an object: where its name is (in the line, or decoded in the level's
/// `names`) and where its canonical value sits in the level's buffer.
#[derive(Clone, Copy)]
struct Member {
    name_start: usize,
    name_end: usize,
    decoded: bool,
    start: usize,
    end: usize,
}

impl Member {
    fn name<'a>(&self, line: &'a [u8], names: &'a [u8]) -> &'a [u8] {
        let source = if self.decoded { names } else { line };
        source
            .get(self.name_start..self.name_end)
            .unwrap_or_default()
    }
}

/// The order of two member names by their UTF-16 code units, as RFC 8785 sorts them.
/// UTF-8 byte order is code point order, which differs from UTF-16 order only between
/// a character in U+E000..U+FFFF (lead byte 0xEE or 0xEF) and one above U+FFFF (lead
/// byte 0xF0 and up); only then is the exact comparison needed.
fn name_cmp(left: &[u8], right: &[u8]) -> Ordering {
    let common = left.len().min(right.len());
    let (left_common, right_common) = (&left[..common], &right[..common]);
    match left_common
        .iter()
        .zip(right_common)
        .position(|(a, b)| a != b)
    {
        None => left.len().cmp(&right.len()),
        Some(index) if left[index] < 0xEE && right[index] < 0xEE => left[index].cmp(&right[index]),
        Some(_) => canonical::utf16_cmp(
            std::str::from_utf8(left).unwrap_or_default(),
            std::str::from_utf8(right).unwrap_or_default(),
        ),
    }
}

impl<'text> Parser<'text> {
    fn error(&self, what: &str) -> LineError {
        LineError::Json(format!("{what} at column {}", self.position + 1))
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.position).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.position += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), LineError> {
        self.skip_whitespace();
        if self.peek() == Some(byte) {
            self.position += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected '{}'", char::from(byte))))
        }
    }

    /// The whole line: one object and nothing else but whitespace.
    fn record(
        &mut self,
        levels: &mut [Level],
        out: &mut Vec<u8>,
    ) -> Result<ChainFields, LineError> {
        self.skip_whitespace();
        if self.peek() != Some(b'{') {
            return Err(self.error("expected an object"));
        }
        let mut fields = ChainFields::default();
        self.object(levels, out, Some(&mut fields))?;
        self.skip_whitespace();
        if self.position != self.bytes.len() {
            return Err(self.error("trailing characters"));
        }
        Ok(fields)
    }

    /// Appends the canonical text of the string `text` to `out`.
    fn write_string(&self, text: Text, out: &mut Vec<u8>) {
        match text {
            // Text without escapes, quotes or control characters is its own canonical
            // form.
            Text::Raw(start, end) => {
                out.push(b'"');
                out.extend_from_slice(&self.bytes[start..end]);
                out.push(b'"');
            }
            Text::Decoded => canonical::write_canonical_str(&self.scratch, out),
        }
    }

    fn value(&mut self, levels: &mut [Level], out: &mut Vec<u8>) -> Result<(), LineError> {
        self.skip_whitespace();
        match self.peek() {
            Some(b'{') => self.object(levels, out, None),
            Some(b'[') => self.array(levels, out),
            Some(b'"') => {
                let text = self.string()?;
                self.write_string(text, out);
                Ok(())
            }
            Some(b't') => self.literal("true", out),
            Some(b'f') => self.literal("false", out),
            Some(b'n') => self.literal("null", out),
            Some(b'-' | b'0'..=b'9') => self.number(out),
            _ => Err(self.error("expected a value")),
        }
    }

    fn literal(&mut self, word: &str, out: &mut Vec<u8>) -> Result<(), LineError> {
        if self.bytes[self.position..].starts_with(word.as_bytes()) {
            self.position += word.len();
            out.extend_from_slice(word.as_bytes());
            Ok(())
        } else {
            Err(self.error("invalid literal"))
        }
    }

    /// An object at `self.position` (on its `{`). `chain` is given for the top-level
    /// record: its `event_hash` is left out and the chain fields are picked up.
    fn object(
        &mut self,
        levels: &mut [Level],
        out: &mut Vec<u8>,
        mut chain: Option<&mut ChainFields>,
    ) -> Result<(), LineError> {
        let Some((level, deeper)) = levels.split_first_mut() else {
            return Err(self.error("nested too deeply"));
        };
        self.position += 1;
        level.buffer.clear();
        level.members.clear();
        level.names.clear();
        let mut seen_event_hash = false;
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.position += 1;
        } else {
            loop {
                self.skip_whitespace();
                if self.peek() != Some(b'"') {
                    return Err(self.error("expected a member name"));
                }
                let (name_start, name_end, decoded) = match self.string()? {
                    Text::Raw(start, end) => (start, end, false),
                    Text::Decoded => {
                        let start = level.names.len();
                        level.names.extend_from_slice(self.scratch.as_bytes());
                        (start, level.names.len(), true)
                    }
                };
                self.expect(b':')?;
                let buffer = &mut level.buffer;
                let start = buffer.len();
                let mut keep = true;
                let name: &[u8] = if decoded {
                    &level.names[name_start..name_end]
                } else {
                    &self.bytes[name_start..name_end]
                };
                match chain.as_deref_mut() {
                    Some(fields) if CHAIN_FIELDS.iter().any(|field| field.as_bytes() == name) => {
                        let is_event_hash = name == b"event_hash";
                        let is_prev_hash = name == b"prev_hash";
                        self.skip_whitespace();
                        let value_start = self.position;
                        self.value(deeper, buffer)?;
                        let value = &buffer[start..];
                        // A string without escapes is copied as it is, so its text in
                        // the line is the canonical text without the quotes.
                        let raw = value_start + 1..self.position.saturating_sub(1);
                        let text = (value.first() == Some(&b'"')
                            && self.bytes.get(value_start) == Some(&b'"')
                            && self
                                .bytes
                                .get(raw.clone())
                                .is_some_and(|raw| !raw.contains(&b'\\')))
                        .then_some(raw);
                        if is_event_hash {
                            if seen_event_hash {
                                return Err(self.error("repeated member name in an object"));
                            }
                            seen_event_hash = true;
                            fields.event_hash = text;
                            buffer.truncate(start);
                            keep = false;
                        } else if is_prev_hash {
                            fields.prev_hash = text;
                        } else {
                            fields.seq = std::str::from_utf8(value)
                                .ok()
                                .and_then(|digits| digits.parse().ok());
                        }
                    }
                    _ => self.value(deeper, buffer)?,
                }
                let end = level.buffer.len();
                if keep {
                    level.members.push(Member {
                        name_start,
                        name_end,
                        decoded,
                        start,
                        end,
                    });
                }
                self.skip_whitespace();
                match self.peek() {
                    Some(b',') => self.position += 1,
                    Some(b'}') => {
                        self.position += 1;
                        break;
                    }
                    _ => return Err(self.error("expected ',' or '}'")),
                }
            }
        }
        let Level {
            buffer,
            members,
            names,
            order,
        } = level;
        let line = self.bytes;
        let names: &[u8] = names;
        let members: &[Member] = members;
        let name = |index: u32| {
            members
                .get(index as usize)
                .map_or(&[][..], |member| member.name(line, names))
        };
        // Strictly ascending names are sorted and unique.
        let ascending = |order: &[u32]| {
            order
                .windows(2)
                .all(|pair| name_cmp(name(pair[0]), name(pair[1])) == Ordering::Less)
        };
        if order.len() != members.len() || !ascending(order) {
            order.clear();
            order.extend(0..u32::try_from(members.len()).unwrap_or(u32::MAX));
            order.sort_unstable_by(|&left, &right| name_cmp(name(left), name(right)));
            if !ascending(order) {
                return Err(self.error("repeated member name in an object"));
            }
        }
        out.push(b'{');
        for (position, &index) in order.iter().enumerate() {
            let Some(member) = members.get(index as usize) else {
                continue;
            };
            if position > 0 {
                out.push(b',');
            }
            if member.decoded {
                canonical::write_canonical_str(
                    std::str::from_utf8(member.name(line, names)).unwrap_or_default(),
                    out,
                );
            } else {
                out.push(b'"');
                out.extend_from_slice(member.name(line, names));
                out.push(b'"');
            }
            out.push(b':');
            out.extend_from_slice(&buffer[member.start..member.end]);
        }
        out.push(b'}');
        Ok(())
    }

    fn array(&mut self, levels: &mut [Level], out: &mut Vec<u8>) -> Result<(), LineError> {
        let Some((_, deeper)) = levels.split_first_mut() else {
            return Err(self.error("nested too deeply"));
        };
        self.position += 1;
        out.push(b'[');
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.position += 1;
            out.push(b']');
            return Ok(());
        }
        loop {
            self.value(deeper, out)?;
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => {
                    self.position += 1;
                    out.push(b',');
                }
                Some(b']') => {
                    self.position += 1;
                    out.push(b']');
                    return Ok(());
                }
                _ => return Err(self.error("expected ',' or ']'")),
            }
        }
    }

    /// The string at `self.position` (on its opening quote): where it is in the line
    /// when it has no escapes, else decoded into `self.scratch`.
    fn string(&mut self) -> Result<Text, LineError> {
        let start = self.position + 1;
        let position = find_special(self.bytes, start);
        match self.bytes.get(position) {
            Some(b'"') => {
                self.position = position + 1;
                return Ok(Text::Raw(start, position));
            }
            Some(b'\\') => {}
            Some(_) => {
                self.position = position;
                return Err(self.error("control character in a string"));
            }
            None => {
                self.position = position;
                return Err(self.error("unterminated string"));
            }
        }
        let mut decoded = std::mem::take(&mut self.scratch);
        decoded.clear();
        let result = self.decode(start, position, &mut decoded);
        self.scratch = decoded;
        result.map(|()| Text::Decoded)
    }

    /// Decodes the string whose text starts at `start` and has its first escape at
    /// `position` into `decoded`.
    fn decode(
        &mut self,
        start: usize,
        mut position: usize,
        decoded: &mut String,
    ) -> Result<(), LineError> {
        decoded.push_str(&self.text[start..position]);
        loop {
            // `position` is on a backslash.
            self.position = position;
            let escape = self.bytes.get(position + 1).copied();
            position += 2;
            match escape {
                Some(b'"') => decoded.push('"'),
                Some(b'\\') => decoded.push('\\'),
                Some(b'/') => decoded.push('/'),
                Some(b'b') => decoded.push('\u{8}'),
                Some(b'f') => decoded.push('\u{c}'),
                Some(b'n') => decoded.push('\n'),
                Some(b'r') => decoded.push('\r'),
                Some(b't') => decoded.push('\t'),
                Some(b'u') => {
                    let first = self.hex4(position)?;
                    position += 4;
                    let scalar = if (0xD800..0xDC00).contains(&first) {
                        let low = if self.bytes.get(position..position + 2) == Some(b"\\u") {
                            self.hex4(position + 2)?
                        } else {
                            0
                        };
                        if !(0xDC00..0xE000).contains(&low) {
                            return Err(self.error("lone surrogate in a \\u escape"));
                        }
                        position += 6;
                        0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00)
                    } else {
                        first
                    };
                    let character = char::from_u32(scalar)
                        .ok_or_else(|| self.error("lone surrogate in a \\u escape"))?;
                    decoded.push(character);
                }
                _ => return Err(self.error("invalid escape")),
            }
            let next = find_special(self.bytes, position);
            decoded.push_str(self.text.get(position..next).unwrap_or_default());
            position = next;
            match self.bytes.get(position) {
                Some(b'"') => {
                    self.position = position + 1;
                    return Ok(());
                }
                Some(b'\\') => {}
                Some(_) => {
                    self.position = position;
                    return Err(self.error("control character in a string"));
                }
                None => {
                    self.position = position;
                    return Err(self.error("unterminated string"));
                }
            }
        }
    }

    fn hex4(&self, at: usize) -> Result<u32, LineError> {
        let digits = self
            .bytes
            .get(at..at + 4)
            .ok_or_else(|| self.error("short \\u escape"))?;
        digits.iter().try_fold(0u32, |value, &digit| {
            let nibble = char::from(digit)
                .to_digit(16)
                .ok_or_else(|| self.error("invalid \\u escape"))?;
            Ok(value * 16 + nibble)
        })
    }

    /// A number, written as [`canonical::write_number_text`] writes its text (which is
    /// what the writer hashed: it canonicalizes the text serde_json writes).
    fn number(&mut self, out: &mut Vec<u8>) -> Result<(), LineError> {
        let start = self.position;
        let mut position = start;
        let negative = self.bytes.get(position) == Some(&b'-');
        if negative {
            position += 1;
        }
        let digits_start = position;
        match self.bytes.get(position) {
            Some(b'0') => position += 1,
            Some(b'1'..=b'9') => {
                while let Some(b'0'..=b'9') = self.bytes.get(position) {
                    position += 1;
                }
            }
            _ => {
                self.position = position;
                return Err(self.error("invalid number"));
            }
        }
        let integer_digits = position - digits_start;
        let mut integer = true;
        if self.bytes.get(position) == Some(&b'.') {
            integer = false;
            position += 1;
            let fraction_start = position;
            while let Some(b'0'..=b'9') = self.bytes.get(position) {
                position += 1;
            }
            if position == fraction_start {
                self.position = position;
                return Err(self.error("invalid number"));
            }
        }
        if let Some(b'e' | b'E') = self.bytes.get(position) {
            integer = false;
            position += 1;
            if let Some(b'+' | b'-') = self.bytes.get(position) {
                position += 1;
            }
            let exponent_start = position;
            while let Some(b'0'..=b'9') = self.bytes.get(position) {
                position += 1;
            }
            if position == exponent_start {
                self.position = position;
                return Err(self.error("invalid number"));
            }
        }
        self.position = position;
        let token = &self.text[start..position];
        // The common case: an integer of at most 15 digits is below 2^53 and is its
        // own canonical text (but "-0" is "0").
        if integer && integer_digits <= 15 {
            if token == "-0" {
                out.push(b'0');
            } else {
                out.extend_from_slice(token.as_bytes());
            }
            return Ok(());
        }
        // serde_json refuses what no finite double holds, and so do the other readers
        // of the log.
        if !token.parse::<f64>().is_ok_and(f64::is_finite) {
            return Err(self.error("number out of range"));
        }
        canonical::write_number_text(token, out);
        Ok(())
    }
}

/// `0x01` in every byte of a word.
pub(crate) const ONES: u64 = 0x0101_0101_0101_0101;
/// `0x80` in every byte of a word.
pub(crate) const HIGH: u64 = 0x8080_8080_8080_8080;

/// The eight bytes of `bytes` at `position` as a little-endian word, if there are
/// eight.
pub(crate) fn word_at(bytes: &[u8], position: usize) -> Option<u64> {
    let chunk = bytes.get(position..position.checked_add(8)?)?;
    let mut word_bytes = [0u8; 8];
    word_bytes.copy_from_slice(chunk);
    Some(u64::from_le_bytes(word_bytes))
}

/// Flags (the high bit of each byte) the bytes of `word` equal to `byte`. The
/// lowest flag is exact; bytes above it can be flagged falsely, by a borrow.
pub(crate) fn bytes_equal(word: u64, byte: u8) -> u64 {
    let zeroed = word ^ (ONES * u64::from(byte));
    zeroed.wrapping_sub(ONES) & !zeroed & HIGH
}

/// The index of the first `"`, `\\` or control character at or after `from`, or
/// `bytes.len()`. Eight bytes at a time while none of them is one.
fn find_special(bytes: &[u8], from: usize) -> usize {
    let mut position = from;
    while let Some(word) = word_at(bytes, position) {
        // Quotes, backslashes, and bytes below 0x20.
        let special = bytes_equal(word, b'"')
            | bytes_equal(word, b'\\')
            | (word.wrapping_sub(ONES * 0x20) & !word & HIGH);
        if special != 0 {
            // The lowest flagged byte is exact (only bytes above it can be flagged
            // falsely, by a borrow).
            return position + special.trailing_zeros() as usize / 8;
        }
        position += 8;
    }
    while let Some(&byte) = bytes.get(position) {
        if byte == b'"' || byte == b'\\' || byte < 0x20 {
            break;
        }
        position += 1;
    }
    position
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::*;

    /// The reference: serde_json's parse, then the core's canonical writer.
    fn reference(line: &str) -> Result<String, String> {
        let mut record: Map<String, Value> =
            serde_json::from_str(line).map_err(|error| error.to_string())?;
        record.remove("event_hash");
        Ok(canonical::to_canonical_string(&Value::Object(record)))
    }

    fn fast(line: &str) -> Result<String, LineError> {
        let mut out = Vec::new();
        LineCanonicalizer::new().canonicalize(line.as_bytes(), &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    fn check_same(line: &str) {
        assert_eq!(fast(line).unwrap(), reference(line).unwrap(), "{line}");
    }

    fn check_json_error(line: &str) {
        assert!(
            matches!(fast(line), Err(LineError::Json(_))),
            "{line}: {:?}",
            fast(line)
        );
    }

    #[test]
    fn escapes_and_whitespace_give_the_reference_text() {
        check_same(r#"{"a":"\u00e9\/\ud83d\ude00\n\t\"\\\b\f\r\u001F\u007f","event_hash":"x"}"#);
        check_same(
            " { \"b\" : [ 1 , 2.50 , -0 , -0.0 , 1E3 , 1e-7 , true , false , null ] ,\t\"a\" : { } , \"c\" : [ ] } ",
        );
        check_same(r#"{"\u00e9":1,"e":2,"\ud83d\ude00":3,"\ufb33":4,"":5}"#);
        check_same(r#"{"n":[9007199254740992,-9007199254740992,1152921504606846976]}"#);
        // Beyond 64 bits serde_json reads a double, and the line keeps the digits: only
        // the line's own text can be hashed exactly.
        assert_eq!(
            fast(r#"{"n":[18446744073709551616,-9223372036854775809,123456789012345678901234567890]}"#)
                .unwrap(),
            r#"{"n":[18446744073709551616,-9223372036854775809,123456789012345678901234567890]}"#
        );
        check_same(r#"{"f":[0.1,1e21,333333333.33333329,5e-324,-1.5e+300]}"#);
        // Rounded to zero, a tiny number would lose itself: its text is kept.
        assert_eq!(
            fast(r#"{"f":[1e-400,0e-400]}"#).unwrap(),
            r#"{"f":[1e-400,0]}"#
        );
    }

    #[test]
    fn a_reused_canonicalizer_sorts_every_shape_anew() {
        let mut canonicalizer = LineCanonicalizer::new();
        let mut out = Vec::new();
        for line in [
            r#"{"b":1,"a":{"y":1,"x":2},"c":3}"#,
            r#"{"b":1,"a":{"y":1,"x":2},"c":3}"#,
            r#"{"c":1,"b":{"x":1,"y":2},"a":3}"#,
            r#"{"a":1,"b":2,"c":3}"#,
            r#"{"\u0063":1,"b":2,"\ud83d\ude00":3,"\ufb33":4}"#,
            r#"{"\ufb33":1,"b":2,"\ud83d\ude00":3,"c":4}"#,
        ] {
            out.clear();
            canonicalizer
                .canonicalize(line.as_bytes(), &mut out)
                .unwrap();
            assert_eq!(
                String::from_utf8(out.clone()).unwrap(),
                reference(line).unwrap()
            );
        }
        out.clear();
        assert!(matches!(
            canonicalizer.canonicalize(br#"{"c":1,"b":2,"c":3}"#, &mut out),
            Err(LineError::Json(_))
        ));
    }

    #[test]
    fn chain_fields_are_picked_up_and_event_hash_left_out() {
        let mut out = Vec::new();
        let line = r#"{"seq":7,"x":{"event_hash":"kept"},"prev_hash": "sha256:ab","event_hash":"sha256:cd"}"#;
        let fields = LineCanonicalizer::new()
            .canonicalize(line.as_bytes(), &mut out)
            .unwrap();
        assert_eq!(
            out,
            br#"{"prev_hash":"sha256:ab","seq":7,"x":{"event_hash":"kept"}}"#
        );
        assert_eq!(fields.seq, Some(7));
        assert_eq!(
            fields.prev_hash.map(|range| &line[range]),
            Some("sha256:ab")
        );
        assert_eq!(
            fields.event_hash.map(|range| &line[range]),
            Some("sha256:cd")
        );
        // Escaped or non-string hashes are not picked up; a real hash is neither.
        let line = r#"{"seq":"7","prev_hash":"sha256:\u0061b","event_hash":5}"#;
        let fields = LineCanonicalizer::new()
            .canonicalize(line.as_bytes(), &mut out)
            .unwrap();
        assert_eq!(fields, ChainFields::default());
    }

    #[test]
    fn malformed_lines_are_json_errors() {
        for line in [
            "",
            "[]",
            "{",
            "{}x",
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"{a:1}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":.5}"#,
            r#"{"a":+1}"#,
            r#"{"a":1e}"#,
            r#"{"a":-}"#,
            r#"{"a":tru}"#,
            r#"{"a":"x"#,
            "{\"a\":\"\u{1}\"}",
            r#"{"a":"\x"}"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\udc00"}"#,
            r#"{"a":"\u12"}"#,
            r#"{"a":[1 2]}"#,
            r#"{"a":1,"a":2}"#,
            r#"{"event_hash":"a","event_hash":"b"}"#,
            r#"{"a":1e400}"#,
        ] {
            check_json_error(line);
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        check_json_error(&deep);
        // Integers no double holds keep their digits (tampering with them shows).
        assert_eq!(
            fast(r#"{"a":9007199254740993,"b":18446744073709551617}"#).unwrap(),
            r#"{"a":9007199254740993,"b":18446744073709551617}"#
        );
    }

    fn value_strategy() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|number| json!(number)),
            any::<u64>().prop_map(|number| json!(number)),
            (-1_000_000i64..1_000_000).prop_map(|number| json!(number)),
            any::<f64>().prop_map(|number| json!(number)),
            "\\PC{0,10}".prop_map(Value::String),
            ".{0,10}".prop_map(Value::String),
            "[\\x00-\\x1f\"\\\\/a\u{e9}\u{1F600}\u{fb33}]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map("[a-c\u{e9}\u{1F600}\u{fb33}]{0,3}", inner, 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_value_written_by_serde_json_gives_the_reference_text(value in value_strategy(), pretty in any::<bool>()) {
            let record = json!({"seq": 1, "v": value, "prev_hash": "sha256:00", "event_hash": "sha256:11"});
            let line = if pretty {
                serde_json::to_string_pretty(&record).unwrap()
            } else {
                serde_json::to_string(&record).unwrap()
            };
            match (fast(&line), reference(&line)) {
                (Ok(fast), Ok(reference)) => prop_assert_eq!(fast, reference),
                (fast, reference) => prop_assert!(false, "{line}: {fast:?} vs {reference:?}"),
            }
        }
    }
}
