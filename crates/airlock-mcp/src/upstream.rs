//! Connections to upstream MCP servers: started with `serve`, their tool lists
//! kept live, calls forwarded with a deadline, a dead stdio server restarted,
//! a lost HTTP connection made again.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use airlock_broker::{ForwardError, Forwarder};
use airlock_core::config::UpstreamConfig;
use airlock_core::{UpstreamCall, UpstreamRequest};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest, GetPromptRequestParams,
    GetPromptResponse, Implementation, PaginatedRequestParams, Prompt, ReadResourceRequestParams,
    Resource, ResourceTemplate, ServerResult, Tool,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RunningService, ServiceError,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::sync::RwLock as AsyncRwLock;

use crate::caller::{Caller, InFlight};
use crate::hub::{Change, Hub};
use crate::resources::ResourceIndex;

/// How long a forwarded call may take before it is `upstream_unavailable`,
/// unless the upstream's `timeout` says otherwise.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long connecting (and listing tools) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

type Client = RunningService<RoleClient, UpstreamClient>;

/// The rmcp client handler of one upstream connection.
#[derive(Clone)]
pub(crate) struct UpstreamClient {
    upstream: Arc<Upstream>,
}

impl ClientHandler for UpstreamClient {
    /// airlock can ask its clients for sampling, elicitation and roots on
    /// an upstream's behalf; a client that cannot gets the upstream the
    /// error it would have got.
    #[expect(
        deprecated,
        reason = "sampling and roots are deprecated by SEP-2577 but still part of 2025-11-25"
    )]
    fn get_info(&self) -> ClientConfig {
        let capabilities = ClientCapabilities::builder()
            .enable_roots()
            .enable_roots_list_changed()
            .enable_sampling()
            .enable_elicitation()
            .build();
        let mut info = ClientConfig::new(
            capabilities,
            Implementation::new("airlock", env!("CARGO_PKG_VERSION")),
        );
        info.protocol_version = rmcp::model::ProtocolVersion::V_2025_11_25;
        info
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        match context.peer.list_all_tools().await {
            Ok(tools) => {
                self.upstream.set_tools(tools);
                self.upstream.hub.changed(Change::Tools);
            }
            Err(error) => say(
                &self.upstream.config.name,
                format_args!("listing tools failed: {error}"),
            ),
        }
    }

    async fn on_prompt_list_changed(&self, context: NotificationContext<RoleClient>) {
        match context.peer.list_all_prompts().await {
            Ok(prompts) => {
                self.upstream.set_prompts(prompts);
                self.upstream.hub.changed(Change::Prompts);
            }
            Err(error) => say(
                &self.upstream.config.name,
                format_args!("listing prompts failed: {error}"),
            ),
        }
    }

    async fn on_resource_list_changed(&self, context: NotificationContext<RoleClient>) {
        match list_resources(&context.peer).await {
            Ok((resources, templates)) => {
                self.upstream.set_resources(resources, templates);
                self.upstream.hub.changed(Change::Resources);
            }
            Err(error) => say(
                &self.upstream.config.name,
                format_args!("listing resources failed: {error}"),
            ),
        }
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.upstream
            .hub
            .resource_updated(&self.upstream.config.name, params);
    }

    #[expect(
        deprecated,
        reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
    )]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.upstream
            .hub
            .upstream_log(&self.upstream.config.name, params);
    }

    // Progress is passed on as it arrives, by [`Ordered`], so that it
    // reaches the client before the answer that follows it.

    #[expect(
        deprecated,
        reason = "sampling and roots are deprecated by SEP-2577 but still part of 2025-11-25"
    )]
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, ErrorData> {
        let caller = self.upstream.caller_of(&context)?;
        crate::asks::sample(
            &self.upstream.config.name,
            &self.upstream.hub,
            caller,
            params,
        )
        .await
    }

    async fn create_elicitation(
        &self,
        params: rmcp::model::ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, ErrorData> {
        let caller = self.upstream.caller_of(&context)?;
        crate::asks::elicit(caller, params).await
    }

    #[expect(
        deprecated,
        reason = "sampling and roots are deprecated by SEP-2577 but still part of 2025-11-25"
    )]
    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, ErrorData> {
        let caller = self.upstream.caller_of(&context)?;
        let workspace = self
            .upstream
            .hub
            .broker()
            .map(|broker| broker.root().to_path_buf());
        crate::asks::roots(caller, workspace).await
    }
}

/// An upstream connection's transport, which passes the server's progress
/// on to the client as each notification arrives, before the next message
/// is read: the server's last progress then reaches the client before the
/// answer that follows it (rmcp hands notifications to tasks of their own,
/// which could run after the answer went out).
///
/// It also reads what the HTTP raw lane hands rmcp (`crate::remote`): the
/// messages other than the answer on a raw call's stream.
struct Ordered<T> {
    inner: T,
    upstream: std::sync::Weak<Upstream>,
    injected:
        Option<tokio::sync::mpsc::UnboundedReceiver<rmcp::service::RxJsonRpcMessage<RoleClient>>>,
}

