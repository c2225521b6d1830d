#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `grep`, `glob`, `list_dir`, `stat` and `exists` through their public
//! surface: JSON arguments in, whole `data` (or error code) out.

mod common;

use std::fs::File;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use airlock_fs::{
    FsError, GlobParams, GrepParams, ListDirParams, Sandbox, StatParams, exists, glob, grep,
    list_dir, read_blob, sha256_hex, stat,
};
use common::Fixture;
use pretty_assertions::assert_eq;
use serde::Serialize;
use serde_json::{Value, json};

/// The data of a call as JSON, or `{"error": code}`.
fn outcome<T: Serialize>(result: Result<T, FsError>) -> Value {
    match result {
        Ok(data) => serde_json::to_value(data).unwrap(),
        Err(error) => json!({"error": error.code().as_str()}),
    }
}

fn call_grep(sandbox: &Sandbox, args: &Value) -> Value {
    let data = outcome(GrepParams::from_args(args).and_then(|params| grep(sandbox, &params)));
    summarised(
        data,
        "match_count",
        ["No matches found", "1 match", "matches"],
    )
}

fn call_glob(sandbox: &Sandbox, args: &Value) -> Value {
    let data = outcome(GlobParams::from_args(args).and_then(|params| glob(sandbox, &params)));
    summarised(data, "count", ["No files matched", "1 file", "files"])
}

/// `data` without its `summary_text`, once checked against its count
/// (spec 003's receipt: `No matches found`, `1 match`, `N matches`), so
/// the tables below compare the rest.
fn summarised(mut data: Value, count: &str, [none, one, many]: [&str; 3]) -> Value {
    let Some(object) = data.as_object_mut() else {
        return data;
    };
    let Some(n) = object.get(count).and_then(Value::as_u64) else {
        return data;
    };
    let want = match n {
        0 => none.to_owned(),
        1 => one.to_owned(),
        n => format!("{n} {many}"),
    };
    assert_eq!(
        object.shift_remove("summary_text"),
        Some(json!(want)),
        "{count} {n}"
    );
    data
}

fn call_list_dir(sandbox: &Sandbox, args: &Value) -> Value {
    outcome(ListDirParams::from_args(args).and_then(|params| list_dir(sandbox, &params)))
}

fn call_stat(sandbox: &Sandbox, args: &Value) -> Value {
    outcome(StatParams::from_args(args).and_then(|params| stat(sandbox, &params)))
}

fn call_exists(sandbox: &Sandbox, args: &Value) -> Value {
    outcome(StatParams::from_args(args).and_then(|params| exists(sandbox, &params)))
}

/// Runs every case and compares the whole table at once, so one failure shows
/// all the differences.
fn check(call: fn(&Sandbox, &Value) -> Value, sandbox: &Sandbox, cases: Vec<(Value, Value)>) {
    let mut expected = Vec::new();
    let mut actual = Vec::new();
    for (args, want) in cases {
        actual.push(json!({"args": args, "data": call(sandbox, &args)}));
        expected.push(json!({"args": args, "data": want}));
    }
    assert_eq!(
        serde_json::to_string_pretty(&expected).unwrap(),
        serde_json::to_string_pretty(&actual).unwrap()
    );
}

/// The `data` of a grep that returned `lines`, of `match_count` in all.
fn grep_data(lines: &[&str], match_count: u64) -> Value {
    let truncated = match_count > lines.len() as u64;
    let mut data = serde_json::Map::new();
    data.insert("matches".into(), json!(lines.join("\n")));
    data.insert("match_count".into(), json!(match_count));
    data.insert("truncated".into(), json!(truncated));
    if truncated {
        data.insert("truncated_reason".into(), json!("max_results"));
    }
    data.insert("returned".into(), json!(lines.len()));
    Value::Object(data)
}

fn error(code: &str) -> Value {
    json!({"error": code})
}

