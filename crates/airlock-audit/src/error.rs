//! The error type of the crate.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// What can go wrong while opening, appending to or reading an audit log.
///
/// It is `Clone` because one failed group commit fails every append in the group, so
/// IO errors are kept behind an `Arc`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuditError {
    /// Reading, writing, syncing or locking the log (or a file beside it) failed. An
    /// append that fails this way has not added its record to the log.
    #[error("audit log {path}: {source}")]
    Io {
        path: PathBuf,
        source: Arc<io::Error>,
    },
    /// The chain cannot be continued: the record the log ends with is not one,
    /// and neither is the one before it (a single bad last record is moved
    /// aside like a torn line; more is corruption, not a torn tail). Nothing
    /// is appended.
    #[error(
        "audit log {path}: line {line} (byte {offset}) is not a record the chain can continue from: {reason}; nothing is appended until it is repaired (airlock audit verify shows the chain)"
    )]
    CorruptTail {
        path: PathBuf,
        line: u64,
        offset: u64,
        reason: String,
    },
    /// A field of the record has a type the log cannot use; nothing was written.
    #[error("record field {field}: {reason}")]
    InvalidRecord { field: &'static str, reason: String },
    /// The chain is keyed and no key was given, or the other way round: appending
    /// would break it, so the log refuses to open.
    #[error("audit log {path}: {reason}")]
    KeyMismatch { path: PathBuf, reason: String },
    /// The HMAC key cannot be used.
    #[error("invalid audit key: {0}")]
    InvalidKey(String),
    /// The head store could not be read when the log was opened.
    #[error("head store: {0}")]
    HeadStore(HeadStoreError),
    /// The record is durably in the log (as `seq`), but saving the new head to the head
    /// store failed, so a truncation after this point may go unnoticed. Do not append
    /// the record again.
    #[error("event seq {seq} is in the log, but the head store failed: {reason}")]
    HeadNotSaved { seq: u64, reason: HeadStoreError },
    /// The database that keeps the chain (several instances share it) failed;
    /// none of the group's records is known to be in the chain.
    #[error("the audit chain in the database: {0}")]
    Database(String),
    /// The thread writing a group of appends panicked; none of them is known to be in
    /// the log.
    #[error("the audit log writer stopped unexpectedly")]
    WriterStopped,
    /// A leaf or tree size past the end of the tree.
    #[error("record index {index} is not in a tree of {size} records")]
    OutOfRange { index: u64, size: u64 },
    /// The Merkle index covers records the log no longer has: records were
    /// cut off the end of the log.
    #[error(
        "audit log {path}: the Merkle index covers {indexed} records, more than the log holds: records were cut off its end"
    )]
    IndexAhead { path: PathBuf, indexed: u64 },
    /// The record where the Merkle index continues is not the one it expects.
    #[error("audit log {path}: the record at byte {offset} is not seq {seq}")]
    IndexMismatch {
        path: PathBuf,
        seq: u64,
        offset: u64,
    },
    /// The tree the log gives now does not extend a checkpoint signed
    /// before: records covered by it were changed or removed. Nothing is
    /// signed.
    #[error(
        "the audit log no longer matches the checkpoint of {size} records signed before: records it covers were changed or removed; no checkpoint is signed"
    )]
    CheckpointConflict { size: u64 },
}

/// Why a head store could not load or save the head: the store's own
/// error, shared by every append of the group that waited on it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct HeadStoreError(std::sync::Arc<dyn std::error::Error + Send + Sync>);

impl HeadStoreError {
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> HeadStoreError {
        HeadStoreError(std::sync::Arc::new(error))
    }
}

impl AuditError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        AuditError::Io {
            path: path.into(),
            source: Arc::new(source),
        }
    }
}
