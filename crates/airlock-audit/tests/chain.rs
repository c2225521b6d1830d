//! The hash chain end to end: append, reopen, recover, verify, and the tampering
//! verify must name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_audit::{
    AuditError, AuditLog, Durability, Head, HeadStore, Problem, ProblemKind, Recovery,
    TORN_LINE_EVENT, TRUNCATED_TAIL_EVENT, TornLine, TruncatedTail, ZERO_HASH, verify,
};
use airlock_core::canonical::{sha256_hex, to_canonical_string};
use common::{MemoryHeadStore, lines, record, records, write_lines};
use pretty_assertions::assert_eq;
use serde_json::{Map, Value, json};

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    Fixture { _dir: dir, path }
}

/// Appends `count` read_file events and returns what the log said about the last.
fn append_events(log: &AuditLog, count: u64) -> Vec<airlock_audit::Appended> {
    (0..count)
        .map(|index| {
            log.append(record(
                "read_file",
                &[
                    ("path", json!(format!("src/{index}.rs"))),
                    ("index", json!(index)),
                ],
            ))
            .unwrap()
        })
        .collect()
}

fn open(path: &Path) -> AuditLog {
    let (log, recovery) = AuditLog::open(path, None, None).unwrap();
    assert!(recovery.is_clean(), "{recovery:?}");
    log
}

/// Where the 1-based `line` of the log starts (one past the end for the line
/// after the last).
fn offset_of_line(path: &Path, line: u64) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    let newlines = bytes.iter().enumerate().filter(|(_, byte)| **byte == b'\n');
    match line {
        1 => 0,
        line => newlines
            .map(|(at, _)| at as u64 + 1)
            .nth(line as usize - 2)
            .unwrap_or(bytes.len() as u64),
    }
}

/// The problem verify reports for `path` without key or stored head.
fn problem(path: &Path) -> Problem {
    let report = verify(path, None, None).unwrap();
    report.problem.expect("verify should fail")
}

#[test]
fn a_chain_of_many_events_verifies() {
    let fixture = fixture();
    let log = open(&fixture.path);
    let appended = append_events(&log, 1000);
    let report = verify(&fixture.path, None, None).unwrap();
    assert_eq!(report.problem, None);
    assert_eq!(report.records, 1000);
    let last = appended.last().unwrap();
    assert_eq!(
        report.head,
        Some(Head {
            seq: 1000,
            event_hash: last.event_hash.clone()
        })
    );
    let records = records(&fixture.path);
    assert_eq!(records[0]["prev_hash"], ZERO_HASH);
    for (index, (written, appended)) in records.iter().zip(&appended).enumerate() {
        assert_eq!(written["seq"], index as u64 + 1);
        assert_eq!(written["prev_hash"], appended.prev_hash.as_str());
        assert_eq!(written["event_hash"], appended.event_hash.as_str());
        assert_eq!(written["ts"], appended.ts.as_str());
        if index > 0 {
            assert_eq!(written["prev_hash"], records[index - 1]["event_hash"]);
        }
        let names: Vec<&str> = written.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "seq",
                "ts",
                "event",
                "path",
                "index",
                "prev_hash",
                "event_hash"
            ]
        );
    }
}

#[test]
fn event_hash_is_sha256_of_prev_hash_then_rfc8785_record() {
    let fixture = fixture();
    let log = open(&fixture.path);
    let first = log
        .append(record(
            "hitl_decision",
            &[
                ("ts", json!("2026-11-22T12:00:00.123Z")),
                ("decision", json!("deny")),
                ("duration_ms", json!(3200)),
            ],
        ))
        .unwrap();
    // Written out by hand: members sorted, no spaces, `seq` and `prev_hash` included.
    let canonical = format!(
        r#"{{"decision":"deny","duration_ms":3200,"event":"hitl_decision","prev_hash":"{ZERO_HASH}","seq":1,"ts":"2026-11-22T12:00:00.123Z"}}"#
    );
    assert_eq!(
        first.event_hash,
        sha256_hex(format!("{ZERO_HASH}{canonical}").as_bytes())
    );
    let second = log
        .append(record(
            "tool_call",
            &[("ts", json!("2026-11-22T12:00:01.000Z"))],
        ))
        .unwrap();
    let mut without_hash: Map<String, Value> = records(&fixture.path)[1].clone();
    without_hash.remove("event_hash");
    let canonical = to_canonical_string(&Value::Object(without_hash));
    assert_eq!(
        second.event_hash,
        sha256_hex(format!("{}{canonical}", first.event_hash).as_bytes())
    );
}

