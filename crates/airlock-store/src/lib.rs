//! airlock-store: airlock's durable state in SQLite (bundled, WAL). It is the only
//! crate that knows SQL.
//!
//! It keeps approvals (the state machine of DESIGN §7), grants ("always allow"),
//! snapshots of before-content for undo, and the head of the audit chain. Every
//! state transition is a compare-and-set (`UPDATE … WHERE status = 'pending'`), so
//! two deciders never both win and an approval is never applied twice, across
//! threads and processes.
//!
//! An approval's typed parts (its [`Risk`], [`ApprovalTerms`], [`Plan`],
//! [`Decided`] and result [`Envelope`]) are written and read here and
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

use airlock_core::envelope::{DecidedBy, Envelope};
use airlock_core::{ApprovalTerms, Channel, Decided, Plan, Risk, StateError};
use rusqlite::{Connection, OptionalExtension, Row, Transaction, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

mod feed;

pub use feed::{EVENT_FORMAT, EventKind, FeedEvent, Notifier};
use feed::{NewEvent, write_event};

/// Milliseconds since the Unix epoch.
pub type Millis = u64;

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("cannot create {path}: {source}")]
    Create {
        path: String,
        source: std::io::Error,
    },
    #[error("no approval {0}")]
    NotFound(String),
    #[error("approval {id} is already {status}")]
    AlreadyDecided { id: String, status: ApprovalStatus },
    #[error("approval {0} has expired")]
    Expired(String),
    #[error("too many pending approvals ({pending} of at most {limit}{scope})")]
    RateLimited {
        pending: u64,
        limit: u64,
        scope: &'static str,
    },
    #[error("the store lock is poisoned")]
    Poisoned,
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// A stored value this build cannot read (a newer format, say).
    #[error("approval {id}: {source}")]
    State { id: String, source: StateError },
    #[error(
        "the database is at schema version {found}, newer than this airlock ({supported}); use a newer airlock"
    )]
    NewerSchema { found: usize, supported: usize },
}

/// The states of DESIGN §7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    /// Claimed by the process that applies it (between approved and applied).
    Applying,
    Applied,
    Failed,
    Denied,
    Expired,
    Cancelled,
}

impl ApprovalStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Applying => "applying",
            ApprovalStatus::Applied => "applied",
            ApprovalStatus::Failed => "failed",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Cancelled => "cancelled",
        }
    }

    fn parse(text: &str) -> Result<ApprovalStatus, StoreError> {
        [
            ApprovalStatus::Pending,
            ApprovalStatus::Approved,
            ApprovalStatus::Applying,
            ApprovalStatus::Applied,
            ApprovalStatus::Failed,
            ApprovalStatus::Denied,
            ApprovalStatus::Expired,
            ApprovalStatus::Cancelled,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown status {text}")))
    }

    /// Whether no further decision can happen.
    pub const fn is_final(self) -> bool {
        matches!(
            self,
            ApprovalStatus::Applied
                | ApprovalStatus::Failed
                | ApprovalStatus::Denied
                | ApprovalStatus::Expired
                | ApprovalStatus::Cancelled
        )
    }
}

impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a new approval records.
#[derive(Debug, Clone, PartialEq)]
pub struct NewApproval {
    pub id: String,
    pub tool: String,
    /// The exact arguments (JSON), for apply.
    pub args_json: String,
    /// Redacted arguments (JSON), for display.
    pub args_display: String,
    /// Identical pending calls share this key (tool, args, session, owner).
    pub dedup_key: String,
    pub user: Option<String>,
    pub agent: Option<String>,
    /// Who made the call, as the face authenticated it
    /// (`Principal::owner_key`): only they (and an admin) see the approval
    /// from an agent's side. `None` for rows older than the column: nobody's.
    pub owner: Option<String>,
    pub session: Option<String>,
    pub tool_call_id: Option<String>,
    /// The caller's own correlation id (spec 000's `context_id`).
    pub context_id: Option<String>,
    pub risk: Risk,
    /// What the policy's decision binds the approval to (timeout,
    /// allow_skip, require_reason, approvers).
    pub terms: ApprovalTerms,
    pub path: Option<String>,
    pub summary: String,
    pub diff: String,
    /// What is applied on approval.
    pub plan: Plan,
    pub created_ms: Millis,
    pub expires_ms: Millis,
    /// The process blocked waiting for this approval (wait mode); when it is
    /// gone, the approval is cancelled rather than applied for nobody.
    pub waiter_pid: Option<u32>,
}

