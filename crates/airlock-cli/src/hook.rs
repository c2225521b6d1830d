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

use airlock_core::hooks::install as entries;
use anyhow::anyhow;
use serde_json::Value;

use crate::workspace::{Need, Workspace};
use crate::{Failure, GlobalArgs};

#[derive(Debug, Subcommand)]
pub(crate) enum HookCommand {
    /// Claude Code's hook (PreToolUse, PermissionRequest, PostToolUse).
    ClaudeCode(RunArgs),
    /// Codex's hook (PreToolUse, PermissionRequest, PostToolUse).
    Codex(RunArgs),
    /// Gemini CLI's hook (BeforeTool, AfterTool).
    Gemini(RunArgs),
    /// Write airlock's hook into an agent's settings (merged: other keys
    /// and hooks are kept), and say what changed.
    Install(InstallArgs),
    /// Take airlock's hook out of an agent's settings.
    Uninstall(InstallArgs),
    /// Which agents are installed, whether their hooks are wired, and
    /// whether a test event comes back answered.
    Doctor,
}

/// The agents, as the command line names them.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum AgentName {
    ClaudeCode,
    Codex,
    Gemini,
}

impl AgentName {
    fn agent(self) -> Agent {
        match self {
            AgentName::ClaudeCode => Agent::ClaudeCode,
            AgentName::Codex => Agent::Codex,
            AgentName::Gemini => Agent::Gemini,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct InstallArgs {
    #[arg(value_enum)]
    agent: AgentName,
    /// The project's settings, in the workspace (the default).
    #[arg(long, conflicts_with = "user")]
    project: bool,
    /// The user's settings, in the home directory.
    #[arg(long)]
    user: bool,
    /// Show what would change; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// How long the agent waits for the hook (and so for a human), in
    /// seconds.
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    timeout: u64,
    /// The airlock program the agent runs [default: this one's path].
    #[arg(long, value_name = "PATH")]
    program: Option<std::path::PathBuf>,
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

/// Runs the hook (the exit code is the agent's to read), or installs,
/// uninstalls or checks it.
pub(crate) fn run(global: &GlobalArgs, command: &HookCommand) -> Result<u8, Failure> {
    let (agent, args) = match command {
        HookCommand::ClaudeCode(args) => (Agent::ClaudeCode, args),
        HookCommand::Codex(args) => (Agent::Codex, args),
        HookCommand::Gemini(args) => (Agent::Gemini, args),
        HookCommand::Install(args) => return install(global, args, true),
        HookCommand::Uninstall(args) => return install(global, args, false),
        HookCommand::Doctor => return doctor(global),
    };
    Ok(answer_hook(global, agent, args))
}

fn answer_hook(global: &GlobalArgs, agent: Agent, args: &RunArgs) -> u8 {
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
        Err(error) => {
            // On record where a workspace is found from here: every hook
            // invocation is audited, an unreadable one too.
            if let Ok(workspace) = Workspace::load(global, Need::Existing)
                && let Ok(broker) = workspace.broker()
            {
                broker.note(
                    airlock_broker::Record::new("hook")
                        .text("agent", agent.name())
                        .text("decision", "deny")
                        .text("status", "error")
                        .text("message", &error.to_string()),
                );
            }
            return hooks::unreadable(agent, &error.to_string());
        }
    };
    let deny = |reason: String| hooks::render(agent, event.phase, &HookVerdict::Deny { reason });
    let timeout_seconds = args
        .timeout
        .unwrap_or_else(|| agent.default_timeout_seconds())
        .max(1);
    // A running airlock elsewhere decides, when one is named.
    if let Some(url) = std::env::var("AIRLOCK_URL")
        .ok()
        .filter(|url| !url.is_empty())
    {
        let verdict = match remote(agent, &url, &input, timeout_seconds) {
            Ok(verdict) => verdict,
            Err(message) => HookVerdict::Deny {
                reason: format!("airlock: {message}"),
            },
        };
        return hooks::render(agent, event.phase, &verdict);
    }
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
    let timeout = Duration::from_secs(timeout_seconds);
    let wait = timeout
        .saturating_sub(airlock_broker::HOOK_MARGIN)
        .max(Duration::from_secs(1));
    let verdict = broker.hook(&event, wait);
    hooks::render(agent, event.phase, &verdict)
}

/// The verdict of the airlock at `url` (`POST /v1/hooks/<agent>` with
/// `AIRLOCK_TOKEN`), waited for up to `timeout_seconds`.
fn remote(
    agent: Agent,
    url: &str,
    input: &[u8],
    timeout_seconds: u64,
) -> Result<HookVerdict, String> {
    let event: Value = serde_json::from_slice(input).map_err(|error| error.to_string())?;
    let token = std::env::var("AIRLOCK_TOKEN").unwrap_or_default();
    let endpoint = format!("{}/v1/hooks/{}", url.trim_end_matches('/'), agent.name());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| error.to_string())?;
    let body = serde_json::json!({"event": event, "timeout_seconds": timeout_seconds}).to_string();
    let (status, body) = runtime
        .block_on(airlock_net::post_json(
            &endpoint,
            Some(&token),
            body,
            Duration::from_secs(timeout_seconds),
            None,
        ))
        .map_err(|error| format!("cannot reach airlock at {url}: {error}"))?;
    let answer: Value = serde_json::from_slice(&body)
        .map_err(|_| format!("airlock at {url} answered {status} with no JSON"))?;
    if !(200..300).contains(&status) {
        let message = answer["error"]["message"].as_str().unwrap_or("refused");
        return Err(format!("airlock at {url} answered {status}: {message}"));
    }
    let reason = answer["reason"].as_str().map(str::to_owned);
    Ok(match answer["verdict"].as_str() {
        Some("allow") => HookVerdict::Allow {
            reason,
            updated_input: answer
                .get("updated_input")
                .filter(|input| input.is_object())
                .cloned(),
        },
        Some("none") => HookVerdict::Pass,
        Some("notice") => HookVerdict::Notice {
            message: reason.unwrap_or_default(),
        },
        Some("deny") => HookVerdict::Deny {
            reason: reason.unwrap_or_else(|| "refused by airlock".to_owned()),
        },
        _ => return Err(format!("airlock at {url} gave no verdict")),
    })
}

/// Where `agent` keeps the settings its hooks are in: the project's (in
/// the workspace root) or the user's (in the home directory).
fn settings_path(
    global: &GlobalArgs,
    agent: Agent,
    user: bool,
) -> Result<std::path::PathBuf, Failure> {
    let base = if user {
        std::env::var_os("HOME")
            .filter(|home| !home.is_empty())
            .map(std::path::PathBuf::from)
            .ok_or_else(|| Failure::usage(anyhow!("HOME is not set: no user settings to write")))?
    } else {
        Workspace::load(global, Need::Existing)?.root
    };
    Ok(base.join(match agent {
        Agent::ClaudeCode => ".claude/settings.json",
        Agent::Codex => ".codex/hooks.json",
        Agent::Gemini => ".gemini/settings.json",
    }))
}

/// The settings at `path` (`{}` when there are none); a file that is not
/// a JSON object is refused, never overwritten.
fn read_settings(path: &std::path::Path) -> Result<Value, Failure> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(Value::Object(serde_json::Map::new())),
        Ok(text) => match serde_json::from_str::<Value>(&text) {
            Ok(value) if value.is_object() => Ok(value),
            Ok(_) => Err(Failure::usage(anyhow!(
                "{} is not a JSON object; it is left as it is",
                path.display()
            ))),
            Err(error) => Err(Failure::usage(anyhow!(
                "{} is not valid JSON ({error}); it is left as it is",
                path.display()
            ))),
        },
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Ok(Value::Object(serde_json::Map::new()))
        }
        Err(error) => Err(Failure::usage(anyhow!(
            "cannot read {}: {error}",
            path.display()
        ))),
    }
}

