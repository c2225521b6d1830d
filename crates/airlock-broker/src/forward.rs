//! Upstream MCP tool calls through the pipeline (DESIGN §2: "upstream MCP tools
//! prepare a parameter summary and commit by forwarding the call").
//!
//! A call the policy allows is forwarded at once. One that asks becomes an
//! approval whose plan is the call itself; only the process that holds the
//! upstream connection (the approval's `waiter_pid`) can carry it out, so a
//! decision taken elsewhere (`airlock approve`) is applied by that process, and
//! if it is gone the approval fails instead of waiting forever.

use airlock_core::envelope::{DecidedBy, DecisionInfo, Envelope, HitlInfo, Status};
use airlock_core::{
    Decision, Disposition, ErrorCode, Plan, ToolCall, ToolOrigin, UpstreamCall, UpstreamRequest,
};
use airlock_store::{Approval, ApprovalStatus, Created};
use serde_json::{Value, json};

use crate::broker::Broker;
use crate::envelopes::{FALLBACK_ALLOW, audit_unwritable, decided_by_policy_or_grant, hitl_ref};
use crate::propose::Shown;
use crate::record::Record;
use crate::submit::{Handling, Mode};

/// The envelope's `op.method` for upstream tool calls.
const METHOD: &str = "mcp.call";
/// The envelope's `op.method` for the reading of an upstream's resource.
const READ_METHOD: &str = "mcp.read_resource";
/// The envelope's `op.method` for an upstream's sampling request.
const SAMPLE_METHOD: &str = "mcp.sample";

/// The envelope's `op.method` for `forward`.
fn method_of(forward: &UpstreamCall) -> &'static str {
    match forward.request {
        UpstreamRequest::ToolCall => METHOD,
        UpstreamRequest::ReadResource => READ_METHOD,
        UpstreamRequest::Sample => SAMPLE_METHOD,
    }
}

/// Carries a call to an upstream MCP server and returns its `CallToolResult`
/// (as JSON), or why it could not.
pub trait Forwarder: Send + Sync {
    fn forward(&self, call: &UpstreamCall) -> Result<Value, ForwardError>;
}

/// Why an upstream call was not carried out (an upstream's own tool error
/// is a result with `isError`, not this).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    #[error("no upstream named {0}")]
    NoSuchUpstream(String),
    #[error("upstream {0} is not running")]
    NotRunning(String),
    #[error("this process has no connection to the upstream")]
    NotConnected,
    #[error("upstream {upstream} did not answer within {seconds} s")]
    TimedOut { upstream: String, seconds: u64 },
    #[error(
        "the process forwarding this call ended before it finished; whether the upstream ran it is unknown"
    )]
    Interrupted,
    /// The connection went away (or could not be made) while the call was
    /// sent or awaited.
    #[error("upstream {upstream} is unreachable: {message}")]
    Lost { upstream: String, message: String },
    /// The protocol failed; the transport's own words.
    #[error("upstream {upstream}: {message}")]
    Failed { upstream: String, message: String },
    /// The server answered with a JSON-RPC error of its own, which the
    /// client gets as it was.
    #[error("upstream {upstream} refused: {message}")]
    Refused {
        upstream: String,
        code: i32,
        message: String,
        data: Option<Value>,
    },
}

impl ForwardError {
    /// The envelope's code: the server could not be reached
    /// (`upstream_unavailable`), or it failed or refused (`upstream_error`).
    pub fn code(&self) -> ErrorCode {
        match self {
            ForwardError::NoSuchUpstream(_)
            | ForwardError::NotRunning(_)
            | ForwardError::NotConnected
            | ForwardError::TimedOut { .. }
            | ForwardError::Lost { .. } => ErrorCode::UpstreamUnavailable,
            ForwardError::Interrupted
            | ForwardError::Failed { .. }
            | ForwardError::Refused { .. } => ErrorCode::UpstreamError,
        }
    }
}

