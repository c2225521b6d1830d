//! A small YAML front end that keeps line numbers.
//!
//! airlock's configuration is YAML, but everything after parsing works on
//! `serde_json::Value` so that one set of serde types serves the file, the JSON
//! Schema and the wire. This module turns YAML events (from `saphyr-parser`) into a
//! `Value` and remembers, for every key path (`security.hitl.rules[1].tools[0]`), the
//! line it came from, so that both serde errors and semantic checks can name a line.
//!
//! It accepts the YAML 1.2 core schema with a few deliberate refusals that keep a
//! security configuration unambiguous: duplicate keys, aliases, custom tags,
//! non-scalar keys, several documents and non-finite numbers are errors.

use std::collections::HashMap;
use std::fmt;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::{Map, Number, Value};

/// Nesting deeper than this is refused, so hostile input cannot exhaust the stack.
const MAX_DEPTH: usize = 64;

/// A parsed YAML document and where each of its nodes came from.
#[derive(Debug, Clone, Default)]
pub struct Document {
    /// The document as JSON data. An empty document is `null`.
    pub value: Value,
    /// Line of each key path.
    pub lines: SourceLines,
}

/// Maps key paths (`a.b[0].c`) to 1-based line numbers.
#[derive(Debug, Clone, Default)]
pub struct SourceLines {
    by_path: HashMap<String, usize>,
}

impl SourceLines {
    /// The line of `path`, or of its nearest ancestor that has one.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        let mut candidate = path;
        loop {
            if let Some(line) = self.by_path.get(candidate) {
                return Some(*line);
            }
            let cut = candidate.rfind(['.', '['])?;
            candidate = &candidate[..cut];
        }
    }

    fn record(&mut self, path: &str, line: usize) {
        self.by_path.entry(path.to_owned()).or_insert(line);
    }
}

/// A YAML syntax error or a construct airlock refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// 1-based line of the problem.
    pub line: usize,
    /// Key path of the node where it happened (empty at the top level).
    pub path: String,
    /// What went wrong, lowercase, no trailing period.
    pub message: String,
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "line {}: {}", self.line, self.message)
        } else {
            write!(f, "line {}: {}: {}", self.line, self.path, self.message)
        }
    }
}

impl std::error::Error for YamlError {}

/// Parses one YAML document into JSON data with line information.
pub fn parse(text: &str) -> Result<Document, YamlError> {
    let mut builder = Builder {
        parser: Parser::new_from_str(text),
        lines: SourceLines::default(),
    };
    let value = builder.document()?;
    Ok(Document {
        value,
        lines: builder.lines,
    })
}

struct Builder<'input> {
    parser: Parser<'input, saphyr_parser::StrInput<'input>>,
    lines: SourceLines,
}

impl<'input> Builder<'input> {
    fn next(&mut self, path: &str) -> Result<(Event<'input>, Span), YamlError> {
        match self.parser.next_event() {
            Some(Ok(event)) => Ok(event),
            Some(Err(error)) => Err(YamlError {
                line: error.marker().line(),
                path: path.to_owned(),
                message: format!("invalid yaml: {}", error.info()),
            }),
            None => Err(YamlError {
                line: 0,
                path: path.to_owned(),
                message: "unexpected end of input".to_owned(),
            }),
        }
    }

    fn document(&mut self) -> Result<Value, YamlError> {
        let mut value = Value::Null;
        let mut documents = 0usize;
        loop {
            let (event, span) = self.next("")?;
            match event {
                Event::StreamStart | Event::DocumentEnd | Event::Nothing => {}
                Event::StreamEnd => return Ok(value),
                Event::DocumentStart(_) => {
                    documents += 1;
                    if documents > 1 {
                        return Err(refuse(span, "", "only one yaml document is allowed"));
                    }
                    let (event, span) = self.next("")?;
                    value = self.node(event, span, "", 0)?;
                }
                other => {
                    return Err(refuse(span, "", &format!("unexpected {other:?}")));
                }
            }
        }
    }

