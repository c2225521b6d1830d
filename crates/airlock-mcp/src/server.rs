//! One MCP session: `tools/list`, `tools/call` through the broker, blobs as
//! resources (their hashes completed by `completion/complete`), the log level
//! (`logging/setLevel`), and asking the client's human.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_broker::{ClientAsk, Mode};
use airlock_core::envelope::Status;
use airlock_core::{ErrorCode, Principal, ToolCall};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::McpFace;
use crate::ask::{decide_request, decision_form, decision_message};
use crate::face::LogLevel;
use crate::result::to_result;
use crate::tools;

/// The resource template of blobs; its one variable is `hex`.
const BLOB_TEMPLATE: &str = "airlock://blob/sha256/{hex}";

/// How often a waiting call tells a client with a progress token that it is
/// still waiting.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// How often the client's human is asked again after approving without the
/// reason the risk requires.
const REASON_ATTEMPTS: u32 = 3;

/// How a session is bound.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// The profile bound to the endpoint (`--profile`, `/mcp/{profile}`); the
    /// model cannot choose another.
    pub profile: Option<String>,
    /// The user the calls are made for (stdio: the OS user).
    pub user: Option<String>,
    /// HTTP: the profile comes from the request path, the user from the token.
    pub http: bool,
    /// A durable session the operator bound to the endpoint (`serve
    /// --session`): every call runs in it, and naming another is
    /// `session_mismatch` (DESIGN §5.3).
    pub session: Option<String>,
}

/// What a session's requests are bound to: the profile, and who makes them
/// (the user; over HTTP also the token, which the calls' principal carries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binding {
    profile: Option<String>,
    user: Option<String>,
    token: Option<String>,
    admin: bool,
}

/// One MCP session (an rmcp `ServerHandler`).
#[derive(Clone)]
pub struct Session {
    face: Arc<McpFace>,
    options: SessionOptions,
    id: String,
    /// HTTP: the profile and token the session started with; later requests
    /// must come the same way.
    bound: Arc<Mutex<Option<Binding>>>,
    /// The least severe log message the client wants.
    log_level: LogLevel,
    /// The client, once initialized (the fast lane answers it).
    peer: Arc<std::sync::OnceLock<rmcp::service::Peer<RoleServer>>>,
    /// The durable session this connection opened last: its calls run in
    /// it unless they name another (DESIGN §5.3).
    last_opened: Arc<Mutex<Option<String>>>,
}

impl Session {
    pub fn new(face: Arc<McpFace>, options: SessionOptions) -> Session {
        Session {
            face,
            options,
            id: format!("mcp-{}", random_id()),
            bound: Arc::new(Mutex::new(None)),
            log_level: LogLevel::default(),
            peer: Arc::default(),
            last_opened: Arc::default(),
        }
    }

    /// The client of this session, once it is initialized.
    pub(crate) fn initialized_peer(&self) -> Option<rmcp::service::Peer<RoleServer>> {
        self.peer.get().cloned()
    }

    /// Whether this session is served over streamable HTTP.
    pub(crate) fn is_http(&self) -> bool {
        self.options.http
    }

    /// For the fast lane: the binding of a request that came with `parts`
    /// (HTTP) or on stdio, if the session is bound to it already. `None`
    /// when it is not bound yet or is bound otherwise (the usual way says
    /// why).
    pub(crate) fn bound_as(&self, parts: Option<&http::request::Parts>) -> Option<Binding> {
        if !self.options.http {
            return Some(self.stdio_binding());
        }
        let now = Self::http_binding(parts?);
        let bound = self.bound.lock().ok()?;
        (bound.as_ref() == Some(&now)).then_some(now)
    }

    /// Whether this HTTP session is bound to another path or token than
    /// those of a request that came with `parts`.
    pub(crate) fn binding_conflicts(&self, parts: &http::request::Parts) -> bool {
        if !self.options.http {
            return false;
        }
        let now = Self::http_binding(parts);
        self.bound.lock().map_or(true, |bound| {
            bound.as_ref().is_some_and(|bound| *bound != now)
        })
    }

    /// For the fast lane: the call a request of tool `name` bound to
    /// `binding` makes, and the forwarding the policy lets through at once,
    /// if it does (see `crate::lane`). `None` leaves the request to `call`.
    pub(crate) fn forward_at_once(
        &self,
        name: &str,
        args: Value,
        meta: &serde_json::Map<String, Value>,
        id: &rmcp::model::RequestId,
        info: &rmcp::model::InitializeRequestParams,
        binding: Binding,
    ) -> Option<(ToolCall, airlock_broker::ForwardNow)> {
        if name == tools::PERMISSION_PROMPT && self.face.wrap().is_none() {
            return None;
        }
        let (tool, origin) = self.face.runtime().resolve(name);
        if !matches!(origin, airlock_core::ToolOrigin::Upstream { .. }) {
            return None;
        }
        let call = self
            .call_of(
                tool,
                args,
                origin,
                binding,
                Some(info.client_info.name.clone()),
                meta,
                id.to_string(),
            )
            .ok()?;
        let ask = if elicits(&info.capabilities) {
            ClientAsk::Elicit
        } else {
            ClientAsk::Unable
        };
        let now = self.face.broker().forward_now(&call, &Mode::Client(ask))?;
        Some((call, now))
    }