/// An upstream call the policy lets through at once, decided and not yet
/// forwarded: a face that can await the server forwards `call` itself and
/// hands the outcome to [`Broker::forwarded_now`], which records it as
/// `submit` would have.
pub struct ForwardNow {
    /// What to send.
    pub call: UpstreamCall,
    method: &'static str,
    tool: String,
    path: Option<String>,
    decision: DecisionInfo,
    by: &'static str,
    reason: Option<String>,
    record: Record,
    /// When it was handed to the face that forwards it (for the upstream
    /// latency metric and the call's trace).
    started: std::time::Instant,
    started_at: std::time::SystemTime,
}

impl ForwardNow {
    fn new(
        call: &ToolCall,
        decision: &Decision,
        forward: UpstreamCall,
        method: &'static str,
        by_fallback: bool,
        base: Record,
    ) -> ForwardNow {
        let by = if by_fallback {
            "policy"
        } else {
            decided_by_policy_or_grant(decision)
        };
        let reason = by_fallback.then(|| FALLBACK_ALLOW.to_owned());
        ForwardNow {
            started: std::time::Instant::now(),
            started_at: std::time::SystemTime::now(),
            call: forward,
            method,
            tool: call.tool.clone(),
            path: call
                .args
                .get("path")
                .and_then(Value::as_str)
                .map(str::to_owned),
            decision: DecisionInfo {
                by: if by == "grant" {
                    DecidedBy::Grant
                } else {
                    DecidedBy::Policy
                },
                user: None,
                channel: None,
                reason: reason.clone(),
            },
            by,
            reason,
            record: base.event("tool_call"),
        }
    }
}

impl Broker {
    /// The upstream tool call `call` as something to forward at once, where
    /// the policy lets it through without a human (as `submit` would
    /// decide it); `None` for anything else, which `submit` then handles.
    pub fn forward_now(&self, call: &ToolCall, mode: &Mode) -> Option<ForwardNow> {
        let ToolOrigin::Upstream { upstream, .. } = &call.origin else {
            return None;
        };
        let decision = self.decide_only(call);
        let asks = match decision.disposition {
            Disposition::Deny => return None,
            Disposition::Ask => true,
            Disposition::Allow => false,
        };
        let by_fallback = asks && self.handling(mode, &decision) == Handling::Allow;
        if asks && !by_fallback {
            return None;
        }
        let tool = call
            .tool
            .strip_prefix(&**upstream)
            .and_then(|rest| rest.strip_prefix("__"))
            .unwrap_or(&call.tool);
        let forward = UpstreamCall::tool(upstream, tool, call.args.clone());
        let base = Record::for_call(call, &decision);
        Some(ForwardNow::new(
            call,
            &decision,
            forward,
            METHOD,
            by_fallback,
            base,
        ))
    }

    /// Records what came of a [`ForwardNow`]: the envelope `submit` would
    /// have returned, audited.
    pub fn forwarded_now(&self, now: ForwardNow, result: Result<Value, ForwardError>) -> Envelope {
        crate::metrics::observe_upstream(&now.call.upstream, now.started.elapsed().as_secs_f64());
        // Forwarded by a face outside `submit`: the call's own trace;
        // inside `submit`, a step of its trace.
        let _own_trace = crate::telemetry::current_trace().is_none().then(|| {
            let trace = crate::telemetry::CallTrace::start_at(now.started_at);
            trace.attribute("airlock.tool", now.tool.clone());
            trace
        });
        crate::telemetry::child_since(
            "upstream",
            now.started_at,
            vec![("airlock.upstream", now.call.upstream.clone())],
        );
        let (mut envelope, record) = forwarded(
            now.method,
            &now.tool,
            now.path.as_deref(),
            result,
            now.record,
        );
        envelope.decision = Some(now.decision);
        self.observed(
            envelope,
            record
                .text("decision", "allow")
                .text("decided_by", now.by)
                .value("reason", now.reason.map(Value::String)),
        )
    }

