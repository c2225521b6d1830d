//! The sessions of one MCP face as the upstreams reach them: who is
//! connected, what log level each asked for, which upstream resources each
//! subscribed to, and what each can be asked (sampling, elicitation, roots).
//! Notifications from upstreams and from the runtime go out through here.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::model::{ClientCapabilities, ResourceUpdatedNotificationParam};
use rmcp::service::Peer;

use crate::face::LogLevel;

/// One connected session.
#[derive(Clone)]
struct Listener {
    session: String,
    peer: Peer<RoleServer>,
    log_level: LogLevel,
    /// The upstream resources it subscribed to, as `(upstream, uri)`.
    subscriptions: Arc<Mutex<BTreeSet<(String, String)>>>,
}

/// A session as an upstream's request to a client reaches it.
#[derive(Clone)]
pub(crate) struct Client {
    pub session: String,
    pub peer: Peer<RoleServer>,
}

impl Client {
    /// What the client said it can do at initialization.
    pub(crate) fn capabilities(&self) -> Option<ClientCapabilities> {
        self.peer.peer_info().map(|info| info.capabilities.clone())
    }
}

/// A log message for the sessions (`notifications/message`).
#[expect(
    deprecated,
    reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
)]
pub(crate) struct LogMessage {
    pub level: rmcp::model::LoggingLevel,
    pub text: String,
}

/// What changed, for [`Hub::changed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Every list (an upstream came or went; a reload).
    Everything,
    /// An upstream's tools.
    Tools,
    /// An upstream's prompts.
    Prompts,
    /// An upstream's resources or resource templates.
    Resources,
}

/// The sessions of a face.
pub(crate) struct Hub {
    runtime: tokio::runtime::Handle,
    listeners: Mutex<Vec<Listener>>,
    /// `airlock wrap`: an upstream's log messages keep their logger name.
    wrapped: bool,
    /// The runtime, once started (upstreams start before it).
    served: std::sync::OnceLock<std::sync::Weak<airlock_broker::Runtime>>,
}

impl Hub {
    pub(crate) fn new(runtime: tokio::runtime::Handle, wrapped: bool) -> Hub {
        Hub {
            runtime,
            listeners: Mutex::new(Vec::new()),
            wrapped,
            served: std::sync::OnceLock::new(),
        }
    }

    /// The runtime the sessions are served by.
    pub(crate) fn serve(&self, runtime: &Arc<airlock_broker::Runtime>) {
        let _ = self.served.set(Arc::downgrade(runtime));
    }

    /// The broker in force, once the runtime started.
    pub(crate) fn broker(&self) -> Option<Arc<airlock_broker::Broker>> {
        self.served.get()?.upgrade().map(|runtime| runtime.broker())
    }

    /// The open sessions (closed ones are forgotten here).
    fn open(&self) -> Vec<Listener> {
        match self.listeners.lock() {
            Ok(mut listeners) => {
                listeners.retain(|listener| !listener.peer.is_transport_closed());
                listeners.clone()
            }
            Err(_) => Vec::new(),
        }
    }