    /// For the fast lane: carries out `now` for the client's request `id`
    /// and answers as `call` would.
    pub(crate) async fn forwarded(
        &self,
        call: &ToolCall,
        now: airlock_broker::ForwardNow,
        peer: rmcp::service::Peer<RoleServer>,
        id: rmcp::model::RequestId,
        cancelled: tokio_util::sync::CancellationToken,
    ) -> rmcp::model::CallToolResult {
        let caller = crate::caller::Caller {
            client: crate::hub::Client {
                session: self.id.clone(),
                peer,
            },
            request: Some(id),
            progress_token: None,
            cancelled,
            session_roots: self.face.broker().session_roots(call),
        };
        let envelope = self.carry_out(now, caller).await;
        self.result_of(call, &envelope)
    }

    fn stdio_binding(&self) -> Binding {
        Binding {
            profile: self.options.profile.clone(),
            user: self.options.user.clone(),
            token: None,
            admin: false,
        }
    }

    /// The profile and user of this request. Over HTTP they come from the
    /// path and the token, and must not change within a session.
    fn binding(&self, extensions: &rmcp::model::Extensions) -> Result<Binding, ErrorData> {
        if !self.options.http {
            return Ok(self.stdio_binding());
        }
        let now = match extensions.get::<http::request::Parts>() {
            Some(parts) => Self::http_binding(parts),
            None => Binding {
                profile: None,
                user: None,
                token: None,
                admin: false,
            },
        };
        let mut bound = self
            .bound
            .lock()
            .map_err(|_| ErrorData::internal_error("session state is poisoned", None))?;
        match &*bound {
            Some(first) if *first != now => Err(ErrorData::invalid_request(
                "this session was started on another endpoint or with another token",
                None,
            )),
            Some(_) => Ok(now),
            None => {
                *bound = Some(now.clone());
                Ok(now)
            }
        }
    }

    /// The profile (from the path) and caller (from the token) of an HTTP
    /// request.
    fn http_binding(parts: &http::request::Parts) -> Binding {
        let profile = parts
            .uri
            .path()
            .strip_prefix("/mcp/")
            .map(|rest| rest.trim_end_matches('/').to_owned())
            .filter(|rest| !rest.is_empty());
        let principal = parts.extensions.get::<airlock_core::call::HttpPrincipal>();
        Binding {
            profile,
            user: principal.and_then(|principal| principal.user.clone()),
            token: principal.map(|principal| principal.token_name.clone()),
            admin: principal.is_some_and(|principal| principal.admin),
        }
    }

    /// The upstreams' prompts, named as their tools are: unchanged under
    /// `wrap`, else `<upstream>__<prompt>`.
    fn visible_prompts(&self) -> Vec<rmcp::model::Prompt> {
        let wrap = self.face.wrap();
        let mut out = Vec::new();
        for upstream in self.face.upstreams.all() {
            let upstream_name = &upstream.config.name;
            if wrap.is_some_and(|wrap| wrap != upstream_name) {
                continue;
            }
            for prompt in upstream.prompts().iter() {
                let mut shown = prompt.clone();
                if wrap.is_none() && upstream.config.prefix {
                    shown.name = format!("{upstream_name}__{}", prompt.name);
                }
                out.push(shown);
            }
        }
        out
    }

    /// The upstream a prompt name shown to the client stands for, and the
    /// prompt's own name there.
    fn prompt_of(
        &self,
        shown: &str,
    ) -> Option<(std::sync::Arc<crate::upstream::Upstream>, String)> {
        let unprefixed = || {
            self.face
                .upstreams
                .all()
                .into_iter()
                .find(|upstream| !upstream.config.prefix)
        };
        let (upstream, name) = match self.face.wrap() {
            Some(wrap) => (self.face.upstreams.get(wrap)?, shown.to_owned()),
            None => match shown.split_once("__") {
                Some((upstream, name)) => (self.face.upstreams.get(upstream)?, name.to_owned()),
                None => (unprefixed()?, shown.to_owned()),
            },
        };
        upstream
            .prompts()
            .iter()
            .any(|prompt| prompt.name == name)
            .then_some((upstream, name))
    }

    /// The tools this session may see.
    fn visible_tools(&self, profile: Option<&str>) -> Vec<Tool> {
        let broker = self.face.broker();
        let policy = broker.policy();
        let wrap = self.face.wrap();
        let mut out = Vec::new();
        for tool in tools::builtin() {
            let name = tool.name.as_ref();
            if wrap.is_some() && name != "proposal_status" {
                continue;
            }
            if policy.lists_tool(profile, name) {
                out.push(tool.clone());
            }
        }
        if wrap.is_none() && policy.lists_tool(profile, tools::PERMISSION_PROMPT) {
            out.push(tools::permission_prompt().clone());
        }
        if wrap.is_none() {
            out.extend(broker.code_tools(profile).iter().filter_map(tools::listed));
        }
        for upstream in self.face.upstreams.all() {
            let upstream_name = &upstream.config.name;
            if wrap.is_some_and(|wrap| wrap != upstream_name) {
                continue;
            }
            let unprefixed = wrap.is_none() && !upstream.config.prefix;
            for tool in upstream.tools().iter() {
                let gated = format!("{upstream_name}__{}", tool.name);
                if !policy.lists_tool(profile, &gated) {
                    continue;
                }
                // A name airlock's own tools have is not offered unprefixed
                // (the server could not start with one; a later list could).
                if unprefixed && !airlock_broker::offered_unprefixed(&tool.name) {
                    continue;
                }
                let shown = if wrap.is_some() || unprefixed {
                    tool.name.to_string()
                } else {
                    gated
                };
                if shown == "proposal_status" && wrap.is_some() {
                    // The upstream's own tool of that name wins under wrap.
                    out.retain(|listed| listed.name != "proposal_status");
                }
                out.push(tools::relisted(tool, shown));
            }
        }
        out
    }

