//! Code mode from the public surface: `airlock eval`, `codemode_eval` over
//! MCP stdio and `POST /v1/tools/call`.
//!
//! The escape and denial-of-service corpora are files under
//! `tests/codemode/{escape,dos}/`, one script each, with what must come of
//! it in its first lines:
//!
//! ```text
//! // expect-status: completed        (data.status)
//! // expect-code: script_timeout     (error.code)
//! // expect-result: [true, "x"]      (data.result, compared as JSON)
//! // expect-logs-truncated: true
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use airlock_testkit::Workspace;
use airlock_testkit::mcp::{Driver, RawStdio};
use serde_json::{Value, json};

/// The corpus workspace: tight limits, so that each breach comes fast, and
/// a profile that denies the destructive tools and `exec`.
const CORPUS_CONFIG: &str = "\
codemode:
  cpu: 1s
  wall: 10s
  memory_bytes: 16777216
  max_source_bytes: 4096
  max_console_bytes: 4096
  max_calls: 20
profiles:
  coder:
    denylist: [delete_file, move_file, exec]
default_profile: coder
";

fn corpus(dir: &str) -> Vec<PathBuf> {
    let dir = airlock_testkit::repo().join("tests/codemode").join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension()
                .is_some_and(|ext| ext == "js" || ext == "ts")
        })
        .collect();
    files.sort();
    files
}

/// What a corpus file says must come of it.
#[derive(Debug, Default)]
struct Expected {
    status: Option<String>,
    code: Option<String>,
    result: Option<Value>,
    logs_truncated: Option<bool>,
    line: Option<u64>,
    column: Option<u64>,
}

fn expected(path: &Path) -> Expected {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Expected::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("// expect-") else {
            break;
        };
        let (key, value) = rest.split_once(": ").expect("// expect-KEY: VALUE");
        match key {
            "status" => out.status = Some(value.to_owned()),
            "code" => out.code = Some(value.to_owned()),
            "result" => out.result = Some(serde_json::from_str(value).expect("a JSON result")),
            "logs-truncated" => out.logs_truncated = Some(value == "true"),
            "line" => out.line = Some(value.parse().expect("a line number")),
            "column" => out.column = Some(value.parse().expect("a column number")),
            other => panic!("{}: unknown expectation {other}", path.display()),
        }
    }
    assert!(
        out.status.is_some() || out.code.is_some(),
        "{}: says nothing of its outcome",
        path.display()
    );
    out
}

/// Where `envelope` differs from what `path` expects.
fn mismatch(path: &Path, envelope: &Value) -> Option<String> {
    let want = expected(path);
    let data = &envelope["data"];
    let mut wrong = Vec::new();
    if let Some(status) = &want.status
        && data["status"] != json!(status)
    {
        wrong.push(format!("status {} (want {status})", data["status"]));
    }
    if let Some(code) = &want.code
        && envelope["error"]["code"] != json!(code)
    {
        wrong.push(format!(
            "code {} (want {code}): {}",
            envelope["error"]["code"], envelope["error"]["message"]
        ));
    }
    if let Some(result) = &want.result
        && data["result"] != *result
    {
        wrong.push(format!("result {} (want {result})", data["result"]));
    }
    if let Some(truncated) = want.logs_truncated
        && data["logs_truncated"] != json!(truncated)
    {
        wrong.push(format!("logs_truncated {}", data["logs_truncated"]));
    }
    for (key, want) in [("line", want.line), ("column", want.column)] {
        if let Some(want) = want
            && data["error"][key] != json!(want)
        {
            wrong.push(format!("{key} {} (want {want})", data["error"][key]));
        }
    }
    (!wrong.is_empty()).then(|| format!("{}: {}\n  {envelope}", path.display(), wrong.join("; ")))
}

fn corpus_workspace() -> Workspace {
    let ws = Workspace::new(CORPUS_CONFIG);
    ws.write("hello.txt", "hello\nworld\n");
    ws
}

