//! Appending to the log: recovery at open, group commit, the cross-process lock.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::Thread;

use airlock_core::canonical::{self, ZERO_HASH};
use rustix::fs::FlockOperation;
use serde_json::{Map, Value};

use crate::chain::ChainHasher;
use crate::tail::{self, TailState};
use crate::time::{now_unix_ms, rfc3339_millis};
use crate::{AuditError, HeadStoreError};

/// The `event` of the record a caller appends after [`AuditLog::open`] moved a torn
/// line aside (see [`Recovery::records`]); the log appends one itself when it finds a
/// torn line left by another process while running.
pub const TORN_LINE_EVENT: &str = "audit_torn_line";

/// The `event` of the record a caller appends after [`AuditLog::open`] found the log
/// shorter than the head store says it was (see [`Recovery::records`]).
pub const TRUNCATED_TAIL_EVENT: &str = "audit_truncated_tail";

/// The last record of a chain: its `seq` and `event_hash`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub seq: u64,
    pub event_hash: String,
}

/// Keeps the head of the chain outside the log (airlock-store keeps it in SQLite), so
/// that cutting records off the end of the log is noticed.
///
/// [`AuditLog`] calls `save_head` after the records are durable, while it holds the
/// log's lock, once per group commit, so heads arrive in increasing `seq` order even
/// with several processes appending. A store that keeps the larger `seq` of what it
/// holds and what it is given is right in every case.
pub trait HeadStore: Send + Sync {
    fn load_head(&self) -> Result<Option<Head>, HeadStoreError>;
    fn save_head(&self, head: &Head) -> Result<(), HeadStoreError>;
}

/// A chain kept in a database that several airlock instances share
/// (DESIGN §7.2): one chain for all of them, its appends serialised by the
/// database. [`AuditLog::open_chain`] appends to it instead of a file; the
/// records are the same lines, hashed the same way.
pub trait ChainStore: Send + Sync {
    /// Locks the chain, gives `encode` its head (`None`: empty), and stores
    /// the lines `encode` returns and the new head in one transaction; the
    /// lock is held until then, so no other appender chains after the same
    /// head. `encode` may be called again if the store retries.
    fn append(
        &self,
        encode: &mut dyn FnMut(Option<Head>) -> Result<Vec<ChainLine>, AuditError>,
    ) -> Result<(), AuditError>;
    /// The chain's head now.
    fn head(&self) -> Result<Option<Head>, AuditError>;
}

/// One record of a chain kept in a database: its line (the exact JSONL
/// text, without the `\n`) and what a database indexes it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainLine {
    pub seq: u64,
    pub ts: String,
    pub event: Option<String>,
    pub hitl_id: Option<String>,
    pub event_hash: String,
    pub line: String,
}

/// What [`AuditLog::open`] found and repaired. The caller appends
/// [`Recovery::records`] so the log itself says what happened.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recovery {
    /// The file did not end with `\n`: the bytes after the last `\n` (a record torn by a
    /// crash mid-write) were moved to a file beside the log.
    pub torn_line: Option<TornLine>,
    /// The head store is ahead of the log: records were cut off its end.
    pub truncated_tail: Option<TruncatedTail>,
    /// The head of the log after recovery, `None` for an empty log.
    pub head: Option<Head>,
}

/// A torn last line moved out of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornLine {
    /// `<log path>.torn-<unix ms>`, holding exactly the torn bytes.
    pub moved_to: PathBuf,
    pub bytes: u64,
}

/// The head store names a head the log does not reach (or holds with another hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruncatedTail {
    pub stored: Head,
    pub log_head: Option<Head>,
}

impl Recovery {
    /// Whether the log was found intact.
    pub fn is_clean(&self) -> bool {
        self.torn_line.is_none() && self.truncated_tail.is_none()
    }

