//! `airlock watch`: approve or deny requests as they arrive, at the terminal.
//!
//! Each new pending approval (oldest first, so each session's requests come in
//! order) is shown with its risk, summary, diff and a countdown. Replies follow
//! spec 001's words: `yes`, `y`, `confirm`, `ok` or `approve` approve; `v` shows the
//! whole diff; `a` approves and always allows (where the policy lets it); anything
//! else denies. At the deadline the request is denied as a timeout.

use std::collections::{HashSet, VecDeque};
use std::io::{BufRead, IsTerminal, Write};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use airlock_broker::{AlwaysAllow, Broker, DecideRequest, EventKind, FEED_POLL, FeedEvent};
use airlock_store::{Approval, ApprovalStatus};

use crate::Failure;
use crate::Painted;
use crate::approvals::{describe, terminal_user};
use airlock_core::Channel;
use airlock_core::display::{safe_line, safe_text};

/// How often the countdown is redrawn while a request is shown.
const TICK: Duration = Duration::from_millis(100);

/// Reads the event feed from where it stood at the start: every new
/// approval is queued and shown in turn (those already pending first); what
/// happens to an approval elsewhere is told in one line, in the order it
/// happened.
/// `airlock watch [--session S]`.
#[derive(Debug, clap::Args)]
pub(crate) struct WatchArgs {
    /// Only this session's approvals (a durable session's id, or a label).
    #[arg(long, value_name = "S")]
    session: Option<String>,
}

pub(crate) fn run(broker: &Broker, args: &WatchArgs) -> Result<u8, Failure> {
    let session = args.session.as_deref();
    let lines = stdin_lines();
    let colour = std::io::stdout().is_terminal();
    // The feed's position first: whatever happens once the user is told
    // that watching began is seen.
    let mut cursor = broker.cursor().map_err(Failure::internal)?.seq;
    // While this runs, a call from a client that cannot ask its human
    // waits for this terminal (`elicitation_fallback: auto`).
    let _live = broker
        .announce(airlock_broker::LiveChannel::Watch)
        .map_err(|error| Failure::internal(anyhow::anyhow!("cannot announce watch: {error}")))?;
    say("watching for approvals (ctrl-d to stop)");
    broker.expire_overdue().map_err(Failure::internal)?;
    let mut queue: VecDeque<String> = broker
        .pending(session)
        .map_err(Failure::internal)?
        .into_iter()
        .map(|approval| approval.id.clone())
        .collect();
    // Approvals shown at this terminal: their later events are not news.
    let mut mine: HashSet<String> = HashSet::new();
    // Approvals whose creation was told (or that were shown).
    let mut told: HashSet<String> = HashSet::new();
    loop {
        for event in broker
            .events_after(cursor, 256)
            .map_err(Failure::internal)?
        {
            cursor = event.seq;
            if let Some(session) = session
                && !of_session(broker, &event, session)
            {
                continue;
            }
            tell(broker, &event, &mut queue, &mine, &mut told);
        }
        if let Some(id) = queue.pop_front() {
            let approval = broker.approval(&id).map_err(Failure::internal)?;
            if approval.status != ApprovalStatus::Pending {
                // Settled before its turn: its events say how.
                continue;
            }
            if broker.now_ms() >= approval.expires_ms {
                broker.expire(&approval.id);
                continue;
            }
            mine.insert(approval.id.clone());
            told.insert(approval.id.clone());
            if !present(broker, &approval, &lines, colour, 1 + queue.len())? {
                return Ok(0);
            }
            continue;
        }
        // Nothing to show: wait for the feed (or the end of input), and
        // expire what runs out meanwhile.
        match lines.recv_timeout(FEED_POLL) {
            Ok(Some(_)) | Err(RecvTimeoutError::Timeout) => {}
            Ok(None) | Err(RecvTimeoutError::Disconnected) => return Ok(0),
        }
        if broker
            .next_expiry()
            .map_err(Failure::internal)?
            .is_some_and(|at| broker.now_ms() >= at)
        {
            broker.expire_overdue().map_err(Failure::internal)?;
        }
    }
}

/// Whether `event` is about an approval of `session` (with `--session`,
/// the others are neither shown nor told).
fn of_session(broker: &Broker, event: &FeedEvent, session: &str) -> bool {
    let Some(id) = event
        .subject
        .as_deref()
        .filter(|_| event.kind.is_approval())
    else {
        return false;
    };
    broker
        .approval(id)
        .is_ok_and(|approval| approval.session.as_deref() == Some(session))
}

