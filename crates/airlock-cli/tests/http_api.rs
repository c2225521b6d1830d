//! The HTTP approval API (DESIGN §10) over a real socket against `airlock
//! serve --http`: submitting calls, listing and deciding approvals, results,
//! the audit, and every status code with its reason.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::Duration;

use airlock_store::EventKind;
use airlock_testkit::Workspace;
use airlock_testkit::http::{
    Server, exchange, held_hook_receiver, hook_receiver, next_event, refusing_hook, request,
};
use airlock_testkit::token_sha256 as sha;
use serde_json::{Value, json};

const AGENT: &str = "agent-token-1";
const OTHER_AGENT: &str = "agent-token-2";
const APPROVER: &str = "approver-token-1";
const ADMIN: &str = "admin-token-1";

/// `auth.tokens` for the four tokens above, then `extra`.
fn config(extra: &str) -> String {
    format!(
        "auth:\n  tokens:\n    \
         - {{name: claude, sha256: \"{}\", roles: [agent], user: u1}}\n    \
         - {{name: bot, sha256: \"{}\", roles: [agent], user: u2}}\n    \
         - {{name: phone, sha256: \"{}\", roles: [approver], user: u1}}\n    \
         - {{name: root, sha256: \"{}\", roles: [admin], user: boss}}\n{extra}",
        sha(AGENT),
        sha(OTHER_AGENT),
        sha(APPROVER),
        sha(ADMIN)
    )
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("?")
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn write_call(path: &str) -> Value {
    json!({"tool": "write_file", "arguments": {"path": path, "content": "new\n"}})
}

const DEFER: &str = "security:\n  hitl:\n    approval_mode: defer\n";

#[test]
fn agents_submit_approvers_decide_and_agents_read_their_results() {
    let server = Server::start(&config(DEFER));

    // Who may do what.
    assert_eq!(server.get("/hitl/pending", None).0, 401);
    let (status, body) = server.get("/hitl/pending", Some("not-a-token"));
    assert_eq!((status, error_code(&body)), (401, "unauthorized"), "{body}");
    let (status, body) = server.get("/hitl/pending", Some(AGENT));
    assert_eq!((status, error_code(&body)), (403, "forbidden"), "{body}");
    assert_eq!(server.get("/audit", Some(APPROVER)).0, 403);
    let (status, _) = server.post(
        "/v1/tools/call",
        Some(APPROVER),
        &json!({"tool": "read_file", "arguments": {"path": "a.txt"}}),
    );
    assert_eq!(status, 403);

    // A read is answered at once.
    let (status, read_answer) = server.post(
        "/v1/tools/call",
        Some(AGENT),
        &json!({"tool": "read_file", "arguments": {"path": "a.txt"}}),
    );
    assert_eq!(status, 200, "{read_answer}");
    assert_eq!(read_answer["status"], "allowed");
    assert_eq!(read_answer["data"]["content"], "hello\n");

    // A write is pending: 202 with its id.
    let (status, pending) = server.post("/v1/tools/call", Some(AGENT), &write_call("b.txt"));
    assert_eq!(status, 202, "{pending}");
    assert_eq!(pending["status"], "pending");
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(read(&server.path("b.txt")), None);

    // The agent cannot decide it, nor list approvals.
    let (status, body) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(AGENT),
        &json!({"decision": "approve"}),
    );
    assert_eq!((status, error_code(&body)), (403, "forbidden"), "{body}");
    assert_eq!(read(&server.path("b.txt")), None);

    // The approver sees it, with the diff.
    let (status, list) = server.get("/hitl/pending", Some(APPROVER));
    assert_eq!(status, 200);
    let ids: Vec<&str> = list["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|approval| approval["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str()]);
    let (status, one) = server.get(&format!("/hitl/pending/{id}"), Some(APPROVER));
    assert_eq!(status, 200);
    assert_eq!(one["tool"], "write_file");
    assert_eq!(one["user"], "u1");
    assert_eq!(one["agent"], "claude");
    assert!(one["diff"].as_str().unwrap().contains("+new"), "{one}");

    // Its result: 202 while pending, and only to the agent that asked.
    let result_path = format!("/hitl/result/{id}");
    assert_eq!(server.get(&result_path, Some(AGENT)).0, 202);
    assert_eq!(server.get(&result_path, Some(OTHER_AGENT)).0, 404);

    // Approved once; a second decision is a conflict.
    let (status, decided) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "approve", "reason": "looks right"}),
    );
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["status"], "allowed");
    assert_eq!(read(&server.path("b.txt")).as_deref(), Some("new\n"));
    let (status, body) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "deny"}),
    );
    assert_eq!(
        (status, error_code(&body)),
        (409, "already_decided"),
        "{body}"
    );
    let (status, result) = server.get(&result_path, Some(AGENT));
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["status"], "allowed");
    assert_eq!(result["op"]["method"], "fs.apply_patch");

    // A denial.
    let (_, pending) = server.post("/v1/tools/call", Some(AGENT), &write_call("c.txt"));
    let denied_id = pending["approval_id"].as_str().unwrap().to_owned();
    let (status, denied) = server.post(
        &format!("/hitl/decide/{denied_id}"),
        Some(APPROVER),
        &json!({"decision": "deny", "reason": "not now"}),
    );
    assert_eq!(status, 200, "{denied}");
    assert_eq!(denied["status"], "denied");
    assert_eq!(read(&server.path("c.txt")), None);

    // Bad input: 400 with the error shape, unknown ids 404, big bodies 413.
    for body in [
        &b"{not json"[..],
        b"{\"decision\": \"maybe\"}",
        b"{\"decision\": \"approve\", \"extra\": 1}",
    ] {
        let (status, answer) = server.request(
            "POST",
            &format!("/hitl/decide/{denied_id}"),
            Some(APPROVER),
            body,
        );
        assert_eq!(
            (status, error_code(&answer)),
            (400, "invalid_input"),
            "{answer}"
        );
    }
    let (status, answer) = server.request("POST", "/v1/tools/call", Some(AGENT), b"[1, 2]");
    assert_eq!(
        (status, error_code(&answer)),
        (400, "invalid_input"),
        "{answer}"
    );
    let (status, answer) = server.post(
        "/v1/tools/call",
        Some(AGENT),
        &json!({"tool": "read_file", "arguments": {"path": 7}}),
    );
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = server.get("/hitl/pending/hitl-nope", Some(APPROVER));
    assert_eq!(
        (status, error_code(&answer)),
        (404, "not_found"),
        "{answer}"
    );
    let (status, answer) = server.post(
        "/hitl/decide/hitl-nope",
        Some(APPROVER),
        &json!({"decision": "deny"}),
    );
    assert_eq!(
        (status, error_code(&answer)),
        (404, "not_found"),
        "{answer}"
    );
    let big = vec![b'a'; 2 * 1024 * 1024];
    let (status, answer) = server.request("POST", "/v1/tools/call", Some(AGENT), &big);
    assert_eq!(
        (status, error_code(&answer)),
        (413, "too_large"),
        "{answer}"
    );

    // The audit, for admins: the decisions with their channel, and the chain.
    let (status, audit) = server.get("/audit?event_type=hitl_decision", Some(ADMIN));
    assert_eq!(status, 200, "{audit}");
    let decisions: Vec<Value> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| {
            json!([
                record["decision"],
                record["channel"],
                record["user"],
                record["reason"]
            ])
        })
        .collect();
    assert_eq!(
        decisions,
        [
            json!(["approve", "http", "u1", "looks right"]),
            json!(["deny", "http", "u1", "not now"])
        ]
    );
    let (status, filtered) = server.get(
        "/audit?event_type=hitl_decision&filter=decision=deny",
        Some(ADMIN),
    );
    assert_eq!(status, 200);
    assert_eq!(filtered["records"].as_array().unwrap().len(), 1);
    assert_eq!(server.get("/audit?filter=nokeyvalue", Some(ADMIN)).0, 400);
    let (status, verify) = server.get("/audit/verify", Some(ADMIN));
    assert_eq!(status, 200);
    assert_eq!(verify["ok"], true, "{verify}");
}

