//! Snapshots of the content an applied change replaced, for undo.

use rusqlite::{Connection, OptionalExtension, params};

use crate::approvals::get_in;
use crate::feed::{EventKind, NewEvent, write_event};
use crate::{Millis, Store, StoreError};

/// The before-content of an applied change, for undo: one entry per file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub approval_id: String,
    pub files: Vec<SnapshotFile>,
    pub undone: bool,
}

/// One file of a [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    pub path: String,
    /// `None` when the change created the file.
    pub before: Option<Vec<u8>>,
    pub before_hash: Option<String>,
    /// `None` when the change removed the file.
    pub after_hash: Option<String>,
    /// The permission bits the file had (`None` when it did not exist).
    pub mode: Option<u32>,
}
impl Store {
    /// Keeps the before-content of an applied change (replacing an earlier
    /// snapshot of the same approval, from an apply that was interrupted).
    pub fn insert_snapshot(&self, snapshot: &Snapshot) -> Result<(), StoreError> {
        self.with(|conn| {
            let tx = conn.transaction()?;
            tx.execute(
                "DELETE FROM snapshot_files WHERE approval_id = ?1",
                params![snapshot.approval_id],
            )?;
            for (idx, file) in snapshot.files.iter().enumerate() {
                tx.execute(
                    "INSERT INTO snapshot_files \
                     (approval_id, idx, path, before, before_hash, after_hash, mode, undone) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0)",
                    params![
                        snapshot.approval_id,
                        idx as i64,
                        file.path,
                        file.before,
                        file.before_hash,
                        file.after_hash,
                        file.mode
                    ],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    /// What `path` of an applied approval holds now that its change was
    /// made by someone else (an agent's own tool, whose result airlock
    /// could not compute beforehand): undo then expects `after_hash`.
    pub fn set_snapshot_after(
        &self,
        approval_id: &str,
        path: &str,
        after_hash: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.with(|conn| {
            let changed = conn.execute(
                "UPDATE snapshot_files SET after_hash = ?3 \
                 WHERE approval_id = ?1 AND path = ?2 AND undone = 0",
                params![approval_id, path, after_hash],
            )?;
            Ok(changed >= 1)
        })
    }

    /// The snapshot of an applied approval.
    pub fn snapshot(&self, approval_id: &str) -> Result<Snapshot, StoreError> {
        self.with(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT path, before, before_hash, after_hash, undone, mode FROM snapshot_files \
                 WHERE approval_id = ?1 ORDER BY idx",
            )?;
            let mut undone = false;
            let files = statement
                .query_map(params![approval_id], |row| {
                    Ok((
                        SnapshotFile {
                            path: row.get("path")?,
                            before: row.get("before")?,
                            before_hash: row.get("before_hash")?,
                            after_hash: row.get("after_hash")?,
                            mode: row.get("mode")?,
                        },
                        row.get::<_, i64>("undone")? != 0,
                    ))
                })?
                .map(|row| {
                    row.map(|(file, was_undone)| {
                        undone |= was_undone;
                        file
                    })
                })
                .collect::<rusqlite::Result<Vec<_>>>()?;
            if files.is_empty() {
                return legacy_snapshot(conn, approval_id);
            }
            Ok(Snapshot {
                approval_id: approval_id.to_owned(),
                files,
                undone,
            })
        })
    }

    /// Marks a snapshot undone: `Ok(false)` when it already was.
    pub fn mark_undone(&self, approval_id: &str, at_ms: Millis) -> Result<bool, StoreError> {
        self.changing(|conn| {
            let mut changed = conn.execute(
                "UPDATE snapshot_files SET undone = 1 WHERE approval_id = ?1 AND undone = 0",
                params![approval_id],
            )?;
            if has_legacy_snapshots(conn)? {
                changed += conn.execute(
                    "UPDATE snapshots SET undone = 1 WHERE approval_id = ?1 AND undone = 0",
                    params![approval_id],
                )?;
            }
            if changed >= 1 {
                conn.execute(
                    "UPDATE approvals SET undone = 1 WHERE id = ?1",
                    params![approval_id],
                )?;
                let owner = get_in(conn, approval_id).ok().and_then(|a| a.owner.clone());
                write_event(
                    conn,
                    NewEvent {
                        kind: EventKind::ApprovalUndone,
                        subject: Some(approval_id),
                        owner: owner.as_deref(),
                        at_ms,
                        data: serde_json::json!({}),
                    },
                )?;
            }
            Ok(changed >= 1)
        })
    }
}

/// Whether the database still has the one-file `snapshots` table of earlier
/// versions (undo keeps working for changes applied before the upgrade).
pub(crate) fn has_legacy_snapshots(conn: &Connection) -> Result<bool, StoreError> {
    let count: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'snapshots'",
        [],
        |row| row.get(0),
    )?;
    Ok(count > 0)
}

/// A snapshot from the one-file table of earlier versions.
fn legacy_snapshot(conn: &Connection, approval_id: &str) -> Result<Snapshot, StoreError> {
    if !has_legacy_snapshots(conn)? {
        return Err(StoreError::NotFound(approval_id.to_owned()));
    }
    conn.query_row(
        "SELECT path, before, before_hash, after_hash, undone FROM snapshots \
         WHERE approval_id = ?1",
        params![approval_id],
        |row| {
            Ok(Snapshot {
                approval_id: approval_id.to_owned(),
                files: vec![SnapshotFile {
                    path: row.get("path")?,
                    before: row.get("before")?,
                    before_hash: row.get("before_hash")?,
                    after_hash: row.get("after_hash")?,
                    mode: None,
                }],
                undone: row.get::<_, i64>("undone")? != 0,
            })
        },
    )
    .optional()?
    .ok_or_else(|| StoreError::NotFound(approval_id.to_owned()))
}
