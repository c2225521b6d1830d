//! `GET /hitl/events`: the broker's event feed as server-sent events. Each
//! subscriber reads the feed from its own cursor (the newest event when it
//! connects, or the `Last-Event-ID` it sends back after a reconnect), so it
//! sees every change once and in order, whichever process made it. Each
//! event's `id` is its place in the feed.
//!
//! Readers are woken at once by changes made in this process and look for
//! other processes' changes every [`FEED_POLL`].

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use airlock_broker::{EventKind, FeedEvent, LiveChannel, Runtime, approval_view};
use airlock_core::Principal;
use axum::response::sse::{Event, KeepAlive, Sse};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// How often an idle stream looks again whether its token still counts.
const TOKEN_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// How many events one read takes from the feed.
const PAGE: usize = 256;

/// What a face shows of one event: its name on the stream, and the approval
/// as the API shows it now (for an approval's events).
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub seq: u64,
    pub kind: EventKind,
    /// `created`, `decided`, `applied`, … (the feed's kind without the
    /// `approval_` of an approval's events).
    pub name: &'static str,
    pub at_ms: u64,
    pub data: Value,
    pub approval: Option<Value>,
    /// Who made the call: an agent's stream shows only its own approvals.
    pub owner: Option<String>,
    /// Anyone with an approver's right may decide it (signed links may be
    /// offered).
    pub open_to_links: bool,
}

impl Change {
    /// The JSON an SSE subscriber (and a webhook) gets.
    pub(crate) fn payload(&self) -> Value {
        let mut data = self.data.clone();
        if let Some(object) = data.as_object_mut() {
            object.remove("v");
        }
        json!({
            "type": self.name,
            "seq": self.seq,
            "at_ms": self.at_ms,
            "approval": self.approval,
            "data": data,
        })
    }
}

/// The name a feed event has on the stream.
pub(crate) fn stream_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::ApprovalCreated => "created",
        EventKind::ApprovalDecided => "decided",
        EventKind::ApprovalApplied => "applied",
        EventKind::ApprovalFailed => "failed",
        EventKind::ApprovalExpired => "expired",
        EventKind::ApprovalCancelled => "cancelled",
        EventKind::ApprovalUndone => "undone",
        EventKind::ApprovalMismatch => "apply_mismatch",
        EventKind::ApprovalExpiryChanged => "expiry_changed",
        EventKind::GrantCreated => "grant_created",
        EventKind::GrantRevoked => "grant_revoked",
        EventKind::ConfigReloaded => "config_reloaded",
        EventKind::ConfigRejected => "config_rejected",
        EventKind::CheckpointSigned => "checkpoint_signed",
        EventKind::SessionOpened => "session_opened",
        EventKind::SessionEnded => "session_ended",
    }
}

/// The feed of one server's runtime.
#[derive(Clone)]
pub(crate) struct Events {
    runtime: Arc<Runtime>,
    wake: Arc<Notify>,
}

impl Events {
    /// Readers of `runtime`'s feed, woken by the changes of this process.
    pub(crate) fn new(runtime: Arc<Runtime>) -> Events {
        let wake = Arc::new(Notify::new());
        let woken = Arc::downgrade(&wake);
        airlock_broker::Notifier::get().listen(move || match woken.upgrade() {
            Some(wake) => {
                wake.notify_waiters();
                true
            }
            None => false,
        });
        Events { runtime, wake }
    }

    /// The newest event's `seq`: where a reader that wants only what comes
    /// next starts.
    pub(crate) async fn now(&self) -> u64 {
        let broker = self.runtime.broker();
        tokio::task::spawn_blocking(move || broker.cursor().map(|cursor| cursor.seq))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(0)
    }

    /// The changes after `cursor`, waiting until there is at least one.
    pub(crate) async fn after(&self, cursor: u64) -> Vec<Change> {
        loop {
            let woken = self.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let broker = self.runtime.broker();
            let read = tokio::task::spawn_blocking(move || {
                let events = broker.events_after(cursor, PAGE).unwrap_or_default();
                events
                    .into_iter()
                    .map(|event| change_of(&broker, event))
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
            if !read.is_empty() {
                return read;
            }
            let poll = self.runtime.broker().feed_poll();
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep(poll) => {}
            }
        }
    }

    /// The stream one subscriber reads, from `cursor` on: every change, or
    /// (`only`: an agent's principal) the changes of that principal's own
    /// approvals.
    pub(crate) fn subscribe(
        &self,
        only: Option<Principal>,
        cursor: u64,
        valid: Option<(crate::auth::Credential, Vec<airlock_core::config::Role>)>,
    ) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>> + use<>> {
        let events = self.clone();
        // An approver's stream (the web UI) is a live approver channel for
        // as long as it is open: `elicitation_fallback: auto` waits for it.
        let presence = match only {
            None => match self.runtime.broker().announce(LiveChannel::WebUi) {
                Ok(presence) => Some(Arc::new(presence)),
                Err(error) => {
                    eprintln!("airlock: cannot announce the web UI as live: {error}");
                    None
                }
            },
            Some(_) => None,
        };
        let state = (events, cursor, VecDeque::<Change>::new(), presence);
        let stream = futures_util::stream::unfold(
            state,
            move |(events, mut cursor, mut queue, presence)| {
                let only = only.clone();
                let valid = valid.clone();
                async move {
                    let still_valid = || {
                        valid
                            .as_ref()
                            .is_none_or(|(credential, roles)| credential.still_valid(roles))
                    };
                    let change = loop {
                        if !still_valid() {
                            // Revoked or rotated: the stream ends, and with
                            // it a web UI's presence.
                            return None;
                        }
                        if let Some(change) = queue.pop_front() {
                            break change;
                        }
                        let Ok(read) =
                            tokio::time::timeout(TOKEN_CHECK, events.after(cursor)).await
                        else {
                            continue;
                        };
                        if let Some(last) = read.last() {
                            cursor = last.seq;
                        }
                        // The approvals' stream: a session's opening and
                        // end are not on it (`/v1/sessions` shows them).
                        queue.extend(
                            read.into_iter()
                                .filter(|change| {
                                    !matches!(
                                        change.kind,
                                        EventKind::SessionOpened | EventKind::SessionEnded
                                    )
                                })
                                .filter(|change| match &only {
                                    None => true,
                                    Some(principal) => {
                                        change.kind.is_approval()
                                            && principal.owns(change.owner.as_deref())
                                    }
                                }),
                        );
                    };
                    let event = Event::default()
                        .id(change.seq.to_string())
                        .event(change.name)
                        .data(change.payload().to_string());
                    Some((Ok(event), (events, cursor, queue, presence)))
                }
            },
        );
        Sse::new(stream).keep_alive(KeepAlive::default())
    }
}

/// `event` as the faces show it, with its approval as it is now.
fn change_of(broker: &airlock_broker::Broker, event: FeedEvent) -> Change {
    let row = event
        .subject
        .as_deref()
        .filter(|_| event.kind.is_approval())
        .and_then(|id| broker.approval(id).ok());
    let open_to_links = row
        .as_ref()
        .is_some_and(|approval| broker.open_to_any_approver(approval));
    let approval = row.as_ref().map(|approval| {
        let mut view = approval_view(approval);
        view["always"] = broker.always_offers(approval);
        view
    });
    Change {
        seq: event.seq,
        kind: event.kind,
        name: stream_name(event.kind),
        at_ms: event.at_ms,
        data: event.data,
        approval,
        owner: event.owner,
        open_to_links,
    }
}
