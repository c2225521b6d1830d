//! Several airlock instances on one PostgreSQL database (DESIGN §7.2):
//! `airlock serve --http` processes in one workspace with `store.url`, a
//! real server from Debian's `postgresql` package, and clients on real
//! sockets. What one instance does, every other sees: approvals, decisions,
//! events; a decision is made once, an apply happens once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use airlock_store::{ApprovalStatus, EventKind};
use airlock_testkit::Workspace;
use airlock_testkit::http::{Serving, hook_receiver, request, subscribe};
use airlock_testkit::peers::{Peer, require};
use airlock_testkit::postgres::{PgServer, open_store};
use airlock_testkit::token_sha256 as sha;
use serde_json::{Value, json};

const AGENT: &str = "agent-token-1";
const APPROVER: &str = "approver-token-1";
const ADMIN: &str = "admin-token-1";

/// A workspace whose state is in database `url`, with an agent, an
/// approver and an admin, then `extra`.
fn workspace(url: &str, extra: &str) -> Workspace {
    let ws = Workspace::new(&format!(
        "auth:\n  tokens:\n    \
         - {{name: claude, sha256: \"{}\", roles: [agent], user: u1}}\n    \
         - {{name: phone, sha256: \"{}\", roles: [approver], user: u1}}\n    \
         - {{name: root, sha256: \"{}\", roles: [admin], user: boss}}\n\
         store:\n  url: \"{url}\"\n  lease: 2s\n{extra}",
        sha(AGENT),
        sha(APPROVER),
        sha(ADMIN),
    ));
    ws.write("a.txt", "hello\n");
    ws
}

/// A new database on the shared server, or `None` (skipped) without
/// PostgreSQL.
fn database(test: &str) -> Option<String> {
    require(test, &[Peer::Postgres]).then(|| PgServer::shared().new_database())
}

fn write_call(path: &str) -> Value {
    json!({"tool": "write_file", "arguments": {"path": path, "content": "new\n"}})
}

fn post(instance: &Serving, path: &str, token: &str, body: &Value) -> (u16, Value) {
    request(
        &instance.addr,
        "POST",
        path,
        Some(token),
        body.to_string().as_bytes(),
    )
}

fn get(instance: &Serving, path: &str, token: &str) -> (u16, Value) {
    request(&instance.addr, "GET", path, Some(token), b"")
}

/// Every record of the one audit chain the instances share (in the
/// database), as `airlock audit export` writes it.
fn audit(ws: &Workspace) -> Vec<Value> {
    let run = ws.run(&["audit", "export"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The audit records of `event` for approval `id`.
fn audited(ws: &Workspace, event: &str, id: &str) -> Vec<Value> {
    audit(ws)
        .into_iter()
        .filter(|record| record["event"] == event && record["hitl_id"] == id)
        .collect()
}

/// Waits for the SSE events of approval `id` until one named `last` came;
/// their names in order.
fn events_of(
    events: &std::sync::mpsc::Receiver<(String, Value)>,
    id: &str,
    last: &str,
) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let Ok((name, data)) = events.recv_timeout(Duration::from_millis(200)) else {
            continue;
        };
        if data["approval"]["id"] == id {
            seen.push(name.clone());
            if name == last {
                return seen;
            }
        }
    }
    panic!("no {last} event for {id}; saw {seen:?}");
}

#[test]
fn an_agent_proposes_on_one_instance_an_approver_decides_on_another_and_the_call_resumes() {
    let Some(url) = database("instances") else {
        return;
    };
    let ws = workspace(&url, "");
    let a = Serving::start(&ws, &[]);
    let b = Serving::start(&ws, &[]);
    let c = Serving::start(&ws, &[]);
    let watched = subscribe(&c.addr, APPROVER, None);

    // The agent's call waits on A (wait mode).
    let (status, pending) = post(&a, "/v1/tools/call", AGENT, &write_call("b.txt"));
    assert_eq!(status, 202, "{pending}");
    let id = pending["approval_id"].as_str().unwrap().to_owned();
    let store = open_store(&url);
    let approval = store.get(&id).unwrap();
    let waiter = approval.waiter_pid.expect("a waiting call has a holder");
    assert!(store.alive(waiter), "A holds the waiting call");

    // B and C list it; B decides.
    for instance in [&b, &c] {
        let (status, listed) = get(instance, "/hitl/pending", APPROVER);
        assert_eq!(status, 200);
        assert_eq!(listed["approvals"][0]["id"], id.as_str(), "{listed}");
    }
    let (status, decided) = post(
        &b,
        &format!("/hitl/decide/{id}"),
        APPROVER,
        &json!({"decision": "approve"}),
    );
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["status"], "allowed", "{decided}");

    // The call waiting on A has its result; the file is written once.
    let (status, result) = get(&a, &format!("/hitl/result/{id}"), AGENT);
    assert_eq!(
        (status, &result["status"]),
        (200, &json!("allowed")),
        "{result}"
    );
    assert_eq!(ws.read("b.txt").as_deref(), Some("new\n"));
    assert_eq!(audited(&ws, "write_file_apply", &id).len(), 1);
    assert_eq!(audited(&ws, "hitl_decision", &id).len(), 1);
    // C, which took no part, told its subscriber every step.
    let seen = events_of(&watched, &id, "applied");
    assert_eq!(seen, ["created", "decided", "applied"]);
    assert_eq!(store.get(&id).unwrap().status, ApprovalStatus::Applied);
}

