//! Sessions (DESIGN §5.3): opening one (its roots resolved on the file
//! system, its authority clamped), finding the session a call runs in,
//! listing, closing, signalling, and ending them when their time is up.
//! Closing or expiring cancels the session's pending approvals and stops
//! its commands; every change is audited with a hash of the authority.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use airlock_core::envelope::{Envelope, ErrorReason, Status};
use airlock_core::plan::SessionPlan;
use airlock_core::session::{self, Authority, OpenRequest, Refusal, Root, RootMode};
use airlock_core::tools::{BuiltinTool, SESSION_ID};
use airlock_core::{Decision, ErrorCode, Principal, ToolCall};
use airlock_exec::Cancel;
use airlock_fs::{Access, FileKind, Sandbox};
use airlock_store::{SessionRow, SessionStatus};
use serde_json::{Value, json};

use crate::broker::Broker;
use crate::error::BrokerError;
use crate::record::Record;

/// How often a session's last use is written at most: an idle session
/// ends between `idle_ttl` and `idle_ttl` plus this after its last call.
const TOUCH_EVERY_MS: u64 = 1_000;

/// How long a session found open is used without reading the store again.
/// Closing or expiring it in this process binds at once; a close made by
/// another process (or instance) binds here within this time.
const RECHECK_MS: u64 = 250;

/// A session found open: who holds it, its authority, its ends, and when
/// the store said so.
struct Live {
    owner: String,
    profile: Option<String>,
    authority: Arc<Authority>,
    expires_ms: u64,
    idle_ttl_ms: u64,
    last_used_ms: u64,
    checked_ms: u64,
}

/// What the broker keeps of open sessions in this process: their parsed
/// authority (read once from the store) and the commands they run.
#[derive(Default)]
pub(crate) struct Sessions {
    authorities: Mutex<HashMap<String, Arc<Authority>>>,
    /// Sessions found open lately, and when: a call within
    /// `RECHECK_MS` of that uses the session without reading the store.
    live: Mutex<HashMap<String, Live>>,
    /// Bumped whenever a session is forgotten: a session found open before
    /// is not cached after.
    generation: std::sync::atomic::AtomicU64,
    /// Each open session's view of the workspace, made once.
    sandboxes: Mutex<HashMap<String, Arc<Sandbox>>>,
    /// One `Cancel` per session with commands running here: signalling
    /// or closing the session reaches them all.
    running: Arc<Mutex<HashMap<String, Cancel>>>,
}

impl Sessions {
    /// The `Cancel` a command of `session` runs under.
    pub(crate) fn cancel_of(&self, session: &str) -> Cancel {
        match self.running.lock() {
            Ok(mut running) => running.entry(session.to_owned()).or_default().clone(),
            Err(_) => Cancel::new(),
        }
    }

    fn forget(&self, session: &str) -> Option<Cancel> {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Ok(mut authorities) = self.authorities.lock() {
            authorities.remove(session);
        }
        if let Ok(mut live) = self.live.lock() {
            live.remove(session);
        }
        if let Ok(mut sandboxes) = self.sandboxes.lock() {
            sandboxes.remove(session);
        }
        self.running.lock().ok()?.remove(session)
    }
}

/// The workspace's sandbox, or a session's view of it.
pub(crate) enum SandboxRef<'a> {
    Shared(&'a Sandbox),
    Own(Box<Sandbox>),
    Cached(Arc<Sandbox>),
}

impl std::ops::Deref for SandboxRef<'_> {
    type Target = Sandbox;

    fn deref(&self) -> &Sandbox {
        match self {
            SandboxRef::Shared(sandbox) => sandbox,
            SandboxRef::Own(sandbox) => sandbox,
            SandboxRef::Cached(sandbox) => sandbox,
        }
    }
}

/// What a `session_open` comes to: opened, or asking a human.
enum Opening {
    Opened((Value, Record)),
    Asks(Box<SessionPlan>),
}

/// Who a session is opened for.
struct Owner {
    key: String,
    user: Option<String>,
    agent: Option<String>,
}

/// A session call's failure: its code and message.
struct Failure(ErrorCode, String);

impl Failure {
    /// Malformed input and failures of airlock's own are errors; a refusal
    /// (of a session, a root, a limit) is a denial.
    fn status(&self) -> Status {
        match self.0 {
            ErrorCode::InvalidInput
            | ErrorCode::IoError
            | ErrorCode::StoreUnavailable
            | ErrorCode::NotFound
            | ErrorCode::NotADirectory => Status::Error,
            _ => Status::Denied,
        }
    }

    fn not_found(id: &str) -> Failure {
        Failure(
            ErrorCode::SessionNotFound,
            format!("no open session {id} of yours (session_list shows yours)"),
        )
    }
}

fn from_store(error: airlock_store::StoreError) -> Failure {
    let code = if matches!(error, airlock_store::StoreError::Unavailable(_)) {
        ErrorCode::StoreUnavailable
    } else {
        ErrorCode::IoError
    };
    Failure(code, format!("the session store: {error}"))
}

/// A new session id: `ses-` and 128 random bits.
fn new_id() -> String {
    let mut seed = Vec::with_capacity(32);
    seed.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    seed.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    // 244 random bits in, the first 128 of their hash out.
    let hash = airlock_core::canonical::sha256_hex(&seed);
    let hex = hash.strip_prefix("sha256:").unwrap_or(&hash);
    format!("{}{}", session::ID_PREFIX, &hex[..32])
}

impl Broker {
    /// Takes over the running commands of `old`'s sessions (a reload).
    pub(crate) fn keep_sessions_of(&mut self, old: &Broker) {
        self.sessions.running = Arc::clone(&old.sessions.running);
    }

    /// The call as it runs in its session: `session_id` taken out of its
    /// arguments, the session found in DESIGN §5.3's order (the one bound
    /// to the endpoint, the explicit id, the connection's last opened one,
    /// else the implicit default: the call as it is), checked (owner, open,
    /// not overdue) and its authority attached. `Err`: the call's answer.
    pub(crate) fn in_session(&self, call: &ToolCall) -> Result<Option<ToolCall>, Box<Envelope>> {
        self.resolve_session(call).map_err(|refused| {
            let (call, failure) = *refused;
            Box::new(self.session_failure(&call, failure))
        })
    }

