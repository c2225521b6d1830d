//! The terminal face of approvals: `call`, `pending`, `show`, `approve`, `deny`,
//! `undo`.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::Duration;

use airlock_broker::{AlwaysAllow, Broker, DecideRequest, Mode};

use crate::now_ms;
use airlock_core::Channel;
use airlock_core::display::{safe_line, safe_text};
use airlock_core::envelope::Envelope;
use airlock_store::Approval;
use anyhow::anyhow;
use clap::{Args, ValueEnum};
use serde_json::Value;

use crate::{Failure, Painted, print, print_json, print_painted};

#[derive(Debug, Args)]
pub(crate) struct CallArgs {
    #[command(flatten)]
    call: crate::check::CallSpec,
    /// Return hitl_required at once instead of waiting for a decision.
    #[arg(long, conflicts_with = "yes")]
    defer: bool,
    /// The person at this terminal approves the call now.
    #[arg(long)]
    yes: bool,
    /// The reason for --yes, where the risk requires one.
    #[arg(long, value_name = "R", requires = "yes")]
    reason: Option<String>,
}

/// `airlock exec -- CMD…`: `airlock call exec` with `argv` from the words.
#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The working directory, workspace-relative.
    #[arg(long, value_name = "DIR")]
    cwd: Option<String>,
    /// The session the call belongs to.
    #[arg(long, value_name = "S")]
    session: Option<String>,
    /// The user the call is made for.
    #[arg(long, value_name = "U")]
    user: Option<String>,
    /// Return hitl_required at once instead of waiting for a decision.
    #[arg(long, conflicts_with = "yes")]
    defer: bool,
    /// The person at this terminal approves the call now.
    #[arg(long)]
    yes: bool,
    /// The reason for --yes, where the risk requires one.
    #[arg(long, value_name = "R", requires = "yes")]
    reason: Option<String>,
    /// The program and its arguments (no shell; `bash -c '…'` for one).
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// `airlock call` of `spec`, as another command builds it.
pub(crate) fn call_with(
    broker: Broker,
    spec: crate::check::CallSpec,
    defer: bool,
    yes: bool,
    reason: Option<String>,
) -> Result<u8, Failure> {
    let call = CallArgs {
        call: spec,
        defer,
        yes,
        reason,
    };
    self::call(broker, &call)
}

/// `airlock exec -- CMD…`.
pub(crate) fn exec(broker: Broker, args: &ExecArgs) -> Result<u8, Failure> {
    let mut call_args = serde_json::json!({"argv": args.command});
    if let Some(cwd) = &args.cwd {
        call_args["cwd"] = serde_json::Value::String(cwd.clone());
    }
    let call = CallArgs {
        call: crate::check::CallSpec {
            tool: "exec".to_owned(),
            args: call_args.to_string(),
            user: args.user.clone(),
            agent: None,
            session: args.session.clone(),
            profile: None,
            context_id: None,
            requester: None,
        },
        defer: args.defer,
        yes: args.yes,
        reason: args.reason.clone(),
    };
    self::call(broker, &call)
}

#[derive(Debug, Args)]
pub(crate) struct PendingArgs {
    /// Only this session's approvals.
    #[arg(long, value_name = "S")]
    session: Option<String>,
    /// One JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// The approval id (hitl-…).
    id: String,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Scope {
    Session,
    Persistent,
}

#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    /// The approval id (hitl-…) or a unique prefix of it.
    #[arg(required_unless_present = "all")]
    id: Option<String>,
    #[command(flatten)]
    batch: BatchArgs,
    /// Why; required for risks whose policy says require_reason.
    #[arg(long, value_name = "R")]
    reason: Option<String>,
    /// Also allow, from now on and without asking, every later call of this
    /// tool on this path with any content (any arguments, for a tool that
    /// names no path), for the same user; only where the policy allows
    /// skipping. `airlock show ID` states exactly what it would allow.
    #[arg(long)]
    always: bool,
    /// Where the always-allow applies: the call's session only, or every
    /// session [default: session; a call made in no session needs
    /// `--scope persistent`].
    #[arg(long, value_enum, requires = "always")]
    scope: Option<Scope>,
    /// How long the always-allow lasts (30s, 10m, 2h, 7d) [default:
    /// approvals.grant_ttl, 8h].
    #[arg(long = "for", value_name = "DURATION", requires = "always")]
    for_duration: Option<String>,
    /// Print the envelope as JSON (the default when stdout is not a terminal).
    #[arg(long)]
    json: bool,
    /// Edit the proposed content in $VISUAL or $EDITOR first, and approve
    /// the edited version (a write of one file only).
    #[arg(long, conflicts_with = "always")]
    edit: bool,
}

