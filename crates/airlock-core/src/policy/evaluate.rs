//! The evaluation of one call, layer by layer (DESIGN §4).

use serde_json::Value;

use super::compile::{CompiledRule, Policy};
use super::decision::{Decision, Disposition, Justification, Reason, Risk, ToolClass};
use super::grant::Grants;
use super::paths::Scope;
use crate::call::{ToolCall, ToolOrigin};
use crate::error_code::ErrorCode;
use crate::tools::{BuiltinTool, FOREIGN_PATH_PARAMS, PatchTargets, patch_targets};

/// Collects the layers' votes; the strictest wins.
struct Tally {
    disposition: Disposition,
    deny_code: Option<ErrorCode>,
    justification: Vec<Justification>,
}

impl Tally {
    fn say(&mut self, effect: Option<Disposition>, reason: Reason) {
        if let Some(effect) = effect {
            self.disposition = self.disposition.max(effect);
        }
        self.justification.push(Justification { effect, reason });
    }

    fn deny(&mut self, reason: Reason, code: ErrorCode) {
        if self.deny_code.is_none() {
            self.deny_code = Some(code);
        }
        self.say(Some(Disposition::Deny), reason);
    }
}

/// Where a call's paths really lead, as the file system resolves them (the
/// broker finds out; the policy cannot): each path argument that leads
/// elsewhere than it says, by its JSON pointer, and for `apply_patch` the
/// files the patch really changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvedPaths {
    /// `(pointer, resolved path)`: root-relative for a built-in tool,
    /// absolute for another server's.
    pub arguments: Vec<(String, String)>,
    /// The resolved root-relative paths an `apply_patch` plan changes.
    pub patch: Option<Vec<String>>,
}

impl ResolvedPaths {
    pub fn is_empty(&self) -> bool {
        self.arguments.is_empty() && self.patch.is_none()
    }
}

impl Policy {
    /// [`Policy::evaluate`] on the call as written and again with its paths
    /// where they really lead: the strictest of the two decisions wins (a
    /// rule or grant on `docs/**` says nothing for `docs/link/x` that is
    /// `src/x`).
    pub(crate) fn evaluate_resolved(
        &self,
        call: &ToolCall,
        grants: &dyn Grants,
        resolved: &ResolvedPaths,
    ) -> Decision {
        let as_written = self.evaluate(call, grants);
        if resolved.is_empty() {
            return as_written;
        }
        let mut real = call.clone();
        real.args = super::path_args::replaced(&call.args, &resolved.arguments);
        let as_resolved = self.evaluate_with(&real, grants, resolved.patch.as_deref());
        let stricter =
            |a: &Decision, b: &Decision| (b.disposition, b.risk) > (a.disposition, a.risk);
        if stricter(&as_written, &as_resolved) {
            let mut decision = as_resolved;
            decision.justification.insert(
                0,
                Justification {
                    effect: None,
                    reason: Reason::ResolvedPaths,
                },
            );
            decision
        } else {
            as_written
        }
    }

    pub(crate) fn evaluate(&self, call: &ToolCall, grants: &dyn Grants) -> Decision {
        self.evaluate_with(call, grants, None)
    }