#[test]
fn two_approvers_on_two_instances_deciding_at_once_make_one_decision() {
    let Some(url) = database("instances") else {
        return;
    };
    let ws = workspace(&url, "security:\n  hitl:\n    approval_mode: defer\n");
    let a = Serving::start(&ws, &[]);
    let b = Serving::start(&ws, &[]);
    let c = Serving::start(&ws, &[]);
    for round in 0..10 {
        let path = format!("r{round}.txt");
        let (status, pending) = post(&a, "/v1/tools/call", AGENT, &write_call(&path));
        assert_eq!(status, 202, "{pending}");
        let id = pending["approval_id"].as_str().unwrap().to_owned();
        let barrier = std::sync::Barrier::new(2);
        let mut outcomes: Vec<(u16, &str, Value)> = std::thread::scope(|scope| {
            let deciders: Vec<_> = [(&b, APPROVER, "approve"), (&c, ADMIN, "deny")]
                .into_iter()
                .map(|(instance, token, decision)| {
                    let (id, barrier) = (&id, &barrier);
                    scope.spawn(move || {
                        barrier.wait();
                        let (status, answer) = post(
                            instance,
                            &format!("/hitl/decide/{id}"),
                            token,
                            &json!({"decision": decision}),
                        );
                        (status, decision, answer)
                    })
                })
                .collect();
            deciders.into_iter().map(|d| d.join().unwrap()).collect()
        });
        outcomes.sort_by_key(|(status, _, _)| *status);
        let statuses: Vec<u16> = outcomes.iter().map(|(status, _, _)| *status).collect();
        assert_eq!(statuses, [200, 409], "round {round}: {outcomes:?}");
        assert_eq!(
            outcomes[1].2["error"]["code"], "already_decided",
            "{outcomes:?}"
        );
        let winner = outcomes[0].1;
        assert_eq!(
            ws.read(&path).is_some(),
            winner == "approve",
            "{outcomes:?}"
        );
        assert_eq!(audited(&ws, "hitl_decision", &id).len(), 1);
        let applied = audited(&ws, "write_file_apply", &id).len();
        assert_eq!(applied, usize::from(winner == "approve"));
    }
}

