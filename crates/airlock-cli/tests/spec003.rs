//! Reference spec 003's verification list ("Phase 6.4"), item by item, through
//! `airlock call` on a real workspace: every file tool's statuses and output
//! modes, one session running them all, denials, blobs under `auto` and errors
//! under `require_inline`, blob references reachable from the audit log, and
//! configured limits against the permissive defaults. (The spec's `host.exec`
//! and kernel replay items have no counterpart in airlock; the audit chain is
//! airlock's journal, and it is verified here.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use airlock_testkit::Workspace;
use airlock_testkit::mcp::RawStdio;
use airlock_testkit::peers::{Peer, require};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// A workspace whose calls are approved at once by the person at the
/// terminal (`--yes`), in session `s003`.
struct Ws(Workspace);

impl std::ops::Deref for Ws {
    type Target = Workspace;
    fn deref(&self) -> &Workspace {
        &self.0
    }
}

impl Ws {
    fn new(config: &str) -> Ws {
        Ws(Workspace::new(config))
    }

    fn read(&self, rel: &str) -> Option<Vec<u8>> {
        self.0.read_bytes(rel)
    }

    /// `airlock call TOOL --args ARGS --yes`: the envelope.
    fn call(&self, tool: &str, args: Value) -> Value {
        let run = self.0.call(
            tool,
            &args,
            &["--yes", "--reason", "spec 003", "--session", "s003"],
        );
        if run.json.is_null() {
            panic!("{tool}: no envelope: {}{}", run.stdout, run.stderr);
        }
        run.json
    }

    fn blob(&self, blob_ref: &str) -> Vec<u8> {
        let hex = blob_ref.strip_prefix("sha256:").unwrap();
        std::fs::read(self.path(&format!(".airlock/blobs/sha256/{hex}"))).unwrap()
    }
}

fn ok(envelope: &Value) -> &Value {
    assert_eq!(envelope["status"], "allowed", "{envelope:#}");
    &envelope["data"]
}

fn failed(envelope: &Value, status: &str, code: &str) {
    assert_eq!(
        (
            envelope["status"].as_str(),
            envelope["error"]["code"].as_str()
        ),
        (Some(status), Some(code)),
        "{envelope:#}"
    );
}

fn big_text(lines: usize) -> String {
    (0..lines).map(|i| format!("line {i} needle\n")).collect()
}

/// 150 matching lines of 200 bytes: 100 of them (grep's default cap) are
/// over the default max_inline_bytes.
fn long_lines() -> String {
    (0..150)
        .map(|i| format!("line {i} needle {}\n", "x".repeat(180)))
        .collect()
}

#[test]
fn read_file_inline_text_inline_bytes_blob_require_inline_not_found_forbidden() {
    let ws = Ws::new("");
    ws.write("src/a.txt", "hello\n");
    ws.write("src/bin.dat", [0u8, 159, 146, 150, 255]);
    ws.write("src/big.txt", big_text(3_000));
    ws.write(".env", "SECRET=1\n");

    let text = ws.call("read_file", json!({"path": "src/a.txt"}));
    assert_eq!(ok(&text)["content"], "hello\n");

    let bytes = ws.call(
        "read_file",
        json!({"path": "src/bin.dat", "encoding": "bytes"}),
    );
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(ok(&bytes)["content"].as_str().unwrap())
        .unwrap();
    assert_eq!(decoded, vec![0u8, 159, 146, 150, 255]);

    let args =
        json!({"path": "src/big.txt", "start_line": 1, "end_line": 3000, "max_bytes": 200000});
    let blob = ws.call("read_file", args.clone());
    let data = ok(&blob);
    assert!(data.get("content").is_none(), "{data:#}");
    let blob_ref = data["blob"]["blob_ref"].as_str().unwrap();
    assert_eq!(ws.blob(blob_ref), ws.read("src/big.txt").unwrap());
    assert_eq!(
        data["blob"]["size_bytes"],
        ws.read("src/big.txt").unwrap().len()
    );
    assert!(
        data["blob"]["preview"]
            .as_str()
            .unwrap()
            .starts_with("line 0 needle\n")
    );

    let mut inline = args;
    inline["output_mode"] = json!("require_inline");
    failed(
        &ws.call("read_file", inline),
        "error",
        "inline_required_too_large",
    );
    failed(
        &ws.call("read_file", json!({"path": "src/nope.txt"})),
        "error",
        "not_found",
    );
    failed(
        &ws.call("read_file", json!({"path": ".env"})),
        "denied",
        "path_denied",
    );
    failed(
        &ws.call("read_file", json!({"path": "../x"})),
        "denied",
        "path_forbidden",
    );
}

