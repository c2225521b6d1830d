//! Submit: every call enters here. The policy decides allow, ask or deny;
//! read-only tools run at once, write-class and upstream calls go on to be
//! proposed.

use airlock_core::config::{ApprovalMode, Config, ElicitationFallback};
use airlock_core::envelope::{DecidedBy, DecisionInfo, Envelope, ErrorReason, Status};
use airlock_core::{
    Decision, Disposition, ErrorCode, Grant, GrantHolder, GrantScope, ToolCall, policy,
};
use airlock_fs::{FsError, ReadParams};
use airlock_store::{Approval, ApprovalStatus, StoreError};
use serde_json::{Value, json};

use crate::broker::Broker;
use crate::envelopes::{
    call_path, decided_by_policy_or_grant, failure_status, first_denial, method_of, reason_of,
    to_value,
};
use crate::record::Record;
use airlock_exec::Cancel;

/// How a call that needs approval is handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Block until a decision or the timeout (the configured default).
    Wait,
    /// Return `hitl_required` at once.
    Defer,
    /// The person at this terminal approves it now (with a reason where the
    /// risk requires one).
    ApproveNow {
        user: String,
        reason: Option<String>,
    },
    /// An MCP client made the call; how its human can be asked decides the
    /// rest (DESIGN §9). `approval_mode: defer` still defers.
    Client(ClientAsk),
}

/// How the human behind an MCP client can be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAsk {
    /// The client answers `elicitation/create` while the call waits.
    Elicit,
    /// A 2026-07-28 client: the call returns at once with its approval pending,
    /// and the client's answer comes with a retry of the call.
    Rounds,
    /// The client cannot be asked: the `elicitation_fallback` decides.
    Unable,
}

/// What happens to a call the policy makes ask, given the mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handling<'m> {
    Wait,
    Defer,
    /// Pending, like `Defer`, but expiring with the wait timeout: the client
    /// answers on a retry.
    Rounds,
    ApproveNow {
        user: &'m str,
        reason: Option<&'m str>,
    },
    /// `elicitation_fallback: deny`.
    Refuse,
    /// `elicitation_fallback: allow`.
    Allow,
}

/// Whether the configuration's default mode is wait or defer.
/// How long a deferred proposal of `decision` lives: its timeout, at most
/// `file_broker.hitl_ttl_seconds`.
pub fn deferred_ttl(config: &Config, decision: &Decision) -> u64 {
    decision
        .timeout_seconds
        .min(config.file_broker.hitl_ttl_seconds)
}

/// The path arguments of `call` that lead elsewhere than they say: a
/// built-in tool's as `sandbox` resolves them, another server's as far as
/// they exist (relative ones from the root). Nothing is opened.
fn resolved_paths(sandbox: &airlock_fs::Sandbox, call: &ToolCall) -> policy::ResolvedPaths {
    let mut resolved = policy::ResolvedPaths::default();
    let builtin = matches!(call.origin, airlock_core::ToolOrigin::Builtin(_));
    for argument in policy::path_args::path_arguments(call) {
        let (real, written) = if builtin {
            (
                sandbox.resolved_for_policy(&argument.path),
                policy::normalize_relative(&argument.path),
            )
        } else {
            (sandbox.resolved_foreign(&argument.path), None)
        };
        if let Some(real) = real
            && Some(&real) != written.as_ref()
        {
            resolved.arguments.push((argument.pointer, real));
        }
    }
    resolved
}

/// The grants in force, as the policy reads them.
fn grants_of(rows: Vec<airlock_store::GrantRow>) -> Vec<Grant> {
    rows.into_iter()
        .filter_map(|row| {
            let scope = match row.session {
                Some(session) => GrantScope::Session(session),
                None => GrantScope::Persistent,
            };
            Grant::new(
                row.id,
                row.tool,
                row.path_glob.as_deref(),
                scope,
                row.expires_ms,
                GrantHolder {
                    user: row.user,
                    owner: row.owner,
                },
            )
            .ok()
        })
        .collect()
}

