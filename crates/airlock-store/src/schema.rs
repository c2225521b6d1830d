//! The schema and its migrations: a new database gets [`SCHEMA`], then every
//! step of [`MIGRATIONS`]; `PRAGMA user_version` counts the steps applied.

use rusqlite::Connection;

use crate::StoreError;
use crate::sqlite::Lite;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS approvals (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    tool TEXT NOT NULL,
    args_json TEXT NOT NULL,
    args_display TEXT NOT NULL,
    dedup_key TEXT NOT NULL,
    user TEXT, agent TEXT, session TEXT, tool_call_id TEXT,
    risk TEXT NOT NULL,
    decision_json TEXT NOT NULL,
    path TEXT,
    summary TEXT NOT NULL,
    diff TEXT NOT NULL,
    plan_json TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    status TEXT NOT NULL,
    decided_by TEXT, decided_user TEXT, channel TEXT, reason TEXT, decided_ms INTEGER,
    result_json TEXT,
    owner_pid INTEGER,
    waiter_pid INTEGER
);
CREATE INDEX IF NOT EXISTS approvals_pending ON approvals (status, dedup_key);
CREATE TABLE IF NOT EXISTS grants (
    id TEXT PRIMARY KEY,
    tool TEXT NOT NULL,
    path_glob TEXT,
    session TEXT,
    expires_ms INTEGER,
    created_ms INTEGER NOT NULL,
    created_by TEXT,
    approval_id TEXT
);
CREATE TABLE IF NOT EXISTS snapshot_files (
    approval_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    path TEXT NOT NULL,
    before BLOB,
    before_hash TEXT,
    after_hash TEXT,
    mode INTEGER,
    undone INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (approval_id, idx)
);
CREATE TABLE IF NOT EXISTS audit_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS spent_tokens (
    token TEXT PRIMARY KEY,
    expires_ms INTEGER NOT NULL
);
";

