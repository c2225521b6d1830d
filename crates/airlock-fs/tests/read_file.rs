#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `read_file` through its public surface: JSON arguments in, whole `data`
//! (or error code) out.

mod common;

use airlock_fs::{ReadData, ReadParams, Sandbox, read_blob, read_file, sha256_hex};
use common::Fixture;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

const LINES: &str = "one\ntwo\nthree\nfour\nfive\n";

fn workspace() -> Fixture {
    let fixture = Fixture::standard();
    fixture.write("lines.txt", LINES);
    fixture.write("nonl.txt", "a\nb");
    fixture.write("empty.txt", "");
    fixture.write("utf.txt", "héllo\nwörld\n");
    std::fs::write(fixture.root.join("bin.dat"), [0xff, 0x00, b'a', b'\n']).unwrap();
    fixture
}

/// The call's `data` as JSON, or `{"error": code}`.
fn call(sandbox: &Sandbox, args: &Value) -> Value {
    let result = ReadParams::from_args(args).and_then(|params| read_file(sandbox, &params));
    match result {
        Ok(data) => serde_json::to_value(data).unwrap(),
        Err(error) => json!({"error": error.code().as_str()}),
    }
}

/// Whole `data` objects; `path`, `base_hash`, `size_bytes`, `total_lines`,
/// `encoding` and `max_bytes` are filled in from the file when the expectation
/// leaves them out, and `next_start_line`/`next_offset_bytes` are null.
fn check(sandbox: &Sandbox, fixture: &Fixture, cases: Vec<(Value, Value)>) {
    let mut expected = Vec::new();
    let mut actual = Vec::new();
    for (args, mut want) in cases {
        if want.get("error").is_none() {
            let path = args["path"].as_str().unwrap();
            let bytes = std::fs::read(fixture.root.join(path)).unwrap();
            let object = want.as_object_mut().unwrap();
            object.entry("path").or_insert(json!(path));
            object
                .entry("base_hash")
                .or_insert(json!(sha256_hex(&bytes)));
            object.entry("size_bytes").or_insert(json!(bytes.len()));
            let lines = bytes.split(|&byte| byte == b'\n').count()
                - usize::from(bytes.is_empty() || bytes.ends_with(b"\n"));
            object.entry("total_lines").or_insert(json!(lines));
            object.entry("next_start_line").or_insert(Value::Null);
            object.entry("next_offset_bytes").or_insert(Value::Null);
            object.entry("encoding").or_insert(json!("utf8"));
            object.entry("max_bytes").or_insert(json!(32_000));
            // Through `ReadData`, so the keys come in its order.
            let data: ReadData = serde_json::from_value(want).unwrap();
            want = serde_json::to_value(data).unwrap();
        }
        expected.push(json!({"args": args, "data": want}));
        actual.push(json!({"args": args, "data": call(sandbox, &args)}));
    }
    assert_eq!(
        serde_json::to_string_pretty(&expected).unwrap(),
        serde_json::to_string_pretty(&actual).unwrap()
    );
}

fn range(start_line: u64, end_line: u64) -> Value {
    json!({"start_line": start_line, "end_line": end_line})
}

