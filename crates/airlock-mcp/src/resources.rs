//! Upstream resources as one list: which upstream a URI belongs to (the
//! URIs it listed, the URI templates it offers), and the cursor that pages
//! through several upstreams' lists in turn.

use std::collections::HashSet;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// How many listed URIs an upstream's index keeps; beyond it, a URI is
/// placed by the templates (or by being the only upstream with resources).
const MAX_INDEXED: usize = 100_000;

/// What an upstream offers: the URIs it listed and its URI templates.
#[derive(Debug, Default, Clone)]
pub(crate) struct ResourceIndex {
    uris: HashSet<String>,
    templates: Vec<String>,
}

impl ResourceIndex {
    pub(crate) fn new(uris: impl IntoIterator<Item = String>, templates: Vec<String>) -> Self {
        let mut index = ResourceIndex {
            uris: HashSet::new(),
            templates,
        };
        index.add(uris);
        index
    }

    /// Remembers URIs seen in a listing.
    pub(crate) fn add(&mut self, uris: impl IntoIterator<Item = String>) {
        for uri in uris {
            if self.uris.len() >= MAX_INDEXED {
                return;
            }
            self.uris.insert(uri);
        }
    }

    /// Whether `uri` was listed or matches one of the templates.
    pub(crate) fn owns(&self, uri: &str) -> bool {
        self.uris.contains(uri)
            || self
                .templates
                .iter()
                .any(|template| template_matches(template, uri))
    }

    /// Whether `template` is one of its URI templates.
    pub(crate) fn has_template(&self, template: &str) -> bool {
        self.templates.iter().any(|offered| offered == template)
    }
}

/// Whether `uri` is an expansion of the RFC 6570 URI template `template`.
/// A simple variable (`{id}`) stands for text without `/ ? #`; reserved and
/// fragment expansion (`{+path}`, `{#f}`) for any text; the other operators
/// (`{/a}`, `{.ext}`, `{;p}`, `{?q}`, `{&q}`) for their prefix and what
/// follows it up to the next delimiter, or nothing.
/// URIs longer than this match no template (the matcher's work grows with
/// the square of the length).
const MAX_MATCHED_URI: usize = 8192;

pub(crate) fn template_matches(template: &str, uri: &str) -> bool {
    match parse(template) {
        Some(parts) if uri.len() <= MAX_MATCHED_URI => matches(&parts, uri.as_bytes()),
        Some(_) => false,
        None => template == uri,
    }
}

#[derive(Debug)]
enum Part<'a> {
    Literal(&'a [u8]),
    /// `{…}` with its operator (`b'\0'` for none).
    Expression(u8),
}

fn parse(template: &str) -> Option<Vec<Part<'_>>> {
    let bytes = template.as_bytes();
    let mut parts = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at..].iter().position(|&byte| byte == b'{') {
            Some(0) => {
                let close = bytes[at..].iter().position(|&byte| byte == b'}')?;
                let inner = &bytes[at + 1..at + close];
                let operator = match inner.first() {
                    Some(op @ (b'+' | b'#' | b'/' | b'.' | b';' | b'?' | b'&')) => *op,
                    Some(_) => b'\0',
                    None => return None,
                };
                parts.push(Part::Expression(operator));
                at += close + 1;
            }
            Some(open) => {
                parts.push(Part::Literal(&bytes[at..at + open]));
                at += open;
            }
            None => {
                parts.push(Part::Literal(&bytes[at..]));
                at = bytes.len();
            }
        }
    }
    Some(parts)
}

