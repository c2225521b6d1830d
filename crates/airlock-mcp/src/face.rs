//! The MCP face of one workspace: the runtime it serves, the upstream
//! connections it made for that runtime, the sessions to tell about changes,
//! and the key that seals `requestState`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use airlock_broker::{Broker, Notice, Runtime, RuntimeOptions, Workspace};
use rmcp::RoleServer;
use rmcp::model::RequestStateCodec;
use rmcp::service::Peer;

use crate::McpError;
use crate::hub::{Change, Hub, LogMessage};
use crate::upstream::{UpstreamPool, Upstreams};

/// The MCP face of one workspace.
pub struct McpFace {
    runtime: Arc<Runtime>,
    pub(crate) upstreams: Arc<Upstreams>,
    pub(crate) codec: RequestStateCodec,
    pub(crate) hub: Arc<Hub>,
    /// The fast lanes of the streamable-HTTP sessions.
    pub(crate) http_lanes: crate::lane::HttpLanes,
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
    pub(crate) fn allows(&self, level: rmcp::model::LoggingLevel) -> bool {
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

impl McpFace {
    /// Starts the runtime of `workspace` with upstream connections made by
    /// this face, and the face on it. Must run inside a multi-threaded tokio
    /// runtime.
    pub async fn start(
        workspace: Workspace,
        options: RuntimeOptions,
    ) -> Result<Arc<McpFace>, McpError> {
        let handle = tokio::runtime::Handle::current();
        let hub = Arc::new(Hub::new(handle.clone(), options.wrap.is_some()));
        let upstreams = Arc::new(Upstreams::new(workspace.root.clone(), hub.clone()));
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
        hub.serve(&runtime);
        let told = hub.clone();
        runtime.subscribe(move |notice| match notice {
            Notice::Reloaded => told.tell(
                Some(notice_message("configuration reloaded")),
                Some(Change::Everything),
            ),
            Notice::Rejected(reason) => told.tell(
                Some(warning(format!(
                    "configuration rejected, the old one stays: {reason}"
                ))),
                None,
            ),
        });
        Ok(Arc::new(McpFace {
            runtime,
            upstreams,
            codec,
            hub,
            http_lanes: crate::lane::HttpLanes::default(),
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

    /// Remembers a session so it hears `notifications/tools/list_changed`,
    /// the log messages `log_level` lets through, and the updates of the
    /// resources it subscribes to.
    pub(crate) fn register_peer(&self, session: &str, peer: Peer<RoleServer>, log_level: LogLevel) {
        self.hub.register(session, peer, log_level);
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
