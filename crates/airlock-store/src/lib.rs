//! airlock-store: airlock's durable state, in SQLite (bundled, WAL; the
//! default) or in PostgreSQL shared by several instances (`store.url`; the
//! driver is airlock-pg's, reached through [`PgDriver`]). It is the only
//! crate that knows SQL: each statement is written once, for both engines.
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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

mod approvals;
mod audit;
mod chat;
mod checkpoints;
mod error;
mod feed;
mod grants;
mod migrate;
mod pg;
mod schema;
mod sessions;
mod snapshots;
mod sql;
mod sqlite;

use schema::migrate;
use sql::{Conn, args, first};
use sqlite::{Lite, is_busy};

pub use approvals::{Approval, ApprovalStatus, Created, EditedPlan, Limits, NewApproval, Verdict};
pub use audit::AuditRow;
pub use chat::ChatMessage;
pub use checkpoints::{CheckpointRow, Saved};
pub use error::StoreError;
pub use feed::{EVENT_FORMAT, EventKind, FeedEvent, Notifier};
pub use grants::GrantRow;
pub use migrate::CopyReport;
pub use pg::{PG_SCHEMA, PgDriver, PgOptions};
pub use sessions::{SessionRow, SessionStatus};
pub use snapshots::{Snapshot, SnapshotFile};
pub use sql::{Conn as SqlConn, Row as SqlRow, Value as SqlValue};

/// Milliseconds since the Unix epoch.
pub type Millis = u64;

/// The durable store: one per process, shared by its threads, on one of
/// two engines.
pub struct Store {
    engine: Engine,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let engine = match self.engine {
            Engine::Sqlite { .. } => "sqlite",
            Engine::Postgres(_) => "postgres",
        };
        f.debug_struct("Store")
            .field("engine", &engine)
            .finish_non_exhaustive()
    }
}

