//! The file broker end to end, through the `airlock` binary: spec 000's testing
//! plan (integration and end-to-end lists) and the approval life cycle, with real
//! processes sharing a real SQLite store and audit log.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use airlock_testkit::{Run, Workspace as Ws};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn mkfifo(ws: &Ws, rel: &str) {
    let status = Command::new("mkfifo").arg(ws.path(rel)).status().unwrap();
    assert!(status.success(), "mkfifo {rel}");
}

fn sha(text: &str) -> String {
    airlock_core::canonical::sha256_hex(text.as_bytes())
}

#[test]
fn propose_then_approve_applies_once_and_can_be_undone() {
    let ws = Ws::new("");
    ws.write("notes.md", "old\n");
    let id = ws.propose("notes.md", "new\n");
    assert_eq!(
        ws.read("notes.md").as_deref(),
        Some("old\n"),
        "write_file must only propose"
    );

    let pending = ws.run(&["pending", "--json"]);
    assert_eq!(pending.json.as_array().unwrap().len(), 1);
    assert_eq!(pending.json[0]["id"], id.as_str());
    assert_eq!(pending.json[0]["summary"], "MODIFY notes.md");
    let show = ws.run(&["show", &id]);
    assert!(show.stdout.contains("-old\n+new"), "{}", show.stdout);

    let approve = ws.run(&["approve", &id, "--reason", "looks right"]);
    assert_eq!(approve.code, 0, "{}", approve.stderr);
    assert_eq!(approve.json["status"], "allowed");
    assert_eq!(approve.json["op"]["method"], "fs.apply_patch");
    assert_eq!(approve.json["hitl"]["hitl_id"], id.as_str());
    // Spec 003's receipt: applied, the bytes written, the new mtime as the
    // disk holds it.
    let mtime_ns = {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(ws.path("notes.md")).unwrap();
        meta.mtime() * 1_000_000_000 + meta.mtime_nsec()
    };
    assert_eq!(
        approve.json["data"],
        json!({"path": "notes.md", "created": false, "before_hash": sha("old\n"),
               "after_hash": sha("new\n"), "hitl_id": id, "applied": true,
               "written_bytes": 4, "new_mtime_ns": mtime_ns})
    );
    assert_eq!(
        approve.json["decision"],
        json!({"by": "human", "user": "tester", "channel": "terminal", "reason": "looks right"})
    );
    assert_eq!(ws.read("notes.md").as_deref(), Some("new\n"));

    // One-time use: a second approval is refused and writes nothing again.
    ws.write("notes.md", "edited by hand\n");
    let again = ws.run(&["approve", &id]);
    assert_eq!(again.code, 5);
    assert!(again.stderr.contains("already_decided"), "{}", again.stderr);
    assert_eq!(ws.read("notes.md").as_deref(), Some("edited by hand\n"));

    // Undo refuses while the file no longer holds what the change wrote...
    let conflict = ws.run(&["undo", &id]);
    assert_eq!(conflict.code, 5, "{}", conflict.stdout);
    assert_eq!(conflict.json["error"]["code"], "conflict");
    assert_eq!(ws.read("notes.md").as_deref(), Some("edited by hand\n"));
    // ...and restores the before-content when it does.
    ws.write("notes.md", "new\n");
    let undo = ws.run(&["undo", &id]);
    assert_eq!(undo.code, 0, "{}{}", undo.stdout, undo.stderr);
    assert_eq!(ws.read("notes.md").as_deref(), Some("old\n"));

    assert_eq!(
        ws.audit_events(),
        [
            "config_loaded",
            "write_file_propose",
            "hitl_decision",
            "write_file_apply",
            "undo",
            "undo"
        ]
    );
    let verify = ws.run(&["audit", "verify"]);
    assert_eq!(verify.code, 0, "{}{}", verify.stdout, verify.stderr);
}

#[test]
fn create_workflow_diffs_from_dev_null_and_undo_removes_the_file() {
    let ws = Ws::new("");
    let id = ws.propose("src/new.rs", "fn main() {}\n");
    let show = ws.run(&["show", &id, "--json"]);
    assert!(
        show.json["diff"]
            .as_str()
            .unwrap()
            .starts_with("--- /dev/null\n+++ b/src/new.rs\n")
    );
    assert_eq!(show.json["summary"], "CREATE FILE src/new.rs");
    let approve = ws.run(&["approve", &id]);
    assert_eq!(approve.json["data"]["created"], true);
    assert_eq!(ws.read("src/new.rs").as_deref(), Some("fn main() {}\n"));
    assert_eq!(ws.run(&["undo", &id]).code, 0);
    assert_eq!(ws.read("src/new.rs"), None);
}

#[test]
fn approve_edit_applies_the_version_the_editor_leaves() {
    let ws = Ws::new("");
    ws.write("a.txt", "old\n");
    let id = ws.propose("a.txt", "proposed\n");
    // The "editor" sees the proposed content and replaces a word of it.
    let editor = "sed -i s/proposed/edited/";
    let approve = Run::of(
        &ws.command(&["approve", &id, "--edit"])
            .env("VISUAL", editor)
            .output()
            .unwrap(),
    );
    assert_eq!(approve.code, 0, "{}", approve.stderr);
    assert_eq!(approve.json["data"]["edited"], true);
    assert_eq!(ws.read("a.txt").as_deref(), Some("edited\n"));
    let decision = ws
        .audit()
        .into_iter()
        .find(|r| r["event"] == "hitl_decision")
        .unwrap();
    assert_eq!(decision["edited"], true);

    // An editor that fails decides nothing.
    let id = ws.propose("b.txt", "b\n");
    let failed = Run::of(
        &ws.command(&["approve", &id, "--edit"])
            .env("VISUAL", "false")
            .output()
            .unwrap(),
    );
    assert_eq!(failed.code, 1, "{}", failed.stderr);
    assert!(
        failed.stderr.contains("nothing was decided"),
        "{}",
        failed.stderr
    );
    assert_eq!(ws.run(&["show", &id, "--json"]).json["status"], "pending");
    assert_eq!(ws.read("b.txt"), None);
}

#[test]
fn a_denied_proposal_changes_nothing_and_cannot_be_approved_after() {
    let ws = Ws::new("");
    ws.write("a.txt", "keep\n");
    let id = ws.propose("a.txt", "lose\n");
    let deny = ws.run(&["deny", &id, "--reason", "no"]);
    assert_eq!(deny.code, 4);
    assert_eq!(deny.json["status"], "denied");
    assert_eq!(deny.json["decision"]["by"], "human");
    let approve = ws.run(&["approve", &id]);
    assert_eq!(approve.code, 5);
    assert!(
        approve.stderr.contains("already_decided"),
        "{}",
        approve.stderr
    );
    assert_eq!(ws.read("a.txt").as_deref(), Some("keep\n"));
    let decision = ws
        .audit()
        .into_iter()
        .find(|r| r["event"] == "hitl_decision")
        .unwrap();
    assert_eq!(
        (decision["decision"].as_str(), decision["reason"].as_str()),
        (Some("deny"), Some("no"))
    );
}

#[test]
fn a_file_changed_after_the_proposal_is_stale_on_modify_and_on_create() {
    let ws = Ws::new("");
    ws.write("a.txt", "v1\n");
    let modify = ws.propose("a.txt", "v2\n");
    ws.write("a.txt", "changed underneath\n");
    let run = ws.run(&["approve", &modify]);
    assert_eq!(run.code, 5);
    assert_eq!(run.json["error"]["code"], "stale");
    assert_eq!(ws.read("a.txt").as_deref(), Some("changed underneath\n"));

    let create = ws.propose("fresh.txt", "mine\n");
    ws.write("fresh.txt", "someone else's\n");
    let run = ws.run(&["approve", &create]);
    assert_eq!(run.json["error"]["code"], "stale");
    assert_eq!(ws.read("fresh.txt").as_deref(), Some("someone else's\n"));
    let apply = ws
        .audit()
        .into_iter()
        .filter(|r| r["event"] == "write_file_apply")
        .collect::<Vec<_>>();
    assert_eq!(apply.len(), 2);
    assert!(apply.iter().all(|r| r["code"] == "stale"));
}

#[test]
fn an_expired_proposal_is_denied_as_a_timeout() {
    let ws = Ws::new("file_broker:\n  hitl_ttl_seconds: 1\n");
    let id = ws.propose("a.txt", "x\n");
    ws.advance(1_000);
    let run = ws.run(&["approve", &id]);
    assert_eq!(run.code, 5);
    assert!(run.stderr.contains("expired"), "{}", run.stderr);
    assert_eq!(ws.read("a.txt"), None);
    let timeout = ws
        .audit()
        .into_iter()
        .find(|r| r["event"] == "hitl_timeout")
        .unwrap();
    assert_eq!(timeout["decided_by"], "timeout");
    assert_eq!(ws.run(&["show", &id, "--json"]).json["status"], "expired");
}

#[test]
fn identical_pending_calls_share_an_approval_and_limits_apply() {
    let ws = Ws::new("security:\n  hitl:\n    max_pending_per_session: 2\n");
    let first = ws.propose("a.txt", "x\n");
    assert_eq!(
        ws.propose("a.txt", "x\n"),
        first,
        "an identical call is deduplicated"
    );
    ws.propose("b.txt", "y\n");
    let args = json!({"path": "c.txt", "content": "z"}).to_string();
    let run = ws.run(&[
        "call",
        "write_file",
        "--args",
        &args,
        "--defer",
        "--session",
        "s1",
    ]);
    assert_eq!(run.code, 5);
    assert_eq!(run.json["error"]["code"], "rate_limited");
    // Another session is not limited by this one.
    let run = ws.run(&[
        "call",
        "write_file",
        "--args",
        &args,
        "--defer",
        "--session",
        "s2",
    ]);
    assert_eq!(run.code, 3);
}