#[test]
fn two_approvers_deciding_at_once_make_one_decision() {
    let server = Server::start(&config(DEFER));
    for round in 0..5 {
        let (_, pending) = server.post(
            "/v1/tools/call",
            Some(AGENT),
            &write_call(&format!("r{round}.txt")),
        );
        let id = pending["approval_id"].as_str().unwrap().to_owned();
        let threads: Vec<_> = [(APPROVER, "approve"), (ADMIN, "deny")]
            .into_iter()
            .map(|(token, decision)| {
                let addr = server.addr.clone();
                let path = format!("/hitl/decide/{id}");
                std::thread::spawn(move || {
                    let body = json!({"decision": decision}).to_string();
                    let (status, answer) =
                        request(&addr, "POST", &path, Some(token), body.as_bytes());
                    (status, decision, answer)
                })
            })
            .collect();
        let mut outcomes: Vec<(u16, &str, Value)> = threads
            .into_iter()
            .map(|thread| thread.join().unwrap())
            .collect();
        outcomes.sort_by_key(|(status, _, _)| *status);
        assert_eq!(
            outcomes
                .iter()
                .map(|(status, _, _)| *status)
                .collect::<Vec<_>>(),
            [200, 409],
            "{outcomes:?}"
        );
        let winner = outcomes[0].1;
        let written = read(&server.path(&format!("r{round}.txt")));
        assert_eq!(written.is_some(), winner == "approve", "{outcomes:?}");
    }
}

#[test]
fn an_approver_may_approve_an_edited_version_which_is_applied_and_audited_as_edited() {
    let server = Server::start(&config(DEFER));
    let submit = |call: Value| {
        let (status, pending) = server.post("/v1/tools/call", Some(AGENT), &call);
        assert_eq!(status, 202, "{pending}");
        pending["approval_id"].as_str().unwrap().to_owned()
    };
    let decide =
        |id: &str, body: Value| server.post(&format!("/hitl/decide/{id}"), Some(APPROVER), &body);

    // An edit of a proposed edit to a.txt: the edited content is what lands.
    let id = submit(json!({"tool": "edit_file", "arguments":
        {"path": "a.txt", "old_string": "hello", "new_string": "hello world"}}));
    // Before deciding: the diff an edited version would apply, exactly as
    // approving it would compute it; nothing is decided or written.
    let preview = |id: &str, token: &str, body: Value| {
        server.post(&format!("/hitl/preview/{id}"), Some(token), &body)
    };
    let (status, shown) = preview(&id, APPROVER, json!({"content": "hello, edited\n"}));
    assert_eq!(status, 200, "{shown}");
    let diff = shown["diff"].as_str().unwrap();
    assert!(
        diff.contains("\n+hello, edited\n") && diff.contains("--- a/a.txt\n+++ b/a.txt\n"),
        "{diff}"
    );
    assert_eq!(
        server.get(&format!("/hitl/pending/{id}"), Some(APPROVER)).1["status"],
        "pending"
    );
    assert_eq!(read(&server.path("a.txt")).as_deref(), Some("hello\n"));
    // Only approvers may ask; an unknown id is 404; a bad body 400.
    assert_eq!(preview(&id, AGENT, json!({"content": "x"})).0, 403);
    assert_eq!(
        preview("hitl-nope", APPROVER, json!({"content": "x"})).0,
        404
    );
    assert_eq!(preview(&id, APPROVER, json!({"contents": "x"})).0, 400);
    // Content goes only with an approval, never with always-allow.
    let (status, body) = decide(&id, json!({"decision": "deny", "content": "x\n"}));
    assert_eq!(
        (status, error_code(&body)),
        (400, "invalid_input"),
        "{body}"
    );
    let (status, body) = decide(
        &id,
        json!({"decision": "approve", "always": true, "content": "x\n"}),
    );
    assert_eq!(
        (status, error_code(&body)),
        (400, "invalid_input"),
        "{body}"
    );
    assert_eq!(
        server.get(&format!("/hitl/pending/{id}"), Some(APPROVER)).1["status"],
        "pending"
    );
    let (status, applied) = decide(
        &id,
        json!({"decision": "approve", "content": "hello, edited\n"}),
    );
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["status"], "allowed");
    assert_eq!(applied["data"]["edited"], true, "{applied}");
    // Once decided there is nothing to preview.
    let (status, late) = preview(&id, APPROVER, json!({"content": "y\n"}));
    assert_eq!(
        (status, error_code(&late)),
        (409, "already_decided"),
        "{late}"
    );
    assert_eq!(
        read(&server.path("a.txt")).as_deref(),
        Some("hello, edited\n")
    );
    // The agent is told, and the stored approval shows the diff that was applied.
    let (status, result) = server.get(&format!("/hitl/result/{id}"), Some(AGENT));
    assert_eq!(
        (status, &result["data"]["edited"]),
        (200, &json!(true)),
        "{result}"
    );
    let (_, shown) = server.get(&format!("/hitl/pending/{id}"), Some(APPROVER));
    assert!(
        shown["diff"].as_str().unwrap().contains("+hello, edited"),
        "{shown}"
    );
    // Audited as edited: the decision and the apply say so.
    let (_, audit) = server.get(&format!("/audit?filter=hitl_id={id}"), Some(ADMIN));
    let events: Vec<(&str, &Value)> = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| (record["event"].as_str().unwrap(), &record["edited"]))
        .collect();
    assert_eq!(
        events,
        [
            ("write_file_propose", &Value::Null),
            ("hitl_decision", &json!(true)),
            ("write_file_apply", &json!(true)),
        ]
    );

    // A file changed underneath the proposal: 409 stale, nothing written.
    let id = submit(write_call("c.txt"));
    std::fs::write(server.path("c.txt"), "someone else\n").unwrap();
    let (status, body) = decide(&id, json!({"decision": "approve", "content": "mine\n"}));
    assert_eq!((status, error_code(&body)), (409, "stale"), "{body}");
    assert_eq!(
        read(&server.path("c.txt")).as_deref(),
        Some("someone else\n")
    );

    // Only a write of one file can be edited: not a removal, not a move.
    let id = submit(json!({"tool": "delete_file", "arguments": {"path": "a.txt"}}));
    let (status, body) = decide(&id, json!({"decision": "approve", "content": "x"}));
    assert_eq!(
        (status, error_code(&body)),
        (400, "invalid_input"),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("removal"),
        "{body}"
    );
    assert!(server.path("a.txt").exists());
}

