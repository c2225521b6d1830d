//! Sessions (DESIGN §5.3, spec 003's host session) through every face: the
//! CLI (`airlock session …`, `airlock call --session`), MCP (the session
//! tools and spec 003's dotted names, over a real client) and HTTP
//! (`/v1/sessions`). Their life (open, use, close, expiry by the test
//! clock), who may use one, and the authority they scope: roots, working
//! directory, read-only roots, environment, network, limits, a profile's
//! bound session and opening beyond a profile's allowance.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use airlock_testkit::Workspace;
use airlock_testkit::http::Server;
use airlock_testkit::mcp::Driver;
use airlock_testkit::peers::{Peer, require};
use airlock_testkit::token_sha256 as sha;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// `a/` holds the session's files, `b/` a sibling it must not reach, and
/// `a/link.txt` a symlink to it.
fn tree(ws: &Workspace) {
    ws.write("a/x.txt", "inside\n");
    ws.write("b/secret.txt", "sibling\n");
    std::os::unix::fs::symlink("../b/secret.txt", ws.path("a/link.txt")).unwrap();
}

/// `airlock session open --args ARGS EXTRA…`: the new session's id.
fn open(ws: &Workspace, args: Value, extra: &[&str]) -> String {
    let text = args.to_string();
    let mut argv = vec!["session", "open", "--args", text.as_str()];
    argv.extend_from_slice(extra);
    let run = ws.run(&argv);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let id = run.stdout.trim().to_owned();
    assert!(is_id(&id), "{id}");
    id
}