/// Whether `parts` match all of `uri`: the positions each part can end at,
/// part by part (linear in the URI's length per part, whatever the
/// template: no backtracking).
fn matches(parts: &[Part<'_>], uri: &[u8]) -> bool {
    let n = uri.len();
    let mut reach = vec![false; n + 1];
    reach[0] = true;
    for part in parts {
        let mut next = vec![false; n + 1];
        match part {
            Part::Literal(literal) => {
                for at in (0..=n).filter(|&at| reach[at]) {
                    if uri[at..].starts_with(literal) {
                        next[at + literal.len()] = true;
                    }
                }
            }
            Part::Expression(operator) => {
                // The text an expression takes stops before these.
                let stop: &[u8] = match operator {
                    b'+' | b'#' => b"",
                    b'?' | b'&' => b"#",
                    b'/' | b'.' | b';' => b"?#",
                    _ => b"/?#",
                };
                // Where the text from each position must end at the latest.
                let mut limit = vec![n; n + 1];
                for at in (0..n).rev() {
                    limit[at] = if stop.contains(&uri[at]) {
                        at
                    } else {
                        limit[at + 1]
                    };
                }
                // Ranges of end positions, summed with a difference array.
                let mut marks = vec![0i64; n + 2];
                let mut mark = |from: usize, to: usize| {
                    if from <= to {
                        marks[from] += 1;
                        marks[to + 1] -= 1;
                    }
                };
                for at in (0..=n).filter(|&at| reach[at]) {
                    match operator {
                        b'\0' | b'+' | b'#' => mark(at, limit[at]),
                        // A prefixed expansion is empty, or starts with its
                        // operator (`?` also continues with `&`).
                        _ => {
                            mark(at, at);
                            let prefixed = uri.get(at).is_some_and(|&byte| {
                                byte == *operator || (*operator == b'?' && byte == b'&')
                            });
                            if prefixed {
                                mark(at + 1, limit[at + 1].max(at + 1));
                            }
                        }
                    }
                }
                let mut open = 0;
                for (at, slot) in next.iter_mut().enumerate() {
                    open += marks[at];
                    *slot = open > 0;
                }
            }
        }
        reach = next;
    }
    reach[n]
}

/// Where a paged `resources/list` across upstreams stands: the upstream
/// being listed and that upstream's own cursor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Cursor {
    #[serde(rename = "u")]
    pub upstream: String,
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

impl Cursor {
    pub(crate) fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    /// `None` for anything airlock did not make.
    pub(crate) fn decode(text: &str) -> Option<Cursor> {
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()?;
        serde_json::from_slice(&json).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn templates_match_their_expansions_only() {
        let cases = [
            (
                "test://template/{id}/data",
                "test://template/123/data",
                true,
            ),
            (
                "test://template/{id}/data",
                "test://template/1/2/data",
                false,
            ),
            (
                "test://template/{id}/data",
                "test://template/123/datum",
                false,
            ),
            (
                "demo://resource/dynamic/text/{resourceId}",
                "demo://resource/dynamic/text/7",
                true,
            ),
            ("file:///{+path}", "file:///srv/a/b.md", true),
            ("file:///{path}", "file:///srv/a/b.md", false),
            ("search{?q,lang}", "search?q=x&lang=en", true),
            ("search{?q,lang}", "search", true),
            ("search{?q,lang}", "searchx", false),
            ("docs{/section}", "docs/intro", true),
            ("no-template", "no-template", true),
            ("no-template", "no-templates", false),
            ("broken{", "broken{", true),
        ];
        for (template, uri, expected) in cases {
            assert_eq!(
                template_matches(template, uri),
                expected,
                "{template} {uri}"
            );
        }
    }

    /// A template of many expressions against the longest URI matched: no
    /// backtracking, so it ends at once.
    #[test]
    fn hostile_templates_take_linear_time() {
        let many = "{+a}".repeat(64) + "!";
        let long = "x".repeat(MAX_MATCHED_URI);
        assert!(!template_matches(&many, &long));
        assert!(template_matches(&many, &(long[1..].to_owned() + "!")));
    }

    #[test]
    fn an_index_owns_listed_uris_and_template_expansions() {
        let index = ResourceIndex::new(
            ["test://static/1".to_owned()],
            vec!["test://dyn/{id}".to_owned()],
        );
        assert!(index.owns("test://static/1"));
        assert!(index.owns("test://dyn/9"));
        assert!(!index.owns("test://static/2"));
        assert!(index.has_template("test://dyn/{id}"));
    }

    #[test]
    fn a_cursor_round_trips_and_foreign_text_is_refused() {
        let cursor = Cursor {
            upstream: "every".to_owned(),
            cursor: Some("abc".to_owned()),
        };
        assert_eq!(Cursor::decode(&cursor.encode()), Some(cursor));
        assert_eq!(Cursor::decode("not a cursor"), None);
        assert_eq!(Cursor::decode(""), None);
    }

    proptest! {
        /// A simple variable expands to any text without `/ ? #`, and the
        /// expansion matches; hostile text never panics.
        #[test]
        fn simple_expansions_match(value in "[a-zA-Z0-9._~%-]{0,20}", junk in ".{0,40}") {
            let template = "x://a/{v}/b";
            let expanded = format!("x://a/{value}/b");
            prop_assert!(template_matches(template, &expanded));
            let _ = template_matches(&junk, &junk);
            let _ = template_matches(template, &junk);
        }
    }
}
