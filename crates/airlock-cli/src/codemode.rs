//! Code mode's engine as this binary registers it (the worker is this
//! executable), and `airlock eval FILE|-`.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::anyhow;
use clap::Args;

use airlock_broker::Broker;
use airlock_codemode::{CodeTool, Isolation};

use crate::Failure;

/// The engine every broker of this process gets: scripts run in a worker
/// process of this same executable.
pub(crate) fn engine() -> Arc<dyn airlock_broker::CodeMode> {
    Arc::new(CodeTool::new(Isolation::Worker { program: program() }))
}

/// [`engine`] for a server, which runs many scripts: the next run's worker
/// is started while the last one runs.
pub(crate) fn server_engine() -> Arc<dyn airlock_broker::CodeMode> {
    Arc::new(CodeTool::new(Isolation::Worker { program: program() }).with_spares())
}

fn program() -> PathBuf {
    // /proc/self/exe names this executable even if it was replaced on
    // disk since it started.
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"))
}

/// `airlock eval FILE|-`: `airlock call codemode_eval` with the script.
#[derive(Debug, Args)]
pub(crate) struct EvalArgs {
    /// The script (JavaScript), or `-` for standard input.
    #[arg(value_name = "FILE|-")]
    file: String,
    /// What the script does, shown to whoever approves its calls.
    #[arg(long, value_name = "TEXT")]
    description: Option<String>,
    /// Run it as codemode_eval_<PROFILE> (codemode.profile_tools): its calls
    /// answer to that profile too.
    #[arg(long = "as", value_name = "PROFILE")]
    narrowed: Option<String>,
    /// The profile bound to the call's endpoint [default: default_profile].
    #[arg(long, value_name = "P")]
    profile: Option<String>,
    /// The session the run belongs to.
    #[arg(long, value_name = "S")]
    session: Option<String>,
    /// The user the run is made for.
    #[arg(long, value_name = "U")]
    user: Option<String>,
    /// A call that needs a human returns hitl_required at once (and ends
    /// the run) instead of waiting for a decision.
    #[arg(long, conflicts_with = "yes")]
    defer: bool,
    /// The person at this terminal approves the script's calls now.
    #[arg(long)]
    yes: bool,
    /// The reason for --yes, where the risk requires one.
    #[arg(long, value_name = "R", requires = "yes")]
    reason: Option<String>,
    /// Run it and show the diff of what it would change; propose nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) fn eval(broker: Broker, args: &EvalArgs) -> Result<u8, Failure> {
    let code = if args.file == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| Failure::usage(anyhow!("standard input: {error}")))?;
        text
    } else {
        std::fs::read_to_string(&args.file)
            .map_err(|error| Failure::usage(anyhow!("{}: {error}", args.file)))?
    };
    let mut call_args = serde_json::json!({"code": code});
    if let Some(description) = &args.description {
        call_args["description"] = serde_json::Value::String(description.clone());
    }
    if args.dry_run {
        call_args["dry_run"] = serde_json::Value::Bool(true);
    }
    let tool = match &args.narrowed {
        Some(profile) => format!("{}_{profile}", airlock_broker::CODEMODE_TOOL),
        None => airlock_broker::CODEMODE_TOOL.to_owned(),
    };
    if airlock_broker::code_tool(broker.config(), &tool).is_none() {
        return Err(Failure::usage(anyhow!(
            "{tool} is not offered (codemode.enabled, codemode.profile_tools)"
        )));
    }
    crate::approvals::call_with(
        broker,
        crate::check::CallSpec {
            tool,
            args: call_args.to_string(),
            user: args.user.clone(),
            agent: None,
            session: args.session.clone(),
            profile: args.profile.clone(),
            context_id: None,
            requester: None,
        },
        args.defer,
        args.yes,
        args.reason.clone(),
    )
}
