//! RFC 8785 canonical JSON (JCS) and the hashing helpers built on it (written with the
//! audit log).
//!
//! The canonical form is what the audit chain hashes, so it must be byte-for-byte the
//! same on every machine and in every language: object members sorted by the UTF-16
//! code units of their names, no whitespace, strings escaped exactly as ECMAScript's
//! `JSON.stringify` does, and numbers written as ECMAScript's `Number.prototype.toString`
//! writes them.
//!
//! Numbers: RFC 8785 reads every JSON number as an IEEE 754 double and writes that
//! double as ECMAScript would (`333333333.33333329` becomes `333333333.3333333`,
//! `1E30` becomes `1e+30`). That is exact for everything I-JSON allows, but an integer
//! beyond 2^53 may have no double of its own: `18446744073709551616` and
//! `18446744073709551617` would both become `18446744073709552000`, and a tampered
//! audit record would keep its hash. So a number whose RFC 8785 text would not denote
//! the same value, an integer the double's text does not equal, or a number no finite
//! double holds (`1e400`, or `1e-400` rounded to zero), is written as its original JSON
//! text instead, and that text is what gets hashed ([`write_number_text`]). No other
//! number's text can collide with it: the text of a double always reads back to it.
//! Canonicalisation therefore never fails.
//!
//! ```
//! use airlock_core::canonical::{sha256_hex, to_canonical_string};
//!
//! let value = serde_json::json!({"b": [1.0, 1e21, "x\n"], "a": null});
//! let text = to_canonical_string(&value);
//! assert_eq!(text, r#"{"a":null,"b":[1,1e+21,"x\n"]}"#);
//! assert!(sha256_hex(text.as_bytes()).starts_with("sha256:"));
//! ```

use std::cmp::Ordering;
use std::fmt::Write as _;

use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

/// The `prev_hash` of the first record of a chain: `sha256:` and 64 zeros.
pub const ZERO_HASH: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// The RFC 8785 canonical text of `value`.
pub fn to_canonical_string(value: &Value) -> String {
    let mut out = Vec::with_capacity(256);
    write_canonical(value, &mut out);
    // Everything written is either copied from valid `str`s or ASCII, so this never
    // fails; the lossy conversion keeps the function free of a panic path all the same.
    match String::from_utf8(out) {
        Ok(text) => text,
        Err(error) => String::from_utf8_lossy(error.as_bytes()).into_owned(),
    }
}

/// Appends the RFC 8785 canonical text of `value` to `out`.
///
/// This is the allocation-free form for hot loops (the audit verifier reuses one
/// buffer for every line).
pub fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(number) => write_number(number, out),
        Value::String(text) => write_canonical_str(text, out),
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => write_canonical_object(map, out),
    }
}

/// Appends the RFC 8785 canonical text of the object `map` to `out` (the same as
/// [`write_canonical`] on `Value::Object`, without owning a `Value`).
pub fn write_canonical_object(map: &Map<String, Value>, out: &mut Vec<u8>) {
    let mut members: Vec<(&String, &Value)> = map.iter().collect();
    members.sort_unstable_by(|(left, _), (right, _)| utf16_cmp(left, right));
    out.push(b'{');
    for (index, (name, item)) in members.into_iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        write_canonical_str(name, out);
        out.push(b':');
        write_canonical(item, out);
    }
    out.push(b'}');
}

/// `sha256:` followed by the 64 lowercase hex digits of the SHA-256 of `bytes`.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    prefixed_hex("sha256:", &Sha256::digest(bytes.as_ref()))
}

/// `prefix` followed by the lowercase hex digits of `digest` (`sha256:`, `hmac-sha256:`).
pub fn prefixed_hex(prefix: &str, digest: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(prefix.len() + digest.len() * 2);
    out.push_str(prefix);
    for byte in digest {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// Orders two strings by their UTF-16 code units, as RFC 8785 sorts member names.
///
/// UTF-8 byte order is code point order, which differs from UTF-16 order only between
/// U+E000..U+FFFF and the supplementary planes (encoded as surrogates 0xD800..0xDFFF in
/// UTF-16). So bytes are compared until the first difference, and only a difference in
/// a non-ASCII character is settled in UTF-16.
pub fn utf16_cmp(left: &str, right: &str) -> Ordering {
    let (left_bytes, right_bytes) = (left.as_bytes(), right.as_bytes());
    let Some(first_difference) = left_bytes.iter().zip(right_bytes).position(|(a, b)| a != b)
    else {
        return left_bytes.len().cmp(&right_bytes.len());
    };
    let (a, b) = (left_bytes[first_difference], right_bytes[first_difference]);
    if a.is_ascii() && b.is_ascii() {
        return a.cmp(&b);
    }
    // Both strings agree up to here, so they share the character boundary at or before
    // the first difference.
    let mut start = first_difference;
    while !left.is_char_boundary(start) {
        start -= 1;
    }
    left[start..]
        .encode_utf16()
        .cmp(right[start..].encode_utf16())
}

/// Appends the RFC 8785 form of the string `text` (quoted and escaped) to `out`.
pub fn write_canonical_str(text: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut copied = 0;
    for (index, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[copied..index]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0x0f)]);
        } else {
            out.extend_from_slice(escape);
        }
        copied = index + 1;
    }
    out.extend_from_slice(&bytes[copied..]);
    out.push(b'"');
}

