//! Approval analytics (`airlock stats`, `GET /v1/stats`) checked against a
//! scripted history: every figure is known from the script, and the times
//! to decision are the clock moves the script makes (plus the little real
//! time the steps take).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use airlock_testkit::http::Server;
use airlock_testkit::token_sha256 as sha;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const AGENT: &str = "agent-token-1";
const APPROVER: &str = "approver-token-1";

/// Real time the steps of one decision may add to its clock move.
const SLACK_MS: u64 = 20_000;

fn config() -> String {
    format!(
        "auth:\n  tokens:\n    \
         - {{name: claude, sha256: \"{}\", roles: [agent], user: u1}}\n    \
         - {{name: phone, sha256: \"{}\", roles: [approver], user: alice}}\n\
         security:\n  hitl:\n    approval_mode: defer\n",
        sha(AGENT),
        sha(APPROVER),
    )
}

fn call(server: &Server, tool: &str, arguments: Value) -> (u16, Value) {
    server.post(
        "/v1/tools/call",
        Some(AGENT),
        &json!({"tool": tool, "arguments": arguments}),
    )
}

fn ask(server: &Server, tool: &str, arguments: Value) -> String {
    let (status, body) = call(server, tool, arguments);
    assert_eq!(status, 202, "{body}");
    body["approval_id"].as_str().unwrap().to_owned()
}

fn decide(server: &Server, id: &str, body: Value) {
    let (status, answer) = server.post(&format!("/hitl/decide/{id}"), Some(APPROVER), &body);
    assert_eq!(status, 200, "{answer}");
}

/// Removes the times to decision (checked apart) from a stats object.
fn without_times(mut stats: Value) -> (Value, Vec<Value>) {
    let mut times = vec![stats["total"]["decision_ms"].take()];
    for group in stats["groups"].as_array_mut().unwrap() {
        times.push(group["decision_ms"].take());
    }
    (stats, times)
}

/// `decision_ms` whose every figure is its expected clock move, give or
/// take the real time the script took.
fn check_times(found: &Value, expected: &[(&str, Option<u64>)], count: u64) {
    assert_eq!(found["count"], count, "{found}");
    for (name, value) in expected {
        match value {
            None => assert_eq!(found[*name], Value::Null, "{name} in {found}"),
            Some(ms) => {
                let got = found[*name]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{name} in {found}"));
                assert!(
                    (*ms..ms + SLACK_MS).contains(&got),
                    "{name}: {got} is not {ms} ms (+ up to {SLACK_MS}) in {found}"
                );
            }
        }
    }
}

fn figures(values: Value) -> Value {
    let mut all = json!({
        "calls": 0, "allowed": 0, "denied_by_policy": 0, "asks": 0, "approved": 0,
        "edited": 0, "denied": 0, "timeouts": 0, "cancelled": 0, "undone": 0,
        "decision_ms": null
    });
    for (key, value) in values.as_object().unwrap() {
        all[key] = value.clone();
    }
    all
}

