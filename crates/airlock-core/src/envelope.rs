//! The response envelope every tool result is wrapped in (DESIGN §6, spec 000).
//!
//! It is a wire format: its JSON shape is covered by golden tests and changes only
//! with `schema_version`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error_code::ErrorCode;
use crate::risk::Risk;

/// The only schema version airlock writes.
pub const SCHEMA_VERSION: &str = "1.0";

/// One tool result, on every transport.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub schema_version: String,
    pub status: Status,
    pub op: Op,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hitl: Option<HitlInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<EnvelopeError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<DecisionInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditRef>,
}

/// What happened to the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Allowed,
    HitlRequired,
    Denied,
    Error,
}

impl Status {
    /// The exit code of `airlock call` (DESIGN §11).
    pub const fn exit_code(self) -> u8 {
        match self {
            Status::Allowed => 0,
            Status::HitlRequired => 3,
            Status::Denied => 4,
            Status::Error => 5,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Allowed => "allowed",
            Status::HitlRequired => "hitl_required",
            Status::Denied => "denied",
            Status::Error => "error",
        }
    }
}

/// The operation: spec 000's method (`fs.read`, `fs.propose_patch`,
/// `fs.apply_patch`, …), the path it concerns and the tool called.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub tool: String,
}

/// A pending approval, as the agent sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HitlInfo {
    pub hitl_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<Risk>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff_preview: Option<String>,
}

/// Why the call failed or was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeError {
    pub code: ErrorCode,
    pub message: String,
    /// On every denial: which part of airlock refused, and by what.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ErrorReason>,
}

/// A denial's machine-readable reason, so that a client can tell a policy
/// deny, a profile deny, a human's deny, a timeout and a limit apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReason {
    /// `sandbox`, `write_allowlist`, `profile`, `rule`, `default_risk`, `risk_policy`, `hitl`
    /// (the call needed a human and none could be asked), `human`, `timeout`
    /// or `limit`.
    pub layer: String,
    /// What exactly: the configuration key or list entry that refused
    /// (`file_broker.deny_path_globs: **/.env`, `profiles.safe.allowlist`,
    /// `security.hitl.rules[2]`, `file_broker.max_changed_files`), or for a
    /// person or a clock `human`, `timeout`.
    pub rule: String,
    /// The profile in force, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The call's risk, when it was assessed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<Risk>,
}

impl ErrorReason {
    pub fn new(layer: &str, rule: impl Into<String>, risk: Option<Risk>) -> ErrorReason {
        ErrorReason {
            layer: layer.to_owned(),
            rule: rule.into(),
            profile: None,
            risk,
        }
    }

    /// The reason of a refusal by the file tools themselves: a sandbox code, or
    /// a capability limit (whose message ends `(file_broker.<limit>)`).
    pub fn of_tool_refusal(
        code: ErrorCode,
        message: &str,
        risk: Option<Risk>,
    ) -> Option<ErrorReason> {
        match code {
            ErrorCode::PathForbidden | ErrorCode::PathDenied | ErrorCode::CreateNotAllowed => {
                Some(ErrorReason::new("sandbox", code.as_str(), risk))
            }
            ErrorCode::LimitExceeded => {
                let limit = message
                    .rsplit_once("(file_broker.")
                    .and_then(|(_, rest)| rest.strip_suffix(')'))
                    .map_or_else(
                        || "file_broker".to_owned(),
                        |name| format!("file_broker.{name}"),
                    );
                Some(ErrorReason::new("limit", limit, risk))
            }
            _ => None,
        }
    }
}

/// Who decided a call that needed deciding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionInfo {
    pub by: DecidedBy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<crate::approval::Channel>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl From<&crate::approval::Decided> for DecisionInfo {
    fn from(decided: &crate::approval::Decided) -> DecisionInfo {
        DecisionInfo {
            by: decided.by,
            user: decided.user.clone(),
            channel: decided.channel,
            reason: decided.reason.clone(),
        }
    }
}

/// The kinds of decider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecidedBy {
    Policy,
    Human,
    Grant,
    Timeout,
}

impl DecidedBy {
    pub const fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Policy => "policy",
            DecidedBy::Human => "human",
            DecidedBy::Grant => "grant",
            DecidedBy::Timeout => "timeout",
        }
    }
}

/// The audit record of the result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRef {
    pub prev_hash: String,
    pub event_hash: String,
}

impl Envelope {
    /// An envelope with only status and op set.
    pub fn new(status: Status, method: &str, tool: &str, path: Option<&str>) -> Envelope {
        Envelope {
            schema_version: SCHEMA_VERSION.to_owned(),
            status,
            op: Op {
                method: method.to_owned(),
                path: path.map(str::to_owned),
                tool: tool.to_owned(),
            },
            data: None,
            hitl: None,
            error: None,
            decision: None,
            audit: None,
        }
    }

    /// An `error` (or `denied`) envelope with a code and message.
    pub fn failure(
        status: Status,
        method: &str,
        tool: &str,
        path: Option<&str>,
        code: ErrorCode,
        message: impl Into<String>,
    ) -> Envelope {
        let mut envelope = Envelope::new(status, method, tool, path);
        envelope.error = Some(EnvelopeError {
            code,
            message: message.into(),
            reason: None,
        });
        envelope
    }

    /// This envelope with `reason` on its error (nothing without an error).
    pub fn with_reason(mut self, reason: Option<ErrorReason>) -> Envelope {
        if let Some(error) = &mut self.error {
            error.reason = reason;
        }
        self
    }
}
