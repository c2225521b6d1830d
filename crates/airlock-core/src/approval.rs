//! An approval's state as every crate reads it: the terms the policy set
//! ([`ApprovalTerms`]), the plan it applies ([`Plan`]), who decided it and
//! where ([`Decided`], [`Channel`]). Each has one serde form.
//!
//! What is stored as JSON carries a format version: [`Plan::to_stored`]
//! and [`ApprovalTerms::to_stored`] write `"format": STATE_FORMAT` beside
//! the value's own fields, and the `from_stored` readers take every format
//! up to this one (text without a `format` is what airlock wrote before
//! formats existed) and refuse a newer one, so a state dir written by a
//! newer airlock is never misread.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::ElicitationFallback;
use crate::envelope::DecidedBy;
use crate::error_code::ErrorCode;
use crate::plan::{ChangePlan, Plan, UpstreamCall};
use crate::policy::{Decision, Disposition};
use crate::risk::Risk;
use crate::tools::BuiltinTool;

/// The format of the JSON this build stores (plans, terms).
pub const STATE_FORMAT: u64 = 1;

/// Where a human's decision came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// The terminal (`airlock approve`, `watch`, `call --yes`).
    Terminal,
    /// The HTTP approval API and the web UI.
    Http,
    /// The MCP client's human, answering airlock's own question.
    Mcp,
    /// A signed one-time approve/deny link.
    Link,
    /// A Telegram chat (Bot API).
    Telegram,
    /// A Slack channel (Socket Mode).
    Slack,
    /// A Discord channel (Gateway).
    Discord,
}

impl Channel {
    pub const ALL: [Channel; 7] = [
        Channel::Terminal,
        Channel::Http,
        Channel::Mcp,
        Channel::Link,
        Channel::Telegram,
        Channel::Slack,
        Channel::Discord,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Channel::Terminal => "terminal",
            Channel::Http => "http",
            Channel::Mcp => "mcp",
            Channel::Link => "link",
            Channel::Telegram => "telegram",
            Channel::Slack => "slack",
            Channel::Discord => "discord",
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for Channel {
    type Err = StateError;

    fn from_str(text: &str) -> Result<Channel, StateError> {
        Channel::ALL
            .into_iter()
            .find(|channel| channel.as_str() == text)
            .ok_or_else(|| StateError::Unknown {
                what: "channel",
                value: text.to_owned(),
            })
    }
}

impl FromStr for DecidedBy {
    type Err = StateError;

    fn from_str(text: &str) -> Result<DecidedBy, StateError> {
        [
            DecidedBy::Policy,
            DecidedBy::Human,
            DecidedBy::Grant,
            DecidedBy::Timeout,
        ]
        .into_iter()
        .find(|by| by.as_str() == text)
        .ok_or_else(|| StateError::Unknown {
            what: "decider",
            value: text.to_owned(),
        })
    }
}

/// The decision taken on an approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    pub by: DecidedBy,
    /// The human who decided (for `human`).
    pub user: Option<String>,
    pub channel: Option<Channel>,
    pub reason: Option<String>,
    pub at_ms: u64,
    /// The approver approved an edited version of the proposal.
    pub edited: bool,
}

/// Stored state that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error(
        "stored {what} is in format {found}, newer than this airlock reads ({STATE_FORMAT}); use a newer airlock"
    )]
    Newer { what: &'static str, found: u64 },
    #[error("stored {what} is unreadable: {message}")]
    Unreadable { what: &'static str, message: String },
    #[error("unknown {what} `{value}`")]
    Unknown { what: &'static str, value: String },
}

/// What the policy's decision binds an approval to: its risk, how long a
/// human has, what a decision must carry and who may give it. The
/// `justification` is the policy's explanation, kept for people to read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalTerms {
    #[serde(rename = "decision", default = "ask")]
    pub disposition: Disposition,
    pub risk: Risk,
    /// Seconds a human has to decide.
    #[serde(rename = "timeout", default)]
    pub timeout_seconds: u64,
    /// Whether the approver may choose "always allow".
    #[serde(default)]
    pub allow_skip: bool,
    /// Whether a decision must carry a reason.
    #[serde(default)]
    pub require_reason: bool,
    /// Roles or users who may decide; empty means any approver.
    #[serde(default)]
    pub approvers: Vec<String>,
    #[serde(default)]
    pub write_class: bool,
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default = "deny")]
    pub elicitation_fallback: ElicitationFallback,
    #[serde(rename = "code", default)]
    pub deny_code: Option<ErrorCode>,
    #[serde(default)]
    pub justification: Value,
}

fn ask() -> Disposition {
    Disposition::Ask
}

