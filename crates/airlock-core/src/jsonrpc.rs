//! The edge of a JSON-RPC stream that airlock reads line by line (MCP over
//! stdio), sans IO: [`LineFramer`] cuts bytes into lines without ever
//! holding more than the limit of one, and [`check_message`] decides whether
//! a line is a JSON-RPC message or says which error answers it (DESIGN §13):
//!
//! - a line longer than the limit: `-32600` invalid request, the line
//!   discarded as it streams past;
//! - JSON nested deeper than [`MAX_DEPTH`]: `-32600`, decided by a scan
//!   before any parse;
//! - anything that is not JSON: `-32700` parse error;
//! - JSON that is not one JSON-RPC 2.0 object (a batch, a number, a wrong
//!   `jsonrpc`, an id that is neither string, number nor null, neither a
//!   method nor a result): `-32600`.
//!
//! The answer carries the request's id when the line had a usable one, else
//! `null`, and the stream goes on.
//!
//! ```
//! use airlock_core::jsonrpc::{Frame, LineFramer, check_message};
//!
//! let mut framer = LineFramer::new(16);
//! let mut frames = Vec::new();
//! framer.push(b"{\"jsonrpc\"", &mut frames);
//! framer.push(b":\"2.0\",\"method\":\"ping\",\"id\":1}\nnot json\n", &mut frames);
//! assert_eq!(frames.len(), 2);
//! let Frame::TooLong = &frames[0] else { panic!() };
//! let Frame::Line(line) = &frames[1] else { panic!() };
//! assert_eq!(check_message(line).unwrap_err().code, -32700);
//! ```

use serde_json::{Value, json};

/// How deep a message may nest arrays and objects.
pub const MAX_DEPTH: usize = 64;

/// JSON-RPC's "parse error".
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's "invalid request".
pub const INVALID_REQUEST: i64 = -32600;

/// What the framer cut from the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// One line, without its `\n` (and a `\r` before it).
    Line(Vec<u8>),
    /// A line longer than the limit went past; nothing of it was kept.
    TooLong,
}

/// Cuts a byte stream into lines of at most `max` bytes. A longer line is
/// dropped as it arrives (only a flag is kept until its newline), so memory
/// never grows past one line of `max` bytes.
#[derive(Debug)]
pub struct LineFramer {
    max: usize,
    line: Vec<u8>,
    discarding: bool,
}

impl LineFramer {
    pub fn new(max: usize) -> LineFramer {
        LineFramer {
            max,
            line: Vec::new(),
            discarding: false,
        }
    }

    /// Bytes of the line in progress (at most the limit).
    pub fn buffered(&self) -> usize {
        self.line.len()
    }

    /// Feeds `chunk`; every line it completes goes to `frames`.
    pub fn push(&mut self, mut chunk: &[u8], frames: &mut Vec<Frame>) {
        while !chunk.is_empty() {
            let end = memchr::memchr(b'\n', chunk);
            let piece = &chunk[..end.unwrap_or(chunk.len())];
            if !self.discarding {
                if self.line.len() + piece.len() > self.max {
                    self.line = Vec::new();
                    self.discarding = true;
                } else {
                    self.line.extend_from_slice(piece);
                }
            }
            let Some(end) = end else {
                return;
            };
            chunk = &chunk[end + 1..];
            if std::mem::take(&mut self.discarding) {
                frames.push(Frame::TooLong);
            } else {
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                frames.push(Frame::Line(line));
            }
        }
    }

    /// At the end of the stream: the last line, if it had no newline.
    pub fn finish(&mut self, frames: &mut Vec<Frame>) {
        if std::mem::take(&mut self.discarding) {
            frames.push(Frame::TooLong);
        } else if !self.line.is_empty() {
            frames.push(Frame::Line(std::mem::take(&mut self.line)));
        }
    }
}

/// Why a line is not a message, and the id to answer with.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub code: i64,
    pub message: String,
    /// The request's id, when the line had a usable one.
    pub id: Value,
}

impl Rejection {
    fn new(code: i64, message: impl Into<String>, id: Value) -> Rejection {
        Rejection {
            code,
            message: message.into(),
            id,
        }
    }

    /// The JSON-RPC error response, as one line without its newline.
    pub fn response(&self) -> String {
        json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "error": {"code": self.code, "message": self.message},
        })
        .to_string()
    }
}

/// The answer to a line over `max` bytes.
pub fn too_long(max: usize) -> Rejection {
    Rejection::new(
        INVALID_REQUEST,
        format!("invalid request: the message is longer than {max} bytes (mcp.max_message_bytes)"),
        Value::Null,
    )
}

