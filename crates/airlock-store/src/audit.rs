//! The audit chain in the shared store (PostgreSQL, DESIGN §7.2 and §8):
//! every instance appends to one chain. An append locks the head row
//! (`SELECT … FOR UPDATE`), chains its records after it, and stores them
//! and the new head in the same transaction, so two instances never chain
//! after the same head and no record is lost or torn. On SQLite the chain
//! is the JSONL file (airlock-audit), and these calls are refused.

use crate::sql::{Conn, Value, args, first};
use crate::{Store, StoreError};

/// One record of the chain: its line, exactly as the JSONL file would hold
/// it (without the `\n`), and what it is looked up by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    pub seq: u64,
    pub ts: String,
    pub event: Option<String>,
    pub hitl_id: Option<String>,
    pub event_hash: String,
    pub line: String,
}

/// Rows inserted by one statement at most.
const ROWS_PER_INSERT: usize = 64;

impl Store {
    fn shared_only(&self) -> Result<(), StoreError> {
        if self.is_shared() {
            Ok(())
        } else {
            Err(StoreError::Corrupt(
                "the audit chain is in the database only with store.url".into(),
            ))
        }
    }

    /// Appends to the chain: `encode` gets the head (`None`: empty) and
    /// returns the rows to add after it; they and the new head commit
    /// together, under the head row's lock.
    pub fn audit_append(
        &self,
        encode: &mut dyn FnMut(Option<(u64, String)>) -> Result<Vec<AuditRow>, StoreError>,
    ) -> Result<(), StoreError> {
        self.shared_only()?;
        let me = self.me();
        self.in_transaction(|conn| {
            let head = first(
                conn,
                "SELECT seq, event_hash FROM audit_chain WHERE id = 1 FOR UPDATE",
                &[],
            )?
            .ok_or_else(|| StoreError::Corrupt("no audit_chain row".into()))?;
            let seq: i64 = head.get("seq")?;
            let head = if seq > 0 {
                Some((seq as u64, head.get::<String>("event_hash")?))
            } else {
                None
            };
            let rows = encode(head.clone())?;
            let Some(last) = rows.last() else {
                return Ok(());
            };
            let expected = head.as_ref().map_or(1, |(seq, _)| seq + 1);
            if rows.first().map(|row| row.seq) != Some(expected) {
                return Err(StoreError::Corrupt(
                    "audit rows do not follow the chain's head".into(),
                ));
            }
            let (last_seq, last_hash) = (last.seq, last.event_hash.clone());
            for chunk in rows.chunks(ROWS_PER_INSERT) {
                insert_rows(conn, chunk, me)?;
            }
            conn.execute(
                "UPDATE audit_chain SET seq = ?1, event_hash = ?2 WHERE id = 1",
                args![last_seq as i64, last_hash],
            )?;
            Ok(())
        })
    }

    /// The chain's head: `(seq, event_hash)`, `None` when it is empty.
    pub fn audit_chain_head(&self) -> Result<Option<(u64, String)>, StoreError> {
        self.shared_only()?;
        self.with(|conn| {
            let row = first(
                conn,
                "SELECT seq, event_hash FROM audit_chain WHERE id = 1",
                &[],
            )?
            .ok_or_else(|| StoreError::Corrupt("no audit_chain row".into()))?;
            let seq: i64 = row.get("seq")?;
            if seq <= 0 {
                return Ok(None);
            }
            Ok(Some((seq as u64, row.get("event_hash")?)))
        })
    }

    /// The records after `after` (a seq), oldest first, at most `limit`.
    pub fn audit_rows(&self, after: u64, limit: usize) -> Result<Vec<AuditRow>, StoreError> {
        self.shared_only()?;
        self.with(|conn| {
            rows(
                conn,
                "SELECT seq, ts, event, hitl_id, event_hash, line FROM audit_records \
                 WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                args![
                    i64::try_from(after).unwrap_or(i64::MAX),
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
            )
        })
    }

    /// The last `count` records, oldest first.
    pub fn audit_last_rows(&self, count: usize) -> Result<Vec<AuditRow>, StoreError> {
        self.shared_only()?;
        let mut found = self.with(|conn| {
            rows(
                conn,
                "SELECT seq, ts, event, hitl_id, event_hash, line FROM audit_records \
                 ORDER BY seq DESC LIMIT ?1",
                args![i64::try_from(count).unwrap_or(i64::MAX)],
            )
        })?;
        found.reverse();
        Ok(found)
    }

    /// The records of `event` about approval `hitl_id`, oldest first.
    pub fn audit_rows_of(&self, event: &str, hitl_id: &str) -> Result<Vec<AuditRow>, StoreError> {
        self.shared_only()?;
        self.with(|conn| {
            rows(
                conn,
                "SELECT seq, ts, event, hitl_id, event_hash, line FROM audit_records \
                 WHERE event = ?1 AND hitl_id = ?2 ORDER BY seq",
                args![event, hitl_id],
            )
        })
    }
}

fn rows(conn: &mut dyn Conn, sql: &str, args: &[Value]) -> Result<Vec<AuditRow>, StoreError> {
    conn.query(sql, args)?
        .iter()
        .map(|row| {
            Ok(AuditRow {
                seq: row.get::<i64>("seq")?.max(0) as u64,
                ts: row.get("ts")?,
                event: row.get("event")?,
                hitl_id: row.get("hitl_id")?,
                event_hash: row.get("event_hash")?,
                line: row.get("line")?,
            })
        })
        .collect()
}

/// Inserts `chunk` in one statement.
pub(crate) fn insert_rows(
    conn: &mut dyn Conn,
    chunk: &[AuditRow],
    instance: u32,
) -> Result<(), StoreError> {
    let mut sql = String::from(
        "INSERT INTO audit_records (seq, ts, event, hitl_id, event_hash, line, instance) VALUES ",
    );
    let mut values = Vec::with_capacity(chunk.len() * 7);
    for (index, row) in chunk.iter().enumerate() {
        let base = index * 7;
        if index > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!(
            "(?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?{})",
            base + 1,
            base + 2,
            base + 3,
            base + 4,
            base + 5,
            base + 6,
            base + 7
        ));
        values.extend([
            Value::Int(row.seq as i64),
            Value::Text(row.ts.clone()),
            row.event.clone().map_or(Value::Null, Value::Text),
            row.hitl_id.clone().map_or(Value::Null, Value::Text),
            Value::Text(row.event_hash.clone()),
            Value::Text(row.line.clone()),
            Value::Int(i64::from(instance)),
        ]);
    }
    conn.execute(&sql, &values)?;
    Ok(())
}