impl<T> rmcp::transport::Transport<RoleClient> for Ordered<T>
where
    T: rmcp::transport::Transport<RoleClient>,
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleClient>> {
        let Ordered {
            inner, injected, ..
        } = self;
        let message = match injected {
            // Both receives are a channel's: a message is never lost to the
            // other branch.
            Some(injected) => tokio::select! {
                biased;
                message = inner.receive() => message?,
                Some(message) = injected.recv() => message,
            },
            None => inner.receive().await?,
        };
        if let rmcp::model::JsonRpcMessage::Notification(notification) = &message
            && let rmcp::model::ServerNotification::ProgressNotification(progress) =
                &notification.notification
            && let Some(upstream) = self.upstream.upgrade()
        {
            upstream.pass_progress(progress.params.clone()).await;
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// How long telling a server a raw call is cancelled may take.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// Tells an HTTP upstream its raw call `id` is cancelled, in the
/// background and within a few seconds: a server that no longer answers
/// must not hold the call's end (and its audit record) back.
fn tell_cancelled(remote: Arc<crate::remote::Remote>, id: String, reason: &'static str) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(CANCEL_WAIT, remote.cancel(&id, reason)).await;
    });
}

/// Every resource and resource template a server lists.
async fn list_resources(
    peer: &Peer<RoleClient>,
) -> Result<(Vec<Resource>, Vec<ResourceTemplate>), ServiceError> {
    let resources = peer.list_all_resources().await?;
    let templates = peer.list_all_resource_templates().await?;
    Ok((resources, templates))
}

/// One upstream server.
pub(crate) struct Upstream {
    pub config: UpstreamConfig,
    root: PathBuf,
    /// `tls.ca_file`, resolved: trusted for an https upstream.
    ca_file: Option<PathBuf>,
    client: AsyncRwLock<Option<Client>>,
    /// Counts the connections made, so that a failed call drops only the
    /// connection it went through.
    generation: AtomicU64,
    tools: RwLock<Arc<Vec<Tool>>>,
    /// Its prompts, where it offers any.
    prompts: RwLock<Arc<Vec<Prompt>>>,
    /// Its resource templates, where it offers resources.
    templates: RwLock<Arc<Vec<ResourceTemplate>>>,
    /// Which URIs are its (for routing a read when several upstreams offer
    /// resources).
    index: RwLock<Arc<ResourceIndex>>,
    /// What the server said it offers, at the last connection.
    capabilities: RwLock<Option<Arc<rmcp::model::ServerCapabilities>>>,
    /// The requests airlock made of it for clients, and not yet answered.
    pub(crate) in_flight: InFlight,
    stopped: AtomicBool,
    pub(crate) hub: Arc<Hub>,
    /// How long a request may take (`upstreams[].timeout`).
    timeout: Duration,
    /// The connection's raw lane, and the connection's generation.
    raw: RwLock<Option<(RawLane, u64)>>,
}

/// A connection's raw lane (`crate::child`, `crate::remote`).
#[derive(Clone)]
enum RawLane {
    Child(Arc<crate::child::Raw>),
    Remote(Arc<crate::remote::Remote>),
}

impl Upstream {
    pub(crate) fn tools(&self) -> Arc<Vec<Tool>> {
        self.tools
            .read()
            .map(|tools| tools.clone())
            .unwrap_or_default()
    }

    fn set_tools(&self, tools: Vec<Tool>) {
        if let Ok(mut slot) = self.tools.write() {
            *slot = Arc::new(tools);
        }
    }

    pub(crate) fn prompts(&self) -> Arc<Vec<Prompt>> {
        self.prompts
            .read()
            .map(|prompts| prompts.clone())
            .unwrap_or_default()
    }

    fn set_prompts(&self, prompts: Vec<Prompt>) {
        if let Ok(mut slot) = self.prompts.write() {
            *slot = Arc::new(prompts);
        }
    }

    pub(crate) fn templates(&self) -> Arc<Vec<ResourceTemplate>> {
        self.templates
            .read()
            .map(|templates| templates.clone())
            .unwrap_or_default()
    }

    fn index(&self) -> Arc<ResourceIndex> {
        self.index
            .read()
            .map(|index| index.clone())
            .unwrap_or_default()
    }

    fn set_resources(&self, resources: Vec<Resource>, templates: Vec<ResourceTemplate>) {
        let index = ResourceIndex::new(
            resources.into_iter().map(|resource| resource.uri),
            templates
                .iter()
                .map(|template| template.uri_template.clone())
                .collect(),
        );
        if let Ok(mut slot) = self.index.write() {
            *slot = Arc::new(index);
        }
        if let Ok(mut slot) = self.templates.write() {
            *slot = Arc::new(templates);
        }
    }

    /// Remembers the URIs of a page of its resource list.
    fn index_page(&self, resources: &[Resource]) {
        if let Ok(mut slot) = self.index.write() {
            Arc::make_mut(&mut slot).add(resources.iter().map(|resource| resource.uri.clone()));
        }
    }

    /// Whether `uri` is one of its resources, as far as its lists say.
    pub(crate) fn owns_resource(&self, uri: &str) -> bool {
        self.index().owns(uri)
    }

    /// Whether `template` is one of its resource templates.
    pub(crate) fn has_template(&self, template: &str) -> bool {
        self.index().has_template(template)
    }

    /// The server's progress on a request airlock made for a client that
    /// asked for progress: to that client, under the client's own token.
    pub(crate) async fn pass_progress(&self, mut params: rmcp::model::ProgressNotificationParam) {
        let Some(caller) = self.in_flight.by_token(&params.progress_token) else {
            return;
        };
        let Some(token) = caller.progress_token.clone() else {
            return;
        };
        params.progress_token = token;
        let _ = caller.client.peer.notify_progress(params).await;
    }

