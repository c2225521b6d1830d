//! Signing tree heads and proving records against them (DESIGN §8.1), and
//! the text forms of the proofs.
//!
//! An inclusion proof is a C2SP `tlog-proof`: the record's line in the
//! `extra` line (so the proof is the record and its proof in one file), its
//! zero-based index, the RFC 9162 inclusion path (one base64 hash per line,
//! from the leaf's sibling up), a blank line and the checkpoint note.
//!
//! A consistency proof has the same shape:
//!
//! ```text
//! airlock/tlog-consistency@v1
//! old 1000 <base64 root of the old tree>
//! <RFC 9162 consistency path, one base64 hash per line>
//!
//! <the new checkpoint note>
//! ```

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::AuditError;
use crate::merkle::{self, Hash, ProofError};
use crate::merkle_index::{LeafSource, MerkleIndex};
use crate::note::{Checkpoint, NoteError, SigningKey, Verifier};

/// The first line of an inclusion proof.
pub const INCLUSION_HEADER: &str = "c2sp.org/tlog-proof@v1";
/// The first line of a consistency proof.
pub const CONSISTENCY_HEADER: &str = "airlock/tlog-consistency@v1";

/// A checkpoint and its signed note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedCheckpoint {
    pub checkpoint: Checkpoint,
    pub note: String,
}

/// Makes signed checkpoints of a log and proofs against them.
pub struct Checkpointer {
    index: MerkleIndex,
    key: SigningKey,
    origin: String,
}

impl Checkpointer {
    /// `origin` names the log in every checkpoint (see
    /// [`crate::note::check_name`]).
    pub fn new(index: MerkleIndex, key: SigningKey, origin: &str) -> Result<Self, AuditError> {
        crate::note::check_name(origin)
            .map_err(|error| AuditError::InvalidKey(format!("audit origin: {error}")))?;
        Ok(Checkpointer {
            index,
            key,
            origin: origin.to_owned(),
        })
    }