    /// Remembers a session once it is initialized.
    pub(crate) fn register(&self, session: &str, peer: Peer<RoleServer>, log_level: LogLevel) {
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.retain(|listener| !listener.peer.is_transport_closed());
            listeners.push(Listener {
                session: session.to_owned(),
                peer,
                log_level,
                subscriptions: Arc::default(),
            });
        }
    }

    /// The one open session, when there is exactly one: where a server's
    /// request that no client call explains goes (a stdio `wrap` has one
    /// client).
    pub(crate) fn only_client(&self) -> Option<Client> {
        let open = self.open();
        match open.as_slice() {
            [listener] => Some(Client {
                session: listener.session.clone(),
                peer: listener.peer.clone(),
            }),
            _ => None,
        }
    }

    /// Whether any open session other than `except` subscribed to `uri` of
    /// `upstream`.
    fn subscribed_elsewhere(&self, upstream: &str, uri: &str, except: &str) -> bool {
        let key = (upstream.to_owned(), uri.to_owned());
        self.open().iter().any(|listener| {
            listener.session != except
                && listener
                    .subscriptions
                    .lock()
                    .is_ok_and(|subscriptions| subscriptions.contains(&key))
        })
    }

    /// Records that `session` subscribed to `uri` of `upstream`. Returns
    /// whether the upstream must be asked (no session was subscribed yet).
    pub(crate) fn subscribe(&self, session: &str, upstream: &str, uri: &str) -> bool {
        let first = !self.subscribed_elsewhere(upstream, uri, session);
        for listener in self.open() {
            if listener.session == session
                && let Ok(mut subscriptions) = listener.subscriptions.lock()
            {
                let fresh = subscriptions.insert((upstream.to_owned(), uri.to_owned()));
                return first && fresh;
            }
        }
        first
    }

    /// Records that `session` unsubscribed. Returns whether the upstream
    /// must be told (no session is subscribed any more).
    pub(crate) fn unsubscribe(&self, session: &str, upstream: &str, uri: &str) -> bool {
        for listener in self.open() {
            if listener.session == session
                && let Ok(mut subscriptions) = listener.subscriptions.lock()
            {
                subscriptions.remove(&(upstream.to_owned(), uri.to_owned()));
            }
        }
        !self.subscribed_elsewhere(upstream, uri, session)
    }

    /// An upstream's `notifications/resources/updated`, to the sessions
    /// subscribed to that resource.
    pub(crate) fn resource_updated(&self, upstream: &str, param: ResourceUpdatedNotificationParam) {
        let key = (upstream.to_owned(), param.uri.clone());
        for listener in self.open() {
            let subscribed = listener
                .subscriptions
                .lock()
                .is_ok_and(|subscriptions| subscriptions.contains(&key));
            if subscribed {
                let param = param.clone();
                self.runtime.spawn(async move {
                    let _ = listener.peer.notify_resource_updated(param).await;
                });
            }
        }
    }

    /// Tells every session that a list may have changed.
    pub(crate) fn changed(&self, change: Change) {
        self.tell(None, Some(change));
    }

    /// Sends `log` to the sessions whose level lets it through, then (where
    /// a list changed) tells every session: in that order, so a client that
    /// has seen the change has seen the message too.
    #[expect(
        deprecated,
        reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
    )]
    pub(crate) fn tell(&self, log: Option<LogMessage>, change: Option<Change>) {
        for listener in self.open() {
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
            self.runtime.spawn(async move {
                if let Some(message) = message {
                    let _ = listener.peer.notify_logging_message(message).await;
                }
                let Some(change) = change else {
                    return;
                };
                if matches!(change, Change::Everything | Change::Tools) {
                    let _ = listener.peer.notify_tool_list_changed().await;
                }
                if matches!(change, Change::Everything | Change::Prompts) {
                    let _ = listener.peer.notify_prompt_list_changed().await;
                }
                if matches!(change, Change::Everything | Change::Resources) {
                    let _ = listener.peer.notify_resource_list_changed().await;
                }
            });
        }
    }

    /// Passes an upstream's log message to the sessions whose level lets it
    /// through, its logger named after the upstream unless this is a wrap.
    #[expect(
        deprecated,
        reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
    )]
    pub(crate) fn upstream_log(
        &self,
        upstream: &str,
        mut param: rmcp::model::LoggingMessageNotificationParam,
    ) {
        if !self.wrapped {
            param.logger = Some(match param.logger.take() {
                Some(logger) => format!("{upstream}/{logger}"),
                None => upstream.to_owned(),
            });
        }
        for listener in self.open() {
            if !listener.log_level.allows(param.level) {
                continue;
            }
            let param = param.clone();
            self.runtime.spawn(async move {
                let _ = listener.peer.notify_logging_message(param).await;
            });
        }
    }
}