impl NewApproval {
    /// An approval of `tool` with everything else empty: no principal, no
    /// session, no path, no waiter.
    pub fn new(
        id: &str,
        tool: &str,
        risk: Risk,
        terms: ApprovalTerms,
        plan: Plan,
        created_ms: Millis,
        expires_ms: Millis,
    ) -> NewApproval {
        NewApproval {
            id: id.to_owned(),
            tool: tool.to_owned(),
            args_json: "{}".to_owned(),
            args_display: "{}".to_owned(),
            dedup_key: id.to_owned(),
            user: None,
            agent: None,
            owner: None,
            session: None,
            tool_call_id: None,
            context_id: None,
            risk,
            terms,
            path: None,
            summary: String::new(),
            diff: String::new(),
            plan,
            created_ms,
            expires_ms,
            waiter_pid: None,
        }
    }
}

/// A stored approval.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    pub new: NewApproval,
    /// Order of creation, for FIFO presentation.
    pub seq: i64,
    pub status: ApprovalStatus,
    /// Who decided it, once someone (or the timeout) did; `None` while
    /// pending and for a cancelled approval.
    pub decision: Option<Decided>,
    /// The final envelope once the call is settled.
    pub result: Option<Envelope>,
    /// The process that decided or is applying it.
    pub owner_pid: Option<u32>,
}

impl std::ops::Deref for Approval {
    type Target = NewApproval;
    fn deref(&self) -> &NewApproval {
        &self.new
    }
}

/// Limits on pending approvals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_pending: u64,
    pub max_pending_per_session: u64,
}

/// The outcome of `create_approval`.
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    New(Approval),
    /// An identical call is already pending: this is it.
    Existing(Approval),
}

/// A decision on a pending approval.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub approve: bool,
    pub by: DecidedBy,
    pub user: Option<String>,
    pub channel: Option<Channel>,
    pub reason: Option<String>,
    pub at_ms: Millis,
    /// An approval of an edited version: the plan (JSON) and diff that replace
    /// the proposal's, in the same update as the decision.
    pub edited: Option<EditedPlan>,
}

/// The plan an approver's edit produced.
#[derive(Debug, Clone, PartialEq)]
pub struct EditedPlan {
    pub plan: Plan,
    pub diff: String,
}

/// An "always allow" grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRow {
    pub id: String,
    pub tool: String,
    pub path_glob: Option<String>,
    /// `None` for a persistent grant.
    pub session: Option<String>,
    /// The user the grant was made for: it covers that user's calls only.
    pub user: Option<String>,
    /// A session grant covers only this principal's calls in the session
    /// (`Principal::owner_key`); `None` for a persistent one.
    pub owner: Option<String>,
    pub expires_ms: Option<Millis>,
    pub created_ms: Millis,
    pub created_by: Option<String>,
    pub approval_id: Option<String>,
}

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

/// The durable store. One connection per process, shared by its threads.
pub struct Store {
    conn: Mutex<Connection>,
    /// Only for the audit head (synchronous = NORMAL).
    head_conn: Mutex<Connection>,
}

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
    "ALTER TABLE approvals ADD COLUMN edited INTEGER NOT NULL DEFAULT 0;",
];