/// `--all [--session S] [--tool T]`: every pending approval that matches,
/// each its own decision, in creation order.
#[derive(Debug, Args)]
pub(crate) struct BatchArgs {
    /// Decide every pending approval (of --session, of --tool), oldest
    /// first; approving stops at the first change that cannot be applied.
    #[arg(long, conflicts_with = "id")]
    all: bool,
    /// With --all: only this session's approvals.
    #[arg(long, value_name = "S", requires = "all")]
    session: Option<String>,
    /// With --all: only this tool's approvals.
    #[arg(long, value_name = "T", requires = "all")]
    tool: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct DenyArgs {
    /// The approval id (hitl-…) or a unique prefix of it.
    #[arg(required_unless_present = "all")]
    id: Option<String>,
    #[command(flatten)]
    batch: BatchArgs,
    /// Why.
    #[arg(long, value_name = "R")]
    reason: Option<String>,
    /// Print the envelope as JSON (the default when stdout is not a terminal).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct UndoArgs {
    /// The id of an applied approval.
    id: String,
    /// Print the envelope as JSON (the default when stdout is not a terminal).
    #[arg(long)]
    json: bool,
}

/// The person at this terminal, who holds every role (DESIGN §7).
pub(crate) fn terminal_user() -> String {
    ["AIRLOCK_USER", "USER", "LOGNAME"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|value| !value.is_empty()))
        .unwrap_or_else(|| "local".to_owned())
}

pub(crate) fn call(broker: Broker, args: &CallArgs) -> Result<u8, Failure> {
    let broker = std::sync::Arc::new(broker);
    // The approval this call waits for, if any: an interrupt cancels it, so that
    // nobody approves a change whose caller is gone. The main thread reports it,
    // so the exit code cannot race the waiting loop seeing the cancellation.
    let waiting: std::sync::Arc<std::sync::Mutex<Option<String>>> = Default::default();
    let interrupt = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(NOT_INTERRUPTED));
    {
        let (broker, waiting, interrupt) = (broker.clone(), waiting.clone(), interrupt.clone());
        ctrlc::set_handler(move || {
            // First of all: the call, however far it got, does not report
            // before this handler is done with it.
            interrupt.store(CANCELLING, Ordering::SeqCst);
            let id = waiting.lock().ok().and_then(|id| id.clone());
            let Some(id) = id else {
                // Not waiting yet, as far as this thread knows; an approval may
                // already exist for this call, though: cancel it too.
                for id in broker.cancel_own_waits() {
                    eprintln!("interrupted: {id} cancelled");
                }
                broker.flush_audit();
                std::process::exit(130);
            };
            let outcome = if broker.cancel(&id).is_some() {
                CANCELLED
            } else {
                // Already decided: the call finishes with that decision.
                NOT_INTERRUPTED
            };
            interrupt.store(outcome, Ordering::SeqCst);
        })
        .map_err(Failure::internal)?;
    }
    let broker = broker.as_ref();
    let call = args.call.to_call(broker.policy(), None)?;
    let mode = if args.yes {
        Mode::ApproveNow {
            user: terminal_user(),
            reason: args.reason.clone(),
        }
    } else if args.defer {
        Mode::Defer
    } else {
        airlock_broker::default_mode(broker.config())
    };
    let envelope = broker.submit(&call, &mode, &|approval: &Approval| {
        if let Ok(mut id) = waiting.lock() {
            *id = Some(approval.id.clone());
        }
        let seconds = approval.expires_ms.saturating_sub(now_ms()).div_ceil(1000);
        eprintln!(
            "waiting up to {seconds}s for a decision on {id} ({risk} risk, {summary}):\n  airlock approve {id}   or   airlock deny {id}   or   airlock watch",
            id = approval.id,
            risk = approval.risk,
            summary = safe_line(&approval.summary),
        );
    });
    // The interrupt handler keeps the broker alive to the end: its audit
    // records are synced here, not by dropping it.
    broker.flush_audit();
    while interrupt.load(Ordering::SeqCst) == CANCELLING {
        std::thread::sleep(Duration::from_millis(5));
    }
    if interrupt.load(Ordering::SeqCst) == CANCELLED {
        let id = envelope
            .hitl
            .as_ref()
            .map_or("", |hitl| hitl.hitl_id.as_str());
        eprintln!("interrupted: {id} cancelled");
        print_envelope(&envelope)?;
        return Ok(130);
    }
    print_envelope(&envelope)
}