    /// Whether this process may carry out `approval` once approved: any process
    /// can apply file changes; an upstream call only its holder can, on the
    /// thread that waits on it if one does.
    pub(crate) fn can_apply(&self, approval: &Approval) -> bool {
        !approval.plan.is_upstream()
            || (self.forwarder.is_some()
                && approval.waiter_pid == Some(self.store.me())
                // The thread waiting on it carries it out, for its client.
                && !crate::wait::waited_elsewhere(&approval.id))
    }

    /// Carries out the approved upstream calls this process holds (a decision
    /// taken in another process, on a call that returned `hitl_required`).
    /// Returns how many were settled.
    pub fn apply_held_forwards(&self) -> usize {
        let held = self.store.approved_held_by(self.store.me());
        let held = self
            .logged("listing the upstream calls this process holds", held)
            .unwrap_or_default();
        let mut settled = 0;
        for approval in held.iter().filter(|approval| approval.plan.is_upstream()) {
            self.settle(&approval.id);
            settled += 1;
        }
        settled
    }

    /// An upstream tool call through the pipeline.
    pub(crate) fn upstream_call(
        &self,
        call: &ToolCall,
        decision: &Decision,
        mode: &Mode,
        on_pending: &dyn Fn(&Approval),
        base: Record,
        now: u64,
    ) -> Envelope {
        let path = call.args.get("path").and_then(Value::as_str);
        let forward = match &call.origin {
            ToolOrigin::Upstream { upstream, .. } => {
                let tool = call
                    .tool
                    .strip_prefix(&**upstream)
                    .and_then(|rest| rest.strip_prefix("__"))
                    .unwrap_or(&call.tool);
                UpstreamCall::tool(upstream, tool, call.args.clone())
            }
            ToolOrigin::Resource { upstream } => {
                let uri = airlock_core::call::resource_name(&call.tool).map_or("", |(_, uri)| uri);
                UpstreamCall {
                    upstream: upstream.to_string(),
                    tool: uri.to_owned(),
                    args: json!({"uri": uri}),
                    request: UpstreamRequest::ReadResource,
                }
            }
            ToolOrigin::Sampling { upstream } => UpstreamCall {
                upstream: upstream.to_string(),
                tool: "sampling/createMessage".to_owned(),
                args: call.args.clone(),
                request: UpstreamRequest::Sample,
            },
            _ => {
                return Envelope::failure(
                    Status::Error,
                    METHOD,
                    &call.tool,
                    path,
                    ErrorCode::UnknownTool,
                    format!("{} is not an upstream tool", call.tool),
                );
            }
        };
        let method = method_of(&forward);
        let upstream = forward.upstream.clone();
        let tool = forward.tool.clone();
        let handling = self.handling(mode, decision);
        let asks = decision.disposition == Disposition::Ask;
        if asks && handling == Handling::Refuse {
            return self.refused_by_fallback(call, decision, path, method, base.event("tool_call"));
        }
        let by_fallback = asks && handling == Handling::Allow;
        if !asks || by_fallback {
            let now = ForwardNow::new(call, decision, forward, method, by_fallback, base);
            let result = self.run_forward(&now.call);
            return self.forwarded_now(now, result);
        }

        let redacted = airlock_core::redact::redact_params(&call.args);
        let new = self.new_approval(
            call,
            decision,
            Shown {
                path: path.map(str::to_owned),
                summary: match forward.request {
                    UpstreamRequest::ToolCall => format!("CALL {}", call.tool),
                    UpstreamRequest::ReadResource => format!("READ {tool} from {upstream}"),
                    UpstreamRequest::Sample => {
                        format!("SAMPLE for {upstream}: {}", first_message(&call.args))
                    }
                },
                diff: serde_json::to_string_pretty(&redacted).unwrap_or_default(),
                plan: Plan::Upstream(forward),
            },
            now,
            self.ttl_seconds(true, handling, decision),
            // Only this process can forward it: it holds the approval, and if
            // it goes away the approval is cancelled.
            Some(self.store.me()),
        );
        let limits = self.pending_limits();
        let (approval, deduplicated) = match self.store.create_approval(&new, limits) {
            Ok(Created::New(approval)) => (approval, false),
            Ok(Created::Existing(approval)) => (approval, true),
            Err(error) => {
                let error = crate::BrokerError::from(error);
                let envelope = Envelope::failure(
                    Status::Error,
                    method,
                    &call.tool,
                    path,
                    error.code(),
                    error.to_string(),
                );
                return self.audited(
                    envelope,
                    base.event("tool_call_propose")
                        .text("status", "error")
                        .text("code", error.code().as_str()),
                );
            }
        };
        let mut record = base
            .event("tool_call_propose")
            .text("hitl_id", &approval.id)
            .text("status", "hitl_required");
        if deduplicated {
            record = record.flag("deduplicated", true);
        }
        let propose_audit = match self.append_record(record, airlock_audit::Durability::Now) {
            Ok(audit) => audit,
            Err(error) => {
                // No approval is left pending that the log does not show;
                // one that an identical call made earlier stays its caller's.
                if !deduplicated {
                    self.cancel_unaudited(&approval.id);
                }
                return audit_unwritable(method, &call.tool, path, &error);
            }
        };
        match handling {
            Handling::Wait => {
                on_pending(&approval);
                self.wait(&approval.id)
            }
            Handling::ApproveNow { user, reason } => {
                self.approve_now(call, path, method, &approval, user, reason)
            }
            Handling::Defer | Handling::Rounds | Handling::Refuse | Handling::Allow => {
                let mut envelope = Envelope::new(Status::HitlRequired, method, &call.tool, path);
                let ttl = approval
                    .expires_ms
                    .saturating_sub(self.now_ms())
                    .div_ceil(1000);
                let max = self.config.file_broker.diff_preview_max_chars;
                envelope.hitl = Some(HitlInfo {
                    hitl_id: approval.id.clone(),
                    ttl_seconds: Some(ttl),
                    risk: Some(decision.risk),
                    summary: Some(approval.summary.clone()),
                    diff_preview: Some(airlock_fs::preview(&approval.diff, max)),
                });
                envelope.data = Some(json!({
                    "upstream": upstream,
                    "tool": tool,
                    "params": redacted,
                }));
                envelope.audit = Some(propose_audit);
                envelope
            }
        }
    }