#[test]
fn expiry_is_claimed_by_one_instance_per_approval() {
    let Some(url) = database("instances") else {
        return;
    };
    let ws = workspace(
        &url,
        "security:\n  hitl:\n    approval_mode: defer\n    policies:\n      medium: {timeout: 5}\n",
    );
    let a = Serving::start(&ws, &[]);
    let _b = Serving::start(&ws, &[]);
    let _c = Serving::start(&ws, &[]);
    let mut ids = Vec::new();
    for n in 0..20 {
        let (status, pending) = post(
            &a,
            "/v1/tools/call",
            AGENT,
            &write_call(&format!("e{n}.txt")),
        );
        assert_eq!(status, 202, "{pending}");
        ids.push(pending["approval_id"].as_str().unwrap().to_owned());
    }
    // Past every approval's timeout: the three instances' sweeps race.
    ws.advance(6_000);
    let store = open_store(&url);
    let deadline = Instant::now() + Duration::from_secs(20);
    while ids
        .iter()
        .any(|id| store.get(id).unwrap().status == ApprovalStatus::Pending)
    {
        assert!(Instant::now() < deadline, "not all expired");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut timeouts: BTreeMap<String, usize> = BTreeMap::new();
    for record in audit(&ws) {
        if record["event"] == "hitl_timeout" {
            *timeouts
                .entry(record["hitl_id"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    for id in &ids {
        assert_eq!(store.get(id).unwrap().status, ApprovalStatus::Expired);
        assert_eq!(timeouts.get(id), Some(&1), "{id}: {timeouts:?}");
    }
    let expired = store
        .events_after(0, 10_000)
        .unwrap()
        .into_iter()
        .filter(|event| event.kind == EventKind::ApprovalExpired)
        .count();
    assert_eq!(expired, ids.len());
}

#[test]
fn every_instance_appends_to_one_chain_which_verifies_exports_and_shows_tampering() {
    let Some(url) = database("instances") else {
        return;
    };
    let ws = workspace(&url, "security:\n  hitl:\n    approval_mode: defer\n");
    let instances = [
        Serving::start(&ws, &[]),
        Serving::start(&ws, &[]),
        Serving::start(&ws, &[]),
    ];
    // Reads, proposals and decisions on every instance, at once.
    std::thread::scope(|scope| {
        for (n, instance) in instances.iter().enumerate() {
            scope.spawn(move || {
                for round in 0..5 {
                    let read = json!({"tool": "read_file", "arguments": {"path": "a.txt"}});
                    assert_eq!(post(instance, "/v1/tools/call", AGENT, &read).0, 200);
                    let path = format!("i{n}-{round}.txt");
                    let (status, pending) =
                        post(instance, "/v1/tools/call", AGENT, &write_call(&path));
                    assert_eq!(status, 202, "{pending}");
                    let id = pending["approval_id"].as_str().unwrap();
                    let (status, decided) = post(
                        instance,
                        &format!("/hitl/decide/{id}"),
                        APPROVER,
                        &json!({"decision": "approve"}),
                    );
                    assert_eq!(status, 200, "{decided}");
                }
            });
        }
    });
    // No file: the chain is in the database.
    assert!(!ws.path(".airlock/audit.jsonl").exists());
    let records = audit(&ws);
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "one chain, no gap"
    );
    for pair in records.windows(2) {
        assert_eq!(pair[1]["prev_hash"], pair[0]["event_hash"]);
    }
    let applies = records
        .iter()
        .filter(|r| r["event"] == "write_file_apply")
        .count();
    assert_eq!(applies, 15);
    let run = ws.run(&["audit", "verify", "--json"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(run.json["records"], seqs.len(), "{}", run.stdout);
    // The export is the JSONL file it would be: it verifies anywhere.
    let export = ws.path("export.jsonl");
    assert_eq!(
        ws.run(&["audit", "export", export.to_str().unwrap()]).code,
        0
    );
    let report = airlock_audit::verify(&export, None, None).unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.records, seqs.len() as u64);
    // An instance's query and the API see the same chain.
    let query = ws.run(&[
        "audit",
        "query",
        "--event-type",
        "write_file_apply",
        "--json",
    ]);
    assert_eq!(query.json.as_array().unwrap().len(), 15, "{}", query.stdout);
    let (status, listed) = get(&instances[1], "/audit?event_type=hitl_decision", ADMIN);
    assert_eq!(status, 200);
    assert_eq!(listed["records"].as_array().unwrap().len(), 15);

    // A record changed in the database breaks the chain at its seq.
    let name = url.rsplit('/').next().unwrap();
    let server = PgServer::shared();
    server.psql(
        name,
        "UPDATE airlock.audit_records SET line = replace(line, 'a.txt', 'b.txt') WHERE seq = 2",
    );
    let run = ws.run(&["audit", "verify", "--json"]);
    assert_eq!(run.code, 6, "{}{}", run.stdout, run.stderr);
    assert_eq!(run.json["first_bad_seq"], 2, "{}", run.stdout);
    // Put back, then the newest records cut off: the head row says so.
    server.psql(
        name,
        "UPDATE airlock.audit_records SET line = replace(line, 'b.txt', 'a.txt') WHERE seq = 2",
    );
    assert_eq!(ws.run(&["audit", "verify"]).code, 0);
    let last = seqs.len();
    server.psql(
        name,
        &format!(
            "DELETE FROM airlock.audit_records WHERE seq >= {}",
            last - 1
        ),
    );
    let run = ws.run(&["audit", "verify", "--json"]);
    assert_eq!(run.code, 6, "{}{}", run.stdout, run.stderr);
    assert!(
        run.json["problem"]
            .as_str()
            .unwrap_or("")
            .contains("truncat"),
        "{}",
        run.stdout
    );
}

/// An instance stopped for good at `point` of an apply (the test build's
/// `AIRLOCK_TEST_STALL_APPLY`), then killed: another instance finishes the
/// apply (or rolls its journal forward) exactly once, after the lease.
fn an_instance_killed_mid_apply_is_finished_by_another(point: &str, multi_file: bool) {
    let Some(url) = database("instances") else {
        return;
    };
    let ws = workspace(&url, "security:\n  hitl:\n    approval_mode: defer\n");
    let files = ["k1.txt", "src/k2.txt", "src/k3.txt"];
    for file in files {
        ws.write(file, "version 0\n");
    }
    let marker = ws.path("stalled");
    let stall = format!("{point}:{}", marker.display());
    let a = Serving::start(&ws, &[]);
    let mut b = Serving::start_command_with_env(
        &ws,
        &["serve", "--http", "127.0.0.1:0"],
        &[("AIRLOCK_TEST_STALL_APPLY", stall.as_str())],
    );
    let _c = Serving::start(&ws, &[]);
    let call = if multi_file {
        let mut patch = String::from("*** Begin Patch\n");
        for file in files {
            patch.push_str(&format!(
                "*** Update File: {file}\n@@\n-version 0\n+version 1\n"
            ));
        }
        patch.push_str("*** End Patch\n");
        json!({"tool": "apply_patch", "arguments": {"patch": patch}})
    } else {
        json!({"tool": "write_file", "arguments": {"path": files[0], "content": "version 1\n"}})
    };
    let (status, pending) = post(&a, "/v1/tools/call", AGENT, &call);
    assert_eq!(status, 202, "{pending}");
    let id = pending["approval_id"].as_str().unwrap().to_owned();

    // B decides, claims the apply and stops at the point; then it dies.
    let b_addr = b.addr.clone();
    let decide_path = format!("/hitl/decide/{id}");
    std::thread::spawn(move || {
        let body = json!({"decision": "approve"}).to_string();
        let _ = request(
            &b_addr,
            "POST",
            &decide_path,
            Some(APPROVER),
            body.as_bytes(),
        );
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "B never reached {point}");
        std::thread::sleep(Duration::from_millis(20));
    }
    b.kill();
    let killed_at = Instant::now();

    // A or C takes over once B's lease (2 s) has run out.
    let store = open_store(&url);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = store.get(&id).unwrap().status;
        if status == ApprovalStatus::Applied {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{point}: still {status} 30 s after the kill"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        killed_at.elapsed() >= Duration::from_millis(1_500),
        "taken over before the lease ran out"
    );
    let touched: &[&str] = if multi_file { &files } else { &files[..1] };
    for file in touched {
        assert_eq!(
            ws.read(file).as_deref(),
            Some("version 1\n"),
            "{point}: {file}"
        );
    }
    let applies = audited(&ws, "write_file_apply", &id);
    assert_eq!(applies.len(), 1, "{point}: {applies:?}");
    assert_eq!(applies[0]["status"], "allowed", "{point}");
    assert_eq!(audited(&ws, "hitl_decision", &id).len(), 1);
    assert_eq!(ws.run(&["audit", "verify"]).code, 0);
    let open = store
        .pending(None, u64::MAX)
        .unwrap()
        .into_iter()
        .chain(store.history(0, 1000).unwrap())
        .filter(|approval| {
            matches!(
                approval.status,
                ApprovalStatus::Approved | ApprovalStatus::Applying
            )
        })
        .count();
    assert_eq!(open, 0, "{point}: an apply was left half done");
}

#[test]
fn an_instance_killed_after_claiming_an_apply_is_finished_by_another() {
    an_instance_killed_mid_apply_is_finished_by_another("claimed", false);
}

#[test]
fn an_instance_killed_after_writing_but_before_settling_is_finished_once() {
    an_instance_killed_mid_apply_is_finished_by_another("committed", false);
}

#[test]
fn an_instance_killed_past_a_multi_file_commit_point_is_rolled_forward_by_another() {
    an_instance_killed_mid_apply_is_finished_by_another("journaled", true);
}

#[test]
fn a_thousand_concurrent_proposals_across_instances_lose_and_duplicate_nothing() {
    const CALLS: usize = 1_000;
    let Some(url) = database("instances") else {
        return;
    };
    let ws = workspace(
        &url,
        "security:\n  hitl:\n    approval_mode: defer\n    max_pending: 2000\n",
    );
    let instances = [
        Serving::start(&ws, &[]),
        Serving::start(&ws, &[]),
        Serving::start(&ws, &[]),
    ];
    // A reader follows the feed from a cursor the whole time.
    let reader_store = open_store(&url);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (ids, seen) = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut cursor = 0;
            let mut seen = Vec::new();
            loop {
                let done = stop.load(std::sync::atomic::Ordering::SeqCst);
                let events = reader_store.events_after(cursor, 500).unwrap();
                if let Some(last) = events.last() {
                    cursor = last.seq;
                }
                let empty = events.is_empty();
                seen.extend(events);
                if done && empty {
                    return seen;
                }
                if empty {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        });
        // A failing client must not leave the reader running for good.
        let load = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let clients: Vec<_> = (0..30)
                .map(|client| {
                    let instances = &instances;
                    scope.spawn(move || {
                        let mut ids = Vec::new();
                        for call in (client..CALLS).step_by(30) {
                            let instance = &instances[call % 3];
                            let (status, pending) = post(
                                instance,
                                "/v1/tools/call",
                                AGENT,
                                &write_call(&format!("src/load-{call}.txt")),
                            );
                            assert_eq!(status, 202, "{pending}");
                            ids.push(pending["approval_id"].as_str().unwrap().to_owned());
                        }
                        ids
                    })
                })
                .collect();
            let ids: Vec<String> = clients
                .into_iter()
                .flat_map(|client| client.join().unwrap())
                .collect();
            // Every one decided, spread over the instances: each applied once.
            let deciders: Vec<_> = ids
                .chunks(CALLS / 12)
                .enumerate()
                .map(|(n, chunk)| {
                    let instances = &instances;
                    let chunk = chunk.to_vec();
                    scope.spawn(move || {
                        for id in chunk {
                            let (status, decided) = post(
                                &instances[n % 3],
                                &format!("/hitl/decide/{id}"),
                                APPROVER,
                                &json!({"decision": "approve"}),
                            );
                            assert_eq!(status, 200, "{decided}");
                        }
                    })
                })
                .collect();
            for decider in deciders {
                decider.join().unwrap();
            }
            ids
        }));
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let seen = reader.join().unwrap();
        match load {
            Ok(ids) => (ids, seen),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    });
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), CALLS, "an approval per call");
    for call in 0..CALLS {
        assert_eq!(
            ws.read(&format!("src/load-{call}.txt")).as_deref(),
            Some("new\n")
        );
    }
    // The feed: each approval created, decided and applied once, in seq
    // order, as the reader saw it while it was written.
    assert!(seen.windows(2).all(|pair| pair[0].seq < pair[1].seq));
    let store = open_store(&url);
    assert_eq!(store.events_after(0, 100_000).unwrap(), seen);
    for kind in [
        EventKind::ApprovalCreated,
        EventKind::ApprovalDecided,
        EventKind::ApprovalApplied,
    ] {
        let subjects: Vec<&str> = seen
            .iter()
            .filter(|event| event.kind == kind)
            .filter_map(|event| event.subject.as_deref())
            .collect();
        let unique: std::collections::BTreeSet<&str> = subjects.iter().copied().collect();
        assert_eq!((subjects.len(), unique.len()), (CALLS, CALLS), "{kind}");
    }
    // The audit: one proposal, one decision, one apply record each, in one
    // chain that verifies.
    let records = audit(&ws);
    for event in ["write_file_propose", "hitl_decision", "write_file_apply"] {
        let of: Vec<&str> = records
            .iter()
            .filter(|record| record["event"] == event)
            .filter_map(|record| record["hitl_id"].as_str())
            .collect();
        let unique: std::collections::BTreeSet<&str> = of.iter().copied().collect();
        assert_eq!((of.len(), unique.len()), (CALLS, CALLS), "{event}");
    }
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(ws.run(&["audit", "verify"]).code, 0);
}