    /// The records to append about what was found: one [`TORN_LINE_EVENT`] and one
    /// [`TRUNCATED_TAIL_EVENT`] when they apply.
    pub fn records(&self) -> Vec<Map<String, Value>> {
        let mut records = Vec::new();
        if let Some(torn) = &self.torn_line {
            records.push(torn.record());
        }
        if let Some(truncated) = &self.truncated_tail {
            let mut record = Map::new();
            record.insert("event".into(), TRUNCATED_TAIL_EVENT.into());
            record.insert("stored_seq".into(), truncated.stored.seq.into());
            record.insert(
                "stored_hash".into(),
                truncated.stored.event_hash.clone().into(),
            );
            let (log_seq, log_hash) = match &truncated.log_head {
                Some(head) => (head.seq.into(), head.event_hash.clone().into()),
                None => (Value::Null, Value::Null),
            };
            record.insert("log_seq".into(), log_seq);
            record.insert("log_hash".into(), log_hash);
            records.push(record);
        }
        records
    }
}

impl TornLine {
    fn record(&self) -> Map<String, Value> {
        let mut record = Map::new();
        record.insert("event".into(), TORN_LINE_EVENT.into());
        record.insert(
            "moved_to".into(),
            self.moved_to.to_string_lossy().into_owned().into(),
        );
        record.insert("bytes".into(), self.bytes.into());
        record
    }
}

/// Where an appended record landed in the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    /// The record's `ts`: the caller's, or the time it was written.
    pub ts: String,
    pub prev_hash: String,
    pub event_hash: String,
}

/// An open audit log that appends records to the chain.
///
/// Appends are durable when [`AuditLog::append`] returns (`fdatasync`). Concurrent
/// appenders of one `AuditLog` share a write and a sync (group commit): one of them
/// writes everything queued so far while the others wait. Several `AuditLog`s, in this
/// process or others, can append to the same file: each group commit holds an
/// exclusive `flock` on the log and re-reads the chain's head from the file's last
/// line whenever the file changed since it last looked.
pub struct AuditLog {
    path: PathBuf,
    hasher: ChainHasher,
    head_store: Option<Arc<dyn HeadStore>>,
    queue: Mutex<Queue>,
    /// The file's writer; `None` when the chain is in a database.
    writer: Option<Mutex<Writer>>,
    /// The database the chain is in, when it is not a file.
    chain: Option<Arc<dyn ChainStore>>,
    /// Syncs records appended with [`Durability::Soon`].
    flusher: Arc<Flusher>,
}

/// When an appended record must be on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Synced before [`AuditLog::append_with`] returns: for records of calls
    /// that change something (a proposal, a decision, an apply, a forwarded
    /// call), which must be on disk before the change goes ahead.
    Now,
    /// Written before it returns (it survives the process being killed) and
    /// synced within [`SYNC_WITHIN`] (or by the next `Now` append, of any
    /// process): for records of calls that change nothing (reads, denials).
    Soon,
}

/// How long a [`Durability::Soon`] record may wait for its sync.
pub const SYNC_WITHIN: std::time::Duration = std::time::Duration::from_millis(20);

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("AuditLog")
            .field("path", &self.path)
            .field("keyed", &self.hasher.is_keyed())
            .field("head_store", &self.head_store.is_some())
            .finish_non_exhaustive()
    }
}

impl AuditLog {
    /// Opens (creating it, mode 0600, if needed) the log at `path`, whose parent
    /// directory must exist.
    ///
    /// A torn last line is moved beside the log and reported. When `head_store` holds a
    /// head the log does not reach (a larger `seq`, or the same `seq` with another
    /// hash), that is reported as a truncated tail; the log still opens and continues
    /// from its own last line, so the caller can record what happened. A head store
    /// behind the log (a crash between the sync and `save_head`) is normal and catches
    /// up with the next append.
    ///
    /// `key` switches the chain to HMAC-SHA256.
    pub fn open(
        path: &Path,
        key: Option<Vec<u8>>,
        head_store: Option<Arc<dyn HeadStore>>,
    ) -> Result<(AuditLog, Recovery), AuditError> {
        let hasher = ChainHasher::new(key.as_deref())?;
        let mut writer = Writer::open(path)?;
        // The stored head is read under the log's lock, like appenders save it: read
        // outside, an append in between would look like a truncated tail.
        let (torn_line, stored_head) = writer.with_lock(path, |state, file| {
            let torn_line = state.refresh(path, file)?;
            let stored_head = match &head_store {
                Some(store) => store.load_head().map_err(AuditError::HeadStore)?,
                None => None,
            };
            Ok((torn_line, stored_head))
        })?;
        let head = writer.state.head.clone();
        // Fail closed: a keyed chain continued without its key (or a plain one
        // with a key) could never verify again.
        if let Some(head) = &head {
            let keyed = head.event_hash.starts_with(crate::HMAC_PREFIX);
            if keyed != hasher.is_keyed() {
                let reason = if keyed {
                    "the chain is keyed (hmac-sha256) but no key was given"
                } else {
                    "a key was given but the chain is not keyed"
                };
                return Err(AuditError::KeyMismatch {
                    path: path.to_path_buf(),
                    reason: reason.to_owned(),
                });
            }
        }
        let truncated_tail = stored_head
            .filter(|stored| is_ahead_of(stored, head.as_ref()))
            .map(|stored| TruncatedTail {
                stored,
                log_head: head.clone(),
            });
        let log = AuditLog {
            path: path.to_path_buf(),
            hasher,
            head_store,
            queue: Mutex::new(Queue::default()),
            writer: Some(Mutex::new(writer)),
            chain: None,
            flusher: Arc::default(),
        };
        let recovery = Recovery {
            torn_line,
            truncated_tail,
            head,
        };
        Ok((log, recovery))
    }