/// The line format and the hashes are a wire format: this pins them. Run with
/// `UPDATE_EXPECT=1` to rewrite the fixture after a deliberate change.
#[test]
fn the_line_format_is_stable() {
    let fixture = fixture();
    let log = open(&fixture.path);
    let ts = ("ts", json!("2026-11-22T12:00:00.123Z"));
    log.append(record(
        "config_loaded",
        &[ts.clone(), ("path", json!("airlock.yaml"))],
    ))
    .unwrap();
    log.append(record(
        "write_file_propose",
        &[
            ts.clone(),
            ("tool", json!("write_file")),
            ("path", json!("src/main.rs")),
            ("risk", json!("medium")),
            (
                "params",
                json!({"path": "src/main.rs", "content": "fn main() {}\n", "ratio": 0.5}),
            ),
            ("note", json!("ünïcödé \u{1F600} \"quoted\"")),
        ],
    ))
    .unwrap();
    let (keyed, _) = AuditLog::open(
        &fixture.path.with_extension("hmac"),
        Some(b"k".to_vec()),
        None,
    )
    .unwrap();
    keyed.append(record("config_loaded", &[ts])).unwrap();
    let actual = format!(
        "{}{}",
        fs::read_to_string(&fixture.path).unwrap(),
        fs::read_to_string(fixture.path.with_extension("hmac")).unwrap()
    );
    let expected_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lines_v1.jsonl");
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        fs::write(&expected_path, &actual).unwrap();
    }
    assert_eq!(actual, fs::read_to_string(&expected_path).unwrap());
}

#[test]
fn the_chain_continues_across_reopen() {
    let fixture = fixture();
    let first_run = append_events(&open(&fixture.path), 3);
    let (log, recovery) = AuditLog::open(&fixture.path, None, None).unwrap();
    assert_eq!(
        recovery,
        Recovery {
            torn_line: None,
            truncated_tail: None,
            head: Some(Head {
                seq: 3,
                event_hash: first_run[2].event_hash.clone()
            }),
        }
    );
    let next = log.append(record("tool_call", &[])).unwrap();
    assert_eq!(next.seq, 4);
    assert_eq!(next.prev_hash, first_run[2].event_hash);
    let report = verify(&fixture.path, None, None).unwrap();
    assert_eq!((report.records, report.problem), (4, None));
}

#[test]
fn tampering_with_a_middle_line_names_its_seq() {
    let fixture = fixture();
    append_events(&open(&fixture.path), 10);
    let mut lines = lines(&fixture.path);
    lines[4] = lines[4].replace("src/4.rs", "src/x.rs");
    write_lines(&fixture.path, &lines);
    let problem = problem(&fixture.path);
    assert_eq!((problem.seq, problem.line), (5, 5));
    assert!(
        matches!(problem.kind, ProblemKind::HashMismatch { .. }),
        "{problem}"
    );
    assert_eq!(verify(&fixture.path, None, None).unwrap().records, 4);
}

#[test]
fn a_tampered_line_with_a_recomputed_hash_is_caught_by_the_next_line() {
    let fixture = fixture();
    append_events(&open(&fixture.path), 10);
    let mut records = records(&fixture.path);
    records[4].insert("path".into(), json!("src/x.rs"));
    records[4].remove("event_hash");
    let canonical = to_canonical_string(&Value::Object(records[4].clone()));
    let forged =
        sha256_hex(format!("{}{canonical}", records[4]["prev_hash"].as_str().unwrap()).as_bytes());
    records[4].insert("event_hash".into(), json!(forged));
    let lines: Vec<String> = records
        .iter()
        .map(|record| serde_json::to_string(record).unwrap())
        .collect();
    write_lines(&fixture.path, &lines);
    let problem = problem(&fixture.path);
    assert_eq!(problem.seq, 6);
    assert!(
        matches!(problem.kind, ProblemKind::PrevHashMismatch { .. }),
        "{problem}"
    );
}