const NOT_INTERRUPTED: u8 = 0;
const CANCELLING: u8 = 1;
const CANCELLED: u8 = 2;

pub(crate) fn print_envelope(envelope: &Envelope) -> Result<u8, Failure> {
    let text = serde_json::to_string_pretty(envelope).map_err(Failure::internal)?;
    print_json(&text);
    Ok(envelope.status.exit_code())
}

pub(crate) fn pending(broker: &Broker, args: &PendingArgs) -> Result<u8, Failure> {
    let approvals = broker
        .pending(args.session.as_deref())
        .map_err(Failure::internal)?;
    if args.json {
        return print_views(&approvals);
    }
    if approvals.is_empty() {
        print("no pending approvals");
        return Ok(0);
    }
    let now = now_ms();
    // EXPIRES is what is left of the approval's time: its timeout while a
    // call waits for it, its deferred TTL otherwise (`airlock check` says
    // both for a call).
    let mut out = format!(
        "{:<41} {:<8} {:<11} {:>7} {:<8} {:<12} {}\n",
        "ID", "RISK", "TOOL", "EXPIRES", "MODE", "SESSION", "SUMMARY"
    );
    for approval in &approvals {
        let _ = writeln!(
            out,
            "{:<41} {:<8} {:<11} {:>6}s {:<8} {:<12} {}",
            safe_line(&approval.id),
            approval.risk,
            safe_line(&approval.tool),
            approval.expires_ms.saturating_sub(now).div_ceil(1000),
            if approval.waiter_pid.is_some() {
                "waiting"
            } else {
                "deferred"
            },
            safe_line(approval.session.as_deref().unwrap_or("-")),
            safe_line(&approval.summary)
        );
    }
    print(out.trim_end());
    Ok(0)
}

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// Only approvals made in this last while (30s, 10m, 2h, 7d).
    #[arg(long, value_name = "DURATION")]
    since: Option<String>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// One JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

/// Approvals as the JSON array `--json` prints.
fn print_views(approvals: &[Approval]) -> Result<u8, Failure> {
    let list: Vec<Value> = approvals
        .iter()
        .map(airlock_broker::approval_view)
        .collect();
    let text = serde_json::to_string_pretty(&list).map_err(Failure::internal)?;
    print_json(&text);
    Ok(0)
}

/// `airlock history`: decided, applied, undone, expired and cancelled
/// approvals, newest first, so the id to show or undo can be found.
pub(crate) fn history(broker: &Broker, args: &HistoryArgs) -> Result<u8, Failure> {
    let now = now_ms();
    let since = match &args.since {
        Some(text) => now.saturating_sub(
            parse_duration(text)?
                .as_millis()
                .try_into()
                .unwrap_or(u64::MAX),
        ),
        None => 0,
    };
    let approvals = broker
        .history(since, args.limit)
        .map_err(Failure::internal)?;
    if args.json {
        return print_views(&approvals);
    }
    if approvals.is_empty() {
        print("no decided approvals yet");
        return Ok(0);
    }
    let mut out = format!(
        "{:<41} {:<9} {:<11} {:>8} {:<18} {}\n",
        "ID", "STATUS", "TOOL", "AGO", "DECIDED BY", "SUMMARY"
    );
    for approval in &approvals {
        let mismatch = approval
            .result
            .as_ref()
            .and_then(|result| result.data.as_ref())
            .is_some_and(|data| data.get("apply_mismatch").is_some());
        let status = if approval.undone {
            "undone".to_owned()
        } else if mismatch {
            "mismatch".to_owned()
        } else {
            approval.status.to_string()
        };
        let at = approval
            .decision
            .as_ref()
            .map_or(approval.created_ms, |decided| decided.at_ms);
        let by = approval
            .decision
            .as_ref()
            .map_or("-".to_owned(), |decided| {
                match (&decided.user, decided.channel) {
                    (Some(user), Some(channel)) => format!("{} via {channel}", safe_line(user)),
                    (Some(user), None) => safe_line(user).into_owned(),
                    (None, _) => decided.by.as_str().to_owned(),
                }
            });
        let _ = writeln!(
            out,
            "{:<41} {:<9} {:<11} {:>8} {:<18} {}",
            safe_line(&approval.id),
            status,
            safe_line(&approval.tool),
            ago(now.saturating_sub(at)),
            by,
            safe_line(&approval.summary)
        );
    }
    print(out.trim_end());
    Ok(0)
}

