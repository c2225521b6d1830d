//! Decision -> waiting call resumes (DESIGN §12: p99 <= 250 ms).
//!
//! A call waits in one broker (its own SQLite connection, as a separate process
//! has); another broker approves it; the time from the start of `decide` to the
//! waiting call having its final envelope (the file written) is measured.
//!
//! Run: `cargo bench -p airlock-broker --bench resume`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::mpsc;
use std::time::{Duration, Instant};

use airlock_broker::{Broker, DecideRequest, Mode, Workspace};
use airlock_core::ToolCall;
use serde_json::json;

fn broker(root: &std::path::Path) -> Broker {
    let mut loaded = airlock_core::config::load("", "airlock.yaml").unwrap();
    loaded.policy.bind_workspace(
        root.to_str().unwrap(),
        Some(&format!("{}/airlock.yaml", root.display())),
    );
    Broker::open(Workspace::new(root.to_path_buf(), loaded)).unwrap()
}

fn main() {
    let rounds = if std::env::args().any(|arg| arg == "--bench") {
        200
    } else {
        5
    };
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let decider = broker(&root);
    let (ids, id_receiver) = mpsc::channel::<String>();
    let (done, done_receiver) = mpsc::channel::<Instant>();
    let waiter_root = root.clone();
    std::thread::spawn(move || {
        let waiter = broker(&waiter_root);
        for round in 0..rounds {
            let call = ToolCall::new(
                "write_file",
                json!({"path": format!("f{round}.txt"), "content": "x\n"}),
                waiter.policy().origin_of("write_file", None),
                waiter.now_ms(),
            );
            let envelope = waiter.submit(&call, &Mode::Wait, &|approval| {
                ids.send(approval.id.clone()).unwrap();
            });
            let resumed = Instant::now();
            assert_eq!(envelope.status.as_str(), "allowed", "{envelope:?}");
            done.send(resumed).unwrap();
        }
    });
    let mut latencies = Vec::new();
    for _ in 0..rounds {
        let id = id_receiver.recv().unwrap();
        // Let the waiter settle into its polling loop.
        std::thread::sleep(Duration::from_millis(5));
        let start = Instant::now();
        decider
            .decide(
                &id,
                &DecideRequest {
                    approve: true,
                    reason: None,
                    always: None,
                    authority: airlock_broker::Authority::Terminal,
                    user: "bench".into(),
                    channel: airlock_core::Channel::Terminal,
                    content: None,
                },
            )
            .unwrap();
        let resumed = done_receiver.recv().unwrap();
        latencies.push(resumed.saturating_duration_since(start).as_secs_f64() * 1e3);
    }
    latencies.sort_by(f64::total_cmp);
    let pct = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "decision -> waiting call resumes, {} rounds: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (target p99 <= 250 ms)",
        latencies.len(),
        pct(0.5),
        pct(0.99),
        latencies[latencies.len() - 1]
    );
}
