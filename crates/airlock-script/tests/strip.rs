//! TypeScript stripping, one case a file: `strip/NAME.ts` (or `.js`) and
//! what `prepare` makes of it in `strip/NAME.expected`: the language and the
//! code to run, or the error with its line and column. `UPDATE_EXPECT=1`
//! rewrites the expectations (review the diff).
//!
//! Every case that runs is also checked for what must hold of any input:
//! the same lines with the same number of characters each, and code that
//! reads back as plain JavaScript.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;

fn render(source: &str) -> String {
    match airlock_script::prepare(source) {
        Ok(prepared) => {
            check_shape(source, &prepared.code);
            let again = airlock_script::prepare(&prepared.code)
                .unwrap_or_else(|error| panic!("the blanked code is not JavaScript: {error}"));
            assert_eq!(again.language, airlock_script::Language::JavaScript);
            assert_eq!(again.code, prepared.code, "JavaScript passes as written");
            format!(
                "language: {}\n---\n{}",
                prepared.language.as_str(),
                prepared.code
            )
        }
        Err(error) => format!("error {error}\n"),
    }
}

fn check_shape(source: &str, code: &str) {
    let before: Vec<usize> = source
        .split('\n')
        .map(|line| line.chars().count())
        .collect();
    let after: Vec<usize> = code.split('\n').map(|line| line.chars().count()).collect();
    assert_eq!(before, after, "lines and their lengths stay");
}

#[test]
fn every_case_strips_as_expected() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/strip");
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut cases: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| matches!(path.extension().and_then(|e| e.to_str()), Some("ts" | "js")))
        .collect();
    cases.sort();
    assert!(cases.len() >= 15, "the corpus is here");
    let mut failed = Vec::new();
    for case in &cases {
        let source = fs::read_to_string(case).unwrap();
        let got = render(&source);
        let expected_path = case.with_extension(format!(
            "{}.expected",
            case.extension().unwrap().to_str().unwrap()
        ));
        if update {
            fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let expected = fs::read_to_string(&expected_path).unwrap_or_default();
        if got != expected {
            failed.push(format!(
                "{}:\n--- expected\n{expected}\n--- got\n{got}",
                case.display()
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
