//! Properties of apply_patch's parser and applier:
//! - a unified diff that `similar` writes from `a` to `b` parses and applies to `a`
//!   as exactly `b` (its line numbers place even repeated context);
//! - a V4A patch built from the same hunks, which has no line numbers, gives `b` or
//!   refuses as ambiguous, never anything else;
//! - the parser never panics, on any text and on damaged valid patches, and neither
//!   does applying whatever it parsed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use airlock_core::patch::{PatchError, PatchFormat, PatchOp, apply_chunks, parse};
use proptest::prelude::*;
use similar::{ChangeTag, TextDiff};

/// Lines that look like patch syntax or differ only in whitespace, drawn now and then.
const ODD_LINES: &[&str] = &["", "}", "  a", "a ", "*** note", "@@ x", "-- x"];

/// Mostly `a` and `b`, so that texts repeat whole stretches and a hunk's context is
/// often found in more than one place.
fn line() -> impl Strategy<Value = &'static str> {
    prop_oneof![6 => Just("a"), 3 => Just("b"), 2 => prop::sample::select(ODD_LINES)]
}

fn lines() -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(line(), 0..24)
}

/// A block of one to three lines repeated: the most repetitive text.
fn periodic_lines() -> impl Strategy<Value = Vec<&'static str>> {
    (prop::collection::vec(line(), 1..4), 1usize..10).prop_map(|(block, times)| block.repeat(times))
}

/// A change to one line of a text, at a position taken modulo its length.
#[derive(Debug, Clone)]
enum LineChange {
    Replace(usize, &'static str),
    Insert(usize, &'static str),
    Delete(usize),
}

fn line_change() -> impl Strategy<Value = LineChange> {
    prop_oneof![
        (any::<usize>(), line()).prop_map(|(at, line)| LineChange::Replace(at, line)),
        (any::<usize>(), line()).prop_map(|(at, line)| LineChange::Insert(at, line)),
        any::<usize>().prop_map(LineChange::Delete),
    ]
}

/// Old and new lines: mostly a few changes to a repetitive (or periodic) text, so that
/// the hunks are small and their context is often found elsewhere too; sometimes two
/// unrelated texts.
fn line_pair() -> impl Strategy<Value = (Vec<&'static str>, Vec<&'static str>)> {
    let old = prop_oneof![lines(), periodic_lines()];
    let edited = (old, prop::collection::vec(line_change(), 1..5)).prop_map(|(old, changes)| {
        let mut new = old.clone();
        for change in changes {
            match change {
                LineChange::Replace(at, line) if !new.is_empty() => {
                    let at = at % new.len();
                    new[at] = line;
                }
                LineChange::Insert(at, line) => new.insert(at % (new.len() + 1), line),
                LineChange::Delete(at) if !new.is_empty() => {
                    new.remove(at % new.len());
                }
                LineChange::Replace(..) | LineChange::Delete(_) => {}
            }
        }
        (old, new)
    });
    prop_oneof![3 => edited, 1 => (lines(), lines())]
}

fn join(lines: &[&str], final_newline: bool) -> String {
    let mut text = lines.join("\n");
    if final_newline && !lines.is_empty() {
        text.push('\n');
    }
    text
}

/// Two texts, each ending with a newline or not.
fn text_pair() -> impl Strategy<Value = (String, String)> {
    (line_pair(), any::<bool>(), any::<bool>())
        .prop_map(|((a, b), a_newline, b_newline)| (join(&a, a_newline), join(&b, b_newline)))
}

/// Two texts built with the same final-newline flag.
fn texts_alike_at_the_end() -> impl Strategy<Value = (String, String)> {
    (line_pair(), any::<bool>())
        .prop_map(|((a, b), final_newline)| (join(&a, final_newline), join(&b, final_newline)))
}

fn unified_diff(a: &str, b: &str) -> String {
    TextDiff::from_lines(a, b)
        .unified_diff()
        .context_radius(3)
        .header("a/f", "b/f")
        .to_string()
}

/// A V4A patch with one `@@` chunk per hunk of the diff from `a` to `b`; a hunk that
/// reaches the end of `a` is marked `*** End of File`.
fn v4a_patch(a: &str, b: &str) -> String {
    let diff = TextDiff::from_lines(a, b);
    let old_len = diff.old_len();
    let mut patch = String::from("*** Begin Patch\n*** Update File: f\n");
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        patch.push_str("@@\n");
        let mut old_end = 0;
        for change in hunk.iter_changes() {
            let prefix = match change.tag() {
                ChangeTag::Equal => ' ',
                ChangeTag::Delete => '-',
                ChangeTag::Insert => '+',
            };
            if let Some(index) = change.old_index() {
                old_end = index + 1;
            }
            patch.push(prefix);
            patch.push_str(change.value().strip_suffix('\n').unwrap_or(change.value()));
            patch.push('\n');
        }
        if old_end == old_len && old_len > 0 {
            patch.push_str("*** End of File\n");
        }
    }
    patch.push_str("*** End Patch\n");
    patch
}

/// The chunks of the single update that `text` must parse to.
fn single_update(
    text: &str,
    format: PatchFormat,
) -> Result<Vec<airlock_core::patch::Chunk>, String> {
    let patch = parse(text, format).map_err(|error| format!("{error}\n{text}"))?;
    match patch.ops.as_slice() {
        [
            PatchOp::Update {
                path,
                move_to: None,
                chunks,
            },
        ] if path == "f" => Ok(chunks.clone()),
        ops => Err(format!("unexpected operations {ops:?}")),
    }
}

/// A small change to a patch: cut out a range, insert a snippet, or duplicate or
/// drop a line.
#[derive(Debug, Clone)]
enum Mutation {
    Cut { at: usize, len: usize },
    Insert { at: usize, snippet: String },
    DuplicateLine { line: usize },
    DropLine { line: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0usize..20).prop_map(|(at, len)| Mutation::Cut { at, len }),
        (
            any::<usize>(),
            prop::sample::select(vec![
                "\n",
                "@@",
                "@@ -1,2 +1 @@\n",
                "*** End of File\n",
                "*** End Patch\n",
                "\\ No newline at end of file\n",
                "+",
                "-",
                " ",
                "---",
                "+++ ",
                "\r",
                "…",
                "—",
                "*** Move to: f\n",
                "diff --git a/f b/f\n",
                "rename from x\n",
                "<<'EOF'\n",
                "\"",
                "\t",
            ])
            .prop_map(str::to_owned)
        )
            .prop_map(|(at, snippet)| Mutation::Insert { at, snippet }),
        any::<usize>().prop_map(|line| Mutation::DuplicateLine { line }),
        any::<usize>().prop_map(|line| Mutation::DropLine { line }),
    ]
}