    /// The call a request makes of the broker: bound to the session's
    /// profile and user, with the request's correlation id and requester.
    fn tool_call(
        &self,
        tool: String,
        args: Value,
        origin: airlock_core::ToolOrigin,
        context: &RequestContext<RoleServer>,
    ) -> Result<ToolCall, ErrorData> {
        let binding = self.binding(&context.extensions)?;
        let agent = context.client_info().map(|info| info.name);
        self.call_of(
            tool,
            args,
            origin,
            binding,
            agent,
            &context.meta,
            context.id.to_string(),
        )
    }

    /// The call of a request bound by `binding`, made by `agent`, with the
    /// request's `_meta` and id.
    #[expect(clippy::too_many_arguments, reason = "the parts of one request")]
    fn call_of(
        &self,
        tool: String,
        args: Value,
        origin: airlock_core::ToolOrigin,
        binding: Binding,
        agent: Option<String>,
        meta: &serde_json::Map<String, Value>,
        request_id: String,
    ) -> Result<ToolCall, ErrorData> {
        let Binding {
            profile,
            user,
            token,
            admin,
        } = binding;
        // Spec 000's correlation id, from the request's `_meta`.
        let context_id = match meta.get("context_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => {
                airlock_core::call::check_context_id(id)
                    .map_err(|error| ErrorData::invalid_params(error.to_string(), None))?;
                Some(id.clone())
            }
            Some(_) => {
                return Err(ErrorData::invalid_params(
                    "_meta.context_id must be a string",
                    None,
                ));
            }
        };
        // Who asked on a chat platform (spec 001), from `_meta`.
        let requester = match meta.get("airlock/requester") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                airlock_core::Requester::from_json(value).map_err(|message| {
                    ErrorData::invalid_params(
                        format!("_meta[\"airlock/requester\"]: {message}"),
                        None,
                    )
                })?,
            ),
        };
        Ok(ToolCall {
            tool,
            args,
            origin,
            principal: Principal {
                user,
                agent,
                token,
                admin,
            },
            session: Some(self.id.clone()),
            profile,
            tool_call_id: Some(request_id),
            context_id,
            requester,
            received_at: self.face.broker().now_ms(),
            via: None,
            sessions: airlock_core::SessionHints {
                bound: self.options.session.clone(),
                last: self.last_opened.lock().ok().and_then(|last| last.clone()),
            },
            scope: None,
        })
    }

    /// Remembers the session a `session_open` of this connection opened
    /// (and forgets it when the connection closes it).
    fn note_session(&self, call: &ToolCall, envelope: &airlock_core::envelope::Envelope) {
        if envelope.status != Status::Allowed {
            return;
        }
        let id = envelope
            .data
            .as_ref()
            .and_then(|data| data.get("session_id"))
            .and_then(Value::as_str);
        let Ok(mut last) = self.last_opened.lock() else {
            return;
        };
        match (call.tool.as_str(), id) {
            ("session_open", Some(id)) => *last = Some(id.to_owned()),
            ("session_close", Some(id)) if last.as_deref() == Some(id) => *last = None,
            _ => {}
        }
    }

    /// Runs `call` through the broker on this thread (`block_in_place`): an
    /// allowed call answers without handing work to another thread and
    /// back, and a forwarded one knows its client (progress, cancellation,
    /// the server's requests). While a human decides, a companion task asks
    /// the client, sends progress and watches for the client's
    /// cancellation.
    fn submit(
        &self,
        call: &ToolCall,
        ask: ClientAsk,
        context: &RequestContext<RoleServer>,
    ) -> airlock_core::envelope::Envelope {
        let broker = self.face.broker();
        if answers_at_once(&call.origin) {
            return broker.submit(call, &Mode::Client(ask), &|_| {});
        }
        let progress_token = context.meta.get_progress_token();
        let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
        // What the call says while it runs (a script's console lines and
        // calls), as progress notifications, in order, before its answer.
        let sink = progress_token.clone().map(|token| {
            let peer = context.peer.clone();
            let counter = counter.clone();
            let runtime = tokio::runtime::Handle::current();
            Box::new(move |message: &str| {
                let progress = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                let param = serde_json::from_value::<ProgressNotificationParam>(json!({
                    "progressToken": token,
                    "progress": progress,
                    "message": message,
                }));
                if let Ok(param) = param {
                    let _ = runtime.block_on(peer.notify_progress(param));
                }
            }) as airlock_broker::progress::Sink
        });
        let companion = Companion {
            broker: broker.clone(),
            peer: context.peer.clone(),
            origin: Some(context.id.clone()),
            progress_token,
            counter,
            cancelled: context.ct.clone(),
            elicit: ask == ClientAsk::Elicit,
            user: call.principal.user.clone(),
            runtime: tokio::runtime::Handle::current(),
            running: Mutex::new(None),
        };
        let caller = self.caller(context, call);
        // The client's `notifications/cancelled` (or its going away) kills
        // a command the call runs.
        let cancel = airlock_broker::Cancel::new();
        let watch = {
            let cancel = cancel.clone();
            let cancelled = context.ct.clone();
            tokio::spawn(async move {
                cancelled.cancelled().await;
                cancel.cancel();
            })
        };
        let envelope = tokio::task::block_in_place(|| {
            crate::caller::with_caller(caller, || {
                let submit = || {
                    broker.submit_cancellable(
                        call,
                        &Mode::Client(ask),
                        &|approval| {
                            companion.start(approval.id.clone());
                        },
                        &cancel,
                    )
                };
                match sink {
                    Some(sink) => airlock_broker::progress::with_sink(sink, submit),
                    None => submit(),
                }
            })
        });
        watch.abort();
        companion.stop();
        envelope
    }

    /// This session as the client behind the request of `context`.
    fn caller(
        &self,
        context: &RequestContext<RoleServer>,
        call: &ToolCall,
    ) -> crate::caller::Caller {
        crate::caller::Caller {
            session_roots: self.face.broker().session_roots(call),
            client: crate::hub::Client {
                session: self.id.clone(),
                peer: context.peer.clone(),
            },
            request: Some(context.id.clone()),
            progress_token: context.meta.get_progress_token(),
            cancelled: context.ct.clone(),
        }
    }

    /// An upstream tool call the policy lets through at once, forwarded
    /// here and awaited, without handing this thread to the broker and
    /// blocking it on the server (the decision and the audit record are
    /// the broker's, as for any call). `None` when the call is not one.
    async fn forward_now(
        &self,
        call: &ToolCall,
        ask: ClientAsk,
        context: &RequestContext<RoleServer>,
    ) -> Option<airlock_core::envelope::Envelope> {
        if !matches!(call.origin, airlock_core::ToolOrigin::Upstream { .. }) {
            return None;
        }
        let now = self.face.broker().forward_now(call, &Mode::Client(ask))?;
        Some(self.carry_out(now, self.caller(context, call)).await)
    }

    /// Forwards what the policy let through at once, for `caller`, and
    /// records what came of it.
    async fn carry_out(
        &self,
        now: airlock_broker::ForwardNow,
        caller: crate::caller::Caller,
    ) -> airlock_core::envelope::Envelope {
        let result = match self.face.upstreams.get(&now.call.upstream) {
            Some(upstream) => upstream.forward(&now.call, Some(caller)).await,
            None => Err(airlock_broker::ForwardError::NoSuchUpstream(
                now.call.upstream.clone(),
            )),
        };
        self.face.broker().forwarded_now(now, result)
    }

    /// The upstream a resource URI belongs to: under `wrap` the one server;
    /// else the upstream that listed it or offers a template it matches,
    /// else the only upstream with resources. `None` when none (or more
    /// than one, ambiguously) would take it.
    fn resource_owner(&self, uri: &str) -> Option<Arc<crate::upstream::Upstream>> {
        if let Some(wrap) = self.face.wrap() {
            return self.face.upstreams.get(wrap);
        }
        let offering: Vec<_> = self
            .face
            .upstreams
            .all()
            .into_iter()
            .filter(|upstream| upstream.offers_resources())
            .collect();
        if let Some(owner) = offering.iter().find(|upstream| upstream.owns_resource(uri)) {
            return Some(owner.clone());
        }
        match offering.as_slice() {
            [only] => Some(only.clone()),
            _ => None,
        }
    }

    /// [`Self::resource_owner`], or the error a server gives for a
    /// resource it does not have.
    fn owner_of(&self, uri: &str) -> Result<Arc<crate::upstream::Upstream>, ErrorData> {
        self.resource_owner(uri)
            .ok_or_else(|| ErrorData::resource_not_found(format!("no resource {uri}"), None))
    }

    /// The upstream offering the resource template `template`.
    fn template_owner(&self, template: &str) -> Option<Arc<crate::upstream::Upstream>> {
        if let Some(wrap) = self.face.wrap() {
            return self.face.upstreams.get(wrap);
        }
        self.face
            .upstreams
            .all()
            .into_iter()
            .find(|upstream| upstream.has_template(template))
    }

    /// One of airlock's blobs, as a resource.
    async fn read_blob(
        &self,
        uri: &str,
        hex: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let blob_ref = format!("sha256:{hex}");
        let broker = self.face.broker();
        let session = self.id.clone();
        let agent = context.client_info().map(|info| info.name);
        let bytes = tokio::task::spawn_blocking(move || {
            broker.read_blob(&blob_ref, Some(&session), agent.as_deref())
        })
        .await
        .map_err(|error| ErrorData::internal_error(error.to_string(), None))?
        .map_err(|error| ErrorData::resource_not_found(error.to_string(), None))?;
        let contents = match String::from_utf8(bytes) {
            Ok(text) => json!({"uri": uri, "mimeType": "text/plain", "text": text}),
            Err(error) => {
                use base64::Engine as _;
                json!({
                    "uri": uri,
                    "mimeType": "application/octet-stream",
                    "blob": base64::engine::general_purpose::STANDARD.encode(error.into_bytes()),
                })
            }
        };
        let result = serde_json::from_value(json!({"contents": [contents]}))
            .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        Ok(ReadResourceResponse::Complete(result))
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == tools::PERMISSION_PROMPT && self.face.wrap().is_none() {
            return Ok(CallToolResponse::Complete(
                self.permission_prompt(&request, &context),
            ));
        }
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        // Spec 003's dotted names are accepted, never listed.
        let (name, args) = airlock_core::tools::canonical_call(&request.name, args);
        let (tool, origin) = self.face.runtime().resolve(&name);
        let version = context.protocol_version();
        let rounds = version
            .as_ref()
            .is_some_and(|version| *version >= ProtocolVersion::V_2026_07_28);
        let elicits = client_elicits(&context);
        let ask = match (rounds, elicits) {
            (true, true) => ClientAsk::Rounds,
            (false, true) => ClientAsk::Elicit,
            (_, false) => ClientAsk::Unable,
        };
        let call = self.tool_call(tool, args, origin, &context)?;
        if rounds && request.request_state.is_some() {
            return crate::rounds::resume(&self.face, &call, &request).await;
        }
        let envelope = match self.forward_now(&call, ask, &context).await {
            Some(envelope) => envelope,
            None => self.submit(&call, ask, &context),
        };
        self.note_session(&call, &envelope);
        if rounds && envelope.status == Status::HitlRequired {
            return crate::rounds::input_required(&self.face, &call, &envelope).await;
        }
        Ok(CallToolResponse::Complete(self.result_of(&call, &envelope)))
    }

    /// The tool result of `call`'s envelope.
    fn result_of(
        &self,
        call: &ToolCall,
        envelope: &airlock_core::envelope::Envelope,
    ) -> rmcp::model::CallToolResult {
        let mut result = to_result(envelope);
        // A result that is not the tool's own (it waits for a human) cannot
        // match the tool's `outputSchema`: clients check that schema on
        // every result not marked as an error.
        if result.is_error != Some(true)
            && envelope.status != Status::Allowed
            && self.has_output_schema(call)
        {
            result.is_error = Some(true);
        }
        result
    }

    /// Claude Code's permission prompt: the call it asks about, decided as
    /// its `PermissionRequest` hook would be, answered as the JSON text it
    /// reads (an allow always carries `updatedInput`, the input as it is
    /// unless an approver changed it).
    fn permission_prompt(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> rmcp::model::CallToolResult {
        use airlock_core::hooks::{Agent, AgentEvent, HookVerdict, Phase};
        let arguments = request.arguments.clone().unwrap_or_default();
        let answer = |value: Value| {
            rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text(
                value.to_string(),
            )])
        };
        let deny = |message: String| answer(json!({"behavior": "deny", "message": message}));
        let (Some(Value::String(tool_name)), Some(Value::Object(input))) =
            (arguments.get("tool_name"), arguments.get("input"))
        else {
            return deny(
                "airlock: permission_prompt needs tool_name (a string) and input (an object)"
                    .to_owned(),
            );
        };
        let event = AgentEvent {
            agent: Agent::ClaudeCode,
            phase: Phase::Permission,
            event_name: "permission_prompt".to_owned(),
            session_id: Some(self.id.to_string()),
            tool_use_id: arguments
                .get("tool_use_id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            cwd: None,
            tool_name: tool_name.clone(),
            tool_input: Value::Object(input.clone()),
            tool_response: None,
            mcp_context: None,
        };
        let broker = self.face.broker();
        let wait = std::time::Duration::from_secs(Agent::ClaudeCode.default_timeout_seconds())
            .saturating_sub(airlock_broker::HOOK_MARGIN);
        let _ = context;
        let verdict = tokio::task::block_in_place(|| broker.hook(&event, wait));
        match verdict {
            HookVerdict::Allow { updated_input, .. } => answer(json!({
                "behavior": "allow",
                "updatedInput": updated_input.unwrap_or(Value::Object(input.clone())),
            })),
            HookVerdict::Deny { reason } => deny(reason),
            HookVerdict::Pass | HookVerdict::Notice { .. } => {
                deny("airlock: no decision".to_owned())
            }
        }
    }

    /// Whether the upstream tool `call` names declares an `outputSchema`.
    fn has_output_schema(&self, call: &ToolCall) -> bool {
        let airlock_core::ToolOrigin::Upstream { upstream, .. } = &call.origin else {
            return false;
        };
        let Some(server) = self.face.upstreams.get(upstream) else {
            return false;
        };
        let name = call
            .tool
            .strip_prefix(&**upstream)
            .and_then(|rest| rest.strip_prefix("__"))
            .unwrap_or(&call.tool);
        server
            .tools()
            .iter()
            .any(|tool| tool.name == name && tool.output_schema.is_some())
    }
}