    /// [`Broker::in_session`] without an answer or a record: the call as
    /// it was refused, and why.
    fn resolve_session(
        &self,
        call: &ToolCall,
    ) -> Result<Option<ToolCall>, Box<(ToolCall, Failure)>> {
        let session_tool = matches!(&call.origin, airlock_core::ToolOrigin::Builtin(tool) if tool.is_session_tool());
        if session_tool {
            return Ok(None);
        }
        // Only airlock's own tools take `session_id`: another server's
        // tool may have an argument of that name for itself.
        let builtin = matches!(&call.origin, airlock_core::ToolOrigin::Builtin(_))
            || crate::code::code_tool(&self.config, &call.tool).is_some();
        let explicit = match call.args.get(SESSION_ID).filter(|_| builtin) {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id.clone()),
            Some(_) => {
                return Err(Box::new((
                    call.clone(),
                    Failure(
                        ErrorCode::InvalidInput,
                        "session_id must be a string".to_owned(),
                    ),
                )));
            }
        };
        let template = call
            .profile
            .as_deref()
            .and_then(|name| self.config.profiles.get(name))
            .and_then(|profile| profile.session.as_ref());
        if explicit.is_none()
            && template.is_none()
            && call.sessions.bound.is_none()
            && call.sessions.last.is_none()
        {
            // The implicit default session: today's behaviour, untouched.
            return Ok(None);
        }
        let mut call = call.clone();
        if builtin && let Some(args) = call.args.as_object_mut() {
            args.remove(SESSION_ID);
        }
        // A profile's bound session: the model's id is ignored.
        if let Some(template) = template {
            let authority = self
                .template_authority(call.profile.as_deref().unwrap_or_default(), template)
                .map_err(|failure| Box::new((call.clone(), failure)))?;
            call.scope = Some(authority);
            return Ok(Some(call));
        }
        let id = match (&call.sessions.bound, &explicit) {
            (Some(bound), Some(named)) if bound != named => {
                return Err(Box::new((
                    call.clone(),
                    Failure(
                        ErrorCode::SessionMismatch,
                        format!("this endpoint is bound to another session than {named}"),
                    ),
                )));
            }
            (Some(bound), _) => bound.clone(),
            (None, Some(named)) => named.clone(),
            (None, None) => match &call.sessions.last {
                Some(last) => last.clone(),
                None => return Ok(Some(call)),
            },
        };
        // The operator bound it: whoever the endpoint's caller is runs in it.
        let trusted = call.sessions.bound.as_deref() == Some(id.as_str());
        let authority = self
            .live_session(&id, &call.principal, call.profile.as_deref(), trusted)
            .map_err(|failure| Box::new((call.clone(), failure)))?;
        call.session = Some(id);
        call.scope = Some(authority);
        Ok(Some(call))
    }

    /// The roots (absolute directories) of the session `call` runs in, for
    /// an upstream's `roots/list`; `None` for the implicit default session.
    /// A session that cannot be used has none.
    pub fn session_roots(&self, call: &ToolCall) -> Option<Vec<std::path::PathBuf>> {
        let scoped = match self.resolve_session(call) {
            Ok(Some(scoped)) => scoped,
            Ok(None) => return call.scope.as_deref().map(|scope| self.roots_of(scope)),
            Err(_) => return Some(Vec::new()),
        };
        scoped.scope.as_deref().map(|scope| self.roots_of(scope))
    }

    fn roots_of(&self, scope: &Authority) -> Vec<std::path::PathBuf> {
        scope
            .roots
            .iter()
            .map(|root| {
                if root.path.is_empty() {
                    self.root.clone()
                } else {
                    self.root.join(&root.path)
                }
            })
            .collect()
    }

    /// The open session `id` of `principal` (opened on an endpoint of the
    /// same `profile`: a session opened where no allowance applied is not
    /// used where one does), its use recorded; ended when its time is up.
    fn live_session(
        &self,
        id: &str,
        principal: &Principal,
        profile: Option<&str>,
        trusted: bool,
    ) -> Result<Arc<Authority>, Failure> {
        if !session::is_session_id(id) {
            return Err(Failure::not_found(id));
        }
        let now = self.now_ms();
        if let Some(authority) = self.recently_live(id, principal, profile, trusted, now)? {
            return Ok(authority);
        }
        let generation = self
            .sessions
            .generation
            .load(std::sync::atomic::Ordering::SeqCst);
        let row = self
            .store
            .session(id)
            .map_err(from_store)?
            .filter(|row| {
                trusted || (row.owner == principal.owner_key() && row.profile.as_deref() == profile)
            })
            .ok_or_else(|| Failure::not_found(id))?;
        match row.status {
            SessionStatus::Closed => {
                return Err(Failure(
                    ErrorCode::SessionClosed,
                    format!("session {id} was closed"),
                ));
            }
            SessionStatus::Expired => {
                return Err(Failure(
                    ErrorCode::SessionExpired,
                    format!("session {id} expired"),
                ));
            }
            SessionStatus::Open => {}
        }
        if row.ends_ms() <= now {
            self.end_session(&row, SessionStatus::Expired, Some("ttl"));
            return Err(Failure(
                ErrorCode::SessionExpired,
                format!("session {id} expired"),
            ));
        }
        let mut last_used_ms = row.last_used_ms;
        if now.saturating_sub(row.last_used_ms) >= TOUCH_EVERY_MS {
            self.store.touch_session(id, now).map_err(from_store)?;
            last_used_ms = now;
        }
        let authority = self.authority_of(&row)?;
        if let Ok(mut live) = self.sessions.live.lock()
            // Not if a session was forgotten meanwhile (it may be this one).
            && self
                .sessions
                .generation
                .load(std::sync::atomic::Ordering::SeqCst)
                == generation
        {
            live.insert(
                row.id.clone(),
                Live {
                    owner: row.owner.clone(),
                    profile: row.profile.clone(),
                    authority: Arc::clone(&authority),
                    expires_ms: row.expires_ms,
                    idle_ttl_ms: row.idle_ttl_ms,
                    last_used_ms,
                    checked_ms: now,
                },
            );
        }
        Ok(authority)
    }

    /// The authority of session `id` when the store said it was open less
    /// than `RECHECK_MS` ago, it belongs to `principal` (unless `trusted`)
    /// and its time is not up; its use recorded. `None`: ask the store.
    fn recently_live(
        &self,
        id: &str,
        principal: &Principal,
        profile: Option<&str>,
        trusted: bool,
        now: u64,
    ) -> Result<Option<Arc<Authority>>, Failure> {
        let Ok(mut cache) = self.sessions.live.lock() else {
            return Ok(None);
        };
        let Some(live) = cache.get_mut(id) else {
            return Ok(None);
        };
        let ends = live
            .expires_ms
            .min(live.last_used_ms.saturating_add(live.idle_ttl_ms));
        if now.saturating_sub(live.checked_ms) >= RECHECK_MS || now >= ends {
            return Ok(None);
        }
        if !trusted && (live.owner != principal.owner_key() || live.profile.as_deref() != profile) {
            // Never decided from the cache: the store says not found.
            return Ok(None);
        }
        if now.saturating_sub(live.last_used_ms) >= TOUCH_EVERY_MS {
            self.store.touch_session(id, now).map_err(from_store)?;
            live.last_used_ms = now;
        }
        Ok(Some(Arc::clone(&live.authority)))
    }

    fn authority_of(&self, row: &SessionRow) -> Result<Arc<Authority>, Failure> {
        if let Ok(authorities) = self.sessions.authorities.lock()
            && let Some(authority) = authorities.get(&row.id)
        {
            return Ok(Arc::clone(authority));
        }
        let authority: Authority = serde_json::from_str(&row.authority).map_err(|error| {
            Failure(
                ErrorCode::IoError,
                format!("session {} has an unreadable authority: {error}", row.id),
            )
        })?;
        let authority = Arc::new(authority);
        if let Ok(mut authorities) = self.sessions.authorities.lock() {
            authorities.insert(row.id.clone(), Arc::clone(&authority));
        }
        Ok(authority)
    }

    /// The authority of profile `name`'s bound session template, made
    /// once per broker (the configuration is fixed while it lives).
    fn template_authority(&self, name: &str, template: &Value) -> Result<Arc<Authority>, Failure> {
        let key = format!("profile:{name}");
        if let Ok(authorities) = self.sessions.authorities.lock()
            && let Some(authority) = authorities.get(&key)
        {
            return Ok(Arc::clone(authority));
        }
        let request =
            OpenRequest::parse(template, &self.root.to_string_lossy()).map_err(|error| {
                Failure(
                    error.code,
                    format!("profiles.{name}.session: {}", error.message),
                )
            })?;
        // The operator wrote it: no allowance applies.
        let clamped = self.clamp_request(None, &request)?;
        let authority = Arc::new(clamped.authority);
        if let Ok(mut authorities) = self.sessions.authorities.lock() {
            authorities.insert(key, Arc::clone(&authority));
        }
        Ok(authority)
    }

    /// `request`'s roots resolved on the file system and its authority
    /// clamped.
    fn clamp_request(
        &self,
        profile: Option<&str>,
        request: &OpenRequest,
    ) -> Result<session::Clamped, Failure> {
        if request.worktree.is_some() {
            return Err(Failure(
                ErrorCode::InvalidInput,
                "worktree sessions are not available in this build".to_owned(),
            ));
        }
        let asked = request.roots.clone().unwrap_or_else(|| {
            vec![session::RootRequest {
                workspace: session::DEFAULT_WORKSPACE.to_owned(),
                path: String::new(),
                mode: None,
            }]
        });
        let mut roots = Vec::new();
        for (at, root) in asked.iter().enumerate() {
            if root.workspace != session::DEFAULT_WORKSPACE {
                return Err(Failure(
                    ErrorCode::RootNotAllowed,
                    format!("roots[{at}]: no workspace named {}", root.workspace),
                ));
            }
            let path = self.directory(&format!("roots[{at}]"), &root.path)?;
            let mode = root.mode.unwrap_or(RootMode::Rw);
            if !roots
                .iter()
                .any(|known: &Root| known.path == path && known.mode == mode)
            {
                roots.push(Root {
                    workspace: root.workspace.clone(),
                    path,
                    mode,
                });
            }
        }
        let workdir = match &request.workdir {
            Some(workdir) => Some(self.directory("workdir", workdir)?),
            None => None,
        };
        session::clamp(&self.config, profile, request, roots, workdir).map_err(|refusal| {
            match refusal {
                Refusal::RootNotAllowed(message) => Failure(ErrorCode::RootNotAllowed, message),
                Refusal::Invalid(message) => Failure(ErrorCode::InvalidInput, message),
            }
        })
    }

    /// The real root-relative path of directory `path` of the workspace,
    /// through the sandbox (symlinks followed only inside, deny globs and
    /// protected paths refused).
    fn directory(&self, name: &str, path: &str) -> Result<String, Failure> {
        let resolved =
            self.sandbox
                .resolve(name, if path.is_empty() { "." } else { path }, Access::Read);
        match resolved {
            Ok(found) if found.kind() == Some(FileKind::Directory) => {
                let real = found.resolved();
                // Never airlock's own state, its configuration or a git
                // directory (at any depth): a command working there could
                // change what runs later outside any sandbox.
                let protected = self
                    .policy
                    .protected_paths()
                    .into_iter()
                    .any(|(protected, _)| session::is_within(real, &protected.to_string()));
                if protected || real.split('/').any(|part| part == ".git") {
                    return Err(Failure(
                        ErrorCode::RootNotAllowed,
                        format!("{name} `{path}` is airlock's own or a git directory"),
                    ));
                }
                Ok(real.to_owned())
            }
            Ok(_) => Err(Failure(
                ErrorCode::NotADirectory,
                format!("{name} `{path}` is not a directory"),
            )),
            Err(error) if error.code() == ErrorCode::NotFound => Err(Failure(
                ErrorCode::NotFound,
                format!("{name} `{path}` does not exist"),
            )),
            Err(error) => Err(Failure(
                ErrorCode::RootNotAllowed,
                format!("{name}: {error}"),
            )),
        }
    }

    /// The sandbox a call's file tools use: the workspace's, or its
    /// session's view of it.
    pub(crate) fn sandbox_for(
        &self,
        call: &ToolCall,
    ) -> Result<SandboxRef<'_>, airlock_fs::FsError> {
        // A durable session's view is made once (its authority never
        // changes); a profile's bound one, whose calls carry no id, per call.
        let Some(id) = call
            .session
            .as_deref()
            .filter(|id| call.scope.is_some() && session::is_session_id(id))
        else {
            return self.sandbox_in(call.scope.as_deref());
        };
        if let Ok(sandboxes) = self.sessions.sandboxes.lock()
            && let Some(sandbox) = sandboxes.get(id)
        {
            return Ok(SandboxRef::Cached(Arc::clone(sandbox)));
        }
        let made = match self.sandbox_in(call.scope.as_deref())? {
            SandboxRef::Own(sandbox) => Arc::from(sandbox),
            other => return Ok(other),
        };
        if let Ok(mut sandboxes) = self.sessions.sandboxes.lock() {
            sandboxes.insert(id.to_owned(), Arc::clone(&made));
        }
        Ok(SandboxRef::Cached(made))
    }

    /// The workspace's sandbox as a session with `scope` sees it.
    pub(crate) fn sandbox_in(
        &self,
        scope: Option<&Authority>,
    ) -> Result<SandboxRef<'_>, airlock_fs::FsError> {
        self.scoped_sandbox(scope, true)
    }

    /// The workspace's sandbox as a session with `scope` sees it, for
    /// paths that are workspace-relative already (a command's changes, a
    /// plan's): its roots, not its working directory.
    pub(crate) fn sandbox_of_roots(
        &self,
        scope: Option<&Authority>,
    ) -> Result<SandboxRef<'_>, airlock_fs::FsError> {
        self.scoped_sandbox(scope, false)
    }

    /// The sandbox an approval of a call made in a durable session is
    /// applied in: that session's roots (closed or not: an apply already
    /// claimed finishes), its plan's paths taken as they are (they are
    /// workspace-relative, resolved when planned).
    pub(crate) fn apply_sandbox(
        &self,
        approval: &airlock_store::Approval,
    ) -> Result<SandboxRef<'_>, airlock_fs::FsError> {
        let Some(id) = approval
            .session
            .as_deref()
            .filter(|id| session::is_session_id(id))
        else {
            // A call of a profile's bound session: that session's roots.
            let template = approval.terms.profile.as_deref().and_then(|name| {
                self.config
                    .profiles
                    .get(name)
                    .and_then(|profile| profile.session.as_ref())
                    .map(|template| (name, template))
            });
            return match template {
                Some((name, template)) => {
                    let authority = self.template_authority(name, template).map_err(
                        |Failure(code, message)| airlock_fs::FsError::Refused { code, message },
                    )?;
                    self.scoped_sandbox(Some(&authority), false)
                }
                None => Ok(SandboxRef::Shared(&self.sandbox)),
            };
        };
        let row = match self.store.session(id) {
            Ok(Some(row)) => row,
            // Not a session of this store (a label of that form): as made.
            Ok(None) => return Ok(SandboxRef::Shared(&self.sandbox)),
            Err(error) => {
                return Err(airlock_fs::FsError::Io {
                    context: "cannot read the approval's session".to_owned(),
                    error: std::io::Error::other(error.to_string()),
                });
            }
        };
        // Made after its session ended (in the moment before another
        // process's close reached this one): never applied.
        if row.status != SessionStatus::Open
            && row
                .ended_ms
                .is_some_and(|ended| approval.created_ms >= ended)
        {
            return Err(airlock_fs::FsError::Refused {
                code: ErrorCode::SessionClosed,
                message: format!("session {id} had ended when this was proposed"),
            });
        }
        let authority: Authority =
            serde_json::from_str(&row.authority).map_err(|error| airlock_fs::FsError::Io {
                context: "the approval's session is unreadable".to_owned(),
                error: std::io::Error::other(error),
            })?;
        self.scoped_sandbox(Some(&authority), false)
    }

    fn scoped_sandbox(
        &self,
        scope: Option<&Authority>,
        from_workdir: bool,
    ) -> Result<SandboxRef<'_>, airlock_fs::FsError> {
        let Some(authority) = scope else {
            return Ok(SandboxRef::Shared(&self.sandbox));
        };
        let scope = airlock_fs::Scope {
            roots: authority
                .roots
                .iter()
                .map(|root| (root.path.clone(), root.mode == RootMode::Rw))
                .collect(),
            workdir: if from_workdir {
                authority.workdir.clone()
            } else {
                String::new()
            },
        };
        let mut config = self.sandbox.config().clone();
        let limits = &authority.limits;
        let narrow = |value: &mut u64, limit: Option<u64>| {
            if let Some(limit) = limit {
                *value = (*value).min(limit);
            }
        };
        narrow(&mut config.max_read_bytes_hard, limits.max_read_bytes);
        narrow(&mut config.max_write_bytes_hard, limits.max_write_bytes);
        narrow(&mut config.max_inline_bytes, limits.max_inline_bytes);
        narrow(&mut config.max_grep_results, limits.max_grep_results);
        narrow(&mut config.max_glob_results, limits.max_glob_results);
        narrow(&mut config.max_scan_files, limits.max_scan_files);
        narrow(&mut config.max_scan_bytes, limits.max_scan_bytes);
        narrow(&mut config.max_changed_files, limits.max_changed_files);
        narrow(
            &mut config.max_edit_replacements,
            limits.max_edit_replacements,
        );
        config.max_read_bytes_default = config
            .max_read_bytes_default
            .min(config.max_read_bytes_hard);
        // A file with another name may have it outside the session's
        // roots: a session over part of the workspace reads none.
        if !authority.roots.iter().any(|root| root.path.is_empty()) {
            config.allow_hardlinks = false;
        }
        Ok(SandboxRef::Own(Box::new(
            self.sandbox.scoped(Arc::new(scope), config)?,
        )))
    }

    /// The call as the policy sees it: in a session with a working
    /// directory, its relative path arguments joined to it (workspace-
    /// relative, as rules are written). The tool itself runs the call as it
    /// is, in the session's sandbox, which places them the same way.
    pub(crate) fn policy_view<'c>(&self, call: &'c ToolCall) -> std::borrow::Cow<'c, ToolCall> {
        let (Some(scope), airlock_core::ToolOrigin::Builtin(tool)) = (&call.scope, &call.origin)
        else {
            return std::borrow::Cow::Borrowed(call);
        };
        if tool.path_params().is_empty() {
            return std::borrow::Cow::Borrowed(call);
        }
        let root = self.root.to_string_lossy();
        let mut view = call.clone();
        if let Some(args) = view.args.as_object_mut() {
            // A command runs in the working directory unless it names
            // another: its redirections are placed from there.
            if *tool == BuiltinTool::Exec
                && !scope.workdir.is_empty()
                && args.get("cwd").is_none_or(Value::is_null)
            {
                args.insert("cwd".to_owned(), Value::String(".".to_owned()));
            }
            for param in tool.path_params() {
                let Some(Value::String(path)) = args.get_mut(*param) else {
                    continue;
                };
                // A session takes absolute paths under the root, and relative
                // ones from its working directory.
                let placed = match path.strip_prefix(root.as_ref()) {
                    Some(rest)
                        if path.starts_with('/') && (rest.is_empty() || rest.starts_with('/')) =>
                    {
                        airlock_core::policy::normalize_relative(rest.trim_start_matches('/'))
                    }
                    _ if path.starts_with('/') => None,
                    _ => airlock_core::policy::normalize_relative(&format!(
                        "{}/{path}",
                        scope.workdir
                    )),
                };
                if let Some(placed) = placed {
                    *path = placed;
                }
            }
        }
        std::borrow::Cow::Owned(view)
    }

    /// A session tool's call (the policy did not deny it).
    pub(crate) fn session_tool(
        &self,
        tool: BuiltinTool,
        call: &ToolCall,
        decision: &Decision,
        mode: &crate::Mode,
        on_pending: &dyn Fn(&airlock_store::Approval),
        base: Record,
    ) -> Envelope {
        let asks = decision.disposition == airlock_core::Disposition::Ask;
        if asks && tool != BuiltinTool::SessionOpen {
            // Only an opening can be proposed; the rest answer at once.
            let envelope = Envelope::failure(
                Status::Denied,
                tool.method(),
                &call.tool,
                None,
                ErrorCode::PolicyDenied,
                "the policy asks a human about this call, and it cannot be proposed",
            )
            .with_reason(Some(crate::envelopes::reason_of(
                "hitl",
                "cannot_be_proposed",
                decision,
            )));
            return self.observed(
                envelope,
                base.event("tool_call")
                    .text("decision", "deny")
                    .text("status", "denied"),
            );
        }
        let result = match tool {
            BuiltinTool::SessionOpen => match self.session_open(call, asks) {
                Ok(Opening::Asks(plan)) => {
                    return self.propose_session(call, decision, *plan, mode, on_pending, base);
                }
                Ok(Opening::Opened(opened)) => Ok(opened),
                Err(failure) => Err(failure),
            },
            BuiltinTool::SessionList => self.session_list(call),
            BuiltinTool::SessionClose => self.session_close(call),
            BuiltinTool::SessionSignal => self.session_signal(call),
            _ => Err(Failure(
                ErrorCode::UnknownTool,
                format!("{} is no session tool", call.tool),
            )),
        };
        let method = tool.method();
        match result {
            Ok((data, record)) => {
                let mut envelope = Envelope::new(Status::Allowed, method, &call.tool, None);
                envelope.data = Some(data);
                let record = record_fields(base, record)
                    .text("decision", "allow")
                    .text("status", "allowed");
                self.audited(envelope, record)
            }
            Err(failure) => {
                let status = failure.status();
                let Failure(code, message) = failure;
                let envelope = Envelope::failure(status, method, &call.tool, None, code, &message)
                    .with_reason(Some(ErrorReason::new(
                        "session",
                        code.as_str(),
                        Some(decision.risk),
                    )));
                self.observed(
                    envelope,
                    base.event("tool_call")
                        .text("status", status.as_str())
                        .text("code", code.as_str()),
                )
            }
        }
    }

    /// The answer of a call whose session cannot be used.
    fn session_failure(&self, call: &ToolCall, failure: Failure) -> Envelope {
        let status = failure.status();
        let Failure(code, message) = failure;
        let envelope = Envelope::failure(
            status,
            crate::envelopes::method_of(&call.tool),
            &call.tool,
            crate::envelopes::call_path(call),
            code,
            &message,
        )
        .with_reason(Some(ErrorReason::new("session", code.as_str(), None)));
        self.observed(
            envelope,
            Record::default()
                .text("event", "tool_call")
                .text("tool", &call.tool)
                .value(
                    "session",
                    call.args
                        .get(SESSION_ID)
                        .cloned()
                        .or_else(|| call.sessions.bound.clone().map(Value::String)),
                )
                .value("user", call.principal.user.clone().map(Value::String))
                .value("agent", call.principal.agent.clone().map(Value::String))
                .text("status", status.as_str())
                .text("code", code.as_str()),
        )
    }

    /// `session_open`: opened at once, or (`asks`: the policy asks; or it
    /// asks for more than the profile's allowance) proposed.
    fn session_open(&self, call: &ToolCall, asks: bool) -> Result<Opening, Failure> {
        let request = OpenRequest::parse(&call.args, &self.root.to_string_lossy())
            .map_err(|error| Failure(error.code, error.message))?;
        let clamped = self.clamp_request(call.profile.as_deref(), &request)?;
        let mut beyond = clamped.excess.reasons;
        if asks {
            beyond.push("the policy asks about opening sessions".to_owned());
        }
        let plan = SessionPlan {
            session_id: new_id(),
            authority: clamped.authority,
            labels: request.labels,
            env_dropped: clamped.env_dropped,
            profile: call.profile.clone(),
            beyond,
        };
        if !plan.beyond.is_empty() {
            // Beyond the profile's allowance: a human sees the authority
            // asked for, and the session opens once approved.
            return Ok(Opening::Asks(Box::new(plan)));
        }
        let owner = Owner {
            key: call.principal.owner_key(),
            user: call.principal.user.clone(),
            agent: call.principal.agent.clone(),
        };
        self.open_planned(&plan, &owner).map(Opening::Opened)
    }

    /// Stores the session of `plan` for `owner`: its view and its record.
    fn open_planned(&self, plan: &SessionPlan, owner: &Owner) -> Result<(Value, Record), Failure> {
        // Sessions whose time is up do not count against the limit.
        if let Err(error) = self.end_overdue_sessions() {
            eprintln!("airlock: ending sessions: {error}");
        }
        let now = self.now_ms();
        let authority = &plan.authority;
        let row = SessionRow {
            id: plan.session_id.clone(),
            owner: owner.key.clone(),
            user: owner.user.clone(),
            agent: owner.agent.clone(),
            profile: plan.profile.clone(),
            authority: serde_json::to_string(authority).unwrap_or_default(),
            authority_hash: authority.hash(),
            labels: serde_json::to_string(&plan.labels).unwrap_or_else(|_| "{}".to_owned()),
            status: SessionStatus::Open,
            created_ms: now,
            expires_ms: now.saturating_add(authority.ttl_ms),
            idle_ttl_ms: authority.idle_ttl_ms,
            last_used_ms: now,
            ended_ms: None,
            end_reason: None,
            worktree: None,
        };
        let max = self.config.sessions.max_open_per_principal;
        if !self.store.insert_session(&row, max).map_err(from_store)? {
            return Err(Failure(
                ErrorCode::RateLimited,
                format!(
                    "you have {max} open sessions already (sessions.max_open_per_principal); close one"
                ),
            ));
        }
        let mut view = session_view(&row, authority);
        if !plan.env_dropped.is_empty() {
            view["env_dropped"] = json!(plan.env_dropped);
        }
        let record = Record::new("session_opened")
            .text("session", &row.id)
            .text("authority_hash", &row.authority_hash)
            .value("authority", Some(audited_authority(authority)))
            .number("expires_ms", row.expires_ms);
        Ok((view, record))
    }

    /// Proposes opening `plan`'s session (it asks for more than the
    /// profile's `sessions.auto`): the approval shows the authority asked
    /// for, and applying it opens the session.
    fn propose_session(
        &self,
        call: &ToolCall,
        decision: &Decision,
        plan: SessionPlan,
        mode: &crate::Mode,
        on_pending: &dyn Fn(&airlock_store::Approval),
        base: Record,
    ) -> Envelope {
        use crate::submit::Handling;
        const METHOD: &str = "host.session.open";
        let mut asking = decision.clone();
        asking.disposition = airlock_core::Disposition::Ask;
        asking.risk = asking.risk.max(airlock_core::Risk::Medium);
        let handling = self.handling(mode, &asking);
        let base = base.text("risk", asking.risk.as_str());
        match handling {
            Handling::Refuse => {
                return self.refused_by_fallback(
                    call,
                    &asking,
                    None,
                    METHOD,
                    base.event("tool_call"),
                );
            }
            // `elicitation_fallback: allow`: opened as if allowed.
            Handling::Allow => {
                let owner = Owner {
                    key: call.principal.owner_key(),
                    user: call.principal.user.clone(),
                    agent: call.principal.agent.clone(),
                };
                return match self.open_planned(&plan, &owner) {
                    Ok((data, record)) => {
                        let mut envelope = Envelope::new(Status::Allowed, METHOD, &call.tool, None);
                        envelope.data = Some(data);
                        self.audited(
                            envelope,
                            record_fields(base, record).text("status", "allowed"),
                        )
                    }
                    Err(Failure(code, message)) => {
                        let envelope = Envelope::failure(
                            Status::Error,
                            METHOD,
                            &call.tool,
                            None,
                            code,
                            &message,
                        );
                        self.observed(
                            envelope,
                            base.event("tool_call")
                                .text("status", "error")
                                .text("code", code.as_str()),
                        )
                    }
                };
            }
            _ => {}
        }
        let shown = serde_json::to_string_pretty(&json!({
            "authority": plan.authority,
            "labels": plan.labels,
            "beyond_the_allowance": plan.beyond,
        }))
        .unwrap_or_default();
        let summary = format!(
            "OPEN SESSION {} ({})",
            plan.authority
                .roots
                .iter()
                .map(|root| format!(
                    "{}:{}",
                    if root.path.is_empty() {
                        "."
                    } else {
                        root.path.as_str()
                    },
                    if root.mode == RootMode::Rw {
                        "rw"
                    } else {
                        "ro"
                    }
                ))
                .collect::<Vec<_>>()
                .join(","),
            plan.beyond.join("; ")
        );
        let now = self.now_ms();
        let new = self.new_approval(
            call,
            &asking,
            crate::propose::Shown {
                path: None,
                summary: airlock_core::display::safe_line(&summary).into_owned(),
                diff: shown,
                plan: airlock_core::Plan::Session(plan),
            },
            now,
            self.ttl_seconds(true, handling, &asking),
            (handling == Handling::Wait).then(|| self.store.me()),
        );
        let (approval, deduplicated) = match self.store.create_approval(&new, self.pending_limits())
        {
            Ok(airlock_store::Created::New(approval)) => (approval, false),
            Ok(airlock_store::Created::Existing(approval)) => (approval, true),
            Err(error) => {
                let error = BrokerError::from(error);
                return self.propose_failed(
                    &call.tool,
                    &asking,
                    base,
                    None,
                    error.code(),
                    &error.to_string(),
                );
            }
        };
        let mut record = base
            .event("tool_call_propose")
            .text("hitl_id", &approval.id)
            .text("status", "hitl_required");
        if deduplicated {
            record = record.flag("deduplicated", true);
        }
        let audit = match self.append_record(record, airlock_audit::Durability::Now) {
            Ok(audit) => audit,
            Err(error) => {
                if !deduplicated {
                    self.cancel_unaudited(&approval.id);
                }
                return crate::envelopes::audit_unwritable(METHOD, &call.tool, None, &error);
            }
        };
        match handling {
            Handling::Wait => {
                on_pending(&approval);
                self.wait(&approval.id)
            }
            Handling::ApproveNow { user, reason } => {
                self.approve_now(call, None, METHOD, &approval, user, reason)
            }
            Handling::Defer | Handling::Rounds | Handling::Refuse | Handling::Allow => {
                let mut envelope = Envelope::new(Status::HitlRequired, METHOD, &call.tool, None);
                let ttl = approval
                    .expires_ms
                    .saturating_sub(self.now_ms())
                    .div_ceil(1000);
                envelope.hitl = Some(airlock_core::envelope::HitlInfo {
                    hitl_id: approval.id.clone(),
                    ttl_seconds: Some(ttl),
                    risk: Some(asking.risk),
                    summary: Some(approval.summary.clone()),
                    diff_preview: Some(approval.diff.clone()),
                });
                envelope.audit = Some(audit);
                envelope
            }
        }
    }

    /// Applies an approved session opening: the session is stored for the
    /// principal that asked (once: its id was chosen when proposed).
    pub(crate) fn commit_session(
        &self,
        approval: &airlock_store::Approval,
        plan: &SessionPlan,
        decision: airlock_core::envelope::DecisionInfo,
    ) -> Envelope {
        const METHOD: &str = "host.session.open";
        let owner = Owner {
            key: approval.owner.clone().unwrap_or_default(),
            user: approval.user.clone(),
            agent: approval.agent.clone(),
        };
        let opened = match self.store.session(&plan.session_id) {
            // Opened already (an apply a crash interrupted): as it is.
            Ok(Some(row)) => Ok((
                session_view(&row, &plan.authority),
                Record::new("session_opened").text("session", &row.id),
            )),
            Ok(None) if owner.key.is_empty() => Err(Failure(
                ErrorCode::InvalidInput,
                "the approval has no owner to open the session for".to_owned(),
            )),
            Ok(None) => self.open_planned(plan, &owner),
            Err(error) => Err(from_store(error)),
        };
        match opened {
            Ok((data, record)) => {
                self.log(record);
                let mut envelope = Envelope::new(Status::Allowed, METHOD, &approval.tool, None);
                envelope.data = Some(data);
                envelope.hitl = Some(crate::envelopes::hitl_ref(approval));
                envelope.decision = Some(decision);
                let envelope = self.audited(
                    envelope,
                    Record::for_approval(approval)
                        .event("tool_call_apply")
                        .text("decision", "approve")
                        .text("status", "allowed")
                        .text("session", &plan.session_id),
                );
                self.store_result(
                    &approval.id,
                    airlock_store::ApprovalStatus::Applied,
                    &envelope,
                );
                envelope
            }
            Err(Failure(code, message)) => self.apply_failed(approval, &decision, code, message),
        }
    }

    fn session_list(&self, call: &ToolCall) -> Result<(Value, Record), Failure> {
        let include_ended = match call.args.get("include_ended") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(flag)) => *flag,
            Some(_) => {
                return Err(Failure(
                    ErrorCode::InvalidInput,
                    "include_ended must be a boolean".to_owned(),
                ));
            }
        };
        if let Some(key) = call
            .args
            .as_object()
            .and_then(|args| args.keys().find(|key| *key != "include_ended"))
        {
            return Err(Failure(
                ErrorCode::InvalidInput,
                format!("session_list has no parameter `{key}`"),
            ));
        }
        let sessions = self
            .sessions_of(&call.principal, false, include_ended)
            .map_err(|error| Failure(ErrorCode::IoError, error.to_string()))?;
        let count = sessions.len();
        Ok((
            json!({"sessions": sessions, "count": count}),
            Record::new("tool_call").number("count", count as u64),
        ))
    }

    /// Sessions as `session_list`, `GET /v1/sessions` and `airlock
    /// session list` show them: `principal`'s own, or everyone's when
    /// `all` and it is an admin; open ones only unless `include_ended`.
    pub fn sessions_of(
        &self,
        principal: &Principal,
        all: bool,
        include_ended: bool,
    ) -> Result<Vec<Value>, BrokerError> {
        self.end_overdue_sessions()?;
        let owner = principal.owner_key();
        let owner = if all && principal.admin {
            None
        } else {
            Some(owner.as_str())
        };
        let rows = self.store.sessions(owner, !include_ended, 1000)?;
        Ok(rows
            .iter()
            .map(
                |row| match serde_json::from_str::<Authority>(&row.authority) {
                    Ok(authority) => session_view(row, &authority),
                    Err(_) => json!({"session_id": row.id, "status": row.status.as_str()}),
                },
            )
            .collect())
    }

    /// The session `id` as `principal` may see it (its own; an admin's
    /// any), whatever its status.
    pub fn session_for(&self, principal: &Principal, id: &str) -> Result<Value, BrokerError> {
        self.end_overdue_sessions()?;
        let row = self
            .store
            .session(id)?
            .filter(|row| principal.admin || row.owner == principal.owner_key())
            .ok_or_else(|| {
                BrokerError::refused(
                    ErrorCode::SessionNotFound,
                    format!("no session {id} of yours"),
                )
            })?;
        let authority: Authority = serde_json::from_str(&row.authority)
            .map_err(|error| BrokerError::refused(ErrorCode::IoError, error.to_string()))?;
        Ok(session_view(&row, &authority))
    }

    /// Closes `id` for `principal` (its own; an admin's any): its pending
    /// approvals cancelled, its commands stopped. The closed session.
    pub fn close_session(
        &self,
        principal: &Principal,
        id: &str,
        reason: Option<&str>,
    ) -> Result<Value, BrokerError> {
        let row = self
            .store
            .session(id)?
            .filter(|row| principal.admin || row.owner == principal.owner_key())
            .ok_or_else(|| {
                BrokerError::refused(
                    ErrorCode::SessionNotFound,
                    format!("no open session {id} of yours"),
                )
            })?;
        match row.status {
            SessionStatus::Closed => {
                return Err(BrokerError::refused(
                    ErrorCode::SessionClosed,
                    format!("session {id} is closed already"),
                ));
            }
            SessionStatus::Expired => {
                return Err(BrokerError::refused(
                    ErrorCode::SessionExpired,
                    format!("session {id} expired"),
                ));
            }
            SessionStatus::Open => {}
        }
        let ended = self
            .end_session(&row, SessionStatus::Closed, reason)
            .ok_or_else(|| {
                BrokerError::refused(
                    ErrorCode::SessionClosed,
                    format!("session {id} ended meanwhile"),
                )
            })?;
        let authority: Authority = serde_json::from_str(&ended.authority)
            .map_err(|error| BrokerError::refused(ErrorCode::IoError, error.to_string()))?;
        Ok(session_view(&ended, &authority))
    }

    fn session_close(&self, call: &ToolCall) -> Result<(Value, Record), Failure> {
        let (id, reason) = session_args(call, "reason")?;
        let view = self
            .close_session(&call.principal, &id, reason.as_deref())
            .map_err(|error| Failure(error.code(), error.to_string()))?;
        Ok((view, Record::new("tool_call").text("session", &id)))
    }

    fn session_signal(&self, call: &ToolCall) -> Result<(Value, Record), Failure> {
        let (id, signal) = session_args(call, "signal")?;
        let (number, name) = match signal.as_deref() {
            Some("term") => (15, "term"),
            Some("int") => (2, "int"),
            Some("kill") => (9, "kill"),
            _ => {
                return Err(Failure(
                    ErrorCode::InvalidInput,
                    "signal must be term, int or kill".to_owned(),
                ));
            }
        };
        // The endpoint's bound session is its callers' to signal.
        let trusted = call.sessions.bound.as_deref() == Some(id.as_str());
        self.live_session(&id, &call.principal, call.profile.as_deref(), trusted)?;
        let signalled = match self.sessions.running.lock() {
            Ok(running) => running.get(&id).cloned(),
            Err(_) => None,
        };
        let reached = match signalled {
            Some(cancel) => {
                cancel.signal(number);
                if number == 9
                    && let Ok(mut running) = self.sessions.running.lock()
                {
                    // Killed: later commands get a fresh one.
                    running.remove(&id);
                }
                true
            }
            None => false,
        };
        Ok((
            json!({"session_id": id, "signal": name, "delivered": reached}),
            Record::new("session_signalled")
                .text("session", &id)
                .text("signal", name),
        ))
    }

    /// Ends `row` as `status` (closed or expired): the store's change, its
    /// audit record, its pending approvals cancelled and its commands
    /// killed. `None` when it had ended already.
    pub(crate) fn end_session(
        &self,
        row: &SessionRow,
        status: SessionStatus,
        reason: Option<&str>,
    ) -> Option<SessionRow> {
        let now = self.now_ms();
        let ended = match self.store.end_session(&row.id, status, reason, now) {
            Ok(Some(ended)) => ended,
            Ok(None) => return None,
            Err(error) => {
                eprintln!("airlock: ending session {}: {error}", row.id);
                return None;
            }
        };
        if let Some(cancel) = self.sessions.forget(&row.id) {
            cancel.cancel();
        }
        let event = match status {
            SessionStatus::Expired => "session_expired",
            _ => "session_closed",
        };
        self.log(
            Record::new(event)
                .text("session", &row.id)
                .text("authority_hash", &row.authority_hash)
                .value(
                    "reason",
                    reason.map(|reason| Value::String(reason.to_owned())),
                )
                .value("user", row.user.clone().map(Value::String))
                .value("agent", row.agent.clone().map(Value::String)),
        );
        self.cancel_pending_of(&ended);
        Some(ended)
    }

    /// Ends every open session whose time is up, and lets go of the
    /// sessions another process ended: their commands here are stopped and
    /// their approvals made meanwhile cancelled.
    pub fn end_overdue_sessions(&self) -> Result<usize, BrokerError> {
        let overdue = self.store.overdue_sessions(self.now_ms())?;
        let ended = overdue
            .iter()
            .filter_map(|row| self.end_session(row, SessionStatus::Expired, Some("ttl")))
            .count();
        let mut known: Vec<String> = Vec::new();
        if let Ok(running) = self.sessions.running.lock() {
            known.extend(running.keys().cloned());
        }
        if let Ok(live) = self.sessions.live.lock() {
            known.extend(live.keys().cloned());
        }
        known.sort();
        known.dedup();
        for id in known {
            if let Some(row) = self.store.session(&id)?
                && row.status != SessionStatus::Open
            {
                if let Some(cancel) = self.sessions.forget(&id) {
                    cancel.cancel();
                }
                self.cancel_pending_of(&row);
            }
        }
        Ok(ended)
    }

    /// Cancels every pending approval made in session `row` (ended).
    fn cancel_pending_of(&self, row: &SessionRow) {
        let why = match row.status {
            SessionStatus::Expired => "its session expired: cancelled",
            _ => "its session was closed: cancelled",
        };
        match self.store.pending(Some(&row.id), 0) {
            // Every approval made in it (a bound endpoint's callers' too:
            // the session was checked when each was made).
            Ok(pending) => {
                for approval in &pending {
                    self.cancel_because(&approval.id, why);
                }
            }
            Err(error) => eprintln!(
                "airlock: cancelling the approvals of session {}: {error}",
                row.id
            ),
        }
    }

    /// When the next open session ends by itself, if one is open.
    pub fn next_session_end(&self) -> Result<Option<u64>, BrokerError> {
        Ok(self.store.next_session_end()?)
    }
}

