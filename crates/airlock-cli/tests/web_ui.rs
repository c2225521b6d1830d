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

use airlock_testkit::peers::{self, Peer, require};

fn shots_dir() -> PathBuf {
    std::env::var("AIRLOCK_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| airlock_testkit::repo().join("target/artifacts"))
        .join("web-ui")
}

/// Runs one browser script under `tests/web/` and returns what it printed;
/// fails unless it exits 0.
fn run_browser_script(script: &str) -> String {
    let tools = peers::tools_dir();
    let output = Command::new(peers::node())
        .arg(airlock_testkit::repo().join("tests/web").join(script))
        .env("AIRLOCK_BIN", airlock_testkit::bin())
        .env(
            "AIRLOCK_PLAYWRIGHT",
            tools.join("node_modules/playwright-core"),
        )
        .env("AIRLOCK_CHROMIUM", peers::chromium())
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
    if !require(
        "hostile_pages_cannot_call_airlock_cross_site_or_through_dns_rebinding",
        &[Peer::NodeTools, Peer::Chromium],
    ) {
        return;
    }
    let stdout = run_browser_script("cross_origin.test.mjs");
    assert!(stdout.contains("ok: 5 steps"), "{stdout}");
}

#[test]
fn approvals_are_seen_and_decided_in_a_real_browser() {
    if !require(
        "approvals_are_seen_and_decided_in_a_real_browser",
        &[Peer::NodeTools, Peer::Chromium],
    ) {
        return;
    }
    let stdout = run_browser_script("ui.test.mjs");
    let shots = shots_dir();
    assert!(stdout.contains("ok: 22 steps"), "{stdout}");
    for shot in [
        "01-logged-in.png",
        "02-pending-write-phone.png",
        "03-edit-before-approve.png",
        "04-patch-and-hostile-content.png",
        "05-audit-phone.png",
        "06-desktop.png",
        "07-stale-outcome-phone.png",
        "08-large-diff-phone.png",
        "09-large-diff-expanded-phone.png",
        "12-stats-phone.png",
        "13-stats-desktop.png",
    ] {
        assert!(shots.join(shot).exists(), "no screenshot {shot}");
    }
}

#[test]
fn a_phone_signs_in_with_a_token_made_by_airlock_token_create() {
    if !require(
        "a_phone_signs_in_with_a_token_made_by_airlock_token_create",
        &[Peer::NodeTools, Peer::Chromium],
    ) {
        return;
    }
    let stdout = run_browser_script("phone.test.mjs");
    assert!(stdout.contains("ok: 5 steps"), "{stdout}");
    assert!(shots_dir().join("10-phone-token-signed-in.png").exists());
}