#[test]
fn a_database_restarted_mid_run_loses_nothing_that_was_answered() {
    if !require("instances", &[Peer::Postgres]) {
        return;
    }
    // A server of its own: this test stops it.
    let server = PgServer::start();
    let url = server.new_database();
    let ws = workspace(
        &url,
        "security:\n  hitl:\n    approval_mode: defer\n    max_pending: 5000\n",
    );
    let instances = [
        Serving::start(&ws, &[]),
        Serving::start(&ws, &[]),
        Serving::start(&ws, &[]),
    ];
    let stop = std::sync::atomic::AtomicBool::new(false);
    let proposed = std::sync::atomic::AtomicUsize::new(0);
    let (answers, refused) = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..12)
            .map(|client| {
                let (instances, stop, proposed) = (&instances, &stop, &proposed);
                scope.spawn(move || {
                    let mut answers = Vec::new();
                    let mut refused = 0;
                    let mut call = 0;
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        call += 1;
                        let path = format!("src/r-{client}-{call}.txt");
                        let (status, body) = post(
                            &instances[call % 3],
                            "/v1/tools/call",
                            AGENT,
                            &write_call(&path),
                        );
                        match status {
                            202 => {
                                proposed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                answers
                                    .push((path, body["approval_id"].as_str().unwrap().to_owned()));
                            }
                            // The database is away: the call is refused,
                            // with its reason, and may be tried again.
                            503 => {
                                assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
                                refused += 1;
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            _ => panic!("{status}: {body}"),
                        }
                    }
                    (answers, refused)
                })
            })
            .collect();
        let wait_for = |count: usize| {
            let deadline = Instant::now() + Duration::from_secs(60);
            while proposed.load(std::sync::atomic::Ordering::SeqCst) < count {
                assert!(Instant::now() < deadline, "stuck at {count}");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        wait_for(60);
        // A crash of the database (no shutdown), and back after a while.
        server.kill();
        std::thread::sleep(Duration::from_millis(1_500));
        server.restart();
        let after = proposed.load(std::sync::atomic::Ordering::SeqCst);
        wait_for(after + 60);
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut answers = Vec::new();
        let mut refused = 0;
        for client in clients {
            let (mine, none) = client.join().unwrap();
            answers.extend(mine);
            refused += none;
        }
        (answers, refused)
    });
    assert!(refused > 0, "the outage was never seen");

    // Every call answered 202 has its approval, once.
    let store = open_store(&url);
    let ids: std::collections::BTreeSet<&str> = answers.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(ids.len(), answers.len());
    for id in &ids {
        assert_eq!(store.get(id).unwrap().status, ApprovalStatus::Pending);
    }
    // A subscriber on C hears B's decisions (the listener reconnected).
    let watched = subscribe(&instances[2].addr, APPROVER, None);
    for (n, (path, id)) in answers.iter().enumerate() {
        let (status, decided) = post(
            &instances[n % 2],
            &format!("/hitl/decide/{id}"),
            APPROVER,
            &json!({"decision": "approve"}),
        );
        assert_eq!(status, 200, "{decided}");
        assert_eq!(ws.read(path).as_deref(), Some("new\n"));
    }
    let (_, last) = answers.last().unwrap();
    events_of(&watched, last, "applied");
    // The feed and the chain: nothing twice, and the chain verifies.
    let events = store.events_after(0, 1_000_000).unwrap();
    assert!(events.windows(2).all(|pair| pair[0].seq < pair[1].seq));
    let mut seen = std::collections::BTreeSet::new();
    for event in &events {
        if let Some(subject) = &event.subject {
            assert!(
                seen.insert((event.kind.as_str(), subject.clone())),
                "twice: {event:?}"
            );
        }
    }
    let records = audit(&ws);
    for (_, id) in &answers {
        for event in ["write_file_propose", "hitl_decision", "write_file_apply"] {
            let count = records
                .iter()
                .filter(|record| record["event"] == event && record["hitl_id"] == id.as_str())
                .count();
            assert_eq!(count, 1, "{event} of {id}");
        }
    }
    assert_eq!(ws.run(&["audit", "verify"]).code, 0);
}

