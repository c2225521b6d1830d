//! The gateway: one workspace's broker, its upstreams, the sessions to notify,
//! and live configuration.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use airlock_broker::{Broker, Workspace};
use airlock_core::{Policy, ToolOrigin};
use rmcp::RoleServer;
use rmcp::model::RequestStateCodec;
use rmcp::service::Peer;

use crate::McpError;
use crate::tools;
use crate::upstream::{UpstreamForwarder, Upstreams};

/// How often the configuration file is looked at.
const RELOAD_POLL: Duration = Duration::from_millis(300);
/// How often approved upstream calls held by this process are looked for.
const HELD_POLL: Duration = Duration::from_millis(100);

/// Reads the configuration again: `Ok(None)` when it did not change,
/// `Ok(Some(workspace))` for a new valid one, `Err(reason)` for an invalid one.
pub type Reloader = Box<dyn FnMut() -> Result<Option<Workspace>, String> + Send>;

/// How the gateway presents its tools.
#[derive(Debug, Clone, Default)]
pub struct GatewayOptions {
    /// `airlock wrap`: only this upstream's tools, under their own names (and
    /// `proposal_status`); no built-in file tools.
    pub wrap: Option<String>,
}

/// One workspace behind MCP.
pub struct Gateway {
    broker: RwLock<Arc<Broker>>,
    pub(crate) upstreams: Arc<Upstreams>,
    pub(crate) codec: RequestStateCodec,
    pub(crate) options: GatewayOptions,
    peers: Arc<Mutex<Vec<Listener>>>,
    runtime: tokio::runtime::Handle,
}

/// A session that hears about changes: `notifications/tools/list_changed`,
/// and log messages at or above the level it asked for.
#[derive(Clone)]
struct Listener {
    peer: Peer<RoleServer>,
    log_level: LogLevel,
}

/// The least severe log message a session wants (`logging/setLevel`); until
/// it says, every message.
#[derive(Clone, Default)]
pub(crate) struct LogLevel(Arc<AtomicU8>);

impl LogLevel {
    #[expect(
        deprecated,
        reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
    )]
    pub(crate) fn set(&self, level: rmcp::model::LoggingLevel) {
        self.0.store(severity(level), Ordering::Relaxed);
    }

    #[expect(
        deprecated,
        reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
    )]
    fn allows(&self, level: rmcp::model::LoggingLevel) -> bool {
        severity(level) >= self.0.load(Ordering::Relaxed)
    }
}

/// The levels of RFC 5424, least severe first.
#[expect(
    deprecated,
    reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
)]
fn severity(level: rmcp::model::LoggingLevel) -> u8 {
    use rmcp::model::LoggingLevel;
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// A log message for the sessions (`notifications/message`).
#[expect(
    deprecated,
    reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
)]
struct LogMessage {
    level: rmcp::model::LoggingLevel,
    text: String,
}

