//! The audit log's signed checkpoints (DESIGN §8.1): one row per tree size
//! and signing key, the signed note exactly as it was published.

use crate::feed::{EventKind, NewEvent, write_event};
use crate::sql::{Conn, Value, args, first};
use crate::{Millis, Store, StoreError};

/// A signed checkpoint of the audit log's Merkle tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRow {
    pub size: u64,
    /// The signing key's `name+hexid`.
    pub key_id: String,
    /// The tree head, base64.
    pub root: String,
    /// The signed note.
    pub note: String,
    pub created_ms: Millis,
}

/// What [`Store::save_checkpoint`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved {
    New,
    /// The same checkpoint was stored already.
    Same,
    /// The key signed another root for this size: nothing stored.
    Other,
}

const COLUMNS: &str = "size, key_id, root, note, created_ms";

impl Store {
    /// Stores a checkpoint, with its `checkpoint_signed` event. A key that
    /// signed this size before with another root is [`Saved::Other`] (a
    /// fork: nothing is stored).
    pub fn save_checkpoint(&self, row: &CheckpointRow) -> Result<Saved, StoreError> {
        self.changing(|conn| {
            if let Some(existing) = first(
                conn,
                "SELECT root FROM audit_checkpoints WHERE size = ?1 AND key_id = ?2",
                args![
                    i64::try_from(row.size).unwrap_or(i64::MAX),
                    row.key_id.clone()
                ],
            )? {
                let root: String = existing.at(0)?;
                return Ok(if root == row.root {
                    Saved::Same
                } else {
                    Saved::Other
                });
            }
            let inserted = conn.execute(
                "INSERT INTO audit_checkpoints (size, key_id, root, note, created_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
                args![
                    i64::try_from(row.size).unwrap_or(i64::MAX),
                    row.key_id.clone(),
                    row.root.clone(),
                    row.note.clone(),
                    i64::try_from(row.created_ms).unwrap_or(i64::MAX)
                ],
            )? == 1;
            if inserted {
                write_event(
                    conn,
                    NewEvent {
                        kind: EventKind::CheckpointSigned,
                        subject: None,
                        owner: None,
                        at_ms: row.created_ms,
                        data: serde_json::json!({"size": row.size, "key_id": row.key_id}),
                    },
                )?;
            }
            Ok(if inserted { Saved::New } else { Saved::Same })
        })
    }

    /// The checkpoint of the largest tree (the newest of that size).
    pub fn latest_checkpoint(&self) -> Result<Option<CheckpointRow>, StoreError> {
        self.with(|conn| {
            one(
                conn,
                &format!(
                    "SELECT {COLUMNS} FROM audit_checkpoints \
                     ORDER BY size DESC, created_ms DESC LIMIT 1"
                ),
                &[],
            )
        })
    }

    /// A checkpoint of a tree of `size` records (the newest if several keys
    /// signed one).
    pub fn checkpoint_of_size(&self, size: u64) -> Result<Option<CheckpointRow>, StoreError> {
        self.with(|conn| {
            one(
                conn,
                &format!(
                    "SELECT {COLUMNS} FROM audit_checkpoints WHERE size = ?1 \
                     ORDER BY created_ms DESC LIMIT 1"
                ),
                args![i64::try_from(size).unwrap_or(i64::MAX)],
            )
        })
    }

    /// Every checkpoint, smallest tree first.
    pub fn checkpoints(&self) -> Result<Vec<CheckpointRow>, StoreError> {
        self.with(|conn| {
            conn.query(
                &format!("SELECT {COLUMNS} FROM audit_checkpoints ORDER BY size, created_ms"),
                &[],
            )?
            .iter()
            .map(from_row)
            .collect()
        })
    }

    /// Takes or renews the lease `name` for `holder` until `until_ms`:
    /// `true` when `holder` holds it now (it was free, ran out before
    /// `now_ms`, or was `holder`'s already). One job, one holder, across
    /// processes and instances.
    pub fn try_lease(
        &self,
        name: &str,
        holder: &str,
        now_ms: Millis,
        until_ms: Millis,
    ) -> Result<bool, StoreError> {
        self.with(|conn| {
            Ok(conn.execute(
                "INSERT INTO leases (name, holder, until_ms) VALUES (?1, ?2, ?4) \
                 ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until_ms = excluded.until_ms \
                 WHERE leases.until_ms < ?3 OR leases.holder = ?2",
                args![
                    name,
                    holder,
                    i64::try_from(now_ms).unwrap_or(i64::MAX),
                    i64::try_from(until_ms).unwrap_or(i64::MAX)
                ],
            )? == 1)
        })
    }

