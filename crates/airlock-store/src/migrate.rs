//! `airlock store migrate`: copying a SQLite store into an empty shared
//! (PostgreSQL) one, in one transaction of the target. Rows keep their
//! `seq`, so the feed's cursors and the approvals' order carry over; the
//! target's sequences continue after them. What named a process on the old
//! host (the holder of a waiting call or an apply) names nobody there: an
//! approved or applying approval is finished by whichever instance takes it
//! over, and a call that waited on the old host waits no more.

use crate::audit::AuditRow;
use crate::sql::{Conn, Value, first, scalar};
use crate::{Store, StoreError};

/// Rows read from the source per page.
const PAGE: i64 = 500;

/// What a copy moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyReport {
    pub approvals: u64,
    pub grants: u64,
    pub snapshot_files: u64,
    pub events: u64,
    pub chat_messages: u64,
    pub spent_tokens: u64,
    pub settings: u64,
    pub audit_records: u64,
}

/// A table copied as it is: its name and columns (the same on both
/// engines).
struct Table {
    name: &'static str,
    columns: &'static [&'static str],
}

const TABLES: &[Table] = &[
    Table {
        name: "approvals",
        columns: &[
            "seq",
            "id",
            "tool",
            "args_json",
            "args_display",
            "dedup_key",
            "\"user\"",
            "agent",
            "session",
            "tool_call_id",
            "risk",
            "decision_json",
            "path",
            "summary",
            "diff",
            "plan_json",
            "created_ms",
            "expires_ms",
            "status",
            "decided_by",
            "decided_user",
            "channel",
            "reason",
            "decided_ms",
            "result_json",
            "owner",
            "context_id",
            "edited",
            "undone",
            "requester_channel",
            "requester_chat",
            "requester_user",
        ],
    },
    Table {
        name: "grants",
        columns: &[
            "id",
            "tool",
            "path_glob",
            "session",
            "expires_ms",
            "created_ms",
            "created_by",
            "approval_id",
            "\"user\"",
            "owner",
        ],
    },
    Table {
        name: "sessions",
        columns: &[
            "id",
            "owner",
            "\"user\"",
            "agent",
            "profile",
            "authority",
            "authority_hash",
            "labels",
            "status",
            "created_ms",
            "expires_ms",
            "idle_ttl_ms",
            "last_used_ms",
            "ended_ms",
            "end_reason",
            "worktree",
        ],
    },
    Table {
        name: "snapshot_files",
        columns: &[
            "approval_id",
            "idx",
            "path",
            "before",
            "before_hash",
            "after_hash",
            "mode",
            "undone",
        ],
    },
    Table {
        name: "events",
        columns: &["seq", "kind", "subject", "owner", "at_ms", "data"],
    },
    Table {
        name: "chat_messages",
        columns: &[
            "approval_id",
            "platform",
            "chat",
            "message_id",
            "claimed_ms",
            "shown",
            "settled",
        ],
    },
    Table {
        name: "spent_tokens",
        columns: &["token", "expires_ms"],
    },
    Table {
        name: "kv",
        columns: &["key", "value"],
    },
    Table {
        name: "audit_checkpoints",
        columns: &["size", "key_id", "root", "note", "created_ms"],
    },
];

impl Store {
    /// Whether the store holds any state (an approval, grant, event or
    /// audit record): a migration goes only into one that holds none.
    pub fn holds_state(&self) -> Result<bool, StoreError> {
        let shared = self.is_shared();
        self.with(|conn| {
            for table in ["approvals", "grants", "events"] {
                if first(
                    conn,
                    &format!("SELECT 1 AS found FROM {table} LIMIT 1"),
                    &[],
                )?
                .is_some()
                {
                    return Ok(true);
                }
            }
            if shared && first(conn, "SELECT 1 AS found FROM audit_records LIMIT 1", &[])?.is_some()
            {
                return Ok(true);
            }
            Ok(false)
        })
    }