/// The decision `submit` would take on `call` in `workspace` at `now_ms`,
/// grants in force and resolved paths included, and the grants it read:
/// what `airlock check` explains. It changes nothing: the store is opened
/// read-only (no migration, no recovery) and nothing is audited; without a
/// store yet there are no grants.
pub fn explain(
    workspace: &crate::Workspace,
    call: &ToolCall,
    now_ms: u64,
) -> Result<(Decision, Vec<airlock_store::GrantRow>), crate::BrokerError> {
    let config = &workspace.loaded.config;
    let policy = std::sync::Arc::new(workspace.loaded.policy.clone());
    let sandbox = airlock_fs::Sandbox::open(&workspace.root, &config.file_broker, policy.clone())?;
    let database = workspace
        .root
        .join(&config.workspace.state_dir)
        .join("airlock.db");
    if workspace.store.is_none() {
        crate::broker::refuse_unopened_shared_store(config)?;
    }
    let rows = match &workspace.store {
        Some(store) => store.grants(now_ms)?,
        None if database.exists() => {
            airlock_store::Store::open_read_only(&database)?.grants(now_ms)?
        }
        None => Vec::new(),
    };
    let grants = grants_of(rows.clone());
    let resolved = resolved_paths(&sandbox, call);
    Ok((
        policy::evaluate_resolved(&policy, call, &grants, &resolved),
        rows,
    ))
}

pub fn default_mode(config: &Config) -> Mode {
    match config.security.hitl.approval_mode {
        ApprovalMode::Wait => Mode::Wait,
        ApprovalMode::Defer => Mode::Defer,
    }
}

impl Broker {
    /// The decision `submit` would take on `call` now, grants in force and
    /// resolved paths included, without acting on it or auditing it (what a
    /// face checks before something that is not itself a call, such as a
    /// resource subscription).
    pub fn decide_only(&self, call: &ToolCall) -> Decision {
        let now = self.now_ms();
        let grants = policy::LazyGrants::new(|| self.live_grants(now));
        let view = self.policy_view(call);
        let resolved = self.resolved_paths(&view);
        policy::evaluate_resolved(&self.policy, &view, &grants, &resolved)
    }

    /// Runs one call through the pipeline and returns its envelope.
    pub fn submit(
        &self,
        call: &ToolCall,
        mode: &Mode,
        on_pending: &(dyn Fn(&Approval) + Sync),
    ) -> Envelope {
        self.submit_cancellable(call, mode, on_pending, &Cancel::new())
    }

    /// [`Broker::submit`], for a caller that may go away before the answer:
    /// cancelling `cancel` then kills a command `exec` is running for the
    /// call (with everything it started), and the call ends.
    pub fn submit_cancellable(
        &self,
        call: &ToolCall,
        mode: &Mode,
        on_pending: &(dyn Fn(&Approval) + Sync),
        cancel: &Cancel,
    ) -> Envelope {
        // The session the call runs in (DESIGN §5.3).
        let in_session = match self.in_session(call) {
            Ok(in_session) => in_session,
            Err(envelope) => return *envelope,
        };
        let call = in_session.as_ref().unwrap_or(call);
        // A script: the engine runs it, and its calls come back here, each
        // with a trace of its own.
        if let Some(envelope) = self.code_call(call, mode, on_pending, cancel) {
            return envelope;
        }
        // The call's trace (DESIGN §8.1): policy, propose (until the
        // approval is stored), decide and apply are its children.
        let trace = crate::telemetry::CallTrace::start();
        trace.attribute("airlock.tool", call.tool.clone());
        if let Some(session) = &call.session {
            trace.attribute("airlock.session", session.clone());
        }
        let proposing: std::cell::RefCell<Option<crate::telemetry::ChildSpan>> =
            std::cell::RefCell::new(None);
        let stored = |approval: &Approval| {
            proposing.borrow_mut().take();
            on_pending(approval);
        };
        let envelope = self.submit_traced(call, mode, &stored, cancel, &trace, &proposing);
        proposing.borrow_mut().take();
        if let Ok(Value::String(status)) = serde_json::to_value(envelope.status) {
            trace.attribute("airlock.status", status);
        }
        if let Some(hitl) = &envelope.hitl {
            trace.attribute("airlock.hitl_id", hitl.hitl_id.clone());
        }
        envelope
    }

