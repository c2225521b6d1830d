//! What the test suites of `airlock-script` share, and the fuzz target
//! `script_prepare` too (it includes this file): the properties every
//! input must have, and the runner of a corpus of case files.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

/// What must hold of `prepare` on any text: what prepares keeps every
/// line's length in characters and reads back as the same JavaScript;
/// call sites, gaps and errors point inside the text.
pub fn holds(source: &str) -> Result<airlock_script::Prepared, airlock_script::ParseError> {
    let lines: Vec<usize> = source
        .split('\n')
        .map(|line| line.chars().count())
        .collect();
    let inside = |line: u32, column: u32| {
        line >= 1
            && column >= 1
            && lines
                .get(line as usize - 1)
                .is_some_and(|length| column as usize <= length + 1)
    };
    let prepared = airlock_script::prepare(source);
    match &prepared {
        Ok(prepared) => {
            let after: Vec<usize> = prepared
                .code
                .split('\n')
                .map(|line| line.chars().count())
                .collect();
            assert_eq!(lines, after, "{source:?}: every line keeps its length");
            let again = airlock_script::prepare(&prepared.code)
                .unwrap_or_else(|error| panic!("{source:?}: blanked, not JavaScript: {error}"));
            assert_eq!(again.language, airlock_script::Language::JavaScript);
            assert_eq!(
                again.code, prepared.code,
                "{source:?}: JavaScript passes as written"
            );
            for call in &prepared.preview.calls {
                assert!(inside(call.line, call.column), "{source:?}: {call:?}");
            }
            for gap in &prepared.preview.gaps {
                assert!(inside(gap.line, gap.column), "{source:?}: {gap:?}");
            }
        }
        Err(error) => assert!(inside(error.line, error.column), "{source:?}: {error}"),
    }
    prepared
}

/// Runs every `.ts` and `.js` case of `tests/<dir>` (at least `at_least`)
/// through `render` and compares the text with the case's expectation at
/// `expected(case)`; `UPDATE_EXPECT=1` rewrites the expectations instead.
pub fn run_corpus(
    dir: &str,
    at_least: usize,
    expected: fn(&Path) -> PathBuf,
    render: fn(&Path, &str) -> String,
) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(dir);
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut cases: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| matches!(path.extension().and_then(|e| e.to_str()), Some("ts" | "js")))
        .collect();
    cases.sort();
    assert!(cases.len() >= at_least, "the corpus is here");
    let mut failed = Vec::new();
    for case in &cases {
        let got = render(case, &fs::read_to_string(case).unwrap());
        let expected_path = expected(case);
        if update {
            fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let want = fs::read_to_string(&expected_path).unwrap_or_default();
        if got != want {
            failed.push(format!(
                "{}:\n--- expected\n{want}\n--- got\n{got}",
                case.display()
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