    /// `patch_override`: the files an `apply_patch` call really changes, in
    /// place of the ones its text names.
    fn evaluate_with(
        &self,
        call: &ToolCall,
        grants: &dyn Grants,
        patch_override: Option<&[String]>,
    ) -> Decision {
        let mut tally = Tally {
            disposition: Disposition::Allow,
            deny_code: None,
            justification: Vec::with_capacity(6),
        };

        // Layers 4 and 5 come first in time: risk decides what is write-class.
        let rule = self.rules.first_match(&call.tool, &call.args, &|param| {
            is_path_param(&call.origin, param)
        });
        // A patch is read as the applier will read it, once.
        let patch =
            matches!(call.origin, ToolOrigin::Builtin(BuiltinTool::ApplyPatch)).then(|| {
                let mut targets = patch_targets(&call.args);
                if let Some(real) = patch_override {
                    targets.parsed = real.to_vec();
                    targets.textual = Vec::new();
                }
                targets
            });
        let (class, default_risk) = match &patch {
            // A patch that deletes or moves files is as risky as delete_file
            // and move_file (and one that does not parse is not trusted less).
            Some(patch) if patch.destructive => {
                let class = crate::tools::BuiltinClass::Destructive;
                (ToolClass::of_builtin(class), class.default_risk())
            }
            _ => self.default_risk(&call.origin),
        };
        // A command is read once: its parts decide it, and its risk is
        // theirs.
        let is_exec = matches!(call.origin, ToolOrigin::Builtin(BuiltinTool::Exec));
        let exec = is_exec
            .then(|| exec_verdict(self.exec.as_deref()?, &call.args))
            .flatten();
        let default_risk = exec.as_ref().map_or(default_risk, |verdict| verdict.risk);
        let risk = rule.and_then(|(_, rule)| rule.risk).unwrap_or(default_risk);
        let write_class = match &call.origin {
            ToolOrigin::Builtin(tool) => tool.is_write(),
            ToolOrigin::Upstream { .. }
            | ToolOrigin::Resource { .. }
            | ToolOrigin::Sampling { .. }
            | ToolOrigin::Unknown => risk != Risk::Low,
        };

        // Layer 1: the sandbox. With `file_broker.enabled: false` the file
        // tools do not exist.
        if !self.file_tools_enabled && super::compile::is_file_tool(&call.tool) {
            tally.deny(Reason::FileToolsDisabled, ErrorCode::PolicyDenied);
        }
        // The sandbox, on every path-like argument.
        for_each_path(
            call,
            patch.as_ref(),
            true,
            |param, path, scope| match self.paths.check(param, path, scope, write_class) {
                Some((reason, code)) => {
                    tally.deny(reason, code);
                    false
                }
                None => true,
            },
        );

        // A command's redirections write (or read) files: the path rules
        // decide them as they decide write_file's path.
        if let Some(verdict) = &exec {
            let cwd = call.args.get("cwd").and_then(Value::as_str).unwrap_or("");
            for redirect in &verdict.redirects {
                if crate::exec::parse::is_device(&redirect.target) {
                    continue;
                }
                let path = if redirect.target.starts_with('/') || cwd.is_empty() {
                    redirect.target.clone()
                } else {
                    format!("{}/{}", cwd.trim_end_matches('/'), redirect.target)
                };
                if let Some((reason, code)) =
                    self.paths
                        .check("redirect", &path, Scope::Workspace, redirect.write)
                {
                    tally.deny(reason, code);
                }
            }
        }

        // Layer 2: the write-tool user allowlist (spec 001).
        if write_class && let Some(users) = &self.write_allowlist {
            let user = call.principal.user.as_deref();
            if users.is_empty() {
                tally.deny(Reason::WriteToolsDisabled, ErrorCode::NotInAllowlist);
            } else if user.is_some_and(|user| users.iter().any(|allowed| allowed == user)) {
                tally.say(Some(Disposition::Allow), Reason::UserAllowed);
            } else {
                let user = user.map(str::to_owned);
                tally.deny(Reason::UserNotAllowed { user }, ErrorCode::NotInAllowlist);
            }
        }

        // Layer 3: the profile (spec 004), strictest list wins; a
        // code-mode run's `codemode_eval_<profile>` binds its profile too,
        // so the call answers to both (it can narrow, never widen).
        let mut elicitation_fallback = self.elicitation_fallback;
        let mut applied_profile = None;
        let endpoint = call.profile.as_deref().or(self.default_profile.as_deref());
        let narrowed = call.via.as_ref().and_then(|via| via.narrowed_to.as_deref());
        for (index, name) in [endpoint, narrowed].into_iter().enumerate() {
            let Some(name) = name else {
                continue;
            };
            match self.profiles.get(name) {
                None => tally.deny(
                    Reason::UnknownProfile {
                        profile: name.to_owned(),
                    },
                    ErrorCode::PolicyDenied,
                ),
                Some(profile) => {
                    if index == 0 {
                        applied_profile = Some(profile.name.clone());
                    }
                    if let Some(fallback) = profile.elicitation_fallback
                        && !(index > 0
                            && elicitation_fallback == crate::config::ElicitationFallback::Deny)
                    {
                        elicitation_fallback = fallback;
                    }
                    let tool = call.tool.as_str();
                    let profile_name = || profile.name.clone();
                    let allowed_by = profile
                        .allowlist
                        .as_ref()
                        .map(|list| list.first_match(tool));
                    // Spec 004's precedence: denylist > asklist >
                    // allowlist miss > allowlist; an asklisted tool asks
                    // whether or not the allowlist names it.
                    if let Some(pattern) = profile.denylist.first_match(tool) {
                        let reason = Reason::ProfileDenylist {
                            profile: profile_name(),
                            pattern: pattern.clone(),
                        };
                        tally.deny(reason, ErrorCode::PolicyDenied);
                    } else if let Some(pattern) = profile.asklist.first_match(tool) {
                        let reason = Reason::ProfileAsklist {
                            profile: profile_name(),
                            pattern: pattern.clone(),
                        };
                        tally.say(Some(Disposition::Ask), reason);
                    } else if let Some(None) = allowed_by {
                        let reason = Reason::ProfileAllowlistMiss {
                            profile: profile_name(),
                        };
                        tally.deny(reason, ErrorCode::PolicyDenied);
                    } else if let Some(Some(pattern)) = allowed_by {
                        let reason = Reason::ProfileAllowlist {
                            profile: profile_name(),
                            pattern: pattern.clone(),
                        };
                        tally.say(Some(Disposition::Allow), reason);
                    }
                }
            }
        }

        // The shell tool: each part of the command by `exec.rules`.
        if is_exec {
            match (&self.exec, &exec) {
                (None, _) => tally.deny(Reason::ExecDisabled, ErrorCode::PolicyDenied),
                (Some(_), None) => tally.deny(Reason::ExecNoCommand, ErrorCode::InvalidInput),
                (Some(_), Some(verdict)) => {
                    for part in &verdict.segments {
                        let reason = Reason::ExecPart(Box::new(part.clone()));
                        match part.decision {
                            crate::config::ExecDecision::Deny => {
                                tally.deny(reason, ErrorCode::PolicyDenied);
                            }
                            crate::config::ExecDecision::Ask => {
                                tally.say(Some(Disposition::Ask), reason);
                            }
                            crate::config::ExecDecision::Allow => {
                                tally.say(Some(Disposition::Allow), reason);
                            }
                        }
                    }
                }
            }
        }

        // Layer 4: the first matching rule (spec 002).
        let risk_policy = self.risk_policy(risk);
        let mut require_approval = risk_policy.require_approval;
        let mut timeout_seconds = risk_policy.timeout;
        if let Some((index, rule)) = rule {
            let CompiledRule {
                risk,
                require_approval: rule_requires,
                timeout,
                deny,
                ..
            } = *rule;
            let reason = Reason::Rule {
                index,
                risk,
                require_approval: rule_requires,
                deny,
            };
            if deny {
                tally.deny(reason, ErrorCode::PolicyDenied);
            } else {
                let effect = rule_requires.map(|ask| {
                    if ask {
                        Disposition::Ask
                    } else {
                        Disposition::Allow
                    }
                });
                tally.say(effect, reason);
            }
            if let Some(requires) = rule_requires {
                require_approval = requires;
            }
            if let Some(timeout) = timeout {
                timeout_seconds = timeout;
            }
        }

        // Layer 5: the default risk, when no rule set one.
        if rule.is_none_or(|(_, rule)| rule.risk.is_none()) {
            tally.say(None, Reason::DefaultRisk { class, risk });
        }

        // Layer 6: the risk policy, unless the rule already said whether to
        // ask (for a command, its parts said).
        if !is_exec && rule.is_none_or(|(_, rule)| rule.require_approval.is_none()) {
            let effect = if require_approval {
                Disposition::Ask
            } else {
                Disposition::Allow
            };
            tally.say(
                Some(effect),
                Reason::RiskPolicy {
                    risk,
                    require_approval,
                },
            );
        }

        // Layer 7: grants turn ask into allow, only where the policy allows skipping.
        // A patch that does not parse names no path a grant could vouch for.
        let patch_parses = patch.as_ref().is_none_or(|patch| patch.parses);
        // A command is never covered by a grant: "always allow" on `exec`
        // would allow every command.
        if tally.disposition == Disposition::Ask
            && !is_exec
            && risk_policy.allow_skip
            && patch_parses
            && !grants.get().is_empty()
        {
            // Grants see workspace-relative paths only; anything else covers nothing.
            let mut paths = Vec::new();
            for_each_path(call, patch.as_ref(), false, |_, path, _| {
                paths.push(self.paths.workspace_relative(path));
                true
            });
            if let Some(grant) = grants.get().iter().find(|grant| grant.covers(call, &paths)) {
                tally.justification.push(Justification {
                    effect: Some(Disposition::Allow),
                    reason: Reason::Grant {
                        id: grant.id.clone(),
                    },
                });
                tally.disposition = Disposition::Allow;
            }
        }

        // Layer 8: a disabled gate lets what would ask through, still on record.
        if tally.disposition == Disposition::Ask {
            let reason = if !self.hitl_enabled {
                Some(Reason::HitlDisabled)
            } else if write_class && !is_exec && !self.write_tool_confirmation {
                Some(Reason::ConfirmationDisabled)
            } else {
                None
            };
            if let Some(reason) = reason {
                tally.justification.push(Justification {
                    effect: Some(Disposition::Allow),
                    reason,
                });
                tally.disposition = Disposition::Allow;
            }
        }

        Decision {
            disposition: tally.disposition,
            risk,
            timeout_seconds,
            allow_skip: risk_policy.allow_skip && !is_exec,
            require_reason: risk_policy.require_reason,
            approvers: risk_policy.approvers.clone(),
            write_class,
            profile: applied_profile,
            elicitation_fallback,
            deny_code: match tally.disposition {
                Disposition::Deny => tally.deny_code,
                Disposition::Allow | Disposition::Ask => None,
            },
            justification: tally.justification,
        }
    }