/// 2^53: every integer of at most this magnitude is an exact double.
const MAX_SAFE_MAGNITUDE: u64 = 1 << 53;

fn write_number(number: &Number, out: &mut Vec<u8>) {
    // The common case without formatting: an integer a double holds, written as is.
    if let Some(unsigned) = number.as_u64() {
        if unsigned <= MAX_SAFE_MAGNITUDE {
            write_decimal(unsigned, out);
            return;
        }
    } else if let Some(signed) = number.as_i64() {
        // Only negative values get here: non-negative ones are `as_u64` above.
        let magnitude = signed.unsigned_abs();
        if magnitude <= MAX_SAFE_MAGNITUDE {
            out.push(b'-');
            write_decimal(magnitude, out);
            return;
        }
    }
    // Anything else through the text serde_json writes for it, which is the text a
    // record line holds and the verifier reads back.
    let mut text = StackText::new();
    if write!(text, "{number}").is_ok() {
        write_number_text(text.as_str(), out);
    } else {
        write_number_text(&number.to_string(), out);
    }
}

/// Appends the RFC 8785 text of the JSON number whose JSON text is `token` (which must
/// follow the JSON number grammar), or `token` itself where RFC 8785 cannot represent
/// it exactly (see the module documentation).
pub fn write_number_text(token: &str, out: &mut Vec<u8>) {
    let integer = !token.bytes().any(|byte| matches!(byte, b'.' | b'e' | b'E'));
    let digits = token.len() - usize::from(token.starts_with('-'));
    if integer && digits <= 15 {
        // Below 2^53, so its own canonical text (but "-0" is "0").
        if token == "-0" {
            out.push(b'0');
        } else {
            out.extend_from_slice(token.as_bytes());
        }
        return;
    }
    let double = match token.parse::<f64>() {
        Ok(double) if double.is_finite() => double,
        _ => {
            out.extend_from_slice(token.as_bytes());
            return;
        }
    };
    let start = out.len();
    write_double(double, out);
    let value = decimal_value(token.as_bytes());
    let exact = if is_whole(&value) {
        // A whole number (`5`, `5.0`, `5e0` alike) is exact only if the double's
        // text denotes that very number: `9007199254740993.0` must not pass for
        // `9007199254740992`.
        value == decimal_value(&out[start..])
    } else {
        // A fraction stands for the nearest double (RFC 8785 §3.2.2.3), unless
        // it has none: a nonzero value that underflows to zero.
        double != 0.0 || value.1.is_empty()
    };
    if !exact {
        out.truncate(start);
        out.extend_from_slice(token.as_bytes());
    }
}

/// A JSON number's decimal value as `(negative, significant digits, exponent)`, where
/// the value is `0.DIGITS × 10^exponent` and the digits have no leading or trailing
/// zeros; zero is `(false, [], 0)` whatever its sign.
fn decimal_value(text: &[u8]) -> (bool, Vec<u8>, i64) {
    let (negative, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (mantissa, exponent) = match text.iter().position(|&byte| matches!(byte, b'e' | b'E')) {
        Some(split) => (&text[..split], &text[split + 1..]),
        None => (text, &b""[..]),
    };
    let (exponent_negative, exponent_digits) = match exponent.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, exponent),
    };
    let exponent_magnitude = exponent_digits.iter().fold(0i64, |value, &digit| {
        value
            .saturating_mul(10)
            .saturating_add(i64::from(digit.wrapping_sub(b'0')))
    });
    let exponent = if exponent_negative {
        -exponent_magnitude
    } else {
        exponent_magnitude
    };
    let point = mantissa
        .iter()
        .position(|&byte| byte == b'.')
        .unwrap_or(mantissa.len());
    let mut digits: Vec<u8> = mantissa
        .iter()
        .copied()
        .filter(u8::is_ascii_digit)
        .collect();
    let leading = digits.iter().take_while(|&&digit| digit == b'0').count();
    digits.drain(..leading);
    while digits.last() == Some(&b'0') {
        digits.pop();
    }
    if digits.is_empty() {
        return (false, digits, 0);
    }
    let position = i64::try_from(point)
        .unwrap_or(i64::MAX)
        .saturating_sub(i64::try_from(leading).unwrap_or(i64::MAX));
    (negative, digits, position.saturating_add(exponent))
}

