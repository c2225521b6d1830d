//! The store through its public API, on real SQLite files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Barrier};

use airlock_core::envelope::{DecidedBy, Envelope, Status};
use airlock_core::{ApprovalTerms, ChangePlan, Channel, Plan, Risk};
use airlock_store::{
    ApprovalStatus, Created, EditedPlan, Limits, NewApproval, Store, StoreError, Verdict,
};
use pretty_assertions::assert_eq;

const LIMITS: Limits = Limits {
    max_pending: 5,
    max_pending_per_session: 3,
};

fn plan(summary: &str) -> Plan {
    Plan::Write(ChangePlan {
        tool: "write_file".into(),
        summary: summary.into(),
        changes: Vec::new(),
        diff: String::new(),
        patch_hash: String::new(),
        report: serde_json::Map::new(),
    })
}

fn terms() -> ApprovalTerms {
    serde_json::from_value(serde_json::json!({"risk": "medium", "timeout": 60})).unwrap()
}

fn new(id: &str, session: &str, key: &str) -> NewApproval {
    NewApproval {
        dedup_key: key.into(),
        session: Some(session.into()),
        summary: "MODIFY a.txt".into(),
        diff: "--- a/a.txt".into(),
        ..NewApproval::new(
            id,
            "write_file",
            Risk::Medium,
            terms(),
            plan("MODIFY a.txt"),
            1_000,
            61_000,
        )
    }
}

fn result(status: Status) -> Envelope {
    Envelope::new(status, "fs.apply_patch", "write_file", Some("a.txt"))
}

fn approve(at_ms: u64) -> Verdict {
    Verdict {
        approve: true,
        by: DecidedBy::Human,
        user: Some("alice".into()),
        channel: Some(Channel::Terminal),
        reason: None,
        at_ms,
        edited: None,
    }
}

fn created(store: &Store, approval: &NewApproval) -> airlock_store::Approval {
    match store.create_approval(approval, LIMITS).unwrap() {
        Created::New(approval) => approval,
        Created::Existing(approval) => panic!("unexpected duplicate {}", approval.id),
    }
}

#[test]
fn identical_pending_calls_share_one_approval() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a.db")).unwrap();
    created(&store, &new("hitl-1", "s1", "same"));
    match store
        .create_approval(&new("hitl-2", "s1", "same"), LIMITS)
        .unwrap()
    {
        Created::Existing(existing) => assert_eq!(existing.id, "hitl-1"),
        Created::New(_) => panic!("a duplicate was created"),
    }
    // Once decided, the same call makes a new approval.
    store.decide("hitl-1", &approve(2_000)).unwrap();
    created(&store, &new("hitl-3", "s1", "same"));
}

#[test]
fn pending_limits_are_per_session_and_per_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a.db")).unwrap();
    for i in 0..3 {
        created(&store, &new(&format!("a{i}"), "s1", &format!("k{i}")));
    }
    let error = store
        .create_approval(&new("a3", "s1", "k3"), LIMITS)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "too many pending approvals (3 of at most 3 in this session)"
    );
    created(&store, &new("b0", "s2", "k4"));
    created(&store, &new("b1", "s2", "k5"));
    let error = store
        .create_approval(&new("c0", "s3", "k6"), LIMITS)
        .unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::RateLimited {
                pending: 5,
                limit: 5,
                ..
            }
        ),
        "{error}"
    );
    // Expired approvals do not count.
    let mut later = new("c1", "s3", "k7");
    later.created_ms = 61_000;
    later.expires_ms = 120_000;
    created(&store, &later);
}

#[test]
fn pending_is_fifo_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    {
        let store = Store::open(&path).unwrap();
        for id in ["first", "second", "third"] {
            created(&store, &new(id, "s1", id));
        }
    }
    let store = Store::open(&path).unwrap();
    let ids: Vec<String> = store
        .pending(Some("s1"), 2_000)
        .unwrap()
        .into_iter()
        .map(|a| a.id.clone())
        .collect();
    assert_eq!(ids, ["first", "second", "third"]);
    assert!(store.pending(Some("other"), 2_000).unwrap().is_empty());
    assert!(
        store.pending(None, 61_000).unwrap().is_empty(),
        "expired ones are not pending"
    );
    assert_eq!(store.overdue(61_000).unwrap().len(), 3);
}

