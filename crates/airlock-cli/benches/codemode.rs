//! Code mode's costs (DESIGN §12), through `airlock serve --stdio` with a
//! raw JSON-RPC client, each beside `node -e` running the same script with
//! direct calls (Node's own `fs`), measured in one run:
//!
//! - a run that makes no call, end to end (worker start, runtime, prelude);
//! - the cost one inner call adds over the same call made directly (a
//!   script of 100 `read_file` calls against 100 direct `read_file` calls);
//! - a staged run of 100 edits of one file, proposed and applied as one.
//!
//! `cargo bench -p airlock-cli --bench codemode` prints the figures;
//! `cargo test --benches` runs it once, small.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use airlock_testkit::Workspace;
use airlock_testkit::mcp::RawStdio;
use serde_json::{Value, json};

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn p50(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

struct Client {
    raw: RawStdio,
    next: u64,
}

impl Client {
    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.next += 1;
        let answer = self.raw.request(
            json!({"jsonrpc": "2.0", "id": self.next, "method": "tools/call",
                                             "params": {"name": tool, "arguments": arguments}}),
        );
        assert_ne!(answer["result"]["isError"], json!(true), "{answer}");
        answer
    }

    fn eval(&mut self, code: &str) -> Value {
        let answer = self.call("codemode_eval", json!({"code": code}));
        let data = &answer["result"]["structuredContent"]["data"];
        assert_eq!(data["status"], json!("completed"), "{answer}");
        data.clone()
    }
}

/// `node -e SCRIPT` in `dir`, timed as a whole process.
fn node(dir: &std::path::Path, script: &str) -> Duration {
    let started = Instant::now();
    let status = Command::new("node")
        .arg("-e")
        .arg(script)
        .current_dir(dir)
        .status()
        .expect("node");
    assert!(status.success());
    started.elapsed()
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    let runs = if full { 200 } else { 3 };
    let calls = 100;
    let ws = Workspace::new(
        "security:\n  hitl:\n    rules:\n      - tools: [edit_file]\n        risk: low\n        require_approval: false\n",
    );
    let text: String = (0..100)
        .map(|i| format!("line {i} of the file\n"))
        .collect();
    ws.write("a.txt", &text);
    ws.write(
        "edits.txt",
        (0..100)
            .map(|i| format!("value {i} = old\n"))
            .collect::<String>(),
    );
    let mut client = Client {
        raw: RawStdio::start(&ws, &[]),
        next: 100,
    };
    let node_here = Command::new("node").arg("--version").output().is_ok();

    // 1. A run with no call.
    let mut empty = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        client.eval("1 + 1");
        empty.push(started.elapsed());
    }
    let mut node_empty: Vec<Duration> = if node_here {
        (0..runs.min(30))
            .map(|_| node(ws.root(), "1 + 1"))
            .collect()
    } else {
        Vec::new()
    };

    // 2. One inner call over the same call made directly.
    let reads = format!(
        "for (let i = 0; i < {calls}; i++) await codemode.read_file({{path: 'a.txt', end_line: 20}});\n{calls}"
    );
    let mut scripted = Vec::new();
    let mut direct = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        client.eval(&reads);
        scripted.push(started.elapsed());
        let started = Instant::now();
        for _ in 0..calls {
            client.call("read_file", json!({"path": "a.txt", "end_line": 20}));
        }
        direct.push(started.elapsed());
    }
    let node_reads = format!(
        "const fs = require('fs'); for (let i = 0; i < {calls}; i++) fs.readFileSync('a.txt', 'utf8').split('\\n').slice(0, 20);"
    );
    let mut node_read: Vec<Duration> = if node_here {
        (0..runs.min(30))
            .map(|_| node(ws.root(), &node_reads))
            .collect()
    } else {
        Vec::new()
    };

    // 3. 100 edits of one file, staged, proposed once and applied.
    let mut staged = Vec::new();
    for run in 0..runs {
        let (from, to) = if run % 2 == 0 {
            ("old", "new")
        } else {
            ("new", "old")
        };
        let edits = format!(
            "for (let i = 0; i < 100; i++) await codemode.edit_file({{path: 'edits.txt', old_string: `value ${{i}} = {from}\\n`, new_string: `value ${{i}} = {to}\\n`}});\n'done'"
        );
        let started = Instant::now();
        let data = client.eval(&edits);
        staged.push(started.elapsed());
        assert_eq!(data["staged"]["status"], json!("allowed"), "{data}");
    }
    let node_edits = "const fs = require('fs'); let t = fs.readFileSync('edits.txt', 'utf8'); \
         for (let i = 0; i < 100; i++) t = t.replace(`value ${i} = old\\n`, `value ${i} = new\\n`); \
         fs.writeFileSync('edits.copy.txt', t);";
    let mut node_edit: Vec<Duration> = if node_here {
        (0..runs.min(30))
            .map(|_| node(ws.root(), node_edits))
            .collect()
    } else {
        Vec::new()
    };

    let empty = p50(&mut empty);
    let scripted = p50(&mut scripted);
    let direct = p50(&mut direct);
    let staged = p50(&mut staged);
    // Per call: a script's call (its run less an empty run's) and a direct
    // call (its MCP round trip included, which a script's call does not
    // make).
    let inner = (micros(scripted) - micros(empty)) / calls as f64;
    let outer = micros(direct) / calls as f64;
    println!("codemode ({runs} runs each; node -e is a whole process, for scale)");
    println!(
        "  a run with no call, end to end: p50 {:.2} ms (target <= 5 ms); node -e: p50 {}",
        micros(empty) / 1000.0,
        node_p50(&mut node_empty)
    );
    println!(
        "  {calls} read_file calls: in one script p50 {:.2} ms, made directly over MCP p50 {:.2} ms; per call {inner:.1} us in a script, {outer:.1} us direct: {:+.1} us (target: <= +50 us); node -e with fs: p50 {}",
        micros(scripted) / 1000.0,
        micros(direct) / 1000.0,
        inner - outer,
        node_p50(&mut node_read)
    );
    println!(
        "  100 edits of one file, staged, proposed and applied as one: p50 {:.2} ms (target <= 50 ms); node -e with fs: p50 {}",
        micros(staged) / 1000.0,
        node_p50(&mut node_edit)
    );
}

fn node_p50(samples: &mut [Duration]) -> String {
    if samples.is_empty() {
        return "(no node here)".to_owned();
    }
    format!("{:.2} ms", micros(p50(samples)) / 1000.0)
}
