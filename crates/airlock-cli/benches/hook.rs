//! An agent hook's cost (DESIGN §12: an allow decided locally, process to
//! answer, p50 <= 10 ms): `airlock hook claude-code` on a `Read` of a file
//! and `airlock hook codex` on a `Bash` `ls`, each a new process fed the
//! event on stdin, timed from spawn to its exit with the answer read;
//! beside them `true` started the same way, the floor of any hook.
//!
//! `cargo bench -p airlock-cli --bench hook` prints p50/p99 over 200 runs
//! each (release build); under `cargo test --benches` it runs 5.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use airlock_testkit::Workspace;
use serde_json::json;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn line(what: &str, samples: &mut [Duration]) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what:<44} n={:<4} p50 {:>7.2} ms   p99 {:>7.2} ms",
        samples.len(),
        ms(percentile(samples, 0.50)),
        ms(percentile(samples, 0.99)),
    );
}

/// Runs `command` with `input` on stdin; how long until it exited with its
/// output read, and the output.
fn timed(mut command: Command, input: &[u8]) -> (Duration, String) {
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `true` reads nothing: a broken pipe is fine.
    let _ = child.stdin.take().unwrap().write_all(input);
    let output = child.wait_with_output().unwrap();
    let took = started.elapsed();
    assert!(output.status.success(), "{output:?}");
    (took, String::from_utf8(output.stdout).unwrap())
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    let runs = if full { 200 } else { 5 };
    let ws = Workspace::new("");
    ws.write("a.txt", "one\n");
    let root = std::fs::canonicalize(ws.root()).unwrap();
    let root = root.to_string_lossy().into_owned();
    let read = json!({
        "session_id": "bench", "cwd": root, "hook_event_name": "PreToolUse",
        "tool_name": "Read", "tool_input": {"file_path": format!("{root}/a.txt")},
        "tool_use_id": "toolu_bench",
    })
    .to_string();
    let bash = json!({
        "session_id": "bench", "turn_id": "t", "cwd": root, "hook_event_name": "PreToolUse",
        "tool_name": "Bash", "tool_input": {"command": "ls -la && git status"},
        "tool_use_id": "call_bench",
    })
    .to_string();
    println!("agent hook, allow decided locally ({runs} runs each)");
    let (mut floor, mut claude, mut codex) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        floor.push(timed(Command::new("true"), b"{}").0);
        let (took, out) = timed(ws.command(&["hook", "claude-code"]), read.as_bytes());
        assert!(out.contains("\"allow\""), "{out}");
        claude.push(took);
        let (took, out) = timed(ws.command(&["hook", "codex"]), bash.as_bytes());
        assert_eq!(out, "", "codex's allow is no output");
        codex.push(took);
    }
    line("`true` (process start, the floor)", &mut floor);
    line("claude-code Read (target p50 <= 10 ms)", &mut claude);
    line("codex Bash `ls -la && git status`", &mut codex);
}