/// `{session_id, <other>?}` of `session_close` / `session_signal`.
fn session_args(call: &ToolCall, other: &str) -> Result<(String, Option<String>), Failure> {
    let Some(args) = call.args.as_object() else {
        return Err(Failure(
            ErrorCode::InvalidInput,
            "arguments must be an object".to_owned(),
        ));
    };
    if let Some(key) = args.keys().find(|key| *key != SESSION_ID && *key != other) {
        return Err(Failure(
            ErrorCode::InvalidInput,
            format!("{} has no parameter `{key}`", call.tool),
        ));
    }
    let Some(id) = args.get(SESSION_ID).and_then(Value::as_str) else {
        return Err(Failure(
            ErrorCode::InvalidInput,
            "session_id (a string) is required".to_owned(),
        ));
    };
    let value = match args.get(other) {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.len() <= 1000 => Some(text.clone()),
        Some(_) => {
            return Err(Failure(
                ErrorCode::InvalidInput,
                format!("{other} must be a string (at most 1000 bytes)"),
            ));
        }
    };
    Ok((id.to_owned(), value))
}

/// The authority as the audit log keeps it: the variables' names, never
/// their values (which may be credentials; the hash covers them).
fn audited_authority(authority: &Authority) -> Value {
    let mut value = serde_json::to_value(authority).unwrap_or(Value::Null);
    value["env"] = json!(authority.env.keys().collect::<Vec<_>>());
    value
}

/// A session as the tools, the API and the CLI show it.
fn session_view(row: &SessionRow, authority: &Authority) -> Value {
    let labels: Value = serde_json::from_str(&row.labels).unwrap_or_else(|_| json!({}));
    json!({
        "session_id": row.id,
        "status": row.status.as_str(),
        "created_ms": row.created_ms,
        "expires_ms": row.expires_ms,
        "expires_at": airlock_audit::rfc3339_millis(row.expires_ms),
        "idle_ttl_ms": row.idle_ttl_ms,
        "last_used_ms": row.last_used_ms,
        "ended_ms": row.ended_ms,
        "end_reason": row.end_reason,
        "user": row.user,
        "agent": row.agent,
        "profile": row.profile,
        "labels": labels,
        "roots": authority.roots,
        "workdir": authority.workdir,
        "env": authority.env.keys().collect::<Vec<_>>(),
        "network": authority.network.to_json(),
        "limits": authority.limits,
        "authority_hash": row.authority_hash,
    })
}

/// The fields of a session tool's own record on top of the call's.
fn record_fields(base: Record, own: Record) -> Record {
    let mut record = base;
    for (key, value) in own.into_map() {
        record = record.value(&key, Some(value));
    }
    record
}
