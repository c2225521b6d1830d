//! Upgrades: a workspace and state dir that an earlier airlock wrote
//! (`tests/fixtures/upgrade/before-redesign`, see its README) opens with the
//! current build and keeps its pending approvals, grants, undo snapshots and
//! audit chain.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use airlock_testkit::Workspace;
use pretty_assertions::assert_eq;
use serde_json::Value;

/// The approval the fixture applied (write_file notes.txt, "old" -> "new").
const APPLIED: &str = "hitl-cc42154c-902a-4ce6-b3e7-90a83d726b1c";

fn fixture() -> Workspace {
    let ws = Workspace::copy_of(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upgrade/before-redesign"),
    )
    .as_user("upgrader");
    std::fs::remove_file(ws.path("README.md")).unwrap();
    ws
}

/// The schema version SQLite keeps in a database file's header (the
/// `user_version` at byte 60, big-endian), read without opening it.
fn schema_version_on_disk(ws: &Workspace) -> u32 {
    let bytes = std::fs::read(ws.path(".airlock/airlock.db")).unwrap();
    u32::from_be_bytes(bytes[60..64].try_into().unwrap())
}

/// The names in the state dir, sorted.
fn state_dir(ws: &Workspace) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(ws.path(".airlock"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn json(ws: &Workspace, args: &[&str]) -> Value {
    let run = ws.run(args);
    assert_eq!(run.code, 0, "{args:?}: {}{}", run.stdout, run.stderr);
    run.json
}

#[test]
fn a_state_dir_from_before_the_redesign_keeps_everything() {
    let ws = fixture();
    // Written before the event feed and typed state: schema version 2.
    assert_eq!(schema_version_on_disk(&ws), 2);
    // The chain the old build wrote verifies.
    let run = ws.run(&["audit", "verify"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("ok: 9 records"), "{}", run.stdout);

    // Both pending approvals, as they were.
    let pending = json(&ws, &["pending", "--json"]);
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
    let grants = json(&ws, &["grants", "--json"]);
    let grants = grants.as_array().unwrap();
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert_eq!(grants[0]["tool"], "write_file");
    assert_eq!(grants[0]["path_glob"], "notes.txt");
    assert_eq!(grants[0]["approval_id"], APPLIED);

    // The commands above migrated the store to this build's schema.
    assert_eq!(schema_version_on_disk(&ws), 9);

    // The pending approvals can still be decided and applied.
    let first = pending[0]["id"].as_str().unwrap();
    let run = ws.run(&["approve", first]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(ws.read("src/pending.txt").unwrap(), "pending\n");
    let second = pending[1]["id"].as_str().unwrap();
    let run = ws.run(&["approve", second]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(ws.read("src/kept.txt").unwrap(), "kept\n");

    // The applied change's snapshot still undoes it.
    assert_eq!(ws.read("notes.txt").unwrap(), "new\n");
    let run = ws.run(&["undo", APPLIED]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(ws.read("notes.txt").unwrap(), "old\n");
    assert_eq!(json(&ws, &["show", APPLIED, "--json"])["undone"], true);

    // And the chain goes on from the old records.
    let run = ws.run(&["audit", "verify"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(!run.stdout.contains("ok: 9 records"), "{}", run.stdout);
}

/// A state dir an airlock newer than this one wrote is refused by every
/// command with the reason, and left as it was.
#[test]
fn a_state_dir_from_a_newer_airlock_is_refused_and_left_alone() {
    let ws = fixture();
    let database = ws.path(".airlock/airlock.db");
    // This build migrates it; then a newer release's migration would leave a
    // higher schema version.
    assert_eq!(ws.run(&["pending"]).code, 0);
    assert_eq!(schema_version_on_disk(&ws), 9);
    let bump = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA user_version = 99'); c.commit()",
        ])
        .arg(&database)
        .status();
    if !bump.is_ok_and(|status| status.success()) {
        // Without python3, the store's own test covers the refusal.
        assert!(
            airlock_testkit::peers::require(
                "a_state_dir_from_a_newer_airlock_is_refused_and_left_alone",
                &[airlock_testkit::peers::Peer::Python3]
            ),
            "python3 is present but could not set the schema version"
        );
        return;
    }
    let before = std::fs::read(&database).unwrap();
    let files = state_dir(&ws);
    for args in [
        &["pending"][..],
        &["call", "read_file", "--args", r#"{"path": "notes.txt"}"#],
    ] {
        let run = ws.run(args);
        assert_eq!(run.code, 2, "{args:?}: {}{}", run.stdout, run.stderr);
        assert!(
            run.stderr.contains(
                "the database is at schema version 99, newer than this airlock (9); use a newer airlock"
            ),
            "{args:?}: {}",
            run.stderr
        );
    }
    assert_eq!(
        std::fs::read(&database).unwrap(),
        before,
        "the database was changed"
    );
    assert_eq!(
        state_dir(&ws),
        files,
        "files appeared or went in the state dir"
    );
    assert_eq!(ws.read("notes.txt").unwrap(), "new\n");
}