/// The work beside a call that waits for a human: asking the client's human
/// (elicitation), progress notifications, and cancelling the approval when
/// the client cancels the request.
pub(crate) struct Companion {
    broker: Arc<airlock_broker::Broker>,
    peer: rmcp::service::Peer<RoleServer>,
    /// The client's request the call waits in: the form goes on its stream
    /// (over HTTP, the POST's), where the client is listening.
    origin: Option<rmcp::model::RequestId>,
    progress_token: Option<rmcp::model::ProgressToken>,
    /// The last progress value sent for the request (its notifications
    /// count up, whoever sends them).
    counter: Arc<std::sync::atomic::AtomicU64>,
    cancelled: tokio_util::sync::CancellationToken,
    elicit: bool,
    user: Option<String>,
    runtime: tokio::runtime::Handle,
    /// Stops the running companion task.
    running: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl Companion {
    /// The companion of a request that is not a session's own (an
    /// upstream's sampling request for `peer`'s call): it asks `peer`'s
    /// human if `elicit`, and cancels the approval if `cancelled`.
    pub(crate) fn for_request(
        broker: Arc<airlock_broker::Broker>,
        peer: rmcp::service::Peer<RoleServer>,
        origin: Option<rmcp::model::RequestId>,
        cancelled: tokio_util::sync::CancellationToken,
        elicit: bool,
    ) -> Companion {
        Companion {
            broker,
            peer,
            origin,
            progress_token: None,
            counter: Arc::default(),
            cancelled,
            elicit,
            user: None,
            runtime: tokio::runtime::Handle::current(),
            running: Mutex::new(None),
        }
    }

    /// Called (on the broker's thread) once approval `id` is pending.
    pub(crate) fn start(&self, id: String) {
        if self.elicit {
            self.runtime.spawn(elicit(
                self.broker.clone(),
                self.peer.clone(),
                self.origin.clone(),
                id.clone(),
                self.user.clone(),
            ));
        }
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        if let Ok(mut running) = self.running.lock() {
            *running = Some(stop);
        }
        let broker = self.broker.clone();
        let peer = self.peer.clone();
        let progress_token = self.progress_token.clone();
        let counter = self.counter.clone();
        let cancelled = self.cancelled.clone();
        self.runtime.spawn(async move {
            let mut ticks = tokio::time::interval(PROGRESS_EVERY);
            ticks.tick().await;
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    () = cancelled.cancelled() => {
                        // The client gave up on the call: its approval is
                        // cancelled, which ends the wait.
                        // A store failure is logged by the broker; a task
                        // that could not run is logged here.
                        if let Err(error) =
                            tokio::task::spawn_blocking(move || broker.cancel(&id)).await
                        {
                            eprintln!("airlock: cancelling an abandoned approval: {error}");
                        }
                        return;
                    }
                    _ = ticks.tick(), if progress_token.is_some() => {
                        if let Some(token) = &progress_token {
                            let progress =
                                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                            let param = serde_json::from_value::<ProgressNotificationParam>(json!({
                                "progressToken": token,
                                "progress": progress,
                                "message": format!("waiting for a human to decide {id}"),
                            }));
                            if let Ok(param) = param {
                                let _ = peer.notify_progress(param).await;
                            }
                        }
                    }
                }
            }
        });
    }

    /// The call has its answer: the companion task ends.
    pub(crate) fn stop(&self) {
        if let Some(stop) = self
            .running
            .lock()
            .ok()
            .and_then(|mut running| running.take())
        {
            let _ = stop.send(());
        }
    }
}