/// `95000` ms as "1m35s ago"-style "1m".
fn ago(ms: u64) -> String {
    let seconds = ms / 1000;
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds / 60),
        3600..86_400 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

/// An approval as JSON for `pending --json` and `show --json`.
pub(crate) fn show(broker: &Broker, args: &ShowArgs) -> Result<u8, Failure> {
    let id = resolve(broker, &args.id)?;
    let approval = broker.approval(&id).map_err(|error| Failure {
        code: 5,
        error: anyhow!("{error}"),
    })?;
    if args.json {
        let text = serde_json::to_string_pretty(&airlock_broker::approval_view(&approval))
            .map_err(Failure::internal)?;
        print_json(&text);
        return Ok(0);
    }
    let colour = std::io::stdout().is_terminal();
    print_painted(&describe(&approval, colour, usize::MAX, true));
    let offers = broker.always_offers(&approval);
    let mut lines = Vec::new();
    if let Some(statement) = offers["session"].as_str() {
        lines.push(format!("  approve --always would {}", safe_line(statement)));
    }
    if let Some(statement) = offers["persistent"].as_str() {
        let flags = if approval.session.is_some() {
            "approve --always --scope persistent"
        } else {
            "approve --always"
        };
        lines.push(format!("  {flags} would {}", safe_line(statement)));
    }
    if !lines.is_empty() {
        print(&format!("\n{}", lines.join("\n")));
    }
    Ok(0)
}

/// A human description of an approval with its diff (coloured when `colour`),
/// cut to `max_diff_lines`. Everything in it that an agent, a file or an
/// upstream wrote is made safe first (each field one line, control
/// characters and bidi overrides visible), then painted.
pub(crate) fn describe(
    approval: &Approval,
    colour: bool,
    max_diff_lines: usize,
    with_expiry: bool,
) -> Painted {
    let now = now_ms();
    let field = |text: &str| safe_line(text).into_owned();
    let mut out = String::new();
    let status = if approval.undone {
        "undone (applied, then put back by airlock undo)".to_owned()
    } else {
        approval.status.to_string()
    };
    let _ = writeln!(out, "{}  {status}", field(&approval.id));
    let _ = writeln!(out, "  tool      {}", field(&approval.tool));
    let _ = writeln!(out, "  risk      {}", approval.risk);
    let _ = writeln!(out, "  summary   {}", field(&approval.summary));
    let requester = match (&approval.user, &approval.agent) {
        (Some(user), Some(agent)) => format!("{} via {}", field(user), field(agent)),
        (Some(user), None) => field(user),
        (None, Some(agent)) => field(agent),
        (None, None) => "-".to_owned(),
    };
    let _ = writeln!(out, "  requester {requester}");
    let _ = writeln!(
        out,
        "  session   {}",
        field(approval.session.as_deref().unwrap_or("-"))
    );
    if with_expiry && approval.status == airlock_store::ApprovalStatus::Pending {
        let left = approval.expires_ms.saturating_sub(now).div_ceil(1000);
        let _ = writeln!(out, "  expires   in {left}s (then denied)");
    }
    if let Some(decided) = &approval.decision {
        let _ = writeln!(
            out,
            "  decided   by {}{}{}{}",
            decided.by.as_str(),
            decided
                .user
                .as_deref()
                .map(|u| format!(" ({})", field(u)))
                .unwrap_or_default(),
            decided
                .channel
                .map(|c| format!(" via {c}"))
                .unwrap_or_default(),
            decided
                .reason
                .as_deref()
                .map(|r| format!(": {}", field(r)))
                .unwrap_or_default(),
        );
    }
    out.push('\n');
    let lines: Vec<&str> = approval.diff.lines().collect();
    for line in lines.iter().take(max_diff_lines) {
        out.push_str(&paint(&safe_text(line), colour));
        out.push('\n');
    }
    if lines.len() > max_diff_lines {
        let _ = writeln!(
            out,
            "… {} more lines (v to view all)",
            lines.len() - max_diff_lines
        );
    }
    Painted(out.trim_end().to_owned())
}