    fn submit_traced(
        &self,
        call: &ToolCall,
        mode: &Mode,
        on_pending: &dyn Fn(&Approval),
        cancel: &Cancel,
        trace: &crate::telemetry::CallTrace,
        proposing: &std::cell::RefCell<Option<crate::telemetry::ChildSpan>>,
    ) -> Envelope {
        let now = self.now_ms();
        let grants = policy::LazyGrants::new(|| self.live_grants(now));
        // Decided on the paths as written and as the file system resolves
        // them; the strictest wins (a patch's files are resolved when it is
        // planned, in `write`).
        // In a session, on its paths as they are placed (DESIGN §5.3).
        let view = self.policy_view(call);
        let resolved = self.resolved_paths(&view);
        let decision = {
            let _policy = crate::telemetry::child("policy");
            policy::evaluate_resolved(&self.policy, &view, &grants, &resolved)
        };
        trace.attribute("airlock.risk", decision.risk.as_str());
        if let Ok(Value::String(disposition)) = serde_json::to_value(decision.disposition) {
            trace.attribute("airlock.decision", disposition);
        }
        if decision.disposition == Disposition::Ask {
            *proposing.borrow_mut() = Some(crate::telemetry::child("propose"));
        }
        let base = Record::for_call(call, &decision);

        if decision.disposition == Disposition::Deny {
            return self.denied_by_policy(call, &decision, base);
        }

        use airlock_core::ToolOrigin;
        use airlock_core::tools::BuiltinTool;
        match &call.origin {
            ToolOrigin::Builtin(
                tool @ (BuiltinTool::ReadFile
                | BuiltinTool::Grep
                | BuiltinTool::Glob
                | BuiltinTool::ListDir
                | BuiltinTool::Stat
                | BuiltinTool::Exists),
            ) => match self.sandbox_for(call) {
                Ok(sandbox) if *tool == BuiltinTool::ReadFile => {
                    self.read(&sandbox, call, &decision, base)
                }
                Ok(sandbox) => self.look(&sandbox, call, &decision, base),
                Err(error) => self.read_only(call, &decision, base, "tool_call", || Err(error)),
            },
            ToolOrigin::Builtin(
                tool @ (BuiltinTool::SessionOpen
                | BuiltinTool::SessionList
                | BuiltinTool::SessionClose
                | BuiltinTool::SessionSignal),
            ) => self.session_tool(*tool, call, &decision, mode, on_pending, base),
            ToolOrigin::Builtin(BuiltinTool::ProposalStatus) => {
                self.read_only(call, &decision, base, "tool_call", || {
                    self.proposal_status(call)
                })
            }
            ToolOrigin::Builtin(
                BuiltinTool::WriteFile
                | BuiltinTool::EditFile
                | BuiltinTool::ApplyPatch
                | BuiltinTool::DeleteFile
                | BuiltinTool::MoveFile,
            ) => self.write(call, &decision, mode, on_pending, base, now),
            ToolOrigin::Upstream { .. }
            | ToolOrigin::Resource { .. }
            | ToolOrigin::Sampling { .. } => {
                self.upstream_call(call, &decision, mode, on_pending, base, now)
            }
            ToolOrigin::Builtin(BuiltinTool::Exec) => {
                self.exec(call, &decision, mode, on_pending, base, now, cancel)
            }
            ToolOrigin::Unknown => {
                let other = call.tool.as_str();
                let envelope = Envelope::failure(
                    Status::Error,
                    method_of(other),
                    other,
                    call.args.get("path").and_then(Value::as_str),
                    ErrorCode::UnknownTool,
                    match airlock_core::suggest::nearest(
                        other,
                        airlock_core::tools::BuiltinTool::ALL
                            .iter()
                            .map(|tool| tool.name()),
                    ) {
                        Some(near) => {
                            format!("no tool named {other} is available; did you mean {near}?")
                        }
                        None => format!(
                            "no tool named {other} is available (`airlock tools` lists them)"
                        ),
                    },
                );
                self.observed(
                    envelope,
                    base.event("tool_call")
                        .text("status", "error")
                        .text("code", ErrorCode::UnknownTool.as_str()),
                )
            }
        }
    }

