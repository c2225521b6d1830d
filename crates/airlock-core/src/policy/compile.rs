//! Compiling a configuration into a [`Policy`]: every glob and regex is built
//! here, once, so that evaluation never compiles anything.

use std::collections::BTreeMap;
use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use regex::Regex;
use serde_json::Value;

use super::paths::{PathGuard, PathGuardConfig, PatternList};
use crate::call::{ToolAnnotations, ToolOrigin};
use crate::config::{Config, ConfigIssue, ElicitationFallback, RiskPolicyConfig};
use crate::policy::Risk;
use crate::tools::BuiltinTool;

/// A path the sandbox refuses: the envelope's error code and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRefusal {
    pub code: crate::error_code::ErrorCode,
    pub message: String,
}

/// A compiled policy. Build it with [`Policy::compile`] (or through
/// [`config::load`](crate::config::load)), bind it to the workspace with
/// [`Policy::bind_workspace`], then evaluate calls against it.
#[derive(Debug, Clone)]
pub struct Policy {
    pub(crate) paths: PathGuard,
    pub(crate) write_allowlist: Option<Vec<String>>,
    pub(crate) profiles: BTreeMap<String, CompiledProfile>,
    pub(crate) default_profile: Option<String>,
    pub(crate) rules: RuleSet,
    pub(crate) risk_policies: [ResolvedRiskPolicy; 4],
    pub(crate) hitl_enabled: bool,
    /// `file_broker.enabled`: whether the built-in file tools exist.
    pub(crate) file_tools_enabled: bool,
    pub(crate) write_tool_confirmation: bool,
    pub(crate) elicitation_fallback: ElicitationFallback,
    /// Configured upstreams and whether their annotations are trusted.
    pub(crate) upstreams: Vec<(Arc<str>, bool)>,
    /// `exec.rules` and the curated list; `None` when `exec.enabled` is
    /// false.
    pub(crate) exec: Option<Arc<crate::exec::ExecPolicy>>,
}

#[derive(Debug, Clone)]
pub(crate) struct ResolvedRiskPolicy {
    pub require_approval: bool,
    pub timeout: u64,
    pub allow_skip: bool,
    pub require_reason: bool,
    pub approvers: Arc<[String]>,
}

#[derive(Debug, Clone)]
pub(crate) struct CompiledProfile {
    pub name: Arc<str>,
    pub allowlist: Option<PatternList>,
    pub denylist: PatternList,
    pub asklist: PatternList,
    pub elicitation_fallback: Option<ElicitationFallback>,
}

/// All rules, their tool globs in one set.
#[derive(Debug, Clone)]
pub(crate) struct RuleSet {
    tool_globs: GlobSet,
    /// The rule each glob of `tool_globs` belongs to.
    glob_rule: Vec<u32>,
    rules: Vec<CompiledRule>,
}

#[derive(Debug, Clone)]
pub(crate) struct CompiledRule {
    pub risk: Option<Risk>,
    pub require_approval: Option<bool>,
    pub timeout: Option<u64>,
    pub deny: bool,
    conditions: Vec<Condition>,
}

#[derive(Debug, Clone)]
struct Condition {
    param: Vec<String>,
    test: ConditionTest,
}

#[derive(Debug, Clone)]
enum ConditionTest {
    Equals(Value),
    Matches(Regex),
    Glob(GlobMatcher),
    In(Vec<Value>),
}