    /// A log whose chain is in `store` (a database several instances
    /// share): every append commits in the database before it returns, so
    /// there is no torn line or cut-off tail to recover. `key` as for
    /// [`AuditLog::open`]; a chain keyed otherwise is refused.
    pub fn open_chain(
        store: Arc<dyn ChainStore>,
        key: Option<Vec<u8>>,
    ) -> Result<AuditLog, AuditError> {
        let hasher = ChainHasher::new(key.as_deref())?;
        if let Some(head) = store.head()? {
            let keyed = head.event_hash.starts_with(crate::HMAC_PREFIX);
            if keyed != hasher.is_keyed() {
                let reason = if keyed {
                    "the chain is keyed (hmac-sha256) but no key was given"
                } else {
                    "a key was given but the chain is not keyed"
                };
                return Err(AuditError::KeyMismatch {
                    path: PathBuf::from("the database"),
                    reason: reason.to_owned(),
                });
            }
        }
        Ok(AuditLog {
            path: PathBuf::new(),
            hasher,
            head_store: None,
            queue: Mutex::new(Queue::default()),
            writer: None,
            chain: Some(store),
            flusher: Arc::default(),
        })
    }

    /// Whether the chain is in a database rather than the file at
    /// [`AuditLog::path`].
    pub fn in_database(&self) -> bool {
        self.chain.is_some()
    }

    /// The path the log was opened at (empty for a chain in a database).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `record` to the chain and returns once it is durable.
    ///
    /// The log sets `seq`, `prev_hash` and `event_hash` (replacing any the record has)
    /// and `ts` when the record has none (a `ts` that is there must be a string). The
    /// line is `seq`, `ts`, the record's own fields in their order, `prev_hash`,
    /// `event_hash`. An error means the record is not in the log, except
    /// [`AuditError::HeadNotSaved`].
    pub fn append(&self, record: Map<String, Value>) -> Result<Appended, AuditError> {
        self.append_with(record, Durability::Now)
    }

    /// [`AuditLog::append`] with the given durability: with
    /// [`Durability::Soon`] it returns once the record is written to the file,
    /// and the log's flusher thread syncs it (and saves the head) within
    /// [`SYNC_WITHIN`]. A failed background sync makes the next append sync
    /// itself, and fail if that fails too.
    pub fn append_with(
        &self,
        record: Map<String, Value>,
        durability: Durability,
    ) -> Result<Appended, AuditError> {
        let mut queue = self.lock_queue();
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.waiting.push(Waiting {
            ticket,
            record,
            durability,
            thread: std::thread::current(),
        });
        loop {
            if let Some(result) = queue.finished.remove(&ticket) {
                return result;
            }
            if queue.leader_active {
                // The leader unparks this thread when its record is written or when it
                // is this thread's turn to lead; a spurious wake-up just looks again.
                drop(queue);
                std::thread::park();
                queue = self.lock_queue();
                continue;
            }
            // No group commit is under way: this appender writes everything queued,
            // which includes its own record.
            queue.leader_active = true;
            let batch = std::mem::take(&mut queue.waiting);
            drop(queue);
            let mut records = Vec::with_capacity(batch.len());
            let mut waiters = Vec::with_capacity(batch.len());
            let mut sync_now = false;
            for Waiting {
                ticket: waiting_ticket,
                record,
                durability,
                thread,
            } in batch
            {
                sync_now |= durability == Durability::Now;
                records.push((waiting_ticket, record));
                if waiting_ticket != ticket {
                    waiters.push(thread);
                }
            }
            let mut leader = LeaderGuard {
                log: self,
                tickets: records.iter().map(|(ticket, _)| *ticket).collect(),
                waiters,
                finished: false,
            };
            let results = self.write_batch(records, sync_now);
            queue = self.lock_queue();
            queue.finished.extend(results);
            leader.finished = true;
            let own = queue.finished.remove(&ticket);
            drop(queue);
            leader.wake_up();
            match own {
                Some(result) => return result,
                None => queue = self.lock_queue(),
            }
        }
    }

    fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_batch(&self, batch: Vec<(u64, Map<String, Value>)>, sync_now: bool) -> Outcomes {
        let (Some(writer), None) = (&self.writer, &self.chain) else {
            return match &self.chain {
                Some(chain) => self.write_chain(chain.as_ref(), batch),
                None => batch
                    .into_iter()
                    .map(|(ticket, _)| (ticket, Err(AuditError::WriterStopped)))
                    .collect(),
            };
        };
        let mut writer = writer.lock().unwrap_or_else(|poisoned| {
            // A writer that panicked may have left the file ahead of what it knows.
            let mut writer = poisoned.into_inner();
            writer.state.known_len = None;
            writer
        });
        let tickets: Vec<u64> = batch.iter().map(|(ticket, _)| *ticket).collect();
        // A background sync that failed leaves records of this process unsynced:
        // this group syncs them, or fails.
        let sync_now = sync_now || self.flusher.failed();
        let head_store = self.head_store.clone();
        let flusher = &self.flusher;
        let outcome = writer.with_lock(&self.path, |state, file| {
            let results = state.commit(
                &self.path,
                file,
                &self.hasher,
                head_store.as_deref(),
                batch,
                sync_now,
            )?;
            match (&state.head, sync_now) {
                (_, true) => flusher.synced(),
                (Some(head), false) => flusher.written(file, head, head_store.clone()),
                (None, false) => {}
            }
            Ok(results)
        });
        match outcome {
            Ok(results) => results,
            Err(error) => tickets
                .into_iter()
                .map(|ticket| (ticket, Err(error.clone())))
                .collect(),
        }
    }
}

impl AuditLog {
    /// Appends a group to a chain in a database: encoded after the head the
    /// database holds, under its lock, committed together.
    fn write_chain(
        &self,
        chain: &dyn ChainStore,
        batch: Vec<(u64, Map<String, Value>)>,
    ) -> Outcomes {
        let now = rfc3339_millis(now_unix_ms());
        let mut results = Vec::new();
        let mut canonical = Vec::with_capacity(4096);
        let mut out = Vec::with_capacity(4096);
        let appended = chain.append(&mut |mut head| {
            results.clear();
            let mut lines = Vec::with_capacity(batch.len());
            for (ticket, record) in &batch {
                let event = record
                    .get("event")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let hitl_id = record
                    .get("hitl_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                out.clear();
                let result = encode_line(
                    record.clone(),
                    &mut head,
                    &now,
                    &self.hasher,
                    &mut canonical,
                    &mut out,
                );
                if let Ok(appended) = &result {
                    lines.push(ChainLine {
                        seq: appended.seq,
                        ts: appended.ts.clone(),
                        event,
                        hitl_id,
                        event_hash: appended.event_hash.clone(),
                        line: String::from_utf8_lossy(&out[..out.len().saturating_sub(1)])
                            .into_owned(),
                    });
                }
                results.push((*ticket, result));
            }
            Ok(lines)
        });
        match appended {
            Ok(()) => results,
            Err(error) => batch
                .into_iter()
                .map(|(ticket, _)| (ticket, Err(error.clone())))
                .collect(),
        }
    }

    /// Syncs the records still waiting for the flusher, now: a process about
    /// to exit calls it (dropping the log does it too).
    pub fn flush(&self) {
        self.flusher.flush(false);
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        self.flusher.flush(true);
    }
}

/// Syncs [`Durability::Soon`] records in the background, at most
/// [`SYNC_WITHIN`] after the first unsynced one was written, then saves the
/// head it synced (the head is never saved ahead of what is on disk).
#[derive(Default)]
struct Flusher {
    state: Mutex<FlushState>,
    wake: std::sync::Condvar,
}

#[derive(Default)]
struct FlushState {
    /// The file written without a sync, the head it ends with, and when.
    pending: Option<Pending>,
    /// The thread runs.
    running: bool,
    /// The log is gone: sync what is pending and stop.
    closed: bool,
    /// A background sync failed; the next append must sync itself.
    failed: bool,
    /// The thread is syncing (outside the lock).
    syncing: bool,
}

struct Pending {
    file: Arc<File>,
    head: Head,
    head_store: Option<Arc<dyn HeadStore>>,
    since: std::time::Instant,
}

impl Flusher {
    fn lock(&self) -> MutexGuard<'_, FlushState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failed(&self) -> bool {
        self.lock().failed
    }

