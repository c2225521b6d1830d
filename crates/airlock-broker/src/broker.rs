//! The broker of one workspace: what it holds, opening it, its state secrets
//! and accessors.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_audit::{AuditLog, Durability};
use airlock_core::config::{Config, LoadedConfig};
use airlock_core::{ErrorCode, Policy};
use airlock_fs::Sandbox;
use airlock_store::{Approval, Store};
use serde_json::Value;

use crate::clock::{Clock, SystemClock};
use crate::error::BrokerError;
use crate::forward::Forwarder;
use crate::record::Record;

/// Where the broker lives.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Canonical sandbox root.
    pub root: PathBuf,
    /// The configuration, validated, its policy bound to `root`.
    pub loaded: LoadedConfig,
    /// The store, opened once per process by whoever can (the CLI opens a
    /// shared PostgreSQL store, `store.url`); `None`: the SQLite file in
    /// the state dir, opened here.
    pub store: Option<Arc<Store>>,
}

impl Workspace {
    /// The workspace at `root` with `loaded`, on the SQLite store of its
    /// state dir.
    pub fn new(root: PathBuf, loaded: LoadedConfig) -> Workspace {
        Workspace {
            root,
            loaded,
            store: None,
        }
    }

    /// The store this workspace's state is in: the one given, or the
    /// SQLite file of the state dir (created if needed). A configuration
    /// naming a shared store that was not given is refused, never taken for
    /// SQLite.
    pub fn open_store(&self) -> Result<Arc<Store>, BrokerError> {
        if let Some(store) = &self.store {
            return Ok(Arc::clone(store));
        }
        refuse_unopened_shared_store(&self.loaded.config)?;
        let state_dir = self.root.join(&self.loaded.config.workspace.state_dir);
        Ok(Arc::new(Store::open(&state_dir.join("airlock.db"))?))
    }
}

/// A configuration whose `store.url` names a shared store must be given
/// that store: its state is never looked for in the SQLite file.
pub(crate) fn refuse_unopened_shared_store(config: &Config) -> Result<(), BrokerError> {
    if config.store.url.is_some() {
        return Err(BrokerError::refused(
            ErrorCode::InvalidInput,
            "store.url names a PostgreSQL store, which was not opened here",
        ));
    }
    Ok(())
}

/// The pipeline of one workspace.
pub struct Broker {
    pub(crate) config: Config,
    pub(crate) policy: Arc<Policy>,
    pub(crate) sandbox: Sandbox,
    pub(crate) store: Arc<Store>,
    pub(crate) audit: AuditLog,
    /// The audit log's signed checkpoints.
    pub(crate) checkpoints: crate::Checkpoints,
    pub(crate) root: PathBuf,
    /// Where multi-file applies keep their journal and the apply lock.
    pub(crate) journal_dir: PathBuf,
    /// Carries approved upstream calls out (only in a process holding the
    /// upstream connections).
    pub(crate) forwarder: Option<Arc<dyn Forwarder>>,
    /// The upstreams' tools, to name and list them (code mode).
    pub(crate) upstreams: Option<Arc<dyn crate::runtime::Upstreams>>,
    /// Code mode's engine, when one is registered.
    pub(crate) code_mode: Option<Arc<dyn crate::code::CodeMode>>,
    /// Where the time comes from.
    pub(crate) clock: Arc<dyn Clock>,
    /// Open sessions' parsed authority and running commands.
    pub(crate) sessions: crate::sessions::Sessions,
}

pub(crate) struct HeadInStore(Arc<Store>);

impl airlock_audit::HeadStore for HeadInStore {
    fn load_head(&self) -> Result<Option<airlock_audit::Head>, airlock_audit::HeadStoreError> {
        self.0
            .audit_head()
            .map(|head| head.map(|(seq, event_hash)| airlock_audit::Head { seq, event_hash }))
            .map_err(airlock_audit::HeadStoreError::new)
    }