#[test]
fn deleting_a_middle_line_names_the_missing_seq() {
    let fixture = fixture();
    append_events(&open(&fixture.path), 10);
    let mut lines = lines(&fixture.path);
    lines.remove(6);
    write_lines(&fixture.path, &lines);
    assert_eq!(
        problem(&fixture.path),
        Problem {
            seq: 7,
            line: 7,
            offset: offset_of_line(&fixture.path, 7),
            kind: ProblemKind::SeqMismatch { found: 8 }
        }
    );
}

#[test]
fn swapping_two_lines_is_caught() {
    let fixture = fixture();
    append_events(&open(&fixture.path), 10);
    let mut lines = lines(&fixture.path);
    lines.swap(2, 3);
    write_lines(&fixture.path, &lines);
    assert_eq!(
        problem(&fixture.path),
        Problem {
            seq: 3,
            line: 3,
            offset: offset_of_line(&fixture.path, 3),
            kind: ProblemKind::SeqMismatch { found: 4 }
        }
    );
}

#[test]
fn a_line_that_is_not_json_names_the_seq_expected_there() {
    let fixture = fixture();
    append_events(&open(&fixture.path), 5);
    let mut lines = lines(&fixture.path);
    lines[2] = "{\"seq\": 3, oops".to_owned();
    write_lines(&fixture.path, &lines);
    let problem = problem(&fixture.path);
    assert_eq!((problem.seq, problem.line), (3, 3));
    assert!(
        matches!(problem.kind, ProblemKind::BadJson { .. }),
        "{problem}"
    );
}

#[test]
fn truncating_the_tail_behind_the_stored_head_fails_verification() {
    let fixture = fixture();
    let store = Arc::new(MemoryHeadStore::default());
    let (log, _) = AuditLog::open(&fixture.path, None, Some(store.clone())).unwrap();
    let appended = append_events(&log, 10);
    drop(log);
    let stored = store.head().unwrap();
    assert_eq!(
        stored,
        Head {
            seq: 10,
            event_hash: appended[9].event_hash.clone()
        }
    );
    let mut lines = lines(&fixture.path);
    lines.truncate(7);
    write_lines(&fixture.path, &lines);

    // Without the stored head the shorter chain is self-consistent...
    assert_eq!(verify(&fixture.path, None, None).unwrap().problem, None);
    // ...with it, the cut is found.
    let report = verify(&fixture.path, None, Some(&stored)).unwrap();
    assert_eq!(
        report.problem,
        Some(Problem {
            seq: 8,
            line: 8,
            offset: offset_of_line(&fixture.path, 8),
            kind: ProblemKind::TruncatedTail {
                stored: stored.clone(),
                found: None
            }
        })
    );
    assert_eq!(report.records, 7);

    // Opening the log reports it too, and the caller records it in the log.
    let (log, recovery) = AuditLog::open(&fixture.path, None, Some(store.clone())).unwrap();
    let log_head = Head {
        seq: 7,
        event_hash: appended[6].event_hash.clone(),
    };
    assert_eq!(
        recovery.truncated_tail,
        Some(TruncatedTail {
            stored: stored.clone(),
            log_head: Some(log_head.clone())
        })
    );
    for record in recovery.records() {
        log.append(record).unwrap();
    }
    let written = records(&fixture.path);
    assert_eq!(written[7]["event"], TRUNCATED_TAIL_EVENT);
    assert_eq!(written[7]["stored_seq"], 10);
    assert_eq!(written[7]["log_seq"], 7);
}

#[test]
fn rewriting_the_tail_is_caught_by_the_stored_head() {
    let fixture = fixture();
    let store = Arc::new(MemoryHeadStore::default());
    let (log, _) = AuditLog::open(&fixture.path, None, Some(store.clone())).unwrap();
    append_events(&log, 10);
    drop(log);
    let stored = store.head().unwrap();
    let mut lines = lines(&fixture.path);
    lines.truncate(7);
    write_lines(&fixture.path, &lines);
    // Someone appends three other records without the store: seq 10 exists again.
    append_events(&open(&fixture.path), 3);
    let report = verify(&fixture.path, None, Some(&stored)).unwrap();
    let problem = report.problem.unwrap();
    assert_eq!(problem.seq, 10);
    let ProblemKind::TruncatedTail {
        found: Some(found), ..
    } = &problem.kind
    else {
        panic!("{problem}")
    };
    assert_ne!(*found, stored.event_hash);
}