    /// A synced commit covered everything written before it.
    fn synced(&self) {
        let mut state = self.lock();
        state.pending = None;
        state.failed = false;
    }

    /// Records up to `head` were written to `file` without a sync.
    fn written(
        self: &Arc<Self>,
        file: &Arc<File>,
        head: &Head,
        head_store: Option<Arc<dyn HeadStore>>,
    ) {
        let mut state = self.lock();
        // The thread waits for the first unsynced record's deadline: it
        // needs waking only when there was none (each wake-up is a context
        // switch on the appender's path).
        let (since, wake) = match &state.pending {
            Some(pending) if Arc::ptr_eq(&pending.file, file) => (pending.since, false),
            Some(_) => (std::time::Instant::now(), false),
            None => (std::time::Instant::now(), true),
        };
        state.pending = Some(Pending {
            file: file.clone(),
            head: head.clone(),
            head_store,
            since,
        });
        if !state.running {
            let flusher = self.clone();
            let started = std::thread::Builder::new()
                .name("audit-sync".to_owned())
                .spawn(move || flusher.run());
            match started {
                Ok(_) => state.running = true,
                // No thread: the next append syncs (and reports a failure).
                Err(_) => state.failed = true,
            }
        }
        if wake {
            self.wake.notify_all();
        }
    }

    fn run(&self) {
        let mut state = self.lock();
        loop {
            let due = state
                .pending
                .as_ref()
                .map(|pending| pending.since + SYNC_WITHIN);
            match due {
                None if state.closed => {
                    state.running = false;
                    return;
                }
                None => {
                    state = self
                        .wake
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                Some(due) => {
                    let now = std::time::Instant::now();
                    if due > now && !state.closed {
                        state = self
                            .wake
                            .wait_timeout(state, due - now)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                        continue;
                    }
                    let Some(pending) = state.pending.take() else {
                        continue;
                    };
                    state.syncing = true;
                    drop(state);
                    let synced = pending.file.sync_data().is_ok()
                        && pending
                            .head_store
                            .as_ref()
                            .is_none_or(|store| store.save_head(&pending.head).is_ok());
                    state = self.lock();
                    state.syncing = false;
                    if !synced {
                        state.failed = true;
                    }
                    self.wake.notify_all();
                }
            }
        }
    }

    /// Syncs what is pending here (after a sync under way has finished, so
    /// the process does not exit in the middle of it); with `close`, the
    /// thread ends.
    fn flush(&self, close: bool) {
        let pending = {
            let mut state = self.lock();
            state.closed |= close;
            let pending = state.pending.take();
            self.wake.notify_all();
            while state.syncing {
                state = self
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            pending
        };
        if let Some(pending) = pending {
            let synced = pending.file.sync_data().is_ok()
                && pending
                    .head_store
                    .as_ref()
                    .is_none_or(|store| store.save_head(&pending.head).is_ok());
            if !synced {
                self.lock().failed = true;
            }
        }
    }
}

/// Whether the stored head names a record the log does not have.
fn is_ahead_of(stored: &Head, log_head: Option<&Head>) -> bool {
    match log_head {
        None => true,
        Some(log_head) => {
            stored.seq > log_head.seq
                || (stored.seq == log_head.seq && stored.event_hash != log_head.event_hash)
        }
    }
}

/// Each appender's ticket and what became of its record.
type Outcomes = Vec<(u64, Result<Appended, AuditError>)>;

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    next_ticket: u64,
    /// An appender is writing a group commit; the others wait for it.
    leader_active: bool,
    finished: HashMap<u64, Result<Appended, AuditError>>,
}

/// A record waiting for the next group commit, and the appender to wake when it is in.
struct Waiting {
    ticket: u64,
    record: Map<String, Value>,
    durability: Durability,
    thread: Thread,
}

/// The end of one group commit: it steps down as leader and wakes exactly the
/// appenders whose records it wrote, and the first appender queued since, who leads
/// the next one. If the leader panicked, it fails its group first, so no appender waits
/// forever.
struct LeaderGuard<'log> {
    log: &'log AuditLog,
    tickets: Vec<u64>,
    waiters: Vec<Thread>,
    finished: bool,
}