    fn node(
        &mut self,
        event: Event<'input>,
        span: Span,
        path: &str,
        depth: usize,
    ) -> Result<Value, YamlError> {
        if depth > MAX_DEPTH {
            return Err(refuse(span, path, "nesting is too deep"));
        }
        self.lines.record(path, span.start.line());
        match event {
            Event::Scalar(text, style, _anchor, tag) => {
                let tag_suffix = match &tag {
                    None => None,
                    Some(tag) if tag.is_yaml_core_schema() => Some(tag.suffix.as_str()),
                    Some(tag) => {
                        let message = format!("tag {}{} is not supported", tag.handle, tag.suffix);
                        return Err(refuse(span, path, &message));
                    }
                };
                scalar(&text, style, tag_suffix).map_err(|message| refuse(span, path, &message))
            }
            Event::SequenceStart(_anchor, tag) => {
                reject_collection_tag(tag.as_deref(), "seq", span, path)?;
                let mut items = Vec::new();
                loop {
                    let item_path = format!("{path}[{}]", items.len());
                    let (event, span) = self.next(&item_path)?;
                    if matches!(event, Event::SequenceEnd) {
                        return Ok(Value::Array(items));
                    }
                    items.push(self.node(event, span, &item_path, depth + 1)?);
                }
            }
            Event::MappingStart(_anchor, tag) => {
                reject_collection_tag(tag.as_deref(), "map", span, path)?;
                let mut map = Map::new();
                loop {
                    let (event, key_span) = self.next(path)?;
                    let key = match event {
                        Event::MappingEnd => return Ok(Value::Object(map)),
                        Event::Scalar(text, _, _, _) => text.into_owned(),
                        _ => {
                            return Err(refuse(
                                key_span,
                                path,
                                "mapping keys must be plain strings",
                            ));
                        }
                    };
                    let key_path = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    if map.contains_key(&key) {
                        return Err(refuse(key_span, &key_path, "duplicate key"));
                    }
                    self.lines.record(&key_path, key_span.start.line());
                    let (event, span) = self.next(&key_path)?;
                    let value = self.node(event, span, &key_path, depth + 1)?;
                    map.insert(key, value);
                }
            }
            Event::Alias(_) => Err(refuse(
                span,
                path,
                "aliases (*name) are not supported; write the value out",
            )),
            other => Err(refuse(span, path, &format!("unexpected {other:?}"))),
        }
    }
}

fn refuse(span: Span, path: &str, message: &str) -> YamlError {
    YamlError {
        line: span.start.line(),
        path: path.to_owned(),
        message: message.to_owned(),
    }
}

fn reject_collection_tag(
    tag: Option<&saphyr_parser::Tag>,
    expected: &str,
    span: Span,
    path: &str,
) -> Result<(), YamlError> {
    match tag {
        None => Ok(()),
        Some(tag) if tag.is_yaml_core_schema() && tag.suffix == expected => Ok(()),
        Some(tag) => Err(refuse(
            span,
            path,
            &format!("tag {}{} is not supported", tag.handle, tag.suffix),
        )),
    }
}

/// Resolves a scalar by the YAML 1.2 core schema. Quoted and block scalars are
/// strings unless a core tag (`!!int "5"`) says otherwise; a tagged scalar must
/// hold a value of its tag's type.
fn scalar(text: &str, style: ScalarStyle, tag_suffix: Option<&str>) -> Result<Value, String> {
    let expected = match tag_suffix {
        None if !matches!(style, ScalarStyle::Plain) => {
            return Ok(Value::String(text.to_owned()));
        }
        None => return resolve_plain(text),
        Some("str") => return Ok(Value::String(text.to_owned())),
        Some(expected @ ("null" | "bool" | "int" | "float")) => expected,
        Some(other) => return Err(format!("tag !!{other} is not supported here")),
    };
    let value = resolve_plain(text)?;
    let fits = match expected {
        "null" => value.is_null(),
        "bool" => value.is_boolean(),
        "int" => value.is_i64() || value.is_u64(),
        _ => value.is_number(),
    };
    if fits {
        Ok(value)
    } else {
        Err(format!("`{text}` is not a valid !!{expected}"))
    }
}