impl Gateway {
    /// Opens the broker, starts the upstreams and the background work (held
    /// upstream calls). Must run inside a multi-threaded tokio runtime.
    pub async fn start(
        workspace: Workspace,
        options: GatewayOptions,
    ) -> Result<Arc<Gateway>, McpError> {
        let runtime = tokio::runtime::Handle::current();
        let root = workspace.root.clone();
        let configs = workspace.loaded.config.upstreams.clone();
        let peers: Arc<Mutex<Vec<Listener>>> = Arc::new(Mutex::new(Vec::new()));
        let notify_peers = peers.clone();
        let on_change = Arc::new(move || notify_listeners(&notify_peers, None, true));
        let upstreams = Arc::new(Upstreams::new(root, on_change));
        let forwarder = Arc::new(UpstreamForwarder {
            upstreams: upstreams.clone(),
            runtime: runtime.clone(),
        });
        let broker = tokio::task::spawn_blocking(move || Broker::open(workspace))
            .await
            .map_err(|error| McpError::Protocol(error.to_string()))??
            .with_forwarder(forwarder.clone());
        let key = broker.state_secret("mcp-request-state.key")?;
        let codec = RequestStateCodec::try_new(key)
            .map_err(|error| McpError::Protocol(error.to_string()))?;
        let gateway = Arc::new(Gateway {
            broker: RwLock::new(Arc::new(broker)),
            upstreams: upstreams.clone(),
            codec,
            options,
            peers,
            runtime,
        });
        if let Some(name) = &gateway.options.wrap
            && !configs.iter().any(|config| config.name == *name)
        {
            return Err(McpError::Upstream {
                name: name.clone(),
                message: "no such upstream to wrap".to_owned(),
            });
        }
        for (name, message) in upstreams.reconcile(&configs).await {
            if gateway.options.wrap.as_deref() == Some(name.as_str()) {
                // The one server `wrap` stands for must be there.
                upstreams.stop_all().await;
                return Err(McpError::Upstream { name, message });
            }
        }
        if !configs.is_empty() {
            let held = gateway.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(HELD_POLL).await;
                    let broker = held.broker();
                    let _ = tokio::task::spawn_blocking(move || broker.apply_held_forwards()).await;
                }
            });
        }
        Ok(gateway)
    }

    /// The broker in force (a reload swaps it; calls in flight keep theirs).
    pub fn broker(&self) -> Arc<Broker> {
        match self.broker.read() {
            Ok(broker) => broker.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Remembers a session so it hears `notifications/tools/list_changed`
    /// and the log messages `log_level` lets through.
    pub(crate) fn register_peer(&self, peer: Peer<RoleServer>, log_level: LogLevel) {
        if let Ok(mut peers) = self.peers.lock() {
            peers.retain(|listener| !listener.peer.is_transport_closed());
            peers.push(Listener { peer, log_level });
        }
    }

    /// Watches the configuration: a valid change is taken into use (a new
    /// broker, upstreams reconciled, sessions told their tool lists changed);
    /// an invalid one is logged and audited as `config_rejected`, and the old
    /// one stays.
    pub fn watch_config(self: &Arc<Self>, mut reloader: Reloader) {
        let gateway = self.clone();
        self.runtime.spawn(async move {
            loop {
                tokio::time::sleep(RELOAD_POLL).await;
                let (next, reloader_back) =
                    match tokio::task::spawn_blocking(move || (reloader(), reloader)).await {
                        Ok(pair) => pair,
                        Err(_) => return,
                    };
                reloader = reloader_back;
                match next {
                    Ok(None) => {}
                    Ok(Some(workspace)) => gateway.take(workspace).await,
                    Err(reason) => gateway.reject(reason).await,
                }
            }
        });
    }

    async fn take(&self, workspace: Workspace) {
        let configs = workspace.loaded.config.upstreams.clone();
        let forwarder = Arc::new(UpstreamForwarder {
            upstreams: self.upstreams.clone(),
            runtime: self.runtime.clone(),
        });
        let opened = tokio::task::spawn_blocking(move || Broker::open(workspace)).await;
        match opened {
            Ok(Ok(broker)) => {
                let broker = Arc::new(broker.with_forwarder(forwarder));
                if let Ok(mut slot) = self.broker.write() {
                    *slot = broker;
                }
                eprintln!("airlock: configuration reloaded");
                self.upstreams.reconcile(&configs).await;
                notify_listeners(&self.peers, Some(notice("configuration reloaded")), true);
            }
            Ok(Err(error)) => self.reject(error.to_string()).await,
            Err(_) => {}
        }
    }

    /// A configuration that cannot be used: logged (to stderr and the
    /// sessions), audited as `config_rejected`; the old one stays.
    async fn reject(&self, reason: String) {
        let text = format!("configuration rejected, the old one stays: {reason}");
        eprintln!("airlock: {text}");
        notify_listeners(&self.peers, Some(warning(text)), false);
        let broker = self.broker();
        let _ = tokio::task::spawn_blocking(move || {
            broker.note_config_rejected("airlock.yaml", &reason)
        })
        .await;
    }

    /// Stops the upstream servers.
    pub async fn shutdown(&self) {
        self.upstreams.stop_all().await;
    }

    /// The name the policy sees for the tool a client calls `name`, and
    /// where the tool comes from (an upstream's, a built-in, or unknown).
    pub fn resolve(&self, name: &str) -> (String, ToolOrigin) {
        let policy = self.compiled_policy();
        if let Some(wrap) = self.options.wrap.as_deref() {
            let upstream_has = |tool: &str| {
                self.upstreams.get(wrap).and_then(|upstream| {
                    upstream
                        .tools()
                        .iter()
                        .find(|listed| listed.name == tool)
                        .cloned()
                })
            };
            if name == "proposal_status" && upstream_has(name).is_none() {
                return (name.to_owned(), policy.origin_of(name, None));
            }
            let gated = format!("{wrap}__{name}");
            return match upstream_has(name) {
                Some(tool) => {
                    let origin = policy.origin_of(&gated, tools::annotations_of(&tool));
                    (gated, origin)
                }
                None => (gated, ToolOrigin::Unknown),
            };
        }
        if let Some((prefix, rest)) = name.split_once("__") {
            let tool = self
                .upstreams
                .get(prefix)
                .and_then(|upstream| upstream.tools().iter().find(|t| t.name == rest).cloned());
            return match tool {
                Some(tool) => (
                    name.to_owned(),
                    policy.origin_of(name, tools::annotations_of(&tool)),
                ),
                // Not (or no longer) offered by that upstream: never forwarded.
                None => (name.to_owned(), ToolOrigin::Unknown),
            };
        }
        (name.to_owned(), policy.origin_of(name, None))
    }

    pub(crate) fn compiled_policy(&self) -> PolicyRef {
        PolicyRef(self.broker())
    }
}

/// The policy of the broker in force, kept alive while it is used.
pub(crate) struct PolicyRef(Arc<Broker>);

impl std::ops::Deref for PolicyRef {
    type Target = Policy;
    fn deref(&self) -> &Policy {
        self.0.policy()
    }
}

#[expect(
    deprecated,
    reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
)]
fn notice(text: &str) -> LogMessage {
    LogMessage {
        level: rmcp::model::LoggingLevel::Notice,
        text: text.to_owned(),
    }
}