    fn default_risk(&self, origin: &ToolOrigin) -> (ToolClass, Risk) {
        match origin {
            ToolOrigin::Builtin(tool) => {
                let class = tool.class();
                (ToolClass::of_builtin(class), class.default_risk())
            }
            ToolOrigin::Upstream {
                upstream,
                annotations,
            } => {
                if !self.trusts(upstream) {
                    return (ToolClass::UntrustedUpstream, Risk::High);
                }
                let risk = match annotations {
                    Some(annotations) if annotations.read_only_hint == Some(true) => Risk::Low,
                    Some(annotations) if annotations.destructive_hint == Some(false) => {
                        Risk::Medium
                    }
                    Some(_) | None => Risk::High,
                };
                (ToolClass::TrustedUpstream, risk)
            }
            ToolOrigin::Resource { .. } => (ToolClass::UpstreamResource, Risk::Low),
            ToolOrigin::Sampling { .. } => (ToolClass::UpstreamSampling, Risk::Medium),
            ToolOrigin::Unknown => (ToolClass::Unknown, Risk::High),
        }
    }
}

/// Whether `param` of a call from `origin` holds a path.
fn is_path_param(origin: &ToolOrigin, param: &str) -> bool {
    match origin {
        ToolOrigin::Builtin(tool) => tool.path_params().contains(&param),
        ToolOrigin::Upstream { .. } | ToolOrigin::Resource { .. } | ToolOrigin::Unknown => {
            FOREIGN_PATH_PARAMS.contains(&param)
        }
        // A model's messages name no file the call touches.
        ToolOrigin::Sampling { .. } => false,
    }
}

