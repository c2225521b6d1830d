//! Making hostile text safe to show a human (DESIGN §13).
//!
//! File names, diffs, reasons, session names and tool arguments come from
//! agents, files and upstream servers. Shown raw on a terminal, an escape
//! sequence in them could rewrite what the approver sees (erase a line of
//! the diff, move the cursor up and print "approved"); a carriage return
//! could overwrite the start of a line; a bidi override could make
//! `evil.sh\u{202e}txt.exe` read as something else, on a terminal or in a
//! browser alike. Every such character is shown instead as a visible escape:
//!
//! - C0 controls (but `\n` and `\t` in multi-line text), DEL and the C1
//!   controls (U+0080..U+009F, which some terminals take as 8-bit CSI);
//! - the bidi controls (U+061C, U+200E, U+200F, U+202A..U+202E,
//!   U+2066..U+2069) and the line and paragraph separators (U+2028,
//!   U+2029).
//!
//! ```
//! use airlock_core::display::{safe_line, safe_text};
//!
//! assert_eq!(safe_line("a\x1b[2Kb"), r"a\x1b[2Kb");
//! assert_eq!(safe_line("x\rapproved"), r"x\rapproved");
//! assert_eq!(safe_text("one\ntwo\u{202e}"), "one\ntwo<U+202E>");
//! ```

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must never reach a terminal or a page as itself.
pub fn is_unsafe(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{61c}' | '\u{200e}' | '\u{200f}'
        | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        | '\u{2028}' | '\u{2029}')
}

/// One line of hostile text for a terminal: every unsafe character,
/// newlines and tabs included, as a visible escape.
pub fn safe_line(text: &str) -> Cow<'_, str> {
    escape(text, |_| false)
}

/// Multi-line hostile text (a diff, a file's content) for a terminal:
/// newlines and tabs stay, every other unsafe character becomes a visible
/// escape (a carriage return too, so it cannot overwrite a line).
pub fn safe_text(text: &str) -> Cow<'_, str> {
    escape(text, |c| c == '\n' || c == '\t')
}

fn escape(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(|c| is_unsafe(c) && !keep(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !is_unsafe(c) || keep(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{0}'..='\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            '\u{80}'..='\u{9f}' => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => {
                let _ = write!(out, "<U+{:04X}>", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

/// Serialized JSON for a terminal: the same JSON value, with every unsafe
/// character that JSON serializers leave raw inside strings (DEL, C1, bidi
/// controls, U+2028, U+2029) written as a `\uXXXX` escape. The structure
/// of JSON is ASCII, so such a character can only be inside a string.
pub fn safe_json(json: &str) -> Cow<'_, str> {
    // Raw C0 characters cannot occur in valid JSON strings (serializers
    // escape them), but a line read from a tampered file may hold any:
    // escaped too. Pretty-printing newlines are structure, not content.
    let unsafe_raw = |c: char| is_unsafe(c) && c != '\n';
    if !json.chars().any(unsafe_raw) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if unsafe_raw(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// What a line of a unified diff is, for showing it (a terminal colours it, a
/// page gives it a class). The one place airlock classifies diff lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffLine {
    /// `--- a/x` or `+++ b/x`.
    File,
    /// An added line.
    Add,
    /// A removed line.
    Remove,
    /// `@@ -l,n +l,n @@`.
    Hunk,
    /// Context, or anything else.
    Context,
}

impl DiffLine {
    pub fn of(line: &str) -> DiffLine {
        if line.starts_with("+++") || line.starts_with("---") {
            DiffLine::File
        } else if line.starts_with('+') {
            DiffLine::Add
        } else if line.starts_with('-') {
            DiffLine::Remove
        } else if line.starts_with("@@") {
            DiffLine::Hunk
        } else {
            DiffLine::Context
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_unsafe_character_is_escaped_and_nothing_else() {
        for code in 0..=0x3000u32 {
            let Some(c) = char::from_u32(code) else {
                continue;
            };
            let text = c.to_string();
            let line = safe_line(&text);
            assert!(
                !line.chars().any(is_unsafe),
                "U+{code:04X} survives safe_line"
            );
            assert_eq!(matches!(line, Cow::Owned(_)), is_unsafe(c), "U+{code:04X}");
        }
        assert_eq!(safe_text("a\tb\nc\rd"), "a\tb\nc\\rd");
        assert_eq!(safe_line("a\tb\nc"), "a\\tb\\nc");
        assert_eq!(safe_line("\u{9b}31m"), "\\u{9b}31m");
        assert_eq!(safe_line("\u{7f}"), "\\x7f");
    }

    #[test]
    fn json_stays_the_same_value() {
        let value = serde_json::json!({"p": "a\u{1b}[2K\u{202e}\u{9b}\u{7f}\u{2028}é"});
        let text = serde_json::to_string_pretty(&value).unwrap();
        let safe = safe_json(&text);
        assert!(!safe.chars().any(|c| is_unsafe(c) && c != '\n'), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn diff_lines_are_classified_once() {
        for (line, kind) in [
            ("--- a/x", DiffLine::File),
            ("+++ b/x", DiffLine::File),
            ("+added", DiffLine::Add),
            ("-removed", DiffLine::Remove),
            ("@@ -1 +1 @@", DiffLine::Hunk),
            (" context", DiffLine::Context),
            ("\\ No newline at end of file", DiffLine::Context),
            ("", DiffLine::Context),
        ] {
            assert_eq!(DiffLine::of(line), kind, "{line}");
        }
    }
}
