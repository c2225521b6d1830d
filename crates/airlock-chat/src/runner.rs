//! One runner per platform: it works from the store's state, never from
//! remembered events, so whatever changed while it was away (a decision in
//! the web UI, a restart, an outage) is put right on its next look. On
//! every change of the feed, and at least each second, it
//!
//! - posts the oldest pending confirmation of each (session, chat), the
//!   message's row claimed first so no two processes post it, and brings
//!   the approval's expiry forward to the chat's timeout;
//! - keeps each message's "N more waiting" and "Approve all N" in step;
//! - edits every decided approval's message to its outcome, whichever
//!   channel decided it.
//!
//! Presses and replies are decided on tasks of their own, on the authority
//! of the platform user's mapping in the configuration in force.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_broker::{
    AlwaysAllow, Approval, ApprovalStatus, Authority, BatchOutcome, Broker, BrokerError,
    ChatMessage, DecideRequest,
};
use airlock_core::Requester;
use airlock_core::envelope::{Envelope, Status};
use tokio::sync::{Notify, mpsc};

use crate::card::{Card, CardState};
use crate::platform::{ApiError, Inbound, Platform, Settings};
use crate::words;

/// Where the broker in force comes from (a reload swaps it).
pub type Brokers = Arc<dyn Fn() -> Arc<Broker> + Send + Sync>;

/// How often a runner looks even when the feed is quiet.
const TICK: Duration = Duration::from_secs(1);

pub(crate) struct Runner<P: Platform> {
    pub platform: Arc<P>,
    pub brokers: Brokers,
    /// The web UI's address (`--public-url`), for a link button.
    pub web: Option<String>,
    /// The platforms running in this process now: a call asked on one of
    /// them is shown there only.
    pub running: Arc<std::sync::RwLock<Vec<&'static str>>>,
    /// Batches being decided: no new message is posted meanwhile (the
    /// approvals after the first would be shown only to be decided).
    pub batches: std::sync::atomic::AtomicUsize,
    /// Posts the platform refused (a chat the bot is not in): not tried
    /// again for a while.
    pub refused: std::sync::Mutex<HashMap<(String, String), Instant>>,
    /// Refusals answered to each platform user lately: a stranger cannot
    /// flood the audit log or spend the bot's rate limit.
    pub strangers: std::sync::Mutex<HashMap<String, (Instant, u32)>>,
    /// Held (shared) while a message is posted and recorded: a press that
    /// finds no message waits for the posts in flight, then looks again.
    pub posting: tokio::sync::RwLock<()>,
}

/// How long a refused post waits before it is tried again.
const REFUSED_PAUSE: Duration = Duration::from_secs(60);
/// Refusals answered (and audited) per platform user per minute.
const REFUSALS_PER_MINUTE: u32 = 5;

