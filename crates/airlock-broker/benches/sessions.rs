//! A call inside an explicit session against the same call in the implicit
//! default session (DESIGN §12 and §5.3: at most 5% added), and what opening
//! a session costs.
//!
//! One broker on a SQLite store; `read_file` of a small file, the two kinds
//! of call interleaved round by round so that both see the same machine.
//!
//! Run: `cargo bench -p airlock-broker --bench sessions`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use airlock_broker::{Broker, Mode, Workspace};
use airlock_core::{Principal, ToolCall};
use serde_json::{Value, json};

fn broker(root: &std::path::Path) -> Broker {
    let mut loaded = airlock_core::config::load("", "airlock.yaml").unwrap();
    loaded.policy.bind_workspace(
        root.to_str().unwrap(),
        Some(&format!("{}/airlock.yaml", root.display())),
    );
    Broker::open(Workspace::new(root.to_path_buf(), loaded)).unwrap()
}

fn call(broker: &Broker, tool: &str, args: Value) -> ToolCall {
    let mut call = ToolCall::new(
        tool,
        args,
        broker.policy().origin_of(tool, None),
        broker.now_ms(),
    );
    call.principal = Principal {
        user: Some("bench".to_owned()),
        ..Principal::default()
    };
    call
}

fn timed(broker: &Broker, tool: &str, args: &Value) -> f64 {
    let call = call(broker, tool, args.clone());
    let start = Instant::now();
    let envelope = broker.submit(&call, &Mode::Defer, &|_| {});
    let took = start.elapsed().as_secs_f64() * 1e6;
    assert_eq!(envelope.status.as_str(), "allowed", "{envelope:?}");
    took
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let rounds = if std::env::args().any(|arg| arg == "--bench") {
        3000
    } else {
        20
    };
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join("src/inner")).unwrap();
    std::fs::write(root.join("src/inner/lib.rs"), "pub fn f() {}\n".repeat(20)).unwrap();
    let broker = broker(&root);

    let mut opens = Vec::new();
    let mut session = String::new();
    for _ in 0..20 {
        let start = Instant::now();
        let opened = broker.submit(
            &call(
                &broker,
                "session_open",
                json!({"roots": ["src"], "workdir": "src"}),
            ),
            &Mode::Defer,
            &|_| {},
        );
        opens.push(start.elapsed().as_secs_f64() * 1e6);
        session = opened.data.unwrap()["session_id"]
            .as_str()
            .unwrap()
            .to_owned();
    }

    let implicit = json!({"path": "src/inner/lib.rs"});
    let explicit = json!({"path": "inner/lib.rs", "session_id": session});
    // Warm both paths (page cache, the session's authority read once).
    for _ in 0..50 {
        timed(&broker, "read_file", &implicit);
        timed(&broker, "read_file", &explicit);
    }
    let (mut plain, mut scoped) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        if round % 2 == 0 {
            plain.push(timed(&broker, "read_file", &implicit));
            scoped.push(timed(&broker, "read_file", &explicit));
        } else {
            scoped.push(timed(&broker, "read_file", &explicit));
            plain.push(timed(&broker, "read_file", &implicit));
        }
    }
    let (plain, scoped) = (median(plain), median(scoped));
    println!("read_file, implicit default session: median {plain:.1} µs ({rounds} calls)");
    println!(
        "read_file, explicit session (sub-directory root, workdir): median {scoped:.1} µs ({rounds} calls)"
    );
    println!(
        "added by the session: {:+.1} µs ({:+.1}%; target at most +5%)",
        scoped - plain,
        (scoped / plain - 1.0) * 100.0
    );
    println!(
        "session_open (a sub-directory root): median {:.1} µs (20 opens)",
        median(opens)
    );
}
