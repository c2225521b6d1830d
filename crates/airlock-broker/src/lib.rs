//! airlock-broker: the one pipeline every call goes through (DESIGN §2).
//!
//! `policy -> propose -> decide -> apply -> audit`. A [`Broker`] holds the compiled
//! policy, the sandbox, the store and the audit log of one workspace. Transports
//! build a [`ToolCall`] and call [`Broker::submit`]; humans decide with
//! [`Broker::decide`]; [`Broker::undo`] reverts an applied change. Processes share
//! state through the store, so a decision taken in one process resumes a call
//! waiting in another.
//!
//! Every write, even one the policy allows outright, is recorded as an approval
//! and applied through the same claim -> commit -> finish path, so undo and the
//! one-time-apply guarantee hold for all of them.

mod forward;
mod record;
mod views;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use airlock_audit::{AuditLog, Durability};
use airlock_core::config::{ApprovalMode, Config, ElicitationFallback, LoadedConfig};
use airlock_core::envelope::{DecidedBy, DecisionInfo, Envelope, ErrorReason, HitlInfo, Status};
use airlock_core::policy::{Reason, Risk};
use airlock_core::{
    Decision, Disposition, ErrorCode, Grant, GrantHolder, GrantScope, Policy, ToolCall, policy,
};
use airlock_fs::{ChangePlan, CommitOptions, FsError, ReadParams, Sandbox, UndoFile, WriteParams};
use airlock_store::{
    ApprovalStatus, Created, EditedPlan, Limits, NewApproval, Snapshot, SnapshotFile, Store,
    StoreError, Verdict,
};
use serde_json::{Map, Value, json};

pub use airlock_store::{Approval, GrantRow};
pub use forward::{ForwardCall, Forwarder};
pub use record::Record;
pub use views::{
    AuditCheck, AuditQuery, approval_view, check_audit, grant_view, proposed_content, query_audit,
};

/// The reason stored with a call `elicitation_fallback: allow` let through.
const FALLBACK_ALLOW: &str = "elicitation_fallback: allow";

/// How long a waiting call sleeps between looks at the store.
const POLL: Duration = Duration::from_millis(20);

/// Errors that stop the broker itself (not a tool's error, which is an envelope).
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("audit log: {0}")]
    Audit(#[from] airlock_audit::AuditError),
    #[error("sandbox: {0}")]
    Sandbox(#[from] airlock_fs::FsError),
    #[error("{code}: {message}")]
    Refused { code: ErrorCode, message: String },
    #[error("corrupt approval {id}: {message}")]
    Corrupt { id: String, message: String },
}

impl BrokerError {
    fn refused(code: ErrorCode, message: impl Into<String>) -> BrokerError {
        BrokerError::Refused {
            code,
            message: message.into(),
        }
    }

    /// The envelope error code this failure maps to.
    pub fn code(&self) -> ErrorCode {
        match self {
            BrokerError::Store(StoreError::NotFound(_)) => ErrorCode::NotFound,
            BrokerError::Store(StoreError::AlreadyDecided { .. }) => ErrorCode::AlreadyDecided,
            BrokerError::Store(StoreError::Expired(_)) => ErrorCode::Expired,
            BrokerError::Store(StoreError::RateLimited { .. }) => ErrorCode::RateLimited,
            BrokerError::Refused { code, .. } => *code,
            BrokerError::Sandbox(error) => error.code(),
            BrokerError::Store(_) | BrokerError::Audit(_) | BrokerError::Corrupt { .. } => {
                ErrorCode::IoError
            }
        }
    }
}

/// How a call that needs approval is handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Block until a decision or the timeout (the configured default).
    Wait,
    /// Return `hitl_required` at once.
    Defer,
    /// The person at this terminal approves it now (with a reason where the
    /// risk requires one).
    ApproveNow {
        user: String,
        reason: Option<String>,
    },
    /// An MCP client made the call; how its human can be asked decides the
    /// rest (DESIGN §9). `approval_mode: defer` still defers.
    Client(ClientAsk),
}

/// How the human behind an MCP client can be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAsk {
    /// The client answers `elicitation/create` while the call waits.
    Elicit,
    /// A 2026-07-28 client: the call returns at once with its approval pending,
    /// and the client's answer comes with a retry of the call.
    Rounds,
    /// The client cannot be asked: the `elicitation_fallback` decides.
    Unable,
}

/// What happens to a call the policy makes ask, given the mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handling<'m> {
    Wait,
    Defer,
    /// Pending, like `Defer`, but expiring with the wait timeout: the client
    /// answers on a retry.
    Rounds,
    ApproveNow {
        user: &'m str,
        reason: Option<&'m str>,
    },
    /// `elicitation_fallback: deny`.
    Refuse,
    /// `elicitation_fallback: allow`.
    Allow,
}

/// What an approver channel shows, and what it may offer, for one pending
/// approval.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AskForm {
    pub hitl_id: String,
    pub tool: String,
    pub risk: String,
    pub summary: String,
    pub diff_preview: String,
    /// "Always allow" may be offered.
    pub allow_skip: bool,
    /// A reason is required to approve.
    pub require_reason: bool,
    /// The client's human may decide it (no `approvers` restriction, and
    /// `approval_mode` is not `defer`).
    pub client_may_decide: bool,
    pub expires_ms: u64,
}

/// A human's decision on a pending approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecideRequest {
    pub approve: bool,
    pub reason: Option<String>,
    /// "Always allow": only where the risk policy allows skipping.
    pub always: Option<AlwaysAllow>,
    pub user: String,
    /// `terminal`, `http`, `mcp`, `link`…
    pub channel: String,
    /// The approver's edited version of a one-file write, applied instead of
    /// the proposal (audited as edited; the agent's result says so).
    pub content: Option<Vec<u8>>,
}

/// The scope and lifetime of an "always allow".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlwaysAllow {
    /// Only the approval's session, or every session.
    pub persistent: bool,
    /// Lifetime; `None`: `approvals.grant_ttl`.
    pub for_ms: Option<u64>,
}

/// Where the broker lives.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Canonical sandbox root.
    pub root: PathBuf,
    /// The configuration, validated, its policy bound to `root`.
    pub loaded: LoadedConfig,
}

/// The pipeline of one workspace.
pub struct Broker {
    config: Config,
    policy: Arc<Policy>,
    sandbox: Sandbox,
    store: Arc<Store>,
    audit: AuditLog,
    root: PathBuf,
    /// Where multi-file applies keep their journal and the apply lock.
    journal_dir: PathBuf,
    /// Carries approved upstream calls out (only in a process holding the
    /// upstream connections).
    forwarder: Option<Arc<dyn Forwarder>>,
}

/// The longest an always-allow with an expiry may last (10 years).
const MAX_GRANT_MS: u64 = 10 * 365 * 24 * 60 * 60 * 1000;

/// What an always-allow grants: the session it is limited to (`None`: every
/// session) and how long it lasts (`None`: no expiry).
#[derive(Debug, Clone, PartialEq, Eq)]
struct NewGrant {
    session: Option<String>,
    for_ms: Option<u64>,
}