#[test]
fn critical_risk_is_decided_by_its_approvers_and_with_a_reason() {
    let rules = "security:\n  hitl:\n    approval_mode: defer\n    rules:\n      - tools: [write_file]\n        conditions: [{param: path, glob: \"docs/**\"}]\n        risk: critical\n";
    let server = Server::start(&config(rules));
    std::fs::create_dir(server.path("docs")).unwrap();
    let (status, pending) = server.post("/v1/tools/call", Some(AGENT), &write_call("docs/x.md"));
    assert_eq!(status, 202, "{pending}");
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    let decide = format!("/hitl/decide/{id}");
    // The template's critical policy: approvers [admin], a reason required.
    let (status, body) = server.post(
        &decide,
        Some(APPROVER),
        &json!({"decision": "approve", "reason": "ok"}),
    );
    assert_eq!((status, error_code(&body)), (403, "forbidden"), "{body}");
    // Nor may that approver see what an edit of it would do.
    let (status, body) = server.post(
        &format!("/hitl/preview/{id}"),
        Some(APPROVER),
        &json!({"content": ""}),
    );
    assert_eq!((status, error_code(&body)), (403, "forbidden"), "{body}");
    let (status, body) = server.post(&decide, Some(ADMIN), &json!({"decision": "approve"}));
    assert_eq!(
        (status, error_code(&body)),
        (400, "invalid_input"),
        "{body}"
    );
    assert_eq!(read(&server.path("docs/x.md")), None);
    let (status, body) = server.post(
        &decide,
        Some(ADMIN),
        &json!({"decision": "approve", "reason": "release"}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(read(&server.path("docs/x.md")).as_deref(), Some("new\n"));
}

/// Spec 000's context_id in the HTTP body: kept with the approval and in the
/// audit log; a bad one is a 400 that records nothing.
#[test]
fn a_context_id_in_the_body_is_recorded() {
    let server = Server::start(&config(DEFER));
    let mut call = write_call("ctx.txt");
    call["context_id"] = json!("run-7");
    let (status, pending) = server.post("/v1/tools/call", Some(AGENT), &call);
    assert_eq!(status, 202, "{pending}");
    let id = pending["approval_id"].as_str().unwrap();
    let (_, approval) = server.get(&format!("/hitl/pending/{id}"), Some(APPROVER));
    assert_eq!(approval["context_id"], "run-7", "{approval}");
    let (_, records) = server.get("/audit?filter=context_id=run-7", Some(ADMIN));
    let events: Vec<&str> = records["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| record["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["write_file_propose"], "{records}");
    call["context_id"] = json!("bad\u{7}");
    let (status, body) = server.post("/v1/tools/call", Some(AGENT), &call);
    assert_eq!(
        (status, error_code(&body)),
        (400, "invalid_input"),
        "{body}"
    );
    call["context_id"] = json!(7);
    let (status, _) = server.post("/v1/tools/call", Some(AGENT), &call);
    assert_eq!(status, 400);
}

/// Grants over HTTP: approvers and admins list and revoke them, agents may
/// not; a revocation is audited with the token's user.
#[test]
fn approvers_list_and_revoke_grants() {
    let server = Server::start(&config(DEFER));
    let (status, pending) = server.post("/v1/tools/call", Some(AGENT), &write_call("g.txt"));
    assert_eq!(status, 202, "{pending}");
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    let (status, body) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "approve", "always": {"scope": "persistent"}}),
    );
    assert_eq!(status, 200, "{body}");
    for token in [None, Some(AGENT)] {
        let (status, body) = server.get("/hitl/grants", token);
        assert!(matches!(status, 401 | 403), "{token:?}: {status} {body}");
        let (status, _) = server.request("DELETE", "/hitl/grants/grant-", token, b"");
        assert!(matches!(status, 401 | 403), "{token:?}: {status}");
    }
    let (status, listed) = server.get("/hitl/grants", Some(APPROVER));
    assert_eq!(status, 200, "{listed}");
    let grants = listed["grants"].as_array().unwrap();
    assert_eq!(grants.len(), 1, "{listed}");
    let grant = &grants[0];
    assert_eq!(grant["tool"], "write_file");
    assert_eq!(grant["path_glob"], "g.txt");
    // The default grant_ttl: 8 hours from now.
    let eight_hours = 8 * 3_600_000;
    let left = grant["expires_ms"].as_u64().unwrap() - listed["now_ms"].as_u64().unwrap();
    assert!(
        left <= eight_hours && left > eight_hours - 60_000,
        "{grant}"
    );
    let grant_id = grant["id"].as_str().unwrap();
    let (status, body) = server.request("DELETE", "/hitl/grants/grant-nope", Some(ADMIN), b"");
    assert_eq!((status, error_code(&body)), (404, "not_found"), "{body}");
    let (status, body) = server.request(
        "DELETE",
        &format!("/hitl/grants/{grant_id}"),
        Some(APPROVER),
        b"",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["revoked"]["id"], grant_id);
    let (_, listed) = server.get("/hitl/grants", Some(ADMIN));
    assert_eq!(listed["grants"], json!([]));
    let (status, records) = server.get("/audit?event_type=grant_revoked", Some(ADMIN));
    assert_eq!(status, 200, "{records}");
    let records = records["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["grant_id"], grant_id);
    assert_eq!(records[0]["decided_by"], "u1");
    assert_eq!(records[0]["channel"], "http");
}

#[test]
fn in_wait_mode_the_call_goes_on_waiting_and_its_result_follows_the_decision() {
    let server = Server::start(&config(""));
    let (status, pending) = server.post("/v1/tools/call", Some(AGENT), &write_call("w.txt"));
    assert_eq!(status, 202, "{pending}");
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(
        server.get(&format!("/hitl/result/{id}"), Some(AGENT)).0,
        202
    );
    let (status, decided) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "approve"}),
    );
    assert_eq!(status, 200, "{decided}");
    // The waiting call applies it; its result is there once the feed says so.
    let applied = server.ws.feed().wait_for(EventKind::ApprovalApplied);
    assert_eq!(applied.subject.as_deref(), Some(id.as_str()));
    let (status, result) = server.get(&format!("/hitl/result/{id}"), Some(AGENT));
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["status"], "allowed", "{result}");
    assert_eq!(read(&server.path("w.txt")).as_deref(), Some("new\n"));
}