    /// What the server said it offers, once connected.
    fn offers(&self, what: impl Fn(&rmcp::model::ServerCapabilities) -> bool) -> bool {
        self.capabilities
            .read()
            .ok()
            .and_then(|capabilities| capabilities.as_deref().map(&what))
            .unwrap_or(false)
    }

    pub(crate) fn offers_resources(&self) -> bool {
        self.offers(|capabilities| capabilities.resources.is_some())
    }

    /// The connection's peer, if it is up.
    async fn peer(&self) -> Result<(Peer<RoleClient>, u64), ForwardError> {
        let guard = self.client.read().await;
        match guard
            .as_ref()
            .filter(|client| !client.is_closed() && !client.peer().is_transport_closed())
        {
            Some(client) => Ok((
                client.peer().clone(),
                self.generation.load(Ordering::Relaxed),
            )),
            None => Err(ForwardError::NotRunning(self.config.name.clone())),
        }
    }

    /// A failure of the connection `generation`: an HTTP one is dropped, and
    /// `supervise` makes a new one, rather than later requests going to a
    /// session that may never answer.
    async fn lost(&self, generation: u64) {
        if self.config.url.is_some() {
            let mut slot = self.client.write().await;
            if self.generation.load(Ordering::Relaxed) == generation {
                drop(slot.take());
            }
        }
    }

    /// What a [`ServiceError`] is to a caller.
    fn failure(&self, error: ServiceError) -> ForwardError {
        let upstream = self.config.name.clone();
        match error {
            // The server's own refusal reaches the client as it was.
            ServiceError::McpError(error) => ForwardError::Refused {
                upstream,
                code: error.code.0,
                message: error.message.to_string(),
                data: error.data,
            },
            ServiceError::TransportSend(_) | ServiceError::TransportClosed => ForwardError::Lost {
                upstream,
                message: error.to_string(),
            },
            ServiceError::Timeout { .. } => ForwardError::TimedOut {
                upstream,
                seconds: self.timeout.as_secs(),
            },
            error => ForwardError::Failed {
                upstream,
                message: error.to_string(),
            },
        }
    }

    /// What a [`ServiceError`] on the connection `generation` is to a
    /// caller; a lost connection is dropped on the way (see [`Self::lost`]).
    async fn failed(&self, error: ServiceError, generation: u64) -> ForwardError {
        let failure = self.failure(error);
        if matches!(failure, ForwardError::Lost { .. }) {
            self.lost(generation).await;
        }
        failure
    }