/// The grant `always` asks for on `approval`, or why it is refused: only with
/// an approval, where the risk allows skipping, for at most
/// [`MAX_GRANT_MS`], and session-scoped only for a call made in a session.
fn grant_scope(
    approval: &Approval,
    always: AlwaysAllow,
    approve: bool,
    allow_skip: bool,
) -> Result<NewGrant, BrokerError> {
    let refuse = |message: String| Err(BrokerError::refused(ErrorCode::InvalidInput, message));
    if !allow_skip {
        return refuse(format!(
            "always-allow is not permitted for {} risk",
            approval.risk
        ));
    }
    if always.for_ms.is_some_and(|for_ms| for_ms > MAX_GRANT_MS) {
        return refuse(
            "an always-allow lasts at most 10 years (leave the duration out for approvals.grant_ttl)"
                .to_owned(),
        );
    }
    let session = match (always.persistent, &approval.session) {
        (true, _) => None,
        (false, Some(session)) => Some(session.clone()),
        (false, None) => {
            return refuse(
                "a session grant needs a call made in a session; use --scope persistent".to_owned(),
            );
        }
    };
    if !approve {
        return refuse("always-allow applies to approvals".to_owned());
    }
    Ok(NewGrant {
        session,
        for_ms: always.for_ms,
    })
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

struct HeadInStore(Arc<Store>);

impl airlock_audit::HeadStore for HeadInStore {
    fn load_head(&self) -> Result<Option<airlock_audit::Head>, String> {
        self.0
            .audit_head()
            .map(|head| head.map(|(seq, event_hash)| airlock_audit::Head { seq, event_hash }))
            .map_err(|error| error.to_string())
    }

    fn save_head(&self, head: &airlock_audit::Head) -> Result<(), String> {
        self.0
            .save_audit_head(head.seq, &head.event_hash)
            .map_err(|error| error.to_string())
    }
}

impl Broker {
    /// Opens the workspace's state: the store, the audit log (recovering a torn
    /// tail), and finishes applies a crash interrupted.
    pub fn open(workspace: Workspace) -> Result<Broker, BrokerError> {
        let config = workspace.loaded.config.clone();
        let policy = Arc::new(workspace.loaded.policy);
        let root = workspace.root;
        let state_dir = root.join(&config.workspace.state_dir);
        std::fs::create_dir_all(&state_dir).map_err(|error| {
            BrokerError::refused(
                ErrorCode::IoError,
                format!("cannot create {}: {error}", state_dir.display()),
            )
        })?;
        let store = Arc::new(Store::open(&state_dir.join("airlock.db"))?);
        let key = config
            .audit
            .hmac_key_env
            .as_deref()
            .and_then(|name| std::env::var(name).ok())
            .filter(|key| !key.is_empty())
            .map(String::into_bytes);
        let audit_path = root.join(&config.audit.path);
        let (audit, recovery) =
            AuditLog::open(&audit_path, key, Some(Arc::new(HeadInStore(store.clone()))))?;
        let sandbox = Sandbox::open(&root, &config.file_broker, policy.clone())?
            .with_blob_dir(state_dir.join("blobs"));
        let journal_dir = state_dir.join("journal");
        let broker = Broker {
            config,
            policy,
            sandbox,
            store,
            audit,
            root,
            journal_dir,
            forwarder: None,
        };
        // What the log's recovery found is recorded in the log itself.
        for record in recovery.records() {
            broker.audit.append(record)?;
        }
        broker.note_config()?;
        broker.recover_applies()?;
        // Grants made before grants ended by default end grant_ttl after they
        // were made.
        if let Some(ttl) = broker.config.approvals.grant_ttl_ms() {
            broker.store.end_open_grants(ttl)?;
        }
        Ok(broker)
    }

    /// Lets this broker carry out upstream tool calls through `forwarder`.
    pub fn with_forwarder(mut self, forwarder: Arc<dyn Forwarder>) -> Broker {
        self.forwarder = Some(forwarder);
        self
    }

    /// Records that a new configuration was refused and the one in force stays.
    pub fn note_config_rejected(&self, source: &str, message: &str) -> Result<(), BrokerError> {
        let logged = self.log(
            Record::new("config_rejected")
                .text("path", source)
                .text("reason", message)
                .text("status", "error"),
        );
        logged.map(|_| ()).ok_or_else(|| {
            BrokerError::refused(ErrorCode::IoError, "the audit log could not be written")
        })
    }

    /// The content of a stored blob (`sha256:<hex>`), for the MCP resource
    /// `airlock://blob/sha256/<hex>`; audited as `resource_read`.
    pub fn read_blob(
        &self,
        blob_ref: &str,
        session: Option<&str>,
        agent: Option<&str>,
    ) -> Result<Vec<u8>, BrokerError> {
        let result = match self.sandbox.blob_dir() {
            Some(dir) => airlock_fs::read_blob(dir, blob_ref).map_err(BrokerError::from),
            None => Err(BrokerError::refused(ErrorCode::NotFound, "no blob store")),
        };
        let record = Record::new("resource_read")
            .text("blob_ref", blob_ref)
            .value("session", session.map(|s| Value::String(s.to_owned())))
            .value("agent", agent.map(|a| Value::String(a.to_owned())));
        let record = match &result {
            Ok(bytes) => record
                .text("status", "allowed")
                .number("size_bytes", bytes.len() as u64),
            Err(error) => record
                .text("status", "error")
                .text("code", error.code().as_str()),
        };
        if self.log_with(record, Durability::Soon).is_none() {
            return Err(BrokerError::refused(
                ErrorCode::IoError,
                "the audit log could not be written",
            ));
        }
        result
    }

    /// A 32-byte secret kept in the state dir under `name` (created on first
    /// use, readable only by its owner): keys for sealing what airlock hands out.
    pub fn state_secret(&self, name: &str) -> Result<Vec<u8>, BrokerError> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let path = self.root.join(&self.config.workspace.state_dir).join(name);
        let io = |error: std::io::Error| {
            BrokerError::refused(ErrorCode::IoError, format!("{}: {error}", path.display()))
        };
        match std::fs::read(&path) {
            Ok(key) if key.len() >= 32 => return Ok(key),
            Ok(_) => {
                return Err(BrokerError::refused(
                    ErrorCode::IoError,
                    format!("{} is shorter than 32 bytes", path.display()),
                ));
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(io(error)),
        }
        let mut key = Vec::with_capacity(32);
        key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        let temp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(io)?;
        file.write_all(&key)
            .and_then(|()| file.sync_all())
            .map_err(io)?;
        // Two processes may race: the first link wins, and both use its key.
        match std::fs::hard_link(&temp, &path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(error) => {
                let _ = std::fs::remove_file(&temp);
                return Err(io(error));
            }
        }
        let _ = std::fs::remove_file(&temp);
        std::fs::read(&path).map_err(io)
    }

    /// Spends a one-time token (a sealed `requestState`'s nonce): `Ok(true)` the
    /// first time only, across processes.
    pub fn spend_token(&self, token: &str, expires_ms: u64) -> Result<bool, BrokerError> {
        Ok(self.store.spend_token(token, expires_ms, now_ms())?)
    }

    /// The workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The compiled policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The audit log's path.
    pub fn audit_path(&self) -> PathBuf {
        self.root.join(&self.config.audit.path)
    }

    /// The audit chain head as the store last saw it.
    pub fn stored_audit_head(&self) -> Result<Option<airlock_audit::Head>, BrokerError> {
        Ok(self
            .store
            .audit_head()?
            .map(|(seq, event_hash)| airlock_audit::Head { seq, event_hash }))
    }

    /// Appends an audit record; a failure to audit is reported on stderr-free
    /// terms by returning `None` (callers turn that into an error envelope).
    fn log(&self, record: Record) -> Option<airlock_core::envelope::AuditRef> {
        self.log_with(record, Durability::Now)
    }

    /// Records of calls that needed no decision (reads, denials, upstream
    /// calls the policy allows) are written before the answer and synced
    /// within `SYNC_WITHIN`; records a change waits on (proposals,
    /// decisions, applies) are synced before it goes ahead.
    fn log_with(
        &self,
        record: Record,
        durability: Durability,
    ) -> Option<airlock_core::envelope::AuditRef> {
        match self.audit.append_with(record.into_map(), durability) {
            Ok(appended) => Some(airlock_core::envelope::AuditRef {
                prev_hash: appended.prev_hash,
                event_hash: appended.event_hash,
            }),
            Err(_) => None,
        }
    }

    /// Audits `record` and stamps the envelope with it. If the audit log cannot
    /// be written, the result is an error: nothing goes unaudited.
    fn audited(&self, envelope: Envelope, record: Record) -> Envelope {
        self.audited_with(envelope, record, Durability::Now)
    }

    /// [`Broker::audited`] for a call that needed no decision (a read, a
    /// denial, an upstream call the policy allows): nothing waits on its
    /// record, which is written before the answer and synced soon after (see
    /// [`Broker::log_with`]).
    pub(crate) fn observed(&self, envelope: Envelope, record: Record) -> Envelope {
        self.audited_with(envelope, record, Durability::Soon)
    }

    fn audited_with(
        &self,
        mut envelope: Envelope,
        record: Record,
        durability: Durability,
    ) -> Envelope {
        match self.log_with(record, durability) {
            Some(audit) => {
                envelope.audit = Some(audit);
                envelope
            }
            None => audit_unwritable(
                &envelope.op.method,
                &envelope.op.tool,
                envelope.op.path.as_deref(),
            ),
        }
    }

    /// Syncs audit records of reads and denials still waiting for their
    /// background sync; call it before the process exits.
    pub fn flush_audit(&self) {
        self.audit.flush();
    }

    /// Records `config_loaded` when the configuration differs from the last one
    /// this workspace ran with.
    fn note_config(&self) -> Result<(), BrokerError> {
        let text = serde_json::to_string(&self.config).unwrap_or_default();
        let hash = airlock_core::canonical::sha256_hex(text.as_bytes());
        if self.store.get_kv("config_hash")?.as_deref() != Some(hash.as_str()) {
            self.log(Record::new("config_loaded").text("config_hash", &hash));
            self.store.set_kv("config_hash", &hash)?;
        }
        Ok(())
    }

    /// Rolls forward approvals a crash left half way: approved but never
    /// claimed, or claimed but never finished, by a process that no longer runs.
    fn recover_applies(&self) -> Result<(), BrokerError> {
        // Multi-file applies (and undos) interrupted after their commit point
        // are finished first: then the files say whether an apply happened.
        self.recover_journals()?;
        for (orphan, owner) in self.store.orphaned(&process_alive)? {
            if forward::is_forward(&orphan) && orphan.waiter_pid.is_some_and(process_alive) {
                // Its holder is alive and will carry it out.
                continue;
            }
            let Some(approval) = self.store.take_over(&orphan.id, owner)? else {
                continue;
            };
            let decision = DecisionInfo {
                by: decided_by(approval.decided_by.as_deref()),
                user: approval.decided_user.clone(),
                channel: approval.channel.clone(),
                reason: approval.reason.clone(),
            };
            match approval.status {
                ApprovalStatus::Approved => {
                    self.settle(&approval.id);
                }
                ApprovalStatus::Applying => {
                    self.commit_claimed(&approval, decision, true);
                }
                ApprovalStatus::Pending
                | ApprovalStatus::Applied
                | ApprovalStatus::Failed
                | ApprovalStatus::Denied
                | ApprovalStatus::Expired
                | ApprovalStatus::Cancelled => {}
            }
        }
        Ok(())
    }

    /// Finishes journaled commits that were interrupted, and audits each.
    fn recover_journals(&self) -> Result<(), BrokerError> {
        for recovered in airlock_fs::recover(&self.sandbox, &self.journal_dir)? {
            let label = recovered.label.clone().unwrap_or_default();
            let (id, kind) = label.rsplit_once(':').unwrap_or((label.as_str(), ""));
            if kind == "undo" {
                self.store.mark_undone(id)?;
            }
            let logged = self.log(
                Record::new("journal_recovered")
                    .value(
                        "hitl_id",
                        (!id.is_empty()).then(|| Value::String(id.to_owned())),
                    )
                    .text("kind", kind)
                    .value("skipped", Some(json!(recovered.skipped)))
                    .text(
                        "status",
                        if recovered.skipped.is_empty() {
                            "allowed"
                        } else {
                            "error"
                        },
                    ),
            );
            if logged.is_none() {
                return Err(BrokerError::refused(
                    ErrorCode::IoError,
                    "a recovered apply could not be recorded in the audit log",
                ));
            }
        }
        Ok(())
    }

    /// Runs one call through the pipeline and returns its envelope.
    pub fn submit(&self, call: &ToolCall, mode: &Mode, on_pending: &dyn Fn(&Approval)) -> Envelope {
        let now = now_ms();
        let grants = self.live_grants(now);
        // Decided on the paths as written and as the file system resolves
        // them; the strictest wins (a patch's files are resolved when it is
        // planned, in `write`).
        let resolved = self.resolved_paths(call);
        let decision = policy::evaluate_resolved(&self.policy, call, &grants, &resolved);
        let base = Record::for_call(call, &decision);

        if decision.disposition == Disposition::Deny {
            return self.denied_by_policy(call, &decision, base);
        }

        use airlock_core::ToolOrigin;
        use airlock_core::tools::BuiltinTool;
        match &call.origin {
            ToolOrigin::Builtin(BuiltinTool::ReadFile) => self.read(call, &decision, base),
            ToolOrigin::Builtin(
                BuiltinTool::Grep
                | BuiltinTool::Glob
                | BuiltinTool::ListDir
                | BuiltinTool::Stat
                | BuiltinTool::Exists,
            ) => self.look(call, &decision, base),
            ToolOrigin::Builtin(BuiltinTool::ProposalStatus) => {
                self.read_only(call, &decision, base, "tool_call", || {
                    self.proposal_status(call)
                })
            }
            ToolOrigin::Builtin(
                BuiltinTool::WriteFile
                | BuiltinTool::EditFile
                | BuiltinTool::ApplyPatch
                | BuiltinTool::DeleteFile
                | BuiltinTool::MoveFile,
            ) => self.write(call, &decision, mode, on_pending, base, now),
            ToolOrigin::Upstream { .. } => {
                self.upstream_call(call, &decision, mode, on_pending, base, now)
            }
            ToolOrigin::Unknown => {
                let other = call.tool.as_str();
                let envelope = Envelope::failure(
                    Status::Error,
                    method_of(other),
                    other,
                    call.args.get("path").and_then(Value::as_str),
                    ErrorCode::UnknownTool,
                    format!("no tool named {other} is available"),
                );
                self.observed(
                    envelope,
                    base.event("tool_call")
                        .text("status", "error")
                        .text("code", ErrorCode::UnknownTool.as_str()),
                )
            }
        }
    }

    /// The denied envelope of a call the policy refuses, audited.
    fn denied_by_policy(&self, call: &ToolCall, decision: &Decision, base: Record) -> Envelope {
        let path = call.args.get("path").and_then(Value::as_str);
        let message = first_denial(decision);
        let code = decision.deny_code.unwrap_or(ErrorCode::PolicyDenied);
        let mut envelope = Envelope::failure(
            Status::Denied,
            method_of(&call.tool),
            &call.tool,
            path,
            code,
            message,
        )
        .with_reason(decision.deny_reason());
        envelope.decision = Some(DecisionInfo {
            by: DecidedBy::Policy,
            user: None,
            channel: None,
            reason: None,
        });
        let event = if call.tool == "read_file" {
            "read_file"
        } else {
            "tool_call"
        };
        self.observed(
            envelope,
            base.event(event)
                .text("decision", "deny")
                .text("decided_by", "policy")
                .text("status", "denied")
                .text("code", code.as_str()),
        )
    }

    /// Where the call's path arguments really lead, for each that leads
    /// elsewhere than it says: a built-in tool's as its sandbox resolves
    /// them, another server's as far as they exist (relative ones from the
    /// root). Nothing is opened.
    fn resolved_paths(&self, call: &ToolCall) -> policy::ResolvedPaths {
        let mut resolved = policy::ResolvedPaths::default();
        let builtin = matches!(call.origin, airlock_core::ToolOrigin::Builtin(_));
        for argument in policy::path_args::path_arguments(call) {
            let (real, written) = if builtin {
                (
                    self.sandbox.resolved_for_policy(&argument.path),
                    policy::normalize_relative(&argument.path),
                )
            } else {
                (self.sandbox.resolved_foreign(&argument.path), None)
            };
            if let Some(real) = real
                && Some(&real) != written.as_ref()
            {
                resolved.arguments.push((argument.pointer, real));
            }
        }
        resolved
    }

    fn live_grants(&self, now: u64) -> Vec<Grant> {
        self.store
            .grants(now)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|row| {
                let scope = match row.session {
                    Some(session) => GrantScope::Session(session),
                    None => GrantScope::Persistent,
                };
                Grant::new(
                    row.id,
                    row.tool,
                    row.path_glob.as_deref(),
                    scope,
                    row.expires_ms,
                    GrantHolder {
                        user: row.user,
                        owner: row.owner,
                    },
                )
                .ok()
            })
            .collect()
    }

    fn read(&self, call: &ToolCall, decision: &Decision, base: Record) -> Envelope {
        self.read_only(call, decision, base, "read_file", || {
            let params = ReadParams::from_args(&call.args)?;
            let data = airlock_fs::read_file(&self.sandbox, &params)?;
            Ok(serde_json::to_value(&data).unwrap_or(Value::Null))
        })
    }

    /// grep, glob, list_dir, stat, exists.
    fn look(&self, call: &ToolCall, decision: &Decision, base: Record) -> Envelope {
        self.read_only(call, decision, base, "tool_call", || {
            let sandbox = &self.sandbox;
            let args = &call.args;
            let data = match call.tool.as_str() {
                "grep" => to_value(airlock_fs::grep(
                    sandbox,
                    &airlock_fs::GrepParams::from_args(args)?,
                )?),
                "glob" => to_value(airlock_fs::glob(
                    sandbox,
                    &airlock_fs::GlobParams::from_args(args)?,
                )?),
                "list_dir" => to_value(airlock_fs::list_dir(
                    sandbox,
                    &airlock_fs::ListDirParams::from_args(args)?,
                )?),
                "stat" => to_value(airlock_fs::stat(
                    sandbox,
                    &airlock_fs::StatParams::from_args(args)?,
                )?),
                _ => to_value(airlock_fs::exists(
                    sandbox,
                    &airlock_fs::StatParams::from_args(args)?,
                )?),
            };
            Ok(data)
        })
    }

    /// A read-only tool: allowed (or by a grant) runs it at once; one that a
    /// profile or rule makes ask is refused, never let through: there is
    /// nothing to apply later, so reads cannot be proposed.
    fn read_only(
        &self,
        call: &ToolCall,
        decision: &Decision,
        base: Record,
        event: &str,
        run: impl FnOnce() -> Result<Value, FsError>,
    ) -> Envelope {
        let path = call_path(call);
        let method = method_of(&call.tool);
        let record = base.event(event);
        if decision.disposition == Disposition::Ask {
            let envelope = Envelope::failure(
                Status::Denied,
                method,
                &call.tool,
                path,
                ErrorCode::PolicyDenied,
                "this read needs approval, and reads cannot be proposed",
            )
            .with_reason(Some(reason_of(
                "hitl",
                "reads_cannot_be_proposed",
                decision,
            )));
            return self.observed(
                envelope,
                record.text("decision", "deny").text("status", "denied"),
            );
        }
        match run() {
            Ok(data) => {
                let mut record = record
                    .text("decision", "allow")
                    .text("decided_by", decided_by_policy_or_grant(decision))
                    .text("status", "allowed");
                for key in ["base_hash", "returned_range", "match_count", "count"] {
                    record = record.value(key, data.get(key).cloned());
                }
                if let Some(blob) = data.get("blob").and_then(|blob| blob.get("blob_ref")) {
                    record = record.value("blob_ref", Some(blob.clone()));
                }
                let mut envelope = Envelope::new(Status::Allowed, method, &call.tool, path);
                envelope.data = Some(data);
                self.observed(envelope, record)
            }
            Err(error) => {
                let message = error.to_string();
                let envelope = Envelope::failure(
                    failure_status(error.code()),
                    method,
                    &call.tool,
                    path,
                    error.code(),
                    &message,
                )
                .with_reason(ErrorReason::of_tool_refusal(
                    error.code(),
                    &message,
                    Some(decision.risk),
                ));
                self.observed(
                    envelope,
                    record
                        .text("status", "error")
                        .text("code", error.code().as_str()),
                )
            }
        }
    }

    /// `proposal_status {hitl_id}`: where an approval stands, and its final
    /// envelope once settled. A principal sees only the approvals it made
    /// (an admin's credential sees all), and a call made in a session only
    /// that session's; the rest are `not_found`, like unknown ids.
    fn proposal_status(&self, call: &ToolCall) -> Result<Value, FsError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Params {
            hitl_id: String,
        }
        let params: Params =
            serde::Deserialize::deserialize(&call.args).map_err(|error: serde_json::Error| {
                FsError::InvalidInput {
                    message: error.to_string(),
                }
            })?;
        let not_found = || FsError::NotFound {
            path: params.hitl_id.clone(),
        };
        let approval = match self.store.get(&params.hitl_id) {
            Ok(approval) => approval,
            Err(StoreError::NotFound(_)) => return Err(not_found()),
            Err(error) => {
                return Err(FsError::Io {
                    context: "cannot read the approval".to_owned(),
                    error: std::io::Error::other(error.to_string()),
                });
            }
        };
        let visible = call.principal.admin
            || (call.principal.owns(approval.owner.as_deref())
                && (call.session.is_none() || approval.session == call.session));
        if !visible {
            return Err(not_found());
        }
        if approval.status == ApprovalStatus::Pending && now_ms() >= approval.expires_ms {
            // Past its time: it can only expire now.
            self.expire(&approval.id);
        }
        let now = self.store.get(&approval.id).unwrap_or(approval);
        Ok(json!({
            "hitl_id": now.id,
            "status": now.status.as_str(),
            "tool": now.tool,
            "path": now.path,
            "summary": now.summary,
            "risk": now.risk,
            "created_ms": now.created_ms,
            "expires_ms": now.expires_ms,
            "decided_by": now.decided_by,
            "result": stored_result(&now),
        }))
    }

    /// The plan of a write-class call, without side effects.
    fn plan(&self, call: &ToolCall) -> Result<Planned, FsError> {
        let sandbox = &self.sandbox;
        let args = &call.args;
        let plan = match call.tool.as_str() {
            "write_file" => ChangePlan::from(airlock_fs::prepare_write(
                sandbox,
                &WriteParams::from_args(args)?,
            )?),
            "edit_file" => {
                airlock_fs::prepare_edit(sandbox, &airlock_fs::EditParams::from_args(args)?)?
            }
            "delete_file" => {
                airlock_fs::prepare_delete(sandbox, &airlock_fs::DeleteParams::from_args(args)?)?
            }
            "move_file" => {
                airlock_fs::prepare_move(sandbox, &airlock_fs::MoveParams::from_args(args)?)?
            }
            "apply_patch" => {
                let params = airlock_fs::PatchParams::from_args(args)?;
                let plan = airlock_fs::prepare_patch(sandbox, &params)?;
                if params.dry_run {
                    return Ok(Planned::DryRun(plan));
                }
                plan
            }
            other => {
                return Err(FsError::InvalidInput {
                    message: format!("{other} is not a write tool"),
                });
            }
        };
        Ok(Planned::Plan(plan))
    }

    /// `apply_patch` with `dry_run`: what would change, nothing written, no
    /// approval needed (the policy's denials still apply).
    fn dry_run(
        &self,
        call: &ToolCall,
        decision: &Decision,
        plan: &ChangePlan,
        base: Record,
    ) -> Envelope {
        let path = plan.primary_path();
        let mut envelope = Envelope::new(Status::Allowed, "fs.propose_patch", &call.tool, path);
        let mut data = json!({
            "dry_run": true,
            "summary": plan.summary,
            "patch_hash": plan.patch_hash,
            "diff": plan.diff_preview(self.config.file_broker.diff_preview_max_chars),
        });
        if let Some(object) = data.as_object_mut() {
            for (key, value) in &plan.report {
                object.insert(key.clone(), value.clone());
            }
        }
        envelope.data = Some(data);
        self.audited(
            envelope,
            base.event("tool_call")
                .text("decision", "allow")
                .text("decided_by", decided_by_policy_or_grant(decision))
                .flag("dry_run", true)
                .value("changed_paths", Some(json!(plan.changed_paths())))
                .text("patch_hash", &plan.patch_hash)
                .text("status", "allowed"),
        )
    }

    fn invalid(
        &self,
        call: &ToolCall,
        path: Option<&str>,
        message: &str,
        base: Record,
    ) -> Envelope {
        let envelope = Envelope::failure(
            Status::Error,
            method_of(&call.tool),
            &call.tool,
            path,
            ErrorCode::InvalidInput,
            format!("invalid arguments: {message}"),
        );
        self.audited(
            envelope,
            base.event("tool_call")
                .text("status", "error")
                .text("code", ErrorCode::InvalidInput.as_str()),
        )
    }

    fn write(
        &self,
        call: &ToolCall,
        decision: &Decision,
        mode: &Mode,
        on_pending: &dyn Fn(&Approval),
        base: Record,
        now: u64,
    ) -> Envelope {
        let planned = self.plan(call);
        // A patch names its files in its text; where they really are (through
        // symlinks) is known once it is planned, and decided on too.
        if let Ok(Planned::Plan(plan) | Planned::DryRun(plan)) = &planned
            && call.tool == "apply_patch"
            && plan
                .changes
                .iter()
                .any(|change| change.resolved_path != change.path)
        {
            let resolved = policy::ResolvedPaths {
                arguments: Vec::new(),
                patch: Some(
                    plan.changes
                        .iter()
                        .map(|change| change.resolved_path.clone())
                        .collect(),
                ),
            };
            let grants = self.live_grants(now);
            let real = policy::evaluate_resolved(&self.policy, call, &grants, &resolved);
            if (real.disposition, real.risk) > (decision.disposition, decision.risk) {
                let base = Record::for_call(call, &real);
                if real.disposition == Disposition::Deny {
                    return self.denied_by_policy(call, &real, base);
                }
                return self.write_planned(call, &real, planned, mode, on_pending, base, now);
            }
        }
        self.write_planned(call, decision, planned, mode, on_pending, base, now)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the steps of one call, split where a patch is decided again"
    )]
    fn write_planned(
        &self,
        call: &ToolCall,
        decision: &Decision,
        planned: Result<Planned, FsError>,
        mode: &Mode,
        on_pending: &dyn Fn(&Approval),
        base: Record,
        now: u64,
    ) -> Envelope {
        let path = call_path(call);
        let handling = self.handling(mode, decision);
        let asks = decision.disposition == Disposition::Ask;
        if asks && handling == Handling::Refuse {
            return self.refused_by_fallback(
                call,
                decision,
                path,
                "fs.propose_patch",
                base.event("write_file_propose"),
            );
        }
        let by_fallback = asks && handling == Handling::Allow;
        let asks = asks && !by_fallback;
        let plan = match planned {
            Ok(Planned::Plan(plan)) => plan,
            Ok(Planned::DryRun(plan)) => return self.dry_run(call, decision, &plan, base),
            Err(FsError::InvalidInput { message }) => {
                return self.invalid(call, path, &message, base);
            }
            Err(error) => {
                return self.propose_failed(
                    &call.tool,
                    decision,
                    base,
                    path,
                    error.code(),
                    &error.to_string(),
                );
            }
        };

        let ttl_seconds = self.ttl_seconds(asks, handling, decision);
        let new = NewApproval {
            id: format!("hitl-{}", uuid::Uuid::new_v4()),
            tool: call.tool.clone(),
            args_json: call.args.to_string(),
            args_display: airlock_core::redact::redact_params(&call.args).to_string(),
            dedup_key: dedup_key(call),
            user: call.principal.user.clone(),
            agent: call.principal.agent.clone(),
            owner: Some(call.principal.owner_key()),
            session: call.session.clone(),
            tool_call_id: call.tool_call_id.clone(),
            context_id: call.context_id.clone(),
            risk: decision.risk.as_str().to_owned(),
            decision_json: serde_json::to_string(decision).unwrap_or_default(),
            path: plan.primary_path().map(str::to_owned),
            summary: plan.summary.clone(),
            diff: plan.diff.clone(),
            plan_json: serde_json::to_string(&plan).unwrap_or_default(),
            created_ms: now,
            expires_ms: now.saturating_add(ttl_seconds.saturating_mul(1000)),
            waiter_pid: (asks && handling == Handling::Wait).then(std::process::id),
        };
        // Writes the policy allows are recorded too (so they can be undone), but
        // never count against the pending limits.
        let limits = if asks {
            Limits {
                max_pending: self.config.security.hitl.max_pending,
                max_pending_per_session: self.config.security.hitl.max_pending_per_session,
            }
        } else {
            Limits {
                max_pending: u64::MAX,
                max_pending_per_session: u64::MAX,
            }
        };
        let (approval, proposed) = match self.store.create_approval(&new, limits) {
            Ok(created) => {
                let (approval, deduplicated) = match created {
                    Created::New(approval) => (approval, false),
                    Created::Existing(approval) => (approval, true),
                };
                // A duplicate shows the plan that was stored, not a new one.
                let plan = match serde_json::from_str::<ChangePlan>(&approval.plan_json) {
                    Ok(plan) => plan,
                    Err(error) => {
                        return self.error_envelope(
                            call,
                            path,
                            &BrokerError::Corrupt {
                                id: approval.id.clone(),
                                message: error.to_string(),
                            },
                        );
                    }
                };
                let mut record = base
                    .event("write_file_propose")
                    .text("hitl_id", &approval.id)
                    .text("status", if asks { "hitl_required" } else { "allowed" })
                    .flag("created", plan.creates_only())
                    .value("base_hash", single_base_hash(&plan).map(Value::String))
                    .value("changed_paths", Some(json!(plan.changed_paths())))
                    .text("patch_hash", &plan.patch_hash);
                if deduplicated {
                    record = record.flag("deduplicated", true);
                }
                let Some(audit) = self.log(record) else {
                    return audit_unwritable("fs.propose_patch", &call.tool, path);
                };
                (approval, (plan, audit))
            }
            Err(error) => {
                let error = BrokerError::from(error);
                return self.propose_failed(
                    &call.tool,
                    decision,
                    base,
                    path,
                    error.code(),
                    &error.to_string(),
                );
            }
        };
        let (plan, propose_audit) = proposed;

        if !asks {
            // Allowed by policy, a grant, or a disabled gate: decide and apply now.
            let (by, grant) =
                match decision
                    .justification
                    .iter()
                    .find_map(|step| match &step.reason {
                        Reason::Grant { id } => Some(id.to_string()),
                        _ => None,
                    }) {
                    Some(grant) => ("grant", Some(grant)),
                    None => ("policy", None),
                };
            if let Some(grant) = &grant {
                let used = self.log(
                    Record::for_call(call, decision)
                        .event("grant_used")
                        .text("grant_id", grant)
                        .text("hitl_id", &approval.id),
                );
                if used.is_none() {
                    self.cancel(&approval.id);
                    return audit_unwritable("fs.propose_patch", &call.tool, path);
                }
            }
            let verdict = Verdict {
                approve: true,
                by: by.to_owned(),
                user: None,
                channel: None,
                reason: by_fallback.then(|| FALLBACK_ALLOW.to_owned()),
                at_ms: now_ms(),
                edited: None,
            };
            if let Err(error) = self.store.decide(&approval.id, &verdict) {
                return self.store_failure(call, path, error);
            }
            return self.settle(&approval.id);
        }

        match handling {
            Handling::Defer | Handling::Rounds | Handling::Refuse | Handling::Allow => {
                let mut envelope = self.hitl_required(&approval, &plan, decision);
                envelope.audit = Some(propose_audit);
                envelope
            }
            Handling::ApproveNow { user, reason } => {
                self.approve_now(call, path, "fs.propose_patch", &approval, user, reason)
            }
            Handling::Wait => {
                on_pending(&approval);
                self.wait(&approval.id)
            }
        }
    }

    /// `--yes`: the person at this terminal approves the new approval now. If
    /// they cannot (a reason is required, say), nothing is left pending and the
    /// failure is on record.
    fn approve_now(
        &self,
        call: &ToolCall,
        path: Option<&str>,
        method: &str,
        approval: &Approval,
        user: &str,
        reason: Option<&str>,
    ) -> Envelope {
        let request = DecideRequest {
            approve: true,
            reason: reason.map(str::to_owned),
            always: None,
            user: user.to_owned(),
            channel: "terminal".to_owned(),
            content: None,
        };
        match self.decide(&approval.id, &request) {
            Ok(envelope) => envelope,
            Err(error) => {
                self.cancel(&approval.id);
                let envelope = Envelope::failure(
                    Status::Error,
                    method,
                    &call.tool,
                    path,
                    error.code(),
                    error.to_string(),
                );
                self.audited(
                    envelope,
                    Record::for_approval(approval)
                        .event("tool_call")
                        .text("status", "error")
                        .text("code", error.code().as_str()),
                )
            }
        }
    }

    /// How a call the policy makes ask is handled in `mode`.
    fn handling<'m>(&self, mode: &'m Mode, decision: &Decision) -> Handling<'m> {
        match mode {
            Mode::Wait => Handling::Wait,
            Mode::Defer => Handling::Defer,
            Mode::ApproveNow { user, reason } => Handling::ApproveNow {
                user,
                reason: reason.as_deref(),
            },
            Mode::Client(ask) => {
                if self.config.security.hitl.approval_mode == ApprovalMode::Defer {
                    return Handling::Defer;
                }
                // Where only named approvers may decide, the client's human
                // is not asked: the fallback decides, as for any client that
                // cannot be asked.
                let ask = if decision.approvers.is_empty() {
                    *ask
                } else {
                    ClientAsk::Unable
                };
                match ask {
                    ClientAsk::Elicit => Handling::Wait,
                    ClientAsk::Rounds => Handling::Rounds,
                    ClientAsk::Unable => match decision.elicitation_fallback {
                        ElicitationFallback::Deny => Handling::Refuse,
                        ElicitationFallback::Allow => Handling::Allow,
                        ElicitationFallback::Defer => Handling::Defer,
                        ElicitationFallback::Wait => Handling::Wait,
                    },
                }
            }
        }
    }

    /// How long an approval lives: the wait timeout while someone waits (or a
    /// client will answer on a retry), the proposal TTL otherwise.
    fn ttl_seconds(&self, asks: bool, handling: Handling<'_>, decision: &Decision) -> u64 {
        match (asks, handling) {
            (true, Handling::Wait | Handling::Rounds) => decision.timeout_seconds,
            _ => self.config.file_broker.hitl_ttl_seconds,
        }
    }

    /// A call that needs a human, from a client that cannot be asked, under
    /// `elicitation_fallback: deny` (spec 004): denied, nothing proposed.
    fn refused_by_fallback(
        &self,
        call: &ToolCall,
        decision: &Decision,
        path: Option<&str>,
        method: &str,
        record: Record,
    ) -> Envelope {
        let mut envelope = Envelope::failure(
            Status::Denied,
            method,
            &call.tool,
            path,
            ErrorCode::PolicyDenied,
            "this call needs a human's approval and this client cannot ask one \
             (elicitation_fallback: deny)",
        )
        .with_reason(Some(reason_of(
            "hitl",
            "elicitation_fallback: deny",
            decision,
        )));
        envelope.decision = Some(DecisionInfo {
            by: DecidedBy::Policy,
            user: None,
            channel: None,
            reason: Some("elicitation_fallback: deny".to_owned()),
        });
        self.audited(
            envelope,
            record
                .text("decision", "deny")
                .text("decided_by", "policy")
                .text("reason", "elicitation_fallback: deny")
                .text("status", "denied")
                .text("code", ErrorCode::PolicyDenied.as_str()),
        )
    }

    /// What a channel asking a human about `id` shows and may offer.
    pub fn ask_form(&self, id: &str) -> Result<AskForm, BrokerError> {
        let approval = self.store.get(id)?;
        let decision: Value = serde_json::from_str(&approval.decision_json).unwrap_or(Value::Null);
        let flag = |key: &str| decision.get(key).and_then(Value::as_bool).unwrap_or(false);
        let restricted = decision
            .get("approvers")
            .and_then(Value::as_array)
            .is_none_or(|approvers| !approvers.is_empty());
        let max = self.config.file_broker.diff_preview_max_chars;
        Ok(AskForm {
            hitl_id: approval.id.clone(),
            tool: approval.tool.clone(),
            risk: approval.risk.clone(),
            summary: approval.summary.clone(),
            diff_preview: airlock_fs::preview(&approval.diff, max),
            allow_skip: flag("allow_skip"),
            require_reason: flag("require_reason"),
            client_may_decide: !restricted
                && self.config.security.hitl.approval_mode != ApprovalMode::Defer,
            expires_ms: approval.expires_ms,
        })
    }

    /// A write that could not be proposed: denied for sandbox refusals, an error
    /// otherwise; audited as a failed `write_file_propose`.
    fn propose_failed(
        &self,
        tool: &str,
        decision: &Decision,
        base: Record,
        path: Option<&str>,
        code: ErrorCode,
        message: &str,
    ) -> Envelope {
        let envelope = Envelope::failure(
            failure_status(code),
            "fs.propose_patch",
            tool,
            path,
            code,
            message,
        )
        .with_reason(ErrorReason::of_tool_refusal(
            code,
            message,
            Some(decision.risk),
        ));
        self.audited(
            envelope,
            base.event("write_file_propose")
                .text("status", "error")
                .text("code", code.as_str()),
        )
    }

    fn store_failure(&self, call: &ToolCall, path: Option<&str>, error: StoreError) -> Envelope {
        self.error_envelope(call, path, &BrokerError::from(error))
    }

    fn error_envelope(&self, call: &ToolCall, path: Option<&str>, error: &BrokerError) -> Envelope {
        Envelope::failure(
            Status::Error,
            method_of(&call.tool),
            &call.tool,
            path,
            error.code(),
            error.to_string(),
        )
    }

    fn hitl_required(
        &self,
        approval: &Approval,
        plan: &ChangePlan,
        decision: &Decision,
    ) -> Envelope {
        let mut envelope = Envelope::new(
            Status::HitlRequired,
            "fs.propose_patch",
            &approval.tool,
            approval.path.as_deref(),
        );
        let ttl = approval.expires_ms.saturating_sub(now_ms()).div_ceil(1000);
        envelope.hitl = Some(HitlInfo {
            hitl_id: approval.id.clone(),
            ttl_seconds: Some(ttl),
            risk: Some(decision.risk),
            summary: Some(plan.summary.clone()),
            diff_preview: Some(plan.diff_preview(self.config.file_broker.diff_preview_max_chars)),
        });
        envelope.data = Some(json!({
            "path": plan.primary_path(),
            "changed_paths": plan.changed_paths(),
            "created": plan.creates_only(),
            "base_hash": single_base_hash(plan),
            "patch_hash": plan.patch_hash,
            "patch_format": "unified_diff",
        }));
        envelope
    }

    /// Blocks until the approval is settled or its time is up (then it expires,
    /// which denies: a timeout never approves). It never waits for a process that
    /// is gone: a settled approval without a stored result is answered from its
    /// row, and an apply whose owner died is recovered here.
    pub fn wait(&self, id: &str) -> Envelope {
        let mut last_recovery = std::time::Instant::now();
        loop {
            let approval = match self.store.get(id) {
                Ok(approval) => approval,
                Err(error) => return failure_for(id, &BrokerError::from(error)),
            };
            match approval.status {
                ApprovalStatus::Pending => {
                    if now_ms() >= approval.expires_ms {
                        if let Some(envelope) = self.expire(id) {
                            return envelope;
                        }
                        continue;
                    }
                }
                ApprovalStatus::Approved if self.can_apply(&approval) => return self.settle(id),
                ApprovalStatus::Approved => {
                    // Only the process holding the upstream connection can carry
                    // this out; if it is gone, nobody can.
                    if !approval.waiter_pid.is_some_and(process_alive)
                        && let Some(envelope) = self.abandon_forward(&approval)
                    {
                        return envelope;
                    }
                }
                ApprovalStatus::Applying => {
                    if last_recovery.elapsed() >= Duration::from_secs(1) {
                        last_recovery = std::time::Instant::now();
                        if let Err(error) = self.recover_applies() {
                            return failure_for(id, &error);
                        }
                    }
                }
                ApprovalStatus::Applied
                | ApprovalStatus::Failed
                | ApprovalStatus::Denied
                | ApprovalStatus::Expired
                | ApprovalStatus::Cancelled => {
                    return stored_result(&approval).unwrap_or_else(|| settled_from_row(&approval));
                }
            }
            std::thread::sleep(POLL);
        }
    }

    /// Expires a pending approval whose time is up. `None` when someone decided
    /// it first.
    pub fn expire(&self, id: &str) -> Option<Envelope> {
        let approval = self.store.expire(id, now_ms()).ok().flatten()?;
        let mut envelope = Envelope::failure(
            Status::Denied,
            "fs.propose_patch",
            &approval.tool,
            approval.path.as_deref(),
            ErrorCode::Expired,
            "no decision before the timeout: denied",
        )
        .with_reason(Some(ErrorReason::new(
            "timeout",
            "timeout",
            approval_risk(&approval),
        )));
        envelope.hitl = Some(hitl_ref(&approval));
        envelope.decision = Some(DecisionInfo {
            by: DecidedBy::Timeout,
            user: None,
            channel: None,
            reason: None,
        });
        let envelope = self.audited(
            envelope,
            Record::for_approval(&approval)
                .event("hitl_timeout")
                .text("decision", "timeout")
                .text("decided_by", "timeout")
                .number("duration_ms", now_ms().saturating_sub(approval.created_ms))
                .text("status", "denied"),
        );
        let _ = self
            .store
            .finish(id, ApprovalStatus::Expired, &to_json(&envelope));
        Some(envelope)
    }

    /// Cancels a pending approval whose waiting call went away (wait mode).
    /// `None` when it was no longer pending.
    pub fn cancel(&self, id: &str) -> Option<Envelope> {
        let approval = self.store.cancel(id, now_ms()).ok().flatten()?;
        let mut envelope = Envelope::failure(
            Status::Denied,
            "fs.propose_patch",
            &approval.tool,
            approval.path.as_deref(),
            ErrorCode::PolicyDenied,
            "the waiting call went away: cancelled",
        )
        .with_reason(Some(ErrorReason::new(
            "hitl",
            "cancelled",
            approval_risk(&approval),
        )));
        envelope.hitl = Some(hitl_ref(&approval));
        let envelope = self.audited(
            envelope,
            Record::for_approval(&approval)
                .event("hitl_cancelled")
                .text("decision", "cancel")
                .number("duration_ms", now_ms().saturating_sub(approval.created_ms))
                .text("status", "denied"),
        );
        let _ = self
            .store
            .finish(id, ApprovalStatus::Cancelled, &to_json(&envelope));
        Some(envelope)
    }

    /// Cancels every pending approval this process waits for: an interrupted
    /// call, even one interrupted between creating its approval and reporting
    /// it. Returns their ids.
    pub fn cancel_own_waits(&self) -> Vec<String> {
        let me = std::process::id();
        self.store
            .abandoned(&|pid| pid != me)
            .unwrap_or_default()
            .iter()
            .filter_map(|approval| self.cancel(&approval.id).map(|_| approval.id.clone()))
            .collect()
    }

    /// Expires every pending approval whose time is up (for `pending`, `watch`).
    pub fn expire_overdue(&self) -> Result<usize, BrokerError> {
        let overdue = self.store.overdue(now_ms())?;
        let expired = overdue
            .iter()
            .filter_map(|approval| self.expire(&approval.id))
            .count();
        let abandoned = self.store.abandoned(&process_alive)?;
        let cancelled = abandoned
            .iter()
            .filter_map(|approval| self.cancel(&approval.id))
            .count();
        Ok(expired + cancelled)
    }

    /// A human decides a pending approval. Approving applies the stored plan
    /// (spec 000's apply_proposal) once; the returned envelope is the call's final
    /// result.
    pub fn decide(&self, id: &str, request: &DecideRequest) -> Result<Envelope, BrokerError> {
        let approval = self.store.get(id)?;
        let decision: Value = serde_json::from_str(&approval.decision_json).unwrap_or(Value::Null);
        let flag = |key: &str| decision.get(key).and_then(Value::as_bool).unwrap_or(false);
        let reason = request
            .reason
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty());
        if request.approve && flag("require_reason") && reason.is_none() {
            return Err(BrokerError::refused(
                ErrorCode::InvalidInput,
                format!("approving a {} risk call requires a reason", approval.risk),
            ));
        }
        // Every check of the always-allow before anything is decided: a
        // refused grant must not leave an approval approved and unapplied.
        let grant = match request.always {
            Some(always) => Some(grant_scope(
                &approval,
                always,
                request.approve,
                flag("allow_skip"),
            )?),
            None => None,
        };
        if request.content.is_some() && approval.status != ApprovalStatus::Pending {
            return Err(BrokerError::Store(StoreError::AlreadyDecided {
                id: id.to_owned(),
                status: approval.status,
            }));
        }
        let edited = match &request.content {
            Some(_) if !request.approve => {
                return Err(BrokerError::refused(
                    ErrorCode::InvalidInput,
                    "an edited version (content) goes with an approval",
                ));
            }
            Some(_) if request.always.is_some() => {
                return Err(BrokerError::refused(
                    ErrorCode::InvalidInput,
                    "always-allow cannot be given with an edited version",
                ));
            }
            Some(content) => Some(self.edited_plan(&approval, content.clone())?),
            None => None,
        };
        // A call whose waiting process is gone is cancelled, never applied for
        // nobody.
        if approval.status == ApprovalStatus::Pending
            && approval.waiter_pid.is_some_and(|pid| !process_alive(pid))
        {
            self.cancel(id);
            return Err(BrokerError::Store(StoreError::AlreadyDecided {
                id: id.to_owned(),
                status: ApprovalStatus::Cancelled,
            }));
        }
        let now = now_ms();
        let verdict = Verdict {
            approve: request.approve,
            by: "human".to_owned(),
            user: Some(request.user.clone()),
            channel: Some(request.channel.clone()),
            reason: reason.map(str::to_owned),
            at_ms: now,
            edited: match &edited {
                Some(plan) => Some(EditedPlan {
                    plan_json: serde_json::to_string(plan).map_err(|error| {
                        BrokerError::refused(ErrorCode::IoError, error.to_string())
                    })?,
                    diff: plan.diff.clone(),
                }),
                None => None,
            },
        };
        let decided = match self.store.decide(id, &verdict) {
            Ok(decided) => decided,
            Err(StoreError::Expired(_)) => {
                self.expire(id);
                return Err(BrokerError::Store(StoreError::Expired(id.to_owned())));
            }
            Err(error) => return Err(error.into()),
        };
        let logged = self.log(
            Record::for_approval(&decided)
                .event("hitl_decision")
                .text("decision", if request.approve { "approve" } else { "deny" })
                .text("decided_by", "human")
                .text("user", &request.user)
                .text("channel", &request.channel)
                .value("reason", reason.map(|r| Value::String(r.to_owned())))
                .value("edited", edited.as_ref().map(|_| Value::Bool(true)))
                .value(
                    "edited_patch_hash",
                    edited
                        .as_ref()
                        .map(|plan| Value::String(plan.patch_hash.clone())),
                )
                .number("duration_ms", now.saturating_sub(decided.created_ms)),
        );
        if logged.is_none() {
            // Nothing is applied on an unrecorded decision. The approval stays
            // decided; a later process recovers it once the log can be written.
            return Err(BrokerError::refused(
                ErrorCode::IoError,
                "the decision is stored but the audit log could not be written; nothing was applied",
            ));
        }
        if let Some(scope) = grant {
            self.grant(&decided, scope, &request.user, now)?;
        }
        if !request.approve {
            let mut envelope = Envelope::failure(
                Status::Denied,
                "fs.propose_patch",
                &decided.tool,
                decided.path.as_deref(),
                ErrorCode::PolicyDenied,
                match reason {
                    Some(reason) => format!("denied by {}: {reason}", request.user),
                    None => format!("denied by {}", request.user),
                },
            )
            .with_reason(Some(ErrorReason::new(
                "human",
                "human",
                approval_risk(&decided),
            )));
            envelope.hitl = Some(hitl_ref(&decided));
            envelope.decision = Some(human(request, reason));
            let _ = self
                .store
                .finish(id, ApprovalStatus::Denied, &to_json(&envelope));
            return Ok(envelope);
        }
        Ok(self.settle(id))
    }

    /// The plan of `approval` with the approver's `content` in place of the
    /// proposed one.
    fn edited_plan(
        &self,
        approval: &Approval,
        content: Vec<u8>,
    ) -> Result<ChangePlan, BrokerError> {
        if forward::is_forward(approval) {
            return Err(BrokerError::refused(
                ErrorCode::InvalidInput,
                "an upstream call cannot be edited, only approved or denied",
            ));
        }
        let plan: ChangePlan = serde_json::from_str(&approval.plan_json).map_err(|error| {
            BrokerError::refused(
                ErrorCode::IoError,
                format!("stored plan is unreadable: {error}"),
            )
        })?;
        airlock_fs::edited(&self.sandbox, &plan, content)
            .map_err(|error| BrokerError::refused(error.code(), error.to_string()))
    }

    fn grant(
        &self,
        approval: &Approval,
        scope: NewGrant,
        user: &str,
        now: u64,
    ) -> Result<(), BrokerError> {
        let persistent = scope.session.is_none();
        let row = GrantRow {
            id: format!("grant-{}", uuid::Uuid::new_v4()),
            tool: approval.tool.clone(),
            path_glob: approval.path.as_deref().map(globset_escape),
            // For the user who asked; a session grant only for the very
            // principal whose session it is.
            user: approval.user.clone(),
            owner: if persistent {
                None
            } else {
                approval.owner.clone()
            },
            session: scope.session,
            // Every grant ends: after --for, else after approvals.grant_ttl.
            expires_ms: scope
                .for_ms
                .or_else(|| self.config.approvals.grant_ttl_ms())
                .map(|ms| now.saturating_add(ms)),
            created_ms: now,
            created_by: Some(user.to_owned()),
            approval_id: Some(approval.id.clone()),
        };
        self.store.insert_grant(&row)?;
        let logged = self.log(
            Record::for_approval(approval)
                .event("grant_created")
                .text("grant_id", &row.id)
                .value("path_glob", row.path_glob.clone().map(Value::String))
                .text("scope", if persistent { "persistent" } else { "session" })
                .value("expires_ms", row.expires_ms.map(Value::from))
                .text("user", user),
        );
        match logged {
            Some(_) => Ok(()),
            None => {
                // No grant is in force that the log does not show.
                if let Err(error) = self.store.delete_grant(&row.id) {
                    eprintln!(
                        "airlock: grant {} could not be audited nor removed: {error}",
                        row.id
                    );
                }
                Err(BrokerError::refused(
                    ErrorCode::IoError,
                    "the grant could not be recorded in the audit log; it was not made",
                ))
            }
        }
    }

    /// The "always allow" grants in force, oldest first.
    pub fn grants(&self) -> Result<Vec<GrantRow>, BrokerError> {
        Ok(self.store.grants(now_ms())?)
    }

    /// Revokes the grant in force whose id is `id` or starts with it (a
    /// unique prefix), as `by` through `channel`; audited as `grant_revoked`.
    pub fn revoke_grant(&self, id: &str, by: &str, channel: &str) -> Result<GrantRow, BrokerError> {
        let grants = self.grants()?;
        let matching: Vec<&GrantRow> = grants
            .iter()
            .filter(|grant| grant.id == id || (!id.is_empty() && grant.id.starts_with(id)))
            .collect();
        let grant = match matching[..] {
            [grant] => grant.clone(),
            [] => {
                return Err(BrokerError::refused(
                    ErrorCode::NotFound,
                    format!(
                        "no grant in force is named `{id}` (`airlock grants` or GET /hitl/grants lists them)"
                    ),
                ));
            }
            _ => {
                return Err(BrokerError::refused(
                    ErrorCode::Ambiguous,
                    format!(
                        "`{id}` names {} grants; give more of the id",
                        matching.len()
                    ),
                ));
            }
        };
        self.revoke(&grant, by, channel)?;
        Ok(grant)
    }

    /// Revokes every grant in force; the ones revoked.
    /// One that another process revoked (or that ended) meanwhile is skipped;
    /// one whose record fails does not stop the rest from being revoked (the
    /// first such failure is reported after all of them).
    pub fn revoke_all_grants(&self, by: &str, channel: &str) -> Result<Vec<GrantRow>, BrokerError> {
        let mut revoked = Vec::new();
        let mut failure = None;
        for grant in self.grants()? {
            match self.revoke(&grant, by, channel) {
                Ok(()) => revoked.push(grant),
                Err(error) if error.code() == ErrorCode::NotFound => {}
                Err(error) => {
                    revoked.push(grant);
                    failure.get_or_insert(error);
                }
            }
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(revoked),
        }
    }

    /// Removes `grant` first (the safe direction), then records it.
    fn revoke(&self, grant: &GrantRow, by: &str, channel: &str) -> Result<(), BrokerError> {
        if !self.store.delete_grant(&grant.id)? {
            return Err(BrokerError::refused(
                ErrorCode::NotFound,
                format!("grant `{}` is no longer in force", grant.id),
            ));
        }
        let logged = self.log(
            Record::new("grant_revoked")
                .text("grant_id", &grant.id)
                .text("tool", &grant.tool)
                .value("path_glob", grant.path_glob.clone().map(Value::String))
                .value("session", grant.session.clone().map(Value::String))
                .value("approval_id", grant.approval_id.clone().map(Value::String))
                .text("decided_by", by)
                .text("channel", channel),
        );
        match logged {
            Some(_) => Ok(()),
            None => Err(BrokerError::refused(
                ErrorCode::IoError,
                format!(
                    "grant `{}` was revoked, but the audit log could not record it",
                    grant.id
                ),
            )),
        }
    }

    /// Applies an approved approval (if this process wins the claim) or waits for
    /// whoever did, and returns the final envelope.
    fn settle(&self, id: &str) -> Envelope {
        match self.store.get(id) {
            Ok(approval) if !self.can_apply(&approval) => return self.wait(id),
            Ok(_) => {}
            Err(error) => return failure_for(id, &BrokerError::from(error)),
        }
        match self.store.claim_apply(id) {
            Ok(Some(approval)) => {
                let decision = DecisionInfo {
                    by: decided_by(approval.decided_by.as_deref()),
                    user: approval.decided_user.clone(),
                    channel: approval.channel.clone(),
                    reason: approval.reason.clone(),
                };
                self.commit_claimed(&approval, decision, false)
            }
            Ok(None) => self.wait(id),
            Err(error) => failure_for(id, &BrokerError::from(error)),
        }
    }

    /// Commits the plan of an approval this process has claimed, and settles it.
    fn commit_claimed(
        &self,
        approval: &Approval,
        decision: DecisionInfo,
        recovering: bool,
    ) -> Envelope {
        if forward::is_forward(approval) {
            return self.commit_forward(approval, decision, recovering);
        }
        let path = approval.path.as_deref();
        let fail = |code: ErrorCode, message: String| {
            let reason = ErrorReason::of_tool_refusal(code, &message, approval_risk(approval));
            let mut envelope = Envelope::failure(
                failure_status(code),
                "fs.apply_patch",
                &approval.tool,
                path,
                code,
                message,
            )
            .with_reason(reason);
            envelope.hitl = Some(hitl_ref(approval));
            envelope.decision = Some(decision.clone());
            let envelope = self.audited(
                envelope,
                Record::for_approval(approval)
                    .event("write_file_apply")
                    .text("decided_by", decision.by.as_str())
                    .text("status", "error")
                    .text("code", code.as_str()),
            );
            let _ = self
                .store
                .finish(&approval.id, ApprovalStatus::Failed, &to_json(&envelope));
            envelope
        };
        let plan: ChangePlan = match serde_json::from_str(&approval.plan_json) {
            Ok(plan) => plan,
            Err(error) => {
                return fail(
                    ErrorCode::IoError,
                    format!("stored plan is unreadable: {error}"),
                );
            }
        };
        // An earlier apply interrupted after its commit point is finished (and
        // audited) before this one compares hashes.
        if let Err(error) = self.recover_journals() {
            return fail(error.code(), error.to_string());
        }
        let hashes = |plan: &ChangePlan| -> Vec<FileHashes> {
            plan.changes
                .iter()
                .map(|change| FileHashes {
                    path: change.path.clone(),
                    before_hash: change.before_hash.clone(),
                    after_hash: change.after_hash(),
                })
                .collect()
        };
        if recovering {
            // A crash may have come after the renames: if every file already holds
            // its new content, the apply happened.
            if let Ok(true) = airlock_fs::already_applied(&self.sandbox, &plan) {
                let files = hashes(&plan);
                return self.applied(approval, &plan, files, decision, true);
            }
        }
        // Keep the before-content first, so undo survives a crash after the write.
        let before = match airlock_fs::snapshot(&self.sandbox, &plan) {
            Ok(before) => before,
            Err(error) => return fail(error.code(), error.to_string()),
        };
        let snapshot = Snapshot {
            approval_id: approval.id.clone(),
            files: plan
                .changes
                .iter()
                .zip(before)
                .map(|(change, before)| SnapshotFile {
                    path: change.path.clone(),
                    mode: before.as_ref().map(|(_, mode)| *mode),
                    before: before.map(|(bytes, _)| bytes),
                    before_hash: change.before_hash.clone(),
                    after_hash: change.after_hash(),
                })
                .collect(),
            undone: false,
        };
        if let Err(error) = self.store.insert_snapshot(&snapshot) {
            return fail(ErrorCode::IoError, error.to_string());
        }
        let label = format!("{}:apply", approval.id);
        let options = CommitOptions {
            journal_dir: Some(&self.journal_dir),
            label: Some(&label),
            interrupt_after: None,
        };
        match airlock_fs::commit(&self.sandbox, &plan, options) {
            Ok(done) => {
                let files = done
                    .into_iter()
                    .map(|file| FileHashes {
                        path: file.path,
                        before_hash: file.before_hash,
                        after_hash: file.after_hash,
                    })
                    .collect();
                self.applied(approval, &plan, files, decision, recovering)
            }
            Err(error) => fail(error.code(), error.to_string()),
        }
    }

    fn applied(
        &self,
        approval: &Approval,
        plan: &ChangePlan,
        files: Vec<FileHashes>,
        decision: DecisionInfo,
        recovered: bool,
    ) -> Envelope {
        let path = plan.primary_path();
        let mut envelope = Envelope::new(Status::Allowed, "fs.apply_patch", &approval.tool, path);
        let (before_hash, after_hash) = match files.as_slice() {
            [one] => (one.before_hash.clone(), one.after_hash.clone()),
            _ => (None, None),
        };
        let mut data = json!({
            "path": path,
            "created": plan.creates_only(),
            "before_hash": before_hash,
            "after_hash": after_hash,
            "hitl_id": approval.id,
        });
        if let Some(object) = data.as_object_mut() {
            if files.len() > 1 {
                object.insert("files".to_owned(), json!(files));
            }
            for (key, value) in &plan.report {
                object.insert(key.clone(), value.clone());
            }
        }
        envelope.data = Some(data);
        envelope.hitl = Some(hitl_ref(approval));
        let mut record = Record::for_approval(approval)
            .event("write_file_apply")
            .text("decision", "approve")
            .text("decided_by", decision.by.as_str())
            .value("user", decision.user.clone().map(Value::String))
            .value("channel", decision.channel.clone().map(Value::String))
            .flag("created", plan.creates_only())
            .value("before_hash", before_hash.map(Value::String))
            .value("after_hash", after_hash.map(Value::String))
            .value("files", (files.len() > 1).then(|| json!(files)))
            .text("patch_hash", &plan.patch_hash)
            .value(
                "edited",
                plan.report
                    .get("edited")
                    .filter(|edited| edited.as_bool() == Some(true))
                    .cloned(),
            )
            .text("status", "allowed");
        envelope.decision = Some(decision);
        // A crash after the record was written but before the row was settled
        // must not record the apply twice: the existing record stands.
        let logged = if recovered {
            self.logged_apply(&approval.id)
        } else {
            None
        };
        let envelope = match logged {
            Some(audit) => {
                envelope.audit = Some(audit);
                envelope
            }
            None => {
                if recovered {
                    record = record.flag("recovered", true);
                }
                self.audited(envelope, record)
            }
        };
        let _ = self
            .store
            .finish(&approval.id, ApprovalStatus::Applied, &to_json(&envelope));
        envelope
    }

    /// The audit record of a successful apply of `id`, if the log has one.
    fn logged_apply(&self, id: &str) -> Option<airlock_core::envelope::AuditRef> {
        let query = airlock_audit::Query {
            event_type: Some("write_file_apply".to_owned()),
            filters: vec![
                ("hitl_id".to_owned(), id.to_owned()),
                ("status".to_owned(), "allowed".to_owned()),
            ],
            since: None,
        };
        let records = airlock_audit::query(&self.audit_path(), &query).ok()?;
        let record = records.last()?;
        Some(airlock_core::envelope::AuditRef {
            prev_hash: record.get("prev_hash")?.as_str()?.to_owned(),
            event_hash: record.get("event_hash")?.as_str()?.to_owned(),
        })
    }

    /// Pending approvals, oldest first (expiring overdue ones first).
    pub fn pending(&self, session: Option<&str>) -> Result<Vec<Approval>, BrokerError> {
        self.expire_overdue()?;
        Ok(self.store.pending(session, now_ms())?)
    }

    /// One approval.
    pub fn approval(&self, id: &str) -> Result<Approval, BrokerError> {
        Ok(self.store.get(id)?)
    }

    /// Restores the before-content of an applied change if the file still holds
    /// what the change wrote; otherwise `conflict`. Audited.
    pub fn undo(&self, id: &str, user: &str) -> Result<Envelope, BrokerError> {
        let approval = self.store.get(id)?;
        if forward::is_forward(&approval) {
            return Err(BrokerError::refused(
                ErrorCode::InvalidInput,
                format!(
                    "{id} is an upstream tool call; airlock cannot undo what another server did"
                ),
            ));
        }
        if approval.status != ApprovalStatus::Applied {
            return Err(BrokerError::refused(
                ErrorCode::InvalidInput,
                format!("approval {id} is {}, not applied", approval.status),
            ));
        }
        let snapshot = self.store.snapshot(id)?;
        if snapshot.undone {
            return Err(BrokerError::refused(
                ErrorCode::AlreadyDecided,
                format!("{id} was already undone"),
            ));
        }
        let files: Vec<UndoFile> = snapshot
            .files
            .iter()
            .map(|file| UndoFile {
                path: file.path.clone(),
                expected: file.after_hash.clone(),
                restore: file.before.clone(),
                mode: file.mode,
            })
            .collect();
        self.recover_journals()?;
        let label = format!("{id}:undo");
        let options = CommitOptions {
            journal_dir: Some(&self.journal_dir),
            label: Some(&label),
            interrupt_after: None,
        };
        let result = airlock_fs::undo(&self.sandbox, &files, options);
        let path = approval.path.as_deref();
        let record = Record::for_approval(&approval)
            .event("undo")
            .text("user", user);
        match result {
            Ok(done) => {
                if !self.store.mark_undone(id)? {
                    return Err(BrokerError::refused(
                        ErrorCode::AlreadyDecided,
                        format!("{id} was already undone"),
                    ));
                }
                let mut envelope = Envelope::new(Status::Allowed, "fs.undo", &approval.tool, path);
                let restored: Vec<Value> = snapshot
                    .files
                    .iter()
                    .map(|file| {
                        json!({
                            "path": file.path,
                            "restored_hash": file.before_hash,
                            "removed": file.before.is_none(),
                        })
                    })
                    .collect();
                let mut data = json!({"path": path, "hitl_id": id});
                if let (Some(object), [one]) = (data.as_object_mut(), snapshot.files.as_slice()) {
                    object.insert("restored_hash".to_owned(), json!(one.before_hash));
                    object.insert("removed".to_owned(), json!(one.before.is_none()));
                } else if let Some(object) = data.as_object_mut() {
                    object.insert("files".to_owned(), Value::Array(restored));
                }
                envelope.data = Some(data);
                let (before_hash, after_hash) = match done.as_slice() {
                    [one] => (one.before_hash.clone(), one.after_hash.clone()),
                    _ => (None, None),
                };
                Ok(self.audited(
                    envelope,
                    record
                        .text("status", "allowed")
                        .value("before_hash", before_hash.map(Value::String))
                        .value("after_hash", after_hash.map(Value::String))
                        .value("files", (done.len() > 1).then(|| json!(done))),
                ))
            }
            Err(error) => {
                let envelope = Envelope::failure(
                    Status::Error,
                    "fs.undo",
                    &approval.tool,
                    path,
                    error.code(),
                    error.to_string(),
                );
                Ok(self.audited(
                    envelope,
                    record
                        .text("status", "error")
                        .text("code", error.code().as_str()),
                ))
            }
        }
    }
}

