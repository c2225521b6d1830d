//! The shared engine: PostgreSQL, for several airlock instances on one
//! database (DESIGN §7.2). The statements are the store's own (written
//! once for both engines, `?N` placeholders turned into `$N` here); the
//! driver, its pool and its runtime live in another crate and are reached
//! through [`PgDriver`].
//!
//! What differs from SQLite, and why:
//! - **One writer at a time.** Every transaction that changes state (and
//!   writes its event) first takes one transaction-level advisory lock, the
//!   feed lock. An event's `seq` is handed out under it and the lock is
//!   released only once the commit is visible, so readers see events in
//!   `seq` order: a reader's cursor never skips one still in flight. It also
//!   keeps the dedup and pending-limit checks of `create_approval` exact, as
//!   `BEGIN IMMEDIATE` does in SQLite.
//! - **Wakeups across instances.** A change sends `NOTIFY airlock_feed` in
//!   its transaction (delivered on commit); each instance listens and wakes
//!   its own readers. The table stays the truth: a lost notification delays
//!   a reader by one look-around, never loses an event.
//! - **Holders are instances, alive while their lease is.** An instance
//!   registers a row at open and renews its lease; a waiting call or an
//!   apply claim names the instance, and another instance takes it over
//!   only once that lease has run out.
//! - **Migrations** run in one transaction under another advisory lock, so
//!   two instances starting together migrate once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::StoreError;
use crate::feed::Notifier;
use crate::sql::{Conn, Row, Value, args, first, scalar};

/// The PostgreSQL schema (namespace) that holds airlock's tables. A driver
/// puts it first on each connection's `search_path`.
pub const PG_SCHEMA: &str = "airlock";

/// The channel a change notifies.
const FEED_CHANNEL: &str = "airlock_feed";

/// Advisory lock keys: a class for airlock (`"air\0"`), then what is locked.
const LOCK_CLASS: i32 = 0x6169_7200;
const LOCK_MIGRATE: i32 = 1;
const LOCK_FEED: i32 = 2;
const LOCK_APPLY: i32 = 3;

/// What a PostgreSQL driver offers the store. Work may be called again
/// only if an earlier call of it never reached the database (a pooled
/// connection found dead before `BEGIN`); a transaction whose outcome is
/// unknown is an error, never retried blindly.
pub trait PgDriver: Send + Sync {
    /// Runs `work` in one transaction on a pooled connection: `BEGIN`, the
    /// work, `COMMIT`; `ROLLBACK` when the work fails.
    fn transaction(
        &self,
        work: &mut dyn FnMut(&mut dyn Conn) -> Result<(), StoreError>,
    ) -> Result<(), StoreError>;
    /// Runs `work` on a pooled connection, each statement committing by
    /// itself.
    fn autocommit(
        &self,
        work: &mut dyn FnMut(&mut dyn Conn) -> Result<(), StoreError>,
    ) -> Result<(), StoreError>;
    /// Runs `listen` (a `LISTEN` statement) on a connection of its own and
    /// calls `wake` on every notification, and after every reconnect (a
    /// notification may have been missed meanwhile), until the driver is
    /// dropped.
    fn listen(&self, listen: &str, wake: Box<dyn Fn() + Send + Sync>) -> Result<(), StoreError>;
}

/// How an instance joins the database.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// How long an instance's claims outlive its last heartbeat.
    pub lease: Duration,
    /// Where this instance runs (shown in `instances`).
    pub host: String,
}

impl Default for PgOptions {
    fn default() -> PgOptions {
        PgOptions {
            lease: Duration::from_secs(10),
            host: String::new(),
        }
    }
}

/// Turns the store's `?N` placeholders into PostgreSQL's `$N`. The store's
/// statements hold no `?` anywhere else (no string literal has one).
fn dollars(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    for ch in sql.chars() {
        out.push(if ch == '?' { '$' } else { ch });
    }
    out
}

/// A driver connection that takes the store's statements.
struct Pg<'c>(&'c mut dyn Conn);