/// What one event means here: a new approval joins the queue; any other
/// event about an approval not shown at this terminal is told, after its
/// creation if that was not told yet (it never came up here).
fn tell(
    broker: &Broker,
    event: &FeedEvent,
    queue: &mut VecDeque<String>,
    mine: &HashSet<String>,
    told: &mut HashSet<String>,
) {
    let Some(id) = event
        .subject
        .as_deref()
        .filter(|_| event.kind.is_approval())
    else {
        return;
    };
    if event.kind == EventKind::ApprovalCreated {
        if !queue.iter().any(|queued| queued == id) {
            queue.push_back(id.to_owned());
        }
        return;
    }
    if mine.contains(id) {
        return;
    }
    queue.retain(|queued| queued != id);
    let what = match event.kind {
        EventKind::ApprovalDecided => format!(
            "{} elsewhere{}",
            event.data["status"].as_str().unwrap_or("decided"),
            event.data["channel"]
                .as_str()
                .map(|channel| format!(" (via {})", safe_line(channel)))
                .unwrap_or_default()
        ),
        EventKind::ApprovalApplied => "applied".to_owned(),
        EventKind::ApprovalFailed => "failed".to_owned(),
        EventKind::ApprovalExpired => match broker.approval(id) {
            Ok(approval) => expired_words(&approval),
            Err(_) => "expired: denied".to_owned(),
        },
        EventKind::ApprovalCancelled => "cancelled".to_owned(),
        EventKind::ApprovalUndone => "undone".to_owned(),
        EventKind::ApprovalMismatch => format!(
            "apply_mismatch: the agent left {} not as approved",
            event.data["files"]
                .as_array()
                .map(|files| {
                    files
                        .iter()
                        .filter_map(|file| file["path"].as_str())
                        .map(|path| safe_line(path).into_owned())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        ),
        _ => return,
    };
    if told.insert(id.to_owned())
        && let Ok(approval) = broker.approval(id)
    {
        say(&format!(
            "{id}: new: {} ({} risk)",
            safe_line(&approval.summary),
            approval.risk
        ));
    }
    say(&format!("{id}: {what}"));
}

/// Shows one approval and takes the decision. `Ok(false)` when input ended.
fn present(
    broker: &Broker,
    approval: &Approval,
    lines: &Receiver<Option<String>>,
    colour: bool,
    waiting: usize,
) -> Result<bool, Failure> {
    let allow_skip = approval.terms.allow_skip;
    let require_reason = approval.terms.require_reason;
    say(&format!(
        "\n[!] APPROVAL REQUIRED ({} risk), 1 of {waiting} waiting",
        approval.risk.as_str().to_uppercase()
    ));
    // The prompt counts down: the description shows no second clock.
    say_painted(&describe(approval, colour, 40, false));
    // What `a` would grant, said before anyone presses it.
    let always = AlwaysAllow {
        persistent: approval.session.is_none(),
        for_ms: None,
    };
    let grant = if allow_skip {
        broker.grant_terms(approval, always).ok()
    } else {
        None
    };
    if let Some(terms) = &grant {
        say(&format!(
            "[a]lways = approve, and {}",
            safe_line(&terms.statement())
        ));
    }
    let choices = if grant.is_some() {
        "[y]es  [n]o  [v]iew  [a]lways"
    } else {
        "[y]es  [n]o  [v]iew"
    };
    loop {
        let left = seconds_left(broker, approval);
        prompt(&format!("{choices}  (auto-deny in {left}s) > "));
        let Some(answer) = next_answer(broker, approval, lines, Some((choices, left)))? else {
            return Ok(false);
        };
        let answer = match answer {
            Answer::Line(line) => line,
            Answer::Settled(message) => {
                say(&message);
                return Ok(true);
            }
        };
        let word = answer.trim().to_lowercase();
        let (approve, always) = match word.as_str() {
            "yes" | "y" | "confirm" | "ok" | "approve" => (true, false),
            "v" | "view" => {
                say_painted(&describe(approval, colour, usize::MAX, false));
                continue;
            }
            "a" | "always" if grant.is_some() => (true, true),
            "a" | "always" => {
                say("always-allow is not permitted for this risk");
                continue;
            }
            "n" | "no" | "deny" | "reject" => (false, false),
            _ => {
                // A typo or a bare Enter decides nothing: only a no denies.
                say(&format!(
                    "not understood: {}; y approves, n denies, v shows the whole diff{}",
                    if word.is_empty() {
                        "an empty answer".to_owned()
                    } else {
                        format!("{:?}", safe_line(&word))
                    },
                    if grant.is_some() {
                        ", a approves and always allows"
                    } else {
                        ""
                    }
                ));
                continue;
            }
        };
        let reason = if approve && require_reason {
            prompt("reason (required) > ");
            match next_answer(broker, approval, lines, None)? {
                None => return Ok(false),
                Some(Answer::Settled(message)) => {
                    say(&message);
                    return Ok(true);
                }
                Some(Answer::Line(line)) if line.trim().is_empty() => {
                    say("a reason is required to approve; not approved");
                    continue;
                }
                Some(Answer::Line(line)) => Some(line.trim().to_owned()),
            }
        } else {
            None
        };
        let request = DecideRequest {
            approve,
            reason,
            always: always.then_some(AlwaysAllow {
                persistent: approval.session.is_none(),
                for_ms: None,
            }),
            authority: airlock_broker::Authority::Terminal,
            user: terminal_user(),
            channel: Channel::Terminal,
            content: None,
        };
        match broker.decide(&approval.id, &request) {
            Ok(envelope) => say(&format!(
                "{}: {}{}{}",
                approval.id,
                if approve { "approved" } else { "denied" },
                match (&grant, always, envelope.status) {
                    (Some(terms), true, airlock_core::envelope::Status::Allowed) => {
                        format!("; from now on {}", safe_line(&terms.statement()))
                    }
                    _ => String::new(),
                },
                match (&envelope.error, envelope.status) {
                    (Some(error), airlock_core::envelope::Status::Error) => {
                        format!(
                            ", but applying failed: {}: {}",
                            error.code,
                            safe_line(&error.message)
                        )
                    }
                    _ => String::new(),
                }
            )),
            Err(error) => say(&format!(
                "{}: not decided: {}",
                approval.id,
                safe_line(&error.to_string())
            )),
        }
        return Ok(true);
    }
}

enum Answer {
    Line(String),
    /// The approval was settled elsewhere or timed out.
    Settled(String),
}

/// Waits for a line, while watching the approval's status and deadline. With
/// `countdown` (the choices, and the seconds the prompt shows now), the
/// prompt line is redrawn as the seconds run out: every change of the
/// seconds left is drawn, also one that came before this was called.
fn next_answer(
    broker: &Broker,
    approval: &Approval,
    lines: &Receiver<Option<String>>,
    countdown: Option<(&str, u64)>,
) -> Result<Option<Answer>, Failure> {
    let mut shown = countdown.map_or(0, |(_, left)| left);
    // No position yet: the approval is looked at once whatever the feed
    // says, so a decision taken before this was called is seen too.
    let mut cursor = None;
    loop {
        if let Some((choices, _)) = countdown {
            let left = seconds_left(broker, approval);
            if left != shown {
                shown = left;
                prompt(&format!("\r{choices}  (auto-deny in {left}s) > "));
            }
        }
        match lines.recv_timeout(TICK) {
            Ok(Some(line)) => return Ok(Some(Answer::Line(line))),
            Ok(None) | Err(RecvTimeoutError::Disconnected) => return Ok(None),
            Err(RecvTimeoutError::Timeout) => {}
        }
        // Something happened (here or elsewhere) only if the feed moved.
        let now = broker.cursor().map_err(Failure::internal)?.seq;
        if cursor == Some(now) && broker.now_ms() < approval.expires_ms {
            continue;
        }
        cursor = Some(now);
        let current = broker.approval(&approval.id).map_err(Failure::internal)?;
        if current.status != ApprovalStatus::Pending {
            return Ok(Some(Answer::Settled(format!(
                "\n{}: {} elsewhere{}",
                approval.id,
                current.status,
                current
                    .decision
                    .and_then(|decided| decided.channel)
                    .map(|channel| format!(" (via {channel})"))
                    .unwrap_or_default()
            ))));
        }
        if broker.now_ms() >= current.expires_ms {
            broker.expire(&approval.id);
            return Ok(Some(Answer::Settled(format!(
                "\n{}: {}",
                approval.id,
                expired_words(approval)
            ))));
        }
    }
}

/// "expired (no decision in 8 s): denied".
fn expired_words(approval: &Approval) -> String {
    format!(
        "expired (no decision in {} s): denied",
        approval
            .expires_ms
            .saturating_sub(approval.created_ms)
            .div_ceil(1000)
    )
}

fn seconds_left(broker: &Broker, approval: &Approval) -> u64 {
    approval
        .expires_ms
        .saturating_sub(broker.now_ms())
        .div_ceil(1000)
}

/// Reads standard input line by line on a thread; `None` marks its end.
fn stdin_lines() -> Receiver<Option<String>> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            match line {
                Ok(line) => {
                    if sender.send(Some(line)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = sender.send(None);
    });
    receiver
}

/// A line of ours, which may quote an agent's strings: shown with every
/// character that could act on the terminal made visible.
fn say(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", safe_text(text));
    let _ = stdout.flush();
}

/// An approval as [`describe`] paints it (its strings already safe).
fn say_painted(text: &Painted) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{}", text.as_str());
    let _ = stdout.flush();
}

fn prompt(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = write!(stdout, "{text}");
    let _ = stdout.flush();
}
