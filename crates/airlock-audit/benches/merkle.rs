//! The Merkle checkpoints against DESIGN §12, measured in one run:
//!
//! - durable appends from 16 writers with checkpoints off and on (every
//!   1,000 records: the stored hashes caught up from the log, the log synced,
//!   the tree head signed, as the broker does), and the cost (target <= 10%);
//! - at 1,000,000 records: building the stored hashes from the log, an
//!   inclusion and a consistency proof (mean over random records), checking
//!   a whole log against a checkpoint offline, and walking the hash chain
//!   (target >= 1,000,000 records/s).
//!
//! The log lives under the target directory, on a real disk.
//!
//! Run: `cargo bench -p airlock-audit --bench merkle`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_audit::note::{Checkpoint, SigningKey};
use airlock_audit::{
    AuditLog, Checkpointer, Durability, FileLeaves, MerkleIndex, check_log, verify,
};
use serde_json::{Map, Value, json};

fn record(index: u64) -> Map<String, Value> {
    let value = json!({
        "event": "read_file",
        "tool": "read_file",
        "path": format!("src/module_{}/file_{index}.rs", index % 17),
        "session": "sess-6f1c2a9e",
        "user": "alice",
        "agent": "claude-code",
        "tool_call_id": format!("call-{index:08}"),
        "risk": "low",
        "decision": "allow",
        "decided_by": "policy",
        "status": "allowed",
        "base_hash": "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    });
    match value {
        Value::Object(map) => map,
        _ => unreachable!("the sample is an object"),
    }
}

fn signer(dir: &Path, name: &str) -> Checkpointer {
    let index = MerkleIndex::open(&dir.join(format!("{name}.merkle"))).unwrap();
    let key =
        SigningKey::load_or_create(&dir.join(format!("{name}.key")), "bench/airlock").unwrap();
    Checkpointer::new(index, key, "bench/airlock").unwrap()
}

/// Durable appends from `writers` threads for `duration`; with `every`,
/// the appender of every `every`-th record signs a checkpoint first.
fn appends(dir: &Path, name: &str, writers: usize, duration: Duration, every: Option<u64>) -> f64 {
    let path = dir.join(format!("{name}.jsonl"));
    let log = Arc::new(AuditLog::open(&path, None, None).unwrap().0);
    let signer = Arc::new(signer(dir, name));
    let previous: Arc<Mutex<Option<Checkpoint>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let signed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..writers)
        .map(|_| {
            let (log, stop, total, signer, previous, signed, path) = (
                log.clone(),
                stop.clone(),
                total.clone(),
                signer.clone(),
                previous.clone(),
                signed.clone(),
                path.clone(),
            );
            std::thread::spawn(move || {
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let appended = log.append(record(done)).unwrap();
                    done += 1;
                    if let Some(every) = every
                        && appended.seq.is_multiple_of(every)
                    {
                        // The append was durable: its sync covered every
                        // line before it, as the broker relies on.
                        let mut previous = previous.lock().unwrap();
                        let made = signer
                            .sign(
                                &mut FileLeaves { path: path.clone() },
                                Some(appended.seq),
                                previous.as_ref(),
                            )
                            .unwrap();
                        if previous
                            .as_ref()
                            .is_none_or(|old| old.size < made.checkpoint.size)
                        {
                            *previous = Some(made.checkpoint);
                        }
                        signed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                total.fetch_add(done, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.join().unwrap();
    }
    let rate = total.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
    if every.is_some() {
        assert!(signed.load(Ordering::Relaxed) > 0 || duration < Duration::from_secs(1));
    }
    rate
}

/// A log of `records` records, written through the log (synced soon).
fn build(dir: &Path, records: u64) -> std::path::PathBuf {
    let path = dir.join("big.jsonl");
    let log = Arc::new(AuditLog::open(&path, None, None).unwrap().0);
    let writers = 8u64;
    let handles: Vec<_> = (0..writers)
        .map(|writer| {
            let log = log.clone();
            std::thread::spawn(move || {
                for index in 0..records / writers {
                    log.append_with(record(index * writers + writer), Durability::Soon)
                        .unwrap();
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    log.flush();
    path
}

fn seconds(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

fn main() {
    let benching = std::env::args().any(|arg| arg == "--bench");
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let window = if benching {
        Duration::from_secs(3)
    } else {
        Duration::from_millis(200)
    };
    let rounds = if benching { 3 } else { 1 };
    let (every, writers) = (1_000u64, 16usize);
    println!(
        "\naudit append, durable, {writers} writers, {rounds} alternating rounds of {}s each, medians (target: checkpoints cost <= 10%)",
        window.as_secs_f64()
    );
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        off.push(appends(
            dir.path(),
            &format!("off{round}"),
            writers,
            window,
            None,
        ));
        on.push(appends(
            dir.path(),
            &format!("on{round}"),
            writers,
            window,
            Some(every),
        ));
    }
    let median = |rates: &mut Vec<f64>| {
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    };
    let (off, on) = (median(&mut off), median(&mut on));
    println!("{:>36} {off:>12.0} events/s", "checkpoints off");
    println!(
        "{:>36} {on:>12.0} events/s",
        format!("checkpoints every {every} records")
    );
    println!("{:>36} {:>11.1}%", "cost", (1.0 - on / off) * 100.0);

    let records: u64 = if benching { 1_000_000 } else { 2_000 };
    let path = build(dir.path(), records);
    let bytes = std::fs::metadata(&path).unwrap().len();
    println!("\n{records} records, {:.0} MB", bytes as f64 / 1e6);
    let signer = signer(dir.path(), "big");
    let start = Instant::now();
    let covered = signer
        .catch_up(&mut FileLeaves { path: path.clone() }, u64::MAX)
        .unwrap();
    let built = seconds(start);
    assert_eq!(covered, records);
    println!(
        "{:>36} {:>10.3} s  ({:.0} records/s)",
        "stored hashes built from the log",
        built,
        records as f64 / built
    );
    let signed = signer
        .sign(&mut FileLeaves { path: path.clone() }, None, None)
        .unwrap();

    let samples = if benching { 1_000u64 } else { 20 };
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut source = FileLeaves { path: path.clone() };
    let start = Instant::now();
    for _ in 0..samples {
        let leaf = random() % records;
        let proof = signer.inclusion(&mut source, leaf, records).unwrap();
        assert!(proof.len() <= 64);
    }
    let inclusion = seconds(start) / samples as f64;
    let start = Instant::now();
    for _ in 0..samples {
        let old = 1 + random() % (records - 1);
        signer.consistency(&mut source, old, records).unwrap();
    }
    let consistency = seconds(start) / samples as f64;
    let start = Instant::now();
    for _ in 0..samples {
        use airlock_audit::LeafSource as _;
        let seq = 1 + random() % records;
        assert!(source.line(seq).unwrap().is_some());
    }
    let lookup = seconds(start) / samples as f64;
    println!(
        "{:>36} {:>10.1} us",
        "inclusion proof (mean)",
        inclusion * 1e6
    );
    println!(
        "{:>36} {:>10.1} us",
        "consistency proof (mean)",
        consistency * 1e6
    );
    println!(
        "{:>36} {:>10.1} us",
        "a record's line found (mean)",
        lookup * 1e6
    );

    let verifier = signer.key().verifier();
    let start = Instant::now();
    let (checkpoint, _) = check_log(
        &mut FileLeaves { path: path.clone() },
        &signed.note,
        &verifier,
    )
    .unwrap();
    let checked = seconds(start);
    assert_eq!(checkpoint.size, records);
    println!(
        "{:>36} {:>10.3} s  ({:.0} records/s)",
        "log checked against a checkpoint",
        checked,
        records as f64 / checked
    );
    let start = Instant::now();
    let report = verify(&path, None, None).unwrap();
    let walked = seconds(start);
    assert_eq!((report.records, report.problem), (records, None));
    println!(
        "{:>36} {:>10.3} s  ({:.0} records/s; target >= 1,000,000)",
        "hash chain verified",
        walked,
        records as f64 / walked
    );
}
