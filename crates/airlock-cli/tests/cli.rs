//! The `airlock` binary, driven as users drive it: in a temporary workspace, with
//! no standard input, comparing whole outputs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use airlock_testkit::{Run, Workspace};
use expect_test::{expect, expect_file};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// Runs `airlock ARGS` in `ws`, with its path in the output replaced by `$WS`.
fn airlock(ws: &Workspace, args: &[&str]) -> Run {
    ws.run_shown(args)
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn init_writes_every_default_with_comments_and_creates_the_state_dir() {
    let ws = Workspace::empty();
    let run = airlock(&ws, &["init"]);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""));
    assert_eq!(
        run.stdout,
        "wrote $WS/airlock.yaml\ncreated state dir $WS/.airlock\n"
    );
    let written = std::fs::read_to_string(ws.path("airlock.yaml")).unwrap();
    expect_file!["golden/init.airlock.yaml"].assert_eq(&written);
    assert_eq!(
        std::fs::read_to_string(ws.path(".airlock/.gitignore")).unwrap(),
        "*\n"
    );

    // A second init refuses to overwrite, and changes nothing.
    std::fs::write(
        ws.path("airlock.yaml"),
        "profiles: {mine: {denylist: ['*']}}\n",
    )
    .unwrap();
    let again = airlock(&ws, &["init"]);
    assert_eq!(again.code, 2);
    assert_eq!(
        again.stderr,
        "error: $WS/airlock.yaml already exists; pass --force to overwrite it\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path("airlock.yaml")).unwrap(),
        "profiles: {mine: {denylist: ['*']}}\n"
    );
    assert_eq!(airlock(&ws, &["init", "--force"]).code, 0);
    assert_eq!(
        std::fs::read_to_string(ws.path("airlock.yaml")).unwrap(),
        written
    );

    let check = airlock(&ws, &["config", "check"]);
    assert_eq!(check.code, 0);
    assert_eq!(
        check.stdout,
        "$WS/airlock.yaml: ok\nworkspace root $WS, state dir .airlock\n0 rules, 0 profiles, 0 upstreams, 0 tokens, 0 webhooks\n"
    );
}

#[test]
fn an_invalid_config_stops_every_command_with_exit_2() {
    let ws = Workspace::with_config(
        "security:\n  hitl:\n    rules:\n      - tools: [write_file]\n        conditions:\n          - param: path\n            matches: \"^(/etc\"\n",
    );
    let before = listing(ws.root());
    let expected = "error: invalid configuration\n$WS/airlock.yaml:7: security.hitl.rules[0].conditions[0].matches: invalid regex: regex parse error: ^(/etc ^ error: unclosed group\n";
    let commands: [&[&str]; 6] = [
        &["config", "check"],
        &["config", "schema"],
        &["check", "read_file", "--args", r#"{"path": "a.txt"}"#],
        &["check", "write_file", "--json"],
        &["init"],
        &["init", "--force"],
    ];
    for args in commands {
        let run = airlock(&ws, args);
        assert_eq!(
            (run.code, run.stdout.as_str(), run.stderr.as_str()),
            (2, "", expected),
            "{args:?}"
        );
    }
    assert_eq!(
        listing(ws.root()),
        before,
        "a refused command changed the workspace"
    );
}

#[test]
fn unknown_keys_name_their_path_and_line() {
    let ws =
        Workspace::with_config("workspace:\n  root: .\nsecurity:\n  hitl:\n    enabeld: false\n");
    let run = airlock(&ws, &["config", "check"]);
    assert_eq!(run.code, 2);
    assert_eq!(
        run.stderr,
        "error: invalid configuration\n$WS/airlock.yaml:5: security.hitl.enabeld: unknown field `enabeld`, expected one of `enabled`, `default_timeout`, `approval_mode`, `elicitation_fallback`, `max_pending`, `max_pending_per_session`, `rules`, `policies`\n"
    );
}

#[test]
fn without_a_file_the_defaults_apply() {
    let ws = Workspace::empty();
    let run = airlock(&ws, &["config", "check"]);
    assert_eq!(run.code, 0);
    assert_eq!(
        run.stdout,
        "no configuration file at $WS/airlock.yaml: the built-in defaults apply and are valid\nworkspace root $WS, state dir .airlock\n0 rules, 0 profiles, 0 upstreams, 0 tokens, 0 webhooks\n"
    );
    // --config names a file that must exist.
    let missing = airlock(&ws, &["--config", "other.yaml", "config", "check"]);
    assert_eq!(
        (missing.code, missing.stderr.as_str()),
        (2, "error: configuration file other.yaml does not exist\n")
    );
    let bad_workspace = airlock(&ws, &["--workspace", "nowhere", "config", "check"]);
    assert_eq!(bad_workspace.code, 2);
    assert!(
        bad_workspace
            .stderr
            .starts_with("error: workspace nowhere does not exist"),
        "{}",
        bad_workspace.stderr
    );
}

#[test]
fn a_config_file_that_exists_but_cannot_be_read_is_not_the_defaults() {
    let ws = Workspace::empty();
    std::os::unix::fs::symlink("missing-target.yaml", ws.path("airlock.yaml")).unwrap();
    let run = airlock(&ws, &["config", "check"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .starts_with("error: cannot read $WS/airlock.yaml"),
        "{}",
        run.stderr
    );
}

#[test]
fn init_creates_the_file_named_by_config() {
    let ws = Workspace::empty();
    let run = airlock(&ws, &["--config", "conf/airlock.yaml", "init"]);
    assert_eq!(
        run.code, 1,
        "the directory conf/ does not exist: {}",
        run.stderr
    );
    std::fs::create_dir(ws.path("conf")).unwrap();
    let run = airlock(&ws, &["--config", "conf/airlock.yaml", "init"]);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""));
    assert_eq!(
        std::fs::read_to_string(ws.path("conf/airlock.yaml")).unwrap(),
        airlock_core::config::TEMPLATE
    );
    let check = airlock(&ws, &["--config", "conf/airlock.yaml", "config", "check"]);
    assert_eq!(check.code, 0);
    assert!(
        check.stdout.starts_with("conf/airlock.yaml: ok\n"),
        "{}",
        check.stdout
    );
}

