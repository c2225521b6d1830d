//! `airlock hook claude-code|codex|gemini` as the agents run it: an event
//! on stdin, the agent's answer on stdout. The fixtures under
//! `tests/hook-events/` hold one event per case (the shapes the agents'
//! hooks references document) with the whole answer expected; the tests
//! below drive the rest end to end: a hook waiting for a human who
//! approves or denies over HTTP, and the check after the agent's tool ran.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use airlock_testkit::Workspace;
use airlock_testkit::http::Server;
use airlock_testkit::token_sha256 as sha;
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/hook-events")
}

/// Runs `command` with `input` on stdin: exit code, stdout, stderr.
fn feed(mut command: Command, input: &[u8]) -> (i32, String, String) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn every_fixture_event_gets_its_whole_answer() {
    let config = std::fs::read_to_string(fixtures().join("airlock.yaml")).unwrap();
    let mut cases = 0;
    let mut failures = Vec::new();
    for agent in ["claude-code", "codex", "gemini"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures().join(agent))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        files.sort();
        for file in files {
            let case: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap())
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            let ws = Workspace::with_config(&config);
            copy_dir(&fixtures().join("workspace"), ws.root());
            std::fs::create_dir_all(ws.path(".airlock")).unwrap();
            let root = std::fs::canonicalize(ws.root()).unwrap();
            let root = root.to_string_lossy();
            let event = match &case["event"] {
                Value::String(text) => text.clone(),
                event => event.to_string(),
            }
            .replace("$ROOT", &root);
            let mut args = vec!["hook".to_owned(), agent.to_owned()];
            if let Some(extra) = case["args"].as_array() {
                args.extend(extra.iter().map(|arg| arg.as_str().unwrap().to_owned()));
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut command = ws.command(&args);
            // A case that asks waits for the real clock to run out.
            command.env_remove("AIRLOCK_TEST_CLOCK");
            let (code, stdout, stderr) = feed(command, event.as_bytes());
            let stdout = stdout.replace(root.as_ref(), "$ROOT");
            let stderr = stderr.replace(root.as_ref(), "$ROOT");
            let got = json!({
                "exit": code,
                "stdout": if stdout.trim().is_empty() {
                    Value::Null
                } else {
                    serde_json::from_str::<Value>(&stdout).unwrap_or(Value::String(stdout.clone()))
                },
                "stderr": stderr,
            });
            let want = json!({
                "exit": case["exit"],
                "stdout": case["stdout"],
                "stderr": case["stderr"],
            });
            if got != want {
                failures.push(format!(
                    "{}:\n  want {want}\n  got  {got}",
                    file.strip_prefix(fixtures()).unwrap().display()
                ));
            }
            cases += 1;
        }
    }
    assert!(cases >= 60, "only {cases} fixture cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

const APPROVER: &str = "approver-token-1";

fn approver_config() -> String {
    format!(
        "auth:\n  tokens:\n    - {{name: phone, sha256: \"{}\", roles: [approver], user: u1}}\n",
        sha(APPROVER)
    )
}

fn edit_event(root: &str, id: &str, old: &str, new: &str) -> String {
    json!({
        "session_id": "sess-1",
        "cwd": root,
        "hook_event_name": "PreToolUse",
        "tool_name": "Edit",
        "tool_input": {"file_path": format!("{root}/a.txt"), "old_string": old, "new_string": new},
        "tool_use_id": id,
    })
    .to_string()
}

/// Starts the hook on `event` in the server's workspace; its output once
/// a human decided.
fn hook_waiting(
    server: &Server,
    agent: &str,
    event: String,
) -> std::thread::JoinHandle<(i32, String, String)> {
    let command = server.ws.command(&["hook", agent, "--timeout", "120"]);
    std::thread::spawn(move || feed(command, event.as_bytes()))
}

fn pending_id(server: &Server) -> String {
    for _ in 0..3000 {
        let (_, body) = server.get("/hitl/pending", Some(APPROVER));
        if let Some(id) = body["approvals"]
            .as_array()
            .and_then(|list| list.first())
            .and_then(|first| first["id"].as_str().or(first["approval_id"].as_str()))
        {
            return id.to_owned();
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("no approval became pending");
}

#[test]
fn a_hook_waits_for_a_human_who_approves_or_denies_over_http() {
    let server = Server::start(&approver_config());
    let root = std::fs::canonicalize(server.ws.root()).unwrap();
    let root = root.to_string_lossy().into_owned();

    // Approved: the hook lets Claude Code's edit through, the file is still
    // as it was (the agent writes it).
    let waiting = hook_waiting(
        &server,
        "claude-code",
        edit_event(&root, "toolu_1", "hello", "bye"),
    );
    let id = pending_id(&server);
    let (_, one) = server.get(&format!("/hitl/pending/{id}"), Some(APPROVER));
    let diff = one["diff"].as_str().unwrap_or_default();
    assert!(diff.contains("-hello") && diff.contains("+bye"), "{one}");
    let (status, decided) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "approve"}),
    );
    assert_eq!(status, 200, "{decided}");
    let (code, stdout, stderr) = waiting.join().unwrap();
    assert_eq!(code, 0, "{stderr}");
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        answer,
        json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": "approved by u1 in airlock",
        }})
    );
    assert_eq!(server.ws.read("a.txt").as_deref(), Some("hello\n"));

    // Denied, with a reason: the model sees it.
    let waiting = hook_waiting(&server, "codex", {
        json!({
            "session_id": "s", "turn_id": "t", "cwd": root, "hook_event_name": "PreToolUse",
            "tool_name": "Bash", "tool_input": {"command": "make deploy"}, "tool_use_id": "call_9",
        })
        .to_string()
    });
    let id = pending_id(&server);
    let (status, _) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "deny", "reason": "not on a Friday"}),
    );
    assert_eq!(status, 200);
    let (code, stdout, _) = waiting.join().unwrap();
    assert_eq!(code, 0);
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        answer["hookSpecificOutput"]["permissionDecision"], "deny",
        "{answer}"
    );
    let reason = answer["hookSpecificOutput"]["permissionDecisionReason"]
        .as_str()
        .unwrap();
    assert!(reason.contains("not on a Friday"), "{reason}");

    // Both audited with the agent's session and tool-use ids.
    let audit = server.ws.audit();
    assert!(
        audit.iter().any(|record| record["agent"] == "claude-code"
            && record["tool_use_id"] == "toolu_1"
            && record["agent_session"] == "sess-1"),
        "{audit:?}"
    );
    assert!(audit.iter().any(|record| record["agent"] == "codex"));
}