/// Whether the line is blank (no message, no answer).
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// The line as a JSON-RPC 2.0 message object, or why not.
pub fn check_message(line: &[u8]) -> Result<Value, Rejection> {
    if let Some(depth) = too_deep(line) {
        return Err(Rejection::new(
            INVALID_REQUEST,
            format!("invalid request: nested deeper than {depth} levels"),
            Value::Null,
        ));
    }
    let value: Value = serde_json::from_slice(line).map_err(|error| {
        Rejection::new(PARSE_ERROR, format!("parse error: {error}"), Value::Null)
    })?;
    let Value::Object(object) = &value else {
        let what = if value.is_array() {
            "a batch (batches are not supported)"
        } else {
            "not an object"
        };
        return Err(Rejection::new(
            INVALID_REQUEST,
            format!("invalid request: {what}"),
            Value::Null,
        ));
    };
    let id = match object.get("id") {
        None => Value::Null,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id.clone(),
        Some(_) => {
            return Err(Rejection::new(
                INVALID_REQUEST,
                "invalid request: the id must be a string, a number or null",
                Value::Null,
            ));
        }
    };
    let invalid = |message: &str| Err(Rejection::new(INVALID_REQUEST, message, id.clone()));
    if object.get("jsonrpc") != Some(&Value::String("2.0".to_owned())) {
        return invalid("invalid request: \"jsonrpc\" must be \"2.0\"");
    }
    match (
        object.get("method"),
        object.contains_key("result") || object.contains_key("error"),
    ) {
        (Some(Value::String(_)), false) => Ok(value),
        (None, true) if object.contains_key("id") => Ok(value),
        (Some(_), false) => invalid("invalid request: \"method\" must be a string"),
        _ => invalid("invalid request: neither a request, a notification nor a response"),
    }
}

/// The depth limit, when `line` nests arrays and objects deeper than it
/// (brackets inside strings do not count).
fn too_deep(line: &[u8]) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in line {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Some(MAX_DEPTH);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn frames(max: usize, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut framer = LineFramer::new(max);
        let mut out = Vec::new();
        for chunk in chunks {
            framer.push(chunk, &mut out);
            assert!(framer.buffered() <= max);
        }
        framer.finish(&mut out);
        out
    }

    #[test]
    fn lines_are_cut_and_long_ones_dropped_whatever_the_chunks() {
        let line = |text: &str| Frame::Line(text.as_bytes().to_vec());
        assert_eq!(
            frames(5, &[b"ab", b"c\r\nabcdefgh", b"ij\nx", b"y\n\n"]),
            [line("abc"), Frame::TooLong, line("xy"), line("")]
        );
        assert_eq!(frames(5, &[b"abcdef"]), [Frame::TooLong]);
        assert_eq!(frames(5, &[b"tail"]), [line("tail")]);
    }

    #[test]
    fn each_kind_of_bad_line_has_its_code_and_id() {
        let check = |text: &str| match check_message(text.as_bytes()) {
            Ok(_) => (0, Value::String("ok".into())),
            Err(rejection) => (rejection.code, rejection.id),
        };
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        let in_string = format!(
            r#"{{"jsonrpc":"2.0","method":"x","params":{{"s":"{}"}}}}"#,
            "[".repeat(200)
        );
        for (text, expected) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
                (0, json!("ok")),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                (0, json!("ok")),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"a","result":{}}"#,
                (0, json!("ok")),
            ),
            (in_string.as_str(), (0, json!("ok"))),
            ("{not json", (PARSE_ERROR, Value::Null)),
            ("", (PARSE_ERROR, Value::Null)),
            (deep.as_str(), (INVALID_REQUEST, Value::Null)),
            ("[]", (INVALID_REQUEST, Value::Null)),
            ("42", (INVALID_REQUEST, Value::Null)),
            (
                r#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#,
                (INVALID_REQUEST, json!(7)),
            ),
            (
                r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#,
                (INVALID_REQUEST, Value::Null),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"q","method":5}"#,
                (INVALID_REQUEST, json!("q")),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"q"}"#,
                (INVALID_REQUEST, json!("q")),
            ),
        ] {
            assert_eq!(check(text), expected, "{text}");
        }
        let response: Value = serde_json::from_str(&too_long(1024).response()).unwrap();
        assert_eq!(response["error"]["code"], INVALID_REQUEST);
        assert_eq!(response["id"], Value::Null);
    }
}
