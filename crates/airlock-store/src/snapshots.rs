//! Snapshots of the content an applied change replaced, for undo.

use crate::approvals::get_in;
use crate::feed::{EventKind, NewEvent, write_event};
use crate::sql::{Conn, args, first, scalar};
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
        self.changing(|tx| {
            tx.execute(
                "DELETE FROM snapshot_files WHERE approval_id = ?1",
                args![snapshot.approval_id],
            )?;
            for (idx, file) in snapshot.files.iter().enumerate() {
                tx.execute(
                    "INSERT INTO snapshot_files \
                     (approval_id, idx, path, before, before_hash, after_hash, mode, undone) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 0)",
                    args![
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
                args![approval_id, path, after_hash],
            )?;
            Ok(changed >= 1)
        })
    }

    /// The snapshot of an applied approval.
    pub fn snapshot(&self, approval_id: &str) -> Result<Snapshot, StoreError> {
        self.with(|conn| {
            let mut undone = false;
            let files = conn
                .query(
                    "SELECT path, before, before_hash, after_hash, undone, mode FROM snapshot_files \
                     WHERE approval_id = ?1 ORDER BY idx",
                    args![approval_id],
                )?
                .iter()
                .map(|row| {
                    undone |= row.get::<i64>("undone")? != 0;
                    Ok(SnapshotFile {
                        path: row.get("path")?,
                        before: row.get("before")?,
                        before_hash: row.get("before_hash")?,
                        after_hash: row.get("after_hash")?,
                        mode: row.get("mode")?,
                    })
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            if files.is_empty() {
                return legacy_snapshot(conn, approval_id, self.is_sqlite());
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
        let legacy = self.is_sqlite();
        self.changing(|conn| {
            let mut changed = conn.execute(
                "UPDATE snapshot_files SET undone = 1 WHERE approval_id = ?1 AND undone = 0",
                args![approval_id],
            )?;
            if legacy && has_legacy_snapshots(conn)? {
                changed += conn.execute(
                    "UPDATE snapshots SET undone = 1 WHERE approval_id = ?1 AND undone = 0",
                    args![approval_id],
                )?;
            }
            if changed >= 1 {
                conn.execute(
                    "UPDATE approvals SET undone = 1 WHERE id = ?1",
                    args![approval_id],
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
/// Whether an older SQLite store still has the one-file `snapshots` table.
pub(crate) fn has_legacy_snapshots(conn: &mut dyn Conn) -> Result<bool, StoreError> {
    let count: i64 = scalar(
        conn,
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'snapshots'",
        &[],
    )?;
    Ok(count > 0)
}

fn legacy_snapshot(
    conn: &mut dyn Conn,
    approval_id: &str,
    sqlite: bool,
) -> Result<Snapshot, StoreError> {
    if !sqlite || !has_legacy_snapshots(conn)? {
        return Err(StoreError::NotFound(approval_id.to_owned()));
    }
    let row = first(
        conn,
        "SELECT path, before, before_hash, after_hash, undone FROM snapshots \
         WHERE approval_id = ?1",
        args![approval_id],
    )?
    .ok_or_else(|| StoreError::NotFound(approval_id.to_owned()))?;
    Ok(Snapshot {
        approval_id: approval_id.to_owned(),
        files: vec![SnapshotFile {
            path: row.get("path")?,
            before: row.get("before")?,
            before_hash: row.get("before_hash")?,
            after_hash: row.get("after_hash")?,
            mode: None,
        }],
        undone: row.get::<i64>("undone")? != 0,
    })
}