#[test]
fn config_schema_prints_the_generated_json_schema() {
    let ws = Workspace::empty();
    let run = airlock(&ws, &["config", "schema"]);
    assert_eq!(run.code, 0);
    // The schema is a wire format: any change to it shows up in this golden file.
    expect_file!["golden/config.schema.json"].assert_eq(&run.stdout);
    let schema: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(schema["title"], "airlock.yaml");
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(
        schema["$defs"]["HitlConfig"]["properties"]["default_timeout"]["default"],
        json!(60)
    );
}

const SPEC_004: &str = "upstreams:\n  - {name: filesystem, command: npx}\nprofiles:\n  supervised:\n    denylist: [\"filesystem__delete_*\"]\n    asklist: [\"filesystem__*\"]\n";

#[test]
fn check_json_explains_the_spec_004_example() {
    let ws = Workspace::with_config(SPEC_004);
    let before = listing(ws.root());
    let run = airlock(
        &ws,
        &[
            "check",
            "filesystem__delete_file",
            "--args",
            r#"{"path": "notes.txt"}"#,
            "--profile",
            "supervised",
            "--json",
        ],
    );
    assert_eq!((run.code, run.stderr.as_str()), (0, ""));
    let actual: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        actual,
        json!({
            "tool": "filesystem__delete_file",
            "decision": "deny",
            "risk": "high",
            "timeout": 60,
            "allow_skip": false,
            "require_reason": false,
            "approvers": [],
            "write_class": true,
            "profile": "supervised",
            "elicitation_fallback": "deny",
            "code": "policy_denied",
            "justification": [
                {"layer": "profile", "effect": "deny", "profile": "supervised", "list": "denylist",
                 "pattern": "filesystem__delete_*",
                 "message": "profile `supervised` denylist glob `filesystem__delete_*` matches"},
                {"layer": "default_risk", "effect": null, "class": "untrusted_upstream", "risk": "high",
                 "message": "upstream tool, annotations not trusted: risk high"},
                {"layer": "risk_policy", "effect": "ask", "risk": "high", "require_approval": true,
                 "message": "high risk requires approval"}
            ]
        })
    );

    let read = airlock(
        &ws,
        &[
            "check",
            "filesystem__read_file",
            "--profile",
            "supervised",
            "--json",
        ],
    );
    let read: Value = serde_json::from_str(&read.stdout).unwrap();
    assert_eq!(
        (read["decision"].as_str(), read["risk"].as_str()),
        (Some("ask"), Some("high"))
    );
    assert_eq!(read["justification"][0]["pattern"], "filesystem__*");

    // A critical write: timeout, reason and approvers come from the critical policy.
    let critical = Workspace::with_config(
        "security:\n  hitl:\n    rules:\n      - tools: [write_file]\n        conditions: [{param: path, glob: \"deploy/**\"}]\n        risk: critical\n",
    );
    let run = airlock(
        &critical,
        &[
            "check",
            "write_file",
            "--args",
            r#"{"path": "deploy/prod.yaml"}"#,
            "--json",
        ],
    );
    let decision: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        [
            &decision["decision"],
            &decision["risk"],
            &decision["timeout"],
            &decision["require_reason"],
            &decision["approvers"]
        ],
        [
            &json!("ask"),
            &json!("critical"),
            &json!(30),
            &json!(true),
            &json!(["admin"])
        ]
    );
    assert_eq!(decision["justification"][0]["rule_index"], 0);

    assert_eq!(listing(ws.root()), before, "check changed the workspace");
}

