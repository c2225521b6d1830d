//! Many appenders at once: threads sharing one log, several logs on one file, and
//! several processes. Every record must get its own `seq`, with no gap, and the chain
//! must verify.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use airlock_audit::{AuditLog, HeadStore, verify};
use common::{FileHeadStore, MemoryHeadStore, record, records};
use pretty_assertions::assert_eq;
use serde_json::json;

const CHILD_LOG: &str = "AIRLOCK_AUDIT_TEST_CHILD_LOG";
const CHILD_COUNT: &str = "AIRLOCK_AUDIT_TEST_CHILD_COUNT";
const CHILD_NAME: &str = "AIRLOCK_AUDIT_TEST_CHILD_NAME";
const THREADS_PER_PROCESS: usize = 3;

/// Appends `count` records from each of `threads` threads; returns every seq handed out.
fn append_from_threads(
    log: &Arc<AuditLog>,
    writer: &str,
    threads: usize,
    count: usize,
) -> Vec<u64> {
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            let log = Arc::clone(log);
            let writer = writer.to_owned();
            std::thread::spawn(move || {
                (0..count)
                    .map(|index| {
                        log.append(record(
                            "tool_call",
                            &[
                                ("writer", json!(writer)),
                                ("thread", json!(thread)),
                                ("index", json!(index)),
                            ],
                        ))
                        .unwrap()
                        .seq
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|handle| handle.join().unwrap())
        .collect()
}

fn assert_one_chain(path: &Path, expected_records: u64) {
    let report = verify(path, None, None).unwrap();
    assert_eq!((report.records, report.problem), (expected_records, None));
    let seqs: Vec<u64> = records(path)
        .iter()
        .map(|record| record["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=expected_records).collect::<Vec<_>>());
}

#[test]
fn threads_appending_concurrently_get_unique_consecutive_seqs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let store = Arc::new(MemoryHeadStore::default());
    let (log, _) = AuditLog::open(&path, None, Some(store.clone())).unwrap();
    let log = Arc::new(log);
    let mut seqs = append_from_threads(&log, "main", 8, 150);
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=1200).collect::<Vec<u64>>());
    assert_one_chain(&path, 1200);
    assert_eq!(store.head(), verify(&path, None, None).unwrap().head);
}

#[test]
fn two_logs_in_one_process_share_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let first = Arc::new(AuditLog::open(&path, None, None).unwrap().0);
    let second = Arc::new(AuditLog::open(&path, None, None).unwrap().0);
    let from_second = {
        let second = Arc::clone(&second);
        std::thread::spawn(move || append_from_threads(&second, "second", 4, 100))
    };
    let mut seqs = append_from_threads(&first, "first", 4, 100);
    seqs.extend(from_second.join().unwrap());
    let unique: BTreeSet<u64> = seqs.iter().copied().collect();
    assert_eq!(unique.len(), 800);
    assert_one_chain(&path, 800);
}

/// Not a test on its own: the body of each child process of
/// `processes_appending_concurrently_keep_one_chain`, which runs this test binary again
/// with the environment naming the log. Without that environment it does nothing.
#[test]
fn child_appender_process() {
    let (Some(path), Some(count), Some(name)) = (
        std::env::var_os(CHILD_LOG),
        std::env::var(CHILD_COUNT).ok(),
        std::env::var(CHILD_NAME).ok(),
    ) else {
        return;
    };
    let path = PathBuf::from(path);
    let store: Arc<dyn HeadStore> = Arc::new(FileHeadStore(path.with_extension("head")));
    let log = Arc::new(AuditLog::open(&path, None, Some(store)).unwrap().0);
    let seqs = append_from_threads(&log, &name, THREADS_PER_PROCESS, count.parse().unwrap());
    println!("seqs {}", serde_json::to_string(&seqs).unwrap());
}

#[test]
fn processes_appending_concurrently_keep_one_chain() {
    const PROCESSES: usize = 4;
    const PER_THREAD: usize = 60;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let (sender, receiver) = mpsc::channel();
    for process in 0..PROCESSES {
        let child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_appender_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_LOG, &path)
            .env(CHILD_COUNT, PER_THREAD.to_string())
            .env(CHILD_NAME, format!("process-{process}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let sender = sender.clone();
        std::thread::spawn(move || sender.send(child.wait_with_output()).unwrap());
    }
    drop(sender);
    // This process appends at the same time through its own log.
    let store: Arc<dyn HeadStore> = Arc::new(FileHeadStore(path.with_extension("head")));
    let log = Arc::new(AuditLog::open(&path, None, Some(store.clone())).unwrap().0);
    let mut seqs = append_from_threads(&log, "parent", THREADS_PER_PROCESS, PER_THREAD);
    for _ in 0..PROCESSES {
        let output = receiver
            .recv_timeout(Duration::from_secs(120))
            .expect("a child appender did not finish within two minutes")
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let line = stdout
            .lines()
            .find_map(|line| {
                line.split_once("seqs [")
                    .map(|(_, rest)| format!("[{rest}"))
            })
            .unwrap_or_else(|| panic!("the child did not run the appender: {stdout}"));
        seqs.extend(serde_json::from_str::<Vec<u64>>(&line).unwrap());
    }
    let total = ((PROCESSES + 1) * THREADS_PER_PROCESS * PER_THREAD) as u64;
    let unique: BTreeSet<u64> = seqs.iter().copied().collect();
    assert_eq!((seqs.len() as u64, unique.len() as u64), (total, total));
    assert_one_chain(&path, total);
    // Every process saved its head under the lock, so the store ends at the last one.
    assert_eq!(
        store.load_head().unwrap(),
        verify(&path, None, None).unwrap().head
    );
}
