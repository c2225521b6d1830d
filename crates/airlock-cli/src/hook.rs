//! `airlock hook claude-code|codex|gemini`: the hook command an agent runs
//! before and after each of its own tool calls (DESIGN §9.1). It reads the
//! event on stdin, has the workspace's broker decide it (waiting for a
//! human when the policy asks, until shortly before the agent's own
//! timeout), and answers in the agent's format.
//!
//! It fails closed: input it cannot read, a workspace it cannot open, an
//! audit log it cannot write, a panic: each is a denial the agent honours
//! (every agent lets the tool run when its hook merely fails).

use std::io::{Read, Write};
use std::time::Duration;

use airlock_core::hooks::{self, Agent, AgentEvent, HookOutput, HookVerdict};
use clap::{Args, Subcommand};

use crate::GlobalArgs;
use crate::workspace::{Need, Workspace};

#[derive(Debug, Subcommand)]
pub(crate) enum HookCommand {
    /// Claude Code's hook (PreToolUse, PermissionRequest, PostToolUse).
    ClaudeCode(RunArgs),
    /// Codex's hook (PreToolUse, PermissionRequest, PostToolUse).
    Codex(RunArgs),
    /// Gemini CLI's hook (BeforeTool, AfterTool).
    Gemini(RunArgs),
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The agent's timeout for this hook, in seconds (its hook entry's
    /// `timeout`; Gemini CLI's is in milliseconds there) [default: the
    /// agent's: 600 for Claude Code and Codex, 60 for Gemini CLI]. A human
    /// is waited for until shortly before it.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
}

/// Runs the hook; the exit code is the agent's to read.
pub(crate) fn run(global: &GlobalArgs, command: &HookCommand) -> u8 {
    let (agent, args) = match command {
        HookCommand::ClaudeCode(args) => (Agent::ClaudeCode, args),
        HookCommand::Codex(args) => (Agent::Codex, args),
        HookCommand::Gemini(args) => (Agent::Gemini, args),
    };
    let answered =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| answer(global, agent, args)));
    let output = answered.unwrap_or_else(|_| {
        hooks::unreadable(
            agent,
            "airlock failed while deciding this call; it is refused",
        )
    });
    let _ = std::io::stdout().lock().write_all(output.stdout.as_bytes());
    let _ = std::io::stderr().lock().write_all(output.stderr.as_bytes());
    output.exit_code
}

fn answer(global: &GlobalArgs, agent: Agent, args: &RunArgs) -> HookOutput {
    let mut input = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(hooks::MAX_EVENT_BYTES as u64 + 1)
        .read_to_end(&mut input);
    if let Err(error) = read {
        return hooks::unreadable(agent, &format!("cannot read the hook input: {error}"));
    }
    if input.len() > hooks::MAX_EVENT_BYTES {
        return hooks::unreadable(
            agent,
            &format!("the hook input is over {} bytes", hooks::MAX_EVENT_BYTES),
        );
    }
    let event = match AgentEvent::parse(agent, &input) {
        Ok(event) => event,
        Err(error) => return hooks::unreadable(agent, &error.to_string()),
    };
    let deny = |reason: String| hooks::render(agent, event.phase, &HookVerdict::Deny { reason });
    // The workspace is found from the agent's working directory.
    if global.workspace.is_none()
        && let Some(cwd) = &event.cwd
        && let Err(error) = std::env::set_current_dir(cwd)
    {
        return deny(format!("airlock: the agent's directory {cwd}: {error}"));
    }
    let workspace = match Workspace::load(global, Need::Existing) {
        Ok(workspace) => workspace,
        Err(failure) => return deny(format!("airlock: {:#}", failure.error)),
    };
    let broker = match workspace.broker() {
        Ok(broker) => broker,
        Err(failure) => return deny(format!("airlock: {:#}", failure.error)),
    };
    let timeout = Duration::from_secs(
        args.timeout
            .unwrap_or_else(|| agent.default_timeout_seconds())
            .max(1),
    );
    let wait = timeout
        .saturating_sub(airlock_broker::HOOK_MARGIN)
        .max(Duration::from_secs(1));
    let verdict = broker.hook(&event, wait);
    hooks::render(agent, event.phase, &verdict)
}