fn paint(line: &str, colour: bool) -> String {
    if !colour {
        return line.to_owned();
    }
    let code = match airlock_core::display::DiffLine::of(line) {
        airlock_core::display::DiffLine::File => "1",
        airlock_core::display::DiffLine::Add => "32",
        airlock_core::display::DiffLine::Remove => "31",
        airlock_core::display::DiffLine::Hunk => "36",
        airlock_core::display::DiffLine::Context => return line.to_owned(),
    };
    format!("\x1b[{code}m{line}\x1b[0m")
}

pub(crate) fn approve(broker: &Broker, args: &ApproveArgs) -> Result<u8, Failure> {
    if args.batch.all {
        if args.always || args.edit {
            return Err(Failure::usage(anyhow!(
                "--all decides each approval as it was proposed: no --always, no --edit"
            )));
        }
        return batch(broker, &args.batch, true, args.reason.clone(), args.json);
    }
    let id = resolve(broker, args.id.as_deref().unwrap_or_default())?;
    let approval = broker
        .approval(&id)
        .map_err(|error| Failure::with_code(5, error_line(&error)))?;
    if approval.status == airlock_store::ApprovalStatus::Pending
        && approval.terms.require_reason
        && args
            .reason
            .as_deref()
            .is_none_or(|reason| reason.trim().is_empty())
    {
        return Err(Failure::usage(anyhow!(
            "approving a {} risk call requires a reason: airlock approve {id} --reason \"why\"",
            approval.risk
        )));
    }
    if args.always && args.scope.is_none() && approval.session.is_none() {
        // The only always-allow there is here covers every session: it is
        // made only when asked for by name, after being stated.
        let statement = broker
            .grant_terms(
                &approval,
                AlwaysAllow {
                    persistent: true,
                    for_ms: None,
                },
            )
            .map(|terms| safe_line(&terms.statement()).into_owned())
            .map_err(|error| Failure::with_code(2, error_line(&error)))?;
        return Err(Failure::usage(anyhow!(
            "this call was made in no session, so --always would {statement}; to make that grant, say so: airlock approve {id} --always --scope persistent"
        )));
    }
    let always = if args.always {
        Some(AlwaysAllow {
            persistent: match args.scope {
                Some(scope) => scope == Scope::Persistent,
                None => false,
            },
            for_ms: match &args.for_duration {
                Some(text) => Some(
                    parse_duration(text)?
                        .as_millis()
                        .try_into()
                        .unwrap_or(u64::MAX),
                ),
                None => None,
            },
        })
    } else {
        None
    };
    let content = if args.edit {
        edit_in_editor(broker, &id)?
    } else {
        None
    };
    decide(
        broker,
        &id,
        &DecideRequest {
            approve: true,
            reason: args.reason.clone(),
            always,
            authority: airlock_broker::Authority::Terminal,
            user: terminal_user(),
            channel: Channel::Terminal,
            content,
        },
        args.json,
    )
}