#[test]
fn pending_approvals_survive_a_restart_and_a_waiting_call_resumes() {
    let ws = Ws::new("");
    // A call waits in one process; another process approves it.
    let args = json!({"path": "a.txt", "content": "waited\n"}).to_string();
    let child = ws.spawn(&["call", "write_file", "--args", &args, "--session", "s1"]);
    let id = ws.wait_for_pending();
    let approve = ws.run(&["approve", &id]);
    assert_eq!(approve.code, 0, "{}", approve.stderr);
    let waited = Run::of(&child.wait_with_output().unwrap());
    assert_eq!(waited.code, 0, "{}", waited.stderr);
    assert_eq!(waited.json["status"], "allowed");
    assert_eq!(waited.json["hitl"]["hitl_id"], id.as_str());
    assert_eq!(waited.json["decision"]["by"], "human");
    assert!(
        waited.stderr.contains(&format!("airlock approve {id}")),
        "{}",
        waited.stderr
    );
    assert_eq!(ws.read("a.txt").as_deref(), Some("waited\n"));
}

#[test]
fn an_interrupted_waiting_call_cancels_its_approval() {
    let ws = Ws::new("");
    let args = json!({"path": "a.txt", "content": "x"}).to_string();
    let mut child = ws.spawn(&["call", "write_file", "--args", &args]);
    let id = ws.wait_for_pending_of(&mut child);
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let run = Run::of(&child.wait_with_output().unwrap());
    assert_eq!(run.code, 130, "{}{}", run.stderr, run.stdout);
    assert!(
        run.stderr.contains(&format!("interrupted: {id} cancelled")),
        "{}",
        run.stderr
    );
    assert_eq!(ws.run(&["show", &id, "--json"]).json["status"], "cancelled");
    let approve = ws.run(&["approve", &id]);
    assert_eq!(approve.code, 5);
    assert!(
        approve.stderr.contains("already_decided"),
        "{}",
        approve.stderr
    );
    assert_eq!(ws.read("a.txt"), None);
    assert!(ws.audit_events().contains(&"hitl_cancelled".to_owned()));
}

#[test]
fn a_waiting_call_times_out_denied_never_approved() {
    let ws = Ws::new("security:\n  hitl:\n    rules:\n      - {tools: [write_file], timeout: 1}\n");
    let args = json!({"path": "a.txt", "content": "x"}).to_string();
    let mut call = ws.spawn(&["call", "write_file", "--args", &args]);
    // Pending, and waiting; then its second runs out.
    let id = ws.wait_for_pending_of(&mut call);
    assert_eq!(ws.run(&["show", &id, "--json"]).json["tool"], "write_file");
    ws.advance(1_000);
    let run = Run::of(&call.wait_with_output().unwrap());
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert_eq!(run.json["status"], "denied");
    assert_eq!(run.json["error"]["code"], "expired");
    assert_eq!(run.json["decision"]["by"], "timeout");
    assert_eq!(ws.read("a.txt"), None);
}