impl Policy {
    /// Compiles `config`. Errors name the key path of each bad pattern.
    pub fn compile(config: &Config) -> Result<Policy, Vec<ConfigIssue>> {
        let mut issues = Vec::new();
        let broker = &config.file_broker;
        let paths = match PathGuard::new(PathGuardConfig {
            absolute_paths: broker.absolute_paths,
            deny_globs: &broker.deny_path_globs,
            state_dir: &config.workspace.state_dir,
            audit_log: &config.audit.path,
        }) {
            Ok(guard) => Some(guard),
            Err((index, error)) => {
                issues.push(ConfigIssue::new(
                    format!("file_broker.deny_path_globs[{index}]"),
                    error,
                ));
                None
            }
        };

        let mut profiles = BTreeMap::new();
        for (name, profile) in &config.profiles {
            let base = format!("profiles.{name}");
            let allowlist = match &profile.allowlist {
                Some(list) => pattern_list(list, &format!("{base}.allowlist"), &mut issues),
                None => None,
            };
            let denylist =
                pattern_list(&profile.denylist, &format!("{base}.denylist"), &mut issues);
            let asklist = pattern_list(&profile.asklist, &format!("{base}.asklist"), &mut issues);
            if let (Some(denylist), Some(asklist)) = (denylist, asklist) {
                let allowlist_ok = profile.allowlist.is_none() || allowlist.is_some();
                if allowlist_ok {
                    profiles.insert(
                        name.clone(),
                        CompiledProfile {
                            name: Arc::from(name.as_str()),
                            allowlist,
                            denylist,
                            asklist,
                            elicitation_fallback: profile.elicitation_fallback,
                        },
                    );
                }
            }
        }

        let rules = compile_rules(config, &mut issues);
        let hitl = &config.security.hitl;
        let risk_policies = Risk::ALL
            .map(|risk| resolve_risk_policy(hitl.policies.get(risk), risk, hitl.default_timeout));

        match (paths, rules) {
            (Some(paths), Some(rules)) if issues.is_empty() => Ok(Policy {
                paths,
                write_allowlist: config.security.write_tool_allowlist.clone(),
                profiles,
                default_profile: config.default_profile.clone(),
                rules,
                risk_policies,
                hitl_enabled: hitl.enabled,
                file_tools_enabled: config.file_broker.enabled,
                write_tool_confirmation: config.security.write_tool_confirmation,
                elicitation_fallback: hitl.elicitation_fallback,
                upstreams: config
                    .upstreams
                    .iter()
                    .map(|upstream| {
                        (
                            Arc::from(upstream.name.as_str()),
                            upstream.trusted_annotations,
                        )
                    })
                    .collect(),
                exec: config
                    .exec
                    .enabled
                    .then(|| Arc::new(crate::exec::ExecPolicy::compile(&config.exec))),
            }),
            _ => Err(issues),
        }
    }

    /// Binds the policy to the canonical, absolute workspace root and the
    /// configuration file's path (absolute, or relative to the root), so absolute
    /// path arguments can be placed and the config file is protected wherever it is.
    /// What the tools never change, as configured (relative to the root
    /// when inside it, else absolute): the state dir, the audit log, the
    /// config file (and the default one).
    /// The exec verdict on a call's arguments (`command` or `argv`); `None`
    /// when exec is off or the arguments name no command.
    pub fn exec_verdict(&self, args: &serde_json::Value) -> Option<crate::exec::Verdict> {
        super::evaluate::exec_verdict(self.exec.as_deref()?, args)
    }

    pub fn protected_paths(&self) -> Vec<(String, super::Protected)> {
        self.paths.protected_paths()
    }

    pub fn bind_workspace(&mut self, root: &str, config_file: Option<&str>) {
        self.paths.bind(root, config_file);
    }

    /// Where the tool `name` comes from: a built-in, a configured upstream
    /// (`<upstream>__<tool>`, or `resource:<upstream>:<uri>` for the reading
    /// of one of its resources), or unknown. `annotations` are the upstream's, if
    /// the caller has them.
    pub fn origin_of(&self, name: &str, annotations: Option<ToolAnnotations>) -> ToolOrigin {
        if let Some(tool) = BuiltinTool::from_name(name) {
            return ToolOrigin::Builtin(tool);
        }
        if let Some(upstream) = name.strip_prefix("sampling:") {
            return match self.upstreams.iter().find(|(n, _)| **n == *upstream) {
                Some((upstream, _)) => ToolOrigin::Sampling {
                    upstream: upstream.clone(),
                },
                None => ToolOrigin::Unknown,
            };
        }
        if let Some((upstream, _uri)) = crate::call::resource_name(name) {
            return match self.upstreams.iter().find(|(n, _)| **n == *upstream) {
                Some((upstream, _)) => ToolOrigin::Resource {
                    upstream: upstream.clone(),
                },
                None => ToolOrigin::Unknown,
            };
        }
        if let Some((prefix, rest)) = name.split_once("__")
            && !rest.is_empty()
            && let Some((upstream, _)) = self.upstreams.iter().find(|(n, _)| **n == *prefix)
        {
            return ToolOrigin::Upstream {
                upstream: upstream.clone(),
                annotations,
            };
        }
        ToolOrigin::Unknown
    }

    /// The protected locations (state dir, audit log, configuration files,
    /// the root's `.git`) as absolute paths, for checks the text of a path
    /// cannot make (a hard link is another name of the same file).
    pub fn protected_locations(&self) -> Vec<(String, super::Protected)> {
        self.paths.protected_absolute()
    }

    /// Checks one workspace path as the sandbox layer checks a built-in tool's
    /// path argument: escapes, deny globs, protected locations (`write` for calls
    /// that can change things). The file tools call it again on the path they
    /// actually resolved, so a symlink `ok.txt -> .env` is refused too.
    pub fn check_workspace_path(
        &self,
        param: &str,
        path: &str,
        write: bool,
    ) -> Option<PathRefusal> {
        self.paths
            .check(param, path, super::paths::Scope::Workspace, write)
            .map(|(reason, code)| PathRefusal {
                code,
                message: super::Justification {
                    effect: Some(super::Disposition::Deny),
                    reason,
                }
                .to_string(),
            })
    }