    /// The cursor `name`: `(seq, position)`, `(0, 0)` when none was saved.
    pub fn cursor(&self, name: &str) -> Result<(u64, u64), StoreError> {
        self.with(|conn| {
            let Some(row) = first(
                conn,
                "SELECT seq, position FROM cursors WHERE name = ?1",
                args![name],
            )?
            else {
                return Ok((0, 0));
            };
            Ok((
                row.get::<i64>("seq")?.max(0) as u64,
                row.get::<i64>("position")?.max(0) as u64,
            ))
        })
    }

    /// Moves the cursor `name` forward to `seq`, in one statement, only
    /// while `holder` holds the lease `lease` at `now_ms`: a holder that
    /// lost its lease (another took over) cannot move it, nor anyone move
    /// it back. Whether it moved.
    pub fn advance_cursor(
        &self,
        name: &str,
        seq: u64,
        position: u64,
        lease: &str,
        holder: &str,
        now_ms: Millis,
    ) -> Result<bool, StoreError> {
        self.with(|conn| {
            Ok(conn.execute(
                "INSERT INTO cursors (name, seq, position) \
                 SELECT ?1, ?2, ?3 WHERE EXISTS \
                 (SELECT 1 FROM leases WHERE name = ?4 AND holder = ?5 AND until_ms >= ?6) \
                 ON CONFLICT (name) DO UPDATE SET seq = excluded.seq, position = excluded.position \
                 WHERE cursors.seq < excluded.seq",
                args![
                    name,
                    i64::try_from(seq).unwrap_or(i64::MAX),
                    i64::try_from(position).unwrap_or(i64::MAX),
                    lease,
                    holder,
                    i64::try_from(now_ms).unwrap_or(i64::MAX)
                ],
            )? == 1)
        })
    }

    /// Sets the cursor `name` back to `seq` (the log lost records the
    /// cursor had passed), whoever holds the lease.
    pub fn reset_cursor(&self, name: &str, seq: u64) -> Result<(), StoreError> {
        self.with(|conn| {
            conn.execute(
                "UPDATE cursors SET seq = ?2, position = 0 WHERE name = ?1 AND seq > ?2",
                args![name, i64::try_from(seq).unwrap_or(i64::MAX)],
            )?;
            Ok(())
        })
    }

    /// Gives up `holder`'s lease `name` (another may take it at once).
    pub fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        self.with(|conn| {
            conn.execute(
                "DELETE FROM leases WHERE name = ?1 AND holder = ?2",
                args![name, holder],
            )?;
            Ok(())
        })
    }

    /// The value stored at `key`, storing `value` there first if there is
    /// none (the first of several instances to ask decides).
    pub fn kv_get_or_insert(&self, key: &str, value: &str) -> Result<String, StoreError> {
        self.with(|conn| {
            conn.execute(
                "INSERT INTO kv (key, value) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                args![key, value],
            )?;
            first(conn, "SELECT value FROM kv WHERE key = ?1", args![key])?
                .ok_or_else(|| StoreError::Corrupt(format!("kv {key} vanished")))?
                .at(0)
        })
    }
}

fn one(
    conn: &mut dyn Conn,
    sql: &str,
    args: &[Value],
) -> Result<Option<CheckpointRow>, StoreError> {
    first(conn, sql, args)?.as_ref().map(from_row).transpose()
}

fn from_row(row: &crate::sql::Row) -> Result<CheckpointRow, StoreError> {
    Ok(CheckpointRow {
        size: row.get::<i64>("size")?.max(0) as u64,
        key_id: row.get("key_id")?,
        root: row.get("root")?,
        note: row.get("note")?,
        created_ms: row.get::<i64>("created_ms")?.max(0) as Millis,
    })
}