fn is_id(text: &str) -> bool {
    text.strip_prefix("ses-").is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// `airlock call TOOL --args ARGS EXTRA…`: the envelope.
fn call(ws: &Workspace, tool: &str, args: Value, extra: &[&str]) -> Value {
    let run = ws.call(tool, &args, extra);
    assert!(!run.json.is_null(), "{tool}: {}{}", run.stdout, run.stderr);
    run.json
}

fn refused(envelope: &Value, status: &str, code: &str) {
    assert_eq!(
        (
            envelope["status"].as_str(),
            envelope["error"]["code"].as_str()
        ),
        (Some(status), Some(code)),
        "{envelope:#}"
    );
}

fn show(ws: &Workspace, id: &str) -> Value {
    let run = ws.run(&["session", "show", id, "--json"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    serde_json::from_str(&run.stdout).unwrap()
}

/// Open, use, show, list, close from the terminal; a closed session refuses
/// every call, and the audit log holds its opening and closing with the
/// hash of its authority.
#[test]
fn a_session_lives_from_open_to_close_at_the_terminal() {
    let ws = Workspace::new("");
    tree(&ws);
    let id = open(&ws, json!({"roots": ["a"], "labels": {"task": "t1"}}), &[]);
    let listed = ws.run(&["session", "list", "--json"]);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["session_id"], json!(id));
    assert_eq!(
        listed[0]["roots"],
        json!([{"workspace": "default", "path": "a", "mode": "rw"}])
    );
    assert_eq!(listed[0]["workdir"], json!("a"));
    assert_eq!(listed[0]["labels"], json!({"task": "t1"}));

    // Relative paths start at the session's working directory.
    let read = call(
        &ws,
        "read_file",
        json!({"path": "x.txt"}),
        &["--session", &id],
    );
    assert_eq!(read["data"]["content"], json!("inside\n"), "{read:#}");
    // The same through `session_id`, and spec 003's dotted name.
    let read = call(
        &ws,
        "host.fs.read_file",
        json!({"path": "x.txt", "session_id": id}),
        &[],
    );
    assert_eq!(read["data"]["content"], json!("inside\n"), "{read:#}");
    assert_eq!(read["op"]["tool"], json!("read_file"), "{read:#}");
    // Answers show paths from there too.
    let found = call(
        &ws,
        "glob",
        json!({"pattern": "*.txt"}),
        &["--session", &id],
    );
    assert_eq!(found["data"]["paths"], json!("x.txt"), "{found:#}");

    let shown = show(&ws, &id);
    assert_eq!(shown["status"], json!("open"));
    let closed = ws.run(&["session", "close", &id, "--reason", "done"]);
    assert_eq!(closed.stdout.trim(), format!("closed {id}"));
    let after = call(
        &ws,
        "read_file",
        json!({"path": "x.txt"}),
        &["--session", &id],
    );
    refused(&after, "denied", "session_closed");
    let again = ws.run(&["session", "close", &id]);
    assert_eq!(again.code, 4, "{}", again.stderr);
    assert!(
        again.stderr.contains("session_closed") || again.stderr.contains("closed already"),
        "{}",
        again.stderr
    );
    assert_eq!(show(&ws, &id)["status"], json!("closed"));
    assert_eq!(
        ws.run(&["session", "list"]).stdout.trim(),
        "no open sessions"
    );

    let audit = ws.audit();
    let opened = audit
        .iter()
        .find(|record| record["event"] == "session_opened")
        .expect("session_opened is audited");
    assert_eq!(opened["session"], json!(id));
    assert_eq!(opened["authority_hash"], shown["authority_hash"]);
    let closing = audit
        .iter()
        .find(|record| record["event"] == "session_closed")
        .expect("session_closed is audited");
    assert_eq!(
        (
            &closing["session"],
            &closing["authority_hash"],
            &closing["reason"]
        ),
        (&json!(id), &shown["authority_hash"], &json!("done"))
    );
}

/// A session ends by its absolute time and by its idle time, as the clock
/// says (no waiting): the call after is `session_expired`, audited.
#[test]
fn sessions_expire_by_their_ttl_and_their_idle_time() {
    let ws = Workspace::new("");
    tree(&ws);
    let idle = open(&ws, json!({"roots": ["a"], "idle_ttl": 20}), &[]);
    let ttl = open(&ws, json!({"roots": ["a"], "ttl": "1m"}), &[]);
    let use_it = |id: &str| {
        call(
            &ws,
            "read_file",
            json!({"path": "x.txt"}),
            &["--session", id],
        )
    };
    for step in [15_000, 15_000] {
        ws.advance(step);
        assert_eq!(use_it(&idle)["status"], json!("allowed"));
    }
    ws.advance(21_000);
    refused(&use_it(&idle), "denied", "session_expired");
    // 51 s in: used 21 s ago, long before its idle time; not yet at 60 s.
    assert_eq!(use_it(&ttl)["status"], json!("allowed"));
    ws.advance(10_000);
    refused(&use_it(&ttl), "denied", "session_expired");
    assert_eq!(show(&ws, &ttl)["status"], json!("expired"));
    let expired: Vec<Value> = ws
        .audit()
        .into_iter()
        .filter(|record| record["event"] == "session_expired")
        .map(|record| record["session"].clone())
        .collect();
    assert_eq!(expired.len(), 2, "{expired:?}");
}

/// Another principal's session is refused exactly as one that does not
/// exist: no oracle.
#[test]
fn another_principals_session_is_not_found() {
    let ws = Workspace::new("");
    tree(&ws);
    let alice = open(&ws, json!({"roots": ["a"]}), &["--user", "alice"]);
    let mine = call(
        &ws,
        "read_file",
        json!({"path": "x.txt"}),
        &["--session", &alice, "--user", "alice"],
    );
    assert_eq!(mine["status"], json!("allowed"), "{mine:#}");
    let theirs = call(
        &ws,
        "read_file",
        json!({"path": "x.txt", "session_id": alice}),
        &["--user", "bob"],
    );
    let missing_id = "ses-0123456789abcdef0123456789abcdef";
    let missing = call(
        &ws,
        "read_file",
        json!({"path": "x.txt", "session_id": missing_id}),
        &["--user", "bob"],
    );
    refused(&theirs, "denied", "session_not_found");
    let mut theirs = theirs.clone();
    let mut missing = missing.clone();
    for envelope in [&mut theirs, &mut missing] {
        envelope.as_object_mut().unwrap().remove("audit");
        let message = envelope["error"]["message"]
            .as_str()
            .unwrap()
            .replace(&alice, "ID")
            .replace(missing_id, "ID");
        envelope["error"]["message"] = json!(message);
    }
    assert_eq!(theirs, missing);
}

/// Closing a session cancels its pending approvals (audited); nothing of
/// theirs is applied.
#[test]
fn closing_a_session_cancels_its_pending_approvals() {
    let ws = Workspace::new("");
    tree(&ws);
    let id = open(&ws, json!({"roots": ["a"]}), &[]);
    let proposed = call(
        &ws,
        "write_file",
        json!({"path": "x.txt", "content": "changed\n"}),
        &["--session", &id, "--defer"],
    );
    assert_eq!(proposed["status"], json!("hitl_required"), "{proposed:#}");
    let hitl = proposed["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let pending = ws.run(&["pending", "--session", &id, "--json"]);
    let pending: Value = serde_json::from_str(&pending.stdout).unwrap();
    assert_eq!(pending.as_array().unwrap().len(), 1, "{pending:#}");
    ws.run(&["session", "close", &id]);
    let shown = ws.run(&["show", &hitl, "--json"]);
    let shown: Value = serde_json::from_str(&shown.stdout).unwrap();
    assert_eq!(shown["status"], json!("cancelled"), "{shown:#}");
    let approve = ws.run(&["approve", &hitl]);
    assert_ne!(approve.code, 0);
    assert_eq!(ws.read("a/x.txt").as_deref(), Some("inside\n"));
    let cancelled = ws
        .audit()
        .into_iter()
        .find(|record| record["event"] == "hitl_cancelled")
        .expect("the cancellation is audited");
    assert_eq!(cancelled["hitl_id"], json!(hitl));
}

/// A session over `a/` reaches nothing beside it: not by `..`, a symlink,
/// an absolute path, a hard link, a search from above, nor a command's
/// working directory or its reads.
#[test]
fn a_session_over_a_directory_cannot_reach_its_siblings() {
    let ws = Workspace::new("file_broker:\n  allow_hardlinks: true\n");
    tree(&ws);
    std::fs::hard_link(ws.path("b/secret.txt"), ws.path("a/hard.txt")).unwrap();
    let id = open(&ws, json!({"roots": ["a"]}), &[]);
    let session = ["--session", id.as_str()];
    let absolute = ws.path("b/secret.txt").display().to_string();
    for path in ["../b/secret.txt", "link.txt", absolute.as_str()] {
        let read = call(&ws, "read_file", json!({"path": path}), &session);
        refused(&read, "denied", "root_not_allowed");
    }
    let hard = call(&ws, "read_file", json!({"path": "hard.txt"}), &session);
    assert_eq!(hard["status"], json!("denied"), "{hard:#}");
    assert!(!hard.to_string().contains("sibling"), "{hard:#}");
    for (tool, args) in [
        ("grep", json!({"pattern": "sibling", "path": ".."})),
        ("glob", json!({"pattern": "**/*", "path": "../b"})),
        ("list_dir", json!({"path": "../b"})),
    ] {
        refused(
            &call(&ws, tool, args, &session),
            "denied",
            "root_not_allowed",
        );
    }
    let write = call(
        &ws,
        "write_file",
        json!({"path": "../b/secret.txt", "content": "overwritten\n"}),
        &["--session", &id, "--yes"],
    );
    refused(&write, "denied", "root_not_allowed");
    assert_eq!(ws.read("b/secret.txt").as_deref(), Some("sibling\n"));
    // Commands: no working directory outside, and the sibling is hidden.
    let outside = call(
        &ws,
        "exec",
        json!({"argv": ["ls"], "cwd": "../b"}),
        &session,
    );
    assert_eq!(outside["status"], json!("error"), "{outside:#}");
    assert!(
        outside["error"]["message"]
            .as_str()
            .unwrap()
            .contains("outside this session's roots"),
        "{outside:#}"
    );
    let cat = call(
        &ws,
        "exec",
        json!({"argv": ["cat", "../b/secret.txt"]}),
        &["--session", &id, "--yes"],
    );
    assert!(!cat.to_string().contains("sibling"), "{cat:#}");
    assert_ne!(cat["data"]["exit_code"], json!(0), "{cat:#}");
    let inside = call(
        &ws,
        "exec",
        json!({"argv": ["cat", "x.txt"]}),
        &["--session", &id, "--yes"],
    );
    assert_eq!(inside["data"]["stdout"], json!("inside\n"), "{inside:#}");
}

/// A read-only root is read, never written (not by a tool, not by a
/// command).
#[test]
fn a_read_only_root_refuses_writes() {
    let ws = Workspace::new("");
    tree(&ws);
    let id = open(&ws, json!({"roots": [{"path": "a", "mode": "ro"}]}), &[]);
    let session = ["--session", id.as_str(), "--yes"];
    assert_eq!(
        call(&ws, "read_file", json!({"path": "x.txt"}), &session)["status"],
        json!("allowed")
    );
    for (tool, args) in [
        ("write_file", json!({"path": "x.txt", "content": "no\n"})),
        (
            "edit_file",
            json!({"path": "x.txt", "old_string": "inside", "new_string": "no"}),
        ),
        ("delete_file", json!({"path": "x.txt"})),
    ] {
        refused(
            &call(&ws, tool, args, &session),
            "denied",
            "root_not_allowed",
        );
    }
    // However the command ends, the root holds what it held.
    call(
        &ws,
        "exec",
        json!({"argv": ["bash", "-c", "echo no > x.txt"]}),
        &session,
    );
    assert_eq!(ws.read("a/x.txt").as_deref(), Some("inside\n"));
}

/// The session's network binds its commands: with `exec.network: true` a
/// command connects, in a session opened with `network: none` it cannot.
#[test]
fn a_session_without_network_cannot_connect() {
    if !require("a_session_without_network_cannot_connect", &[Peer::Python3]) {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || for _ in listener.incoming() {});
    let ws = Workspace::new("exec:\n  network: true\n");
    tree(&ws);
    let connect = format!(
        "import socket; socket.create_connection(('127.0.0.1', {port}), 5); print('connected')"
    );
    let args = json!({"argv": ["python3", "-c", connect]});
    let open_net = open(&ws, json!({"roots": ["a"]}), &[]);
    let closed_net = open(&ws, json!({"roots": ["a"], "network": "none"}), &[]);
    assert_eq!(show(&ws, &open_net)["network"], json!("full"));
    assert_eq!(show(&ws, &closed_net)["network"], json!("none"));
    let with = call(
        &ws,
        "exec",
        args.clone(),
        &["--session", &open_net, "--yes"],
    );
    assert_eq!(with["data"]["stdout"], json!("connected\n"), "{with:#}");
    let without = call(&ws, "exec", args, &["--session", &closed_net, "--yes"]);
    assert_ne!(without["data"]["exit_code"], json!(0), "{without:#}");
    assert!(!without.to_string().contains("connected\\n"), "{without:#}");
}

/// A session's variables reach its commands only where the configuration
/// allows them (the others are dropped and named), and choosing them asks
/// a human once: they reach every command, where a call's own `env` asks
/// each time.
#[test]
fn a_sessions_environment_is_filtered_and_asked_for() {
    let ws = Workspace::new("sessions:\n  env_allow: [AIRLOCK_SESSION_VAR]\n");
    tree(&ws);
    let run = ws.run(&[
        "session",
        "open",
        "--args",
        r#"{"roots": ["a"], "env": {"AIRLOCK_SESSION_VAR": "hello", "LD_PRELOAD": "/tmp/evil.so"}}"#,
    ]);
    let asked: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(asked["status"], json!("hitl_required"), "{asked:#}");
    assert!(
        asked["hitl"]["summary"]
            .as_str()
            .unwrap()
            .contains("sets AIRLOCK_SESSION_VAR for every command"),
        "{asked:#}"
    );
    assert!(!asked.to_string().contains("LD_PRELOAD\":"), "{asked:#}");
    let hitl = asked["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    assert_eq!(ws.run(&["approve", &hitl]).code, 0);
    let result: Value = serde_json::from_str(&ws.run(&["show", &hitl, "--json"]).stdout).unwrap();
    let listed: Value =
        serde_json::from_str(&ws.run(&["session", "list", "--json"]).stdout).unwrap();
    let session = &listed[0];
    assert_eq!(
        session["env"],
        json!(["AIRLOCK_SESSION_VAR"]),
        "{listed:#} {result:#}"
    );
    let id = session["session_id"].as_str().unwrap().to_owned();
    let printed = call(
        &ws,
        "exec",
        json!({"argv": ["bash", "-c", "echo \"$AIRLOCK_SESSION_VAR:${LD_PRELOAD:-none}\""]}),
        &["--session", &id, "--yes"],
    );
    assert_eq!(
        printed["data"]["stdout"],
        json!("hello:none\n"),
        "{printed:#}"
    );
    // The audit keeps the names, never the values.
    let opened = ws
        .audit()
        .into_iter()
        .find(|record| record["event"] == "session_opened")
        .unwrap();
    assert_eq!(
        opened["authority"]["env"],
        json!(["AIRLOCK_SESSION_VAR"]),
        "{opened:#}"
    );
}

/// A command's changes in a session land where it made them, once
/// approved: in the session's root, never a level deeper.
#[test]
fn a_commands_changes_in_a_session_land_in_its_root() {
    let ws = Workspace::new("");
    tree(&ws);
    ws.write("a/old.txt", "old\n");
    let id = open(&ws, json!({"roots": ["a"]}), &[]);
    let changed = call(
        &ws,
        "exec",
        json!({"argv": ["bash", "-c", "echo changed > x.txt && rm old.txt"]}),
        &["--session", &id, "--yes"],
    );
    assert_eq!(changed["status"], json!("allowed"), "{changed:#}");
    assert_eq!(ws.read("a/x.txt").as_deref(), Some("changed\n"));
    assert!(!ws.path("a/old.txt").exists() && !ws.path("a/a").exists());
    // A change through a link that leads out of the roots is refused.
    let out = call(
        &ws,
        "exec",
        json!({"argv": ["bash", "-c", "rm link.txt"]}),
        &["--session", &id, "--yes"],
    );
    refused(&out, "denied", "root_not_allowed");
    assert!(ws.path("a/link.txt").is_symlink());
    assert_eq!(ws.read("b/secret.txt").as_deref(), Some("sibling\n"));
}

/// Where the policy asks about opening sessions, an opening is proposed
/// like any other call that asks; the other session tools are refused.
#[test]
fn the_policy_can_make_opening_a_session_ask() {
    let ws = Workspace::new(
        "security:\n  hitl:\n    rules:\n      - {tools: [session_open, session_list], require_approval: true}\n",
    );
    tree(&ws);
    let run = ws.run(&["session", "open", "--args", r#"{"roots": ["a"]}"#]);
    let asked: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(asked["status"], json!("hitl_required"), "{asked:#}");
    assert_eq!(
        ws.run(&["session", "list"]).stdout.trim(),
        "no open sessions"
    );
    refused(
        &call(&ws, "session_list", json!({}), &[]),
        "denied",
        "policy_denied",
    );
}

/// Roots are never airlock's own state, its configuration or a git
/// directory.
#[test]
fn protected_directories_are_no_roots() {
    let ws = Workspace::new("");
    tree(&ws);
    std::fs::create_dir_all(ws.path(".git/hooks")).unwrap();
    std::fs::create_dir_all(ws.path("a/.git")).unwrap();
    for root in [".git", ".git/hooks", ".airlock", "a/.git"] {
        let run = ws.run(&[
            "session",
            "open",
            "--args",
            &json!({"roots": [root]}).to_string(),
        ]);
        let envelope: Value = serde_json::from_str(&run.stdout).unwrap();
        refused(&envelope, "denied", "root_not_allowed");
    }
}

/// A session narrows the configuration's limits and never raises them.
#[test]
fn a_session_cannot_raise_a_limit() {
    let ws = Workspace::new("");
    tree(&ws);
    ws.write("a/long.txt", "0123456789abcdefghij\n");
    let narrow = open(
        &ws,
        json!({"roots": ["a"], "limits": {"max_read_bytes": 8, "max_glob_results": 1}}),
        &[],
    );
    let read = call(
        &ws,
        "read_file",
        json!({"path": "long.txt", "max_bytes": 100}),
        &["--session", &narrow],
    );
    assert_eq!(read["data"]["content"], json!("01234567"), "{read:#}");
    let found = call(
        &ws,
        "glob",
        json!({"pattern": "*.txt"}),
        &["--session", &narrow],
    );
    assert_eq!(found["data"]["truncated"], json!(true), "{found:#}");
    let wide = open(
        &ws,
        json!({"roots": ["a"], "limits": {"max_read_bytes": 999_999_999u64}, "ttl": "999h"}),
        &[],
    );
    let shown = show(&ws, &wide);
    assert_eq!(shown["limits"]["max_read_bytes"], json!(131_072));
    assert!(
        shown["expires_ms"].as_u64().unwrap() - shown["created_ms"].as_u64().unwrap()
            <= 8 * 3_600_000
    );
}

/// A profile's bound session binds its calls whatever `session_id` the
/// model names.
#[test]
fn a_bound_profile_session_ignores_the_models_session_id() {
    let ws = Workspace::new("profiles:\n  coder:\n    session: {roots: [a]}\n");
    tree(&ws);
    let whole = open(&ws, json!({}), &[]);
    let read = call(
        &ws,
        "read_file",
        json!({"path": "x.txt"}),
        &["--profile", "coder"],
    );
    assert_eq!(read["data"]["content"], json!("inside\n"), "{read:#}");
    let escape = call(
        &ws,
        "read_file",
        json!({"path": "../b/secret.txt", "session_id": whole}),
        &["--profile", "coder"],
    );
    refused(&escape, "denied", "root_not_allowed");
    // Without the profile, the same id reaches the whole workspace.
    let mine = call(
        &ws,
        "read_file",
        json!({"path": "b/secret.txt", "session_id": whole}),
        &[],
    );
    assert_eq!(mine["data"]["content"], json!("sibling\n"), "{mine:#}");
}

/// Opening with more than the profile's `sessions.auto` allows asks a
/// human; approving it opens the session for the caller.
#[test]
fn opening_beyond_the_allowance_asks() {
    let ws = Workspace::new(
        "exec:\n  network: true\nprofiles:\n  p:\n    sessions:\n      auto: {network: none, ttl: 1h}\n",
    );
    tree(&ws);
    let quiet = open(
        &ws,
        json!({"roots": ["a"], "network": "none", "ttl": "30m"}),
        &["--profile", "p"],
    );
    assert_eq!(show(&ws, &quiet)["network"], json!("none"));
    let run = ws.run(&[
        "session",
        "open",
        "--profile",
        "p",
        "--args",
        r#"{"roots": ["a"], "network": "full"}"#,
    ]);
    let asked: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(asked["status"], json!("hitl_required"), "{asked:#}");
    assert!(
        asked["hitl"]["summary"]
            .as_str()
            .unwrap()
            .contains("network"),
        "{asked:#}"
    );
    let hitl = asked["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let approved = ws.run(&["approve", &hitl]);
    assert_eq!(approved.code, 0, "{}{}", approved.stdout, approved.stderr);
    let result: Value = serde_json::from_str(&ws.run(&["show", &hitl, "--json"]).stdout).unwrap();
    let listed: Value =
        serde_json::from_str(&ws.run(&["session", "list", "--json"]).stdout).unwrap();
    let opened: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|session| session["network"] == json!("full"))
        .collect();
    assert_eq!(opened.len(), 1, "{listed:#} {result:#}");
}

/// Over MCP: the session tools are listed, a session the connection opens
/// is the one its later calls run in, and spec 003's shapes work unchanged
/// (`host.session.open` with a local target, `host.fs.write_file`,
/// `host.exec`).
#[test]
fn mcp_clients_open_use_and_close_sessions() {
    if !require(
        "mcp_clients_open_use_and_close_sessions",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Workspace::new(
        "file_broker:\n  allowlisted_create_dirs: [a/]\nsecurity:\n  hitl:\n    rules:\n      - {tools: [write_file], risk: low, require_approval: false}\n",
    );
    tree(&ws);
    let mut client = Driver::stdio(&ws, &["--elicitation", "none"], &["serve", "--stdio"]);
    let names = client.tool_names();
    for tool in [
        "session_open",
        "session_list",
        "session_close",
        "session_signal",
    ] {
        assert!(names.iter().any(|name| name == tool), "{names:?}");
    }
    assert!(
        !names.iter().any(|name| name.starts_with("host.")),
        "{names:?}"
    );
    let opened = client.call("session_open", json!({"roots": ["a"]}));
    let id = opened["structuredContent"]["data"]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // No session_id: the connection's last opened session.
    let read = client.call("read_file", json!({"path": "x.txt"}));
    assert_eq!(
        read["structuredContent"]["data"]["content"],
        json!("inside\n"),
        "{read:#}"
    );
    let listed = client.call("session_list", json!({}));
    assert_eq!(
        listed["structuredContent"]["data"]["count"],
        json!(1),
        "{listed:#}"
    );
    let closed = client.call("session_close", json!({"session_id": id}));
    assert_eq!(
        closed["structuredContent"]["data"]["status"],
        json!("closed"),
        "{closed:#}"
    );
    // Closed: back to the implicit default session, the workspace root.
    let root = client.call("read_file", json!({"path": "a/x.txt"}));
    assert_eq!(
        root["structuredContent"]["data"]["content"],
        json!("inside\n"),
        "{root:#}"
    );

    // Spec 003's sequence, as an agent built for it sends it.
    let dir = ws.path("a").display().to_string();
    let spec = client.call(
        "host.session.open",
        json!({"target": {"local": {"mounts": [{"host_path": dir, "mode": "rw"}], "workdir": dir,
                "env": {}, "network_mode": "none"}}, "session_ttl_ns": 3_600_000_000_000u64}),
    );
    let spec_id = spec["structuredContent"]["data"]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let written = client.call(
        "host.fs.write_file",
        json!({"session_id": spec_id, "path": "new.txt", "content": "from spec 003\n"}),
    );
    assert_eq!(
        written["structuredContent"]["status"],
        json!("allowed"),
        "{written:#}"
    );
    assert_eq!(ws.read("a/new.txt").as_deref(), Some("from spec 003\n"));
    let ran = client.call(
        "host.exec",
        json!({"session_id": spec_id, "argv": ["cat", "new.txt"], "timeout_ns": 20_000_000_000u64}),
    );
    assert_eq!(
        ran["structuredContent"]["data"]["stdout"],
        json!("from spec 003\n"),
        "{ran:#}"
    );
}

const AGENT: &str = "agent-token-1";
const OTHER_AGENT: &str = "agent-token-2";
const ADMIN: &str = "admin-token-1";

/// Over HTTP: `POST/GET /v1/sessions`, `GET/DELETE /v1/sessions/{id}`, a
/// call naming the session, and another token refused as for no session.
#[test]
fn http_clients_open_use_and_close_sessions() {
    let config = format!(
        "auth:\n  tokens:\n    \
         - {{name: claude, sha256: \"{}\", roles: [agent], user: u1}}\n    \
         - {{name: bot, sha256: \"{}\", roles: [agent], user: u2}}\n    \
         - {{name: root, sha256: \"{}\", roles: [admin], user: boss}}\n",
        sha(AGENT),
        sha(OTHER_AGENT),
        sha(ADMIN)
    );
    let ws = Workspace::new(&config);
    tree(&ws);
    let server = Server::start_in(ws, &[]);
    let (status, opened) = server.post("/v1/sessions", Some(AGENT), &json!({"roots": ["a"]}));
    assert_eq!(status, 201, "{opened:#}");
    let id = opened["session_id"].as_str().unwrap().to_owned();
    let (status, call) = server.post(
        "/v1/tools/call",
        Some(AGENT),
        &json!({"tool": "read_file", "arguments": {"path": "x.txt", "session_id": id}}),
    );
    assert_eq!(
        (status, &call["data"]["content"]),
        (200, &json!("inside\n")),
        "{call:#}"
    );
    let (status, listed) = server.get("/v1/sessions", Some(AGENT));
    assert_eq!(
        (status, listed["sessions"].as_array().unwrap().len()),
        (200, 1)
    );
    let (status, _) = server.get("/v1/sessions", Some(OTHER_AGENT));
    assert_eq!(status, 200);
    assert_eq!(
        server.get("/v1/sessions", Some(OTHER_AGENT)).1["sessions"],
        json!([])
    );
    let (status, theirs) = server.get(&format!("/v1/sessions/{id}"), Some(OTHER_AGENT));
    assert_eq!(
        (status, theirs["error"]["code"].as_str()),
        (404, Some("session_not_found"))
    );
    let (status, used) = server.post(
        "/v1/tools/call",
        Some(OTHER_AGENT),
        &json!({"tool": "read_file", "arguments": {"path": "x.txt", "session_id": id}}),
    );
    assert_eq!(
        (status, used["error"]["code"].as_str()),
        (200, Some("session_not_found")),
        "{used:#}"
    );
    let (status, all) = server.get("/v1/sessions?all=true", Some(ADMIN));
    assert_eq!(
        (status, all["sessions"].as_array().unwrap().len()),
        (200, 1)
    );
    let (status, _) = server.get("/v1/sessions?all=true", Some(AGENT));
    assert_eq!(status, 403);
    let (status, closed) =
        server.request("DELETE", &format!("/v1/sessions/{id}"), Some(AGENT), b"");
    assert_eq!(
        (status, &closed["status"]),
        (200, &json!("closed")),
        "{closed:#}"
    );
    let (status, again) = server.request("DELETE", &format!("/v1/sessions/{id}"), Some(AGENT), b"");
    assert_eq!(
        (status, again["error"]["code"].as_str()),
        (409, Some("session_closed"))
    );
    let (status, shown) = server.get(&format!("/v1/sessions/{id}"), Some(AGENT));
    assert_eq!((status, &shown["status"]), (200, &json!("closed")));
    let (status, bad) = server.post("/v1/sessions", Some(AGENT), &json!({"roots": ["../.."]}));
    assert_eq!(
        (status, bad["error"]["code"].as_str()),
        (403, Some("root_not_allowed")),
        "{bad:#}"
    );
}

/// `session_signal` reaches the commands the session runs in this server:
/// `term` ends a running command, and a signal for a session with none
/// running says it reached nothing.
#[test]
fn session_signal_stops_the_sessions_commands() {
    if !require(
        "session_signal_stops_the_sessions_commands",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Workspace::new("exec:\n  rules:\n    - {prefix: [sleep], decision: allow}\n");
    tree(&ws);
    let mut client = Driver::stdio(&ws, &["--elicitation", "none"], &["serve", "--stdio"]);
    let opened = client.call("session_open", json!({"roots": ["a"]}));
    let id = opened["structuredContent"]["data"]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let idle = client.call(
        "session_signal",
        json!({"session_id": id, "signal": "term"}),
    );
    assert_eq!(
        idle["structuredContent"]["data"]["delivered"],
        json!(false),
        "{idle:#}"
    );
    client.send(json!({"op": "call_async", "id": "slow", "tool": "exec",
        "args": {"argv": ["sleep", "318"], "session_id": id}}));
    airlock_testkit::wait_running(&["sleep", "318"]);
    let signalled = client.call(
        "session_signal",
        json!({"session_id": id, "signal": "term"}),
    );
    assert_eq!(
        signalled["structuredContent"]["data"]["delivered"],
        json!(true),
        "{signalled:#}"
    );
    let ended = client.send_any(json!({"op": "await", "id": "slow", "timeout": 25}));
    let data = &ended["structuredContent"]["data"];
    assert!(
        data["signal"] == json!(15) || data["exit_code"] == json!(143),
        "{ended:#}"
    );
    assert!(airlock_testkit::processes_running(&["sleep", "318"]).is_empty());
    let audited = ws
        .audit()
        .into_iter()
        .any(|record| record["event"] == "session_signalled" && record["signal"] == "term");
    assert!(audited, "the signal is audited");
}

/// A script run in a session (`codemode_eval` takes `session_id` too):
/// its calls are the session's, relative paths from its working directory
/// and nothing beside its roots.
#[test]
fn a_script_runs_in_its_session() {
    let ws = Workspace::new("");
    tree(&ws);
    let id = open(&ws, json!({"roots": ["a"]}), &[]);
    let code = "const inside = await codemode.read_file({path: 'x.txt'});\n\
                let outside = 'read';\n\
                try { await codemode.read_file({path: '../b/secret.txt'}) } catch (e) { outside = e.code }\n\
                return {inside: inside.content, outside};";
    let ran = call(
        &ws,
        "codemode_eval",
        json!({"code": code, "session_id": id}),
        &[],
    );
    assert_eq!(
        ran["data"]["result"],
        json!({"inside": "inside\n", "outside": "root_not_allowed"}),
        "{ran:#}"
    );
}

/// MCP roots are hints, never grants (DESIGN §5.3): an upstream that asks
/// for the roots while a call runs is told the client's roots as they lie
/// inside the workspace, and, for a call in a session, that session's.
#[test]
fn an_upstream_is_told_the_roots_of_the_calling_session() {
    if !require(
        "an_upstream_is_told_the_roots_of_the_calling_session",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let python = airlock_testkit::peers::tools_dir().join("venv/bin/python");
    let server = airlock_testkit::repo().join("tests/mcp/roots_upstream.py");
    let ws = Workspace::new(&format!(
        "upstreams:\n  - name: r\n    command: {python:?}\n    args: [{server:?}]\nsecurity:\n  hitl:\n    rules:\n      - {{tools: [\"r__*\"], risk: low}}\n"
    ));
    tree(&ws);
    let root = std::fs::canonicalize(ws.path("."))
        .unwrap()
        .display()
        .to_string();
    let inside = format!("file://{root}/a");
    let mut client = Driver::stdio(
        &ws,
        &[
            "--elicitation",
            "none",
            "--root",
            &inside,
            "--root",
            "file:///srv/elsewhere",
        ],
        &["serve", "--stdio"],
    );
    let text = |result: &Value| {
        result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let implicit = text(&client.call("r__roots", json!({})));
    assert_eq!(implicit, inside, "{implicit}");
    client.call(
        "session_open",
        json!({"roots": ["b", {"path": "a", "mode": "ro"}]}),
    );
    let scoped = text(&client.call("r__roots", json!({})));
    assert_eq!(
        scoped,
        format!("file://{root}/b\nfile://{root}/a"),
        "{scoped}"
    );
}