#[test]
fn a_stored_head_behind_the_log_is_fine() {
    let fixture = fixture();
    let appended = append_events(&open(&fixture.path), 5);
    let stored = Head {
        seq: 3,
        event_hash: appended[2].event_hash.clone(),
    };
    assert_eq!(
        verify(&fixture.path, None, Some(&stored)).unwrap().problem,
        None
    );
    let (_, recovery) = AuditLog::open(
        &fixture.path,
        None,
        Some(Arc::new(MemoryHeadStore::with(stored))),
    )
    .unwrap();
    assert!(recovery.is_clean());
}

#[test]
fn a_torn_last_line_is_moved_aside_and_reported() {
    let fixture = fixture();
    append_events(&open(&fixture.path), 3);
    let torn = br#"{"seq":4,"ts":"2026-11-22T12:00:00.123Z","event":"wri"#;
    let mut bytes = fs::read(&fixture.path).unwrap();
    bytes.extend_from_slice(torn);
    fs::write(&fixture.path, &bytes).unwrap();

    assert_eq!(
        problem(&fixture.path),
        Problem {
            seq: 4,
            line: 4,
            offset: offset_of_line(&fixture.path, 4),
            kind: ProblemKind::TornLastLine {
                bytes: torn.len() as u64
            }
        }
    );

    let (log, recovery) = AuditLog::open(&fixture.path, None, None).unwrap();
    let TornLine { moved_to, bytes } = recovery.torn_line.clone().expect("torn line reported");
    assert_eq!(bytes, torn.len() as u64);
    assert_eq!(fs::read(&moved_to).unwrap(), torn);
    let name = moved_to.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("audit.jsonl.torn-"), "{name}");
    assert_eq!(recovery.head.as_ref().map(|head| head.seq), Some(3));
    assert_eq!(verify(&fixture.path, None, None).unwrap().problem, None);

    for record in recovery.records() {
        assert_eq!(log.append(record).unwrap().seq, 4);
    }
    let written = records(&fixture.path);
    assert_eq!(written[3]["event"], TORN_LINE_EVENT);
    assert_eq!(written[3]["bytes"], torn.len());
    assert_eq!(written[3]["moved_to"], moved_to.to_str().unwrap());
    let report = verify(&fixture.path, None, None).unwrap();
    assert_eq!((report.records, report.problem), (4, None));
}

#[test]
fn a_file_that_is_only_a_torn_line_starts_a_new_chain() {
    let fixture = fixture();
    fs::write(&fixture.path, b"{\"seq\":1,").unwrap();
    let (log, recovery) = AuditLog::open(&fixture.path, None, None).unwrap();
    assert_eq!(recovery.torn_line.map(|torn| torn.bytes), Some(9));
    assert_eq!(recovery.head, None);
    assert_eq!(log.append(record("tool_call", &[])).unwrap().seq, 1);
}

#[test]
fn a_torn_line_left_by_another_writer_is_recorded_by_the_running_log() {
    let fixture = fixture();
    let log = open(&fixture.path);
    append_events(&log, 3);
    // Another process died mid-write while this log was open.
    let mut bytes = fs::read(&fixture.path).unwrap();
    bytes.extend_from_slice(b"{\"seq\":4,\"ev");
    fs::write(&fixture.path, &bytes).unwrap();
    let appended = log.append(record("tool_call", &[])).unwrap();
    assert_eq!(appended.seq, 5);
    let written = records(&fixture.path);
    assert_eq!(written[3]["event"], TORN_LINE_EVENT);
    assert_eq!(written[3]["bytes"], 12);
    let moved_to = PathBuf::from(written[3]["moved_to"].as_str().unwrap());
    assert_eq!(fs::read(moved_to).unwrap(), b"{\"seq\":4,\"ev");
    let report = verify(&fixture.path, None, None).unwrap();
    assert_eq!((report.records, report.problem), (5, None));
}