fn resolve_plain(text: &str) -> Result<Value, String> {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Ok(Value::Null),
        "true" | "True" | "TRUE" => return Ok(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Ok(Value::Bool(false)),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" | "-.inf" | "-.Inf" | "-.INF"
        | ".nan" | ".NaN" | ".NAN" => {
            return Err(format!("non-finite number {text} is not supported"));
        }
        _ => {}
    }
    if let Some(number) = integer(text)? {
        return Ok(Value::Number(number));
    }
    if is_float(text) {
        return match text.parse::<f64>().ok().and_then(Number::from_f64) {
            Some(number) => Ok(Value::Number(number)),
            None => Err(format!("number {text} is out of range")),
        };
    }
    Ok(Value::String(text.to_owned()))
}

fn integer(text: &str) -> Result<Option<Number>, String> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (radix, digits) = if let Some(hex) = text.strip_prefix("0x") {
        (16, hex)
    } else if let Some(octal) = text.strip_prefix("0o") {
        (8, octal)
    } else {
        (10, digits)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Ok(None);
    }
    let out_of_range = || format!("integer {text} is out of range");
    let magnitude = u64::from_str_radix(digits, radix).map_err(|_| out_of_range())?;
    if negative {
        let value = 0i64
            .checked_sub_unsigned(magnitude)
            .ok_or_else(out_of_range)?;
        Ok(Some(Number::from(value)))
    } else {
        Ok(Some(Number::from(magnitude)))
    }
}

/// `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`
fn is_float(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = usize::from(matches!(bytes.first(), Some(b'-' | b'+')));
    let integer_start = i;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        i += 1;
    }
    let integer_digits = i - integer_start;
    let mut fraction_digits = 0;
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        let fraction_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        fraction_digits = i - fraction_start;
    }
    if integer_digits == 0 && fraction_digits == 0 {
        return false;
    }
    if i < bytes.len() && matches!(bytes[i], b'e' | b'E') {
        i += 1;
        if i < bytes.len() && matches!(bytes[i], b'-' | b'+') {
            i += 1;
        }
        let exponent_start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == exponent_start {
            return false;
        }
    }
    i == bytes.len()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn value(text: &str) -> Value {
        parse(text).unwrap().value
    }

    #[test]
    fn core_schema_scalars_resolve_like_yaml_1_2() {
        assert_eq!(
            value(
                "a: 1\nb: -2\nc: 0x1f\nd: 1.5\ne: true\nf: ~\ng: yes\nh: '1'\ni: 1e3\nj: .5\nk: 0o17\nl:"
            ),
            json!({"a": 1, "b": -2, "c": 31, "d": 1.5, "e": true, "f": null, "g": "yes",
                   "h": "1", "i": 1000.0, "j": 0.5, "k": 15, "l": null})
        );
        assert_eq!(
            value("a: !!int \"5\"\nb: !!str 5\nc: !!float 2\nd: !!bool 'true'"),
            json!({"a": 5, "b": "5", "c": 2, "d": true})
        );
    }

    #[test]
    fn lines_are_recorded_for_keys_and_items() {
        let document = parse("a:\n  b:\n    - x\n    - y: 1\n").unwrap();
        assert_eq!(document.lines.line_of("a"), Some(1));
        assert_eq!(document.lines.line_of("a.b"), Some(2));
        assert_eq!(document.lines.line_of("a.b[1]"), Some(4));
        assert_eq!(document.lines.line_of("a.b[1].y"), Some(4));
        assert_eq!(document.lines.line_of("a.b[1].y.missing"), Some(4));
    }

    #[test]
    fn refusals_name_their_line() {
        let cases = [
            ("a: 1\na: 2\n", "line 2: a: duplicate key"),
            (
                "a: &x 1\nb: *x\n",
                "line 2: b: aliases (*name) are not supported; write the value out",
            ),
            ("a: !custom 1\n", "line 1: a: tag !custom is not supported"),
            (
                "a: 1\n---\nb: 2\n",
                "line 2: only one yaml document is allowed",
            ),
            (
                "a: .nan\n",
                "line 1: a: non-finite number .nan is not supported",
            ),
            (
                "a: 99999999999999999999\n",
                "line 1: a: integer 99999999999999999999 is out of range",
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text).unwrap_err().to_string(), expected, "{text}");
        }
    }

    #[test]
    fn deep_nesting_is_refused() {
        let text = "[".repeat(200) + &"]".repeat(200);
        assert!(parse(&text).unwrap_err().message.contains("too deep"));
    }
}
