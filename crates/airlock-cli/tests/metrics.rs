//! `/metrics` (DESIGN §8.1, §10): Prometheus text on the HTTP listener for
//! admins, and on a loopback port of its own with `--metrics-addr`, read by
//! the Prometheus project's own Python parser (`prometheus_client`) and
//! compared with what the script did.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

use airlock_testkit::Workspace;
use airlock_testkit::http::{Server, Serving, exchange, request};
use airlock_testkit::peers::{Peer, require, tools_dir};
use airlock_testkit::token_sha256 as sha;
use serde_json::{Value, json};

const AGENT: &str = "agent-token-1";
const APPROVER: &str = "approver-token-1";
const ADMIN: &str = "admin-token-1";

fn config() -> String {
    format!(
        "auth:\n  tokens:\n    \
         - {{name: claude, sha256: \"{}\", roles: [agent], user: u1}}\n    \
         - {{name: phone, sha256: \"{}\", roles: [approver], user: alice}}\n    \
         - {{name: root, sha256: \"{}\", roles: [admin], user: boss}}\n\
         security:\n  hitl:\n    approval_mode: defer\n",
        sha(AGENT),
        sha(APPROVER),
        sha(ADMIN),
    )
}

/// The exposition as `prometheus_client.parser` reads it: one object per
/// sample, `{name, labels, value}`.
fn parse(text: &str) -> Vec<Value> {
    let script = "import json, sys\n\
        from prometheus_client.parser import text_string_to_metric_families\n\
        out = []\n\
        for family in text_string_to_metric_families(sys.stdin.read()):\n\
        \x20   for s in family.samples:\n\
        \x20       out.append({'family': family.name, 'type': family.type, 'name': s.name, 'labels': s.labels, 'value': s.value})\n\
        print(json.dumps(out))\n";
    let mut child = Command::new(tools_dir().join("venv/bin/python"))
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "the Prometheus parser refused the text: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The value of the sample `name` whose labels include `labels`.
fn sample(samples: &[Value], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| s["name"] == name && labels.iter().all(|(k, v)| s["labels"][*k] == *v))
        .and_then(|s| s["value"].as_f64())
}

fn call(server: &Server, tool: &str, arguments: Value) -> (u16, Value) {
    server.post(
        "/v1/tools/call",
        Some(AGENT),
        &json!({"tool": tool, "arguments": arguments}),
    )
}

#[test]
fn metrics_count_calls_decisions_and_latencies_in_prometheus_text() {
    if !require("metrics", &[Peer::PythonMcp]) {
        return;
    }
    let server = Server::start(&config());
    for _ in 0..3 {
        assert_eq!(call(&server, "read_file", json!({"path": "a.txt"})).0, 200);
    }
    let (_, denied) = call(&server, "read_file", json!({"path": ".airlock/audit.key"}));
    assert_eq!(denied["status"], "denied");
    let (status, asked) = call(
        &server,
        "write_file",
        json!({"path": "b.txt", "content": "b\n"}),
    );
    assert_eq!(status, 202, "{asked}");
    let id = asked["approval_id"].as_str().unwrap();
    server.advance(4_000);
    let (status, _) = server.post(
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        &json!({"decision": "approve"}),
    );
    assert_eq!(status, 200);
    // One left pending.
    assert_eq!(
        call(
            &server,
            "write_file",
            json!({"path": "c.txt", "content": "c\n"})
        )
        .0,
        202
    );

    // Admins only.
    assert_eq!(server.get("/metrics", None).0, 401);
    assert_eq!(server.get("/metrics", Some(APPROVER)).0, 403);
    let (status, headers, text) = exchange(
        &server.addr,
        "GET",
        "/metrics",
        &format!("Authorization: Bearer {ADMIN}\r\n"),
        b"",
    );
    assert_eq!(status, 200);
    assert!(
        headers
            .to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{headers}"
    );
    let samples = parse(&text);
    let calls = |tool: &str, decision: &str| {
        sample(
            &samples,
            "airlock_calls_total",
            &[("tool", tool), ("decision", decision)],
        )
    };
    assert_eq!(calls("read_file", "allow"), Some(3.0), "{text}");
    assert_eq!(calls("read_file", "deny"), Some(1.0), "{text}");
    assert_eq!(calls("write_file", "ask"), Some(2.0), "{text}");
    assert_eq!(
        sample(&samples, "airlock_approvals_pending", &[]),
        Some(1.0)
    );
    let records = server.ws.audit().len() as f64;
    assert_eq!(
        sample(&samples, "airlock_audit_records", &[]),
        Some(records)
    );
    // The decision took the 4 s the clock moved (plus the test's own time):
    // in the 5 s bucket, not the 1 s one.
    let decided = [("risk", "medium"), ("outcome", "approve")];
    assert_eq!(
        sample(&samples, "airlock_decision_seconds_count", &decided),
        Some(1.0)
    );
    let bucket = |le: &str| {
        let mut labels = decided.to_vec();
        labels.push(("le", le));
        sample(&samples, "airlock_decision_seconds_bucket", &labels)
    };
    assert_eq!(
        (bucket("1"), bucket("5"), bucket("+Inf")),
        (Some(0.0), Some(1.0), Some(1.0)),
        "{text}"
    );
    // Every append was timed.
    let appends = sample(&samples, "airlock_audit_append_seconds_count", &[]).unwrap();
    assert!(
        appends >= records - 1.0,
        "{appends} appends for {records} records"
    );
    assert_eq!(sample(&samples, "airlock_build_info", &[]), Some(1.0));

    // Off in the configuration: 404.
    let off = Server::start(&format!("{}telemetry: {{metrics: false}}\n", config()));
    assert_eq!(off.get("/metrics", Some(ADMIN)).0, 404);
}