    /// Runs `request` on the connection within the upstream's timeout.
    async fn request<T, F, Fut>(&self, request: F) -> Result<T, ForwardError>
    where
        F: FnOnce(Peer<RoleClient>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let (peer, generation) = self.peer().await?;
        match tokio::time::timeout(self.timeout, request(peer)).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(error)) => Err(self.failed(error, generation).await),
            Err(_) => Err(ForwardError::TimedOut {
                upstream: self.config.name.clone(),
                seconds: self.timeout.as_secs(),
            }),
        }
    }

    /// `completion/complete` for an argument of its prompt or resource
    /// template (`params` already names it as the server does).
    pub(crate) async fn complete(
        &self,
        params: rmcp::model::CompleteRequestParams,
    ) -> Result<rmcp::model::CompleteResult, ErrorData> {
        self.request(|peer| async move { peer.complete(params).await })
            .await
            .map_err(passed_error)
    }

    /// `prompts/get` of prompt `name`, forwarded as it came (arguments, and
    /// a 2026-07-28 input round's answers and state); the server's answer
    /// as it gave it.
    pub(crate) async fn get_prompt(
        &self,
        mut params: GetPromptRequestParams,
        name: &str,
    ) -> Result<GetPromptResponse, ErrorData> {
        name.clone_into(&mut params.name);
        self.request(|peer| async move { peer.get_prompt_once(params).await })
            .await
            .map_err(passed_error)
    }

    /// One page of its `resources/list`, its URIs remembered.
    pub(crate) async fn list_resources_page(
        &self,
        cursor: Option<String>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        let params =
            cursor.map(|cursor| PaginatedRequestParams::default().with_cursor(Some(cursor)));
        let page = self
            .request(|peer| async move { peer.list_resources(params).await })
            .await
            .map_err(passed_error)?;
        self.index_page(&page.resources);
        Ok(page)
    }

    /// One page of its `resources/templates/list`.
    pub(crate) async fn list_templates_page(
        &self,
        cursor: Option<String>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, ErrorData> {
        let params =
            cursor.map(|cursor| PaginatedRequestParams::default().with_cursor(Some(cursor)));
        self.request(|peer| async move { peer.list_resource_templates(params).await })
            .await
            .map_err(passed_error)
    }

    /// `resources/subscribe` or `resources/unsubscribe` of `uri`.
    #[expect(
        deprecated,
        reason = "resources/subscribe is legacy in 2026-07-28 but the way in 2025-11-25"
    )]
    pub(crate) async fn subscription(&self, uri: &str, subscribe: bool) -> Result<(), ErrorData> {
        let uri = uri.to_owned();
        self.request(|peer| async move {
            if subscribe {
                peer.subscribe(rmcp::model::SubscribeRequestParams::new(uri))
                    .await
            } else {
                peer.unsubscribe(rmcp::model::UnsubscribeRequestParams::new(uri))
                    .await
            }
        })
        .await
        .map_err(passed_error)
    }

    async fn connect(self: &Arc<Self>) -> Result<(), String> {
        let handler = UpstreamClient {
            upstream: self.clone(),
        };
        let config = &self.config;
        let raw;
        let client = if let Some(command) = &config.command {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(&config.args)
                .envs(&config.env)
                .current_dir(self.root.join(config.cwd.as_deref().unwrap_or(".")));
            let (transport, lane) = crate::child::ChildLines::spawn(cmd, Arc::downgrade(self))
                .map_err(|error| format!("cannot start {command}: {error}"))?;
            raw = Some(RawLane::Child(lane));
            tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(transport))
                .await
                .map_err(|_| "no answer to initialize".to_owned())?
                .map_err(|error| error.to_string())?
        } else if let Some(url) = &config.url {
            let mut transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            let mut headers = HashMap::new();
            for (name, value) in &config.headers {
                let value = airlock_core::config::expand_env(value, |var| std::env::var(var).ok())
                    .map_err(|error| format!("header {name}: {error}"))?;
                let name = http::HeaderName::try_from(name.as_str())
                    .map_err(|error| format!("header {name}: {error}"))?;
                let value = http::HeaderValue::try_from(value.as_str())
                    .map_err(|error| format!("header {name}: {error}"))?;
                headers.insert(name, value);
            }
            transport_config.custom_headers = headers;
            // The one outbound client, its connections kept alive (a new
            // connection per request cost about 1 ms a call). Each
            // connection to the server gets a client of its own, so one
            // made again after a loss (`supervise`) keeps none of the lost
            // server's sockets.
            let http = airlock_net::http_client(self.ca_file.as_deref())
                .map_err(|error| error.to_string())?
                .build()
                .map_err(|error| format!("cannot make an HTTP client: {error}"))?;
            let (recording, remote, injected) = crate::remote::connection(http, url.as_str());
            raw = Some(RawLane::Remote(remote));
            let transport = Ordered {
                inner: StreamableHttpClientTransport::with_client(recording, transport_config),
                upstream: Arc::downgrade(self),
                injected: Some(injected),
            };
            tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(transport))
                .await
                .map_err(|_| "no answer to initialize".to_owned())?
                .map_err(|error| error.to_string())?
        } else {
            return Err("neither command nor url is set".to_owned());
        };
        let tools = tokio::time::timeout(CONNECT_TIMEOUT, client.peer().list_all_tools())
            .await
            .map_err(|_| "no answer to tools/list".to_owned())?
            .map_err(|error| format!("tools/list: {error}"))?;
        let capabilities = client
            .peer()
            .peer_info()
            .map(|info| info.capabilities.clone())
            .unwrap_or_default();
        // Prompts and resources, where the server offers them.
        let prompts = if capabilities.prompts.is_some() {
            tokio::time::timeout(CONNECT_TIMEOUT, client.peer().list_all_prompts())
                .await
                .map_err(|_| "no answer to prompts/list".to_owned())?
                .map_err(|error| format!("prompts/list: {error}"))?
        } else {
            Vec::new()
        };
        let (resources, templates) = if capabilities.resources.is_some() {
            tokio::time::timeout(CONNECT_TIMEOUT, list_resources(client.peer()))
                .await
                .map_err(|_| "no answer to resources/list".to_owned())?
                .map_err(|error| format!("resources/list: {error}"))?
        } else {
            (Vec::new(), Vec::new())
        };
        // The connection is in place before its lists are shown: a client
        // that sees a tool can call it.
        let mut slot = self.client.write().await;
        *slot = Some(client);
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        if let Ok(mut lane) = self.raw.write() {
            *lane = raw.map(|raw| (raw, generation));
        }
        self.set_tools(tools);
        self.set_prompts(prompts);
        self.set_resources(resources, templates);
        if let Ok(mut offered) = self.capabilities.write() {
            *offered = Some(Arc::new(capabilities));
        }
        drop(slot);
        Ok(())
    }
    /// Keeps a stdio upstream running: when it exits it is started again (with
    /// a growing pause), and the tool list follows. An HTTP upstream whose
    /// connection was lost (or never made) is connected again the same way;
    /// its tools stay listed meanwhile, and a call to one is an
    /// `upstream_error`.
    async fn supervise(self: Arc<Self>) {
        let mut pause = Duration::from_millis(250);
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if self.stopped.load(Ordering::Relaxed) {
                return;
            }
            let closed = match self.client.read().await.as_ref() {
                Some(client) => client.is_closed() || client.peer().is_transport_closed(),
                None => true,
            };
            if !closed {
                pause = Duration::from_millis(250);
                continue;
            }
            if self.config.command.is_none() {
                let lost = self.client.write().await.take();
                if let Some(client) = lost {
                    let _ = client.cancel().await;
                    eprintln!(
                        "airlock: upstream {}: connection lost; reconnecting",
                        self.config.name
                    );
                }
                tokio::time::sleep(pause).await;
                let first = pause == Duration::from_millis(250);
                pause = (pause * 2).min(Duration::from_secs(10));
                if self.stopped.load(Ordering::Relaxed) {
                    return;
                }
                match self.connect().await {
                    Ok(()) => {
                        eprintln!("airlock: upstream {} connected", self.config.name);
                        self.hub.changed(Change::Everything);
                    }
                    // Said once, not at every attempt.
                    Err(error) if first => {
                        say(&self.config.name, &error);
                    }
                    Err(_) => {}
                }
                continue;
            }
            if let Some(client) = self.client.write().await.take() {
                let _ = client.cancel().await;
            }
            self.set_tools(Vec::new());
            self.hub.changed(Change::Everything);
            eprintln!("airlock: upstream {} exited; restarting", self.config.name);
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(10));
            match self.connect().await {
                Ok(()) => {
                    eprintln!("airlock: upstream {} restarted", self.config.name);
                    self.hub.changed(Change::Everything);
                }
                Err(error) => {
                    say(&self.config.name, &error);
                }
            }
        }
    }

    /// The client a request from the server is for: the one whose
    /// request it came with (streamable HTTP says which), else the one
    /// session with requests in flight, else the one session connected.
    /// Anything else would guess, and a wrong guess shows one client's
    /// request to another: refused.
    fn caller_of(&self, context: &RequestContext<RoleClient>) -> Result<Caller, ErrorData> {
        if let Some(rmcp::service::InboundStreamOrigin::OutboundRequest(id)) =
            context
                .extensions
                .get::<rmcp::service::InboundStreamOrigin>()
        {
            // It came with a call: that call's client, or nobody once the
            // call is over (never a guess).
            return self.in_flight.by_request(id).ok_or_else(|| {
                ErrorData::invalid_request(
                    "the call this request came with is over; airlock cannot tell which client it is for",
                    None,
                )
            });
        }
        if let Some(caller) = self.in_flight.only_session() {
            return Ok(caller);
        }
        if let Some(client) = self.hub.only_client() {
            return Ok(Caller {
                client,
                request: None,
                progress_token: None,
                cancelled: tokio_util::sync::CancellationToken::new(),
                session_roots: None,
            });
        }
        Err(ErrorData::invalid_request(
            "airlock cannot tell which of its clients this request is for",
            None,
        ))
    }

    /// Forwards a `tools/call` or `resources/read` for `caller` (if a
    /// session made it): the server's progress goes to that client, and the
    /// client's cancellation cancels the request at the server.
    pub(crate) async fn forward(
        &self,
        call: &UpstreamCall,
        caller: Option<Caller>,
    ) -> Result<Value, ForwardError> {
        let name = &self.config.name;
        // A tool call that needs no progress mapping goes on the raw lane
        // of a connection that is up.
        if call.request == UpstreamRequest::ToolCall
            && caller
                .as_ref()
                .is_none_or(|caller| caller.progress_token.is_none())
            && let Some((lane, generation)) = self.raw_lane().await
        {
            match lane {
                RawLane::Child(raw) => {
                    return self.forward_raw(&raw, generation, call, caller).await;
                }
                RawLane::Remote(remote) => {
                    if let Some(forwarded) = self
                        .forward_remote(remote, generation, call, caller.clone())
                        .await
                    {
                        return forwarded;
                    }
                }
            }
        }
        let (peer, generation) = self.peer().await?;
        let request = match call.request {
            UpstreamRequest::ToolCall => {
                let mut params = CallToolRequestParams::new(call.tool.clone());
                params.arguments = match &call.args {
                    Value::Object(map) => Some(map.clone()),
                    Value::Null => None,
                    _ => {
                        return Err(ForwardError::Failed {
                            upstream: name.clone(),
                            message: "arguments must be an object".to_owned(),
                        });
                    }
                };
                ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params))
            }
            UpstreamRequest::ReadResource => {
                ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(
                    ReadResourceRequestParams::new(call.tool.clone()),
                ))
            }
            // Put to the client, not the server (`asks::put_sampling`).
            UpstreamRequest::Sample => return Err(ForwardError::NotConnected),
        };
        let handle = match peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
        {
            Ok(handle) => handle,
            Err(error) => {
                return Err(self.failed(error, generation).await);
            }
        };
        let id = handle.id.clone();
        let mut flying = caller
            .as_ref()
            .map(|caller| self.in_flight.start(handle.progress_token.clone(), caller));
        if let (Some(flying), Some(caller)) = (flying.as_mut(), caller.as_ref()) {
            self.in_flight.sent(flying, id.clone(), caller);
        }
        let cancelled = caller
            .as_ref()
            .map(|caller| caller.cancelled.clone())
            .unwrap_or_default();
        let answer = tokio::select! {
            answer = tokio::time::timeout(self.timeout, handle.rx) => answer,
            () = cancelled.cancelled() => {
                // The client gave up: so does the server.
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(id.clone()),
                        Some("the client cancelled its request".to_owned()),
                    ))
                    .await;
                return Err(ForwardError::Failed {
                    upstream: name.clone(),
                    message: "the client cancelled the request".to_owned(),
                });
            }
        };
        drop(flying);
        let result = match answer {
            Ok(Ok(Ok(result))) => result,
            Ok(Ok(Err(error))) => {
                return Err(self.failed(error, generation).await);
            }
            // The connection ended before the answer came.
            Ok(Err(_)) => {
                self.lost(generation).await;
                return Err(ForwardError::Lost {
                    upstream: name.clone(),
                    message: "the connection closed before the answer came".to_owned(),
                });
            }
            Err(_) => {
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(id),
                        Some("no answer within the upstream's timeout".to_owned()),
                    ))
                    .await;
                return Err(ForwardError::TimedOut {
                    upstream: name.clone(),
                    seconds: self.timeout.as_secs(),
                });
            }
        };
        let value = match result {
            ServerResult::CallToolResult(result) => serde_json::to_value(result),
            ServerResult::ReadResourceResult(result) => serde_json::to_value(result),
            other => {
                return Err(ForwardError::Failed {
                    upstream: name.clone(),
                    message: format!("unexpected answer: {}", short(&other)),
                });
            }
        };
        value.map_err(|error| ForwardError::Failed {
            upstream: name.clone(),
            message: error.to_string(),
        })
    }

    /// The raw lane of the connection in place, if it is up.
    async fn raw_lane(&self) -> Option<(RawLane, u64)> {
        let (lane, generation) = self.raw.read().ok()?.clone()?;
        let (peer, current) = self.peer().await.ok()?;
        let version = peer.peer_info()?.protocol_version.clone();
        // A server on a protocol without `initialize` wants the protocol
        // fields in every request's `_meta`, which rmcp adds.
        let ready = match &lane {
            RawLane::Child(_) => version.has_initialize(),
            RawLane::Remote(remote) => remote.ready(&version),
        };
        (current == generation && ready).then_some((lane, generation))
    }

    /// [`Upstream::forward`] of a tool call on an HTTP connection's raw
    /// lane: what the rmcp way gives, the same errors included. `None` when
    /// the server refused the POST unread: the call goes rmcp's way.
    async fn forward_remote(
        &self,
        remote: Arc<crate::remote::Remote>,
        generation: u64,
        call: &UpstreamCall,
        caller: Option<Caller>,
    ) -> Option<Result<Value, ForwardError>> {
        use crate::remote::Outcome;
        let name = &self.config.name;
        let arguments = match self.raw_arguments(call) {
            Ok(arguments) => arguments,
            Err(error) => return Some(Err(error)),
        };
        let id = remote.id();
        let (flying, cancelled) = self.fly(&id, caller.as_ref());
        let outcome = tokio::select! {
            outcome = tokio::time::timeout(self.timeout, remote.call(&id, &call.tool, arguments)) => outcome,
            () = cancelled.cancelled() => {
                tell_cancelled(remote.clone(), id.clone(), "the client cancelled its request");
                return Some(Err(self.client_cancelled()));
            }
        };
        drop(flying);
        match outcome {
            Ok(Outcome::Answered(response)) => Some(self.answer_of(&response)),
            Ok(Outcome::Declined) => None,
            Ok(Outcome::Lost(message)) => {
                self.lost(generation).await;
                Some(Err(ForwardError::Lost {
                    upstream: name.clone(),
                    message,
                }))
            }
            Ok(Outcome::Failed(message)) => Some(Err(ForwardError::Failed {
                upstream: name.clone(),
                message,
            })),
            Err(_) => {
                tell_cancelled(remote, id, "no answer within the upstream's timeout");
                Some(Err(self.timed_out()))
            }
        }
    }

    /// [`Upstream::forward`] of a tool call on the raw lane: what the rmcp
    /// way gives, the same errors included.
    async fn forward_raw(
        &self,
        raw: &crate::child::Raw,
        generation: u64,
        call: &UpstreamCall,
        caller: Option<Caller>,
    ) -> Result<Value, ForwardError> {
        let name = &self.config.name;
        let arguments = self.raw_arguments(call)?;
        let Some(mut sent) = raw.call(&call.tool, arguments).await else {
            self.lost(generation).await;
            return Err(ForwardError::Lost {
                upstream: name.clone(),
                message: "the connection is closed".to_owned(),
            });
        };
        let (flying, cancelled) = self.fly(&sent.id, caller.as_ref());
        let answer = tokio::select! {
            answer = tokio::time::timeout(self.timeout, &mut sent.answer) => answer,
            () = cancelled.cancelled() => {
                // Within a few seconds: a server that reads no more must
                // not hold the call's end back.
                let _ = tokio::time::timeout(
                    CANCEL_WAIT,
                    raw.cancel(&sent.id, "the client cancelled its request"),
                )
                .await;
                return Err(self.client_cancelled());
            }
        };
        drop(flying);
        let response = match answer {
            Ok(Ok(response)) => response,
            Ok(Err(_)) => {
                self.lost(generation).await;
                return Err(ForwardError::Lost {
                    upstream: name.clone(),
                    message: "the connection closed before the answer came".to_owned(),
                });
            }
            Err(_) => {
                let _ = tokio::time::timeout(
                    CANCEL_WAIT,
                    raw.cancel(&sent.id, "no answer within the upstream's timeout"),
                )
                .await;
                return Err(self.timed_out());
            }
        };
        self.answer_of(&response)
    }

    /// A raw lane's tool arguments: an object, or none.
    #[expect(
        clippy::result_large_err,
        reason = "the error `forward` gives, made in a helper it shares"
    )]
    fn raw_arguments<'c>(&self, call: &'c UpstreamCall) -> Result<Option<&'c Value>, ForwardError> {
        match &call.args {
            Value::Object(_) => Ok(Some(&call.args)),
            Value::Null => Ok(None),
            _ => Err(ForwardError::Failed {
                upstream: self.config.name.clone(),
                message: "arguments must be an object".to_owned(),
            }),
        }
    }

    /// A raw call `id` in flight for `caller`: recorded (so the server's
    /// progress and requests reach that client) until the guard drops, and
    /// the caller's cancellation.
    fn fly(
        &self,
        id: &str,
        caller: Option<&Caller>,
    ) -> (
        Option<crate::caller::Flying<'_>>,
        tokio_util::sync::CancellationToken,
    ) {
        let request = rmcp::model::NumberOrString::String(id.into());
        let mut flying = caller.map(|caller| {
            self.in_flight
                .start(rmcp::model::ProgressToken(request.clone()), caller)
        });
        if let (Some(flying), Some(caller)) = (flying.as_mut(), caller) {
            self.in_flight.sent(flying, request, caller);
        }
        let cancelled = caller
            .map(|caller| caller.cancelled.clone())
            .unwrap_or_default();
        (flying, cancelled)
    }

    fn client_cancelled(&self) -> ForwardError {
        ForwardError::Failed {
            upstream: self.config.name.clone(),
            message: "the client cancelled the request".to_owned(),
        }
    }

    fn timed_out(&self) -> ForwardError {
        ForwardError::TimedOut {
            upstream: self.config.name.clone(),
            seconds: self.timeout.as_secs(),
        }
    }

    /// A raw lane's JSON-RPC `response` to a tool call, read as rmcp reads
    /// an answer (a response before an error, a result as the first kind of
    /// result it matches), and given on as `forward` gives it.
    #[expect(
        clippy::result_large_err,
        reason = "the error `forward` gives, made in a helper it shares"
    )]
    fn answer_of(&self, response: &Value) -> Result<Value, ForwardError> {
        let name = &self.config.name;
        let unexpected = |what: &Value| ForwardError::Failed {
            upstream: name.clone(),
            message: format!("unexpected answer: {}", short_json(what)),
        };
        let result = match (response.get("result"), response.get("error")) {
            (Some(result), _) => serde_json::from_value::<ServerResult>(result.clone())
                .map_err(|_| unexpected(response))?,
            (None, Some(error)) => {
                return match serde_json::from_value::<ErrorData>(error.clone()) {
                    Ok(error) => Err(self.failure(ServiceError::McpError(error))),
                    Err(_) => Err(unexpected(response)),
                };
            }
            (None, None) => return Err(unexpected(response)),
        };
        let ServerResult::CallToolResult(result) = result else {
            return Err(ForwardError::Failed {
                upstream: name.clone(),
                message: format!("unexpected answer: {}", short(&result)),
            });
        };
        serde_json::to_value(result).map_err(|error| ForwardError::Failed {
            upstream: name.clone(),
            message: error.to_string(),
        })
    }

    async fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        if let Some(client) = self.client.write().await.take() {
            let _ = client.cancel().await;
        }
    }
}