/// Code mode's declarations, as a resource.
const CODEMODE_TYPES: &str = "airlock://codemode/types.d.ts";

/// Whether the client can answer a form elicitation.
/// Built-in tools whose call is answered here, on the worker: reads of a
/// bounded amount, which never wait for a human (a read that would ask is
/// refused) nor run a command. Everything else is submitted off the worker
/// (`block_in_place`), which costs a hand-off of the worker to another
/// thread and back.
fn answers_at_once(origin: &airlock_core::ToolOrigin) -> bool {
    use airlock_core::tools::BuiltinTool;
    matches!(
        origin,
        airlock_core::ToolOrigin::Builtin(
            BuiltinTool::ReadFile
                | BuiltinTool::Stat
                | BuiltinTool::Exists
                | BuiltinTool::ProposalStatus
        )
    )
}

fn client_elicits(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|capabilities| elicits(&capabilities))
}

/// Whether a client that says it can do `capabilities` can be asked with a
/// form.
pub(crate) fn elicits(capabilities: &rmcp::model::ClientCapabilities) -> bool {
    match &capabilities.elicitation {
        Some(elicitation) => elicitation.form.is_some() || elicitation.url.is_none(),
        None => false,
    }
}

/// `elicitation/create` with `params`, on the stream of the client's
/// request `origin` if there is one (over HTTP, rmcp sends it on the POST's
/// stream, where every client listens, rather than on the session's GET
/// stream, which a client may not have opened).
async fn ask_form(
    peer: &rmcp::service::Peer<RoleServer>,
    origin: Option<&rmcp::model::RequestId>,
    params: rmcp::model::ElicitRequestParams,
    timeout: Duration,
) -> Result<rmcp::model::ElicitResult, rmcp::service::ServiceError> {
    use rmcp::model::GetExtensions as _;
    let mut request =
        rmcp::model::ServerRequest::ElicitRequest(rmcp::model::ElicitRequest::new(params));
    if let Some(origin) = origin {
        request
            .extensions_mut()
            .insert(rmcp::service::OriginatingRequestId(origin.clone()));
    }
    let result = peer
        .send_request_with_option(
            request,
            rmcp::service::PeerRequestOptions::with_timeout(timeout),
        )
        .await?
        .await_response()
        .await?;
    match result {
        rmcp::model::ClientResult::ElicitResult(result) => Ok(result),
        _ => Err(rmcp::service::ServiceError::UnexpectedResponse),
    }
}

