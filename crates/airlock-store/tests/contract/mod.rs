//! The store's contract, the same on both engines: each test takes a
//! database ([`Db`]) it may open several times (processes on SQLite,
//! instances on PostgreSQL). `store.rs` runs it on SQLite files; the
//! PostgreSQL run is in airlock-cli's `store_postgres.rs`, against a real
//! server.

#![allow(dead_code)]

use std::sync::Barrier;

use airlock_core::envelope::{DecidedBy, Envelope, Status};
use airlock_core::{ApprovalTerms, ChangePlan, Channel, Plan, Risk};
use airlock_store::{
    ApprovalStatus, Created, EditedPlan, Limits, NewApproval, Store, StoreError, Verdict,
};
use pretty_assertions::assert_eq;

/// One database of either engine.
pub trait Db: Sync {
    /// A new store on it, as another process or instance would open it.
    fn open(&self) -> Store;
}

/// A `#[test]` for each contract test, on the databases `$db()` makes (none:
/// skipped).
#[macro_export]
macro_rules! contract_tests {
    ($db:path) => {
        $crate::contract_tests!(@each $db; identical_pending_calls_share_one_approval, pending_limits_are_per_session_and_per_workspace, pending_is_fifo_and_survives_a_restart, two_concurrent_deciders_exactly_one_wins, an_approval_is_claimed_for_apply_once, expiry_and_denial_are_final, an_edited_approval_replaces_the_plan_with_the_decision_and_only_then, the_audit_head_only_moves_forward, orphans_are_taken_over_by_exactly_one_process_and_abandoned_waits_are_found, open_grants_are_given_an_end, every_state_change_is_one_event_and_a_cursor_sees_each_once, snapshots_keep_bytes_and_undo_once, chat_messages_are_claimed_once, tokens_are_spent_once_and_settings_kept, concurrent_identical_calls_from_many_connections_make_one_approval, a_holder_is_alive_until_it_is_gone, checkpoints_are_kept_once_per_size_and_key, a_lease_has_one_holder_until_it_runs_out, sessions_open_end_once_and_fall_due);
    };
    (@each $db:path; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                if let Some(db) = $db() {
                    contract::$name(&db);
                }
            }
        )*
    };
}

pub const LIMITS: Limits = Limits {
    max_pending: 5,
    max_pending_per_session: 3,
};

pub fn plan(summary: &str) -> Plan {
    Plan::Write(ChangePlan {
        tool: "write_file".into(),
        summary: summary.into(),
        changes: Vec::new(),
        diff: String::new(),
        patch_hash: String::new(),
        report: serde_json::Map::new(),
    })
}

pub fn terms() -> ApprovalTerms {
    serde_json::from_value(serde_json::json!({"risk": "medium", "timeout": 60})).unwrap()
}