/// A workspace for grep: sources, ignored, hidden, denied and protected
/// files, a binary file and links.
fn grep_workspace() -> Fixture {
    let fixture = Fixture::empty();
    for (path, content) in [
        ("src/main.rs", "fn main() {\n    println!(\"hello\");\n}\n"),
        (
            "src/lib.rs",
            "pub fn hello() -> &'static str {\n    \"Hello\"\n}\n",
        ),
        ("src/nested/deep.rs", "// hello from deep\n"),
        (
            "src/nested/ignored.rs",
            "// hello, ignored by src/.ignore\n",
        ),
        ("src/nested/trace.log", "hello, ignored by /.gitignore\n"),
        ("src/.ignore", "nested/ignored.rs\n"),
        ("docs/guide.md", "Say hello.\nHELLO again.\n"),
        ("crlf.txt", "hello crlf\r\n"),
        (".gitignore", "target/\n*.log\n"),
        ("target/debug/out.rs", "hello built\n"),
        ("app.log", "hello log\n"),
        (".hidden/h.txt", "hello hidden\n"),
        (".env", "hello=secret\n"),
        ("sub/.env", "hello=secret\n"),
        (".airlock/audit.jsonl", "{\"hello\":1}\n"),
        ("secrets/token", "hello token\n"),
        ("airlock.yaml", "# hello config\n"),
    ] {
        fixture.write(path, content);
    }
    std::fs::write(fixture.root.join("latin1.txt"), b"hello caf\xe9\n").unwrap();
    std::fs::write(fixture.root.join("bin.dat"), b"binary\0data\n").unwrap();
    symlink("src/lib.rs", fixture.root.join("link.rs")).unwrap();
    symlink("src", fixture.root.join("link_src")).unwrap();
    symlink(
        fixture.outside.join("secret.txt"),
        fixture.root.join("out.txt"),
    )
    .unwrap();
    fixture
}

/// Every line of the workspace that contains `hello`, case-sensitively, in
/// the order grep returns them (never the configuration file's).
const HELLO: &[&str] = &[
    "crlf.txt:1:hello crlf\r",
    "docs/guide.md:1:Say hello.",
    "latin1.txt:1:hello caf\u{fffd}",
    "src/lib.rs:1:pub fn hello() -> &'static str {",
    "src/main.rs:2:    println!(\"hello\");",
    "src/nested/deep.rs:1:// hello from deep",
];