#[test]
fn an_hmac_chain_verifies_only_with_its_key() {
    let fixture = fixture();
    let key = b"a key of the deployment".to_vec();
    let (log, _) = AuditLog::open(&fixture.path, Some(key.clone()), None).unwrap();
    let appended = append_events(&log, 5);
    assert!(appended[0].event_hash.starts_with("hmac-sha256:"));
    assert_eq!(appended[0].prev_hash, ZERO_HASH);

    let report = verify(&fixture.path, Some(&key), None).unwrap();
    assert_eq!((report.records, report.problem), (5, None));
    assert_eq!(problem(&fixture.path).kind, ProblemKind::KeyRequired);
    let wrong = verify(&fixture.path, Some(b"another key"), None)
        .unwrap()
        .problem
        .unwrap();
    assert_eq!(wrong.seq, 1);
    assert!(
        matches!(wrong.kind, ProblemKind::HashMismatch { .. }),
        "{wrong}"
    );

    // Without the key nobody can forge a record: a plain sha256 one is refused.
    let plain = fixture.path.with_extension("plain");
    append_events(&open(&plain), 1);
    assert_eq!(
        verify(&plain, Some(&key), None)
            .unwrap()
            .problem
            .map(|problem| problem.kind),
        Some(ProblemKind::KeyNotUsed)
    );
}

#[test]
fn the_log_sets_seq_prev_hash_and_event_hash_and_keeps_a_given_ts() {
    let fixture = fixture();
    let log = open(&fixture.path);
    let appended = log
        .append(record(
            "undo",
            &[
                ("seq", json!(99)),
                ("prev_hash", json!("sha256:forged")),
                ("event_hash", json!("sha256:forged")),
                ("ts", json!("2026-01-01T00:00:00.000Z")),
            ],
        ))
        .unwrap();
    assert_eq!(
        (appended.seq, appended.ts.as_str()),
        (1, "2026-01-01T00:00:00.000Z")
    );
    let generated = log.append(record("undo", &[])).unwrap().ts;
    assert_eq!(
        generated.len(),
        "2026-11-22T12:00:00.123Z".len(),
        "{generated}"
    );
    assert!(
        generated.ends_with('Z') && generated.as_bytes()[10] == b'T',
        "{generated}"
    );
    assert_eq!(verify(&fixture.path, None, None).unwrap().problem, None);
}

#[test]
fn a_refused_record_writes_nothing_and_the_chain_goes_on() {
    let fixture = fixture();
    let log = open(&fixture.path);
    log.append(record("tool_call", &[])).unwrap();
    assert!(matches!(
        log.append(record("tool_call", &[("ts", json!(5))])),
        Err(AuditError::InvalidRecord { field: "ts", .. })
    ));
    assert_eq!(log.append(record("tool_call", &[])).unwrap().seq, 2);
    let report = verify(&fixture.path, None, None).unwrap();
    assert_eq!((report.records, report.problem), (2, None));
}

/// RFC 8785 reads numbers as doubles, and 18446744073709551614 and
/// 18446744073709551615 share one: integers a double does not hold are hashed as
/// written, so changing one by a unit (or past 64 bits) breaks the chain.
#[test]
fn changing_a_large_integer_by_one_is_caught() {
    let fixture = fixture();
    let log = open(&fixture.path);
    let large: Value = serde_json::from_str("18446744073709551615").unwrap();
    let small: Value = serde_json::from_str("-9007199254740993").unwrap();
    let edge: Value = serde_json::from_str("9007199254740992").unwrap();
    log.append(record(
        "tool_call",
        &[("n", large), ("m", small), ("k", edge)],
    ))
    .unwrap();
    log.append(record("tool_call", &[])).unwrap();
    assert_eq!(verify(&fixture.path, None, None).unwrap().problem, None);
    let original = fs::read_to_string(&fixture.path).unwrap();
    for (from, to) in [
        ("18446744073709551615", "18446744073709551614"),
        ("18446744073709551615", "18446744073709551616"),
        ("18446744073709551615", "18446744073709552000"),
        ("18446744073709551615", "1.8446744073709552e19"),
        ("-9007199254740993", "-9007199254740992"),
        ("-9007199254740993", "-9007199254740993.0"),
        // A whole number written as a fraction or with an exponent is still
        // that whole number, not the double nearest to it.
        ("9007199254740992", "9007199254740993.0"),
        ("9007199254740992", "9007199254740993e0"),
    ] {
        fs::write(&fixture.path, original.replacen(from, to, 1)).unwrap();
        let problem = problem(&fixture.path);
        assert_eq!(problem.seq, 1, "{from} -> {to}");
        assert!(
            matches!(problem.kind, ProblemKind::HashMismatch { .. }),
            "{from} -> {to}: {problem:?}"
        );
    }
}