/// Asks the client's human about approval `id` with `elicitation/create`, and
/// decides it with the answer (unless another channel decided first).
async fn elicit(
    broker: Arc<airlock_broker::Broker>,
    peer: rmcp::service::Peer<RoleServer>,
    origin: Option<rmcp::model::RequestId>,
    id: String,
    user: Option<String>,
) {
    let form_broker = broker.clone();
    let form_id = id.clone();
    let Ok(Ok(form)) = tokio::task::spawn_blocking(move || form_broker.ask_form(&form_id)).await
    else {
        return;
    };
    if !form.client_may_decide {
        return;
    }
    let mut message = decision_message(&form);
    let mut attempts = 0;
    let request = loop {
        attempts += 1;
        let params = serde_json::from_value(json!({
            "mode": "form",
            "message": message,
            "requestedSchema": decision_form(&form),
        }));
        let params = match params {
            Ok(params) => params,
            Err(error) => {
                eprintln!("airlock: cannot build the elicitation for {id}: {error}");
                return;
            }
        };
        let left = form.expires_ms.saturating_sub(broker.now_ms());
        if left == 0 {
            return;
        }
        let answer = ask_form(&peer, origin.as_ref(), params, Duration::from_millis(left)).await;
        let result = match answer {
            Ok(result) => result,
            Err(error) => {
                // The client failed to ask: the other channels (and the
                // timeout) still decide; nothing is approved.
                eprintln!("airlock: elicitation for {id} failed: {error}");
                return;
            }
        };
        match decide_request(&result.action, result.content.as_ref(), &form, user.clone()) {
            Some(request) => break request,
            // An approval without the reason this risk requires decides
            // nothing: the human is asked again (a few times), and the other
            // channels can still decide.
            None if attempts < REASON_ATTEMPTS => {
                message = format!(
                    "A reason is required to approve this call.\n\n{}",
                    decision_message(&form)
                );
            }
            None => {
                eprintln!("airlock: {id}: approved without the required reason; not decided here");
                return;
            }
        }
    };
    let decided = tokio::task::spawn_blocking(move || {
        let decided = broker.decide(&id, &request);
        (id, decided)
    })
    .await;
    match decided {
        // Another channel decided first, or time ran out: the call's wait
        // reports that.
        Ok((_, Ok(_))) => {}
        Ok((_, Err(error)))
            if matches!(error.code(), ErrorCode::AlreadyDecided | ErrorCode::Expired) => {}
        Ok((id, Err(error))) => {
            eprintln!("airlock: {id}: the client's answer was not applied: {error}");
        }
        Err(error) => eprintln!("airlock: deciding from the client: {error}"),
    }
}