fn deny() -> ElicitationFallback {
    ElicitationFallback::Deny
}

impl From<&Decision> for ApprovalTerms {
    fn from(decision: &Decision) -> ApprovalTerms {
        ApprovalTerms {
            disposition: decision.disposition,
            risk: decision.risk,
            timeout_seconds: decision.timeout_seconds,
            allow_skip: decision.allow_skip,
            require_reason: decision.require_reason,
            approvers: decision.approvers.to_vec(),
            write_class: decision.write_class,
            profile: decision.profile.as_deref().map(str::to_owned),
            elicitation_fallback: decision.elicitation_fallback,
            deny_code: decision.deny_code,
            justification: serde_json::to_value(&decision.justification).unwrap_or(Value::Null),
        }
    }
}

impl ApprovalTerms {
    /// The stored text: the terms with `format`.
    pub fn to_stored(&self) -> String {
        stored_text(self)
    }

    /// Reads what [`ApprovalTerms::to_stored`] wrote, in any format up to
    /// this build's.
    pub fn from_stored(text: &str) -> Result<ApprovalTerms, StateError> {
        let (_, value) = versioned("terms", text)?;
        serde_json::from_value(value).map_err(|error| StateError::Unreadable {
            what: "terms",
            message: error.to_string(),
        })
    }
}

impl Plan {
    /// The stored text: the plan with `format`.
    pub fn to_stored(&self) -> String {
        stored_text(self)
    }

    /// Reads what [`Plan::to_stored`] wrote for an approval of `tool`, in
    /// any format up to this build's. Text without a format is a plan of
    /// before formats: a [`ChangePlan`] (its variant from `tool`), or an
    /// upstream call stored as exactly `{"forward": …}`. A change to files
    /// must be of the kind `tool` makes: a row cannot turn one write tool's
    /// approval into another's.
    pub fn from_stored(text: &str, tool: &str) -> Result<Plan, StateError> {
        let unreadable = |message: String| StateError::Unreadable {
            what: "plan",
            message,
        };
        let plan = match versioned("plan", text)? {
            (Some(_), value) => {
                serde_json::from_value(value).map_err(|error| unreadable(error.to_string()))?
            }
            (None, Value::Object(mut object)) if object.contains_key("forward") => {
                if object.len() != 1 {
                    return Err(unreadable(
                        "a stored upstream call holds `forward` and nothing else".to_owned(),
                    ));
                }
                let forward = object.remove("forward").unwrap_or(Value::Null);
                serde_json::from_value::<UpstreamCall>(forward)
                    .map(Plan::Upstream)
                    .map_err(|error| unreadable(error.to_string()))?
            }
            (None, value) => {
                let change: ChangePlan =
                    serde_json::from_value(value).map_err(|error| unreadable(error.to_string()))?;
                BuiltinTool::from_name(tool)
                    .and_then(|builtin| Plan::of_builtin(builtin, change))
                    .ok_or_else(|| StateError::Unknown {
                        what: "write tool",
                        value: tool.to_owned(),
                    })?
            }
        };
        // An agent's call is whatever tool the agent used, as airlock's
        // policy named it.
        // A code run's changes are an approval of code mode's tool.
        if matches!(plan, Plan::Code(_)) {
            let code_tool = tool == "codemode_eval" || tool.starts_with("codemode_eval_");
            if !code_tool {
                return Err(unreadable(format!(
                    "a `code` plan in an approval of `{tool}`"
                )));
            }
            return Ok(plan);
        }
        if plan.change().is_some() && !matches!(plan, Plan::Agent(_)) {
            let expected = BuiltinTool::from_name(tool).and_then(Plan::kind_of);
            if expected != Some(plan.kind()) {
                return Err(unreadable(format!(
                    "a `{}` plan in an approval of `{tool}`",
                    plan.kind()
                )));
            }
        }
        Ok(plan)
    }
}

/// `value`'s JSON object with `"format": STATE_FORMAT` first.
fn stored_text<T: Serialize>(value: &T) -> String {
    let mut object = serde_json::Map::new();
    object.insert("format".to_owned(), Value::from(STATE_FORMAT));
    if let Ok(Value::Object(fields)) = serde_json::to_value(value) {
        object.extend(fields);
    }
    Value::Object(object).to_string()
}