/// Calls `visit(param, path, scope)` for every path-like argument of `call` until
/// it returns `false`.
/// A patch's paths are the parser's; with `textual_too` (the sandbox layer)
/// also every path its headers could be read as.
fn for_each_path(
    call: &ToolCall,
    patch: Option<&PatchTargets>,
    textual_too: bool,
    mut visit: impl FnMut(&str, &str, Scope) -> bool,
) {
    match &call.origin {
        ToolOrigin::Builtin(BuiltinTool::ApplyPatch) => {
            let Some(patch) = patch else {
                return;
            };
            let textual = if textual_too { &patch.textual[..] } else { &[] };
            for path in patch.parsed.iter().chain(textual) {
                if !visit("patch", path, Scope::Workspace) {
                    return;
                }
            }
        }
        ToolOrigin::Builtin(tool) => {
            for param in tool.path_params() {
                if let Some(path) = call.args.get(*param).and_then(Value::as_str)
                    && !visit(param, path, Scope::Workspace)
                {
                    return;
                }
            }
        }
        // Every string anywhere in the arguments that names a file, under any
        // A model's messages name no file the call touches.
        ToolOrigin::Sampling { .. } => {}
        // name, as a `file:` URI too (`path_args`); a resource's URI too.
        ToolOrigin::Upstream { .. } | ToolOrigin::Resource { .. } | ToolOrigin::Unknown => {
            for argument in super::path_args::path_arguments(call) {
                if !visit(&argument.param, &argument.path, Scope::Foreign) {
                    return;
                }
            }
        }
    }
}

