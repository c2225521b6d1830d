//! Upgrades: a workspace and state dir that an earlier airlock wrote
//! (`tests/fixtures/upgrade/before-redesign`, see its README) opens with the
//! current build and keeps its pending approvals, grants, undo snapshots and
//! audit chain.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pretty_assertions::assert_eq;
use serde_json::Value;

/// The approval the fixture applied (write_file notes.txt, "old" -> "new").
const APPLIED: &str = "hitl-cc42154c-902a-4ce6-b3e7-90a83d726b1c";

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn fixture() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upgrade/before-redesign"),
        &root,
    );
    std::fs::remove_file(root.join("README.md")).unwrap();
    (dir, root)
}

fn airlock(root: &Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .current_dir(root)
        .env("AIRLOCK_USER", "upgrader")
        .env_remove("AIRLOCK_AUDIT_KEY")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn json(root: &Path, args: &[&str]) -> Value {
    let (code, stdout, stderr) = airlock(root, args);
    assert_eq!(code, 0, "{args:?}: {stdout}{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn a_state_dir_from_before_the_redesign_keeps_everything() {
    let (_dir, root) = fixture();
    // The chain the old build wrote verifies.
    let (code, stdout, stderr) = airlock(&root, &["audit", "verify"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("ok: 9 records"), "{stdout}");

    // Both pending approvals, as they were.
    let pending = json(&root, &["pending", "--json"]);
    let pending = pending.as_array().unwrap();
    let summary: Vec<(&str, &str, &str)> = pending
        .iter()
        .map(|approval| {
            (
                approval["tool"].as_str().unwrap(),
                approval["path"].as_str().unwrap(),
                approval["session"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("write_file", "src/pending.txt", "s1"),
            ("edit_file", "src/kept.txt", "s2"),
        ]
    );
    assert_eq!(pending[0]["context_id"], "fixture-1");

    // The grant, still in force.
    let grants = json(&root, &["grants", "--json"]);
    let grants = grants.as_array().unwrap();
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert_eq!(grants[0]["tool"], "write_file");
    assert_eq!(grants[0]["path_glob"], "notes.txt");
    assert_eq!(grants[0]["approval_id"], APPLIED);

    // The pending approvals can still be decided and applied.
    let first = pending[0]["id"].as_str().unwrap();
    let (code, stdout, stderr) = airlock(&root, &["approve", first]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        std::fs::read_to_string(root.join("src/pending.txt")).unwrap(),
        "pending\n"
    );
    let second = pending[1]["id"].as_str().unwrap();
    let (code, stdout, stderr) = airlock(&root, &["approve", second]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        std::fs::read_to_string(root.join("src/kept.txt")).unwrap(),
        "kept\n"
    );

    // The applied change's snapshot still undoes it.
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt")).unwrap(),
        "new\n"
    );
    let (code, stdout, stderr) = airlock(&root, &["undo", APPLIED]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        std::fs::read_to_string(root.join("notes.txt")).unwrap(),
        "old\n"
    );

    // And the chain goes on from the old records.
    let (code, stdout, stderr) = airlock(&root, &["audit", "verify"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(!stdout.contains("ok: 9 records"), "{stdout}");
}
