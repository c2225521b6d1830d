//! edit_file's matching through `apply_edit`: exact first, then fuzzy, never a guess.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use airlock_core::ErrorCode;
use airlock_core::edit::{EditError, EditOutcome, apply_edit};
use pretty_assertions::assert_eq;

fn check(
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
    expected: Result<(&str, usize, bool), EditError>,
) {
    let expected = expected.map(|(content, replacements, fuzzy)| EditOutcome {
        content: content.to_owned(),
        replacements,
        fuzzy,
    });
    assert_eq!(apply_edit(content, old, new, replace_all), expected);
}

#[test]
fn exact_single_match() {
    check(
        "fn main() {\n    old();\n}\n",
        "old();",
        "new();",
        false,
        Ok(("fn main() {\n    new();\n}\n", 1, false)),
    );
}

#[test]
fn exact_multiple_matches_are_ambiguous() {
    check(
        "x = 1;\nx = 1;\nx = 1;\n",
        "x = 1;",
        "x = 2;",
        false,
        Err(EditError::Ambiguous { count: 3 }),
    );
}

#[test]
fn replace_all_replaces_every_exact_match() {
    check(
        "x = 1;\ny = 1;\nx = 1;\n",
        "x = 1;",
        "x = 2;",
        true,
        Ok(("x = 2;\ny = 1;\nx = 2;\n", 2, false)),
    );
}

#[test]
fn exact_matches_win_over_fuzzy_ones() {
    // The fuzzy pass would find two places; the exact pass finds one and decides.
    check(
        "a  b\na b\n",
        "a b",
        "c",
        false,
        Ok(("a  b\nc\n", 1, false)),
    );
}

#[test]
fn fuzzy_whitespace() {
    // Indentation, runs of spaces and line breaks differ; the replaced range is exactly
    // the matched text, without the file's surrounding whitespace.
    check(
        "impl A {\n        fn f(&self,\n             x: u8) {}\n}\n",
        "    fn f(&self, x: u8) {}\n",
        "fn g() {}",
        false,
        Ok(("impl A {\n        fn g() {}\n}\n", 1, true)),
    );
}

#[test]
fn fuzzy_curly_quotes() {
    check(
        "print(\u{201C}it\u{2019}s\u{201D})\n",
        "print(\"it's\")",
        "print('ok')",
        false,
        Ok(("print('ok')\n", 1, true)),
    );
}

#[test]
fn fuzzy_em_dash_and_ellipsis() {
    check(
        "// wait \u{2014} loading\u{2026} done\n",
        "wait - loading... done",
        "ready",
        false,
        Ok(("// ready\n", 1, true)),
    );
}

#[test]
fn fuzzy_non_breaking_space() {
    check(
        "a\u{00A0}=\u{00A0}1;\n",
        "a = 1;",
        "a = 2;",
        false,
        Ok(("a = 2;\n", 1, true)),
    );
}

#[test]
fn fuzzy_replace_all() {
    check(
        "say(\u{201C}hi\u{201D});\nsay( \"hi\" );\nsay(\u{00AB}hi\u{00BB});\n",
        "say(\"hi\");",
        "greet();",
        true,
        Ok(("greet();\nsay( \"hi\" );\ngreet();\n", 2, true)),
    );
}

#[test]
fn fuzzy_ambiguous() {
    check(
        "a  b\nc\na\tb\n",
        "a b",
        "x",
        false,
        Err(EditError::Ambiguous { count: 2 }),
    );
}

#[test]
fn not_found() {
    check(
        "alpha\nbeta\n",
        "gamma",
        "delta",
        false,
        Err(EditError::NotFound),
    );
    // Whitespace is collapsed, not removed.
    check("ab\n", "a b", "x", false, Err(EditError::NotFound));
    // Only whitespace has nothing to find fuzzily.
    check("a\n", "  \n", "x", false, Err(EditError::NotFound));
}

#[test]
fn empty_old_string() {
    check("anything", "", "x", false, Err(EditError::EmptyOldString));
}

#[test]
fn multibyte_text() {
    check(
        "préfixe — café ☕ fin\n",
        "café ☕",
        "thé 🍵",
        false,
        Ok(("préfixe — thé 🍵 fin\n", 1, false)),
    );
    // A fuzzy match next to multibyte characters maps back on character boundaries.
    check("ä\u{2014}ö  ü\n", "ä-ö ü", "ß", false, Ok(("ß\n", 1, true)));
    // Half an ellipsis is not a match.
    check("x\u{2026}\n", "x..", "y", false, Err(EditError::NotFound));
}

#[test]
fn matches_are_counted_without_overlap() {
    check("aaa", "aa", "b", false, Ok(("ba", 1, false)));
    check("aaaa", "aa", "b", true, Ok(("bb", 2, false)));
}

#[test]
fn new_string_is_inserted_verbatim() {
    check("a\n  b\n", "a b", "  x\n", false, Ok(("  x\n\n", 1, true)));
}

#[test]
fn a_fuzzy_match_keeps_the_files_indentation() {
    // The agent's old_string has 4 spaces and a newline around it; the file
    // has 2 spaces. The whitespace the agent wrapped old_string in is not
    // inserted again around new_string.
    check(
        "fn f() {\n  let x = 1;\n}\n",
        "    let x = 1;\n",
        "    let x = 2;\n",
        false,
        Ok(("fn f() {\n  let x = 2;\n}\n", 1, true)),
    );
}

#[test]
fn errors_have_codes_and_lowercase_messages() {
    let cases = [
        (
            EditError::EmptyOldString,
            ErrorCode::InvalidInputEmptyOldString,
            "old_string is empty",
        ),
        (
            EditError::NotFound,
            ErrorCode::EditTargetNotFound,
            "old_string was not found, neither exactly nor ignoring whitespace and punctuation style",
        ),
        (
            EditError::Ambiguous { count: 2 },
            ErrorCode::Ambiguous,
            "old_string matches 2 places; add surrounding lines to make it unique or set replace_all",
        ),
    ];
    for (error, code, message) in cases {
        assert_eq!(
            (error.code(), error.to_string()),
            (code, message.to_owned())
        );
    }
}