    fn run_forward(&self, forward: &UpstreamCall) -> Result<Value, ForwardError> {
        match &self.forwarder {
            Some(forwarder) => forwarder.forward(forward),
            None => Err(ForwardError::NotConnected),
        }
    }

    /// Forwards a claimed, approved upstream call and settles its approval.
    pub(crate) fn commit_forward(
        &self,
        approval: &Approval,
        call: &UpstreamCall,
        decision: DecisionInfo,
        recovering: bool,
    ) -> Envelope {
        let path = approval.path.as_deref();
        let record = Record::for_approval(approval)
            .event("tool_call_apply")
            .text("decided_by", decision.by.as_str())
            .value("user", decision.user.clone().map(Value::String))
            .value(
                "channel",
                decision
                    .channel
                    .map(|channel| Value::from(channel.as_str())),
            );
        let result = if recovering {
            // A process died while forwarding: whether the upstream ran the
            // call is unknown, and it is never sent twice.
            Err(ForwardError::Interrupted)
        } else {
            // Timed here; a call forwarded at once is timed in
            // `forwarded_now`.
            let started = std::time::Instant::now();
            let mut span = crate::telemetry::child("upstream");
            span.attribute("airlock.upstream", call.upstream.clone());
            let result = self.run_forward(call);
            drop(span);
            crate::metrics::observe_upstream(&call.upstream, started.elapsed().as_secs_f64());
            result
        };
        let (mut envelope, record) =
            forwarded(method_of(call), &approval.tool, path, result, record);
        let status = if envelope.status == Status::Allowed {
            ApprovalStatus::Applied
        } else {
            ApprovalStatus::Failed
        };
        envelope.hitl = Some(hitl_ref(approval));
        envelope.decision = Some(decision);
        let envelope = self.audited(
            envelope,
            record.text(
                "decision",
                if status == ApprovalStatus::Applied {
                    "approve"
                } else {
                    "error"
                },
            ),
        );
        self.store_result(&approval.id, status, &envelope);
        envelope
    }

