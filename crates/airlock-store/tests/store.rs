//! The store through its public API, on real SQLite files: the contract
//! both engines keep (`contract/`), and what only SQLite has (old files,
//! concurrent first opens).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Barrier};

use airlock_core::{Plan, Risk};
use airlock_store::{ApprovalStatus, Store, StoreError};
use contract::{created, new};
use pretty_assertions::assert_eq;

#[macro_use]
mod contract;

/// A SQLite file; each open is another process's connection.
struct Sqlite(tempfile::TempDir);

impl contract::Db for Sqlite {
    fn open(&self) -> Store {
        Store::open(&self.0.path().join("airlock.db")).unwrap()
    }
}

fn sqlite() -> Option<Sqlite> {
    Some(Sqlite(tempfile::tempdir().unwrap()))
}

contract_tests!(sqlite);

#[test]
fn many_processes_opening_a_new_database_at_once_all_succeed() {
    // Regression: concurrent first opens reported "database is locked".
    for round in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fresh.db");
        let barrier = Arc::new(Barrier::new(6));
        let handles: Vec<_> = (0..6)
            .map(|_| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    Store::open(&path).map(|_| ())
                })
            })
            .collect();
        for handle in handles {
            handle
                .join()
                .unwrap()
                .unwrap_or_else(|error| panic!("round {round}: {error}"));
        }
    }
}

#[test]
fn undo_snapshots_of_earlier_versions_are_still_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("airlock.db");
    {
        // The one-file table airlock wrote before multi-file snapshots.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE snapshots (approval_id TEXT PRIMARY KEY, path TEXT NOT NULL, \
             before BLOB, before_hash TEXT, after_hash TEXT NOT NULL, \
             undone INTEGER NOT NULL DEFAULT 0);
             INSERT INTO snapshots VALUES ('hitl-old', 'a.txt', x'6f6c640a', 'sha256:b', 'sha256:a', 0);",
        )
        .unwrap();
    }
    let store = Store::open(&path).unwrap();
    let snapshot = store.snapshot("hitl-old").unwrap();
    assert_eq!(
        snapshot,
        airlock_store::Snapshot {
            approval_id: "hitl-old".to_owned(),
            files: vec![airlock_store::SnapshotFile {
                path: "a.txt".to_owned(),
                before: Some(b"old\n".to_vec()),
                before_hash: Some("sha256:b".to_owned()),
                after_hash: Some("sha256:a".to_owned()),
                mode: None,
            }],
            undone: false,
        }
    );
    assert!(store.mark_undone("hitl-old", 7).unwrap());
    assert!(!store.mark_undone("hitl-old", 7).unwrap());
    assert!(store.snapshot("hitl-old").unwrap().undone);
    assert!(store.snapshot("hitl-none").is_err());
}

#[test]
fn a_version_0_database_is_migrated_and_its_old_rows_belong_to_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("airlock.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(include_str!("fixtures/schema_v0.sql"))
            .unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.schema_version().unwrap(), 9);
    let old = store.get("hitl-old").unwrap();
    assert_eq!(old.status, ApprovalStatus::Pending);
    // Terms and plans written before formats are read as they were meant.
    assert_eq!((old.risk, old.terms.timeout_seconds), (Risk::Medium, 60));
    assert!(matches!(old.plan, Plan::Write(_)), "{:?}", old.plan);
    // Migration 2: rows older than context_id have none; migration 6:
    // nor a requester.
    assert_eq!(old.context_id, None);
    assert_eq!(old.requester, None);
    assert_eq!(
        (old.user.as_deref(), old.owner.as_deref()),
        (Some("u1"), None)
    );
    let grants = store.grants(0).unwrap();
    assert_eq!(grants.len(), 1);
    assert_eq!(
        (grants[0].user.as_deref(), grants[0].owner.as_deref()),
        (None, None)
    );
    drop(store);
    // Opening it again changes nothing.
    let again = Store::open(&path).unwrap();
    assert_eq!(again.schema_version().unwrap(), 9);
    assert_eq!(again.get("hitl-old").unwrap(), old);
}

#[test]
fn a_database_from_a_newer_airlock_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("airlock.db");
    drop(Store::open(&path).unwrap());
    rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let error = Store::open(&path).expect_err("opened a newer database");
    assert!(
        matches!(
            error,
            StoreError::NewerSchema {
                found: 99,
                supported: 9
            }
        ),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "the database is at schema version 99, newer than this airlock (9); use a newer airlock"
    );
}

/// A row whose plan was written by a newer airlock is refused by name, not
/// misread; the other rows stay readable.
#[test]
fn a_plan_in_a_newer_format_is_refused_with_its_approval() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("airlock.db");
    let store = Store::open(&path).unwrap();
    created(&store, &new("hitl-new", "s1", "k1"));
    created(&store, &new("hitl-ok", "s1", "k2"));
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE approvals SET plan_json = '{\"format\":7,\"kind\":\"teleport\"}' \
             WHERE id = 'hitl-new'",
            [],
        )
        .unwrap();
    let error = store.get("hitl-new").unwrap_err();
    assert_eq!(
        error.to_string(),
        "approval hitl-new: stored plan is in format 7, newer than this airlock reads (1); use a newer airlock"
    );
    assert_eq!(store.get("hitl-ok").unwrap().id, "hitl-ok");
    // A listing leaves the unreadable one out instead of failing whole, so
    // it holds up no other approval (nor expiry, nor recovery).
    let listed: Vec<String> = store
        .pending(None, 2_000)
        .unwrap()
        .into_iter()
        .map(|approval| approval.id.clone())
        .collect();
    assert_eq!(listed, ["hitl-ok"]);
    assert_eq!(store.overdue(100_000).unwrap().len(), 1);
}