const APPROVAL_COLUMNS: &str = "seq, id, tool, args_json, args_display, dedup_key, user, agent, \
     session, tool_call_id, risk, decision_json, path, summary, diff, plan_json, created_ms, \
     expires_ms, status, decided_by, decided_user, channel, reason, decided_ms, result_json, \
     waiter_pid, owner_pid, owner, context_id, edited";

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

    /// The schema version of the database (`PRAGMA user_version`): the
    /// number of [`MIGRATIONS`] applied.
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

    /// Records a new pending approval, unless an identical call is already
    /// pending (then that one is returned), or the pending limits are reached.
    pub fn create_approval(
        &self,
        new: &NewApproval,
        limits: Limits,
    ) -> Result<Created, StoreError> {
        self.changing(|tx| {
            let now = new.created_ms as i64;
            let existing = tx
                .query_row(
                    &format!(
                        "SELECT {APPROVAL_COLUMNS} FROM approvals \
                         WHERE status = 'pending' AND expires_ms > ?1 AND dedup_key = ?2 \
                         ORDER BY seq LIMIT 1"
                    ),
                    params![now, new.dedup_key],
                    approval_from_row,
                )
                .optional()?;
            if let Some(existing) = existing {
                return Ok(Created::Existing(existing?));
            }
            let pending: i64 = tx.query_row(
                "SELECT COUNT(*) FROM approvals WHERE status = 'pending' AND expires_ms > ?1",
                params![now],
                |row| row.get(0),
            )?;
            let pending = pending.max(0) as u64;
            if pending >= limits.max_pending {
                return Err(StoreError::RateLimited {
                    pending,
                    limit: limits.max_pending,
                    scope: " in the workspace",
                });
            }
            if let Some(session) = &new.session {
                let in_session: i64 = tx.query_row(
                    // One principal's session: another naming the same
                    // string does not eat into its allowance.
                    "SELECT COUNT(*) FROM approvals \
                     WHERE status = 'pending' AND expires_ms > ?1 AND session = ?2 AND owner IS ?3",
                    params![now, session, new.owner],
                    |row| row.get(0),
                )?;
                let in_session = in_session.max(0) as u64;
                if in_session >= limits.max_pending_per_session {
                    return Err(StoreError::RateLimited {
                        pending: in_session,
                        limit: limits.max_pending_per_session,
                        scope: " in this session",
                    });
                }
            }
            tx.execute(
                "INSERT INTO approvals (id, tool, args_json, args_display, dedup_key, user, agent, \
                 session, tool_call_id, risk, decision_json, path, summary, diff, plan_json, \
                 created_ms, expires_ms, status, waiter_pid, owner, context_id) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, 'pending', ?18, ?19, ?20)",
                params![
                    new.id,
                    new.tool,
                    new.args_json,
                    new.args_display,
                    new.dedup_key,
                    new.user,
                    new.agent,
                    new.session,
                    new.tool_call_id,
                    new.risk.as_str(),
                    new.terms.to_stored(),
                    new.path,
                    new.summary,
                    new.diff,
                    new.plan.to_stored(),
                    new.created_ms as i64,
                    new.expires_ms as i64,
                    new.waiter_pid,
                    new.owner,
                    new.context_id,
                ],
            )?;
            let created = get_in(tx, &new.id)?;
            write_event(
                tx,
                NewEvent {
                    kind: EventKind::ApprovalCreated,
                    subject: Some(&created.id),
                    owner: created.owner.as_deref(),
                    at_ms: created.created_ms,
                    data: serde_json::json!({"tool": created.tool, "risk": created.risk.as_str()}),
                },
            )?;
            Ok(Created::New(created))
        })
    }

    /// One approval.
    pub fn get(&self, id: &str) -> Result<Approval, StoreError> {
        self.with(|conn| get_in(conn, id))
    }

    /// When the next pending approval expires, if any is pending.
    pub fn next_expiry(&self) -> Result<Option<Millis>, StoreError> {
        self.with(|conn| {
            let next: Option<i64> = conn.query_row(
                "SELECT min(expires_ms) FROM approvals WHERE status = 'pending'",
                [],
                |row| row.get(0),
            )?;
            Ok(next.map(|ms| ms.max(0) as u64))
        })
    }

    /// Pending approvals that have not expired, oldest first (per-session FIFO).
    pub fn pending(&self, session: Option<&str>, now: Millis) -> Result<Vec<Approval>, StoreError> {
        self.with(|conn| {
            let mut statement = conn.prepare(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE status = 'pending' AND expires_ms > ?1 AND (?2 IS NULL OR session = ?2) \
                 ORDER BY seq"
            ))?;
            let rows = statement.query_map(params![now as i64, session], approval_from_row)?;
            let mut out = Vec::new();
            for row in rows {
                out.push(row??);
            }
            Ok(out)
        })
    }

    /// Approvals still `pending` whose time is up, oldest first.
    pub fn overdue(&self, now: Millis) -> Result<Vec<Approval>, StoreError> {
        self.select_where("status = 'pending' AND expires_ms <= ?1", now)
    }

    fn select_where(&self, condition: &str, now: Millis) -> Result<Vec<Approval>, StoreError> {
        self.with(|conn| {
            let mut statement = conn.prepare(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE {condition} ORDER BY seq"
            ))?;
            let rows = statement.query_map(params![now as i64], approval_from_row)?;
            let mut out = Vec::new();
            for row in rows {
                out.push(row??);
            }
            Ok(out)
        })
    }

    /// Decides a pending approval: the compare-and-set `pending -> approved|denied`.
    /// Exactly one of several concurrent deciders wins; the others get
    /// `AlreadyDecided`. An approval past its expiry cannot be decided: it becomes
    /// `expired` and the decider gets `Expired`.
    pub fn decide(&self, id: &str, verdict: &Verdict) -> Result<Approval, StoreError> {
        let status = if verdict.approve {
            "approved"
        } else {
            "denied"
        };
        let edited = verdict.edited.as_ref();
        self.changing(|conn| {
            let changed = conn.execute(
                "UPDATE approvals SET status = ?2, decided_by = ?3, decided_user = ?4, \
                 channel = ?5, reason = ?6, decided_ms = ?7, owner_pid = ?8, \
                 plan_json = coalesce(?9, plan_json), diff = coalesce(?10, diff), edited = ?11 \
                 WHERE id = ?1 AND status = 'pending' AND expires_ms > ?7",
                params![
                    id,
                    status,
                    verdict.by.as_str(),
                    verdict.user,
                    verdict.channel.map(Channel::as_str),
                    verdict.reason,
                    verdict.at_ms as i64,
                    std::process::id(),
                    edited.map(|edited| edited.plan.to_stored()),
                    edited.map(|edited| edited.diff.as_str()),
                    edited.is_some(),
                ],
            )?;
            if changed == 1 {
                let decided = get_in(conn, id)?;
                write_event(
                    conn,
                    NewEvent {
                        kind: EventKind::ApprovalDecided,
                        subject: Some(id),
                        owner: decided.owner.as_deref(),
                        at_ms: verdict.at_ms,
                        data: serde_json::json!({
                            "status": status,
                            "by": verdict.by.as_str(),
                            "user": verdict.user,
                            "channel": verdict.channel.map(Channel::as_str),
                            "edited": edited.is_some(),
                        }),
                    },
                )?;
                return Ok(decided);
            }
            let current = get_in(conn, id)?;
            if current.status == ApprovalStatus::Pending {
                Err(StoreError::Expired(id.to_owned()))
            } else {
                Err(StoreError::AlreadyDecided {
                    id: id.to_owned(),
                    status: current.status,
                })
            }
        })
    }

    /// `pending -> expired` (a timeout). `Ok(None)` when someone decided first.
    pub fn expire(&self, id: &str, at_ms: Millis) -> Result<Option<Approval>, StoreError> {
        self.cas(
            id,
            "pending",
            "status = 'expired', decided_by = 'timeout', decided_ms = ?3",
            at_ms,
            EventKind::ApprovalExpired,
        )
    }

    /// `pending -> cancelled` (the waiting call went away).
    pub fn cancel(&self, id: &str, at_ms: Millis) -> Result<Option<Approval>, StoreError> {
        self.cas(
            id,
            "pending",
            "status = 'cancelled', decided_ms = ?3",
            at_ms,
            EventKind::ApprovalCancelled,
        )
    }

    /// `approved -> applying`: the caller that gets `Some` applies the plan; any
    /// other gets `None`. This is what keeps an approval from applying twice. The
    /// claiming process is recorded as the approval's owner.
    pub fn claim_apply(&self, id: &str) -> Result<Option<Approval>, StoreError> {
        self.with(|conn| {
            let changed = conn.execute(
                "UPDATE approvals SET status = 'applying', owner_pid = ?2 \
                 WHERE id = ?1 AND status = 'approved'",
                params![id, std::process::id()],
            )?;
            if changed == 1 {
                get_in(conn, id).map(Some)
            } else {
                get_in(conn, id).map(|_| None)
            }
        })
    }

    /// Approved or applying approvals whose owning process is gone (`alive`
    /// says which process ids still run): a crash left them half way.
    pub fn orphaned(
        &self,
        alive: &dyn Fn(u32) -> bool,
    ) -> Result<Vec<(Approval, u32)>, StoreError> {
        self.with(|conn| {
            let mut statement = conn.prepare(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE status IN ('approved', 'applying') ORDER BY seq"
            ))?;
            let mut rows = statement.query([])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let approval = approval_from_row(row)??;
                let owner = approval.owner_pid.unwrap_or(0);
                if owner == 0 || !alive(owner) {
                    out.push((approval, owner));
                }
            }
            Ok(out)
        })
    }

    /// Approved approvals that `waiter` holds: calls only that process can carry
    /// out (an upstream tool call goes through the connection it holds).
    pub fn approved_held_by(&self, waiter: u32) -> Result<Vec<Approval>, StoreError> {
        self.with(|conn| {
            let mut statement = conn.prepare(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE status = 'approved' AND waiter_pid = ?1 ORDER BY seq"
            ))?;
            let mut rows = statement.query([waiter])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                out.push(approval_from_row(row)??);
            }
            Ok(out)
        })
    }

    /// Pending approvals whose waiting process is gone.
    pub fn abandoned(&self, alive: &dyn Fn(u32) -> bool) -> Result<Vec<Approval>, StoreError> {
        self.with(|conn| {
            let mut statement = conn.prepare(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE status = 'pending' AND waiter_pid IS NOT NULL ORDER BY seq"
            ))?;
            let mut rows = statement.query([])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let approval = approval_from_row(row)??;
                if approval.waiter_pid.is_some_and(|pid| !alive(pid)) {
                    out.push(approval);
                }
            }
            Ok(out)
        })
    }

    /// Takes over an orphaned approval from its dead owner: only one process
    /// can. `Some` when this process now owns it (status unchanged).
    pub fn take_over(&self, id: &str, dead_owner: u32) -> Result<Option<Approval>, StoreError> {
        self.with(|conn| {
            let changed = conn.execute(
                "UPDATE approvals SET owner_pid = ?2 \
                 WHERE id = ?1 AND status IN ('approved', 'applying') \
                 AND (owner_pid IS ?3 OR owner_pid = ?4)",
                params![
                    id,
                    std::process::id(),
                    if dead_owner == 0 {
                        None
                    } else {
                        Some(dead_owner)
                    },
                    dead_owner
                ],
            )?;
            if changed == 1 {
                get_in(conn, id).map(Some)
            } else {
                Ok(None)
            }
        })
    }

    /// `UPDATE … SET {set} WHERE id = ?1 AND status = ?2`, with `event`;
    /// `set` may use `?3` for `at_ms`. `Ok(None)` when the approval was not
    /// in `from`.
    fn cas(
        &self,
        id: &str,
        from: &str,
        set: &str,
        at_ms: Millis,
        event: EventKind,
    ) -> Result<Option<Approval>, StoreError> {
        self.changing(|conn| {
            let sql = format!("UPDATE approvals SET {set} WHERE id = ?1 AND status = ?2");
            let changed = conn.execute(&sql, params![id, from, at_ms as i64])?;
            let approval = get_in(conn, id)?;
            if changed != 1 {
                return Ok(None);
            }
            write_event(
                conn,
                NewEvent {
                    kind: event,
                    subject: Some(id),
                    owner: approval.owner.as_deref(),
                    at_ms,
                    data: serde_json::json!({"status": approval.status.as_str()}),
                },
            )?;
            Ok(Some(approval))
        })
    }

    /// Settles an approval with its final status and envelope. Only moves forward
    /// from a state that allows it (`applying -> applied|failed`, or records the
    /// envelope of a `denied`/`expired`/`cancelled` one).
    pub fn finish(
        &self,
        id: &str,
        status: ApprovalStatus,
        result: &Envelope,
        at_ms: Millis,
    ) -> Result<(), StoreError> {
        let result_json = serde_json::to_string(result)
            .map_err(|error| StoreError::Corrupt(format!("result of {id}: {error}")))?;
        let from: &[&str] = match status {
            ApprovalStatus::Applied | ApprovalStatus::Failed => &["applying"],
            ApprovalStatus::Denied => &["denied"],
            ApprovalStatus::Expired => &["expired"],
            ApprovalStatus::Cancelled => &["cancelled"],
            ApprovalStatus::Pending | ApprovalStatus::Approved | ApprovalStatus::Applying => &[],
        };
        let event = match status {
            ApprovalStatus::Applied => Some(EventKind::ApprovalApplied),
            ApprovalStatus::Failed => Some(EventKind::ApprovalFailed),
            _ => None,
        };
        self.changing(|conn| {
            let changed = conn.execute(
                "UPDATE approvals SET status = ?2, result_json = ?3 \
                 WHERE id = ?1 AND (status = ?4 OR status = ?5)",
                params![
                    id,
                    status.as_str(),
                    result_json,
                    from.first().copied().unwrap_or(""),
                    from.get(1).copied().unwrap_or("")
                ],
            )?;
            if changed == 1 {
                if let Some(kind) = event {
                    let approval = get_in(conn, id)?;
                    write_event(
                        conn,
                        NewEvent {
                            kind,
                            subject: Some(id),
                            owner: approval.owner.as_deref(),
                            at_ms,
                            data: serde_json::json!({"status": status.as_str()}),
                        },
                    )?;
                }
                Ok(())
            } else {
                let current = get_in(conn, id)?;
                Err(StoreError::AlreadyDecided {
                    id: id.to_owned(),
                    status: current.status,
                })
            }
        })
    }

    /// Removes a grant (revoked, or one whose creation could not be
    /// audited); whether there was one to remove.
    pub fn delete_grant(&self, id: &str, at_ms: Millis) -> Result<bool, StoreError> {
        self.changing(|conn| {
            let deleted = conn.execute("DELETE FROM grants WHERE id = ?1", params![id])? > 0;
            if deleted {
                write_event(
                    conn,
                    NewEvent {
                        kind: EventKind::GrantRevoked,
                        subject: Some(id),
                        owner: None,
                        at_ms,
                        data: serde_json::json!({}),
                    },
                )?;
            }
            Ok(deleted)
        })
    }

    /// Gives every grant without an end (made before grants ended by default)
    /// the end `ttl_ms` after it was made; how many it changed.
    pub fn end_open_grants(&self, ttl_ms: Millis) -> Result<usize, StoreError> {
        self.with(|conn| {
            Ok(conn.execute(
                "UPDATE grants SET expires_ms = created_ms + ?1 WHERE expires_ms IS NULL",
                params![i64::try_from(ttl_ms).unwrap_or(i64::MAX)],
            )?)
        })
    }

    /// Stores an "always allow" grant.
    pub fn insert_grant(&self, grant: &GrantRow) -> Result<(), StoreError> {
        self.changing(|conn| {
            conn.execute(
                "INSERT INTO grants (id, tool, path_glob, session, expires_ms, created_ms, created_by, approval_id, user, owner) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                params![
                    grant.id,
                    grant.tool,
                    grant.path_glob,
                    grant.session,
                    grant.expires_ms.map(|ms| ms as i64),
                    grant.created_ms as i64,
                    grant.created_by,
                    grant.approval_id,
                    grant.user,
                    grant.owner,
                ],
            )?;
            write_event(
                conn,
                NewEvent {
                    kind: EventKind::GrantCreated,
                    subject: Some(&grant.id),
                    owner: None,
                    at_ms: grant.created_ms,
                    data: serde_json::json!({
                        "tool": grant.tool,
                        "approval_id": grant.approval_id,
                    }),
                },
            )?;
            Ok(())
        })
    }

    /// Grants that have not expired at `now`.
    pub fn grants(&self, now: Millis) -> Result<Vec<GrantRow>, StoreError> {
        self.with(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT id, tool, path_glob, session, expires_ms, created_ms, created_by, approval_id, \
                 user, owner FROM grants WHERE expires_ms IS NULL OR expires_ms > ?1 ORDER BY created_ms, id",
            )?;
            let rows = statement.query_map(params![now as i64], |row| {
                Ok(GrantRow {
                    id: row.get("id")?,
                    tool: row.get("tool")?,
                    path_glob: row.get("path_glob")?,
                    session: row.get("session")?,
                    expires_ms: row.get::<_, Option<i64>>("expires_ms")?.map(|ms| ms.max(0) as u64),
                    created_ms: row.get::<_, i64>("created_ms")?.max(0) as u64,
                    created_by: row.get("created_by")?,
                    approval_id: row.get("approval_id")?,
                    user: row.get("user")?,
                    owner: row.get("owner")?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

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

/// Whether the database still has the one-file `snapshots` table of earlier
/// versions (undo keeps working for changes applied before the upgrade).
fn has_legacy_snapshots(conn: &Connection) -> Result<bool, StoreError> {
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

fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn get_in(conn: &Connection, id: &str) -> Result<Approval, StoreError> {
    conn.query_row(
        &format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = ?1"),
        params![id],
        approval_from_row,
    )
    .optional()?
    .ok_or_else(|| StoreError::NotFound(id.to_owned()))?
}

/// Creates the tables of a new database and brings any database up to the
/// newest schema, in one immediate transaction (so two processes opening it
/// together migrate it once). A database newer than this build is refused.
fn migrate(conn: &Connection) -> Result<(), StoreError> {
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
        for step in &MIGRATIONS[version..] {
            conn.execute_batch(step)?;
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

fn approval_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Approval, StoreError>> {
    let millis = |value: i64| value.max(0) as u64;
    let id: String = row.get("id")?;
    let tool: String = row.get("tool")?;
    let state = |source: StateError| StoreError::State {
        id: id.clone(),
        source,
    };
    let status: String = row.get("status")?;
    let status = match ApprovalStatus::parse(&status) {
        Ok(status) => status,
        Err(error) => return Ok(Err(error)),
    };
    let risk: String = row.get("risk")?;
    let risk = match risk.parse::<Risk>() {
        Ok(risk) => risk,
        Err(error) => return Ok(Err(StoreError::Corrupt(format!("approval {id}: {error}")))),
    };
    let terms = match ApprovalTerms::from_stored(&row.get::<_, String>("decision_json")?) {
        Ok(terms) => terms,
        Err(error) => return Ok(Err(state(error))),
    };
    let plan = match Plan::from_stored(&row.get::<_, String>("plan_json")?, &tool) {
        Ok(plan) => plan,
        Err(error) => return Ok(Err(state(error))),
    };
    let decided_by: Option<String> = row.get("decided_by")?;
    let channel: Option<String> = row.get("channel")?;
    let decision = match decided_by {
        None => None,
        Some(by) => {
            let by = match by.parse::<DecidedBy>() {
                Ok(by) => by,
                Err(error) => return Ok(Err(state(error))),
            };
            let channel = match channel.as_deref().map(str::parse::<Channel>).transpose() {
                Ok(channel) => channel,
                Err(error) => return Ok(Err(state(error))),
            };
            Some(Decided {
                by,
                user: row.get("decided_user")?,
                channel,
                reason: row.get("reason")?,
                at_ms: row.get::<_, Option<i64>>("decided_ms")?.map_or(0, millis),
                edited: row.get::<_, i64>("edited")? != 0,
            })
        }
    };
    let result = match row.get::<_, Option<String>>("result_json")? {
        None => None,
        Some(text) => match serde_json::from_str::<Envelope>(&text) {
            Ok(envelope) => Some(envelope),
            Err(error) => {
                return Ok(Err(state(StateError::Unreadable {
                    what: "result",
                    message: error.to_string(),
                })));
            }
        },
    };
    Ok(Ok(Approval {
        seq: row.get("seq")?,
        new: NewApproval {
            args_json: row.get("args_json")?,
            args_display: row.get("args_display")?,
            dedup_key: row.get("dedup_key")?,
            user: row.get("user")?,
            agent: row.get("agent")?,
            session: row.get("session")?,
            tool_call_id: row.get("tool_call_id")?,
            context_id: row.get("context_id")?,
            risk,
            terms,
            path: row.get("path")?,
            summary: row.get("summary")?,
            diff: row.get("diff")?,
            plan,
            created_ms: millis(row.get("created_ms")?),
            expires_ms: millis(row.get("expires_ms")?),
            waiter_pid: row
                .get::<_, Option<i64>>("waiter_pid")?
                .and_then(|pid| u32::try_from(pid).ok()),
            owner: row.get("owner")?,
            id,
            tool,
        },
        status,
        decision,
        result,
        owner_pid: row
            .get::<_, Option<i64>>("owner_pid")?
            .and_then(|pid| u32::try_from(pid).ok()),
    }))
}