/// A head store that cannot save.
struct Broken;

impl HeadStore for Broken {
    fn load_head(&self) -> Result<Option<Head>, airlock_audit::HeadStoreError> {
        Ok(None)
    }
    fn save_head(&self, _: &Head) -> Result<(), airlock_audit::HeadStoreError> {
        Err(airlock_audit::HeadStoreError::new(std::io::Error::other(
            "disk full",
        )))
    }
}

#[test]
fn a_failing_head_store_is_reported_and_the_record_stays() {
    let fixture = fixture();
    let (log, _) = AuditLog::open(&fixture.path, None, Some(Arc::new(Broken))).unwrap();
    let error = log.append(record("tool_call", &[])).unwrap_err();
    assert_eq!(
        error.to_string(),
        "event seq 1 is in the log, but the head store failed: disk full"
    );
    assert_eq!(verify(&fixture.path, None, None).unwrap().records, 1);
}

#[test]
fn a_bad_last_record_is_moved_aside_but_two_bad_lines_stop_appends() {
    // One bad complete last line (torn, then a newline; a blank line): moved
    // aside like a torn line, and the chain goes on.
    for bad in ["not json", "", "{\"seq\":3", "\u{feff}"] {
        let fixture = fixture();
        append_events(&open(&fixture.path), 2);
        let mut lines = lines(&fixture.path);
        lines.push(bad.to_owned());
        write_lines(&fixture.path, &lines);
        let (log, recovery) = AuditLog::open(&fixture.path, None, None).unwrap();
        let torn = recovery
            .torn_line
            .clone()
            .expect("the bad line is reported");
        assert_eq!(torn.bytes, bad.len() as u64 + 1, "{bad:?}");
        assert_eq!(
            std::fs::read(&torn.moved_to).unwrap(),
            format!("{bad}\n").as_bytes()
        );
        for record in recovery.records() {
            log.append(record).unwrap();
        }
        let report = verify(&fixture.path, None, None).unwrap();
        assert_eq!((report.records, report.problem), (3, None), "{bad:?}");
    }
    // Two: corruption, not a torn record. Refused, with its place, and the
    // log is left as it is.
    let fixture = fixture();
    append_events(&open(&fixture.path), 2);
    let mut lines = lines(&fixture.path);
    let offset: usize = lines.iter().map(|line| line.len() + 1).sum();
    lines.push("not json".to_owned());
    lines.push(String::new());
    write_lines(&fixture.path, &lines);
    let before = std::fs::read(&fixture.path).unwrap();
    match AuditLog::open(&fixture.path, None, None) {
        Err(AuditError::CorruptTail {
            line, offset: at, ..
        }) => {
            assert_eq!((line, at), (3, offset as u64));
        }
        other => panic!("opened: {:?}", other.map(|(_, recovery)| recovery)),
    }
    assert_eq!(std::fs::read(&fixture.path).unwrap(), before);
}

#[test]
fn an_empty_log_verifies_and_an_empty_key_is_refused() {
    let fixture = fixture();
    open(&fixture.path);
    let report = verify(&fixture.path, None, None).unwrap();
    assert_eq!(
        (report.records, report.head, report.problem),
        (0, None, None)
    );
    assert!(matches!(
        AuditLog::open(&fixture.path, Some(Vec::new()), None),
        Err(AuditError::InvalidKey(_))
    ));
    assert!(matches!(
        verify(&fixture.path.with_extension("missing"), None, None),
        Err(AuditError::Io { .. })
    ));
}

/// Builds a chain of `count` lines with the hash written out here from the spec, not
/// with the log's own code.
fn independent_chain(count: u64) -> Vec<String> {
    let mut prev_hash = ZERO_HASH.to_owned();
    (1..=count)
        .map(|seq| {
            let mut record = json!({
                "seq": seq,
                "ts": "2026-11-22T12:00:00.123Z",
                "event": "read_file",
                "path": format!("src/{seq}.rs"),
                "pad": "x".repeat(200),
                "prev_hash": prev_hash,
            });
            let canonical = to_canonical_string(&record);
            let event_hash = sha256_hex(format!("{prev_hash}{canonical}").as_bytes());
            record["event_hash"] = json!(event_hash);
            prev_hash = event_hash;
            serde_json::to_string(&record).unwrap()
        })
        .collect()
}