#[test]
fn without_tokens_a_generated_admin_token_is_needed_to_decide() {
    let server = Server::start(DEFER);
    let token = server
        .banner
        .split("#token=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no login URL in {:?}", server.banner))
        .to_owned();
    assert!(
        server
            .banner
            .contains(&format!("approvals at http://{}/#token=", server.addr)),
        "{}",
        server.banner
    );
    // Its hash, not the token, is kept in the state dir (mode 0600).
    let kept = server.path(".airlock/http-admin-token.sha256");
    assert_eq!(read(&kept).unwrap(), format!("sha256:{}\n", sha(&token)));
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // Local agents submit without a token; nobody decides without it.
    let (status, pending) = server.post("/v1/tools/call", None, &write_call("t.txt"));
    assert_eq!(status, 202, "{pending}");
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(server.get("/hitl/pending", None).0, 401);
    let (status, _) = server.post(
        &format!("/hitl/decide/{id}"),
        None,
        &json!({"decision": "approve"}),
    );
    assert_eq!(status, 401);
    assert_eq!(server.get("/hitl/pending", Some("wrong")).0, 401);
    let (status, decided) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(&token),
        &json!({"decision": "approve"}),
    );
    assert_eq!(status, 200, "{decided}");
    assert_eq!(read(&server.path("t.txt")).as_deref(), Some("new\n"));
    assert_eq!(server.get(&format!("/hitl/result/{id}"), None).0, 200);
}

#[test]
fn too_many_pending_approvals_are_refused_with_429() {
    let server = Server::start(&config(
        "security:\n  hitl:\n    approval_mode: defer\n    max_pending_per_session: 2\n",
    ));
    let call = |path: &str| {
        let mut body = write_call(path);
        body["session"] = json!("s1");
        server.post("/v1/tools/call", Some(AGENT), &body)
    };
    assert_eq!(call("p1.txt").0, 202);
    assert_eq!(call("p2.txt").0, 202);
    let (status, refused) = call("p3.txt");
    assert_eq!(
        (status, error_code(&refused)),
        (429, "rate_limited"),
        "{refused}"
    );
    // Another session is not held up by this one.
    let mut other = write_call("p4.txt");
    other["session"] = json!("s2");
    assert_eq!(server.post("/v1/tools/call", Some(AGENT), &other).0, 202);
}

