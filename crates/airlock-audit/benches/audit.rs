//! Audit log speed against DESIGN §12: durable appends per second with 1, 4, 8, 16 and
//! 32 concurrent writer threads (target >= 20,000 events/s with several writers),
//! verify throughput over 200,000 events (target >= 500,000 events/s), and SHA-256
//! throughput over a 64 MiB buffer (target >= 1 GB/s). Criterion measures the
//! per-record cost of canonicalizing and hashing and verify over 20,000 records; the
//! rest is timed directly and printed.
//!
//! Durable appends are bound by the disk's `fdatasync` latency: one writer pays one
//! sync per record, and group commit lets concurrent writers share one, so the figure
//! grows with the number of writers.
//!
//! The log lives under the target directory, on a real disk, so every append pays a
//! real `fdatasync`.
//!
//! Run: `cargo bench -p airlock-audit --bench audit`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use airlock_audit::{AuditLog, ZERO_HASH, verify};
use airlock_core::canonical;
use criterion::{Criterion, Throughput};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// A record shaped like DESIGN §8's example (about 600 bytes as a line).
fn sample_record(index: u64) -> Map<String, Value> {
    let record = json!({
        "event": "write_file_propose",
        "tool": "write_file",
        "path": format!("src/module_{}/file_{index}.rs", index % 17),
        "session": "sess-6f1c2a9e",
        "user": "alice",
        "agent": "claude-code",
        "tool_call_id": format!("call-{index:08}"),
        "hitl_id": "hitl-4b8e1f0c-1d2e-4f6a-9b3c-2a1d0e9f8c7b",
        "risk": "medium",
        "decision": "approve",
        "decided_by": "human",
        "channel": "terminal",
        "duration_ms": 3200 + index % 1000,
        "created": false,
        "base_hash": "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "patch_hash": "sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752",
        "params": {"path": "src/main.rs", "mode": "overwrite", "content": {"truncated": "fn main() {\n    println!(\"hello\");\n}\n", "sha256": "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae", "len": 4096}},
        "status": "hitl_required",
    });
    match record {
        Value::Object(map) => map,
        _ => unreachable!("the sample is an object"),
    }
}

fn bench(criterion: &mut Criterion, benching: bool) {
    let mut record = sample_record(1);
    record.insert("seq".into(), json!(1));
    record.insert("ts".into(), json!("2026-11-22T12:00:00.123Z"));
    record.insert("prev_hash".into(), json!(ZERO_HASH));
    let mut buffer = Vec::with_capacity(4096);
    criterion.bench_function("record/canonicalize_and_hash", |bencher| {
        bencher.iter(|| {
            buffer.clear();
            buffer.extend_from_slice(ZERO_HASH.as_bytes());
            canonical::write_canonical_object(black_box(&record), &mut buffer);
            black_box(Sha256::digest(&buffer))
        });
    });
    verify_bench(criterion, if benching { 20_000 } else { 200 });
}

/// Criterion's view of verify over a log of `events` records (the printed figure
/// below uses 200,000).
fn verify_bench(criterion: &mut Criterion, events: u64) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = build_log(dir.path(), "criterion.jsonl", events);
    let mut group = criterion.benchmark_group("verify");
    group.throughput(Throughput::Elements(events));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));
    group.bench_function(format!("{events}_events"), |bencher| {
        bencher.iter(|| {
            let report = verify(&path, None, None).unwrap();
            assert_eq!(report.records, events);
        });
    });
    group.finish();
}