#[test]
fn write_file_inline_text_inline_bytes_blob_ref_modes_conflict_forbidden() {
    let ws = Ws::new("");
    ok(&ws.call(
        "write_file",
        json!({"path": "src/t.txt", "content": "text\n"}),
    ));
    assert_eq!(ws.read("src/t.txt").unwrap(), b"text\n");

    let raw = [0u8, 1, 2, 254, 255];
    let encoded = base64::engine::general_purpose::STANDARD.encode(raw);
    let args = json!({"path": "src/b.dat", "content": encoded, "encoding": "bytes"});
    ok(&ws.call("write_file", args));
    assert_eq!(ws.read("src/b.dat").unwrap(), raw);

    // A large read becomes a blob; writing it back by reference copies it.
    ws.write("src/big.txt", big_text(3_000));
    let read = ws.call(
        "read_file",
        json!({"path": "src/big.txt", "end_line": 3000, "max_bytes": 200000}),
    );
    let blob_ref = ok(&read)["blob"]["blob_ref"].as_str().unwrap().to_owned();
    ok(&ws.call(
        "write_file",
        json!({"path": "src/copy.txt", "blob_ref": blob_ref}),
    ));
    assert_eq!(ws.read("src/copy.txt"), ws.read("src/big.txt"));
    let unknown = format!("sha256:{}", "0".repeat(64));
    failed(
        &ws.call(
            "write_file",
            json!({"path": "src/x.txt", "blob_ref": unknown}),
        ),
        "error",
        "not_found",
    );
    failed(
        &ws.call(
            "write_file",
            json!({"path": "src/x.txt", "content": "a", "blob_ref": blob_ref}),
        ),
        "error",
        "invalid_input",
    );
    failed(
        &ws.call(
            "write_file",
            json!({"path": "src/x.txt", "content": "%%", "encoding": "bytes"}),
        ),
        "error",
        "invalid_input",
    );

    // Modes.
    let create_new = json!({"path": "src/t.txt", "content": "again\n", "mode": "create_new"});
    failed(&ws.call("write_file", create_new), "error", "file_exists");
    ok(&ws.call(
        "write_file",
        json!({"path": "src/t.txt", "content": "over\n", "mode": "overwrite"}),
    ));
    assert_eq!(ws.read("src/t.txt").unwrap(), b"over\n");

    // Conflict: a file changed under a pending proposal is stale at apply.
    let proposed =
        ws.0.call(
            "write_file",
            &json!({"path": "src/t.txt", "content": "late\n"}),
            &["--defer"],
        )
        .json;
    let id = proposed["hitl"]["hitl_id"].as_str().unwrap();
    ws.write("src/t.txt", "changed meanwhile\n");
    let approved = ws.run(&["approve", id]).json;
    failed(&approved, "error", "stale");
    assert_eq!(ws.read("src/t.txt").unwrap(), b"changed meanwhile\n");

    // Forbidden.
    failed(
        &ws.call("write_file", json!({"path": ".env", "content": "x"})),
        "denied",
        "path_denied",
    );
    failed(
        &ws.call("write_file", json!({"path": "/etc/x", "content": "x"})),
        "denied",
        "path_forbidden",
    );
    failed(
        &ws.call(
            "write_file",
            json!({"path": "build/x", "content": "x", "create_parents": true}),
        ),
        "denied",
        "create_not_allowed",
    );
}

#[test]
fn edit_file_exact_fuzzy_ambiguous_replace_all_empty() {
    let ws = Ws::new("");
    ws.write("src/e.txt", "let s = “quoted” — ok;\nx = 1\nx = 1\n");
    let exact = ws.call(
        "edit_file",
        json!({"path": "src/e.txt", "old_string": "ok", "new_string": "OK"}),
    );
    assert_eq!(ok(&exact)["replacements"], 1);
    let fuzzy =
        json!({"path": "src/e.txt", "old_string": "\"quoted\" - OK", "new_string": "plain"});
    let fuzzy = ws.call("edit_file", fuzzy);
    assert_eq!(ok(&fuzzy)["replacements"], 1);
    assert_eq!(ok(&fuzzy)["fuzzy"], true);
    assert_eq!(
        ws.read("src/e.txt").unwrap(),
        "let s = plain;\nx = 1\nx = 1\n".as_bytes()
    );
    let one = json!({"path": "src/e.txt", "old_string": "x = 1", "new_string": "x = 2"});
    failed(&ws.call("edit_file", one.clone()), "error", "ambiguous");
    let mut all = one;
    all["replace_all"] = json!(true);
    assert_eq!(
        ok(&ws.call("edit_file", all))["summary_text"],
        "Updated src/e.txt (2 replacements)"
    );
    let empty = json!({"path": "src/e.txt", "old_string": "", "new_string": "y"});
    failed(
        &ws.call("edit_file", empty),
        "error",
        "invalid_input_empty_old_string",
    );
    assert_eq!(
        ws.read("src/e.txt").unwrap(),
        "let s = plain;\nx = 2\nx = 2\n".as_bytes()
    );
}

