//! Configuration tests: the defaults are DESIGN §3's values, the `airlock init`
//! template holds every one of them, and every invalid file is refused with the key
//! path and the line. Error cases are files in `tests/fixtures/config_errors/`:
//! `<case>.yaml` and the exact message in `<case>.expected` (regenerate with
//! `UPDATE_EXPECT=1 cargo test -p airlock-core --test config`, then read the diff).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use airlock_core::config::{self, Config, TEMPLATE};
use airlock_core::{Disposition, Risk, ToolCall, policy};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// DESIGN §3, written out by hand so that the code is checked against the spec.
fn design_defaults() -> Value {
    json!({
        "workspace": {"root": ".", "state_dir": ".airlock"},
        "file_broker": {
            "enabled": true,
            "hitl_ttl_seconds": 120,
            "max_read_bytes_default": 32000,
            "max_read_bytes_hard": 131072,
            "max_write_bytes_hard": 524288,
            "max_inline_bytes": 16384,
            "diff_preview_max_chars": 8000,
            "absolute_paths": "reject",
            "follow_symlinks": "within_root_only",
            "allowlisted_create_dirs": ["src/", "lib/", "tests/", "docs/", "scripts/"],
            "deny_path_globs": ["**/.env", "**/*.pem", "**/*id_rsa*", "**/secrets/**"],
            "max_grep_results": 100,
            "max_glob_results": 1000,
            "max_scan_files": 200000,
            "max_scan_bytes": 2147483648u64,
            "max_changed_files": 200,
            "max_edit_replacements": 1000,
            "allowed_patch_formats": ["v4a", "unified"],
            "audit_log_enabled": true,
            "allow_hardlinks": false
        },
        "security": {
            "write_tool_allowlist": null,
            "write_tool_confirmation": true,
            "hitl": {
                "enabled": true,
                "default_timeout": 60,
                "approval_mode": "wait",
                "elicitation_fallback": "auto",
                "max_pending": 100,
                "max_pending_per_session": 10,
                "rules": [],
                "policies": {
                    "low": {"require_approval": false},
                    "medium": {"require_approval": true, "timeout": 120, "allow_skip": true},
                    "high": {"require_approval": true, "timeout": 60, "allow_skip": false},
                    "critical": {"require_approval": true, "timeout": 30, "allow_skip": false,
                                 "require_reason": true, "approvers": ["admin"]}
                }
            }
        },
        "profiles": {},
        "upstreams": [],
        "auth": {"tokens": []},
        "audit": {
            "path": ".airlock/audit.jsonl",
            "hmac_key_env": "AIRLOCK_AUDIT_KEY",
            "checkpoints": {"every": 1000, "webhook": null, "origin": null},
            "ship": {"syslog": null, "http": null}
        },
        "notify": {"webhooks": []},
        "http": {"allowed_hosts": [], "allowed_origins": []},
        "mcp": {"max_message_bytes": 16777216},
        "approvals": {"grant_ttl": "8h", "same_user": false},
        "tls": {"ca_file": null},
        "channels": {},
        "exec": {
            "enabled": true,
            "default": "ask",
            "preview": "overlay",
            "sandbox": "auto",
            "network": false,
            "env_allow": ["PATH", "HOME", "LANG", "LC_ALL", "TERM", "USER"],
            "timeout": "120s",
            "max_output_bytes": 1048576,
            "max_processes": 512,
            "max_memory_bytes": 8589934592u64,
            "rules": []
        },
        "codemode": {
            "enabled": true,
            "profile_tools": [],
            "cpu": "5s",
            "wall": "60s",
            "memory_bytes": 67108864,
            "stack_bytes": 1048576,
            "max_source_bytes": 262144,
            "max_result_bytes": 1048576,
            "max_console_bytes": 65536,
            "max_calls": 256,
            "max_in_flight": 8,
            "max_concurrent_runs": 2
        },
        "store": {"url": null, "pool_size": 16, "lease": "10s"},
        "telemetry": {"metrics": true, "otlp": {"endpoint": null}},
        "sessions": {
            "max_ttl": "8h",
            "idle_ttl": "30m",
            "new_roots": "deny",
            "env_allow": [],
            "max_open_per_principal": 64
        }
    })
}

#[test]
fn every_default_is_the_design_value() {
    assert_eq!(
        serde_json::to_value(Config::default()).unwrap(),
        design_defaults()
    );
}