impl<P: Platform> Runner<P> {
    fn name(&self) -> &'static str {
        self.platform.channel().as_str()
    }

    fn batch_running(&self) -> bool {
        self.batches.load(std::sync::atomic::Ordering::SeqCst) > 0
    }

    /// Runs until the platform is no longer configured.
    pub(crate) async fn run(self: Arc<Self>, wake: Arc<Notify>) {
        let broker = (self.brokers)();
        // A message claimed by a process that died before posting it is
        // posted again (only one process runs the channels).
        if let Ok(open) = broker.open_chat_messages(self.name()) {
            for message in open.iter().filter(|m| m.message_id.is_none()) {
                let _ = broker.release_chat_message(message);
            }
        }
        let (sender, mut inbound) = mpsc::channel(256);
        let listener = tokio::spawn(self.platform.clone().listen(sender));
        // Presses and replies are taken as they come, on tasks of their
        // own, never behind a pass that waits out a rate limit.
        let taker = {
            let runner = self.clone();
            let wake = wake.clone();
            tokio::spawn(async move {
                while let Some(event) = inbound.recv().await {
                    let runner = runner.clone();
                    let wake = wake.clone();
                    tokio::spawn(async move {
                        runner.handle(event).await;
                        wake.notify_one();
                    });
                }
            })
        };
        loop {
            // The listener ended for good (a platform's fatal refusal):
            // this runner ends too, and the channel is no longer live.
            if listener.is_finished() || !self.pass().await {
                listener.abort();
                taker.abort();
                return;
            }
            tokio::select! {
                () = wake.notified() => {}
                () = tokio::time::sleep(TICK) => {}
            }
        }
    }

    /// The chats a confirmation of `approval` goes to: the requester's chat
    /// where the requester is this platform's account of the very user the
    /// call was made for (so an agent cannot send an approval to a chat of
    /// its choosing, or away from the approvers); none where it was asked
    /// on another platform running here; else the configured chats.
    fn targets(&self, approval: &Approval, settings: &Settings) -> Vec<String> {
        match &approval.requester {
            Some(Requester {
                channel,
                chat,
                user,
            }) if channel == self.name() => {
                let own = settings
                    .users
                    .get(user)
                    .is_some_and(|mapped| approval.user.as_deref() == Some(mapped.user()));
                if own {
                    vec![chat.clone()]
                } else {
                    settings.chats.clone()
                }
            }
            Some(requester)
                if self
                    .running
                    .read()
                    .is_ok_and(|running| running.contains(&requester.channel.as_str())) =>
            {
                Vec::new()
            }
            _ => settings.chats.clone(),
        }
    }

    /// The pending approvals of each (session, chat), oldest first: a call
    /// in no session is a queue of its own.
    fn queues(
        &self,
        pending: &[Approval],
        settings: &Settings,
    ) -> Vec<((String, String), Vec<Approval>)> {
        let mut queues: Vec<((String, String), Vec<Approval>)> = Vec::new();
        for approval in pending {
            let session = approval
                .session
                .clone()
                .map_or_else(|| format!("\0{}", approval.id), |s| format!("s{s}"));
            for chat in self.targets(approval, settings) {
                let key = (session.clone(), chat);
                match queues.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, list)) => list.push(approval.clone()),
                    None => queues.push((key, vec![approval.clone()])),
                }
            }
        }
        queues
    }

    /// One look at the store; `false` once the platform is not configured.
    async fn pass(&self) -> bool {
        let broker = (self.brokers)();
        let Some(settings) = self.platform.settings(broker.config()) else {
            return false;
        };
        let looked = {
            let broker = broker.clone();
            let name = self.name();
            tokio::task::spawn_blocking(move || {
                Ok::<_, BrokerError>((broker.pending(None)?, broker.open_chat_messages(name)?))
            })
            .await
        };
        let (pending, open) = match looked {
            Ok(Ok(looked)) => looked,
            Ok(Err(error)) => {
                eprintln!("airlock: {}: reading approvals: {error}", self.name());
                return true;
            }
            Err(_) => return true,
        };
        for ((_, chat), queue) in self.queues(&pending, &settings) {
            let Some(head) = queue.first() else { continue };
            let form = broker.ask_form(&head.id).ok();
            let mut card = Card::new(head, form.as_ref(), self.web.as_deref());
            if let CardState::Asking { waiting, batch, .. } = &mut card.state {
                *waiting = queue.len() - 1;
                *batch = crate::card::batch_digest(queue.iter().map(|a| a.id.as_str()));
            }
            let existing = open
                .iter()
                .find(|m| m.approval_id == head.id && m.chat == chat);
            match existing {
                None if self.batch_running() => {}
                None => self.post(&broker, head, &chat, card, &settings).await,
                Some(message) => self.refresh(&broker, message, &card, false).await,
            }
        }
        for message in &open {
            if pending.iter().any(|a| a.id == message.approval_id) {
                continue;
            }
            let Ok(approval) = broker.approval(&message.approval_id) else {
                continue;
            };
            if approval.status == ApprovalStatus::Pending {
                // Overdue, expired on the next look.
                continue;
            }
            let card = Card::new(&approval, None, self.web.as_deref());
            let last = matches!(card.state, CardState::Outcome { last: true, .. });
            self.refresh(&broker, message, &card, last).await;
        }
        true
    }

    async fn post(
        &self,
        broker: &Broker,
        approval: &Approval,
        chat: &str,
        mut card: Card,
        settings: &Settings,
    ) {
        let _posting = self.posting.read().await;
        let key = (approval.id.clone(), chat.to_owned());
        if self.refused.lock().is_ok_and(|refused| {
            refused
                .get(&key)
                .is_some_and(|at| at.elapsed() < REFUSED_PAUSE)
        }) {
            return;
        }
        match broker.claim_chat_message(&approval.id, self.name(), chat) {
            Ok(true) => {}
            Ok(false) => return,
            Err(error) => {
                eprintln!("airlock: {}: claiming a message: {error}", self.name());
                return;
            }
        }
        let claimed = ChatMessage {
            approval_id: approval.id.clone(),
            platform: self.name().to_owned(),
            chat: chat.to_owned(),
            message_id: None,
            claimed_ms: broker.now_ms(),
            shown: String::new(),
            settled: false,
        };
        // Spec 001: a chat confirmation waits its own timeout (60 s by
        // default), never longer than the risk policy's; the message shows
        // that expiry from the start.
        let until = broker
            .now_ms()
            .saturating_add(settings.timeout.saturating_mul(1000));
        card.expires = crate::card::time_of_day(until.min(approval.expires_ms));
        match self.platform.post(chat, &card).await {
            Ok(message_id) => {
                if let Err(error) =
                    broker.posted_chat_message(&claimed, &message_id, &self.platform.digest(&card))
                {
                    eprintln!("airlock: {}: recording a message: {error}", self.name());
                }
                // From when it was shown: a slow post never leaves it less
                // than the chat's timeout.
                let shown = broker
                    .now_ms()
                    .saturating_add(settings.timeout.saturating_mul(1000));
                if let Err(error) = broker.cap_expiry(&approval.id, until.max(shown)) {
                    eprintln!(
                        "airlock: {}: setting the chat timeout: {error}",
                        self.name()
                    );
                }
            }
            Err(error) => {
                eprintln!(
                    "airlock: {}: posting {} to chat {chat}: {error}",
                    self.name(),
                    approval.id
                );
                if let (ApiError::Refused(_), Ok(mut refused)) = (&error, self.refused.lock()) {
                    refused.retain(|_, at| at.elapsed() < REFUSED_PAUSE);
                    refused.insert(key, Instant::now());
                }
                let _ = broker.release_chat_message(&claimed);
            }
        }
    }

    /// Edits `message` to show `card` when it shows something else.
    async fn refresh(&self, broker: &Broker, message: &ChatMessage, card: &Card, last: bool) {
        let Some(message_id) = &message.message_id else {
            return;
        };
        let digest = self.platform.digest(card);
        if digest == message.shown {
            if last && !message.settled {
                let _ = broker.edited_chat_message(message, &digest, true);
            }
            return;
        }
        match self.platform.edit(&message.chat, message_id, card).await {
            Ok(()) => {
                if let Err(error) = broker.edited_chat_message(message, &digest, last) {
                    eprintln!("airlock: {}: recording an edit: {error}", self.name());
                }
            }
            Err(error) => {
                eprintln!(
                    "airlock: {}: editing the message of {}: {error}",
                    self.name(),
                    message.approval_id
                );
                // Deleted, or the bot left the chat: nothing more to show
                // there.
                if matches!(error, ApiError::Refused(_)) {
                    let _ = broker.edited_chat_message(message, &message.shown, true);
                }
            }
        }
    }

    /// Decides what a press or a reply asks, if its author may.
    async fn handle(&self, inbound: Inbound) {
        let broker = (self.brokers)();
        let Some(settings) = self.platform.settings(broker.config()) else {
            return;
        };
        let message_id = match &inbound {
            Inbound::Press { message_id, .. } => message_id,
            Inbound::Reply { reply_to, .. } => reply_to,
        };
        let mut message = broker
            .chat_message_by_id(self.name(), inbound.chat(), message_id)
            .ok()
            .flatten();
        if message.as_ref().is_none_or(|m| m.message_id.is_none()) {
            // Pressed the moment it arrived, before its id was kept.
            drop(self.posting.write().await);
            message = broker
                .chat_message_by_id(self.name(), inbound.chat(), message_id)
                .ok()
                .flatten();
        }
        let Some(message) = message else {
            if matches!(inbound, Inbound::Press { .. }) {
                self.say(&inbound, "This is not a confirmation airlock knows.", true)
                    .await;
            }
            // A reply to any other message is conversation, not an answer.
            return;
        };
        let Ok(approval) = broker.approval(&message.approval_id) else {
            return;
        };
        let action = match &inbound {
            Inbound::Press { data, .. } => match parse_data(data) {
                Some((action, id)) if id == approval.id => action,
                _ => {
                    self.refuse(
                        &broker,
                        &approval,
                        &inbound,
                        None,
                        "This button is not for this confirmation.",
                    )
                    .await;
                    return;
                }
            },
            Inbound::Reply { text, .. } => {
                let answer = words::answer(text);
                if answer.approve {
                    Action::Approve(answer.reason)
                } else {
                    Action::Deny(answer.reason)
                }
            }
        };
        let platform_user = inbound.platform_user().to_owned();
        let Some(mapped) = settings.users.get(&platform_user) else {
            // Said to anyone in the chat: who may decide is not.
            let words = format!(
                "You ({} user {platform_user}) are not an approver here: only users mapped in channels.{}.users decide.",
                self.name(),
                self.name()
            );
            self.refuse(&broker, &approval, &inbound, None, &words)
                .await;
            return;
        };
        let authority = Authority::Chat {
            channel: self.platform.channel(),
            platform_user: platform_user.clone(),
            user: mapped.user().to_owned(),
            roles: mapped
                .roles()
                .iter()
                .map(|role| role_name(*role).to_owned())
                .collect(),
        };
        if let Err(error) = broker.may_decide(&approval, &authority) {
            let words = format!("Not decided: {}.", error_words(&error));
            self.refuse(&broker, &approval, &inbound, Some(mapped.user()), &words)
                .await;
            return;
        }
        let request =
            |approve: bool, reason: Option<String>, always: Option<AlwaysAllow>| DecideRequest {
                approve,
                reason,
                always,
                authority: authority.clone(),
                user: mapped.user().to_owned(),
                channel: self.platform.channel(),
                content: None,
            };
        let (approve, decided) = match action {
            Action::Approve(reason) => {
                if approval.terms.require_reason && reason.is_none() {
                    self.say(
                        &inbound,
                        "A reason is required to approve this: reply \"yes: <reason>\".",
                        true,
                    )
                    .await;
                    return;
                }
                (
                    true,
                    self.decide(&broker, &approval.id, request(true, reason, None))
                        .await,
                )
            }
            Action::Deny(reason) => (
                false,
                self.decide(&broker, &approval.id, request(false, reason, None))
                    .await,
            ),
            Action::Always => {
                let always = AlwaysAllow {
                    persistent: false,
                    for_ms: None,
                };
                (
                    true,
                    self.decide(&broker, &approval.id, request(true, None, Some(always)))
                        .await,
                )
            }
            Action::All(count, digest) => {
                let words = self
                    .approve_all(
                        &broker,
                        &approval,
                        &message.chat,
                        (count, &digest),
                        &settings,
                        request(true, None, None),
                    )
                    .await;
                self.say(&inbound, &words, false).await;
                return;
            }
        };
        let (words, refused) = match decided {
            Ok(envelope) => (outcome_words(&envelope, approve), false),
            Err(error) => (format!("Not decided: {error}."), true),
        };
        self.say(&inbound, &words, refused).await;
    }

    async fn decide(
        &self,
        broker: &Arc<Broker>,
        id: &str,
        request: DecideRequest,
    ) -> Result<Envelope, String> {
        let broker = broker.clone();
        let id = id.to_owned();
        match tokio::task::spawn_blocking(move || broker.decide(&id, &request)).await {
            Ok(decided) => decided.map_err(|error| error_words(&error)),
            Err(error) => Err(error.to_string()),
        }
    }

    /// "Approve all N": exactly the N the message counted (its session's
    /// queue in this chat, oldest first), or nothing when the queue changed
    /// since the button was drawn.
    async fn approve_all(
        &self,
        broker: &Arc<Broker>,
        head: &Approval,
        chat: &str,
        (count, digest): (usize, &str),
        settings: &Settings,
        request: DecideRequest,
    ) -> String {
        let pending = match broker.pending(None) {
            Ok(pending) => pending,
            Err(error) => return format!("Not decided: {}.", error_words(&error)),
        };
        let queue = self
            .queues(&pending, settings)
            .into_iter()
            .find(|((_, c), list)| c == chat && list.first().is_some_and(|a| a.id == head.id));
        let ids: Vec<String> = queue
            .map(|(_, list)| list.iter().map(|a| a.id.clone()).collect())
            .unwrap_or_default();
        let drawn = crate::card::batch_digest(ids.iter().map(String::as_str));
        if ids.len() != count || count == 0 || drawn != digest {
            return "The waiting calls changed since this button was drawn: nothing was decided; press the updated button.".to_owned();
        }
        let broker = broker.clone();
        self.batches
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let outcomes =
            tokio::task::spawn_blocking(move || broker.decide_batch(&ids, &request)).await;
        self.batches
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        let outcomes = match outcomes {
            Ok(Ok(outcomes)) => outcomes,
            Ok(Err(error)) => return format!("Not decided: {}.", error_words(&error)),
            Err(error) => return format!("Not decided: {error}."),
        };
        let applied = outcomes
            .iter()
            .filter(|(_, outcome)| {
                matches!(outcome, BatchOutcome::Decided(envelope) if envelope.status == Status::Allowed)
            })
            .count();
        let failed = outcomes.len() - applied;
        if failed == 0 {
            format!("Approved all {applied}: applied.")
        } else {
            format!(
                "Approved and applied {applied} of {}; the rest were not (their messages say why).",
                outcomes.len()
            )
        }
    }

    /// Whether a refusal of `platform_user` is still answered and audited
    /// ([`REFUSALS_PER_MINUTE`] a minute); past that it is dropped.
    fn may_answer(&self, platform_user: &str) -> bool {
        let Ok(mut strangers) = self.strangers.lock() else {
            return false;
        };
        strangers.retain(|_, (since, _)| since.elapsed() < Duration::from_secs(60));
        let (_, count) = strangers
            .entry(platform_user.to_owned())
            .or_insert((Instant::now(), 0));
        *count += 1;
        *count <= REFUSALS_PER_MINUTE
    }

    /// Refuses a press or reply: answered visibly, audited, nothing changed.
    async fn refuse(
        &self,
        broker: &Broker,
        approval: &Approval,
        inbound: &Inbound,
        user: Option<&str>,
        words: &str,
    ) {
        if !self.may_answer(inbound.platform_user()) {
            return;
        }
        broker.audit_chat_refusal(approval, self.name(), inbound.platform_user(), user, words);
        self.say(inbound, words, true).await;
    }

    async fn say(&self, inbound: &Inbound, words: &str, refused: bool) {
        if let Err(error) = self.platform.answer(inbound, words, refused).await {
            eprintln!("airlock: {}: answering: {error}", self.name());
        }
    }
}