/// A write-class call, planned.
enum Planned {
    Plan(ChangePlan),
    DryRun(ChangePlan),
}

/// One file's hashes in an apply's data and audit record.
#[derive(Debug, Clone, serde::Serialize)]
struct FileHashes {
    path: String,
    before_hash: Option<String>,
    after_hash: Option<String>,
}

/// The path a call names, for the envelope's `op.path`: `path`, or a move's
/// `from`.
fn call_path(call: &ToolCall) -> Option<&str> {
    call.args
        .get("path")
        .or_else(|| call.args.get("from"))
        .and_then(Value::as_str)
}

/// The base hash of a one-file plan.
fn single_base_hash(plan: &ChangePlan) -> Option<String> {
    match plan.changes.as_slice() {
        [one] => one.before_hash.clone(),
        _ => None,
    }
}

fn to_value<T: serde::Serialize>(data: T) -> Value {
    serde_json::to_value(data).unwrap_or(Value::Null)
}

/// Whether a process with this id runs (signal 0 probes without signalling).
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match rustix::process::Pid::from_raw(pid) {
        // Only "no such process" means gone: EPERM is a live process of
        // another user, which must never be raced.
        Some(pid) => !matches!(
            rustix::process::test_kill_process(pid),
            Err(rustix::io::Errno::SRCH)
        ),
        None => false,
    }
}

