//! The static preview, one case a file: `preview/NAME.js` (or `.ts`) and
//! its preview as JSON in `preview/NAME.json`. `UPDATE_EXPECT=1` rewrites
//! the expectations (review the diff).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;

#[test]
fn every_case_previews_as_expected() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/preview");
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut cases: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| matches!(path.extension().and_then(|e| e.to_str()), Some("ts" | "js")))
        .collect();
    cases.sort();
    assert!(cases.len() >= 4, "the corpus is here");
    let mut failed = Vec::new();
    for case in &cases {
        let source = fs::read_to_string(case).unwrap();
        let prepared = airlock_script::prepare(&source)
            .unwrap_or_else(|error| panic!("{}: {error}", case.display()));
        let got = serde_json::to_string_pretty(&prepared.preview).unwrap() + "\n";
        let expected_path = case.with_extension("json");
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
