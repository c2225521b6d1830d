//! Propose: a write-class call is planned without side effects, stored as an
//! approval and audited; then it waits, defers, or is approved now.

use airlock_core::envelope::DecidedBy;
use airlock_core::envelope::{Envelope, ErrorReason, HitlInfo, Status};
use airlock_core::policy::Reason;
use airlock_core::tools::BuiltinTool;
use airlock_core::{
    ApprovalTerms, Channel, Decision, Disposition, ErrorCode, Plan, ToolCall, policy,
};
use airlock_fs::{ChangePlan, FsError, WriteParams};
use airlock_store::{Approval, Created, Limits, NewApproval, StoreError, Verdict};
use serde_json::{Value, json};

use crate::broker::Broker;
use crate::decide::DecideRequest;
use crate::envelopes::{
    FALLBACK_ALLOW, audit_unwritable, call_path, decided_by_policy_or_grant, dedup_key,
    failure_status, method_of,
};
use crate::error::BrokerError;
use crate::record::Record;
use crate::submit::{Handling, Mode};

/// A write-class call, planned.
pub(crate) enum Planned {
    Plan(ChangePlan),
    DryRun(ChangePlan),
    /// A previewed command's changes, and what the human reads before
    /// their diff (the command, how it ended, what it printed). The plan's
    /// own diff stays exactly what is applied.
    Command(ChangePlan, String),
    /// An agent's own call (its hook asked), and what the human reads
    /// before its diff.
    Agent(airlock_core::plan::AgentPlan, String),
    /// A code-mode run's staged changes, and what the human reads before
    /// their diff (the script, its calls, its console).
    Code(ChangePlan, String),
}

/// What an approval shows a human, and the plan it applies.
pub(crate) struct Shown {
    pub path: Option<String>,
    pub summary: String,
    pub diff: String,
    pub plan: Plan,
}

impl Broker {
    /// The approval of `call` as `decision` made it ask, built-in or
    /// upstream alike: who made it, its key for identical calls, its
    /// redacted arguments, and how long it lives.
    pub(crate) fn new_approval(
        &self,
        call: &ToolCall,
        decision: &Decision,
        shown: Shown,
        now: u64,
        ttl_seconds: u64,
        waiter_pid: Option<u32>,
    ) -> NewApproval {
        NewApproval {
            // The call's trace id when it is traced, so whoever decides or
            // applies it later finds the trace from the id alone.
            id: format!(
                "hitl-{}",
                crate::telemetry::approval_trace()
                    .map_or_else(uuid::Uuid::new_v4, uuid::Uuid::from_bytes)
            ),
            tool: call.tool.clone(),
            args_json: call.args.to_string(),
            args_display: airlock_core::redact::redact_params(&call.args).to_string(),
            dedup_key: dedup_key(call),
            user: call.principal.user.clone(),
            agent: call.principal.agent.clone(),
            owner: Some(call.principal.owner_key()),
            session: call.session.clone(),
            tool_call_id: call.tool_call_id.clone(),
            context_id: call.context_id.clone(),
            requester: call.requester.clone(),
            risk: decision.risk,
            terms: ApprovalTerms::from(decision),
            path: shown.path,
            summary: shown.summary,
            diff: crate::staging::with_run_context(shown.diff),
            plan: shown.plan,
            created_ms: now,
            expires_ms: now.saturating_add(ttl_seconds.saturating_mul(1000)),
            waiter_pid,
        }
    }

    /// The configured limits on pending approvals.
    pub(crate) fn pending_limits(&self) -> Limits {
        Limits {
            max_pending: self.config.security.hitl.max_pending,
            max_pending_per_session: self.config.security.hitl.max_pending_per_session,
        }
    }

    /// The plan of a write-class call, without side effects.
    pub(crate) fn plan(&self, call: &ToolCall) -> Result<Planned, FsError> {
        // In a session: its roots, workdir and limits.
        let sandbox = self.sandbox_for(call)?;
        self.plan_in(&sandbox, call)
    }

