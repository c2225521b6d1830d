//! Signed checkpoints of the audit log (DESIGN §8.1), driven through the
//! `airlock` binary: made every N records and when a server stops,
//! published to a webhook, proved, and checked offline (in a directory that
//! is no workspace) with only the checkpoint and the public key. The
//! Merkle checks here are written from RFC 9162 in this file, apart from
//! airlock's own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use airlock_testkit::http::{Serving, hook_receiver};
use airlock_testkit::{Run, Workspace};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

type Hash = [u8; 32];

fn node(left: &Hash, right: &Hash) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([1]);
    hasher.update(left);
    hasher.update(right);
    hasher.finalize().into()
}

fn leaf(entry: &[u8]) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([0]);
    hasher.update(entry);
    hasher.finalize().into()
}

/// MTH over leaf hashes, as RFC 9162 §2.1.1 defines it.
fn mth(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => Sha256::digest([]).into(),
        1 => leaves[0],
        n => {
            let mut k = 1;
            while k * 2 < n {
                k *= 2;
            }
            node(&mth(&leaves[..k]), &mth(&leaves[k..]))
        }
    }
}

/// RFC 9162 §2.1.3.2, step by step.
fn root_from_inclusion(leaf: Hash, index: u64, size: u64, path: &[Hash]) -> Option<Hash> {
    if index >= size {
        return None;
    }
    let (mut f, mut s, mut r) = (index, size - 1, leaf);
    for p in path {
        if s == 0 {
            return None;
        }
        if f & 1 == 1 || f == s {
            r = node(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    (s == 0).then_some(r)
}

fn ok(run: &Run) {
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
}

fn read(ws: &Workspace, n: usize) {
    ws.write("notes.txt", "hello\n");
    for _ in 0..n {
        ok(&ws.call("read_file", &json!({"path": "notes.txt"}), &[]));
    }
}

fn log_lines(ws: &Workspace) -> Vec<String> {
    ws.read(".airlock/audit.jsonl")
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The checkpoint body a note carries: (origin, size, root).
fn body(note: &str) -> (String, u64, Hash) {
    let mut lines = note.lines();
    let origin = lines.next().unwrap().to_owned();
    let size = lines.next().unwrap().parse().unwrap();
    let root = BASE64
        .decode(lines.next().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    (origin, size, root)
}

#[test]
fn checkpoints_every_n_records_prove_each_record_to_anyone_with_the_key() {
    let ws = Workspace::new("audit: {checkpoints: {every: 4}}\n");
    read(&ws, 10);
    let lines = log_lines(&ws);
    let list = ws.run(&["audit", "checkpoint", "--list", "--json"]);
    ok(&list);
    let sizes: Vec<u64> = list
        .json
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["size"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (1..=lines.len() as u64 / 4).map(|n| n * 4).collect();
    assert_eq!(sizes, expected);

    // Each checkpoint's root is the RFC's tree head of that many lines.
    let leaves: Vec<Hash> = lines.iter().map(|line| leaf(line.as_bytes())).collect();
    for row in list.json.as_array().unwrap() {
        let (origin, size, root) = body(row["note"].as_str().unwrap());
        assert_eq!(root, mth(&leaves[..size as usize]), "size {size}");
        assert!(origin.contains("/airlock/"), "{origin}");
    }
    // The latest is also the file a cron job copies.
    let latest = ws.run(&["audit", "checkpoint"]);
    ok(&latest);
    assert_eq!(ws.read(".airlock/audit.checkpoint").unwrap(), latest.stdout);
    let (_, size, root) = body(&latest.stdout);

    // A proof of record 3, checked here by the RFC's algorithm.
    let proof = ws.run(&["audit", "prove", "3"]);
    ok(&proof);
    let (head, note) = proof.stdout.split_once("\n\n").unwrap();
    assert_eq!(note, latest.stdout);
    let mut head = head.lines();
    assert_eq!(head.next(), Some("c2sp.org/tlog-proof@v1"));
    let extra = BASE64
        .decode(head.next().unwrap().strip_prefix("extra ").unwrap())
        .unwrap();
    assert_eq!(extra, lines[2].as_bytes());
    assert_eq!(head.next(), Some("index 2"));
    let path: Vec<Hash> = head
        .map(|h| BASE64.decode(h).unwrap().try_into().unwrap())
        .collect();
    assert_eq!(
        root_from_inclusion(leaf(&extra), 2, size, &path),
        Some(root)
    );

    // Offline, in a directory that is no workspace: the key, the kept
    // checkpoint and the proof suffice.
    let key = ws.run(&["audit", "key"]);
    ok(&key);
    let away = tempfile::tempdir().unwrap();
    std::fs::write(away.path().join("cp"), &latest.stdout).unwrap();
    std::fs::write(away.path().join("p3.tlog-proof"), &proof.stdout).unwrap();
    let verify = ws.run_from(
        away.path(),
        &[
            "audit",
            "verify",
            "--checkpoint",
            "cp",
            "--key",
            key.stdout.trim(),
            "--proof",
            "p3.tlog-proof",
        ],
    );
    ok(&verify);
    assert_eq!(
        verify.stdout,
        format!(
            "ok: record 3 is in {} as of its checkpoint of {size} records\n",
            body(&latest.stdout).0
        )
    );
    // The proof with another record's line is refused.
    std::fs::write(away.path().join("r4"), &lines[3]).unwrap();
    let wrong = ws.run_from(
        away.path(),
        &[
            "audit",
            "verify",
            "--checkpoint",
            "cp",
            "--key",
            key.stdout.trim(),
            "--proof",
            "p3.tlog-proof",
            "--record",
            "r4",
        ],
    );
    assert_eq!(wrong.code, 6, "{}{}", wrong.stdout, wrong.stderr);
    assert_eq!(
        wrong.stdout,
        "broken: the proof leads to another root hash\n"
    );
    // A record past the latest checkpoint has no proof yet.
    let beyond = ws.run(&["audit", "prove", "99"]);
    assert_eq!(beyond.code, 2);
    assert!(
        beyond
            .stderr
            .contains("record 99 is not covered by the latest checkpoint"),
        "{}",
        beyond.stderr
    );
}

#[test]
fn a_tampered_truncated_or_reordered_export_fails_offline_and_the_intact_one_passes() {
    let ws = Workspace::new("audit: {checkpoints: {every: 0}}\n");
    read(&ws, 12);
    ok(&ws.run(&["audit", "checkpoint", "--new"]));
    let away = tempfile::tempdir().unwrap();
    let dir = away.path();
    std::fs::write(
        dir.join("cp"),
        ws.read(".airlock/audit.checkpoint").unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("key.pub"), ws.run(&["audit", "key"]).stdout).unwrap();
    ok(&ws.run(&["audit", "export", dir.join("log.jsonl").to_str().unwrap()]));
    let original = std::fs::read_to_string(dir.join("log.jsonl")).unwrap();
    let check = |text: &str| -> Run {
        std::fs::write(dir.join("copy.jsonl"), text).unwrap();
        ws.run_from(
            dir,
            &[
                "audit",
                "verify",
                "--checkpoint",
                "cp",
                "--key",
                "key.pub",
                "--log",
                "copy.jsonl",
            ],
        )
    };
    let intact = check(&original);
    ok(&intact);
    assert!(
        intact.stdout.starts_with("ok: the log's first "),
        "{}",
        intact.stdout
    );

    let lines: Vec<&str> = original.lines().collect();
    let join = |lines: &[String]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    // One record's path changed (and its hashes left as they were).
    let mut tampered: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    tampered[5] = tampered[5].replacen("notes.txt", "notez.txt", 1);
    let run = check(&join(&tampered));
    assert_eq!(run.code, 6, "{}", run.stdout);
    assert!(
        run.stdout.starts_with("broken: the log's first "),
        "{}",
        run.stdout
    );
    // The last three records cut off.
    let truncated: Vec<String> = lines[..lines.len() - 3]
        .iter()
        .map(|l| (*l).to_owned())
        .collect();
    let run = check(&join(&truncated));
    assert_eq!(run.code, 6);
    assert_eq!(
        run.stdout,
        format!(
            "broken: the log holds {} records and the checkpoint covers {}: records were cut off its end\n",
            lines.len() - 3,
            lines.len()
        )
    );
    // Two records swapped.
    let mut swapped: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    swapped.swap(7, 8);
    let run = check(&join(&swapped));
    assert_eq!(run.code, 6, "{}", run.stdout);
    assert!(run.stdout.starts_with("broken: "), "{}", run.stdout);
    // A key that is not the log's.
    let other = Workspace::new("");
    read(&other, 1);
    let foreign = other.run(&["audit", "key"]);
    let run = ws.run_from(
        dir,
        &[
            "audit",
            "verify",
            "--checkpoint",
            "cp",
            "--key",
            foreign.stdout.trim(),
            "--log",
            "log.jsonl",
        ],
    );
    assert_eq!(run.code, 6);
    assert!(
        run.stdout
            .starts_with("broken: the note has no signature by "),
        "{}",
        run.stdout
    );
    // A key that is no key is a usage error.
    let run = ws.run_from(
        dir,
        &[
            "audit",
            "verify",
            "--checkpoint",
            "cp",
            "--key",
            "nonsense",
            "--log",
            "log.jsonl",
        ],
    );
    assert_eq!(run.code, 2, "{}{}", run.stdout, run.stderr);
}

#[test]
fn a_newer_checkpoint_is_proved_to_extend_one_kept_from_before() {
    let ws = Workspace::new("audit: {checkpoints: {every: 0}}\n");
    read(&ws, 5);
    ok(&ws.run(&["audit", "checkpoint", "--new"]));
    let old = ws.read(".airlock/audit.checkpoint").unwrap();
    let (_, old_size, _) = body(&old);
    read(&ws, 7);
    let new = ws.run(&["audit", "checkpoint", "--new"]);
    ok(&new);
    let (_, new_size, _) = body(&new.stdout);
    assert!(new_size > old_size);
    let away = tempfile::tempdir().unwrap();
    std::fs::write(away.path().join("old"), &old).unwrap();
    let proof = ws.run(&[
        "audit",
        "consistency",
        &old_size.to_string(),
        &new_size.to_string(),
    ]);
    ok(&proof);
    std::fs::write(away.path().join("proof"), &proof.stdout).unwrap();
    let key = ws.run(&["audit", "key"]).stdout;
    let verify = ws.run_from(
        away.path(),
        &[
            "audit",
            "verify",
            "--checkpoint",
            "old",
            "--key",
            key.trim(),
            "--consistency",
            "proof",
        ],
    );
    ok(&verify);
    assert!(
        verify
            .stdout
            .contains(&format!("extends the one of {old_size}")),
        "{}",
        verify.stdout
    );
    // The same proof does not pass for another old checkpoint.
    read(&ws, 1);
    ok(&ws.run(&["audit", "checkpoint", "--new"]));
    std::fs::write(
        away.path().join("later"),
        ws.read(".airlock/audit.checkpoint").unwrap(),
    )
    .unwrap();
    let run = ws.run_from(
        away.path(),
        &[
            "audit",
            "verify",
            "--checkpoint",
            "later",
            "--key",
            key.trim(),
            "--consistency",
            "proof",
        ],
    );
    assert_eq!(run.code, 6, "{}", run.stdout);
}

#[test]
fn a_rewritten_log_is_never_signed_and_the_refusal_is_audited() {
    let ws = Workspace::new("audit: {checkpoints: {every: 0}}\n");
    read(&ws, 6);
    ok(&ws.run(&["audit", "checkpoint", "--new"]));
    // Someone with the file rewrites a covered record and removes the
    // stored hashes so they are made again from the rewritten log.
    let text = ws.read(".airlock/audit.jsonl").unwrap();
    ws.write(
        ".airlock/audit.jsonl",
        text.replacen("notes.txt", "other.txt", 1),
    );
    std::fs::remove_file(ws.path(".airlock/audit.merkle")).unwrap();
    let before = ws.run(&["audit", "checkpoint", "--list", "--json"]).json;
    let run = ws.run(&["audit", "checkpoint", "--new"]);
    assert_eq!(run.code, 6, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("no checkpoint is signed"),
        "{}",
        run.stderr
    );
    assert_eq!(
        ws.run(&["audit", "checkpoint", "--list", "--json"]).json,
        before
    );
    assert!(
        ws.audit_events()
            .contains(&"audit_checkpoint_refused".to_owned())
    );
    // Nor once more records came.
    read(&ws, 2);
    let run = ws.run(&["audit", "checkpoint", "--new"]);
    assert_eq!(run.code, 6, "{}{}", run.stdout, run.stderr);
    assert_eq!(
        ws.run(&["audit", "checkpoint", "--list", "--json"]).json,
        before
    );
}

fn next(hooks: &std::sync::mpsc::Receiver<Value>) -> Value {
    hooks
        .recv_timeout(Duration::from_secs(20))
        .expect("a checkpoint at the webhook")
}

#[test]
fn a_server_publishes_checkpoints_and_signs_everything_when_it_stops() {
    // The hook refuses the first delivery: it is retried.
    let (url, hooks) = hook_receiver(1);
    let ws = Workspace::new(&format!(
        "audit: {{checkpoints: {{every: 3, webhook: \"{url}\"}}}}\n"
    ));
    let mut server = Serving::start(&ws, &[]);
    read(&ws, 4);
    let first = next(&hooks);
    assert_eq!(first["event"], "audit_checkpoint");
    let size = first["size"].as_u64().unwrap();
    assert_eq!(size % 3, 0);
    assert_eq!(body(first["note"].as_str().unwrap()).1, size);
    assert_eq!(server.stop(), Some(0));
    // At shutdown: one over every record, published before exit.
    let records = log_lines(&ws).len() as u64;
    let mut last = first;
    while last["size"].as_u64() != Some(records) {
        last = next(&hooks);
    }
    let note = last["note"].as_str().unwrap();
    assert_eq!(ws.read(".airlock/audit.checkpoint").unwrap(), note);
    // Checked offline against the export.
    let away = tempfile::tempdir().unwrap();
    std::fs::write(away.path().join("cp"), note).unwrap();
    ok(&ws.run(&["audit", "export", away.path().join("log").to_str().unwrap()]));
    let key = ws.run(&["audit", "key"]).stdout;
    ok(&ws.run_from(
        away.path(),
        &[
            "audit",
            "verify",
            "--checkpoint",
            "cp",
            "--key",
            key.trim(),
            "--log",
            "log",
        ],
    ));
}
