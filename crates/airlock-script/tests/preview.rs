//! The static preview, one case a file: `preview/NAME.js` (or `.ts`) and
//! its preview as JSON in `preview/NAME.json`. `UPDATE_EXPECT=1` rewrites
//! the expectations (review the diff).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[test]
fn every_case_previews_as_expected() {
    common::run_corpus(
        "preview",
        4,
        |case| case.with_extension("json"),
        |case, source| {
            let prepared =
                common::holds(source).unwrap_or_else(|error| panic!("{}: {error}", case.display()));
            serde_json::to_string_pretty(&prepared.preview).unwrap() + "\n"
        },
    );
}
