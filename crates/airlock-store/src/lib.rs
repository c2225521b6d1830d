//! airlock-store: airlock's durable state in SQLite (bundled, WAL). It is the only
//! crate that knows SQL.
//!
//! It keeps approvals (the state machine of DESIGN §7), grants ("always allow"),
//! snapshots of before-content for undo, and the head of the audit chain. Every
//! state transition is a compare-and-set (`UPDATE … WHERE status = 'pending'`), so
//! two deciders never both win and an approval is never applied twice, across
//! threads and processes.
//!
//! An approval's typed parts (its `Risk`, `ApprovalTerms`, `Plan`,
//! `Decided` and result `Envelope`, from `airlock_core`) are written and read here and
//! nowhere else: the JSON of terms and plans carries a format version
//! (`airlock_core::approval`), and a database or a stored value from a newer
//! airlock is refused, never misread.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! use airlock_core::{ChangePlan, Plan, Risk};
//! use airlock_store::{Created, Limits, NewApproval, Store};
//! let store = Store::open(&dir.path().join("airlock.db")).unwrap();
//! let terms: airlock_core::ApprovalTerms =
//!     serde_json::from_value(serde_json::json!({"risk": "medium"})).unwrap();
//! let plan = Plan::Write(ChangePlan {
//!     tool: "write_file".into(), summary: "CREATE FILE a".into(), changes: vec![],
//!     diff: String::new(), patch_hash: String::new(), report: Default::default(),
//! });
//! let new = NewApproval::new("hitl-1", "write_file", Risk::Medium, terms, plan, 0, 60_000);
//! let limits = Limits { max_pending: 10, max_pending_per_session: 10 };
//! let Created::New(approval) = store.create_approval(&new, limits).unwrap() else { panic!() };
//! assert_eq!(approval.status, airlock_store::ApprovalStatus::Pending);
//! ```

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

mod approvals;
mod chat;
mod error;
mod feed;
mod grants;
mod schema;
mod snapshots;

use schema::migrate;

pub use approvals::{Approval, ApprovalStatus, Created, EditedPlan, Limits, NewApproval, Verdict};
pub use chat::ChatMessage;
pub use error::StoreError;
pub use feed::{EVENT_FORMAT, EventKind, FeedEvent, Notifier};
pub use grants::GrantRow;
pub use snapshots::{Snapshot, SnapshotFile};

/// Milliseconds since the Unix epoch.
pub type Millis = u64;

/// The durable store. One connection per process, shared by its threads.
pub struct Store {
    conn: Mutex<Connection>,
    /// Only for the audit head (synchronous = NORMAL).
    head_conn: Mutex<Connection>,
}
impl Store {
    /// Opens (creating if needed) the database at `path`, in WAL mode.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| StoreError::Create {
                path: parent.display().to_string(),
                source,
            })?;
        }
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        // Switching a new database to WAL and creating the schema can report
        // "busy" at once, without the busy handler, when several processes open
        // it together; retry until the deadline.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let setup = conn
                .pragma_update(None, "journal_mode", "WAL")
                .and_then(|()| conn.pragma_update(None, "synchronous", "FULL"))
                .map_err(StoreError::from)
                .and_then(|()| migrate(&conn));
            match setup {
                Ok(()) => break,
                Err(StoreError::Sqlite(error))
                    if is_busy(&error) && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(error) => return Err(error),
            }
        }
        // The audit head is a mirror that catches a log cut short; a crash
        // may lose its newest update (the head is then behind the log, which
        // recovery accepts) but never puts it ahead. So it is written on its
        // own connection without a sync per update: the audit log's own sync
        // is the one an audited call waits for.
        let head_conn = Connection::open(path)?;
        head_conn.busy_timeout(Duration::from_secs(10))?;
        head_conn.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(Store {
            conn: Mutex::new(conn),
            head_conn: Mutex::new(head_conn),
        })
    }

    /// Opens the database at `path` to read only: nothing is created,
    /// migrated or written (`airlock check`). A database a newer airlock
    /// wrote is refused, as by [`Store::open`].
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        let flags =
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        let version = usize::try_from(version).unwrap_or(0);
        if version > schema::SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                found: version,
                supported: schema::SCHEMA_VERSION,
            });
        }
        let head_conn = Connection::open_with_flags(path, flags)?;
        Ok(Store {
            conn: Mutex::new(conn),
            head_conn: Mutex::new(head_conn),
        })
    }

    /// The schema version of the database (`PRAGMA user_version`): the
    /// number of `schema::MIGRATIONS` applied.
    pub fn schema_version(&self) -> Result<usize, StoreError> {
        self.with(|conn| {
            let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
            Ok(usize::try_from(version).unwrap_or(0))
        })
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.lock().map_err(|_| StoreError::Poisoned)?;
        f(&mut conn)
    }

    /// Runs `f` in an immediate transaction: a change and the events it
    /// writes commit together or not at all. Once committed, this process's
    /// readers are woken.
    fn changing<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let result = self.with(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let result = f(&tx)?;
            tx.commit()?;
            Ok(result)
        });
        if result.is_ok() {
            Notifier::get().bump();
        }
        result
    }

    /// The audit chain's head as last saved: `(seq, event_hash)`.
    pub fn audit_head(&self) -> Result<Option<(u64, String)>, StoreError> {
        self.with(|conn| {
            Ok(conn
                .query_row("SELECT seq, hash FROM audit_head WHERE id = 1", [], |row| {
                    Ok((row.get::<_, i64>("seq")?.max(0) as u64, row.get("hash")?))
                })
                .optional()?)
        })
    }

    /// Saves the audit chain's head; it only moves forward. Not synced at
    /// once (see [`Store::open`]).
    pub fn save_audit_head(&self, seq: u64, hash: &str) -> Result<(), StoreError> {
        let conn = self.head_conn.lock().map_err(|_| StoreError::Poisoned)?;
        conn.prepare_cached(
            "INSERT INTO audit_head (id, seq, hash) VALUES (1, ?1, ?2) \
             ON CONFLICT(id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash \
             WHERE excluded.seq > audit_head.seq",
        )?
        .execute(params![seq as i64, hash])?;
        Ok(())
    }

    /// Spends a one-time token: `true` the first time, `false` ever after (until
    /// it is past `expires_ms`, when it can no longer be presented anyway and
    /// its row is swept).
    pub fn spend_token(
        &self,
        token: &str,
        expires_ms: Millis,
        now: Millis,
    ) -> Result<bool, StoreError> {
        self.with(|conn| {
            conn.execute(
                "DELETE FROM spent_tokens WHERE expires_ms < ?1",
                params![now as i64],
            )?;
            let inserted = conn.execute(
                "INSERT OR IGNORE INTO spent_tokens (token, expires_ms) VALUES (?1, ?2)",
                params![token, expires_ms as i64],
            )?;
            Ok(inserted == 1)
        })
    }

    /// A small key-value setting.
    pub fn get_kv(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.with(|conn| {
            Ok(conn
                .query_row("SELECT value FROM kv WHERE key = ?1", params![key], |row| {
                    row.get(0)
                })
                .optional()?)
        })
    }

    /// Sets a key-value setting.
    pub fn set_kv(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.with(|conn| {
            conn.execute(
                "INSERT INTO kv (key, value) VALUES (?1, ?2) \
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )?;
            Ok(())
        })
    }
}

fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}