/// The verdict on an `exec` call's command, with each variable its `env`
/// sets as a part that asks; `None` when the arguments name no command.
pub(crate) fn exec_verdict(
    policy: &crate::exec::ExecPolicy,
    args: &Value,
) -> Option<crate::exec::Verdict> {
    let mut verdict = match exec_command(args)? {
        ExecCommand::Line(line) => policy.decide_command(line),
        ExecCommand::Argv(argv) => policy.decide_argv(&argv),
    };
    if let Some(Value::Object(env)) = args.get("env") {
        for name in env.keys() {
            verdict.segments.push(crate::exec::Segment {
                text: format!("env {name}"),
                command: None,
                via: Vec::new(),
                decision: crate::config::ExecDecision::Ask,
                risk: Risk::High,
                because: crate::exec::Because::Hazard {
                    hazard: crate::exec::parse::Hazard::Assignment(name.clone()).to_string(),
                },
            });
        }
        if !env.is_empty() {
            verdict.decision = verdict.decision.max(crate::config::ExecDecision::Ask);
            verdict.risk = verdict.risk.max(Risk::High);
        }
    }
    Some(verdict)
}

/// The command of an `exec` call.
enum ExecCommand<'a> {
    Line(&'a str),
    Argv(Vec<String>),
}

/// `command` (a shell line) or `argv` (strings), whichever the call names;
/// `None` for neither, both, or a malformed one (the tool refuses those).
fn exec_command(args: &Value) -> Option<ExecCommand<'_>> {
    match (args.get("command"), args.get("argv")) {
        (Some(Value::String(line)), None) => Some(ExecCommand::Line(line)),
        (None, Some(Value::Array(words))) if !words.is_empty() => words
            .iter()
            .map(|word| word.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(ExecCommand::Argv),
        _ => None,
    }
}
