//! Table-driven policy tests: each file in `tests/fixtures/policy/` holds one or
//! more `---`-separated groups of a configuration and cases, so adding a case is
//! adding a few lines of YAML. A case gives the call and the expected decision;
//! `why` lists the justification in a compact form, `layer/effect detail`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::Path;

use airlock_core::policy::Reason;
use airlock_core::{
    Grant, GrantHolder, GrantScope, Principal, ToolAnnotations, ToolCall, config, policy,
};
use serde_json::{Value, json};

#[test]
fn policy_tables() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/policy");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    let mut failures = String::new();
    let mut cases = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy();
        for (group_index, group) in text.split("\n---\n").enumerate() {
            cases += run_group(&format!("{name}#{group_index}"), group, &mut failures);
        }
    }
    assert!(cases >= 80, "only {cases} cases ran");
    assert!(failures.is_empty(), "{failures}");
}

fn run_group(label: &str, text: &str, failures: &mut String) -> usize {
    let group = airlock_core::yaml::parse(text).unwrap().value;
    let config_text = group["config"].as_str().unwrap_or("");
    let mut loaded = config::load(config_text, label).unwrap();
    loaded
        .policy
        .bind_workspace("/work/repo", Some("/work/repo/airlock.yaml"));
    let cases = group["cases"].as_array().expect("cases");
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let decision = policy::evaluate(
            &loaded.policy,
            &call(&loaded.policy, &case["call"]),
            &grants(&case["grants"]),
        );
        let actual = serde_json::to_value(&decision).unwrap();
        let expected = case["expect"].as_object().expect("expect");
        for key in ["decision", "risk"] {
            assert!(
                expected.contains_key(key),
                "{label}: {name}: expect.{key} is required"
            );
        }
        for (key, want) in expected {
            let got = match key.as_str() {
                "why" => Value::from(
                    decision
                        .justification
                        .iter()
                        .map(compact)
                        .collect::<Vec<_>>(),
                ),
                key => actual
                    .get(key)
                    .cloned()
                    .unwrap_or_else(|| panic!("{label}: unknown key {key}")),
            };
            if got != *want {
                let _ = writeln!(
                    failures,
                    "{label}: {name}: {key}: expected {want}, got {got}"
                );
            }
        }
    }
    cases.len()
}

fn call(policy: &airlock_core::Policy, spec: &Value) -> ToolCall {
    let tool = spec["tool"].as_str().expect("call.tool");
    let annotations: Option<ToolAnnotations> = spec
        .get("annotations")
        .map(|a| serde_json::from_value(a.clone()).unwrap());
    let text = |key: &str| spec.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut call = ToolCall::new(
        tool,
        spec.get("args").cloned().unwrap_or_else(|| json!({})),
        policy.origin_of(tool, annotations),
        spec.get("at").and_then(Value::as_u64).unwrap_or(1000),
    );
    call.principal = principal(spec);
    call.session = text("session");
    call.profile = text("profile");
    call
}

/// The principal of a call (`user`, `agent`, `token` keys), or of a grant's
/// holder (`for`).
fn principal(spec: &Value) -> Principal {
    let text = |key: &str| spec.get(key).and_then(Value::as_str).map(str::to_owned);
    Principal {
        user: text("user"),
        agent: text("agent"),
        token: text("token"),
        admin: false,
    }
}

fn grants(spec: &Value) -> Vec<Grant> {
    spec.as_array()
        .into_iter()
        .flatten()
        .map(|grant| {
            let scope = match grant.get("session").and_then(Value::as_str) {
                Some(session) => GrantScope::Session(session.to_owned()),
                None => GrantScope::Persistent,
            };
            // Made for the principal under `for` (default: no user, agent
            // or token, like the calls that name none).
            let holder = principal(grant.get("for").unwrap_or(&Value::Null));
            let owner = matches!(scope, GrantScope::Session(_)).then(|| holder.owner_key());
            Grant::new(
                grant["id"].as_str().unwrap(),
                grant["tool"].as_str().unwrap(),
                grant.get("path_glob").and_then(Value::as_str),
                scope,
                grant.get("expires_at").and_then(Value::as_u64),
                GrantHolder {
                    user: holder.user,
                    owner,
                },
            )
            .unwrap()
        })
        .collect()
}

/// `layer/effect detail`: the effect or `-`, then the pattern, rule index, grant,
/// risk or profile that spoke.
fn compact(step: &airlock_core::Justification) -> String {
    let effect = step.effect.map_or("-", |effect| effect.as_str());
    let head = format!("{}/{effect}", step.layer().as_str());
    let detail = match &step.reason {
        Reason::Rule { index, .. } => Some(format!("#{index}")),
        Reason::Grant { id } => Some(id.to_string()),
        Reason::DefaultRisk { risk, .. } | Reason::RiskPolicy { risk, .. } => {
            Some(risk.to_string())
        }
        Reason::ProfileAllowlistMiss { .. } => Some("allowlist-miss".to_owned()),
        Reason::UnknownProfile { profile } => Some(profile.clone()),
        _ => step.pattern().map(str::to_owned),
    };
    match detail {
        Some(detail) => format!("{head} {detail}"),
        None => head,
    }
}