    pub fn key(&self) -> &SigningKey {
        &self.key
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn index(&self) -> &MerkleIndex {
        &self.index
    }

    /// Brings the index up to `last` (a seq; `u64::MAX` for the end) and
    /// returns how many records it covers.
    pub fn catch_up(&self, source: &mut dyn LeafSource, last: u64) -> Result<u64, AuditError> {
        self.index.catch_up(source, last)
    }

    /// Signs the tree of `size` records (`None`: every record the log has),
    /// after checking it extends `previous` (the newest checkpoint signed
    /// before).
    ///
    /// The signed root never rests on stored hashes alone: the index gives
    /// the right edge of the tree at `previous.size`, which must give
    /// `previous.root`, and the records after it are hashed from the log
    /// now (the first checkpoint hashes the whole log). An index that
    /// disagrees (damaged, stale, or built from a log changed since) is
    /// rebuilt from the log once; a log that still does not extend
    /// `previous` is [`AuditError::CheckpointConflict`], and nothing is
    /// signed.
    pub fn sign(
        &self,
        source: &mut dyn LeafSource,
        size: Option<u64>,
        previous: Option<&Checkpoint>,
    ) -> Result<SignedCheckpoint, AuditError> {
        let mut rebuilt = false;
        loop {
            let attempt = self.extend_previous(source, size, previous);
            let conflict_size = previous.map_or(0, |previous| previous.size);
            match attempt {
                Ok(Some(checkpoint)) => {
                    let note = self.key.sign(&checkpoint.body());
                    return Ok(SignedCheckpoint { checkpoint, note });
                }
                // The index does not agree with the log or the last
                // checkpoint: rebuild it once from the log.
                Ok(None)
                | Err(AuditError::IndexAhead { .. } | AuditError::IndexMismatch { .. })
                    if !rebuilt =>
                {
                    self.index.reset()?;
                    rebuilt = true;
                }
                Ok(None)
                | Err(AuditError::IndexAhead { .. } | AuditError::IndexMismatch { .. }) => {
                    return Err(AuditError::CheckpointConflict {
                        size: conflict_size.max(size.unwrap_or(0)),
                    });
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The checkpoint of `size` records grown from `previous` (see
    /// [`Checkpointer::sign`]); `None` when the index or the log does not
    /// extend `previous`.
    fn extend_previous(
        &self,
        source: &mut dyn LeafSource,
        size: Option<u64>,
        previous: Option<&Checkpoint>,
    ) -> Result<Option<Checkpoint>, AuditError> {
        let covered = self.index.catch_up(source, size.unwrap_or(u64::MAX))?;
        let size = size.unwrap_or(covered);
        if let Some(previous) = previous
            && (previous.size > covered || previous.size > size)
        {
            // Cut short, or a smaller tree than one signed before.
            return Ok(None);
        }
        if size > covered {
            return Err(AuditError::OutOfRange {
                index: size - 1,
                size: covered,
            });
        }
        let from = previous.map_or(0, |previous| previous.size);
        let mut frontier = self
            .index
            .read(|hashes, _| merkle::Frontier::of(hashes, from))?;
        if let Some(previous) = previous
            && frontier.root() != previous.root
        {
            return Ok(None);
        }
        // The records after the last checkpoint, hashed from the log now.
        if size > from {
            let cursor = source.seek(from + 1)?;
            source.read(from + 1, cursor, size, &mut |line| {
                frontier.push(merkle::leaf_hash(line), &mut |_, _, _| {});
            })?;
        }
        if frontier.size() != size {
            return Ok(None);
        }
        let root = frontier.root();
        // Stored hashes past the last checkpoint that disagree are dropped,
        // so later proofs are made from the log again.
        let stored = self
            .index
            .read(|hashes, _| merkle::tree_hash(hashes, size))?;
        if stored != root {
            self.index.reset()?;
        }
        Ok(Some(Checkpoint {
            origin: self.origin.clone(),
            size,
            root,
        }))
    }

    /// The RFC 9162 inclusion path of leaf `index` in the tree of `size`.
    pub fn inclusion(
        &self,
        source: &mut dyn LeafSource,
        index: u64,
        size: u64,
    ) -> Result<Vec<Hash>, AuditError> {
        self.index.catch_up(source, size)?;
        self.index
            .read(|hashes, _| merkle::inclusion_proof(hashes, index, size))
    }

    /// The RFC 9162 consistency proof from the tree of `old` to that of
    /// `new`, and the old tree's head.
    pub fn consistency(
        &self,
        source: &mut dyn LeafSource,
        old: u64,
        new: u64,
    ) -> Result<(Vec<Hash>, Hash), AuditError> {
        self.index.catch_up(source, new)?;
        self.index.read(|hashes, _| {
            let proof = merkle::consistency_proof(hashes, old, new)?;
            Ok((proof, merkle::tree_hash(hashes, old)?))
        })
    }
}

/// A `tlog-proof` of a record.
pub fn inclusion_text(record_line: &[u8], index: u64, path: &[Hash], note: &str) -> String {
    proof_text(
        format!(
            "{INCLUSION_HEADER}\nextra {}\nindex {index}\n",
            BASE64.encode(record_line)
        ),
        path,
        note,
    )
}

/// A consistency proof from the tree of `old` records (head `old_root`) to
/// the checkpoint `note`.
pub fn consistency_text(old: u64, old_root: &Hash, proof: &[Hash], note: &str) -> String {
    proof_text(
        format!(
            "{CONSISTENCY_HEADER}\nold {old} {}\n",
            BASE64.encode(old_root)
        ),
        proof,
        note,
    )
}

/// `head`, one base64 hash per line, a blank line, the checkpoint note.
fn proof_text(mut text: String, hashes: &[Hash], note: &str) -> String {
    for hash in hashes {
        text.push_str(&BASE64.encode(hash));
        text.push('\n');
    }
    text.push('\n');
    text.push_str(note);
    text
}

/// Why an offline check failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    #[error("{0}")]
    Note(#[from] NoteError),
    #[error("{0}")]
    Proof(#[from] ProofError),
    #[error("not a proof: {0}")]
    Malformed(String),
    #[error("the proof is for the log {found:?}, the checkpoint for {expected:?}")]
    OtherLog { found: String, expected: String },
    #[error(
        "the proof is against a tree of {proof} records and the checkpoint covers {checkpoint}: prove against the same checkpoint, or check that one extends the other"
    )]
    OtherTree { proof: u64, checkpoint: u64 },
    #[error("the proof carries no record line; give the record")]
    NoRecord,
    #[error(
        "the log holds {records} records and the checkpoint covers {size}: records were cut off its end"
    )]
    Truncated { records: u64, size: u64 },
    #[error(
        "the log's first {size} records are not the ones the checkpoint covers: records were changed, reordered, inserted or removed"
    )]
    Rewritten { size: u64 },
    #[error("{0}")]
    Log(String),
}

/// Checks a whole log offline against a checkpoint note `verifier` signed:
/// its first `size` records must give the checkpoint's root. Returns the
/// checkpoint and how many records the log holds after those.
pub fn check_log(
    source: &mut dyn LeafSource,
    note: &str,
    verifier: &Verifier,
) -> Result<(Checkpoint, u64), CheckError> {
    let checkpoint = Checkpoint::open(note, verifier)?;
    let mut frontier = merkle::Frontier::default();
    let mut beyond = 0u64;
    source
        .read(1, 0, u64::MAX, &mut |line| {
            if frontier.size() < checkpoint.size {
                frontier.push(merkle::leaf_hash(line), &mut |_, _, _| {});
            } else {
                beyond += 1;
            }
        })
        .map_err(|error| CheckError::Log(error.to_string()))?;
    if frontier.size() < checkpoint.size {
        return Err(CheckError::Truncated {
            records: frontier.size(),
            size: checkpoint.size,
        });
    }
    if frontier.root() != checkpoint.root {
        return Err(CheckError::Rewritten {
            size: checkpoint.size,
        });
    }
    Ok((checkpoint, beyond))
}

/// A parsed inclusion proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InclusionProof {
    pub record: Option<Vec<u8>>,
    pub index: u64,
    pub path: Vec<Hash>,
    pub note: String,
}

