//! The programs a test needs besides Rust. A plain `cargo test` on a machine
//! with only Rust skips the tests whose peers are missing and says which on
//! stderr; with `AIRLOCK_TEST_PEERS=1` (set by `scripts/test.sh`, which CI
//! runs) a missing peer fails the test instead, so CI never skips one.
//!
//! ```no_run
//! use airlock_testkit::peers::{Peer, require};
//! if !require("grep_agrees_with_ripgrep", &[Peer::Ripgrep]) {
//!     return;
//! }
//! ```

use std::path::{Path, PathBuf};

/// A program a test drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// Python with the `mcp` SDK (`scripts/mcp-test-env.sh`'s venv).
    PythonMcp,
    /// Node 22 with the npm MCP servers, the Inspector, the conformance
    /// suite and playwright-core (`scripts/mcp-test-env.sh`).
    NodeTools,
    /// Debian's Chromium (`AIRLOCK_CHROMIUM`, default `/usr/bin/chromium`).
    Chromium,
    /// ripgrep (`rg`).
    Ripgrep,
    /// Python 3 (`python3`), for small helper scripts.
    Python3,
    /// jq, which the README's examples use to build JSON arguments.
    Jq,
    /// PostgreSQL's server programs (`initdb`, `pg_ctl`, `psql`), for the
    /// shared store.
    Postgres,
}

impl Peer {
    fn describe(self) -> &'static str {
        match self {
            Peer::PythonMcp => "the Python mcp SDK (bash scripts/mcp-test-env.sh)",
            Peer::NodeTools => "Node and the npm MCP tools (bash scripts/mcp-test-env.sh)",
            Peer::Chromium => "Chromium (apt-get install chromium)",
            Peer::Ripgrep => "ripgrep (apt-get install ripgrep)",
            Peer::Python3 => "python3",
            Peer::Jq => "jq (apt-get install jq)",
            Peer::Postgres => "PostgreSQL (apt-get install postgresql)",
        }
    }

    /// Whether the peer is here.
    pub fn present(self) -> bool {
        match self {
            // The client driver also needs the npm tools' directory.
            Peer::PythonMcp => {
                tools_root().join("venv/bin/python").exists()
                    && tools_root().join("node_modules").exists()
            }
            Peer::NodeTools => tools_root().join("node_modules/node/bin/node").exists(),
            Peer::Chromium => chromium().exists(),
            Peer::Ripgrep => on_path("rg"),
            Peer::Python3 => on_path("python3"),
            Peer::Jq => on_path("jq"),
            Peer::Postgres => crate::postgres::available(),
        }
    }
}

/// Whether the test `test` may run: every peer is present. When one is
/// missing, with `AIRLOCK_TEST_PEERS=1` this fails the test; without, it
/// says on stderr that the test is skipped and why, and returns `false`.
pub fn require(test: &str, peers: &[Peer]) -> bool {
    let missing: Vec<&str> = peers
        .iter()
        .filter(|peer| !peer.present())
        .map(|peer| peer.describe())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let list = missing.join(", ");
    assert!(
        std::env::var("AIRLOCK_TEST_PEERS").as_deref() != Ok("1"),
        "{test} needs {list}, which is missing (AIRLOCK_TEST_PEERS=1 requires every peer)"
    );
    // Straight to the process's stderr, past the test harness's capture,
    // so a plain `cargo test` shows what it skipped.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "skipped {test}: needs {list} (scripts/test.sh installs them and runs every test)"
    );
    false
}

/// Where `scripts/mcp-test-env.sh` installs the tools: `$AIRLOCK_TOOLS`, or
/// `~/.cache/airlock/tools`.
fn tools_root() -> PathBuf {
    match std::env::var_os("AIRLOCK_TOOLS") {
        Some(dir) => PathBuf::from(dir),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/airlock/tools")
        }
    }
}

/// The tools directory, which must hold the Python venv and the npm tools.
pub fn tools_dir() -> PathBuf {
    let dir = tools_root();
    assert!(
        dir.join("venv/bin/python").exists() && dir.join("node_modules").exists(),
        "the MCP test tools are missing under {}: run `bash scripts/mcp-test-env.sh`",
        dir.display()
    );
    dir
}

/// Node 22 from the tools directory.
pub fn node() -> PathBuf {
    tools_root().join("node_modules/node/bin/node")
}

/// The browser: `AIRLOCK_CHROMIUM`, or `/usr/bin/chromium`.
pub fn chromium() -> PathBuf {
    std::env::var_os("AIRLOCK_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| is_executable(&dir.join(program)))
    })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}