/// What a button asks.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    Approve(Option<String>),
    Deny(Option<String>),
    Always,
    /// Approve all: how many, and the digest of their ids.
    All(usize, String),
}

/// A button's data: `a|ID` approve, `d|ID` deny, `s|ID` always allow,
/// `b|ID|N|DIGEST` approve the N waiting whose ids have that digest.
fn parse_data(data: &str) -> Option<(Action, String)> {
    let mut parts = data.split('|');
    let kind = parts.next()?;
    let id = parts.next()?.to_owned();
    let rest: Vec<&str> = parts.collect();
    if !id.starts_with("hitl-") || id.len() > 60 {
        return None;
    }
    match (kind, rest.as_slice()) {
        ("a", []) => Some((Action::Approve(None), id)),
        ("d", []) => Some((Action::Deny(None), id)),
        ("s", []) => Some((Action::Always, id)),
        ("b", [n, digest])
            if digest.len() == 12 && digest.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            Some((Action::All(n.parse().ok()?, (*digest).to_owned()), id))
        }
        _ => None,
    }
}

fn role_name(role: airlock_core::config::Role) -> &'static str {
    match role {
        airlock_core::config::Role::Agent => "agent",
        airlock_core::config::Role::Approver => "approver",
        airlock_core::config::Role::Admin => "admin",
    }
}