/// The schema's changes since [`SCHEMA`], in order: step `n` takes a database
/// at `user_version` `n` to `n + 1`. Never edit a step; add one.
const MIGRATIONS: &[&str] = &[
    // 1: who an approval belongs to, and who a grant covers (a session
    // string chosen by one principal never carries another's rights).
    "ALTER TABLE approvals ADD COLUMN owner TEXT;
     ALTER TABLE grants ADD COLUMN user TEXT;
     ALTER TABLE grants ADD COLUMN owner TEXT;",
    // 2: the caller's correlation id (spec 000's context_id).
    "ALTER TABLE approvals ADD COLUMN context_id TEXT;",
    // 3: the event feed. AUTOINCREMENT: a seq is never used twice, not even
    // after the newest events are gone.
    "CREATE TABLE events (
         seq INTEGER PRIMARY KEY AUTOINCREMENT,
         kind TEXT NOT NULL,
         subject TEXT,
         owner TEXT,
         at_ms INTEGER NOT NULL,
         data TEXT NOT NULL
     );",
    // 4: whether the approval applied is an approver's edited version.
    "ALTER TABLE approvals ADD COLUMN edited INTEGER NOT NULL DEFAULT 0;
     UPDATE approvals SET edited = 1
     WHERE decided_by IS NOT NULL AND CASE WHEN json_valid(plan_json)
         THEN json_extract(plan_json, '$.report.edited') END = 1;",
    // 5: whether an applied change was undone (`show` and `history` say so);
    // the one-file `snapshots` table of older stores is read in `migrate`.
    "ALTER TABLE approvals ADD COLUMN undone INTEGER NOT NULL DEFAULT 0;
     UPDATE approvals SET undone = 1
     WHERE id IN (SELECT approval_id FROM snapshot_files WHERE undone = 1);",
    // 6: who asked on a chat platform, and the chat messages that show
    // approvals (one per approval, platform and chat; a row is claimed
    // before its message is posted, so no two processes post it).
    "ALTER TABLE approvals ADD COLUMN requester_channel TEXT;
     ALTER TABLE approvals ADD COLUMN requester_chat TEXT;
     ALTER TABLE approvals ADD COLUMN requester_user TEXT;
     CREATE TABLE chat_messages (
         approval_id TEXT NOT NULL,
         platform TEXT NOT NULL,
         chat TEXT NOT NULL,
         message_id TEXT,
         claimed_ms INTEGER NOT NULL,
         shown TEXT NOT NULL DEFAULT '',
         settled INTEGER NOT NULL DEFAULT 0,
         PRIMARY KEY (approval_id, platform, chat)
     );
     CREATE INDEX chat_messages_open ON chat_messages (platform, settled);",
    // 7: an agent's hook finds its call again by the agent's id of it.
    "CREATE INDEX approvals_tool_call ON approvals (tool_call_id);",
    // 8: the audit log's signed checkpoints (one per tree size and key),
    // leases (which process does a job only one may do: shipping the log
    // to a SIEM) and the cursors of those jobs.
    "CREATE TABLE audit_checkpoints (
         size INTEGER NOT NULL,
         key_id TEXT NOT NULL,
         root TEXT NOT NULL,
         note TEXT NOT NULL,
         created_ms INTEGER NOT NULL,
         PRIMARY KEY (size, key_id)
     );
     CREATE TABLE leases (
         name TEXT PRIMARY KEY,
         holder TEXT NOT NULL,
         until_ms INTEGER NOT NULL
     );
     CREATE TABLE cursors (
         name TEXT PRIMARY KEY,
         seq INTEGER NOT NULL,
         position INTEGER NOT NULL
     );",
    // 9: durable sessions (DESIGN §5.3): who opened them, the authority
    // they hold (JSON, and its hash), their lifetimes and how they ended.
    "CREATE TABLE sessions (
         id TEXT PRIMARY KEY,
         owner TEXT NOT NULL,
         \"user\" TEXT,
         agent TEXT,
         profile TEXT,
         authority TEXT NOT NULL,
         authority_hash TEXT NOT NULL,
         labels TEXT NOT NULL,
         status TEXT NOT NULL,
         created_ms INTEGER NOT NULL,
         expires_ms INTEGER NOT NULL,
         idle_ttl_ms INTEGER NOT NULL,
         last_used_ms INTEGER NOT NULL,
         ended_ms INTEGER,
         end_reason TEXT,
         worktree TEXT
     );
     CREATE INDEX sessions_open ON sessions (status, owner);",
];

/// The schema version this build writes: the number of migrations.
pub(crate) const SCHEMA_VERSION: usize = MIGRATIONS.len();

/// The migration that added `approvals.undone`, and what it backfills from
/// the one-file `snapshots` table where an older store still has one.
const UNDONE_STEP: usize = 4;
const UNDONE_FROM_LEGACY: &str = "UPDATE approvals SET undone = 1
     WHERE id IN (SELECT approval_id FROM snapshots WHERE undone = 1);";
/// Creates the tables of a new database and brings any database up to the
/// newest schema, in one immediate transaction (so two processes opening it
/// together migrate it once). A database newer than this build is refused.
pub(crate) fn migrate(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        conn.execute_batch(SCHEMA)?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        let version = usize::try_from(version).unwrap_or(0);
        if version > MIGRATIONS.len() {
            return Err(StoreError::NewerSchema {
                found: version,
                supported: MIGRATIONS.len(),
            });
        }
        for (at, step) in MIGRATIONS.iter().enumerate().skip(version) {
            conn.execute_batch(step)?;
            if at == UNDONE_STEP && crate::snapshots::has_legacy_snapshots(&mut Lite(conn))? {
                conn.execute_batch(UNDONE_FROM_LEGACY)?;
            }
        }
        conn.pragma_update(None, "user_version", MIGRATIONS.len() as i64)?;
        Ok(())
    })();
    match result {
        Ok(()) => Ok(conn.execute_batch("COMMIT")?),
        Err(error) => {
            // The transaction is abandoned either way; the first error is
            // the one to report.
            if let Err(rollback) = conn.execute_batch("ROLLBACK") {
                eprintln!("airlock: rolling back a failed migration: {rollback}");
            }
            Err(error)
        }
    }
}