#[test]
fn the_figures_of_a_scripted_history_are_exact_in_the_api_and_the_cli() {
    let server = Server::start(&config());
    // Four reads, one of them of airlock's own state (denied by policy).
    for _ in 0..3 {
        assert_eq!(call(&server, "read_file", json!({"path": "a.txt"})).0, 200);
    }
    let (status, denied) = call(&server, "read_file", json!({"path": ".airlock/audit.key"}));
    assert_eq!(
        (status, denied["status"].as_str()),
        (200, Some("denied")),
        "{denied}"
    );
    // Approved after 2 s, denied after 5 s, approved as edited after 1 s.
    let id = ask(
        &server,
        "write_file",
        json!({"path": "b.txt", "content": "b\n"}),
    );
    server.advance(2_000);
    decide(&server, &id, json!({"decision": "approve"}));
    let id = ask(
        &server,
        "write_file",
        json!({"path": "c.txt", "content": "c\n"}),
    );
    server.advance(5_000);
    decide(&server, &id, json!({"decision": "deny", "reason": "no"}));
    let id = ask(
        &server,
        "write_file",
        json!({"path": "d.txt", "content": "d\n"}),
    );
    server.advance(1_000);
    decide(
        &server,
        &id,
        json!({"decision": "approve", "content": "d, edited\n"}),
    );
    // A delete (high risk) approved after 3 s, then undone.
    let delete = ask(&server, "delete_file", json!({"path": "a.txt"}));
    server.advance(3_000);
    decide(&server, &delete, json!({"decision": "approve"}));
    let undo = server.ws.run(&["undo", &delete]);
    assert_eq!(undo.code, 0, "{}{}", undo.stdout, undo.stderr);
    // One left to time out (medium: 120 s).
    let timed_out = ask(
        &server,
        "write_file",
        json!({"path": "e.txt", "content": "e\n"}),
    );
    server.advance(200_000);
    let deadline = Instant::now() + Duration::from_secs(20);
    // The server's sweeper expires it on its clock and audits the timeout.
    while !server
        .ws
        .audit_events()
        .contains(&"hitl_timeout".to_owned())
    {
        assert!(Instant::now() < deadline, "{timed_out} did not time out");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Approved with "always" after half a second: a grant in force.
    let id = ask(
        &server,
        "write_file",
        json!({"path": "f.txt", "content": "f\n"}),
    );
    server.advance(500);
    decide(
        &server,
        &id,
        json!({"decision": "approve", "always": {"scope": "persistent"}}),
    );

    let (status, stats) = server.get("/v1/stats?by=tool", Some(APPROVER));
    assert_eq!(status, 200, "{stats}");
    let (stats, times) = without_times(stats);
    assert_eq!(
        stats,
        json!({
            "since": null,
            "by": "tool",
            "total": figures(json!({
                "calls": 10, "allowed": 3, "denied_by_policy": 1, "asks": 6, "approved": 4,
                "edited": 1, "denied": 1, "timeouts": 1, "undone": 1
            })),
            "groups": [
                {"key": "write_file", "calls": 5, "allowed": 0, "denied_by_policy": 0, "asks": 5,
                 "approved": 3, "edited": 1, "denied": 1, "timeouts": 1, "cancelled": 0,
                 "undone": 0, "decision_ms": null},
                {"key": "read_file", "calls": 4, "allowed": 3, "denied_by_policy": 1, "asks": 0,
                 "approved": 0, "edited": 0, "denied": 0, "timeouts": 0, "cancelled": 0,
                 "undone": 0, "decision_ms": null},
                {"key": "delete_file", "calls": 1, "allowed": 0, "denied_by_policy": 0, "asks": 1,
                 "approved": 1, "edited": 0, "denied": 0, "timeouts": 0, "cancelled": 0,
                 "undone": 1, "decision_ms": null},
            ],
            "grants_in_force": 1,
            "timeline_unit": "hour",
            "timeline": stats["timeline"].clone(),
        })
    );
    // Decisions 0.5, 1, 2, 3 and 5 s: p50 2 s, p90 and p99 5 s.
    let all = [
        ("p50", Some(2_000)),
        ("p90", Some(5_000)),
        ("p99", Some(5_000)),
        ("max", Some(5_000)),
    ];
    check_times(&times[0], &all, 5);
    // write_file: 0.5, 1, 2, 5 s.
    check_times(
        &times[1],
        &[
            ("p50", Some(1_000)),
            ("p90", Some(5_000)),
            ("max", Some(5_000)),
        ],
        4,
    );
    check_times(&times[2], &[("p50", None), ("max", None)], 0);
    check_times(&times[3], &[("p50", Some(3_000)), ("max", Some(3_000))], 1);
    // The timeline counts every decision once, timeouts apart.
    let timeline = stats["timeline"].as_array().unwrap();
    let sum = |key: &str| {
        timeline
            .iter()
            .map(|b| b[key].as_u64().unwrap())
            .sum::<u64>()
    };
    assert_eq!((sum("approved"), sum("denied"), sum("timeouts")), (4, 1, 1));

    // By approver: alice decided five; the timeout is its own row.
    let (_, by_approver) = server.get("/v1/stats?by=approver", Some(APPROVER));
    let rows: Vec<(Value, u64, u64, u64)> = by_approver["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["key"].clone(),
                g["approved"].as_u64().unwrap(),
                g["denied"].as_u64().unwrap(),
                g["timeouts"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [(json!("alice"), 4, 1, 0), (json!("(timeout)"), 0, 0, 1)]
    );
    // By risk: the reads are low, the writes medium, the delete high.
    let (_, by_risk) = server.get("/v1/stats?by=risk", Some(APPROVER));
    let keys: Vec<(Value, u64)> = by_risk["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["key"].clone(), g["calls"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        keys,
        [(json!("medium"), 5), (json!("low"), 4), (json!("high"), 1)]
    );

    // By session: these calls were made in none.
    let (_, by_session) = server.get("/v1/stats?by=session", Some(APPROVER));
    let sessions: Vec<(Value, u64)> = by_session["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["key"].clone(), g["calls"].as_u64().unwrap()))
        .collect();
    assert_eq!(sessions, [(Value::Null, 10)]);

    // From the first ask on, the reads are left out.
    let first_ask = server
        .ws
        .audit()
        .into_iter()
        .find(|record| record["event"] == "write_file_propose")
        .unwrap();
    let since = first_ask["ts"].as_str().unwrap();
    let (status, later) = server.get(&format!("/v1/stats?since={since}"), Some(APPROVER));
    assert_eq!(status, 200, "{later}");
    assert_eq!(
        (
            later["total"]["calls"].as_u64(),
            later["total"]["asks"].as_u64()
        ),
        (Some(6), Some(6))
    );
    assert_eq!(later["since"], since);

    // The CLI says the same.
    let (api_stats, _) = without_times(server.get("/v1/stats?by=tool", Some(APPROVER)).1);
    let cli = server.ws.run(&["stats", "--by", "tool", "--json"]);
    assert_eq!(cli.code, 0, "{}", cli.stderr);
    assert_eq!(without_times(cli.json).0, api_stats);
    let text = server.ws.run(&["stats"]);
    assert!(
        text.stdout.contains("calls 10 · allowed 3 · denied by policy 1 · asked 6\ndecisions: approved 4 (1 edited) · denied 1 · timed out 1 · cancelled 0 · undone 1\n"),
        "{}",
        text.stdout
    );

    // Who may ask, and bad input.
    assert_eq!(server.get("/v1/stats", Some(AGENT)).0, 403);
    assert_eq!(server.get("/v1/stats", None).0, 401);
    let (status, body) = server.get("/v1/stats?by=colour", Some(APPROVER));
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_input")),
        "{body}"
    );
    assert_eq!(
        server.get("/v1/stats?since=yesterday", Some(APPROVER)).0,
        400
    );
    assert_eq!(server.get("/v1/stats?colour=red", Some(APPROVER)).0, 400);
    let bad = server.ws.run(&["stats", "--by", "colour"]);
    assert_eq!(bad.code, 2);
}
