//! The web UI in a real browser: runs `tests/web/ui.test.mjs` (headless
//! Debian chromium driven by playwright-core, both installed by `.ci/run`
//! and `scripts/mcp-test-env.sh`) against this build of airlock. The
//! screenshots it takes are kept under `target/artifacts/web-ui/` (or
//! `$AIRLOCK_ARTIFACTS/web-ui/`). `tests/web/cross_origin.test.mjs` attacks
//! the listener from hostile pages in the same browser (cross-site requests
//! and DNS rebinding).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

/// The tools `scripts/mcp-test-env.sh` installs (Node 22, playwright-core),
/// under `$AIRLOCK_TOOLS` (default `~/.cache/airlock/tools`).
fn tools_dir() -> PathBuf {
    let dir = match std::env::var_os("AIRLOCK_TOOLS") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/airlock/tools"),
    };
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "playwright-core is missing under {}: run `bash scripts/mcp-test-env.sh`",
        dir.display()
    );
    dir
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn shots_dir() -> PathBuf {
    std::env::var("AIRLOCK_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("target/artifacts"))
        .join("web-ui")
}

/// Runs one browser script under `tests/web/` and returns what it printed;
/// fails unless it exits 0.
fn run_browser_script(script: &str) -> String {
    let chromium = std::env::var("AIRLOCK_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        std::path::Path::new(&chromium).exists(),
        "no browser at {chromium}: install Debian's chromium package (.ci/run does)"
    );
    let tools = tools_dir();
    let output = Command::new(tools.join("node_modules/node/bin/node"))
        .arg(repo().join("tests/web").join(script))
        .env("AIRLOCK_BIN", env!("CARGO_BIN_EXE_airlock"))
        .env(
            "AIRLOCK_PLAYWRIGHT",
            tools.join("node_modules/playwright-core"),
        )
        .env("AIRLOCK_CHROMIUM", &chromium)
        .env("AIRLOCK_SHOTS", shots_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the browser test {script} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    stdout
}

#[test]
fn hostile_pages_cannot_call_airlock_cross_site_or_through_dns_rebinding() {
    let stdout = run_browser_script("cross_origin.test.mjs");
    assert!(stdout.contains("ok: 5 steps"), "{stdout}");
}

#[test]
fn approvals_are_seen_and_decided_in_a_real_browser() {
    let stdout = run_browser_script("ui.test.mjs");
    let shots = shots_dir();
    assert!(stdout.contains("ok: 14 steps"), "{stdout}");
    for shot in [
        "01-logged-in.png",
        "02-pending-write-phone.png",
        "03-edit-before-approve.png",
        "04-patch-and-hostile-content.png",
        "05-audit-phone.png",
        "06-desktop.png",
    ] {
        assert!(shots.join(shot).exists(), "no screenshot {shot}");
    }
}