#[test]
fn no_file_empty_file_and_comments_only_are_the_defaults() {
    for text in ["", "\n", "# nothing here\n\n# at all\n", "---\n", "~\n"] {
        let loaded = config::load(text, "airlock.yaml").unwrap();
        assert_eq!(loaded.config, Config::default(), "{text:?}");
    }
    assert_eq!(config::defaults().unwrap().config, Config::default());
}

#[test]
fn init_template_writes_out_every_default() {
    // Every key is present (not just defaulted) and holds the default value.
    let written = airlock_core::yaml::parse(TEMPLATE).unwrap().value;
    assert_eq!(written, design_defaults());
    assert_eq!(
        config::load(TEMPLATE, "airlock.yaml").unwrap().config,
        Config::default()
    );
}

#[test]
fn the_commented_examples_in_the_template_are_valid() {
    // The commented examples are what users copy: uncommented, each must load.
    let examples = [
        ("# rules:", "security:\n  hitl:\n"),
        ("# profiles:", "default_profile: supervised\n"),
        ("# upstreams:", ""),
        ("# tokens:", "auth:\n"),
        ("# webhooks:", "notify:\n"),
        ("# channels:", ""),
    ];
    for (marker, prefix) in examples {
        let block = commented_block(TEMPLATE, marker);
        let text = format!("{prefix}{block}").replace("<64 hex digits>", &"0".repeat(64));
        let loaded = config::load(&text, marker)
            .unwrap_or_else(|error| panic!("example {marker}:\n{text}\n{error}"));
        assert_ne!(
            loaded.config,
            Config::default(),
            "example {marker} is empty:\n{text}"
        );
    }
}

/// The run of comment lines starting at `marker`, with their first `# ` removed.
fn commented_block(template: &str, marker: &str) -> String {
    let lines: Vec<&str> = template.lines().collect();
    let start = lines
        .iter()
        .position(|line| line.trim_start() == marker)
        .unwrap_or_else(|| panic!("no example {marker}"));
    lines[start..]
        .iter()
        .take_while(|line| line.trim_start().starts_with('#'))
        .map(|line| format!("{}\n", line.replacen("# ", "", 1)))
        .collect()
}

#[test]
fn invalid_files_are_refused_with_key_path_and_line() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config_errors");
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 25, "only {} cases", cases.len());
    let mut mismatches = Vec::new();
    for case in cases {
        let text = std::fs::read_to_string(&case).unwrap();
        let error = match config::load(&text, "airlock.yaml") {
            Ok(_) => panic!("{} loaded without error", case.display()),
            Err(error) => error,
        };
        for issue in &error.issues {
            assert!(
                issue.line.is_some(),
                "{}: no line in {issue:?}",
                case.display()
            );
        }
        let actual = format!("{error}\n");
        let expected_path = case.with_extension("expected");
        if update {
            std::fs::write(&expected_path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if actual != expected {
            mismatches.push(format!(
                "{}:\n  expected: {expected}  actual:   {actual}",
                case.display()
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

#[test]
fn a_partial_risk_policy_keeps_that_levels_other_defaults() {
    let loaded = config::load(
        "security:\n  hitl:\n    policies:\n      medium: {timeout: 5}\n",
        "airlock.yaml",
    )
    .unwrap();
    let call = ToolCall::new(
        "write_file",
        json!({"path": "a.txt", "content": "x"}),
        loaded.policy.origin_of("write_file", None),
        0,
    );
    let decision = policy::evaluate(&loaded.policy, &call, &[]);
    assert_eq!(
        (
            decision.disposition,
            decision.risk,
            decision.timeout_seconds,
            decision.allow_skip
        ),
        (Disposition::Ask, Risk::Medium, 5, true)
    );
}

#[test]
fn the_schema_is_generated_from_the_model_and_closed() {
    let schema = config::json_schema();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["additionalProperties"], false);
    let top: Vec<&str> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let model: Vec<String> = design_defaults()
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    for key in &model {
        assert!(top.contains(&key.as_str()), "schema lacks {key}");
    }
    assert!(top.contains(&"default_profile"));
    // Every object type in the schema refuses unknown keys, like the loader.
    let mut open = Vec::new();
    walk(&schema, "", &mut open);
    assert!(
        open.is_empty(),
        "objects without additionalProperties: false: {open:?}"
    );
    // Enumerations carry the valid names.
    let risk = &schema["$defs"]["Risk"];
    let names: Vec<&str> = risk["oneOf"]
        .as_array()
        .map(|variants| {
            variants
                .iter()
                .filter_map(|v| v["const"].as_str())
                .collect()
        })
        .or_else(|| {
            risk["enum"]
                .as_array()
                .map(|v| v.iter().filter_map(Value::as_str).collect())
        })
        .unwrap();
    assert_eq!(names, ["low", "medium", "high", "critical"]);
}

fn walk(schema: &Value, at: &str, open: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            let is_struct =
                map.get("type") == Some(&json!("object")) && map.contains_key("properties");
            if is_struct && map.get("additionalProperties") != Some(&json!(false)) {
                open.push(at.to_owned());
            }
            for (key, value) in map {
                walk(value, &format!("{at}/{key}"), open);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, &format!("{at}/{i}"), open);
            }
        }
        _ => {}
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 3000, ..Default::default() })]

    /// Hostile or garbled files are refused with an error, never a panic.
    #[test]
    fn loading_never_panics(text in "(?s).{0,200}") {
        let _ = config::load(&text, "airlock.yaml");
    }

    /// Mutations of the real template are refused or accepted, never a panic, and
    /// every refusal names a line.
    #[test]
    fn mutated_templates_fail_cleanly(cut in 0usize..TEMPLATE.len(), insert in "[ :\\-\\[\\]{}#'\"a-z0-9\n]{0,6}") {
        let mut text = TEMPLATE.to_owned();
        let at = (0..=cut).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        text.insert_str(at, &insert);
        if let Err(error) = config::load(&text, "airlock.yaml") {
            proptest::prop_assert!(error.issues.iter().all(|issue| issue.line.is_some()), "{}", error);
        }
    }
}