#[test]
fn line_ranges_byte_windows_and_errors() {
    let fixture = workspace();
    let sandbox = fixture.sandbox("");
    let cases = vec![
        (
            json!({"path": "lines.txt"}),
            json!({"content": LINES, "returned_range": range(1, 5), "truncated": false}),
        ),
        (
            json!({"path": "lines.txt", "start_line": 2, "end_line": 3}),
            json!({"content": "two\nthree\n", "returned_range": range(2, 3), "truncated": true, "next_start_line": 4, "next_offset_bytes": 14}),
        ),
        (
            json!({"path": "lines.txt", "start_line": 4, "end_line": 100}),
            json!({"content": "four\nfive\n", "returned_range": range(4, 5), "truncated": false}),
        ),
        (
            json!({"path": "lines.txt", "start_line": 9}),
            json!({"content": "", "returned_range": range(9, 8), "truncated": false}),
        ),
        (
            json!({"path": "nonl.txt", "start_line": 2}),
            json!({"content": "b", "returned_range": range(2, 2), "truncated": false}),
        ),
        (
            json!({"path": "empty.txt"}),
            json!({"content": "", "returned_range": range(1, 0), "truncated": false}),
        ),
        // The cap keeps whole lines when at least one fits ...
        (
            json!({"path": "lines.txt", "max_bytes": 10}),
            json!({"content": "one\ntwo\n", "returned_range": range(1, 2), "truncated": true, "next_start_line": 3, "next_offset_bytes": 8, "max_bytes": 10}),
        ),
        // ... and cuts inside the first line otherwise.
        (
            json!({"path": "lines.txt", "start_line": 3, "max_bytes": 2}),
            json!({"content": "th", "returned_range": range(3, 3), "truncated": true, "next_start_line": 3, "next_offset_bytes": 10, "max_bytes": 2}),
        ),
        // Never inside a character.
        (
            json!({"path": "utf.txt", "max_bytes": 2}),
            json!({"content": "h", "returned_range": range(1, 1), "truncated": true, "next_start_line": 1, "next_offset_bytes": 1, "max_bytes": 2}),
        ),
        // Clamped to max_read_bytes_hard.
        (
            json!({"path": "lines.txt", "max_bytes": 10_000_000}),
            json!({"content": LINES, "returned_range": range(1, 5), "truncated": false, "max_bytes": 131_072}),
        ),
        // Byte windows; the line range is ignored.
        (
            json!({"path": "lines.txt", "offset_bytes": 4, "max_bytes": 6}),
            json!({"content": "two\nth", "returned_range": range(2, 3), "truncated": true, "next_start_line": 3, "next_offset_bytes": 10, "max_bytes": 6}),
        ),
        (
            json!({"path": "lines.txt", "offset_bytes": 4, "max_bytes": 4, "start_line": 1, "end_line": 1}),
            json!({"content": "two\n", "returned_range": range(2, 2), "truncated": true, "next_start_line": 3, "next_offset_bytes": 8, "max_bytes": 4}),
        ),
        (
            json!({"path": "lines.txt", "offset_bytes": 19}),
            json!({"content": "five\n", "returned_range": range(5, 5), "truncated": false}),
        ),
        (
            json!({"path": "lines.txt", "offset_bytes": 24}),
            json!({"content": "", "returned_range": range(6, 5), "truncated": false}),
        ),
        (
            json!({"path": "lines.txt", "offset_bytes": 1000}),
            json!({"content": "", "returned_range": range(6, 5), "truncated": false}),
        ),
        (
            json!({"path": "utf.txt", "offset_bytes": 2}),
            json!({"error": "invalid_utf8"}),
        ),
        // Bytes that are not UTF-8.
        (json!({"path": "bin.dat"}), json!({"error": "invalid_utf8"})),
        (
            json!({"path": "bin.dat", "encoding": "bytes"}),
            json!({"content": "/wBhCg==", "returned_range": range(1, 1), "truncated": false, "encoding": "bytes"}),
        ),
        (
            json!({"path": "bin.dat", "encoding": "bytes", "offset_bytes": 1, "max_bytes": 2}),
            json!({"content": "AGE=", "returned_range": range(1, 1), "truncated": true, "next_start_line": 1, "next_offset_bytes": 3, "encoding": "bytes", "max_bytes": 2}),
        ),
        // Through a symlink inside the root: the requested path is reported.
        (
            json!({"path": "link_in/real.txt"}),
            json!({"content": "real\n", "returned_range": range(1, 1), "truncated": false}),
        ),
        // Errors.
        (json!({"path": "src"}), json!({"error": "is_directory"})),
        (json!({"path": "link_in"}), json!({"error": "is_directory"})),
        (
            json!({"path": "missing.txt"}),
            json!({"error": "not_found"}),
        ),
        (
            json!({"path": "nodir/missing.txt"}),
            json!({"error": "not_found"}),
        ),
        (
            json!({"path": "../outside/secret.txt"}),
            json!({"error": "path_forbidden"}),
        ),
        (
            json!({"path": "link_out_file"}),
            json!({"error": "path_forbidden"}),
        ),
        (json!({"path": ".env"}), json!({"error": "path_denied"})),
        (json!({"path": "ok.txt"}), json!({"error": "path_denied"})),
        (
            json!({"path": ".airlock/audit.jsonl"}),
            json!({"error": "path_forbidden"}),
        ),
        (
            json!({"path": "lines.txt", "start_line": 0}),
            json!({"error": "invalid_input"}),
        ),
        (
            json!({"path": "lines.txt", "start_line": 3, "end_line": 2}),
            json!({"error": "invalid_input"}),
        ),
        (
            json!({"path": "lines.txt", "max_bytes": 0}),
            json!({"error": "invalid_input"}),
        ),
        (
            json!({"path": "lines.txt", "bogus": 1}),
            json!({"error": "invalid_input"}),
        ),
        (
            json!({"path": "lines.txt", "encoding": "latin1"}),
            json!({"error": "invalid_input"}),
        ),
        (
            json!({"path": "lines.txt", "start_line": -1}),
            json!({"error": "invalid_input"}),
        ),
        (json!({"start_line": 1}), json!({"error": "invalid_input"})),
    ];
    check(&sandbox, &fixture, cases);
}