fn mutate(text: &str, mutations: &[Mutation]) -> String {
    let mut text = text.to_owned();
    for mutation in mutations {
        let boundary = |at: usize, text: &str| {
            let mut at = at % (text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            at
        };
        match mutation {
            Mutation::Cut { at, len } => {
                let start = boundary(*at, &text);
                let end = boundary(start + len, &text).max(start);
                text.replace_range(start..end, "");
            }
            Mutation::Insert { at, snippet } => {
                let at = boundary(*at, &text);
                text.insert_str(at, snippet);
            }
            Mutation::DuplicateLine { line } | Mutation::DropLine { line } => {
                let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
                if lines.is_empty() {
                    continue;
                }
                let line = line % lines.len();
                if matches!(mutation, Mutation::DuplicateLine { .. }) {
                    lines.insert(line, lines[line]);
                } else {
                    lines.remove(line);
                }
                text = lines.concat();
            }
        }
    }
    text
}

/// Parsing and applying whatever was parsed to `original`; only panics matter.
fn parse_and_apply_everything(text: &str, original: &str) {
    for format in [PatchFormat::Auto, PatchFormat::V4a, PatchFormat::Unified] {
        if let Ok(patch) = parse(text, format) {
            for op in &patch.ops {
                if let PatchOp::Update { path, chunks, .. } = op {
                    let _ = apply_chunks(path, original, chunks);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn a_unified_diff_applies_to_its_old_text((a, b) in text_pair()) {
        let diff = unified_diff(&a, &b);
        if a == b {
            prop_assert_eq!(diff, "");
        } else {
            let chunks = single_update(&diff, PatchFormat::Unified).map_err(TestCaseError::fail)?;
            prop_assert_eq!(apply_chunks("f", &a, &chunks), Ok(b), "{}", diff);
        }
    }

    #[test]
    fn a_v4a_patch_applies_or_is_ambiguous((a, b) in texts_alike_at_the_end()) {
        // V4A cannot say that the final newline changes: as with Codex's apply_patch,
        // an updated file always ends with one (unless nothing is left of it).
        prop_assume!(a != b);
        let mut expected = b.clone();
        if !expected.is_empty() && !expected.ends_with('\n') {
            expected.push('\n');
        }
        let patch = v4a_patch(&a, &b);
        let chunks = single_update(&patch, PatchFormat::Auto).map_err(TestCaseError::fail)?;
        match apply_chunks("f", &a, &chunks) {
            Ok(after) => prop_assert_eq!(after, expected, "{}", patch),
            Err(PatchError::Ambiguous { .. }) => {}
            Err(error) => prop_assert!(false, "{error}\n{patch}"),
        }
    }

    #[test]
    fn parse_never_panics_on_any_text(text in any::<String>()) {
        parse_and_apply_everything(&text, "a\nb\n");
    }

    #[test]
    fn parse_never_panics_on_patch_like_text(
        text in "([ +\\-@*\\\\]{0,3}(a|b|\\*\\*\\* (Begin|End) Patch|\\*\\*\\* (Update|Add|Delete) File: f|\\*\\*\\* End of File|@@ -[0-9],[0-9] \\+[0-9] @@|--- a/f|\\+\\+\\+ b/f)?\r?\n){0,12}",
    ) {
        parse_and_apply_everything(&text, "a\nb\na\n");
    }

    #[test]
    fn parse_never_panics_on_damaged_patches(
        (a, b) in text_pair(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        for patch in [unified_diff(&a, &b), v4a_patch(&a, &b)] {
            parse_and_apply_everything(&mutate(&patch, &mutations), &a);
        }
    }
}
