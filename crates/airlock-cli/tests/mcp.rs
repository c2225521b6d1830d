//! The MCP face with real clients and servers: the Python `mcp` SDK as the
//! client (through `tests/mcp/client.py`), `server-filesystem` and
//! `server-everything` from npm as upstreams, the MCP Inspector CLI.
//!
//! The tools come from `scripts/mcp-test-env.sh` (run by `.ci/run` and
//! `scripts/test.sh`) under `$AIRLOCK_TOOLS` (default
//! `~/.cache/airlock/tools`); a test fails, loudly, when they are missing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use airlock_store::EventKind;
use airlock_testkit::Workspace;
use airlock_testkit::http::Serving;
use airlock_testkit::mcp::Driver;
use airlock_testkit::peers::{Peer, require, tools_dir};
use serde_json::{Value, json};

fn bin() -> String {
    airlock_testkit::bin().display().to_string()
}

fn repo() -> PathBuf {
    airlock_testkit::repo()
}

/// A workspace holding `hello.txt`, and `airlock.yaml` when `config` is not
/// empty.
struct Ws(Workspace);

impl std::ops::Deref for Ws {
    type Target = Workspace;
    fn deref(&self) -> &Workspace {
        &self.0
    }
}

impl Ws {
    fn new(config: &str) -> Ws {
        let ws = Workspace::empty();
        if !config.is_empty() {
            ws.write("airlock.yaml", config);
        }
        ws.write("hello.txt", "hello\nworld\n");
        Ws(ws)
    }

    /// `airlock ARGS`: the exit code and standard output.
    fn airlock(&self, args: &[&str]) -> (i32, String) {
        let run = self.run(args);
        (run.code, run.stdout)
    }

    /// A client driving `airlock SERVE_ARGS` over stdio in this workspace.
    fn stdio_client(&self, client_args: &[&str], serve_args: &[&str]) -> Driver {
        Driver::stdio(self, client_args, serve_args)
    }

    /// The Python client with `args` in this workspace, as `user`.
    fn client(&self, args: &[String], user: &str) -> Driver {
        Driver::start(self.root(), args, user)
    }
}

/// `airlock serve --http 127.0.0.1:0` in `ws`; `url` is its MCP endpoint.
struct HttpServer {
    _serving: Serving,
    url: String,
}

impl HttpServer {
    fn start(ws: &Ws) -> HttpServer {
        let serving = Serving::start(ws, &[]);
        HttpServer {
            url: serving.mcp_url(),
            _serving: serving,
        }
    }
}

/// airlock's envelope of a tool result: the structured content of its own
/// tools' results, and in `_meta` of an upstream's own result.
fn envelope(result: &Value) -> &Value {
    match result
        .get("_meta")
        .and_then(|meta| meta.get("airlock/envelope"))
    {
        Some(envelope) => envelope,
        None => &result["structuredContent"],
    }
}

fn status(result: &Value) -> &str {
    envelope(result)["status"].as_str().unwrap_or("?")
}

fn code(result: &Value) -> &str {
    envelope(result)["error"]["code"].as_str().unwrap_or("")
}

const BUILTIN: [&str; 19] = [
    "read_file",
    "write_file",
    "edit_file",
    "apply_patch",
    "delete_file",
    "move_file",
    "grep",
    "glob",
    "list_dir",
    "stat",
    "exists",
    "exec",
    "session_open",
    "session_list",
    "session_close",
    "session_signal",
    "proposal_status",
    "permission_prompt",
    "codemode_eval",
];

#[test]
fn stdio_lists_tools_with_schemas_and_annotations_reads_and_denies_without_elicitation() {
    if !require(
        "stdio_lists_tools_with_schemas_and_annotations_reads_and_denies_without_elicitation",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new("");
    let mut client = ws.stdio_client(&["--elicitation", "none"], &["serve", "--stdio"]);
    let listed = client.send(json!({"op": "list_tools"}));
    let tools = listed["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, BUILTIN);
    for tool in tools {
        let name = tool["name"].as_str().unwrap();
        let read_only = matches!(
            name,
            "read_file"
                | "grep"
                | "glob"
                | "list_dir"
                | "stat"
                | "exists"
                | "session_list"
                | "proposal_status"
                | "permission_prompt"
        );
        assert_eq!(
            tool["annotations"]["readOnlyHint"],
            json!(read_only),
            "{name}"
        );
        // Opening a session changes airlock's state, nothing that is lost.
        if name == "session_open" {
            assert_eq!(tool["annotations"]["destructiveHint"], json!(false));
        } else if !read_only {
            assert_eq!(
                tool["annotations"]["destructiveHint"],
                json!(true),
                "{name}"
            );
        }
        assert_eq!(tool["inputSchema"]["type"], json!("object"), "{name}");
        assert!(tool["inputSchema"]["properties"].is_object(), "{name}");
    }

    let read = client.call("read_file", json!({"path": "hello.txt"}));
    assert_eq!(read["isError"], json!(false));
    assert_eq!(status(&read), "allowed");
    assert_eq!(
        read["structuredContent"]["data"]["content"],
        json!("hello\nworld\n")
    );
    assert_eq!(
        read["content"][0]["text"],
        json!("Read hello.txt: lines 1-2 of 12 bytes.")
    );

    // The default profile (supervised) asks for write_file; this client cannot
    // be asked, and with no approver channel live the default fallback
    // (auto) denies.
    let write = client.call("write_file", json!({"path": "new.txt", "content": "x\n"}));
    assert_eq!(write["isError"], json!(true));
    assert_eq!(status(&write), "denied");
    assert_eq!(code(&write), "policy_denied");
    assert_eq!(ws.read("new.txt"), None);

    // Bad input: a clear error, nothing changed.
    let bad = client.call("read_file", json!({"paht": "hello.txt"}));
    assert_eq!(bad["isError"], json!(true));
    assert_eq!(code(&bad), "invalid_input");
    let unknown = client.call("no_such_tool", json!({}));
    assert_eq!(code(&unknown), "unknown_tool");

    let events = ws.audit();
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "read_file" && e["status"] == "allowed")
    );
    assert!(events.iter().any(|e| e["tool"] == "write_file"
        && e["reason"] == "elicitation_fallback: auto (no approver channel live)"
        && e["status"] == "denied"));
}

