//! A sandbox read through a code-mode run's overlay sees the staged files
//! as if written: plans, reads, stats, greps, globs and listings; the
//! workspace itself does not change.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use airlock_fs::{
    EditParams, ExistsParams, GlobParams, GrepParams, ListDirParams, Overlay, ReadParams, Sandbox,
    StagedFile, StatParams, exists, glob, grep, list_dir, prepare_edit, read_file, stat,
};
use pretty_assertions::assert_eq;
use serde_json::json;

fn staged(content: &str) -> Option<StagedFile> {
    Some(StagedFile {
        content: content.as_bytes().to_vec(),
        mode: None,
        mtime_ms: 1_700_000_000_000,
    })
}

#[test]
fn every_look_through_an_overlay_sees_the_staged_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/a.rs"), "fn a() {}\n").unwrap();
    std::fs::write(root.join("src/gone.rs"), "fn gone() {}\n").unwrap();
    std::fs::write(root.join("notes.txt"), "plain\n").unwrap();
    let mut loaded = airlock_core::config::load("", "airlock.yaml").unwrap();
    loaded
        .policy
        .bind_workspace(root.to_str().unwrap(), Some("airlock.yaml"));
    let disk = Sandbox::open(&root, &loaded.config.file_broker, Arc::new(loaded.policy)).unwrap();

    let mut overlay = Overlay::new();
    overlay.stage("src/a.rs", staged("fn a() { staged() }\n"));
    overlay.stage("src/gone.rs", None);
    overlay.stage("src/new/b.rs", staged("fn b() { staged() }\n"));
    let run = disk.with_overlay(Arc::new(overlay)).unwrap();

    let read = |sandbox: &Sandbox, path: &str| {
        read_file(
            sandbox,
            &ReadParams::from_args(&json!({"path": path})).unwrap(),
        )
        .map(|data| data.content.unwrap_or_default())
        .map_err(|error| error.code().as_str().to_owned())
    };
    assert_eq!(
        read(&run, "src/a.rs"),
        Ok("fn a() { staged() }\n".to_owned())
    );
    assert_eq!(
        read(&run, "src/new/b.rs"),
        Ok("fn b() { staged() }\n".to_owned())
    );
    assert_eq!(read(&run, "src/gone.rs"), Err("not_found".to_owned()));
    assert_eq!(read(&disk, "src/a.rs"), Ok("fn a() {}\n".to_owned()));
    assert_eq!(read(&disk, "src/new/b.rs"), Err("not_found".to_owned()));

    // A plan is made against the staged content.
    let edit = prepare_edit(
        &run,
        &EditParams::from_args(
            &json!({"path": "src/a.rs", "old_string": "staged()", "new_string": "again()"}),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        edit.changes[0].after.as_deref(),
        Some("fn a() { again() }\n".as_bytes())
    );
    assert_eq!(
        edit.changes[0].before_hash.as_deref(),
        Some(airlock_fs::sha256_hex(b"fn a() { staged() }\n").as_str())
    );

    let grepped = grep(
        &run,
        &GrepParams::from_args(&json!({"pattern": "fn "})).unwrap(),
    )
    .unwrap();
    assert_eq!(
        grepped.matches.as_deref(),
        Some("src/a.rs:1:fn a() { staged() }\nsrc/new/b.rs:1:fn b() { staged() }")
    );
    let filtered = grep(
        &run,
        &GrepParams::from_args(&json!({"pattern": "staged", "glob_filter": "b.rs"})).unwrap(),
    )
    .unwrap();
    assert_eq!(
        filtered.matches.as_deref(),
        Some("src/new/b.rs:1:fn b() { staged() }")
    );
    let one = grep(
        &run,
        &GrepParams::from_args(&json!({"pattern": "staged", "path": "src/a.rs"})).unwrap(),
    )
    .unwrap();
    assert_eq!(
        one.matches.as_deref(),
        Some("src/a.rs:1:fn a() { staged() }")
    );

    let globbed = glob(
        &run,
        &GlobParams::from_args(&json!({"pattern": "**/*.rs"})).unwrap(),
    )
    .unwrap();
    let mut paths: Vec<&str> = globbed.paths.as_deref().unwrap().lines().collect();
    paths.sort_unstable();
    assert_eq!(paths, ["src/a.rs", "src/new/b.rs"]);

    let listed = list_dir(
        &run,
        &ListDirParams::from_args(&json!({"path": "src"})).unwrap(),
    )
    .unwrap();
    assert_eq!(listed.entries.as_deref(), Some("a.rs\nnew/"));
    let listed = list_dir(
        &run,
        &ListDirParams::from_args(&json!({"path": "src/new"})).unwrap(),
    )
    .unwrap();
    assert_eq!(listed.entries.as_deref(), Some("b.rs"));

    let size = stat(
        &run,
        &StatParams::from_args(&json!({"path": "src/new/b.rs"})).unwrap(),
    )
    .unwrap();
    assert_eq!((size.size_bytes, size.mtime_ms), (20, 1_700_000_000_000));
    assert_eq!(
        stat(
            &run,
            &StatParams::from_args(&json!({"path": "src/gone.rs"})).unwrap()
        )
        .unwrap_err()
        .code()
        .as_str(),
        "not_found"
    );
    let there = |path: &str| {
        exists(
            &run,
            &ExistsParams::from_args(&json!({"path": path})).unwrap(),
        )
        .unwrap()
        .exists
    };
    assert_eq!(
        (
            there("src/new/b.rs"),
            there("src/gone.rs"),
            there("notes.txt")
        ),
        (true, false, true)
    );

    // Nothing on disk changed.
    assert_eq!(
        std::fs::read_to_string(root.join("src/a.rs")).unwrap(),
        "fn a() {}\n"
    );
    assert!(root.join("src/gone.rs").exists());
    assert!(!root.join("src/new").exists());
}