/// Opens the proposed content of `id` in the user's editor and returns the
/// edited version (`None` when it was left as proposed). An editor that
/// fails decides nothing.
fn edit_in_editor(broker: &Broker, id: &str) -> Result<Option<Vec<u8>>, Failure> {
    let refuse = |code: u8, message: String| Failure {
        code,
        error: anyhow!(message),
    };
    let approval = broker
        .approval(id)
        .map_err(|error| refuse(5, error_line(&error)))?;
    let proposed = airlock_broker::proposed_content(&approval).ok_or_else(|| {
        refuse(
            5,
            format!("invalid_input: {id} cannot be edited: only a write of one UTF-8 file can be"),
        )
    })?;
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|name| {
            std::env::var(name)
                .ok()
                .filter(|value| !value.trim().is_empty())
        })
        .unwrap_or_else(|| "vi".to_owned());
    // A private file with the target's extension (so the editor highlights
    // it), and nothing else of the agent-chosen name.
    let extension: String = approval
        .path
        .as_deref()
        .and_then(|path| std::path::Path::new(path).extension())
        .map(|extension| extension.to_string_lossy().into_owned())
        .filter(|extension| {
            extension.len() <= 12 && extension.bytes().all(|b| b.is_ascii_alphanumeric())
        })
        .unwrap_or_else(|| "txt".to_owned());
    let name = format!("proposed.{extension}");
    let dir = tempfile::Builder::new()
        .prefix("airlock-edit-")
        .tempdir()
        .map_err(|error| refuse(1, format!("cannot create a file to edit: {error}")))?;
    let file = dir.path().join(name);
    std::fs::write(&file, &proposed)
        .map_err(|error| refuse(1, format!("cannot write {}: {error}", file.display())))?;
    // Through the shell, so EDITOR may carry arguments ("code --wait").
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(&file)
        .status()
        .map_err(|error| refuse(1, format!("cannot run the editor {editor:?}: {error}")))?;
    if !status.success() {
        return Err(refuse(
            1,
            format!("the editor {editor:?} failed ({status}); nothing was decided"),
        ));
    }
    let edited = std::fs::read(&file)
        .map_err(|error| refuse(1, format!("cannot read {}: {error}", file.display())))?;
    if edited == proposed.as_bytes() {
        eprintln!("airlock: the content was left as proposed");
        return Ok(None);
    }
    Ok(Some(edited))
}

pub(crate) fn deny(broker: &Broker, args: &DenyArgs) -> Result<u8, Failure> {
    if args.batch.all {
        return batch(broker, &args.batch, false, args.reason.clone(), args.json);
    }
    let id = resolve(broker, args.id.as_deref().unwrap_or_default())?;
    decide(
        broker,
        &id,
        &DecideRequest {
            approve: false,
            reason: args.reason.clone(),
            always: None,
            authority: airlock_broker::Authority::Terminal,
            user: terminal_user(),
            channel: Channel::Terminal,
            content: None,
        },
        args.json,
    )
}

fn decide(broker: &Broker, id: &str, request: &DecideRequest, json: bool) -> Result<u8, Failure> {
    let envelope = broker
        .decide(id, request)
        .map_err(|error| Failure::with_code(5, error_line(&error)))?;
    if json || !std::io::stdout().is_terminal() {
        return print_envelope(&envelope);
    }
    let id = envelope
        .hitl
        .as_ref()
        .map_or(id.to_owned(), |hitl| hitl.hitl_id.clone());
    let mut line = format!("{id}: {}", outcome_words(&envelope, request.approve));
    if request.always.is_some() && envelope.status == airlock_core::envelope::Status::Allowed {
        // The grant the decision made, as it stands in the store.
        if let Some(grant) = broker.grants().ok().and_then(|grants| {
            grants
                .into_iter()
                .find(|grant| grant.approval_id.as_deref() == Some(id.as_str()))
        }) {
            let terms = broker.terms_of(&grant);
            let _ = write!(line, "; {}: {}", grant.id, safe_line(&terms.statement()));
        }
    }
    print(&line);
    Ok(envelope.status.exit_code())
}

