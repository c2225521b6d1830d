//! The runtime of a long-running airlock (`serve`, `wrap`): the broker in
//! force, swapped when `airlock.yaml` changes; the upstream MCP servers,
//! kept in line with the configuration; the approved upstream calls this
//! process holds, carried out when a decision taken elsewhere arrives.
//!
//! The faces (MCP, HTTP) share one runtime. The upstream connections are
//! made by the face that speaks MCP, behind the [`Upstreams`] trait, so the
//! broker knows no protocol.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use airlock_core::config::UpstreamConfig;
use airlock_core::{Policy, ToolAnnotations, ToolOrigin};

use crate::broker::{Broker, Workspace};
use crate::clock::{Clock, SystemClock};
use crate::error::BrokerError;
use crate::forward::{ForwardError, Forwarder};

/// How often the configuration file is looked at.
const RELOAD_POLL: Duration = Duration::from_millis(300);

/// The upstream MCP servers of a workspace, connected by the MCP face.
/// Every method may block (the runtime calls them from its own threads or
/// a blocking task, never from an async worker).
pub trait Upstreams: Forwarder {
    /// Starts, restarts and stops servers so that they match `configs`;
    /// returns the ones that could not start, with why. `ca_file` is
    /// `tls.ca_file` resolved against the workspace root.
    fn reconcile(
        &self,
        configs: &[UpstreamConfig],
        ca_file: Option<&Path>,
    ) -> Vec<(String, String)>;
    /// The tool `tool` of upstream `upstream` as it is offered now; `None`
    /// when that upstream does not offer it (or does not exist).
    fn find_tool(&self, upstream: &str, tool: &str) -> Option<UpstreamTool>;
    /// The names of the tools `upstream` offers now.
    fn tool_names(&self, upstream: &str) -> Vec<String>;
    /// Every tool of every upstream as offered now: the upstream's name,
    /// the tool's own name, and what is known of it.
    fn all_tools(&self) -> Vec<(String, String, UpstreamTool)> {
        Vec::new()
    }
    /// Stops every server.
    fn stop_all(&self);
}

/// What the runtime knows of one upstream tool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpstreamTool {
    /// The tool's own hints (`readOnlyHint`, …), if it gave any.
    pub annotations: Option<ToolAnnotations>,
    pub description: Option<String>,
    /// The JSON Schema of its arguments.
    pub input_schema: Option<serde_json::Value>,
    /// The JSON Schema of its structured result, if it declares one.
    pub output_schema: Option<serde_json::Value>,
}

/// A runtime without upstream servers (a configuration with none, tests).
#[derive(Debug, Default)]
pub struct NoUpstreams;

impl Forwarder for NoUpstreams {
    fn forward(
        &self,
        call: &airlock_core::UpstreamCall,
    ) -> Result<serde_json::Value, ForwardError> {
        Err(ForwardError::NoSuchUpstream(call.upstream.clone()))
    }
}

impl Upstreams for NoUpstreams {
    fn reconcile(
        &self,
        configs: &[UpstreamConfig],
        _ca_file: Option<&Path>,
    ) -> Vec<(String, String)> {
        configs
            .iter()
            .map(|config| {
                (
                    config.name.clone(),
                    "no upstream connections here".to_owned(),
                )
            })
            .collect()
    }

    fn find_tool(&self, _upstream: &str, _tool: &str) -> Option<UpstreamTool> {
        None
    }

    fn tool_names(&self, _upstream: &str) -> Vec<String> {
        Vec::new()
    }

    fn stop_all(&self) {}
}

/// How the tools are presented, and where time comes from.
#[derive(Clone, Default)]
pub struct RuntimeOptions {
    /// `airlock wrap`: only this upstream's tools, under their own names (and
    /// `proposal_status`); no built-in file tools.
    pub wrap: Option<String>,
    /// The clock of every broker the runtime opens (default: the system's).
    pub clock: Option<Arc<dyn Clock>>,
    /// Code mode's engine, registered with every broker the runtime opens.
    pub code_mode: Option<Arc<dyn crate::code::CodeMode>>,
}

impl std::fmt::Debug for RuntimeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeOptions")
            .field("wrap", &self.wrap)
            .field("clock", &self.clock)
            .field("code_mode", &self.code_mode.is_some())
            .finish()
    }
}

/// Reads the configuration again: `Ok(None)` when it did not change,
/// `Ok(Some(workspace))` for a new valid one, `Err` for one that cannot be
/// used.
pub type Reloader = Box<dyn FnMut() -> Result<Option<Workspace>, ConfigRefused> + Send>;

/// Why a changed configuration cannot be used: its validation's words (key
/// path and line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigRefused(pub String);

/// What the runtime tells the faces about the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A new configuration is in force (tool lists may have changed).
    Reloaded,
    /// A new configuration was refused; the old one stays. The reason.
    Rejected(String),
}

type Listener = Box<dyn Fn(&Notice) + Send + Sync>;

/// One workspace, served.
pub struct Runtime {
    broker: RwLock<Arc<Broker>>,
    upstreams: Arc<dyn Upstreams>,
    options: RuntimeOptions,
    clock: Arc<dyn Clock>,
    listeners: Mutex<Vec<Listener>>,
    stopped: AtomicBool,
}