/// All upstreams of a workspace.
pub(crate) struct Upstreams {
    list: RwLock<Vec<Arc<Upstream>>>,
    hub: Arc<Hub>,
    root: PathBuf,
}

impl Upstreams {
    pub(crate) fn new(root: PathBuf, hub: Arc<Hub>) -> Upstreams {
        Upstreams {
            list: RwLock::new(Vec::new()),
            hub,
            root,
        }
    }

    /// Tells every upstream that a client's roots changed
    /// (`notifications/roots/list_changed`): each asks again.
    pub(crate) async fn roots_changed(&self) {
        for upstream in self.all() {
            if let Ok((peer, _)) = upstream.peer().await {
                let _ = peer.notify_roots_list_changed().await;
            }
        }
    }

    /// Passes a client's `logging/setLevel` on to every upstream that logs
    /// (the last one asked wins there; each session still gets only what
    /// its own level lets through).
    #[expect(
        deprecated,
        reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
    )]
    pub(crate) async fn set_level(&self, level: rmcp::model::LoggingLevel) {
        for upstream in self.all() {
            let guard = upstream.client.read().await;
            let Some(client) = guard.as_ref().filter(|client| !client.is_closed()) else {
                continue;
            };
            let logs = client
                .peer()
                .peer_info()
                .is_some_and(|info| info.capabilities.logging.is_some());
            if logs {
                let params = rmcp::model::SetLevelRequestParams::new(level);
                if let Err(error) = client.peer().set_level(params).await {
                    say(
                        &upstream.config.name,
                        format_args!("logging/setLevel: {error}"),
                    );
                }
            }
        }
    }

    pub(crate) fn all(&self) -> Vec<Arc<Upstream>> {
        self.list
            .read()
            .map(|list| list.clone())
            .unwrap_or_default()
    }

    pub(crate) fn get(&self, name: &str) -> Option<Arc<Upstream>> {
        self.all()
            .into_iter()
            .find(|upstream| upstream.config.name == name)
    }

    /// Makes the running set match `configs`: new ones are started, removed
    /// or changed ones stopped (and changed ones started again). A server that
    /// fails to start is reported and kept (a stdio one is retried). The
    /// sessions are not told: that is the caller's.
    pub(crate) async fn reconcile(
        &self,
        configs: &[UpstreamConfig],
        ca_file: Option<&Path>,
    ) -> Vec<(String, String)> {
        let current = self.all();
        let mut keep = Vec::new();
        for upstream in &current {
            if configs.iter().any(|config| *config == upstream.config)
                && upstream.ca_file.as_deref() == ca_file
            {
                keep.push(upstream.clone());
            } else {
                upstream.stop().await;
            }
        }
        let mut failures = Vec::new();
        for config in configs {
            if keep.iter().any(|upstream| upstream.config == *config) {
                continue;
            }
            let upstream = Arc::new(Upstream {
                config: config.clone(),
                root: self.root.clone(),
                ca_file: ca_file.map(Path::to_path_buf),
                client: AsyncRwLock::new(None),
                generation: AtomicU64::new(0),
                tools: RwLock::new(Arc::new(Vec::new())),
                prompts: RwLock::new(Arc::new(Vec::new())),
                templates: RwLock::new(Arc::new(Vec::new())),
                capabilities: RwLock::new(None),
                index: RwLock::new(Arc::new(ResourceIndex::default())),
                in_flight: InFlight::default(),
                raw: RwLock::new(None),
                stopped: AtomicBool::new(false),
                hub: self.hub.clone(),
                timeout: config
                    .timeout_seconds()
                    .map_or(CALL_TIMEOUT, Duration::from_secs),
            });
            if let Err(error) = upstream.connect().await {
                say(&config.name, &error);
                failures.push((config.name.clone(), error));
            }
            tokio::spawn(upstream.clone().supervise());
            keep.push(upstream);
        }
        if let Ok(mut list) = self.list.write() {
            *list = keep;
        }
        // The caller tells the sessions (a reload does, after its log
        // message), so that a client hears of a reload once.
        failures
    }

    pub(crate) async fn stop_all(&self) {
        for upstream in self.all() {
            upstream.stop().await;
        }
    }
}