#[test]
fn after_the_agent_applies_an_edit_its_file_is_checked_and_can_be_undone() {
    let ws = Workspace::new(
        "security:\n  hitl:\n    rules:\n      - {tools: [edit_file], require_approval: false}\n",
    );
    ws.write("a.txt", "one\n");
    let root = std::fs::canonicalize(ws.root()).unwrap();
    let root = root.to_string_lossy().into_owned();
    let run = |event: String| feed(ws.command(&["hook", "claude-code"]), event.as_bytes());
    let post = |id: &str| {
        json!({
            "session_id": "sess-1", "cwd": root, "hook_event_name": "PostToolUse",
            "tool_name": "Edit", "tool_input": {}, "tool_response": {"success": true},
            "tool_use_id": id,
        })
        .to_string()
    };

    // Allowed by the policy; the agent writes exactly what was shown.
    let (_, stdout, _) = run(edit_event(&root, "toolu_a", "one", "two"));
    assert!(stdout.contains("\"allow\""), "{stdout}");
    ws.write("a.txt", "two\n");
    let (code, stdout, _) = run(post("toolu_a"));
    assert_eq!((code, stdout.as_str()), (0, ""));
    assert!(
        ws.audit()
            .iter()
            .any(|record| record["event"] == "hook_after" && record["status"] == "verified")
    );
    // airlock undo reverts what the agent wrote.
    let id = ws
        .audit()
        .iter()
        .rev()
        .find(|record| record["event"] == "hook_after")
        .and_then(|record| record["hitl_id"].as_str().map(str::to_owned))
        .unwrap();
    let undo = ws.run(&["undo", &id]);
    assert_eq!(undo.code, 0, "{}{}", undo.stdout, undo.stderr);
    assert_eq!(ws.read("a.txt").as_deref(), Some("one\n"));

    // The agent writes something else than was approved: on record, and
    // the model is told.
    let (_, stdout, _) = run(edit_event(&root, "toolu_b", "one", "three"));
    assert!(stdout.contains("\"allow\""), "{stdout}");
    ws.write("a.txt", "three and more\n");
    let (code, stdout, _) = run(post("toolu_b"));
    assert_eq!(code, 0);
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(answer["decision"], "block", "{answer}");
    assert!(
        answer["reason"]
            .as_str()
            .unwrap()
            .starts_with("airlock: a.txt does not hold the content that was approved"),
        "{answer}"
    );
    let mismatch = ws
        .audit()
        .into_iter()
        .find(|record| record["event"] == "apply_mismatch")
        .unwrap();
    assert_eq!(mismatch["files"][0]["path"], "a.txt");
    assert_eq!(
        mismatch["files"][0]["found"],
        json!(airlock_testkit::sha("three and more\n"))
    );
    // Shown where approvals are: the history's status, the approval's
    // result, and an event on the feed (what `watch` and the web UI follow).
    let id = mismatch["hitl_id"].as_str().unwrap();
    let history = ws.run(&["history"]);
    let line = history
        .stdout
        .lines()
        .find(|line| line.starts_with(id))
        .unwrap_or_else(|| panic!("{}", history.stdout));
    assert!(line.contains("mismatch"), "{line}");
    let shown = ws.run(&["show", id, "--json"]);
    assert_eq!(
        shown.json["result"]["data"]["apply_mismatch"][0]["path"], "a.txt",
        "{}",
        shown.stdout
    );
}