#[test]
fn grep_returns_sorted_lines_and_honours_ignore_files_and_the_policy() {
    let fixture = grep_workspace();
    let sandbox = fixture.sandbox("");
    check(
        call_grep,
        &sandbox,
        vec![
            // Not searched: target/ and *.log (.gitignore, without a .git
            // dir), src/nested/ignored.rs (src/.ignore), hidden .hidden/,
            // denied .env, sub/.env and secrets/, the state dir .airlock/,
            // the binary bin.dat, the symlinks link.rs, link_src and
            // out.txt, and the protected configuration file airlock.yaml.
            (json!({"pattern": "hello"}), grep_data(HELLO, 6)),
            (
                json!({"pattern": "hello", "case_insensitive": true}),
                grep_data(
                    &[
                        "crlf.txt:1:hello crlf\r",
                        "docs/guide.md:1:Say hello.",
                        "docs/guide.md:2:HELLO again.",
                        "latin1.txt:1:hello caf\u{fffd}",
                        "src/lib.rs:1:pub fn hello() -> &'static str {",
                        "src/lib.rs:2:    \"Hello\"",
                        "src/main.rs:2:    println!(\"hello\");",
                        "src/nested/deep.rs:1:// hello from deep",
                    ],
                    8,
                ),
            ),
            (
                json!({"pattern": "^\\s+\\S"}),
                grep_data(
                    &[
                        "src/lib.rs:2:    \"Hello\"",
                        "src/main.rs:2:    println!(\"hello\");",
                    ],
                    2,
                ),
            ),
            (
                json!({"pattern": "hello|fn", "max_results": 3}),
                grep_data(
                    &[
                        "crlf.txt:1:hello crlf\r",
                        "docs/guide.md:1:Say hello.",
                        "latin1.txt:1:hello caf\u{fffd}",
                    ],
                    7,
                ),
            ),
            // Zero only counts.
            (
                json!({"pattern": "hello", "max_results": 0}),
                grep_data(&[], 6),
            ),
            // Clamped to max_grep_results.
            (
                json!({"pattern": "hello", "max_results": 100_000}),
                grep_data(HELLO, 6),
            ),
            (json!({"pattern": "nowhere to be found"}), grep_data(&[], 0)),
            // glob_filter is `rg -g`: a file it matches is searched even
            // where an ignore file leaves it out (src/nested/ignored.rs); an
            // ignored directory it does not match is not entered (target/).
            (
                json!({"pattern": "hello", "glob_filter": "*.rs"}),
                grep_data(
                    &[
                        HELLO[3],
                        HELLO[4],
                        HELLO[5],
                        "src/nested/ignored.rs:1:// hello, ignored by src/.ignore",
                    ],
                    4,
                ),
            ),
            (
                json!({"pattern": "hello", "glob_filter": "src/*/*.rs"}),
                grep_data(
                    &[
                        HELLO[5],
                        "src/nested/ignored.rs:1:// hello, ignored by src/.ignore",
                    ],
                    2,
                ),
            ),
            (
                json!({"pattern": "hello", "glob_filter": "!*.rs"}),
                grep_data(&HELLO[..3], 3),
            ),
            (
                json!({"pattern": "hello", "glob_filter": "*.log"}),
                grep_data(
                    &[
                        "app.log:1:hello log",
                        "src/nested/trace.log:1:hello, ignored by /.gitignore",
                    ],
                    2,
                ),
            ),
            // Anchored at the root, not at the directory searched.
            (
                json!({"pattern": "hello", "path": "src", "glob_filter": "nested/*.rs"}),
                grep_data(&[], 0),
            ),
            (
                json!({"pattern": "hello", "path": "src", "glob_filter": "src/nested/*.rs"}),
                grep_data(
                    &[
                        HELLO[5],
                        "src/nested/ignored.rs:1:// hello, ignored by src/.ignore",
                    ],
                    2,
                ),
            ),
            (
                json!({"pattern": "hello", "glob_filter": "docs/**"}),
                grep_data(&HELLO[1..2], 1),
            ),
            // A single file.
            (
                json!({"pattern": "hello", "path": "src/lib.rs"}),
                grep_data(&HELLO[3..4], 1),
            ),
            // A file named by path is searched whatever the filter, as rg does.
            (
                json!({"pattern": "hello", "path": "src/lib.rs", "glob_filter": "*.md"}),
                grep_data(&HELLO[3..4], 1),
            ),
            // A subdirectory: the ignore files above it still apply.
            (
                json!({"pattern": "hello", "path": "src/nested"}),
                grep_data(&HELLO[5..], 1),
            ),
            (
                json!({"pattern": "hello", "path": "./src/../src/"}),
                grep_data(&HELLO[3..], 3),
            ),
            // Through a symlink: reported where it leads.
            (
                json!({"pattern": "hello", "path": "link_src"}),
                grep_data(&HELLO[3..], 3),
            ),
            (
                json!({"pattern": "hello", "path": "link.rs"}),
                grep_data(&HELLO[3..4], 1),
            ),
            // A directory named on purpose is searched even when hidden or
            // ignored, as `rg <dir>` does.
            (
                json!({"pattern": "hello", "path": ".hidden"}),
                grep_data(&[".hidden/h.txt:1:hello hidden"], 1),
            ),
            (
                json!({"pattern": "hello", "path": "target"}),
                grep_data(&["target/debug/out.rs:1:hello built"], 1),
            ),
            // Refusals and errors.
            (
                json!({"pattern": "hello", "path": ".env"}),
                error("path_denied"),
            ),
            (
                json!({"pattern": "hello", "path": "secrets"}),
                error("path_denied"),
            ),
            (
                json!({"pattern": "hello", "path": ".airlock"}),
                error("path_forbidden"),
            ),
            (
                json!({"pattern": "hello", "path": "out.txt"}),
                error("path_forbidden"),
            ),
            (
                json!({"pattern": "hello", "path": "../outside"}),
                error("path_forbidden"),
            ),
            (
                json!({"pattern": "hello", "path": "missing"}),
                error("not_found"),
            ),
            (
                json!({"pattern": "hello", "path": "bin.dat/x"}),
                error("not_a_directory"),
            ),
            (json!({"pattern": "(unclosed"}), error("invalid_regex")),
            (json!({"pattern": "a\\x00b"}), error("invalid_regex")),
            (
                json!({"pattern": "hello", "glob_filter": "[z-a"}),
                error("invalid_pattern"),
            ),
            (
                json!({"pattern": "hello", "bogus": 1}),
                error("invalid_input"),
            ),
            (json!({"path": "src"}), error("invalid_input")),
            (
                json!({"pattern": "hello", "max_results": -1}),
                error("invalid_input"),
            ),
        ],
    );
}

