//! `airlock store migrate --from sqlite:PATH --to postgres://…`: a
//! workspace's state (approvals, grants, undo snapshots, events, chat
//! messages) and its audit chain, from the SQLite state dir into an empty
//! shared store. The chain must verify before, and verifies again after,
//! ending with the same head.

use std::io::BufRead as _;
use std::path::Path;

use airlock_audit::Head;
use airlock_core::ErrorCode;
use airlock_store::{AuditRow, CopyReport, Store, StoreError};
use serde_json::{Map, Value};

use crate::AuditSource;
use crate::error::BrokerError;

/// What a migration moved, and the chain's head it ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    pub copied: CopyReport,
    pub head: Option<Head>,
}

/// Copies the SQLite store at `database` and the audit chain at `audit`
/// (keyed with `key`, if it is) into `target`, which must be shared and
/// hold no state. Nothing is copied unless the chain verifies.
pub fn migrate_store(
    database: &Path,
    audit: &Path,
    key: Option<&[u8]>,
    target: &Store,
) -> Result<Migrated, BrokerError> {
    if !database.is_file() {
        return Err(BrokerError::refused(
            ErrorCode::NotFound,
            format!("no airlock database at {}", database.display()),
        ));
    }
    let source = Store::open_read_only(database)?;
    let stored = source
        .audit_head()?
        .map(|(seq, event_hash)| Head { seq, event_hash });
    if audit.exists() {
        let report = airlock_audit::verify(audit, key, stored.as_ref())?;
        if let Some(problem) = report.problem {
            return Err(BrokerError::refused(
                ErrorCode::InvalidInput,
                format!(
                    "the audit chain at {} does not verify (seq {}, line {}: {}); nothing was copied",
                    audit.display(),
                    problem.seq,
                    problem.line,
                    problem.kind
                ),
            ));
        }
    } else if let Some(head) = &stored {
        return Err(BrokerError::refused(
            ErrorCode::NotFound,
            format!(
                "the audit log {} is missing, and the store says it held {} records; nothing was copied",
                audit.display(),
                head.seq
            ),
        ));
    }
    let mut rows = AuditLines::open(audit)?;
    let copied = source
        .copy_into(target, &mut rows)
        .map_err(|error| match error {
            StoreError::NotEmpty => BrokerError::refused(ErrorCode::Conflict, error.to_string()),
            error => BrokerError::Store(error),
        })?;
    // The copy, checked where it now is.
    let (head, report) = AuditSource::Store(target).verify(key, Path::new(""), Some(target))?;
    let broken = report.and_then(|report| report.problem);
    if broken.is_some() || head != stored_head_of(&source)? {
        return Err(BrokerError::refused(
            ErrorCode::IoError,
            format!("the copied audit chain does not verify: {broken:?}"),
        ));
    }
    Ok(Migrated { copied, head })
}

fn stored_head_of(source: &Store) -> Result<Option<Head>, BrokerError> {
    Ok(source
        .audit_head()?
        .map(|(seq, event_hash)| Head { seq, event_hash }))
}

/// The records of a JSONL chain as rows of the shared store's chain.
struct AuditLines {
    lines: Option<std::io::Lines<std::io::BufReader<std::fs::File>>>,
}

impl AuditLines {
    fn open(path: &Path) -> Result<AuditLines, BrokerError> {
        if !path.exists() {
            return Ok(AuditLines { lines: None });
        }
        let file = std::fs::File::open(path).map_err(|error| {
            BrokerError::refused(ErrorCode::IoError, format!("{}: {error}", path.display()))
        })?;
        Ok(AuditLines {
            lines: Some(std::io::BufReader::with_capacity(256 * 1024, file).lines()),
        })
    }
}

impl Iterator for AuditLines {
    type Item = Result<AuditRow, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let line = match self.lines.as_mut()?.next()? {
            Ok(line) => line,
            Err(error) => {
                return Some(Err(StoreError::Corrupt(format!(
                    "reading the audit log: {error}"
                ))));
            }
        };
        let unreadable =
            |what: &str| StoreError::Corrupt(format!("an audit record without {what}"));
        let record: Map<String, Value> = match serde_json::from_str(&line) {
            Ok(record) => record,
            Err(error) => return Some(Err(StoreError::Corrupt(format!("an audit line: {error}")))),
        };
        let text = |field: &str| record.get(field).and_then(Value::as_str).map(str::to_owned);
        let Some(seq) = record.get("seq").and_then(Value::as_u64) else {
            return Some(Err(unreadable("seq")));
        };
        let (Some(ts), Some(event_hash)) = (text("ts"), text("event_hash")) else {
            return Some(Err(unreadable("ts or event_hash")));
        };
        Some(Ok(AuditRow {
            seq,
            ts,
            event: text("event"),
            hitl_id: text("hitl_id"),
            event_hash,
            line,
        }))
    }
}