impl Conn for Pg<'_> {
    fn query(&mut self, sql: &str, args: &[Value]) -> Result<Vec<Row>, StoreError> {
        self.0.query(&dollars(sql), args)
    }
    fn execute(&mut self, sql: &str, args: &[Value]) -> Result<u64, StoreError> {
        self.0.execute(&dollars(sql), args)
    }
    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.0.batch(sql)
    }
}

/// Runs a one-shot `work` through a driver call that takes `FnMut`.
fn once<T>(
    call: impl FnOnce(&mut dyn FnMut(&mut dyn Conn) -> Result<(), StoreError>) -> Result<(), StoreError>,
    work: impl FnOnce(&mut dyn Conn) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let mut work = Some(work);
    let mut out = None;
    call(&mut |conn| {
        let work = work
            .take()
            .ok_or_else(|| StoreError::Unavailable("a statement was sent twice".into()))?;
        out = Some(work(&mut Pg(conn))?);
        Ok(())
    })?;
    out.ok_or_else(|| StoreError::Unavailable("the database did not run the statement".into()))
}

/// The schema, step by step: step `n` takes a database at
/// `meta.schema_version` `n` to `n + 1`. Never edit a step; add one. The
/// tables are SQLite's (version 8), typed for PostgreSQL, and the
/// instances that share them.
const PG_MIGRATIONS: &[&str] = &[
    "
CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE approvals (
    seq bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    id text NOT NULL UNIQUE,
    tool text NOT NULL,
    args_json text NOT NULL,
    args_display text NOT NULL,
    dedup_key text NOT NULL,
    \"user\" text, agent text, session text, tool_call_id text,
    risk text NOT NULL,
    decision_json text NOT NULL,
    path text,
    summary text NOT NULL,
    diff text NOT NULL,
    plan_json text NOT NULL,
    created_ms bigint NOT NULL,
    expires_ms bigint NOT NULL,
    status text NOT NULL,
    decided_by text, decided_user text, channel text, reason text, decided_ms bigint,
    result_json text,
    owner_pid bigint,
    waiter_pid bigint,
    owner text,
    context_id text,
    edited bigint NOT NULL DEFAULT 0,
    undone bigint NOT NULL DEFAULT 0,
    requester_channel text, requester_chat text, requester_user text
);
CREATE INDEX approvals_pending ON approvals (status, dedup_key);
CREATE INDEX approvals_expiry ON approvals (status, expires_ms);
CREATE INDEX approvals_tool_call ON approvals (tool_call_id);
CREATE TABLE grants (
    id text PRIMARY KEY,
    tool text NOT NULL,
    path_glob text,
    session text,
    expires_ms bigint,
    created_ms bigint NOT NULL,
    created_by text,
    approval_id text,
    \"user\" text,
    owner text
);
CREATE TABLE snapshot_files (
    approval_id text NOT NULL,
    idx bigint NOT NULL,
    path text NOT NULL,
    before bytea,
    before_hash text,
    after_hash text,
    mode bigint,
    undone bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (approval_id, idx)
);
CREATE TABLE audit_head (
    id bigint PRIMARY KEY CHECK (id = 1),
    seq bigint NOT NULL,
    hash text NOT NULL
);
CREATE TABLE kv (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE spent_tokens (token text PRIMARY KEY, expires_ms bigint NOT NULL);
CREATE TABLE events (
    seq bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    kind text NOT NULL,
    subject text,
    owner text,
    at_ms bigint NOT NULL,
    data text NOT NULL
);
CREATE TABLE chat_messages (
    approval_id text NOT NULL,
    platform text NOT NULL,
    chat text NOT NULL,
    message_id text,
    claimed_ms bigint NOT NULL,
    shown text NOT NULL DEFAULT '',
    settled bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (approval_id, platform, chat)
);
CREATE INDEX chat_messages_open ON chat_messages (platform, settled);
CREATE TABLE instances (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    host text NOT NULL,
    pid bigint NOT NULL,
    started_ms bigint NOT NULL,
    lease_until timestamptz NOT NULL
);
",
    // 2: one audit chain for every instance: each record's exact line, and the
    // head, whose row lock serialises appenders.
    "
CREATE TABLE audit_chain (
    id bigint PRIMARY KEY CHECK (id = 1),
    seq bigint NOT NULL,
    event_hash text NOT NULL
);
INSERT INTO audit_chain (id, seq, event_hash) VALUES (1, 0, '');
CREATE TABLE audit_records (
    seq bigint PRIMARY KEY,
    ts text NOT NULL,
    event text,
    hitl_id text,
    event_hash text NOT NULL,
    line text NOT NULL,
    instance bigint
);
CREATE INDEX audit_records_event ON audit_records (event, hitl_id);
",
    // 3: which instance delivers an event to a webhook (one does).
    "
CREATE TABLE deliveries (
    seq bigint NOT NULL,
    target text NOT NULL,
    instance bigint NOT NULL,
    PRIMARY KEY (seq, target)
);
",
    // 4: the audit log's signed checkpoints (one per tree size and key),
    // leases (which instance does a job only one may do) and their cursors.
    "
CREATE TABLE audit_checkpoints (
    size bigint NOT NULL,
    key_id text NOT NULL,
    root text NOT NULL,
    note text NOT NULL,
    created_ms bigint NOT NULL,
    PRIMARY KEY (size, key_id)
);
CREATE TABLE leases (
    name text PRIMARY KEY,
    holder text NOT NULL,
    until_ms bigint NOT NULL
);
CREATE TABLE cursors (
    name text PRIMARY KEY,
    seq bigint NOT NULL,
    position bigint NOT NULL
);
",
    // Durable sessions (DESIGN §5.3).
    "
CREATE TABLE sessions (
    id text PRIMARY KEY,
    owner text NOT NULL,
    \"user\" text,
    agent text,
    profile text,
    authority text NOT NULL,
    authority_hash text NOT NULL,
    labels text NOT NULL,
    status text NOT NULL,
    created_ms bigint NOT NULL,
    expires_ms bigint NOT NULL,
    idle_ttl_ms bigint NOT NULL,
    last_used_ms bigint NOT NULL,
    ended_ms bigint,
    end_reason text,
    worktree text
);
CREATE INDEX sessions_open ON sessions (status, owner);
",
];

/// One instance's connection to the shared database.
pub(crate) struct PgEngine {
    driver: Arc<dyn PgDriver>,
    /// This instance's row in `instances`.
    instance: u32,
    lease: Duration,
    heartbeat: Arc<(Mutex<bool>, Condvar)>,
    /// Whether the heartbeat failed to renew the lease in time: this
    /// instance may no longer act on its claims.
    lapsed: Arc<AtomicBool>,
}

impl PgEngine {
    /// Joins the database: migrates it (once, whichever instance comes
    /// first), registers this instance and starts its heartbeat, and
    /// listens for other instances' changes.
    pub(crate) fn open(
        driver: Arc<dyn PgDriver>,
        options: &PgOptions,
        now_ms: u64,
    ) -> Result<PgEngine, StoreError> {
        migrate(driver.as_ref())?;
        let lease_ms = i64::try_from(options.lease.as_millis()).unwrap_or(i64::MAX);
        let instance = once(
            |work| driver.autocommit(work),
            |conn| {
                scalar::<u32>(
                    conn,
                    &format!(
                        "INSERT INTO instances (host, pid, started_ms, lease_until) \
                         VALUES (?1, ?2, ?3, clock_timestamp() + {lease_ms} * interval '1 millisecond') \
                         RETURNING id"
                    ),
                    args![options.host, std::process::id(), now_ms as i64],
                )
            },
        )?;
        // Instances gone for a day hold nothing any more (their claims were
        // taken over long ago): their rows go.
        once(
            |work| driver.autocommit(work),
            |conn| {
                conn.execute(
                    "DELETE FROM instances WHERE lease_until < clock_timestamp() - interval '1 day'",
                    &[],
                )
            },
        )?;
        driver.listen(
            &format!("LISTEN {FEED_CHANNEL}"),
            Box::new(|| Notifier::get().bump()),
        )?;
        let engine = PgEngine {
            driver,
            instance,
            lease: options.lease,
            heartbeat: Arc::new((Mutex::new(false), Condvar::new())),
            lapsed: Arc::new(AtomicBool::new(false)),
        };
        engine.start_heartbeat(lease_ms);
        Ok(engine)
    }

    /// Renews the lease every quarter of it, until the engine is dropped.
    fn start_heartbeat(&self, lease_ms: i64) {
        let driver = Arc::downgrade(&self.driver);
        let stop = Arc::clone(&self.heartbeat);
        let lapsed = Arc::clone(&self.lapsed);
        let instance = self.instance;
        let every = self.lease / 4;
        let renew = format!(
            "UPDATE instances SET lease_until = clock_timestamp() + {lease_ms} * interval '1 millisecond' \
             WHERE id = ?1"
        );
        let spawned = std::thread::Builder::new()
            .name("airlock-lease".into())
            .spawn(move || {
                let mut renewed = std::time::Instant::now();
                loop {
                    {
                        let (stopped, wake) = &*stop;
                        let Ok(guard) = stopped.lock() else { return };
                        let Ok((guard, _)) = wake.wait_timeout_while(guard, every, |s| !*s) else {
                            return;
                        };
                        if *guard {
                            return;
                        }
                    }
                    let Some(driver) = driver.upgrade() else {
                        return;
                    };
                    let result = once(
                        |work| driver.autocommit(work),
                        |conn| conn.execute(&renew, args![instance]),
                    );
                    match result {
                        Ok(1) => {
                            renewed = std::time::Instant::now();
                            lapsed.store(false, Ordering::SeqCst);
                        }
                        // Gone (another instance swept it as dead) or the
                        // database is away: past the lease, stand down.
                        _ => {
                            if renewed.elapsed() >= every * 3 {
                                lapsed.store(true, Ordering::SeqCst);
                            }
                        }
                    }
                }
            });
        if let Err(error) = spawned {
            eprintln!("airlock: cannot start the lease heartbeat: {error}");
            self.lapsed.store(true, Ordering::SeqCst);
        }
    }

    pub(crate) fn instance(&self) -> u32 {
        self.instance
    }

    pub(crate) fn lease(&self) -> Duration {
        self.lease
    }

    /// Whether this instance still holds its lease (as far as it knows).
    pub(crate) fn holding(&self) -> bool {
        !self.lapsed.load(Ordering::SeqCst)
    }

    /// Whether the instance `holder` holds its lease now (database time).
    /// This instance is alive to itself. In the first lease after the
    /// database (re)started nobody is taken for dead: every live instance
    /// needs that long to renew a lease that ran out while the database was
    /// away.
    pub(crate) fn alive(&self, holder: u32) -> bool {
        if holder == self.instance {
            return true;
        }
        let lease_ms = i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX);
        self.autocommit(|conn| {
            Ok(first(
                conn,
                &format!(
                    "SELECT 1 AS alive FROM instances WHERE id = ?1 AND (lease_until > clock_timestamp() \
                     OR clock_timestamp() < pg_postmaster_start_time() + {lease_ms} * interval '1 millisecond')"
                ),
                args![holder],
            )?
            .is_some())
        })
        // Not knowing is not dead: nobody takes over from a holder that
        // may still run.
        .unwrap_or(true)
    }

    /// Runs `work`, each statement committing by itself.
    pub(crate) fn autocommit<T>(
        &self,
        work: impl FnOnce(&mut dyn Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        once(|call| self.driver.autocommit(call), work)
    }

    /// Runs `apply` holding the workspace's apply lock: a transaction-level
    /// advisory lock on a connection of its own, released when the
    /// transaction ends, or by the server when the holder dies.
    pub(crate) fn with_apply_lock<T>(&self, apply: impl FnOnce() -> T) -> Result<T, StoreError> {
        self.transaction(|conn| {
            conn.execute(
                &format!("SELECT pg_advisory_xact_lock({LOCK_CLASS}, {LOCK_APPLY})"),
                &[],
            )?;
            Ok(apply())
        })
    }

    /// Runs `work` in one transaction, without the feed lock (what it
    /// changes is no event).
    pub(crate) fn transaction<T>(
        &self,
        work: impl FnOnce(&mut dyn Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        once(|call| self.driver.transaction(call), work)
    }

    /// Runs `work` as one change: under the feed lock, notifying the other
    /// instances on commit.
    pub(crate) fn changing<T>(
        &self,
        work: impl FnOnce(&mut dyn Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        once(
            |call| self.driver.transaction(call),
            |conn| {
                conn.execute(
                    &format!("SELECT pg_advisory_xact_lock({LOCK_CLASS}, {LOCK_FEED})"),
                    &[],
                )?;
                let out = work(conn)?;
                conn.execute(&format!("SELECT pg_notify('{FEED_CHANNEL}', '')"), &[])?;
                Ok(out)
            },
        )
    }

    /// The schema version of the database.
    pub(crate) fn schema_version(&self) -> Result<usize, StoreError> {
        self.autocommit(stored_version)
    }
}

/// The schema version `meta` records (0 when it records none).
fn stored_version(conn: &mut dyn Conn) -> Result<usize, StoreError> {
    let version: Option<String> = match first(
        conn,
        "SELECT value FROM meta WHERE key = 'schema_version'",
        &[],
    )? {
        Some(row) => row.at(0)?,
        None => None,
    };
    Ok(version.and_then(|v| v.parse().ok()).unwrap_or(0))
}

impl Drop for PgEngine {
    /// A clean shutdown gives up the lease at once: the other instances
    /// take over this one's claims without waiting for it to run out.
    fn drop(&mut self) {
        let (stopped, wake) = &*self.heartbeat;
        if let Ok(mut stopped) = stopped.lock() {
            *stopped = true;
        }
        wake.notify_all();
        let instance = self.instance;
        let _ = self.autocommit(|conn| {
            conn.execute("DELETE FROM instances WHERE id = ?1", args![instance])
        });
    }
}

/// Brings the database to the newest schema in one transaction, under the
/// migration lock; a database newer than this build is refused.
fn migrate(driver: &dyn PgDriver) -> Result<(), StoreError> {
    once(
        |work| driver.transaction(work),
        |conn| {
            conn.execute(
                &format!("SELECT pg_advisory_xact_lock({LOCK_CLASS}, {LOCK_MIGRATE})"),
                &[],
            )?;
            conn.batch(&format!("CREATE SCHEMA IF NOT EXISTS {PG_SCHEMA}"))?;
            let has_meta: bool = first(
                conn,
                "SELECT 1 AS found FROM pg_catalog.pg_tables \
                 WHERE schemaname = ?1 AND tablename = 'meta'",
                args![PG_SCHEMA],
            )?
            .is_some();
            let version = if has_meta { stored_version(conn)? } else { 0 };
            if version > PG_MIGRATIONS.len() {
                return Err(StoreError::NewerSchema {
                    found: version,
                    supported: PG_MIGRATIONS.len(),
                });
            }
            for step in PG_MIGRATIONS.iter().skip(version) {
                conn.batch(step)?;
            }
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?1) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                args![PG_MIGRATIONS.len().to_string()],
            )?;
            Ok(())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::dollars;

    #[test]
    fn placeholders_become_dollars() {
        assert_eq!(
            dollars("SELECT a FROM t WHERE b = ?1 AND c IS NOT DISTINCT FROM ?12"),
            "SELECT a FROM t WHERE b = $1 AND c IS NOT DISTINCT FROM $12"
        );
    }
}
