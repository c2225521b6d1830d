//! Where the audit chain is: the JSONL file of the workspace (SQLite mode),
//! or the shared store's table (PostgreSQL, one chain for every instance).
//! Appending goes through [`airlock_audit::AuditLog`] either way; reading
//! (query, tail, export, verify) goes through [`AuditSource`], which gives
//! the same lines from both: an export of the database chain is the JSONL
//! file it would be, byte for byte.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_audit::{AuditError, ChainLine, ChainStore, Follower, Head, Query};
use airlock_core::config::Config;
use airlock_store::{AuditRow, Store, StoreError};
use serde_json::{Map, Value};

use crate::error::BrokerError;

/// Reading or writing a file of the audit failed.
fn io_failure(what: impl std::fmt::Display) -> BrokerError {
    BrokerError::refused(airlock_core::ErrorCode::IoError, what.to_string())
}

/// Records read from the database per page.
const PAGE: usize = 5_000;

/// The chain in the shared store, as the audit log appends to it.
pub(crate) struct ChainInStore(pub(crate) Arc<Store>);

impl ChainStore for ChainInStore {
    fn append(
        &self,
        encode: &mut dyn FnMut(Option<Head>) -> Result<Vec<ChainLine>, AuditError>,
    ) -> Result<(), AuditError> {
        let mut refused = None;
        let stored = self.0.audit_append(&mut |head| {
            let head = head.map(|(seq, event_hash)| Head { seq, event_hash });
            match encode(head) {
                Ok(lines) => Ok(lines
                    .into_iter()
                    .map(|line| AuditRow {
                        seq: line.seq,
                        ts: line.ts,
                        event: line.event,
                        hitl_id: line.hitl_id,
                        event_hash: line.event_hash,
                        line: line.line,
                    })
                    .collect()),
                Err(error) => {
                    refused = Some(error);
                    Err(StoreError::Corrupt(
                        "the records could not be chained".into(),
                    ))
                }
            }
        });
        stored.map_err(|error| refused.unwrap_or_else(|| AuditError::Database(error.to_string())))
    }

    fn head(&self) -> Result<Option<Head>, AuditError> {
        self.0
            .audit_chain_head()
            .map(|head| head.map(|(seq, event_hash)| Head { seq, event_hash }))
            .map_err(|error| AuditError::Database(error.to_string()))
    }
}

/// Called with each record of the chain in turn.
pub(crate) type RecordVisitor<'a> =
    &'a mut dyn FnMut(&Map<String, Value>) -> Result<(), BrokerError>;

/// Where a workspace's audit chain is read from.
#[derive(Debug)]
pub enum AuditSource<'a> {
    /// The JSONL file (`audit.path`).
    File(PathBuf),
    /// The shared store's chain.
    Store(&'a Store),
}

/// Where a reader of [`AuditSource::follow`] stands.
#[derive(Debug)]
pub enum AuditFollower<'a> {
    File(Follower),
    Store { store: &'a Store, seq: u64 },
}

impl<'a> AuditSource<'a> {
    /// The chain of the workspace at `root` with `config`: in `store` when
    /// it is shared, else in the file.
    pub fn of(root: &Path, config: &Config, store: Option<&'a Store>) -> AuditSource<'a> {
        match store {
            Some(store) if store.is_shared() => AuditSource::Store(store),
            _ => AuditSource::File(root.join(&config.audit.path)),
        }
    }

    /// What to call it in a message.
    pub fn describe(&self) -> String {
        match self {
            AuditSource::File(path) => path.display().to_string(),
            AuditSource::Store(_) => "the audit chain in the database".to_owned(),
        }
    }

    /// Whether any record was ever written (a file that is not there: none).
    pub fn exists(&self) -> bool {
        match self {
            AuditSource::File(path) => path.exists(),
            AuditSource::Store(_) => true,
        }
    }

    /// Every line, oldest first, in pages: `each` gets each one (without
    /// its `\n`).
    fn each_line(
        &self,
        each: &mut dyn FnMut(&str) -> Result<(), BrokerError>,
    ) -> Result<(), BrokerError> {
        match self {
            AuditSource::File(path) => {
                if !path.exists() {
                    return Ok(());
                }
                let file = std::fs::File::open(path)
                    .map_err(|error| io_failure(format_args!("{}: {error}", path.display())))?;
                let mut reader = std::io::BufReader::with_capacity(256 * 1024, file);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    let read = std::io::BufRead::read_until(&mut reader, b'\n', &mut line)
                        .map_err(|error| io_failure(format_args!("{}: {error}", path.display())))?;
                    // A torn last line is no record.
                    if read == 0 || line.last() != Some(&b'\n') {
                        return Ok(());
                    }
                    line.pop();
                    each(&String::from_utf8_lossy(&line))?;
                }
            }
            AuditSource::Store(store) => {
                let mut after = 0;
                loop {
                    let rows = store.audit_rows(after, PAGE)?;
                    let Some(last) = rows.last() else {
                        return Ok(());
                    };
                    after = last.seq;
                    for row in &rows {
                        each(&row.line)?;
                    }
                }
            }
        }
    }