#[test]
fn binary_files_are_counted_and_reported_not_shown() {
    let fixture = Fixture::empty();
    fixture.write("text.txt", "hello\n");
    // A NUL anywhere makes a file binary: before the match, after it, or far
    // beyond ripgrep's first buffer.
    std::fs::write(fixture.root.join("a.bin"), b"hello\n\0world\nhello again\n").unwrap();
    std::fs::write(fixture.root.join("b.bin"), b"nothing\n\0hello\n").unwrap();
    let mut late = b"hello\n".to_vec();
    late.extend(std::iter::repeat_n(b'x', 200_000));
    late.extend(b"\n\0\n");
    std::fs::write(fixture.root.join("c.bin"), &late).unwrap();
    std::fs::write(fixture.root.join("d.bin"), b"no match\0\n").unwrap();
    let sandbox = fixture.sandbox("");
    let notice = |path: &str, offset: u64| {
        format!("{path}: binary file matches (found \"\\0\" byte around offset {offset})")
    };
    let binary = |path: &str, offset: u64| json!({"path": path, "offset": offset});
    let all_lines = [
        notice("a.bin", 6),
        notice("b.bin", 8),
        notice("c.bin", 200_007),
        "text.txt:1:hello".to_owned(),
    ]
    .join("\n");
    check(
        call_grep,
        &sandbox,
        vec![
            (
                json!({"pattern": "hello"}),
                json!({
                    "matches": all_lines.clone(),
                    "match_count": 5,
                    "truncated": false,
                    "returned": 1,
                    "binary_matches": [binary("a.bin", 6), binary("b.bin", 8), binary("c.bin", 200_007)],
                }),
            ),
            (
                json!({"pattern": "hello", "path": "a.bin"}),
                json!({
                    "matches": notice("a.bin", 6),
                    "match_count": 2,
                    "truncated": false,
                    "returned": 0,
                    "binary_matches": [binary("a.bin", 6)],
                }),
            ),
            (
                json!({"pattern": "hello", "path": "d.bin"}),
                grep_data(&[], 0),
            ),
        ],
    );
}

#[test]
fn grep_order_is_by_path_then_line_whatever_the_threads_do() {
    let fixture = Fixture::empty();
    let mut expected = Vec::new();
    // Enough files and directories for several walker threads to take part.
    for dir in 0..20 {
        for file in 0..20 {
            let path = format!("d{dir:02}/f{file:02}.txt");
            let content: String = (1..=3).map(|line| format!("needle {line}\n")).collect();
            fixture.write(&path, &content);
            for line in 1..=3 {
                expected.push(format!("{path}:{line}:needle {line}"));
            }
        }
    }
    let sandbox = fixture.sandbox("file_broker:\n  max_grep_results: 5000\n");
    let args = json!({"pattern": "needle", "max_results": 5000});
    let refs: Vec<&str> = expected.iter().map(String::as_str).collect();
    for _ in 0..3 {
        assert_eq!(call_grep(&sandbox, &args), grep_data(&refs, 1200));
    }
    // Truncation takes the first lines in that order.
    let args = json!({"pattern": "needle", "max_results": 4});
    assert_eq!(call_grep(&sandbox, &args), grep_data(&refs[..4], 1200));
}