#[test]
fn default_range_is_two_hundred_lines_and_base_hash_covers_the_whole_file() {
    let fixture = workspace();
    let text: String = (1..=300).map(|n| format!("line {n}\n")).collect();
    fixture.write("big.txt", &text);
    let first_200: String = (1..=200).map(|n| format!("line {n}\n")).collect();
    let from_250: String = (250..=300).map(|n| format!("line {n}\n")).collect();
    let sandbox = fixture.sandbox("");
    // 200 of 300 lines: the rest is there, and where it starts is said.
    let next_offset = first_200.len();
    check(
        &sandbox,
        &fixture,
        vec![
            (
                json!({"path": "big.txt"}),
                json!({"content": first_200, "returned_range": range(1, 200), "truncated": true, "total_lines": 300, "next_start_line": 201, "next_offset_bytes": next_offset}),
            ),
            (
                json!({"path": "big.txt", "start_line": 250}),
                json!({"content": from_250, "returned_range": range(250, 300), "truncated": false}),
            ),
        ],
    );
    let data = call(
        &sandbox,
        &json!({"path": "big.txt", "start_line": 7, "end_line": 7}),
    );
    assert_eq!(data["base_hash"], json!(sha256_hex(&text)));
}

#[test]
fn configured_caps_and_require_inline() {
    let fixture = workspace();
    let sandbox = fixture.sandbox(
        "file_broker:\n  max_read_bytes_default: 10\n  max_read_bytes_hard: 16\n  max_inline_bytes: 8\n",
    );
    check(
        &sandbox,
        &fixture,
        vec![
            (
                json!({"path": "lines.txt"}),
                json!({"content": "one\ntwo\n", "returned_range": range(1, 2), "truncated": true, "next_start_line": 3, "next_offset_bytes": 8, "max_bytes": 10}),
            ),
            (
                json!({"path": "lines.txt", "max_bytes": 100}),
                json!({"content": "one\ntwo\nthree\n", "returned_range": range(1, 3), "truncated": true, "next_start_line": 4, "next_offset_bytes": 14, "max_bytes": 16}),
            ),
            (
                json!({"path": "lines.txt", "max_bytes": 100, "output_mode": "require_inline"}),
                json!({"error": "inline_required_too_large"}),
            ),
            (
                json!({"path": "lines.txt", "end_line": 2, "output_mode": "require_inline"}),
                json!({"content": "one\ntwo\n", "returned_range": range(1, 2), "truncated": true, "next_start_line": 3, "next_offset_bytes": 8, "max_bytes": 10}),
            ),
            // base64 is what counts against the inline limit.
            (
                json!({"path": "lines.txt", "end_line": 2, "encoding": "bytes", "output_mode": "require_inline"}),
                json!({"error": "inline_required_too_large"}),
            ),
        ],
    );
}

#[test]
fn content_over_max_inline_bytes_becomes_a_blob_under_auto() {
    let fixture = workspace();
    let blob_dir = fixture.root.join(".airlock/blobs");
    let sandbox = fixture
        .sandbox("file_broker:\n  max_inline_bytes: 8\n")
        .with_blob_dir(blob_dir.clone());
    let blob = |text: &str| json!({"blob_ref": sha256_hex(text), "size_bytes": text.len(), "preview": text});
    check(
        &sandbox,
        &fixture,
        vec![
            (
                json!({"path": "lines.txt"}),
                json!({"blob": blob(LINES), "returned_range": range(1, 5), "truncated": false}),
            ),
            (
                json!({"path": "lines.txt", "output_mode": "require_inline"}),
                json!({"error": "inline_required_too_large"}),
            ),
            // Up to the limit stays inline.
            (
                json!({"path": "lines.txt", "end_line": 2}),
                json!({"content": "one\ntwo\n", "returned_range": range(1, 2), "truncated": true, "next_start_line": 3, "next_offset_bytes": 8}),
            ),
            // In bytes mode the blob holds the base64 text.
            (
                json!({"path": "lines.txt", "end_line": 2, "encoding": "bytes"}),
                json!({"blob": blob("b25lCnR3bwo="), "returned_range": range(1, 2), "truncated": true, "next_start_line": 3, "next_offset_bytes": 8, "encoding": "bytes"}),
            ),
        ],
    );
    assert_eq!(
        read_blob(&blob_dir, &sha256_hex(LINES)).unwrap(),
        LINES.as_bytes()
    );
    assert_eq!(
        read_blob(&blob_dir, &sha256_hex("b25lCnR3bwo=")).unwrap(),
        b"b25lCnR3bwo="
    );
}

#[test]
fn a_fifo_is_refused_without_blocking() {
    let fixture = workspace();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        fixture.root.join("pipe"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let sandbox = fixture.sandbox("");
    assert_eq!(
        call(&sandbox, &json!({"path": "pipe"})),
        json!({"error": "invalid_input"})
    );
}
