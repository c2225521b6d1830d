//! Data-driven tool cases through `airlock call`, one folder per case:
//!
//! ```text
//! tests/fixtures/<tool>/<case>/
//!     input/          the workspace before the call (absent: empty)
//!     airlock.yaml    the workspace's configuration (absent: the defaults)
//!     args.json       the call's arguments
//!     patch.txt       (optional) the `patch` argument, kept readable as a file
//!     expected/       the workspace after the call (absent: unchanged)
//!     expected.json   {"status", "code", "data"?: {…subset…}, "message"?: "…substring…"}
//! ```
//!
//! The call runs with `--yes --reason fixture` (the person at the terminal
//! approves what needs approval), so every write goes through propose -> approve
//! -> apply. The whole workspace (everything but `.airlock/` and `airlock.yaml`)
//! is compared with `expected/`, files and directories.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use airlock_testkit::Workspace;
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Every file and directory under `root` (relative, directories with a
/// trailing `/`), with file contents; `.airlock/` and `airlock.yaml` left out.
fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if root.exists() {
        walk(root, root, &mut out);
    }
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        if rel == ".airlock" || rel == "airlock.yaml" || rel == ".gitkeep" {
            continue;
        }
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            out.insert(format!("{rel}/"), String::new());
            walk(root, &path, out);
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&path).unwrap();
            out.insert(rel, format!("-> {}", target.display()));
        } else if !rel.ends_with("/.gitkeep") {
            let bytes = std::fs::read(&path).unwrap();
            out.insert(rel, String::from_utf8_lossy(&bytes).into_owned());
        } else {
            // An empty directory is kept in git by a `.gitkeep`; it stands for
            // the directory only.
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let source = entry.path();
        let name = entry.file_name();
        if name == ".gitkeep" {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&source, &target);
        } else {
            std::fs::copy(&source, &target).unwrap();
        }
    }
}

/// Checks that every key of `expected` is in `actual` with an equal value
/// (objects recursively); other keys of `actual` are free.
fn contains(actual: &Value, expected: &Value, at: &str) -> Result<(), String> {
    match (actual, expected) {
        (Value::Object(actual), Value::Object(expected)) => {
            for (key, value) in expected {
                let here = format!("{at}.{key}");
                match actual.get(key) {
                    Some(found) => contains(found, value, &here)?,
                    None => return Err(format!("{here} is missing")),
                }
            }
            Ok(())
        }
        _ if actual == expected => Ok(()),
        _ => Err(format!("{at} is {actual}, expected {expected}")),
    }
}

struct Outcome {
    name: String,
    problem: Option<String>,
}

fn run_case(case: &Path, tool: &str) -> Outcome {
    let name = format!("{tool}/{}", case.file_name().unwrap().to_str().unwrap());
    let ws = Workspace::empty();
    let root = ws.root();
    let input = case.join("input");
    if input.exists() {
        copy_tree(&input, root);
    }
    if case.join("airlock.yaml").exists() {
        std::fs::copy(case.join("airlock.yaml"), root.join("airlock.yaml")).unwrap();
    }
    let before = tree(root);
    let mut args: Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("args.json")).unwrap())
            .unwrap_or_else(|error| panic!("{name}: args.json: {error}"));
    if let Ok(patch) = std::fs::read_to_string(case.join("patch.txt")) {
        args["patch"] = Value::String(patch);
    }
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(case.join("expected.json")).unwrap())
            .unwrap_or_else(|error| panic!("{name}: expected.json: {error}"));
    let run = ws.call(
        tool,
        &args,
        &["--yes", "--reason", "fixture", "--session", "fixtures"],
    );
    let envelope = &run.json;
    let mut problems = Vec::new();
    if envelope["status"] != expected["status"] {
        problems.push(format!(
            "status {} (expected {})",
            envelope["status"], expected["status"]
        ));
    }
    let code = envelope["error"]["code"].clone();
    let expected_code = expected.get("code").cloned().unwrap_or(Value::Null);
    if code != expected_code {
        problems.push(format!("error code {code} (expected {expected_code})"));
    }
    if let Some(data) = expected.get("data")
        && let Err(problem) = contains(&envelope["data"], data, "data")
    {
        problems.push(problem);
    }
    if let Some(message) = expected.get("message").and_then(Value::as_str) {
        let actual = envelope["error"]["message"].as_str().unwrap_or("");
        if !actual.contains(message) {
            problems.push(format!(
                "error message {actual:?} does not contain {message:?}"
            ));
        }
    }
    let after = tree(root);
    let wanted = if case.join("expected").exists() {
        tree(&case.join("expected"))
    } else {
        before
    };
    if after != wanted {
        problems.push(format!(
            "workspace differs:\n{}",
            pretty_assertions::Comparison::new(&wanted, &after)
        ));
    }
    // Every call is audited, and the chain verifies.
    let verify = ws.run(&["audit", "verify"]);
    if verify.code != 0 {
        problems.push(format!("audit verify failed: {}", verify.stdout));
    }
    // Temporary files never stay behind.
    if after.keys().any(|path| path.contains(".airlock-tmp-")) {
        problems.push("a temporary file was left behind".to_owned());
    }
    Outcome {
        name,
        problem: (!problems.is_empty()).then(|| {
            format!(
                "{}\n--- envelope ---\n{}\n--- stderr ---\n{}",
                problems.join("\n"),
                run.stdout,
                run.stderr
            )
        }),
    }
}

fn run_tool(tool: &str, at_least: usize) {
    let dir = fixtures().join(tool);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= at_least,
        "{tool}: {} cases, at least {at_least} expected",
        cases.len()
    );
    let failures: Vec<String> = cases
        .iter()
        .map(|case| run_case(case, tool))
        .filter_map(|outcome| {
            outcome
                .problem
                .map(|problem| format!("=== {} ===\n{problem}", outcome.name))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} {tool} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

#[test]
fn apply_patch_cases() {
    run_tool("apply_patch", 30);
}

#[test]
fn edit_file_cases() {
    run_tool("edit_file", 10);
}

#[test]
fn grep_cases() {
    run_tool("grep", 10);
}

#[test]
fn glob_cases() {
    run_tool("glob", 4);
}

#[test]
fn delete_and_move_cases() {
    run_tool("delete_file", 3);
    run_tool("move_file", 3);
}

#[test]
fn look_cases() {
    run_tool("list_dir", 2);
    run_tool("stat", 2);
    run_tool("exists", 2);
}
