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

/// Every file of the workspace outside `dirs` (root-relative), with its
/// content, sorted (links as their target).
fn beside(root: &Path, dirs: &[&str]) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            if dirs
                .iter()
                .any(|dir| rel == *dir || rel.starts_with(&format!("{dir}/")))
            {
                continue;
            }
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                files.push((rel, fs::read_link(&path).unwrap().display().to_string()));
            } else if meta.is_dir() {
                pending.push(path);
            } else {
                files.push((rel, fs::read_to_string(&path).unwrap_or_default()));
            }
        }
    }
    files.sort();
    files
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// A session's view (DESIGN §5.3): whatever the path, from its working
    /// directory or absolute, what resolves lies in one of its roots
    /// (writes only in a writable one), and nothing of the workspace
    /// beside its roots is read or written.
    #[test]
    fn a_session_reaches_only_its_roots(raw in raw_path()) {
        let fixture = Fixture::standard();
        let raw = fixture.expand(&raw);
        let untouched = fixture.outside_snapshot();
        let before = beside(&fixture.root, &["src"]);
        for yaml in CONFIGS {
            let whole = fixture.sandbox(yaml);
            let mut config = whole.config().clone();
            config.allow_hardlinks = false;
            let scope = airlock_fs::Scope {
                roots: vec![("src".to_owned(), true), ("other".to_owned(), false)],
                workdir: "src".to_owned(),
            };
            let sandbox = whole.scoped(std::sync::Arc::new(scope.clone()), config).unwrap();
            for access in [Access::Read, Access::Write] {
                if let Ok(path) = sandbox.resolve("path", &raw, access) {
                    let resolved = path.resolved();
                    let inside = |dir: &str| resolved == dir || resolved.starts_with(&format!("{dir}/"));
                    prop_assert!(
                        inside("src") || (access == Access::Read && inside("other")),
                        "{raw:?} resolved to {resolved:?} for {access:?} under {yaml:?}"
                    );
                    prop_assert!(lies_inside(&fixture.root, resolved));
                }
            }
            let read = read_file(&sandbox, &serde_json::from_value(serde_json::json!({"path": raw})).unwrap());
            if let Ok(data) = read {
                let content = data.content.unwrap_or_default();
                for secret in ["SECRET=1", "t0k3n", "plain", OUTSIDE_SECRET.trim()] {
                    prop_assert!(!content.contains(secret), "{raw:?} read {secret:?} under {yaml:?}");
                }
            }
            let params = WriteParams {
                create_parents: true,
                ..WriteParams::text(&raw, "PWNED\n")
            };
            if let Ok(plan) = prepare_write(&sandbox, &params) {
                let _ = commit(&sandbox, &plan, CommitOptions::default());
            }
            prop_assert_eq!(&fixture.outside_snapshot(), &untouched, "{:?} under {:?}", raw, yaml);
            prop_assert_eq!(&beside(&fixture.root, &["src"]), &before, "{:?} under {:?}", raw, yaml);
        }
    }
}