/// Runs every file of `dir` with `airlock eval`, two at a time.
fn run_corpus(dir: &str, at_least: usize) {
    let ws = corpus_workspace();
    let files = corpus(dir);
    assert!(files.len() >= at_least, "{dir}: {} scripts", files.len());
    let queue = Mutex::new(files.clone());
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                loop {
                    let Some(path) = queue.lock().unwrap().pop() else {
                        return;
                    };
                    let run = ws.run(&["eval", path.to_str().unwrap()]);
                    if run.json.is_null() {
                        failures.lock().unwrap().push(format!(
                            "{}: no envelope (exit {}): {}",
                            path.display(),
                            run.code,
                            run.stderr
                        ));
                    } else if let Some(wrong) = mismatch(&path, &run.json) {
                        failures.lock().unwrap().push(wrong);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every run is in the audit log, start and end, and the chain holds.
    let audit = ws.read(".airlock/audit.jsonl").unwrap();
    let count = |event: &str| {
        audit
            .lines()
            .filter(|line| line.contains(&format!("\"event\":\"{event}\"")))
            .count()
    };
    let refused_before_start = 1; // source_too_large never starts
    let expected_runs = files.len()
        - if dir == "dos" {
            refused_before_start
        } else {
            0
        };
    assert_eq!(count("code_run_start"), expected_runs);
    assert_eq!(count("code_run_end"), expected_runs);
    assert_eq!(ws.run(&["audit", "verify"]).code, 0);
}

/// At least 40 scripts that try to get out (code from strings, the
/// intrinsics and `codemode` polluted, arguments that change between
/// serialisation and use, host objects, modules, files and sockets, denied
/// tools through aliases and computed names): each refused or contained.
#[test]
fn the_escape_corpus_is_contained() {
    run_corpus("escape", 40);
}

/// Loops, regexes, recursion, memory, floods, unawaited and endless calls:
/// each run ends with its code within its limit.
#[test]
fn the_denial_of_service_corpus_ends_each_run_with_its_code() {
    run_corpus("dos", 15);
}

/// The policy decides every call a script makes, and the audit log records
/// each one with the run it came from.
#[test]
fn every_call_of_a_script_is_audited_with_its_run() {
    let ws = corpus_workspace();
    ws.write(
        "s.js",
        "const a = await codemode.read_file({ path: \"hello.txt\" });\n\
         let denied = null;\n\
         try { await codemode.read_file({ path: \".airlock/audit.jsonl\" }) } catch (e) { denied = e.code }\n\
         ({ lines: a.content.split(\"\\n\").length, denied })\n",
    );
    let run = ws.run(&["eval", "s.js", "--description", "count lines"]);
    assert_eq!(run.code, 0, "{}", run.stdout);
    let data = &run.json["data"];
    assert_eq!(
        data["result"],
        json!({"lines": 3, "denied": "path_forbidden"})
    );
    let run_id = data["run_id"].as_str().unwrap().to_owned();
    let calls: Vec<(u64, String, String)> = data["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| {
            (
                call["seq"].as_u64().unwrap(),
                call["tool"].as_str().unwrap().to_owned(),
                call["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            (1, "read_file".to_owned(), "allowed".to_owned()),
            (2, "read_file".to_owned(), "denied".to_owned())
        ]
    );
    let records: Vec<Value> = ws
        .read(".airlock/audit.jsonl")
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .filter(|record: &Value| {
            record["run_id"] == json!(run_id) || record["via"]["run_id"] == json!(run_id)
        })
        .collect();
    let events: Vec<(String, Value, Value)> = records
        .iter()
        .map(|record| {
            (
                record["event"].as_str().unwrap().to_owned(),
                record["via"]["seq"].clone(),
                record["status"].clone(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("code_run_start".to_owned(), Value::Null, Value::Null),
            ("read_file".to_owned(), json!(1), json!("allowed")),
            ("read_file".to_owned(), json!(2), json!("denied")),
            ("code_run_end".to_owned(), Value::Null, json!("completed")),
        ]
    );
    let start = &records[0];
    assert_eq!(start["description"], json!("count lines"));
    assert_eq!(
        start["script_sha256"],
        json!(airlock_testkit::sha(ws.read("s.js").unwrap()))
    );
}

/// A syntax error is `parse_error` with its line and column; a throw is
/// `script_error` with the line and column it came from.
/// TypeScript runs with its types blanked, so errors keep the author's
/// lines and columns; TypeScript that makes code is refused where it is.
#[test]
fn typescript_runs_with_its_types_blanked() {
    run_corpus("typescript", 7);
}

#[test]
fn errors_carry_their_position() {
    let ws = corpus_workspace();
    // Where QuickJS records a position: a property read on its object, a
    // name on the name; the column counts characters. (In a script with a
    // top-level `return`, which runs as a function body, QuickJS records
    // fewer: a call's, not a property read's.)
    let cases = [
        ("let b = ;\n", "parse_error", 1, 9),
        ("let a = 1;\nlet b = ;\n", "parse_error", 2, 9),
        ("null.y", "script_error", 1, 1),
        ("const x = 1;\n\n  null.y;\n", "script_error", 3, 3),
        ("\"é\"; null.y\n", "script_error", 1, 6),
        ("'😀'; null.y\n", "script_error", 1, 6),
        ("return missing(1)", "script_error", 1, 8),
        ("function f() { null.y }\nf()", "script_error", 1, 16),
    ];
    for (code, want, line, column) in cases {
        ws.write("e.js", code);
        let run = ws.run(&["eval", "e.js"]);
        let error = &run.json["data"]["error"];
        assert_eq!(
            (
                error["code"].clone(),
                error["line"].clone(),
                error["column"].clone()
            ),
            (json!(want), json!(line), json!(column)),
            "{code:?}: {}",
            run.stdout
        );
    }
}

/// `codemode_eval` over MCP: listed with its variants, run, and a runaway
/// script does not hold up the server: a call made after it is answered
/// first.
#[test]
fn mcp_lists_and_runs_scripts_and_keeps_serving_during_a_runaway_one() {
    let ws = Workspace::new(
        "codemode:\n  cpu: 2s\n  profile_tools: [reader]\nprofiles:\n  reader:\n    allowlist: [read_file, exists]\n",
    );
    ws.write("hello.txt", "hello\n");
    let mut raw = RawStdio::start(&ws, &[]);
    let listed = raw.request(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert!(
        names.ends_with(&["codemode_eval", "codemode_eval_reader"]),
        "{names:?}"
    );
    // The description declares the script's tools in TypeScript, and so
    // does the resource; inside, search_tools and get_tools.
    let tools = listed["result"]["tools"].as_array().unwrap();
    let base = tools
        .iter()
        .find(|tool| tool["name"] == "codemode_eval")
        .unwrap();
    let description = base["description"].as_str().unwrap();
    assert!(
        description.contains("```ts\ndeclare const codemode: {"),
        "{description}"
    );
    assert!(
        description.contains("  read_file(args: { path: string;"),
        "{description}"
    );
    let resources = raw.request(json!({"jsonrpc": "2.0", "id": 10, "method": "resources/list"}));
    assert_eq!(
        resources["result"]["resources"][0]["uri"],
        json!("airlock://codemode/types.d.ts"),
        "{resources}"
    );
    let read = raw.request(
        json!({"jsonrpc": "2.0", "id": 11, "method": "resources/read",
                                  "params": {"uri": "airlock://codemode/types.d.ts"}}),
    );
    let text = read["result"]["contents"][0]["text"].as_str().unwrap();
    assert!(description.contains(text), "{text}");
    let found = raw.request(json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call",
        "params": {"name": "codemode_eval", "arguments": {"code":
            "const hits = await codemode.search_tools({query: 'directory entries'});\n\
             const [read] = await codemode.get_tools({names: ['read_file']});\n\
             [hits.map((t) => t.name), read.declaration.startsWith('/**'), read.input_schema.required]"}}}));
    assert_eq!(
        found["result"]["structuredContent"]["data"]["result"],
        json!([["list_dir"], true, ["path"]]),
        "{found}"
    );
    // The variant narrows: write_file is not offered to its scripts.
    let call = |id: u64, tool: &str, code: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": tool, "arguments": {"code": code}}})
    };
    let answer = raw.request(call(
        2,
        "codemode_eval_reader",
        "[typeof codemode.write_file, (await codemode.read_file({path: 'hello.txt'})).content]",
    ));
    assert_eq!(
        answer["result"]["structuredContent"]["data"]["result"],
        json!(["undefined", "hello\n"]),
        "{answer}"
    );
    raw.send(&call(3, "codemode_eval", "for (;;) {}"));
    raw.send(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                     "params": {"name": "read_file", "arguments": {"path": "hello.txt"}}}));
    // The next answers, notifications skipped.
    let mut answer = || loop {
        let message = raw.receive();
        if message.get("id").is_some() && message.get("method").is_none() {
            return message;
        }
    };
    let first = answer();
    assert_eq!(first["id"], json!(4), "{first}");
    let second = answer();
    assert_eq!(second["id"], json!(3));
    assert_eq!(
        second["result"]["structuredContent"]["error"]["code"],
        json!("script_timeout"),
        "{second}"
    );
    // A profile offered as a variant by a reloaded configuration: the
    // client is told the tool list changed, and the new list has it.
    ws.write(
        "airlock.yaml",
        "codemode:\n  cpu: 2s\n  profile_tools: [reader, auditor]\nprofiles:\n  reader:\n    allowlist: [read_file, exists]\n  auditor:\n    allowlist: [grep]\n",
    );
    loop {
        let message = raw.receive();
        if message["method"] == json!("notifications/tools/list_changed") {
            break;
        }
    }
    let listed = raw.request(json!({"jsonrpc": "2.0", "id": 20, "method": "tools/list"}));
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert!(
        names.ends_with(&[
            "codemode_eval",
            "codemode_eval_reader",
            "codemode_eval_auditor"
        ]),
        "{names:?}"
    );
}

/// `POST /v1/tools/call` runs `codemode_eval` like any tool.
#[test]
fn the_http_api_runs_scripts() {
    let config = format!(
        "auth:\n  tokens:\n    - {{name: claude, sha256: \"{}\", roles: [agent], user: u1}}\n",
        airlock_testkit::token_sha256(AGENT)
    );
    let server = airlock_testkit::http::Server::start(&config);
    let (status, body) = server.post(
        "/v1/tools/call",
        Some(AGENT),
        &json!({"tool": "codemode_eval", "arguments": {"code": "(await codemode.stat({path: 'a.txt'})).size_bytes"}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], json!("allowed"), "{body}");
    assert_eq!(body["data"]["result"], json!(6), "{body}");
}

fn everything_server() -> String {
    let script = airlock_testkit::peers::tools_dir()
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(script.exists(), "{} is missing", script.display());
    script.display().to_string()
}

/// One script run through `tool` by an MCP client: `data.status`,
/// `data.result` and how many elicitations the client saw.
fn run_script(
    client: &mut airlock_testkit::mcp::Driver,
    tool: &str,
    code: &str,
) -> (Value, Value, usize) {
    let answer = client.call(tool, json!({"code": code}));
    let data = &answer["structuredContent"]["data"];
    (
        data["status"].clone(),
        data["result"].clone(),
        answer["elicitations"].as_array().map_or(0, Vec::len),
    )
}

/// Spec 004's precedence (denylist > asklist > allowlist miss > allow) and
/// `elicitationFallback`, through `codemode_eval_<profile>` of a spec 004
/// configuration loaded as written, with server-everything's tools and the
/// Python SDK as the client: an asked call is asked when the script reaches
/// it (approved: it runs; declined: the run ends `denied`), and a client
/// that cannot be asked gets the profile's fallback.
#[test]
fn spec_004_profiles_decide_each_call_of_a_script() {
    use airlock_testkit::peers::{Peer, require};
    if !require(
        "spec_004_profiles_decide_each_call_of_a_script",
        &[Peer::PythonMcp, Peer::NodeTools],
    ) {
        return;
    }
    let ws = Workspace::empty();
    let config = json!({
        "servers": {"every": {"type": "stdio", "command": "node", "args": [everything_server(), "stdio"]}},
        "evaluation": {"profiles": {
            "safe": {"allowlist": ["every__echo", "every__get-sum"]},
            "supervised": {"denylist": ["every__get-sum"], "asklist": ["every__*"]},
            "lenient": {"asklist": ["every__echo"], "elicitationFallback": "allow"}
        }}
    });
    ws.write(
        "bridge.json",
        serde_json::to_string_pretty(&config).unwrap(),
    );
    let echo = "try { (await codemode.every__echo({message: 'hi'})).content[0].text } catch (e) { [e.name, e.code] }";
    let sum = "try { (await codemode['every__get-sum']({a: 1, b: 2})).content[0].text } catch (e) { [e.name, e.code] }";
    let absent = "[typeof codemode.every__echo, typeof codemode['every__get-sum'], typeof codemode['every__get-env']]";

    let serve = ["--config", "bridge.json", "serve", "--stdio"];
    let mut form = Driver::stdio(&ws, &["--elicitation", "form"], &serve);
    let names = form.tool_names();
    for variant in [
        "codemode_eval",
        "codemode_eval_safe",
        "codemode_eval_supervised",
        "codemode_eval_lenient",
    ] {
        assert!(names.iter().any(|name| name == variant), "{names:?}");
    }
    // safe: an allowlist; what it names runs, the rest is not there.
    assert_eq!(
        run_script(&mut form, "codemode_eval_safe", absent),
        (
            json!("completed"),
            json!(["function", "function", "undefined"]),
            0
        )
    );
    assert_eq!(
        run_script(&mut form, "codemode_eval_safe", echo),
        (json!("completed"), json!("Echo: hi"), 0)
    );
    // supervised: denylist over asklist; the asked call is asked.
    assert_eq!(
        run_script(&mut form, "codemode_eval_supervised", absent),
        (
            json!("completed"),
            json!(["function", "undefined", "function"]),
            0
        )
    );
    form.answer_elicitations("accept", json!({"decision": "approve"}));
    assert_eq!(
        run_script(&mut form, "codemode_eval_supervised", echo),
        (json!("completed"), json!("Echo: hi"), 1)
    );
    // The human asked mid-run reads the call and the run around it.
    let answer = form.call("codemode_eval_supervised", json!({"code": echo}));
    let message = answer["elicitations"][0]["message"]
        .as_str()
        .unwrap_or_default();
    for part in [
        "This is call 1 of a code-mode script.",
        "It has made no other call so far.",
        "1:14  every__echo {\"message\":\"hi\"} · asks",
        "The script has staged no change so far.",
    ] {
        assert!(message.contains(part), "{part:?} in:\n{message}");
    }
    form.answer_elicitations("decline", json!(null));
    let (status, result, asked) = run_script(&mut form, "codemode_eval_supervised", echo);
    assert_eq!((status, result, asked), (json!("denied"), Value::Null, 1));
    // The base tool under no profile: spec 004's default allow.
    assert_eq!(
        run_script(&mut form, "codemode_eval", sum),
        (json!("completed"), json!("The sum of 1 and 2 is 3."), 0)
    );
    drop(form);

    // A client that cannot be asked: the profile's fallback.
    let mut none = Driver::stdio(&ws, &["--elicitation", "none"], &serve);
    let refused = "try { await codemode.every__echo({message: 'hi'}); 'ran' } catch (e) { [e.name, e.code, e.reason] }";
    assert_eq!(
        run_script(&mut none, "codemode_eval_supervised", refused),
        (
            json!("completed"),
            json!([
                "ToolCallDeniedError",
                "policy_denied",
                "elicitation_unsupported"
            ]),
            0
        )
    );
    let denied = "try { await codemode.read_file({path: '.airlock/audit.jsonl'}); 'ran' } catch (e) { [e.name, e.code, e.reason] }";
    assert_eq!(
        run_script(&mut none, "codemode_eval", denied),
        (
            json!("completed"),
            json!(["ToolCallDeniedError", "path_forbidden", "denied"]),
            0
        )
    );
    assert_eq!(
        run_script(&mut none, "codemode_eval_lenient", echo),
        (json!("completed"), json!("Echo: hi"), 0)
    );
    assert_eq!(
        run_script(&mut none, "codemode_eval_lenient", sum),
        (json!("completed"), json!("The sum of 1 and 2 is 3."), 0)
    );
}

/// Every file under `root` but airlock's own state and the scripts: path
/// and content.
fn tree(root: &Path) -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == ".airlock" || rel.ends_with(".js") || rel == "airlock.yaml" {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                out.push((rel, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

fn staging_workspace() -> Workspace {
    let ws = Workspace::new("");
    ws.write("a.txt", "one\ntwo\nthree\n");
    ws.write("b.txt", "keep\n");
    ws.write("c.txt", "bye\n");
    ws.write("notes.txt", "config\n");
    ws
}

/// The calls of the staging script, in order, as direct calls.
const STAGED_CALLS: [(&str, &str); 5] = [
    ("write_file", r#"{"path": "new.txt", "content": "fresh\n"}"#),
    (
        "edit_file",
        r#"{"path": "a.txt", "old_string": "two", "new_string": "TWO"}"#,
    ),
    (
        "apply_patch",
        r#"{"patch": "--- a/new.txt\n+++ b/new.txt\n@@ -1 +1,2 @@\n fresh\n+patched\n"}"#,
    ),
    ("delete_file", r#"{"path": "c.txt"}"#),
    (
        "move_file",
        r#"{"from": "b.txt", "to": "src/b.txt", "create_parents": true}"#,
    ),
];

const STAGING_SCRIPT: &str = r#"
const notes = (await codemode.read_file({path: "notes.txt"})).content;
await codemode.write_file({path: "new.txt", content: "fresh\n"});
await codemode.edit_file({path: "a.txt", old_string: "two", new_string: "TWO"});
const back = (await codemode.read_file({path: "a.txt"})).content;
await codemode.apply_patch({patch: "--- a/new.txt\n+++ b/new.txt\n@@ -1 +1,2 @@\n fresh\n+patched\n"});
await codemode.delete_file({path: "c.txt"});
await codemode.move_file({from: "b.txt", to: "src/b.txt", create_parents: true});
const seen = (await codemode.glob({pattern: "**/*.txt"})).paths.split("\n").sort();
const hits = (await codemode.grep({pattern: "TWO|patched", glob_filter: "*.txt"})).matches;
const gone = (await codemode.exists({path: "c.txt"})).exists;
({notes, back, seen, hits, gone})
"#;

/// A script that writes, edits, reads its own write back, patches, deletes
/// and moves: its reads see what it staged, nothing is written while it
/// runs, and it ends in one proposal with one diff over every file.
/// Approved, the workspace is what the same calls made directly make;
/// undone, it is what it was.
#[test]
fn a_script_s_writes_are_staged_into_one_proposal() {
    let ws = staging_workspace();
    let before = tree(ws.root());
    ws.write("s.js", STAGING_SCRIPT);
    let run = ws.run(&["eval", "s.js", "--defer", "--description", "tidy up"]);
    let data = &run.json["data"];
    assert_eq!(run.json["status"], json!("hitl_required"), "{}", run.stdout);
    assert_eq!(
        data["result"],
        json!({
            "notes": "config\n",
            "back": "one\nTWO\nthree\n",
            "seen": ["a.txt", "new.txt", "notes.txt", "src/b.txt"],
            "hits": "a.txt:2:TWO\nnew.txt:2:patched",
            "gone": false,
        })
    );
    let statuses: Vec<&str> = data["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| call["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [
            "allowed", "staged", "staged", "allowed", "staged", "staged", "staged", "allowed",
            "allowed", "allowed"
        ]
    );
    assert_eq!(
        data["staged"]["changed_paths"],
        json!(["a.txt", "b.txt", "c.txt", "new.txt", "src/b.txt"])
    );
    // Nothing written yet, and one approval for all of it.
    assert_eq!(tree(ws.root()), before);
    let pending = ws.run(&["pending", "--json"]).json;
    assert_eq!(pending.as_array().unwrap().len(), 1, "{pending}");
    let id = run.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let shown = ws.run(&["show", &id]).stdout;
    assert!(shown.contains("What it says it does: tidy up"), "{shown}");
    assert!(shown.contains("-two\n+TWO"), "{shown}");

    let approved = ws.run(&["approve", &id]);
    assert_eq!(
        approved.json["status"],
        json!("allowed"),
        "{}",
        approved.stdout
    );

    // The same calls made directly, one by one, in a twin workspace.
    let twin = staging_workspace();
    for (tool, args) in STAGED_CALLS {
        let direct = twin.run(&["call", tool, "--args", args, "--yes"]);
        assert_eq!(
            direct.json["status"],
            json!("allowed"),
            "{tool}: {}",
            direct.stdout
        );
    }
    assert_eq!(tree(ws.root()), tree(twin.root()));

    let undone = ws.run(&["undo", &id]);
    assert_eq!(undone.code, 0, "{}", undone.stdout);
    assert_eq!(tree(ws.root()), before);
    assert_eq!(ws.run(&["audit", "verify"]).code, 0);
}

/// A file the script only read changes before the approval: the run's
/// changes are stale and nothing is applied. A file it changed, the same.
#[test]
fn a_script_s_changes_are_stale_when_what_it_read_changed() {
    for touched in ["notes.txt", "a.txt"] {
        let ws = staging_workspace();
        ws.write("s.js", STAGING_SCRIPT);
        let run = ws.run(&["eval", "s.js", "--defer"]);
        let id = run.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
        ws.write(touched, "changed meanwhile\n");
        let before = tree(ws.root());
        let approved = ws.run(&["approve", &id]);
        assert_eq!(
            approved.json["error"]["code"],
            json!("stale"),
            "{touched}: {}",
            approved.stdout
        );
        assert_eq!(tree(ws.root()), before, "{touched}");
    }
}

/// The static preview goes with the run's one proposal, for whoever is
/// asked (every channel shows the approval's text): each call site of the
/// script with its literal arguments and what the policy says of them, a
/// call to a tool the profile denies and arguments its schema refuses
/// flagged, and why the list is incomplete. It is in the audit log's
/// `code_run_start` and in a dry run's answer.
#[test]
fn the_static_preview_goes_with_the_proposal() {
    let ws = Workspace::new("profiles:\n  coder:\n    denylist: [exec]\ndefault_profile: coder\n");
    ws.write("notes.txt", "config\n");
    ws.write(
        "p.ts",
        "const notes: string = (await codemode.read_file({path: \"notes.txt\"})).content;\n\
         await codemode.write_file({path: \"out.txt\", content: notes});\n\
         if (notes.length > 1000) await codemode.exec({command: \"rm -rf /\"});\n\
         await codemode.read_file({path: 42}).catch(() => null);\n\
         const tools = codemode;\n",
    );
    let run = ws.run(&["eval", "p.ts", "--defer"]);
    assert_eq!(run.json["status"], json!("hitl_required"), "{}", run.stdout);
    let id = run.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let shown = ws.run(&["show", &id]).stdout;
    for line in [
        "The script's text shows 4 codemode calls (a preview: each call is checked when it is made):",
        "  1:30  read_file {\"path\":\"notes.txt\"}\n",
        "  2:7  write_file {\"path\":\"out.txt\", …} · staged\n",
        "  3:32  exec {\"command\":\"rm -rf /\"} · if reached · denied: the profile does not offer this tool\n",
        "  4:7  read_file {\"path\":42} · invalid arguments: /path:",
        "The preview is incomplete, so the script may make calls not listed here:\n  5:15  codemode is aliased or passed on\n",
    ] {
        assert!(shown.contains(line), "{line:?} in:\n{shown}");
    }
    let audit = ws.read(".airlock/audit.jsonl").unwrap();
    let start: Value = audit
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|record| record["event"] == json!("code_run_start"))
        .unwrap();
    let preview = &start["preview"];
    assert_eq!(preview["language"], json!("typescript"), "{start}");
    assert_eq!(preview["complete"], json!(false));
    let sites: Vec<(Value, Value, Value)> = preview["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| {
            (
                call["tool"].clone(),
                call["policy"].clone(),
                call["reach"].clone(),
            )
        })
        .collect();
    assert_eq!(
        sites,
        [
            (json!("read_file"), json!("allow"), json!("once")),
            (json!("write_file"), Value::Null, json!("once")),
            (json!("exec"), json!("deny"), json!("maybe")),
            (json!("read_file"), Value::Null, json!("once")),
        ]
    );
    // A dry run answers with the preview, and proposes nothing.
    let dry = ws.run(&["eval", "p.ts", "--dry-run"]);
    assert_eq!(
        dry.json["data"]["preview"]["calls"]
            .as_array()
            .unwrap()
            .len(),
        4,
        "{}",
        dry.stdout
    );
}

/// The tokens of the deferred-ask workspace: two agents and an approver.
const AGENT: &str = "agent-token-1";
const OTHER: &str = "agent-token-2";
const APPROVER: &str = "approver-token-1";

/// The staging workspace served with server-everything as an upstream whose
/// `echo` the profile asks for, and asks deferred (a client that cannot be
/// asked mid-run).
fn deferred_echo_workspace() -> Workspace {
    let ws = staging_workspace();
    ws.write(
        "airlock.yaml",
        format!(
            "auth:\n  tokens:\n    - {{name: claude, sha256: \"{}\", roles: [agent], user: u1}}\n    \
             - {{name: codex, sha256: \"{}\", roles: [agent], user: u2}}\n    \
             - {{name: phone, sha256: \"{}\", roles: [approver], user: boss}}\n\
             security:\n  hitl:\n    approval_mode: defer\n\
             upstreams:\n  - name: every\n    command: node\n    args: [{:?}, stdio]\n\
             default_profile: dev\nprofiles:\n  dev:\n    asklist: [every__echo]\n",
            airlock_testkit::token_sha256(AGENT),
            airlock_testkit::token_sha256(OTHER),
            airlock_testkit::token_sha256(APPROVER),
            everything_server()
        ),
    );
    ws
}

/// A call inside a run that asks a human (an upstream tool the profile
/// asks for) shows, after its own text, the run: its description and
/// script, the static preview, the calls so far and the diff staged so far.
#[test]
fn a_call_asked_inside_a_run_shows_the_run_so_far() {
    use airlock_testkit::peers::{Peer, require};
    if !require(
        "a_call_asked_inside_a_run_shows_the_run_so_far",
        &[Peer::NodeTools],
    ) {
        return;
    }
    let ws = deferred_echo_workspace();
    let script = "const notes = (await codemode.read_file({path: \"notes.txt\"})).content;\n\
         await codemode.write_file({path: \"out.txt\", content: notes + \"more\\n\"});\n\
         await codemode.every__echo({message: \"done\"});\n";
    let server = airlock_testkit::http::Server::start_in(ws, &[]);
    let (status, body) = server.post(
        "/v1/tools/call",
        Some(AGENT),
        &json!({"tool": "codemode_eval", "arguments": {"code": script, "description": "note and tell"}}),
    );
    assert_eq!(status, 202, "{body}");
    let data = &body["envelope"]["data"];
    assert_eq!(data["status"], json!("hitl_required"), "{body}");
    let id = data["calls"][2]["hitl_id"].as_str().unwrap().to_owned();
    let ws = &server.ws;
    let shown = ws.run(&["show", &id]).stdout;
    for part in [
        "This is call 3 of a code-mode script.\n",
        "What it says it does: note and tell\n",
        "  3:7  every__echo {\"message\":\"done\"} · asks\n",
        "Its calls so far (2):\n  1. read_file (allowed)\n  2. write_file (staged)\n",
        "What the script has staged so far (out.txt; proposed as one change when it ends):\n",
        "+config\n+more\n",
    ] {
        assert!(shown.contains(part), "{part:?} in:\n{shown}");
    }
    // The call's own text comes first.
    assert!(
        shown.find("\"done\"").unwrap() < shown.find("This is call 3").unwrap(),
        "{shown}"
    );
    // The same text for an approver over HTTP (what the web UI and the
    // chat channels show).
    let (status, pending) = server.get(&format!("/hitl/pending/{id}"), Some(APPROVER));
    assert_eq!(status, 200, "{pending}");
    let text = pending.to_string();
    for part in [
        "This is call 3 of a code-mode script.",
        "3:7  every__echo",
        "+more",
    ] {
        assert!(text.contains(part), "{part:?} in {pending}");
    }
}

/// A client that cannot be asked mid-run (here: the HTTP API with
/// `approval_mode: defer`) gets `hitl_required` with the run's id and the
/// waiting call's approval. Resumed before the decision, it stops there
/// again; after the approval, the script runs again, its earlier calls
/// replayed, the approved call carried out once, and it goes on to its end.
/// A run resumed once is gone; another caller cannot resume it; a denied
/// call ends the resumed run `denied`; a script that takes another path on
/// replay ends `replay_divergence`, and nothing after it is done.
#[test]
fn a_deferred_run_resumes_after_the_decision() {
    use airlock_testkit::peers::{Peer, require};
    if !require(
        "a_deferred_run_resumes_after_the_decision",
        &[Peer::NodeTools],
    ) {
        return;
    }
    let ws = deferred_echo_workspace();
    ws.write("mode.txt", "a\n");
    let script = "const mode = (await codemode.read_file({path: \"mode.txt\"})).content.trim();\n\
         await codemode.write_file({path: \"out.txt\", content: mode + \"\\n\"});\n\
         const said = await codemode.every__echo({message: \"mode \" + mode});\n\
         return [said.content[0].text, Math.random() < 2];\n";
    let server = airlock_testkit::http::Server::start_in(ws, &[]);
    let eval = |token: &str, arguments: Value| {
        server.post(
            "/v1/tools/call",
            Some(token),
            &json!({"tool": "codemode_eval", "arguments": arguments}),
        )
    };
    let echoes = |server: &airlock_testkit::http::Server| {
        std::fs::read_to_string(server.path(".airlock/audit.jsonl"))
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .filter(|record| {
                // Made: approved and forwarded, or allowed at once.
                record["tool"] == json!("every__echo")
                    && (record["event"] == json!("tool_call_apply")
                        || (record["event"] == json!("tool_call")
                            && record["status"] == json!("allowed")))
            })
            .count()
    };

    // Stopped at the asked call.
    let (status, body) = eval(AGENT, json!({"code": script}));
    assert_eq!(status, 202, "{body}");
    let data = &body["envelope"]["data"];
    assert_eq!(data["status"], json!("hitl_required"), "{body}");
    let run_id = data["run_id"].as_str().unwrap().to_owned();
    let hitl = body["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(data["calls"][2]["hitl_id"], json!(hitl));
    assert_eq!(data["resumable"], json!(true));

    // Not yet decided: it stops there again. Another caller cannot resume it.
    let (status, body) = eval(AGENT, json!({"resume": run_id}));
    assert_eq!(
        (status, body["approval_id"].clone()),
        (202, json!(hitl)),
        "{body}"
    );
    let (_, body) = eval(OTHER, json!({"resume": run_id}));
    assert_eq!(body["error"]["code"], json!("not_found"), "{body}");
    // Resuming with other code is refused, and the run still waits.
    let (_, body) = eval(AGENT, json!({"resume": run_id, "code": "1"}));
    assert_eq!(body["error"]["code"], json!("invalid_input"), "{body}");
    let (_, body) = eval(
        AGENT,
        json!({"resume": run_id, "description": "something else"}),
    );
    assert_eq!(body["error"]["code"], json!("invalid_input"), "{body}");
    assert_eq!(echoes(&server), 0);

    // Approved: resumed, the echo is made once and the run ends in its
    // proposal (the staged write), with the result computed from it.
    let (status, body) = server.post(
        &format!("/hitl/decide/{hitl}"),
        Some(APPROVER),
        &json!({"decision": "approve"}),
    );
    assert_eq!(status, 200, "{body}");
    let (_, body) = eval(AGENT, json!({"resume": run_id}));
    let envelope = if body["envelope"].is_object() {
        &body["envelope"]
    } else {
        &body
    };
    let data = &envelope["data"];
    assert_eq!(data["result"], json!(["Echo: mode a", true]), "{body}");
    let statuses: Vec<&str> = data["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| call["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["allowed", "staged", "allowed"], "{body}");
    assert_eq!(
        data["staged"]["changed_paths"],
        json!(["out.txt"]),
        "{body}"
    );
    assert_eq!(echoes(&server), 1);
    // It is over: nothing left to resume.
    let (_, body) = eval(AGENT, json!({"resume": run_id}));
    assert_eq!(body["error"]["code"], json!("not_found"), "{body}");

    // Denied: the resumed run ends denied.
    let (_, body) = eval(AGENT, json!({"code": script}));
    let run_id = body["envelope"]["data"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let hitl = body["approval_id"].as_str().unwrap().to_owned();
    server.post(
        &format!("/hitl/decide/{hitl}"),
        Some(APPROVER),
        &json!({"decision": "deny"}),
    );
    let (_, body) = eval(AGENT, json!({"resume": run_id}));
    assert_eq!(body["data"]["status"], json!("denied"), "{body}");
    assert_eq!(echoes(&server), 1);

    // Another path on replay: the file it read says otherwise now.
    let (_, body) = eval(AGENT, json!({"code": script}));
    let run_id = body["envelope"]["data"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let hitl = body["approval_id"].as_str().unwrap().to_owned();
    server.post(
        &format!("/hitl/decide/{hitl}"),
        Some(APPROVER),
        &json!({"decision": "approve"}),
    );
    std::fs::write(server.path("mode.txt"), "b\n").unwrap();
    let (_, body) = eval(AGENT, json!({"resume": run_id}));
    assert_eq!(body["error"]["code"], json!("replay_divergence"), "{body}");
    assert_eq!(body["data"]["status"], json!("error"), "{body}");
    // The approval carried out its call (the process that holds the
    // upstream does so when it is decided); the script's other path made
    // no call.
    assert_eq!(echoes(&server), 2);
}

/// A result beyond `max_inline_bytes` comes back as a blob (the same text,
/// stored by its hash); one within it, inline.
#[test]
fn a_large_result_is_a_blob() {
    let ws = Workspace::new("file_broker:\n  max_inline_bytes: 1000\n");
    ws.write("big.js", "'x'.repeat(5000)");
    let run = ws.run(&["eval", "big.js"]);
    let data = &run.json["data"];
    assert_eq!(data["result"], Value::Null, "{}", run.stdout);
    let blob = &data["result_blob"];
    assert_eq!(blob["size_bytes"], json!(5002), "{blob}");
    let hex = blob["blob_ref"]
        .as_str()
        .unwrap()
        .strip_prefix("sha256:")
        .unwrap();
    let stored = std::fs::read_dir(ws.path(".airlock"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .flat_map(|dir| walkdir(&dir))
        .find(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().contains(hex))
        })
        .expect("the blob is stored");
    assert_eq!(
        std::fs::read_to_string(stored).unwrap(),
        format!("\"{}\"", "x".repeat(5000))
    );
    ws.write("small.js", "'x'.repeat(10)");
    let run = ws.run(&["eval", "small.js"]);
    assert_eq!(run.json["data"]["result"], json!("x".repeat(10)));
    assert!(run.json["data"].get("result_blob").is_none());
}

fn walkdir(path: &Path) -> Vec<PathBuf> {
    if path.is_dir() {
        std::fs::read_dir(path)
            .unwrap()
            .flat_map(|entry| walkdir(&entry.unwrap().path()))
            .collect()
    } else {
        vec![path.to_path_buf()]
    }
}

/// `dry_run`: the diff and the calls, and nothing proposed.
#[test]
fn a_dry_run_shows_the_diff_and_proposes_nothing() {
    let ws = staging_workspace();
    ws.write("s.js", STAGING_SCRIPT);
    let before = tree(ws.root());
    let run = ws.run(&["eval", "s.js", "--dry-run"]);
    assert_eq!(run.json["status"], json!("allowed"), "{}", run.stdout);
    let staged = &run.json["data"]["staged"];
    assert_eq!(staged["dry_run"], json!(true));
    assert!(
        staged["diff"].as_str().unwrap().contains("+++ b/src/b.txt"),
        "{staged}"
    );
    assert_eq!(tree(ws.root()), before);
    assert_eq!(ws.run(&["pending", "--json"]).json, json!([]));
}

/// A script's console lines and each of its calls reach an MCP client that
/// asked for progress, in order, before the answer.
#[test]
fn a_script_s_console_and_calls_arrive_as_progress_notifications() {
    use airlock_testkit::peers::{Peer, require};
    if !require(
        "a_script_s_console_and_calls_arrive_as_progress_notifications",
        &[Peer::PythonMcp],
    ) {
        return;
    }
    let ws = Workspace::new("");
    ws.write("hello.txt", "hello\n");
    let mut client = Driver::stdio(&ws, &["--elicitation", "none"], &["serve", "--stdio"]);
    let answer = client.send(json!({"op": "call", "tool": "codemode_eval", "progress": true, "args": {
        "code": "console.log('starting');\nconst r = await codemode.read_file({path: 'hello.txt'});\nconsole.warn('read', r.content.length);\ntry { await codemode.read_file({path: 'nope.txt'}) } catch (e) {}\n'done'"
    }}));
    assert_eq!(
        answer["structuredContent"]["data"]["result"],
        json!("done"),
        "{answer}"
    );
    let messages: Vec<&str> = answer["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        messages,
        [
            "console.log: starting",
            "call 1: codemode.read_file …",
            "call 1: codemode.read_file done",
            "console.warn: read 6",
            "call 2: codemode.read_file …",
            "call 2: codemode.read_file failed",
        ]
    );
    let values: Vec<f64> = answer["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["progress"].as_f64().unwrap())
        .collect();
    assert!(
        values.windows(2).all(|pair| pair[0] < pair[1]),
        "{values:?}"
    );
}
