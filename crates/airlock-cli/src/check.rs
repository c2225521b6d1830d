//! `airlock check`: explain the policy decision for one call, changing nothing.

use std::fmt::Write as _;

use crate::now_ms;
use airlock_core::config::is_profile_name;
use airlock_core::{Decision, Disposition, Policy, Principal, ToolAnnotations, ToolCall, policy};
use anyhow::anyhow;
use clap::Args;
use serde_json::Value;

use crate::workspace::Workspace;
use crate::{Failure, print, print_json};

/// The call a command describes: the same flags for `check` and `call`.
#[derive(Debug, Args)]
pub(crate) struct CallSpec {
    /// The tool name, as the agent would call it.
    pub tool: String,
    /// The call's arguments, a JSON object: inline, `@FILE` to read them from
    /// a file, or `-` from standard input (for arguments over the 128 KiB a
    /// command-line argument can hold).
    #[arg(long, value_name = "JSON|@FILE|-", default_value = "{}")]
    pub args: String,
    /// The user the call is made for.
    #[arg(long, value_name = "U")]
    pub user: Option<String>,
    /// The agent making the call.
    #[arg(long, value_name = "A")]
    pub agent: Option<String>,
    /// The session the call belongs to.
    #[arg(long, value_name = "S")]
    pub session: Option<String>,
    /// The profile bound to the call's endpoint [default: default_profile].
    #[arg(long, value_name = "P")]
    pub profile: Option<String>,
    /// Your own correlation id for the call (spec 000's context_id), recorded
    /// with its approval and in the audit log.
    #[arg(long = "context", value_name = "ID")]
    pub context_id: Option<String>,
    /// Who asked on a chat platform, `channel:chat:user` (telegram, slack or
    /// discord, with the platform's ids): the confirmation goes to that chat.
    #[arg(long, value_name = "CHANNEL:CHAT:USER")]
    pub requester: Option<String>,
}

impl CallSpec {
    /// The text of `--args`: as given, from `@FILE`, or from stdin (`-`).
    fn args_text(&self) -> Result<String, Failure> {
        if self.args == "-" {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(|error| {
                Failure::usage(anyhow!("--args -: cannot read standard input: {error}"))
            })?;
            return Ok(text);
        }
        match self.args.strip_prefix('@') {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|error| Failure::usage(anyhow!("--args @{path}: {error}"))),
            None => Ok(self.args.clone()),
        }
    }

    /// The `ToolCall` these flags describe; bad input is a usage failure.
    pub(crate) fn to_call(
        &self,
        policy: &Policy,
        annotations: Option<ToolAnnotations>,
    ) -> Result<ToolCall, Failure> {
        if self.tool.is_empty() {
            return Err(Failure::usage(anyhow!("the tool name must not be empty")));
        }
        let text = self.args_text()?;
        let arguments: Value = serde_json::from_str(&text)
            .map_err(|error| Failure::usage(anyhow!("--args is not valid JSON: {error}")))?;
        if !arguments.is_object() {
            return Err(Failure::usage(anyhow!("--args must be a JSON object")));
        }
        if let Some(profile) = &self.profile
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
        // Spec 003's dotted names are accepted.
        let (tool, arguments) = airlock_core::tools::canonical_call(&self.tool, arguments);
        let mut call = ToolCall::new(
            tool.clone(),
            arguments,
            policy.origin_of(&tool, annotations),
            now_ms(),
        );
        call.principal = Principal {
            user: self.user.clone(),
            agent: self.agent.clone(),
            ..Principal::default()
        };
        call.session = self.session.clone();
        // A durable session's id names it; any other text is a label.
        call.sessions.last = self
            .session
            .clone()
            .filter(|session| airlock_core::session::is_session_id(session));
        call.profile = self.profile.clone();
        if let Some(context_id) = &self.context_id {
            airlock_core::call::check_context_id(context_id)
                .map_err(|error| Failure::usage(anyhow!("--context: {error}")))?;
            call.context_id = Some(context_id.clone());
        }
        if let Some(requester) = &self.requester {
            call.requester = Some(
                airlock_core::Requester::parse(requester)
                    .map_err(|error| Failure::usage(anyhow!("--requester: {error}")))?,
            );
        }
        Ok(call)
    }
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    #[command(flatten)]
    call: CallSpec,
    /// MCP annotations of an upstream tool, a JSON object such as
    /// '{"readOnlyHint": true}'.
    #[arg(long, value_name = "JSON")]
    annotations: Option<String>,
    /// Print one JSON object instead of an explanation.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(workspace: &Workspace, args: &CheckArgs) -> Result<(), Failure> {
    let policy = workspace.loaded.policy.clone();
    let policy = &policy;
    let config = workspace.loaded.config.clone();
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
    let call = args.call.to_call(policy, annotations)?;
    // The decision a call would get now: grants in force and paths as the
    // file system resolves them, read without changing anything.
    let broker_workspace = airlock_broker::Workspace {
        root: workspace.root.clone(),
        loaded: workspace.loaded.clone(),
        store: crate::store::shared_store(&workspace.loaded.config, &workspace.root)?,
    };
    let (decision, grants) = airlock_broker::explain(&broker_workspace, &call, now_ms())
        .map_err(|error| Failure::internal(anyhow!("cannot read the workspace: {error}")))?;
    let grant = decision
        .justification
        .iter()
        .find_map(|step| match &step.reason {
            policy::Reason::Grant { id } => grants
                .iter()
                .find(|grant| grant.id.as_str() == id.as_ref())
                .map(|grant| {
                    (
                        grant.id.clone(),
                        airlock_broker::GrantTerms::of(grant).statement(),
                    )
                }),
            _ => None,
        });
    if args.json {
        let mut object = serde_json::Map::new();
        object.insert("tool".to_owned(), Value::String(args.call.tool.clone()));
        if let Value::Object(fields) = serde_json::to_value(&decision).map_err(Failure::internal)? {
            object.extend(fields);
        }
        object.insert(
            "deferred_ttl".to_owned(),
            Value::from(airlock_broker::deferred_ttl(&config, &decision)),
        );
        if let Some((id, statement)) = &grant {
            object.insert(
                "grant".to_owned(),
                serde_json::json!({"id": id, "allows": statement}),
            );
        }
        let text =
            serde_json::to_string_pretty(&Value::Object(object)).map_err(Failure::internal)?;
        print_json(&text);
    } else {
        let mut text = explain(
            &args.call.tool,
            &decision,
            airlock_broker::deferred_ttl(&config, &decision),
        );
        if let Some((id, statement)) = &grant {
            let _ = write!(
                text,
                "\n  allowed by grant {id}: {} (airlock grants revoke {id} ends it)",
                // A path is an agent's string: one line, made visible.
                airlock_core::display::safe_line(statement)
            );
        }
        print(&text);
    }
    Ok(())
}

/// A short human explanation of a decision.
fn explain(tool: &str, decision: &Decision, deferred_ttl: u64) -> String {
    let mut out = String::new();
    let verdict = match decision.disposition {
        Disposition::Allow => "allow: runs without asking",
        Disposition::Ask => "ask: a human must approve it",
        Disposition::Deny => "deny: refused",
    };
    let _ = writeln!(out, "{tool}: {verdict}");
    let _ = write!(out, "  risk {}", decision.risk);
    if decision.disposition == Disposition::Ask {
        let _ = write!(
            out,
            ", {}s to decide while the call waits, {deferred_ttl}s when deferred",
            decision.timeout_seconds
        );
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
