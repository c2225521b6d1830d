//! `airlock`: the command-line face of the airlock gateway.
//!
//! It wires the crates together: it finds the workspace and its configuration,
//! refuses to run on an invalid one (exit 2), and runs the subcommand. Exit codes
//! follow DESIGN §11: 0 success, 1 internal error, 2 usage or configuration error.

mod approvals;
mod audit;
mod channels;
mod check;
mod codemode;
mod grants;
mod hook;
mod otlp;
mod publish;
mod serve;
mod session;
mod ship;
mod stats;
mod store;
mod token;
mod tools;
mod watch;
mod workspace;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::workspace::{Need, Workspace};

#[derive(Debug, Parser)]
#[command(
    name = "airlock",
    version,
    about = "A human-in-the-loop gateway for AI agent tool calls",
    propagate_version = true
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// Flags every subcommand accepts.
#[derive(Debug, Clone, Args)]
pub(crate) struct GlobalArgs {
    /// The workspace directory [default: the nearest directory at or above the
    /// current one holding airlock.yaml or .airlock/; AIRLOCK_WORKSPACE
    /// overrides].
    #[arg(long, global = true, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// The configuration file [default: <workspace>/airlock.yaml; built-in defaults
    /// when absent].
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write airlock.yaml with every default and create the state dir.
    Init {
        /// Overwrite an existing configuration file.
        #[arg(long)]
        force: bool,
    },
    /// Validate the configuration or print its JSON Schema.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Explain the policy decision for a tool call, without side effects.
    Check(check::CheckArgs),
    /// Run one call through the whole pipeline and print its envelope.
    Call(approvals::CallArgs),
    /// Run a command through the exec tool (`airlock call exec` with argv):
    /// `airlock exec -- cargo test`.
    Exec(approvals::ExecArgs),
    /// Run a script through code mode (`airlock call codemode_eval`): every
    /// tool call it makes is gated like a direct one.
    Eval(codemode::EvalArgs),
    /// List pending approvals, oldest first.
    Pending(approvals::PendingArgs),
    /// Show one approval with its diff.
    Show(approvals::ShowArgs),
    /// Approve a pending approval; its change is applied once.
    Approve(approvals::ApproveArgs),
    /// Deny a pending approval.
    Deny(approvals::DenyArgs),
    /// Approve or deny requests interactively as they arrive.
    Watch(watch::WatchArgs),
    /// Decided, applied, undone, expired and cancelled approvals, newest first.
    History(approvals::HistoryArgs),
    /// Approval analytics: calls, asks, decisions, timeouts, undos and time
    /// to decision, in all or by tool, risk, approver or session.
    Stats(stats::StatsArgs),
    /// Restore the content an applied approval replaced.
    Undo(approvals::UndoArgs),
    /// List the "always allow" grants in force, or revoke them.
    Grants(grants::GrantsArgs),
    /// Verify, query or follow the audit log.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// Sessions that scope what calls may touch: open, list, show, close.
    #[command(subcommand)]
    Session(session::SessionCommand),
    /// Serve MCP: the built-in tools and the configured upstreams, gated.
    Serve(serve::ServeArgs),
    /// Gate one MCP server (a command, or --url) under its own tool names, over
    /// stdio or --http.
    Wrap(serve::WrapArgs),
    /// Every built-in tool with its arguments (the schemas MCP serves).
    Tools(tools::ToolsArgs),
    /// Tokens for the HTTP API and the web UI: create, list, revoke, rotate.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// The chat approver channels (Telegram, Slack, Discord): run them, or
    /// test one.
    #[command(subcommand)]
    Channels(channels::ChannelsCommand),
    /// The hook command of a coding agent: decides its own tool calls
    /// (event on stdin, the agent's answer on stdout).
    #[command(subcommand)]
    Hook(hook::HookCommand),
    /// The state store: move a workspace's state into a shared PostgreSQL
    /// database.
    #[command(subcommand)]
    Store(store::StoreCommand),
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate the configuration file; errors name the key path and line.
    Check,
    /// Print the JSON Schema of the configuration file.
    Schema,
}

/// A failure with the exit code it maps to.
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Failure {
    /// Exit 2: bad usage or configuration.
    pub fn usage(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: 2,
            error: error.into(),
        }
    }

    /// Exit `code` with `message`.
    pub fn with_code(code: u8, message: String) -> Failure {
        Failure {
            code,
            error: anyhow::anyhow!(message),
        }
    }

    /// Exit 1: something failed that is not the user's input.
    pub fn internal(error: impl Into<anyhow::Error>) -> Failure {
        Failure {
            code: 1,
            error: error.into(),
        }
    }
}

fn main() -> ExitCode {
    // A code-mode worker (started by airlock itself) confines itself before
    // anything else runs: no argument parsing, no threads, no runtime.
    let mut args = std::env::args_os();
    if args
        .nth(1)
        .is_some_and(|first| first == airlock_codemode::worker::SUBCOMMAND)
    {
        let rest: Vec<String> = args.map(|arg| arg.to_string_lossy().into_owned()).collect();
        let code = airlock_codemode::worker::main(&rest);
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = Cli::parse();
    // An MCP client shows a server that fails to start as "connection
    // closed" at best, with at most one line of its stderr: say why in one.
    let one_line = matches!(cli.command, Command::Serve(_) | Command::Wrap(_));
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            // An error may quote a path or a message from an agent.
            let mut message = format!("{:#}", failure.error);
            if one_line {
                message = message.trim_end().replace('\n', "; ");
            }
            let _ = writeln!(
                std::io::stderr(),
                "error: {}",
                airlock_core::display::safe_text(&message)
            );
            ExitCode::from(failure.code)
        }
    }
}