impl LeaderGuard<'_> {
    fn wake_up(&mut self) {
        let next_leader = {
            let mut queue = self.log.lock_queue();
            if !self.finished {
                for ticket in self.tickets.drain(..) {
                    queue
                        .finished
                        .insert(ticket, Err(AuditError::WriterStopped));
                }
                self.finished = true;
            }
            queue.leader_active = false;
            queue.waiting.first().map(|waiting| waiting.thread.clone())
        };
        for thread in self.waiters.drain(..).chain(next_leader) {
            thread.unpark();
        }
    }
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        if !self.waiters.is_empty() || !self.finished {
            self.wake_up();
        }
    }
}

/// The open file and what this process knows of its end.
struct Writer {
    file: Arc<File>,
    identity: (u64, u64),
    state: WriterState,
}

struct WriterState {
    /// The file length (up to its last `\n`) when this process last looked, under the
    /// lock. `None` forces a look.
    known_len: Option<u64>,
    head: Option<Head>,
    lines: Vec<u8>,
    canonical: Vec<u8>,
}

impl Writer {
    fn open(path: &Path) -> Result<Writer, AuditError> {
        let file = Arc::new(open_log_file(path)?);
        let identity = identity_of(
            &file
                .metadata()
                .map_err(|error| AuditError::io(path, error))?,
        );
        Ok(Writer {
            file,
            identity,
            state: WriterState {
                known_len: None,
                head: None,
                lines: Vec::with_capacity(64 * 1024),
                canonical: Vec::with_capacity(4096),
            },
        })
    }

    /// Runs `work` holding the exclusive lock on the file that is at `path` now (the
    /// log is reopened if it was replaced).
    fn with_lock<T>(
        &mut self,
        path: &Path,
        work: impl FnOnce(&mut WriterState, &Arc<File>) -> Result<T, AuditError>,
    ) -> Result<T, AuditError> {
        loop {
            rustix::fs::flock(&self.file, FlockOperation::LockExclusive)
                .map_err(|errno| AuditError::io(path, errno.into()))?;
            let current = fs::metadata(path).map(|metadata| identity_of(&metadata));
            if current.as_ref().ok() == Some(&self.identity) {
                break;
            }
            // Another process replaced or removed the log: the file at the path is the
            // log now, whatever this process knew.
            let _ = rustix::fs::flock(&self.file, FlockOperation::Unlock);
            *self = Writer::open(path)?;
        }
        let _unlock = Unlock(&self.file);
        work(&mut self.state, &self.file)
    }
}

/// Releases the `flock` when the locked section ends, even by panic.
struct Unlock<'file>(&'file File);

impl Drop for Unlock<'_> {
    fn drop(&mut self) {
        // Closing the file would release it as well; an error here leaves nothing to do.
        let _ = rustix::fs::flock(self.0, FlockOperation::Unlock);
    }
}