#[test]
fn yes_approves_at_the_terminal_and_policy_allowed_writes_apply_directly() {
    let ws = Ws::new("");
    let args = json!({"path": "a.txt", "content": "now\n"}).to_string();
    let run = ws.run(&["call", "write_file", "--args", &args, "--yes"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json["decision"]["by"], "human");
    assert_eq!(ws.read("a.txt").as_deref(), Some("now\n"));

    let ws = Ws::new("security:\n  hitl:\n    enabled: false\n");
    let run = ws.run(&["call", "write_file", "--args", &args]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json["decision"]["by"], "policy");
    assert_eq!(ws.read("a.txt").as_deref(), Some("now\n"));
    let apply = ws
        .audit()
        .into_iter()
        .find(|r| r["event"] == "write_file_apply")
        .unwrap();
    assert_eq!(apply["decided_by"], "policy");
}

#[test]
fn always_allow_creates_a_grant_that_the_next_identical_write_uses() {
    let ws = Ws::new("");
    let id = ws.propose("a.txt", "one\n");
    let run = ws.run(&[
        "approve", &id, "--always", "--scope", "session", "--for", "1h",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let args = json!({"path": "a.txt", "content": "two\n"}).to_string();
    let run = ws.run(&["call", "write_file", "--args", &args, "--session", "s1"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json["decision"]["by"], "grant");
    assert_eq!(ws.read("a.txt").as_deref(), Some("two\n"));
    // Another session still asks.
    let run = ws.run(&[
        "call",
        "write_file",
        "--args",
        &args,
        "--session",
        "s2",
        "--defer",
    ]);
    assert_eq!(run.code, 3);
    let events = ws.audit_events();
    assert!(
        events.contains(&"grant_created".to_owned()) && events.contains(&"grant_used".to_owned()),
        "{events:?}"
    );
    // High risk never allows skipping.
    let ws = Ws::new("security:\n  hitl:\n    rules:\n      - {tools: [write_file], risk: high}\n");
    let id = ws.propose("a.txt", "x");
    let run = ws.run(&["approve", &id, "--always"]);
    assert_eq!(run.code, 5);
    assert!(
        run.stderr
            .contains("always-allow is not permitted for high risk"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_critical_approval_needs_a_reason() {
    let ws =
        Ws::new("security:\n  hitl:\n    rules:\n      - {tools: [write_file], risk: critical}\n");
    let id = ws.propose("a.txt", "x");
    // A usage error that names the flag, and nothing is decided.
    let run = ws.run(&["approve", &id]);
    assert_eq!(run.code, 2);
    assert_eq!(
        run.stderr,
        format!(
            "error: approving a critical risk call requires a reason: airlock approve {id} --reason \"why\"\n"
        )
    );
    assert_eq!(ws.run(&["show", &id, "--json"]).json["status"], "pending");
    assert_eq!(ws.run(&["approve", &id, "--reason", "checked"]).code, 0);
}

#[test]
fn reads_are_allowed_and_audited_and_escapes_are_refused() {
    let ws = Ws::new("");
    ws.write("a.txt", "one\ntwo\nthree\n");
    let run = ws.run(&[
        "call",
        "read_file",
        "--args",
        r#"{"path": "a.txt", "start_line": 2}"#,
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.json["op"],
        json!({"method": "fs.read", "path": "a.txt", "tool": "read_file"})
    );
    assert_eq!(run.json["data"]["content"], "two\nthree\n");
    assert_eq!(run.json["data"]["base_hash"], sha("one\ntwo\nthree\n"));
    assert!(
        run.json["audit"]["event_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    for (path, code) in [
        ("../outside", "path_forbidden"),
        ("/etc/passwd", "path_forbidden"),
        (".env", "path_denied"),
        (".airlock/airlock.db", "path_forbidden"),
    ] {
        let args = json!({"path": path}).to_string();
        let run = ws.run(&["call", "read_file", "--args", &args]);
        assert_eq!(
            (run.code, run.json["error"]["code"].as_str()),
            (4, Some(code)),
            "{path}"
        );
    }
    let args = json!({"path": ".git/hooks/pre-commit", "content": "x"}).to_string();
    let run = ws.run(&["call", "write_file", "--args", &args, "--yes"]);
    assert_eq!(run.json["error"]["code"], "path_forbidden");
    let args = json!({"path": "other/new.txt", "content": "x"}).to_string();
    let run = ws.run(&["call", "write_file", "--args", &args, "--defer"]);
    assert_eq!(run.json["error"]["code"], "create_not_allowed");
    let run = ws.run(&["call", "nonexistent_tool"]);
    assert_eq!(run.json["error"]["code"], "unknown_tool");
}

#[test]
fn two_concurrent_deciders_exactly_one_wins() {
    let ws = Ws::new("");
    for round in 0..5 {
        let id = ws.propose(&format!("f{round}.txt"), "x\n");
        let children: Vec<Child> = (0..2)
            .map(|i| ws.spawn(&[if i == 0 { "approve" } else { "deny" }, &id]))
            .collect();
        let runs: Vec<Run> = children
            .into_iter()
            .map(|c| Run::of(&c.wait_with_output().unwrap()))
            .collect();
        let winners = runs.iter().filter(|r| r.code == 0 || r.code == 4).count();
        assert_eq!(
            winners,
            1,
            "{:?}",
            runs.iter()
                .map(|r| (&r.stdout, &r.stderr))
                .collect::<Vec<_>>()
        );
        let losers: Vec<&Run> = runs.iter().filter(|r| r.code == 5).collect();
        assert_eq!(losers.len(), 1);
        assert!(
            losers[0].stderr.contains("already_decided"),
            "{}",
            losers[0].stderr
        );
    }
    assert_eq!(
        ws.audit_events()
            .iter()
            .filter(|e| *e == "hitl_decision")
            .count(),
        5
    );
}

#[test]
fn many_proposals_against_one_file_exactly_one_applies() {
    let ws = Ws::new("security:\n  hitl:\n    max_pending_per_session: 20\n");
    ws.write("shared.txt", "base\n");
    let ids: Vec<String> = (0..8)
        .map(|i| ws.propose("shared.txt", &format!("version {i}\n")))
        .collect();
    let children: Vec<Child> = ids.iter().map(|id| ws.spawn(&["approve", id])).collect();
    let runs: Vec<Run> = children
        .into_iter()
        .map(|c| Run::of(&c.wait_with_output().unwrap()))
        .collect();
    let applied: Vec<&Run> = runs.iter().filter(|r| r.code == 0).collect();
    assert_eq!(
        applied.len(),
        1,
        "{:?}",
        runs.iter().map(|r| &r.stdout).collect::<Vec<_>>()
    );
    for run in runs.iter().filter(|r| r.code != 0) {
        assert_eq!(
            run.json["error"]["code"], "stale",
            "{}{}",
            run.stdout, run.stderr
        );
    }
    let winner = applied[0].json["data"]["after_hash"].as_str().unwrap();
    assert_eq!(sha(&ws.read("shared.txt").unwrap()), winner);
    assert_eq!(ws.run(&["audit", "verify"]).code, 0);
}

#[test]
fn the_audit_chain_continues_across_runs_and_detects_tampering_and_truncation() {
    let ws = Ws::new("");
    ws.write("a.txt", "x\n");
    for _ in 0..3 {
        assert_eq!(
            ws.run(&["call", "read_file", "--args", r#"{"path": "a.txt"}"#])
                .code,
            0
        );
    }
    let records = ws.audit();
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert_eq!(
        records[0]["prev_hash"],
        format!("sha256:{}", "0".repeat(64))
    );
    for pair in records.windows(2) {
        assert_eq!(pair[1]["prev_hash"], pair[0]["event_hash"]);
    }
    let verify = ws.run(&["audit", "verify"]);
    assert_eq!(verify.code, 0, "{}", verify.stdout);

    // Tamper with a middle line: verify names its seq.
    let log = ws.path(".airlock/audit.jsonl");
    let original = std::fs::read_to_string(&log).unwrap();
    let mut lines: Vec<String> = original.lines().map(str::to_owned).collect();
    lines[2] = lines[2].replace("\"path\":\"a.txt\"", "\"path\":\"b.txt\"");
    std::fs::write(&log, format!("{}\n", lines.join("\n"))).unwrap();
    let verify = ws.run(&["audit", "verify"]);
    assert_ne!(verify.code, 0);
    assert!(
        verify.stdout.contains("seq 3") || verify.stderr.contains("seq 3"),
        "{}{}",
        verify.stdout,
        verify.stderr
    );

    // Truncate the tail: the head kept in the store exposes it.
    let lines: Vec<&str> = original.lines().collect();
    std::fs::write(&log, format!("{}\n", lines[..3].join("\n"))).unwrap();
    let verify = ws.run(&["audit", "verify"]);
    assert_ne!(verify.code, 0);
    assert!(
        format!("{}{}", verify.stdout, verify.stderr).contains("truncat"),
        "{}{}",
        verify.stdout,
        verify.stderr
    );
}

#[test]
fn audit_query_filters_by_event_and_field() {
    let ws = Ws::new("");
    let denied = ws.propose("a.txt", "x");
    ws.run(&["deny", &denied]);
    let approved = ws.propose("b.txt", "y");
    ws.run(&["approve", &approved]);
    let run = ws.run(&[
        "audit",
        "query",
        "--event-type",
        "hitl_decision",
        "--filter",
        "decision=deny",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let rows = run.json.as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["hitl_id"], denied.as_str());
    let tail = ws.run(&["audit", "tail"]);
    assert_eq!(tail.code, 0);
    assert!(tail.stdout.lines().count() >= 5, "{}", tail.stdout);
}

#[test]
fn audit_export_writes_the_log_byte_for_byte() {
    let ws = Ws::new("");
    let approved = ws.propose("b.txt", "y");
    ws.run(&["approve", &approved]);
    let log = std::fs::read(ws.path(".airlock/audit.jsonl")).unwrap();
    let to_stdout = ws.run(&["audit", "export"]);
    assert_eq!(to_stdout.code, 0, "{}", to_stdout.stderr);
    assert_eq!(to_stdout.stdout.as_bytes(), log.as_slice());
    let file = ws.path("copy.jsonl");
    let to_file = ws.run(&["audit", "export", file.to_str().unwrap()]);
    assert_eq!(to_file.code, 0, "{}", to_file.stderr);
    assert_eq!(std::fs::read(&file).unwrap(), log);
    let records = log.iter().filter(|&&byte| byte == b'\n').count();
    assert_eq!(
        to_file.stderr.trim(),
        format!("airlock: exported {records} records")
    );
}

#[test]
fn killing_applies_at_random_points_leaves_old_or_new_and_a_verifying_audit() {
    let ws = Ws::new("");
    let contents: Vec<String> = (0..40)
        .map(|i| format!("{i}\n").repeat(2_000 + i * 37))
        .collect();
    ws.write("big.txt", &contents[0]);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut killed = 0;
    for content in &contents[1..] {
        let args = json!({"path": "big.txt", "content": content}).to_string();
        let mut child = ws
            .command(&["call", "write_file", "--args", &args, "--yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_micros(seed % 30_000));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            killed += 1;
        }
        child.wait().unwrap();
        let now = ws.read("big.txt").unwrap();
        assert!(
            contents.contains(&now),
            "big.txt holds neither an old nor a new content"
        );
    }
    assert!(killed > 0, "no run was killed; the test proves nothing");
    // No approval was applied twice.
    let mut applied = std::collections::BTreeMap::<String, usize>::new();
    for record in ws
        .audit()
        .iter()
        .filter(|r| r["event"] == "write_file_apply" && r["status"] == "allowed")
    {
        *applied
            .entry(record["hitl_id"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert!(applied.values().all(|count| *count == 1), "{applied:?}");
    // The next command recovers interrupted applies; the chain verifies.
    let verify = ws.run(&["audit", "verify"]);
    assert_eq!(verify.code, 0, "{}{}", verify.stdout, verify.stderr);
    let pending = ws.run(&["pending", "--json"]);
    assert_eq!(pending.code, 0);
    let db = rusqlite_free_status(&ws);
    assert!(
        !db.contains("applying") && !db.contains("approved"),
        "an apply was left half done: {db}"
    );
}

#[test]
fn killing_multi_file_applies_leaves_every_file_at_the_same_version_after_recovery() {
    let ws = Ws::new("");
    let files = ["a.txt", "src/b.txt", "src/c.txt"];
    let filler: String = (0..20_000).map(|i| format!("filler line {i}\n")).collect();
    for file in files {
        ws.write(file, format!("version 0\n{filler}"));
    }
    let version_of = |file: &str| -> u64 {
        let text = ws.read(file).unwrap();
        let first = text.lines().next().unwrap();
        first.strip_prefix("version ").unwrap().parse().unwrap()
    };
    let patch_to_next = |version: u64| {
        let mut patch = String::from("*** Begin Patch\n");
        for file in files {
            patch.push_str(&format!(
                "*** Update File: {file}\n@@\n-version {version}\n+version {}\n",
                version + 1
            ));
        }
        patch.push_str("*** End Patch\n");
        json!({"patch": patch}).to_string()
    };
    // One run to the end: how long a whole call takes here.
    let started = Instant::now();
    let run = ws.run(&["call", "apply_patch", "--args", &patch_to_next(0), "--yes"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let mut whole = u64::try_from(started.elapsed().as_micros()).unwrap();
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut killed = 0;
    // 25 runs, and more until one was killed: a run that ended before its
    // kill shortens the next wait (the first run, timed above, can be the
    // slowest of all).
    for round in 0..100 {
        if round >= 25 && killed > 0 {
            break;
        }
        let version = version_of("a.txt");
        let args = patch_to_next(version);
        let mut child = ws
            .command(&["call", "apply_patch", "--args", &args, "--yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // Anywhere in the second half of a call, where the apply is.
        std::thread::sleep(Duration::from_micros(whole / 2 + seed % (whole * 3 / 4)));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            killed += 1;
        } else {
            whole = (whole * 3 / 4).max(1_000);
        }
        child.wait().unwrap();
        // The next command finishes whatever the kill interrupted.
        let pending = ws.run(&["pending", "--json"]);
        assert_eq!(pending.code, 0, "{}", pending.stderr);
        let versions: Vec<u64> = files.iter().map(|file| version_of(file)).collect();
        assert!(
            versions.iter().all(|v| *v == versions[0]),
            "files at different versions after recovery: {versions:?}"
        );
    }
    assert!(killed > 0, "no run was killed; the test proves nothing");
    let recovered = ws
        .audit()
        .iter()
        .filter(|r| r["event"] == "journal_recovered")
        .count();
    eprintln!(
        "killed {killed} of 25; version {}; journals recovered: {recovered}",
        version_of("a.txt")
    );
    assert!(
        version_of("a.txt") > 1,
        "no killed-at-random apply went through"
    );
    let verify = ws.run(&["audit", "verify"]);
    assert_eq!(verify.code, 0, "{}{}", verify.stdout, verify.stderr);
    let db = rusqlite_free_status(&ws);
    assert!(
        !db.contains("applying") && !db.contains("approved"),
        "an apply was left half done: {db}"
    );
    // No temporary file stays behind where a commit got past staging.
    let left: Vec<String> = std::fs::read_dir(ws.path(".airlock/journal"))
        .map(|dir| {
            dir.map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|name| name.ends_with(".json"))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(left, Vec::<String>::new(), "journals left behind");
}

/// The statuses of all approvals, through `show --json` of each id in the audit.
fn rusqlite_free_status(ws: &Ws) -> String {
    let ids: std::collections::BTreeSet<String> = ws
        .audit()
        .iter()
        .filter_map(|r| r["hitl_id"].as_str().map(str::to_owned))
        .collect();
    ids.iter()
        .map(|id| {
            ws.run(&["show", id, "--json"]).json["status"]
                .as_str()
                .unwrap_or("?")
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn a_killed_waiting_call_leaves_nothing_anyone_can_apply() {
    let ws = Ws::new("");
    let args = json!({"path": "a.txt", "content": "abandoned\n"}).to_string();
    let mut child = ws.spawn(&["call", "write_file", "--args", &args]);
    let id = ws.wait_for_pending();
    // SIGKILL: no handler runs; the waiter's pid is what tells it is gone.
    child.kill().unwrap();
    child.wait().unwrap();
    let approve = ws.run(&["approve", &id]);
    assert_eq!(approve.code, 5);
    assert!(
        approve.stderr.contains("already_decided") && approve.stderr.contains("cancelled"),
        "{}",
        approve.stderr
    );
    assert_eq!(ws.read("a.txt"), None);
    assert_eq!(ws.run(&["show", &id, "--json"]).json["status"], "cancelled");
    assert!(
        ws.run(&["pending", "--json"])
            .json
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn yes_on_a_risk_that_needs_a_reason_fails_audited_and_leaves_nothing_pending() {
    let ws =
        Ws::new("security:\n  hitl:\n    rules:\n      - {tools: [write_file], risk: critical}\n");
    let args = json!({"path": "a.txt", "content": "x"}).to_string();
    let run = ws.run(&["call", "write_file", "--args", &args, "--yes"]);
    assert_eq!(run.code, 5, "{}", run.stdout);
    assert_eq!(run.json["error"]["code"], "invalid_input");
    assert!(
        run.json["audit"]["event_hash"].is_string(),
        "the failure is audited: {}",
        run.stdout
    );
    assert!(
        ws.run(&["pending", "--json"])
            .json
            .as_array()
            .unwrap()
            .is_empty()
    );
    let run = ws.run(&[
        "call",
        "write_file",
        "--args",
        &args,
        "--yes",
        "--reason",
        "ticket 42",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json["decision"]["reason"], "ticket 42");
}

#[test]
fn a_duplicate_proposal_shows_the_stored_plan_and_is_audited() {
    let ws = Ws::new("");
    ws.write("a.txt", "hello\n");
    let args = json!({"path": "a.txt", "content": "X\n"}).to_string();
    let first = ws.run(&[
        "call",
        "write_file",
        "--args",
        &args,
        "--defer",
        "--session",
        "s1",
    ]);
    assert!(
        first.json["audit"]["event_hash"].is_string(),
        "hitl_required carries its audit record"
    );
    ws.write("a.txt", "other\n");
    let second = ws.run(&[
        "call",
        "write_file",
        "--args",
        &args,
        "--defer",
        "--session",
        "s1",
    ]);
    assert_eq!(
        second.json["hitl"]["hitl_id"],
        first.json["hitl"]["hitl_id"]
    );
    assert_eq!(
        second.json["hitl"]["diff_preview"],
        first.json["hitl"]["diff_preview"]
    );
    assert!(
        second.json["hitl"]["diff_preview"]
            .as_str()
            .unwrap()
            .contains("-hello")
    );
    let proposals: Vec<Value> = ws
        .audit()
        .into_iter()
        .filter(|r| r["event"] == "write_file_propose")
        .collect();
    assert_eq!(proposals.len(), 2);
    assert_eq!(proposals[1]["deduplicated"], true);
}

#[test]
fn sandbox_refusals_from_the_file_system_are_denials() {
    let ws = Ws::new("");
    ws.write(".env", "SECRET=1\n");
    std::os::unix::fs::symlink(".env", ws.path("harmless.txt")).unwrap();
    let run = ws.run(&["call", "read_file", "--args", r#"{"path": "harmless.txt"}"#]);
    assert_eq!(
        (
            run.code,
            run.json["status"].as_str(),
            run.json["error"]["code"].as_str()
        ),
        (4, Some("denied"), Some("path_denied"))
    );
    assert!(!run.stdout.contains("SECRET"));
}

#[test]
fn the_default_config_file_is_protected_when_another_is_in_use() {
    let ws = Ws::new("");
    std::fs::create_dir(ws.path("conf")).unwrap();
    ws.write("conf/airlock.yaml", "");
    let args = json!({"path": "airlock.yaml", "content": "security: {hitl: {enabled: false}}"})
        .to_string();
    let run = ws.run(&[
        "--config",
        "conf/airlock.yaml",
        "call",
        "write_file",
        "--args",
        &args,
        "--yes",
    ]);
    assert_eq!(
        (run.code, run.json["error"]["code"].as_str()),
        (4, Some("path_forbidden")),
        "{}",
        run.stdout
    );
}

#[test]
fn a_repaired_log_stays_reported_by_verify() {
    let ws = Ws::new("");
    ws.write("a.txt", "x\n");
    for _ in 0..4 {
        ws.run(&["call", "read_file", "--args", r#"{"path": "a.txt"}"#]);
    }
    let log = ws.path(".airlock/audit.jsonl");
    let original = std::fs::read_to_string(&log).unwrap();
    let kept: Vec<&str> = original.lines().take(2).collect();
    std::fs::write(&log, format!("{}\n", kept.join("\n"))).unwrap();
    // Later commands continue the chain and record the repair...
    for _ in 0..4 {
        ws.run(&["call", "read_file", "--args", r#"{"path": "a.txt"}"#]);
    }
    assert!(
        ws.audit_events()
            .contains(&"audit_truncated_tail".to_owned())
    );
    // ...and verify keeps saying so.
    let verify = ws.run(&["audit", "verify"]);
    assert_eq!(verify.code, 6, "{}", verify.stdout);
    assert!(
        verify.stdout.contains("repaired") && verify.stdout.contains("audit_truncated_tail"),
        "{}",
        verify.stdout
    );
}

#[test]
fn a_keyed_chain_refuses_to_continue_without_its_key() {
    let ws = Ws::new("");
    ws.write("a.txt", "x\n");
    let keyed = ws
        .command(&["call", "read_file", "--args", r#"{"path": "a.txt"}"#])
        .env("AIRLOCK_AUDIT_KEY", "k3y")
        .output()
        .unwrap();
    assert_eq!(keyed.status.code(), Some(0));
    assert!(
        ws.audit()[0]["event_hash"]
            .as_str()
            .unwrap()
            .starts_with("hmac-sha256:")
    );
    let run = ws.run(&["call", "read_file", "--args", r#"{"path": "a.txt"}"#]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("keyed") && run.stderr.contains("no key"),
        "{}",
        run.stderr
    );
    let verify = ws
        .command(&["audit", "verify"])
        .env("AIRLOCK_AUDIT_KEY", "k3y")
        .output()
        .unwrap();
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

/// Proposes `tool` with `args` (deferred), checks nothing changed, approves it,
/// and returns the hitl id and the approval's envelope.
fn propose_and_approve(ws: &Ws, tool: &str, args: &Value, diff_part: &str) -> (String, Run) {
    let before: Vec<Option<String>> = ["a.txt", "b.txt", "src/c.txt", "src/d.txt"]
        .iter()
        .map(|path| ws.read(path))
        .collect();
    let run = ws.run(&["call", tool, "--args", &args.to_string(), "--defer"]);
    assert_eq!(run.code, 3, "{tool}: {}{}", run.stdout, run.stderr);
    assert_eq!(run.json["status"], "hitl_required");
    assert_eq!(run.json["op"]["tool"], tool);
    let after: Vec<Option<String>> = ["a.txt", "b.txt", "src/c.txt", "src/d.txt"]
        .iter()
        .map(|path| ws.read(path))
        .collect();
    assert_eq!(before, after, "{tool} must only propose");
    let id = run.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let show = ws.run(&["show", &id]);
    assert!(show.stdout.contains(diff_part), "{tool}: {}", show.stdout);
    let approve = ws.run(&["approve", &id, "--reason", "reviewed"]);
    assert_eq!(
        approve.code, 0,
        "{tool}: {}{}",
        approve.stdout, approve.stderr
    );
    assert_eq!(approve.json["status"], "allowed");
    (id, approve)
}

fn tool_workspace() -> Ws {
    let ws = Ws::new("");
    ws.write("a.txt", "alpha\nbeta\ngamma\n");
    ws.write("b.txt", "one\ntwo\n");
    ws.write("src/c.txt", "c\n");
    ws
}

#[test]
fn every_write_tool_proposes_applies_and_undoes_like_write_file() {
    let ws = tool_workspace();
    let edit = json!({"path": "a.txt", "old_string": "beta", "new_string": "BETA"});
    let (edit_id, run) = propose_and_approve(&ws, "edit_file", &edit, "-beta\n+BETA");
    assert_eq!(run.json["data"]["replacements"], 1);
    assert_eq!(
        run.json["data"]["summary_text"],
        "Updated a.txt (1 replacements)"
    );
    assert_eq!(ws.read("a.txt").as_deref(), Some("alpha\nBETA\ngamma\n"));

    let patch = "*** Begin Patch\n*** Update File: b.txt\n@@\n one\n-two\n+TWO\n\
                 *** Add File: src/d.txt\n+dee\n*** Delete File: src/c.txt\n*** End Patch\n";
    let (patch_id, run) = propose_and_approve(
        &ws,
        "apply_patch",
        &json!({"patch": patch}),
        "--- a/src/c.txt\n+++ /dev/null",
    );
    assert_eq!(
        run.json["data"]["changed_paths"],
        json!(["b.txt", "src/c.txt", "src/d.txt"])
    );
    assert_eq!(
        run.json["data"]["ops"],
        json!({"add": 1, "update": 1, "delete": 1, "move": 0})
    );
    assert_eq!(ws.read("b.txt").as_deref(), Some("one\nTWO\n"));
    assert_eq!(ws.read("src/d.txt").as_deref(), Some("dee\n"));
    assert_eq!(ws.read("src/c.txt"), None);

    let (move_id, _) = propose_and_approve(
        &ws,
        "move_file",
        &json!({"from": "src/d.txt", "to": "src/e.txt"}),
        "--- a/src/d.txt\n+++ b/src/e.txt",
    );
    assert_eq!(ws.read("src/d.txt"), None);
    assert_eq!(ws.read("src/e.txt").as_deref(), Some("dee\n"));

    let (delete_id, _) = propose_and_approve(
        &ws,
        "delete_file",
        &json!({"path": "b.txt"}),
        "+++ /dev/null",
    );
    assert_eq!(ws.read("b.txt"), None);

    // Every proposal and apply is in the log under its own tool.
    let applies: Vec<(String, String)> = ws
        .audit()
        .iter()
        .filter(|r| r["event"] == "write_file_apply")
        .map(|r| {
            (
                r["tool"].as_str().unwrap().to_owned(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        applies,
        ["edit_file", "apply_patch", "move_file", "delete_file"]
            .map(|t| (t.to_owned(), "allowed".to_owned()))
            .to_vec()
    );

    // Undo, newest first, puts everything back.
    for id in [&delete_id, &move_id, &patch_id, &edit_id] {
        let undo = ws.run(&["undo", id]);
        assert_eq!(undo.code, 0, "{}{}", undo.stdout, undo.stderr);
    }
    assert_eq!(ws.read("a.txt").as_deref(), Some("alpha\nbeta\ngamma\n"));
    assert_eq!(ws.read("b.txt").as_deref(), Some("one\ntwo\n"));
    assert_eq!(ws.read("src/c.txt").as_deref(), Some("c\n"));
    assert_eq!(ws.read("src/d.txt"), None);
    assert_eq!(ws.read("src/e.txt"), None);
    let verify = ws.run(&["audit", "verify"]);
    assert_eq!(verify.code, 0, "{}", verify.stdout);
}

#[test]
fn a_patch_approved_after_one_of_its_files_changed_applies_nothing() {
    let ws = tool_workspace();
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-alpha\n+ALPHA\n\
                 *** Update File: b.txt\n@@\n-one\n+ONE\n*** End Patch\n";
    let run = ws.run(&[
        "call",
        "apply_patch",
        "--args",
        &json!({"patch": patch}).to_string(),
        "--defer",
    ]);
    assert_eq!(run.code, 3, "{}{}", run.stdout, run.stderr);
    let id = run.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    ws.write("b.txt", "one\ntwo\nthree\n");
    let approve = ws.run(&["approve", &id, "--reason", "ok"]);
    assert_eq!(approve.code, 5, "{}", approve.stdout);
    assert_eq!(approve.json["error"]["code"], "stale");
    assert_eq!(ws.read("a.txt").as_deref(), Some("alpha\nbeta\ngamma\n"));
    assert_eq!(ws.read("b.txt").as_deref(), Some("one\ntwo\nthree\n"));
}

#[test]
fn a_patch_dry_run_writes_nothing_and_asks_nobody() {
    let ws = tool_workspace();
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-alpha\n+ALPHA\n*** End Patch\n";
    let args = json!({"patch": patch, "dry_run": true}).to_string();
    let run = ws.run(&["call", "apply_patch", "--args", &args, "--defer"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert_eq!(run.json["data"]["dry_run"], true);
    assert_eq!(run.json["data"]["changed_paths"], json!(["a.txt"]));
    assert!(
        run.json["data"]["diff"]
            .as_str()
            .unwrap()
            .contains("-alpha\n+ALPHA")
    );
    assert_eq!(ws.read("a.txt").as_deref(), Some("alpha\nbeta\ngamma\n"));
    let pending = ws.run(&["pending", "--json"]);
    assert_eq!(pending.json, json!([]));
}

#[test]
fn proposal_status_follows_an_approval_within_its_session() {
    let ws = Ws::new("");
    let id = ws.propose("notes.md", "new\n");
    let status = |session: &str, args: &Value| {
        ws.run(&[
            "call",
            "proposal_status",
            "--args",
            &args.to_string(),
            "--session",
            session,
        ])
    };
    let pending = status("s1", &json!({"hitl_id": id}));
    assert_eq!(pending.code, 0, "{}{}", pending.stdout, pending.stderr);
    assert_eq!(pending.json["data"]["status"], "pending");
    assert_eq!(pending.json["data"]["summary"], "CREATE FILE notes.md");
    assert_eq!(pending.json["data"]["result"], Value::Null);
    let approve = ws.run(&["approve", &id]);
    assert_eq!(approve.code, 0, "{}", approve.stderr);
    let applied = status("s1", &json!({"hitl_id": id}));
    assert_eq!(applied.json["data"]["status"], "applied");
    assert_eq!(applied.json["data"]["decided_by"], "human");
    assert_eq!(applied.json["data"]["result"]["status"], "allowed");
    assert_eq!(
        applied.json["data"]["result"]["data"]["after_hash"],
        sha("new\n")
    );
    // Another session's approvals are as unknown as made-up ids, and so are
    // another principal's in the same session.
    let other = status("s2", &json!({"hitl_id": id}));
    assert_eq!(other.json["error"]["code"], "not_found");
    for who in [["--user", "mallory"], ["--agent", "mallory"]] {
        let args = json!({"hitl_id": id}).to_string();
        let theirs = ws.run(&[
            "call",
            "proposal_status",
            "--args",
            &args,
            "--session",
            "s1",
            who[0],
            who[1],
        ]);
        assert_eq!(
            theirs.json["error"]["code"], "not_found",
            "{}",
            theirs.stdout
        );
    }
    let unknown = status("s1", &json!({"hitl_id": "hitl-nope"}));
    assert_eq!(unknown.json["error"]["code"], "not_found");
    let bad = status("s1", &json!({"id": id}));
    assert_eq!(bad.json["error"]["code"], "invalid_input");
}

/// What an agent may put in a name, a diff, a session or a reason to act on
/// the approver's terminal: erase a line, move up, overwrite from the start
/// of the line, an 8-bit CSI, an OSC title, a bidi override.
const HOSTILE_NAME: &str = "e\u{1b}[2K\u{1b}[1Avil\r\u{9b}31m\u{202e}hs.txt";
const HOSTILE_CONTENT: &str = "fine\n\u{1b}[1A\u{1b}[2K+ nothing to see\rapproved\u{2066}\n";
const HOSTILE_SESSION: &str = "s\u{1b}]0;owned\u{7}\u{7f}";

/// Whether `text` holds a character that acts on a terminal, besides the
/// newlines (and tabs) of the text itself.
fn acts_on_a_terminal(text: &str) -> Option<char> {
    text.chars()
        .find(|&c| c != '\n' && c != '\t' && airlock_core::display::is_unsafe(c))
}

#[test]
fn hostile_names_diffs_sessions_and_reasons_reach_the_terminal_as_visible_escapes() {
    let ws = Ws::new("");
    let args = json!({"path": HOSTILE_NAME, "content": HOSTILE_CONTENT}).to_string();
    let call = ws.run(&[
        "call",
        "write_file",
        "--args",
        &args,
        "--defer",
        "--session",
        HOSTILE_SESSION,
    ]);
    assert_eq!(call.code, 3, "{}{}", call.stdout, call.stderr);
    let pending_id = call.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let second = json!({"path": "b.txt", "content": "b\n"}).to_string();
    let denied = ws.run(&["call", "write_file", "--args", &second, "--defer"]);
    let denied_id = denied.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let deny = ws.run(&["deny", &denied_id, "--reason", "no\u{1b}[2J\u{202e}"]);
    assert_eq!(deny.code, 4, "{}", deny.stderr);

    let outputs = [
        ("call", call.stdout.clone()),
        ("pending", ws.run(&["pending"]).stdout),
        ("pending --json", ws.run(&["pending", "--json"]).stdout),
        ("show", ws.run(&["show", &pending_id]).stdout),
        (
            "show --json",
            ws.run(&["show", &pending_id, "--json"]).stdout,
        ),
        ("show (denied)", ws.run(&["show", &denied_id]).stdout),
        ("audit query", ws.run(&["audit", "query"]).stdout),
        (
            "audit query --json",
            ws.run(&["audit", "query", "--json"]).stdout,
        ),
        ("audit tail", ws.run(&["audit", "tail", "-n", "50"]).stdout),
    ];
    for (what, text) in &outputs {
        assert_eq!(acts_on_a_terminal(text), None, "{what} printed:\n{text}");
    }
    // Shown, not hidden: the escapes are visible.
    let show = &outputs[3].1;
    assert!(show.contains(r"\x1b[2K"), "{show}");
    assert!(show.contains("<U+202E>"), "{show}");
    assert!(show.contains(r"\rapproved"), "{show}");
    assert!(
        outputs[5].1.contains(r"no\x1b[2J<U+202E>"),
        "{}",
        outputs[5].1
    );
    // One line per approval: a name cannot pose as a line of its own.
    let pending = &outputs[1].1;
    assert_eq!(pending.lines().count(), 2, "{pending}");
    // JSON stays the same JSON: the exact name and session come back.
    let listed: Value = serde_json::from_str(&outputs[2].1).unwrap();
    assert_eq!(listed[0]["path"], HOSTILE_NAME);
    assert_eq!(listed[0]["session"], HOSTILE_SESSION);
    let envelope: Value = serde_json::from_str(&call.stdout).unwrap();
    assert_eq!(envelope["op"]["path"], HOSTILE_NAME);
    for line in outputs[8].1.lines() {
        serde_json::from_str::<Value>(line).unwrap();
    }
}

#[test]
fn fifos_named_like_ignore_files_or_matched_by_a_search_hang_nothing() {
    let ws = Ws::new("");
    ws.write("a.txt", "needle\n");
    std::fs::create_dir_all(ws.path("sub")).unwrap();
    std::fs::create_dir_all(ws.path(".git/info")).unwrap();
    ws.write("sub/b.txt", "needle too\n");
    for fifo in [
        ".gitignore",
        ".ignore",
        "sub/.gitignore",
        ".git/info/exclude",
        "data.txt",
        "sub/pipe.txt",
    ] {
        mkfifo(&ws, fifo);
    }
    let call = |tool: &str, args: Value| {
        let args = args.to_string();
        ws.run_within(&["call", tool, "--args", &args, "--defer"], 20)
    };
    let grep = call("grep", json!({"pattern": "needle"}));
    assert_eq!(grep.json["status"], "allowed", "{}", grep.stdout);
    assert_eq!(
        grep.json["data"]["matches"], "a.txt:1:needle\nsub/b.txt:1:needle too",
        "{}",
        grep.stdout
    );
    let glob = call("glob", json!({"pattern": "**/*.txt"}));
    assert_eq!(glob.json["status"], "allowed", "{}", glob.stdout);
    let mut found: Vec<&str> = glob.json["data"]["paths"]
        .as_str()
        .unwrap()
        .lines()
        .collect();
    found.sort_unstable();
    assert_eq!(found, ["a.txt", "sub/b.txt"], "FIFOs are not files");
    assert_eq!(call("list_dir", json!({})).json["status"], "allowed");
    // Named directly, a FIFO is refused, never opened to wait for a writer.
    for (tool, args) in [
        ("read_file", json!({"path": "data.txt"})),
        ("read_file", json!({"path": ".gitignore"})),
        ("grep", json!({"pattern": "x", "path": "data.txt"})),
        (
            "edit_file",
            json!({"path": "data.txt", "old_string": "a", "new_string": "b"}),
        ),
        ("write_file", json!({"path": "data.txt", "content": "x"})),
        ("delete_file", json!({"path": "sub/pipe.txt"})),
        (
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Update File: data.txt\n@@\n-a\n+b\n*** End Patch\n"}),
        ),
    ] {
        let run = call(tool, args);
        assert_eq!(run.json["status"], "error", "{tool}: {}", run.stdout);
        let message = run.json["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains("is not a regular file"),
            "{tool}: {}",
            run.stdout
        );
    }
    assert_eq!(ws.run(&["pending", "--json"]).json, json!([]));
}

/// Whether any file under the workspace (outside the state dir) is a
/// staging file.
fn staging_files(ws: &Ws) -> Vec<String> {
    fn walk(dir: &std::path::Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == ".airlock" {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), found);
            } else if name.starts_with(".airlock-tmp-") {
                found.push(entry.path().display().to_string());
            }
        }
    }
    let mut found = Vec::new();
    walk(ws.root(), &mut found);
    found
}

#[test]
fn a_write_killed_while_staging_leaves_no_staging_file_once_airlock_runs_again() {
    let ws = Ws::new("");
    // Many files: each is staged (and synced) before the journal is written.
    let mut patch = String::from("*** Begin Patch\n");
    for i in 0..150 {
        patch.push_str(&format!("*** Add File: src/f{i}.txt\n+file {i}\n"));
    }
    patch.push_str("*** End Patch\n");
    let args = json!({"patch": patch}).to_string();
    let mut caught = false;
    for _ in 0..60 {
        let mut child = ws
            .command(&["call", "apply_patch", "--args", &args, "--yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // SIGKILL the moment a staging file exists: no handler runs.
        while child.try_wait().unwrap().is_none() {
            if std::fs::read_dir(ws.path("src"))
                .unwrap()
                .flatten()
                .any(|entry| {
                    entry
                        .file_name()
                        .to_string_lossy()
                        .starts_with(".airlock-tmp-")
                })
            {
                child.kill().unwrap();
                break;
            }
        }
        child.wait().unwrap();
        if !staging_files(&ws).is_empty() {
            caught = true;
            break;
        }
        for i in 0..150 {
            let _ = std::fs::remove_file(ws.path(&format!("src/f{i}.txt")));
        }
    }
    assert!(
        caught,
        "no run was killed while staging; the test proves nothing"
    );
    // The next command, whatever it is, clears airlock's own debris.
    let pending = ws.run(&["pending", "--json"]);
    assert_eq!(pending.code, 0, "{}", pending.stderr);
    assert_eq!(staging_files(&ws), Vec::<String>::new());
    // A name that only looks like a staging file is not airlock's to remove,
    // but no search or listing ever shows such names.
    let lookalike = ".airlock-tmp-0123456789abcdef0123456789abcdef";
    ws.write(&format!("src/{lookalike}"), "needle\n");
    ws.write("src/real.txt", "needle\n");
    let grep = ws.run(&["call", "grep", "--args", r#"{"pattern": "needle"}"#]);
    assert_eq!(
        grep.json["data"]["matches"], "src/real.txt:1:needle",
        "{}",
        grep.stdout
    );
    let glob = ws.run(&["call", "glob", "--args", r#"{"pattern": "**/*"}"#]);
    assert!(!glob.stdout.contains(lookalike), "{}", glob.stdout);
    let list = ws.run(&["call", "list_dir", "--args", r#"{"path": "src"}"#]);
    assert!(!list.stdout.contains(lookalike), "{}", list.stdout);
    assert!(ws.path(&format!("src/{lookalike}")).exists());
}

#[test]
fn hard_links_are_neither_read_nor_written_unless_allowed_and_never_to_protected_files() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "s3cret\n").unwrap();
    let link = |ws: &Ws, from: &std::path::Path, to: &str| {
        std::fs::hard_link(from, ws.path(to)).unwrap();
    };
    let call = |ws: &Ws, tool: &str, args: Value| {
        let args = args.to_string();
        ws.run(&["call", tool, "--args", &args, "--defer"])
    };

    // By default: no hard-linked file is read, searched, or written.
    let ws = Ws::new("");
    link(&ws, &outside.path().join("secret.txt"), "link.txt");
    for (tool, args) in [
        ("read_file", json!({"path": "link.txt"})),
        ("grep", json!({"pattern": "s3cret", "path": "link.txt"})),
        ("write_file", json!({"path": "link.txt", "content": "x\n"})),
        (
            "edit_file",
            json!({"path": "link.txt", "old_string": "s3cret", "new_string": "x"}),
        ),
        ("delete_file", json!({"path": "link.txt"})),
    ] {
        let run = call(&ws, tool, args);
        assert_eq!(
            run.json["error"]["code"], "path_forbidden",
            "{tool}: {}",
            run.stdout
        );
        assert!(run.stdout.contains("hard links"), "{tool}: {}", run.stdout);
    }
    let grep = call(&ws, "grep", json!({"pattern": "s3cret"}));
    assert_eq!(grep.json["data"]["match_count"], 0, "{}", grep.stdout);
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "s3cret\n"
    );

    // A link made after the proposal is caught when the change is applied.
    ws.write("plain.txt", "old\n");
    let id = ws.propose("plain.txt", "new\n");
    std::fs::hard_link(ws.path("plain.txt"), outside.path().join("alias.txt")).unwrap();
    let approve = ws.run(&["approve", &id]);
    assert_ne!(approve.code, 0, "{}", approve.stdout);
    assert!(
        approve.stdout.contains("hard links"),
        "{}{}",
        approve.stdout,
        approve.stderr
    );
    assert_eq!(ws.read("plain.txt").as_deref(), Some("old\n"));

    // Allowed: links to ordinary files work; links to protected files never.
    let ws = Ws::new("file_broker:\n  allow_hardlinks: true\n");
    link(&ws, &outside.path().join("secret.txt"), "link.txt");
    let read = call(&ws, "read_file", json!({"path": "link.txt"}));
    assert_eq!(read.json["data"]["content"], "s3cret\n", "{}", read.stdout);
    assert_eq!(ws.run(&["audit", "verify"]).code, 0);
    link(&ws, &ws.path(".airlock/audit.jsonl"), "log.txt");
    link(&ws, &ws.path("airlock.yaml"), "config.txt");
    let log = call(&ws, "read_file", json!({"path": "log.txt"}));
    assert_eq!(
        log.json["error"]["code"], "path_forbidden",
        "{}",
        log.stdout
    );
    assert!(log.stdout.contains("protected file"), "{}", log.stdout);
    let grep = call(&ws, "grep", json!({"pattern": "event_hash"}));
    assert_eq!(grep.json["data"]["match_count"], 0, "{}", grep.stdout);
    // The configuration may be read, never written, under any name.
    let config = call(&ws, "read_file", json!({"path": "config.txt"}));
    assert_eq!(config.json["status"], "allowed", "{}", config.stdout);
    let write = call(
        &ws,
        "write_file",
        json!({"path": "config.txt", "content": "x: 1\n"}),
    );
    assert_eq!(
        write.json["error"]["code"], "path_forbidden",
        "{}",
        write.stdout
    );
    assert!(write.stdout.contains("protected file"), "{}", write.stdout);
}

/// Runs `airlock ARGS` under a python3 parent that reports the child's peak
/// resident memory: (the run, peak RSS in bytes).
fn run_measured(ws: &Ws, args: &[&str]) -> (Run, u64) {
    const REPORT: &str = "import resource, subprocess, sys\n\
        done = subprocess.run(sys.argv[1:])\n\
        sys.stderr.write('\\nmaxrss_kb=%d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n\
        sys.exit(done.returncode)\n";
    let bin = airlock_testkit::bin();
    let mut all = vec!["-c", REPORT, bin.to_str().unwrap()];
    all.extend_from_slice(args);
    let run = Run::of(&ws.command_of(Path::new("python3"), &all).output().unwrap());
    let kb: u64 = run
        .stderr
        .rsplit("maxrss_kb=")
        .next()
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or_else(|| panic!("no memory report: {}", run.stderr));
    (run, kb * 1024)
}

#[test]
fn proposals_on_a_300_mb_file_are_too_large_before_it_is_read_and_every_call_stays_under_100_mb() {
    if !airlock_testkit::peers::require(
        "proposals_on_a_300_mb_file_are_too_large_before_it_is_read_and_every_call_stays_under_100_mb",
        &[airlock_testkit::peers::Peer::Python3],
    ) {
        return;
    }
    let ws = Ws::new("");
    let big = std::fs::File::create(ws.path("big.bin")).unwrap();
    big.set_len(300 << 20).unwrap();
    drop(big);
    ws.write("small.txt", "needle\n");
    let limit = 100u64 << 20;
    for (tool, args) in [
        ("write_file", json!({"path": "big.bin", "content": "x"})),
        ("delete_file", json!({"path": "big.bin"})),
        (
            "edit_file",
            json!({"path": "big.bin", "old_string": "a", "new_string": "b"}),
        ),
        ("move_file", json!({"from": "big.bin", "to": "moved.bin"})),
        (
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Update File: big.bin\n@@\n-a\n+b\n*** End Patch\n"}),
        ),
        (
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Delete File: big.bin\n*** End Patch\n"}),
        ),
    ] {
        let args = args.to_string();
        let (run, peak) = run_measured(&ws, &["call", tool, "--args", &args, "--defer"]);
        assert_eq!(
            run.json["error"]["code"], "too_large",
            "{tool}: {}",
            run.stdout
        );
        assert!(peak < limit, "{tool} peaked at {} MB", peak >> 20);
    }
    // Reads and searches stream: the file is hashed and searched in pieces.
    for (tool, args) in [
        (
            "read_file",
            json!({"path": "big.bin", "encoding": "bytes", "max_bytes": 100}),
        ),
        ("grep", json!({"pattern": "needle"})),
        ("stat", json!({"path": "big.bin"})),
    ] {
        let args = args.to_string();
        let (run, peak) = run_measured(&ws, &["call", tool, "--args", &args]);
        assert_eq!(run.json["status"], "allowed", "{tool}: {}", run.stdout);
        assert!(peak < limit, "{tool} peaked at {} MB", peak >> 20);
    }
    // Nothing was proposed or kept.
    assert_eq!(ws.run(&["pending", "--json"]).json, json!([]));
    let stored = std::fs::metadata(ws.path(".airlock/airlock.db"))
        .unwrap()
        .len();
    assert!(stored < 1 << 20, "the store grew to {stored} bytes");
    assert_eq!(
        std::fs::metadata(ws.path("big.bin")).unwrap().len(),
        300 << 20
    );
}

#[test]
fn the_diff_of_a_large_text_file_names_both_sides_by_hash_and_size() {
    let ws = Ws::new("file_broker:\n  max_write_bytes_hard: 4194304\n");
    let text = "a line of text\n".repeat(140_000);
    ws.write("large.txt", &text);
    let args = json!({"path": "large.txt"}).to_string();
    let run = ws.run(&["call", "delete_file", "--args", &args, "--defer"]);
    assert_eq!(run.json["status"], "hitl_required", "{}", run.stdout);
    let id = run.json["hitl"]["hitl_id"].as_str().unwrap();
    let shown = ws.run(&["show", id, "--json"]);
    assert_eq!(
        shown.json["diff"],
        format!(
            "--- a/large.txt\n+++ /dev/null\nLarge content differs: {} ({} bytes) -> nothing\n",
            sha(&text),
            text.len()
        )
    );
}

#[test]
fn every_rule_is_decided_on_the_resolved_path_too_and_the_diff_names_the_real_file() {
    let ws = Ws::new(
        "security:\n  hitl:\n    rules:\n      \
         - {tools: [read_file, grep, glob, list_dir], conditions: [{param: path, glob: \"secret/**\"}], decision: deny}\n      \
         - {tools: [read_file, grep, glob, list_dir], conditions: [{param: path, glob: secret}], decision: deny}\n      \
         - {tools: [write_file, edit_file, delete_file, read_file, grep, glob, list_dir], conditions: [{param: path, glob: \"docs/**\"}], require_approval: false}\n      \
         - {tools: [move_file], conditions: [{param: from, glob: \"docs/**\"}], require_approval: false}\n",
    );
    std::fs::create_dir_all(ws.path("docs")).unwrap();
    std::fs::create_dir_all(ws.path("secret")).unwrap();
    ws.write("src/main.rs", "fn main() {}\n");
    ws.write("secret/key.txt", "k3y\n");
    ws.write("docs/guide.md", "guide\n");
    std::os::unix::fs::symlink("../src", ws.path("docs/link")).unwrap();
    std::os::unix::fs::symlink("../secret", ws.path("docs/sec")).unwrap();
    let call = |tool: &str, args: Value| {
        let args = args.to_string();
        ws.run(&["call", tool, "--args", &args, "--defer"])
    };
    // What the rule on docs/** allows as written is decided again where it
    // really lands: src/ asks, secret/ is denied.
    let write = call(
        "write_file",
        json!({"path": "docs/link/main.rs", "content": "pwned\n"}),
    );
    assert_eq!(write.json["status"], "hitl_required", "{}", write.stdout);
    assert_eq!(ws.read("src/main.rs").as_deref(), Some("fn main() {}\n"));
    let id = write.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let shown = ws.run(&["show", &id, "--json"]);
    assert!(
        shown.json["diff"]
            .as_str()
            .unwrap()
            .starts_with("--- a/src/main.rs\n+++ b/src/main.rs\n"),
        "{}",
        shown.stdout
    );
    assert_eq!(
        shown.json["summary"],
        "MODIFY docs/link/main.rs (-> src/main.rs)"
    );
    let edit = call(
        "edit_file",
        json!({"path": "docs/link/main.rs", "old_string": "main", "new_string": "x"}),
    );
    assert_eq!(edit.json["status"], "hitl_required", "{}", edit.stdout);
    // A delete or move through a link is refused outright (it names the
    // file itself); either way nothing is allowed as written.
    for (tool, args) in [
        ("delete_file", json!({"path": "docs/link/main.rs"})),
        (
            "move_file",
            json!({"from": "docs/link/main.rs", "to": "docs/moved.rs"}),
        ),
    ] {
        let run = call(tool, args);
        assert_ne!(run.json["status"], "allowed", "{tool}: {}", run.stdout);
    }
    assert_eq!(ws.read("src/main.rs").as_deref(), Some("fn main() {}\n"));
    for (tool, args) in [
        ("read_file", json!({"path": "docs/sec/key.txt"})),
        ("grep", json!({"pattern": "k3y", "path": "docs/sec"})),
        ("glob", json!({"pattern": "*", "path": "docs/sec"})),
        ("list_dir", json!({"path": "docs/sec"})),
    ] {
        let run = call(tool, args);
        assert_eq!(run.json["status"], "denied", "{tool}: {}", run.stdout);
        assert_eq!(
            run.json["error"]["code"], "policy_denied",
            "{tool}: {}",
            run.stdout
        );
    }
    // As written and as resolved alike, the rule still allows what it names.
    let plain = call(
        "write_file",
        json!({"path": "docs/guide.md", "content": "new guide\n"}),
    );
    assert_eq!(plain.json["status"], "allowed", "{}", plain.stdout);

    // A grant for one file does not follow a symlink put in its place.
    let patch = |path: &str, from: &str, to: &str| json!({"patch": format!("*** Begin Patch\n*** Update File: {path}\n@@\n-{from}\n+{to}\n*** End Patch\n")});
    let first = call(
        "apply_patch",
        patch("docs/guide.md", "new guide", "guide 2"),
    );
    let first_id = first.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let approve = ws.run(&["approve", &first_id, "--always", "--scope", "persistent"]);
    assert_eq!(approve.code, 0, "{}{}", approve.stdout, approve.stderr);
    let granted = call("apply_patch", patch("docs/guide.md", "guide 2", "guide 3"));
    assert_eq!(granted.json["status"], "allowed", "{}", granted.stdout);
    std::fs::remove_file(ws.path("docs/guide.md")).unwrap();
    std::os::unix::fs::symlink("../src/main.rs", ws.path("docs/guide.md")).unwrap();
    let through = call(
        "apply_patch",
        patch("docs/guide.md", "fn main() {}", "pwned"),
    );
    assert_eq!(
        through.json["status"], "hitl_required",
        "{}",
        through.stdout
    );
    assert_eq!(ws.read("src/main.rs").as_deref(), Some("fn main() {}\n"));
}

/// Grants end by default (approvals.grant_ttl), are listed, and are revoked
/// one by one (by a prefix of the id) or all at once, each revocation audited.
#[test]
fn grants_expire_by_default_and_are_listed_and_revoked() {
    let ws = Ws::new("approvals:\n  grant_ttl: 2h\n");
    let first = ws.propose("a.txt", "one\n");
    let before = system_ms();
    let run = ws.run(&["approve", &first, "--always", "--scope", "persistent"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let second = ws.propose("b.txt", "two\n");
    assert_eq!(ws.run(&["approve", &second, "--always"]).code, 0);
    let listed = ws.run(&["grants", "--json"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let grants = listed.json.as_array().unwrap().clone();
    assert_eq!(grants.len(), 2, "{}", listed.stdout);
    for grant in &grants {
        // Two hours from the approval, though neither approval said --for.
        let expires = grant["expires_ms"].as_u64().unwrap();
        let two_hours = 2 * 3_600_000;
        assert!(
            expires >= before + two_hours && expires <= system_ms() + two_hours,
            "{grant}"
        );
        assert!(grant["created_by"].is_string(), "{grant}");
    }
    assert_eq!(grants[0]["tool"], "write_file");
    assert_eq!(grants[0]["path_glob"], "a.txt");
    assert_eq!(grants[0]["scope"], "persistent");
    let table = ws.run(&["grants"]);
    assert!(
        table.stdout.contains("a.txt") && table.stdout.contains("b.txt"),
        "{}",
        table.stdout
    );

    // Revoked by a prefix of its id: the next such write asks again.
    let id = grants[0]["id"].as_str().unwrap();
    let run = ws.run(&["grants", "revoke", &id[..id.len() - 4]]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout.trim(), format!("revoked {id}"));
    let args = json!({"path": "a.txt", "content": "three\n"}).to_string();
    let asked = ws.run(&[
        "call",
        "write_file",
        "--args",
        &args,
        "--session",
        "s1",
        "--defer",
    ]);
    assert_eq!(asked.code, 3, "{}", asked.stdout);
    let revoked: Vec<Value> = ws
        .audit()
        .into_iter()
        .filter(|record| record["event"] == "grant_revoked")
        .collect();
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0]["grant_id"], id);
    assert_eq!(revoked[0]["channel"], "terminal");
    assert!(revoked[0]["decided_by"].is_string());

    // Unknown ids change nothing; --all takes the rest.
    let missing = ws.run(&["grants", "revoke", "grant-nope"]);
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("not_found"), "{}", missing.stderr);
    let all = ws.run(&["grants", "revoke", "--all", "--json"]);
    assert_eq!(all.code, 0, "{}", all.stderr);
    assert_eq!(all.json["revoked"].as_array().unwrap().len(), 1);
    assert_eq!(ws.run(&["grants", "--json"]).json, json!([]));
    assert_eq!(
        ws.audit_events()
            .iter()
            .filter(|event| *event == "grant_revoked")
            .count(),
        2
    );

    // A grant_ttl that is no duration is a configuration error.
    let bad = Ws::new("approvals:\n  grant_ttl: forever\n");
    let run = bad.run(&["grants"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("approvals.grant_ttl"), "{}", run.stderr);
}

/// Every denial says why in `error.reason`: the layer, the configuration entry,
/// the profile and the risk, so a policy deny, a profile deny, a human's deny, a
/// timeout and a limit can be told apart.
#[test]
fn every_denial_carries_a_machine_readable_reason() {
    let ws = Ws::new(
        "security:\n  hitl:\n    policies:\n      medium: {require_approval: true, timeout: 1}\nfile_broker:\n  max_changed_files: 1\nprofiles:\n  safe:\n    allowlist: [read_file]\n",
    );
    ws.write(".env", "SECRET=1\n");
    let reason = |run: &Run| run.json["error"]["reason"].clone();
    let policy = ws.run(&["call", "read_file", "--args", r#"{"path": ".env"}"#]);
    assert_eq!(policy.code, 4, "{}", policy.stdout);
    assert_eq!(
        reason(&policy),
        json!({"layer": "sandbox", "rule": "file_broker.deny_path_globs: **/.env", "risk": "low"})
    );
    let args = json!({"path": "a.txt", "content": "x\n"}).to_string();
    let profile = ws.run(&["call", "write_file", "--args", &args, "--profile", "safe"]);
    assert_eq!(profile.code, 4, "{}", profile.stdout);
    assert_eq!(
        reason(&profile),
        json!({"layer": "profile", "rule": "profiles.safe.allowlist", "profile": "safe", "risk": "medium"})
    );
    let id = ws.propose("a.txt", "x\n");
    let human = ws.run(&["deny", &id, "--reason", "no"]);
    assert_eq!(human.code, 4, "{}", human.stdout);
    assert_eq!(
        reason(&human),
        json!({"layer": "human", "rule": "human", "risk": "medium"})
    );
    // Nobody decides within the second the medium policy gives.
    let mut waiting = ws.spawn(&["call", "write_file", "--args", &args]);
    ws.wait_for_pending_of(&mut waiting);
    ws.advance(1_000);
    let timeout = Run::of(&waiting.wait_with_output().unwrap());
    assert_eq!(timeout.code, 4, "{}", timeout.stdout);
    assert_eq!(timeout.json["error"]["code"], "expired");
    assert_eq!(
        reason(&timeout),
        json!({"layer": "timeout", "rule": "timeout", "risk": "medium"})
    );
    let two = "*** Begin Patch\n*** Add File: x.txt\n+x\n*** Add File: y.txt\n+y\n*** End Patch\n";
    let limit = ws.run(&[
        "call",
        "apply_patch",
        "--args",
        &json!({"patch": two}).to_string(),
    ]);
    assert_eq!(limit.code, 4, "{}", limit.stdout);
    assert_eq!(limit.json["error"]["code"], "limit_exceeded");
    assert_eq!(
        reason(&limit),
        json!({"layer": "limit", "rule": "file_broker.max_changed_files", "risk": "medium"})
    );
}

/// Spec 000's context_id from the CLI: kept with the approval and in every
/// audit record of the call; a bad one is a usage error that changes nothing.
#[test]
fn a_context_id_is_recorded_with_the_approval_and_in_the_audit_log() {
    let ws = Ws::new("");
    let args = json!({"path": "c.txt", "content": "c\n"}).to_string();
    let run = ws.run(&[
        "call",
        "write_file",
        "--args",
        &args,
        "--defer",
        "--context",
        "ticket-42",
    ]);
    assert_eq!(run.code, 3, "{}{}", run.stdout, run.stderr);
    let id = run.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let pending = ws.run(&["pending", "--json"]);
    assert_eq!(
        pending.json[0]["context_id"], "ticket-42",
        "{}",
        pending.stdout
    );
    // The same call for another context is its own approval, not the first's;
    // for the same context it is the same one.
    let for_context = |context: &str| {
        ws.run(&[
            "call",
            "write_file",
            "--args",
            &args,
            "--defer",
            "--context",
            context,
        ])
    };
    let other = for_context("ticket-99");
    assert_eq!(other.code, 3);
    assert_ne!(other.json["hitl"]["hitl_id"], run.json["hitl"]["hitl_id"]);
    assert_eq!(
        for_context("ticket-42").json["hitl"]["hitl_id"],
        run.json["hitl"]["hitl_id"]
    );
    let other_id = other.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    assert_eq!(ws.run(&["deny", &other_id]).code, 4);
    assert_eq!(ws.run(&["approve", &id]).code, 0);
    let read = ws.run(&[
        "call",
        "read_file",
        "--args",
        r#"{"path": "c.txt"}"#,
        "--context",
        "ticket-43",
    ]);
    assert_eq!(read.code, 0);
    let records = ws.audit();
    let with = |context: &str| -> Vec<String> {
        records
            .iter()
            .filter(|record| record["context_id"] == context)
            .map(|record| record["event"].as_str().unwrap().to_owned())
            .collect()
    };
    // Proposed, proposed again (the same approval), decided, applied.
    assert_eq!(
        with("ticket-42"),
        [
            "write_file_propose",
            "write_file_propose",
            "hitl_decision",
            "write_file_apply"
        ]
    );
    assert_eq!(with("ticket-99"), ["write_file_propose", "hitl_decision"]);
    assert_eq!(with("ticket-43"), ["read_file"]);
    let before = ws.audit().len();
    for bad in ["", "a\nb", "rtl\u{202e}txt", &"x".repeat(257)] {
        let run = ws.run(&[
            "call",
            "read_file",
            "--args",
            r#"{"path": "c.txt"}"#,
            "--context",
            bad,
        ]);
        assert_eq!(run.code, 2, "{bad:?}: {}", run.stderr);
        assert!(run.stderr.contains("--context"), "{}", run.stderr);
    }
    assert_eq!(ws.audit().len(), before);
}

/// A workspace whose log holds a few records (a write applied).
fn logged() -> Ws {
    let ws = Ws::new("");
    let args = json!({"path": "a.txt", "content": "x\n"}).to_string();
    assert_eq!(
        ws.run(&["call", "write_file", "--args", &args, "--yes"])
            .code,
        0
    );
    ws
}

fn log_bytes(ws: &Ws) -> Vec<u8> {
    std::fs::read(ws.path(".airlock/audit.jsonl")).unwrap()
}

/// Damage done to a log: returns the line and byte verify must name.
type Damage = dyn Fn(&mut Vec<u8>) -> (usize, usize);

#[test]
fn audit_verify_names_every_flaw_with_its_record_and_byte_offset_and_exits_6() {
    // (what is done to the log, the line and byte verify must name)
    let cases: Vec<(&str, Box<Damage>)> = vec![
        (
            "a blank line appended",
            Box::new(|log: &mut Vec<u8>| {
                let lines = log.iter().filter(|b| **b == b'\n').count();
                let at = log.len();
                log.push(b'\n');
                (lines + 1, at)
            }),
        ),
        (
            "a byte order mark in front",
            Box::new(|log: &mut Vec<u8>| {
                log.splice(0..0, "\u{feff}".bytes());
                (1, 0)
            }),
        ),
        (
            "a NUL byte in the second record",
            Box::new(|log: &mut Vec<u8>| {
                let second = log.iter().position(|b| *b == b'\n').unwrap() + 1;
                log[second + 10] = 0;
                (2, second)
            }),
        ),
        (
            "a truncated last line",
            Box::new(|log: &mut Vec<u8>| {
                let lines = log.iter().filter(|b| **b == b'\n').count();
                let last = log[..log.len() - 1]
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .unwrap()
                    + 1;
                log.truncate(log.len() - 20);
                (lines, last)
            }),
        ),
    ];
    for (what, damage) in cases {
        let ws = logged();
        let mut log = log_bytes(&ws);
        let (line, offset) = damage(&mut log);
        std::fs::write(ws.path(".airlock/audit.jsonl"), &log).unwrap();
        let verify = ws.run(&["audit", "verify"]);
        assert_eq!(verify.code, 6, "{what}: {}{}", verify.stdout, verify.stderr);
        assert!(
            verify
                .stdout
                .contains(&format!("(line {line}, byte {offset})")),
            "{what}: {}",
            verify.stdout
        );
        let json = ws.run(&["audit", "verify", "--json"]);
        assert_eq!(
            (json.json["line"].as_u64(), json.json["offset"].as_u64()),
            (Some(line as u64), Some(offset as u64)),
            "{what}"
        );
        // Reading the log does not fail because of it.
        assert_eq!(ws.run(&["audit", "query"]).code, 0, "{what}");
    }
    // No log, while the store's head says records were written.
    let ws = logged();
    std::fs::remove_file(ws.path(".airlock/audit.jsonl")).unwrap();
    let verify = ws.run(&["audit", "verify"]);
    assert_eq!(verify.code, 6, "{}", verify.stdout);
    assert!(
        verify.stdout.contains("log missing; head says 4 records"),
        "{}",
        verify.stdout
    );
    // A workspace that never wrote one has nothing to verify.
    let fresh = Ws::new("");
    let none = fresh.run(&["audit", "verify"]);
    assert_eq!(none.code, 0, "{}", none.stdout);
}

#[test]
fn a_malformed_tail_is_moved_aside_and_audited_and_corruption_further_up_stops_appends() {
    let read = json!({"path": "a.txt"}).to_string();
    // A blank line appended, or a torn record followed by a newline: the next
    // command goes on, and the log says what was moved aside.
    for tail in [&b"\n"[..], b"{\"seq\": 5, \"ts\n"] {
        let ws = logged();
        let mut log = log_bytes(&ws);
        log.extend_from_slice(tail);
        std::fs::write(ws.path(".airlock/audit.jsonl"), &log).unwrap();
        let run = ws.run(&["call", "read_file", "--args", &read]);
        assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
        let torn = ws.run(&[
            "audit",
            "query",
            "--event-type",
            "audit_torn_line",
            "--json",
        ]);
        assert_eq!(torn.json[0]["bytes"], tail.len(), "{}", torn.stdout);
        let verify = ws.run(&["audit", "verify"]);
        assert!(
            verify
                .stdout
                .contains("chain intact through seq 6, but the log was repaired"),
            "{}",
            verify.stdout
        );
    }
    // Two bad lines at the end: not a torn record but corruption. Every
    // command that would append stops with exit 6 and the place; nothing is
    // appended.
    let ws = logged();
    let mut log = log_bytes(&ws);
    let offset = log.len();
    log.extend_from_slice(b"garbage\n\n");
    std::fs::write(ws.path(".airlock/audit.jsonl"), &log).unwrap();
    let run = ws.run(&["call", "read_file", "--args", &read]);
    assert_eq!(run.code, 6, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains(&format!("line 5 (byte {offset})")),
        "{}",
        run.stderr
    );
    assert_eq!(log_bytes(&ws), log);
    let verify = ws.run(&["audit", "verify"]);
    assert_eq!(verify.code, 6);
    assert!(
        verify.stdout.contains(&format!("(line 5, byte {offset})")),
        "{}",
        verify.stdout
    );
}

#[test]
fn arguments_over_128_kib_come_from_a_file_or_standard_input() {
    let ws = Ws::new("");
    let big = "x".repeat(300 * 1024);
    let args = json!({"path": "big.txt", "content": big}).to_string();
    let args_file = ws
        .root()
        .join("..")
        .join(format!("args-{}.json", std::process::id()));
    std::fs::write(&args_file, &args).unwrap();
    let from_file = ws.run(&[
        "call",
        "write_file",
        "--args",
        &format!("@{}", args_file.display()),
        "--defer",
    ]);
    std::fs::remove_file(&args_file).unwrap();
    assert_eq!(
        from_file.code, 3,
        "{}{}",
        from_file.stdout, from_file.stderr
    );
    assert_eq!(from_file.json["hitl"]["summary"], "CREATE FILE big.txt");

    let mut child = ws
        .command(&[
            "call",
            "write_file",
            "--args",
            "-",
            "--defer",
            "--session",
            "other",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, args.as_bytes()).unwrap();
    drop(stdin);
    let from_stdin = Run::of(&child.wait_with_output().unwrap());
    assert_eq!(
        from_stdin.code, 3,
        "{}{}",
        from_stdin.stdout, from_stdin.stderr
    );
    assert_eq!(from_stdin.json["hitl"]["summary"], "CREATE FILE big.txt");

    let missing = ws.run(&["call", "write_file", "--args", "@/nonexistent/args.json"]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert!(
        missing.stderr.contains("--args @/nonexistent/args.json"),
        "{}",
        missing.stderr
    );
}

/// Milliseconds since the Unix epoch by the system's clock.
fn system_ms() -> u64 {
    let elapsed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(elapsed.as_millis()).unwrap()
}