#[test]
fn a_large_log_verifies_across_blocks_and_cores_and_names_the_first_bad_seq() {
    let fixture = fixture();
    // About 9.5 MB: more than one 8 MiB read, split between the cores.
    let good = independent_chain(22_000);
    write_lines(&fixture.path, &good);
    let report = verify(&fixture.path, None, None).unwrap();
    assert_eq!((report.records, report.problem), (22_000, None));
    let last: Value = serde_json::from_str(&good[21_999]).unwrap();
    assert_eq!(
        report.head.unwrap().event_hash,
        last["event_hash"].as_str().unwrap()
    );

    let mut tampered = good.clone();
    tampered[18_000] = tampered[18_000].replace("src/18001.rs", "src/evil.rs");
    tampered[20_500] = tampered[20_500].replace("src/20501.rs", "src/evil.rs");
    write_lines(&fixture.path, &tampered);
    let first = problem(&fixture.path);
    assert_eq!((first.seq, first.line), (18_001, 18_001));
    assert!(
        matches!(first.kind, ProblemKind::HashMismatch { .. }),
        "{first}"
    );
    assert_eq!(verify(&fixture.path, None, None).unwrap().records, 18_000);

    let mut missing = good;
    missing.remove(21_000);
    write_lines(&fixture.path, &missing);
    assert_eq!(
        problem(&fixture.path),
        Problem {
            seq: 21_001,
            line: 21_001,
            offset: offset_of_line(&fixture.path, 21_001),
            kind: ProblemKind::SeqMismatch { found: 21_002 }
        }
    );
}

/// Polls `check` for up to five seconds.
fn eventually(mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    check()
}

#[test]
fn soon_records_are_written_at_once_and_their_head_saved_after_the_sync() {
    let fixture = fixture();
    let store = Arc::new(MemoryHeadStore::default());
    let (log, _) = AuditLog::open(&fixture.path, None, Some(store.clone())).unwrap();
    let soon: Vec<_> = (0..3)
        .map(|index| {
            log.append_with(
                record("read_file", &[("index", json!(index))]),
                Durability::Soon,
            )
            .unwrap()
        })
        .collect();
    // In the file (another process sees them) before any sync.
    assert_eq!(lines(&fixture.path).len(), 3);
    assert_eq!(verify(&fixture.path, None, None).unwrap().records, 3);
    // The flusher syncs them and saves their head.
    let expected = Head {
        seq: 3,
        event_hash: soon[2].event_hash.clone(),
    };
    assert!(eventually(|| store.head() == Some(expected.clone())));

    // A `Now` append syncs whatever is pending with it, before it returns.
    log.append_with(record("read_file", &[]), Durability::Soon)
        .unwrap();
    let now = log.append(record("write_file_apply", &[])).unwrap();
    assert_eq!(
        store.head(),
        Some(Head {
            seq: 5,
            event_hash: now.event_hash
        })
    );

    // Dropping the log syncs what is pending.
    let last = log
        .append_with(record("read_file", &[]), Durability::Soon)
        .unwrap();
    drop(log);
    assert_eq!(
        store.head(),
        Some(Head {
            seq: 6,
            event_hash: last.event_hash
        })
    );
    assert_eq!(
        verify(&fixture.path, None, store.head().as_ref())
            .unwrap()
            .problem,
        None
    );
}

#[test]
fn a_failed_background_sync_makes_the_next_append_sync_and_fail() {
    let fixture = fixture();
    let (log, _) = AuditLog::open(&fixture.path, None, Some(Arc::new(Broken))).unwrap();
    // The first `Soon` append returns before anything is synced or saved.
    log.append_with(record("read_file", &[]), Durability::Soon)
        .unwrap();
    // Once the flusher has failed, appends sync themselves, and report it.
    let mut error = None;
    assert!(eventually(|| {
        match log.append_with(record("read_file", &[]), Durability::Soon) {
            Ok(_) => false,
            Err(failed) => {
                error = Some(failed.to_string());
                true
            }
        }
    }));
    let error = error.unwrap();
    assert!(
        error.ends_with("is in the log, but the head store failed: disk full"),
        "{error}"
    );
    assert_eq!(verify(&fixture.path, None, None).unwrap().problem, None);
}
