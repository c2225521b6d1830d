//! README.md works as written. Every fenced block is extracted and run:
//!
//! - `sh` blocks: each `airlock` line runs through bash, in order, in one
//!   fresh project (the files the examples name are there), with the
//!   approvals a waiting call makes approved as a person at `airlock watch`
//!   would; `hitl-…`, `grant-…` and `ses-…` (an open session) stand for
//!   the newest id, and
//!   `postgres://airlock@db.example/airlock` for a new database on a
//!   throwaway PostgreSQL server. A line with
//!   `--defer` must exit 3, every other one 0. A server line is started and
//!   must print the `# airlock: …` lines that follow it. Lines that build or
//!   test airlock itself (`cargo …`, `bash scripts/…`) or move about
//!   (`cd`, `export PATH`) are the only ones skipped; any other line fails
//!   the test, so a new example cannot go unchecked.
//! - `json` and `toml` blocks of MCP client configurations: each server
//!   entry's command line is started as the client would start it and must
//!   answer `initialize` and list tools.
//! - `yaml` blocks: each is an `airlock.yaml` that `airlock config check`
//!   accepts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use airlock_store::{ApprovalStatus, EventKind, Store};
use airlock_testkit::Workspace;
use airlock_testkit::peers::{Peer, require, tools_dir};
use serde_json::{Value, json};

/// One fenced block of the README.
struct Block {
    lang: String,
    heading: String,
    /// Line number (1-based) of its first line.
    line: usize,
    lines: Vec<String>,
}

fn blocks() -> Vec<Block> {
    let text = std::fs::read_to_string(airlock_testkit::repo().join("README.md")).unwrap();
    let mut blocks = Vec::new();
    let mut heading = String::new();
    let mut open: Option<Block> = None;
    // A block inside a list item is indented as a whole; that much is not
    // part of its lines.
    let mut indent = 0;
    for (at, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        if let Some(fence) = trimmed.strip_prefix("```") {
            match open.take() {
                Some(block) => blocks.push(block),
                None => {
                    indent = raw.len() - trimmed.len();
                    open = Some(Block {
                        lang: fence.trim().to_owned(),
                        heading: heading.clone(),
                        line: at + 2,
                        lines: Vec::new(),
                    });
                }
            }
            continue;
        }
        match &mut open {
            Some(block) => {
                let cut = raw.len() - raw.trim_start_matches(' ').len();
                block.lines.push(raw[cut.min(indent)..].to_owned());
            }
            None if raw.starts_with('#') => heading = raw.trim_start_matches('#').trim().to_owned(),
            None => {}
        }
    }
    assert!(open.is_none(), "README.md has an unclosed code block");
    blocks
}

/// Lines that build or test airlock itself, or only move about.
fn skipped(line: &str) -> bool {
    line.is_empty()
        || line.starts_with('#')
        || line.starts_with("cargo ")
        || line.starts_with("bash scripts/")
        || line.starts_with("scripts/")
        || line.starts_with("cd ")
        || line.starts_with("export PATH=")
}

/// The project the examples talk about.
fn project(ws: &Workspace) {
    ws.write(
        "src/lib.rs",
        "pub fn add(a: u32, b: u32) -> u32 {\n    a + b\n}\n",
    );
    ws.write("src/old.rs", "// moved by the example\n");
    ws.write("src/unused.rs", "// deleted by the example\n");
    ws.write("Cargo.toml", "[package]\nname = \"my-project\"\n");
    ws.write("docs/guide.md", "# Guide\n\nFirst draft.\n");
    ws.write(
        "change.patch",
        "--- a/docs/guide.md\n+++ b/docs/guide.md\n@@ -1,3 +1,3 @@\n # Guide\n \n-First draft.\n+Second draft.\n",
    );
    // Over 128 KiB of arguments: a patch adding a large file.
    let mut big = String::from("*** Begin Patch\n*** Add File: docs/big.txt\n");
    for n in 0..3000 {
        big.push_str(&format!(
            "+line {n:05} of a file that is large on purpose\n"
        ));
    }
    big.push_str("*** End Patch\n");
    assert!(big.len() > 128 * 1024);
    ws.write("big.patch", big);
}

