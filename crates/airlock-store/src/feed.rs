//! The event feed: every state change is written, in the transaction that
//! makes it, as a row of `events` with a monotonic sequence number. Readers
//! keep a cursor (the last `seq` they saw) and ask for what came after it,
//! so none misses or repeats an event, whichever process wrote it. Within a
//! process, the [`Notifier`] wakes readers as soon as a change commits;
//! across processes they look at [`Store::last_event`] (one indexed query).

use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::sql::{Conn, args, scalar};
use crate::{Millis, Store, StoreError};

/// The format of an event's `data`; written into it as `v`.
pub const EVENT_FORMAT: u64 = 1;

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A new pending approval (not a deduplicated one).
    ApprovalCreated,
    /// `pending -> approved | denied`; `data.status` says which.
    ApprovalDecided,
    /// `applying -> applied`.
    ApprovalApplied,
    /// `applying -> failed`.
    ApprovalFailed,
    /// `pending -> expired` (a timeout: denied).
    ApprovalExpired,
    /// `pending -> cancelled` (the waiting call went away).
    ApprovalCancelled,
    /// An applied change was reverted.
    ApprovalUndone,
    /// An agent applied an approved call, and its files do not hold what
    /// was approved; `data.files` names them.
    ApprovalMismatch,
    /// A pending approval's expiry was brought forward (a chat channel's
    /// timeout); `data.expires_ms` is the new one.
    ApprovalExpiryChanged,
    GrantCreated,
    GrantRevoked,
    /// A new configuration is in force.
    ConfigReloaded,
    /// A new configuration was refused; the old one stays.
    ConfigRejected,
    /// A signed checkpoint of the audit log was stored; `data.size` is its
    /// tree size.
    CheckpointSigned,
    /// A session was opened; `subject` is its id.
    SessionOpened,
    /// A session ended; `data.status` is `closed` or `expired`.
    SessionEnded,
}

impl EventKind {
    const ALL: [EventKind; 16] = [
        EventKind::ApprovalCreated,
        EventKind::ApprovalDecided,
        EventKind::ApprovalApplied,
        EventKind::ApprovalFailed,
        EventKind::ApprovalExpired,
        EventKind::ApprovalCancelled,
        EventKind::ApprovalUndone,
        EventKind::ApprovalMismatch,
        EventKind::ApprovalExpiryChanged,
        EventKind::GrantCreated,
        EventKind::GrantRevoked,
        EventKind::ConfigReloaded,
        EventKind::ConfigRejected,
        EventKind::CheckpointSigned,
        EventKind::SessionOpened,
        EventKind::SessionEnded,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            EventKind::ApprovalCreated => "approval_created",
            EventKind::ApprovalDecided => "approval_decided",
            EventKind::ApprovalApplied => "approval_applied",
            EventKind::ApprovalFailed => "approval_failed",
            EventKind::ApprovalExpired => "approval_expired",
            EventKind::ApprovalCancelled => "approval_cancelled",
            EventKind::ApprovalUndone => "approval_undone",
            EventKind::ApprovalMismatch => "approval_apply_mismatch",
            EventKind::ApprovalExpiryChanged => "approval_expiry_changed",
            EventKind::GrantCreated => "grant_created",
            EventKind::GrantRevoked => "grant_revoked",
            EventKind::ConfigReloaded => "config_reloaded",
            EventKind::ConfigRejected => "config_rejected",
            EventKind::CheckpointSigned => "checkpoint_signed",
            EventKind::SessionOpened => "session_opened",
            EventKind::SessionEnded => "session_ended",
        }
    }

    fn parse(text: &str) -> Result<EventKind, StoreError> {
        EventKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown event kind {text}")))
    }

    /// Whether the event is about one approval (its `subject` is the id).
    pub const fn is_approval(self) -> bool {
        matches!(
            self,
            EventKind::ApprovalCreated
                | EventKind::ApprovalDecided
                | EventKind::ApprovalApplied
                | EventKind::ApprovalFailed
                | EventKind::ApprovalExpired
                | EventKind::ApprovalCancelled
                | EventKind::ApprovalUndone
                | EventKind::ApprovalMismatch
        )
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event of the feed.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEvent {
    /// Its place in the feed: greater than every earlier event's.
    pub seq: u64,
    pub kind: EventKind,
    /// The approval (or grant) it is about.
    pub subject: Option<String>,
    /// Who made the call, for an approval's events (`Principal::owner_key`):
    /// an agent's feed shows only its own.
    pub owner: Option<String>,
    pub at_ms: Millis,
    /// What else there is to say (`v`: [`EVENT_FORMAT`]; `status` for a
    /// decision; `user`, `channel` of a decider …).
    pub data: Value,
}

/// An event about to be written.
pub(crate) struct NewEvent<'a> {
    pub kind: EventKind,
    pub subject: Option<&'a str>,
    pub owner: Option<&'a str>,
    pub at_ms: Millis,
    pub data: Value,
}