/// A parsed consistency proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsistencyProof {
    pub old: u64,
    pub old_root: Hash,
    pub path: Vec<Hash>,
    pub note: String,
}

fn hash_line(line: &str) -> Result<Hash, CheckError> {
    BASE64
        .decode(line)
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or_else(|| CheckError::Malformed(format!("{line:?} is not a base64 SHA-256 hash")))
}

fn decimal(text: &str) -> Result<u64, CheckError> {
    if text.is_empty()
        || !text.bytes().all(|b| b.is_ascii_digit())
        || (text.len() > 1 && text.starts_with('0'))
    {
        return Err(CheckError::Malformed(format!("{text:?} is not a decimal")));
    }
    text.parse()
        .map_err(|_| CheckError::Malformed(format!("{text:?} is too large")))
}

/// Splits a proof into its header lines (up to the first blank line) and
/// the note after it.
fn split_proof<'a>(text: &'a str, header: &str) -> Result<(Vec<&'a str>, &'a str), CheckError> {
    if text.len() > crate::note::MAX_NOTE_BYTES {
        return Err(CheckError::Malformed("larger than 1 MiB".into()));
    }
    let (head, note) = text
        .split_once("\n\n")
        .ok_or_else(|| CheckError::Malformed("no blank line before the checkpoint".into()))?;
    let mut lines: Vec<&str> = head.split('\n').collect();
    if lines.first() != Some(&header) {
        return Err(CheckError::Malformed(format!(
            "the first line must be {header}"
        )));
    }
    lines.remove(0);
    Ok((lines, note))
}