    /// Fails an approved upstream call whose holder is gone. `None` when
    /// another process claimed it first.
    pub(crate) fn abandon_forward(&self, approval: &Approval) -> Option<Envelope> {
        let claimed = self.store.claim_apply(&approval.id);
        let claimed = self
            .logged(format_args!("claiming {}", approval.id), claimed)
            .flatten()?;
        let decision = crate::envelopes::decision_info(&claimed);
        let path = claimed.path.as_deref();
        let mut envelope = Envelope::failure(
            Status::Error,
            claimed.plan.upstream().map_or(METHOD, method_of),
            &claimed.tool,
            path,
            ErrorCode::UpstreamError,
            "the airlock process holding the upstream connection ended before \
             the approved call was forwarded; it was not sent",
        );
        envelope.hitl = Some(hitl_ref(&claimed));
        envelope.decision = Some(decision);
        let envelope = self.audited(
            envelope,
            Record::for_approval(&claimed)
                .event("tool_call_apply")
                .text("status", "error")
                .text("code", ErrorCode::UpstreamError.as_str()),
        );
        self.store_result(&claimed.id, ApprovalStatus::Failed, &envelope);
        Some(envelope)
    }
}

/// The envelope and audit record of a forwarded call's outcome. An upstream
/// result with `isError` is a tool error (`upstream_error`), and so is a call
/// that could not be carried.
fn forwarded(
    method: &str,
    tool: &str,
    path: Option<&str>,
    result: Result<Value, ForwardError>,
    record: Record,
) -> (Envelope, Record) {
    match result {
        Ok(result) => {
            let is_error = result
                .get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let hash = airlock_core::canonical::sha256_hex(
                airlock_core::canonical::to_canonical_string(&result).as_bytes(),
            );
            let record = record.value("result_hash", Some(Value::String(hash)));
            if is_error {
                let mut envelope = Envelope::failure(
                    Status::Error,
                    method,
                    tool,
                    path,
                    ErrorCode::UpstreamError,
                    format!(
                        "the upstream tool reported an error: {}",
                        first_text(&result)
                    ),
                );
                envelope.data = Some(result);
                let record = record
                    .text("status", "error")
                    .text("code", ErrorCode::UpstreamError.as_str());
                (envelope, record)
            } else {
                let mut envelope = Envelope::new(Status::Allowed, method, tool, path);
                envelope.data = Some(result);
                (envelope, record.text("status", "allowed"))
            }
        }
        Err(error) => {
            let code = error.code();
            let mut envelope =
                Envelope::failure(Status::Error, method, tool, path, code, error.to_string());
            // The server's own JSON-RPC error, for the face to pass on.
            if let ForwardError::Refused {
                code,
                message,
                data,
                ..
            } = &error
            {
                envelope.data = Some(json!({
                    "jsonrpc_error": {"code": code, "message": message, "data": data},
                }));
            }
            let record = record.text("status", "error").text("code", code.as_str());
            (envelope, record)
        }
    }
}

/// The first text content of a `CallToolResult`, cut to 500 characters.
fn first_text(result: &Value) -> String {
    let text = result
        .get("content")
        .and_then(Value::as_array)
        .and_then(|content| {
            content
                .iter()
                .find_map(|block| block.get("text").and_then(Value::as_str))
        })
        .unwrap_or("(no message)");
    text.chars().take(500).collect()
}

/// The first text message of a sampling request, cut to 80 characters.
fn first_message(params: &Value) -> String {
    let text = params
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|messages| {
            messages.iter().find_map(|message| {
                let content = message.get("content")?;
                content.get("text").and_then(Value::as_str).or_else(|| {
                    content
                        .as_array()?
                        .iter()
                        .find_map(|block| block.get("text").and_then(Value::as_str))
                })
            })
        })
        .unwrap_or("(no text)");
    text.chars().take(80).collect()
}