impl WriterState {
    /// Brings the known head up to date with the file if it changed, moving a torn
    /// last line aside.
    fn refresh(&mut self, path: &Path, file: &File) -> Result<Option<TornLine>, AuditError> {
        let io_error = |error| AuditError::io(path, error);
        let len = file.metadata().map_err(io_error)?.len();
        if self.known_len == Some(len) {
            return Ok(None);
        }
        self.known_len = None;
        let TailState {
            complete_len,
            last_line,
        } = tail::inspect_tail(file, len).map_err(io_error)?;
        // Everything from `keep` on goes aside: bytes after the last `\n` (a
        // record torn mid-write), and a last line that is no record (torn and
        // then followed by a newline, or a blank line appended by something
        // else), provided the line before it is one: a second bad line is
        // corruption further up, which is never cut away.
        let mut keep = complete_len;
        let head = match last_line {
            None => None,
            Some(line) => match parse_head(&line) {
                Ok(head) => Some(head),
                Err(_) => {
                    let line_start = complete_len - line.len() as u64 - 1;
                    let previous = tail::inspect_tail(file, line_start).map_err(io_error)?;
                    keep = line_start;
                    match previous.last_line {
                        None => None,
                        Some(previous_line) => match parse_head(&previous_line) {
                            Ok(head) => Some(head),
                            Err(reason) => {
                                let offset = line_start - previous_line.len() as u64 - 1;
                                let line = tail::lines_before(file, offset).map_err(io_error)? + 1;
                                return Err(AuditError::CorruptTail {
                                    path: path.to_path_buf(),
                                    line,
                                    offset,
                                    reason,
                                });
                            }
                        },
                    }
                }
            },
        };
        let torn = if keep < len {
            Some(move_torn_aside(path, file, keep, len)?)
        } else {
            None
        };
        self.head = head;
        self.known_len = Some(keep);
        Ok(torn)
    }

    /// Writes a group of records as one write and, with `sync`, syncs and
    /// saves the new head (without, the flusher does that soon).
    fn commit(
        &mut self,
        path: &Path,
        file: &File,
        hasher: &ChainHasher,
        head_store: Option<&dyn HeadStore>,
        batch: Vec<(u64, Map<String, Value>)>,
        sync: bool,
    ) -> Result<Outcomes, AuditError> {
        let io_error = |error| AuditError::io(path, error);
        let torn = self.refresh(path, file)?;
        let start_len = self.known_len.unwrap_or(0);
        let now = rfc3339_millis(now_unix_ms());
        let mut head = self.head.clone();
        self.lines.clear();
        let mut results = Vec::with_capacity(batch.len());
        // A torn line another process left behind is recorded by the log itself, ahead
        // of the batch; it has no appender to report it to.
        if let Some(torn) = torn {
            self.encode(torn.record(), &mut head, &now, hasher)?;
        }
        for (ticket, record) in batch {
            results.push((ticket, self.encode(record, &mut head, &now, hasher)));
        }
        if self.lines.is_empty() {
            return Ok(results);
        }
        let written = (&*file)
            .write_all(&self.lines)
            .and_then(|()| if sync { file.sync_data() } else { Ok(()) });
        if let Err(error) = written {
            // Take back whatever part reached the file, so an error means "not in the
            // log"; the next group re-reads the file in any case.
            self.known_len = None;
            let _ = file.set_len(start_len).and_then(|()| file.sync_data());
            return Err(io_error(error));
        }
        self.known_len = Some(start_len + self.lines.len() as u64);
        self.head = head;
        if !sync {
            return Ok(results);
        }
        if let (Some(store), Some(head)) = (head_store, &self.head)
            && let Err(reason) = store.save_head(head)
        {
            for (_, result) in &mut results {
                if let Ok(appended) = result {
                    *result = Err(AuditError::HeadNotSaved {
                        seq: appended.seq,
                        reason: reason.clone(),
                    });
                }
            }
        }
        Ok(results)
    }

    /// Chains `record` after `head` and adds its line to the pending write.
    fn encode(
        &mut self,
        record: Map<String, Value>,
        head: &mut Option<Head>,
        now: &str,
        hasher: &ChainHasher,
    ) -> Result<Appended, AuditError> {
        encode_line(
            record,
            head,
            now,
            hasher,
            &mut self.canonical,
            &mut self.lines,
        )
    }
}

