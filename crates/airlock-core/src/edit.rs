//! edit_file's matching: find `old_string` in a file's text and replace it, pure.
//!
//! [`apply_edit`] looks for an exact match first. Only when there is none does it
//! fall back to a fuzzy match in which every run of whitespace counts as one space
//! and typographic quotes, dashes, non-breaking spaces and the ellipsis count as
//! their ASCII forms, so that text an agent retyped with different indentation or
//! with "smart" punctuation still finds its target. Either way a match must be
//! unique unless `replace_all` is set: an ambiguous edit is an error, never a guess.
//!
//! ```
//! use airlock_core::edit::{EditError, apply_edit};
//!
//! let outcome = apply_edit("let x = “a”;\nlet y = 2;\n", "let x = \"a\";", "let x = 1;", false)?;
//! assert_eq!(outcome.content, "let x = 1;\nlet y = 2;\n");
//! assert!(outcome.fuzzy);
//! assert_eq!(apply_edit("a a", "a", "b", false), Err(EditError::Ambiguous { count: 2 }));
//! # Ok::<(), EditError>(())
//! ```

use std::ops::Range;

use crate::ErrorCode;

/// The edited text and how it was matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditOutcome {
    pub content: String,
    /// How many places were replaced (1 unless `replace_all` was set).
    pub replacements: usize,
    /// `true` when the exact text was absent and the fuzzy pass matched.
    pub fuzzy: bool,
}

/// Why an edit could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error("old_string is empty")]
    EmptyOldString,
    #[error(
        "old_string was not found, neither exactly nor ignoring whitespace and punctuation style"
    )]
    NotFound,
    #[error(
        "old_string matches {count} places; add surrounding lines to make it unique or set replace_all"
    )]
    Ambiguous { count: usize },
}

impl EditError {
    /// The envelope's error code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            EditError::EmptyOldString => ErrorCode::InvalidInputEmptyOldString,
            EditError::NotFound => ErrorCode::EditTargetNotFound,
            EditError::Ambiguous { .. } => ErrorCode::Ambiguous,
        }
    }
}

/// Replaces `old` by `new` in `content` (see the module documentation for the rules).
///
/// `new` is inserted verbatim, also after a fuzzy match. Matches are counted left to
/// right without overlap, so `aa` occurs once in `aaa`.
pub fn apply_edit(
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<EditOutcome, EditError> {
    if old.is_empty() {
        return Err(EditError::EmptyOldString);
    }
    // Non-overlapping, left to right (as `str::match_indices`), with SIMD.
    let exact: Vec<Range<usize>> = memchr::memmem::find_iter(content.as_bytes(), old.as_bytes())
        .map(|start| start..start + old.len())
        .collect();
    if !exact.is_empty() {
        return replace(content, &exact, new, replace_all, false);
    }
    let fuzzy = fuzzy_matches(content, old);
    if fuzzy.is_empty() {
        return Err(EditError::NotFound);
    }
    // A fuzzy match covers the text from its first to its last non-blank
    // character, so the file keeps the whitespace around it. The whitespace
    // the agent put around `old` is dropped from `new` too, where `new`
    // carries the same, or the file's indentation would be doubled.
    let leading = &old[..old.len() - old.trim_start().len()];
    let trailing = &old[old.trim_end().len()..];
    let new = new.strip_prefix(leading).unwrap_or(new);
    let new = new.strip_suffix(trailing).unwrap_or(new);
    replace(content, &fuzzy, new, replace_all, true)
}

/// The ASCII form of a typographic quote, dash or ellipsis, or `None` for any other
/// character. Shared with the punctuation-normalised pass of apply_patch.
///
/// Non-breaking and other Unicode spaces are not listed: they are whitespace, and
/// both callers treat whitespace on its own.
pub(crate) fn ascii_punctuation(c: char) -> Option<&'static str> {
    Some(match c {
        // Single quotes, primes and single guillemets.
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '\u{2032}' | '\u{2035}'
        | '\u{2039}' | '\u{203A}' | '\u{02BC}' | '\u{FF07}' => "'",
        // Double quotes, double primes and guillemets.
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{2033}' | '\u{2036}'
        | '\u{00AB}' | '\u{00BB}' | '\u{FF02}' => "\"",
        // Hyphens, dashes and the minus sign.
        '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2013}' | '\u{2014}' | '\u{2015}'
        | '\u{2043}' | '\u{2212}' | '\u{FE58}' | '\u{FE63}' | '\u{FF0D}' => "-",
        '\u{2026}' => "...",
        _ => return None,
    })
}

fn replace(
    content: &str,
    ranges: &[Range<usize>],
    new: &str,
    replace_all: bool,
    fuzzy: bool,
) -> Result<EditOutcome, EditError> {
    if ranges.len() > 1 && !replace_all {
        return Err(EditError::Ambiguous {
            count: ranges.len(),
        });
    }
    let removed: usize = ranges.iter().map(|range| range.len()).sum();
    let mut out = String::with_capacity(content.len() - removed + new.len() * ranges.len());
    let mut copied = 0;
    for range in ranges {
        out.push_str(&content[copied..range.start]);
        out.push_str(new);
        copied = range.end;
    }
    out.push_str(&content[copied..]);
    Ok(EditOutcome {
        content: out,
        replacements: ranges.len(),
        fuzzy,
    })
}

/// The original byte ranges of the fuzzy matches of `old` in `content`.
fn fuzzy_matches(content: &str, old: &str) -> Vec<Range<usize>> {
    let needle = NormalizedText::new(old);
    // Trimming makes indentation and surrounding blank lines irrelevant, and means a
    // match never begins or ends in a whitespace run of the original.
    let needle = needle.text.trim_matches(' ');
    if needle.is_empty() {
        return Vec::new();
    }
    let haystack = NormalizedText::new(content);
    memchr::memmem::find_iter(haystack.text.as_bytes(), needle.as_bytes())
        .filter_map(|start| haystack.original_range(start..start + needle.len()))
        .collect()
}

