//! What a chat message says about an approval, before any platform's
//! markup: every string in it came from an agent, a file or a person and is
//! made safe for a human here (control and direction-changing characters
//! as visible escapes); each platform then escapes it for its own markup.

use airlock_broker::{Approval, ApprovalStatus, AskForm};
use airlock_core::display::{safe_line, safe_text};
use airlock_core::envelope::Status;

/// One approval as a chat message shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Card {
    pub id: String,
    pub tool: String,
    pub risk: String,
    pub path: Option<String>,
    /// Who the call was made for, and the chat account that asked.
    pub requested_by: String,
    pub session: Option<String>,
    /// When it expires, as a time of day (UTC).
    pub expires: String,
    /// The call's arguments, redacted, as indented JSON.
    pub params: String,
    pub diff: String,
    /// Lines the diff adds and removes.
    pub added: usize,
    pub removed: usize,
    /// The web UI, where `--public-url` says people reach it.
    pub web: Option<String>,
    pub state: CardState,
}

/// Whether the card still asks, or what became of the approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CardState {
    Asking {
        /// Others of the same session and chat waiting after this one.
        waiting: usize,
        /// What "always allow" would allow, where it may be offered.
        always: Option<String>,
        require_reason: bool,
        /// What "Approve all" decides: a digest of the waiting ids, oldest
        /// first, so a button drawn for another queue decides nothing.
        batch: String,
    },
    /// What became of it; `last`: nothing more will happen to it.
    Outcome { words: String, last: bool },
}

impl Card {
    /// The card of `approval`; `form` (what may be offered) while it asks.
    pub(crate) fn new(approval: &Approval, form: Option<&AskForm>, web: Option<&str>) -> Card {
        let requested_by = match (&approval.user, &approval.requester) {
            (Some(user), Some(requester)) => format!(
                "{user} ({} user {} in chat {})",
                requester.channel, requester.user, requester.chat
            ),
            (None, Some(requester)) => format!(
                "{} user {} in chat {}",
                requester.channel, requester.user, requester.chat
            ),
            (Some(user), None) => user.clone(),
            (None, None) => approval.agent.as_ref().map_or_else(
                || "(nobody named)".to_owned(),
                |agent| format!("agent {agent}"),
            ),
        };
        let params = serde_json::from_str::<serde_json::Value>(&approval.args_display)
            .ok()
            .and_then(|value| serde_json::to_string_pretty(&value).ok())
            .unwrap_or_else(|| approval.args_display.clone());
        let (added, removed) = count_lines(&approval.diff);
        Card {
            id: approval.id.clone(),
            tool: safe_line(&approval.tool).into_owned(),
            risk: approval.risk.as_str().to_owned(),
            path: approval.path.as_deref().map(|p| safe_line(p).into_owned()),
            requested_by: safe_line(&requested_by).into_owned(),
            session: approval
                .session
                .as_deref()
                .map(|s| safe_line(s).into_owned()),
            expires: time_of_day(approval.expires_ms),
            params: safe_text(&params).into_owned(),
            diff: safe_text(&approval.diff).into_owned(),
            added,
            removed,
            web: web.map(|url| format!("{}/", url.trim_end_matches('/'))),
            state: CardState::Asking {
                waiting: 0,
                always: form
                    .and_then(|form| form.always.as_deref())
                    .map(|a| safe_line(a).into_owned()),
                require_reason: form.is_some_and(|form| form.require_reason),
                batch: String::new(),
            },
        }
        .settled(approval)
    }

    /// The card with what became of `approval` when it is no longer
    /// pending.
    pub(crate) fn settled(mut self, approval: &Approval) -> Card {
        if let Some(outcome) = outcome(approval) {
            self.state = outcome;
        }
        self
    }
}

/// What became of an approval, in words; `None` while it is pending.
fn outcome(approval: &Approval) -> Option<CardState> {
    let decided = approval.decision.as_ref();
    let who = decided.map_or_else(String::new, |decided| {
        let user = decided.user.as_deref().unwrap_or("someone");
        let via = decided
            .channel
            .map_or_else(String::new, |channel| format!(" via {channel}"));
        format!(" by {user}{via} at {}", time_of_day(decided.at_ms))
    });
    let reason = decided
        .and_then(|decided| decided.reason.as_deref())
        .map_or_else(String::new, |reason| format!(" (reason: {reason})"));
    let edited = if decided.is_some_and(|decided| decided.edited) {
        ", an edited version"
    } else {
        ""
    };
    let (words, last) = match approval.status {
        ApprovalStatus::Pending => return None,
        ApprovalStatus::Approved | ApprovalStatus::Applying => (
            format!("✅ Approved{who}{reason}{edited}; applying…"),
            false,
        ),
        ApprovalStatus::Applied => {
            let undone = if approval.undone {
                "; later undone"
            } else {
                ""
            };
            (
                format!("✅ Approved{who}{reason}{edited}; applied{undone}"),
                true,
            )
        }
        ApprovalStatus::Failed => {
            let error = approval
                .result
                .as_ref()
                .filter(|result| result.status != Status::Allowed)
                .and_then(|result| result.error.as_ref())
                .map_or_else(
                    || "the change could not be applied".to_owned(),
                    |error| format!("{}: {}", error.code, error.message),
                );
            (
                format!("⚠️ Approved{who}{reason}, but not applied: {error}"),
                true,
            )
        }
        ApprovalStatus::Denied => (format!("❌ Denied{who}{reason}"), true),
        ApprovalStatus::Expired => (
            format!(
                "⌛ Expired: no decision by {}; denied",
                time_of_day(approval.expires_ms)
            ),
            true,
        ),
        ApprovalStatus::Cancelled => (
            "🚫 Cancelled: the call that asked went away; nothing was written".to_owned(),
            true,
        ),
    };
    Some(CardState::Outcome {
        words: safe_line(&words).into_owned(),
        last,
    })
}

/// `HH:MM:SS UTC` of a Unix time in milliseconds.
pub(crate) fn time_of_day(unix_ms: u64) -> String {
    let stamp = airlock_audit::rfc3339_millis(unix_ms);
    // 2026-11-27T15:39:04.123Z
    match stamp.get(11..19) {
        Some(time) => format!("{time} UTC"),
        None => stamp,
    }
}

/// Lines a unified diff adds and removes (its headers not counted).
fn count_lines(diff: &str) -> (usize, usize) {
    let mut added = 0;
    let mut removed = 0;
    for line in diff.lines() {
        if line.starts_with("+++") || line.starts_with("---") {
            continue;
        }
        if line.starts_with('+') {
            added += 1;
        } else if line.starts_with('-') {
            removed += 1;
        }
    }
    (added, removed)
}

/// The digest an "Approve all" button carries of the approvals it decides:
/// 12 hex digits of SHA-256 over their ids, oldest first.
pub(crate) fn batch_digest<'a>(ids: impl IntoIterator<Item = &'a str>) -> String {
    let joined: Vec<&str> = ids.into_iter().collect();
    let digest = crate::platform::digest(&joined.join("\n"));
    digest[..12].to_owned()
}