/// `<root>/.airlock/blobs`, as the broker sets it.
fn blob_dir(fixture: &Fixture) -> PathBuf {
    fixture.root.join(".airlock/blobs")
}

/// `data` with the inline list output under `key` replaced, in place, by the
/// blob of `text`.
fn with_blob(data: Value, key: &str, text: &str) -> Value {
    let mut shaped = serde_json::Map::new();
    for (field, value) in data.as_object().unwrap() {
        if field == key {
            let blob = json!({
                "blob_ref": sha256_hex(text),
                "size_bytes": text.len(),
                "preview": text,
            });
            shaped.insert("blob".to_owned(), blob);
        } else {
            shaped.insert(field.clone(), value.clone());
        }
    }
    Value::Object(shaped)
}

#[test]
fn large_grep_output_becomes_a_blob_under_auto() {
    let fixture = grep_workspace();
    let small = "file_broker:\n  max_inline_bytes: 64\n";
    let text = HELLO.join("\n");
    assert!(text.len() > 64);
    let with_blobs = fixture.sandbox(small).with_blob_dir(blob_dir(&fixture));
    let inline = grep_data(HELLO, 6);
    check(
        call_grep,
        &with_blobs,
        vec![
            (
                json!({"pattern": "hello"}),
                with_blob(inline.clone(), "matches", &text),
            ),
            (
                json!({"pattern": "hello", "output_mode": "require_inline"}),
                error("inline_required_too_large"),
            ),
            // Small output stays inline.
            (
                json!({"pattern": "hello", "max_results": 1}),
                grep_data(&HELLO[..1], 6),
            ),
            (
                json!({"pattern": "hello", "max_results": 1, "output_mode": "require_inline"}),
                grep_data(&HELLO[..1], 6),
            ),
        ],
    );
    let blob = read_blob(&blob_dir(&fixture), &sha256_hex(&text)).unwrap();
    assert_eq!(String::from_utf8(blob).unwrap(), text);

    // The blobs live in the state dir, which grep never searches.
    let again = call_grep(
        &with_blobs,
        &json!({"pattern": "hello", "max_results": 100}),
    );
    assert_eq!(again, with_blob(inline.clone(), "matches", &text));

    // Without a blob dir, large output under auto is returned inline.
    let without_blobs = fixture.sandbox(small);
    check(
        call_grep,
        &without_blobs,
        vec![
            (json!({"pattern": "hello"}), inline),
            (
                json!({"pattern": "hello", "output_mode": "require_inline"}),
                error("inline_required_too_large"),
            ),
        ],
    );
}

fn set_mtime(root: &Path, path: &str, seconds: u64) {
    let file = File::options().write(true).open(root.join(path)).unwrap();
    file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
        .unwrap();
}

fn glob_data(paths: &[&str], count: u64) -> Value {
    let truncated = count > paths.len() as u64;
    let mut data = json!({
        "paths": paths.join("\n"),
        "count": count,
        "truncated": truncated,
    });
    if truncated {
        data["truncated_reason"] = json!("max_results");
    }
    data
}

/// `data` of a walk from the root of [`glob_workspace`], which leaves out
/// `.hidden/` and `.gitignore` (hidden), `target/` (ignored), and
/// `.airlock/` (protected); `secrets/s.rs` and `id_rsa.rs` are left out
/// too, uncounted (a deny glob's count would tell they exist).
fn from_root(mut data: Value) -> Value {
    data["left_out"] = json!({"hidden": 2, "ignored": 1, "protected": 1});
    data
}