impl Runtime {
    /// Opens the broker and starts the upstreams (and, where there are any,
    /// the carrying out of held upstream calls). Blocks: call it from a
    /// thread that may (not an async worker).
    pub fn start(
        workspace: Workspace,
        options: RuntimeOptions,
        upstreams: Arc<dyn Upstreams>,
    ) -> Result<Arc<Runtime>, BrokerError> {
        let configs = workspace.loaded.config.upstreams.clone();
        let ca_file = ca_file_of(&workspace);
        if let Some(name) = &options.wrap
            && !configs.iter().any(|config| config.name == *name)
        {
            return Err(BrokerError::Upstream {
                name: name.clone(),
                message: "no such upstream to wrap".to_owned(),
            });
        }
        let clock = options
            .clock
            .clone()
            .unwrap_or_else(|| Arc::new(SystemClock));
        let broker = attach(
            Broker::open_with_clock(workspace, clock.clone())?,
            &upstreams,
            &options,
        );
        let runtime = Arc::new(Runtime {
            clock,
            broker: RwLock::new(Arc::new(broker)),
            upstreams,
            options,
            listeners: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
        });
        for (name, message) in runtime.upstreams.reconcile(&configs, ca_file.as_deref()) {
            if runtime.options.wrap.as_deref() == Some(name.as_str()) {
                // The one server `wrap` stands for must be there.
                runtime.upstreams.stop_all();
                return Err(BrokerError::Upstream { name, message });
            }
        }
        // An unprefixed upstream may not take a name of airlock's own.
        if runtime.options.wrap.is_none()
            && let Some(unprefixed) = UpstreamConfig::unprefixed(&configs)
            && let Some(taken) = runtime
                .upstreams
                .tool_names(&unprefixed.name)
                .into_iter()
                .find(|tool| !offered_unprefixed(tool))
        {
            runtime.upstreams.stop_all();
            return Err(BrokerError::Upstream {
                name: unprefixed.name.clone(),
                message: format!(
                    "it offers {taken}, a name airlock's own tools have or that reads as \
                     <upstream>__<tool>: it cannot be offered unprefixed (prefix: false)"
                ),
            });
        }
        sweep(Arc::downgrade(&runtime))?;
        Ok(runtime)
    }