#[test]
fn apply_patch_success_parse_error_reject_not_found_dry_run_no_partial_write() {
    let ws = Ws::new("");
    ws.write("src/p.txt", "a\nb\nc\n");
    let good = "*** Begin Patch\n*** Update File: src/p.txt\n@@\n a\n-b\n+B\n*** End Patch\n";
    let dry = ws.call("apply_patch", json!({"patch": good, "dry_run": true}));
    assert_eq!(ok(&dry)["dry_run"], true);
    assert_eq!(ws.read("src/p.txt").unwrap(), b"a\nb\nc\n");
    let applied = ws.call("apply_patch", json!({"patch": good}));
    assert_eq!(ok(&applied)["files_changed"], 1);
    assert_eq!(ws.read("src/p.txt").unwrap(), b"a\nB\nc\n");

    failed(
        &ws.call(
            "apply_patch",
            json!({"patch": "*** Begin Patch\nnonsense\n"}),
        ),
        "error",
        "parse_error",
    );
    let reject = "*** Begin Patch\n*** Update File: src/p.txt\n@@\n-zzz\n+y\n*** End Patch\n";
    failed(
        &ws.call("apply_patch", json!({"patch": reject})),
        "error",
        "hunk_rejected",
    );
    let missing = "*** Begin Patch\n*** Delete File: src/none.txt\n*** End Patch\n";
    failed(
        &ws.call("apply_patch", json!({"patch": missing})),
        "error",
        "not_found",
    );
    let partial = "*** Begin Patch\n*** Add File: src/new.txt\n+n\n*** Update File: src/p.txt\n@@\n-nope\n+x\n*** End Patch\n";
    failed(
        &ws.call("apply_patch", json!({"patch": partial})),
        "error",
        "hunk_rejected",
    );
    assert_eq!(ws.read("src/new.txt"), None);
    assert_eq!(ws.read("src/p.txt").unwrap(), b"a\nB\nc\n");
}

