//! Audit records as a SIEM receives them (spec 000 phase 2): RFC 5424
//! syslog messages, framed for TCP and TLS by octet counting (RFC 6587
//! §3.4.1, RFC 5425 §4.3). Pure functions over the stored line.
//!
//! ```text
//! <110>1 2026-11-28T04:32:24.137Z host airlock 4242 hitl_decision [airlock@32473 seq="4" event_hash="sha256:…"] BOM{"seq":4,…}
//! ```
//!
//! Facility 13 (log audit); severity 6 (informational), or 4 (warning) for
//! records that say the log or the configuration was in trouble. The
//! structured data carries the record's `seq` and `event_hash`, so a
//! receiver can put records in order, drop a repeat and check the chain;
//! `32473` is the private enterprise number RFC 5612 reserves for examples
//! (airlock has none of its own). The message is the record's line as
//! stored, after a UTF-8 BOM.

use serde_json::Value;

/// Facility 13, "log audit".
const FACILITY: u8 = 13;

/// Records that a warning is sent for.
const WARNINGS: &[&str] = &[
    "audit_torn_line",
    "audit_truncated_tail",
    "audit_checkpoint_refused",
    "config_rejected",
    "apply_mismatch",
];

/// `text` as an RFC 5424 header field: printable US-ASCII only, at most
/// `max` characters, `-` when nothing is left.
fn header_field(text: &str, max: usize) -> String {
    let field: String = text
        .chars()
        .filter(|c| ('!'..='~').contains(c))
        .take(max)
        .collect();
    if field.is_empty() {
        "-".to_owned()
    } else {
        field
    }
}

/// A structured-data parameter value: `"`, `\` and `]` escaped.
fn param_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '"' | '\\' | ']') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The RFC 5424 message of one record `line` (without its `\n`), from
/// `host` and process `pid`.
pub fn syslog_message(line: &str, host: &str, pid: u32) -> Vec<u8> {
    let record: serde_json::Map<String, Value> = serde_json::from_str(line).unwrap_or_default();
    let text = |key: &str| record.get(key).and_then(Value::as_str).unwrap_or("");
    let event = text("event");
    let severity = if WARNINGS.contains(&event) { 4 } else { 6 };
    let seq = record
        .get("seq")
        .and_then(Value::as_u64)
        .map_or_else(String::new, |seq| seq.to_string());
    let mut message = format!(
        "<{}>1 {} {} airlock {pid} {} [airlock@32473 seq=\"{}\" event_hash=\"{}\"] ",
        u16::from(FACILITY) * 8 + severity,
        header_field(text("ts"), 32),
        header_field(host, 255),
        header_field(event, 32),
        param_value(&seq),
        param_value(text("event_hash")),
    )
    .into_bytes();
    message.extend_from_slice("\u{FEFF}".as_bytes());
    message.extend_from_slice(line.as_bytes());
    message
}

/// [`syslog_message`] of at most `max` bytes: a longer one keeps its
/// header, and its line is cut (at a character) and ends `…[cut N bytes]`,
/// where N is how many bytes of the line were left out.
pub fn syslog_message_within(line: &str, host: &str, pid: u32, max: usize) -> Vec<u8> {
    let message = syslog_message(line, host, pid);
    if message.len() <= max {
        return message;
    }
    let header = message.len() - line.len();
    let room = max.saturating_sub(header + 32);
    let mut cut = room.min(line.len());
    while cut > 0 && !line.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = message[..header].to_vec();
    out.extend_from_slice(&line.as_bytes()[..cut]);
    out.extend_from_slice(format!("\u{2026}[cut {} bytes]", line.len() - cut).as_bytes());
    out
}

/// One message framed for a stream: its length in bytes, a space, itself.
pub fn octet_counted(message: &[u8]) -> Vec<u8> {
    let mut framed = format!("{} ", message.len()).into_bytes();
    framed.extend_from_slice(message);
    framed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_an_rfc5424_message_with_its_seq_and_hash() {
        let line = r#"{"seq":4,"ts":"2026-11-28T04:32:24.137Z","event":"hitl_decision","path":"a \"]\\ b","event_hash":"sha256:ab"}"#;
        let message = String::from_utf8(syslog_message(line, "dev box", 42)).unwrap();
        assert_eq!(
            message,
            format!(
                "<110>1 2026-11-28T04:32:24.137Z devbox airlock 42 hitl_decision [airlock@32473 seq=\"4\" event_hash=\"sha256:ab\"] \u{FEFF}{line}"
            )
        );
        let warning = syslog_message(r#"{"seq":9,"event":"audit_checkpoint_refused"}"#, "", 1);
        assert!(warning.starts_with(b"<108>1 - - airlock 1 audit_checkpoint_refused [airlock@32473 seq=\"9\" event_hash=\"\"] "));
        assert_eq!(octet_counted(b"abc"), b"3 abc");
        let long = format!(r#"{{"seq":1,"path":"{}"}}"#, "é".repeat(50_000));
        let cut = syslog_message_within(&long, "h", 1, 65_000);
        assert!(cut.len() <= 65_000);
        let text = String::from_utf8(cut).unwrap();
        assert!(text.ends_with(" bytes]"), "{}", &text[text.len() - 40..]);
        assert_eq!(param_value("a\"b]c\\"), "a\\\"b\\]c\\\\");
    }
}