fn glob_workspace() -> Fixture {
    let fixture = Fixture::empty();
    for (path, seconds) in [
        ("a.rs", 1_000_010),
        ("b.rs", 1_000_030),
        ("src/c.rs", 1_000_020),
        ("src/d.rs", 1_000_020),
        ("src/deeper/e.rs", 1_000_005),
        ("docs/f.md", 1_000_040),
        ("target/x.rs", 1_000_050),
        (".hidden/h.rs", 1_000_050),
        ("secrets/s.rs", 1_000_050),
        (".airlock/z.rs", 1_000_050),
        ("id_rsa.rs", 1_000_050),
        (".gitignore", 1_000_050),
    ] {
        let content = if path == ".gitignore" {
            "target/\n"
        } else {
            "x\n"
        };
        fixture.write(path, content);
        set_mtime(&fixture.root, path, seconds);
    }
    symlink("a.rs", fixture.root.join("link.rs")).unwrap();
    std::fs::create_dir(fixture.root.join("empty.rs")).unwrap();
    fixture
}

#[test]
fn glob_lists_files_newest_first_then_by_path() {
    let fixture = glob_workspace();
    let sandbox = fixture.sandbox("");
    let all_rs = ["b.rs", "src/c.rs", "src/d.rs", "a.rs", "src/deeper/e.rs"];
    check(
        call_glob,
        &sandbox,
        vec![
            // Not listed: target/ (.gitignore), hidden .hidden/, denied
            // secrets/ and id_rsa.rs, the state dir, the symlink link.rs and
            // the directory empty.rs.
            (
                json!({"pattern": "**/*.rs"}),
                from_root(glob_data(&all_rs, 5)),
            ),
            (
                json!({"pattern": "**"}),
                from_root(glob_data(
                    &[
                        "docs/f.md",
                        "b.rs",
                        "src/c.rs",
                        "src/d.rs",
                        "a.rs",
                        "src/deeper/e.rs",
                    ],
                    6,
                )),
            ),
            // `*` does not cross `/`.
            (
                json!({"pattern": "*.rs"}),
                from_root(glob_data(&["b.rs", "a.rs"], 2)),
            ),
            (
                json!({"pattern": "src/*.rs"}),
                from_root(glob_data(&["src/c.rs", "src/d.rs"], 2)),
            ),
            (
                json!({"pattern": "{a,b}.rs"}),
                from_root(glob_data(&["b.rs", "a.rs"], 2)),
            ),
            // Relative to `path`; reported relative to the root.
            (
                json!({"pattern": "*.rs", "path": "src"}),
                glob_data(&["src/c.rs", "src/d.rs"], 2),
            ),
            (
                json!({"pattern": "**/*.rs", "path": "src/deeper"}),
                glob_data(&["src/deeper/e.rs"], 1),
            ),
            (
                json!({"pattern": "**/*.rs", "max_results": 2}),
                from_root(glob_data(&all_rs[..2], 5)),
            ),
            (json!({"pattern": "**/*.zig"}), from_root(glob_data(&[], 0))),
            (
                json!({"pattern": "*.rs", "path": "target"}),
                glob_data(&["target/x.rs"], 1),
            ),
            (json!({"pattern": "[z-a]"}), error("invalid_pattern")),
            (
                json!({"pattern": "a[", "path": "src"}),
                error("invalid_pattern"),
            ),
            (
                json!({"pattern": "*", "path": "missing"}),
                error("not_found"),
            ),
            (
                json!({"pattern": "*", "path": "a.rs"}),
                error("not_a_directory"),
            ),
            (
                json!({"pattern": "*", "path": "secrets"}),
                error("path_denied"),
            ),
            (
                json!({"pattern": "*", "path": ".airlock"}),
                error("path_forbidden"),
            ),
            (
                json!({"pattern": "*", "extra": true}),
                error("invalid_input"),
            ),
        ],
    );
}

#[test]
fn glob_caps_and_blobs() {
    let fixture = glob_workspace();
    let sandbox = fixture
        .sandbox("file_broker:\n  max_glob_results: 3\n  max_inline_bytes: 10\n")
        .with_blob_dir(blob_dir(&fixture));
    let all_rs = ["b.rs", "src/c.rs", "src/d.rs"];
    let first_three = all_rs.join("\n");
    let first_three = first_three.as_str();
    check(
        call_glob,
        &sandbox,
        vec![
            (
                json!({"pattern": "**/*.rs", "max_results": 100}),
                with_blob(from_root(glob_data(&all_rs[..3], 5)), "paths", first_three),
            ),
            (
                json!({"pattern": "**/*.rs"}),
                with_blob(from_root(glob_data(&all_rs[..3], 5)), "paths", first_three),
            ),
            (
                json!({"pattern": "**/*.rs", "output_mode": "require_inline"}),
                error("inline_required_too_large"),
            ),
            (
                json!({"pattern": "*.rs", "output_mode": "require_inline"}),
                from_root(glob_data(&["b.rs", "a.rs"], 2)),
            ),
        ],
    );
    let blob = read_blob(&blob_dir(&fixture), &sha256_hex(first_three)).unwrap();
    assert_eq!(blob, first_three.as_bytes());
}

