use pretty_assertions::assert_eq;

use super::*;
use LineEdit::{Add, Context, Remove};

/// Parses `text` as `format` and applies its only operation, an update, to `original`.
fn apply(format: PatchFormat, original: &str, text: &str) -> Result<String, PatchError> {
    let patch = parse(text, format)?;
    match &patch.ops[..] {
        [PatchOp::Update { path, chunks, .. }] => apply_chunks(path, original, chunks),
        ops => panic!("expected one update, parsed {ops:?}"),
    }
}

/// A V4A patch updating `f` with `body`.
fn v4a(body: &str) -> String {
    format!("*** Begin Patch\n*** Update File: f\n{body}*** End Patch\n")
}

fn check_apply(original: &str, body: &str, expected: Result<&str, &str>) {
    let actual = apply(PatchFormat::V4a, original, &v4a(body));
    let actual = actual.as_deref().map_err(ToString::to_string);
    assert_eq!(actual, expected.map_err(ToOwned::to_owned));
}

fn check_parse_error(text: &str, format: PatchFormat, expected: &str) {
    match parse(text, format) {
        Ok(patch) => panic!("expected `{expected}`, parsed {patch:?}"),
        Err(error) => {
            assert_eq!(error.code(), ErrorCode::ParseError);
            assert_eq!(error.to_string(), expected);
        }
    }
}

fn chunk(lines: &[(LineEdit, &str)]) -> Chunk {
    let mut chunk = Chunk::default();
    for (edit, line) in lines {
        chunk.push(*edit, *line);
    }
    chunk
}

/// A chunk as the V4A parser makes it: it always leaves a final newline (Codex's rule).
fn v4a_chunk(lines: &[(LineEdit, &str)]) -> Chunk {
    Chunk {
        final_newline: Some(true),
        ..chunk(lines)
    }
}

