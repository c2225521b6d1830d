//! The question airlock puts to an MCP client's human, and reading the answer:
//! the approve/deny form, the message shown with it, and the decision a form
//! answer makes. Elicitation (`server`) and the 2026-07-28 input rounds
//! (`rounds`) both ask with it.

use airlock_broker::DecideRequest;
use airlock_core::Channel;
use rmcp::model::ElicitationAction;
use serde_json::{Value, json};

/// The form a human answers: approve or deny, a reason (required where the
/// risk requires one), and "always" where it may be offered.
pub(crate) fn decision_form(form: &airlock_broker::AskForm) -> Value {
    let mut properties = json!({
        "decision": {
            "type": "string",
            "title": "Decision",
            "enum": ["approve", "deny"],
            "enumNames": ["Approve", "Deny"],
        },
        "reason": {
            "type": "string",
            "title": "Reason",
            "description": if form.require_reason {
                "Required to approve at this risk."
            } else {
                "Optional."
            },
        },
    });
    if let Some(statement) = &form.always {
        properties["always"] = json!({
            "type": "boolean",
            "title": "Always allow",
            "description": format!("Approve, and from now on {statement}."),
            "default": false,
        });
    }
    let mut required = vec!["decision"];
    if form.require_reason {
        required.push("reason");
    }
    json!({"type": "object", "properties": properties, "required": required})
}

/// The message shown with the form.
pub(crate) fn decision_message(form: &airlock_broker::AskForm) -> String {
    format!(
        "airlock: {} wants to run {} ({} risk).\n{}\n\n{}",
        "The agent", form.tool, form.risk, form.summary, form.diff_preview
    )
}

/// Turns a form answer into a decision request. `None` when the answer
/// approves without a reason the risk requires (it decides nothing).
pub(crate) fn decide_request(
    action: &ElicitationAction,
    content: Option<&Value>,
    form: &airlock_broker::AskForm,
    user: Option<String>,
) -> Option<DecideRequest> {
    let user = user.unwrap_or_else(|| "mcp-client".to_owned());
    let field = |key: &str| content.and_then(|content| content.get(key));
    let reason = field("reason")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|reason| !reason.is_empty())
        .map(str::to_owned);
    let deny = |reason: Option<String>| DecideRequest {
        approve: false,
        reason,
        always: None,
        authority: airlock_broker::Authority::Client,
        user: user.clone(),
        channel: Channel::Mcp,
        content: None,
    };
    match action {
        ElicitationAction::Accept => {
            if field("decision").and_then(Value::as_str) != Some("approve") {
                return Some(deny(reason));
            }
            if form.require_reason && reason.is_none() {
                return None;
            }
            let always =
                form.always.is_some() && field("always").and_then(Value::as_bool).unwrap_or(false);
            Some(DecideRequest {
                approve: true,
                reason,
                always: always.then_some(airlock_broker::AlwaysAllow {
                    persistent: false,
                    for_ms: None,
                }),
                authority: airlock_broker::Authority::Client,
                user,
                channel: Channel::Mcp,
                content: None,
            })
        }
        ElicitationAction::Decline => Some(deny(Some("declined in the MCP client".to_owned()))),
        _ => Some(deny(Some("cancelled in the MCP client".to_owned()))),
    }
}