#[test]
fn elicitation_approves_declines_and_the_profile_hides_what_it_denies() {
    if !require(
        "elicitation_approves_declines_and_the_profile_hides_what_it_denies",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new(
        "profiles:\n  safe:\n    allowlist: [read_file, grep]\n  supervised:\n    asklist: [write_file, edit_file]\n",
    );
    let mut safe = ws.stdio_client(
        &["--elicitation", "form"],
        &["serve", "--stdio", "--profile", "safe"],
    );
    assert_eq!(safe.tool_names(), ["read_file", "grep"]);
    let denied = safe.call("write_file", json!({"path": "a.txt", "content": "a\n"}));
    assert_eq!(status(&denied), "denied");
    drop(safe);

    let mut client = ws.stdio_client(&["--elicitation", "form"], &["serve", "--stdio"]);
    client.answer_elicitations("accept", json!({"decision": "approve"}));
    let approved = client.call(
        "write_file",
        json!({"path": "a.txt", "content": "approved\n"}),
    );
    assert_eq!(status(&approved), "allowed", "{approved}");
    assert_eq!(
        approved["structuredContent"]["decision"]["channel"],
        json!("mcp")
    );
    assert_eq!(ws.read("a.txt").as_deref(), Some("approved\n"));
    let asked = approved["elicitations"].as_array().unwrap();
    assert_eq!(asked.len(), 1);
    let message = asked[0]["message"].as_str().unwrap();
    assert!(
        message.contains("write_file") && message.contains("+approved"),
        "{message}"
    );
    let schema = &asked[0]["requestedSchema"];
    assert_eq!(
        schema["properties"]["decision"]["enum"],
        json!(["approve", "deny"])
    );
    assert_eq!(schema["required"], json!(["decision"]));
    // "Always" says exactly what it would allow before it is chosen.
    let always = schema["properties"]["always"]["description"]
        .as_str()
        .unwrap();
    assert!(
        always.starts_with(
            "Approve, and from now on allow write_file on a.txt with any content, for "
        ) && always.contains(" only, for 8h, without asking."),
        "{always}"
    );

    client.answer_elicitations("decline", json!(null));
    let declined = client.call("write_file", json!({"path": "b.txt", "content": "no\n"}));
    assert_eq!(status(&declined), "denied");
    assert_eq!(ws.read("b.txt"), None);

    client.answer_elicitations("accept", json!({"decision": "deny", "reason": "not now"}));
    let denied = client.call(
        "edit_file",
        json!({"path": "hello.txt", "old_string": "world", "new_string": "there"}),
    );
    assert_eq!(status(&denied), "denied");
    assert_eq!(ws.read("hello.txt").as_deref(), Some("hello\nworld\n"));

    // The client's answer is recorded by the task that asked, which may
    // finish just after the call it decided.
    let decisions = || -> Vec<(String, String)> {
        ws.audit()
            .iter()
            .filter(|e| e["event"] == "hitl_decision")
            .map(|e| {
                (
                    e["decision"].as_str().unwrap().to_owned(),
                    e["channel"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    for _ in 0..100 {
        if decisions().len() >= 3 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let decisions = decisions();
    assert_eq!(
        decisions,
        [
            ("approve".to_owned(), "mcp".to_owned()),
            ("deny".to_owned(), "mcp".to_owned()),
            ("deny".to_owned(), "mcp".to_owned())
        ]
    );
}

#[test]
fn fallback_defer_returns_hitl_required_and_proposal_status_follows_airlock_approve() {
    if !require(
        "fallback_defer_returns_hitl_required_and_proposal_status_follows_airlock_approve",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new(
        "default_profile: supervised\nprofiles:\n  supervised:\n    asklist: [write_file]\n    elicitation_fallback: defer\n",
    );
    let mut client = ws.stdio_client(&["--elicitation", "none"], &["serve", "--stdio"]);
    let deferred = client.call(
        "write_file",
        json!({"path": "d.txt", "content": "deferred\n"}),
    );
    assert_eq!(status(&deferred), "hitl_required", "{deferred}");
    assert_eq!(deferred["isError"], json!(false));
    let id = deferred["structuredContent"]["hitl"]["hitl_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(ws.read("d.txt"), None);

    let pending = client.call("proposal_status", json!({"hitl_id": id}));
    assert_eq!(
        pending["structuredContent"]["data"]["status"],
        json!("pending")
    );

    let (code, _) = ws.airlock(&["approve", &id]);
    assert_eq!(code, 0);
    assert_eq!(ws.read("d.txt").as_deref(), Some("deferred\n"));
    let applied = client.call("proposal_status", json!({"hitl_id": id}));
    assert_eq!(
        applied["structuredContent"]["data"]["status"],
        json!("applied")
    );
    assert_eq!(
        applied["structuredContent"]["data"]["result"]["status"],
        json!("allowed")
    );
}

#[test]
fn a_waiting_call_sends_progress_and_the_terminal_channel_can_decide_it() {
    if !require(
        "a_waiting_call_sends_progress_and_the_terminal_channel_can_decide_it",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new(
        "default_profile: supervised\nprofiles:\n  supervised:\n    asklist: [write_file]\n    elicitation_fallback: wait\n",
    );
    let mut client = ws.stdio_client(&["--elicitation", "none"], &["serve", "--stdio"]);
    client.send(json!({"op": "call_async", "id": "w", "tool": "write_file",
        "args": {"path": "w.txt", "content": "waited\n"}, "progress": true}));
    // Wait for the approval to exist, then let progress tick, then approve it
    // from another process.
    let id = ws.wait_for_pending();
    client.send(json!({"op": "wait_progress", "count": 1, "timeout": 30}));
    let (code, _) = ws.airlock(&["approve", &id]);
    assert_eq!(code, 0);
    let result = client.send(json!({"op": "await", "id": "w", "timeout": 30}));
    assert_eq!(status(&result), "allowed", "{result}");
    assert_eq!(
        result["structuredContent"]["decision"]["channel"],
        json!("terminal")
    );
    assert!(
        !result["progress"].as_array().unwrap().is_empty(),
        "no progress while waiting: {result}"
    );
    assert_eq!(ws.read("w.txt").as_deref(), Some("waited\n"));
}

#[test]
fn large_outputs_are_blobs_readable_as_resources() {
    if !require(
        "large_outputs_are_blobs_readable_as_resources",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let ws = Ws::new("file_broker:\n  max_inline_bytes: 64\n");
    let big: String = (0..50).map(|i| format!("line {i}\n")).collect();
    std::fs::write(ws.path("big.txt"), &big).unwrap();
    let mut client = ws.stdio_client(&["--elicitation", "none"], &["serve", "--stdio"]);
    let read = client.call("read_file", json!({"path": "big.txt"}));
    let blob = read["structuredContent"]["data"]["blob"]["blob_ref"]
        .as_str()
        .unwrap()
        .to_owned();
    let hex = blob.strip_prefix("sha256:").unwrap();
    let resource =
        client.send(json!({"op": "read_resource", "uri": format!("airlock://blob/sha256/{hex}")}));
    assert_eq!(resource["contents"][0]["text"], json!(big));
    assert!(
        ws.audit()
            .iter()
            .any(|e| e["event"] == "resource_read" && e["blob_ref"] == json!(blob))
    );
}

fn filesystem_server(ws: &Ws) -> String {
    let script =
        tools_dir().join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(script.exists(), "{} is missing", script.display());
    format!(
        "  - name: fs\n    command: node\n    args: [{:?}, {:?}]\n    trusted_annotations: true\n",
        script.display().to_string(),
        ws.root().display().to_string()
    )
}

fn upstream_pids(pattern: &str) -> Vec<String> {
    let output = Command::new("pgrep")
        .args(["-f", pattern])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn server_filesystem_behind_airlock_is_listed_prefixed_gated_and_restarted() {
    if !require(
        "server_filesystem_behind_airlock_is_listed_prefixed_gated_and_restarted",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let ws = Ws::new("");
    let config = format!(
        "upstreams:\n{}default_profile: dev\nprofiles:\n  dev:\n    asklist: [\"fs__write_file\", \"fs__edit_file\", \"fs__move_file\"]\n",
        filesystem_server(&ws)
    );
    std::fs::write(ws.path("airlock.yaml"), config).unwrap();
    let mut client = ws.stdio_client(&["--elicitation", "form"], &["serve", "--stdio"]);
    let names = client.tool_names();
    for name in [
        "fs__read_text_file",
        "fs__write_file",
        "fs__list_directory",
        "read_file",
        "proposal_status",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }

    // A read the upstream marks read-only (trusted here) passes without a prompt.
    let read = client.call("fs__read_text_file", json!({"path": "hello.txt"}));
    assert_eq!(status(&read), "allowed", "{read}");
    assert_eq!(read["elicitations"], json!([]));
    assert!(
        read["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("world"),
        "{read}"
    );

    // A write is gated: approved in the client, it reaches the upstream.
    client.answer_elicitations("accept", json!({"decision": "approve"}));
    let write = client.call(
        "fs__write_file",
        json!({"path": "up.txt", "content": "via upstream\n"}),
    );
    assert_eq!(status(&write), "allowed", "{write}");
    assert_eq!(write["elicitations"].as_array().unwrap().len(), 1);
    assert_eq!(ws.read("up.txt").as_deref(), Some("via upstream\n"));

    // Declined, it never reaches the upstream.
    client.answer_elicitations("decline", json!(null));
    let declined = client.call(
        "fs__write_file",
        json!({"path": "no.txt", "content": "no\n"}),
    );
    assert_eq!(status(&declined), "denied");
    assert_eq!(ws.read("no.txt"), None);

    // airlock's own state is off limits to upstream tools too.
    let state = client.call(
        "fs__read_text_file",
        json!({"path": ".airlock/audit.jsonl"}),
    );
    assert_eq!(status(&state), "denied", "{state}");

    // The upstream dies: the next call is an upstream_error at once, and it is
    // started again.
    let pattern = format!("server-filesystem/dist/index.js {}", ws.root().display());
    let pids = upstream_pids(&pattern);
    assert!(!pids.is_empty(), "no upstream process found");
    for pid in &pids {
        Command::new("kill").args(["-9", pid]).status().unwrap();
    }
    for pid in &pids {
        airlock_testkit::wait_gone(pid.parse().unwrap());
    }
    // The client gives up after 30 s: a call that hangs fails the test.
    let failed = client.send(json!({"op": "call", "tool": "fs__read_text_file",
        "args": {"path": "hello.txt"}, "timeout": 30}));
    assert!(
        matches!(code(&failed), "upstream_unavailable" | "unknown_tool"),
        "{failed}"
    );
    // The client is told when the dead server's tools go and again when the
    // restarted one's come back; then calls reach it.
    loop {
        let changed = client.send(json!({"op": "wait_tools_changed", "timeout": 30}));
        assert_eq!(
            changed["changed"],
            json!(true),
            "the upstream was not restarted"
        );
        if client
            .tool_names()
            .iter()
            .any(|name| name == "fs__read_text_file")
        {
            break;
        }
    }
    let again = client.call("fs__read_text_file", json!({"path": "hello.txt"}));
    assert_eq!(status(&again), "allowed", "{again}");
}

#[test]
fn upstream_arguments_reach_no_protected_or_denied_path_by_any_name_uri_dotdot_or_symlink() {
    if !require(
        "upstream_arguments_reach_no_protected_or_denied_path_by_any_name_uri_dotdot_or_symlink",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let ws = Ws::new("");
    let config = format!("upstreams:\n{}", filesystem_server(&ws));
    std::fs::write(ws.path("airlock.yaml"), config).unwrap();
    std::fs::write(ws.path(".env"), "TOKEN=s3cret\n").unwrap();
    std::fs::create_dir_all(ws.path("sub")).unwrap();
    std::os::unix::fs::symlink(".airlock", ws.path("peek")).unwrap();
    std::os::unix::fs::symlink(".env", ws.path("notenv")).unwrap();
    let root = ws.root().canonicalize().unwrap().display().to_string();
    let mut client = ws.stdio_client(&[], &["serve", "--stdio"]);
    // The upstream marks these reads read-only (trusted here): nothing asks,
    // so only the path checks stand between them and the files.
    let fine = client.call("fs__read_text_file", json!({"path": "hello.txt"}));
    assert_eq!(status(&fine), "allowed", "{fine}");
    let cases = [
        (
            "a file URI",
            json!({"path": format!("file://{root}/.airlock/audit.jsonl")}),
            "path_forbidden",
        ),
        (
            "a percent-encoded file URI",
            json!({"path": format!("file://{root}/%2Eairlock/audit.jsonl")}),
            "path_forbidden",
        ),
        (
            "a relative path with ..",
            json!({"path": "sub/../.airlock/audit.jsonl"}),
            "path_forbidden",
        ),
        (
            "an absolute path with ..",
            json!({"path": format!("{root}/sub/../.env")}),
            "path_denied",
        ),
        (
            "a symlink to the state dir",
            json!({"path": "peek/audit.jsonl"}),
            "path_forbidden",
        ),
        (
            "an absolute symlink path",
            json!({"path": format!("{root}/peek/audit.jsonl")}),
            "path_forbidden",
        ),
        (
            "a symlink to a denied file",
            json!({"path": "notenv"}),
            "path_denied",
        ),
        (
            "a path nested in an object",
            json!({"path": "hello.txt", "options": {"also": ".airlock/airlock.db"}}),
            "path_forbidden",
        ),
        (
            "a path nested in an array",
            json!({"path": "hello.txt", "extra": [["x", "sub/../peek/audit.jsonl"]]}),
            "path_forbidden",
        ),
        (
            "a path under any name",
            json!({"path": "hello.txt", "whatever": "./.env"}),
            "path_denied",
        ),
    ];
    for (what, args, expected) in cases {
        let read = client.call("fs__read_text_file", args);
        assert_eq!(status(&read), "denied", "{what}: {read}");
        assert_eq!(code(&read), expected, "{what}: {read}");
    }
    let write = client.call(
        "fs__write_file",
        json!({"path": "peek/planted.txt", "content": "x"}),
    );
    assert_eq!(status(&write), "denied", "{write}");
    assert!(!ws.path(".airlock/planted.txt").exists());
}

/// `airlock serve --http 127.0.0.1:0`, and the address it listens on.
#[test]
fn streamable_http_with_the_python_sdk_and_a_profile_bound_by_the_path() {
    if !require(
        "streamable_http_with_the_python_sdk_and_a_profile_bound_by_the_path",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new(
        "default_profile: supervised\nprofiles:\n  safe:\n    allowlist: [read_file]\n  supervised:\n    asklist: [write_file]\n",
    );
    let server = HttpServer::start(&ws);
    let mut client = ws.client(
        &[
            "--elicitation".to_owned(),
            "form".to_owned(),
            "--http".to_owned(),
            server.url.clone(),
        ],
        "tester",
    );
    assert_eq!(client.tool_names(), BUILTIN);
    let read = client.call("read_file", json!({"path": "hello.txt"}));
    assert_eq!(status(&read), "allowed");
    client.answer_elicitations("accept", json!({"decision": "approve"}));
    let write = client.call(
        "write_file",
        json!({"path": "h.txt", "content": "over http\n"}),
    );
    assert_eq!(status(&write), "allowed", "{write}");
    assert_eq!(ws.read("h.txt").as_deref(), Some("over http\n"));
    drop(client);

    let mut safe = ws.client(
        &[
            "--elicitation".to_owned(),
            "none".to_owned(),
            "--http".to_owned(),
            format!("{}/safe", server.url),
        ],
        "tester",
    );
    assert_eq!(safe.tool_names(), ["read_file"]);
    let denied = safe.call("write_file", json!({"path": "s.txt", "content": "no\n"}));
    assert_eq!(status(&denied), "denied");
}

#[test]
fn the_mcp_inspector_cli_lists_and_calls_tools_through_serve_stdio() {
    if !require(
        "the_mcp_inspector_cli_lists_and_calls_tools_through_serve_stdio",
        &[Peer::NodeTools],
    ) {
        return;
    }
    let ws = Ws::new("");
    let inspector = |args: &[&str]| {
        let output = Command::new("bash")
            .arg(repo().join("scripts/mcp-inspector.sh"))
            .arg("-q")
            .args(args)
            .args(["--", bin().as_str(), "serve", "--stdio"])
            .current_dir(ws.root())
            .env("AIRLOCK_TOOLS", tools_dir())
            .env("AIRLOCK_USER", "tester")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        (
            output.status.code(),
            serde_json::from_str::<Value>(&stdout).unwrap_or(Value::Null),
            stdout,
        )
    };
    let (code, listed, raw) = inspector(&["list"]);
    assert_eq!(code, Some(0), "{raw}");
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, BUILTIN);
    let (code, called, raw) = inspector(&["call", "read_file", "path=hello.txt"]);
    assert_eq!(code, Some(0), "{raw}");
    assert_eq!(
        called["structuredContent"]["data"]["content"],
        json!("hello\nworld\n")
    );
    let (code, denied, raw) = inspector(&[
        "call-json",
        "write_file",
        r#"{"path": "i.txt", "content": "x"}"#,
    ]);
    assert_eq!(code, Some(5), "{raw}");
    assert_eq!(denied["structuredContent"]["status"], json!("denied"));
    assert_eq!(ws.read("i.txt"), None);
}

#[test]
fn the_conformance_suite_against_serve_http() {
    if !require(
        "the_conformance_suite_against_serve_http",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let ws = Ws::new("");
    let server = HttpServer::start(&ws);
    let out = tempfile::tempdir().unwrap();
    let output = Command::new("bash")
        .arg(repo().join("scripts/mcp-conformance.sh"))
        .args([
            "--require",
            "server-initialize,tools-list,ping,logging-set-level,completion-complete",
        ])
        .arg(&server.url)
        .arg(out.path())
        .env("AIRLOCK_TOOLS", tools_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Every scenario's result, for the record (`cargo test -- --nocapture`).
    println!("{stdout}");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn everything_server() -> String {
    let script =
        tools_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(script.exists(), "{} is missing", script.display());
    script.display().to_string()
}

#[test]
fn wrap_gates_server_everything_under_its_own_tool_names() {
    if !require(
        "wrap_gates_server_everything_under_its_own_tool_names",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let ws = Ws::new("");
    let everything = everything_server();
    let mut client = ws.stdio_client(
        &["--elicitation", "form"],
        &[
            "wrap",
            "--name",
            "every",
            "--",
            "node",
            &everything,
            "stdio",
        ],
    );
    let names = client.tool_names();
    assert!(names.iter().any(|n| n == "echo"), "{names:?}");
    assert!(names.iter().all(|n| !n.contains("__")), "{names:?}");
    assert!(!names.iter().any(|n| n == "read_file"), "{names:?}");

    // Untrusted annotations: every tool is high risk and asks.
    client.answer_elicitations("accept", json!({"decision": "approve"}));
    let echoed = client.call("echo", json!({"message": "through the airlock"}));
    assert_eq!(status(&echoed), "allowed", "{echoed}");
    assert_eq!(echoed["elicitations"].as_array().unwrap().len(), 1);
    assert!(
        echoed["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("through the airlock")
    );
    client.answer_elicitations("decline", json!(null));
    let declined = client.call("echo", json!({"message": "no"}));
    assert_eq!(status(&declined), "denied");
    let events = ws.audit();
    assert!(events.iter().any(|e| e["event"] == "tool_call_apply"
        && e["tool"] == "every__echo"
        && e["status"] == "allowed"));
}

#[test]
fn server_everything_upstream_listed_with_its_prefix() {
    if !require(
        "server_everything_upstream_listed_with_its_prefix",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let ws = Ws::new("");
    let config = format!(
        "upstreams:\n  - name: every\n    command: node\n    args: [{:?}, stdio]\n",
        everything_server()
    );
    std::fs::write(ws.path("airlock.yaml"), config).unwrap();
    let mut client = ws.stdio_client(&["--elicitation", "none"], &["serve", "--stdio"]);
    let names = client.tool_names();
    assert!(names.iter().any(|n| n == "every__echo"), "{names:?}");
    assert!(names.iter().any(|n| n == "read_file"), "{names:?}");
    // No client to ask and the default fallback: denied, never forwarded.
    let denied = client.call("every__echo", json!({"message": "hi"}));
    assert_eq!(status(&denied), "denied", "{denied}");
}

#[test]
fn hot_reload_takes_a_new_profile_and_rejects_a_broken_file() {
    if !require(
        "hot_reload_takes_a_new_profile_and_rejects_a_broken_file",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new("default_profile: dev\nprofiles:\n  dev:\n    asklist: [write_file]\n");
    let mut client = ws.stdio_client(&["--elicitation", "none"], &["serve", "--stdio"]);
    assert_eq!(
        status(&client.call("read_file", json!({"path": "hello.txt"}))),
        "allowed"
    );
    let mut feed = ws.feed();
    feed.skip_to_now();
    std::fs::write(
        ws.path("airlock.yaml"),
        "default_profile: dev\nprofiles:\n  dev:\n    denylist: [read_file]\n",
    )
    .unwrap();
    // The feed says when the new configuration is in force.
    feed.wait_for(EventKind::ConfigReloaded);
    let read = client.call("read_file", json!({"path": "hello.txt"}));
    assert_eq!(status(&read), "denied", "{read}");
    assert!(!client.tool_names().iter().any(|n| n == "read_file"));
    let changed = client.send(json!({"op": "wait_tools_changed", "timeout": 5}));
    assert_eq!(changed["changed"], json!(true));

    std::fs::write(
        ws.path("airlock.yaml"),
        "default_profile: dev\nprofiles: [broken\n",
    )
    .unwrap();
    feed.wait_for(EventKind::ConfigRejected);
    // The old configuration stays.
    assert_eq!(
        status(&client.call("read_file", json!({"path": "hello.txt"}))),
        "denied"
    );
    assert_eq!(
        status(&client.call("stat", json!({"path": "hello.txt"}))),
        "allowed"
    );
}

#[test]
fn a_2026_07_28_client_answers_an_input_required_result() {
    if !require(
        "a_2026_07_28_client_answers_an_input_required_result",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new("default_profile: dev\nprofiles:\n  dev:\n    asklist: [write_file]\n");
    let mut client = ws.stdio_client(
        &["--elicitation", "form", "--protocol", "2026-07-28"],
        &["serve", "--stdio"],
    );
    client.answer_elicitations("accept", json!({"decision": "approve"}));
    let approved = client.send(json!({"op": "call", "tool": "write_file",
        "args": {"path": "r.txt", "content": "rounds\n"}, "raw_rounds": true}));
    assert_eq!(status(&approved), "allowed", "{approved}");
    assert_eq!(ws.read("r.txt").as_deref(), Some("rounds\n"));
    let rounds = approved["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{approved}");
    let first = &rounds[0]["result"];
    assert_eq!(first["resultType"], json!("input_required"));
    let asked = &first["inputRequests"]["airlock_approval"];
    assert_eq!(asked["method"], json!("elicitation/create"));
    assert!(
        asked["params"]["message"]
            .as_str()
            .unwrap()
            .contains("+rounds")
    );
    let state = first["requestState"].as_str().unwrap();
    // The state is signed, not secret: it names the approval and expires with it.
    assert_eq!(rounds[1]["request"]["requestState"], json!(state));
    assert_eq!(
        rounds[1]["request"]["inputResponses"]["airlock_approval"]["action"],
        json!("accept")
    );

    client.answer_elicitations("decline", json!(null));
    let declined = client.send(json!({"op": "call", "tool": "write_file",
        "args": {"path": "n.txt", "content": "no\n"}, "raw_rounds": true}));
    assert_eq!(status(&declined), "denied", "{declined}");
    assert_eq!(ws.read("n.txt"), None);
    let channels: Vec<Value> = ws
        .audit()
        .iter()
        .filter(|e| e["event"] == "hitl_decision")
        .map(|e| json!([e["decision"], e["channel"]]))
        .collect();
    assert_eq!(
        channels,
        [json!(["approve", "mcp"]), json!(["deny", "mcp"])]
    );
}

/// A workspace whose default profile asks before `write_file`.
const ASKS_FOR_WRITES: &str =
    "default_profile: dev\nprofiles:\n  dev:\n    asklist: [write_file]\n";

/// What the human answers in the 2026-07-28 rounds: approve.
fn approve_responses() -> Value {
    json!({"airlock_approval": {"action": "accept", "content": {"decision": "approve"}}})
}

/// A 2026-07-28 client of `airlock serve --stdio` in `ws`, both run as `user`.
fn rounds_client(ws: &Ws, user: &str) -> Driver {
    let bin = bin();
    let args: Vec<String> = [
        "--elicitation",
        "form",
        "--protocol",
        "2026-07-28",
        "--stdio",
        "--",
        bin.as_str(),
        "serve",
        "--stdio",
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    ws.client(&args, user)
}

/// Calls `write_file` once with `args` and returns the `requestState` of the
/// `InputRequiredResult` that asks the human about it.
fn request_state_for(client: &mut Driver, args: &Value) -> String {
    let first = client.send(json!({"op": "call_once", "tool": "write_file", "args": args}));
    assert_eq!(
        first["result"]["resultType"],
        json!("input_required"),
        "{first}"
    );
    first["result"]["requestState"].as_str().unwrap().to_owned()
}

/// Sends one `write_file` retry with `args`, `state` and `responses`; the raw
/// result.
fn present_state(client: &mut Driver, args: &Value, state: &str, responses: &Value) -> Value {
    let answer = client.send(
        json!({"op": "call_once", "tool": "write_file", "args": args,
        "request_state": state, "input_responses": responses}),
    );
    assert!(answer.get("error").is_none(), "{answer}");
    answer["result"].clone()
}

/// The exact refusal of a retry whose `requestState` airlock does not accept.
fn assert_state_refused(result: &Value, message: &str) {
    assert_eq!(result["resultType"], json!("complete"), "{result}");
    assert_eq!(result["isError"], json!(true), "{result}");
    let envelope = &result["structuredContent"];
    assert_eq!(envelope["status"], json!("error"), "{result}");
    assert_eq!(envelope["op"]["method"], json!("hitl.decide"), "{result}");
    assert_eq!(envelope["op"]["tool"], json!("write_file"), "{result}");
    assert_eq!(
        envelope["error"]["code"],
        json!("invalid_input"),
        "{result}"
    );
    assert_eq!(envelope["error"]["message"], json!(message), "{result}");
}

const NOT_VALID_FOR_THIS_CALL: &str = "requestState is not valid for this call: forged, altered, expired, or made for another call or principal";

fn events_named<'a>(events: &'a [Value], event: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == event).collect()
}

#[test]
fn a_spent_request_state_is_refused_and_nothing_is_applied_twice() {
    if !require(
        "a_spent_request_state_is_refused_and_nothing_is_applied_twice",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new(ASKS_FOR_WRITES);
    let mut client = rounds_client(&ws, "tester");
    client.answer_elicitations("accept", json!({"decision": "approve"}));
    let args = json!({"path": "once.txt", "content": "once\n"});
    let approved = client.send(json!({"op": "call", "tool": "write_file", "args": args,
        "raw_rounds": true}));
    assert_eq!(status(&approved), "allowed", "{approved}");
    assert_eq!(ws.read("once.txt").as_deref(), Some("once\n"));
    let rounds = approved["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{approved}");
    let state = rounds[0]["result"]["requestState"].as_str().unwrap();
    let responses = rounds[1]["request"]["inputResponses"].clone();
    assert_eq!(responses, approve_responses());

    // Someone edits the file; the same retry, sent again, must not write it
    // again (nor decide anything again).
    std::fs::write(ws.path("once.txt"), "edited by hand\n").unwrap();
    let replayed = present_state(&mut client, &args, state, &responses);
    assert_state_refused(&replayed, "requestState was already used");
    assert_eq!(ws.read("once.txt").as_deref(), Some("edited by hand\n"));

    let events = ws.audit();
    let applies = events_named(&events, "write_file_apply");
    assert_eq!(applies.len(), 1, "{applies:?}");
    assert_eq!(applies[0]["status"], json!("allowed"));
    assert_eq!(events_named(&events, "hitl_decision").len(), 1);
}

#[test]
fn a_request_state_with_one_character_altered_is_refused() {
    if !require(
        "a_request_state_with_one_character_altered_is_refused",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new(ASKS_FOR_WRITES);
    let mut client = rounds_client(&ws, "tester");
    let args = json!({"path": "altered.txt", "content": "asked\n"});
    let state = request_state_for(&mut client, &args);
    // A character in the middle of the sealed body (never a padding bit).
    let (version, rest) = state.split_once('.').unwrap();
    let body_len = rest.split('.').next().unwrap().len();
    assert!(body_len > 8, "{state}");
    let at = version.len() + 1 + body_len / 2;
    let mut altered = state.clone().into_bytes();
    altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    assert_ne!(altered, state);

    let refused = present_state(&mut client, &args, &altered, &approve_responses());
    assert_state_refused(&refused, NOT_VALID_FOR_THIS_CALL);
    assert_eq!(ws.read("altered.txt"), None);

    // The refusal spent nothing: the state as handed out still decides.
    let applied = present_state(&mut client, &args, &state, &approve_responses());
    assert_eq!(status(&applied), "allowed", "{applied}");
    assert_eq!(ws.read("altered.txt").as_deref(), Some("asked\n"));
}

#[test]
fn a_request_state_presented_with_other_arguments_is_refused() {
    if !require(
        "a_request_state_presented_with_other_arguments_is_refused",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new(ASKS_FOR_WRITES);
    let mut client = rounds_client(&ws, "tester");
    let args = json!({"path": "args.txt", "content": "asked\n"});
    let state = request_state_for(&mut client, &args);

    let other_content = json!({"path": "args.txt", "content": "smuggled\n"});
    let refused = present_state(&mut client, &other_content, &state, &approve_responses());
    assert_state_refused(&refused, NOT_VALID_FOR_THIS_CALL);
    let other_path = json!({"path": "elsewhere.txt", "content": "asked\n"});
    let refused = present_state(&mut client, &other_path, &state, &approve_responses());
    assert_state_refused(&refused, NOT_VALID_FOR_THIS_CALL);
    assert_eq!(ws.read("args.txt"), None);
    assert_eq!(ws.read("elsewhere.txt"), None);

    let applied = present_state(&mut client, &args, &state, &approve_responses());
    assert_eq!(status(&applied), "allowed", "{applied}");
    assert_eq!(ws.read("args.txt").as_deref(), Some("asked\n"));
    assert_eq!(ws.read("elsewhere.txt"), None);
}

#[test]
fn a_request_state_presented_by_another_user_is_refused() {
    if !require(
        "a_request_state_presented_by_another_user_is_refused",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new(ASKS_FOR_WRITES);
    let mut asker = rounds_client(&ws, "tester");
    let args = json!({"path": "user.txt", "content": "asked\n"});
    let state = request_state_for(&mut asker, &args);

    let mut other = rounds_client(&ws, "mallory");
    let refused = present_state(&mut other, &args, &state, &approve_responses());
    assert_state_refused(&refused, NOT_VALID_FOR_THIS_CALL);
    assert_eq!(ws.read("user.txt"), None);
    assert!(
        events_named(&ws.audit(), "hitl_decision").is_empty(),
        "{:?}",
        ws.audit()
    );

    // The same user in a third process (same workspace, same key) is accepted:
    // the refusal above was about the user.
    let mut same_user = rounds_client(&ws, "tester");
    let applied = present_state(&mut same_user, &args, &state, &approve_responses());
    assert_eq!(status(&applied), "allowed", "{applied}");
    assert_eq!(ws.read("user.txt").as_deref(), Some("asked\n"));
    let events = ws.audit();
    let decisions = events_named(&events, "hitl_decision");
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0]["user"], json!("tester"), "{:?}", decisions[0]);
}

/// One plain HTTP/1.1 POST of an MCP `initialize` to `url`
/// (`http://host:port/path`), with `Authorization: Bearer <token>` when
/// given: the status and the body.
fn post_initialize(url: &str, token: Option<&str>) -> (u16, String) {
    use std::io::Read as _;
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "plain-http", "version": "0"}}})
    .to_string();
    let authorization = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{authorization}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    let status: u16 = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut length = None;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = Some(value.trim().parse::<usize>().unwrap());
        }
    }
    // Only a body of known length is read: a successful initialize may
    // answer with an event stream that stays open.
    let mut body = vec![0; length.unwrap_or(0)];
    reader.read_exact(&mut body).unwrap();
    (status, String::from_utf8(body).unwrap())
}

#[test]
fn http_bearer_tokens_refuse_401_and_403_and_the_agent_token_names_the_user() {
    if !require(
        "http_bearer_tokens_refuse_401_and_403_and_the_agent_token_names_the_user",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let agent_token = "agent-secret-0123456789";
    let approver_token = "approver-secret-0123456789";
    let hash = |token: &str| airlock_core::canonical::sha256_hex(token.as_bytes());
    let ws = Ws::new(&format!(
        "profiles:\n  safe:\n    allowlist: [read_file]\nauth:\n  tokens:\n    \
         - {{name: claude, sha256: \"{}\", roles: [agent], user: alice}}\n    \
         - {{name: phone, sha256: \"{}\", roles: [approver], user: alice}}\n",
        hash(agent_token),
        hash(approver_token)
    ));
    let server = HttpServer::start(&ws);
    let error = |status: u16, code: &str, message: &str| {
        (
            status,
            json!({"status": "error", "error": {"code": code, "message": message}}).to_string(),
        )
    };
    let missing = error(401, "unauthorized", "a bearer token is required");
    let unknown = error(401, "unauthorized", "the bearer token is not known");
    assert_eq!(post_initialize(&server.url, None), missing);
    assert_eq!(
        post_initialize(&server.url, Some("not-a-configured-token")),
        unknown
    );
    // The hash itself is not the token.
    assert_eq!(
        post_initialize(&server.url, Some(&hash(agent_token))),
        unknown
    );
    assert_eq!(
        post_initialize(&server.url, Some(approver_token)),
        error(
            403,
            "forbidden",
            "this token does not have the agent role, which MCP requires"
        )
    );
    // Nothing is told before the token checks out, not even which profiles exist.
    assert_eq!(
        post_initialize(&format!("{}/nope", server.url), None),
        missing
    );
    assert_eq!(
        post_initialize(&format!("{}/safe", server.url), Some(approver_token)).0,
        403
    );
    assert_eq!(post_initialize(&server.url, Some(agent_token)).0, 200);

    let mut client = ws.client(
        &[
            "--elicitation".to_owned(),
            "none".to_owned(),
            "--http".to_owned(),
            server.url.clone(),
            "--header".to_owned(),
            format!("Authorization: Bearer {agent_token}"),
        ],
        "tester",
    );
    assert_eq!(client.tool_names(), BUILTIN);
    let read = client.call("read_file", json!({"path": "hello.txt"}));
    assert_eq!(status(&read), "allowed", "{read}");
    assert_eq!(
        read["structuredContent"]["data"]["content"],
        json!("hello\nworld\n")
    );
    let events = ws.audit();
    let reads = events_named(&events, "read_file");
    assert_eq!(reads.len(), 1, "{reads:?}");
    assert_eq!(reads[0]["status"], json!("allowed"));
    assert_eq!(reads[0]["user"], json!("alice"), "{:?}", reads[0]);
    assert_eq!(
        reads[0]["agent"],
        json!("airlock-test-client"),
        "{:?}",
        reads[0]
    );
}

#[test]
fn http_mcp_path_with_a_profile_that_does_not_exist_is_a_404() {
    if !require(
        "http_mcp_path_with_a_profile_that_does_not_exist_is_a_404",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new("profiles:\n  safe:\n    allowlist: [read_file]\n");
    let server = HttpServer::start(&ws);
    assert_eq!(
        post_initialize(&format!("{}/nope", server.url), None),
        (
            404,
            "no profile named nope in the configuration\n".to_owned()
        )
    );
    assert_eq!(
        post_initialize(&format!("{}/safe", server.url), None).0,
        200
    );
    assert_eq!(post_initialize(&server.url, None).0, 200);

    // The Python SDK sees the 404 and never gets a session.
    let mut client = ws.client(
        &[
            "--elicitation".to_owned(),
            "none".to_owned(),
            "--http".to_owned(),
            format!("{}/nope", server.url),
        ],
        "tester",
    );
    let refused = client.send_any(json!({"op": "list_tools"}));
    assert_eq!(
        refused,
        json!({"ok": false, "error": "ConnectionError: not connected: MCPError: Not Found"})
    );
}

#[test]
fn completion_answers_but_never_enumerates_blob_hashes() {
    if !require(
        "completion_answers_but_never_enumerates_blob_hashes",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new("file_broker:\n  max_inline_bytes: 64\n");
    let mut client = ws.stdio_client(&["--elicitation", "none"], &["serve", "--stdio"]);
    let info = client.send(json!({"op": "info"}));
    assert_eq!(info["capabilities"]["completions"], json!({}), "{info}");

    // A real blob, the output of a read too large to return inline.
    let text: String = (0..20).map(|line| format!("line {line}\n")).collect();
    std::fs::write(ws.path("big.txt"), text).unwrap();
    let read = client.call("read_file", json!({"path": "big.txt"}));
    let blob = read["structuredContent"]["data"]["blob"]["blob_ref"]
        .as_str()
        .unwrap_or_else(|| panic!("no blob: {read}"))
        .strip_prefix("sha256:")
        .unwrap()
        .to_owned();

    let mut complete = |reference: Value, name: &str, value: &str| {
        let answer = client.send(json!({"op": "complete", "ref": reference,
            "argument": {"name": name, "value": value}}));
        answer["completion"].clone()
    };
    // A blob's hash is what lets a session read it: it is never listed, not
    // even to a prefix of it.
    let blob_template = json!({"type": "ref/resource", "uri": "airlock://blob/sha256/{hex}"});
    let empty = json!({"values": []});
    assert_eq!(complete(blob_template.clone(), "hex", ""), empty);
    assert_eq!(complete(blob_template.clone(), "hex", &blob[..2]), empty);
    assert_eq!(complete(blob_template, "hex", &blob), empty);
    // airlock has no prompts.
    assert_eq!(
        complete(json!({"type": "ref/prompt", "name": "review"}), "x", ""),
        empty
    );
    // The blob itself is still readable by its name.
    let resource = client.send(json!({"op": "read_resource",
        "uri": format!("airlock://blob/sha256/{blob}")}));
    assert!(resource.to_string().contains("line 19"), "{resource}");
}

/// The `notifications/message` a client received since it last asked.
fn log_messages(client: &mut Driver) -> Vec<Value> {
    let answer = client.send(json!({"op": "notifications"}));
    answer["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["method"] == "notifications/message")
        .map(|n| n["params"].clone())
        .collect()
}

#[test]
fn logging_set_level_filters_the_log_messages_of_configuration_reloads() {
    if !require(
        "logging_set_level_filters_the_log_messages_of_configuration_reloads",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new("default_profile: dev\nprofiles:\n  dev:\n    asklist: [write_file]\n");
    let mut client = ws.stdio_client(&["--elicitation", "none"], &["serve", "--stdio"]);
    let info = client.send(json!({"op": "info"}));
    assert_eq!(info["capabilities"]["logging"], json!({}), "{info}");
    let set = client.send(json!({"op": "set_level", "level": "warning"}));
    assert_eq!(set["result"], json!({}), "{set}");
    client.send(json!({"op": "notifications"}));

    // A reload is a notice: below warning, the client hears only that its
    // tools changed (which comes after the log message, when there is one).
    std::fs::write(
        ws.path("airlock.yaml"),
        "default_profile: dev\nprofiles:\n  dev:\n    asklist: [write_file, edit_file]\n",
    )
    .unwrap();
    let changed = client.send(json!({"op": "wait_tools_changed", "timeout": 10}));
    assert_eq!(changed["changed"], json!(true));
    assert_eq!(log_messages(&mut client), Vec::<Value>::new());

    // A rejected file is a warning: it comes through.
    std::fs::write(
        ws.path("airlock.yaml"),
        "default_profile: dev\nprofiles: [broken\n",
    )
    .unwrap();
    client
        .send(json!({"op": "wait_notification", "method": "notifications/message", "timeout": 30}));
    let warned = log_messages(&mut client);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0]["level"], json!("warning"));
    assert_eq!(warned[0]["logger"], json!("airlock"));
    let text = warned[0]["data"].as_str().unwrap();
    assert!(
        text.starts_with("configuration rejected, the old one stays: "),
        "{text}"
    );

    // At debug, the next reload's notice comes through too.
    let set = client.send(json!({"op": "set_level", "level": "debug"}));
    assert_eq!(set["result"], json!({}), "{set}");
    std::fs::write(
        ws.path("airlock.yaml"),
        "default_profile: dev\nprofiles:\n  dev:\n    asklist: [write_file]\n",
    )
    .unwrap();
    let changed = client.send(json!({"op": "wait_tools_changed", "timeout": 10}));
    assert_eq!(changed["changed"], json!(true));
    assert_eq!(
        log_messages(&mut client),
        [json!({"level": "notice", "logger": "airlock", "data": "configuration reloaded"})]
    );
}

#[test]
fn a_request_state_is_refused_once_the_configuration_no_longer_lets_the_client_decide() {
    if !require(
        "a_request_state_is_refused_once_the_configuration_no_longer_lets_the_client_decide",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new(ASKS_FOR_WRITES);
    let mut asker = rounds_client(&ws, "tester");
    let args = json!({"path": "mode.txt", "content": "asked\n"});
    let state = request_state_for(&mut asker, &args);

    // From now on no client decides: approvals wait for the terminal or web.
    std::fs::write(
        ws.path("airlock.yaml"),
        format!("{ASKS_FOR_WRITES}security:\n  hitl:\n    approval_mode: defer\n"),
    )
    .unwrap();
    let mut client = rounds_client(&ws, "tester");
    let refused = present_state(&mut client, &args, &state, &approve_responses());
    assert_state_refused(
        &refused,
        "this proposal is no longer decided in the MCP client",
    );
    assert_eq!(ws.read("mode.txt"), None);
    assert!(events_named(&ws.audit(), "hitl_decision").is_empty());
}

#[test]
fn a_2026_07_28_approval_without_a_required_reason_is_asked_again() {
    if !require(
        "a_2026_07_28_approval_without_a_required_reason_is_asked_again",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let ws = Ws::new(&format!(
        "{ASKS_FOR_WRITES}security:\n  hitl:\n    policies:\n      \
         medium: {{require_approval: true, timeout: 120, require_reason: true}}\n      \
         high: {{require_approval: true, timeout: 60, require_reason: true}}\n"
    ));
    let mut client = rounds_client(&ws, "tester");
    let args = json!({"path": "why.txt", "content": "because\n"});
    let first = request_state_for(&mut client, &args);

    // Approved without a reason: nothing is decided, and a fresh state asks again.
    let again = present_state(&mut client, &args, &first, &approve_responses());
    assert_eq!(again["resultType"], json!("input_required"), "{again}");
    let request = &again["inputRequests"]["airlock_approval"]["params"];
    assert!(
        request["message"]
            .as_str()
            .unwrap()
            .starts_with("A reason is required to approve this call."),
        "{again}"
    );
    assert_eq!(
        request["requestedSchema"]["required"],
        json!(["decision", "reason"]),
        "{again}"
    );
    assert_eq!(ws.read("why.txt"), None);
    assert!(events_named(&ws.audit(), "hitl_decision").is_empty());
    let second = again["requestState"].as_str().unwrap();
    assert_ne!(second, first);

    // The first state is spent; the second, with a reason, decides.
    let replayed = present_state(&mut client, &args, &first, &approve_responses());
    assert_state_refused(&replayed, "requestState was already used");
    let with_reason = json!({"airlock_approval": {"action": "accept",
        "content": {"decision": "approve", "reason": "release notes"}}});
    let applied = present_state(&mut client, &args, second, &with_reason);
    assert_eq!(status(&applied), "allowed", "{applied}");
    assert_eq!(ws.read("why.txt").as_deref(), Some("because\n"));
    let decisions: Vec<Value> = events_named(&ws.audit(), "hitl_decision")
        .into_iter()
        .map(|event| json!([event["decision"], event["reason"]]))
        .collect();
    assert_eq!(decisions, [json!(["approve", "release notes"])]);
}

/// `server-everything` in its streamable HTTP mode on a port of 127.0.0.1,
/// killed when dropped.
/// A TCP relay on a port of its own to `127.0.0.1:target`, keeping every
/// byte its clients send (what a server behind it receives).
fn recording_relay(target: u16) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    use std::io::Read as _;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = sent.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let Ok(mut server) = std::net::TcpStream::connect(("127.0.0.1", target)) else {
                continue;
            };
            let (mut client_back, mut server_in) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut server, &mut client_back);
                let _ = client_back.shutdown(std::net::Shutdown::Both);
            });
            let kept = kept.clone();
            std::thread::spawn(move || {
                let mut buffer = [0; 16 * 1024];
                while let Ok(read) = client.read(&mut buffer) {
                    if read == 0 {
                        break;
                    }
                    kept.lock().unwrap().extend_from_slice(&buffer[..read]);
                    if server_in.write_all(&buffer[..read]).is_err() {
                        break;
                    }
                }
                let _ = server_in.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    (port, sent)
}

struct EverythingHttp {
    child: Child,
    port: u16,
    url: String,
}

impl EverythingHttp {
    /// On a port of its own: told to listen on port 0, it gets one from the
    /// kernel, which is read from `/proc` once it listens.
    fn start() -> EverythingHttp {
        let mut child = EverythingHttp::spawn(0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let port = loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("server-everything exited ({status}) before it listened");
            }
            if let Some(&port) = airlock_testkit::listening_ports(child.id()).first() {
                break port;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "server-everything did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        EverythingHttp {
            child,
            port,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }

    fn spawn(port: u16) -> std::process::Child {
        Command::new(airlock_testkit::peers::node())
            .args([everything_server().as_str(), "streamableHttp"])
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap()
    }

    /// Again on `port`, the one a killed server had (the address the
    /// gateway knows); `None` when it exits first (another process took
    /// the port meanwhile).
    fn start_on(port: u16) -> Option<EverythingHttp> {
        let mut child = EverythingHttp::spawn(port);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return None;
            }
            if airlock_testkit::listening_ports(child.id()).contains(&port) {
                return Some(EverythingHttp {
                    child,
                    port,
                    url: format!("http://127.0.0.1:{port}/mcp"),
                });
            }
            assert!(
                std::time::Instant::now() < deadline,
                "server-everything did not listen on port {port}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for EverythingHttp {
    fn drop(&mut self) {
        self.kill();
    }
}

#[test]
fn server_everything_over_streamable_http_is_prefixed_gated_and_fails_fast_once_gone() {
    if !require(
        "server_everything_over_streamable_http_is_prefixed_gated_and_fails_fast_once_gone",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let mut upstream = EverythingHttp::start();
    let ws = Ws::new(&format!(
        "upstreams:\n  - name: every\n    url: {}\n\
         security:\n  hitl:\n    rules:\n      - tools: [every__echo]\n        risk: low\n        require_approval: false\n",
        upstream.url
    ));
    let mut client = ws.stdio_client(&["--elicitation", "form"], &["serve", "--stdio"]);
    let names = client.tool_names();
    for name in ["every__echo", "every__get-sum", "read_file"] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }
    assert!(!names.iter().any(|n| n == "echo"), "{names:?}");

    // Allowed by its rule: forwarded without a prompt, the upstream's content back.
    let echoed = client.call("every__echo", json!({"message": "over http"}));
    assert_eq!(status(&echoed), "allowed", "{echoed}");
    assert_eq!(echoed["elicitations"], json!([]));
    assert_eq!(
        echoed["content"][0]["text"],
        json!("Echo: over http"),
        "{echoed}"
    );

    // Untrusted annotations: any other tool asks. Approved, it goes through.
    client.answer_elicitations("accept", json!({"decision": "approve"}));
    let sum = client.call("every__get-sum", json!({"a": 2, "b": 3}));
    assert_eq!(status(&sum), "allowed", "{sum}");
    assert_eq!(sum["elicitations"].as_array().unwrap().len(), 1, "{sum}");
    assert_eq!(
        sum["content"][0]["text"],
        json!("The sum of 2 and 3 is 5."),
        "{sum}"
    );
    // Declined, it is never forwarded.
    client.answer_elicitations("decline", json!(null));
    let declined = client.call("every__get-sum", json!({"a": 4, "b": 5}));
    assert_eq!(status(&declined), "denied", "{declined}");
    assert!(!declined.to_string().contains("is 9"), "{declined}");

    let events = ws.audit();
    let calls = events_named(&events, "tool_call");
    assert!(
        calls.iter().any(|e| e["tool"] == "every__echo"
            && e["status"] == "allowed"
            && e["decision"] == "allow"),
        "{calls:?}"
    );
    let applies = events_named(&events, "tool_call_apply");
    assert_eq!(applies.len(), 1, "{applies:?}");
    assert_eq!(applies[0]["tool"], json!("every__get-sum"));
    assert_eq!(applies[0]["status"], json!("allowed"));
    assert_eq!(applies[0]["decision"], json!("approve"));
    assert_eq!(events_named(&events, "tool_call_propose").len(), 2);

    // The upstream goes away: a call is upstream_unavailable at once, never
    // a hang.
    upstream.kill();
    // The client gives up after 30 s: a call that hangs fails the test.
    let failed = client.send(json!({"op": "call", "tool": "every__echo",
        "args": {"message": "anyone?"}, "timeout": 30}));
    assert_eq!(status(&failed), "error", "{failed}");
    assert_eq!(code(&failed), "upstream_unavailable", "{failed}");
    assert_eq!(failed["isError"], json!(true), "{failed}");

    // Back on the same address (a new process, which knows nothing of the
    // old session): airlock connects again, and calls go through.
    let port = upstream.port;
    drop(upstream);
    let _upstream = EverythingHttp::start_on(port).expect("the port was taken");
    // airlock connects again on its own and tells the client its tools
    // changed; a call before that is upstream_unavailable, never a hang.
    for attempt in 0.. {
        assert!(
            attempt < 20,
            "airlock did not connect to the upstream again"
        );
        let again = client.send(json!({"op": "call", "tool": "every__echo",
            "args": {"message": "back"}, "timeout": 30}));
        if status(&again) == "allowed" {
            assert_eq!(again["content"][0]["text"], json!("Echo: back"), "{again}");
            break;
        }
        assert_eq!(code(&again), "upstream_unavailable", "{again}");
        let changed = client.send(json!({"op": "wait_tools_changed", "timeout": 30}));
        assert_eq!(
            changed["changed"],
            json!(true),
            "airlock did not connect to the upstream again: {again}"
        );
    }
}

/// An upstream call the policy lets through at once is answered by the
/// stdio session's fast lane unless something about it needs rmcp (here a
/// progress token): both ways give the same result and the same audit
/// record; a malformed `_meta` still gets the usual error; a call the
/// client cancels gets no answer, and the server hears of it.
#[test]
fn upstream_calls_answered_in_the_fast_lane_equal_the_usual_way() {
    if !require(
        "upstream_calls_answered_in_the_fast_lane_equal_the_usual_way",
        &[Peer::NodeTools],
    ) {
        return;
    }
    let everything = everything_server();
    let ws = Ws::new(&format!(
        "security:\n  hitl:\n    rules:\n      - {{tools: [\"every__*\"], risk: low}}\nupstreams:\n  - name: every\n    command: node\n    args: [{everything:?}, stdio]\n"
    ));
    let mut child = Command::new(bin())
        .args(["serve", "--stdio"])
        .current_dir(ws.root())
        .env("AIRLOCK_USER", "tester")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut send = |message: Value| {
        writeln!(input, "{message}").unwrap();
        input.flush().unwrap();
    };
    // Answers by id; notifications are skipped.
    let mut answers: std::collections::HashMap<String, Value> = Default::default();
    let mut answer = |output: &mut BufReader<ChildStdout>, id: Value| loop {
        if let Some(answer) = answers.remove(&id.to_string()) {
            return answer;
        }
        let message = next_answer(output);
        if let Some(other) = message.get("id") {
            answers.insert(other.to_string(), message);
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "lane-test", "version": "1"}}}),
    );
    answer(&mut output, json!(1));
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let call = |id: Value, tool: &str, arguments: Value, meta: Option<Value>| {
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    };

    let echo = json!({"message": "the same"});
    send(call(json!(10), "every__echo", echo.clone(), None));
    let laned = answer(&mut output, json!(10));
    send(call(
        json!(11),
        "every__echo",
        echo.clone(),
        Some(json!({"progressToken": "p"})),
    ));
    let usual = answer(&mut output, json!(11));
    let without_envelope = |answer: &Value| {
        let mut result = answer["result"].clone();
        result["_meta"]
            .as_object_mut()
            .unwrap()
            .remove("airlock/envelope");
        result
    };
    assert_eq!(
        without_envelope(&laned),
        without_envelope(&usual),
        "{laned}\n{usual}"
    );
    assert_eq!(
        laned["result"]["content"][0]["text"],
        json!("Echo: the same"),
        "{laned}"
    );
    let envelope_of = |answer: &Value| {
        let mut envelope = answer["result"]["_meta"]["airlock/envelope"].clone();
        envelope.as_object_mut().unwrap().remove("audit");
        envelope
    };
    assert_eq!(envelope_of(&laned), envelope_of(&usual), "{laned}\n{usual}");

    // A string id and a correlation id through the lane.
    send(call(
        json!("s-12"),
        "every__echo",
        echo.clone(),
        Some(json!({"context_id": "ctx-1"})),
    ));
    let correlated = answer(&mut output, json!("s-12"));
    assert_eq!(
        correlated["result"]["content"], laned["result"]["content"],
        "{correlated}"
    );
    // A malformed `_meta` is refused the usual way.
    send(call(
        json!(13),
        "every__echo",
        echo,
        Some(json!({"context_id": 5})),
    ));
    let refused = answer(&mut output, json!(13));
    assert_eq!(refused["error"]["code"], json!(-32602), "{refused}");

    // Cancelled mid-call: no answer comes for it, the next call is answered.
    send(call(
        json!(20),
        "every__trigger-long-running-operation",
        json!({"duration": 30, "steps": 3}),
        None,
    ));
    std::thread::sleep(Duration::from_millis(500));
    send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 20, "reason": "test"}}),
    );
    send(call(
        json!(21),
        "every__echo",
        json!({"message": "after"}),
        None,
    ));
    let after = answer(&mut output, json!(21));
    assert_eq!(
        after["result"]["content"][0]["text"],
        json!("Echo: after"),
        "{after}"
    );
    // Its end is audited before an answer would be written: once it is,
    // one more call proves none was.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !ws
        .audit()
        .iter()
        .any(|record| record["tool_call_id"] == json!("20"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the cancelled call never ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    send(call(
        json!(22),
        "every__echo",
        json!({"message": "last"}),
        None,
    ));
    answer(&mut output, json!(22));
    assert!(
        !answers.contains_key("20"),
        "a cancelled call was answered: {answers:?}"
    );
    // A call in flight when the client closes its input is still answered
    // and audited before airlock exits.
    send(call(
        json!(30),
        "every__trigger-long-running-operation",
        json!({"duration": 1, "steps": 1}),
        None,
    ));
    drop(input);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut output, &mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    let last: Vec<Value> = rest
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let in_flight = last
        .iter()
        .find(|message| message["id"] == json!(30))
        .unwrap_or_else(|| panic!("no answer to the call in flight: {rest}"));
    assert_ne!(in_flight["result"]["isError"], json!(true), "{in_flight}");

    // The audit records of the two ways agree but for their own ids.
    let audit = ws.audit();
    let record = |id: &str| {
        audit
            .iter()
            .find(|record| record["tool_call_id"] == json!(id))
            .unwrap_or_else(|| panic!("no record of {id}: {audit:?}"))
            .clone()
    };
    assert_eq!(without_ids(&record("10")), without_ids(&record("11")));
    assert_eq!(record("s-12")["context_id"], json!("ctx-1"));
    assert_eq!(record("10")["decision"], json!("allow"));
    let cancelled = record("20");
    assert_eq!(cancelled["status"], json!("error"), "{cancelled}");
    assert_eq!(record("30")["status"], json!("allowed"));
}

/// An audit record without what differs between two calls made the same
/// way (their ids, times and hashes).
fn without_ids(record: &Value) -> serde_json::Map<String, Value> {
    let mut record = record.as_object().unwrap().clone();
    for key in [
        "seq",
        "ts",
        "prev_hash",
        "event_hash",
        "tool_call_id",
        "duration_ms",
        "trace_id",
        "span_id",
    ] {
        record.remove(key);
    }
    record
}

/// Reads one line from the server's stdout, as JSON.
fn next_answer(reader: &mut BufReader<ChildStdout>) -> Value {
    let mut line = String::new();
    assert!(reader.read_line(&mut line).unwrap() > 0, "stdout closed");
    serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line:?}"))
}

/// The peak resident memory of a running process, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .unwrap();
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|kb| kb.parse().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn malformed_deep_and_over_long_stdio_lines_are_answered_with_json_rpc_errors_and_serving_goes_on()
{
    let ws = Ws::new("mcp:\n  max_message_bytes: 65536\n");
    let mut child = Command::new(bin())
        .args(["serve", "--stdio"])
        .current_dir(ws.root())
        .env("AIRLOCK_USER", "tester")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let error_of = |answer: &Value| (answer["error"]["code"].clone(), answer["id"].clone());
    let deep = format!("{}{}\n", "[".repeat(100), "]".repeat(100));
    for (line, code, id) in [
        ("{not json\n".to_owned(), -32700, Value::Null),
        ("\u{1}\u{2}binary\n".to_owned(), -32700, Value::Null),
        (deep, -32600, Value::Null),
        (
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]\n".to_owned(),
            -32600,
            Value::Null,
        ),
        (
            "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":5}\n".to_owned(),
            -32600,
            json!(5),
        ),
        (
            "{\"jsonrpc\":\"1.0\",\"id\":\"x\",\"method\":\"ping\"}\n".to_owned(),
            -32600,
            json!("x"),
        ),
    ] {
        input.write_all(line.as_bytes()).unwrap();
        input.flush().unwrap();
        let answer = next_answer(&mut output);
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert_eq!(error_of(&answer), (json!(code), id), "{line:?}: {answer}");
    }
    // 64 MiB on one line, against a limit of 64 KiB: refused as it streams
    // past, never held.
    let before = peak_rss(child.id());
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..64 {
        input.write_all(&chunk).unwrap();
    }
    input.write_all(b"\n").unwrap();
    input.flush().unwrap();
    let answer = next_answer(&mut output);
    assert_eq!(error_of(&answer), (json!(-32600), Value::Null), "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("65536"),
        "{answer}"
    );
    let after = peak_rss(child.id());
    assert!(
        after < before + (16 << 20),
        "the long line was held: peak memory went from {before} to {after} bytes"
    );
    // And the session goes on, as if nothing had happened.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    writeln!(input, "{initialize}").unwrap();
    let answer = next_answer(&mut output);
    assert_eq!(answer["id"], 1, "{answer}");
    assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
    writeln!(
        input,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    writeln!(
        input,
        "{}",
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    )
    .unwrap();
    input.flush().unwrap();
    let answer = next_answer(&mut output);
    assert_eq!(answer["id"], 2, "{answer}");
    assert!(
        answer["result"]["tools"].as_array().unwrap().len() > 5,
        "{answer}"
    );
    drop(input);
    let _ = child.wait();
}

/// `elicitation_fallback: auto` (the default): a client that cannot ask its
/// human is denied, with the key, its values and the remedy, while no
/// approver channel is live; with `airlock watch` running, the call waits
/// and the person at that terminal decides it.
#[test]
fn auto_fallback_waits_while_watch_is_live_and_otherwise_denies_naming_the_remedy() {
    if !require(
        "auto_fallback_waits_while_watch_is_live_and_otherwise_denies_naming_the_remedy",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new(
        "default_profile: supervised\nprofiles:\n  supervised:\n    asklist: [write_file]\n",
    );
    let mut client = ws.stdio_client(&["--elicitation", "none"], &["serve", "--stdio"]);
    let denied = client.call("write_file", json!({"path": "a.txt", "content": "x\n"}));
    assert_eq!(status(&denied), "denied", "{denied}");
    let root = std::fs::canonicalize(ws.root()).unwrap();
    assert_eq!(
        denied["structuredContent"]["error"]["message"],
        json!(format!(
            "this call needs a human's approval, this client cannot ask one, and no approver channel is live: security.hitl.elicitation_fallback is auto (values: auto | deny | allow | defer | wait), which waits for a person only while `airlock watch`, the web UI or a webhook can reach one. To decide this call, run `airlock watch` in {} (or open the web UI of `airlock serve --http`) and call again",
            root.display()
        ))
    );
    assert_eq!(
        denied["structuredContent"]["error"]["reason"]["rule"],
        json!("elicitation_fallback: auto (no approver channel live)")
    );
    assert!(ws.path("a.txt").metadata().is_err());

    let (mut watch, mut terminal) =
        airlock_testkit::terminal::Terminal::spawn(ws.command(&["watch"]));
    terminal.expect("watching for approvals");
    client.send(json!({"op": "call_async", "id": "w", "tool": "write_file",
        "args": {"path": "a.txt", "content": "waited\n"}}));
    terminal.expect("[y]es  [n]o  [v]iew");
    terminal.send("y\n");
    let result = client.send(json!({"op": "await", "id": "w", "timeout": 30}));
    assert_eq!(status(&result), "allowed", "{result}");
    assert_eq!(ws.read("a.txt").as_deref(), Some("waited\n"));

    // Once watch has gone, nobody is there again.
    terminal.send("\u{4}");
    assert!(watch.wait().unwrap().success());
    let again = client.call("write_file", json!({"path": "b.txt", "content": "x\n"}));
    assert_eq!(status(&again), "denied", "{again}");

    // The same with an explicit deny names that key and value.
    std::fs::write(
        ws.path("airlock.yaml"),
        "default_profile: supervised\nprofiles:\n  supervised:\n    asklist: [write_file]\n    elicitation_fallback: deny\n",
    )
    .unwrap();
    let mut client = ws.stdio_client(&["--elicitation", "none"], &["serve", "--stdio"]);
    let denied = client.call("write_file", json!({"path": "a.txt", "content": "x\n"}));
    let message = denied["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(
        message.contains(
            "profiles.supervised.elicitation_fallback is deny (values: auto | deny | allow | defer | wait)"
        ),
        "{message}"
    );
}

/// `airlock wrap -- server-filesystem`: without trust every call asks, reads
/// too; with `--trust-annotations` a read-only tool is a read, a listing of
/// the workspace that holds `.airlock/` passes, and anything inside
/// `.airlock/` stays refused.
#[test]
fn wrapped_server_filesystem_reads_pass_with_trusted_annotations_and_the_state_dir_stays_shut() {
    if !require(
        "wrapped_server_filesystem_reads_pass_with_trusted_annotations_and_the_state_dir_stays_shut",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let ws = Ws::new("");
    let script = tools_dir()
        .join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
        .display()
        .to_string();
    let root = std::fs::canonicalize(ws.root())
        .unwrap()
        .display()
        .to_string();
    let wrap = |trust: bool| {
        let mut args = vec!["wrap", "--name", "fs"];
        if trust {
            args.push("--trust-annotations");
        }
        args.extend(["--", "node", script.as_str(), root.as_str()]);
        ws.stdio_client(&["--elicitation", "none"], &args)
    };

    // Untrusted: a listing is high risk and asks; nobody can be asked.
    let mut untrusted = wrap(false);
    let listed = untrusted.call("list_directory", json!({"path": root}));
    assert_eq!(status(&listed), "denied", "{listed}");
    assert_eq!(
        listed["structuredContent"]["error"]["reason"]["risk"], "high",
        "{listed}"
    );
    drop(untrusted);
    // The README's rule makes the reads pass without trusting the server.
    std::fs::write(
        ws.path("airlock.yaml"),
        "security:\n  hitl:\n    rules:\n      - tools: [\"fs__read_*\", \"fs__list_*\", \"fs__search_files\", \"fs__get_file_info\", \"fs__directory_tree\"]\n        risk: low\n        require_approval: false\n",
    )
    .unwrap();
    let mut ruled = wrap(false);
    let listed = ruled.call("list_directory", json!({"path": root}));
    assert_eq!(status(&listed), "allowed", "{listed}");
    drop(ruled);
    std::fs::write(ws.path("airlock.yaml"), "").unwrap();

    let mut client = wrap(true);
    let listed = client.call("list_directory", json!({"path": root}));
    assert_eq!(status(&listed), "allowed", "{listed}");
    let text = listed["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("hello.txt"), "{text}");
    let read = client.call(
        "read_text_file",
        json!({"path": format!("{root}/hello.txt")}),
    );
    assert_eq!(status(&read), "allowed", "{read}");
    // Inside the state dir: refused, read or not.
    let inside = client.call(
        "read_text_file",
        json!({"path": format!("{root}/.airlock/airlock.db")}),
    );
    assert_eq!(status(&inside), "denied", "{inside}");
    assert_eq!(code(&inside), "path_forbidden", "{inside}");
    let below = client.call(
        "list_directory",
        json!({"path": format!("{root}/.airlock")}),
    );
    assert_eq!(code(&below), "path_forbidden", "{below}");
    // A write is still a write: it asks, and nobody can be asked.
    let write = client.call(
        "write_file",
        json!({"path": format!("{root}/new.txt"), "content": "x"}),
    );
    assert_eq!(status(&write), "denied", "{write}");
    assert!(ws.path("new.txt").metadata().is_err());
}

#[test]
fn an_https_upstream_is_trusted_through_the_configured_ca_only() {
    if !require(
        "an_https_upstream_is_trusted_through_the_configured_ca_only",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let upstream = EverythingHttp::start();
    let ca = airlock_testkit::tls::TestCa::new();
    let proxy = ca.proxy(([127, 0, 0, 1], upstream.port).into());
    let upstreams = format!(
        "upstreams:\n  - name: every\n    url: {}\n\
         security:\n  hitl:\n    rules:\n      - tools: [every__echo]\n        risk: low\n        require_approval: false\n",
        proxy.url("/mcp")
    );
    // Trusted through tls.ca_file (relative to the workspace root): the
    // upstream's tools are offered and a call goes through.
    let ws = Ws::new(&format!("{upstreams}tls:\n  ca_file: certs/test-ca.pem\n"));
    ws.write("certs/test-ca.pem", ca.pem());
    let mut client = ws.stdio_client(&[], &["serve", "--stdio"]);
    let names = client.tool_names();
    assert!(names.iter().any(|n| n == "every__echo"), "{names:?}");
    let echoed = client.call("every__echo", json!({"message": "over https"}));
    assert_eq!(status(&echoed), "allowed", "{echoed}");
    assert_eq!(echoed["content"][0]["text"], json!("Echo: over https"));
    drop(client);

    // Without it the server's certificate is not trusted: none of its tools
    // is offered, airlock's own still are.
    let untrusting = Ws::new(&upstreams);
    let mut client = untrusting.stdio_client(&[], &["serve", "--stdio"]);
    let names = client.tool_names();
    assert!(!names.iter().any(|n| n.starts_with("every__")), "{names:?}");
    assert!(names.iter().any(|n| n == "read_file"), "{names:?}");
}

/// Every prompt of a server, as a client sees it (`list_prompts`), what
/// each gives (`get_prompt`) with its required arguments filled in, and the
/// completions of its arguments; with the name it is listed under mapped by
/// `name`.
fn prompts_as_seen(client: &mut Driver, name: impl Fn(&str) -> String) -> Vec<Value> {
    let listed = client.send(json!({"op": "list_prompts"}));
    assert_eq!(listed["ok"], json!(true), "{listed}");
    let mut seen = Vec::new();
    for prompt in listed["prompts"].as_array().unwrap() {
        let shown = prompt["name"].as_str().unwrap();
        let mut arguments = serde_json::Map::new();
        for argument in prompt["arguments"].as_array().into_iter().flatten() {
            if argument["required"] == json!(true) {
                arguments.insert(argument["name"].as_str().unwrap().to_owned(), json!("1"));
            }
        }
        // A refusal too must be the server's own.
        let got =
            client.send_any(json!({"op": "get_prompt", "name": shown, "arguments": arguments}));
        // Completion of each argument (the server's own, or nothing).
        let completions: Vec<Value> = prompt["arguments"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|argument| {
                client.send_any(json!({"op": "complete",
                    "ref": {"type": "ref/prompt", "name": shown},
                    "argument": {"name": argument["name"], "value": ""}}))
            })
            .collect();
        let mut prompt = prompt.clone();
        prompt["name"] = json!(name(shown));
        seen.push(json!({"prompt": prompt, "got": got, "completions": completions}));
    }
    seen
}

#[test]
fn an_upstreams_prompts_pass_through_wrap_unchanged_and_serve_prefixed() {
    if !require(
        "an_upstreams_prompts_pass_through_wrap_unchanged_and_serve_prefixed",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let everything = everything_server();
    let ws = Ws::new("");
    let direct_args: Vec<String> = ["--stdio", "--", "node", everything.as_str(), "stdio"]
        .iter()
        .map(|arg| (*arg).to_owned())
        .collect();
    let mut direct = ws.client(&direct_args, "tester");
    let expected = prompts_as_seen(&mut direct, str::to_owned);
    assert!(
        expected.len() >= 2,
        "server-everything offers prompts: {expected:?}"
    );
    assert!(
        expected.iter().any(|p| p["prompt"]["arguments"]
            .as_array()
            .is_some_and(|a| !a.is_empty())),
        "one takes arguments: {expected:?}"
    );
    assert!(
        expected
            .iter()
            .flat_map(|p| p["completions"].as_array().cloned().unwrap_or_default())
            .any(|c| c["completion"]["values"]
                .as_array()
                .is_some_and(|v| !v.is_empty())),
        "one argument completes: {expected:?}"
    );

    // airlock wrap: the same prompts, the same names, the same messages.
    let mut wrapped = ws.stdio_client(
        &[],
        &[
            "wrap",
            "--name",
            "every",
            "--",
            "node",
            &everything,
            "stdio",
        ],
    );
    assert_eq!(prompts_as_seen(&mut wrapped, str::to_owned), expected);

    // serve with the server as an upstream: named every__<prompt>.
    let served_ws = Ws::new(&format!(
        "upstreams:\n  - name: every\n    command: node\n    args: [{everything:?}, stdio]\n"
    ));
    let mut served = served_ws.stdio_client(&[], &["serve", "--stdio"]);
    let seen = prompts_as_seen(&mut served, |name| {
        name.strip_prefix("every__")
            .unwrap_or_else(|| panic!("{name} is not prefixed"))
            .to_owned()
    });
    assert_eq!(seen, expected);
    // A prompt that is not there is invalid params, as a server says.
    let missing = served.send_any(json!({"op": "get_prompt", "name": "every__no_such_prompt"}));
    assert_eq!(missing["ok"], json!(false), "{missing}");
    assert!(
        missing
            .to_string()
            .contains("no prompt named every__no_such_prompt"),
        "{missing}"
    );
}

/// The first log message from server-everything a client got, waiting for
/// it (the server sends one when its simulated logging is turned on).
fn upstream_log(client: &mut Driver) -> Value {
    for _ in 0..10 {
        let waited = client.send_any(
            json!({"op": "wait_notification", "method": "notifications/message", "timeout": 10}),
        );
        let all = client.send(json!({"op": "notifications"}));
        if let Some(found) = all["notifications"].as_array().unwrap().iter().find(|n| {
            n["method"] == "notifications/message"
                && n["params"]["data"]
                    .as_str()
                    .is_some_and(|d| d.contains("-level message") || d.contains("level-message"))
        }) {
            return found["params"].clone();
        }
        assert_eq!(waited["ok"], json!(true), "no log message came: {waited}");
    }
    panic!("no log message from the upstream");
}

#[test]
fn an_upstreams_log_messages_reach_the_client_at_the_level_it_set() {
    if !require(
        "an_upstreams_log_messages_reach_the_client_at_the_level_it_set",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let everything = everything_server();
    // Under wrap: the message as the server sent it.
    let ws = Ws::new("");
    let mut wrapped = ws.stdio_client(
        &["--elicitation", "form"],
        &[
            "wrap",
            "--name",
            "every",
            "--",
            "node",
            &everything,
            "stdio",
        ],
    );
    let set = wrapped.send(json!({"op": "set_level", "level": "debug"}));
    assert_eq!(set["ok"], json!(true), "{set}");
    wrapped.answer_elicitations("accept", json!({"decision": "approve"}));
    let toggled = wrapped.call("toggle-simulated-logging", json!({}));
    assert_eq!(status(&toggled), "allowed", "{toggled}");
    let message = upstream_log(&mut wrapped);
    assert!(message["level"].is_string(), "{message}");
    assert_ne!(message["logger"], json!("every"), "{message}");

    // Under serve: the logger names the upstream.
    let served_ws = Ws::new(&format!(
        "upstreams:\n  - name: every\n    command: node\n    args: [{everything:?}, stdio]\n"
    ));
    let mut served = served_ws.stdio_client(&["--elicitation", "form"], &["serve", "--stdio"]);
    served.send(json!({"op": "set_level", "level": "debug"}));
    served.answer_elicitations("accept", json!({"decision": "approve"}));
    let toggled = served.call("every__toggle-simulated-logging", json!({}));
    assert_eq!(status(&toggled), "allowed", "{toggled}");
    let message = upstream_log(&mut served);
    assert!(
        message["logger"]
            .as_str()
            .is_some_and(|l| l == "every" || l.starts_with("every/")),
        "{message}"
    );
}

#[test]
fn wrap_serves_over_http_and_wraps_an_http_server_under_its_own_names() {
    if !require(
        "wrap_serves_over_http_and_wraps_an_http_server_under_its_own_names",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let everything = everything_server();
    let ws = Ws::new("");
    // The server offers some tools only to a client that can be asked
    // (elicitation, sampling, roots); airlock can relay each, so the
    // comparison is with a client that can too.
    let direct_args: Vec<String> = [
        "--elicitation",
        "form",
        "--sampling",
        "sampled",
        "--root",
        "file:///tmp",
        "--stdio",
        "--",
        "node",
        everything.as_str(),
        "stdio",
    ]
    .iter()
    .map(|arg| (*arg).to_owned())
    .collect();
    let mut direct = ws.client(&direct_args, "tester");
    let direct_tools = direct.tool_names();
    let direct_prompts = prompts_as_seen(&mut direct, str::to_owned);

    // `wrap --http`: a client configured for the server's URL sees the same
    // tool and prompt names, and a call is gated.
    let serving = Serving::start_command(
        &ws,
        &[
            "wrap",
            "--http",
            "127.0.0.1:0",
            "--name",
            "every",
            "--",
            "node",
            &everything,
            "stdio",
        ],
    );
    let mut over_http = ws.client(
        &[
            "--http".to_owned(),
            serving.mcp_url(),
            "--elicitation".to_owned(),
            "form".to_owned(),
        ],
        "tester",
    );
    let mut names = over_http.tool_names();
    names.retain(|name| name != "proposal_status");
    assert_eq!(names, direct_tools);
    assert_eq!(
        prompts_as_seen(&mut over_http, str::to_owned),
        direct_prompts
    );
    over_http.answer_elicitations("accept", json!({"decision": "approve"}));
    let echoed = over_http.call("echo", json!({"message": "over wrap --http"}));
    assert_eq!(status(&echoed), "allowed", "{echoed}");
    assert_eq!(
        echoed["elicitations"].as_array().unwrap().len(),
        1,
        "{echoed}"
    );
    assert_eq!(
        echoed["content"][0]["text"],
        json!("Echo: over wrap --http")
    );

    // `wrap --url`: a streamable-HTTP server, wrapped over stdio.
    let upstream = EverythingHttp::start();
    let mut wrapped = ws.stdio_client(
        &["--elicitation", "form"],
        &["wrap", "--name", "every", "--url", &upstream.url],
    );
    let names = wrapped.tool_names();
    assert!(names.iter().any(|n| n == "echo"), "{names:?}");
    assert!(names.iter().all(|n| !n.contains("__")), "{names:?}");
    wrapped.answer_elicitations("accept", json!({"decision": "approve"}));
    let echoed = wrapped.call("echo", json!({"message": "over wrap --url"}));
    assert_eq!(status(&echoed), "allowed", "{echoed}");
    assert_eq!(echoed["content"][0]["text"], json!("Echo: over wrap --url"));

    // Bad URLs are usage errors.
    for bad in ["ftp://x", "http://a b"] {
        let run = ws.run(&["wrap", "--url", bad]);
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(
            run.stderr
                .contains("--url must be an http:// or https:// URL"),
            "{}",
            run.stderr
        );
    }
}

#[test]
fn one_upstream_may_be_offered_unprefixed_unless_it_takes_airlocks_names() {
    if !require(
        "one_upstream_may_be_offered_unprefixed_unless_it_takes_airlocks_names",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let everything = everything_server();
    let ws = Ws::new(&format!(
        "upstreams:\n  - name: every\n    command: node\n    args: [{everything:?}, stdio]\n    prefix: false\n"
    ));
    let mut client = ws.stdio_client(&["--elicitation", "form"], &["serve", "--stdio"]);
    let names = client.tool_names();
    for name in ["echo", "get-sum", "read_file", "write_file"] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }
    assert!(!names.iter().any(|n| n.starts_with("every__")), "{names:?}");
    let prompts = client.send(json!({"op": "list_prompts"}));
    assert!(
        prompts["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| !p["name"].as_str().unwrap().contains("__")),
        "{prompts}"
    );
    // Still gated, and ruled and audited as every__echo.
    client.answer_elicitations("accept", json!({"decision": "approve"}));
    let echoed = client.call("echo", json!({"message": "unprefixed"}));
    assert_eq!(status(&echoed), "allowed", "{echoed}");
    assert_eq!(
        echoed["elicitations"].as_array().unwrap().len(),
        1,
        "{echoed}"
    );
    assert!(
        ws.audit()
            .iter()
            .any(|e| e["event"] == "tool_call_apply" && e["tool"] == "every__echo"),
        "audited under its gated name"
    );

    // server-filesystem offers read_file, one of airlock's own names: it
    // cannot be unprefixed, and serve says so rather than start.
    let fs = Ws::new("");
    fs.write(
        "airlock.yaml",
        format!("upstreams:\n{}    prefix: false\n", filesystem_server(&fs)),
    );
    let run = fs.run(&["serve", "--stdio"]);
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("it offers read_file, a name airlock's own tools have"),
        "{}",
        run.stderr
    );
    // Two unprefixed upstreams: refused at load, with the key and line.
    let two = Ws::new(
        "upstreams:\n  - {name: a, command: x, prefix: false}\n  - {name: b, command: y, prefix: false}\n",
    );
    let run = two.run(&["config", "check"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("airlock.yaml:3: upstreams[1].prefix: only one upstream may be offered unprefixed (upstreams[0] is)"),
        "{}",
        run.stderr
    );
}

/// What a client sees of server-everything through one probe: resources
/// (page by page), templates, reads, tool results of every kind, progress,
/// the server's requests to the client (roots, sampling), completion of a
/// template variable, and a subscription. `tool` names a tool as the client
/// sees it. The server's own randomness (the time a resource was made) is
/// masked.
fn gateway_probe(client: &mut Driver, tool: impl Fn(&str) -> String) -> Vec<Value> {
    let mut seen = Vec::new();
    let mut keep = |mut answer: Value| {
        if let Some(meta) = answer.get_mut("_meta").and_then(Value::as_object_mut) {
            meta.remove("airlock/envelope");
        }
        if answer.get("_meta") == Some(&json!({})) {
            answer["_meta"] = Value::Null;
        }
        let text = answer.to_string();
        let masked = regex_lite_mask(&text);
        seen.push(serde_json::from_str::<Value>(&masked).unwrap());
    };
    keep(client.send(json!({"op": "list_resource_pages"})));
    keep(client.send(json!({"op": "list_templates"})));
    keep(client.send(
        json!({"op": "read_resource", "uri": "demo://resource/static/document/architecture.md"}),
    ));
    keep(client.send(json!({"op": "read_resource", "uri": "demo://resource/dynamic/text/3"})));
    // A blob's bytes hold the time too: its size and type are compared.
    let mut blob =
        client.send(json!({"op": "read_resource", "uri": "demo://resource/dynamic/blob/4"}));
    let bytes = blob["contents"][0]["blob"].as_str().map(str::len);
    blob["contents"][0]["blob"] = json!(bytes);
    keep(blob);
    for (name, args) in [
        ("get-structured-content", json!({"location": "New York"})),
        ("get-tiny-image", json!({})),
        (
            "get-annotated-message",
            json!({"messageType": "error", "includeImage": true}),
        ),
        ("get-resource-links", json!({"count": 2})),
        (
            "get-resource-reference",
            json!({"resourceType": "Text", "resourceId": 2}),
        ),
        ("get-roots-list", json!({})),
        (
            "trigger-sampling-request",
            json!({"prompt": "hi", "maxTokens": 10}),
        ),
    ] {
        keep(client.send(json!({"op": "call", "tool": tool(name), "args": args})));
    }
    let long = client.send(
        json!({"op": "call", "tool": tool("trigger-long-running-operation"),
        "args": {"duration": 1, "steps": 3}, "progress": true}),
    );
    assert!(
        !long["progress"].as_array().unwrap().is_empty(),
        "the server's progress reached the client: {long}"
    );
    keep(json!({"content": long["content"], "isError": long["isError"]}));
    keep(client.send(json!({"op": "complete",
        "ref": {"type": "ref/resource", "uri": "demo://resource/dynamic/text/{resourceId}"},
        "argument": {"name": "resourceId", "value": "1"}})));
    keep(client.send(json!({"op": "subscribe", "uri": "demo://resource/dynamic/text/1"})));
    keep(client.send(json!({"op": "unsubscribe", "uri": "demo://resource/dynamic/text/1"})));
    seen
}

/// `created at 6:12:41 PM` and ISO times, masked.
fn regex_lite_mask(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        // H:MM:SS or HH:MM:SS
        let digits = |at: usize, n: usize| {
            at + n <= bytes.len() && bytes[at..at + n].iter().all(u8::is_ascii_digit)
        };
        let time_at = |at: usize| {
            for h in [1, 2] {
                if digits(at, h)
                    && bytes.get(at + h) == Some(&b':')
                    && digits(at + h + 1, 2)
                    && bytes.get(at + h + 3) == Some(&b':')
                    && digits(at + h + 4, 2)
                {
                    return Some(h + 6);
                }
            }
            None
        };
        if (i == 0 || !bytes[i - 1].is_ascii_digit())
            && let Some(len) = time_at(i)
        {
            out.push_str("<time>");
            i += len;
            continue;
        }
        out.push(bytes[i] as char);
        i += 1;
    }
    out
}

#[test]
fn everything_an_upstream_offers_reaches_the_client_through_wrap_and_serve() {
    if !require(
        "everything_an_upstream_offers_reaches_the_client_through_wrap_and_serve",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let everything = everything_server();
    // The server's tools may run and its sampling may spend without a
    // human here (the gate itself is tested elsewhere); one document is
    // denied to the resource rules.
    let config = "security:\n  hitl:\n    rules:\n      - {tools: [\"sampling:every\"], risk: low}\n      - {tools: [\"every__*\"], risk: low}\n      - {tools: [\"resource:every:demo://resource/static/document/features.md\"], decision: deny}\n";
    let ws = Ws::new(config);
    // A root inside the workspace: through airlock a client's roots are
    // answered as they lie inside it (DESIGN §5.3), so this one passes
    // unchanged.
    let project = format!(
        "file://{}/project",
        std::fs::canonicalize(ws.path(".")).unwrap().display()
    );
    let client_args = |rest: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "--elicitation",
            "form",
            "--sampling",
            "sampled!",
            "--root",
            project.as_str(),
        ]
        .iter()
        .map(|arg| (*arg).to_owned())
        .collect();
        args.extend(rest.iter().map(|arg| (*arg).to_owned()));
        args
    };
    let mut direct = ws.client(
        &client_args(&["--stdio", "--", "node", &everything, "stdio"]),
        "tester",
    );
    let expected = gateway_probe(&mut direct, str::to_owned);
    assert!(
        expected[0]["pages"][0]
            .as_array()
            .is_some_and(|page| !page.is_empty()),
        "{expected:?}"
    );
    let airlock = airlock_testkit::bin().display().to_string();

    // wrap over stdio: the same, names unchanged.
    let mut wrapped = ws.client(
        &client_args(&[
            "--stdio",
            "--",
            &airlock,
            "wrap",
            "--name",
            "every",
            "--",
            "node",
            &everything,
            "stdio",
        ]),
        "tester",
    );
    let seen = gateway_probe(&mut wrapped, str::to_owned);
    for (got, want) in seen.iter().zip(&expected) {
        assert_eq!(got, want, "wrap stdio");
    }
    // A resource the rules deny is refused, and says why.
    let denied = wrapped.send_any(json!({"op": "read_resource",
        "uri": "demo://resource/static/document/features.md"}));
    assert_eq!(denied["ok"], json!(false), "{denied}");
    assert!(denied.to_string().contains("Denied"), "{denied}");

    // wrap over HTTP.
    let serving = Serving::start_command(
        &ws,
        &[
            "wrap",
            "--http",
            "127.0.0.1:0",
            "--name",
            "every",
            "--",
            "node",
            &everything,
            "stdio",
        ],
    );
    let mut over_http = ws.client(&client_args(&["--http", &serving.mcp_url()]), "tester");
    let seen = gateway_probe(&mut over_http, str::to_owned);
    for (got, want) in seen.iter().zip(&expected) {
        assert_eq!(got, want, "wrap --http");
    }

    // wrap in front of the server over streamable HTTP: the tool calls
    // take the HTTP raw lane (a relay in front of the server sees their
    // ids), and the server's requests on a call's stream (sampling, roots)
    // reach the client through rmcp as before.
    let upstream = EverythingHttp::start();
    let (relay_port, relayed) = recording_relay(upstream.port);
    let mut over_url = ws.client(
        &client_args(&[
            "--stdio",
            "--",
            &airlock,
            "wrap",
            "--name",
            "every",
            "--url",
            &format!("http://127.0.0.1:{relay_port}/mcp"),
        ]),
        "tester",
    );
    let seen = gateway_probe(&mut over_url, str::to_owned);
    for (got, want) in seen.iter().zip(&expected) {
        assert_eq!(got, want, "wrap --url");
    }
    drop(over_url);
    let relayed = String::from_utf8_lossy(&relayed.lock().unwrap()).to_string();
    assert!(
        relayed.contains("\"id\":\"airlock-raw-"),
        "no call took the raw lane: {relayed}"
    );

    // serve with the server as an upstream: its tools are every__<tool>,
    // its resources keep their URIs.
    // (In the same workspace, with a configuration of its own: the
    // client's root lies inside it, so it is answered as it is.)
    ws.write(
        "serve.yaml",
        format!(
            "{config}upstreams:\n  - name: every\n    command: node\n    args: [{everything:?}, stdio]\n"
        ),
    );
    let mut served = ws.client(
        &client_args(&[
            "--stdio",
            "--",
            &airlock,
            "--config",
            "serve.yaml",
            "serve",
            "--stdio",
        ]),
        "tester",
    );
    let seen = gateway_probe(&mut served, |name| format!("every__{name}"));
    // serve adds airlock's own blob template to the server's.
    let mut templates = seen[1]["templates"].as_array().unwrap().clone();
    templates.retain(|template| template["name"] != json!("blob"));
    assert_eq!(
        json!(templates),
        expected[1]["templates"],
        "serve templates"
    );
    // serve lists code mode's declarations first, then the server's.
    let mut seen = seen;
    let first_page = seen[0]["pages"][0].as_array_mut().unwrap();
    assert_eq!(first_page.remove(0), json!("airlock://codemode/types.d.ts"));
    for (i, (got, want)) in seen.iter().zip(&expected).enumerate() {
        if i != 1 {
            assert_eq!(got, want, "serve, probe {i}");
        }
    }
}

#[test]
fn a_call_in_flight_ends_at_once_when_the_upstream_dies_and_a_client_cancel_reaches_the_upstream_and_the_approval()
 {
    if !require(
        "a_call_in_flight_ends_at_once_when_the_upstream_dies_and_a_client_cancel_reaches_the_upstream_and_the_approval",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let everything = everything_server();
    // The long operation runs without a human; echo waits for one (no
    // client can be asked, and the fallback waits).
    let ws = Ws::new(
        "security:\n  hitl:\n    elicitation_fallback: wait\n    rules:\n      - {tools: [\"every__trigger-long-running-operation\"], risk: low}\n",
    );
    let mut client = ws.stdio_client(
        &["--elicitation", "none"],
        &[
            "wrap",
            "--name",
            "every",
            "--",
            "node",
            &everything,
            "stdio",
        ],
    );
    let long = json!({"duration": 30, "steps": 30});

    // The server dies while it works: the call ends at once (not after its
    // 30 s), upstream_unavailable.
    client.send(json!({"op": "call_async", "id": "dies", "progress": true,
        "tool": "trigger-long-running-operation", "args": long}));
    let progress = |client: &mut Driver, id: &str| {
        let now = client.send(json!({"op": "wait_progress", "count": 0, "timeout": 1}))["progress"]
            .as_u64()
            .unwrap();
        let waited =
            client.send_any(json!({"op": "wait_progress", "count": now + 1, "timeout": 20}));
        if waited["ok"] != json!(true) {
            let all = client.send_any(json!({"op": "notifications"}));
            let ended = client.send_any(json!({"op": "await", "id": id, "timeout": 1}));
            panic!("no progress: {waited} {ended} {all}");
        }
    };
    progress(&mut client, "dies");
    let started = std::time::Instant::now();
    // This client's airlock's server only (other tests run servers too).
    let children = |pid: &str| -> Vec<String> {
        let output = Command::new("pgrep").args(["-P", pid]).output().unwrap();
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let pids: Vec<String> = children(&client.pid().to_string())
        .iter()
        .flat_map(|airlock| children(airlock))
        .collect();
    assert!(!pids.is_empty(), "no upstream process found");
    for pid in &pids {
        Command::new("kill").args(["-9", pid]).status().unwrap();
    }
    let died = client.send_any(json!({"op": "await", "id": "dies", "timeout": 25}));
    assert_eq!(code(&died), "upstream_unavailable", "{died}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "the call waited for the dead server: {:?}",
        started.elapsed()
    );

    // Restarted, the server gets a client's cancellation of a call it is
    // working on: the call ends cancelled and the audit says so.
    // Back once a short run of the same tool goes through.
    for attempt in 0.. {
        assert!(attempt < 30, "the server did not come back");
        let short = client.call(
            "trigger-long-running-operation",
            json!({"duration": 0, "steps": 1}),
        );
        if status(&short) == "allowed" {
            break;
        }
        client.send(json!({"op": "wait_tools_changed", "timeout": 2}));
    }
    client.send(
        json!({"op": "call_async", "id": "cancelled", "progress": true,
        "tool": "trigger-long-running-operation", "args": long}),
    );
    progress(&mut client, "cancelled");
    client.send(json!({"op": "cancel", "id": "cancelled"}));
    let cancelled = client.send_any(json!({"op": "await", "id": "cancelled", "timeout": 25}));
    assert!(cancelled.to_string().contains("ancel"), "{cancelled}");
    let wait_audit = |what: &dyn Fn(&Value) -> bool| {
        for _ in 0..100 {
            if ws.audit().iter().any(what) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("not audited: {:?}", ws.audit());
    };
    wait_audit(&|record| {
        let text = record.to_string();
        text.contains("every__trigger-long-running-operation") && text.contains("upstream_error")
    });

    // A call waiting for a human: the client's cancellation cancels the
    // approval, audited.
    client.send(
        json!({"op": "call_async", "id": "waiting", "progress": true,
        "tool": "echo", "args": {"message": "never"}}),
    );
    progress(&mut client, "waiting");
    client.send(json!({"op": "cancel", "id": "waiting"}));
    client.send_any(json!({"op": "await", "id": "waiting", "timeout": 25}));
    wait_audit(&|record| record["event"] == json!("hitl_cancelled"));
}

#[test]
fn an_upstream_past_its_timeout_is_unavailable_and_header_variables_come_from_the_environment() {
    if !require(
        "an_upstream_past_its_timeout_is_unavailable_and_header_variables_come_from_the_environment",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let everything = everything_server();
    let ws = Ws::new(&format!(
        "security:\n  hitl:\n    rules:\n      - {{tools: [\"every__*\"], risk: low}}\nupstreams:\n  - name: every\n    command: node\n    args: [{everything:?}, stdio]\n    timeout: 2s\n"
    ));
    let mut client = ws.stdio_client(&[], &["serve", "--stdio"]);
    let started = std::time::Instant::now();
    let slow = client.call(
        "every__trigger-long-running-operation",
        json!({"duration": 20, "steps": 4}),
    );
    let took = started.elapsed();
    assert_eq!(code(&slow), "upstream_unavailable", "{slow}");
    assert!(
        envelope(&slow)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not answer within 2 s"),
        "{slow}"
    );
    assert!(
        took >= std::time::Duration::from_secs(2) && took < std::time::Duration::from_secs(10),
        "{took:?}"
    );
    // The server is still there for the next call.
    let echoed = client.call("every__echo", json!({"message": "still here"}));
    assert_eq!(status(&echoed), "allowed", "{echoed}");

    // A header naming an unset variable: the upstream is not connected, and
    // the reason names the variable, never a value.
    let http = EverythingHttp::start();
    let ws = Ws::new(&format!(
        "upstreams:\n  - name: every\n    url: {}\n    headers: {{X-Token: \"Bearer ${{AIRLOCK_TEST_UNSET_TOKEN}}\"}}\n",
        http.url
    ));
    let mut client = ws.stdio_client(&[], &["serve", "--stdio"]);
    let names = client.tool_names();
    assert!(
        !names.iter().any(|name| name.starts_with("every__")),
        "{names:?}"
    );
    let failed = client.call("every__echo", json!({"message": "x"}));
    assert_eq!(status(&failed), "error", "{failed}");

    // Set, it is sent and the server is reached: a relay in front of the
    // server keeps what airlock sent it, and the header is there with the
    // variable's value.
    let (relay_port, sent) = recording_relay(http.port);
    let ws = Ws::new(&format!(
        "security:\n  hitl:\n    rules:\n      - {{tools: [\"every__*\"], risk: low}}\nupstreams:\n  - name: every\n    url: http://127.0.0.1:{relay_port}/mcp\n    headers: {{X-Token: \"Bearer ${{AIRLOCK_TEST_SET_TOKEN}}\"}}\n",
    ));
    let bin = airlock_testkit::bin().display().to_string();
    let mut client = Driver::start_with_env(
        ws.root(),
        &["--stdio", "--", &bin, "serve", "--stdio"].map(str::to_owned),
        "tester",
        &[("AIRLOCK_TEST_SET_TOKEN", "s3cret")],
    );
    let echoed = client.call("every__echo", json!({"message": "with a header"}));
    assert_eq!(
        echoed["content"][0]["text"],
        json!("Echo: with a header"),
        "{echoed}"
    );
    let sent = String::from_utf8_lossy(&sent.lock().unwrap()).to_ascii_lowercase();
    let requests = sent.matches(" /mcp http/1.1\r\n").count();
    assert!(
        sent.matches("post /mcp http/1.1\r\n").count() >= 2,
        "initialize and the call went through the relay: {sent}"
    );
    assert_eq!(
        sent.matches("\r\nx-token: bearer s3cret\r\n").count(),
        requests,
        "every request carries the header with the variable's value: {sent}"
    );
    assert!(!sent.contains("${"), "{sent}");
    // A header whose syntax is wrong is refused at load, with its key.
    let bad = Ws::new(
        "upstreams:\n  - name: every\n    url: http://127.0.0.1:1/mcp\n    headers: {X-Token: \"${NOT CLOSED\"}\n",
    );
    let run = bad.run(&["config", "check"]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    assert!(
        format!("{}{}", run.stdout, run.stderr).contains("upstreams[0].headers.X-Token"),
        "{}{}",
        run.stdout,
        run.stderr
    );
}

#[test]
fn every_conformance_scenario_the_server_passes_alone_passes_through_wrap_http() {
    if !require(
        "every_conformance_scenario_the_server_passes_alone_passes_through_wrap_http",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let output = Command::new("bash")
        .arg(repo().join("scripts/mcp-gateway-conformance.sh"))
        .arg(airlock_testkit::bin())
        .arg(out.path())
        .env("AIRLOCK_TOOLS", tools_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The two figures, for the record (`cargo test -- --nocapture`).
    println!("{stdout}");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("server alone:   passed "), "{stdout}");
}

#[test]
fn roots_changes_resource_updates_and_unapproved_sampling_through_wrap() {
    if !require(
        "roots_changes_resource_updates_and_unapproved_sampling_through_wrap",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let everything = everything_server();
    // The server's tools run without a human; its sampling is not ruled,
    // so it asks, and with nobody to ask it is refused.
    let ws =
        Ws::new("security:\n  hitl:\n    rules:\n      - {tools: [\"every__*\"], risk: low}\n");
    let root = std::fs::canonicalize(ws.path("."))
        .unwrap()
        .display()
        .to_string();
    let first = format!("file://{root}/first");
    let second = format!("file://{root}/second");
    let mut client = ws.stdio_client(
        &[
            "--elicitation",
            "none",
            "--sampling",
            "never sent",
            "--root",
            first.as_str(),
            "--root",
            "file:///srv/outside",
            "--root",
            "file:///",
        ],
        &[
            "wrap",
            "--name",
            "every",
            "--",
            "node",
            &everything,
            "stdio",
        ],
    );
    let text = |result: &Value| {
        result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };

    // The client's roots as they lie inside the workspace (one beside it
    // left out, one above it the workspace itself), then its new roots
    // once it says they changed.
    let roots = text(&client.call("get-roots-list", json!({})));
    assert!(roots.contains(&first), "{roots}");
    // `file:///` is above the workspace: it is answered as the workspace.
    assert_eq!(roots.matches("file://").count(), 2, "{roots}");
    assert!(!roots.contains("/srv/outside"), "{roots}");
    client.send(json!({"op": "set_roots", "roots": [second]}));
    let mut seen = String::new();
    for _ in 0..50 {
        seen = text(&client.call("get-roots-list", json!({})));
        if seen.contains(&second) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(seen.contains(&second), "{seen}");
    assert!(!seen.contains(&first), "{seen}");

    // A subscribed resource's updates reach the client.
    let uri = "demo://resource/dynamic/text/1";
    client.send(json!({"op": "subscribe", "uri": uri}));
    client.call("toggle-subscriber-updates", json!({}));
    client.send(json!({"op": "wait_notification",
        "method": "notifications/resources/updated", "timeout": 15}));
    let all = client.send(json!({"op": "notifications"}));
    assert!(
        all["notifications"].as_array().unwrap().iter().any(|n| {
            n["method"] == json!("notifications/resources/updated")
                && n["params"]["uri"] == json!(uri)
        }),
        "{all}"
    );
    client.send(json!({"op": "unsubscribe", "uri": uri}));

    // Sampling spends the client's model: unruled, it asks; nobody can be
    // asked, so the server is refused and the client never sees it.
    let refused = client.send_any(json!({"op": "call", "tool": "trigger-sampling-request",
        "args": {"prompt": "spend", "maxTokens": 5}}));
    assert!(refused.to_string().contains("sampling:every"), "{refused}");
    let sampled = client.send(json!({"op": "sampled"}));
    assert_eq!(sampled["sampled"], json!([]), "{sampled}");
    assert!(
        ws.audit()
            .iter()
            .any(|record| record["tool"] == json!("sampling:every")
                && record["status"] == json!("denied")),
        "{:?}",
        ws.audit()
    );
    drop(client);

    // A client that can be asked is asked, with a form, as for its own
    // calls: approved, the request reaches its model; denied, the server
    // is refused with the human's reason.
    let mut client = ws.stdio_client(
        &["--elicitation", "form", "--sampling", "sampled!"],
        &[
            "wrap",
            "--name",
            "every",
            "--",
            "node",
            &everything,
            "stdio",
        ],
    );
    client.answer_elicitations("accept", json!({"decision": "approve"}));
    let approved = client.call(
        "trigger-sampling-request",
        json!({"prompt": "spend", "maxTokens": 5}),
    );
    assert!(approved.to_string().contains("sampled!"), "{approved}");
    let asked = approved["elicitations"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{approved}");
    assert!(
        asked[0].to_string().contains("sampling:every"),
        "the form names what is asked: {approved}"
    );
    let sampled = client.send(json!({"op": "sampled"}));
    assert_eq!(sampled["sampled"].as_array().unwrap().len(), 1, "{sampled}");
    client.answer_elicitations(
        "accept",
        json!({"decision": "deny", "reason": "not on my budget"}),
    );
    let denied = client.send_any(json!({"op": "call", "tool": "trigger-sampling-request",
        "args": {"prompt": "spend more", "maxTokens": 5}}));
    assert!(denied.to_string().contains("not on my budget"), "{denied}");
    let sampled = client.send(json!({"op": "sampled"}));
    assert_eq!(sampled["sampled"].as_array().unwrap().len(), 1, "{sampled}");
    let audit = ws.audit();
    let decided: Vec<&Value> = audit
        .iter()
        .filter(|record| {
            record["tool"] == json!("sampling:every") && record["event"] == json!("hitl_decision")
        })
        .collect();
    assert_eq!(decided.len(), 2, "{audit:?}");
}

#[test]
fn check_explains_resource_reads_and_sampling_and_protects_airlocks_state_through_resources() {
    let ws = Ws::new(
        "upstreams:\n  - name: docs\n    command: node\n    args: [server.js]\nsecurity:\n  hitl:\n    rules:\n      - {tools: [\"resource:docs:secret://*\"], decision: deny}\n",
    );
    let root = ws.root().display().to_string();
    let check = |tool: &str, args: Value| {
        let run = ws.run(&["check", tool, "--args", &args.to_string()]);
        format!("{}{}", run.stdout, run.stderr)
    };
    // A read of the server's resource: low risk, allowed.
    let plain = check(
        "resource:docs:notes://today",
        json!({"uri": "notes://today"}),
    );
    assert!(
        plain.contains("upstream resource read: risk low"),
        "{plain}"
    );
    assert!(plain.contains(": allow"), "{plain}");
    // A rule names resources by URI glob.
    let ruled = check(
        "resource:docs:secret://keys",
        json!({"uri": "secret://keys"}),
    );
    assert!(ruled.contains(": deny"), "{ruled}");
    // A file: URI into airlock's state is refused whatever serves it.
    let state = format!("file://{root}/.airlock/audit.jsonl");
    let refused = check(&format!("resource:docs:{state}"), json!({"uri": state}));
    assert!(refused.contains(": deny"), "{refused}");
    // Sampling spends: it asks.
    let sampling = check("sampling:docs", json!({"messages": []}));
    assert!(
        sampling.contains("upstream sampling request (spends): risk medium"),
        "{sampling}"
    );
    assert!(sampling.contains(": ask"), "{sampling}");
    // An upstream that is not configured is nobody's.
    let unknown = check("resource:nobody:notes://x", json!({"uri": "notes://x"}));
    assert!(unknown.contains("unknown tool"), "{unknown}");
}

#[test]
fn exec_through_the_python_sdk_runs_allowed_commands_and_refuses_denied_ones() {
    if !require(
        "exec_through_the_python_sdk_runs_allowed_commands_and_refuses_denied_ones",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Ws::new(
        "exec:\n  rules:\n    - {prefix: [rm], decision: deny}\n    - {prefix: [sleep], decision: allow}\n",
    );
    let mut client = ws.stdio_client(&["--elicitation", "none"], &["serve", "--stdio"]);
    let ran = client.call("exec", json!({"command": "wc -l hello.txt"}));
    assert_eq!(status(&ran), "allowed", "{ran}");
    assert_eq!(envelope(&ran)["data"]["stdout"], "2 hello.txt\n", "{ran}");
    assert_eq!(envelope(&ran)["op"]["method"], "exec.run");

    let denied = client.call("exec", json!({"command": "ls && rm hello.txt"}));
    assert_eq!(status(&denied), "denied", "{denied}");
    assert_eq!(code(&denied), "policy_denied");
    assert_eq!(denied["isError"], json!(true));
    assert!(ws.path("hello.txt").exists());

    // Claude Code's --permission-prompt-tool: a read allowed (its input
    // back as updatedInput), a command the exec rules deny refused.
    let root = std::fs::canonicalize(ws.path(".")).unwrap();
    let input = json!({"file_path": format!("{}/hello.txt", root.display())});
    let prompt = client.call(
        "permission_prompt",
        json!({"tool_name": "Read", "input": input, "tool_use_id": "toolu_7"}),
    );
    let answer: Value =
        serde_json::from_str(prompt["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(answer, json!({"behavior": "allow", "updatedInput": input}));
    let prompt = client.call(
        "permission_prompt",
        json!({"tool_name": "Bash", "input": {"command": "rm hello.txt"}}),
    );
    let answer: Value =
        serde_json::from_str(prompt["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(answer["behavior"], "deny", "{answer}");
    assert!(
        answer["message"].as_str().unwrap().starts_with("airlock: "),
        "{answer}"
    );
    assert!(ws.path("hello.txt").exists());

    // The client cancels a command that runs (notifications/cancelled):
    // it is killed, the call ends, the audit says so.
    client.send(json!({"op": "call_async", "id": "slow", "tool": "exec",
        "args": {"command": "sleep 317"}}));
    airlock_testkit::wait_running(&["sleep", "317"]);
    client.send(json!({"op": "cancel", "id": "slow"}));
    client.send_any(json!({"op": "await", "id": "slow", "timeout": 25}));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !airlock_testkit::processes_running(&["sleep", "317"]).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the cancelled command runs on"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ws
        .audit()
        .iter()
        .any(|record| record["tool"] == "exec" && record["status"] == "cancelled")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "not audited: {:?}",
            ws.audit()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// One POST of `message` to the MCP endpoint at `addr` + `path`, in session
/// `session` if given: the status, the response head and the JSON-RPC
/// messages of its body (a JSON body or an SSE stream).
fn mcp_post(
    addr: &str,
    path: &str,
    session: Option<&str>,
    message: &Value,
) -> (u16, String, Vec<Value>) {
    let mut headers =
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
                       MCP-Protocol-Version: 2025-11-25\r\n"
            .to_owned();
    if let Some(session) = session {
        headers.push_str(&format!("Mcp-Session-Id: {session}\r\n"));
    }
    let (status, head, body) = airlock_testkit::http::exchange(
        addr,
        "POST",
        path,
        &headers,
        message.to_string().as_bytes(),
    );
    let messages = if head
        .to_ascii_lowercase()
        .contains("content-type: text/event-stream")
    {
        body.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    } else {
        serde_json::from_str(&body).into_iter().collect()
    };
    (status, head, messages)
}

#[test]
fn http_calls_answered_in_the_fast_lane_equal_the_usual_way() {
    if !require(
        "http_calls_answered_in_the_fast_lane_equal_the_usual_way",
        &[Peer::NodeTools],
    ) {
        return;
    }
    let everything = everything_server();
    let ws = Ws::new(&format!(
        "security:\n  hitl:\n    rules:\n      - {{tools: [\"every__*\"], risk: low}}\nprofiles:\n  other: {{}}\nupstreams:\n  - name: every\n    command: node\n    args: [{everything:?}, stdio]\n"
    ));
    let serving = airlock_testkit::http::Serving::start(&ws, &[]);
    let addr = serving.addr.clone();
    let (status, head, _) = mcp_post(
        &addr,
        "/mcp",
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "lane-test", "version": "1"}}}),
    );
    assert_eq!(status, 200, "{head}");
    let session = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id: {head}"));
    let session_id = session;
    let session = Some(session_id.as_str());
    let (status, head, _) = mcp_post(
        &addr,
        "/mcp",
        session,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(status, 202, "{head}");
    let call = |id: u64, meta: Option<Value>| {
        let mut params = json!({"name": "every__echo", "arguments": {"message": "the same"}});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    };
    let is_json = |head: &str| {
        head.to_ascii_lowercase()
            .contains("content-type: application/json")
    };

    // Without a standalone GET stream (where an upstream's request to the
    // client would go), rmcp answers on the POST's stream.
    let (status, head, before) = mcp_post(&addr, "/mcp", session, &call(10, None));
    assert_eq!(status, 200, "{head}");
    assert!(!is_json(&head), "{head}");

    // With the GET stream open, the lane answers in a JSON body.
    let mut listening = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        listening,
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\
         Mcp-Session-Id: {}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n",
        session_id
    )
    .unwrap();
    let mut stream_head = BufReader::new(listening.try_clone().unwrap());
    let mut line = String::new();
    stream_head.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    let (status, head, laned) = mcp_post(&addr, "/mcp", session, &call(11, None));
    assert_eq!(status, 200, "{head}");
    assert!(is_json(&head), "{head}");
    // A progress token needs rmcp's stream.
    let (_, head, with_progress) = mcp_post(
        &addr,
        "/mcp",
        session,
        &call(12, Some(json!({"progressToken": "p"}))),
    );
    assert!(!is_json(&head), "{head}");

    let answer = |messages: &[Value], id: u64| {
        messages
            .iter()
            .find(|message| message["id"] == json!(id))
            .unwrap_or_else(|| panic!("no answer {id}: {messages:?}"))
            .clone()
    };
    let (before, laned, with_progress) = (
        answer(&before, 10),
        answer(&laned, 11),
        answer(&with_progress, 12),
    );
    let without_audit = |answer: &Value| {
        let mut result = answer["result"].clone();
        result["_meta"]["airlock/envelope"]
            .as_object_mut()
            .unwrap()
            .remove("audit");
        result
    };
    assert_eq!(
        without_audit(&before),
        without_audit(&laned),
        "{before}\n{laned}"
    );
    assert_eq!(
        without_audit(&with_progress),
        without_audit(&laned),
        "{with_progress}\n{laned}"
    );
    assert_eq!(
        laned["result"]["content"][0]["text"],
        json!("Echo: the same")
    );

    // The session's binding holds for every request of it: the same
    // session on another profile's endpoint is refused, a call, a POSTed
    // answer and a GET stream alike.
    let (status, head, _) = mcp_post(&addr, "/mcp/other", session, &call(13, None));
    assert_eq!(status, 403, "{head}");
    let (status, head, _) = mcp_post(
        &addr,
        "/mcp/other",
        session,
        &json!({"jsonrpc": "2.0", "id": "s-1", "result": {}}),
    );
    assert_eq!(status, 403, "{head}");
    let (status, head, _) = airlock_testkit::http::exchange(
        &addr,
        "GET",
        "/mcp/other",
        &format!(
            "Accept: text/event-stream\r\nMcp-Session-Id: {session_id}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
        ),
        b"",
    );
    assert_eq!(status, 403, "{head}");
    // A second GET while the first is open gets keep-alives only (rmcp
    // sends to the first): it does not count, and once the first closes the
    // lane stands aside though the second is still open.
    let mut shadow = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        shadow,
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\
         Mcp-Session-Id: {session_id}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
    )
    .unwrap();
    let mut shadow_head = BufReader::new(shadow.try_clone().unwrap());
    let mut line = String::new();
    shadow_head.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");

    // Once the first GET stream is closed, the lane stands aside again.
    drop(stream_head);
    drop(listening);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, head, _) = mcp_post(&addr, "/mcp", session, &call(14, None));
        if !is_json(&head) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lane still answers after the GET stream closed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // The audit records of the two ways agree but for their own ids.
    let audit = ws.audit();
    let record = |id: &str| {
        without_ids(
            audit
                .iter()
                .find(|record| record["tool_call_id"] == json!(id))
                .unwrap_or_else(|| panic!("no record of {id}: {audit:?}")),
        )
    };
    assert_eq!(record("10"), record("11"));
    assert_eq!(record("11")["decision"], json!("allow"));
    drop(shadow_head);
    drop(shadow);
}

#[test]
fn an_http_upstreams_requests_reach_the_client_whose_call_they_came_with() {
    if !require(
        "an_http_upstreams_requests_reach_the_client_whose_call_they_came_with",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    // Two clients of one airlock, each with a call in flight on the same
    // streamable-HTTP upstream connection; the server asks each caller
    // (elicitation/create) on its call's stream. Each question reaches the
    // client whose call it came with, and each answer goes back to the
    // call it belongs to.
    let upstream = EverythingHttp::start();
    let ws = Ws::new(&format!(
        "security:\n  hitl:\n    rules:\n      - {{tools: [\"every__*\"], risk: low}}\nupstreams:\n  - name: every\n    url: {}\n",
        upstream.url
    ));
    let server = HttpServer::start(&ws);
    let client = |ws: &Ws| {
        ws.client(
            &[
                "--elicitation".to_owned(),
                "form".to_owned(),
                "--http".to_owned(),
                server.url.clone(),
            ],
            "tester",
        )
    };
    let mut alice = client(&ws);
    let mut bob = client(&ws);
    // Alice answers late, so both calls are in flight when Bob is asked.
    alice.send(json!({"op": "set_elicit", "delay": 1.5,
        "answer": {"action": "accept", "content": {"name": "Alice"}}}));
    bob.send(json!({"op": "set_elicit",
        "answer": {"action": "accept", "content": {"name": "Bob"}}}));
    let (of_alice, of_bob) = std::thread::scope(|scope| {
        let first = scope.spawn(|| alice.call("every__trigger-elicitation-request", json!({})));
        std::thread::sleep(Duration::from_millis(500));
        let second = scope.spawn(|| bob.call("every__trigger-elicitation-request", json!({})));
        (first.join().unwrap(), second.join().unwrap())
    });
    for (result, name, other) in [(&of_alice, "Alice", "Bob"), (&of_bob, "Bob", "Alice")] {
        assert_eq!(status(result), "allowed", "{result}");
        let text = result["content"].to_string();
        assert!(
            text.contains(name),
            "{name}'s answer reached her call: {result}"
        );
        assert!(!text.contains(other), "{result}");
        assert_eq!(
            result["elicitations"].as_array().map(Vec::len),
            Some(1),
            "{name} was asked once: {result}"
        );
    }
}

#[test]
fn a_hostile_http_upstreams_endless_answers_are_cut_off_and_the_connection_serves_on() {
    if !require(
        "a_hostile_http_upstreams_endless_answers_are_cut_off_and_the_connection_serves_on",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    // A server that answers one tool with an SSE event that never ends and
    // another with a JSON body past what airlock reads.
    let mut hostile = Command::new("python3")
        .arg(repo().join("tests/mcp/hostile_upstream.py"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut port = String::new();
    BufReader::new(hostile.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    let ws = Ws::new(&format!(
        "security:\n  hitl:\n    rules:\n      - {{tools: [\"hostile__*\"], risk: low}}\nupstreams:\n  - name: hostile\n    url: http://127.0.0.1:{}/mcp\n    timeout: 60s\n",
        port.trim()
    ));
    let mut mcp = airlock_testkit::mcp::RawStdio::start(&ws, &[]);
    let call = |id: u64, tool: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": tool, "arguments": {}}})
    };
    // The upstream connects in the background: its tools are listed once it is up.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let listed = mcp.request(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        if listed.to_string().contains("hostile__flood") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{listed}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let started = std::time::Instant::now();
    for (id, tool) in [(3, "hostile__flood"), (4, "hostile__bulk")] {
        let answer = mcp.request(call(id, tool));
        let result = &answer["result"];
        assert_eq!(result["isError"], json!(true), "{tool}: {answer}");
        assert!(
            result.to_string().contains("too large"),
            "{tool} is refused as too large: {answer}"
        );
    }
    // Cut off at the cap, long before the upstream's timeout.
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "{:?}",
        started.elapsed()
    );
    // Memory stayed bounded: about one capped answer, not the stream.
    let peak = peak_rss(mcp.pid());
    assert!(peak < 160 * 1024 * 1024, "peak RSS {peak}");
    // The connection still serves.
    let listed = mcp.request(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}));
    assert!(listed.to_string().contains("hostile__bulk"), "{listed}");
    let _ = hostile.kill();
    let _ = hostile.wait();
}