/// Chains `record` after `head` (moving `head` to it) and writes its line,
/// with its `\n`, to the end of `out`; `canonical` is scratch space.
fn encode_line(
    record: Map<String, Value>,
    head: &mut Option<Head>,
    now: &str,
    hasher: &ChainHasher,
    canonical: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<Appended, AuditError> {
    let seq = head.as_ref().map_or(1, |head| head.seq + 1);
    let prev_hash = head
        .as_ref()
        .map_or(ZERO_HASH, |head| head.event_hash.as_str())
        .to_owned();
    let ts = match record.get("ts") {
        None => now.to_owned(),
        Some(Value::String(ts)) => ts.clone(),
        Some(_) => {
            return Err(AuditError::InvalidRecord {
                field: "ts",
                reason: "must be an RFC 3339 string".to_owned(),
            });
        }
    };
    let mut line = Map::with_capacity(record.len() + 4);
    line.insert("seq".to_owned(), seq.into());
    line.insert("ts".to_owned(), ts.clone().into());
    for (name, value) in record {
        if !matches!(name.as_str(), "seq" | "ts" | "prev_hash" | "event_hash") {
            line.insert(name, value);
        }
    }
    line.insert("prev_hash".to_owned(), prev_hash.clone().into());
    canonical.clear();
    canonical::write_canonical_object(&line, canonical);
    let event_hash = hasher.event_hash(&prev_hash, canonical);
    line.insert("event_hash".to_owned(), event_hash.clone().into());
    let line_start = out.len();
    if let Err(error) = serde_json::to_writer(&mut *out, &line) {
        out.truncate(line_start);
        return Err(AuditError::InvalidRecord {
            field: "record",
            reason: error.to_string(),
        });
    }
    out.push(b'\n');
    *head = Some(Head {
        seq,
        event_hash: event_hash.clone(),
    });
    Ok(Appended {
        seq,
        ts,
        prev_hash,
        event_hash,
    })
}

/// The `seq` and `event_hash` of a log line.
pub(crate) fn parse_head(line: &[u8]) -> Result<Head, String> {
    let record: Map<String, Value> =
        serde_json::from_slice(line).map_err(|error| format!("not a json object: {error}"))?;
    let seq = record
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or("no numeric seq")?;
    let event_hash = record
        .get("event_hash")
        .and_then(Value::as_str)
        .ok_or("no event_hash")?
        .to_owned();
    Ok(Head { seq, event_hash })
}

fn open_log_file(path: &Path) -> Result<File, AuditError> {
    let mut options = OpenOptions::new();
    options.read(true).append(true).mode(0o600);
    match options.clone().create_new(true).open(path) {
        Ok(file) => {
            // The new name must survive a crash as well as the records in it.
            sync_parent(path).map_err(|error| AuditError::io(path, error))?;
            Ok(file)
        }
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => options
            .open(path)
            .map_err(|error| AuditError::io(path, error)),
        Err(error) => Err(AuditError::io(path, error)),
    }
}

fn identity_of(metadata: &fs::Metadata) -> (u64, u64) {
    (metadata.dev(), metadata.ino())
}

fn sync_parent(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

/// Copies the bytes from `complete_len` on (a torn last record) to
/// `<path>.torn-<unix ms>` (durably), then cuts them off the log.
fn move_torn_aside(
    path: &Path,
    file: &File,
    complete_len: u64,
    len: u64,
) -> Result<TornLine, AuditError> {
    let torn =
        tail::read_range(file, complete_len, len).map_err(|error| AuditError::io(path, error))?;
    let stamp = now_unix_ms();
    let mut attempt = 0u32;
    let (moved_to, mut aside) = loop {
        let mut name = OsString::from(path.as_os_str());
        name.push(format!(".torn-{stamp}"));
        if attempt > 0 {
            name.push(format!("-{attempt}"));
        }
        let candidate = PathBuf::from(name);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&candidate)
        {
            Ok(aside) => break (candidate, aside),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists && attempt < 1000 => {
                attempt += 1;
            }
            Err(error) => return Err(AuditError::io(candidate, error)),
        }
    };
    aside
        .write_all(&torn)
        .and_then(|()| aside.sync_all())
        .and_then(|()| sync_parent(&moved_to))
        .map_err(|error| AuditError::io(&moved_to, error))?;
    file.set_len(complete_len)
        .and_then(|()| file.sync_all())
        .map_err(|error| AuditError::io(path, error))?;
    Ok(TornLine {
        moved_to,
        bytes: len - complete_len,
    })
}