/// A random id (UUID v4): unguessable, never repeated by another process.
fn random_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        #[expect(
            deprecated,
            reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
        )]
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .build();
        let mut info = ServerConfig::new(capabilities);
        info.server_info = rmcp::model::Implementation::new("airlock", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "airlock gates file and tool access: reads run at once; writes become proposals a \
             human approves. A call answered hitl_required is pending: poll proposal_status."
                .to_owned(),
        );
        info
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let _ = self.peer.set(context.peer.clone());
        // Over HTTP, the fast lane finds the session by the id its
        // requests carry from now on.
        if self.options.http
            && let Some(id) = context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|parts| parts.headers.get("mcp-session-id"))
                .and_then(|id| id.to_str().ok())
        {
            self.face.http_lanes.open(id, self.clone());
        }
        self.face
            .register_peer(&self.id, context.peer, self.log_level.clone());
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let binding = self.binding(&context.extensions)?;
        Ok(ListToolsResult::with_all_items(
            self.visible_tools(binding.profile.as_deref()),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, context).await
    }

    /// Under `wrap`, the server's list page by page as it gives it; under
    /// `serve`, each upstream's list in turn (the cursor says whose page is
    /// next). airlock's own blobs are not enumerated: each is named in the
    /// result that made it.
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let cursor = request.and_then(|request| request.cursor);
        if let Some(wrap) = self.face.wrap() {
            return match self.face.upstreams.get(wrap) {
                Some(upstream) if upstream.offers_resources() => {
                    upstream.list_resources_page(cursor).await
                }
                _ => Ok(ListResourcesResult::default()),
            };
        }
        let offering: Vec<_> = self
            .face
            .upstreams
            .all()
            .into_iter()
            .filter(|upstream| upstream.offers_resources())
            .collect();
        let (at, their_cursor) = match cursor {
            None => (0, None),
            Some(text) => {
                let cursor = crate::resources::Cursor::decode(&text)
                    .ok_or_else(|| ErrorData::invalid_params("invalid cursor", None))?;
                let at = offering
                    .iter()
                    .position(|upstream| upstream.config.name == cursor.upstream)
                    .ok_or_else(|| {
                        ErrorData::invalid_params(
                            format!(
                                "invalid cursor: no upstream {} offers resources",
                                cursor.upstream
                            ),
                            None,
                        )
                    })?;
                (at, cursor.cursor)
            }
        };
        // Code mode's declarations, first on the first page.
        let first_page = at == 0 && their_cursor.is_none();
        let declarations = if first_page {
            let binding = self.binding(&context.extensions)?;
            self.face
                .broker()
                .code_declarations(binding.profile.as_deref())
                .and_then(|_| {
                    serde_json::from_value::<rmcp::model::Resource>(json!({
                        "uri": CODEMODE_TYPES,
                        "name": "codemode types",
                        "description": "TypeScript declarations of the tools a codemode_eval script may call.",
                        "mimeType": "application/typescript",
                    }))
                    .ok()
                })
        } else {
            None
        };
        let Some(upstream) = offering.get(at) else {
            return Ok(ListResourcesResult::with_all_items(
                declarations.into_iter().collect(),
            ));
        };
        let mut page = upstream.list_resources_page(their_cursor).await?;
        if let Some(declarations) = declarations {
            page.resources.insert(0, declarations);
        }
        page.next_cursor = match page.next_cursor.take() {
            Some(next) => Some(crate::resources::Cursor {
                upstream: upstream.config.name.clone(),
                cursor: Some(next),
            }),
            None => offering.get(at + 1).map(|next| crate::resources::Cursor {
                upstream: next.config.name.clone(),
                cursor: None,
            }),
        }
        .map(|cursor| cursor.encode());
        Ok(page)
    }

    /// Under `wrap`, the server's templates as it gives them; under
    /// `serve`, airlock's blob template and every upstream's.
    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        if let Some(wrap) = self.face.wrap() {
            let cursor = request.and_then(|request| request.cursor);
            return match self.face.upstreams.get(wrap) {
                Some(upstream) if upstream.offers_resources() => {
                    upstream.list_templates_page(cursor).await
                }
                _ => Ok(ListResourceTemplatesResult::default()),
            };
        }
        let blob = serde_json::from_value(json!({
            "uriTemplate": BLOB_TEMPLATE,
            "name": "blob",
            "description": "A large tool output, stored by content hash (blob_ref sha256:<hex>).",
        }))
        .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        let mut templates = vec![blob];
        for upstream in self.face.upstreams.all() {
            templates.extend(upstream.templates().iter().cloned());
        }
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri.clone();
        if self.face.wrap().is_none()
            && let Some(hex) = uri.strip_prefix("airlock://blob/sha256/")
        {
            return self.read_blob(&uri, hex, &context).await;
        }
        if self.face.wrap().is_none() && uri == CODEMODE_TYPES {
            let binding = self.binding(&context.extensions)?;
            let text = self
                .face
                .broker()
                .code_declarations(binding.profile.as_deref())
                .ok_or_else(|| {
                    ErrorData::resource_not_found("code mode is not offered here", None)
                })?;
            let result = serde_json::from_value(json!({"contents": [{
                "uri": uri, "mimeType": "application/typescript", "text": text,
            }]}))
            .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
            return Ok(ReadResourceResponse::Complete(result));
        }
        let upstream = self.owner_of(&uri)?;
        // A read-class call under the policy, as `resource:<upstream>:<uri>`.
        let tool = airlock_core::call::resource_tool(&upstream.config.name, &uri);
        let origin = self.face.broker().policy().origin_of(&tool, None);
        let call = self.tool_call(tool, json!({"uri": uri}), origin, &context)?;
        let ask = if client_elicits(&context) {
            ClientAsk::Elicit
        } else {
            ClientAsk::Unable
        };
        let envelope = self.submit(&call, ask, &context);
        if envelope.status == Status::Allowed
            && let Some(data) = &envelope.data
            && let Ok(result) = serde_json::from_value(data.clone())
        {
            return Ok(ReadResourceResponse::Complete(result));
        }
        if let Some(error) = crate::result::passed_jsonrpc_error(&envelope) {
            return Err(error);
        }
        let code = if envelope.status == Status::Error {
            rmcp::model::ErrorCode::INTERNAL_ERROR
        } else {
            rmcp::model::ErrorCode::INVALID_REQUEST
        };
        Err(ErrorData::new(
            code,
            crate::result::sentence(&envelope),
            Some(json!({"airlock/envelope": envelope})),
        ))
    }

    /// Subscribing is allowed where reading is not denied; the upstream is
    /// asked once, however many sessions subscribe.
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = request.uri;
        let upstream = self.owner_of(&uri)?;
        let tool = airlock_core::call::resource_tool(&upstream.config.name, &uri);
        let broker = self.face.broker();
        let origin = broker.policy().origin_of(&tool, None);
        let call = self.tool_call(tool, json!({"uri": uri}), origin, &context)?;
        let decision = broker.decide_only(&call);
        if decision.disposition == airlock_core::Disposition::Deny {
            return Err(ErrorData::invalid_request(
                format!("reading {uri} is denied, so is subscribing to it"),
                None,
            ));
        }
        if self
            .face
            .hub
            .subscribe(&self.id, &upstream.config.name, &uri)
        {
            upstream.subscription(&uri, true).await?;
        }
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = request.uri;
        let upstream = self.owner_of(&uri)?;
        if self
            .face
            .hub
            .unsubscribe(&self.id, &upstream.config.name, &uri)
        {
            upstream.subscription(&uri, false).await?;
        }
        Ok(())
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        self.face.upstreams.roots_changed().await;
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, ErrorData> {
        Ok(rmcp::model::ListPromptsResult::with_all_items(
            self.visible_prompts(),
        ))
    }

    /// An upstream's prompt: its messages are text for the model, not an
    /// action, so it passes as the upstream gives it.
    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        let Some((upstream, name)) = self.prompt_of(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!("no prompt named {}", request.name),
                None,
            ));
        };
        upstream.get_prompt(request, &name).await
    }

    #[expect(
        deprecated,
        reason = "MCP logging is deprecated by SEP-2577 but still part of 2025-11-25"
    )]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level.set(request.level);
        self.face.upstreams.set_level(request.level).await;
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let mut request = request;
        match &mut request.r#ref {
            // An upstream prompt's argument: its server completes it.
            rmcp::model::Reference::Prompt(prompt) => {
                if let Some((upstream, name)) = self.prompt_of(&prompt.name) {
                    prompt.name = name;
                    return upstream.complete(request).await;
                }
            }
            // An upstream resource template's variable: so does its server.
            rmcp::model::Reference::Resource(template) => {
                if let Some(upstream) = self.template_owner(&template.uri) {
                    return upstream.complete(request).await;
                }
            }
            _ => {}
        }
        // A blob's hash is what lets a session read it (the result that
        // made it names it): blob hashes are never enumerated, so nothing
        // else completes.
        Ok(CompleteResult::default())
    }
}
