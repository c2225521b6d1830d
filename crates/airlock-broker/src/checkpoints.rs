//! Signed checkpoints of the audit log (DESIGN §8.1): when they are made
//! (every `audit.checkpoints.every` records, when a server stops, on
//! request), where they go (the store, `<state_dir>/audit.checkpoint`, the
//! feed for the webhook publisher), and the proofs made against them.
//!
//! The instance's key is `<state_dir>/audit.key`, made when the workspace
//! is first opened; the Merkle index is `<state_dir>/audit.merkle` (the
//! file chain) or `<state_dir>/audit-shared.merkle` (the shared store's).
//! A checkpoint that would not extend the one signed before is never
//! signed: that is reported and audited as `audit_checkpoint_refused`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use airlock_audit::note::{Checkpoint, SigningKey, Verifier};
use airlock_audit::{AuditError, Checkpointer, FileLeaves, LeafSource, MerkleIndex};
use airlock_core::ErrorCode;
use airlock_core::config::Config;
use airlock_store::{CheckpointRow, Saved, Store};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::error::BrokerError;

/// The key file in the state dir.
pub const KEY_FILE: &str = "audit.key";
/// The latest checkpoint, for a cron job to copy anywhere.
pub const LATEST_FILE: &str = "audit.checkpoint";
/// Where the origin made for a log is kept in the store.
const ORIGIN_KEY: &str = "audit_origin";

fn failure(code: ErrorCode, what: impl std::fmt::Display) -> BrokerError {
    BrokerError::refused(code, what.to_string())
}

/// The chain in the shared store, read page by page for the index.
struct StoreLeaves<'a>(&'a Store);

impl LeafSource for StoreLeaves<'_> {
    fn read(
        &mut self,
        next_seq: u64,
        _cursor: u64,
        last: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<u64, AuditError> {
        let mut seq = next_seq;
        while seq <= last {
            let page = usize::try_from((last - seq + 1).min(5_000)).unwrap_or(5_000);
            let rows = self
                .0
                .audit_rows(seq - 1, page)
                .map_err(|error| AuditError::Database(error.to_string()))?;
            if rows.is_empty() {
                break;
            }
            for row in rows {
                if row.seq != seq {
                    return Err(AuditError::Database(format!(
                        "the chain has no record {seq} (next is {})",
                        row.seq
                    )));
                }
                each(row.line.as_bytes());
                seq += 1;
            }
        }
        Ok(0)
    }

    fn line(&mut self, seq: u64) -> Result<Option<Vec<u8>>, AuditError> {
        let rows = self
            .0
            .audit_rows(seq.saturating_sub(1), 1)
            .map_err(|error| AuditError::Database(error.to_string()))?;
        Ok(rows
            .into_iter()
            .find(|row| row.seq == seq)
            .map(|row| row.line.into_bytes()))
    }
}

/// A record's inclusion proof against the latest checkpoint.
#[derive(Debug, Clone)]
pub struct RecordProof {
    /// The proof in C2SP `tlog-proof` form (the record's line in `extra`).
    pub text: String,
    pub seq: u64,
    pub line: String,
    pub path: Vec<[u8; 32]>,
    pub checkpoint: CheckpointRow,
}

/// The checkpoints of one workspace's log.
pub struct Checkpoints {
    state_dir: PathBuf,
    /// The JSONL chain, or `None` when the chain is in the shared store.
    log: Option<PathBuf>,
    store: Arc<Store>,
    every: u64,
    origin: Option<String>,
    /// Made at first use; a failure to make it is tried again next time.
    signer: Mutex<Option<Arc<Checkpointer>>>,
    /// The log no longer extends a checkpoint signed before: no more
    /// automatic attempts in this process (each would rehash the log).
    refused: AtomicBool,
}