/// Appends from `threads` threads for `duration` (or `count_per_thread` records each
/// when given) and returns (events, seconds).
fn durable_appends(
    dir: &Path,
    threads: usize,
    duration: Duration,
    count_per_thread: Option<u64>,
) -> (u64, f64) {
    let path = dir.join(format!("append-{threads}.jsonl"));
    let log = Arc::new(AuditLog::open(&path, None, None).unwrap().0);
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (log, stop, total) = (Arc::clone(&log), Arc::clone(&stop), Arc::clone(&total));
            std::thread::spawn(move || {
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed)
                    && count_per_thread.is_none_or(|count| done < count)
                {
                    log.append(sample_record(done)).unwrap();
                    done += 1;
                }
                total.fetch_add(done, Ordering::Relaxed);
            })
        })
        .collect();
    if count_per_thread.is_none() {
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
    }
    for handle in handles {
        handle.join().unwrap();
    }
    let seconds = start.elapsed().as_secs_f64();
    let events = total.load(Ordering::Relaxed);
    let report = verify(&path, None, None).unwrap();
    assert_eq!((report.records, report.problem), (events, None));
    std::fs::remove_file(&path).unwrap();
    (events, seconds)
}

/// Builds a log of `events` records through the real append path, with many writers
/// so that group commit keeps it quick.
fn build_log(dir: &Path, name: &str, events: u64) -> std::path::PathBuf {
    let path = dir.join(name);
    let log = Arc::new(AuditLog::open(&path, None, None).unwrap().0);
    let writers = 64u64;
    let handles: Vec<_> = (0..writers)
        .map(|writer| {
            let log = Arc::clone(&log);
            let share = events / writers + u64::from(writer < events % writers);
            std::thread::spawn(move || {
                for index in 0..share {
                    log.append(sample_record(index * writers + writer)).unwrap();
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    path
}

/// Times verify over a log of `events` records; returns the best time and the size.
fn verify_throughput(dir: &Path, events: u64, rounds: usize) -> (f64, u64) {
    let path = build_log(dir, "verify.jsonl", events);
    let bytes = std::fs::metadata(&path).unwrap().len();
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let start = Instant::now();
        let report = verify(&path, None, None).unwrap();
        best = best.min(start.elapsed().as_secs_f64());
        assert_eq!((report.records, report.problem), (events, None));
    }
    (best, bytes)
}

fn sha256_throughput(bytes: usize, rounds: usize) -> f64 {
    let buffer: Vec<u8> = (0..bytes).map(|index| (index * 31 % 251) as u8).collect();
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let start = Instant::now();
        black_box(Sha256::digest(black_box(&buffer)));
        best = best.min(start.elapsed().as_secs_f64());
    }
    bytes as f64 / best / 1e9
}

fn figures(benching: bool) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    println!("\naudit append, durable (fdatasync before append returns), one log, group commit");
    println!("(target: >= 20,000 events/s with several writers)");
    println!("{:>8} {:>10} {:>12}", "writers", "events", "events/s");
    for threads in [1usize, 4, 8, 16, 32] {
        let (events, seconds) = if benching {
            durable_appends(dir.path(), threads, Duration::from_secs(3), None)
        } else {
            durable_appends(dir.path(), threads, Duration::ZERO, Some(20))
        };
        println!(
            "{threads:>8} {events:>10} {:>12.0}",
            events as f64 / seconds
        );
    }

    let events = if benching { 200_000 } else { 1_000 };
    let (seconds, bytes) = verify_throughput(dir.path(), events, if benching { 5 } else { 1 });
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "\naudit verify over {events} events, {:.1} MB, {cores} cores (target: >= 500,000 events/s)",
        bytes as f64 / 1e6
    );
    println!(
        "{:>12.0} events/s  {:>8.1} MB/s",
        events as f64 / seconds,
        bytes as f64 / seconds / 1e6
    );

    let size = if benching { 64 << 20 } else { 1 << 20 };
    let rate = sha256_throughput(size, if benching { 10 } else { 1 });
    println!("\nsha256 over {} MiB (target: >= 1 GB/s)", size >> 20);
    println!("{rate:>12.2} GB/s");
}

fn main() {
    let benching = std::env::args().any(|arg| arg == "--bench");
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion, benching);
    criterion.final_summary();
    // Under `cargo test --benches` this is a smoke run.
    figures(benching);
}