pub fn new(id: &str, session: &str, key: &str) -> NewApproval {
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

pub fn result(status: Status) -> Envelope {
    Envelope::new(status, "fs.apply_patch", "write_file", Some("a.txt"))
}

pub fn approve(at_ms: u64) -> Verdict {
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

pub fn created(store: &Store, approval: &NewApproval) -> airlock_store::Approval {
    match store.create_approval(approval, LIMITS).unwrap() {
        Created::New(approval) => approval,
        Created::Existing(approval) => panic!("unexpected duplicate {}", approval.id),
    }
}

pub fn identical_pending_calls_share_one_approval(db: &dyn Db) {
    let store = db.open();
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

pub fn pending_limits_are_per_session_and_per_workspace(db: &dyn Db) {
    let store = db.open();
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

pub fn pending_is_fifo_and_survives_a_restart(db: &dyn Db) {
    {
        let store = db.open();
        for id in ["first", "second", "third"] {
            created(&store, &new(id, "s1", id));
        }
    }
    let store = db.open();
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

pub fn two_concurrent_deciders_exactly_one_wins(db: &dyn Db) {
    let store = db.open();
    for round in 0..20 {
        let id = format!("hitl-{round}");
        created(&store, &new(&id, &format!("s{round}"), &id));
        let barrier = Barrier::new(4);
        let results: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|decider| {
                    let (id, barrier) = (&id, &barrier);
                    scope.spawn(move || {
                        // Each decider has its own connection, as separate
                        // processes (or instances) do.
                        let store = db.open();
                        let mut verdict = approve(2_000);
                        verdict.approve = decider % 2 == 0;
                        barrier.wait();
                        store.decide(id, &verdict)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
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

pub fn an_approval_is_claimed_for_apply_once(db: &dyn Db) {
    let store = db.open();
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

pub fn expiry_and_denial_are_final(db: &dyn Db) {
    let store = db.open();
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

pub fn an_edited_approval_replaces_the_plan_with_the_decision_and_only_then(db: &dyn Db) {
    let store = db.open();
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

pub fn the_audit_head_only_moves_forward(db: &dyn Db) {
    let store = db.open();
    assert_eq!(store.audit_head().unwrap(), None);
    store.save_audit_head(5, "sha256:5").unwrap();
    store.save_audit_head(3, "sha256:3").unwrap();
    assert_eq!(
        store.audit_head().unwrap(),
        Some((5, "sha256:5".to_owned()))
    );
}

pub fn orphans_are_taken_over_by_exactly_one_process_and_abandoned_waits_are_found(db: &dyn Db) {
    let store = db.open();
    created(&store, &new("decided", "s1", "k1"));
    store.decide("decided", &approve(2_000)).unwrap();
    // The owner (this process) is alive: nothing is orphaned.
    assert!(store.orphaned(&|_| true).unwrap().is_empty());
    // Once it is gone, the approval is an orphan, and only one taker wins.
    let orphans = store.orphaned(&|_| false).unwrap();
    assert_eq!(orphans.len(), 1);
    let (orphan, owner) = &orphans[0];
    assert_eq!((orphan.id.as_str(), *owner), ("decided", store.me()));
    // Taking over is a compare-and-set on the owner: naming another owner than
    // the recorded one changes nothing.
    let second = db.open();
    assert!(
        second
            .take_over("decided", owner.wrapping_add(1))
            .unwrap()
            .is_none()
    );
    let taken = store.take_over("decided", *owner).unwrap().unwrap();
    assert_eq!(
        (taken.status, taken.owner_pid),
        (ApprovalStatus::Approved, Some(store.me()))
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

/// Grants stored before grants ended by default get an end, grant_ttl after
/// they were made; grants that have one keep it.
pub fn open_grants_are_given_an_end(db: &dyn Db) {
    let store = db.open();
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
pub fn every_state_change_is_one_event_and_a_cursor_sees_each_once(db: &dyn Db) {
    use airlock_store::EventKind;
    let store = db.open();
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
    let again = db.open();
    assert_eq!(again.events_after(0, 100).unwrap(), all);
}

/// Undo snapshots keep any bytes (NUL, invalid UTF-8) and an undo happens
/// once.
pub fn snapshots_keep_bytes_and_undo_once(db: &dyn Db) {
    use airlock_store::{Snapshot, SnapshotFile};
    let store = db.open();
    created(&store, &new("hitl-1", "s1", "k1"));
    let snapshot = Snapshot {
        approval_id: "hitl-1".into(),
        files: vec![
            SnapshotFile {
                path: "a.bin".into(),
                before: Some(vec![0, 159, 146, 150, 255, b'\n']),
                before_hash: Some("sha256:a".into()),
                after_hash: Some("sha256:b".into()),
                mode: Some(0o100_755),
            },
            SnapshotFile {
                path: "new.txt".into(),
                before: None,
                before_hash: None,
                after_hash: Some("sha256:c".into()),
                mode: None,
            },
        ],
        undone: false,
    };
    store.insert_snapshot(&snapshot).unwrap();
    assert_eq!(db.open().snapshot("hitl-1").unwrap(), snapshot);
    assert!(
        store
            .set_snapshot_after("hitl-1", "new.txt", Some("sha256:d"))
            .unwrap()
    );
    assert_eq!(
        store.snapshot("hitl-1").unwrap().files[1]
            .after_hash
            .as_deref(),
        Some("sha256:d")
    );
    assert!(store.mark_undone("hitl-1", 5_000).unwrap());
    assert!(
        !db.open().mark_undone("hitl-1", 5_001).unwrap(),
        "undone twice"
    );
    assert!(store.snapshot("hitl-1").unwrap().undone);
    assert!(store.get("hitl-1").unwrap().undone);
    assert!(matches!(
        store.snapshot("nope").unwrap_err(),
        StoreError::NotFound(_)
    ));
}

/// A chat message is claimed by one poster; its id lets any process edit it.
pub fn chat_messages_are_claimed_once(db: &dyn Db) {
    let store = db.open();
    let other = db.open();
    assert!(
        store
            .claim_chat_message("hitl-1", "telegram", "42", 1_000)
            .unwrap()
    );
    assert!(
        !other
            .claim_chat_message("hitl-1", "telegram", "42", 1_001)
            .unwrap()
    );
    store
        .posted_chat_message("hitl-1", "telegram", "42", "m-7", "pending")
        .unwrap();
    let found = other
        .chat_message_by_id("telegram", "42", "m-7")
        .unwrap()
        .unwrap();
    assert_eq!(
        (found.approval_id.as_str(), found.claimed_ms, found.settled),
        ("hitl-1", 1_000, false)
    );
    other
        .edited_chat_message("hitl-1", "telegram", "42", "approved", true)
        .unwrap();
    assert!(store.open_chat_messages("telegram").unwrap().is_empty());
    assert_eq!(
        store.chat_messages_of("hitl-1").unwrap()[0].shown,
        "approved"
    );
    // An unposted claim can be given back; a posted one stays.
    assert!(
        store
            .claim_chat_message("hitl-2", "slack", "C1", 2_000)
            .unwrap()
    );
    store.release_chat_message("hitl-2", "slack", "C1").unwrap();
    assert!(
        other
            .claim_chat_message("hitl-2", "slack", "C1", 2_001)
            .unwrap()
    );
    store
        .release_chat_message("hitl-1", "telegram", "42")
        .unwrap();
    assert_eq!(store.chat_messages_of("hitl-1").unwrap().len(), 1);
}

/// A one-time token is spent once, by whichever connection comes first.
pub fn tokens_are_spent_once_and_settings_kept(db: &dyn Db) {
    let store = db.open();
    assert!(store.spend_token("t-1", 10_000, 1_000).unwrap());
    assert!(!db.open().spend_token("t-1", 10_000, 1_001).unwrap());
    // Past its expiry its row is swept.
    assert!(store.spend_token("t-1", 30_000, 20_000).unwrap());
    assert_eq!(store.get_kv("config_hash").unwrap(), None);
    store.set_kv("config_hash", "a").unwrap();
    db.open().set_kv("config_hash", "b").unwrap();
    assert_eq!(store.get_kv("config_hash").unwrap().as_deref(), Some("b"));
}

/// Many connections proposing the same call at once make one approval,
/// and the pending limit holds exactly under the race.
pub fn concurrent_identical_calls_from_many_connections_make_one_approval(db: &dyn Db) {
    let limits = Limits {
        max_pending: 10,
        max_pending_per_session: 10,
    };
    let barrier = Barrier::new(6);
    let outcomes: Vec<Vec<Result<Created, StoreError>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|thread| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let store = db.open();
                    barrier.wait();
                    (0..20)
                        .map(|call| {
                            // Every thread proposes "same" each time, and
                            // "own-N" calls that count against the limit.
                            let (id, key) = if call % 2 == 0 {
                                (format!("same-{thread}-{call}"), "same".to_owned())
                            } else {
                                let key = format!("own-{thread}-{call}");
                                (key.clone(), key)
                            };
                            store.create_approval(&new(&id, "s", &key), limits)
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let store = db.open();
    let pending = store.pending(None, 2_000).unwrap();
    let same: Vec<_> = pending.iter().filter(|a| a.dedup_key == "same").collect();
    assert_eq!(same.len(), 1, "one approval for the identical calls");
    assert_eq!(pending.len(), 10, "the limit is exact");
    let created = outcomes
        .iter()
        .flatten()
        .filter(|outcome| matches!(outcome, Ok(Created::New(_))))
        .count();
    assert_eq!(created, 10);
    let limited = outcomes
        .iter()
        .flatten()
        .filter(|outcome| matches!(outcome, Err(StoreError::RateLimited { .. })))
        .count();
    let existing = outcomes
        .iter()
        .flatten()
        .filter(|outcome| matches!(outcome, Ok(Created::Existing(a)) if a.dedup_key == "same"))
        .count();
    assert_eq!(created + limited + existing, 120, "{outcomes:?}");
    // One event per approval, in seq order.
    let events = store.events_after(0, 1_000).unwrap();
    assert_eq!(events.len(), 10);
    assert!(events.windows(2).all(|pair| pair[0].seq < pair[1].seq));
}

/// This store's holder is alive; a holder that never was is not.
pub fn a_holder_is_alive_until_it_is_gone(db: &dyn Db) {
    let store = db.open();
    assert!(store.alive(store.me()));
    assert!(store.holding());
    let other = db.open();
    assert!(store.alive(other.me()));
    assert!(!store.alive(0));
}

/// A checkpoint is stored once per (size, key), with its event; the latest
/// is the largest tree; settings made once keep the first value.
pub fn checkpoints_are_kept_once_per_size_and_key(db: &impl Db) {
    use airlock_store::CheckpointRow;
    let (one, two) = (db.open(), db.open());
    let row = |size: u64, key: &str| CheckpointRow {
        size,
        key_id: key.into(),
        root: format!("root{size}"),
        note: format!("note {size} {key}\n"),
        created_ms: 1000 + size,
    };
    use airlock_store::Saved;
    assert_eq!(one.save_checkpoint(&row(4, "a+1")).unwrap(), Saved::New);
    assert_eq!(two.save_checkpoint(&row(4, "a+1")).unwrap(), Saved::Same);
    // The same key with another root for the same size: a fork, refused.
    let mut fork = row(4, "a+1");
    fork.root = "another".into();
    assert_eq!(two.save_checkpoint(&fork).unwrap(), Saved::Other);
    assert_eq!(two.save_checkpoint(&row(4, "b+2")).unwrap(), Saved::New);
    assert_eq!(two.save_checkpoint(&row(8, "b+2")).unwrap(), Saved::New);
    assert_eq!(one.latest_checkpoint().unwrap(), Some(row(8, "b+2")));
    assert_eq!(one.checkpoint_of_size(4).unwrap().map(|r| r.size), Some(4));
    assert_eq!(one.checkpoint_of_size(5).unwrap(), None);
    assert_eq!(
        one.checkpoints()
            .unwrap()
            .iter()
            .map(|r| r.size)
            .collect::<Vec<_>>(),
        [4, 4, 8]
    );
    assert_eq!(one.kv_get_or_insert("origin", "x/1").unwrap(), "x/1");
    assert_eq!(two.kv_get_or_insert("origin", "y/2").unwrap(), "x/1");
}

/// One holder at a time: another takes the lease only when it ran out or
/// was released; the holder renews it.
pub fn a_lease_has_one_holder_until_it_runs_out(db: &impl Db) {
    let (one, two) = (db.open(), db.open());
    assert!(one.try_lease("ship", "p1", 100, 200).unwrap());
    assert!(!two.try_lease("ship", "p2", 150, 250).unwrap());
    assert!(one.try_lease("ship", "p1", 150, 300).unwrap());
    assert!(!two.try_lease("ship", "p2", 299, 400).unwrap());
    assert!(two.try_lease("ship", "p2", 301, 400).unwrap());
    assert!(!one.try_lease("ship", "p1", 302, 500).unwrap());
    two.release_lease("ship", "p2").unwrap();
    assert!(one.try_lease("ship", "p1", 303, 500).unwrap());
    // Another job's lease is another row.
    assert!(two.try_lease("other", "p2", 303, 500).unwrap());
    // The job's cursor moves only forward, and only for the lease's holder
    // while it holds it.
    assert_eq!(one.cursor("ship x").unwrap(), (0, 0));
    assert!(
        one.advance_cursor("ship x", 5, 500, "ship", "p1", 400)
            .unwrap()
    );
    assert!(
        !two.advance_cursor("ship x", 9, 900, "ship", "p2", 400)
            .unwrap()
    );
    assert!(
        !one.advance_cursor("ship x", 4, 400, "ship", "p1", 400)
            .unwrap()
    );
    assert!(
        !one.advance_cursor("ship x", 9, 900, "ship", "p1", 501)
            .unwrap()
    );
    assert_eq!(two.cursor("ship x").unwrap(), (5, 500));
    two.reset_cursor("ship x", 3).unwrap();
    assert_eq!(one.cursor("ship x").unwrap(), (3, 0));
}

fn session_row(id: &str, owner: &str, now: u64) -> airlock_store::SessionRow {
    airlock_store::SessionRow {
        id: id.to_owned(),
        owner: owner.to_owned(),
        user: Some("u".to_owned()),
        agent: None,
        profile: None,
        authority: "{}".to_owned(),
        authority_hash: "sha256:00".to_owned(),
        labels: "{}".to_owned(),
        status: airlock_store::SessionStatus::Open,
        created_ms: now,
        expires_ms: now + 10_000,
        idle_ttl_ms: 1_000,
        last_used_ms: now,
        ended_ms: None,
        end_reason: None,
        worktree: None,
    }
}

/// Sessions: at most `max_open` open per owner, ended once (closed or
/// expired), overdue by their absolute or their idle end, each change an
/// event of the feed.
pub fn sessions_open_end_once_and_fall_due(db: &dyn Db) {
    use airlock_store::SessionStatus;
    let store = db.open();
    assert!(
        store
            .insert_session(&session_row("ses-a", "o1", 1000), 2)
            .unwrap()
    );
    assert!(
        store
            .insert_session(&session_row("ses-b", "o1", 1000), 2)
            .unwrap()
    );
    assert!(
        !store
            .insert_session(&session_row("ses-c", "o1", 1000), 2)
            .unwrap()
    );
    assert!(
        store
            .insert_session(&session_row("ses-d", "o2", 1000), 2)
            .unwrap()
    );
    assert_eq!(store.sessions(Some("o1"), true, 10).unwrap().len(), 2);
    assert_eq!(store.sessions(None, true, 10).unwrap().len(), 3);
    assert_eq!(store.next_session_end().unwrap(), Some(2000));
    // Used at 1500: its idle end moves to 2500; the others' stay at 2000.
    assert!(store.touch_session("ses-a", 1500).unwrap());
    let overdue: Vec<String> = store
        .overdue_sessions(2000)
        .unwrap()
        .into_iter()
        .map(|row| row.id)
        .collect();
    assert_eq!(overdue, ["ses-b", "ses-d"]);
    let closed = store
        .end_session("ses-b", SessionStatus::Closed, Some("done"), 1800)
        .unwrap()
        .unwrap();
    assert_eq!(
        (closed.status, closed.ended_ms, closed.end_reason.as_deref()),
        (SessionStatus::Closed, Some(1800), Some("done"))
    );
    // Once only.
    assert!(
        store
            .end_session("ses-b", SessionStatus::Expired, None, 1900)
            .unwrap()
            .is_none()
    );
    assert!(!store.touch_session("ses-b", 1900).unwrap());
    assert_eq!(store.sessions(Some("o1"), true, 10).unwrap().len(), 1);
    assert_eq!(store.sessions(Some("o1"), false, 10).unwrap().len(), 2);
    let kinds: Vec<&str> = store
        .events_after(0, 100)
        .unwrap()
        .iter()
        .map(|event| event.kind.as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "session_opened",
            "session_opened",
            "session_opened",
            "session_ended"
        ]
    );
}