impl std::fmt::Debug for Checkpoints {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Checkpoints")
            .field("state_dir", &self.state_dir)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

impl Checkpoints {
    pub(crate) fn of(root: &Path, config: &Config, store: Arc<Store>) -> Checkpoints {
        Checkpoints {
            state_dir: root.join(&config.workspace.state_dir),
            log: (!store.is_shared()).then(|| root.join(&config.audit.path)),
            store,
            every: config.audit.checkpoints.every,
            origin: config.audit.checkpoints.origin.clone(),
            signer: Mutex::new(None),
            refused: AtomicBool::new(false),
        }
    }

    /// How many records apart checkpoints are made (0: never on their own).
    pub fn every(&self) -> u64 {
        self.every
    }

    /// The path of the latest checkpoint's file.
    pub fn latest_path(&self) -> PathBuf {
        self.state_dir.join(LATEST_FILE)
    }

    /// The log's origin: configured, or made once and kept in the store
    /// (so every instance of a shared store names the log alike).
    fn origin(&self) -> Result<String, BrokerError> {
        if let Some(origin) = &self.origin {
            return Ok(origin.clone());
        }
        let host = ["/proc/sys/kernel/hostname", "/etc/hostname"]
            .iter()
            .find_map(|path| std::fs::read_to_string(path).ok())
            .unwrap_or_default()
            .trim()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
            .collect::<String>();
        let host = if host.is_empty() {
            "localhost".into()
        } else {
            host
        };
        let id = uuid::Uuid::new_v4().simple().to_string();
        let made = format!("{host}/airlock/{}", &id[..16]);
        Ok(self.store.kv_get_or_insert(ORIGIN_KEY, &made)?)
    }

    /// Makes the instance's key if it has none yet (the first start).
    pub(crate) fn ensure_key(&self) -> Result<(), BrokerError> {
        let path = self.state_dir.join(KEY_FILE);
        if path.exists() {
            return Ok(());
        }
        SigningKey::load_or_create(&path, &self.origin()?)?;
        Ok(())
    }

    fn signer(&self) -> Result<Arc<Checkpointer>, BrokerError> {
        let mut slot = self.signer.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(signer) = slot.as_ref() {
            return Ok(signer.clone());
        }
        let origin = self.origin()?;
        let key = SigningKey::load_or_create(&self.state_dir.join(KEY_FILE), &origin)?;
        let index_name = if self.log.is_some() {
            "audit.merkle"
        } else {
            "audit-shared.merkle"
        };
        let index = MerkleIndex::open(&self.state_dir.join(index_name))?;
        let signer = Arc::new(Checkpointer::new(index, key, &origin)?);
        *slot = Some(signer.clone());
        Ok(signer)
    }

    /// Whether a refusal stopped automatic checkpoints in this process.
    pub fn refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    fn source(&self) -> Box<dyn LeafSource + '_> {
        match &self.log {
            Some(path) => Box::new(FileLeaves { path: path.clone() }),
            None => Box::new(StoreLeaves(&self.store)),
        }
    }

    /// The key that checks this instance's checkpoints.
    pub fn verifier(&self) -> Result<Verifier, BrokerError> {
        Ok(self.signer()?.key().verifier())
    }

    /// The checkpoint of the largest tree.
    pub fn latest(&self) -> Result<Option<CheckpointRow>, BrokerError> {
        Ok(self.store.latest_checkpoint()?)
    }

    /// The checkpoint of a tree of `size` records.
    pub fn of_size(&self, size: u64) -> Result<Option<CheckpointRow>, BrokerError> {
        Ok(self.store.checkpoint_of_size(size)?)
    }

    /// Signs the tree of `size` records (`None`: all of them) unless a
    /// checkpoint already covers it; stores it, replaces the latest file
    /// when it is newer, and returns it (`None`: nothing new to sign).
    pub fn make(
        &self,
        size: Option<u64>,
        now_ms: u64,
    ) -> Result<Option<CheckpointRow>, BrokerError> {
        self.make_with(size, now_ms, true)
    }