#[test]
fn two_concurrent_deciders_exactly_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let store = Store::open(&path).unwrap();
    for round in 0..20 {
        let id = format!("hitl-{round}");
        created(&store, &new(&id, &format!("s{round}"), &id));
        let barrier = Arc::new(Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|decider| {
                let (path, id, barrier) = (path.clone(), id.clone(), barrier.clone());
                std::thread::spawn(move || {
                    // Each decider has its own connection, as separate processes do.
                    let store = Store::open(&path).unwrap();
                    let mut verdict = approve(2_000);
                    verdict.approve = decider % 2 == 0;
                    barrier.wait();
                    store.decide(&id, &verdict)
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let winners = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(winners, 1, "round {round}: {results:?}");
        for result in results.iter().filter_map(|r| r.as_ref().err()) {
            assert!(
                matches!(result, StoreError::AlreadyDecided { .. }),
                "{result}"
            );
        }
    }
}

#[test]
fn an_approval_is_claimed_for_apply_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a.db")).unwrap();
    created(&store, &new("hitl-1", "s1", "k"));
    assert!(
        store.claim_apply("hitl-1").unwrap().is_none(),
        "pending cannot be claimed"
    );
    store.decide("hitl-1", &approve(2_000)).unwrap();
    assert_eq!(
        store.claim_apply("hitl-1").unwrap().unwrap().status,
        ApprovalStatus::Applying
    );
    assert!(
        store.claim_apply("hitl-1").unwrap().is_none(),
        "claimed twice"
    );
    store
        .finish(
            "hitl-1",
            ApprovalStatus::Applied,
            &result(Status::Allowed),
            5,
        )
        .unwrap();
    assert!(
        store
            .finish("hitl-1", ApprovalStatus::Applied, &result(Status::Error), 6)
            .is_err()
    );
    let approval = store.get("hitl-1").unwrap();
    let decision = approval.decision.clone().unwrap();
    assert_eq!(
        (
            approval.status,
            decision.user.as_deref(),
            decision.channel,
            decision.edited,
            approval.result.map(|result| result.status)
        ),
        (
            ApprovalStatus::Applied,
            Some("alice"),
            Some(Channel::Terminal),
            false,
            Some(Status::Allowed)
        )
    );
}

#[test]
fn expiry_and_denial_are_final() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a.db")).unwrap();
    created(&store, &new("late", "s1", "k1"));
    // Deciding after the expiry fails and the approval cannot be approved later.
    assert!(matches!(
        store.decide("late", &approve(61_000)).unwrap_err(),
        StoreError::Expired(_)
    ));
    assert_eq!(
        store.expire("late", 61_000).unwrap().unwrap().status,
        ApprovalStatus::Expired
    );
    assert!(matches!(
        store.decide("late", &approve(1_500)).unwrap_err(),
        StoreError::AlreadyDecided { .. }
    ));

    created(&store, &new("no", "s1", "k2"));
    let mut deny = approve(2_000);
    deny.approve = false;
    store.decide("no", &deny).unwrap();
    assert!(
        store.expire("no", 70_000).unwrap().is_none(),
        "a timeout after a denial changes nothing"
    );
    assert!(matches!(
        store.decide("no", &approve(3_000)).unwrap_err(),
        StoreError::AlreadyDecided { .. }
    ));
    assert!(matches!(
        store.get("nope").unwrap_err(),
        StoreError::NotFound(_)
    ));
}

#[test]
fn an_edited_approval_replaces_the_plan_with_the_decision_and_only_then() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a.db")).unwrap();
    created(&store, &new("edit", "s1", "k1"));
    let mut verdict = approve(2_000);
    verdict.edited = Some(EditedPlan {
        plan: plan("edited"),
        diff: "--- a/a.txt (edited)".into(),
    });
    let decided = store.decide("edit", &verdict).unwrap();
    assert_eq!(
        (&decided.plan, decided.diff.as_str()),
        (&plan("edited"), "--- a/a.txt (edited)")
    );
    assert_eq!(decided.decision.map(|d| d.edited), Some(true));
    // A second decision with another edit loses and changes nothing.
    verdict.edited = Some(EditedPlan {
        plan: plan("other"),
        diff: "other".into(),
    });
    assert!(matches!(
        store.decide("edit", &verdict).unwrap_err(),
        StoreError::AlreadyDecided { .. }
    ));
    let stored = store.get("edit").unwrap();
    assert_eq!(stored.plan, plan("edited"));
    // A plain approval keeps the proposal's plan.
    created(&store, &new("plain", "s1", "k2"));
    let decided = store.decide("plain", &approve(2_000)).unwrap();
    assert_eq!(
        (&decided.plan, decided.diff.as_str()),
        (&plan("MODIFY a.txt"), "--- a/a.txt")
    );
    assert_eq!(decided.decision.map(|d| d.edited), Some(false));
}

