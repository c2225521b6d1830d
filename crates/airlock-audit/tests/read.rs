//! Reading the log back: query filters, tail and follow.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs::OpenOptions;
use std::io::Write as _;

use airlock_audit::{AuditLog, Follower, Query, query, tail_lines};
use common::{lines, record};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn log_with_decisions() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (log, _) = AuditLog::open(&path, None, None).unwrap();
    let events = [
        (
            "2026-11-22T10:00:00.000Z",
            "hitl_decision",
            "deny",
            3200,
            false,
        ),
        (
            "2026-11-22T11:00:00.000Z",
            "hitl_decision",
            "approve",
            100,
            true,
        ),
        (
            "2026-11-22T12:00:00.000Z",
            "hitl_timeout",
            "timeout",
            120_000,
            false,
        ),
        (
            "2026-11-22T13:00:00.000Z",
            "hitl_decision",
            "deny",
            50,
            false,
        ),
        ("2026-11-22T14:00:00.000Z", "read_file", "allow", 1, false),
    ];
    for (ts, event, decision, duration_ms, created) in events {
        log.append(record(
            event,
            &[
                ("ts", json!(ts)),
                ("decision", json!(decision)),
                ("duration_ms", json!(duration_ms)),
                ("created", json!(created)),
            ],
        ))
        .unwrap();
    }
    (dir, path)
}

/// The seqs of the records `query` finds.
fn check(
    path: &std::path::Path,
    event_type: Option<&str>,
    filters: &[(&str, &str)],
    since: Option<&str>,
) -> Vec<u64> {
    let wanted = Query {
        event_type: event_type.map(str::to_owned),
        filters: filters
            .iter()
            .map(|(field, value)| ((*field).to_owned(), (*value).to_owned()))
            .collect(),
        since: since.map(str::to_owned),
    };
    query(path, &wanted)
        .unwrap()
        .iter()
        .map(|record| record["seq"].as_u64().unwrap())
        .collect()
}

#[test]
fn query_filters_by_event_type_fields_and_time() {
    let (_dir, path) = log_with_decisions();
    assert_eq!(check(&path, None, &[], None), [1, 2, 3, 4, 5]);
    assert_eq!(check(&path, Some("hitl_decision"), &[], None), [1, 2, 4]);
    assert_eq!(
        check(&path, Some("hitl_decision"), &[("decision", "deny")], None),
        [1, 4]
    );
    assert_eq!(check(&path, None, &[("duration_ms", "3200")], None), [1]);
    assert_eq!(check(&path, None, &[("created", "true")], None), [2]);
    assert_eq!(
        check(
            &path,
            None,
            &[("decision", "deny"), ("created", "false")],
            None
        ),
        [1, 4]
    );
    assert_eq!(
        check(&path, None, &[("no_such_field", "x")], None),
        Vec::<u64>::new()
    );
    assert_eq!(
        check(
            &path,
            Some("hitl_decision"),
            &[],
            Some("2026-11-22T11:00:00.000Z")
        ),
        [2, 4]
    );
    assert_eq!(check(&path, Some("undo"), &[], None), Vec::<u64>::new());
}

#[test]
fn query_returns_whole_records_and_skips_lines_that_are_none() {
    let (_dir, path) = log_with_decisions();
    let found = query(
        &path,
        &Query {
            event_type: Some("hitl_timeout".into()),
            ..Query::default()
        },
    )
    .unwrap();
    assert_eq!(found.len(), 1);
    let names: Vec<&str> = found[0].keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "seq",
            "ts",
            "event",
            "decision",
            "duration_ms",
            "created",
            "prev_hash",
            "event_hash"
        ]
    );
    assert_eq!(found[0]["decision"], Value::from("timeout"));

    // A torn last line is not a record, and neither is a broken complete
    // line: a query answers with the records (verify is what reports them).
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"{\"seq\":6").unwrap();
    assert_eq!(check(&path, None, &[], None).len(), 5);
    file.write_all(b" oops\n\n\x00\n").unwrap();
    assert_eq!(query(&path, &Query::default()).unwrap().len(), 5);
}

#[test]
fn tail_gives_the_last_lines_and_follow_gives_new_complete_lines() {
    let (_dir, path) = log_with_decisions();
    let all = lines(&path);
    let (last_two, offset) = tail_lines(&path, 2).unwrap();
    assert_eq!(last_two, all[3..]);
    assert_eq!(tail_lines(&path, 0).unwrap(), (Vec::new(), offset));
    assert_eq!(tail_lines(&path, 50).unwrap().0, all);

    let mut follower = Follower::open(&path, offset).unwrap();
    assert_eq!(follower.poll().unwrap(), Vec::<String>::new());
    let (log, _) = AuditLog::open(&path, None, None).unwrap();
    log.append(record("undo", &[])).unwrap();
    log.append(record("grant_used", &[])).unwrap();
    let new = follower.poll().unwrap();
    assert_eq!(new, lines(&path)[5..]);
    assert!(new[1].contains("\"grant_used\""));

    // A line still being written is held back until its newline arrives.
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"{\"partial\":").unwrap();
    assert_eq!(follower.poll().unwrap(), Vec::<String>::new());
    file.write_all(b"1}\n").unwrap();
    assert_eq!(follower.poll().unwrap(), ["{\"partial\":1}"]);
    assert_eq!(follower.offset(), std::fs::metadata(&path).unwrap().len());

    let mut from_start = Follower::open(&path, 0).unwrap();
    assert_eq!(from_start.poll().unwrap().len(), 8);
}