/// The upstream connections as the runtime sees them: calls from its
/// blocking threads carried onto the tokio runtime.
pub(crate) struct UpstreamPool {
    pub upstreams: Arc<Upstreams>,
    pub runtime: tokio::runtime::Handle,
}

impl Forwarder for UpstreamPool {
    fn forward(&self, call: &UpstreamCall) -> Result<Value, ForwardError> {
        let Some(upstream) = self.upstreams.get(&call.upstream) else {
            return Err(ForwardError::NoSuchUpstream(call.upstream.clone()));
        };
        // The session that made the call, when it is forwarded on that
        // session's thread.
        let caller = crate::caller::current();
        if call.request == UpstreamRequest::Sample {
            return self.runtime.block_on(crate::asks::put_sampling(
                &upstream.config.name,
                call,
                caller,
            ));
        }
        self.runtime
            .block_on(async { upstream.forward(call, caller).await })
    }
}

impl airlock_broker::Upstreams for UpstreamPool {
    fn reconcile(
        &self,
        configs: &[UpstreamConfig],
        ca_file: Option<&Path>,
    ) -> Vec<(String, String)> {
        self.runtime
            .block_on(self.upstreams.reconcile(configs, ca_file))
    }

    fn find_tool(&self, upstream: &str, tool: &str) -> Option<airlock_broker::UpstreamTool> {
        let upstream = self.upstreams.get(upstream)?;
        let tools = upstream.tools();
        let listed = tools.iter().find(|listed| listed.name == tool)?;
        Some(upstream_tool(listed))
    }