    /// Every record that is a JSON object, oldest first (a line that is
    /// not is skipped: `audit verify` is what reports it).
    pub(crate) fn each_record(&self, each: RecordVisitor<'_>) -> Result<(), BrokerError> {
        self.each_line(
            &mut |line| match serde_json::from_str::<Map<String, Value>>(line) {
                Ok(record) => each(&record),
                Err(_) => Ok(()),
            },
        )
    }

    /// Up to `limit` lines after record `after`, oldest first, with their
    /// seqs; and where to read on from. `position` is what the last read
    /// returned (a byte offset in the file; unused for the database); one
    /// that does not point at record `after + 1` is found again from the
    /// start.
    pub fn lines_after(
        &self,
        after: u64,
        position: u64,
        limit: usize,
    ) -> Result<(Vec<(u64, String)>, u64), BrokerError> {
        use airlock_audit::LeafSource as _;
        match self {
            AuditSource::File(path) => {
                let mut source = airlock_audit::FileLeaves { path: path.clone() };
                let last = after.saturating_add(limit as u64);
                let mut lines = Vec::new();
                let mut seq = after;
                let read = source.read(after + 1, position, last, &mut |line| {
                    seq += 1;
                    lines.push((seq, String::from_utf8_lossy(line).into_owned()));
                });
                match read {
                    Ok(next) => Ok((lines, next)),
                    // The position is stale (a repaired log, a lost cursor):
                    // read from the start, keeping what comes after `after`.
                    Err(AuditError::IndexMismatch { .. } | AuditError::IndexAhead { .. }) => {
                        let mut lines = Vec::new();
                        let mut seq = 0u64;
                        let next = source.read(1, 0, last, &mut |line| {
                            seq += 1;
                            if seq > after {
                                lines.push((seq, String::from_utf8_lossy(line).into_owned()));
                            }
                        })?;
                        Ok((lines, next))
                    }
                    Err(error) => Err(error.into()),
                }
            }
            AuditSource::Store(store) => Ok((
                store
                    .audit_rows(after, limit)?
                    .into_iter()
                    .map(|row| (row.seq, row.line))
                    .collect(),
                0,
            )),
        }
    }

    /// The records that match `query`, oldest first.
    pub fn query(&self, query: &Query) -> Result<Vec<Map<String, Value>>, BrokerError> {
        match self {
            AuditSource::File(path) if !path.exists() => Ok(Vec::new()),
            AuditSource::File(path) => Ok(airlock_audit::query(path, query)?),
            AuditSource::Store(store) => {
                // An approval's records of one event are looked up by index.
                let hitl_id = query
                    .filters
                    .iter()
                    .find(|(field, _)| field == "hitl_id")
                    .map(|(_, value)| value);
                let parse = |line: &str| serde_json::from_str::<Map<String, Value>>(line).ok();
                if let (Some(event), Some(hitl_id)) = (&query.event_type, hitl_id) {
                    return Ok(store
                        .audit_rows_of(event, hitl_id)?
                        .iter()
                        .filter_map(|row| parse(&row.line))
                        .filter(|record| query.matches(record))
                        .collect());
                }
                let mut found = Vec::new();
                self.each_line(&mut |line| {
                    if let Some(record) = parse(line)
                        && query.matches(&record)
                    {
                        found.push(record);
                    }
                    Ok(())
                })?;
                Ok(found)
            }
        }
    }

