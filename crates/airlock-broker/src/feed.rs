//! The event feed as the faces read it: what changed after a cursor, and
//! waiting for the next change. A change made in this process wakes its
//! readers at once (the store's notifier); one made by another process is
//! seen by looking at the newest `seq` every [`FEED_POLL`] (one indexed
//! query). Deadlines are read on the broker's clock.

use std::time::{Duration, Instant};

use airlock_store::{EventKind, FeedEvent, Notifier};
use serde_json::Value;

use crate::broker::Broker;
use crate::error::BrokerError;

/// How often a reader looks for changes made by other processes.
pub const FEED_POLL: Duration = Duration::from_millis(25);

/// The longest a blocked reader goes without looking around again (is the
/// process it waits for still alive, has an apply been abandoned).
const LOOK_AROUND: Duration = Duration::from_secs(1);

/// Where a reader stands: the process's notifier generation and the feed's
/// newest `seq`, both taken before the reader looks at the state, so a
/// change made after that look always wakes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    generation: u64,
    /// The newest event seen.
    pub seq: u64,
}

impl Broker {
    /// How often a reader looks for changes the notifier may not have told
    /// it of: [`FEED_POLL`] with the embedded store (another process's
    /// change wakes no one here); with a shared store, whose listener wakes
    /// the notifier for every instance's change, only as a safety net.
    pub fn feed_poll(&self) -> Duration {
        if self.store.is_shared() {
            LOOK_AROUND
        } else {
            FEED_POLL
        }
    }

    /// Whether this process sends event `seq` to the webhook at `url`: with
    /// a shared store, exactly one instance does.
    pub fn claim_delivery(&self, seq: u64, url: &str) -> Result<bool, BrokerError> {
        Ok(self.store.claim_delivery(seq, url)?)
    }

    /// The events after `seq`, oldest first, at most `limit`.
    pub fn events_after(&self, seq: u64, limit: usize) -> Result<Vec<FeedEvent>, BrokerError> {
        Ok(self.store.events_after(seq, limit)?)
    }

    /// The reader's position now (the newest event's `seq`).
    pub fn cursor(&self) -> Result<Cursor, BrokerError> {
        let generation = Notifier::get().generation();
        Ok(Cursor {
            generation,
            seq: self.store.last_event()?,
        })
    }

    /// Blocks until something may have changed since `cursor`: a change in
    /// this process, an event from another, the clock reaching `deadline_ms`,
    /// or a second gone by. Spurious returns are allowed; the caller looks
    /// again.
    pub fn park(&self, cursor: Cursor, deadline_ms: Option<u64>) {
        let notifier = Notifier::get();
        let started = Instant::now();
        let poll = self.feed_poll();
        loop {
            let now = self.now_ms();
            let slice = match deadline_ms {
                Some(deadline) if now >= deadline => return,
                Some(deadline) => poll.min(Duration::from_millis(deadline - now)),
                None => poll,
            };
            if notifier.wait_past(cursor.generation, slice) != cursor.generation {
                return;
            }
            // A shared store wakes the notifier for every instance's change;
            // only the embedded one needs a look at the newest event.
            if !self.store.is_shared()
                && self
                    .store
                    .last_event()
                    .map_or(true, |seq| seq != cursor.seq)
            {
                return;
            }
            if started.elapsed() >= LOOK_AROUND {
                return;
            }
        }
    }

    /// Records that a new configuration is in force (for the faces).
    pub(crate) fn note_config_reloaded(&self) -> Result<(), BrokerError> {
        Ok(self.store.record_event(
            EventKind::ConfigReloaded,
            self.now_ms(),
            Value::Object(serde_json::Map::new()),
        )?)
    }

    /// Records, for the faces, that a new configuration was refused.
    pub(crate) fn note_config_refused(&self, reason: &str) -> Result<(), BrokerError> {
        Ok(self.store.record_event(
            EventKind::ConfigRejected,
            self.now_ms(),
            serde_json::json!({"reason": reason}),
        )?)
    }
}