#[test]
fn metrics_addr_serves_loopback_only_without_a_token_and_checks_the_host() {
    if !require("metrics", &[Peer::PythonMcp]) {
        return;
    }
    let ws = Workspace::new(&config());
    ws.write("a.txt", "hello\n");
    let serving = Serving::start(&ws, &["--metrics-addr", "127.0.0.1:0"]);
    let metrics = serving
        .banner
        .lines()
        .find_map(|line| line.strip_prefix("airlock: metrics at http://"))
        .unwrap_or_else(|| panic!("no metrics line in {}", serving.banner))
        .trim_end_matches("/metrics")
        .to_owned();
    let (status, _) = request(
        &serving.addr,
        "POST",
        "/v1/tools/call",
        Some(AGENT),
        json!({"tool": "read_file", "arguments": {"path": "a.txt"}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(status, 200);
    let (status, _, body) = exchange(&metrics, "GET", "/metrics", "", b"");
    assert_eq!(status, 200);
    let samples = parse(&body);
    assert_eq!(
        sample(
            &samples,
            "airlock_calls_total",
            &[("tool", "read_file"), ("decision", "allow")]
        ),
        Some(1.0)
    );
    // Nothing else is there, and a page under another name (DNS
    // rebinding) is refused.
    let (status, _, _) = exchange(&metrics, "GET", "/hitl/pending", "", b"");
    assert_eq!(status, 404);
    let mut stream = std::net::TcpStream::connect(&metrics).unwrap();
    std::io::Write::write_all(
        &mut stream,
        b"GET /metrics HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut stream, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    // Never on a network address.
    let run = ws.run(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--metrics-addr",
        "0.0.0.0:9464",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("loopback only"), "{}", run.stderr);
}

#[test]
fn a_forwarded_upstream_call_is_timed_per_upstream() {
    if !require("metrics", &[Peer::PythonMcp, Peer::NodeTools]) {
        return;
    }
    let script =
        tools_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let node = airlock_testkit::peers::node();
    let tokens = config().replace("security:\n  hitl:\n    approval_mode: defer\n", "");
    // Its trace too: the upstream call is a child span of the call.
    let (endpoint, collector) = airlock_testkit::http::otlp_collector();
    let ws = Workspace::new(&format!(
        "{tokens}telemetry:\n  otlp: {{endpoint: \"{endpoint}\"}}\nsecurity:\n  hitl:\n    approval_mode: defer\n    rules:\n      - tools: [every__echo]\n        risk: low\n        require_approval: false\n\
         upstreams:\n  - name: every\n    command: {:?}\n    args: [{:?}, stdio]\n",
        node.display().to_string(),
        script.display().to_string(),
    ));
    let serving = Serving::start(&ws, &[]);
    let (status, answer) = request(
        &serving.addr,
        "POST",
        "/v1/tools/call",
        Some(AGENT),
        json!({"tool": "every__echo", "arguments": {"message": "hi"}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(status, 200, "{answer}");
    let (status, _, text) = exchange(
        &serving.addr,
        "GET",
        "/metrics",
        &format!("Authorization: Bearer {ADMIN}\r\n"),
        b"",
    );
    assert_eq!(status, 200);
    let samples = parse(&text);
    assert_eq!(
        sample(
            &samples,
            "airlock_upstream_seconds_count",
            &[("upstream", "every")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &samples,
            "airlock_calls_total",
            &[("tool", "every__echo"), ("decision", "allow")]
        ),
        Some(1.0),
        "{text}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut spans: Vec<Value> = Vec::new();
    while !spans.iter().any(|s| s["name"] == "upstream") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let (path, body) = collector.recv_timeout(left).expect("the call's spans");
        if path == "/v1/traces" {
            for resource in body["resourceSpans"].as_array().unwrap() {
                for scope in resource["scopeSpans"].as_array().unwrap() {
                    spans.extend(scope["spans"].as_array().unwrap().iter().cloned());
                }
            }
        }
    }
    let upstream = spans.iter().find(|s| s["name"] == "upstream").unwrap();
    let root = spans
        .iter()
        .find(|s| s["name"] == "airlock.call" && s["traceId"] == upstream["traceId"])
        .expect("the call's root span");
    assert_eq!(upstream["parentSpanId"], root["spanId"]);
    assert_eq!(upstream["kind"], 3, "a client span");
}