/// Whether a [`decimal_value`] is a whole number (zero included).
fn is_whole((_, digits, exponent): &(bool, Vec<u8>, i64)) -> bool {
    i64::try_from(digits.len()).is_ok_and(|count| *exponent >= count)
}

fn write_decimal(mut value: u64, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start..]);
}

/// A small stack buffer for number formatting, which never exceeds 24 bytes for a
/// finite `f64` ("1.7976931348623157e308" with a sign) or a 64-bit integer.
struct StackText {
    bytes: [u8; 32],
    len: usize,
}

impl StackText {
    fn new() -> Self {
        StackText {
            bytes: [0; 32],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl std::fmt::Write for StackText {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        let end = self.len + text.len();
        let slot = self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        slot.copy_from_slice(text.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Writes a finite double as ECMAScript's `Number.prototype.toString` does
/// (ECMA-262 Number::toString, the algorithm RFC 8785 §3.2.2.3 adopts).
///
/// Rust's `{:e}` gives the shortest digit string that reads back to the same double,
/// which is ECMAScript's `s` with `k` digits; `n` is its exponent plus one.
fn write_double(value: f64, out: &mut Vec<u8>) {
    if value == 0.0 {
        // Both 0 and -0 are "0".
        out.push(b'0');
        return;
    }
    if value < 0.0 {
        out.push(b'-');
    }
    let magnitude = value.abs();
    let mut text = StackText::new();
    if write!(text, "{magnitude:e}").is_err() {
        // Unreachable for a finite double (see `StackText`); the plain form is a safe
        // stand-in rather than a panic.
        out.extend_from_slice(magnitude.to_string().as_bytes());
        return;
    }
    // `{:e}` gives a shortest digit string, but where two shortest strings are equally
    // close (the double lies exactly halfway, as 1637661831960736.25 does) it rounds
    // half up, while ECMAScript takes the one closest to the double and then the even
    // one. The correctly rounded string with the same number of digits (which Rust's
    // precision formatting rounds half to even) is that string whenever it still reads
    // back to the same double.
    let digit_count = text.bytes[..text.len]
        .iter()
        .take_while(|&&byte| byte != b'e')
        .filter(|byte| byte.is_ascii_digit())
        .count();
    let mut nearest = StackText::new();
    if digit_count > 1
        && write!(nearest, "{magnitude:.*e}", digit_count - 1).is_ok()
        && nearest.bytes[..nearest.len] != text.bytes[..text.len]
        && std::str::from_utf8(&nearest.bytes[..nearest.len])
            .ok()
            .and_then(|candidate| candidate.parse::<f64>().ok())
            == Some(magnitude)
    {
        text = nearest;
    }
    let formatted = &text.bytes[..text.len];
    let (mantissa, exponent) = match formatted.iter().position(|&byte| byte == b'e') {
        Some(split) => (&formatted[..split], &formatted[split + 1..]),
        None => (formatted, &b"0"[..]),
    };
    let mut digits = [0u8; 24];
    let mut digit_count = 0;
    for &byte in mantissa.iter().filter(|byte| byte.is_ascii_digit()) {
        if let Some(slot) = digits.get_mut(digit_count) {
            *slot = byte;
            digit_count += 1;
        }
    }
    let digits = &digits[..digit_count];
    let exponent_magnitude = exponent
        .iter()
        .filter(|byte| byte.is_ascii_digit())
        .fold(0i32, |acc, byte| acc * 10 + i32::from(byte - b'0'));
    let exponent = if exponent.first() == Some(&b'-') {
        -exponent_magnitude
    } else {
        exponent_magnitude
    };
    let k = digits.len() as i32;
    let n = exponent + 1;
    if k <= n && n <= 21 {
        out.extend_from_slice(digits);
        out.extend(std::iter::repeat_n(b'0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        let (whole, fraction) = digits.split_at(n as usize);
        out.extend_from_slice(whole);
        out.push(b'.');
        out.extend_from_slice(fraction);
    } else if -6 < n && n <= 0 {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', (-n) as usize));
        out.extend_from_slice(digits);
    } else {
        out.push(digits[0]);
        if k > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        let shown_exponent = n - 1;
        out.push(if shown_exponent >= 0 { b'+' } else { b'-' });
        write_decimal(u64::from(shown_exponent.unsigned_abs()), out);
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn canonical(text: &str) -> String {
        let value: Value = serde_json::from_str(text).unwrap();
        to_canonical_string(&value)
    }

    fn number(value: f64) -> String {
        to_canonical_string(&json!(value))
    }

    #[test]
    fn rfc8785_section_3_2_2_example() {
        let input = r#"{
            "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]
        }"#;
        assert_eq!(
            canonical(input),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    #[test]
    fn rfc8785_section_3_2_3_sorts_by_utf16_code_units() {
        let input = r#"{
            "\u20ac": "Euro Sign",
            "\r": "Carriage Return",
            "\ufb33": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\ud83d\ude00": "Emoji: Grinning Face",
            "\u0080": "Control",
            "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        let value: Value = serde_json::from_str(input).unwrap();
        let Value::Object(map) = &value else {
            panic!("object")
        };
        let mut names: Vec<&String> = map.keys().collect();
        names.sort_by(|a, b| utf16_cmp(a, b));
        let values: Vec<&str> = names
            .iter()
            .map(|name| map[*name].as_str().unwrap())
            .collect();
        assert_eq!(
            values,
            [
                "Carriage Return",
                "One",
                "Control",
                "Latin Small Letter O With Diaeresis",
                "Euro Sign",
                "Emoji: Grinning Face",
                "Hebrew Letter Dalet With Dagesh",
            ]
        );
        // The emoji (a surrogate pair in UTF-16) sorts before U+FB33 although its code
        // point is larger: byte order alone would get this wrong.
        assert!(canonical(input).find("😀").unwrap() < canonical(input).find('\u{fb33}').unwrap());
    }

    #[test]
    fn nested_objects_are_sorted_and_whitespace_is_gone() {
        assert_eq!(
            canonical(
                r#" { "b" : { "z" : 1 , "a" : [ 2 , { "d" : 0 , "c" : 0 } ] } , "a" : "" } "#
            ),
            r#"{"a":"","b":{"a":[2,{"c":0,"d":0}],"z":1}}"#
        );
        assert_eq!(canonical("[]"), "[]");
        assert_eq!(canonical("{}"), "{}");
        assert_eq!(
            canonical(r#"{"aa":1,"a":2,"b":3,"B":4}"#),
            r#"{"B":4,"a":2,"aa":1,"b":3}"#
        );
    }

    #[test]
    fn strings_escape_only_quote_backslash_and_controls() {
        let value = json!("\u{0}\u{1}\u{8}\t\n\u{b}\u{c}\r\u{1f} \u{7f}/<>&'é😀\"\\");
        assert_eq!(
            to_canonical_string(&value),
            "\"\\u0000\\u0001\\b\\t\\n\\u000b\\f\\r\\u001f \u{7f}/<>&'é😀\\\"\\\\\""
        );
    }

    #[test]
    #[expect(
        clippy::excessive_precision,
        reason = "the literals are the texts RFC 8785 and the halfway cases start from"
    )]
    fn numbers_follow_ecmascript_to_string() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-1.5, "-1.5"),
            (0.1, "0.1"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (333333333.33333329, "333333333.3333333"),
            (1e23, "1e+23"),
            (-1e-7, "-1e-7"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (9007199254740992.0, "9007199254740992"),
            (295147905179352830000.0, "295147905179352830000"),
            (4.5, "4.5"),
            (0.002, "0.002"),
            (1e-27, "1e-27"),
            (1e30, "1e+30"),
            // Halfway between two shortest strings: ECMAScript takes the even one
            // (checked against node over 200,000 doubles when this was written).
            (1637661831960736.25, "1637661831960736.2"),
            (776720790439075.25, "776720790439075.2"),
        ];
        for &(value, expected) in cases {
            assert_eq!(number(value), expected, "{value:e}");
        }
    }

    #[test]
    fn integers_up_to_2_pow_53_are_plain_digits() {
        assert_eq!(canonical("0"), "0");
        assert_eq!(canonical("-0"), "0");
        assert_eq!(canonical("42"), "42");
        assert_eq!(canonical("-42"), "-42");
        assert_eq!(canonical("9007199254740992"), "9007199254740992");
        assert_eq!(canonical("-9007199254740992"), "-9007199254740992");
        assert_eq!(canonical("1.0"), "1");
        assert_eq!(canonical("1E3"), "1000");
    }

    #[test]
    fn large_integers_keep_their_text_unless_the_double_text_is_them() {
        // 2^53 + 2 is a double, and its ECMAScript text is the integer itself.
        assert_eq!(canonical("9007199254740994"), "9007199254740994");
        // 10^21 is written as ECMAScript writes that double.
        assert_eq!(canonical("1000000000000000000000"), "1e+21");
        assert_eq!(canonical("-1000000000000000000000"), "-1e+21");
        // Every other integer keeps its own digits: a double would round them away.
        for text in [
            "9007199254740993",
            "-9007199254740993",
            "1152921504606846976",
            "-9223372036854775808",
            "18446744073709551615",
        ] {
            assert_eq!(canonical(text), text);
        }
        // Beyond 64 bits serde_json already holds a double: its text is what counts.
        assert_eq!(canonical("18446744073709551616"), "18446744073709552000");
    }

    #[test]
    fn number_texts_follow_rfc_8785_or_stay_as_written() {
        let text = |token: &str| {
            let mut out = Vec::new();
            write_number_text(token, &mut out);
            String::from_utf8(out).unwrap()
        };
        for (token, expected) in [
            ("0", "0"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("0e5", "0"),
            ("1.0", "1"),
            ("4.50", "4.5"),
            ("2e-3", "0.002"),
            ("1E30", "1e+30"),
            ("333333333.33333329", "333333333.3333333"),
            ("0.000000000000000000000000001", "1e-27"),
            ("9007199254740992", "9007199254740992"),
            ("9007199254740993", "9007199254740993"),
            ("18446744073709551616", "18446744073709551616"),
            ("18446744073709551617", "18446744073709551617"),
            ("18446744073709552000", "18446744073709552000"),
            ("100000000000000000000", "100000000000000000000"),
            ("1000000000000000000000", "1e+21"),
            (
                "123456789012345678901234567890",
                "123456789012345678901234567890",
            ),
            ("1e400", "1e400"),
            ("-1e400", "-1e400"),
            ("1e-400", "1e-400"),
            ("0.0e-400", "0"),
            ("5e-324", "5e-324"),
            // A whole number is a whole number however it is written.
            ("9007199254740993.0", "9007199254740993.0"),
            ("9007199254740993e0", "9007199254740993e0"),
            ("900719925474099.3e1", "900719925474099.3e1"),
            ("9007199254740992.0", "9007199254740992"),
            ("56.0", "56"),
            ("1e21", "1e+21"),
        ] {
            assert_eq!(text(token), expected, "{token}");
        }
    }

    #[test]
    fn utf16_order_matches_a_plain_utf16_comparison() {
        let names = [
            "",
            "a",
            "ab",
            "b",
            "é",
            "\u{e000}",
            "\u{ffff}",
            "😀",
            "😀a",
            "\u{10ffff}",
            "~",
            "\u{7f}",
        ];
        for left in names {
            for right in names {
                assert_eq!(
                    utf16_cmp(left, right),
                    left.encode_utf16().cmp(right.encode_utf16()),
                    "{left:?} vs {right:?}"
                );
            }
        }
    }

    #[test]
    fn sha256_hex_is_prefixed_lowercase_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(ZERO_HASH.len(), "sha256:".len() + 64);
        assert!(
            ZERO_HASH["sha256:".len()..]
                .bytes()
                .all(|byte| byte == b'0')
        );
    }

    proptest::proptest! {
        /// What the audit log relies on: a value written by serde_json and read back
        /// has the same canonical text, and every canonical number reads back (as
        /// ECMAScript reads it) to the same double.
        #[test]
        fn canonical_text_survives_a_serde_json_round_trip(
            pairs in proptest::collection::vec(
                (
                    "\\PC{0,8}",
                    proptest::num::f64::POSITIVE
                        | proptest::num::f64::NEGATIVE
                        | proptest::num::f64::NORMAL
                        | proptest::num::f64::SUBNORMAL
                        | proptest::num::f64::ZERO,
                    proptest::num::i64::ANY,
                    "\\PC{0,12}",
                ),
                0..8,
            )
        ) {
            let mut map = Map::new();
            for (name, double, integer, text) in pairs {
                let text_of_double = to_canonical_string(&json!(double));
                proptest::prop_assert_eq!(text_of_double.parse::<f64>().unwrap(), double);
                map.insert(name, json!([double, integer, text]));
            }
            let value = Value::Object(map);
            let canonical_text = to_canonical_string(&value);
            let written = serde_json::to_string(&value).unwrap();
            let back: Value = serde_json::from_str(&written).unwrap();
            proptest::prop_assert_eq!(to_canonical_string(&back), canonical_text);
        }
    }
}
