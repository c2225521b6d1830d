//! Connections to upstream MCP servers: started with `serve`, their tool lists
//! kept live, calls forwarded with a deadline, a dead stdio server restarted,
//! a lost HTTP connection made again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use airlock_broker::{ForwardError, Forwarder};
use airlock_core::UpstreamCall;
use airlock_core::config::UpstreamConfig;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, GetPromptRequestParams,
    GetPromptResponse, Implementation, Prompt, Tool,
};
use rmcp::service::{NotificationContext, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::sync::RwLock as AsyncRwLock;

/// How long a forwarded call may take before it is an `upstream_error`.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long connecting (and listing tools) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

type Client = RunningService<RoleClient, UpstreamClient>;

/// Called when any upstream's tool or prompt list changed (or it went away
/// or came back).
pub(crate) type OnChange = Arc<dyn Fn() + Send + Sync>;

/// Called with each log message an upstream sends
/// (`notifications/message`), and the upstream's name.
#[expect(
    deprecated,
    reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
)]
pub(crate) type OnLog =
    Arc<dyn Fn(&str, rmcp::model::LoggingMessageNotificationParam) + Send + Sync>;

/// The rmcp client handler of one upstream connection.
#[derive(Clone)]
pub(crate) struct UpstreamClient {
    upstream: Arc<Upstream>,
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("airlock", env!("CARGO_PKG_VERSION")),
        );
        info.protocol_version = rmcp::model::ProtocolVersion::V_2025_11_25;
        info
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        match context.peer.list_all_tools().await {
            Ok(tools) => {
                self.upstream.set_tools(tools);
                (self.upstream.on_change)();
            }
            Err(error) => eprintln!(
                "airlock: upstream {}: listing tools failed: {error}",
                self.upstream.config.name
            ),
        }
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
        (self.upstream.on_log)(&self.upstream.config.name, params);
    }

    async fn on_prompt_list_changed(&self, context: NotificationContext<RoleClient>) {
        match context.peer.list_all_prompts().await {
            Ok(prompts) => {
                self.upstream.set_prompts(prompts);
                (self.upstream.on_change)();
            }
            Err(error) => eprintln!(
                "airlock: upstream {}: listing prompts failed: {error}",
                self.upstream.config.name
            ),
        }
    }
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
    stopped: AtomicBool,
    on_change: OnChange,
    on_log: OnLog,
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

    /// A failure to reach the server, as a JSON-RPC error.
    fn passed_error(&self, error: ForwardError) -> rmcp::ErrorData {
        rmcp::ErrorData::internal_error(error.to_string(), None)
    }

    /// `completion/complete` for an argument of its prompt `name`.
    pub(crate) async fn complete_prompt(
        &self,
        mut params: rmcp::model::CompleteRequestParams,
        name: &str,
    ) -> Result<rmcp::model::CompleteResult, rmcp::ErrorData> {
        let guard = self.client.read().await;
        let Some(client) = guard
            .as_ref()
            .filter(|client| !client.is_closed() && !client.peer().is_transport_closed())
        else {
            return Err(self.passed_error(ForwardError::NotRunning(self.config.name.clone())));
        };
        if let rmcp::model::Reference::Prompt(prompt) = &mut params.r#ref {
            name.clone_into(&mut prompt.name);
        }
        match tokio::time::timeout(CALL_TIMEOUT, client.peer().complete(params)).await {
            Ok(Ok(result)) => Ok(result),
            // The server's own refusal reaches the client as it was.
            Ok(Err(ServiceError::McpError(error))) => Err(error),
            Ok(Err(error)) => Err(self.passed_error(ForwardError::Failed {
                upstream: self.config.name.clone(),
                message: error.to_string(),
            })),
            Err(_) => Err(self.passed_error(ForwardError::TimedOut {
                upstream: self.config.name.clone(),
                seconds: CALL_TIMEOUT.as_secs(),
            })),
        }
    }

    /// `prompts/get` of prompt `name`, forwarded as it came (arguments, and
    /// a 2026-07-28 input round's answers and state); the server's answer
    /// as it gave it.
    pub(crate) async fn get_prompt(
        &self,
        mut params: GetPromptRequestParams,
        name: &str,
    ) -> Result<GetPromptResponse, rmcp::ErrorData> {
        let guard = self.client.read().await;
        let Some(client) = guard
            .as_ref()
            .filter(|client| !client.is_closed() && !client.peer().is_transport_closed())
        else {
            return Err(self.passed_error(ForwardError::NotRunning(self.config.name.clone())));
        };
        name.clone_into(&mut params.name);
        match tokio::time::timeout(CALL_TIMEOUT, client.peer().get_prompt_once(params)).await {
            Ok(Ok(response)) => Ok(response),
            // The server's own refusal reaches the client as it was.
            Ok(Err(ServiceError::McpError(error))) => Err(error),
            Ok(Err(error)) => Err(self.passed_error(ForwardError::Failed {
                upstream: self.config.name.clone(),
                message: error.to_string(),
            })),
            Err(_) => Err(self.passed_error(ForwardError::TimedOut {
                upstream: self.config.name.clone(),
                seconds: CALL_TIMEOUT.as_secs(),
            })),
        }
    }

    async fn connect(self: &Arc<Self>) -> Result<(), String> {
        let handler = UpstreamClient {
            upstream: self.clone(),
        };
        let config = &self.config;
        let client = if let Some(command) = &config.command {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(&config.args)
                .envs(&config.env)
                .current_dir(self.root.join(config.cwd.as_deref().unwrap_or(".")));
            let (transport, _) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .map_err(|error| format!("cannot start {command}: {error}"))?;
            tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(transport))
                .await
                .map_err(|_| "no answer to initialize".to_owned())?
                .map_err(|error| error.to_string())?
        } else if let Some(url) = &config.url {
            let mut transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            let mut headers = HashMap::new();
            for (name, value) in &config.headers {
                let name = http::HeaderName::try_from(name.as_str())
                    .map_err(|error| format!("header {name}: {error}"))?;
                let value = http::HeaderValue::try_from(value.as_str())
                    .map_err(|error| format!("header {name}: {error}"))?;
                headers.insert(name, value);
            }
            transport_config.custom_headers = headers;
            // The one outbound client; an idle connection is not kept, so a
            // restarted server is reached afresh.
            let http = airlock_net::http_client(self.ca_file.as_deref())
                .map_err(|error| error.to_string())?
                .pool_max_idle_per_host(0)
                .build()
                .map_err(|error| format!("cannot make an HTTP client: {error}"))?;
            let transport = StreamableHttpClientTransport::with_client(http, transport_config);
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
        self.set_tools(tools);
        // Prompts, where the server offers them.
        let offers_prompts = client
            .peer()
            .peer_info()
            .is_some_and(|info| info.capabilities.prompts.is_some());
        let prompts = if offers_prompts {
            tokio::time::timeout(CONNECT_TIMEOUT, client.peer().list_all_prompts())
                .await
                .map_err(|_| "no answer to prompts/list".to_owned())?
                .map_err(|error| format!("prompts/list: {error}"))?
        } else {
            Vec::new()
        };
        self.set_prompts(prompts);
        let mut slot = self.client.write().await;
        *slot = Some(client);
        self.generation.fetch_add(1, Ordering::Relaxed);
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
                        (self.on_change)();
                    }
                    // Said once, not at every attempt.
                    Err(error) if first => {
                        eprintln!("airlock: upstream {}: {error}", self.config.name);
                    }
                    Err(_) => {}
                }
                continue;
            }
            if let Some(client) = self.client.write().await.take() {
                let _ = client.cancel().await;
            }
            self.set_tools(Vec::new());
            (self.on_change)();
            eprintln!("airlock: upstream {} exited; restarting", self.config.name);
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(10));
            match self.connect().await {
                Ok(()) => {
                    eprintln!("airlock: upstream {} restarted", self.config.name);
                    (self.on_change)();
                }
                Err(error) => {
                    eprintln!("airlock: upstream {}: {error}", self.config.name);
                }
            }
        }
    }

    pub(crate) async fn call(&self, tool: &str, args: &Value) -> Result<Value, ForwardError> {
        let name = &self.config.name;
        let guard = self.client.read().await;
        let Some(client) = guard
            .as_ref()
            .filter(|client| !client.is_closed() && !client.peer().is_transport_closed())
        else {
            return Err(ForwardError::NotRunning(name.clone()));
        };
        let generation = self.generation.load(Ordering::Relaxed);
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = match args {
            Value::Object(map) => Some(map.clone()),
            Value::Null => None,
            _ => {
                return Err(ForwardError::Failed {
                    upstream: name.clone(),
                    message: "arguments must be an object".to_owned(),
                });
            }
        };
        let outcome = tokio::time::timeout(CALL_TIMEOUT, client.peer().call_tool(params)).await;
        match outcome {
            Ok(Ok(result)) => serde_json::to_value(result).map_err(|error| ForwardError::Failed {
                upstream: name.clone(),
                message: error.to_string(),
            }),
            Ok(Err(error)) => {
                if self.config.url.is_some()
                    && matches!(
                        error,
                        ServiceError::TransportSend(_) | ServiceError::TransportClosed
                    )
                {
                    // The server may be gone, or back without our session:
                    // this connection is dropped and `supervise` makes a new
                    // one, rather than later calls going to a session that
                    // may never answer.
                    drop(guard);
                    let mut slot = self.client.write().await;
                    if self.generation.load(Ordering::Relaxed) == generation {
                        drop(slot.take());
                    }
                }
                Err(ForwardError::Failed {
                    upstream: name.clone(),
                    message: error.to_string(),
                })
            }
            Err(_) => Err(ForwardError::TimedOut {
                upstream: name.clone(),
                seconds: CALL_TIMEOUT.as_secs(),
            }),
        }
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
    on_change: OnChange,
    on_log: OnLog,
    root: PathBuf,
}

impl Upstreams {
    pub(crate) fn new(root: PathBuf, on_change: OnChange, on_log: OnLog) -> Upstreams {
        Upstreams {
            list: RwLock::new(Vec::new()),
            on_change,
            on_log,
            root,
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
                    eprintln!(
                        "airlock: upstream {}: logging/setLevel: {error}",
                        upstream.config.name
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
                stopped: AtomicBool::new(false),
                on_change: self.on_change.clone(),
                on_log: self.on_log.clone(),
            });
            if let Err(error) = upstream.connect().await {
                eprintln!("airlock: upstream {}: {error}", config.name);
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
        self.runtime
            .block_on(async { upstream.call(&call.tool, &call.args).await })
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
        Some(airlock_broker::UpstreamTool {
            annotations: crate::tools::annotations_of(listed),
        })
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
