//! Property: tightening a profile never loosens a decision. Adding an entry to a
//! denylist (or a deny path glob) leaves every decision at least as strict
//! (`Allow < Ask < Deny`), whatever the rest of the configuration, the call and
//! the grants. Adding to an asklist does too, but for the one change spec 004
//! orders (deny > ask > allowlist-miss > allow): a tool the allowlist misses
//! asks instead of being denied once an asklist names it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use airlock_core::config::{Config, ProfileConfig, RuleConfig, UpstreamConfig};
use airlock_core::{
    Grant, GrantHolder, GrantScope, Policy, Principal, Risk, ToolAnnotations, ToolCall, policy,
};
use proptest::prelude::*;
use serde_json::json;

const TOOLS: &[&str] = &[
    "read_file",
    "write_file",
    "edit_file",
    "apply_patch",
    "delete_file",
    "move_file",
    "grep",
    "fs__read",
    "fs__delete_x",
    "fs__write",
    "db__drop",
    "time__now",
    "other",
];
const GLOBS: &[&str] = &[
    "*",
    "fs__*",
    "*__delete_*",
    "read_file",
    "write_file",
    "*_file",
    "db__*",
    "time__*",
    "other",
    "?s__*",
    "{grep,glob}",
    "[a-f]*",
];
const PATHS: &[&str] = &[
    "src/a.rs",
    ".env",
    "../x",
    "docs/y.md",
    ".git/config",
    "airlock.yaml",
    "/tmp/z",
];
const USERS: &[&str] = &["user-1", "user-2"];

fn pick<T: Clone + std::fmt::Debug + 'static>(pool: &'static [T]) -> impl Strategy<Value = T> {
    prop::sample::select(pool)
}

fn globs() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(pick(GLOBS).prop_map(String::from), 0..4)
}

fn profile() -> impl Strategy<Value = ProfileConfig> {
    (prop::option::of(globs()), globs(), globs()).prop_map(|(allowlist, denylist, asklist)| {
        ProfileConfig {
            allowlist,
            denylist,
            asklist,
            ..ProfileConfig::default()
        }
    })
}

fn rule() -> impl Strategy<Value = RuleConfig> {
    (
        globs(),
        prop::option::of(pick(&Risk::ALL)),
        prop::option::of(any::<bool>()),
        any::<bool>(),
    )
        .prop_map(|(mut tools, risk, require_approval, deny)| {
            if tools.is_empty() {
                tools.push("*".to_owned());
            }
            RuleConfig {
                tools,
                conditions: Vec::new(),
                risk,
                require_approval,
                timeout: None,
                decision: deny.then_some(airlock_core::config::RuleDecision::Deny),
            }
        })
}

#[derive(Debug, Clone)]
struct Case {
    config: Config,
    tool: &'static str,
    path: &'static str,
    user: Option<&'static str>,
    read_only: bool,
    grant: Option<&'static str>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        profile(),
        prop::collection::vec(rule(), 0..3),
        (
            any::<bool>(),
            any::<bool>(),
            prop::option::of(prop::collection::vec(
                pick(USERS).prop_map(String::from),
                0..2,
            )),
        ),
        any::<bool>(),
        (
            pick(TOOLS),
            pick(PATHS),
            prop::option::of(pick(USERS)),
            any::<bool>(),
            prop::option::of(pick(TOOLS)),
        ),
    )
        .prop_map(
            |(
                profile,
                rules,
                (hitl, confirm, allowlist),
                trusted,
                (tool, path, user, read_only, grant),
            )| {
                let mut config = Config::default();
                config.profiles.insert("p".to_owned(), profile);
                config.security.hitl.rules = rules;
                config.security.hitl.enabled = hitl;
                config.security.write_tool_confirmation = confirm;
                config.security.write_tool_allowlist = allowlist;
                config.upstreams = ["fs", "db", "time"]
                    .map(|name| UpstreamConfig {
                        name: name.to_owned(),
                        command: Some("x".to_owned()),
                        args: Vec::new(),
                        env: Default::default(),
                        cwd: None,
                        url: None,
                        headers: Default::default(),
                        timeout: None,
                        trusted_annotations: trusted,
                        prefix: true,
                    })
                    .to_vec();
                Case {
                    config,
                    tool,
                    path,
                    user,
                    read_only,
                    grant,
                }
            },
        )
}

fn decide(config: &Config, case: &Case) -> airlock_core::Decision {
    decide_with(config, case, |grants| {
        policy::evaluate(&policy_of(config), &call_of(config, case), &grants)
    })
}