/// Reads `/hitl/events` on another thread: each `(event, data)` as it comes.
#[test]
fn events_tell_approvers_of_created_decided_and_expired_approvals() {
    let server = Server::start(&config(
        "file_broker:\n  hitl_ttl_seconds: 2\nsecurity:\n  hitl:\n    approval_mode: defer\n",
    ));
    // Approvers hear of every approval, an agent only of its own.
    let events = server.subscribe(APPROVER);
    let other_agents = server.subscribe(OTHER_AGENT);

    let (_, pending) = server.post("/v1/tools/call", Some(AGENT), &write_call("e1.txt"));
    let first = pending["approval_id"].as_str().unwrap().to_owned();
    let (kind, data) = next_event(&events);
    assert_eq!(
        (kind.as_str(), data["approval"]["id"].as_str()),
        ("created", Some(first.as_str())),
        "{data}"
    );
    assert_eq!(data["type"], "created");
    assert_eq!(data["approval"]["status"], "pending");

    server.post(
        &format!("/hitl/decide/{first}"),
        Some(APPROVER),
        &json!({"decision": "approve"}),
    );
    let (kind, data) = next_event(&events);
    assert_eq!(
        (
            kind.as_str(),
            data["approval"]["id"].as_str(),
            data["data"]["status"].as_str()
        ),
        ("decided", Some(first.as_str()), Some("approved")),
        "{data}"
    );
    let (kind, data) = next_event(&events);
    assert_eq!(
        (kind.as_str(), data["approval"]["id"].as_str()),
        ("applied", Some(first.as_str())),
        "{data}"
    );
    assert_eq!(data["approval"]["status"], "applied");

    // Left alone, the next one expires.
    let (_, pending) = server.post("/v1/tools/call", Some(AGENT), &write_call("e2.txt"));
    let second = pending["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(next_event(&events).0, "created");
    server.advance(2_000);
    let (kind, data) = next_event(&events);
    assert_eq!(
        (kind.as_str(), data["approval"]["id"].as_str()),
        ("expired", Some(second.as_str())),
        "{data}"
    );
    assert_eq!(read(&server.path("e2.txt")), None);
    // The other agent heard nothing of those; of its own, it hears.
    let (_, pending) = server.post("/v1/tools/call", Some(OTHER_AGENT), &write_call("e3.txt"));
    let third = pending["approval_id"].as_str().unwrap().to_owned();
    let (kind, data) = next_event(&other_agents);
    assert_eq!(
        (kind.as_str(), data["approval"]["id"].as_str()),
        ("created", Some(third.as_str())),
        "{data}"
    );
}

/// An approval created and decided within a millisecond, by another
/// process (`call --yes`), is on the stream as both events, in order, each
/// with its place in the feed; a reader that comes back with the id of the
/// last event it saw gets what came after it, once.
#[test]
fn events_made_at_once_elsewhere_come_in_order_and_resume_after_last_event_id() {
    let server = Server::start(&config(""));
    let events = server.subscribe(APPROVER);
    let envelope = server
        .ws
        .call(
            "write_file",
            &json!({"path": "at-once.txt", "content": "x\n"}),
            &["--yes"],
        )
        .json;
    assert_eq!(envelope["status"], "allowed", "{envelope}");
    let id = envelope["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let seen: Vec<(String, Value)> = (0..3).map(|_| next_event(&events)).collect();
    let names: Vec<(&str, Option<&str>)> = seen
        .iter()
        .map(|(name, data)| (name.as_str(), data["approval"]["id"].as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("created", Some(id.as_str())),
            ("decided", Some(id.as_str())),
            ("applied", Some(id.as_str()))
        ]
    );
    let seqs: Vec<u64> = seen
        .iter()
        .map(|(_, data)| data["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]), "{seqs:?}");
    assert_eq!(seen[1].1["data"]["status"], "approved");
    assert_eq!(seen[1].1["data"]["channel"], "terminal");

    // Back after the first: the other two, and nothing twice.
    let again = server.subscribe_after(APPROVER, Some(&seqs[0].to_string()));
    let resumed: Vec<(String, u64)> = (0..2)
        .map(|_| {
            let (name, data) = next_event(&again);
            (name, data["seq"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(
        resumed,
        [
            ("decided".to_owned(), seqs[1]),
            ("applied".to_owned(), seqs[2])
        ]
    );
    assert!(
        again.recv_timeout(Duration::from_millis(200)).is_err(),
        "an event came twice"
    );
    // A Last-Event-ID that is no event id is refused.
    let mut headers = format!("Authorization: Bearer {APPROVER}\r\n");
    headers.push_str("Last-Event-ID: yesterday\r\n");
    let (status, _, body) = exchange(&server.addr, "GET", "/hitl/events", &headers, b"");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid_input"), "{body}");
}

fn proposal_status(server: &Server, token: &str, id: &str, session: Option<&str>) -> Value {
    let mut call = json!({"tool": "proposal_status", "arguments": {"hitl_id": id}});
    if let Some(session) = session {
        call["session"] = json!(session);
    }
    server.post("/v1/tools/call", Some(token), &call).1
}

#[test]
fn agents_see_only_their_own_approvals_and_session_grants_stay_with_their_principal() {
    let server = Server::start(&config(DEFER));
    let in_session = |path: &str, content: &str| json!({"tool": "write_file", "arguments": {"path": path, "content": content}, "session": "shared"});
    let (status, pending) =
        server.post("/v1/tools/call", Some(AGENT), &in_session("b.txt", "one\n"));
    assert_eq!(status, 202, "{pending}");
    let id = pending["approval_id"].as_str().unwrap().to_owned();

    // Another agent naming the same session sees nothing of it.
    assert_eq!(
        server
            .get(&format!("/hitl/result/{id}"), Some(OTHER_AGENT))
            .0,
        404
    );
    for session in [Some("shared"), None] {
        let status = proposal_status(&server, OTHER_AGENT, &id, session);
        assert_eq!(error_code(&status), "not_found", "{status}");
    }
    // Its identical call is its own approval, not a view of the first.
    let (status, theirs) = server.post(
        "/v1/tools/call",
        Some(OTHER_AGENT),
        &in_session("b.txt", "one\n"),
    );
    assert_eq!(status, 202, "{theirs}");
    assert_ne!(theirs["approval_id"], pending["approval_id"]);
    // The agent that asked, and an admin, see it.
    let own = proposal_status(&server, AGENT, &id, Some("shared"));
    assert_eq!(own["data"]["status"], "pending", "{own}");
    let admin = proposal_status(&server, ADMIN, &id, None);
    assert_eq!(admin["data"]["status"], "pending", "{admin}");

    // Always allowed in that session: for the agent that asked only.
    let (status, decided) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "approve", "always": {"scope": "session"}}),
    );
    assert_eq!(status, 200, "{decided}");
    assert_eq!(read(&server.path("b.txt")).as_deref(), Some("one\n"));
    let (status, again) = server.post("/v1/tools/call", Some(AGENT), &in_session("b.txt", "two\n"));
    assert_eq!(
        (status, &again["status"]),
        (200, &json!("allowed")),
        "{again}"
    );
    assert_eq!(again["decision"]["by"], "grant", "{again}");
    assert_eq!(read(&server.path("b.txt")).as_deref(), Some("two\n"));
    let (status, intruder) = server.post(
        "/v1/tools/call",
        Some(OTHER_AGENT),
        &in_session("b.txt", "pwned\n"),
    );
    assert_eq!(status, 202, "the other agent used the grant: {intruder}");
    assert_eq!(read(&server.path("b.txt")).as_deref(), Some("two\n"));
}

#[test]
fn openapi_describes_every_route_and_each_one_is_served() {
    let server = Server::start(&config(DEFER));
    let (status, document) = server.get("/openapi.json", Some(AGENT));
    assert_eq!(status, 200, "{document}");
    assert_eq!(document["openapi"], "3.1.0");
    let paths = document["paths"].as_object().unwrap();
    let mut described: Vec<String> = Vec::new();
    for (path, operations) in paths {
        for (method, operation) in operations.as_object().unwrap() {
            described.push(format!("{} {path}", method.to_uppercase()));
            assert!(
                operation["responses"]
                    .as_object()
                    .is_some_and(|r| !r.is_empty())
            );
            // Served: never the router's own 404 or 405 (an unknown id is
            // our JSON `not_found`; a missing body our JSON 400).
            if path == "/hitl/events" {
                continue;
            }
            let concrete = path
                .replace("{id}", "hitl-nope")
                .replace("{decision}", "approve")
                .replace("{agent}", "claude-code");
            let (status, body) =
                server.request(&method.to_uppercase(), &concrete, Some(ADMIN), b"{}");
            assert_ne!(status, 405, "{method} {path}");
            if path.starts_with("/hitl/link/") {
                // A link without its signature: the page that says so.
                assert_eq!(status, 403, "{method} {path}");
                assert!(body.as_str().unwrap().contains("Invalid link"), "{body}");
            } else if path == "/metrics" {
                // Prometheus text, not JSON.
                assert_eq!(status, 200, "{body}");
                assert!(
                    body.as_str().unwrap().contains("airlock_calls_total"),
                    "{body}"
                );
            } else {
                assert!(body.is_object(), "{method} {path}: {status} {body}");
            }
        }
    }
    described.sort();
    assert_eq!(
        described,
        [
            "DELETE /hitl/grants/{id}",
            "GET /audit",
            "GET /audit/verify",
            "GET /hitl/events",
            "GET /hitl/grants",
            "GET /hitl/link/{id}/{decision}",
            "GET /hitl/pending",
            "GET /hitl/pending/{id}",
            "GET /hitl/result/{id}",
            "GET /openapi.json",
            "POST /hitl/decide-batch",
            "POST /hitl/decide/{id}",
            "POST /hitl/link/{id}/{decision}",
            "POST /hitl/preview/{id}",
            "POST /v1/hooks/{agent}",
            "POST /v1/tools/call",
            "GET /v1/stats",
            "GET /metrics",
            "POST /v1/sessions",
            "GET /v1/sessions",
            "GET /v1/sessions/{id}",
            "DELETE /v1/sessions/{id}",
            "POST /v1/sessions/{id}/signal",
        ]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    // The request bodies are the handlers' own types, references resolved.
    let schemas = &document["components"]["schemas"];
    assert_eq!(
        schemas["CallBody"]["required"],
        json!(["tool"]),
        "{schemas}"
    );
    let text = document.to_string();
    for reference in text.split("\"$ref\":\"").skip(1) {
        let target = reference.split('"').next().unwrap();
        let name = target
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("{target}"));
        assert!(schemas.get(name).is_some(), "dangling {target}");
    }
}

/// The path and query of a link (they point at the server's own address).
fn link_path<'a>(link: &'a Value, server: &Server) -> &'a str {
    let link = link.as_str().unwrap();
    link.strip_prefix(&format!("http://{}", server.addr))
        .unwrap_or_else(|| panic!("{link} is not on {}", server.addr))
}

#[test]
fn webhooks_carry_signed_one_time_links_that_confirm_before_deciding() {
    let (hook, hooked, release) = held_hook_receiver(1);
    // A second hook that refuses every delivery: its failures must not hold
    // anything up.
    let dead_url = refusing_hook();
    let rules = format!(
        "security:\n  hitl:\n    approval_mode: defer\n    rules:\n      - tools: [write_file]\n        conditions: [{{param: path, glob: \"docs/**\"}}]\n        risk: critical\n\
         notify:\n  webhooks:\n    - {{url: \"{hook}\", events: [created, decided]}}\n    - {{url: \"{dead_url}\", events: [created]}}\n"
    );
    let server = Server::start(&config(&rules));
    let next_hook = || hooked.recv_timeout(Duration::from_secs(20)).unwrap();

    // A new approval is posted (after one 503, retried) with its links.
    // The receiver holds its first answer until the call has returned: had
    // the call waited for its hooks, it would never return.
    let (status, pending) = server.post("/v1/tools/call", Some(AGENT), &write_call("b.txt"));
    assert_eq!(status, 202, "{pending}");
    release.send(()).unwrap();
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    let created = next_hook();
    assert_eq!(created["event"], "created", "{created}");
    assert_eq!(created["approval"]["id"], id.as_str());
    assert!(
        created["approval"]["diff"]
            .as_str()
            .unwrap()
            .contains("+new")
    );
    assert_eq!(created["ui"], format!("http://{}/", server.addr));
    let approve = link_path(&created["links"]["approve"], &server).to_owned();
    let deny = link_path(&created["links"]["deny"], &server).to_owned();
    assert!(
        approve.starts_with(&format!("/hitl/link/{id}/approve?exp=")),
        "{approve}"
    );

    // A tampered link, or one for the other decision, is refused.
    let tampered = approve.replace("/approve?", "/deny?");
    let (status, head, _) = exchange(&server.addr, "GET", &tampered, "", b"");
    assert_eq!(status, 403);
    assert!(head.contains("x-airlock-error: forbidden"), "{head}");
    let later = approve.replacen("exp=", "exp=9", 1);
    assert_eq!(exchange(&server.addr, "POST", &later, "", b"").0, 403);

    // Opening the link shows the call and a form, and decides nothing.
    let (status, head, page) = exchange(&server.addr, "GET", &approve, "", b"");
    assert_eq!(status, 200, "{page}");
    assert!(head.contains("text/html"), "{head}");
    assert!(page.contains("+new"), "{page}");
    assert!(page.contains("<form method=\"post\""), "{page}");
    assert_eq!(
        server.get(&format!("/hitl/pending/{id}"), Some(APPROVER)).1["status"],
        "pending"
    );
    assert_eq!(read(&server.path("b.txt")), None);

    // Confirming decides, with channel `link`; the link is spent.
    let form = "Content-Type: application/x-www-form-urlencoded\r\n";
    let (status, _, page) = exchange(
        &server.addr,
        "POST",
        &approve,
        form,
        b"reason=from+my+phone",
    );
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("applied"), "{page}");
    assert_eq!(read(&server.path("b.txt")).as_deref(), Some("new\n"));
    let (status, head, _) = exchange(&server.addr, "POST", &approve, form, b"");
    assert_eq!(status, 409);
    assert!(head.contains("x-airlock-error: already_decided"), "{head}");
    assert_eq!(exchange(&server.addr, "POST", &deny, form, b"").0, 409);
    let (_, audit) = server.get(
        &format!("/audit?event_type=hitl_decision&filter=hitl_id={id}"),
        Some(ADMIN),
    );
    let decision = &audit["records"][0];
    assert_eq!(
        (
            &decision["decision"],
            &decision["channel"],
            &decision["reason"]
        ),
        (&json!("approve"), &json!("link"), &json!("from my phone")),
        "{audit}"
    );
    let decided = next_hook();
    assert_eq!(
        (
            decided["event"].as_str(),
            decided["approval"]["id"].as_str()
        ),
        (Some("decided"), Some(id.as_str()))
    );
    assert_eq!(decided["links"], Value::Null);

    // A deny link denies.
    let (_, pending) = server.post("/v1/tools/call", Some(AGENT), &write_call("c.txt"));
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    let created = next_hook();
    assert_eq!(created["approval"]["id"], id.as_str());
    let deny = link_path(&created["links"]["deny"], &server).to_owned();
    let (status, _, page) = exchange(&server.addr, "POST", &deny, form, b"");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Denied"), "{page}");
    assert_eq!(
        server.get(&format!("/hitl/pending/{id}"), Some(APPROVER)).1["status"],
        "denied"
    );
    assert_eq!(read(&server.path("c.txt")), None);
    next_hook();

    // Where the risk names its approvers, no links are offered.
    std::fs::create_dir(server.path("docs")).unwrap();
    let (status, _) = server.post("/v1/tools/call", Some(AGENT), &write_call("docs/x.md"));
    assert_eq!(status, 202);
    let created = next_hook();
    assert_eq!(created["approval"]["risk"], "critical");
    assert_eq!(created["links"], Value::Null, "{created}");
}

#[test]
fn a_link_expires_with_its_approval() {
    let (hook, hooked) = hook_receiver(0);
    // In wait mode an approval lives as long as the call waits: 1 s here.
    let rules = format!(
        "security:\n  hitl:\n    rules:\n      - tools: [write_file]\n        risk: high\n        timeout: 1\n\
         notify:\n  webhooks:\n    - {{url: \"{hook}\", events: [created]}}\n"
    );
    let server = Server::start(&config(&rules));
    let (status, body) = server.post("/v1/tools/call", Some(AGENT), &write_call("a.txt"));
    assert_eq!(status, 202, "{body}");
    let created = hooked.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(created["approval"]["risk"], "high");
    let approve = link_path(&created["links"]["approve"], &server).to_owned();
    server.advance(1_000);
    let form = "Content-Type: application/x-www-form-urlencoded\r\n";
    for method in ["GET", "POST"] {
        let (status, head, _) = exchange(&server.addr, method, &approve, form, b"");
        assert_eq!(status, 409, "{method}");
        assert!(head.contains("x-airlock-error: expired"), "{head}");
    }
    assert_eq!(read(&server.path("a.txt")).as_deref(), Some("hello\n"));
}

#[test]
fn links_start_with_the_public_url_when_one_is_given() {
    let (hook, hooked) = hook_receiver(0);
    let hooks = format!(
        "security:\n  hitl:\n    approval_mode: defer\n\
         notify:\n  webhooks:\n    - {{url: \"{hook}\", events: [created]}}\n"
    );
    let server = Server::start_with(
        &config(&hooks),
        &["--public-url", "https://approvals.example.com/airlock/"],
    );
    let (status, pending) = server.post("/v1/tools/call", Some(AGENT), &write_call("b.txt"));
    assert_eq!(status, 202, "{pending}");
    let id = pending["approval_id"].as_str().unwrap();
    let created = hooked.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(created["ui"], "https://approvals.example.com/airlock/");
    let approve = created["links"]["approve"].as_str().unwrap();
    let prefix = format!("https://approvals.example.com/airlock/hitl/link/{id}/approve?exp=");
    assert!(approve.starts_with(&prefix), "{approve}");
    // The same link, on this server, works.
    let path = approve
        .strip_prefix("https://approvals.example.com/airlock")
        .unwrap();
    assert_eq!(exchange(&server.addr, "GET", path, "", b"").0, 200);

    // Not a URL: refused at start.
    let out = server.ws.run(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--public-url",
        "approvals.example.com",
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--public-url must be"), "{out:?}");
}

#[test]
fn the_web_ui_and_the_api_description_need_no_token_and_the_page_is_locked_down() {
    let server = Server::start(&config(DEFER));
    for (path, kind) in [
        ("/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ] {
        let (status, head, body) = exchange(&server.addr, "GET", path, "", b"");
        assert_eq!(status, 200, "{path}");
        let head = head.to_ascii_lowercase();
        assert!(head.contains(&format!("content-type: {kind}")), "{head}");
        assert!(
            head.contains("content-security-policy: default-src 'none'; script-src 'self'"),
            "{head}"
        );
        assert!(!body.is_empty());
    }
    assert_eq!(server.get("/openapi.json", None).0, 200);
    // Everything with data still needs a token.
    assert_eq!(server.get("/hitl/pending", None).0, 401);
    assert_eq!(server.get("/hitl/events", None).0, 401);
}

/// The token shown once by `airlock token create` or `rotate`.
fn shown_token(stdout: &str) -> String {
    stdout
        .lines()
        .nth(1)
        .map(str::trim)
        .filter(|token| token.len() == 64)
        .unwrap_or_else(|| panic!("no token in {stdout:?}"))
        .to_owned()
}

/// `airlock token` makes, lists, revokes and rotates tokens; a running
/// server takes each change at once; the admin token survives a restart.
#[test]
fn tokens_are_made_with_a_command_and_a_running_server_follows_them() {
    let ws = Workspace::new("");
    let mut feed = ws.feed();
    let first = airlock_testkit::http::Serving::start(&ws, &[]);
    let admin = first
        .banner
        .split("#token=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_owned();
    let get = |addr: &str, token: Option<&str>| {
        airlock_testkit::http::request(addr, "GET", "/hitl/pending", token, b"").0
    };
    assert_eq!(get(&first.addr, Some(&admin)), 200);
    feed.skip_to_now();

    // --print writes nothing.
    let printed = ws.run(&[
        "token", "create", "--name", "phone", "--role", "approver", "--print",
    ]);
    assert_eq!(printed.code, 0, "{}", printed.stderr);
    assert!(
        printed.stdout.contains("add under auth.tokens in "),
        "{}",
        printed.stdout
    );
    assert!(!ws.read("airlock.yaml").unwrap().contains("phone"));

    let made = ws.run(&[
        "token", "create", "--name", "phone", "--role", "approver", "--user", "alice",
    ]);
    assert_eq!(made.code, 0, "{}", made.stderr);
    let phone = shown_token(&made.stdout);
    assert!(
        ws.read("airlock.yaml").unwrap().contains(&format!(
            "{{name: \"phone\", sha256: \"sha256:{}\", roles: [approver], user: \"alice\"}}",
            airlock_testkit::sha(&phone).trim_start_matches("sha256:")
        )),
        "{}",
        ws.read("airlock.yaml").unwrap()
    );
    // The running server reloads its configuration and takes the token.
    feed.wait_for(EventKind::ConfigReloaded);
    assert_eq!(get(&first.addr, Some(&phone)), 200);
    // With a token configured, a request without one is refused.
    assert_eq!(get(&first.addr, None), 401);
    // A second token of that name is refused, and changes nothing.
    let again = ws.run(&["token", "create", "--name", "phone", "--role", "agent"]);
    assert_eq!(again.code, 2);
    assert!(
        again.stderr.contains("a token named phone exists"),
        "{}",
        again.stderr
    );

    let listed = ws.run(&["token", "list", "--json"]).json;
    let names: Vec<(&str, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|token| {
            (
                token["name"].as_str().unwrap(),
                token["source"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [("phone", "auth.tokens"), ("local-admin", "state dir")]
    );

    let revoked = ws.run(&["token", "revoke", "phone"]);
    assert_eq!(revoked.code, 0, "{}", revoked.stderr);
    feed.wait_for(EventKind::ConfigReloaded);
    assert_eq!(get(&first.addr, Some(&phone)), 401);
    assert!(ws.read("airlock.yaml").unwrap().contains("  tokens: []"));
    let unknown = ws.run(&["token", "revoke", "phnoe"]);
    assert_eq!(
        (unknown.code, unknown.stderr.as_str()),
        (2, "error: no token named phnoe\n")
    );

    // The admin token outlives a restart; rotating it ends it at once.
    drop(first);
    let second = airlock_testkit::http::Serving::start(&ws, &[]);
    assert!(
        second
            .banner
            .contains("the admin token shown when it was made still works"),
        "{}",
        second.banner
    );
    assert_eq!(get(&second.addr, Some(&admin)), 200);
    let rotated = ws.run(&["token", "rotate"]);
    assert_eq!(rotated.code, 0, "{}", rotated.stderr);
    let new_admin = shown_token(&rotated.stdout);
    assert_eq!(get(&second.addr, Some(&admin)), 401);
    assert_eq!(get(&second.addr, Some(&new_admin)), 200);
    let events = ws.audit_events();
    for event in ["token_created", "token_revoked", "admin_token_rotated"] {
        assert!(
            events.iter().any(|e| e == event),
            "no {event} in {events:?}"
        );
    }
}

/// `--http` takes a port alone or a host name.
#[test]
fn http_takes_a_port_alone_or_localhost() {
    let ws = Workspace::new("");
    for addr in ["0", "localhost:0"] {
        let mut child = ws
            .command(&["serve", "--http", addr])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            line.starts_with("airlock: serving MCP at http://127.0.0.1:"),
            "{addr}: {line}"
        );
    }
    let bad = ws.run(&["serve", "--http", "nonsense"]);
    assert_eq!(bad.code, 2);
    assert!(
        bad.stderr
            .contains("is not an address: give PORT, HOST:PORT"),
        "{}",
        bad.stderr
    );
}

/// On a terminal, the one-time login URL comes with a QR code of it.
#[test]
fn on_a_terminal_the_login_url_is_also_a_qr_code() {
    let ws = Workspace::new("");
    let (mut child, mut terminal) =
        airlock_testkit::terminal::Terminal::spawn(ws.command(&["serve", "--http", "0"]));
    terminal.expect("(admin token, shown once)");
    // Half blocks, two modules a character, a quiet zone around it.
    let code = terminal.expect("▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀");
    let _ = child.kill();
    let _ = child.wait();
    assert!(code.contains('█') && code.contains('▄'), "{code}");
}

/// An approver's event stream (what the web UI keeps open) is a live
/// approver channel: with `elicitation_fallback: auto`, a call from an MCP
/// client that cannot ask its human waits for it instead of being denied.
#[test]
fn a_connected_web_ui_makes_auto_wait_for_a_person() {
    if !airlock_testkit::peers::require(
        "a_connected_web_ui_makes_auto_wait_for_a_person",
        &[airlock_testkit::peers::Peer::PythonMcp],
    ) {
        return;
    }
    let server = Server::start("default_profile: s\nprofiles:\n  s:\n    asklist: [write_file]\n");
    let admin = server
        .banner
        .split("#token=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_owned();
    let status = |result: &Value| result["structuredContent"]["status"].clone();
    let mut client = airlock_testkit::mcp::Driver::stdio(
        &server.ws,
        &["--elicitation", "none"],
        &["serve", "--stdio"],
    );
    // Nobody there: denied at once.
    let denied = client.call("write_file", json!({"path": "w.txt", "content": "x\n"}));
    assert_eq!(status(&denied), "denied", "{denied}");

    // The web UI's stream is open: the call waits and the browser decides.
    let _events = server.subscribe(&admin);
    client.send(json!({"op": "call_async", "id": "w", "tool": "write_file",
        "args": {"path": "w.txt", "content": "waited\n"}}));
    let id = server.ws.wait_for_pending();
    let (code, decided) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(&admin),
        &json!({"decision": "approve"}),
    );
    assert_eq!(code, 200, "{decided}");
    let result = client.send(json!({"op": "await", "id": "w", "timeout": 30}));
    assert_eq!(status(&result), "allowed", "{result}");
    assert_eq!(read(&server.path("w.txt")).as_deref(), Some("waited\n"));
}

/// A revoked token's open event stream ends (and with it a web UI's
/// presence); the workspace's admin token is not honoured on a listener
/// off loopback.
#[test]
fn a_revoked_token_loses_its_open_stream_and_the_admin_token_stays_on_loopback() {
    let server = Server::start("");
    let mut feed = server.ws.feed();
    feed.skip_to_now();
    let made = server
        .ws
        .run(&["token", "create", "--name", "phone", "--role", "approver"]);
    let phone = shown_token(&made.stdout);
    feed.wait_for(EventKind::ConfigReloaded);
    let events = server.subscribe(&phone);
    assert_eq!(server.ws.run(&["token", "revoke", "phone"]).code, 0);
    feed.wait_for(EventKind::ConfigReloaded);
    // The stream ends: its reader is told by the end of the connection.
    match events.recv_timeout(Duration::from_secs(20)) {
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {}
        other => panic!("the revoked token's stream goes on: {other:?}"),
    }

    // Off loopback, only configured tokens sign in.
    let ws = Workspace::new(&config(""));
    let rotated = ws.run(&["token", "rotate"]);
    let admin = shown_token(&rotated.stdout);
    let open = airlock_testkit::http::Serving::start_on(&ws, "0.0.0.0:0", &[]);
    let port = open.addr.rsplit(':').next().unwrap().to_owned();
    let local = format!("127.0.0.1:{port}");
    assert_eq!(
        request(&local, "GET", "/hitl/pending", Some(&admin), b"").0,
        401
    );
    assert_eq!(
        request(&local, "GET", "/hitl/pending", Some(APPROVER), b"").0,
        200
    );
}

/// `POST /hitl/decide-batch`: each approval its own decision, the caller's
/// right checked for each, unknown ids refused by name.
#[test]
fn decide_batch_decides_each_in_creation_order() {
    let server = Server::start(&config(DEFER));
    let submit = |path: &str| {
        let (status, pending) = server.post("/v1/tools/call", Some(AGENT), &write_call(path));
        assert_eq!(status, 202, "{pending}");
        pending["approval_id"].as_str().unwrap().to_owned()
    };
    let first = submit("x.txt");
    let second = submit("y.txt");
    let (status, body) = server.post(
        "/hitl/decide-batch",
        Some(APPROVER),
        &json!({"ids": [second, first, "hitl-nope", first], "decision": "approve"}),
    );
    assert_eq!(status, 200, "{body}");
    let outcomes: Vec<(&str, &str)> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            (
                item["id"].as_str().unwrap(),
                item["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            (first.as_str(), "decided"),
            (second.as_str(), "decided"),
            ("hitl-nope", "refused")
        ]
    );
    assert_eq!(body["results"][2]["error"]["code"], "not_found");
    assert_eq!(read(&server.path("x.txt")).as_deref(), Some("new\n"));
    assert_eq!(read(&server.path("y.txt")).as_deref(), Some("new\n"));
    // Bad input changes nothing.
    let (status, body) = server.post(
        "/hitl/decide-batch",
        Some(APPROVER),
        &json!({"ids": [], "decision": "approve"}),
    );
    assert_eq!(
        (status, error_code(&body)),
        (400, "invalid_input"),
        "{body}"
    );
    let (status, _) = server.post(
        "/hitl/decide-batch",
        Some(AGENT),
        &json!({"ids": [first], "decision": "deny"}),
    );
    assert_eq!(status, 403);
}

#[test]
fn webhooks_are_delivered_over_https_trusting_the_configured_ca() {
    let (hook, hooked, release) = held_hook_receiver(0);
    let ca = airlock_testkit::tls::TestCa::new();
    let receiver: std::net::SocketAddr = hook
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/hook"))
        .unwrap()
        .parse()
        .unwrap();
    let proxy = ca.proxy(receiver);
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("test-ca.pem");
    ca.write_pem(&ca_file);
    let server = Server::start(&config(&format!(
        "{DEFER}tls:\n  ca_file: {}\nnotify:\n  webhooks:\n    - {{url: \"{}\", events: [created]}}\n",
        ca_file.display(),
        proxy.url("/hook")
    )));
    let (status, pending) = server.post("/v1/tools/call", Some(AGENT), &write_call("tls.txt"));
    assert_eq!(status, 202, "{pending}");
    release.send(()).unwrap();
    let created = hooked.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(created["event"], "created", "{created}");
    assert_eq!(created["approval"]["id"], pending["approval_id"]);
}

#[test]
fn exec_over_http_runs_allowed_commands_and_proposes_the_rest_as_a_diff() {
    let server = Server::start(&config(DEFER));
    let (status, ran) = server.post(
        "/v1/tools/call",
        Some(AGENT),
        &json!({"tool": "exec", "arguments": {"command": "cat a.txt"}}),
    );
    assert_eq!(status, 200, "{ran}");
    assert_eq!(ran["status"], "allowed");
    assert_eq!(ran["op"]["method"], "exec.run");
    assert_eq!(ran["data"]["stdout"], "hello\n");
    assert_eq!(ran["data"]["exit_code"], 0);

    let (status, pending) = server.post(
        "/v1/tools/call",
        Some(AGENT),
        &json!({"tool": "exec", "arguments": {"command": "sed -i s/hello/bye/ a.txt"}}),
    );
    assert_eq!(status, 202, "{pending}");
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(read(&server.path("a.txt")).as_deref(), Some("hello\n"));
    let (_, one) = server.get(&format!("/hitl/pending/{id}"), Some(APPROVER));
    assert_eq!(one["tool"], "exec");
    let diff = one["diff"].as_str().unwrap();
    assert!(diff.contains("-hello") && diff.contains("+bye"), "{one}");
    let (status, decided) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "approve"}),
    );
    assert_eq!(status, 200, "{decided}");
    assert_eq!(read(&server.path("a.txt")).as_deref(), Some("bye\n"));
    let (status, result) = server.get(&format!("/hitl/result/{id}"), Some(AGENT));
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["op"]["method"], "exec.run");
    assert_eq!(result["data"]["previewed"], true);
}

#[test]
fn an_exec_whose_client_goes_away_is_killed_and_audited_as_cancelled() {
    let server = Server::start(&config(
        "exec:\n  rules:\n    - {prefix: [sleep], decision: allow}\n",
    ));
    let body = json!({"tool": "exec", "arguments": {"command": "sleep 318"}}).to_string();
    let mut stream = std::net::TcpStream::connect(&server.addr).unwrap();
    write!(
        stream,
        "POST /v1/tools/call HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {AGENT}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.addr,
        body.len()
    )
    .unwrap();
    airlock_testkit::wait_running(&["sleep", "318"]);
    drop(stream);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !airlock_testkit::processes_running(&["sleep", "318"]).is_empty() {
        assert!(std::time::Instant::now() < deadline, "the command runs on");
        std::thread::sleep(Duration::from_millis(10));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !server
        .ws
        .audit()
        .iter()
        .any(|record| record["tool"] == "exec" && record["status"] == "cancelled")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "not audited: {:?}",
            server.ws.audit()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