/// The result when the audit log cannot be written: nothing goes unaudited.
fn audit_unwritable(method: &str, tool: &str, path: Option<&str>) -> Envelope {
    Envelope::failure(
        Status::Error,
        method,
        tool,
        path,
        ErrorCode::IoError,
        "the audit log could not be written",
    )
}

/// Sandbox refusals and capability limits are denials (exit 4), like the
/// policy's; other failures are tool errors.
fn failure_status(code: ErrorCode) -> Status {
    match code {
        ErrorCode::PathForbidden
        | ErrorCode::PathDenied
        | ErrorCode::CreateNotAllowed
        | ErrorCode::LimitExceeded => Status::Denied,
        _ => Status::Error,
    }
}

/// A denial's reason from the policy's decision (its profile and risk).
fn reason_of(layer: &str, rule: &str, decision: &Decision) -> ErrorReason {
    ErrorReason {
        profile: decision.profile.as_deref().map(str::to_owned),
        ..ErrorReason::new(layer, rule, Some(decision.risk))
    }
}

/// The risk an approval was made at.
fn approval_risk(approval: &Approval) -> Option<Risk> {
    approval.risk.parse().ok()
}

/// The envelope of a settled approval whose decider died before storing one.
fn settled_from_row(approval: &Approval) -> Envelope {
    let (status, code, message) = match approval.status {
        ApprovalStatus::Denied => (Status::Denied, ErrorCode::PolicyDenied, "denied"),
        ApprovalStatus::Expired => (
            Status::Denied,
            ErrorCode::Expired,
            "no decision before the timeout: denied",
        ),
        ApprovalStatus::Cancelled => (Status::Denied, ErrorCode::PolicyDenied, "cancelled"),
        ApprovalStatus::Failed => (Status::Error, ErrorCode::IoError, "the apply failed"),
        ApprovalStatus::Applied => (
            Status::Error,
            ErrorCode::IoError,
            "applied, but its result was not stored",
        ),
        ApprovalStatus::Pending | ApprovalStatus::Approved | ApprovalStatus::Applying => {
            (Status::Error, ErrorCode::IoError, "not settled")
        }
    };
    let reason = match approval.status {
        ApprovalStatus::Denied => Some(("human", "human")),
        ApprovalStatus::Expired => Some(("timeout", "timeout")),
        ApprovalStatus::Cancelled => Some(("hitl", "cancelled")),
        _ => None,
    }
    .map(|(layer, rule)| ErrorReason::new(layer, rule, approval_risk(approval)));
    let mut envelope = Envelope::failure(
        status,
        "fs.apply_patch",
        &approval.tool,
        approval.path.as_deref(),
        code,
        message,
    )
    .with_reason(reason);
    envelope.hitl = Some(hitl_ref(approval));
    envelope.decision = Some(DecisionInfo {
        by: decided_by(approval.decided_by.as_deref()),
        user: approval.decided_user.clone(),
        channel: approval.channel.clone(),
        reason: approval.reason.clone(),
    });
    envelope
}

