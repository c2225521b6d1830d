//! Shipping the audit log to a SIEM (`audit.ship`, spec 000 phase 2):
//! local receivers on real sockets (syslog over TCP, TLS and UDP; an HTTP
//! endpoint) get every record, in order, once — across a server's restart
//! and with two servers on one workspace.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use airlock_testkit::Workspace;
use airlock_testkit::http::{Serving, hook_receiver};
use airlock_testkit::syslog::{Message, tcp_receiver, udp_receiver};
use airlock_testkit::tls::TestCa;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn reads(ws: &Workspace, count: usize) {
    for _ in 0..count {
        let run = ws.call("read_file", &json!({"path": "a.txt"}), &[]);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
}

fn log_lines(ws: &Workspace) -> Vec<String> {
    ws.read(".airlock/audit.jsonl")
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `seq="N"` of a syslog message, and the record line after its BOM.
fn split(message: &str) -> (u64, String) {
    let seq = message
        .split("seq=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|seq| seq.parse().ok())
        .unwrap_or_else(|| panic!("no seq in {message}"));
    let line = message
        .split_once('\u{FEFF}')
        .map(|(_, line)| line.to_owned())
        .unwrap_or_else(|| panic!("no BOM in {message}"));
    (seq, line)
}

/// Messages until the one of record `last` arrived.
fn until(messages: &Receiver<Message>, last: u64, got: &mut Vec<Message>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.last().map(|m| split(&m.text).0) != Some(last) {
        let left = deadline.saturating_duration_since(Instant::now());
        match messages.recv_timeout(left) {
            Ok(message) => got.push(message),
            Err(_) => panic!("record {last} never arrived; got {} messages", got.len()),
        }
    }
}

/// Every record of the log, each once, in order, exactly as stored.
fn check_all_once(ws: &Workspace, got: &[Message]) {
    let lines = log_lines(ws);
    let seqs: Vec<u64> = got.iter().map(|m| split(&m.text).0).collect();
    assert_eq!(seqs, (1..=lines.len() as u64).collect::<Vec<_>>());
    for (message, line) in got.iter().zip(&lines) {
        assert_eq!(&split(&message.text).1, line);
        assert!(
            message.text.starts_with("<110>1 ") || message.text.starts_with("<108>1 "),
            "{}",
            message.text
        );
        assert!(message.text.contains(" airlock "), "{}", message.text);
    }
}

fn syslog_round_trip(ws: &Workspace, messages: &Receiver<Message>) {
    ws.write("a.txt", "hello\n");
    let mut server = Serving::start(ws, &[]);
    reads(ws, 5);
    let mut got = Vec::new();
    until(messages, log_lines(ws).len() as u64, &mut got);
    assert_eq!(server.stop(), Some(0));
    // Records made while no server runs, then a new server: it goes on
    // from where the last one stopped.
    reads(ws, 4);
    let mut again = Serving::start(ws, &[]);
    reads(ws, 2);
    until(messages, log_lines(ws).len() as u64, &mut got);
    assert_eq!(again.stop(), Some(0));
    // Nothing more arrives: no record twice.
    assert!(messages.recv_timeout(Duration::from_millis(500)).is_err());
    check_all_once(ws, &got);
}

#[test]
fn syslog_over_tcp_hears_every_record_once_in_order_across_a_restart() {
    let (addr, messages) = tcp_receiver();
    let ws = Workspace::new(&format!("audit:\n  ship: {{syslog: \"tcp://{addr}\"}}\n"));
    syslog_round_trip(&ws, &messages);
}

#[test]
fn syslog_over_tls_checks_the_receivers_certificate() {
    let (addr, messages) = tcp_receiver();
    let ca = TestCa::new();
    let proxy = ca.proxy(addr);
    let ws = Workspace::new(&format!(
        "audit:\n  ship: {{syslog: \"tls://localhost:{}\"}}\ntls:\n  ca_file: ca.pem\n",
        proxy.port
    ));
    ca.write_pem(&ws.path("ca.pem"));
    syslog_round_trip(&ws, &messages);

    // Without the CA, the receiver is not trusted: nothing is sent.
    let (addr, messages) = tcp_receiver();
    let proxy = ca.proxy(addr);
    let untrusting = Workspace::new(&format!(
        "audit:\n  ship: {{syslog: \"tls://localhost:{}\"}}\n",
        proxy.port
    ));
    untrusting.write("a.txt", "hello\n");
    let _server = Serving::start(&untrusting, &[]);
    reads(&untrusting, 2);
    assert!(messages.recv_timeout(Duration::from_secs(2)).is_err());
}

#[test]
fn syslog_over_udp_sends_a_datagram_per_record() {
    let (addr, messages) = udp_receiver();
    let ws = Workspace::new(&format!("audit:\n  ship: {{syslog: \"udp://{addr}\"}}\n"));
    ws.write("a.txt", "hello\n");
    let _server = Serving::start(&ws, &[]);
    reads(&ws, 3);
    let mut got = Vec::new();
    until(&messages, log_lines(&ws).len() as u64, &mut got);
    check_all_once(&ws, &got);
}

/// The seqs of the records in the batches an HTTP endpoint got.
fn http_seqs(batches: &Receiver<Value>, last: u64, got: &mut Vec<u64>, lines: &mut Vec<Value>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.last() != Some(&last) {
        let left = deadline.saturating_duration_since(Instant::now());
        let batch = batches
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("record {last} never arrived; got {got:?}"));
        for record in batch.as_array().expect("a JSON array of records") {
            got.push(record["seq"].as_u64().unwrap());
            lines.push(record.clone());
        }
    }
}

#[test]
fn an_http_endpoint_gets_batches_once_from_one_of_two_servers_across_a_restart() {
    // The first POST is refused (503): the batch is sent again.
    let (url, batches) = hook_receiver(1);
    let ws = Workspace::new(&format!("audit:\n  ship: {{http: \"{url}\"}}\n"));
    ws.write("a.txt", "hello\n");
    // Two servers on one workspace: one ships (it holds the lease).
    let mut one = Serving::start(&ws, &[]);
    let mut two = Serving::start(&ws, &[]);
    reads(&ws, 6);
    let (mut seqs, mut records) = (Vec::new(), Vec::new());
    http_seqs(
        &batches,
        log_lines(&ws).len() as u64,
        &mut seqs,
        &mut records,
    );
    assert_eq!(one.stop(), Some(0));
    reads(&ws, 3);
    http_seqs(
        &batches,
        log_lines(&ws).len() as u64,
        &mut seqs,
        &mut records,
    );
    assert_eq!(two.stop(), Some(0));
    assert!(batches.recv_timeout(Duration::from_millis(500)).is_err());
    let lines = log_lines(&ws);
    assert_eq!(seqs, (1..=lines.len() as u64).collect::<Vec<_>>());
    let stored: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records, stored);
}

#[test]
fn ship_targets_are_checked() {
    for (value, key) in [
        ("{syslog: \"smtp://x:25\"}", "audit.ship.syslog"),
        ("{syslog: \"tcp://host\"}", "audit.ship.syslog"),
        ("{syslog: \"tcp://host:0\"}", "audit.ship.syslog"),
        ("{http: \"ftp://x\"}", "audit.ship.http"),
    ] {
        let ws = Workspace::new(&format!("audit:\n  ship: {value}\n"));
        let run = ws.run(&["config", "check"]);
        assert_eq!(run.code, 2, "{value}: {}", run.stdout);
        assert!(run.stderr.contains(key), "{value}: {}", run.stderr);
    }
}
