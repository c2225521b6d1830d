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
//! - [`telegram::TelegramStandIn`]: Telegram's Bot API on loopback, as
//!   strict as Telegram, with the people's presses and replies.
//! - [`discord::DiscordStandIn`]: Discord's REST API and Gateway on
//!   loopback.
//! - [`slack::SlackStandIn`]: Slack's Web API and Socket Mode on loopback.
//! - [`tls::TestCa`]: a CA made for the test and a TLS proxy in front of a
//!   local server, for https and wss.
//! - [`peers`]: the programs a test needs besides Rust (Python with the MCP
//!   SDK, Node and the npm servers, Chromium, ripgrep, git, GNU patch): a
//!   plain `cargo test` skips such a test and says so on stderr;
//!   with `AIRLOCK_TEST_PEERS=1` (set by `scripts/test.sh`, so by CI) a
//!   missing peer fails it.
//!
//! Time moves through the clock file (`AIRLOCK_TEST_CLOCK`, read by a binary
//! built with airlock-broker's `test-clock` feature): [`Workspace::advance`].

// A test harness fails its test by panicking, with a message saying what
// did not happen; that is its whole way of reporting.
#![allow(clippy::expect_used, clippy::unwrap_used)]

pub mod discord;
pub mod http;
pub mod mcp;
pub mod peers;
pub mod postgres;
pub mod slack;
mod standin;
pub mod syslog;
pub mod telegram;
pub mod terminal;
pub mod tls;
mod workspace;

pub use workspace::{Feed, Run, Workspace, advance_clock, copy_tree};

use std::path::PathBuf;

/// The `airlock` binary of this build: next to the test executable's
/// directory (`target/<profile>/airlock`, the tests being in
/// `target/<profile>/deps/`), or `AIRLOCK_TEST_BIN` (a name of its own, so
/// a binary exported for other scripts is never tested by mistake).
pub fn bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("AIRLOCK_TEST_BIN") {
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
        "no airlock binary at {} (it is built for airlock-cli's tests; set AIRLOCK_TEST_BIN elsewhere)",
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

/// The TCP ports process `pid` listens on (read from `/proc`: its socket
/// inodes, matched against the listening sockets of `/proc/net/tcp` and
/// `tcp6`). For a peer told to listen on port 0 that does not say which
/// port it got.
pub fn listening_ports(pid: u32) -> Vec<u16> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let inodes: Vec<String> = fds
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            link.strip_prefix("socket:[")
                .and_then(|rest| rest.strip_suffix(']'))
                .map(str::to_owned)
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address is field 1 (ADDR:PORT in hex), st field 3
            // (0A: LISTEN), inode field 9.
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            if *state != "0A" || !inodes.iter().any(|own| own == inode) {
                continue;
            }
            if let Some(port) = local
                .rsplit(':')
                .next()
                .and_then(|hex| u16::from_str_radix(hex, 16).ok())
            {
                ports.push(port);
            }
        }
    }
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// Waits until process `pid` has ended (gone, or a zombie): after a
/// `kill -9`, what its peers see next is a dead process.
pub fn wait_gone(pid: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_owned))
            });
        match state.as_deref() {
            None | Some("Z" | "X") => return,
            Some(_) => {}
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} did not end"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The processes whose arguments are exactly `argv` (read from
/// `/proc/*/cmdline`; zombies have none, so a dead process is not listed).
pub fn processes_running(argv: &[&str]) -> Vec<u32> {
    let mut wanted = Vec::new();
    for arg in argv {
        wanted.extend_from_slice(arg.as_bytes());
        wanted.push(0);
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmd| cmd == wanted))
        .collect()
}

/// Waits until a process with arguments `argv` runs; its pids.
pub fn wait_running(argv: &[&str]) -> Vec<u32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let found = processes_running(argv);
        if !found.is_empty() {
            return found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no process {argv:?} started"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