    /// [`Checkpoints::make`]; `sync: false` when the records it covers are
    /// known to be on disk already (the last one was appended durably: its
    /// sync covered every line before it in the file).
    pub(crate) fn make_with(
        &self,
        size: Option<u64>,
        now_ms: u64,
        sync: bool,
    ) -> Result<Option<CheckpointRow>, BrokerError> {
        let latest = self.latest()?;
        if let (Some(size), Some(latest)) = (size, &latest)
            && latest.size >= size
        {
            return Ok(None);
        }
        let stored = |row: &CheckpointRow, error: &dyn std::fmt::Display| {
            failure(
                ErrorCode::IoError,
                format_args!("stored checkpoint {}: {error}", row.size),
            )
        };
        let previous = match &latest {
            Some(row) => {
                let note = airlock_audit::note::Note::parse(&row.note)
                    .map_err(|error| stored(row, &error))?;
                Some(Checkpoint::parse(&note.text).map_err(|error| stored(row, &error))?)
            }
            None => None,
        };
        let signer = self.signer()?;
        let mut source = self.source();
        // Every record the log has now, then synced: a record must be on
        // disk before a checkpoint covers it (one a crash then lost would
        // make every later checkpoint refuse); one appended after this is
        // left for the next checkpoint.
        let size = match size {
            Some(size) => size,
            None => signer.catch_up(source.as_mut(), u64::MAX)?,
        };
        if size == 0 {
            return Ok(None);
        }
        if let Some(path) = &self.log
            && sync
            && let Ok(file) = std::fs::File::open(path)
        {
            file.sync_data().map_err(|error| {
                failure(
                    ErrorCode::IoError,
                    format_args!("{}: {error}", path.display()),
                )
            })?;
        }
        if let (Some(latest), Some(previous)) = (&latest, &previous)
            && latest.size >= size
        {
            // Nothing new to sign; the log must still give the tree signed
            // last (a rewrite is reported, not slept through).
            self.refuse_on_conflict(signer.sign(
                source.as_mut(),
                Some(latest.size),
                Some(previous),
            ))?;
            return Ok(None);
        }
        let signed =
            self.refuse_on_conflict(signer.sign(source.as_mut(), Some(size), previous.as_ref()))?;
        let verifier = signer.key().verifier();
        let row = CheckpointRow {
            size: signed.checkpoint.size,
            key_id: format!("{}+{:08x}", verifier.name, verifier.id),
            root: BASE64.encode(signed.checkpoint.root),
            note: signed.note,
            created_ms: now_ms,
        };
        match self.store.save_checkpoint(&row)? {
            Saved::New => crate::metrics::observe_checkpoint(),
            Saved::Same => {}
            // Another root under this key for the same size: a fork.
            Saved::Other => {
                self.refused.store(true, Ordering::Relaxed);
                return Err(BrokerError::Audit(AuditError::CheckpointConflict {
                    size: row.size,
                }));
            }
        }
        self.write_latest(&row)?;
        Ok(Some(row))
    }

    /// Remembers a refusal (no more automatic attempts in this process).
    fn refuse_on_conflict<T>(&self, signed: Result<T, AuditError>) -> Result<T, BrokerError> {
        if let Err(AuditError::CheckpointConflict { .. }) = &signed {
            self.refused.store(true, Ordering::Relaxed);
        }
        Ok(signed?)
    }