/// Where each agent's project settings live.
fn settings_file(agent: &str) -> &'static str {
    match agent {
        "claude-code" => ".claude/settings.json",
        "codex" => ".codex/hooks.json",
        _ => ".gemini/settings.json",
    }
}

#[test]
fn install_merges_into_existing_settings_and_uninstall_takes_only_its_own_out() {
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/hook-install");
    for agent in ["claude-code", "codex", "gemini"] {
        let ws = Workspace::new("");
        let before = std::fs::read_to_string(golden.join(agent).join("before.json")).unwrap();
        ws.write(settings_file(agent), &before);

        // A dry run says what would change and writes nothing.
        let dry = ws.run(&[
            "hook",
            "install",
            agent,
            "--program",
            "airlock",
            "--dry-run",
        ]);
        assert_eq!(dry.code, 0, "{}", dry.stderr);
        assert!(
            dry.stdout.contains("added airlock's hook"),
            "{}",
            dry.stdout
        );
        assert_eq!(ws.read(settings_file(agent)).unwrap(), before);

        let run = ws.run(&["hook", "install", agent, "--program", "airlock"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let written = ws.read(settings_file(agent)).unwrap();
        expect_test::expect_file![golden.join(agent).join("installed.json")].assert_eq(&written);

        // Twice is once.
        let again = ws.run(&["hook", "install", agent, "--program", "airlock"]);
        assert!(
            again.stdout.contains("nothing to change"),
            "{}",
            again.stdout
        );
        assert_eq!(ws.read(settings_file(agent)).unwrap(), written);

        // Uninstalled: what was there before, key for key.
        let run = ws.run(&["hook", "uninstall", agent]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(
            run.stdout.contains("removed airlock's hook"),
            "{}",
            run.stdout
        );
        let after: Value = serde_json::from_str(&ws.read(settings_file(agent)).unwrap()).unwrap();
        let before_value: Value = serde_json::from_str(&before).unwrap();
        assert_eq!(after, before_value, "{agent}");
    }

    // Settings that are not JSON are refused and left alone.
    let ws = Workspace::new("");
    ws.write(".claude/settings.json", "{ not json");
    let run = ws.run(&["hook", "install", "claude-code"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("is not valid JSON"), "{}", run.stderr);
    assert_eq!(
        ws.read(".claude/settings.json").as_deref(),
        Some("{ not json")
    );

    // --user writes the home directory's settings, from nothing.
    let home = tempfile::tempdir().unwrap();
    let mut command = ws.command(&[
        "hook",
        "install",
        "gemini",
        "--user",
        "--program",
        "/opt/air lock/airlock",
    ]);
    command.env("HOME", home.path());
    let output = command.output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(home.path().join(".gemini/settings.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        written["hooks"]["BeforeTool"][0]["hooks"][0],
        json!({"type": "command", "command": "'/opt/air lock/airlock' hook gemini --timeout 600",
               "name": "airlock", "timeout": 600000})
    );
}

#[test]
fn doctor_says_what_is_wired_and_that_a_test_event_comes_back() {
    let ws = Workspace::new("");
    assert_eq!(
        ws.run(&["hook", "install", "codex", "--program", "airlock"])
            .code,
        0
    );
    let mut command = ws.command(&["hook", "doctor"]);
    command.env("PATH", "/nonexistent");
    let output = command.output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    let root = std::fs::canonicalize(ws.root()).unwrap();
    let text = text.replace(root.to_string_lossy().as_ref(), "$WS");
    assert_eq!(
        text,
        "claude-code: claude is not on PATH\n\
         claude-code: airlock's hook is not wired (airlock hook install claude-code)\n\
         claude-code: a test event came back answered\n\
         codex: codex is not on PATH\n\
         codex: hook wired in $WS/.codex/hooks.json\n\
         codex: a test event came back answered\n\
         gemini: gemini is not on PATH\n\
         gemini: airlock's hook is not wired (airlock hook install gemini)\n\
         gemini: a test event came back answered\n"
    );
}

#[test]
fn with_airlock_url_the_hook_asks_the_running_airlock_and_fails_closed_without_it() {
    const AGENT: &str = "agent-token-1";
    let config = format!(
        "{}    - {{name: claude, sha256: \"{}\", roles: [agent], user: u2}}\n",
        approver_config(),
        sha(AGENT)
    );
    let server = Server::start(&config);
    let root = std::fs::canonicalize(server.ws.root()).unwrap();
    let root = root.to_string_lossy().into_owned();
    // Run from a directory that is no workspace: the server decides.
    let elsewhere = tempfile::tempdir().unwrap();
    let hook = |url: &str, token: &str| {
        let mut command = Command::new(airlock_testkit::bin());
        command
            .args(["hook", "claude-code", "--timeout", "60"])
            .current_dir(elsewhere.path())
            .env("AIRLOCK_URL", url)
            .env("AIRLOCK_TOKEN", token)
            .env_remove("AIRLOCK_WORKSPACE");
        command
    };
    let url = format!("http://{}", server.addr);
    let read = json!({
        "session_id": "s", "cwd": root, "hook_event_name": "PreToolUse", "tool_name": "Read",
        "tool_input": {"file_path": format!("{root}/a.txt")}, "tool_use_id": "toolu_r",
    })
    .to_string();
    let (code, stdout, _) = feed(hook(&url, AGENT), read.as_bytes());
    assert_eq!(code, 0);
    assert!(
        stdout.contains("\"permissionDecision\":\"allow\""),
        "{stdout}"
    );

    // An edit waits on the server for a human.
    let event = edit_event(&root, "toolu_remote", "hello", "bye");
    let command = hook(&url, AGENT);
    let waiting = std::thread::spawn(move || feed(command, event.as_bytes()));
    let id = pending_id(&server);
    let (status, _) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "approve"}),
    );
    assert_eq!(status, 200);
    let (_, stdout, _) = waiting.join().unwrap();
    assert!(
        stdout.contains("\"permissionDecision\":\"allow\""),
        "{stdout}"
    );

    // A wrong token, or no airlock there: denied, never allowed.
    for (url, token, says) in [
        (url.as_str(), "wrong-token", "401"),
        ("http://127.0.0.1:9", AGENT, "cannot reach airlock"),
    ] {
        let (code, stdout, _) = feed(hook(url, token), read.as_bytes());
        assert_eq!(code, 0);
        let answer: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(
            answer["hookSpecificOutput"]["permissionDecision"], "deny",
            "{answer}"
        );
        let reason = answer["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap();
        assert!(reason.contains(says), "{reason}");
    }
}

#[test]
fn an_approvers_edited_version_goes_back_to_the_agent_as_its_tools_input() {
    let server = Server::start(&approver_config());
    let root = std::fs::canonicalize(server.ws.root()).unwrap();
    let root = root.to_string_lossy().into_owned();

    // Claude Code's Write: the edited content replaces the input's.
    let input = json!({"file_path": format!("{root}/notes.md"), "content": "draft\n"});
    let event = json!({
        "session_id": "s", "cwd": root, "hook_event_name": "PreToolUse", "tool_name": "Write",
        "tool_input": input, "tool_use_id": "toolu_w",
    })
    .to_string();
    let waiting = hook_waiting(&server, "claude-code", event);
    let id = pending_id(&server);
    let (status, decided) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "approve", "content": "final\n"}),
    );
    assert_eq!(status, 200, "{decided}");
    let (_, stdout, _) = waiting.join().unwrap();
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        answer["hookSpecificOutput"]["updatedInput"],
        json!({"file_path": format!("{root}/notes.md"), "content": "final\n"}),
        "{answer}"
    );
    // The agent writes it: the check after it is against the edited version.
    server.ws.write("notes.md", "final\n");
    let post = json!({
        "session_id": "s", "cwd": root, "hook_event_name": "PostToolUse", "tool_name": "Write",
        "tool_input": answer["hookSpecificOutput"]["updatedInput"], "tool_use_id": "toolu_w",
        "tool_response": {"success": true},
    })
    .to_string();
    let (code, stdout, _) = feed(server.ws.command(&["hook", "claude-code"]), post.as_bytes());
    assert_eq!((code, stdout.as_str()), (0, ""));

    // Gemini CLI's replace: one edit of the whole text.
    let event = json!({
        "session_id": "g", "cwd": root, "hook_event_name": "BeforeTool", "tool_name": "replace",
        "tool_input": {"file_path": "a.txt", "instruction": "x", "old_string": "hello", "new_string": "bye"},
    })
    .to_string();
    let waiting = hook_waiting(&server, "gemini", event);
    let id = pending_id(&server);
    let (status, _) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "approve", "content": "farewell\n"}),
    );
    assert_eq!(status, 200);
    let (_, stdout, _) = waiting.join().unwrap();
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        answer["hookSpecificOutput"]["tool_input"],
        json!({"file_path": "a.txt", "instruction": "x", "old_string": "hello\n",
               "new_string": "farewell\n", "allow_multiple": false}),
        "{answer}"
    );

    // Codex takes no edited version: refused, and the approval stays.
    let event = json!({
        "session_id": "c", "turn_id": "t", "cwd": root, "hook_event_name": "PreToolUse",
        "tool_name": "apply_patch", "tool_use_id": "call_p",
        "tool_input": {"command": "*** Begin Patch\n*** Update File: a.txt\n@@\n-hello\n+hi\n*** End Patch\n"},
    })
    .to_string();
    let waiting = hook_waiting(&server, "codex", event);
    let id = pending_id(&server);
    let (status, refused) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "approve", "content": "other\n"}),
    );
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("takes no edited version"),
        "{refused}"
    );
    let (status, _) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "approve"}),
    );
    assert_eq!(status, 200);
    let (_, stdout, _) = waiting.join().unwrap();
    assert_eq!(stdout, "", "codex's allow is no output");
}

