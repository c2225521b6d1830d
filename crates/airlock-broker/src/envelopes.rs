//! The envelopes and record fields the lifecycle steps share.

use airlock_core::envelope::{DecidedBy, DecisionInfo, Envelope, ErrorReason, HitlInfo, Status};
use airlock_core::policy::Reason;
use airlock_core::{Decision, Disposition, ErrorCode, ToolCall};
use airlock_store::{Approval, ApprovalStatus};
use serde_json::Value;

use crate::decide::DecideRequest;
use crate::error::BrokerError;

/// The reason stored with a call `elicitation_fallback: allow` let through.
pub(crate) const FALLBACK_ALLOW: &str = "elicitation_fallback: allow";

/// The path a call names, for the envelope's `op.path`: `path`, or a move's
/// `from`.
pub(crate) fn call_path(call: &ToolCall) -> Option<&str> {
    call.args
        .get("path")
        .or_else(|| call.args.get("from"))
        .and_then(Value::as_str)
}

pub(crate) fn to_value<T: serde::Serialize>(data: T) -> Value {
    serde_json::to_value(data).unwrap_or(Value::Null)
}

/// The result when the audit log cannot be written (`error`): nothing goes
/// unaudited. A shared store that is away says so, and can be tried again.
pub(crate) fn audit_unwritable(
    method: &str,
    tool: &str,
    path: Option<&str>,
    error: &airlock_audit::AuditError,
) -> Envelope {
    let (code, message) = match error {
        airlock_audit::AuditError::Database(_) => (
            ErrorCode::StoreUnavailable,
            "the shared store cannot be reached now, so the call could not be audited and was not made; try again",
        ),
        _ => (ErrorCode::IoError, "the audit log could not be written"),
    };
    Envelope::failure(Status::Error, method, tool, path, code, message)
}

/// Sandbox refusals and capability limits are denials (exit 4), like the
/// policy's; other failures are tool errors.
pub(crate) fn failure_status(code: ErrorCode) -> Status {
    match code {
        ErrorCode::PathForbidden
        | ErrorCode::PathDenied
        | ErrorCode::CreateNotAllowed
        | ErrorCode::RootNotAllowed
        | ErrorCode::LimitExceeded => Status::Denied,
        _ => Status::Error,
    }
}

/// A denial's reason from the policy's decision (its profile and risk).
pub(crate) fn reason_of(layer: &str, rule: &str, decision: &Decision) -> ErrorReason {
    ErrorReason {
        profile: decision.profile.as_deref().map(str::to_owned),
        ..ErrorReason::new(layer, rule, Some(decision.risk))
    }
}

/// Who decided an approval, as the envelope says it (`policy` until
/// someone did).
pub(crate) fn decision_info(approval: &Approval) -> DecisionInfo {
    approval.decision.as_ref().map_or(
        DecisionInfo {
            by: DecidedBy::Policy,
            user: None,
            channel: None,
            reason: None,
        },
        DecisionInfo::from,
    )
}

/// The envelope of a settled approval whose decider died before storing one.
pub(crate) fn settled_from_row(approval: &Approval) -> Envelope {
    let (status, code, message) = match approval.status {
        ApprovalStatus::Denied => (Status::Denied, ErrorCode::PolicyDenied, "denied"),
        ApprovalStatus::Expired => (
            Status::Denied,
            ErrorCode::Expired,
            "no decision before the timeout: denied",
        ),
        ApprovalStatus::Cancelled => (Status::Denied, ErrorCode::PolicyDenied, "cancelled"),
        ApprovalStatus::Failed => (Status::Error, ErrorCode::IoError, "the apply failed"),
        ApprovalStatus::Applied => (
            Status::Error,
            ErrorCode::IoError,
            "applied, but its result was not stored",
        ),
        ApprovalStatus::Pending | ApprovalStatus::Approved | ApprovalStatus::Applying => {
            (Status::Error, ErrorCode::IoError, "not settled")
        }
    };
    let reason = match approval.status {
        ApprovalStatus::Denied => Some(("human", "human")),
        ApprovalStatus::Expired => Some(("timeout", "timeout")),
        ApprovalStatus::Cancelled => Some(("hitl", "cancelled")),
        _ => None,
    }
    .map(|(layer, rule)| ErrorReason::new(layer, rule, Some(approval.risk)));
    let mut envelope = Envelope::failure(
        status,
        apply_method(&approval.plan),
        &approval.tool,
        approval.path.as_deref(),
        code,
        message,
    )
    .with_reason(reason);
    envelope.hitl = Some(hitl_ref(approval));
    envelope.decision = Some(decision_info(approval));
    envelope
}

