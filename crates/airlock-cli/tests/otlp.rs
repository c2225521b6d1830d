//! OpenTelemetry traces and logs over OTLP/HTTP (DESIGN §8.1), received by
//! a local collector stand-in on a real socket: each call is a trace
//! (`airlock.call` with `policy`, `propose`, `decide`, `apply`), an
//! approval's id is its trace's id so its decision and apply join the
//! trace, every audit record of the call carries the `trace_id`, and every
//! record is a log record of that trace.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use airlock_testkit::Workspace;
use airlock_testkit::http::{Serving, otlp_collector, request};
use airlock_testkit::token_sha256 as sha;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const AGENT: &str = "agent-token-1";
const APPROVER: &str = "approver-token-1";

/// What the collector got: spans and log records, flattened.
#[derive(Default)]
struct Received {
    spans: Vec<Value>,
    logs: Vec<Value>,
    resources: Vec<Value>,
}

fn take(
    collector: &Receiver<(String, Value)>,
    received: &mut Received,
    until: impl Fn(&Received) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !until(received) {
        let left = deadline.saturating_duration_since(Instant::now());
        let (path, body) = collector.recv_timeout(left).unwrap_or_else(|_| {
            panic!(
                "the collector waited in vain; it has {} spans",
                received.spans.len()
            )
        });
        match path.as_str() {
            "/v1/traces" => {
                for resource in body["resourceSpans"].as_array().unwrap() {
                    received.resources.push(resource["resource"].clone());
                    for scope in resource["scopeSpans"].as_array().unwrap() {
                        received
                            .spans
                            .extend(scope["spans"].as_array().unwrap().iter().cloned());
                    }
                }
            }
            "/v1/logs" => {
                for resource in body["resourceLogs"].as_array().unwrap() {
                    for scope in resource["scopeLogs"].as_array().unwrap() {
                        received
                            .logs
                            .extend(scope["logRecords"].as_array().unwrap().iter().cloned());
                    }
                }
            }
            other => panic!("a POST to {other}"),
        }
    }
}

fn attribute(span: &Value, key: &str) -> Option<String> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .and_then(|a| a["value"]["stringValue"].as_str().map(str::to_owned))
}

fn spans_named<'a>(received: &'a Received, name: &str) -> Vec<&'a Value> {
    received
        .spans
        .iter()
        .filter(|s| s["name"] == name)
        .collect()
}