    /// Writes every line, each with its `\n`, to `out` (the JSONL file the
    /// chain is, or would be); how many.
    pub fn export(&self, out: &mut dyn Write) -> Result<u64, BrokerError> {
        let mut count = 0;
        self.each_line(&mut |line| {
            out.write_all(line.as_bytes())
                .and_then(|()| out.write_all(b"\n"))
                .map_err(|error| io_failure(format_args!("writing the export: {error}")))?;
            count += 1;
            Ok(())
        })?;
        Ok(count)
    }

    /// The last `count` lines, and where to follow on from.
    pub fn tail(&self, count: usize) -> Result<(Vec<String>, AuditFollower<'a>), BrokerError> {
        match self {
            AuditSource::File(path) => {
                let (lines, offset) = if path.exists() {
                    airlock_audit::tail_lines(path, count)?
                } else {
                    (Vec::new(), 0)
                };
                Ok((lines, AuditFollower::File(Follower::open(path, offset)?)))
            }
            AuditSource::Store(store) => {
                let rows = store.audit_last_rows(count)?;
                let seq = match rows.last() {
                    Some(row) => row.seq,
                    None => store.audit_chain_head()?.map_or(0, |(seq, _)| seq),
                };
                let lines = rows.into_iter().map(|row| row.line).collect();
                Ok((lines, AuditFollower::Store { store, seq }))
            }
        }
    }

    /// The head the chain should end with, kept apart from its lines: the
    /// store's mirror of the file's head, or the database chain's head row.
    fn stored_head(
        &self,
        database: &Path,
        store: Option<&Store>,
    ) -> Result<Option<Head>, BrokerError> {
        let head = match (self, store) {
            (AuditSource::Store(store), _) => store.audit_chain_head()?,
            (AuditSource::File(_), Some(store)) => store.audit_head()?,
            // Only read, and only when it exists.
            (AuditSource::File(_), None) if database.exists() => {
                Store::open(database)?.audit_head()?
            }
            (AuditSource::File(_), None) => None,
        };
        Ok(head.map(|(seq, event_hash)| Head { seq, event_hash }))
    }

    /// Verifies the chain with `key` against the head kept apart from it.
    /// A database chain is verified as its export: the same checks, and a
    /// problem's line and byte offset are those of `airlock audit export`.
    pub(crate) fn verify(
        &self,
        key: Option<&[u8]>,
        database: &Path,
        store: Option<&Store>,
    ) -> Result<(Option<Head>, Option<airlock_audit::VerifyReport>), BrokerError> {
        let stored = self.stored_head(database, store)?;
        match self {
            AuditSource::File(path) if !path.exists() => Ok((stored, None)),
            AuditSource::File(path) => Ok((
                stored.clone(),
                Some(airlock_audit::verify(path, key, stored.as_ref())?),
            )),
            AuditSource::Store(_) => {
                let mut export = tempfile::NamedTempFile::new()
                    .map_err(|error| io_failure(format_args!("a file to verify in: {error}")))?;
                {
                    let mut writer = std::io::BufWriter::new(export.as_file_mut());
                    self.export(&mut writer)?;
                    writer
                        .flush()
                        .map_err(|error| io_failure(format_args!("writing the export: {error}")))?;
                }
                let report = airlock_audit::verify(export.path(), key, stored.as_ref())?;
                Ok((stored, Some(report)))
            }
        }
    }
}

impl AuditFollower<'_> {
    /// The lines written since the last look.
    pub fn poll(&mut self) -> Result<Vec<String>, BrokerError> {
        match self {
            AuditFollower::File(follower) => Ok(follower.poll()?),
            AuditFollower::Store { store, seq } => {
                let rows = store.audit_rows(*seq, PAGE)?;
                if let Some(last) = rows.last() {
                    *seq = last.seq;
                }
                Ok(rows.into_iter().map(|row| row.line).collect())
            }
        }
    }
}
