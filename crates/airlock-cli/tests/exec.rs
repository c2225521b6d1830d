//! The exec tool through the `airlock` binary: allowed commands run in the
//! sandbox; asking commands are previewed, proposed as a diff, applied on
//! approval exactly as a direct run would have left the files (without
//! running again), refused when a file changed since the preview, undoable.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use airlock_testkit::Workspace;
use serde_json::{Value, json};

/// Every file under `root` but airlock's own and git's, with its content.
fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == ".airlock" || rel == "airlock.yaml" || rel == ".git" {
                continue;
            }
            if path.is_dir() {
                pending.push(path);
            } else {
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

fn seed(ws: &Workspace) {
    ws.write("a.txt", "one\nalpha\n");
    ws.write("b.txt", "bee\n");
    ws.write("src/lib.rs", "fn  main( ) {}\n");
}

fn exec_args(command: &str) -> String {
    json!({ "command": command }).to_string()
}

#[test]
fn an_allowed_command_runs_in_the_sandbox_and_reports_its_output() {
    let ws = Workspace::new("");
    seed(&ws);
    let run = ws.run(&[
        "call",
        "exec",
        "--args",
        &exec_args("ls && cat b.txt && exit 3"),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json["status"], "allowed");
    assert_eq!(run.json["op"]["method"], "exec.run");
    assert_eq!(run.json["data"]["exit_code"], 3);
    assert_eq!(
        run.json["data"]["stdout"],
        "a.txt\nairlock.yaml\nb.txt\nsrc\nbee\n"
    );
    assert_eq!(run.json["data"]["truncated_stdout"], false);

    // The shorthand, an argument vector.
    let run = ws.run(&["exec", "--", "cat", "b.txt"]);
    assert_eq!(run.json["data"]["stdout"], "bee\n", "{}", run.stdout);

    // The state dir is not there for it, even for an allowed command.
    let run = ws.run(&["exec", "--", "ls", "-A", ".airlock"]);
    assert_eq!(run.json["data"]["stdout"], "");

    // Audited with its exit code.
    let audit = std::fs::read_to_string(ws.path(".airlock/audit.jsonl")).unwrap();
    let record: Value = audit
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|record| record["tool"] == "exec" && record["exit_code"] == 3)
        .expect("the run is audited");
    assert_eq!(record["status"], "allowed");
}

#[test]
fn a_denied_command_does_not_run_and_bad_arguments_are_invalid_input() {
    let ws = Workspace::new("exec:\n  rules:\n    - {prefix: [touch], decision: deny}\n");
    let run = ws.run(&["call", "exec", "--args", &exec_args("ls; touch made")]);
    assert_eq!(run.json["status"], "denied");
    assert_eq!(run.json["error"]["code"], "policy_denied");
    assert!(!ws.path("made").exists());

    for args in [
        json!({}),
        json!({"command": "ls", "argv": ["ls"]}),
        json!({"argv": []}),
        json!({"command": "ls", "bogus": 1}),
    ] {
        let run = ws.run(&["call", "exec", "--args", &args.to_string()]);
        assert_eq!(
            run.json["error"]["code"], "invalid_input",
            "{args}: {}",
            run.stdout
        );
    }
    let run = ws.run(&[
        "call",
        "exec",
        "--args",
        r#"{"argv": ["ls"], "cwd": "../"}"#,
    ]);
    assert_ne!(run.json["status"], "allowed", "{}", run.stdout);
}

/// Proposes `command` (deferred), approves it, and returns the approved
/// call's envelope.
fn propose_and_approve(ws: &Workspace, command: &str) -> Value {
    let run = ws.run(&["call", "exec", "--args", &exec_args(command), "--defer"]);
    assert_eq!(
        run.json["status"], "hitl_required",
        "{command}: {}",
        run.stdout
    );
    assert_eq!(run.json["op"]["method"], "exec.run");
    let id = run.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let approve = ws.run(&["approve", &id]);
    assert_eq!(
        approve.code, 0,
        "{command}: {}{}",
        approve.stdout, approve.stderr
    );
    let status = ws.run(&[
        "call",
        "proposal_status",
        "--args",
        &json!({"hitl_id": id}).to_string(),
    ]);
    status.json["data"]["result"].clone()
}

#[test]
fn an_approved_preview_leaves_the_files_a_direct_run_leaves_without_running_again() {
    let commands = [
        // An in-place editor.
        "sed -i 's/one/two/' a.txt",
        // A formatter-like rewriter: every file read, rewritten through a
        // temporary file and renamed over itself.
        "for f in a.txt b.txt src/lib.rs; do tr 'a-z' 'A-Z' < \"$f\" > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"; done",
        // A script that creates, deletes and moves files.
        "mkdir -p src/gen && echo 'pub mod x;' > src/gen/mod.rs && rm b.txt && touch scratch && rm scratch \
         && mv a.txt docs.txt && printf 'once\\n' >> ran.log",
    ];
    for command in commands {
        let proposed = Workspace::new("");
        seed(&proposed);
        let direct = Workspace::new("");
        seed(&direct);
        let before = files(proposed.root());

        let ran = std::process::Command::new("bash")
            .args(["-c", command])
            .current_dir(direct.root())
            .status()
            .unwrap();
        assert!(ran.success(), "{command}");

        let run = proposed.run(&["call", "exec", "--args", &exec_args(command), "--defer"]);
        assert_eq!(
            run.json["status"], "hitl_required",
            "{command}: {}",
            run.stdout
        );
        // Previewed: nothing changed yet.
        assert_eq!(files(proposed.root()), before, "{command}");
        let id = run.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
        let shown = proposed.run(&["show", &id]);
        assert!(shown.stdout.contains("RUN "), "{}", shown.stdout);

        let approve = proposed.run(&["approve", &id]);
        assert_eq!(
            approve.code, 0,
            "{command}: {}{}",
            approve.stdout, approve.stderr
        );
        assert_eq!(files(proposed.root()), files(direct.root()), "{command}");
        // Not run a second time: the log the command appends to has one line.
        if command.contains("ran.log") {
            assert_eq!(proposed.read("ran.log").as_deref(), Some("once\n"));
        }
    }
}

#[test]
fn a_proposal_shows_the_command_how_it_ended_and_the_head_and_tail_of_its_output() {
    let ws = Workspace::new("");
    seed(&ws);
    // 30 lines out, and a line on stderr that tries to pass for a diff
    // header, with a terminal escape.
    let command =
        "seq 1 30; printf '+++ b/x.txt\\n-\\033[31mevil\\n' >&2; sed -i s/one/two/ a.txt; exit 4";
    let run = ws.run(&["call", "exec", "--args", &exec_args(command), "--defer"]);
    assert_eq!(run.json["status"], "hitl_required", "{}", run.stdout);
    let id = run.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let shown = ws.run(&["show", &id]).stdout;
    let head: Vec<&str> = shown
        .lines()
        .skip_while(|line| !line.starts_with("$ "))
        .collect();
    let mut expected = vec![format!("$ {command}")];
    let ended = head[1];
    assert!(
        ended.starts_with("exit 4, ") && ended.ends_with(" ms"),
        "{shown}"
    );
    expected.push(ended.to_owned());
    expected.push("stdout: 30 lines".to_owned());
    expected.extend((1..=10).map(|n| format!("| {n}")));
    expected.push("| … 10 lines not shown …".to_owned());
    expected.extend((21..=30).map(|n| format!("| {n}")));
    expected.push("stderr: 2 lines".to_owned());
    expected.push("| +++ b/x.txt".to_owned());
    expected.push("| -\\x1b[31mevil".to_owned());
    expected.extend(
        [
            "",
            "--- a/a.txt",
            "+++ b/a.txt",
            "@@ -1,2 +1,2 @@",
            "-one",
            "+two",
            " alpha",
        ]
        .map(str::to_owned),
    );
    assert_eq!(head, expected, "{shown}");
}

/// Runs `git ARGS` in `root` as a fixed author.
fn git(root: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .args(args)
        .current_dir(root)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn an_approved_git_mv_leaves_the_files_a_direct_run_leaves_and_git_internals_alone() {
    let proposed = Workspace::new("");
    let direct = Workspace::new("");
    for ws in [&proposed, &direct] {
        seed(ws);
        git(ws.root(), &["init", "-q"]);
        git(ws.root(), &["add", "a.txt", "b.txt", "src"]);
        git(ws.root(), &["commit", "-qm", "init"]);
    }
    let command = "git mv a.txt docs.txt && git mv src/lib.rs src/main.rs";
    let ran = std::process::Command::new("bash")
        .args(["-c", command])
        .current_dir(direct.root())
        .status()
        .unwrap();
    assert!(ran.success());
    let index = std::fs::read(proposed.path(".git/index")).unwrap();

    let result = propose_and_approve(&proposed, command);
    assert_eq!(result["status"], "allowed", "{result}");
    assert_eq!(files(proposed.root()), files(direct.root()));
    // What git wrote in the overlay (its index) is reported, not applied:
    // the moves are in the work tree, unstaged.
    assert_eq!(result["data"]["not_applied"][0]["path"], ".git", "{result}");
    assert_eq!(std::fs::read(proposed.path(".git/index")).unwrap(), index);
    assert_eq!(
        git(
            proposed.root(),
            &["status", "--porcelain", "--", "a.txt", "docs.txt"]
        ),
        " D a.txt\n?? docs.txt\n"
    );
}

#[test]
fn a_file_changed_since_the_preview_makes_the_approval_stale_and_undo_reverts_an_apply() {
    let ws = Workspace::new("");
    seed(&ws);
    let run = ws.run(&[
        "call",
        "exec",
        "--args",
        &exec_args("sed -i 's/one/two/' a.txt && echo made > c.txt"),
        "--defer",
    ]);
    let id = run.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    ws.write("a.txt", "changed by hand\n");
    let approve = ws.run(&["approve", &id]);
    assert_ne!(approve.code, 0);
    assert!(
        format!("{}{}", approve.stdout, approve.stderr).contains("stale"),
        "{}{}",
        approve.stdout,
        approve.stderr
    );
    assert_eq!(ws.read("a.txt").as_deref(), Some("changed by hand\n"));
    assert!(
        !ws.path("c.txt").exists(),
        "a stale apply applied part of it"
    );

    // Applied, then undone.
    let ws = Workspace::new("");
    seed(&ws);
    let before = files(ws.root());
    let result = propose_and_approve(
        &ws,
        "sed -i 's/one/two/' a.txt && echo made > c.txt && echo out",
    );
    assert_eq!(result["status"], "allowed", "{result}");
    assert_eq!(result["data"]["stdout"], "out\n");
    assert_eq!(result["data"]["previewed"], true);
    assert_eq!(ws.read("c.txt").as_deref(), Some("made\n"));
    let id = result["hitl"]["hitl_id"].as_str().unwrap().to_owned();
    let undo = ws.run(&["undo", &id]);
    assert_eq!(undo.code, 0, "{}{}", undo.stdout, undo.stderr);
    assert_eq!(files(ws.root()), before);
}

#[test]
fn a_command_that_cannot_be_previewed_is_proposed_as_is_and_runs_once_approved() {
    // `preview: rerun`, and a rule giving a command the network: neither is
    // previewed; each runs once approved, its file changes applied then.
    for config in [
        "exec:\n  preview: rerun\n",
        "exec:\n  rules:\n    - {prefix: [touch], decision: ask, network: true}\n",
    ] {
        let ws = Workspace::new(config);
        seed(&ws);
        let run = ws.run(&["exec", "--defer", "--", "touch", "made.txt"]);
        assert_eq!(
            run.json["status"], "hitl_required",
            "{config}: {}",
            run.stdout
        );
        assert_eq!(run.json["data"]["previewed"], false);
        let summary = run.json["hitl"]["summary"].as_str().unwrap();
        assert!(summary.contains("not previewed"), "{summary}");
        assert!(!ws.path("made.txt").exists(), "it ran before approval");
        let id = run.json["hitl"]["hitl_id"].as_str().unwrap().to_owned();

        let approve = ws.run(&["approve", &id]);
        assert_eq!(
            approve.code, 0,
            "{config}: {}{}",
            approve.stdout, approve.stderr
        );
        assert!(
            ws.path("made.txt").exists(),
            "{config}: not run after approval"
        );
        let status = ws.run(&[
            "call",
            "proposal_status",
            "--args",
            &json!({"hitl_id": id}).to_string(),
        ]);
        let result = &status.json["data"]["result"];
        assert_eq!(result["status"], "allowed", "{result}");
        assert_eq!(result["data"]["previewed"], false);
        assert_eq!(result["data"]["exit_code"], 0);

        // Its changes are recorded, so it can be undone.
        let undo = ws.run(&["undo", &id]);
        assert_eq!(undo.code, 0, "{}{}", undo.stdout, undo.stderr);
        assert!(!ws.path("made.txt").exists());
    }
}