#[test]
fn every_call_is_a_trace_its_approval_joins_and_every_record_a_log_of_it() {
    let (endpoint, collector) = otlp_collector();
    let ws = Workspace::new(&format!(
        "auth:\n  tokens:\n    \
         - {{name: claude, sha256: \"{}\", roles: [agent], user: u1}}\n    \
         - {{name: phone, sha256: \"{}\", roles: [approver], user: alice}}\n\
         security:\n  hitl:\n    approval_mode: defer\n\
         telemetry:\n  otlp: {{endpoint: \"{endpoint}\"}}\n",
        sha(AGENT),
        sha(APPROVER),
    ));
    ws.write("a.txt", "hello\n");
    let mut server = Serving::start(&ws, &[]);
    let post = |path: &str, token: &str, body: Value| {
        request(
            &server.addr,
            "POST",
            path,
            Some(token),
            body.to_string().as_bytes(),
        )
    };
    let (status, _) = post(
        "/v1/tools/call",
        AGENT,
        json!({"tool": "read_file", "arguments": {"path": "a.txt"}}),
    );
    assert_eq!(status, 200);
    let (status, asked) = post(
        "/v1/tools/call",
        AGENT,
        json!({"tool": "write_file", "arguments": {"path": "b.txt", "content": "b\n"}}),
    );
    assert_eq!(status, 202, "{asked}");
    let id = asked["approval_id"].as_str().unwrap().to_owned();
    let (status, _) = post(
        &format!("/hitl/decide/{id}"),
        APPROVER,
        json!({"decision": "approve"}),
    );
    assert_eq!(status, 200);
    assert_eq!(ws.read("b.txt").as_deref(), Some("b\n"));
    assert_eq!(server.stop(), Some(0));

    let write_trace = id.strip_prefix("hitl-").unwrap().replace('-', "");
    let mut received = Received::default();
    take(&collector, &mut received, |r| {
        r.spans.iter().any(|s| s["name"] == "apply")
            && r.logs.iter().any(|l| {
                l["body"]["stringValue"]
                    .as_str()
                    .is_some_and(|b| b.contains("write_file_apply"))
            })
    });
    let service = attribute(&received.resources[0], "service.name");
    assert_eq!(service.as_deref(), Some("airlock"));

    // The read: a root span and its policy step.
    let read_root = spans_named(&received, "airlock.call")
        .into_iter()
        .find(|s| attribute(s, "airlock.tool").as_deref() == Some("read_file"))
        .expect("the read's root span");
    assert!(read_root.get("parentSpanId").is_none(), "{read_root}");
    assert_eq!(
        attribute(read_root, "airlock.status").as_deref(),
        Some("allowed")
    );
    let read_trace = read_root["traceId"].as_str().unwrap().to_owned();
    let children_of = |trace: &str, parent: &Value| -> BTreeMap<String, usize> {
        let mut names = BTreeMap::new();
        for span in &received.spans {
            if span["traceId"] == trace && span["parentSpanId"] == *parent {
                *names
                    .entry(span["name"].as_str().unwrap().to_owned())
                    .or_insert(0) += 1;
            }
        }
        names
    };
    assert_eq!(
        children_of(&read_trace, &read_root["spanId"]),
        BTreeMap::from([("policy".to_owned(), 1)])
    );

    // The write: the approval's id is the trace's id; the decision's wait
    // and the apply join it under the call's root.
    let write_root = spans_named(&received, "airlock.call")
        .into_iter()
        .find(|s| s["traceId"] == write_trace)
        .expect("the write's root span, its trace id the approval's");
    assert_eq!(
        attribute(write_root, "airlock.hitl_id").as_deref(),
        Some(id.as_str())
    );
    assert_eq!(
        attribute(write_root, "airlock.decision").as_deref(),
        Some("ask")
    );
    assert_eq!(write_root["spanId"], write_trace[16..]);
    let children = children_of(&write_trace, &write_root["spanId"]);
    for step in ["policy", "propose", "apply"] {
        assert_eq!(children.get(step), Some(&1), "{step} in {children:?}");
    }
    for span in &received.spans {
        let start: u128 = span["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
        let end: u128 = span["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
        assert!(start > 0 && start <= end, "{span}");
        assert_eq!(span["traceId"].as_str().unwrap().len(), 32);
        assert_eq!(span["spanId"].as_str().unwrap().len(), 16);
    }

    // The audit records of each call carry its trace id.
    let audit = ws.audit();
    let trace_of = |event: &str| -> Vec<String> {
        audit
            .iter()
            .filter(|r| r["event"] == event)
            .map(|r| r["trace_id"].as_str().unwrap_or("none").to_owned())
            .collect()
    };
    assert_eq!(trace_of("read_file"), std::slice::from_ref(&read_trace));
    for event in ["write_file_propose", "hitl_decision", "write_file_apply"] {
        assert_eq!(
            trace_of(event),
            std::slice::from_ref(&write_trace),
            "{event}"
        );
    }
    // And each is a log record of that trace.
    for (event, trace) in [
        ("read_file", &read_trace),
        ("write_file_apply", &write_trace),
    ] {
        let log = received
            .logs
            .iter()
            .find(|l| {
                l["body"]["stringValue"]
                    .as_str()
                    .is_some_and(|b| b.contains(&format!("\"event\":\"{event}\"")))
            })
            .unwrap_or_else(|| panic!("no log record of {event}"));
        assert_eq!(log["traceId"], **trace, "{log}");
        assert_eq!(log["severityText"], "INFO");
    }

    // A command that is not a server sends its trace before it exits.
    let run = ws.call("read_file", &json!({"path": "a.txt"}), &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let before = received.spans.len();
    take(&collector, &mut received, |r| r.spans.len() > before);
    assert!(
        received.spans[before..]
            .iter()
            .any(|s| s["name"] == "airlock.call"),
        "{:?}",
        &received.spans[before..]
    );
}

#[test]
fn without_an_endpoint_nothing_is_traced() {
    let ws = Workspace::new("");
    ws.write("a.txt", "hello\n");
    let run = ws.call("read_file", &json!({"path": "a.txt"}), &[]);
    assert_eq!(run.code, 0);
    assert!(ws.audit().iter().all(|r| r.get("trace_id").is_none()));
    let bad = Workspace::new("telemetry:\n  otlp: {endpoint: \"grpc://x:4317\"}\n");
    let check = bad.run(&["config", "check"]);
    assert_eq!(check.code, 2);
    assert!(
        check.stderr.contains("telemetry.otlp.endpoint"),
        "{}",
        check.stderr
    );
}

/// A call that waits (here `airlock call` at a terminal) decided and
/// applied by another process (the server an approver uses): one trace,
/// its steps from both processes under one root.
#[test]
fn a_waiting_call_and_the_server_that_applies_it_share_one_trace() {
    let (endpoint, collector) = otlp_collector();
    let ws = Workspace::new(&format!(
        "auth:\n  tokens:\n    \
         - {{name: phone, sha256: \"{}\", roles: [approver], user: alice}}\n\
         telemetry:\n  otlp: {{endpoint: \"{endpoint}\"}}\n",
        sha(APPROVER),
    ));
    let server = Serving::start(&ws, &[]);
    let mut waiting = ws.spawn(&[
        "call",
        "write_file",
        "--args",
        r#"{"path": "c.txt", "content": "c\n"}"#,
    ]);
    let id = ws.wait_for_pending_of(&mut waiting);
    let (status, _) = request(
        &server.addr,
        "POST",
        &format!("/hitl/decide/{id}"),
        Some(APPROVER),
        json!({"decision": "approve"}).to_string().as_bytes(),
    );
    assert_eq!(status, 200);
    let output = waiting.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let trace = id.strip_prefix("hitl-").unwrap().replace('-', "");
    let mut received = Received::default();
    let steps = |r: &Received| -> Vec<String> {
        let mut names: Vec<String> = r
            .spans
            .iter()
            .filter(|s| s["traceId"] == trace)
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    take(&collector, &mut received, |r| steps(r).len() >= 5);
    assert_eq!(
        steps(&received),
        ["airlock.call", "apply", "decide", "policy", "propose"]
    );
    let root = &trace[16..];
    for span in received
        .spans
        .iter()
        .filter(|s| s["traceId"] == trace && s["name"] != "airlock.call")
    {
        assert_eq!(span["parentSpanId"], root, "{span}");
    }
    drop(server);
}
