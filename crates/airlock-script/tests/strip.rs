//! TypeScript stripping, one case a file: `strip/NAME.ts` (or `.js`) and
//! what `prepare` makes of it in `strip/NAME.expected`: the language and the
//! code to run, or the error with its line and column. `UPDATE_EXPECT=1`
//! rewrites the expectations (review the diff).
//!
//! Every case that runs is also checked for what must hold of any input:
//! the same lines with the same number of characters each, and code that
//! reads back as plain JavaScript.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

/// The language and the code to run, or the error with its position (what
/// must hold of any input is checked on the way).
fn render(_case: &std::path::Path, source: &str) -> String {
    match common::holds(source) {
        Ok(prepared) => format!(
            "language: {}\n---\n{}",
            prepared.language.as_str(),
            prepared.code
        ),
        Err(error) => format!("error {error}\n"),
    }
}

#[test]
fn every_case_strips_as_expected() {
    common::run_corpus(
        "strip",
        15,
        |case| {
            let extension = case.extension().unwrap().to_str().unwrap();
            case.with_extension(format!("{extension}.expected"))
        },
        render,
    );
}