fn error_words(error: &BrokerError) -> String {
    airlock_core::display::safe_line(&error.to_string()).into_owned()
}

/// What a decision came to, for the person who took it.
fn outcome_words(envelope: &Envelope, approve: bool) -> String {
    match (&envelope.status, &envelope.error) {
        (Status::Allowed, _) => "Approved: applied.".to_owned(),
        (Status::Denied, _) => "Denied.".to_owned(),
        (_, Some(error)) if approve => format!(
            "Approved, but not applied: {}: {}",
            error.code,
            airlock_core::display::safe_line(&error.message)
        ),
        (_, Some(error)) => format!(
            "{}: {}",
            error.code,
            airlock_core::display::safe_line(&error.message)
        ),
        (status, None) => format!("{status:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn button_data_round_trips_and_anything_else_is_refused() {
        let id = "hitl-bc39b07e-dd4f-4f2d-a386-8610b0c93030";
        assert_eq!(
            parse_data(&format!("a|{id}")),
            Some((Action::Approve(None), id.to_owned()))
        );
        assert_eq!(
            parse_data(&format!("d|{id}")),
            Some((Action::Deny(None), id.to_owned()))
        );
        assert_eq!(
            parse_data(&format!("s|{id}")),
            Some((Action::Always, id.to_owned()))
        );
        assert_eq!(
            parse_data(&format!("b|{id}|3|0123456789ab")),
            Some((Action::All(3, "0123456789ab".to_owned()), id.to_owned()))
        );
        for bad in [
            "".to_owned(),
            "a".to_owned(),
            "a|".to_owned(),
            "x|hitl-1".to_owned(),
            "a|other".to_owned(),
            format!("a|{id}|2"),
            format!("b|{id}"),
            format!("b|{id}|3"),
            format!("b|{id}|x|0123456789ab"),
            format!("b|{id}|3|0123456789xy"),
            format!("b|{id}|3|0123456789ab|1"),
        ] {
            assert_eq!(parse_data(&bad), None, "{bad:?}");
        }
        // Every button's data fits Telegram's 64 bytes.
        assert!(format!("b|{id}|200|0123456789ab").len() <= 64);
    }
}