/// `case` decided with its grants handed to `evaluate` by `with`.
fn decide_with(
    _config: &Config,
    case: &Case,
    with: impl FnOnce(Vec<Grant>) -> airlock_core::Decision,
) -> airlock_core::Decision {
    let grants: Vec<Grant> = case
        .grant
        .map(|tool| {
            let holder = GrantHolder {
                user: case.user.map(str::to_owned),
                owner: None,
            };
            Grant::new("g", tool, None, GrantScope::Persistent, None, holder).unwrap()
        })
        .into_iter()
        .collect();
    with(grants)
}

fn policy_of(config: &Config) -> Policy {
    let mut policy = Policy::compile(config).unwrap();
    policy.bind_workspace("/work/repo", None);
    policy
}

fn call_of(config: &Config, case: &Case) -> ToolCall {
    let policy = policy_of(config);
    let annotations = ToolAnnotations {
        read_only_hint: Some(case.read_only),
        ..ToolAnnotations::default()
    };
    let mut call = ToolCall::new(
        case.tool,
        json!({"path": case.path, "content": "x"}),
        policy.origin_of(case.tool, Some(annotations)),
        1000,
    );
    call.principal = Principal {
        user: case.user.map(str::to_owned),
        ..Principal::default()
    };
    call.session = Some("s".to_owned());
    call.profile = Some("p".to_owned());
    call
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Grants read only when a decision needs them decide exactly as grants
    /// read up front, and are never read for a call the policy denies or
    /// allows without asking.
    #[test]
    fn grants_read_on_demand_decide_as_grants_read_up_front(case in case()) {
        let eager = decide(&case.config, &case);
        let policy = policy_of(&case.config);
        let call = call_of(&case.config, &case);
        let unasked = policy::evaluate(&policy, &call, &[]);
        let mut loaded = false;
        let lazy = decide_with(&case.config, &case, |grants| {
            let lazy = policy::LazyGrants::new(move || grants.clone());
            let decision = policy::evaluate(&policy, &call, &lazy);
            loaded = lazy.loaded();
            decision
        });
        prop_assert_eq!(&lazy, &eager);
        let asked = unasked.disposition == airlock_core::Disposition::Ask
            || unasked.justification.iter().any(|step| matches!(
                step.reason,
                airlock_core::policy::Reason::HitlDisabled | airlock_core::policy::Reason::ConfirmationDisabled
            ));
        if !asked {
            prop_assert!(!loaded, "grants read for a call decided without them: {:?}", unasked);
        }
    }

    #[test]
    fn adding_to_a_denylist_or_asklist_never_loosens(case in case(), glob in pick(GLOBS), to_denylist in any::<bool>()) {
        let before = decide(&case.config, &case);
        let mut tighter = case.config.clone();
        let profile = tighter.profiles.get_mut("p").unwrap();
        if to_denylist {
            profile.denylist.push(glob.to_owned());
        } else {
            profile.asklist.push(glob.to_owned());
        }
        let after = decide(&tighter, &case);
        let missed_allowlist = before.justification.iter().any(|step| {
            matches!(step.reason, airlock_core::policy::Reason::ProfileAllowlistMiss { .. })
        });
        let only_allowlist_miss = missed_allowlist
            && before.justification.iter().filter(|step| step.effect == Some(airlock_core::Disposition::Deny)).count() == 1;
        // The asklist now decides instead of the allowlist miss: the call
        // asks, and like every ask, a grant or a disabled gate may let it
        // through.
        let spec_004_ask = !to_denylist
            && only_allowlist_miss
            && glob_matches(glob, case.tool)
            && after.disposition != airlock_core::Disposition::Deny
            && after.justification.iter().any(|step| {
                matches!(step.reason, airlock_core::policy::Reason::ProfileAsklist { .. })
            });
        prop_assert!(
            after.disposition >= before.disposition || spec_004_ask,
            "{} went from {} to {} after adding {glob} to the {}",
            case.tool, before.disposition, after.disposition,
            if to_denylist { "denylist" } else { "asklist" }
        );
        if to_denylist && glob_matches(glob, case.tool) {
            prop_assert_eq!(after.disposition, airlock_core::Disposition::Deny);
        }
    }

    #[test]
    fn adding_a_deny_path_glob_never_loosens(case in case(), glob in pick(&["**/*.rs", "src/**", "**/y.md", "**"])) {
        let before = decide(&case.config, &case);
        let mut tighter = case.config.clone();
        tighter.file_broker.deny_path_globs.push(glob.to_owned());
        let after = decide(&tighter, &case);
        prop_assert!(after.disposition >= before.disposition);
    }
}

fn glob_matches(glob: &str, tool: &str) -> bool {
    globset::Glob::new(glob)
        .unwrap()
        .compile_matcher()
        .is_match(tool)
}
