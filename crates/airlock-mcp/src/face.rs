//! The MCP face of one workspace: the runtime it serves, the upstream
//! connections it made for that runtime, the sessions to tell about changes,
//! and the key that seals `requestState`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use airlock_broker::{Broker, Notice, Runtime, RuntimeOptions, Workspace};
use rmcp::RoleServer;
use rmcp::model::RequestStateCodec;
use rmcp::service::Peer;

use crate::McpError;
use crate::upstream::{UpstreamPool, Upstreams};

/// The MCP face of one workspace.
pub struct McpFace {
    runtime: Arc<Runtime>,
    pub(crate) upstreams: Arc<Upstreams>,
    pub(crate) codec: RequestStateCodec,
    peers: Arc<Mutex<Vec<Listener>>>,
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

impl McpFace {
    /// Starts the runtime of `workspace` with upstream connections made by
    /// this face, and the face on it. Must run inside a multi-threaded tokio
    /// runtime.
    pub async fn start(
        workspace: Workspace,
        options: RuntimeOptions,
    ) -> Result<Arc<McpFace>, McpError> {
        let handle = tokio::runtime::Handle::current();
        let peers: Arc<Mutex<Vec<Listener>>> = Arc::new(Mutex::new(Vec::new()));
        let notify_peers = peers.clone();
        let notify_handle = handle.clone();
        let on_change = Arc::new(move || {
            notify_listeners(&notify_handle, &notify_peers, None, true);
        });
        // An upstream's log messages go to the sessions that want them,
        // its logger named after it unless this is a wrap.
        let log_peers = peers.clone();
        let log_handle = handle.clone();
        let wrapped = options.wrap.is_some();
        #[expect(
            deprecated,
            reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
        )]
        let on_log = Arc::new(
            move |upstream: &str, param: rmcp::model::LoggingMessageNotificationParam| {
                forward_log(&log_handle, &log_peers, upstream, wrapped, param);
            },
        );
        let upstreams = Arc::new(Upstreams::new(workspace.root.clone(), on_change, on_log));
        let pool = Arc::new(UpstreamPool {
            upstreams: upstreams.clone(),
            runtime: handle.clone(),
        });
        let runtime = tokio::task::spawn_blocking(move || Runtime::start(workspace, options, pool))
            .await
            .map_err(|error| McpError::Protocol(error.to_string()))??;
        let key = runtime.broker().state_secret("mcp-request-state.key")?;
        let codec = RequestStateCodec::try_new(key)
            .map_err(|error| McpError::Protocol(error.to_string()))?;
        let told = peers.clone();
        let told_handle = handle.clone();
        runtime.subscribe(move |notice| match notice {
            Notice::Reloaded => notify_listeners(
                &told_handle,
                &told,
                Some(notice_message("configuration reloaded")),
                true,
            ),
            Notice::Rejected(reason) => notify_listeners(
                &told_handle,
                &told,
                Some(warning(format!(
                    "configuration rejected, the old one stays: {reason}"
                ))),
                false,
            ),
        });
        Ok(Arc::new(McpFace {
            runtime,
            upstreams,
            codec,
            peers,
        }))
    }

    /// The runtime this face serves.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The broker in force.
    pub fn broker(&self) -> Arc<Broker> {
        self.runtime.broker()
    }

    /// Remembers a session so it hears `notifications/tools/list_changed`
    /// and the log messages `log_level` lets through.
    pub(crate) fn register_peer(&self, peer: Peer<RoleServer>, log_level: LogLevel) {
        if let Ok(mut peers) = self.peers.lock() {
            peers.retain(|listener| !listener.peer.is_transport_closed());
            peers.push(Listener { peer, log_level });
        }
    }

    /// `airlock wrap`'s upstream, if this is a wrap.
    pub(crate) fn wrap(&self) -> Option<&str> {
        self.runtime.options().wrap.as_deref()
    }
}

#[expect(
    deprecated,
    reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
)]
fn notice_message(text: &str) -> LogMessage {
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

/// Passes an upstream's log message to the sessions whose level lets it
/// through.
#[expect(
    deprecated,
    reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
)]
fn forward_log(
    handle: &tokio::runtime::Handle,
    peers: &Mutex<Vec<Listener>>,
    upstream: &str,
    wrapped: bool,
    mut param: rmcp::model::LoggingMessageNotificationParam,
) {
    if !wrapped {
        param.logger = Some(match param.logger.take() {
            Some(logger) => format!("{upstream}/{logger}"),
            None => upstream.to_owned(),
        });
    }
    let listeners = match peers.lock() {
        Ok(mut peers) => {
            peers.retain(|listener| !listener.peer.is_transport_closed());
            peers.clone()
        }
        Err(_) => return,
    };
    for listener in listeners {
        if !listener.log_level.allows(param.level) {
            continue;
        }
        let param = param.clone();
        handle.spawn(async move {
            let _ = listener.peer.notify_logging_message(param).await;
        });
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
fn notify_listeners(
    handle: &tokio::runtime::Handle,
    peers: &Mutex<Vec<Listener>>,
    log: Option<LogMessage>,
    tools_changed: bool,
) {
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
        handle.spawn(async move {
            if let Some(message) = message {
                let _ = listener.peer.notify_logging_message(message).await;
            }
            if tools_changed {
                let _ = listener.peer.notify_tool_list_changed().await;
                // The upstreams' prompts follow their servers too.
                let _ = listener.peer.notify_prompt_list_changed().await;
            }
        });
    }
}
