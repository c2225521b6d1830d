//! `airlock check`: explain the policy decision for one call, changing nothing.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use airlock_core::config::is_profile_name;
use airlock_core::{Decision, Disposition, Principal, ToolAnnotations, ToolCall, policy};
use anyhow::anyhow;
use clap::Args;
use serde_json::Value;

use crate::workspace::Workspace;
use crate::{Failure, print};

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The tool name, as the agent would call it.
    tool: String,
    /// The call's arguments, a JSON object.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    args: String,
    /// The user the call is made for.
    #[arg(long, value_name = "U")]
    user: Option<String>,
    /// The agent making the call.
    #[arg(long, value_name = "A")]
    agent: Option<String>,
    /// The session the call belongs to.
    #[arg(long, value_name = "S")]
    session: Option<String>,
    /// The profile bound to the call's endpoint [default: default_profile].
    #[arg(long, value_name = "P")]
    profile: Option<String>,
    /// MCP annotations of an upstream tool, a JSON object such as
    /// '{"readOnlyHint": true}'.
    #[arg(long, value_name = "JSON")]
    annotations: Option<String>,
    /// Print one JSON object instead of an explanation.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(workspace: &Workspace, args: &CheckArgs) -> Result<(), Failure> {
    let policy = &workspace.loaded.policy;
    if args.tool.is_empty() {
        return Err(Failure::usage(anyhow!("the tool name must not be empty")));
    }
    let arguments: Value = serde_json::from_str(&args.args)
        .map_err(|error| Failure::usage(anyhow!("--args is not valid JSON: {error}")))?;
    if !arguments.is_object() {
        return Err(Failure::usage(anyhow!("--args must be a JSON object")));
    }
    let annotations = match &args.annotations {
        None => None,
        Some(text) => Some(
            serde_json::from_str::<ToolAnnotations>(text).map_err(|error| {
                Failure::usage(anyhow!(
                    "--annotations is not a valid annotations object: {error}"
                ))
            })?,
        ),
    };
    if let Some(profile) = &args.profile
        && !(is_profile_name(profile) && policy.profile_names().any(|name| name == profile))
    {
        let known: Vec<&str> = policy.profile_names().collect();
        return Err(Failure::usage(anyhow!(
            "unknown profile {profile} (configured: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )));
    }

    let mut call = ToolCall::new(
        args.tool.clone(),
        arguments,
        policy.origin_of(&args.tool, annotations),
        now_millis(),
    );
    call.principal = Principal {
        user: args.user.clone(),
        agent: args.agent.clone(),
    };
    call.session = args.session.clone();
    call.profile = args.profile.clone();
    let decision = policy::evaluate(policy, &call, &[]);

    if args.json {
        let mut object = serde_json::Map::new();
        object.insert("tool".to_owned(), Value::String(args.tool.clone()));
        if let Value::Object(fields) = serde_json::to_value(&decision).map_err(Failure::internal)? {
            object.extend(fields);
        }
        let text =
            serde_json::to_string_pretty(&Value::Object(object)).map_err(Failure::internal)?;
        print(&text);
    } else {
        print(&explain(&args.tool, &decision));
    }
    Ok(())
}

/// A short human explanation of a decision.
fn explain(tool: &str, decision: &Decision) -> String {
    let mut out = String::new();
    let verdict = match decision.disposition {
        Disposition::Allow => "allow: runs without asking",
        Disposition::Ask => "ask: a human must approve it",
        Disposition::Deny => "deny: refused",
    };
    let _ = writeln!(out, "{tool}: {verdict}");
    let _ = write!(out, "  risk {}", decision.risk);
    if decision.disposition == Disposition::Ask {
        let _ = write!(out, ", {}s to decide", decision.timeout_seconds);
        if decision.allow_skip {
            out.push_str(", always-allow possible");
        }
        if decision.require_reason {
            out.push_str(", reason required");
        }
        if decision.approvers.is_empty() {
            out.push_str(", any approver");
        } else {
            let _ = write!(out, ", approvers: {}", decision.approvers.join(", "));
        }
    }
    if let Some(code) = decision.deny_code {
        let _ = write!(out, ", code {code}");
    }
    if let Some(profile) = &decision.profile {
        let _ = write!(out, ", profile {profile}");
    }
    out.push_str("\n  because:");
    for step in &decision.justification {
        let _ = write!(out, "\n    {:<15} {step}", step.layer().as_str());
        if let Some(effect) = step.effect {
            let _ = write!(out, " -> {effect}");
        }
    }
    out
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}
