//! The airlock side of `scripts/bench-grep.sh`: one `grep` over a tree, the
//! way the broker runs it, with its lines printed as `rg --no-heading -n`
//! prints them, so the script can time both tools alike and compare the
//! results.
//!
//! Environment:
//! - `AIRLOCK_GREP_TREE`: the directory to search (the workspace root);
//! - `AIRLOCK_GREP_PATTERN`: the regular expression;
//! - `AIRLOCK_GREP_CASE_INSENSITIVE`: `1` for a case-insensitive search.
//!
//! The matching lines go to stdout; the time the search took inside the
//! process, and the counts, go to stderr. No deny globs apply (a large tree
//! holds test keys named `*.pem`, which `rg` would search), and the result
//! caps are raised so that every line is returned.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use airlock_fs::{GrepParams, Sandbox, grep};

/// Large enough that any tree used for the comparison fits.
const EVERYTHING: u64 = 1 << 40;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("grep_vs_rg: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    // Run by `cargo bench` without the variables: nothing to measure.
    let Ok(tree) = std::env::var("AIRLOCK_GREP_TREE") else {
        eprintln!(
            "grep_vs_rg: set AIRLOCK_GREP_TREE and AIRLOCK_GREP_PATTERN (see scripts/bench-grep.sh)"
        );
        return Ok(());
    };
    let pattern = std::env::var("AIRLOCK_GREP_PATTERN")?;
    let case_insensitive = std::env::var("AIRLOCK_GREP_CASE_INSENSITIVE").is_ok_and(|v| v == "1");

    let start = Instant::now();
    let root = std::fs::canonicalize(&tree)?;
    let yaml = format!(
        "file_broker:\n  deny_path_globs: []\n  max_grep_results: {EVERYTHING}\n  max_inline_bytes: {EVERYTHING}\n"
    );
    let mut loaded = airlock_core::config::load(&yaml, "airlock.yaml")?;
    let root_text = root.to_str().ok_or("the tree's path is not utf-8")?;
    loaded
        .policy
        .bind_workspace(root_text, Some(&format!("{root_text}/airlock.yaml")));
    let sandbox = Sandbox::open(&root, &loaded.config.file_broker, Arc::new(loaded.policy))?;
    let params = GrepParams {
        pattern,
        path: None,
        glob_filter: None,
        case_insensitive,
        max_results: Some(EVERYTHING),
        output_mode: Default::default(),
    };
    let data = grep(&sandbox, &params)?;
    let searched = start.elapsed();

    let matches = data.matches.ok_or("the output went to a blob")?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(matches.as_bytes())?;
    if !matches.is_empty() {
        stdout.write_all(b"\n")?;
    }
    stdout.flush()?;
    eprintln!(
        "grep_vs_rg: {} lines in {:.1} ms (in process, before printing)",
        data.match_count,
        searched.as_secs_f64() * 1e3
    );
    Ok(())
}