fn stored_result(approval: &Approval) -> Option<Envelope> {
    approval
        .result_json
        .as_deref()
        .and_then(|json| serde_json::from_str(json).ok())
}

fn failure_for(id: &str, error: &BrokerError) -> Envelope {
    let mut envelope = Envelope::failure(
        Status::Error,
        "fs.apply_patch",
        "write_file",
        None,
        error.code(),
        error.to_string(),
    );
    envelope.hitl = Some(HitlInfo {
        hitl_id: id.to_owned(),
        ttl_seconds: None,
        risk: None,
        summary: None,
        diff_preview: None,
    });
    envelope
}

fn hitl_ref(approval: &Approval) -> HitlInfo {
    HitlInfo {
        hitl_id: approval.id.clone(),
        ttl_seconds: None,
        risk: approval.risk.parse().ok(),
        summary: Some(approval.summary.clone()),
        diff_preview: None,
    }
}

fn human(request: &DecideRequest, reason: Option<&str>) -> DecisionInfo {
    DecisionInfo {
        by: DecidedBy::Human,
        user: Some(request.user.clone()),
        channel: Some(request.channel.clone()),
        reason: reason.map(str::to_owned),
    }
}

fn decided_by(by: Option<&str>) -> DecidedBy {
    match by {
        Some("human") => DecidedBy::Human,
        Some("grant") => DecidedBy::Grant,
        Some("timeout") => DecidedBy::Timeout,
        _ => DecidedBy::Policy,
    }
}