#[expect(
    deprecated,
    reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
)]
fn warning(text: String) -> LogMessage {
    LogMessage {
        level: rmcp::model::LoggingLevel::Warning,
        text,
    }
}

/// Sends `log` to the sessions whose level lets it through, then (where
/// `tools_changed`) tells every session that its tool list may have
/// changed: in that order, so a client that has seen the change has seen the
/// message too.
#[expect(
    deprecated,
    reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
)]
fn notify_listeners(peers: &Mutex<Vec<Listener>>, log: Option<LogMessage>, tools_changed: bool) {
    let listeners = match peers.lock() {
        Ok(mut peers) => {
            peers.retain(|listener| !listener.peer.is_transport_closed());
            peers.clone()
        }
        Err(_) => return,
    };
    for listener in listeners {
        let message = log
            .as_ref()
            .filter(|log| listener.log_level.allows(log.level))
            .map(|log| {
                let mut param = rmcp::model::LoggingMessageNotificationParam::new(
                    log.level,
                    serde_json::Value::String(log.text.clone()),
                );
                param.logger = Some("airlock".to_owned());
                param
            });
        tokio::spawn(async move {
            if let Some(message) = message {
                let _ = listener.peer.notify_logging_message(message).await;
            }
            if tools_changed {
                let _ = listener.peer.notify_tool_list_changed().await;
            }
        });
    }
}