#[test]
fn check_explains_in_plain_words() {
    let ws = Workspace::with_config(SPEC_004);
    let run = airlock(
        &ws,
        &[
            "check",
            "filesystem__delete_file",
            "--profile",
            "supervised",
        ],
    );
    assert_eq!(run.code, 0);
    expect![[r#"
        filesystem__delete_file: deny: refused
          risk high, code policy_denied, profile supervised
          because:
            profile         profile `supervised` denylist glob `filesystem__delete_*` matches -> deny
            default_risk    upstream tool, annotations not trusted: risk high
            risk_policy     high risk requires approval -> ask
    "#]]
    .assert_eq(&run.stdout);

    let run = airlock(
        &ws,
        &["check", "write_file", "--args", r#"{"path": "src/lib.rs"}"#],
    );
    expect![[r#"
        write_file: ask: a human must approve it
          risk medium, 120s to decide, always-allow possible, any approver
          because:
            default_risk    built-in write tool: risk medium
            risk_policy     medium risk requires approval -> ask
    "#]]
    .assert_eq(&run.stdout);

    let run = airlock(
        &ws,
        &["check", "read_file", "--args", r#"{"path": "config/.env"}"#],
    );
    expect![[r#"
        read_file: deny: refused
          risk low, code path_denied
          because:
            sandbox         path `config/.env` matches deny glob `**/.env` -> deny
            default_risk    built-in read-only tool: risk low
            risk_policy     low risk needs no approval -> allow
    "#]]
    .assert_eq(&run.stdout);
}

#[test]
fn check_refuses_bad_input_with_exit_2() {
    let ws = Workspace::with_config(SPEC_004);
    let cases: [(&[&str], &str); 6] = [
        (
            &["check", "write_file", "--args", "{not json"],
            "error: --args is not valid JSON: key must be a string at line 1 column 2\n",
        ),
        (
            &["check", "write_file", "--args", "[1]"],
            "error: --args must be a JSON object\n",
        ),
        (
            &["check", "write_file", "--profile", "nosuch"],
            "error: unknown profile nosuch (configured: supervised)\n",
        ),
        (&["check", ""], "error: the tool name must not be empty\n"),
        (
            &["check", "x__y", "--annotations", r#"{"readOnly": true}"#],
            "error: --annotations is not a valid annotations object: unknown field `readOnly`, expected one of `readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint` at line 1 column 11\n",
        ),
        (&["check"], ""),
    ];
    for (args, expected) in cases {
        let run = airlock(&ws, args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{args:?}");
        if !expected.is_empty() {
            assert_eq!(run.stderr, expected, "{args:?}");
        }
    }
}

#[test]
fn trusted_annotations_lower_an_upstream_tools_risk() {
    let ws = Workspace::with_config(
        "upstreams:\n  - {name: notes, command: x, trusted_annotations: true}\n",
    );
    let run = airlock(
        &ws,
        &[
            "check",
            "notes__list",
            "--annotations",
            r#"{"readOnlyHint": true}"#,
            "--json",
        ],
    );
    let decision: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        (decision["decision"].as_str(), decision["risk"].as_str()),
        (Some("allow"), Some("low"))
    );
}