/// Sorted `path:line:text` lines of `rg` run in `root`.
fn ripgrep(root: &Path, args: &[&str]) -> Vec<String> {
    let output = Command::new("rg")
        .args([
            "--no-heading",
            "--line-number",
            "--color",
            "never",
            "--no-require-git",
        ])
        .args(args)
        .current_dir(root)
        .output()
        .expect("ripgrep (rg) must be installed: .ci/run installs it");
    let mut lines: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// A read that stops before the end of the file says so, and where to go on.
#[test]
fn read_file_says_it_is_truncated_how_long_the_file_is_and_where_to_go_on() {
    let ws = Ws::new("");
    let text: String = (1..=500).map(|n| format!("line {n}\n")).collect();
    ws.write("src/long.txt", &text);
    let first = ws.call("read_file", json!({"path": "src/long.txt"}));
    let data = ok(&first);
    let first_200: String = (1..=200).map(|n| format!("line {n}\n")).collect();
    assert_eq!(data["content"], first_200);
    assert_eq!(
        data["returned_range"],
        json!({"start_line": 1, "end_line": 200})
    );
    assert_eq!(data["truncated"], true);
    assert_eq!(data["total_lines"], 500);
    assert_eq!(data["next_start_line"], 201);
    assert_eq!(data["next_offset_bytes"], first_200.len());
    // Going on from there, by line or by byte, reads the same text.
    let by_line = ws.call(
        "read_file",
        json!({"path": "src/long.txt", "start_line": 201, "end_line": 500}),
    );
    let by_byte = ws.call(
        "read_file",
        json!({"path": "src/long.txt", "offset_bytes": first_200.len(), "max_bytes": 100_000}),
    );
    assert_eq!(ok(&by_line)["content"], &text[first_200.len()..]);
    assert_eq!(ok(&by_byte)["content"], &text[first_200.len()..]);
    for last in [by_line, by_byte] {
        assert_eq!(ok(&last)["truncated"], false);
        assert_eq!(ok(&last)["next_start_line"], Value::Null);
        assert_eq!(ok(&last)["next_offset_bytes"], Value::Null);
    }
}

/// Binary files and `glob_filter` against `rg --binary -g GLOB` itself: the same
/// lines, the same files reported as binary matches (with the same offsets), and the
/// same count as `rg --count --binary`. Binary files here fit one ripgrep buffer
/// (64 KiB); beyond that ripgrep's answer depends on where its buffers fall, airlock's
/// does not (see airlock-fs's search tests).
#[test]
fn grep_agrees_with_ripgrep_on_binary_files_and_glob_filters() {
    if !require(
        "grep_agrees_with_ripgrep_on_binary_files_and_glob_filters",
        &[Peer::Ripgrep],
    ) {
        return;
    }
    let ws = Ws::new("");
    ws.write("src/a.rs", "fn main() {}\n// main\n");
    ws.write("src/sub/b.rs", "main();\n");
    ws.write("src/sub/c.py", "main()\n");
    ws.write("src/.hidden.rs", "main\n");
    ws.write(".top.rs", "main\n");
    ws.write(".hid/h.rs", "main\n");
    ws.write(".gitignore", "target/\n*.log\n/gen/\n");
    ws.write("src/.ignore", "sub/c.py\n");
    ws.write("target/t.rs", "main\n");
    ws.write("run.log", "main log\n");
    ws.write("gen/out.rs", "main\n");
    ws.write("data/one.bin", b"main\n\0rest\nmain again\n");
    ws.write("data/two.bin", b"nothing\n\0main\n");
    ws.write("data/three.bin", b"\0\0\0 no match here\n");
    ws.write(
        "data/big.bin",
        [&b"x".repeat(60_000)[..], b"\nmain\n\0\n"].concat(),
    );
    ws.write("data/ok.txt", "main text\r\n");
    let globs = [
        None,
        Some("*.rs"),
        Some("*.log"),
        Some("src/**"),
        Some("src/sub/*"),
        Some("sub/*"),
        Some("!*.rs"),
        Some("*.bin"),
        Some("**/b.rs"),
        Some(".top.rs"),
        Some("target/*.rs"),
        Some("gen/**"),
        Some("{*.py,*.txt}"),
    ];
    for glob in globs {
        let mut args = json!({"pattern": "main", "max_results": 1000});
        let mut rg_args = vec!["--binary"];
        if let Some(glob) = glob {
            args["glob_filter"] = json!(glob);
            rg_args.extend(["-g", glob]);
        }
        rg_args.push("main");
        let envelope = ws.call("grep", args);
        let data = ok(&envelope);
        let mut ours: Vec<String> = data["matches"]
            .as_str()
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        ours.sort();
        let keep = |line: &String| {
            !line.starts_with(".airlock/")
                && !line.starts_with("airlock.yaml:")
                && !line.starts_with(".git/")
        };
        let mut theirs = ripgrep(ws.root(), &rg_args);
        theirs.retain(keep);
        assert_eq!(ours, theirs, "glob {glob:?}");
        let binary: Vec<String> = data["binary_matches"]
            .as_array()
            .map(|found| {
                found
                    .iter()
                    .map(|one| one["path"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        let theirs_binary: Vec<String> = theirs
            .iter()
            .filter_map(|line| {
                line.split_once(": binary file matches")
                    .map(|(path, _)| path.to_owned())
            })
            .collect();
        assert_eq!(binary, theirs_binary, "glob {glob:?}");
        let count_args: Vec<&str> = ["--count"]
            .iter()
            .copied()
            .chain(rg_args.iter().copied())
            .collect();
        let counted: u64 = ripgrep(ws.root(), &count_args)
            .iter()
            .filter(|line| keep(line))
            .map(|line| line.rsplit_once(':').unwrap().1.parse::<u64>().unwrap())
            .sum();
        assert_eq!(data["match_count"], counted, "glob {glob:?}");
    }
}

#[test]
fn grep_matches_ripgrep_invalid_regex_not_found_empty_truncation_blob() {
    if !require(
        "grep_matches_ripgrep_invalid_regex_not_found_empty_truncation_blob",
        &[Peer::Ripgrep],
    ) {
        return;
    }
    let ws = Ws::new("# main configuration: the defaults\n");
    ws.write(
        ".git/config",
        "[remote \"origin\"]\n  url = https://user:main-token@example.com\n",
    );
    ws.write("src/a.rs", "fn main() {}\nfn helper() {}\n// main again\n");
    ws.write("src/b.py", "def main():\n    pass\n");
    ws.write("docs/guide.md", "MAIN heading\nmain text\n");
    ws.write(".gitignore", "target/\n");
    ws.write("target/out.rs", "fn main() {}\n");
    ws.write("src/.hidden.rs", "fn main() {}\n");
    for (pattern, insensitive) in [("main", false), ("fn \\w+\\(", false), ("main", true)] {
        let envelope = ws.call(
            "grep",
            json!({"pattern": pattern, "case_insensitive": insensitive, "max_results": 1000}),
        );
        let data = ok(&envelope);
        let mut ours: Vec<String> = data["matches"]
            .as_str()
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        let rg_args: Vec<&str> = if insensitive {
            vec!["-i", pattern]
        } else {
            vec![pattern]
        };
        let mut theirs = ripgrep(ws.root(), &rg_args);
        // airlock's state, its configuration file and .git never show; rg
        // does not know them.
        assert!(
            ours.iter()
                .all(|line| !line.starts_with("airlock.yaml:") && !line.starts_with(".git/")),
            "{ours:?}"
        );
        theirs.retain(|line| {
            !line.starts_with(".airlock/")
                && !line.starts_with("airlock.yaml:")
                && !line.starts_with(".git/")
        });
        ours.sort();
        assert_eq!(ours, theirs, "pattern {pattern}");
        assert_eq!(data["match_count"], theirs.len());
    }
    let in_git = ws.call("grep", json!({"pattern": "main", "path": ".git"}));
    assert_eq!(ok(&in_git)["match_count"], 0);
    let globbed = ws.call("glob", json!({"pattern": "**/config*", "path": ".git"}));
    assert_eq!(ok(&globbed)["count"], 0);
    failed(
        &ws.call("grep", json!({"pattern": "fn ("})),
        "error",
        "invalid_regex",
    );
    failed(
        &ws.call("grep", json!({"pattern": "x", "path": "nowhere"})),
        "error",
        "not_found",
    );
    let empty = ws.call("grep", json!({"pattern": "zebra"}));
    assert_eq!(ok(&empty)["match_count"], 0);
    assert_eq!(ok(&empty)["matches"], "");
    let truncated = ws.call("grep", json!({"pattern": "main", "max_results": 2}));
    assert_eq!(ok(&truncated)["truncated"], true);
    assert_eq!(ok(&truncated)["returned"], 2);
    assert_eq!(ok(&truncated)["match_count"], 4);

    ws.write("src/big.txt", long_lines());
    let big = ws.call(
        "grep",
        json!({"pattern": "needle", "path": "src/big.txt", "max_results": 100}),
    );
    let blob = &ok(&big)["blob"];
    let text = String::from_utf8(ws.blob(blob["blob_ref"].as_str().unwrap())).unwrap();
    assert_eq!(text.lines().count(), 100);
    assert!(text.starts_with("src/big.txt:1:line 0 needle xxx"));
    let inline =
        json!({"pattern": "needle", "path": "src/big.txt", "output_mode": "require_inline"});
    failed(
        &ws.call("grep", inline),
        "error",
        "inline_required_too_large",
    );
}

#[test]
fn glob_invalid_not_found_ordering_empty_blob() {
    let ws = Ws::new("");
    let now = SystemTime::now();
    for (i, name) in ["src/b.rs", "src/a.rs", "src/c.rs", "src/z.txt"]
        .iter()
        .enumerate()
    {
        ws.write(name, "x\n");
        let file = std::fs::File::options()
            .write(true)
            .open(ws.path(name))
            .unwrap();
        // a.rs and b.rs share an mtime (path breaks the tie); c.rs is newest.
        let age = match i {
            0 | 1 => 100,
            2 => 10,
            _ => 50,
        };
        file.set_modified(now - Duration::from_secs(age)).unwrap();
    }
    let envelope = ws.call("glob", json!({"pattern": "**/*.rs"}));
    assert_eq!(ok(&envelope)["paths"], "src/c.rs\nsrc/a.rs\nsrc/b.rs");
    assert_eq!(ok(&envelope)["count"], 3);
    failed(
        &ws.call("glob", json!({"pattern": "src/[a"})),
        "error",
        "invalid_pattern",
    );
    failed(
        &ws.call("glob", json!({"pattern": "*", "path": "nowhere"})),
        "error",
        "not_found",
    );
    let empty = ws.call("glob", json!({"pattern": "**/*.go"}));
    assert_eq!(ok(&empty)["count"], 0);
    for i in 0..1_500 {
        ws.write(&format!("src/many/file_with_a_long_name_{i:04}.txt"), "");
    }
    let big = ws.call("glob", json!({"pattern": "src/many/*.txt"}));
    let data = ok(&big);
    assert_eq!(data["count"], 1_500);
    assert_eq!(data["truncated"], true);
    let text = String::from_utf8(ws.blob(data["blob"]["blob_ref"].as_str().unwrap())).unwrap();
    assert_eq!(text.lines().count(), 1_000);
    let inline = json!({"pattern": "src/many/*.txt", "output_mode": "require_inline"});
    failed(
        &ws.call("glob", inline),
        "error",
        "inline_required_too_large",
    );
}

/// One session runs every tool; denials hold; the audit chain verifies and
/// every blob it references is still there.
#[test]
fn one_session_runs_every_tool_and_its_blob_references_stay_reachable() {
    let ws = Ws::new("");
    ws.write(
        "src/lib.rs",
        "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n",
    );
    ws.write("src/big.txt", big_text(2_000));
    ws.write("src/long.txt", long_lines());
    ok(&ws.call("read_file", json!({"path": "src/lib.rs"})));
    ok(&ws.call(
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "a + b", "new_string": "a.wrapping_add(b)"}),
    ));
    ok(&ws.call(
        "write_file",
        json!({"path": "src/main.rs", "content": "fn main() {}\n"}),
    ));
    let patch = "*** Begin Patch\n*** Update File: src/main.rs\n@@\n-fn main() {}\n+fn main() { println!(\"{}\", 1); }\n*** Add File: tests/t.rs\n+#[test] fn t() {}\n*** End Patch\n";
    ok(&ws.call("apply_patch", json!({"patch": patch})));
    assert_eq!(
        ok(&ws.call("grep", json!({"pattern": "wrapping_add"})))["match_count"],
        1
    );
    assert_eq!(
        ok(&ws.call("glob", json!({"pattern": "**/*.rs"})))["count"],
        3
    );
    ok(&ws.call("list_dir", json!({"path": "src"})));
    assert_eq!(
        ok(&ws.call("exists", json!({"path": "tests/t.rs"})))["exists"],
        true
    );
    ok(&ws.call("stat", json!({"path": "src/main.rs"})));
    ok(&ws.call(
        "move_file",
        json!({"from": "tests/t.rs", "to": "tests/u.rs"}),
    ));
    ok(&ws.call("delete_file", json!({"path": "tests/u.rs"})));
    ok(&ws.call("grep", json!({"pattern": "needle", "path": "src/long.txt"})));
    ok(&ws.call(
        "read_file",
        json!({"path": "src/big.txt", "end_line": 2000, "max_bytes": 100000}),
    ));
    // Denied: out of root, protected, denied globs.
    failed(
        &ws.call("grep", json!({"pattern": "x", "path": "../"})),
        "denied",
        "path_forbidden",
    );
    failed(
        &ws.call("delete_file", json!({"path": "airlock.yaml"})),
        "denied",
        "path_forbidden",
    );
    failed(
        &ws.call("move_file", json!({"from": "src/lib.rs", "to": ".env"})),
        "denied",
        "path_denied",
    );
    failed(
        &ws.call("list_dir", json!({"path": ".airlock"})),
        "denied",
        "path_forbidden",
    );

    let verify = ws.run(&["audit", "verify"]);
    assert_eq!(verify.code, 0, "{}", verify.stdout);
    let refs: Vec<String> = ws
        .audit()
        .iter()
        .filter_map(|record| record["blob_ref"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(refs.len(), 2, "the grep and the read went to blobs");
    for blob_ref in refs {
        let content = ws.blob(&blob_ref);
        assert_eq!(airlock_fs::sha256_hex(&content), blob_ref);
    }
}

#[test]
fn configured_limits_clamp_and_the_defaults_are_permissive() {
    let config = "file_broker:\n  max_grep_results: 2\n  max_glob_results: 2\n  \
                  max_read_bytes_default: 8\n  max_read_bytes_hard: 10\n  \
                  max_write_bytes_hard: 10\n  max_inline_bytes: 40\n";
    let limited = Ws::new(config);
    let defaults = Ws::new("");
    for ws in [&limited, &defaults] {
        for i in 0..5 {
            ws.write(&format!("src/f{i}.txt"), "match me please\n");
        }
    }
    let grep = json!({"pattern": "match", "max_results": 50});
    assert_eq!(ok(&limited.call("grep", grep.clone()))["returned"], 2);
    assert_eq!(ok(&defaults.call("grep", grep))["returned"], 5);
    let glob = json!({"pattern": "src/*.txt", "max_results": 50});
    assert_eq!(ok(&limited.call("glob", glob.clone()))["truncated"], true);
    assert_eq!(ok(&defaults.call("glob", glob))["count"], 5);
    let read = json!({"path": "src/f0.txt", "max_bytes": 1000});
    assert_eq!(
        ok(&limited.call("read_file", read.clone()))["content"],
        "match me p"
    );
    assert_eq!(
        ok(&defaults.call("read_file", read))["content"],
        "match me please\n"
    );
    let write = json!({"path": "src/w.txt", "content": "more than ten bytes\n"});
    failed(
        &limited.call("write_file", write.clone()),
        "error",
        "too_large",
    );
    ok(&defaults.call("write_file", write));
    let inline = json!({"pattern": "match", "output_mode": "require_inline"});
    failed(
        &limited.call("grep", inline.clone()),
        "error",
        "inline_required_too_large",
    );
    ok(&defaults.call("grep", inline));
}

#[test]
fn delete_and_move_never_act_through_a_symbolic_link() {
    let ws = Ws::new("");
    ws.write("src/important.rs", "fn keep() {}\n");
    std::os::unix::fs::symlink("src/important.rs", ws.path("notes.txt")).unwrap();
    let delete = ws.call("delete_file", json!({"path": "notes.txt"}));
    failed(&delete, "error", "invalid_input");
    assert!(
        delete["error"]["message"]
            .as_str()
            .unwrap()
            .contains("symbolic link to `src/important.rs`"),
        "{delete:#}"
    );
    let moved = ws.call(
        "move_file",
        json!({"from": "notes.txt", "to": "src/old.txt"}),
    );
    failed(&moved, "error", "invalid_input");
    let patch = "*** Begin Patch\n*** Delete File: notes.txt\n*** End Patch\n";
    failed(
        &ws.call("apply_patch", json!({"patch": patch})),
        "error",
        "invalid_input",
    );
    assert_eq!(ws.read("src/important.rs").unwrap(), b"fn keep() {}\n");
    assert!(ws.path("notes.txt").is_symlink());
    // The file itself can be deleted by its own name.
    ok(&ws.call("delete_file", json!({"path": "src/important.rs"})));
}

#[test]
fn a_binary_change_shows_its_hashes_not_a_lossy_text_diff() {
    let ws = Ws::new("");
    ws.write("src/b.dat", [0xffu8, 0x00]);
    let encoded = base64::engine::general_purpose::STANDARD.encode([0xfeu8, 0x00]);
    let proposed =
        ws.0.call(
            "write_file",
            &json!({"path": "src/b.dat", "content": encoded, "encoding": "bytes"}),
            &["--defer"],
        )
        .json;
    let preview = proposed["hitl"]["diff_preview"].as_str().unwrap();
    assert_eq!(
        preview,
        format!(
            "--- a/src/b.dat\n+++ b/src/b.dat\nBinary content differs: {} (2 bytes) -> {} (2 bytes)\n",
            airlock_fs::sha256_hex([0xffu8, 0x00]),
            airlock_fs::sha256_hex([0xfeu8, 0x00])
        )
    );
}

#[test]
fn a_move_and_the_undo_of_a_delete_keep_the_permission_bits() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Ws::new("");
    ws.write("scripts/run.sh", "#!/bin/sh\necho hi\n");
    std::fs::set_permissions(
        ws.path("scripts/run.sh"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    let mode = |rel: &str| {
        std::fs::metadata(ws.path(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    ok(&ws.call(
        "move_file",
        json!({"from": "scripts/run.sh", "to": "scripts/go.sh"}),
    ));
    assert_eq!(mode("scripts/go.sh"), 0o750);
    let deleted = ws.call("delete_file", json!({"path": "scripts/go.sh"}));
    let id = ok(&deleted)["hitl_id"].as_str().unwrap().to_owned();
    assert!(!ws.path("scripts/go.sh").exists());
    let undo = ws.run(&["undo", &id]);
    assert_eq!(undo.code, 0, "{}", undo.stdout);
    assert_eq!(ws.read("scripts/go.sh").unwrap(), b"#!/bin/sh\necho hi\n");
    assert_eq!(mode("scripts/go.sh"), 0o750);
}

/// Spec 003's capability limits, each from a configuration file.
#[test]
fn capability_limits_stop_scans_and_refuse_large_changes() {
    // Scans: the first files by path, then truncated with the limit's name.
    let ws = Ws::new("file_broker:\n  max_scan_files: 3\n");
    for name in ["a", "b", "c", "d", "e"] {
        ws.write(&format!("src/{name}.txt"), "needle\n");
    }
    let grep = ws.call("grep", json!({"pattern": "needle", "path": "src"}));
    let data = ok(&grep);
    assert_eq!(
        data["matches"],
        "src/a.txt:1:needle\nsrc/b.txt:1:needle\nsrc/c.txt:1:needle"
    );
    assert_eq!(data["truncated"], true);
    assert_eq!(data["truncated_reason"], "max_scan_files");
    let glob = ws.call("glob", json!({"pattern": "**/*.txt", "path": "src"}));
    assert_eq!(ok(&glob)["count"], 3);
    assert_eq!(ok(&glob)["truncated_reason"], "max_scan_files");

    let ws = Ws::new("file_broker:\n  max_scan_bytes: 15\n");
    for name in ["a", "b", "c"] {
        ws.write(&format!("src/{name}.txt"), "needle\n");
    }
    let grep = ws.call("grep", json!({"pattern": "needle", "path": "src"}));
    let data = ok(&grep);
    assert_eq!(data["matches"], "src/a.txt:1:needle\nsrc/b.txt:1:needle");
    assert_eq!(data["match_count"], 2);
    assert_eq!(data["truncated_reason"], "max_scan_bytes");
    // A file named by path larger than the limit is not read at all.
    ws.write("src/big.txt", "needle\n".repeat(4));
    let big = ws.call("grep", json!({"pattern": "needle", "path": "src/big.txt"}));
    assert_eq!(ok(&big)["match_count"], 0);
    assert_eq!(ok(&big)["truncated_reason"], "max_scan_bytes");

    // Changes: refused whole, nothing written.
    let ws = Ws::new(
        "file_broker:\n  max_changed_files: 1\n  max_edit_replacements: 2\n  allowed_patch_formats: [v4a]\n",
    );
    let two = "*** Begin Patch\n*** Add File: src/x.txt\n+x\n*** Add File: src/y.txt\n+y\n*** End Patch\n";
    let refused = ws.call("apply_patch", json!({"patch": two}));
    failed(&refused, "denied", "limit_exceeded");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_changed_files"),
        "{refused:#}"
    );
    assert_eq!(ws.read("src/x.txt"), None);
    let moved = "*** Begin Patch\n*** Update File: src/e.txt\n*** Move to: src/f.txt\n@@\n-x\n+y\n*** End Patch\n";
    ws.write("src/e.txt", "x\n");
    failed(
        &ws.call("apply_patch", json!({"patch": moved})),
        "denied",
        "limit_exceeded",
    );
    let one = "*** Begin Patch\n*** Add File: src/x.txt\n+x\n*** End Patch\n";
    ok(&ws.call("apply_patch", json!({"patch": one})));
    assert_eq!(ws.read("src/x.txt").unwrap(), b"x\n");
    let unified = "--- /dev/null\n+++ b/src/z.txt\n@@ -0,0 +1 @@\n+z\n";
    let refused = ws.call("apply_patch", json!({"patch": unified}));
    failed(&refused, "denied", "limit_exceeded");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("allowed_patch_formats")
    );
    assert_eq!(ws.read("src/z.txt"), None);
    ws.write("src/r.txt", "a a a\n");
    let all =
        json!({"path": "src/r.txt", "old_string": "a", "new_string": "b", "replace_all": true});
    failed(&ws.call("edit_file", all), "denied", "limit_exceeded");
    assert_eq!(ws.read("src/r.txt").unwrap(), b"a a a\n");
    ws.write("src/r.txt", "a a\n");
    let all =
        json!({"path": "src/r.txt", "old_string": "a", "new_string": "b", "replace_all": true});
    assert_eq!(ok(&ws.call("edit_file", all))["replacements"], 2);
}

/// Spec 000's own keys: `file_broker.enabled` turns the file tools off;
/// `audit_log_enabled: false` is refused, never silently ignored.
#[test]
fn spec_000_switches_load_and_mean_what_they_say() {
    let ws = Ws::new("file_broker:\n  enabled: false\n");
    ws.write("src/a.txt", "a\n");
    let refused = ws.call("read_file", json!({"path": "src/a.txt"}));
    failed(&refused, "denied", "policy_denied");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("file_broker.enabled"),
        "{refused:#}"
    );
    // Over MCP, the tool list holds no file tool (the shell tool is not
    // one: `exec.enabled` switches it; nor are the session tools, nor
    // Claude Code's permission prompt, nor code mode, whose scripts see
    // the same tools).
    let mut mcp = RawStdio::start(&ws, &[]);
    let listed = mcp.request(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    mcp.finish();
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "exec",
            "session_open",
            "session_list",
            "session_close",
            "session_signal",
            "proposal_status",
            "permission_prompt",
            "codemode_eval"
        ],
        "{listed:#}"
    );

    let ws = Ws::new("file_broker:\n  enabled: true\n");
    ws.write("src/a.txt", "a\n");
    ok(&ws.call("read_file", json!({"path": "src/a.txt"})));

    let ws = Ws::new("file_broker:\n  audit_log_enabled: false\n");
    let check = ws.run(&["config", "check"]);
    assert_eq!(check.code, 2);
    let stderr = check.stderr;
    assert!(
        stderr.contains("airlock.yaml:2: file_broker.audit_log_enabled: cannot be false"),
        "{stderr}"
    );
}

/// Spec 000's context_id over MCP, in the request's `_meta`: recorded in the
/// audit log; one that is no string is an invalid-params error.
#[test]
fn an_mcp_context_id_in_meta_is_recorded() {
    let ws = Ws::new("");
    ws.write("src/m.txt", "m\n");
    let mut mcp = RawStdio::start(&ws, &[]);
    let read = |id: u64, meta: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "src/m.txt"}, "_meta": meta}});
    let ok_answer = mcp.request(read(2, json!({"context_id": "mcp-9"})));
    assert_eq!(
        ok_answer["result"]["structuredContent"]["status"], "allowed",
        "{ok_answer}"
    );
    let bad = mcp.request(read(3, json!({"context_id": 9})));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    mcp.finish();
    let records: Vec<Value> = ws
        .audit()
        .into_iter()
        .filter(|record| record["event"] == "read_file")
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["context_id"], "mcp-9");
}
