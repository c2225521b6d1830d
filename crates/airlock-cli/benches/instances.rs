//! Several instances on one PostgreSQL database against one on SQLite
//! (DESIGN §7.2, §12), end to end over real sockets, measured in one run
//! with the same client load for each:
//! - proposals/s: 100 agents submit writes (defer mode: each answered 202
//!   once its approval and its audit record are stored), spread over the
//!   instances;
//! - decision → resume: a call waits on the first instance (an agent's hook,
//!   `POST /v1/hooks/claude-code`, which answers once a human decided); the
//!   approver decides on the last instance (the same one when there is one);
//!   p50/p99 from sending the decision to the waiting call's answer.
//!
//! The PostgreSQL server is Debian's, started for the run in a temp dir
//! with `fsync` on (every commit reaches the disk, as in a deployment).
//! `cargo bench -p airlock-cli --bench instances` prints the figures.
//! Under `cargo test --benches` it runs a few calls only, to prove it works
//! (and skips without PostgreSQL unless `AIRLOCK_TEST_PEERS=1`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use airlock_testkit::Workspace;
use airlock_testkit::http::{Serving, request};
use airlock_testkit::peers::{Peer, require};
use airlock_testkit::postgres::PgServer;
use airlock_testkit::token_sha256 as sha;
use serde_json::{Value, json};

const AGENTS: usize = 100;
const AGENT: &str = "bench-agent-token";
const APPROVER: &str = "bench-approver-token";

fn config(store: &str) -> String {
    format!(
        "auth:\n  tokens:\n    \
         - {{name: agents, sha256: \"{}\", roles: [agent], user: bench}}\n    \
         - {{name: phone, sha256: \"{}\", roles: [approver], user: a1}}\n\
         security:\n  hitl:\n    approval_mode: defer\n    \
         max_pending: 100000\n    max_pending_per_session: 100000\n{store}",
        sha(AGENT),
        sha(APPROVER),
    )
}

fn post(addr: &str, path: &str, token: &str, body: &Value) -> (u16, Value) {
    request(addr, "POST", path, Some(token), body.to_string().as_bytes())
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1_000.0
}

struct Figures {
    proposals_per_second: f64,
    p50: Duration,
    p99: Duration,
}

/// Runs the load against `instances` serve processes in a new workspace
/// whose `store:` section is `store`.
fn measure(store: &str, instances: usize, per_agent: usize, samples: usize) -> Figures {
    let ws = Workspace::new(&config(store));
    let root = std::fs::canonicalize(ws.root()).unwrap();
    let root = root.to_string_lossy().into_owned();
    let servers: Vec<Serving> = (0..instances).map(|_| Serving::start(&ws, &[])).collect();
    let addrs: Vec<String> = servers.iter().map(|server| server.addr.clone()).collect();

    // Proposals: every agent at once, each on its instance.
    let barrier = std::sync::Barrier::new(AGENTS + 1);
    let started = std::thread::scope(|scope| {
        for agent in 0..AGENTS {
            let (addrs, barrier) = (&addrs, &barrier);
            scope.spawn(move || {
                let addr = &addrs[agent % addrs.len()];
                barrier.wait();
                for call in 0..per_agent {
                    let body = json!({"tool": "write_file", "arguments": {
                        "path": format!("src/p-{agent}-{call}.txt"), "content": "x\n"}});
                    let (status, answer) = post(addr, "/v1/tools/call", AGENT, &body);
                    assert_eq!(status, 202, "{answer}");
                }
            });
        }
        barrier.wait();
        Instant::now()
    });
    let elapsed = started.elapsed();
    let proposals_per_second = (AGENTS * per_agent) as f64 / elapsed.as_secs_f64();

    // Decision -> resume: a call waiting on the first instance, decided on
    // the last.
    let (waiting_on, deciding_on) = (&addrs[0], &addrs[addrs.len() - 1]);
    let mut latencies = Vec::with_capacity(samples);
    for sample in 0..samples {
        let path = format!("{root}/src/w-{sample}.txt");
        let event = json!({
            "event": {
                "session_id": "bench", "cwd": root, "hook_event_name": "PreToolUse",
                "tool_name": "Write", "tool_use_id": format!("toolu_{sample}"),
                "tool_input": {"file_path": path, "content": "waited\n"},
            },
            "timeout_seconds": 120,
        });
        let waiter = {
            let addr = waiting_on.clone();
            std::thread::spawn(move || {
                let answer = post(&addr, "/v1/hooks/claude-code", AGENT, &event);
                (Instant::now(), answer)
            })
        };
        // The waiting call's approval, once it is there.
        let id = loop {
            let (status, listed) =
                request(deciding_on, "GET", "/hitl/pending", Some(APPROVER), b"");
            assert_eq!(status, 200);
            let found = listed["approvals"].as_array().and_then(|approvals| {
                approvals.iter().find_map(|approval| {
                    (approval["tool_call_id"] == format!("toolu_{sample}")
                        || approval["path"] == format!("src/w-{sample}.txt"))
                    .then(|| approval["id"].as_str().unwrap().to_owned())
                })
            });
            if let Some(id) = found {
                break id;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let decided_at = Instant::now();
        let (status, decided) = post(
            deciding_on,
            &format!("/hitl/decide/{id}"),
            APPROVER,
            &json!({"decision": "approve"}),
        );
        assert_eq!(status, 200, "{decided}");
        let (resumed_at, (status, answer)) = waiter.join().unwrap();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["verdict"], "allow", "{answer}");
        latencies.push(resumed_at.saturating_duration_since(decided_at));
    }
    drop(servers);
    Figures {
        proposals_per_second,
        p50: percentile(&mut latencies, 0.50),
        p99: percentile(&mut latencies, 0.99),
    }
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    if !require("bench instances", &[Peer::Postgres]) {
        return;
    }
    let (per_agent, samples) = if full { (20, 200) } else { (1, 3) };
    let server = PgServer::start_durable();
    let mut rows = Vec::new();
    rows.push(("sqlite", 1, measure("", 1, per_agent, samples)));
    for instances in 1..=3 {
        let url = server.new_database();
        let store = format!("store:\n  url: \"{url}\"\n");
        rows.push((
            "postgres",
            instances,
            measure(&store, instances, per_agent, samples),
        ));
    }
    println!(
        "{AGENTS} agents x {per_agent} proposals; {samples} waiting calls decided on another instance"
    );
    println!("store     instances  proposals/s  decide->resume p50   p99");
    for (store, instances, figures) in rows {
        println!(
            "{store:<9} {instances:>9}  {:>11.0}  {:>14.2} ms  {:>6.2} ms",
            figures.proposals_per_second,
            millis(figures.p50),
            millis(figures.p99),
        );
    }
}