/// The configurations the reference specs show (spec 000's `file_broker`, spec
/// 002's rules and risk policies), as written there, load.
#[test]
fn the_specs_own_configs_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spec_configs");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    names.sort();
    assert!(names.len() >= 4);
    for path in names {
        let text = std::fs::read_to_string(&path).unwrap();
        let loaded = config::load(&text, "airlock.yaml")
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        if path.ends_with("spec000_file_broker_off.yaml") {
            assert!(!loaded.config.file_broker.enabled);
        }
    }
}

/// Spec 004's own form (`servers`, `evaluation`) loads as written and
/// means what airlock's keys would: servers are upstreams, profiles are
/// profiles (a missing `elicitationFallback` denies) and each one is also
/// offered as `codemode_eval_<profile>`.
#[test]
fn a_spec_004_config_loads_as_written() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spec004/bridge.json");
    let loaded = config::load(&std::fs::read_to_string(path).unwrap(), "mcp.json").unwrap();
    let config = serde_json::to_value(&loaded.config).unwrap();
    assert_eq!(
        json!({
            "upstreams": config["upstreams"],
            "profiles": config["profiles"],
            "default_profile": config["default_profile"],
            "profile_tools": config["codemode"]["profile_tools"],
        }),
        json!({
            "upstreams": [
                {"name": "filesystem", "command": "npx",
                 "args": ["-y", "@modelcontextprotocol/server-filesystem", "."], "env": {"DEBUG": "0"},
                 "trusted_annotations": false},
                {"name": "swf_gitlab", "url": "https://gitlab.example/mcp",
                 "headers": {"Authorization": "Bearer ${GITLAB_TOKEN}"}, "trusted_annotations": false},
                {"name": "time", "command": "uvx", "args": ["mcp-server-time"], "trusted_annotations": false},
            ],
            "profiles": {
                "safe": {"allowlist": ["time__*", "search_tools", "get_tools"], "elicitation_fallback": "deny"},
                "supervised": {"denylist": ["filesystem__delete_*"], "asklist": ["filesystem__*", "swf_gitlab__*"],
                               "elicitation_fallback": "allow"},
            },
            "default_profile": "supervised",
            "profile_tools": ["safe", "supervised"],
        })
    );
    // The precedence of spec 004: denylist > asklist > allowlist > allow.
    let decide = |profile: &str, tool: &str| {
        let upstream = tool.split("__").next().unwrap_or_default();
        let mut call = ToolCall::new(
            tool,
            json!({}),
            airlock_core::ToolOrigin::Upstream {
                upstream: upstream.into(),
                annotations: None,
            },
            0,
        );
        call.profile = Some(profile.to_owned());
        policy::evaluate(&loaded.policy, &call, &[]).disposition
    };
    assert_eq!(
        decide("supervised", "filesystem__delete_file"),
        Disposition::Deny
    );
    assert_eq!(
        decide("supervised", "filesystem__read_file"),
        Disposition::Ask
    );
    assert_eq!(decide("safe", "filesystem__read_file"), Disposition::Deny);
    assert_eq!(decide("safe", "time__now"), Disposition::Allow);
}