    /// [`Broker::plan`] made in `sandbox` (a code-mode run's, which reads
    /// through what the run staged).
    pub(crate) fn plan_in(
        &self,
        sandbox: &airlock_fs::Sandbox,
        call: &ToolCall,
    ) -> Result<Planned, FsError> {
        let args = &call.args;
        let plan = match call.tool.as_str() {
            "write_file" => airlock_fs::prepare_write(sandbox, &WriteParams::from_args(args)?)?,
            "edit_file" => {
                airlock_fs::prepare_edit(sandbox, &airlock_fs::EditParams::from_args(args)?)?
            }
            "delete_file" => {
                airlock_fs::prepare_delete(sandbox, &airlock_fs::DeleteParams::from_args(args)?)?
            }
            "move_file" => {
                airlock_fs::prepare_move(sandbox, &airlock_fs::MoveParams::from_args(args)?)?
            }
            "apply_patch" => {
                let params = airlock_fs::PatchParams::from_args(args)?;
                let plan = airlock_fs::prepare_patch(sandbox, &params)?;
                if params.dry_run {
                    return Ok(Planned::DryRun(plan));
                }
                plan
            }
            other => {
                return Err(FsError::InvalidInput {
                    message: format!("{other} is not a write tool"),
                });
            }
        };
        Ok(Planned::Plan(plan))
    }

    /// `apply_patch` with `dry_run`: what would change, nothing written, no
    /// approval needed (the policy's denials still apply).
    pub(crate) fn dry_run(
        &self,
        call: &ToolCall,
        decision: &Decision,
        plan: &ChangePlan,
        base: Record,
    ) -> Envelope {
        let path = plan.primary_path();
        let mut envelope = Envelope::new(Status::Allowed, "fs.propose_patch", &call.tool, path);
        let mut data = json!({
            "dry_run": true,
            "summary": plan.summary,
            "patch_hash": plan.patch_hash,
            "diff": plan.diff_preview(self.config.file_broker.diff_preview_max_chars),
        });
        if let Some(object) = data.as_object_mut() {
            for (key, value) in &plan.report {
                object.insert(key.clone(), value.clone());
            }
        }
        envelope.data = Some(data);
        self.audited(
            envelope,
            base.event("tool_call")
                .text("decision", "allow")
                .text("decided_by", decided_by_policy_or_grant(decision))
                .flag("dry_run", true)
                .value("changed_paths", Some(json!(plan.changed_paths())))
                .text("patch_hash", &plan.patch_hash)
                .text("status", "allowed"),
        )
    }

    pub(crate) fn invalid(
        &self,
        call: &ToolCall,
        path: Option<&str>,
        message: &str,
        base: Record,
    ) -> Envelope {
        let envelope = Envelope::failure(
            Status::Error,
            method_of(&call.tool),
            &call.tool,
            path,
            ErrorCode::InvalidInput,
            format!("invalid arguments: {message}"),
        );
        self.audited(
            envelope,
            base.event("tool_call")
                .text("status", "error")
                .text("code", ErrorCode::InvalidInput.as_str()),
        )
    }

