//! airlock-audit: the tamper-evident audit log of airlock (DESIGN §8).
//!
//! The log is append-only JSONL, one record per line, and every record is chained to
//! the one before it:
//!
//! ```text
//! {"seq":1,"ts":"2026-11-22T12:00:00.123Z","event":"read_file",…,"prev_hash":"sha256:000…0","event_hash":"sha256:…"}
//! ```
//!
//! `event_hash` is SHA-256 over the UTF-8 bytes of the `prev_hash` string immediately
//! followed by the RFC 8785 canonical JSON ([`airlock_core::canonical`]) of the record
//! without `event_hash` (so `seq`, `ts` and `prev_hash` are covered). The first record's
//! `prev_hash` is [`ZERO_HASH`]. With a configured key the hash is HMAC-SHA256 instead,
//! written `hmac-sha256:<hex>` so that a verifier knows which one it is looking at.
//!
//! - [`AuditLog`] appends: one durable write per group of concurrent appenders (or,
//!   with [`Durability::Soon`], a write now and a sync within [`SYNC_WITHIN`]), safe
//!   across threads and processes (an exclusive `flock` on the log), continuing the
//!   chain from the file's last line. [`AuditLog::open`] moves a torn last line aside
//!   and reports it in a [`Recovery`], never drops it silently.
//! - [`verify`] walks the chain and names the first bad `seq`; given the head kept in
//!   the store ([`HeadStore`]) it also catches a truncated tail.
//! - [`query`] filters records; [`Follower`] and [`tail_lines`] serve `audit tail [-f]`.
//! - Over the chain, the RFC 9162 Merkle tree ([`merkle`]): [`MerkleIndex`]
//!   stores its hashes beside the log, [`Checkpointer`] signs tree heads as
//!   C2SP checkpoint notes ([`note`]) with the instance's Ed25519 key and
//!   proves records ([`inclusion_text`]) and growth ([`consistency_text`]);
//!   [`check_log`], [`InclusionProof::check`] and [`ConsistencyProof::check`]
//!   verify offline with only the public key.
//!
//! Redaction of parameters is the caller's job ([`airlock_core::redact`]).
//!
//! ```
//! use airlock_audit::{AuditLog, verify};
//! use serde_json::json;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("audit.jsonl");
//! let (log, recovery) = AuditLog::open(&path, None, None)?;
//! assert!(recovery.is_clean());
//! let record = json!({"event": "read_file", "path": "src/main.rs"});
//! let appended = log.append(record.as_object().cloned().unwrap_or_default())?;
//! assert_eq!(appended.seq, 1);
//! let report = verify(&path, None, None)?;
//! assert!(report.is_ok());
//! assert_eq!(report.records, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod canonical_line;
mod chain;
mod checkpoint;
mod error;
mod log;
pub mod merkle;
mod merkle_index;
pub mod note;
mod read;
pub mod siem;
mod tail;
mod time;
mod verify;

pub use airlock_core::canonical::ZERO_HASH;
pub use canonical_line::LineError;
pub use chain::{HMAC_PREFIX, SHA256_PREFIX};
pub use checkpoint::{
    CONSISTENCY_HEADER, CheckError, Checkpointer, ConsistencyProof, INCLUSION_HEADER,
    InclusionProof, SignedCheckpoint, check_log, consistency_text, inclusion_text,
};
pub use error::{AuditError, HeadStoreError};
pub use log::{
    Appended, AuditLog, ChainLine, ChainStore, Durability, Head, HeadStore, Recovery, SYNC_WITHIN,
    TORN_LINE_EVENT, TRUNCATED_TAIL_EVENT, TornLine, TruncatedTail,
};
pub use merkle_index::{FileLeaves, LeafSource, MerkleIndex, line_seq};
pub use read::{Follower, Query, query, tail_lines};
pub use time::rfc3339_millis;
pub use verify::{Problem, ProblemKind, VerifyReport, verify};

/// The bytes a log line's `event_hash` covers after its `prev_hash`: the RFC 8785 text
/// of the line's object without `event_hash`, read straight from the line as
/// [`verify`] reads it (numbers no double holds exactly keep their text, see
/// [`airlock_core::canonical`]). For tools that check a chain on their own, and for
/// fuzzing the reader against the writer.
pub fn canonical_record_text(line: &[u8]) -> Result<Vec<u8>, LineError> {
    let mut out = Vec::with_capacity(line.len());
    canonical_line::LineCanonicalizer::new().canonicalize(line, &mut out)?;
    Ok(out)
}