/// Writes `event` on `conn` (inside the caller's transaction).
pub(crate) fn write_event(conn: &mut dyn Conn, event: NewEvent<'_>) -> Result<(), StoreError> {
    let mut data = match event.data {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    data.insert("v".to_owned(), Value::from(EVENT_FORMAT));
    conn.execute(
        "INSERT INTO events (kind, subject, owner, at_ms, data) VALUES (?1, ?2, ?3, ?4, ?5)",
        args![
            event.kind.as_str(),
            event.subject,
            event.owner,
            i64::try_from(event.at_ms).unwrap_or(i64::MAX),
            Value::Object(data).to_string(),
        ],
    )?;
    Ok(())
}

/// Wakes the readers of this process when a change commits. One for the
/// process (a reload opens another store on the same database; its readers
/// are woken too, and look at their own cursor).
pub struct Notifier {
    generation: Mutex<u64>,
    changed: Condvar,
    listeners: Mutex<Vec<Box<dyn Fn() -> bool + Send + Sync>>>,
}

impl Notifier {
    /// The notifier of this process.
    pub fn get() -> &'static Notifier {
        static NOTIFIER: OnceLock<Notifier> = OnceLock::new();
        NOTIFIER.get_or_init(|| Notifier {
            generation: Mutex::new(0),
            changed: Condvar::new(),
            listeners: Mutex::new(Vec::new()),
        })
    }

    /// How many changes this process has committed so far.
    pub fn generation(&self) -> u64 {
        self.generation.lock().map_or(0, |generation| *generation)
    }

    /// Tells every reader that a change committed.
    pub fn bump(&self) {
        if let Ok(mut generation) = self.generation.lock() {
            *generation = generation.wrapping_add(1);
        }
        self.changed.notify_all();
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.retain(|listener| listener());
        }
    }

    /// Waits until the generation is past `seen` or `timeout` passes;
    /// returns the generation then.
    pub fn wait_past(&self, seen: u64, timeout: Duration) -> u64 {
        let Ok(generation) = self.generation.lock() else {
            std::thread::sleep(timeout);
            return seen;
        };
        match self
            .changed
            .wait_timeout_while(generation, timeout, |generation| *generation == seen)
        {
            Ok((generation, _)) => *generation,
            Err(poisoned) => *poisoned.into_inner().0,
        }
    }

    /// Calls `listener` after every change from now on, until it returns
    /// `false` (its reader is gone). For readers that cannot block a thread:
    /// it should only wake them.
    pub fn listen(&self, listener: impl Fn() -> bool + Send + Sync + 'static) {
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.push(Box::new(listener));
        }
    }
}

impl Store {
    /// The events after `after` (a `seq`; 0 for all), oldest first, at most
    /// `limit`.
    pub fn events_after(&self, after: u64, limit: usize) -> Result<Vec<FeedEvent>, StoreError> {
        self.with(|conn| {
            let rows = conn.query(
                "SELECT seq, kind, subject, owner, at_ms, data FROM events \
                 WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                args![
                    i64::try_from(after).unwrap_or(i64::MAX),
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
            )?;
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                let kind: String = row.get("kind")?;
                let data: String = row.get("data")?;
                out.push(FeedEvent {
                    seq: u64::try_from(row.get::<i64>("seq")?).unwrap_or(0),
                    kind: EventKind::parse(&kind)?,
                    subject: row.get("subject")?,
                    owner: row.get("owner")?,
                    at_ms: u64::try_from(row.get::<i64>("at_ms")?).unwrap_or(0),
                    data: serde_json::from_str(&data).map_err(|error| {
                        StoreError::Corrupt(format!("event data is not JSON: {error}"))
                    })?,
                });
            }
            Ok(out)
        })
    }

    /// The `seq` of the newest event (0 when there is none): where a reader
    /// that wants only what comes next starts.
    pub fn last_event(&self) -> Result<u64, StoreError> {
        self.with(|conn| {
            let seq: Option<i64> = scalar(conn, "SELECT max(seq) FROM events", &[])?;
            Ok(seq.and_then(|seq| u64::try_from(seq).ok()).unwrap_or(0))
        })
    }

    /// Records an event that changes no row of the store (a configuration
    /// taken into use or refused).
    pub fn record_event(
        &self,
        kind: EventKind,
        at_ms: Millis,
        data: Value,
    ) -> Result<(), StoreError> {
        self.changing(|conn| {
            write_event(
                conn,
                NewEvent {
                    kind,
                    subject: None,
                    owner: None,
                    at_ms,
                    data,
                },
            )
        })
    }
}
