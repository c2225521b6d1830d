//! The MCP face, end to end over stdio, with figures (DESIGN §12):
//! - an allowed `read_file` through `airlock serve --stdio` (target p50 <= 300 us);
//! - a proxied upstream call against the same upstream called directly, side by
//!   side in one run (target: added p50 <= 0.5 ms);
//! - `serve --stdio` ready to answer `initialize` (<= 50 ms) and its idle RSS
//!   (<= 30 MB).
//!
//! `cargo bench -p airlock-cli --bench mcp` prints the figures (release build;
//! the upstream is server-everything from `scripts/mcp-test-env.sh`). Under
//! `cargo test --benches` it runs a few iterations only, to prove it works.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Peer {
    fn spawn(command: &mut Command) -> Peer {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Peer {
            child,
            stdin,
            stdout,
            next: 1,
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "peer exited");
            let value: Value = serde_json::from_str(&line).unwrap();
            if value["id"] == json!(id) {
                return value;
            }
        }
    }

    fn initialize(&mut self) -> Value {
        let answer = self.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}),
        );
        writeln!(
            self.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
        answer
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": args}));
        assert_ne!(answer["result"]["isError"], json!(true), "{answer}");
        assert!(answer["result"].is_object(), "{answer}");
        answer
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn airlock(workspace: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_airlock"));
    command.args(["serve", "--stdio"]).current_dir(workspace);
    command
}

fn tools_dir() -> PathBuf {
    match std::env::var_os("AIRLOCK_TOOLS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/airlock/tools"),
    }
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    let iterations = if full { 3000 } else { 20 };
    let workspace = tempfile::tempdir().unwrap();
    let root = workspace.path();
    let text: String = (0..100)
        .map(|i| format!("line {i} of the file\n"))
        .collect();
    std::fs::write(root.join("a.txt"), &text).unwrap();
    let everything =
        tools_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    std::fs::write(
        root.join("airlock.yaml"),
        format!(
            "upstreams:\n  - name: every\n    command: node\n    args: [{:?}, stdio]\n\
             security:\n  hitl:\n    rules:\n      - tools: [every__echo]\n        risk: low\n        require_approval: false\n\
             default_profile: bench\nprofiles:\n  bench: {{}}\n",
            everything.display().to_string()
        ),
    )
    .unwrap();

    // Ready: spawn to the initialize answer (no upstream: that is the upstream's
    // own start-up).
    // A workspace on the defaults: only its state dir.
    let bare = tempfile::tempdir().unwrap();
    std::fs::create_dir(bare.path().join(".airlock")).unwrap();
    let mut ready = Vec::new();
    for _ in 0..if full { 20 } else { 3 } {
        let started = Instant::now();
        let mut peer = Peer::spawn(&mut airlock(bare.path()));
        peer.initialize();
        ready.push(started.elapsed());
    }
    let mut idle = Peer::spawn(&mut airlock(bare.path()));
    idle.initialize();
    std::thread::sleep(Duration::from_millis(500));
    let rss = idle.rss_kib();
    drop(idle);

    let mut served = Peer::spawn(&mut airlock(root));
    served.initialize();
    let mut reads = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        served.call("read_file", json!({"path": "a.txt", "end_line": 20}));
        reads.push(started.elapsed());
    }

    // Side by side: the upstream directly, and through airlock, alternating.
    let mut direct = Peer::spawn(Command::new("node").arg(&everything).arg("stdio"));
    direct.initialize();
    let mut direct_times = Vec::with_capacity(iterations);
    let mut proxied_times = Vec::with_capacity(iterations);
    for i in 0..iterations {
        let args = json!({"message": format!("ping {i}")});
        let started = Instant::now();
        direct.call("echo", args.clone());
        direct_times.push(started.elapsed());
        let started = Instant::now();
        served.call("every__echo", args);
        proxied_times.push(started.elapsed());
    }

    let ready_p50 = percentile(&mut ready, 0.5);
    let read_p50 = percentile(&mut reads, 0.5);
    let read_p99 = percentile(&mut reads, 0.99);
    let direct_p50 = percentile(&mut direct_times, 0.5);
    let proxied_p50 = percentile(&mut proxied_times, 0.5);
    let proxied_p99 = percentile(&mut proxied_times, 0.99);
    let direct_p99 = percentile(&mut direct_times, 0.99);
    println!(
        "mcp stdio ({iterations} calls each{})",
        if full { "" } else { ", test mode" }
    );
    println!(
        "  serve --stdio ready (initialize answered): p50 {:.1} ms",
        micros(ready_p50) / 1000.0
    );
    println!("  idle RSS: {:.1} MB", rss as f64 / 1024.0);
    println!(
        "  read_file allowed, end to end: p50 {:.0} us, p99 {:.0} us",
        micros(read_p50),
        micros(read_p99)
    );
    println!(
        "  upstream echo direct: p50 {:.0} us, p99 {:.0} us; through airlock: p50 {:.0} us, p99 {:.0} us",
        micros(direct_p50),
        micros(direct_p99),
        micros(proxied_p50),
        micros(proxied_p99)
    );
    println!(
        "  added by airlock: p50 {:.0} us (ratio {:.2}x)",
        micros(proxied_p50) - micros(direct_p50),
        proxied_p50.as_secs_f64() / direct_p50.as_secs_f64()
    );
}