fn list_workspace() -> Fixture {
    let fixture = Fixture::empty();
    for path in [
        "b.txt",
        "Z.md",
        "a/inner.txt",
        "a/.env",
        ".hidden",
        ".env",
        ".airlock/audit.jsonl",
        "secrets/token",
        "server.pem",
    ] {
        fixture.write(path, "x\n");
    }
    std::fs::create_dir(fixture.root.join("a/sub")).unwrap();
    symlink("a", fixture.root.join("link")).unwrap();
    symlink("nowhere", fixture.root.join("dangling")).unwrap();
    fixture
}

fn list_data(path: &str, entries: &[&str], count: u64) -> Value {
    json!({
        "path": path,
        "entries": entries.join("\n"),
        "count": count,
        "truncated": count > entries.len() as u64,
    })
}

#[test]
fn list_dir_lists_allowed_entries_by_name() {
    let fixture = list_workspace();
    let sandbox = fixture.sandbox("");
    let root = [".hidden", "Z.md", "a/", "b.txt", "dangling", "link"];
    check(
        call_list_dir,
        &sandbox,
        vec![
            // Not listed: .env, server.pem and secrets/ (denied), .airlock/
            // (the state dir).
            (json!({}), list_data("", &root, 6)),
            (json!({"path": "."}), list_data("", &root, 6)),
            (json!({"max_results": 2}), list_data("", &root[..2], 6)),
            (
                json!({"path": "a"}),
                list_data("a", &["inner.txt", "sub/"], 2),
            ),
            (json!({"path": "a/sub/"}), list_data("a/sub", &[], 0)),
            (
                json!({"path": "link"}),
                list_data("link", &["inner.txt", "sub/"], 2),
            ),
            (json!({"path": "b.txt"}), error("not_a_directory")),
            (json!({"path": "missing"}), error("not_found")),
            (json!({"path": "dangling"}), error("not_found")),
            (json!({"path": "secrets"}), error("path_denied")),
            (json!({"path": ".airlock"}), error("path_forbidden")),
            (json!({"path": ".."}), error("path_forbidden")),
            (json!({"path": 3}), error("invalid_input")),
        ],
    );

    let sandbox = fixture
        .sandbox("file_broker:\n  max_inline_bytes: 8\n")
        .with_blob_dir(blob_dir(&fixture));
    let text = root.join("\n");
    check(
        call_list_dir,
        &sandbox,
        vec![
            (
                json!({}),
                with_blob(list_data("", &root, 6), "entries", &text),
            ),
            (
                json!({"output_mode": "require_inline"}),
                error("inline_required_too_large"),
            ),
        ],
    );
    // The blob dir is inside the state dir, so the listing did not change.
    let sandbox = fixture.sandbox("");
    assert_eq!(call_list_dir(&sandbox, &json!({})), list_data("", &root, 6));
}

#[test]
fn a_state_dir_that_is_not_hidden_is_never_walked_or_listed() {
    let fixture = Fixture::empty();
    fixture.write("state/blobs/sha256/abc", "needle in the state dir\n");
    fixture.write("state/audit.jsonl", "needle\n");
    fixture.write("src/a.txt", "needle\n");
    let sandbox = fixture.sandbox("workspace:\n  state_dir: state\n");
    assert_eq!(
        call_grep(&sandbox, &json!({"pattern": "needle"})),
        grep_data(&["src/a.txt:1:needle"], 1)
    );
    // The state dir is left out, and glob says so.
    let mut expected = glob_data(&["src/a.txt"], 1);
    expected["left_out"] = json!({"hidden": 0, "ignored": 0, "protected": 1});
    assert_eq!(call_glob(&sandbox, &json!({"pattern": "**"})), expected);
    assert_eq!(
        call_list_dir(&sandbox, &json!({})),
        list_data("", &["src/"], 1)
    );
    assert_eq!(
        call_grep(&sandbox, &json!({"pattern": "needle", "path": "state"})),
        error("path_forbidden")
    );
}