pub(crate) fn failure_for(id: &str, error: &BrokerError) -> Envelope {
    let mut envelope = Envelope::failure(
        Status::Error,
        "fs.apply_patch",
        "write_file",
        None,
        error.code(),
        error.to_string(),
    );
    envelope.hitl = Some(HitlInfo {
        hitl_id: id.to_owned(),
        ttl_seconds: None,
        risk: None,
        summary: None,
        diff_preview: None,
    });
    envelope
}

pub(crate) fn hitl_ref(approval: &Approval) -> HitlInfo {
    HitlInfo {
        hitl_id: approval.id.clone(),
        ttl_seconds: None,
        risk: Some(approval.risk),
        summary: Some(approval.summary.clone()),
        diff_preview: None,
    }
}

pub(crate) fn human(request: &DecideRequest, reason: Option<&str>) -> DecisionInfo {
    DecisionInfo {
        by: DecidedBy::Human,
        user: Some(request.user.clone()),
        channel: Some(request.channel),
        reason: reason.map(str::to_owned),
    }
}

pub(crate) fn decided_by_policy_or_grant(decision: &Decision) -> &'static str {
    if decision
        .justification
        .iter()
        .any(|step| matches!(step.reason, Reason::Grant { .. }))
    {
        "grant"
    } else {
        "policy"
    }
}

pub(crate) fn first_denial(decision: &Decision) -> String {
    decision
        .justification
        .iter()
        .find(|step| step.effect == Some(Disposition::Deny))
        .map_or_else(|| "denied by policy".to_owned(), ToString::to_string)
}

/// spec 000's method names for the envelope's `op.method`.
/// The envelope method of what an approval proposes: `exec.run` for a
/// command's changes, `fs.propose_patch` for the rest.
pub(crate) fn approval_method(plan: &airlock_core::plan::Plan) -> &'static str {
    match plan {
        airlock_core::plan::Plan::Exec(_) => "exec.run",
        airlock_core::plan::Plan::Agent(_) => "agent.tool",
        airlock_core::plan::Plan::Code(_) => "codemode.propose",
        _ => "fs.propose_patch",
    }
}

/// The envelope method of applying an approval: `exec.run` for a command's
/// changes, `fs.apply_patch` for the rest.
pub(crate) fn apply_method(plan: &airlock_core::plan::Plan) -> &'static str {
    match plan {
        airlock_core::plan::Plan::Exec(_) => "exec.run",
        airlock_core::plan::Plan::Agent(_) => "agent.tool",
        airlock_core::plan::Plan::Code(_) => "codemode.apply",
        _ => "fs.apply_patch",
    }
}

pub(crate) fn method_of(tool: &str) -> &'static str {
    airlock_core::tools::BuiltinTool::from_name(tool).map_or("tool.call", |tool| tool.method())
}

/// Identical calls share a key: tool, session, who makes it (another
/// principal's identical call is its own approval, never a view of this
/// one), canonical arguments.
pub(crate) fn dedup_key(call: &ToolCall) -> String {
    let args = airlock_core::canonical::to_canonical_string(&call.args);
    // The context id too: a call made for another context is its own approval,
    // recorded with its own id.
    let mut text = format!(
        "{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}",
        call.tool,
        call.session.as_deref().unwrap_or(""),
        call.principal.owner_key(),
        call.context_id.as_deref().unwrap_or(""),
        args
    );
    // A script's call is its run's own: another run making the same call
    // does not join its approval (which shows the first run's context).
    if let Some(via) = &call.via {
        text.push_str(&format!("\u{0}run:{}", via.run_id));
    }
    airlock_core::canonical::sha256_hex(text.as_bytes())
}
