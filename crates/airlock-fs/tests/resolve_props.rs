#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Property: whatever the path string (`..`, `/`, NUL, unicode, the names of
//! links that lead out), under every symlink setting, nothing outside the root
//! is resolved, read or written.

mod common;

use std::fs;
use std::path::Path;

use airlock_fs::{Access, CommitOptions, WriteParams, commit, prepare_write, read_file};
use common::{Fixture, OUTSIDE_SECRET};
use proptest::prelude::*;

const CONFIGS: [&str; 4] = [
    "",
    "file_broker:\n  absolute_paths: within_root\n",
    "file_broker:\n  absolute_paths: within_root\n  follow_symlinks: deny\n",
    "file_broker:\n  absolute_paths: within_root\n  follow_symlinks: allow\n",
];

fn component() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("..".to_owned()),
        Just(".".to_owned()),
        Just(String::new()),
        Just("src".to_owned()),
        Just("main.rs".to_owned()),
        Just("secret.txt".to_owned()),
        Just("outside".to_owned()),
        Just("root".to_owned()),
        Just("link_out_dir".to_owned()),
        Just("link_out_file".to_owned()),
        Just("link_in".to_owned()),
        Just("link_abs_in".to_owned()),
        Just("link_root_abs".to_owned()),
        Just("dangling_out".to_owned()),
        Just("dangling_in".to_owned()),
        Just("loop_a".to_owned()),
        Just("up".to_owned()),
        Just("ok.txt".to_owned()),
        Just(".airlock".to_owned()),
        Just(".git".to_owned()),
        Just("a\0b".to_owned()),
        "[a-zé日]{1,3}",
    ]
}

fn raw_path() -> impl Strategy<Value = String> {
    let prefix = prop_oneof![
        Just(""),
        Just("/"),
        Just("{root}/"),
        Just("{root}/../"),
        Just("{outside}/"),
    ];
    (prefix, prop::collection::vec(component(), 0..7))
        .prop_map(|(prefix, parts)| format!("{prefix}{}", parts.join("/")))
}

/// `resolved` (root-relative) names something inside `root`: its deepest
/// existing ancestor, with every link resolved, lies under the root.
fn lies_inside(root: &Path, resolved: &str) -> bool {
    if resolved.starts_with('/') || resolved.split('/').any(|part| part == "..") {
        return false;
    }
    let mut candidate = root.join(resolved);
    loop {
        if let Ok(real) = fs::canonicalize(&candidate) {
            return real.starts_with(root);
        }
        if !candidate.pop() {
            return false;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn nothing_outside_the_root_is_ever_reached(raw in raw_path()) {
        let fixture = Fixture::standard();
        let untouched = fixture.outside_snapshot();
        let raw = fixture.expand(&raw);
        for yaml in CONFIGS {
            let sandbox = fixture.sandbox(yaml);
            for access in [Access::Read, Access::Write] {
                if let Ok(path) = sandbox.resolve("path", &raw, access) {
                    prop_assert!(
                        lies_inside(&fixture.root, path.resolved()),
                        "{raw:?} resolved to {:?} under {yaml:?}", path.resolved()
                    );
                }
            }
            let read = read_file(&sandbox, &serde_json::from_value(serde_json::json!({"path": raw})).unwrap());
            if let Ok(data) = read {
                prop_assert!(!data.content.as_deref().unwrap_or_default().contains(OUTSIDE_SECRET.trim()), "{raw:?} read outside");
            }
            let params = WriteParams {
                create_parents: true,
                ..WriteParams::text(&raw, "PWNED\n")
            };
            if let Ok(plan) = prepare_write(&sandbox, &params) {
                let _ = commit(&sandbox, &plan, CommitOptions::default());
            }
            prop_assert_eq!(&fixture.outside_snapshot(), &untouched, "{:?} under {:?}", raw, yaml);
        }
    }
}
