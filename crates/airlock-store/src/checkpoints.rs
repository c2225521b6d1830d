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

const COLUMNS: &str = "size, key_id, root, note, created_ms";

impl Store {
    /// Stores a checkpoint, with its `checkpoint_signed` event; `false`
    /// when this key already signed this size.
    pub fn save_checkpoint(&self, row: &CheckpointRow) -> Result<bool, StoreError> {
        self.changing(|conn| {
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
            Ok(inserted)
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
