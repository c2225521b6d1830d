//! airlock's verdict in each agent's own output format: what the hook
//! prints on stdout and stderr and the code it exits with.

use serde_json::{Value, json};

use super::{Agent, Phase};

/// What airlock says of one hook event.
#[derive(Debug, Clone, PartialEq)]
pub enum HookVerdict {
    /// The call may go ahead; `updated_input` replaces the agent's input
    /// (an approver's edited version) where the agent takes one.
    Allow {
        reason: Option<String>,
        updated_input: Option<Value>,
    },
    /// The call is refused; the model sees `reason`.
    Deny { reason: String },
    /// Nothing to say (a post event that checked out).
    Pass,
    /// After the tool ran, something the model should know (a file that
    /// does not hold the approved content).
    Notice { message: String },
}

/// What the hook process writes and how it exits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookOutput {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: u8,
}

impl HookOutput {
    fn json(value: &Value) -> HookOutput {
        HookOutput {
            stdout: format!("{value}\n"),
            stderr: String::new(),
            exit_code: 0,
        }
    }

    fn silent() -> HookOutput {
        HookOutput {
            stdout: String::new(),
            stderr: String::new(),
            exit_code: 0,
        }
    }
}

/// The agents cap what they show of a hook's text.
const MAX_REASON_CHARS: usize = 9_000;

fn reason_text(reason: &str) -> String {
    let reason = if reason.trim().is_empty() {
        "refused by airlock"
    } else {
        reason
    };
    match reason.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => format!("{}…", &reason[..cut]),
        None => reason.to_owned(),
    }
}

/// `verdict` for `agent`'s `phase` event, as the agent reads it.
///
/// A denial is always one the agent honours: every agent lets the tool run
/// on output it cannot read, so only documented fields are written (Codex
/// refuses any other), a deny always has a non-empty reason, and where the
/// agent ignores a JSON deny the exit code says it too.
pub fn render(agent: Agent, phase: Phase, verdict: &HookVerdict) -> HookOutput {
    match (agent, phase) {
        (Agent::ClaudeCode, Phase::Pre) => match verdict {
            HookVerdict::Allow {
                reason,
                updated_input,
            } => {
                let mut out = json!({
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "allow",
                });
                if let Some(reason) = reason {
                    out["permissionDecisionReason"] = Value::String(reason_text(reason));
                }
                if let Some(input) = updated_input {
                    out["updatedInput"] = input.clone();
                }
                HookOutput::json(&json!({"hookSpecificOutput": out}))
            }
            HookVerdict::Deny { reason } => HookOutput::json(&json!({
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": reason_text(reason),
                }
            })),
            HookVerdict::Pass | HookVerdict::Notice { .. } => HookOutput::silent(),
        },
        (Agent::ClaudeCode | Agent::Codex, Phase::Permission) => {
            let event = json!("PermissionRequest");
            match verdict {
                HookVerdict::Allow { updated_input, .. } => {
                    let mut decision = json!({"behavior": "allow"});
                    // Codex reserves `updatedInput` here (an answer with it
                    // is discarded); Claude Code takes it.
                    if agent == Agent::ClaudeCode
                        && let Some(input) = updated_input
                    {
                        decision["updatedInput"] = input.clone();
                    }
                    HookOutput::json(&json!({
                        "hookSpecificOutput": {"hookEventName": event, "decision": decision}
                    }))
                }
                HookVerdict::Deny { reason } => HookOutput::json(&json!({
                    "hookSpecificOutput": {
                        "hookEventName": event,
                        "decision": {"behavior": "deny", "message": reason_text(reason)},
                    }
                })),
                HookVerdict::Pass | HookVerdict::Notice { .. } => HookOutput::silent(),
            }
        }
        (Agent::Codex, Phase::Pre) => match verdict {
            // A bare allow is not something Codex accepts (it would ignore
            // the hook): saying nothing lets the call through.
            HookVerdict::Allow {
                updated_input: None,
                ..
            }
            | HookVerdict::Pass
            | HookVerdict::Notice { .. } => HookOutput::silent(),
            HookVerdict::Allow {
                updated_input: Some(input),
                ..
            } => HookOutput::json(&json!({
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "allow",
                    "updatedInput": input,
                }
            })),
            HookVerdict::Deny { reason } => {
                let reason = reason_text(reason);
                HookOutput {
                    stdout: format!(
                        "{}\n",
                        json!({
                            "hookSpecificOutput": {
                                "hookEventName": "PreToolUse",
                                "permissionDecision": "deny",
                                "permissionDecisionReason": reason,
                            }
                        })
                    ),
                    stderr: String::new(),
                    exit_code: 0,
                }
            }
        },
        (Agent::ClaudeCode | Agent::Codex, Phase::Post) => match verdict {
            HookVerdict::Notice { message } | HookVerdict::Deny { reason: message } => {
                HookOutput::json(&json!({
                    "decision": "block",
                    "reason": reason_text(message),
                }))
            }
            HookVerdict::Allow { .. } | HookVerdict::Pass => HookOutput::silent(),
        },
        (Agent::Gemini, Phase::Pre | Phase::Permission) => match verdict {
            HookVerdict::Allow {
                reason,
                updated_input,
            } => {
                let mut out = json!({"decision": "allow"});
                if let Some(reason) = reason {
                    out["reason"] = Value::String(reason_text(reason));
                }
                if let Some(input) = updated_input {
                    out["hookSpecificOutput"] = json!({"tool_input": input});
                }
                HookOutput::json(&out)
            }
            HookVerdict::Deny { reason } => HookOutput::json(&json!({
                "decision": "deny",
                "reason": reason_text(reason),
            })),
            HookVerdict::Pass | HookVerdict::Notice { .. } => HookOutput::silent(),
        },
        (Agent::Gemini, Phase::Post) => match verdict {
            HookVerdict::Notice { message } | HookVerdict::Deny { reason: message } => {
                HookOutput::json(&json!({
                    "hookSpecificOutput": {"additionalContext": reason_text(message)}
                }))
            }
            HookVerdict::Allow { .. } | HookVerdict::Pass => HookOutput::silent(),
        },
    }
}

/// The denial for an event airlock could not even read: the phase is not
/// known, so the output is one every event of `agent` takes as a refusal
/// (Claude Code: exit 2 and the reason on stderr; Codex: the same; Gemini
/// CLI: a JSON deny, which it reads whatever the exit code).
pub fn unreadable(agent: Agent, reason: &str) -> HookOutput {
    let reason = format!("airlock: {}", reason_text(reason));
    match agent {
        Agent::ClaudeCode | Agent::Codex => HookOutput {
            stdout: String::new(),
            stderr: format!("{reason}\n"),
            exit_code: 2,
        },
        Agent::Gemini => HookOutput {
            stdout: format!("{}\n", json!({"decision": "deny", "reason": reason})),
            stderr: String::new(),
            exit_code: 2,
        },
    }
}