    /// The broker in force (a reload swaps it; calls in flight keep theirs).
    pub fn broker(&self) -> Arc<Broker> {
        match self.broker.read() {
            Ok(broker) => broker.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// How the tools are presented.
    pub fn options(&self) -> &RuntimeOptions {
        &self.options
    }

    /// Calls `listener` with every notice from now on.
    pub fn subscribe(&self, listener: impl Fn(&Notice) + Send + Sync + 'static) {
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.push(Box::new(listener));
        }
    }

    fn tell(&self, notice: &Notice) {
        if let Ok(listeners) = self.listeners.lock() {
            for listener in listeners.iter() {
                listener(notice);
            }
        }
    }

    /// Watches the configuration: a valid change is taken into use (a new
    /// broker, upstreams reconciled, the faces told); an invalid one is
    /// logged and audited as `config_rejected`, and the old one stays.
    pub fn watch_config(self: &Arc<Self>, mut reloader: Reloader) -> Result<(), BrokerError> {
        spawn_loop(
            "airlock-reload",
            RELOAD_POLL,
            Arc::downgrade(self),
            move |runtime| match reloader() {
                Ok(None) => {}
                Ok(Some(workspace)) => runtime.take(workspace),
                Err(ConfigRefused(reason)) => runtime.reject(reason),
            },
        )
    }

    fn take(&self, workspace: Workspace) {
        let configs = workspace.loaded.config.upstreams.clone();
        let ca_file = ca_file_of(&workspace);
        match Broker::open_with_clock(workspace, self.clock.clone()) {
            Ok(broker) => {
                let mut broker = attach(broker, &self.upstreams, &self.options);
                // The commands sessions run outlive a reload.
                broker.keep_sessions_of(&self.broker());
                let broker = Arc::new(broker);
                if let Ok(mut slot) = self.broker.write() {
                    *slot = broker;
                }
                eprintln!("airlock: configuration reloaded");
                self.upstreams.reconcile(&configs, ca_file.as_deref());
                if let Err(error) = self.broker().note_config_reloaded() {
                    eprintln!("airlock: {error}");
                }
                self.tell(&Notice::Reloaded);
            }
            Err(error) => self.reject(error.to_string()),
        }
    }

    /// A configuration that cannot be used: logged (to stderr and the
    /// faces), audited as `config_rejected`; the old one stays.
    fn reject(&self, reason: String) {
        eprintln!("airlock: configuration rejected, the old one stays: {reason}");
        self.tell(&Notice::Rejected(reason.clone()));
        if let Err(error) = self.broker().note_config_rejected("airlock.yaml", &reason) {
            eprintln!("airlock: {error}");
        }
    }

    /// Stops the background work and the upstream servers. Blocks.
    pub fn shutdown(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.upstreams.stop_all();
    }

    /// The name the policy sees for the tool a client calls `name`, and
    /// where the tool comes from (an upstream's, a built-in, or unknown).
    pub fn resolve(&self, name: &str) -> (String, ToolOrigin) {
        let broker = self.broker();
        let policy: &Policy = broker.policy();
        if let Some(wrap) = self.options.wrap.as_deref() {
            let offered = |tool: &str| self.upstreams.find_tool(wrap, tool);
            if name == "proposal_status" && offered(name).is_none() {
                return (name.to_owned(), policy.origin_of(name, None));
            }
            let gated = format!("{wrap}__{name}");
            return match offered(name) {
                Some(tool) => {
                    let origin = policy.origin_of(&gated, tool.annotations);
                    (gated, origin)
                }
                None => (gated, ToolOrigin::Unknown),
            };
        }
        if offered_unprefixed(name)
            && let Some(unprefixed) = UpstreamConfig::unprefixed(&broker.config().upstreams)
            && let Some(tool) = self.upstreams.find_tool(&unprefixed.name, name)
        {
            let gated = format!("{}__{name}", unprefixed.name);
            let origin = policy.origin_of(&gated, tool.annotations);
            return (gated, origin);
        }
        if let Some((prefix, rest)) = name.split_once("__") {
            return match self.upstreams.find_tool(prefix, rest) {
                Some(tool) => (name.to_owned(), policy.origin_of(name, tool.annotations)),
                // Not (or no longer) offered by that upstream: never forwarded.
                None => (name.to_owned(), ToolOrigin::Unknown),
            };
        }
        (name.to_owned(), policy.origin_of(name, None))
    }
}

/// Expires approvals when their time is up, cancels those whose waiting
/// process is gone, and carries out the upstream calls this process holds
/// once they are approved elsewhere: woken by the feed and by the next
/// deadline, on a thread of its own while the runtime lives.
fn sweep(runtime: Weak<Runtime>) -> Result<(), BrokerError> {
    let mut last_recovery = std::time::Instant::now();
    // No pause between steps: each parks on the feed until there is work.
    spawn_loop("airlock-sweep", Duration::ZERO, runtime, move |runtime| {
        let broker = runtime.broker();
        let Ok(cursor) = broker.cursor() else {
            std::thread::sleep(crate::FEED_POLL);
            return;
        };
        if let Err(error) = broker.expire_overdue() {
            eprintln!("airlock: expiring approvals: {error}");
        }
        if let Err(error) = broker.end_overdue_sessions() {
            eprintln!("airlock: ending sessions: {error}");
        }
        // With a shared store, an instance that stopped mid-apply leaves a
        // claim no waiting call of this process may be watching: once its
        // lease has run out, one of the others finishes it.
        if let Some(lease) = broker.store_handle().lease()
            && last_recovery.elapsed() >= lease / 4
        {
            last_recovery = std::time::Instant::now();
            if let Err(error) = broker.recover_applies() {
                eprintln!("airlock: recovering applies: {error}");
            }
        }
        broker.apply_held_forwards();
        // A deadline already past (an approval that could not be expired)
        // would spin: look again after the usual pause.
        let now = broker.now_ms();
        let next = [broker.next_expiry(), broker.next_session_end()]
            .into_iter()
            .filter_map(|at| at.ok().flatten())
            .filter(|at| *at > now)
            .min();
        broker.park(cursor, next);
    })
}

/// Runs `step` every `every` on a thread of its own while the runtime lives
/// and is not shut down.
fn spawn_loop(
    name: &str,
    every: Duration,
    runtime: Weak<Runtime>,
    mut step: impl FnMut(&Runtime) + Send + 'static,
) -> Result<(), BrokerError> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(every);
                let Some(runtime) = runtime.upgrade() else {
                    return;
                };
                if runtime.stopped.load(Ordering::Relaxed) {
                    return;
                }
                step(&runtime);
            }
        })
        .map(|_| ())
        .map_err(|error| {
            BrokerError::refused(
                airlock_core::ErrorCode::IoError,
                format!("cannot start a thread: {error}"),
            )
        })
}

/// A broker the runtime opened, with its upstreams and (where one is
/// registered) code mode's engine.
fn attach(broker: Broker, upstreams: &Arc<dyn Upstreams>, options: &RuntimeOptions) -> Broker {
    let broker = broker.with_upstreams(upstreams.clone());
    match &options.code_mode {
        Some(code) => broker.with_code_mode(code.clone()),
        None => broker,
    }
}

/// `tls.ca_file` of `workspace`, resolved against its root.
fn ca_file_of(workspace: &Workspace) -> Option<PathBuf> {
    let ca_file = workspace.loaded.config.tls.ca_file.as_deref()?;
    Some(workspace.root.join(ca_file))
}

/// Whether an upstream tool may be offered under its own name beside
/// airlock's: not one of airlock's own tools, and not a name that reads as
/// `<upstream>__<tool>`.
pub fn offered_unprefixed(tool: &str) -> bool {
    airlock_core::tools::BuiltinTool::from_name(tool).is_none() && !tool.contains("__")
}