    /// The denied envelope of a call the policy refuses, audited.
    pub(crate) fn denied_by_policy(
        &self,
        call: &ToolCall,
        decision: &Decision,
        base: Record,
    ) -> Envelope {
        let path = call.args.get("path").and_then(Value::as_str);
        let message = first_denial(decision);
        let code = decision.deny_code.unwrap_or(ErrorCode::PolicyDenied);
        let mut envelope = Envelope::failure(
            Status::Denied,
            method_of(&call.tool),
            &call.tool,
            path,
            code,
            message,
        )
        .with_reason(decision.deny_reason());
        envelope.decision = Some(DecisionInfo {
            by: DecidedBy::Policy,
            user: None,
            channel: None,
            reason: None,
        });
        let event = if call.tool == "read_file" {
            "read_file"
        } else {
            "tool_call"
        };
        self.observed(
            envelope,
            base.event(event)
                .text("decision", "deny")
                .text("decided_by", "policy")
                .text("status", "denied")
                .text("code", code.as_str()),
        )
    }

    /// Where the call's path arguments really lead, for each that leads
    /// elsewhere than it says: a built-in tool's as its sandbox resolves
    /// them, another server's as far as they exist (relative ones from the
    /// root). Nothing is opened.
    pub(crate) fn resolved_paths(&self, call: &ToolCall) -> policy::ResolvedPaths {
        resolved_paths(&self.sandbox, call)
    }

    pub(crate) fn live_grants(&self, now: u64) -> Vec<Grant> {
        grants_of(self.store.grants(now).unwrap_or_default())
    }

    pub(crate) fn read(
        &self,
        sandbox: &airlock_fs::Sandbox,
        call: &ToolCall,
        decision: &Decision,
        base: Record,
    ) -> Envelope {
        self.read_only(call, decision, base, "read_file", || {
            let params = ReadParams::from_args(&call.args)?;
            let data = airlock_fs::read_file(sandbox, &params)?;
            Ok(serde_json::to_value(&data).unwrap_or(Value::Null))
        })
    }

    /// grep, glob, list_dir, stat, exists.
    pub(crate) fn look(
        &self,
        sandbox: &airlock_fs::Sandbox,
        call: &ToolCall,
        decision: &Decision,
        base: Record,
    ) -> Envelope {
        self.read_only(call, decision, base, "tool_call", || {
            let args = &call.args;
            let data = match call.tool.as_str() {
                "grep" => to_value(airlock_fs::grep(
                    sandbox,
                    &airlock_fs::GrepParams::from_args(args)?,
                )?),
                "glob" => to_value(airlock_fs::glob(
                    sandbox,
                    &airlock_fs::GlobParams::from_args(args)?,
                )?),
                "list_dir" => to_value(airlock_fs::list_dir(
                    sandbox,
                    &airlock_fs::ListDirParams::from_args(args)?,
                )?),
                "stat" => to_value(airlock_fs::stat(
                    sandbox,
                    &airlock_fs::StatParams::from_args(args)?,
                )?),
                _ => to_value(airlock_fs::exists(
                    sandbox,
                    &airlock_fs::StatParams::from_args(args)?,
                )?),
            };
            Ok(data)
        })
    }