fn decided_by_policy_or_grant(decision: &Decision) -> &'static str {
    if decision
        .justification
        .iter()
        .any(|step| matches!(step.reason, Reason::Grant { .. }))
    {
        "grant"
    } else {
        "policy"
    }
}

fn first_denial(decision: &Decision) -> String {
    decision
        .justification
        .iter()
        .find(|step| step.effect == Some(Disposition::Deny))
        .map_or_else(|| "denied by policy".to_owned(), ToString::to_string)
}

/// spec 000's method names for the envelope's `op.method`.
fn method_of(tool: &str) -> &'static str {
    airlock_core::tools::BuiltinTool::from_name(tool).map_or("tool.call", |tool| tool.method())
}

/// Identical calls share a key: tool, session, who makes it (another
/// principal's identical call is its own approval, never a view of this
/// one), canonical arguments.
fn dedup_key(call: &ToolCall) -> String {
    let args = airlock_core::canonical::to_canonical_string(&call.args);
    // The context id too: a call made for another context is its own approval,
    // recorded with its own id.
    let text = format!(
        "{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}",
        call.tool,
        call.session.as_deref().unwrap_or(""),
        call.principal.owner_key(),
        call.context_id.as_deref().unwrap_or(""),
        args
    );
    airlock_core::canonical::sha256_hex(text.as_bytes())
}

fn to_json(envelope: &Envelope) -> String {
    serde_json::to_string(envelope).unwrap_or_default()
}

/// Escapes glob metacharacters so a grant covers exactly one path.
fn globset_escape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `Map` of an audit record, for callers that add their own events.
pub type AuditMap = Map<String, Value>;

/// Whether the configuration's default mode is wait or defer.
pub fn default_mode(config: &Config) -> Mode {
    match config.security.hitl.approval_mode {
        ApprovalMode::Wait => Mode::Wait,
        ApprovalMode::Defer => Mode::Defer,
    }
}
