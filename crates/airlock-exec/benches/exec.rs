//! The sandbox's cost, side by side with running the same command directly,
//! in one run (DESIGN §12: exec sandbox overhead <= 5 ms per command; an
//! overlay preview of a 10,000-file workspace <= 200 ms):
//! - `true`, directly (`bash -c true`) and in the sandbox;
//! - `rg` over a workspace of 1,000 files, directly and in the sandbox;
//! - a preview (overlay set up, command run, changes read back) of a command
//!   that changes one file in a workspace of 10,000 files.
//!
//! `cargo bench -p airlock-exec --bench exec` prints the figures; under
//! `cargo test --benches` it runs a few iterations to prove it works.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use airlock_exec::{Program, Run, Sandbox};

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn run_of(root: &Path, line: &str) -> Run {
    Run {
        program: Program::Shell(line.to_owned()),
        cwd: root.to_path_buf(),
        env: vec![("PATH".to_owned(), std::env::var("PATH").unwrap_or_default())],
        stdin: Vec::new(),
        timeout: Duration::from_secs(60),
        max_output_bytes: 16 << 20,
        network: false,
        max_processes: 512,
        max_memory_bytes: 8 << 30,
        cancel: airlock_exec::Cancel::new(),
    }
}

fn workspace(files: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..files {
        let sub = dir.path().join(format!("d{:02}", i % 50));
        std::fs::create_dir_all(&sub).unwrap();
        let text: String = (0..20)
            .map(|line| {
                format!(
                    "line {line} of file {i}{}\n",
                    if line == 7 { " needle" } else { "" }
                )
            })
            .collect();
        std::fs::write(sub.join(format!("f{i}.txt")), text).unwrap();
    }
    std::fs::create_dir(dir.path().join(".airlock")).unwrap();
    dir
}

/// `line` directly (bash, same directory) and in the sandbox, alternating:
/// (direct, sandboxed) samples.
fn side_by_side(
    sandbox: &Sandbox,
    root: &Path,
    line: &str,
    n: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut direct, mut boxed) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let started = Instant::now();
        let status = Command::new("bash")
            .args(["-c", line])
            .current_dir(root)
            .output()
            .unwrap();
        direct.push(started.elapsed());
        assert!(status.status.success() || line.starts_with("rg"), "{line}");
        let started = Instant::now();
        let output = sandbox.run(&run_of(root, line)).unwrap();
        boxed.push(started.elapsed());
        assert!(!output.timed_out);
    }
    (direct, boxed)
}

fn report(name: &str, mut direct: Vec<Duration>, mut boxed: Vec<Duration>) {
    let (d50, b50) = (percentile(&mut direct, 0.5), percentile(&mut boxed, 0.5));
    let (d99, b99) = (percentile(&mut direct, 0.99), percentile(&mut boxed, 0.99));
    println!(
        "  {name}: direct p50 {:.2} ms p99 {:.2} ms; sandboxed p50 {:.2} ms p99 {:.2} ms; added p50 {:.2} ms (target <= 5 ms)",
        ms(d50),
        ms(d99),
        ms(b50),
        ms(b99),
        ms(b50) - ms(d50)
    );
}

fn main() {
    let full = std::env::args().any(|arg| arg == "--bench");
    let n = if full { 200 } else { 3 };
    if let Err(error) = airlock_exec::support() {
        println!("exec sandbox: not measured here ({error})");
        return;
    }
    println!(
        "exec sandbox ({n} runs each{})",
        if full { "" } else { ", test mode" }
    );

    let small = workspace(0);
    let sandbox = Sandbox::new(small.path(), &[small.path().join(".airlock")], &[]).unwrap();
    let (direct, boxed) = side_by_side(&sandbox, small.path(), "true", n);
    report("true", direct, boxed);

    let thousand = workspace(1000);
    let sandbox = Sandbox::new(thousand.path(), &[thousand.path().join(".airlock")], &[]).unwrap();
    let rg = Command::new("rg").arg("--version").output().is_ok();
    if rg {
        let (direct, boxed) = side_by_side(&sandbox, thousand.path(), "rg -c needle .", n.min(50));
        report("rg over 1,000 files", direct, boxed);
    } else {
        println!("  rg over 1,000 files: not measured (rg is not installed)");
    }

    let many = workspace(if full { 10_000 } else { 500 });
    let sandbox = Sandbox::new(many.path(), &[many.path().join(".airlock")], &[]).unwrap();
    let mut previews = Vec::new();
    for _ in 0..n.min(30) {
        let started = Instant::now();
        let preview = sandbox
            .preview(&run_of(many.path(), "echo changed >> d00/f0.txt"))
            .unwrap();
        previews.push(started.elapsed());
        assert_eq!(preview.changes.len(), 1);
    }
    let files = if full { "10,000" } else { "500" };
    println!(
        "  preview of a one-file change in {files} files: p50 {:.2} ms, p99 {:.2} ms (target <= 200 ms)",
        ms(percentile(&mut previews, 0.5)),
        ms(percentile(&mut previews, 0.99))
    );
}