    fn save_head(&self, head: &airlock_audit::Head) -> Result<(), airlock_audit::HeadStoreError> {
        self.0
            .save_audit_head(head.seq, &head.event_hash)
            .map_err(airlock_audit::HeadStoreError::new)
    }
}

impl Broker {
    /// Opens the workspace's state: the store, the audit log (recovering a torn
    /// tail), and finishes applies a crash interrupted.
    pub fn open(workspace: Workspace) -> Result<Broker, BrokerError> {
        Broker::open_with_clock(workspace, Arc::new(SystemClock))
    }

    /// [`Broker::open`] with time read from `clock`.
    pub fn open_with_clock(
        workspace: Workspace,
        clock: Arc<dyn Clock>,
    ) -> Result<Broker, BrokerError> {
        let config = workspace.loaded.config.clone();
        let state_dir = workspace.root.join(&config.workspace.state_dir);
        std::fs::create_dir_all(&state_dir).map_err(|error| {
            BrokerError::refused(
                ErrorCode::IoError,
                format!("cannot create {}: {error}", state_dir.display()),
            )
        })?;
        let store = workspace.open_store()?;
        let policy = Arc::new(workspace.loaded.policy);
        let root = workspace.root;
        let key = config
            .audit
            .hmac_key_env
            .as_deref()
            .and_then(|name| std::env::var(name).ok())
            .filter(|key| !key.is_empty())
            .map(String::into_bytes);
        // One chain for every instance of a shared store, in it; else the
        // JSONL file, with its head mirrored in the store.
        let (audit, recovery) = if store.is_shared() {
            let chain = Arc::new(crate::audit_source::ChainInStore(store.clone()));
            (
                AuditLog::open_chain(chain, key)?,
                airlock_audit::Recovery::default(),
            )
        } else {
            let audit_path = root.join(&config.audit.path);
            AuditLog::open(&audit_path, key, Some(Arc::new(HeadInStore(store.clone()))))?
        };
        let sandbox = Sandbox::open(&root, &config.file_broker, policy.clone())?
            .with_blob_dir(state_dir.join("blobs"));
        let journal_dir = state_dir.join("journal");
        // Traces and logs are recorded while an OTLP endpoint is configured.
        crate::telemetry::enable(config.telemetry.otlp.endpoint.is_some());
        let checkpoints = crate::Checkpoints::of(&root, &config, store.clone());
        // The instance's checkpoint key is made at its first start.
        checkpoints.ensure_key()?;
        let broker = Broker {
            checkpoints,
            config,
            policy,
            sandbox,
            store,
            audit,
            root,
            journal_dir,
            forwarder: None,
            upstreams: None,
            code_mode: None,
            clock,
            sessions: crate::sessions::Sessions::default(),
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

    /// The store this broker keeps its state in (a reload hands it on).
    pub fn store_handle(&self) -> Arc<Store> {
        Arc::clone(&self.store)
    }

    /// Lets this broker carry out upstream tool calls through `forwarder`.
    pub fn with_forwarder(mut self, forwarder: Arc<dyn Forwarder>) -> Broker {
        self.forwarder = Some(forwarder);
        self
    }

    /// Records that a new configuration was refused and the one in force stays.
    pub fn note_config_rejected(&self, source: &str, message: &str) -> Result<(), BrokerError> {
        self.note_config_refused(message)?;
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
        Ok(self.store.spend_token(token, expires_ms, self.now_ms())?)
    }

    /// Milliseconds since the Unix epoch, by this broker's clock.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// This broker's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `tls.ca_file`, resolved against the workspace root: what every
    /// outbound TLS connection trusts beside the platform's roots.
    pub fn ca_file(&self) -> Option<PathBuf> {
        let ca_file = self.config.tls.ca_file.as_deref()?;
        Some(self.root.join(ca_file))
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

    /// Where this broker's audit chain is read from (the file, or the
    /// shared store).
    pub fn audit_source(&self) -> crate::AuditSource<'_> {
        crate::AuditSource::of(&self.root, &self.config, Some(&self.store))
    }

    /// The audit chain head as the store last saw it.
    pub fn stored_audit_head(&self) -> Result<Option<airlock_audit::Head>, BrokerError> {
        Ok(self
            .store
            .audit_head()?
            .map(|(seq, event_hash)| airlock_audit::Head { seq, event_hash }))
    }

    /// How many records the audit chain holds (its head's seq).
    pub fn audit_records(&self) -> Result<u64, BrokerError> {
        let head = if self.store.is_shared() {
            self.store.audit_chain_head()?
        } else {
            self.store.audit_head()?
        };
        Ok(head.map_or(0, |(seq, _)| seq))
    }

    /// Syncs audit records of reads and denials still waiting for their
    /// background sync; call it before the process exits.
    pub fn flush_audit(&self) {
        self.audit.flush();
    }

    /// Records `config_loaded` when the configuration differs from the last one
    /// this workspace ran with.
    pub(crate) fn note_config(&self) -> Result<(), BrokerError> {
        let text = serde_json::to_string(&self.config).unwrap_or_default();
        let hash = airlock_core::canonical::sha256_hex(text.as_bytes());
        if self.store.get_kv("config_hash")?.as_deref() != Some(hash.as_str()) {
            // Remembered only once recorded, so a configuration the log
            // never saw is recorded at the next start.
            if self
                .log(Record::new("config_loaded").text("config_hash", &hash))
                .is_none()
            {
                return Err(BrokerError::refused(
                    ErrorCode::IoError,
                    "the audit log could not record the configuration in force",
                ));
            }
            self.store.set_kv("config_hash", &hash)?;
        }
        Ok(())
    }

    /// Pending approvals, oldest first (expiring overdue ones first).
    pub fn pending(&self, session: Option<&str>) -> Result<Vec<Approval>, BrokerError> {
        self.expire_overdue()?;
        Ok(self.store.pending(session, self.now_ms())?)
    }

    /// One approval.
    pub fn approval(&self, id: &str) -> Result<Approval, BrokerError> {
        Ok(self.store.get(id)?)
    }

    /// The approval id `given` names, as git reads a short hash: the id
    /// itself, or the one id it is a prefix of (with or without `hitl-`, at
    /// least 4 characters after it). An unknown id is `not_found` with the
    /// nearest known one ("did you mean"); a prefix of several is
    /// `invalid_input` naming them.
    pub fn resolve_id(&self, given: &str) -> Result<String, BrokerError> {
        const PREFIX: &str = "hitl-";
        if self.store.get(given).is_ok() {
            return Ok(given.to_owned());
        }
        let full = if given.starts_with(PREFIX) {
            given.to_owned()
        } else {
            format!("{PREFIX}{given}")
        };
        let short = full.len() < PREFIX.len() + 4;
        let matches = if short {
            Vec::new()
        } else {
            self.store.ids_starting_with(&full, 5)?
        };
        match matches.as_slice() {
            [one] => Ok(one.clone()),
            [] => {
                let recent = self.store.recent_ids(1000)?;
                let hint = airlock_core::suggest::nearest(given, recent.iter().map(String::as_str))
                    .map(|id| format!("; did you mean {id}?"))
                    .unwrap_or_else(|| {
                        if short && !given.is_empty() {
                            "; give at least 4 characters after hitl-".to_owned()
                        } else {
                            "; `airlock pending` and `airlock history` list the ids".to_owned()
                        }
                    });
                Err(BrokerError::refused(
                    ErrorCode::NotFound,
                    format!("no approval {given}{hint}"),
                ))
            }
            several => Err(BrokerError::refused(
                ErrorCode::InvalidInput,
                format!(
                    "{given} is ambiguous: it starts {}{}",
                    several[..several.len().min(4)].join(", "),
                    if several.len() > 4 { ", …" } else { "" }
                ),
            )),
        }
    }

    /// Settled approvals created at or after `since_ms`, newest first (at
    /// most `limit`).
    pub fn history(&self, since_ms: u64, limit: usize) -> Result<Vec<Approval>, BrokerError> {
        Ok(self.store.history(since_ms, limit)?)
    }
}