/// `airlock store migrate` of the workspace's state dir into `url`.
fn migrate(ws: &Workspace, url: &str) -> airlock_testkit::Run {
    ws.run(&["store", "migrate", "--from", "sqlite:.airlock", "--to", url])
}

#[test]
fn a_sqlite_state_dir_migrates_into_postgres_with_its_chain_and_undo() {
    let Some(url) = database("instances") else {
        return;
    };
    // A SQLite workspace with history: applied, undone, denied, a grant,
    // and a keyed audit chain.
    let ws = Workspace::new("").with_env("AIRLOCK_AUDIT_KEY", "migration-key");
    ws.write("a.txt", "hello\n");
    let kept = ws.propose("a.txt", "kept\n");
    assert_eq!(ws.run(&["approve", &kept]).code, 0);
    let undone = ws.propose("src/u.txt", "undone\n");
    assert_eq!(ws.run(&["approve", &undone]).code, 0);
    assert_eq!(ws.run(&["undo", &undone]).code, 0);
    let denied = ws.propose("src/d.txt", "no\n");
    assert_eq!(ws.run(&["deny", &denied]).code, 4);
    let granted = ws.propose("src/g.txt", "grant\n");
    assert_eq!(ws.run(&["approve", &granted, "--always"]).code, 0);
    let before = |ws: &Workspace| {
        (
            ws.run(&["history", "--json"]).json,
            ws.run(&["grants", "--json"]).json,
            ws.run(&["audit", "verify", "--json"]).json,
        )
    };
    let (history, grants, verified) = before(&ws);
    assert_eq!(verified["problem"], Value::Null, "{verified}");
    let last_event = airlock_store::Store::open(&ws.path(".airlock/airlock.db"))
        .unwrap()
        .last_event()
        .unwrap();

    let moved = migrate(&ws, &url);
    assert_eq!(moved.code, 0, "{}{}", moved.stdout, moved.stderr);
    assert!(
        moved.stdout.contains("4 approvals") && moved.stdout.contains("1 grants"),
        "{}",
        moved.stdout
    );

    // The chain's head moved with it.
    let original = std::fs::read_to_string(ws.path(".airlock/audit.jsonl")).unwrap();
    let last: Value = serde_json::from_str(original.lines().last().unwrap()).unwrap();
    let head = open_store(&url).audit_chain_head().unwrap().unwrap();
    assert_eq!(
        (json!(head.0), json!(head.1)),
        (last["seq"].clone(), last["event_hash"].clone())
    );
    assert_eq!(last["seq"], verified["last_seq"]);

    // The same workspace on the shared store: the same history and grants,
    // the chain continued (a new configuration is recorded), and undo of an
    // apply made before.
    let config = format!("store:\n  url: \"{url}\"\n  lease: 2s\n");
    ws.write("airlock.yaml", &config);
    let (history_after, grants_after, verified_after) = before(&ws);
    assert_eq!(history_after, history);
    assert_eq!(grants_after, grants);
    assert_eq!(verified_after["problem"], Value::Null, "{verified_after}");
    let exported = ws.run(&["audit", "export"]).stdout;
    assert!(
        exported.starts_with(&original),
        "the copied chain is the file's"
    );
    assert_eq!(ws.run(&["undo", &kept]).code, 0);
    assert_eq!(ws.read("a.txt").as_deref(), Some("hello\n"));
    // New state continues after the copied: events, approvals, the chain.
    let next = ws.propose("src/n.txt", "next\n");
    let store = open_store(&url);
    let created = store
        .events_after(last_event, 100)
        .unwrap()
        .into_iter()
        .find(|event| event.subject.as_deref() == Some(next.as_str()))
        .expect("the new approval's event");
    assert!(created.seq > last_event);
    assert_eq!(ws.run(&["audit", "verify"]).code, 0);

    // A second migration into the database now in use is refused, and
    // changes nothing.
    let approvals = store.history(0, 1_000).unwrap().len() + store.pending(None, 0).unwrap().len();
    let again = migrate(&ws, &url);
    assert_eq!(again.code, 2, "{}{}", again.stdout, again.stderr);
    assert!(
        again.stderr.contains("already holds airlock state"),
        "{}",
        again.stderr
    );
    assert_eq!(
        store.history(0, 1_000).unwrap().len() + store.pending(None, 0).unwrap().len(),
        approvals
    );
    // A chain that does not verify is not copied.
    let empty = PgServer::shared().new_database();
    let log = ws.path(".airlock/audit.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, text.replacen("kept", "KEPT", 1)).unwrap();
    let broken = migrate(&ws, &empty);
    assert_eq!(broken.code, 2, "{}{}", broken.stdout, broken.stderr);
    assert!(
        broken.stderr.contains("does not verify"),
        "{}",
        broken.stderr
    );
    assert!(!open_store(&empty).holds_state().unwrap());
}

#[test]
fn a_webhook_hears_each_event_once_whichever_instances_read_it() {
    let Some(url) = database("instances") else {
        return;
    };
    let (hook, received) = hook_receiver(0);
    let ws = workspace(
        &url,
        &format!(
            "security:\n  hitl:\n    approval_mode: defer\n\
             notify:\n  webhooks:\n    - {{url: \"{hook}\", events: [created, decided]}}\n"
        ),
    );
    let instances = [
        Serving::start(&ws, &[]),
        Serving::start(&ws, &[]),
        Serving::start(&ws, &[]),
    ];
    let mut ids = Vec::new();
    for n in 0..5 {
        let (status, pending) = post(
            &instances[n % 3],
            "/v1/tools/call",
            AGENT,
            &write_call(&format!("src/h{n}.txt")),
        );
        assert_eq!(status, 202, "{pending}");
        let id = pending["approval_id"].as_str().unwrap().to_owned();
        let (status, _) = post(
            &instances[(n + 1) % 3],
            &format!("/hitl/decide/{id}"),
            APPROVER,
            &json!({"decision": "approve"}),
        );
        assert_eq!(status, 200);
        ids.push(id);
    }
    // Ten deliveries (created and applied for each), then nothing more.
    let mut heard: BTreeMap<(String, String), usize> = BTreeMap::new();
    for _ in 0..10 {
        let Ok(body) = received.recv_timeout(Duration::from_secs(20)) else {
            let name = url.rsplit('/').next().unwrap();
            panic!(
                "no delivery after {heard:?}; deliveries: {}",
                PgServer::shared().psql(name, "SELECT * FROM airlock.deliveries")
            );
        };
        let key = (
            body["event"].as_str().unwrap_or("?").to_owned(),
            body["approval"]["id"].as_str().unwrap_or("?").to_owned(),
        );
        *heard.entry(key).or_default() += 1;
    }
    assert!(
        received.recv_timeout(Duration::from_secs(2)).is_err(),
        "a delivery twice: {heard:?}"
    );
    for id in &ids {
        for event in ["created", "decided"] {
            assert_eq!(
                heard.get(&(event.to_owned(), id.clone())),
                Some(&1),
                "{heard:?}"
            );
        }
    }
}

/// Two instances (each its own state dir and key) on one database: one
/// chain, one origin, checkpoints every 4 records signed by whichever
/// instance appended the 4th; each checks against the exported chain with
/// its signer's key, and a record one instance wrote is proved by the other.
#[test]
fn instances_sign_checkpoints_of_the_one_chain_that_check_against_its_export() {
    let Some(url) = database("instances") else {
        return;
    };
    let extra = "audit:\n  checkpoints: {every: 4}\n";
    let (a, b) = (workspace(&url, extra), workspace(&url, extra));
    for round in 0..6 {
        let ws = if round % 2 == 0 { &a } else { &b };
        let run = ws.call("read_file", &json!({"path": "a.txt"}), &[]);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let keys: Vec<String> = [&a, &b]
        .iter()
        .map(|ws| ws.run(&["audit", "key"]).stdout.trim().to_owned())
        .collect();
    assert_ne!(keys[0], keys[1], "each instance has its own key");
    let name = |key: &str| key.split('+').next().unwrap().to_owned();
    assert_eq!(name(&keys[0]), name(&keys[1]), "one log, one origin");
    let list = a.run(&["audit", "checkpoint", "--list", "--json"]);
    assert_eq!(list.code, 0, "{}", list.stderr);
    assert_eq!(
        list.json,
        b.run(&["audit", "checkpoint", "--list", "--json"]).json
    );
    let records = audit(&a).len() as u64;
    let rows = list.json.as_array().unwrap();
    let sizes: Vec<u64> = rows
        .iter()
        .map(|row| row["size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, (1..=records / 4).map(|n| n * 4).collect::<Vec<_>>());

    let away = tempfile::tempdir().unwrap();
    let export = away.path().join("chain.jsonl");
    assert_eq!(
        a.run(&["audit", "export", export.to_str().unwrap()]).code,
        0
    );
    for row in rows {
        let note = row["note"].as_str().unwrap();
        std::fs::write(away.path().join("cp"), note).unwrap();
        // Signed by one of the two keys; checked with that one.
        let signer = keys
            .iter()
            .find(|key| row["key"].as_str().is_some_and(|id| key.starts_with(id)))
            .expect("a checkpoint signed by one of the instances");
        let check = a.run_from(
            away.path(),
            &[
                "audit",
                "verify",
                "--checkpoint",
                "cp",
                "--key",
                signer,
                "--log",
                "chain.jsonl",
            ],
        );
        assert_eq!(check.code, 0, "{}{}", check.stdout, check.stderr);
    }
    // Record 1 (written by instance a) proved by instance b.
    let proof = b.run(&["audit", "prove", "1"]);
    assert_eq!(proof.code, 0, "{}", proof.stderr);
    std::fs::write(away.path().join("proof"), &proof.stdout).unwrap();
    let latest = rows.last().unwrap();
    std::fs::write(away.path().join("cp"), latest["note"].as_str().unwrap()).unwrap();
    let signer = keys
        .iter()
        .find(|key| latest["key"].as_str().is_some_and(|id| key.starts_with(id)))
        .unwrap();
    let check = b.run_from(
        away.path(),
        &[
            "audit",
            "verify",
            "--checkpoint",
            "cp",
            "--key",
            signer,
            "--proof",
            "proof",
        ],
    );
    assert_eq!(check.code, 0, "{}{}", check.stdout, check.stderr);
}

/// Two instances on one database ship the one chain to an HTTP endpoint:
/// one ships at a time (a lease in the database), each record once, in
/// order, also when the shipping instance stops and the other takes over;
/// and both give the same analytics of it.
#[test]
fn instances_ship_the_one_chain_once_and_agree_on_its_stats() {
    let Some(url) = database("instances") else {
        return;
    };
    let (hook, batches) = hook_receiver(0);
    let extra = format!("audit:\n  ship: {{http: \"{hook}\"}}\n");
    let (a, b) = (workspace(&url, &extra), workspace(&url, &extra));
    let mut first = Serving::start(&a, &[]);
    let mut second = Serving::start(&b, &[]);
    let read = json!({"tool": "read_file", "arguments": {"path": "a.txt"}});
    for instance in [&first, &second, &first, &second] {
        assert_eq!(post(instance, "/v1/tools/call", AGENT, &read).0, 200);
    }
    let mut seqs: Vec<u64> = Vec::new();
    let collect = |seqs: &mut Vec<u64>, last: u64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while seqs.last() != Some(&last) {
            let left = deadline.saturating_duration_since(Instant::now());
            let batch = batches.recv_timeout(left).expect("a batch");
            seqs.extend(
                batch
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["seq"].as_u64().unwrap()),
            );
        }
    };
    collect(&mut seqs, audit(&a).len() as u64);
    // Whichever ships, stopping the first hands shipping to the other.
    assert_eq!(first.stop(), Some(0));
    for _ in 0..3 {
        assert_eq!(post(&second, "/v1/tools/call", AGENT, &read).0, 200);
    }
    collect(&mut seqs, audit(&a).len() as u64);
    assert_eq!(second.stop(), Some(0));
    assert!(batches.recv_timeout(Duration::from_millis(500)).is_err());
    let records = audit(&a).len() as u64;
    assert_eq!(seqs, (1..=records).collect::<Vec<_>>());

    let stats = |ws: &Workspace| {
        let run = ws.run(&["stats", "--json"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.json["total"].clone()
    };
    let total = stats(&a);
    assert_eq!(total, stats(&b));
    assert_eq!(total["calls"].as_u64(), Some(7), "{total}");
    assert_eq!(total["allowed"].as_u64(), Some(7), "{total}");
}