#[test]
fn the_audit_head_only_moves_forward() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a.db")).unwrap();
    assert_eq!(store.audit_head().unwrap(), None);
    store.save_audit_head(5, "sha256:5").unwrap();
    store.save_audit_head(3, "sha256:3").unwrap();
    assert_eq!(
        store.audit_head().unwrap(),
        Some((5, "sha256:5".to_owned()))
    );
}

#[test]
fn orphans_are_taken_over_by_exactly_one_process_and_abandoned_waits_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a.db")).unwrap();
    created(&store, &new("decided", "s1", "k1"));
    store.decide("decided", &approve(2_000)).unwrap();
    // The owner (this process) is alive: nothing is orphaned.
    assert!(store.orphaned(&|_| true).unwrap().is_empty());
    // Once it is gone, the approval is an orphan, and only one taker wins.
    let orphans = store.orphaned(&|_| false).unwrap();
    assert_eq!(orphans.len(), 1);
    let (orphan, owner) = &orphans[0];
    assert_eq!(
        (orphan.id.as_str(), *owner),
        ("decided", std::process::id())
    );
    // Taking over is a compare-and-set on the owner: naming another owner than
    // the recorded one changes nothing.
    let second = Store::open(&dir.path().join("a.db")).unwrap();
    assert!(
        second
            .take_over("decided", owner.wrapping_add(1))
            .unwrap()
            .is_none()
    );
    let taken = store.take_over("decided", *owner).unwrap().unwrap();
    assert_eq!(
        (taken.status, taken.owner_pid),
        (ApprovalStatus::Approved, Some(std::process::id()))
    );

    let mut waited = new("waited", "s1", "k2");
    waited.waiter_pid = Some(4_000_000);
    created(&store, &waited);
    let abandoned = store.abandoned(&|pid| pid != 4_000_000).unwrap();
    assert_eq!(
        abandoned.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
        ["waited"]
    );
    assert!(store.abandoned(&|_| true).unwrap().is_empty());
    assert_eq!(
        store.cancel("waited", 3_000).unwrap().unwrap().status,
        ApprovalStatus::Cancelled
    );
}

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
    assert_eq!(store.schema_version().unwrap(), 7);
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
    assert_eq!(again.schema_version().unwrap(), 7);
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
    let error = Store::open(&path).err().expect("opened a newer database");
    assert!(
        matches!(
            error,
            StoreError::NewerSchema {
                found: 99,
                supported: 7
            }
        ),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "the database is at schema version 99, newer than this airlock (7); use a newer airlock"
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

/// Grants stored before grants ended by default get an end, grant_ttl after
/// they were made; grants that have one keep it.
#[test]
fn open_grants_are_given_an_end() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("airlock.db")).unwrap();
    let grant = |id: &str, expires_ms: Option<u64>| airlock_store::GrantRow {
        id: id.to_owned(),
        tool: "write_file".to_owned(),
        path_glob: Some("a.txt".to_owned()),
        session: None,
        user: None,
        owner: None,
        expires_ms,
        created_ms: 1_000,
        created_by: Some("t".to_owned()),
        approval_id: None,
    };
    store.insert_grant(&grant("grant-open", None)).unwrap();
    store
        .insert_grant(&grant("grant-ends", Some(500_000)))
        .unwrap();
    assert_eq!(store.end_open_grants(10_000).unwrap(), 1);
    assert_eq!(store.end_open_grants(10_000).unwrap(), 0);
    let ids = |now| -> Vec<String> {
        store
            .grants(now)
            .unwrap()
            .into_iter()
            .map(|grant| grant.id)
            .collect()
    };
    assert_eq!(ids(10_999), ["grant-ends", "grant-open"]);
    assert_eq!(ids(11_000), ["grant-ends"]);
    assert_eq!(ids(500_000), Vec::<String>::new());
}