/// A normalised copy of a text with the map back to the original's bytes.
///
/// The map lists only the places where normalisation changed something in a way that
/// moves offsets or merges characters (a whitespace run longer than one byte, a
/// replaced character); between two such units, normalised and original bytes
/// correspond one to one, shifted by a constant. This keeps the map small (most text
/// is plain) and a lookup is a binary search.
struct NormalizedText {
    text: String,
    units: Vec<Unit>,
}

/// A piece of the normalised text that stands for a different piece of the original.
struct Unit {
    normalized: Range<usize>,
    original: Range<usize>,
}

impl NormalizedText {
    fn new(original: &str) -> NormalizedText {
        let bytes = original.as_bytes();
        let mut text = String::with_capacity(original.len());
        // Roughly one unit per line (its indentation); reserving avoids regrowing.
        let mut units = Vec::with_capacity(original.len() / 32);
        // Plain text (kept as is) is copied in runs rather than char by char, and
        // ASCII, the common case, is told apart byte by byte without decoding.
        let mut plain_start = 0;
        let mut at = 0;
        while at < bytes.len() {
            let byte = bytes[at];
            // Printable ASCII, and a lone space before it, are the common case.
            if is_printable_ascii(byte) {
                at += 1;
                continue;
            }
            if byte == b' ' && bytes.get(at + 1).copied().is_some_and(is_printable_ascii) {
                at += 2;
                continue;
            }
            let (c, len) = if byte.is_ascii() {
                if !is_ascii_whitespace(byte) {
                    at += 1;
                    continue;
                }
                if byte == b' ' && !starts_whitespace(original, at + 1) {
                    // A lone ASCII space is already normal.
                    at += 1;
                    continue;
                }
                (char::from(byte), 1)
            } else {
                match original[at..].chars().next() {
                    Some(c) => (c, c.len_utf8()),
                    None => break,
                }
            };
            if c.is_whitespace() {
                let mut end = at + len;
                while let Some(next) = whitespace_at(original, end) {
                    end += next;
                }
                text.push_str(&original[plain_start..at]);
                let normalized_start = text.len();
                text.push(' ');
                // A lone one-byte whitespace character maps one to one.
                if end - at > 1 {
                    units.push(Unit {
                        normalized: normalized_start..text.len(),
                        original: at..end,
                    });
                }
                at = end;
                plain_start = end;
            } else if let Some(ascii) = ascii_punctuation(c) {
                text.push_str(&original[plain_start..at]);
                let normalized_start = text.len();
                text.push_str(ascii);
                // Always a unit, even when the lengths agree (`…` and `...`), so that
                // no match can begin or end inside the replaced character.
                units.push(Unit {
                    normalized: normalized_start..text.len(),
                    original: at..at + len,
                });
                at += len;
                plain_start = at;
            } else {
                at += len;
            }
        }
        text.push_str(&original[plain_start..]);
        NormalizedText { text, units }
    }

    /// The original range of a non-empty normalised range, or `None` when the range
    /// begins or ends inside a unit (part of an ellipsis), which has no original
    /// counterpart on character boundaries.
    fn original_range(&self, normalized: Range<usize>) -> Option<Range<usize>> {
        let start = self.original_offset(normalized.start, true)?;
        let end = self.original_offset(normalized.end, false)?;
        Some(start..end)
    }

    /// The original offset of a normalised offset that starts (`at_start`) or ends a
    /// match.
    fn original_offset(&self, offset: usize, at_start: bool) -> Option<usize> {
        // The byte that decides: the first of the match, or the last.
        let byte = if at_start {
            offset
        } else {
            offset.checked_sub(1)?
        };
        let index = self
            .units
            .partition_point(|unit| unit.normalized.start <= byte);
        let Some(unit) = index.checked_sub(1).map(|index| &self.units[index]) else {
            return Some(offset);
        };
        if byte < unit.normalized.end {
            let boundary = if at_start {
                unit.normalized.start
            } else {
                unit.normalized.end
            };
            return (offset == boundary).then_some(if at_start {
                unit.original.start
            } else {
                unit.original.end
            });
        }
        Some(unit.original.end + (offset - unit.normalized.end))
    }
}

/// `!` to `~` and DEL: ASCII that is neither whitespace nor (mostly) control.
fn is_printable_ascii(byte: u8) -> bool {
    byte.wrapping_sub(0x21) < 0x5F
}

/// The ASCII characters that `char::is_whitespace` accepts.
fn is_ascii_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// The length of the whitespace character at `at`, if there is one.
fn whitespace_at(text: &str, at: usize) -> Option<usize> {
    let byte = *text.as_bytes().get(at)?;
    if byte.is_ascii() {
        return is_ascii_whitespace(byte).then_some(1);
    }
    let c = text.get(at..)?.chars().next()?;
    c.is_whitespace().then(|| c.len_utf8())
}

fn starts_whitespace(text: &str, at: usize) -> bool {
    whitespace_at(text, at).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalized_text_maps_units_back() {
        let text = NormalizedText::new("a \t\u{201C}b\u{201D}\u{2026}  c\n");
        assert_eq!(text.text, "a \"b\"... c ");
        // `"b"` covers the curly quotes entirely.
        assert_eq!(text.original_range(2..5), Some(3..10));
        // Half an ellipsis has no original range.
        assert_eq!(text.original_range(5..6), None);
        assert_eq!(text.original_range(5..8), Some(10..13));
        assert_eq!(text.original_range(9..10), Some(15..16));
    }
}