#[test]
fn stat_and_exists() {
    let fixture = list_workspace();
    set_mtime(&fixture.root, "b.txt", 1_700_000_000);
    let readonly = fixture.root.join("Z.md");
    std::fs::set_permissions(&readonly, std::fs::Permissions::from_mode(0o444)).unwrap();
    let dir = std::fs::metadata(fixture.root.join("a")).unwrap();
    let dir_mtime_ms = dir
        .modified()
        .unwrap()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let sandbox = fixture.sandbox("");
    check(
        call_stat,
        &sandbox,
        vec![
            (
                json!({"path": "b.txt"}),
                json!({"path": "b.txt", "exists": true, "kind": "file", "size_bytes": 2, "mtime_ms": 1_700_000_000_000_i64, "readonly": false}),
            ),
            (
                json!({"path": "./Z.md"}),
                json!({"path": "Z.md", "exists": true, "kind": "file", "size_bytes": 2, "mtime_ms": call_stat(&sandbox, &json!({"path": "Z.md"}))["mtime_ms"], "readonly": true}),
            ),
            (
                json!({"path": "a"}),
                json!({"path": "a", "exists": true, "kind": "directory", "size_bytes": dir.len(), "mtime_ms": dir_mtime_ms, "readonly": false}),
            ),
            (
                json!({"path": "link"}),
                json!({"path": "link", "exists": true, "kind": "directory", "size_bytes": dir.len(), "mtime_ms": dir_mtime_ms, "readonly": false}),
            ),
            (json!({"path": "missing"}), error("not_found")),
            (json!({"path": "a/missing/deeper"}), error("not_found")),
            (json!({"path": "dangling"}), error("not_found")),
            (json!({"path": ".env"}), error("path_denied")),
            (json!({"path": "a/.env"}), error("path_denied")),
            (
                json!({"path": ".airlock/audit.jsonl"}),
                error("path_forbidden"),
            ),
            (json!({"path": "/etc/passwd"}), error("path_forbidden")),
            (json!({}), error("invalid_input")),
        ],
    );
    check(
        call_exists,
        &sandbox,
        vec![
            (
                json!({"path": "b.txt"}),
                json!({"path": "b.txt", "exists": true, "kind": "file"}),
            ),
            (
                json!({"path": "a/"}),
                json!({"path": "a", "exists": true, "kind": "directory"}),
            ),
            (
                json!({"path": "link"}),
                json!({"path": "link", "exists": true, "kind": "directory"}),
            ),
            (
                json!({"path": "missing"}),
                json!({"path": "missing", "exists": false, "kind": null}),
            ),
            (
                json!({"path": "a/missing/../deeper"}),
                json!({"path": "a/deeper", "exists": false, "kind": null}),
            ),
            (
                json!({"path": "b.txt/x"}),
                json!({"path": "b.txt/x", "exists": false, "kind": null}),
            ),
            (
                json!({"path": "dangling"}),
                json!({"path": "dangling", "exists": false, "kind": null}),
            ),
            // A refused path is refused whether it exists or not.
            (json!({"path": ".env"}), error("path_denied")),
            (json!({"path": "nothing.pem"}), error("path_denied")),
            (
                json!({"path": ".airlock/audit.jsonl"}),
                error("path_forbidden"),
            ),
            (json!({"path": ".airlock/none"}), error("path_forbidden")),
            (json!({"path": "../outside"}), error("path_forbidden")),
            (json!({"path": "b.txt", "x": 1}), error("invalid_input")),
        ],
    );
}