/// `approve --all` / `deny --all`: one line per approval on a terminal (a
/// JSON array otherwise); the exit code of the first that did not go as
/// asked, else 0.
fn batch(
    broker: &Broker,
    args: &BatchArgs,
    approve: bool,
    reason: Option<String>,
    json: bool,
) -> Result<u8, Failure> {
    let ids = broker
        .pending_matching(args.session.as_deref(), args.tool.as_deref())
        .map_err(Failure::internal)?;
    if ids.is_empty() {
        print("no pending approvals match");
        return Ok(0);
    }
    let request = DecideRequest {
        approve,
        reason,
        always: None,
        authority: airlock_broker::Authority::Terminal,
        user: terminal_user(),
        channel: Channel::Terminal,
        content: None,
    };
    let outcomes = broker
        .decide_batch(&ids, &request)
        .map_err(|error| Failure::with_code(2, error_line(&error)))?;
    let mut code = 0;
    let mut lines = Vec::new();
    let mut list = Vec::new();
    for (id, outcome) in &outcomes {
        match outcome {
            airlock_broker::BatchOutcome::Decided(envelope) => {
                let expected = if approve {
                    airlock_core::envelope::Status::Allowed
                } else {
                    airlock_core::envelope::Status::Denied
                };
                if envelope.status != expected && code == 0 {
                    code = envelope.status.exit_code();
                }
                lines.push(format!("{id}: {}", outcome_words(envelope, approve)));
                list.push(
                    serde_json::json!({"id": id, "outcome": "decided", "envelope": envelope}),
                );
            }
            airlock_broker::BatchOutcome::Refused(error) => {
                if code == 0 {
                    code = 5;
                }
                lines.push(format!("{id}: not decided: {}", error_line(error)));
                list.push(serde_json::json!({"id": id, "outcome": "refused",
                    "error": {"code": error.code().as_str(), "message": error.to_string()}}));
            }
            airlock_broker::BatchOutcome::Skipped => {
                lines.push(format!(
                    "{id}: left pending (an earlier change in this batch could not be applied)"
                ));
                list.push(serde_json::json!({"id": id, "outcome": "skipped"}));
            }
        }
    }
    if json || !std::io::stdout().is_terminal() {
        let text = serde_json::to_string_pretty(&list).map_err(Failure::internal)?;
        print_json(&text);
    } else {
        print(&lines.join("\n"));
    }
    Ok(code)
}

/// What became of a decided (or undone) approval, in a few words.
fn outcome_words(envelope: &Envelope, approve: bool) -> String {
    use airlock_core::envelope::Status;
    match (&envelope.status, &envelope.error) {
        (Status::Allowed, _) if approve => "approved and applied".to_owned(),
        (Status::Allowed, _) => "done".to_owned(),
        (Status::Denied, _) => "denied".to_owned(),
        (_, Some(error)) if approve => format!(
            "approved, but not applied: {}: {}",
            error.code,
            safe_line(&error.message)
        ),
        (_, Some(error)) => format!("{}: {}", error.code, safe_line(&error.message)),
        (status, None) => format!("{status:?}").to_lowercase(),
    }
}

pub(crate) fn undo(broker: &Broker, args: &UndoArgs) -> Result<u8, Failure> {
    let id = resolve(broker, &args.id)?;
    let envelope = broker
        .undo(&id, &terminal_user())
        .map_err(|error| Failure::with_code(5, error_line(&error)))?;
    if args.json || !std::io::stdout().is_terminal() {
        return print_envelope(&envelope);
    }
    let words = match envelope.status {
        airlock_core::envelope::Status::Allowed => {
            "undone: the content before it is back".to_owned()
        }
        _ => outcome_words(&envelope, false),
    };
    print(&format!("{id}: {words}"));
    Ok(envelope.status.exit_code())
}

/// The approval id an argument names (a whole id or a unique prefix); an
/// unknown or ambiguous one is a usage error (exit 2).
pub(crate) fn resolve(broker: &Broker, given: &str) -> Result<String, Failure> {
    broker
        .resolve_id(given)
        .map_err(|error| Failure::with_code(2, error_line(&error)))
}

/// `30s`, `10m`, `2h`, `7d`, or plain seconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, Failure> {
    airlock_core::config::parse_duration_seconds(text)
        .map(Duration::from_secs)
        .ok_or_else(|| Failure::usage(anyhow!("invalid duration {text:?}: use 30s, 10m, 2h or 7d")))
}

/// A broker error as one line led by its code (`not_found: …`), the code said
/// once (a refusal's own text already starts with it).
pub(crate) fn error_line(error: &airlock_broker::BrokerError) -> String {
    let code = error.code();
    let text = error.to_string();
    if text.starts_with(&format!("{code}: ")) {
        text
    } else {
        format!("{code}: {text}")
    }
}