/// PATH with the airlock binary first.
fn path_env() -> String {
    let bin = airlock_testkit::bin();
    format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The database URL the README's examples name.
const README_DATABASE: &str = "postgres://airlock@db.example/airlock";

struct Runner<'a> {
    ws: &'a Workspace,
    last_approval: Option<String>,
    seen_seq: u64,
}

impl Runner<'_> {
    fn store(&self) -> Option<Store> {
        let db = self.ws.path(".airlock/airlock.db");
        db.exists().then(|| Store::open(&db).unwrap())
    }

    fn substitute(&self, line: &str) -> String {
        let mut line = line.to_owned();
        if line.contains("hitl-…") {
            let id = self
                .last_approval
                .clone()
                .expect("no approval yet for hitl-…");
            line = line.replace("hitl-…", &id);
        }
        if line.contains("grant-…") {
            let grants = self.ws.run(&["grants", "--json"]).json;
            let id = grants
                .as_array()
                .and_then(|list| list.last())
                .and_then(|grant| grant["id"].as_str())
                .expect("no grant for grant-…")
                .to_owned();
            line = line.replace("grant-…", &id);
        }
        if line.contains("ses-…") {
            let sessions = self.ws.run(&["session", "list", "--json"]).json;
            let id = sessions
                .as_array()
                .and_then(|list| list.first())
                .and_then(|session| session["session_id"].as_str())
                .expect("no open session for ses-…")
                .to_owned();
            line = line.replace("ses-…", &id);
        }
        // The README's PostgreSQL server is a fresh database on the test's.
        if line.contains(README_DATABASE) {
            let url = airlock_testkit::postgres::PgServer::shared().new_database();
            line = line.replace(README_DATABASE, &url);
        }
        assert!(
            !line.contains('…'),
            "a placeholder the test does not know: {line}"
        );
        line
    }

    /// Approves what `child`'s line leaves pending, as a person at
    /// `airlock watch` would, until it ends; notes the newest approval.
    fn settle(&mut self, mut child: Child, approve: bool, shown: &str) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let done = child.try_wait().unwrap();
            if let Some(store) = self.store() {
                for event in store.events_after(self.seen_seq, 1000).unwrap() {
                    self.seen_seq = event.seq;
                    if event.kind != EventKind::ApprovalCreated {
                        continue;
                    }
                    let id = event.subject.clone().unwrap();
                    self.last_approval = Some(id.clone());
                    let pending = store.get(&id).unwrap().status == ApprovalStatus::Pending;
                    if approve && pending && done.is_none() {
                        let run = self.ws.run(&["approve", &id, "--json"]);
                        assert_eq!(run.code, 0, "approving for {shown}: {}", run.stderr);
                    }
                }
            }
            if let Some(status) = done {
                return status.code().unwrap_or(-1);
            }
            assert!(Instant::now() < deadline, "{shown} did not finish");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn bash(&self, line: &str) -> Command {
        let mut command = self.ws.command_of(Path::new("bash"), &["-c", line]);
        command
            .env("PATH", path_env())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Runs one line; `expected` are the `# airlock: …` lines a server
    /// line must print.
    fn run(&mut self, at: &str, line: &str, expected: &[String]) {
        let line = self.substitute(line);
        if line.starts_with("airlock serve") || line.starts_with("airlock wrap") {
            self.serve(at, &line, expected);
            return;
        }
        let mut child = self.bash(&line).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let out = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap());
        let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap());
        let shown = format!("{at}: {line}");
        let code = self.settle(child, !line.contains("--defer"), &shown);
        let (out, err) = (out.join().unwrap(), err.join().unwrap());
        let want = if line.contains("--defer") { 3 } else { 0 };
        assert_eq!(code, want, "{shown}\nstdout: {out}\nstderr: {err}");
    }

    fn serve(&self, at: &str, line: &str, expected: &[String]) {
        assert!(!expected.is_empty(), "{at}: say what {line} prints");
        let mut child = self.bash(&format!("exec {line}")).spawn().unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut printed = String::new();
        for want in expected {
            let (head, tail) = want.split_once('…').unwrap_or((want.as_str(), ""));
            loop {
                let mut got = String::new();
                let read = stderr.read_line(&mut got).unwrap();
                assert!(
                    read > 0,
                    "{at}: {line} ended before printing {want:?}:\n{printed}"
                );
                printed.push_str(&got);
                let got = got.trim_end();
                if got.starts_with(head) && got.ends_with(tail) {
                    break;
                }
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn every_shell_example_in_the_readme_runs_as_written() {
    if !require(
        "every_shell_example_in_the_readme_runs_as_written",
        &[Peer::Jq, Peer::Postgres],
    ) {
        return;
    }
    let ws = Workspace::bare();
    project(&ws);
    let mut runner = Runner {
        ws: &ws,
        last_approval: None,
        seen_seq: 0,
    };
    let mut ran = 0;
    for block in blocks().iter().filter(|block| block.lang == "sh") {
        for (offset, line) in block.lines.iter().enumerate() {
            let line = line.trim();
            if skipped(line) {
                continue;
            }
            let at = format!("README.md:{} ({})", block.line + offset, block.heading);
            assert!(
                line.starts_with("airlock ") || line.contains("| airlock "),
                "{at}: a line the test cannot run: {line}"
            );
            // The output lines a server line promises, as comments.
            let expected: Vec<String> = block.lines[offset + 1..]
                .iter()
                .map_while(|next| next.trim().strip_prefix("# ").map(str::to_owned))
                .filter(|next| next.starts_with("airlock: "))
                .collect();
            runner.run(&at, line, &expected);
            ran += 1;
        }
    }
    assert!(ran >= 20, "only {ran} README lines ran");
    // What the examples did: the tools changed the project.
    assert_eq!(ws.read("notes.md").as_deref(), Some("hello again\n"));
    assert_eq!(
        ws.read("src/lib.rs").as_deref(),
        Some("pub fn add(a: u32, b: u32) -> u32 {\n    a.wrapping_add(b)\n}\n")
    );
    assert_eq!(
        ws.read("docs/guide.md").as_deref(),
        Some("# Guide\n\nSecond draft.\n")
    );
    assert!(ws.path("src/new.rs").exists() && !ws.path("src/old.rs").exists());
    assert!(!ws.path("src/unused.rs").exists());
    assert!(ws.read("docs/big.txt").unwrap().len() > 100_000);
}

/// The server entries of an MCP client configuration: (command, args).
fn servers(block: &Block) -> Vec<(String, Vec<String>)> {
    let text = block.lines.join("\n");
    if block.lang == "toml" {
        // `command = "…"` and `args = [ … ]` (a JSON array).
        let value = |key: &str| {
            block
                .lines
                .iter()
                .find_map(|line| line.strip_prefix(&format!("{key} = ")))
                .map(|rest| serde_json::from_str::<Value>(rest).unwrap())
                .unwrap_or_else(|| panic!("README.md:{}: no {key}", block.line))
        };
        let args = value("args");
        return vec![(
            value("command").as_str().unwrap().to_owned(),
            args.as_array()
                .unwrap()
                .iter()
                .map(|arg| arg.as_str().unwrap().to_owned())
                .collect(),
        )];
    }
    let config: Value = serde_json::from_str(&text)
        .unwrap_or_else(|error| panic!("README.md:{}: not JSON: {error}", block.line));
    let Some(servers) = config["mcpServers"].as_object() else {
        return Vec::new();
    };
    servers
        .values()
        .map(|server| {
            (
                server["command"].as_str().unwrap().to_owned(),
                server["args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|arg| arg.as_str().unwrap().to_owned())
                    .collect(),
            )
        })
        .collect()
}

/// Starts `command args` as an MCP client would, in `cwd`, and asks it
/// for its tools over stdio: their names.
fn tool_names(
    ws: &Workspace,
    at: &str,
    command: &Path,
    args: &[String],
    cwd: &Path,
) -> Vec<String> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = ws
        .command_of(command, &args)
        .current_dir(cwd)
        .env("PATH", path_env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("{at}: cannot start {}: {error}", command.display()));
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let mut send = |message: Value| {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "readme-test", "version": "1"}}}),
    );
    let mut answer = |id: u64| -> Value {
        loop {
            let mut line = String::new();
            if stdout.read_line(&mut line).unwrap() == 0 {
                return Value::Null;
            }
            let message: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if message["id"] == json!(id) {
                return message;
            }
        }
    };
    let initialized = answer(1);
    if initialized["result"].is_null() {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "{at}: the server did not initialize: {initialized}\nstderr: {}",
            err.join().unwrap()
        );
    }
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let listed = answer(2);
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{at}: no tools: {listed}"))
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn every_mcp_client_snippet_in_the_readme_starts_a_server_that_lists_tools() {
    let ws = Workspace::bare();
    assert_eq!(ws.run(&["init"]).code, 0);
    // Where a client that names --workspace starts its servers: elsewhere.
    let elsewhere = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(ws.root()).unwrap();
    let mut started = 0;
    for block in blocks()
        .iter()
        .filter(|block| block.lang == "json" || block.lang == "toml")
    {
        for (command, args) in servers(block) {
            let at = format!("README.md:{} ({})", block.line, block.heading);
            let args: Vec<String> = args
                .iter()
                .map(|arg| arg.replace("/home/me/project", root.to_str().unwrap()))
                .collect();
            let named = args.iter().any(|arg| arg == "--workspace");
            let cwd: PathBuf = if named {
                elsewhere.path().to_owned()
            } else {
                ws.root().to_owned()
            };
            let program = match command.as_str() {
                "airlock" | "/usr/local/bin/airlock" => airlock_testkit::bin(),
                other => panic!("{at}: an unknown command {other}"),
            };
            let wraps_npx = args.iter().any(|arg| arg == "npx");
            if wraps_npx {
                if !require(
                    "every_mcp_client_snippet_in_the_readme_starts_a_server_that_lists_tools",
                    &[Peer::NodeTools],
                ) {
                    continue;
                }
                // npx finds the package installed in the project, as it
                // would after `npm install`.
                let modules = ws.path("node_modules");
                if !modules.exists() {
                    std::os::unix::fs::symlink(tools_dir().join("node_modules"), &modules).unwrap();
                }
            }
            let names = tool_names(&ws, &at, &program, &args, &cwd);
            if wraps_npx {
                assert!(
                    names.iter().any(|name| name == "list_directory"),
                    "{at}: {names:?}"
                );
            } else {
                assert!(
                    names.iter().any(|name| name == "write_file"),
                    "{at}: {names:?}"
                );
            }
            started += 1;
        }
    }
    assert!(started >= 5, "only {started} client snippets were started");
}

#[test]
fn every_config_snippet_in_the_readme_is_valid() {
    let mut checked = 0;
    for block in blocks().iter().filter(|block| block.lang == "yaml") {
        let ws = Workspace::with_config(&block.lines.join("\n"));
        let run = ws.run(&["config", "check"]);
        assert_eq!(
            run.code, 0,
            "README.md:{} ({}): {}",
            block.line, block.heading, run.stderr
        );
        checked += 1;
    }
    assert!(checked >= 1, "no yaml block in the README");
}