    /// Whether a tool list shown through an endpoint bound to `profile` (or the
    /// default profile) includes `tool`: a tool the profile denies whatever its
    /// arguments (denylist, or an allowlist it misses and no asklist names) is
    /// hidden, and an unknown profile hides every tool. Calling a hidden tool
    /// is denied by `evaluate` all the same; this only keeps the list honest.
    pub fn lists_tool(&self, profile: Option<&str>, tool: &str) -> bool {
        if !self.file_tools_enabled && is_file_tool(tool) {
            return false;
        }
        if tool == "exec" && self.exec.is_none() {
            return false;
        }
        let Some(name) = profile.or(self.default_profile.as_deref()) else {
            return true;
        };
        let Some(profile) = self.profiles.get(name) else {
            return false;
        };
        if profile.denylist.first_match(tool).is_some() {
            return false;
        }
        profile.asklist.first_match(tool).is_some()
            || profile
                .allowlist
                .as_ref()
                .is_none_or(|list| list.first_match(tool).is_some())
    }

    /// Whether `name` is a configured profile.
    pub fn has_profile(&self, name: &str) -> bool {
        self.profiles.contains_key(name)
    }

    /// Names of the configured profiles.
    pub fn profile_names(&self) -> impl Iterator<Item = &str> {
        self.profiles.keys().map(String::as_str)
    }

    /// Whether annotations from `upstream` are trusted.
    pub(crate) fn trusts(&self, upstream: &str) -> bool {
        self.upstreams
            .iter()
            .any(|(name, trusted)| **name == *upstream && *trusted)
    }

    pub(crate) fn risk_policy(&self, risk: Risk) -> &ResolvedRiskPolicy {
        match risk {
            Risk::Low => &self.risk_policies[0],
            Risk::Medium => &self.risk_policies[1],
            Risk::High => &self.risk_policies[2],
            Risk::Critical => &self.risk_policies[3],
        }
    }
}

impl RuleSet {
    /// The first rule (by index) whose tool globs match `tool` and whose conditions
    /// all hold for `args`.
    ///
    /// Conditions on a path parameter (`is_path_param` of its first segment) see the
    /// path in lexical normal form, so `docs/../src/x` cannot pass for `docs/**`.
    pub(crate) fn first_match(
        &self,
        tool: &str,
        args: &Value,
        is_path_param: &dyn Fn(&str) -> bool,
    ) -> Option<(usize, &CompiledRule)> {
        if self.rules.is_empty() {
            return None;
        }
        let mut hits = Vec::new();
        self.tool_globs.matches_into(tool, &mut hits);
        let mut candidates: Vec<u32> = hits
            .iter()
            .filter_map(|&hit| self.glob_rule.get(hit).copied())
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        candidates.into_iter().find_map(|index| {
            let index = index as usize;
            let rule = self.rules.get(index)?;
            rule.conditions
                .iter()
                .all(|condition| condition.holds(args, is_path_param))
                .then_some((index, rule))
        })
    }
}

impl Condition {
    fn holds(&self, args: &Value, is_path_param: &dyn Fn(&str) -> bool) -> bool {
        let Some(value) = lookup(args, &self.param) else {
            return false;
        };
        let is_path = self.param.first().is_some_and(|first| is_path_param(first));
        let text = value.as_str().map(|text| {
            if is_path {
                super::paths::normalize_lexically(text)
            } else {
                std::borrow::Cow::Borrowed(text)
            }
        });
        match &self.test {
            ConditionTest::Equals(expected) => match &text {
                Some(text) => expected.as_str() == Some(text.as_ref()),
                None => value == expected,
            },
            ConditionTest::In(options) => options.iter().any(|option| match &text {
                Some(text) => option.as_str() == Some(text.as_ref()),
                None => option == value,
            }),
            ConditionTest::Matches(regex) => text.is_some_and(|text| regex.is_match(&text)),
            ConditionTest::Glob(glob) => text.is_some_and(|text| glob.is_match(text.as_ref())),
        }
    }
}

fn lookup<'v>(args: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(args, |value, segment| match value {
        Value::Object(map) => map.get(segment),
        Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