    /// Replaces `<state_dir>/audit.checkpoint` with `row`'s note when it
    /// covers more than the one there.
    fn write_latest(&self, row: &CheckpointRow) -> Result<(), BrokerError> {
        let path = self.latest_path();
        let io = |error: std::io::Error| {
            failure(
                ErrorCode::IoError,
                format_args!("{}: {error}", path.display()),
            )
        };
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.state_dir.join("audit.checkpoint.lock"))
            .map_err(io)?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|error| io(error.into()))?;
        let there = std::fs::read_to_string(&path).ok().and_then(|note| {
            note.lines()
                .nth(1)
                .and_then(|size| size.parse::<u64>().ok())
        });
        if there.is_some_and(|size| size >= row.size) {
            return Ok(());
        }
        let temporary = self.state_dir.join("audit.checkpoint.tmp");
        let mut file = std::fs::File::create(&temporary).map_err(io)?;
        file.write_all(row.note.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(io)?;
        std::fs::rename(&temporary, &path).map_err(io)
    }

    /// The inclusion proof of record `seq` against the latest checkpoint.
    pub fn prove(&self, seq: u64) -> Result<RecordProof, BrokerError> {
        let Some(checkpoint) = self.latest()? else {
            return Err(failure(
                ErrorCode::NotFound,
                "no checkpoint yet: make one with `airlock audit checkpoint --new`",
            ));
        };
        if seq == 0 || seq > checkpoint.size {
            return Err(failure(
                ErrorCode::NotFound,
                format_args!(
                    "record {seq} is not covered by the latest checkpoint (records 1 to {}){}",
                    checkpoint.size,
                    if seq > checkpoint.size {
                        "; make a newer one with `airlock audit checkpoint --new`"
                    } else {
                        ""
                    }
                ),
            ));
        }
        let signer = self.signer()?;
        let mut source = self.source();
        let path = signer.inclusion(source.as_mut(), seq - 1, checkpoint.size)?;
        let line = source.line(seq)?.ok_or_else(|| {
            failure(
                ErrorCode::NotFound,
                format_args!("the log has no record {seq}"),
            )
        })?;
        let text = airlock_audit::inclusion_text(&line, seq - 1, &path, &checkpoint.note);
        Ok(RecordProof {
            text,
            seq,
            line: String::from_utf8_lossy(&line).into_owned(),
            path,
            checkpoint,
        })
    }

    /// The proof that the checkpoint of `new` records extends the tree of
    /// `old` records.
    pub fn consistency(&self, old: u64, new: u64) -> Result<String, BrokerError> {
        let Some(checkpoint) = self.of_size(new)? else {
            return Err(failure(
                ErrorCode::NotFound,
                format_args!(
                    "no checkpoint of {new} records (airlock audit checkpoint --list shows them)"
                ),
            ));
        };
        if old > new {
            return Err(failure(
                ErrorCode::InvalidInput,
                format_args!("the old tree ({old} records) is larger than the new one ({new})"),
            ));
        }
        let signer = self.signer()?;
        let (path, old_root) = signer.consistency(self.source().as_mut(), old, new)?;
        Ok(airlock_audit::consistency_text(
            old,
            &old_root,
            &path,
            &checkpoint.note,
        ))
    }
}

impl crate::Broker {
    /// This workspace's checkpoints.
    pub fn checkpoints(&self) -> &Checkpoints {
        &self.checkpoints
    }

    /// Every checkpoint, smallest tree first.
    pub fn checkpoint_list(&self) -> Result<Vec<CheckpointRow>, BrokerError> {
        Ok(self.store.checkpoints()?)
    }

    /// Signs the whole log now (`airlock audit checkpoint --new`, a server
    /// stopping); `None` when the latest checkpoint already covers it.
    pub fn checkpoint_now(&self) -> Result<Option<CheckpointRow>, BrokerError> {
        self.audit.flush();
        let made = self.checkpoints.make(None, self.clock.now_ms());
        self.refused_if_conflict(made)
    }

    /// After record `seq` was appended: the checkpoint of the first `seq`
    /// records when `seq` is a multiple of `audit.checkpoints.every`. A
    /// failure is reported, never the call's failure.
    pub(crate) fn after_append(&self, seq: u64, durability: airlock_audit::Durability) {
        let every = self.checkpoints.every();
        if every == 0 || !seq.is_multiple_of(every) || self.checkpoints.refused() {
            return;
        }
        // A record that is only written is synced first (with every line
        // before it: one file); a durable one already was.
        if durability == airlock_audit::Durability::Soon {
            self.audit.flush();
        }
        let made = self
            .checkpoints
            .make_with(Some(seq), self.clock.now_ms(), false);
        if let Err(error) = self.refused_if_conflict(made) {
            eprintln!("airlock: no audit checkpoint at {seq} records: {error}");
        }
    }

