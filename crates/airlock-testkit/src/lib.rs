//! airlock-testkit: what every integration test of airlock shares, so a test
//! says what it checks and not how to start a process.
//!
//! - [`Workspace`]: a temporary workspace with its own clock file, in which
//!   the `airlock` binary is run ([`Workspace::run`] gives a [`Run`]) or
//!   spawned; its audit log and its event feed ([`Feed`], read from the
//!   store's `events` table with a cursor, so a test waits for what happened
//!   instead of sleeping or polling a command).
//! - [`http::Server`]: `airlock serve --http 127.0.0.1:0` in a workspace, the
//!   address it bound read from its banner (no port is freed and reused), with
//!   an HTTP/1.1 client and a reader of its server-sent events.
//! - [`mcp`]: the Python SDK client driver (`tests/mcp/client.py`) and a raw
//!   JSON-RPC client of `airlock serve --stdio`.
//! - [`terminal::Terminal`]: a program on a real pseudo-terminal.
//! - [`peers`]: the programs a test needs besides Rust (Python with the MCP
//!   SDK, Node and the npm servers, Chromium, ripgrep, git, GNU patch): a
//!   plain `cargo test` skips such a test and says so on stderr;
//!   with `AIRLOCK_TEST_PEERS=1` (set by `scripts/test.sh`, so by CI) a
//!   missing peer fails it.
//!
//! Time moves through the clock file (`AIRLOCK_TEST_CLOCK`, read by a binary
//! built with airlock-broker's `test-clock` feature): [`Workspace::advance`].

pub mod http;
pub mod mcp;
pub mod peers;
pub mod terminal;
mod workspace;

pub use workspace::{Feed, Run, Workspace, advance_clock, copy_tree};

use std::path::PathBuf;

/// The `airlock` binary of this build: next to the test executable's
/// directory (`target/<profile>/airlock`, the tests being in
/// `target/<profile>/deps/`), or `AIRLOCK_BIN`.
pub fn bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("AIRLOCK_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test executable is in target/<profile>/deps");
    let bin = profile_dir.join("airlock");
    assert!(
        bin.exists(),
        "no airlock binary at {} (it is built for airlock-cli's tests; set AIRLOCK_BIN elsewhere)",
        bin.display()
    );
    bin
}

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The lowercase hex SHA-256 of a token, as `auth.tokens` names it.
pub fn token_sha256(token: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(token.as_bytes()))
}

/// `sha256:<hex>` of `text`, the hash format of airlock's envelopes.
pub fn sha(text: impl AsRef<[u8]>) -> String {
    use sha2::Digest as _;
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(text.as_ref()))
    )
}