/// Writes `value` to `path` whole or not at all (a temporary file renamed
/// over it).
fn write_settings(path: &std::path::Path, value: &Value) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value).map_err(Failure::internal)? + "\n";
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|error| Failure::usage(anyhow!("cannot create {}: {error}", dir.display())))?;
    let temp = dir.join(format!(
        ".{}.airlock-{}",
        path.file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("settings"),
        std::process::id()
    ));
    std::fs::write(&temp, text)
        .and_then(|()| std::fs::rename(&temp, path))
        .map_err(|error| {
            let _ = std::fs::remove_file(&temp);
            Failure::usage(anyhow!("cannot write {}: {error}", path.display()))
        })
}

fn install(global: &GlobalArgs, args: &InstallArgs, add: bool) -> Result<u8, Failure> {
    let agent = args.agent.agent();
    let path = settings_path(global, agent, args.user)?;
    let settings = read_settings(&path)?;
    let (updated, changes) = if add {
        let program = match &args.program {
            Some(program) => program.clone(),
            None => std::env::current_exe().map_err(Failure::internal)?,
        };
        let program = program.to_string_lossy().into_owned();
        let program = if program.contains(char::is_whitespace) || program.contains('\'') {
            format!("'{}'", program.replace('\'', r"'\''"))
        } else {
            program
        };
        let command = format!("{program} hook {} --timeout {}", agent.name(), args.timeout);
        entries::install(agent, &settings, &command, args.timeout)
    } else {
        entries::uninstall(agent, &settings)
    }
    .map_err(|message| Failure::usage(anyhow!("{}: {message}", path.display())))?;
    let shown = path.display();
    // Settings left empty by an uninstall (ours alone were in them) go.
    let remove =
        !add && updated.as_object().is_some_and(serde_json::Map::is_empty) && path.exists();
    if changes.is_empty() || updated == settings {
        crate::print(&format!("{shown}: nothing to change"));
        return Ok(0);
    }
    for change in &changes {
        crate::print(&format!("{shown}: {change}"));
    }
    if args.dry_run {
        crate::print(&format!("(dry run: {shown} not written; it would read)"));
        crate::print_json(&serde_json::to_string_pretty(&updated).map_err(Failure::internal)?);
        return Ok(0);
    }
    if remove {
        std::fs::remove_file(&path).map_err(|error| {
            Failure::usage(anyhow!("cannot remove {}: {error}", path.display()))
        })?;
        crate::print(&format!("{shown}: removed (nothing else was in it)"));
        return Ok(0);
    }
    write_settings(&path, &updated)?;
    if add {
        match agent {
            Agent::Codex => crate::print(
                "Codex runs a new or changed hook only once you trust it: open /hooks in Codex and trust airlock's.",
            ),
            Agent::Gemini => {
                crate::print("Gemini CLI runs a project's hooks only in a trusted folder.")
            }
            Agent::ClaudeCode => {}
        }
    }
    Ok(0)
}