    /// Copies everything this SQLite store holds, and `audit` (the chain's
    /// records, oldest first, which the caller has verified; an error among
    /// them undoes the copy), into
    /// `target`, an empty shared store, in one transaction of the target:
    /// all or nothing.
    pub fn copy_into(
        &self,
        target: &Store,
        audit: &mut dyn Iterator<Item = Result<AuditRow, StoreError>>,
    ) -> Result<CopyReport, StoreError> {
        if self.is_shared() || !target.is_shared() {
            return Err(StoreError::Corrupt(
                "a copy goes from a SQLite store into a shared one".into(),
            ));
        }
        if target.holds_state()? {
            return Err(StoreError::NotEmpty);
        }
        let legacy = self.with(|conn| crate::snapshots::has_legacy_snapshots(conn))?;
        let me = target.me();
        target.in_transaction(|into| {
            let mut report = CopyReport::default();
            for table in TABLES {
                let copied = self.copy_table(table, into)?;
                match table.name {
                    "approvals" => report.approvals = copied,
                    "grants" => report.grants = copied,
                    "snapshot_files" => report.snapshot_files = copied,
                    "events" => report.events = copied,
                    "chat_messages" => report.chat_messages = copied,
                    "spent_tokens" => report.spent_tokens = copied,
                    _ => report.settings = copied,
                }
            }
            if legacy {
                report.snapshot_files += self.copy_legacy_snapshots(into)?;
            }
            // The identities continue after what was copied.
            for table in ["approvals", "events"] {
                let max: Option<i64> = scalar(into, &format!("SELECT max(seq) FROM {table}"), &[])?;
                if let Some(max) = max {
                    into.execute(
                        &format!("SELECT setval(pg_get_serial_sequence('{table}', 'seq'), {max})"),
                        &[],
                    )?;
                }
            }
            // The chain, and its head.
            let mut head = None;
            let mut batch = Vec::with_capacity(64);
            for row in &mut *audit {
                // A record that cannot be read undoes the whole copy.
                let row = row?;
                head = Some((row.seq, row.event_hash.clone()));
                batch.push(row);
                if batch.len() == 64 {
                    crate::audit::insert_rows(into, &batch, me)?;
                    report.audit_records += batch.len() as u64;
                    batch.clear();
                }
            }
            if !batch.is_empty() {
                crate::audit::insert_rows(into, &batch, me)?;
                report.audit_records += batch.len() as u64;
            }
            if let Some((seq, hash)) = head {
                into.execute(
                    "UPDATE audit_chain SET seq = ?1, event_hash = ?2 WHERE id = 1",
                    &[Value::Int(seq as i64), Value::Text(hash)],
                )?;
            }
            Ok(report)
        })
    }

    /// Copies one table, page by page (by SQLite rowid); how many rows.
    fn copy_table(&self, table: &Table, into: &mut dyn Conn) -> Result<u64, StoreError> {
        let columns = table.columns.join(", ");
        let placeholders: Vec<String> =
            (1..=table.columns.len()).map(|n| format!("?{n}")).collect();
        let insert = format!(
            "INSERT INTO {} ({columns}) VALUES ({})",
            table.name,
            placeholders.join(", ")
        );
        let select = format!(
            "SELECT rowid AS airlock_rowid, {columns} FROM {} WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
            table.name
        );
        let mut after = 0i64;
        let mut copied = 0;
        loop {
            let rows =
                self.with(|conn| conn.query(&select, &[Value::Int(after), Value::Int(PAGE)]))?;
            let Some(last) = rows.last() else {
                return Ok(copied);
            };
            after = last.at(0)?;
            for row in &rows {
                let values = (1..=table.columns.len())
                    .map(|index| row.value(index).cloned())
                    .collect::<Result<Vec<_>, _>>()?;
                into.execute(&insert, &values)?;
                copied += 1;
            }
        }
    }

    /// The one-file snapshots of old stores, as `snapshot_files` rows where
    /// the approval has none.
    fn copy_legacy_snapshots(&self, into: &mut dyn Conn) -> Result<u64, StoreError> {
        let rows = self.with(|conn| {
            conn.query(
                "SELECT approval_id, path, before, before_hash, after_hash, undone FROM snapshots \
                 WHERE approval_id NOT IN (SELECT approval_id FROM snapshot_files)",
                &[],
            )
        })?;
        for row in &rows {
            let values = vec![
                row.value(0)?.clone(),
                Value::Int(0),
                row.value(1)?.clone(),
                row.value(2)?.clone(),
                row.value(3)?.clone(),
                row.value(4)?.clone(),
                Value::Null,
                row.value(5)?.clone(),
            ];
            into.execute(
                "INSERT INTO snapshot_files (approval_id, idx, path, before, before_hash, \
                 after_hash, mode, undone) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                &values,
            )?;
        }
        Ok(rows.len() as u64)
    }
}