#[test]
fn the_settings_install_writes_are_valid_for_each_agents_own_schema() {
    if !airlock_testkit::peers::require(
        "the_settings_install_writes_are_valid_for_each_agents_own_schema",
        &[airlock_testkit::peers::Peer::PythonMcp],
    ) {
        return;
    }
    // The agents' published schemas (tests/hook-install/schemas), checked
    // with the Python `jsonschema` the MCP test tools pin.
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/hook-install");
    let python = airlock_testkit::peers::tools_dir().join("venv/bin/python");
    let check = |schema: &str, file: &Path| {
        let output = Command::new(&python)
            .args([
                "-c",
                "import json, sys, jsonschema\n\
                 schema = json.load(open(sys.argv[1]))\n\
                 doc = json.load(open(sys.argv[2]))\n\
                 errors = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(doc))\n\
                 print('; '.join(f'{list(e.path)}: {e.message[:200]}' for e in errors))\n\
                 sys.exit(1 if errors else 0)",
            ])
            .arg(golden.join("schemas").join(schema))
            .arg(file)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{} against {schema}: {}{}",
            file.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    };
    for (agent, schema) in [
        ("claude-code", "claude-code-settings.json"),
        ("codex", "codex-hooks.json"),
        ("gemini", "gemini-settings.schema.json"),
    ] {
        // Into existing settings (the goldens), and from nothing.
        check(schema, &golden.join(agent).join("installed.json"));
        let ws = Workspace::new("");
        let run = ws.run(&["hook", "install", agent]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        check(schema, &ws.path(settings_file(agent)));
        // Uninstalled from nothing: the file it made is gone.
        let run = ws.run(&["hook", "uninstall", agent]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(
            run.stdout.contains("removed (nothing else was in it)"),
            "{}",
            run.stdout
        );
        assert!(!ws.path(settings_file(agent)).exists());
    }
}

#[test]
fn a_notebook_edit_the_agent_made_is_recorded_for_undo_and_unreadable_input_is_audited() {
    let ws = Workspace::new(
        "security:\n  hitl:\n    rules:\n      - {tools: [write_file], require_approval: false}\n",
    );
    ws.write("nb.ipynb", "{\"cells\": []}\n");
    let root = std::fs::canonicalize(ws.root()).unwrap();
    let root = root.to_string_lossy().into_owned();
    let event = |phase: &str| {
        json!({
            "session_id": "s", "cwd": root, "hook_event_name": phase, "tool_name": "NotebookEdit",
            "tool_input": {"notebook_path": format!("{root}/nb.ipynb"), "new_source": "print(1)",
                           "cell_type": "code", "edit_mode": "insert"},
            "tool_use_id": "toolu_nb",
        })
        .to_string()
    };
    let (_, stdout, _) = feed(
        ws.command(&["hook", "claude-code"]),
        event("PreToolUse").as_bytes(),
    );
    assert!(stdout.contains("\"allow\""), "{stdout}");
    // Claude Code writes the notebook as it lays it out.
    ws.write("nb.ipynb", "{\"cells\": [{\"source\": \"print(1)\"}]}\n");
    let (code, stdout, _) = feed(
        ws.command(&["hook", "claude-code"]),
        event("PostToolUse").as_bytes(),
    );
    assert_eq!((code, stdout.as_str()), (0, ""));
    let id = ws
        .audit()
        .iter()
        .rev()
        .find(|record| record["event"] == "hook_after")
        .and_then(|record| record["hitl_id"].as_str().map(str::to_owned))
        .unwrap();
    let undo = ws.run(&["undo", &id]);
    assert_eq!(undo.code, 0, "{}{}", undo.stdout, undo.stderr);
    assert_eq!(ws.read("nb.ipynb").as_deref(), Some("{\"cells\": []}\n"));

    // Input the hook cannot read is refused, and on record.
    let (code, _, stderr) = feed(ws.command(&["hook", "codex"]), b"{\"hook_event_name\": 7}");
    assert_eq!(code, 2);
    assert!(stderr.starts_with("airlock: "), "{stderr}");
    assert!(
        ws.audit().iter().any(|record| record["event"] == "hook"
            && record["agent"] == "codex"
            && record["status"] == "error"),
        "{:?}",
        ws.audit()
    );
}