/// Whether a program named `name` is on `PATH`.
fn on_path(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

fn doctor(global: &GlobalArgs) -> Result<u8, Failure> {
    let workspace = Workspace::load(global, Need::Existing)?;
    let root = workspace.root.to_string_lossy().into_owned();
    let mut failed = false;
    for (agent, program) in [
        (Agent::ClaudeCode, "claude"),
        (Agent::Codex, "codex"),
        (Agent::Gemini, "gemini"),
    ] {
        let name = agent.name();
        match on_path(program) {
            Some(found) => crate::print(&format!("{name}: {program} is at {}", found.display())),
            None => crate::print(&format!("{name}: {program} is not on PATH")),
        }
        let mut wired = Vec::new();
        for user in [false, true] {
            let Ok(path) = settings_path(global, agent, user) else {
                continue;
            };
            if let Ok(settings) = read_settings(&path)
                && entries::installed(agent, &settings)
            {
                wired.push(path.display().to_string());
            }
        }
        if wired.is_empty() {
            crate::print(&format!(
                "{name}: airlock's hook is not wired (airlock hook install {name})"
            ));
        } else {
            crate::print(&format!("{name}: hook wired in {}", wired.join(", ")));
        }
        // A test event through this binary: it must come back answered.
        let event = match agent {
            Agent::Gemini => serde_json::json!({
                "hook_event_name": "BeforeTool", "cwd": root, "session_id": "airlock-doctor",
                "tool_name": "read_file", "tool_input": {"file_path": "airlock-doctor-probe"},
            }),
            _ => serde_json::json!({
                "hook_event_name": "PreToolUse", "cwd": root, "session_id": "airlock-doctor",
                "tool_name": "Read", "tool_input": {"file_path": format!("{root}/airlock-doctor-probe")},
                "tool_use_id": "airlock-doctor",
            }),
        };
        let answered = std::env::current_exe()
            .map_err(Failure::internal)
            .and_then(|exe| {
                let mut child = std::process::Command::new(exe)
                    .args(["hook", name, "--timeout", "10"])
                    .current_dir(&workspace.root)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(Failure::internal)?;
                if let Some(mut stdin) = child.stdin.take() {
                    let _ = stdin.write_all(event.to_string().as_bytes());
                }
                child.wait_with_output().map_err(Failure::internal)
            });
        match answered {
            Ok(output) => {
                let text = String::from_utf8_lossy(&output.stdout);
                let ok = output.status.code() == Some(0)
                    && (text.trim().is_empty() && agent == Agent::Codex
                        || serde_json::from_str::<Value>(&text).is_ok());
                if ok {
                    crate::print(&format!("{name}: a test event came back answered"));
                } else {
                    failed = true;
                    crate::print(&format!(
                        "{name}: a test event did not come back answered (exit {:?}): {}{}",
                        output.status.code(),
                        text.trim(),
                        String::from_utf8_lossy(&output.stderr).trim()
                    ));
                }
            }
            Err(failure) => {
                failed = true;
                crate::print(&format!(
                    "{name}: the test event could not run: {:#}",
                    failure.error
                ));
            }
        }
    }
    Ok(if failed { 1 } else { 0 })
}