    /// Audits a refusal to sign (the log no longer extends a checkpoint
    /// signed before) as `audit_checkpoint_refused`.
    fn refused_if_conflict(
        &self,
        made: Result<Option<CheckpointRow>, BrokerError>,
    ) -> Result<Option<CheckpointRow>, BrokerError> {
        if let Err(BrokerError::Audit(AuditError::CheckpointConflict { size })) = &made {
            let record = crate::Record::new("audit_checkpoint_refused")
                .text("status", "error")
                .number("checkpoint_size", *size)
                .text(
                    "reason",
                    &made
                        .as_ref()
                        .err()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                )
                .into_map();
            // Appended directly: this record must not start another
            // checkpoint.
            if let Err(error) = self.audit.append(record) {
                eprintln!("airlock: {error}");
            }
        }
        made
    }
}

/// The store key of how far checkpoints were published to `url`.
fn published_key(url: &str) -> String {
    format!("checkpoint_published {url}")
}

impl crate::Broker {
    /// The checkpoints not yet published to `url`, smallest first (a
    /// publisher's durable cursor: nothing is skipped across restarts).
    pub fn unpublished_checkpoints(&self, url: &str) -> Result<Vec<CheckpointRow>, BrokerError> {
        let done: u64 = self
            .store
            .get_kv(&published_key(url))?
            .and_then(|size| size.parse().ok())
            .unwrap_or(0);
        Ok(self
            .store
            .checkpoints()?
            .into_iter()
            .filter(|row| row.size > done)
            .collect())
    }

    /// Records that the checkpoint of `size` records reached `url`.
    pub fn mark_published(&self, url: &str, size: u64) -> Result<(), BrokerError> {
        let key = published_key(url);
        let done: u64 = self
            .store
            .get_kv(&key)?
            .and_then(|size| size.parse().ok())
            .unwrap_or(0);
        if size > done {
            self.store.set_kv(&key, &size.to_string())?;
        }
        Ok(())
    }
}

impl crate::Broker {
    /// Where shipping to `target` stands: the last seq sent and where to
    /// read on from (see [`crate::AuditSource::lines_after`]).
    pub fn ship_cursor(&self, target: &str) -> Result<(u64, u64), BrokerError> {
        Ok(self.store.cursor(&format!("ship {target}"))?)
    }

    /// Records that everything through `seq` reached `target`, if this
    /// process (`holder`) still holds the lease `lease`; whether it did.
    pub fn save_ship_cursor(
        &self,
        target: &str,
        seq: u64,
        position: u64,
        lease: &str,
        holder: &str,
    ) -> Result<bool, BrokerError> {
        Ok(self.store.advance_cursor(
            &format!("ship {target}"),
            seq,
            position,
            lease,
            holder,
            self.now_ms(),
        )?)
    }

    /// Sets shipping to `target` back to `seq`.
    pub fn reset_ship_cursor(&self, target: &str, seq: u64) -> Result<(), BrokerError> {
        Ok(self.store.reset_cursor(&format!("ship {target}"), seq)?)
    }

    /// The last record known to be on disk: the head the store mirrors
    /// after each sync (the file), or the chain's head (the database).
    pub fn durable_head(&self) -> Result<u64, BrokerError> {
        self.audit_records()
    }

    /// Takes or renews the lease of a job only one process does (`holder`
    /// names this one) for `for_ms`.
    pub fn try_lease(&self, name: &str, holder: &str, for_ms: u64) -> Result<bool, BrokerError> {
        let now = self.now_ms();
        Ok(self.store.try_lease(name, holder, now, now + for_ms)?)
    }

    /// Gives a lease up.
    pub fn release_lease(&self, name: &str, holder: &str) -> Result<(), BrokerError> {
        Ok(self.store.release_lease(name, holder)?)
    }
}