fn run(cli: Cli) -> Result<u8, Failure> {
    // A hook answers every failure in the agent's own format.
    if let Command::Hook(command) = &cli.command {
        return hook::run(&cli.global, command);
    }
    // Every command first loads the configuration: an invalid one stops them all.
    let need = match &cli.command {
        Command::Init { .. } => Need::Creating,
        Command::Config(ConfigCommand::Schema) | Command::Tools(_) | Command::Store(_) => {
            Need::Optional
        }
        // Checking a log, proof or checkpoint someone handed over needs no
        // workspace.
        Command::Audit(audit::AuditCommand::Verify {
            checkpoint: Some(_),
            log,
            proof,
            consistency,
            ..
        }) if log.is_some() || proof.is_some() || consistency.is_some() => Need::Optional,
        _ => Need::Existing,
    };
    let workspace = Workspace::load(&cli.global, need)?;
    // Traces and logs this command queued go out before it exits.
    let otlp = workspace
        .loaded
        .config
        .telemetry
        .otlp
        .endpoint
        .clone()
        .map(|endpoint| {
            let ca_file = workspace
                .loaded
                .config
                .tls
                .ca_file
                .as_ref()
                .map(|file| workspace.root.join(file));
            (endpoint, ca_file)
        });
    let result = run_command(cli, workspace);
    if let Some((endpoint, ca_file)) = otlp {
        otlp::flush_at_exit(&endpoint, ca_file);
    }
    result
}

fn run_command(cli: Cli, workspace: Workspace) -> Result<u8, Failure> {
    match cli.command {
        Command::Init { force } => workspace.init(force).map(|()| 0),
        Command::Config(ConfigCommand::Check) => {
            print(&workspace.describe());
            Ok(0)
        }
        Command::Config(ConfigCommand::Schema) => {
            let schema = airlock_core::config::json_schema();
            let text = serde_json::to_string_pretty(&schema).map_err(Failure::internal)?;
            print_json(&text);
            Ok(0)
        }
        Command::Check(args) => check::run(&workspace, &args).map(|()| 0),
        Command::Call(args) => approvals::call(workspace.broker()?, &args),
        Command::Exec(args) => approvals::exec(workspace.broker()?, &args),
        Command::Eval(args) => codemode::eval(workspace.broker()?, &args),
        Command::Pending(args) => approvals::pending(&workspace.broker()?, &args),
        Command::Show(args) => approvals::show(&workspace.broker()?, &args),
        Command::Approve(args) => approvals::approve(&workspace.broker()?, &args),
        Command::Deny(args) => approvals::deny(&workspace.broker()?, &args),
        Command::Watch(args) => {
            // Chat channels run in a watching process too (while no other
            // process of the workspace runs them).
            let channels = &workspace.loaded.config.channels;
            if channels.telegram.is_some() || channels.slack.is_some() || channels.discord.is_some()
            {
                let again = Workspace::load(&cli.global, Need::Existing)?;
                channels::in_background(again)?;
            }
            watch::run(&workspace.broker()?, &args)
        }
        Command::Undo(args) => approvals::undo(&workspace.broker()?, &args),
        Command::History(args) => approvals::history(&workspace.broker()?, &args),
        Command::Stats(args) => stats::run(&workspace.broker()?, &args),
        Command::Grants(args) => grants::run(&workspace.broker()?, &args),
        Command::Audit(command) => audit::run(&workspace, &command),
        Command::Session(command) => session::run(&workspace.broker()?, &command),
        Command::Serve(args) => serve::serve(workspace, &args),
        Command::Wrap(args) => serve::wrap(workspace, &args),
        Command::Tools(args) => tools::run(&args),
        Command::Token(command) => token::run(workspace, &command),
        Command::Channels(command) => channels::run(workspace, &command),
        Command::Hook(_) => Ok(2),
        Command::Store(command) => store::run(&workspace, &command),
    }
}

/// Prints human text and a newline on stdout, every character that could
/// act on the terminal (escape sequences, carriage returns, bidi overrides)
/// shown as a visible escape; a closed stdout is not an error worth a panic.
/// Text built from an agent's strings must also escape each one-line field
/// with `safe_line`, so a newline in it cannot pose as a line of ours.
/// Milliseconds since the Unix epoch by this process's clock (the one its
/// brokers read).
pub(crate) fn now_ms() -> u64 {
    airlock_broker::clock_from_env().now_ms()
}

pub(crate) fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", airlock_core::display::safe_text(text));
}

/// Prints serialized JSON: the same value, with the characters JSON leaves
/// raw in strings (DEL, C1 controls, bidi overrides) as `\u` escapes.
pub(crate) fn print_json(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", airlock_core::display::safe_json(text));
}

/// Prints text that carries airlock's own colour codes, whose every
/// untrusted part was made safe when it was built (see [`Painted`]).
pub(crate) fn print_painted(text: &Painted) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", text.as_str());
}

/// Text with airlock's own colour codes around strings already made safe;
/// only [`approvals::describe`] makes one.
pub(crate) struct Painted(String);

impl Painted {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}