enum Engine {
    /// Embedded: one connection, and one for the audit head.
    Sqlite {
        conn: Mutex<Connection>,
        /// Only for the audit head (synchronous = NORMAL).
        head_conn: Mutex<Connection>,
    },
    /// Shared by several instances.
    Postgres(pg::PgEngine),
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
        conn.set_prepared_statement_cache_capacity(sqlite::STATEMENT_CACHE);
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
            engine: Engine::Sqlite {
                conn: Mutex::new(conn),
                head_conn: Mutex::new(head_conn),
            },
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
            engine: Engine::Sqlite {
                conn: Mutex::new(conn),
                head_conn: Mutex::new(head_conn),
            },
        })
    }

    /// Joins the PostgreSQL database `driver` reaches: migrates it if
    /// needed (once, whichever instance comes first), registers this
    /// instance with a lease, and wakes this process's readers when another
    /// instance changes something. `now_ms` is when it starts.
    pub fn postgres(
        driver: Arc<dyn PgDriver>,
        options: &PgOptions,
        now_ms: Millis,
    ) -> Result<Store, StoreError> {
        Ok(Store {
            engine: Engine::Postgres(pg::PgEngine::open(driver, options, now_ms)?),
        })
    }

    /// Whether this store is the shared (PostgreSQL) one.
    pub fn is_shared(&self) -> bool {
        matches!(self.engine, Engine::Postgres(_))
    }

    /// Who holds what this process waits for or applies: its process id on
    /// SQLite (one host), its instance number on PostgreSQL.
    pub fn me(&self) -> u32 {
        match &self.engine {
            Engine::Sqlite { .. } => std::process::id(),
            Engine::Postgres(pg) => pg.instance(),
        }
    }

    /// Whether `holder` (see [`Store::me`]) still runs: a live process on
    /// SQLite, an instance within its lease on PostgreSQL. Not knowing is
    /// alive: nobody takes over from a holder that may still run.
    pub fn alive(&self, holder: u32) -> bool {
        match &self.engine {
            Engine::Sqlite { .. } => process_alive(holder),
            Engine::Postgres(pg) => pg.alive(holder),
        }
    }

    /// Whether this process may still act on what it holds: always on
    /// SQLite; on PostgreSQL while its lease is renewed.
    pub fn holding(&self) -> bool {
        match &self.engine {
            Engine::Sqlite { .. } => true,
            Engine::Postgres(pg) => pg.holding(),
        }
    }

    /// How long a dead instance's claims stand before another takes them
    /// over (none on SQLite: a dead process is known at once).
    pub fn lease(&self) -> Option<Duration> {
        match &self.engine {
            Engine::Sqlite { .. } => None,
            Engine::Postgres(pg) => Some(pg.lease()),
        }
    }

    /// Runs `apply` (a commit to the workspace's files, an undo, a
    /// recovery) holding the workspace's apply lock across instances: on
    /// PostgreSQL a database lock, so two hosts sharing the workspace never
    /// apply at once; on SQLite (one host) the file lock the apply itself
    /// takes is the lock, and this adds nothing.
    pub fn with_apply_lock<T>(&self, apply: impl FnOnce() -> T) -> Result<T, StoreError> {
        match &self.engine {
            Engine::Sqlite { .. } => Ok(apply()),
            Engine::Postgres(pg) => pg.with_apply_lock(apply),
        }
    }

    /// The schema version of the database: the number of migrations
    /// applied (`PRAGMA user_version` on SQLite).
    pub fn schema_version(&self) -> Result<usize, StoreError> {
        match &self.engine {
            Engine::Sqlite { conn, .. } => {
                let conn = conn.lock().map_err(|_| StoreError::Poisoned)?;
                let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
                Ok(usize::try_from(version).unwrap_or(0))
            }
            Engine::Postgres(pg) => pg.schema_version(),
        }
    }

    /// Runs `f` with each statement committing by itself.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match &self.engine {
            Engine::Sqlite { conn, .. } => {
                let conn = conn.lock().map_err(|_| StoreError::Poisoned)?;
                f(&mut Lite(&conn))
            }
            Engine::Postgres(pg) => pg.autocommit(f),
        }
    }

    /// Runs `f` as one change: a change and the events it writes commit
    /// together or not at all, one writer at a time. Once committed, this
    /// process's readers are woken (and on PostgreSQL, the other
    /// instances').
    fn changing<T>(
        &self,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let result = match &self.engine {
            // One writer at a time already: `BEGIN IMMEDIATE`.
            Engine::Sqlite { .. } => self.in_transaction(f),
            Engine::Postgres(pg) => pg.changing(f),
        };
        if result.is_ok() {
            Notifier::get().bump();
        }
        result
    }

    /// Runs `f` in one transaction, one writer at a time on SQLite; on
    /// PostgreSQL without the feed lock (what it changes is no event).
    fn in_transaction<T>(
        &self,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match &self.engine {
            Engine::Sqlite { conn, .. } => {
                let mut conn = conn.lock().map_err(|_| StoreError::Poisoned)?;
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let result = f(&mut Lite(&tx))?;
                tx.commit()?;
                Ok(result)
            }
            Engine::Postgres(pg) => pg.transaction(f),
        }
    }

    /// Whether this is the embedded engine (some tables of old SQLite
    /// stores exist only there).
    fn is_sqlite(&self) -> bool {
        matches!(self.engine, Engine::Sqlite { .. })
    }

    /// The audit chain's head as last saved: `(seq, event_hash)`.
    pub fn audit_head(&self) -> Result<Option<(u64, String)>, StoreError> {
        self.with(|conn| {
            first(conn, "SELECT seq, hash FROM audit_head WHERE id = 1", &[])?
                .map(|row| Ok((row.get::<i64>("seq")?.max(0) as u64, row.get("hash")?)))
                .transpose()
        })
    }

    /// Saves the audit chain's head; it only moves forward. Not synced at
    /// once (see [`Store::open`]).
    pub fn save_audit_head(&self, seq: u64, hash: &str) -> Result<(), StoreError> {
        const SAVE: &str = "INSERT INTO audit_head (id, seq, hash) VALUES (1, ?1, ?2) \
             ON CONFLICT(id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash \
             WHERE excluded.seq > audit_head.seq";
        match &self.engine {
            Engine::Sqlite { head_conn, .. } => {
                let conn = head_conn.lock().map_err(|_| StoreError::Poisoned)?;
                Lite(&conn).execute(SAVE, args![seq as i64, hash])?;
            }
            Engine::Postgres(pg) => {
                pg.autocommit(|conn| conn.execute(SAVE, args![seq as i64, hash]))?;
            }
        }
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
                args![now as i64],
            )?;
            let inserted = conn.execute(
                "INSERT INTO spent_tokens (token, expires_ms) VALUES (?1, ?2) \
                 ON CONFLICT DO NOTHING",
                args![token, expires_ms as i64],
            )?;
            Ok(inserted == 1)
        })
    }

    /// Claims the delivery of event `seq` to `target` (a webhook's URL):
    /// `true` for the one instance of a shared store that should send it.
    /// On SQLite (one host) every serving process delivers what it reads.
    pub fn claim_delivery(&self, seq: u64, target: &str) -> Result<bool, StoreError> {
        if !self.is_shared() {
            return Ok(true);
        }
        let me = self.me();
        self.with(|conn| {
            Ok(conn.execute(
                "INSERT INTO deliveries (seq, target, instance) VALUES (?1, ?2, ?3) \
                 ON CONFLICT DO NOTHING",
                args![i64::try_from(seq).unwrap_or(i64::MAX), target, me],
            )? == 1)
        })
    }

    /// A small key-value setting.
    pub fn get_kv(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.with(|conn| {
            first(conn, "SELECT value FROM kv WHERE key = ?1", args![key])?
                .map(|row| row.at(0))
                .transpose()
        })
    }

    /// Sets a key-value setting.
    pub fn set_kv(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.with(|conn| {
            conn.execute(
                "INSERT INTO kv (key, value) VALUES (?1, ?2) \
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                args![key, value],
            )?;
            Ok(())
        })
    }
}

/// Whether a process with this id runs (signal 0 probes without
/// signalling). Only "no such process" means gone: EPERM is a live process
/// of another user, which must never be raced.
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match rustix::process::Pid::from_raw(pid) {
        Some(pid) => !matches!(
            rustix::process::test_kill_process(pid),
            Err(rustix::io::Errno::SRCH)
        ),
        None => false,
    }
}