    /// A read-only tool: allowed (or by a grant) runs it at once; one that a
    /// profile or rule makes ask is refused, never let through: there is
    /// nothing to apply later, so reads cannot be proposed.
    pub(crate) fn read_only(
        &self,
        call: &ToolCall,
        decision: &Decision,
        base: Record,
        event: &str,
        run: impl FnOnce() -> Result<Value, FsError>,
    ) -> Envelope {
        let path = call_path(call);
        let method = method_of(&call.tool);
        let record = base.event(event);
        if decision.disposition == Disposition::Ask {
            let envelope = Envelope::failure(
                Status::Denied,
                method,
                &call.tool,
                path,
                ErrorCode::PolicyDenied,
                "this read needs approval, and reads cannot be proposed",
            )
            .with_reason(Some(reason_of(
                "hitl",
                "reads_cannot_be_proposed",
                decision,
            )));
            return self.observed(
                envelope,
                record.text("decision", "deny").text("status", "denied"),
            );
        }
        match run() {
            Ok(data) => {
                let mut record = record
                    .text("decision", "allow")
                    .text("decided_by", decided_by_policy_or_grant(decision))
                    .text("status", "allowed");
                for key in ["base_hash", "returned_range", "match_count", "count"] {
                    record = record.value(key, data.get(key).cloned());
                }
                if let Some(blob) = data.get("blob").and_then(|blob| blob.get("blob_ref")) {
                    record = record.value("blob_ref", Some(blob.clone()));
                }
                let mut envelope = Envelope::new(Status::Allowed, method, &call.tool, path);
                envelope.data = Some(data);
                self.observed(envelope, record)
            }
            Err(error) => {
                let message = error.to_string();
                let envelope = Envelope::failure(
                    failure_status(error.code()),
                    method,
                    &call.tool,
                    path,
                    error.code(),
                    &message,
                )
                .with_reason(ErrorReason::of_tool_refusal(
                    error.code(),
                    &message,
                    Some(decision.risk),
                ));
                self.observed(
                    envelope,
                    record
                        .text("status", "error")
                        .text("code", error.code().as_str()),
                )
            }
        }
    }