/// Every state change writes one event, in the order the changes were
/// made, with a greater `seq` each time; a change that does not happen (a
/// lost compare-and-set, a duplicate call) writes none. Readers from a
/// cursor see each once.
#[test]
fn every_state_change_is_one_event_and_a_cursor_sees_each_once() {
    use airlock_store::EventKind;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("airlock.db")).unwrap();
    assert_eq!(store.last_event().unwrap(), 0);
    let mut first = new("hitl-1", "s", "k1");
    first.owner = Some("agent-a".into());
    created(&store, &first);
    // The same call again is the same approval: no event.
    assert!(matches!(
        store.create_approval(&first, LIMITS).unwrap(),
        Created::Existing(_)
    ));
    let cursor = store.last_event().unwrap();
    store.decide("hitl-1", &approve(2_000)).unwrap();
    assert!(store.decide("hitl-1", &approve(2_001)).is_err());
    store.claim_apply("hitl-1").unwrap().unwrap();
    store
        .finish(
            "hitl-1",
            ApprovalStatus::Applied,
            &result(Status::Allowed),
            3_000,
        )
        .unwrap();
    created(&store, &new("hitl-2", "s", "k2"));
    store.expire("hitl-2", 70_000).unwrap().unwrap();
    assert!(store.cancel("hitl-2", 70_001).unwrap().is_none());
    created(&store, &new("hitl-3", "s", "k3"));
    store.cancel("hitl-3", 4_000).unwrap().unwrap();
    let grant = airlock_store::GrantRow {
        id: "grant-1".into(),
        tool: "write_file".into(),
        path_glob: None,
        session: None,
        user: None,
        owner: None,
        expires_ms: None,
        created_ms: 5_000,
        created_by: None,
        approval_id: Some("hitl-1".into()),
    };
    store.insert_grant(&grant).unwrap();
    assert!(store.delete_grant("grant-1", 6_000).unwrap());
    assert!(!store.delete_grant("grant-1", 6_001).unwrap());
    store
        .record_event(EventKind::ConfigReloaded, 7_000, serde_json::json!({}))
        .unwrap();

    let all = store.events_after(0, 100).unwrap();
    let seen: Vec<(EventKind, Option<&str>, u64)> = all
        .iter()
        .map(|event| (event.kind, event.subject.as_deref(), event.at_ms))
        .collect();
    assert_eq!(
        seen,
        [
            (EventKind::ApprovalCreated, Some("hitl-1"), 1_000),
            (EventKind::ApprovalDecided, Some("hitl-1"), 2_000),
            (EventKind::ApprovalApplied, Some("hitl-1"), 3_000),
            (EventKind::ApprovalCreated, Some("hitl-2"), 1_000),
            (EventKind::ApprovalExpired, Some("hitl-2"), 70_000),
            (EventKind::ApprovalCreated, Some("hitl-3"), 1_000),
            (EventKind::ApprovalCancelled, Some("hitl-3"), 4_000),
            (EventKind::GrantCreated, Some("grant-1"), 5_000),
            (EventKind::GrantRevoked, Some("grant-1"), 6_000),
            (EventKind::ConfigReloaded, None, 7_000),
        ]
    );
    assert!(all.windows(2).all(|pair| pair[0].seq < pair[1].seq));
    assert_eq!(all[0].owner.as_deref(), Some("agent-a"));
    assert_eq!(
        all[1].data,
        serde_json::json!({"v": 1, "status": "approved", "by": "human", "user": "alice",
                           "channel": "terminal", "edited": false})
    );
    // From a cursor: what came after it, each once, in pages.
    let after: Vec<u64> = store
        .events_after(cursor, 2)
        .unwrap()
        .iter()
        .map(|event| event.seq)
        .collect();
    assert_eq!(after, [all[1].seq, all[2].seq]);
    assert_eq!(store.events_after(all[9].seq, 10).unwrap(), []);
    assert_eq!(store.last_event().unwrap(), all[9].seq);
    // Another connection (another process) reads the same feed.
    let again = Store::open(&dir.path().join("airlock.db")).unwrap();
    assert_eq!(again.events_after(0, 100).unwrap(), all);
}