    fn all_tools(&self) -> Vec<(String, String, airlock_broker::UpstreamTool)> {
        let mut out = Vec::new();
        for upstream in self.upstreams.all() {
            for tool in upstream.tools().iter() {
                out.push((
                    upstream.config.name.clone(),
                    tool.name.to_string(),
                    upstream_tool(tool),
                ));
            }
        }
        out
    }

    fn tool_names(&self, upstream: &str) -> Vec<String> {
        self.upstreams
            .get(upstream)
            .map_or_else(Vec::new, |upstream| {
                upstream
                    .tools()
                    .iter()
                    .map(|tool| tool.name.to_string())
                    .collect()
            })
    }

    fn stop_all(&self) {
        self.runtime.block_on(self.upstreams.stop_all());
    }
}

/// Says on stderr what went wrong with `upstream`: the server's own words
/// (an error it sent, what its process printed on failing) as visible
/// escapes, so they cannot drive the terminal `serve` runs in.
fn say(upstream: &str, what: impl std::fmt::Display) {
    eprintln!(
        "airlock: upstream {upstream}: {}",
        airlock_core::display::safe_line(&what.to_string())
    );
}

/// A JSON-RPC error for the client from a failure to reach the server: the
/// server's own refusal as it was, anything else an internal error naming
/// the upstream.
pub(crate) fn passed_error(error: ForwardError) -> ErrorData {
    match error {
        ForwardError::Refused {
            code,
            message,
            data,
            ..
        } => ErrorData::new(rmcp::model::ErrorCode(code), message, data),
        error => ErrorData::internal_error(error.to_string(), None),
    }
}

/// A few words naming an unexpected answer.
fn short(result: &ServerResult) -> String {
    let text = serde_json::to_string(result).unwrap_or_default();
    text.chars().take(120).collect()
}

/// The first characters of a message, to name it in an error.
fn short_json(message: &Value) -> String {
    message.to_string().chars().take(120).collect()
}

/// What the broker knows of an upstream's tool.
fn upstream_tool(tool: &rmcp::model::Tool) -> airlock_broker::UpstreamTool {
    airlock_broker::UpstreamTool {
        annotations: crate::tools::annotations_of(tool),
        description: tool.description.as_ref().map(|text| text.to_string()),
        input_schema: Some(serde_json::Value::Object((*tool.input_schema).clone())),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(|schema| serde_json::Value::Object((**schema).clone())),
    }
}