impl InclusionProof {
    pub fn parse(text: &str) -> Result<InclusionProof, CheckError> {
        let (lines, note) = split_proof(text, INCLUSION_HEADER)?;
        let mut lines = lines.into_iter().peekable();
        let mut record = None;
        if let Some(extra) = lines.peek().and_then(|line| line.strip_prefix("extra ")) {
            record = Some(
                BASE64
                    .decode(extra)
                    .map_err(|_| CheckError::Malformed("the extra line is not base64".into()))?,
            );
            lines.next();
        }
        let index = lines
            .next()
            .and_then(|line| line.strip_prefix("index "))
            .ok_or_else(|| CheckError::Malformed("no index line".into()))?;
        let index = decimal(index)?;
        let path = lines.map(hash_line).collect::<Result<Vec<_>, _>>()?;
        Ok(InclusionProof {
            record,
            index,
            path,
            note: note.to_owned(),
        })
    }

    /// Checks that `record` (or the line the proof carries) is in the log
    /// the checkpoint `trusted` (a note `verifier` signed) covers. Returns
    /// the checkpoint.
    pub fn check(
        &self,
        record: Option<&[u8]>,
        trusted: Option<&str>,
        verifier: &Verifier,
    ) -> Result<Checkpoint, CheckError> {
        let checkpoint = Checkpoint::open(&self.note, verifier)?;
        if let Some(trusted) = trusted {
            let trusted = Checkpoint::open(trusted, verifier)?;
            if trusted.origin != checkpoint.origin {
                return Err(CheckError::OtherLog {
                    found: checkpoint.origin,
                    expected: trusted.origin,
                });
            }
            if trusted != checkpoint {
                return Err(CheckError::OtherTree {
                    proof: checkpoint.size,
                    checkpoint: trusted.size,
                });
            }
        }
        let line = record
            .or(self.record.as_deref())
            .ok_or(CheckError::NoRecord)?;
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        merkle::verify_inclusion(
            &merkle::leaf_hash(line),
            self.index,
            checkpoint.size,
            &self.path,
            &checkpoint.root,
        )?;
        Ok(checkpoint)
    }
}

impl ConsistencyProof {
    pub fn parse(text: &str) -> Result<ConsistencyProof, CheckError> {
        let (lines, note) = split_proof(text, CONSISTENCY_HEADER)?;
        let mut lines = lines.into_iter();
        let old_line = lines
            .next()
            .and_then(|line| line.strip_prefix("old "))
            .ok_or_else(|| CheckError::Malformed("no old line".into()))?;
        let (old, old_root) = old_line
            .split_once(' ')
            .ok_or_else(|| CheckError::Malformed("the old line is 'old SIZE ROOT'".into()))?;
        let path = lines.map(hash_line).collect::<Result<Vec<_>, _>>()?;
        Ok(ConsistencyProof {
            old: decimal(old)?,
            old_root: hash_line(old_root)?,
            path,
            note: note.to_owned(),
        })
    }

    /// Checks that the checkpoint the proof carries extends `old` (a
    /// checkpoint note kept from before); both signed by `verifier`.
    /// Returns the new checkpoint.
    pub fn check(&self, old: &str, verifier: &Verifier) -> Result<Checkpoint, CheckError> {
        let old = Checkpoint::open(old, verifier)?;
        let new = Checkpoint::open(&self.note, verifier)?;
        if old.origin != new.origin {
            return Err(CheckError::OtherLog {
                found: new.origin,
                expected: old.origin,
            });
        }
        if self.old != old.size || self.old_root != old.root {
            return Err(CheckError::OtherTree {
                proof: self.old,
                checkpoint: old.size,
            });
        }
        merkle::verify_consistency(old.size, new.size, &old.root, &new.root, &self.path)?;
        Ok(new)
    }
}