#[test]
fn parses_every_v4a_operation() {
    let text = "\
*** Begin Patch
*** Add File: docs/new.md
+# Title
+
+text
*** Delete File: old.txt
*** Update File: src/lib.rs
*** Move to: src/core.rs
@@ impl Foo {
     fn a() {}
-    fn b() {}
+    fn c() {}

@@
 last
+appended
*** End of File
*** End Patch
";
    let mut first = v4a_chunk(&[
        (Context, "    fn a() {}"),
        (Remove, "    fn b() {}"),
        (Add, "    fn c() {}"),
    ]);
    first.anchor = Some("impl Foo {".to_owned());
    let mut second = v4a_chunk(&[(Context, "last"), (Add, "appended")]);
    second.end_of_file = true;
    assert_eq!(
        parse(text, PatchFormat::Auto),
        Ok(Patch {
            format: PatchFormat::V4a,
            ops: vec![
                PatchOp::Add {
                    path: "docs/new.md".to_owned(),
                    content: "# Title\n\ntext\n".to_owned(),
                },
                PatchOp::Delete {
                    path: "old.txt".to_owned(),
                },
                PatchOp::Update {
                    path: "src/lib.rs".to_owned(),
                    move_to: Some("src/core.rs".to_owned()),
                    chunks: vec![first, second],
                },
            ],
        })
    );
}

#[test]
fn v4a_tolerates_whitespace_heredocs_and_chunks_without_header() {
    let expected = Ok(Patch {
        format: PatchFormat::V4a,
        ops: vec![PatchOp::Update {
            path: "a.txt".to_owned(),
            move_to: None,
            chunks: vec![v4a_chunk(&[
                (Context, "x"),
                (Context, ""),
                (Remove, "y"),
                (Add, "z"),
            ])],
        }],
    });
    let body = "  *** Begin Patch  \n*** Update File:  a.txt \n x\n\n-y\n+z\n\n  *** End Patch\n";
    assert_eq!(parse(body, PatchFormat::Auto), expected);
    for opening in [
        "apply_patch <<'EOF'",
        "apply_patch <<EOF",
        "apply_patch <<\"EOF\"",
    ] {
        let wrapped = format!("\n{opening}\n{body}EOF\n\n");
        assert_eq!(parse(&wrapped, PatchFormat::Auto), expected, "{opening}");
    }
    let crlf = body.replace('\n', "\r\n");
    assert_eq!(parse(&crlf, PatchFormat::V4a), expected);
}

#[test]
fn v4a_parse_errors_name_the_line() {
    let cases = [
        ("", "line 1: the patch is empty"),
        (
            "hello\n",
            "line 1: neither a V4A patch (starting `*** Begin Patch`) nor a unified diff (starting `---` or `diff --git`) was recognised; found `hello`",
        ),
        (
            "*** Begin Patch\n*** Add File: a\n+x\n",
            "line 3: the patch ends without `*** End Patch`",
        ),
        (
            "*** Begin Patch\n*** Frobnicate File: a\n*** End Patch\n",
            "line 2: unknown marker `*** Frobnicate File: a`; expected `*** Add File:`, `*** Delete File:`, `*** Update File:`, `*** Move to:`, `*** End of File` or `*** End Patch`",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n x\nbad\n*** End Patch\n",
            "line 5: a line in a chunk of `a` must start with ` ` (context), `-` (removed) or `+` (added), found `bad`",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n*** End Patch\n",
            "line 2: `*** Update File: a` has no chunks",
        ),
        (
            "*** Begin Patch\n*** Add File:  \n*** End Patch\n",
            "line 2: the path after `*** Add File:` is empty",
        ),
        (
            "*** Begin Patch\n*** Add File: a\nx\n*** End Patch\n",
            "line 3: every line of the added file `a` must start with `+`, found `x`",
        ),
        (
            "*** Begin Patch\n*** Delete File: a\n*** Add File: a\n+x\n*** End Patch\n",
            "line 3: `a` is already changed by the operation on line 2; a patch may touch each path once",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n*** Move to: b\n@@\n-x\n*** Delete File: b\n*** End Patch\n",
            "line 6: `b` is already changed by the operation on line 2; a patch may touch each path once",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n@@\n-x\n*** End Patch\n",
            "line 3: the chunk has no lines",
        ),
        (
            "*** Begin Patch\n*** Move to: b\n*** End Patch\n",
            "line 2: `*** Move to:` must directly follow an `*** Update File:` line",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n*** End of File\n*** End Patch\n",
            "line 3: `*** End of File` must end a chunk, but no chunk precedes it",
        ),
        (
            "*** Begin Patch\n*** End Patch\nmore\n",
            "line 3: unexpected text after `*** End Patch`: `more`",
        ),
        (
            "*** Begin Patch\n*** End Patch\n",
            "line 2: the patch changes no file",
        ),
        (
            "*** Begin Patch\nstray\n*** End Patch\n",
            "line 2: expected `*** Add File:`, `*** Delete File:`, `*** Update File:` or `*** End Patch`, found `stray`",
        ),
        (
            "apply_patch <<'EOF'\n*** Begin Patch\n*** Delete File: a\n*** End Patch\n",
            "line 1: the heredoc is not closed: the last line should be `EOF`",
        ),
    ];
    for (text, expected) in cases {
        check_parse_error(text, PatchFormat::Auto, expected);
    }
    check_parse_error(
        "--- a/x\n+++ b/x\n",
        PatchFormat::V4a,
        "line 1: expected `*** Begin Patch`, found `--- a/x`",
    );
}

#[test]
fn parses_unified_diffs_with_git_headers() {
    let text = "\
diff --git a/src/main.rs b/src/main.rs
index 83db48f..bf269f4 100644
--- a/src/main.rs\t
+++ b/src/main.rs
@@ -1,3 +1,3 @@ fn main() {
 a

-b
+B
@@ -10 +10,0 @@
-gone
\\ No newline at end of file
diff --git a/new.txt b/new.txt
new file mode 100644
--- /dev/null
+++ b/new.txt
@@ -0,0 +1,2 @@
+one
+two
\\ No newline at end of file
diff --git a/old.txt b/old.txt
deleted file mode 100644
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-x
diff --git a/from.rs b/to.rs
similarity index 100%
rename from from.rs
rename to to.rs
diff --git a/empty b/empty
new file mode 100644
index 0000000..e69de29
diff --git a/script.sh b/script.sh
old mode 100644
new mode 100755
";
    let mut first = chunk(&[(Context, "a"), (Context, ""), (Remove, "b"), (Add, "B")]);
    first.line_hint = Some(1);
    first.exact = Some(ExactHunk {
        new_start: 1,
        old: vec!["a\n".into(), "\n".into(), "b\n".into()],
        new: vec!["a\n".into(), "\n".into(), "B\n".into()],
    });
    let mut second = chunk(&[(Remove, "gone")]);
    second.line_hint = Some(10);
    second.final_newline = Some(true);
    second.exact = Some(ExactHunk {
        new_start: 10,
        old: vec!["gone".into()],
        new: vec![],
    });
    assert_eq!(
        parse(text, PatchFormat::Auto),
        Ok(Patch {
            format: PatchFormat::Unified,
            ops: vec![
                PatchOp::Update {
                    path: "src/main.rs".to_owned(),
                    move_to: None,
                    chunks: vec![first, second],
                },
                PatchOp::Add {
                    path: "new.txt".to_owned(),
                    content: "one\ntwo".to_owned(),
                },
                PatchOp::Delete {
                    path: "old.txt".to_owned(),
                },
                PatchOp::Update {
                    path: "from.rs".to_owned(),
                    move_to: Some("to.rs".to_owned()),
                    chunks: Vec::new(),
                },
                PatchOp::Add {
                    path: "empty".to_owned(),
                    content: String::new(),
                },
            ],
        })
    );
}

#[test]
fn unified_parse_errors_name_the_line() {
    let cases = [
        (
            "--- a/x\n@@ -1 +1 @@\n",
            "line 2: a `---` line must be followed by a `+++` line",
        ),
        (
            "--- a/x\n+++ b/x\n",
            "line 2: the `---`/`+++` header is not followed by a hunk (`@@ -l,n +l,n @@`)",
        ),
        (
            "--- a/x\n+++ b/x\n@@ -1,3 +1,2 @@\n a\n-b\n+c\n",
            "line 6: the hunk `@@ -1,3 +1,2 @@` ends early: 1 old and 0 new lines are missing",
        ),
        (
            "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n c\n",
            "line 6: this line follows a complete hunk: the hunk has more lines than its `@@` header says",
        ),
        (
            "--- a/x\n+++ b/x\n@@ -1,2 +1 @@\n-a\n+b\n+c\n",
            "line 6: the hunk `@@ -1,2 +1 @@` has more added lines than its header says",
        ),
        (
            "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n~b\n",
            "line 5: the hunk `@@ -1 +1 @@` ends early: 0 old and 1 new lines are missing",
        ),
        (
            "--- a/x\n+++ b/x\n@@ one @@\n",
            "line 3: malformed hunk header `@@ one @@`, expected `@@ -l,n +l,n @@`",
        ),
        (
            "diff --git a/x b/x\ncopy from y\n",
            "line 2: git copies (`copy from`/`copy to`) are not supported; add the file instead",
        ),
        (
            "diff --git a/x b/x\nBinary files a/x and b/x differ\n",
            "line 2: binary diffs are not supported",
        ),
        (
            "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
            "line 6: `x` is already changed by the operation on line 1; a patch may touch each path once",
        ),
        (
            "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\nstray\n",
            "line 6: expected a file header (`---` or `diff --git`), found `stray`",
        ),
    ];
    for (text, expected) in cases {
        check_parse_error(text, PatchFormat::Auto, expected);
    }
}

#[test]
fn unified_paths_may_not_be_empty() {
    // Found by the patch_parser fuzz target.
    check_parse_error(
        "diff --git \"\" \"\"\nnew file mode 100644\n",
        PatchFormat::Auto,
        "line 1: the operation names an empty path",
    );
    check_parse_error(
        "diff --git a/x b/y\nrename from x\nrename to \n",
        PatchFormat::Auto,
        "line 1: the operation names an empty path",
    );
}

#[test]
fn huge_line_numbers_do_not_overflow() {
    let diff = format!(
        "--- a/f\n+++ b/f\n@@ -{max} +{max} @@\n-x\n+y\n@@ -{max},0 +1 @@\n+z\n",
        max = usize::MAX
    );
    // git takes both hunks to the end of the file (neither has trailing context).
    assert_eq!(
        apply(PatchFormat::Unified, "x\n", &diff).map_err(|error| error.to_string()),
        Ok("y\nz\n".to_owned())
    );
    // Where git refuses (the text differs in whitespace), the lenient search sees the
    // impossible hint.
    assert_eq!(
        apply(PatchFormat::Unified, "x \n", &diff).map_err(|error| error.to_string()),
        Err(format!(
            "`f`: the chunk starting `z` inserts after line {}, which is not after the previous chunk or not in the file (1 lines)",
            usize::MAX
        ))
    );
    let diff = "--- a/f\n+++ b/f\n@@ -99999999999999999999 +1 @@\n-x\n+y\n";
    check_parse_error(
        diff,
        PatchFormat::Unified,
        "line 3: malformed hunk header `@@ -99999999999999999999 +1 @@`, expected `@@ -l,n +l,n @@`",
    );
}

#[test]
fn locates_exactly_first() {
    check_apply("a\nb\nc\n", "@@\n b\n-c\n+C\n", Ok("a\nb\nC\n"));
}

#[test]
fn locates_ignoring_trailing_whitespace() {
    // The file's context line keeps its trailing spaces.
    check_apply("a  \nb\n", "@@\n a\n-b\n+B\n", Ok("a  \nB\n"));
}

#[test]
fn locates_ignoring_surrounding_whitespace() {
    check_apply(
        "fn f() {\n\tx();\n}\n",
        "@@\n     x();\n-}\n+} // end\n",
        Ok("fn f() {\n\tx();\n} // end\n"),
    );
}

#[test]
fn locates_ignoring_punctuation_style() {
    check_apply(
        "say(\u{201C}hi\u{201D});  // \u{2014} greet\nnext\n",
        "@@\n-say(\"hi\"); // - greet\n+say(\"hello\");\n next\n",
        Ok("say(\"hello\");\nnext\n"),
    );
}

#[test]
fn the_strictest_pass_that_finds_the_chunk_decides() {
    // Pass 1 finds one place; pass 3 would find two, but is never tried.
    check_apply("  x\nx\n", "@@\n-x\n+y\n", Ok("  x\ny\n"));
}

#[test]
fn ambiguity_is_an_error_in_every_pass() {
    check_apply(
        "x\ny\nx\n",
        "@@\n-x\n+z\n",
        Err(
            "`f`: the chunk starting `x` matches at line 1 and at line 3; add context lines or an `@@` anchor to make it unique",
        ),
    );
    check_apply(
        "x \ny\nx\t\n",
        "@@\n-x\n+z\n",
        Err(
            "`f`: the chunk starting `x` matches at line 1 and at line 3 (ignoring trailing whitespace); add context lines or an `@@` anchor to make it unique",
        ),
    );
    check_apply(
        " x\ny\n\tx\n",
        "@@\n-x\n+z\n",
        Err(
            "`f`: the chunk starting `x` matches at line 1 and at line 3 (ignoring surrounding whitespace); add context lines or an `@@` anchor to make it unique",
        ),
    );
    check_apply(
        "a\u{2013}b\ny\na\u{2014}b\n",
        "@@\n-a-b\n+z\n",
        Err(
            "`f`: the chunk starting `a-b` matches at line 1 and at line 3 (ignoring whitespace and punctuation style); add context lines or an `@@` anchor to make it unique",
        ),
    );
}

#[test]
fn an_anchor_selects_the_place() {
    let file = "fn a() {\n    x\n}\nfn b() {\n    x\n}\n";
    check_apply(
        file,
        "@@ fn b() {\n-    x\n+    y\n",
        Ok("fn a() {\n    x\n}\nfn b() {\n    y\n}\n"),
    );
    check_apply(
        file,
        "@@ }\n-    x\n+    y\n",
        Err("`f`: the anchor `}` matches line 3 and line 6; use a line that occurs once"),
    );
    check_apply(
        file,
        "@@ fn c() {\n-    x\n+    y\n",
        Err("`f`: cannot find the anchor line `fn c() {` after the previous chunk"),
    );
    // A chunk with only added lines needs its anchor, but goes at the end of the
    // file, as Codex's apply_patch puts it (tests/fixtures/apply_patch/codex-*).
    check_apply(
        file,
        "@@ fn b() {\n+    w\n",
        Ok("fn a() {\n    x\n}\nfn b() {\n    x\n}\n    w\n"),
    );
    check_apply(
        file,
        "@@ fn c() {\n+    w\n",
        Err("`f`: cannot find the anchor line `fn c() {` after the previous chunk"),
    );
    // The next chunk is looked for after the anchor, and still goes before.
    check_apply(
        "fn a() {\n    x\n}\n",
        "@@ fn a() {\n+    w\n@@\n-    x\n+    y\n",
        Ok("fn a() {\n    y\n}\n    w\n"),
    );
}

#[test]
fn end_of_file_chunks_match_only_at_the_end() {
    check_apply(
        "x\ny\nx\n",
        "@@\n-x\n+z\n*** End of File\n",
        Ok("x\ny\nz\n"),
    );
    check_apply(
        "x\ny\n",
        "@@\n-x\n+z\n*** End of File\n",
        Err("`f`: cannot find the lines of the chunk starting `x` at the end of the file"),
    );
    // Without context a chunk is appended.
    check_apply("x\n", "@@\n+y\n", Ok("x\ny\n"));
}

#[test]
fn chunks_apply_in_order_and_never_overlap() {
    check_apply(
        "a\nb\nc\nd\n",
        "@@\n-a\n+A\n@@\n c\n-d\n+D\n",
        Ok("A\nb\nc\nD\n"),
    );
    check_apply(
        "a\nb\nc\n",
        "@@\n-b\n+B\n@@\n-a\n+A\n",
        Err(
            "`f`: the lines of the chunk starting `a` are only found before the end of the previous chunk or anchor; chunks must be in file order and must not overlap",
        ),
    );
    check_apply(
        "a\nb\n",
        "@@\n-q\n+Q\n",
        Err("`f`: cannot find the lines of the chunk starting `q`"),
    );
}

#[test]
fn line_hints_place_repeated_context() {
    // As `git apply` places them: at the hinted line when the lines are there, else
    // at the nearest place they are (the results are git's own).
    let original = "x\nq\nx\nq\nx\nq\nx\nq\n";
    let diff = "--- a/f\n+++ b/f\n@@ -5,2 +5,2 @@\n-x\n+y\n q\n";
    assert_eq!(
        apply(PatchFormat::Unified, original, diff),
        Ok("x\nq\nx\nq\ny\nq\nx\nq\n".to_owned())
    );
    let diff = "--- a/f\n+++ b/f\n@@ -9,2 +9,2 @@\n-x\n+y\n q\n";
    assert_eq!(
        apply(PatchFormat::Unified, original, diff),
        Ok("x\nq\nx\nq\nx\nq\ny\nq\n".to_owned())
    );
    // A hunk without trailing context belongs at the end of the file (git's rule).
    let diff = "--- a/f\n+++ b/f\n@@ -3 +3 @@\n-x\n+y\n";
    assert_eq!(
        apply(PatchFormat::Unified, "x\nx\nx\nx\n", diff),
        Ok("x\nx\nx\ny\n".to_owned())
    );
    // Where git would refuse (the lines are there only ignoring whitespace), a wrong
    // hint falls back to the lenient search, which refuses to guess.
    let diff = "--- a/f\n+++ b/f\n@@ -9,2 +9,2 @@\n-x\n+y\n q\n";
    assert_eq!(
        apply(PatchFormat::Unified, "x \nq\nx \nq\n", diff).map_err(|error| error.code()),
        Err(ErrorCode::Ambiguous)
    );
    // A wrong but unique hint is corrected by the search, and the next hunk's hint is
    // shifted by the same amount.
    let original = "p\na\nq\nr\ns\nb\n";
    let diff = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+A\n@@ -4 +4 @@\n-s\n+S\n";
    assert_eq!(
        apply(PatchFormat::Unified, original, diff),
        Ok("p\nA\nq\nr\nS\nb\n".to_owned())
    );
    // Pure insertions go at their hinted line.
    let diff = "--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+first\n@@ -2,0 +4 @@\n+third\n";
    assert_eq!(
        apply(PatchFormat::Unified, "a\nb\nc\n", diff),
        Ok("first\na\nb\nthird\nc\n".to_owned())
    );
}

#[test]
fn line_endings_and_the_final_newline_are_kept() {
    check_apply("a\r\nb\r\n", "@@\n a\n-b\n+B\n+C\n", Ok("a\r\nB\r\nC\r\n"));
    // V4A updates end with a line ending, as Codex's do.
    check_apply("a\nb", "@@\n a\n-b\n+B\n+C\n", Ok("a\nB\nC\n"));
    check_apply("a\nb", "@@\n a\n b\n+c\n", Ok("a\nb\nc\n"));
    check_apply("a\r\nb", "@@\n-a\n+A\n", Ok("A\r\nb\r\n"));
    check_apply("a\nb", "@@\n-a\n-b\n", Ok(""));
    check_apply("", "@@\n+a\n", Ok("a\n"));
    // A unified diff says what becomes of the final newline.
    let added = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+a\n";
    assert_eq!(
        apply(PatchFormat::Unified, "a", added),
        Ok("a\n".to_owned())
    );
    let removed = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+a\n\\ No newline at end of file\n";
    assert_eq!(
        apply(PatchFormat::Unified, "a\n", removed),
        Ok("a".to_owned())
    );
}

#[test]
fn a_malformed_hand_made_chunk_is_rejected() {
    let mut bad = chunk(&[(Remove, "a")]);
    bad.script.push(Add);
    assert_eq!(
        apply_chunks("f", "a\n", &[bad]).map_err(|error| error.to_string()),
        Err("`f`: the chunk starting `a` is malformed: its script does not match its old and new lines".to_owned())
    );
}

#[test]
fn v4a_unified_style_headers_give_hints() {
    let patch = parse(&v4a("@@ -2,1 +2,1 @@\n-x\n+y\n"), PatchFormat::V4a);
    let mut expected = v4a_chunk(&[(Remove, "x"), (Add, "y")]);
    expected.line_hint = Some(2);
    assert_eq!(
        patch.map(|patch| patch.ops),
        Ok(vec![PatchOp::Update {
            path: "f".to_owned(),
            move_to: None,
            chunks: vec![expected],
        }])
    );
}

#[test]
fn patch_format_is_snake_case() {
    assert_eq!(
        serde_json::to_string(&[PatchFormat::Auto, PatchFormat::V4a, PatchFormat::Unified]).ok(),
        Some(r#"["auto","v4a","unified"]"#.to_owned())
    );
}

#[test]
fn a_hunk_that_almost_matches_everywhere_is_not_searched_for_ever() {
    // 20,000 lines of `a`, and a hunk of 10,000 `a`s then a line the file does
    // not have: git's search would compare ~10^8 lines; past the budget the
    // lenient search (by index) answers.
    let file = "a\n".repeat(20_000);
    let mut diff = String::from("--- a/f\n+++ b/f\n@@ -5000,10002 +5000,10002 @@\n");
    for _ in 0..10_000 {
        diff.push_str(" a\n");
    }
    // Trailing context: the hunk may go anywhere, not only at the end.
    diff.push_str("-zzz\n+yyy\n a\n");
    assert_eq!(
        apply(PatchFormat::Unified, &file, &diff).map_err(|error| error.code()),
        Err(ErrorCode::HunkRejected)
    );
}