    pub(crate) fn write(
        &self,
        call: &ToolCall,
        decision: &Decision,
        mode: &Mode,
        on_pending: &dyn Fn(&Approval),
        base: Record,
        now: u64,
    ) -> Envelope {
        let planned = self.plan(call);
        // A patch names its files in its text; where they really are (through
        // symlinks) is known once it is planned, and decided on too.
        // In a session with a working directory, the patch's paths are
        // placed from there: always decided again on the planned paths.
        if let Ok(Planned::Plan(plan) | Planned::DryRun(plan)) = &planned
            && call.tool == "apply_patch"
            && (call.scope.is_some()
                || plan
                    .changes
                    .iter()
                    .any(|change| change.resolved_path != change.path))
        {
            let resolved = policy::ResolvedPaths {
                arguments: Vec::new(),
                patch: Some(
                    plan.changes
                        .iter()
                        .map(|change| change.resolved_path.clone())
                        .collect(),
                ),
            };
            let grants = policy::LazyGrants::new(|| self.live_grants(now));
            let real = policy::evaluate_resolved(&self.policy, call, &grants, &resolved);
            if (real.disposition, real.risk) > (decision.disposition, decision.risk) {
                let base = Record::for_call(call, &real);
                if real.disposition == Disposition::Deny {
                    return self.denied_by_policy(call, &real, base);
                }
                return self.write_planned(call, &real, planned, mode, on_pending, base, now);
            }
        }
        self.write_planned(call, decision, planned, mode, on_pending, base, now)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the steps of one call, split where a patch is decided again"
    )]
    pub(crate) fn write_planned(
        &self,
        call: &ToolCall,
        decision: &Decision,
        planned: Result<Planned, FsError>,
        mode: &Mode,
        on_pending: &dyn Fn(&Approval),
        base: Record,
        now: u64,
    ) -> Envelope {
        let path = call_path(call);
        let method = method_of(&call.tool);
        let handling = self.handling(mode, decision);
        let asks = decision.disposition == Disposition::Ask;
        if asks && handling == Handling::Refuse {
            return self.refused_by_fallback(
                call,
                decision,
                path,
                method,
                base.event("write_file_propose"),
            );
        }
        let by_fallback = asks && handling == Handling::Allow;
        let asks = asks && !by_fallback;
        let mut agent = None;
        let mut code_run = false;
        let (plan, preface) = match planned {
            Ok(Planned::Plan(plan)) => (plan, String::new()),
            Ok(Planned::Command(plan, preface)) => (plan, preface),
            Ok(Planned::Code(plan, preface)) => {
                code_run = true;
                (plan, preface)
            }
            Ok(Planned::Agent(agent_plan, preface)) => {
                let plan = agent_plan.change.clone();
                agent = Some(agent_plan);
                (plan, preface)
            }
            Ok(Planned::DryRun(plan)) => return self.dry_run(call, decision, &plan, base),
            Err(FsError::InvalidInput { message }) => {
                return self.invalid(call, path, &message, base);
            }
            Err(error) => {
                return self.propose_failed(
                    &call.tool,
                    decision,
                    base,
                    path,
                    error.code(),
                    &error.to_string(),
                );
            }
        };

        let stored = match agent {
            Some(agent) => Some(Plan::Agent(agent)),
            None if code_run => Some(Plan::Code(plan.clone())),
            None => BuiltinTool::from_name(&call.tool)
                .and_then(|tool| Plan::of_builtin(tool, plan.clone())),
        };
        let Some(stored) = stored else {
            return self.invalid(
                call,
                path,
                &format!("{} is not a write tool", call.tool),
                base,
            );
        };
        let new = self.new_approval(
            call,
            decision,
            Shown {
                path: plan.primary_path().map(str::to_owned),
                summary: plan.summary.clone(),
                diff: format!("{preface}{}", plan.diff),
                plan: stored,
            },
            now,
            self.ttl_seconds(asks, handling, decision),
            (asks && handling == Handling::Wait).then(|| self.store.me()),
        );
        // Writes the policy allows are recorded too (so they can be undone), but
        // never count against the pending limits.
        let limits = if asks {
            self.pending_limits()
        } else {
            Limits {
                max_pending: u64::MAX,
                max_pending_per_session: u64::MAX,
            }
        };
        let (approval, proposed) = match self.store.create_approval(&new, limits) {
            Ok(created) => {
                let (approval, deduplicated) = match created {
                    Created::New(approval) => (approval, false),
                    Created::Existing(approval) => (approval, true),
                };
                // A duplicate shows the plan that was stored, not a new one.
                let Some(plan) = approval.plan.change().cloned() else {
                    return self.error_envelope(
                        call,
                        path,
                        &BrokerError::Corrupt {
                            id: approval.id.clone(),
                            message: "the stored plan is not a change to files".to_owned(),
                        },
                    );
                };
                let mut record = base
                    .event("write_file_propose")
                    .text("hitl_id", &approval.id)
                    .text("status", if asks { "hitl_required" } else { "allowed" })
                    .flag("created", plan.creates_only())
                    .value("base_hash", plan.single_base_hash().map(Value::String))
                    .value("changed_paths", Some(json!(plan.changed_paths())))
                    .text("patch_hash", &plan.patch_hash);
                if deduplicated {
                    record = record.flag("deduplicated", true);
                }
                let audit = match self.append_record(record, airlock_audit::Durability::Now) {
                    Ok(audit) => audit,
                    Err(error) => {
                        // No approval is left pending that the log does not
                        // show.
                        if !deduplicated {
                            self.cancel_unaudited(&approval.id);
                        }
                        return audit_unwritable(method, &call.tool, path, &error);
                    }
                };
                (approval, (plan, audit))
            }
            Err(error) => {
                let error = BrokerError::from(error);
                return self.propose_failed(
                    &call.tool,
                    decision,
                    base,
                    path,
                    error.code(),
                    &error.to_string(),
                );
            }
        };
        let (plan, propose_audit) = proposed;

        if !asks {
            // Allowed by policy, a grant, or a disabled gate: decide and apply now.
            let (by, grant) =
                match decision
                    .justification
                    .iter()
                    .find_map(|step| match &step.reason {
                        Reason::Grant { id } => Some(id.to_string()),
                        _ => None,
                    }) {
                    Some(grant) => (DecidedBy::Grant, Some(grant)),
                    None => (DecidedBy::Policy, None),
                };
            if let Some(grant) = &grant {
                let used = self.append_record(
                    Record::for_call(call, decision)
                        .event("grant_used")
                        .text("grant_id", grant)
                        .text("hitl_id", &approval.id),
                    airlock_audit::Durability::Now,
                );
                if let Err(error) = used {
                    self.cancel_unaudited(&approval.id);
                    return audit_unwritable(method, &call.tool, path, &error);
                }
            }
            let verdict = Verdict {
                approve: true,
                by,
                user: None,
                channel: None,
                reason: by_fallback.then(|| FALLBACK_ALLOW.to_owned()),
                at_ms: self.now_ms(),
                edited: None,
            };
            if let Err(error) = self.store.decide(&approval.id, &verdict) {
                return self.store_failure(call, path, error);
            }
            return self.settle(&approval.id);
        }

        match handling {
            Handling::Defer | Handling::Rounds | Handling::Refuse | Handling::Allow => {
                let mut envelope = self.hitl_required(&approval, &plan, decision);
                envelope.audit = Some(propose_audit);
                envelope
            }
            Handling::ApproveNow { user, reason } => {
                self.approve_now(call, path, method, &approval, user, reason)
            }
            Handling::Wait => {
                on_pending(&approval);
                self.wait(&approval.id)
            }
        }
    }

    /// `--yes`: the person at this terminal approves the new approval now. If
    /// they cannot (a reason is required, say), nothing is left pending and the
    /// failure is on record.
    pub(crate) fn approve_now(
        &self,
        call: &ToolCall,
        path: Option<&str>,
        method: &str,
        approval: &Approval,
        user: &str,
        reason: Option<&str>,
    ) -> Envelope {
        let request = DecideRequest {
            approve: true,
            reason: reason.map(str::to_owned),
            always: None,
            authority: crate::decide::Authority::Terminal,
            user: user.to_owned(),
            channel: Channel::Terminal,
            content: None,
        };
        match self.decide(&approval.id, &request) {
            Ok(envelope) => envelope,
            Err(error) => {
                self.cancel(&approval.id);
                let envelope = Envelope::failure(
                    Status::Error,
                    method,
                    &call.tool,
                    path,
                    error.code(),
                    error.to_string(),
                );
                self.audited(
                    envelope,
                    Record::for_approval(approval)
                        .event("tool_call")
                        .text("status", "error")
                        .text("code", error.code().as_str()),
                )
            }
        }
    }

    /// A write that could not be proposed: denied for sandbox refusals, an error
    /// otherwise; audited as a failed `write_file_propose`.
    pub(crate) fn propose_failed(
        &self,
        tool: &str,
        decision: &Decision,
        base: Record,
        path: Option<&str>,
        code: ErrorCode,
        message: &str,
    ) -> Envelope {
        let envelope = Envelope::failure(
            failure_status(code),
            method_of(tool),
            tool,
            path,
            code,
            message,
        )
        .with_reason(ErrorReason::of_tool_refusal(
            code,
            message,
            Some(decision.risk),
        ));
        self.audited(
            envelope,
            base.event("write_file_propose")
                .text("status", "error")
                .text("code", code.as_str()),
        )
    }

    pub(crate) fn store_failure(
        &self,
        call: &ToolCall,
        path: Option<&str>,
        error: StoreError,
    ) -> Envelope {
        self.error_envelope(call, path, &BrokerError::from(error))
    }

    pub(crate) fn error_envelope(
        &self,
        call: &ToolCall,
        path: Option<&str>,
        error: &BrokerError,
    ) -> Envelope {
        Envelope::failure(
            Status::Error,
            method_of(&call.tool),
            &call.tool,
            path,
            error.code(),
            error.to_string(),
        )
    }

    pub(crate) fn hitl_required(
        &self,
        approval: &Approval,
        plan: &ChangePlan,
        decision: &Decision,
    ) -> Envelope {
        let mut envelope = Envelope::new(
            Status::HitlRequired,
            crate::envelopes::approval_method(&approval.plan),
            &approval.tool,
            approval.path.as_deref(),
        );
        let ttl = approval
            .expires_ms
            .saturating_sub(self.now_ms())
            .div_ceil(1000);
        envelope.hitl = Some(HitlInfo {
            hitl_id: approval.id.clone(),
            ttl_seconds: Some(ttl),
            risk: Some(decision.risk),
            summary: Some(plan.summary.clone()),
            diff_preview: Some(plan.diff_preview(self.config.file_broker.diff_preview_max_chars)),
        });
        envelope.data = Some(json!({
            "path": plan.primary_path(),
            "changed_paths": plan.changed_paths(),
            "created": plan.creates_only(),
            "base_hash": plan.single_base_hash(),
            "patch_hash": plan.patch_hash,
            "patch_format": "unified_diff",
        }));
        envelope
    }
}