    /// `proposal_status {hitl_id}`: where an approval stands, and its final
    /// envelope once settled. A principal sees only the approvals it made
    /// (an admin's credential sees all), and a call made in a session only
    /// that session's; the rest are `not_found`, like unknown ids.
    pub(crate) fn proposal_status(&self, call: &ToolCall) -> Result<Value, FsError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Params {
            hitl_id: String,
        }
        let params: Params =
            serde::Deserialize::deserialize(&call.args).map_err(|error: serde_json::Error| {
                FsError::InvalidInput {
                    message: error.to_string(),
                }
            })?;
        let not_found = || FsError::NotFound {
            path: params.hitl_id.clone(),
        };
        let approval = match self.store.get(&params.hitl_id) {
            Ok(approval) => approval,
            Err(StoreError::NotFound(_)) => return Err(not_found()),
            Err(error) => {
                return Err(FsError::Io {
                    context: "cannot read the approval".to_owned(),
                    error: std::io::Error::other(error.to_string()),
                });
            }
        };
        let visible = call.principal.admin
            || (call.principal.owns(approval.owner.as_deref())
                && (call.session.is_none() || approval.session == call.session));
        if !visible {
            return Err(not_found());
        }
        if approval.status == ApprovalStatus::Pending && self.now_ms() >= approval.expires_ms {
            // Past its time: it can only expire now.
            self.expire(&approval.id);
        }
        let now = self.store.get(&approval.id).unwrap_or(approval);
        Ok(json!({
            "hitl_id": now.id,
            "status": now.status.as_str(),
            "tool": now.tool,
            "path": now.path,
            "summary": now.summary,
            "risk": now.risk.as_str(),
            "created_ms": now.created_ms,
            "expires_ms": now.expires_ms,
            "decided_by": now.decision.as_ref().map(|decided| decided.by.as_str()),
            "result": now.result.clone(),
        }))
    }

    /// How a call the policy makes ask is handled in `mode`.
    pub(crate) fn handling<'m>(&self, mode: &'m Mode, decision: &Decision) -> Handling<'m> {
        match mode {
            Mode::Wait => Handling::Wait,
            Mode::Defer => Handling::Defer,
            Mode::ApproveNow { user, reason } => Handling::ApproveNow {
                user,
                reason: reason.as_deref(),
            },
            Mode::Client(ask) => {
                if self.config.security.hitl.approval_mode == ApprovalMode::Defer {
                    return Handling::Defer;
                }
                // Where only named approvers may decide, the client's human
                // is not asked: the fallback decides, as for any client that
                // cannot be asked.
                let ask = if decision.approvers.is_empty() {
                    *ask
                } else {
                    ClientAsk::Unable
                };
                match ask {
                    ClientAsk::Elicit => Handling::Wait,
                    ClientAsk::Rounds => Handling::Rounds,
                    ClientAsk::Unable => match decision.elicitation_fallback {
                        ElicitationFallback::Auto if self.live_channels().is_empty() => {
                            Handling::Refuse
                        }
                        ElicitationFallback::Auto => Handling::Wait,
                        ElicitationFallback::Deny => Handling::Refuse,
                        ElicitationFallback::Allow => Handling::Allow,
                        ElicitationFallback::Defer => Handling::Defer,
                        ElicitationFallback::Wait => Handling::Wait,
                    },
                }
            }
        }
    }

    /// How long an approval lives, by one rule: the decision's timeout (a
    /// rule's, else its risk policy's, else `hitl.default_timeout`) while
    /// someone waits (or a client will answer on a retry); a deferred
    /// proposal at most `file_broker.hitl_ttl_seconds` too. `airlock check`
    /// and `pending` show both.
    pub(crate) fn ttl_seconds(
        &self,
        asks: bool,
        handling: Handling<'_>,
        decision: &Decision,
    ) -> u64 {
        match (asks, handling) {
            (true, Handling::Wait | Handling::Rounds) => decision.timeout_seconds,
            _ => deferred_ttl(&self.config, decision),
        }
    }

    /// A call that needs a human, from a client that cannot be asked, under
    /// `elicitation_fallback: deny` (spec 004), or `auto` with no approver
    /// channel live: denied, nothing proposed. The message names the key
    /// that decided, its values, and what would let a person decide.
    pub(crate) fn refused_by_fallback(
        &self,
        call: &ToolCall,
        decision: &Decision,
        path: Option<&str>,
        method: &str,
        record: Record,
    ) -> Envelope {
        let key = match decision.profile.as_deref() {
            Some(profile)
                if self
                    .config
                    .profiles
                    .get(profile)
                    .is_some_and(|config| config.elicitation_fallback.is_some()) =>
            {
                format!("profiles.{profile}.elicitation_fallback")
            }
            _ => "security.hitl.elicitation_fallback".to_owned(),
        };
        let workspace = self.root.display();
        let (rule, message) = match decision.elicitation_fallback {
            ElicitationFallback::Auto => (
                "elicitation_fallback: auto (no approver channel live)",
                format!(
                    "this call needs a human's approval, this client cannot ask one, and no \
                     approver channel is live: {key} is auto (values: auto | deny | allow | \
                     defer | wait), which waits for a person only while `airlock watch`, the \
                     web UI or a webhook can reach one. To decide this call, run `airlock \
                     watch` in {workspace} (or open the web UI of `airlock serve --http`) and \
                     call again"
                ),
            ),
            _ => (
                "elicitation_fallback: deny",
                format!(
                    "this call needs a human's approval and this client cannot ask one: {key} \
                     is deny (values: auto | deny | allow | defer | wait). To let a person \
                     decide, set it to auto and run `airlock watch` in {workspace}, or to \
                     defer and decide with `airlock approve`"
                ),
            ),
        };
        let mut envelope = Envelope::failure(
            Status::Denied,
            method,
            &call.tool,
            path,
            ErrorCode::PolicyDenied,
            message,
        )
        .with_reason(Some(reason_of("hitl", rule, decision)));
        envelope.decision = Some(DecisionInfo {
            by: DecidedBy::Policy,
            user: None,
            channel: None,
            reason: Some(rule.to_owned()),
        });
        self.audited(
            envelope,
            record
                .text("decision", "deny")
                .text("decided_by", "policy")
                .text("reason", rule)
                .text("status", "denied")
                .text("code", ErrorCode::PolicyDenied.as_str()),
        )
    }
}