fn compile_rules(config: &Config, issues: &mut Vec<ConfigIssue>) -> Option<RuleSet> {
    let mut builder = GlobSetBuilder::new();
    let mut glob_rule = Vec::new();
    let mut rules = Vec::new();
    let mut ok = true;
    for (i, rule) in config.security.hitl.rules.iter().enumerate() {
        let base = format!("security.hitl.rules[{i}]");
        for (j, pattern) in rule.tools.iter().enumerate() {
            match tool_glob(pattern) {
                Ok(glob) => {
                    builder.add(glob);
                    glob_rule.push(u32::try_from(i).unwrap_or(u32::MAX));
                }
                Err(message) => {
                    ok = false;
                    issues.push(ConfigIssue::new(format!("{base}.tools[{j}]"), message));
                }
            }
        }
        let mut conditions = Vec::new();
        for (j, condition) in rule.conditions.iter().enumerate() {
            let path = format!("{base}.conditions[{j}]");
            let test = if let Some(pattern) = &condition.matches {
                // Compile the pattern as written first, so an error quotes it.
                match Regex::new(pattern).and_then(|_| Regex::new(&format!("^(?:{pattern})"))) {
                    Ok(regex) => ConditionTest::Matches(regex),
                    Err(error) => {
                        ok = false;
                        issues.push(ConfigIssue::new(
                            format!("{path}.matches"),
                            format!("invalid regex: {}", first_line(&error.to_string())),
                        ));
                        continue;
                    }
                }
            } else if let Some(pattern) = &condition.glob {
                match super::paths::path_glob(pattern) {
                    Ok(glob) => ConditionTest::Glob(glob.compile_matcher()),
                    Err(error) => {
                        ok = false;
                        issues.push(ConfigIssue::new(
                            format!("{path}.glob"),
                            super::paths::glob_message(&error),
                        ));
                        continue;
                    }
                }
            } else if let Some(values) = &condition.in_ {
                ConditionTest::In(values.clone())
            } else if let Some(value) = &condition.equals {
                ConditionTest::Equals(value.clone())
            } else {
                // Validation reports a condition without an operator.
                ok = false;
                continue;
            };
            conditions.push(Condition {
                param: condition.param.split('.').map(str::to_owned).collect(),
                test,
            });
        }
        rules.push(CompiledRule {
            risk: rule.risk,
            require_approval: rule.require_approval,
            timeout: rule.timeout,
            deny: rule.decision.is_some(),
            conditions,
        });
    }
    let tool_globs = match builder.build() {
        Ok(set) => set,
        Err(error) => {
            issues.push(ConfigIssue::new(
                "security.hitl.rules".to_owned(),
                super::paths::glob_message(&error),
            ));
            return None;
        }
    };
    ok.then_some(RuleSet {
        tool_globs,
        glob_rule,
        rules,
    })
}

fn pattern_list(
    patterns: &[String],
    base: &str,
    issues: &mut Vec<ConfigIssue>,
) -> Option<PatternList> {
    let mut globs = Vec::new();
    let mut ok = true;
    for (i, pattern) in patterns.iter().enumerate() {
        match tool_glob(pattern) {
            Ok(glob) => globs.push((glob, Arc::from(pattern.as_str()))),
            Err(message) => {
                ok = false;
                issues.push(ConfigIssue::new(format!("{base}[{i}]"), message));
            }
        }
    }
    match PatternList::new(globs) {
        Ok(list) if ok => Some(list),
        Ok(_) => None,
        Err(error) => {
            issues.push(ConfigIssue::new(base, super::paths::glob_message(&error)));
            None
        }
    }
}

/// A glob over tool names: `*` matches any run of characters.
fn tool_glob(pattern: &str) -> Result<globset::Glob, String> {
    if pattern.is_empty() {
        return Err("must not be empty".to_owned());
    }
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map_err(|error| format!("invalid glob: {}", error.kind()))
}

fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn resolve_risk_policy(
    configured: &RiskPolicyConfig,
    risk: Risk,
    default_timeout: u64,
) -> ResolvedRiskPolicy {
    let builtin = RiskPolicyConfig::builtin(risk);
    ResolvedRiskPolicy {
        require_approval: configured
            .require_approval
            .or(builtin.require_approval)
            .unwrap_or(true),
        timeout: configured
            .timeout
            .or(builtin.timeout)
            .unwrap_or(default_timeout),
        allow_skip: configured
            .allow_skip
            .or(builtin.allow_skip)
            .unwrap_or(false),
        require_reason: configured
            .require_reason
            .or(builtin.require_reason)
            .unwrap_or(false),
        approvers: configured
            .approvers
            .clone()
            .or(builtin.approvers)
            .unwrap_or_default()
            .into(),
    }
}

/// Whether `tool` is one of the built-in file tools that `file_broker.enabled`
/// switches (every built-in but `proposal_status` and `exec`).
pub(crate) fn is_file_tool(tool: &str) -> bool {
    crate::tools::BuiltinTool::from_name(tool).is_some_and(|tool| {
        !tool.is_session_tool()
            && !matches!(
                tool,
                crate::tools::BuiltinTool::ProposalStatus | crate::tools::BuiltinTool::Exec
            )
    })
}