/// The stored object's format (`None` before formats) and the object
/// without it; a newer format is refused.
fn versioned(what: &'static str, text: &str) -> Result<(Option<u64>, Value), StateError> {
    let mut value: Value = serde_json::from_str(text).map_err(|error| StateError::Unreadable {
        what,
        message: error.to_string(),
    })?;
    let Some(object) = value.as_object_mut() else {
        return Err(StateError::Unreadable {
            what,
            message: "not a JSON object".to_owned(),
        });
    };
    let format = match object.remove("format") {
        None => None,
        Some(format) => match format.as_u64() {
            Some(found) if found > STATE_FORMAT => return Err(StateError::Newer { what, found }),
            // Formats count from 1; no airlock wrote a 0.
            Some(found) if found >= 1 => Some(found),
            _ => {
                return Err(StateError::Unreadable {
                    what,
                    message: format!("format {format} is not a version number"),
                });
            }
        },
    };
    Ok((format, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn plans_before_formats_are_read_by_their_tool() {
        let change = json!({"tool": "edit_file", "summary": "MODIFY a", "changes": [],
            "diff": "", "patch_hash": "sha256:00"});
        let plan = Plan::from_stored(&change.to_string(), "edit_file").unwrap();
        assert!(matches!(plan, Plan::Edit(_)), "{plan:?}");
        let forward = json!({"forward": {"upstream": "fs", "tool": "write", "args": {}}});
        let plan = Plan::from_stored(&forward.to_string(), "fs__write").unwrap();
        assert_eq!(
            plan,
            Plan::Upstream(UpstreamCall::tool("fs", "write", json!({})))
        );
        let stored = plan.to_stored();
        assert!(
            stored.starts_with(r#"{"format":1,"kind":"upstream""#),
            "{stored}"
        );
        assert_eq!(Plan::from_stored(&stored, "ignored").unwrap(), plan);
    }

    #[test]
    fn a_newer_format_is_refused_not_misread() {
        let text =
            json!({"format": 2, "kind": "upstream", "upstream": "a", "tool": "b", "args": {}});
        assert_eq!(
            Plan::from_stored(&text.to_string(), "t"),
            Err(StateError::Newer {
                what: "plan",
                found: 2
            })
        );
        let text = json!({"format": 9, "risk": "low"});
        assert!(matches!(
            ApprovalTerms::from_stored(&text.to_string()),
            Err(StateError::Newer { found: 9, .. })
        ));
        for bad in [
            "[]",
            "{\"format\": \"1\"}",
            "{\"format\": 0, \"kind\": \"upstream\", \"upstream\": \"a\", \"tool\": \"b\", \"args\": {}}",
            "{\"format\": 1.5}",
            "{\"format\": -1}",
            "not json",
        ] {
            assert!(
                matches!(
                    Plan::from_stored(bad, "write_file"),
                    Err(StateError::Unreadable { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_plan_cannot_change_its_kind_or_carry_more_than_it_should() {
        let change = json!({"tool": "write_file", "summary": "MODIFY a", "changes": [],
            "diff": "", "patch_hash": "sha256:00"});
        // A legacy upstream call is `forward` and nothing else.
        let mut both = change.clone();
        both["forward"] = json!({"upstream": "fs", "tool": "write", "args": {}});
        assert!(matches!(
            Plan::from_stored(&both.to_string(), "write_file"),
            Err(StateError::Unreadable { .. })
        ));
        // A write's plan stored under a delete's approval is refused.
        let write = Plan::from_stored(&change.to_string(), "write_file").unwrap();
        assert!(matches!(
            Plan::from_stored(&write.to_stored(), "delete_file"),
            Err(StateError::Unreadable { .. })
        ));
        assert!(matches!(
            Plan::from_stored(&write.to_stored(), "fs__write"),
            Err(StateError::Unreadable { .. })
        ));
        assert_eq!(
            Plan::from_stored(&write.to_stored(), "write_file"),
            Ok(write)
        );
        // An upstream call keeps the name its server gives it, even a
        // built-in's (under `wrap`).
        let upstream = Plan::Upstream(UpstreamCall::tool("fs", "write_file", json!({})));
        assert_eq!(
            Plan::from_stored(&upstream.to_stored(), "write_file"),
            Ok(upstream)
        );
    }

    #[test]
    fn channels_and_deciders_read_back_their_names() {
        for channel in Channel::ALL {
            assert_eq!(channel.as_str().parse::<Channel>(), Ok(channel));
            assert_eq!(
                serde_json::to_value(channel).unwrap(),
                json!(channel.as_str())
            );
        }
        assert!("irc".parse::<Channel>().is_err());
        // Names line up in tables: widths apply.
        assert_eq!(
            format!("{:<8}|{:>6}|", Risk::Low, Channel::Mcp),
            "low     |   mcp|"
        );
        assert_eq!("timeout".parse::<DecidedBy>(), Ok(DecidedBy::Timeout));
    }
}
