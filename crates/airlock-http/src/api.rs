//! The approval API (DESIGN §10): agents submit calls and read their
//! results; approvers list, inspect and decide approvals; admins read and
//! verify the audit log. Every answer is JSON; an error has the envelope's
//! error shape `{"status": "error", "error": {"code", "message"}}`.

// The helpers' error is the ready answer a handler returns at once.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use airlock_broker::Runtime;
use airlock_broker::{AlwaysAllow, Authority, BrokerError, DecideRequest, approval_view};
use airlock_core::config::Role;
use airlock_core::envelope::{Envelope, Status};
use airlock_core::{Channel, ErrorCode, Principal, ToolCall};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::Caller;
use crate::events::Events;

/// Largest request body the API reads (larger: 413).
pub(crate) const MAX_BODY: usize = 1024 * 1024;

#[derive(Clone)]
struct Api {
    runtime: Arc<Runtime>,
    events: Events,
}

pub(crate) fn routes(runtime: Arc<Runtime>, events: Events) -> Router {
    // The JSON endpoints take application/json only; the layer sits on their
    // POST alone, so another method is still 405.
    let json_only = || axum::middleware::from_fn(crate::guard::require_json);
    Router::new()
        .route("/hitl/events", get(events_stream))
        .route("/v1/tools/call", post(tools_call).route_layer(json_only()))
        .route(
            "/v1/hooks/{agent}",
            post(hook_event).route_layer(json_only()),
        )
        .route("/hitl/pending", get(pending))
        .route("/hitl/pending/{id}", get(pending_one))
        .route("/hitl/decide/{id}", post(decide).route_layer(json_only()))
        .route("/hitl/preview/{id}", post(preview).route_layer(json_only()))
        .route(
            "/hitl/decide-batch",
            post(decide_batch).route_layer(json_only()),
        )
        .route("/hitl/result/{id}", get(result))
        .route("/hitl/grants", get(grants))
        .route("/hitl/grants/{id}", axum::routing::delete(revoke_grant))
        .route(
            "/v1/sessions",
            // The layer wraps the POST only: it is added before the GET.
            post(session_open)
                .route_layer(json_only())
                .get(sessions_list),
        )
        .route("/v1/sessions/{id}", get(session_show).delete(session_close))
        .route(
            "/v1/sessions/{id}/signal",
            post(session_signal).route_layer(json_only()),
        )
        .route("/v1/stats", get(stats))
        .route("/metrics", get(metrics))
        .route("/audit", get(audit_query))
        .route("/audit/verify", get(audit_verify))
        .with_state(Api { runtime, events })
}

/// `GET /hitl/events`: server-sent events (`created`, `decided`, `expired`):
/// all of them for an approver, an agent's own for an agent (and for a
/// local caller without a token, which is an agent).
async fn events_stream(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    headers: axum::http::HeaderMap,
) -> Response {
    let caller = caller.map(|axum::Extension(caller)| caller);
    let sees_all = caller
        .as_ref()
        .is_some_and(|caller| caller.has(Role::Approver));
    if !sees_all && let Err(refused) = require(caller.as_ref(), Role::Agent) {
        return refused;
    }
    let only = (!sees_all).then(|| principal_of(caller.as_ref()));
    // A reconnecting reader says where it stopped; a new one starts now.
    let cursor = match headers.get("last-event-id") {
        Some(value) => match value
            .to_str()
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
        {
            Some(seq) => seq,
            None => {
                return failure(
                    StatusCode::BAD_REQUEST,
                    ErrorCode::InvalidInput,
                    "Last-Event-ID must be the id of an event (a whole number)",
                );
            }
        },
        None => api.events.now().await,
    };
    // The stream ends once its token no longer signs in (revoked, rotated).
    let valid = caller.and_then(|caller| {
        caller
            .credential
            .clone()
            .map(|credential| (credential, caller.roles.clone()))
    });
    api.events.subscribe(only, cursor, valid).into_response()
}

/// An error answer.
pub(crate) fn failure(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Response {
    let body = json!({
        "status": "error",
        "error": {"code": code.as_str(), "message": message.into()},
    });
    if status == StatusCode::SERVICE_UNAVAILABLE {
        // The shared store is away for now: a client may try again soon.
        return (
            status,
            [(axum::http::header::RETRY_AFTER, "1")],
            axum::Json(body),
        )
            .into_response();
    }
    (status, axum::Json(body)).into_response()
}

/// Who may do what: the caller's roles (admin holds them all). Without
/// configured tokens an anonymous caller on loopback is a local agent.
fn require(caller: Option<&Caller>, role: Role) -> Result<(), Response> {
    match caller {
        Some(caller) if caller.has(role) => Ok(()),
        Some(caller) => Err(failure(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            format!(
                "token {} does not have the {} role",
                caller.name,
                role_name(role)
            ),
        )),
        None if role == Role::Agent => Ok(()),
        None => Err(failure(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            format!(
                "a bearer token with the {} role is required",
                role_name(role)
            ),
        )),
    }
}

/// The caller of a request that needs `role`, or the refusal.
fn admit(caller: Option<axum::Extension<Caller>>, role: Role) -> Result<Option<Caller>, Response> {
    let caller = caller.map(|axum::Extension(caller)| caller);
    require(caller.as_ref(), role)?;
    Ok(caller)
}

/// Runs `work` on the broker in force, on a blocking thread; a broker error
/// becomes its answer.
async fn on_broker<T: Send + 'static>(
    api: &Api,
    work: impl FnOnce(&airlock_broker::Broker) -> Result<T, BrokerError> + Send + 'static,
) -> Result<T, Response> {
    let broker = api.runtime.broker();
    joined(tokio::task::spawn_blocking(move || work(&broker)).await)?
        .map_err(|error| broker_failure(&error))
}

/// On whose authority a token decides: its roles and its user.
fn token_authority(token: &Caller) -> Authority {
    Authority::Token {
        roles: token
            .roles
            .iter()
            .map(|role| role_name(*role).to_owned())
            .collect(),
        user: token.user.clone(),
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Agent => "agent",
        Role::Approver => "approver",
        Role::Admin => "admin",
    }
}

/// A request body that could not be read: 413 when it is too large.
type Body = Result<Bytes, axum::extract::rejection::BytesRejection>;

/// Parses a JSON body, or answers 400 (413 when it is larger than the limit).
fn parse<T: serde::de::DeserializeOwned>(body: Body) -> Result<T, Response> {
    let body = body.map_err(|rejection| {
        let status = rejection.status();
        let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
            ErrorCode::TooLarge
        } else {
            ErrorCode::InvalidInput
        };
        failure(status, code, rejection.body_text())
    })?;
    serde_json::from_slice(&body).map_err(|error| {
        failure(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidInput,
            format!("malformed request body: {error}"),
        )
    })
}

fn broker_failure(error: &BrokerError) -> Response {
    let code = error.code();
    match error.public_message() {
        Some(message) => failure(status_for(code), code, message),
        None => {
            eprintln!("airlock: http: {error}");
            failure(
                status_for(code),
                code,
                "an internal error; the server's log has the details",
            )
        }
    }
}

/// The HTTP status of a broker error's code.
pub(crate) fn status_for(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::NotFound | ErrorCode::SessionNotFound => StatusCode::NOT_FOUND,
        ErrorCode::Forbidden | ErrorCode::RootNotAllowed => StatusCode::FORBIDDEN,
        ErrorCode::SessionClosed | ErrorCode::SessionExpired | ErrorCode::SessionMismatch => {
            StatusCode::CONFLICT
        }
        ErrorCode::AlreadyDecided | ErrorCode::Expired | ErrorCode::Stale | ErrorCode::Conflict => {
            StatusCode::CONFLICT
        }
        ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::IoError => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorCode::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_REQUEST,
    }
}

fn joined<T>(result: Result<T, tokio::task::JoinError>) -> Result<T, Response> {
    result.map_err(|error| {
        failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::IoError,
            error.to_string(),
        )
    })
}

/// An agent's hook event, handed on by `airlock hook` (DESIGN §9.1).
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct HookBody {
    /// The event as the agent sent it to its hook.
    event: Map<String, Value>,
    /// The agent's timeout for the hook, in seconds (1 to 3600); a human
    /// is waited for until shortly before it.
    #[serde(default)]
    timeout_seconds: Option<u64>,
}

/// `POST /v1/hooks/{agent}`: airlock's verdict on an agent's own tool call
/// (`{verdict: allow | deny | none | notice, reason, updated_input}`),
/// once a human decided where the policy asks.
async fn hook_event(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    Path(agent): Path<String>,
    body: Body,
) -> Response {
    use airlock_core::hooks::{Agent, AgentEvent, HookVerdict};
    if let Err(refused) = admit(caller, Role::Agent) {
        return refused;
    }
    let body: HookBody = match parse(body) {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let Some(agent) = Agent::from_name(&agent) else {
        return failure(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            format!("no agent named {agent} (claude-code, codex, gemini)"),
        );
    };
    let event = match AgentEvent::parse(agent, Value::Object(body.event).to_string().as_bytes()) {
        Ok(event) => event,
        Err(error) => {
            return failure(
                StatusCode::BAD_REQUEST,
                ErrorCode::InvalidInput,
                error.to_string(),
            );
        }
    };
    let timeout = match body.timeout_seconds {
        None => agent.default_timeout_seconds(),
        Some(seconds @ 1..=3600) => seconds,
        Some(_) => {
            return failure(
                StatusCode::BAD_REQUEST,
                ErrorCode::InvalidInput,
                "timeout_seconds must be from 1 to 3600",
            );
        }
    };
    let wait = std::time::Duration::from_secs(timeout)
        .saturating_sub(airlock_broker::HOOK_MARGIN)
        .max(std::time::Duration::from_secs(1));
    let broker = api.runtime.broker();
    let verdict = match tokio::task::spawn_blocking(move || broker.hook(&event, wait)).await {
        Ok(verdict) => verdict,
        Err(error) => {
            return failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::IoError,
                error.to_string(),
            );
        }
    };
    let answer = match verdict {
        HookVerdict::Allow {
            reason,
            updated_input,
        } => json!({"verdict": "allow", "reason": reason, "updated_input": updated_input}),
        HookVerdict::Deny { reason } => json!({"verdict": "deny", "reason": reason}),
        HookVerdict::Pass => json!({"verdict": "none"}),
        HookVerdict::Notice { message } => json!({"verdict": "notice", "reason": message}),
    };
    (StatusCode::OK, axum::Json(answer)).into_response()
}

/// A call an agent submits.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct CallBody {
    tool: String,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    tool_call_id: Option<String>,
    /// The caller's own correlation id, recorded with the approval and in
    /// the audit log (spec 000).
    #[serde(default)]
    context_id: Option<String>,
    /// Who asked on a chat platform, `{channel, chat, user}`
    /// (`telegram|slack|discord`, the platform's chat and user ids): the
    /// confirmation goes to that chat (spec 001).
    #[serde(default)]
    #[schemars(with = "Option<RequesterSchema>")]
    requester: Option<Value>,
}

/// The shape of `requester` in a call's body.
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
struct RequesterSchema {
    channel: String,
    chat: String,
    user: String,
}

/// Who a request's calls are made by: the token's user, name (as the agent
/// and as the credential) and admin role; without a token (loopback, no
/// tokens configured), the local agent.
fn principal_of(caller: Option<&Caller>) -> Principal {
    match caller {
        Some(caller) => Principal {
            user: caller.user.clone(),
            agent: Some(caller.name.clone()),
            token: Some(caller.name.clone()),
            admin: caller.roles.contains(&Role::Admin),
        },
        None => Principal {
            agent: Some("local".to_owned()),
            ..Principal::default()
        },
    }
}

/// `POST /v1/tools/call`: 200 with the envelope, or 202 when a human must
/// decide (in wait mode the call goes on waiting here; its outcome is at
/// `/hitl/result/{id}`).
async fn tools_call(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    body: Body,
) -> Response {
    let caller = match admit(caller, Role::Agent) {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let body: CallBody = match parse(body) {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    if let Some(Err(error)) = body
        .context_id
        .as_deref()
        .map(airlock_core::call::check_context_id)
    {
        return failure(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidInput,
            error.to_string(),
        );
    }
    let requester = match body.requester.as_ref().filter(|value| !value.is_null()) {
        None => None,
        Some(value) => match airlock_core::Requester::from_json(value) {
            Ok(requester) => Some(requester),
            Err(message) => {
                return failure(StatusCode::BAD_REQUEST, ErrorCode::InvalidInput, message);
            }
        },
    };
    // Spec 003's dotted names are accepted, never listed.
    let (name, args) = airlock_core::tools::canonical_call(
        &body.tool,
        Value::Object(body.arguments.unwrap_or_default()),
    );
    let (tool, origin) = api.runtime.resolve(&name);
    // A `session` of a durable session's form names it (below an explicit
    // `session_id` argument); any other is a label, as before sessions.
    let named = body
        .session
        .clone()
        .filter(|session| airlock_core::session::is_session_id(session));
    let call = ToolCall {
        tool,
        args,
        origin,
        principal: principal_of(caller.as_ref()),
        session: body.session,
        profile: None,
        tool_call_id: body.tool_call_id,
        context_id: body.context_id,
        requester,
        received_at: api.runtime.broker().now_ms(),
        via: None,
        sessions: airlock_core::SessionHints {
            bound: None,
            last: named,
        },
        scope: None,
    };
    let broker = api.runtime.broker();
    let mode = airlock_broker::default_mode(broker.config());
    let (pending_tx, pending_rx) = tokio::sync::oneshot::channel::<Value>();
    let pending_tx = std::sync::Mutex::new(Some(pending_tx));
    // A client that goes away before the answer drops this handler, and
    // with it the guard: a command the call runs is killed.
    let cancel = airlock_broker::Cancel::new();
    let cancel_on_drop = cancel.on_drop();
    let mut submitted = tokio::task::spawn_blocking(move || {
        broker.submit_cancellable(
            &call,
            &mode,
            &|approval| {
                let view = json!({
                    "approval_id": approval.id,
                    "status": "pending",
                    "tool": approval.tool,
                    "risk": approval.risk.as_str(),
                    "summary": approval.summary,
                    "expires_ms": approval.expires_ms,
                });
                if let Some(sender) = pending_tx.lock().ok().and_then(|mut slot| slot.take()) {
                    let _ = sender.send(view);
                }
            },
            &cancel,
        )
    });
    let response = tokio::select! {
        envelope = &mut submitted => match joined(envelope) {
            Ok(envelope) => envelope_response(&envelope),
            Err(refused) => refused,
        },
        Ok(pending) = pending_rx => (StatusCode::ACCEPTED, axum::Json(pending)).into_response(),
    };
    cancel_on_drop.disarm();
    response
}

/// Runs a session tool's call for the caller: its envelope.
async fn session_call(
    api: &Api,
    caller: Option<&Caller>,
    tool: &str,
    args: Value,
) -> Result<Envelope, Response> {
    let (tool, origin) = api.runtime.resolve(tool);
    let broker = api.runtime.broker();
    let call = ToolCall {
        principal: principal_of(caller),
        ..ToolCall::new(tool, args, origin, broker.now_ms())
    };
    let mode = airlock_broker::default_mode(broker.config());
    joined(tokio::task::spawn_blocking(move || broker.submit(&call, &mode, &|_| {})).await)
}

/// A session tool's envelope as an answer: its data with `ok` (201 for a
/// new session), or the error with the status of its code.
fn session_answer(envelope: &Envelope, ok: StatusCode) -> Response {
    match (&envelope.error, &envelope.data) {
        (None, Some(data)) if envelope.status == Status::Allowed => {
            (ok, axum::Json(data.clone())).into_response()
        }
        (Some(error), _) => failure(status_for(error.code), error.code, error.message.clone()),
        _ => envelope_response(envelope),
    }
}

/// `POST /v1/sessions`: opens a session (the body is `session_open`'s
/// arguments, airlock's shape or spec 003's); 201 with it.
async fn session_open(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    body: Body,
) -> Response {
    let caller = match admit(caller, Role::Agent) {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let args: Value = match parse(body) {
        Ok(args) => args,
        Err(refused) => return refused,
    };
    match session_call(&api, caller.as_ref(), "session_open", args).await {
        Ok(envelope) => session_answer(&envelope, StatusCode::CREATED),
        Err(refused) => refused,
    }
}

/// `GET /v1/sessions`: the caller's open sessions; `?include_ended=true`
/// with the ended ones, `?all=true` everyone's (admins).
async fn sessions_list(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    params: Result<Query<SessionsParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let caller = match admit(caller, Role::Agent) {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let Ok(Query(params)) = params else {
        return failure(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidInput,
            "query parameters: all, include_ended (true or false)",
        );
    };
    let principal = principal_of(caller.as_ref());
    if params.all == Some(true) && !principal.admin {
        return failure(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            "only an admin token lists every principal's sessions",
        );
    }
    match on_broker(&api, move |broker| {
        broker.sessions_of(
            &principal,
            params.all == Some(true),
            params.include_ended == Some(true),
        )
    })
    .await
    {
        Ok(sessions) => axum::Json(json!({"sessions": sessions})).into_response(),
        Err(refused) => refused,
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct SessionsParams {
    /// Every principal's sessions (an admin token only).
    all: Option<bool>,
    /// The ended sessions too.
    include_ended: Option<bool>,
}

/// `GET /v1/sessions/{id}`: one of the caller's sessions (an admin's:
/// any), ended or not.
async fn session_show(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    Path(id): Path<String>,
) -> Response {
    let caller = match admit(caller, Role::Agent) {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let principal = principal_of(caller.as_ref());
    match on_broker(&api, move |broker| broker.session_for(&principal, &id)).await {
        Ok(session) => axum::Json(session).into_response(),
        Err(refused) => refused,
    }
}

/// `DELETE /v1/sessions/{id}`: closes one of the caller's sessions (an
/// admin's: any): its pending approvals are cancelled, its commands
/// stopped. 200 with the closed session.
async fn session_close(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    Path(id): Path<String>,
) -> Response {
    let caller = match admit(caller, Role::Agent) {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let principal = principal_of(caller.as_ref());
    match on_broker(&api, move |broker| {
        broker.close_session(&principal, &id, Some("closed over HTTP"))
    })
    .await
    {
        Ok(session) => axum::Json(session).into_response(),
        Err(refused) => refused,
    }
}

/// `POST /v1/sessions/{id}/signal` `{signal: term|int|kill}`: signals the
/// session's running commands.
async fn session_signal(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    Path(id): Path<String>,
    body: Body,
) -> Response {
    let caller = match admit(caller, Role::Agent) {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let body: Value = match parse(body) {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let Some(signal) = body
        .get("signal")
        .cloned()
        .filter(|_| body.as_object().is_some_and(|b| b.len() == 1))
    else {
        return failure(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidInput,
            "the body is {\"signal\": \"term\" | \"int\" | \"kill\"}",
        );
    };
    let args = json!({"session_id": id, "signal": signal});
    match session_call(&api, caller.as_ref(), "session_signal", args).await {
        Ok(envelope) => session_answer(&envelope, StatusCode::OK),
        Err(refused) => refused,
    }
}

/// An envelope as an answer: 202 for `hitl_required`, 400 for input the
/// tool refused as malformed, 429 when too many approvals are pending, 503
/// (with `Retry-After`) when the shared store cannot be reached, 200
/// otherwise.
fn envelope_response(envelope: &Envelope) -> Response {
    let value = serde_json::to_value(envelope).unwrap_or(Value::Null);
    let code = envelope.error.as_ref().map(|error| error.code);
    if code == Some(ErrorCode::RateLimited) {
        return (StatusCode::TOO_MANY_REQUESTS, axum::Json(value)).into_response();
    }
    if code == Some(ErrorCode::StoreUnavailable) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(axum::http::header::RETRY_AFTER, "1")],
            axum::Json(value),
        )
            .into_response();
    }
    match envelope.status {
        Status::HitlRequired => {
            let hitl = envelope.hitl.as_ref();
            let body = json!({
                "approval_id": hitl.map(|hitl| hitl.hitl_id.clone()),
                "status": "pending",
                "envelope": value,
            });
            (StatusCode::ACCEPTED, axum::Json(body)).into_response()
        }
        Status::Error
            if envelope
                .error
                .as_ref()
                .is_some_and(|error| error.code.as_str().starts_with("invalid_input")) =>
        {
            (StatusCode::BAD_REQUEST, axum::Json(value)).into_response()
        }
        _ => (StatusCode::OK, axum::Json(value)).into_response(),
    }
}

/// `GET /hitl/pending`: the pending approvals, newest first.
async fn pending(State(api): State<Api>, caller: Option<axum::Extension<Caller>>) -> Response {
    if let Err(refused) = admit(caller, Role::Approver) {
        return refused;
    }
    let listed = on_broker(&api, |broker| {
        let approvals = broker.pending(None)?;
        // Newest first, each with the always-allows it offers, stated.
        let views: Vec<Value> = approvals
            .iter()
            .rev()
            .map(|approval| {
                let mut view = approval_view(approval);
                view["always"] = broker.always_offers(approval);
                view
            })
            .collect();
        Ok((views, broker.now_ms()))
    });
    match listed.await {
        Ok((views, now_ms)) => {
            axum::Json(json!({"approvals": views, "now_ms": now_ms})).into_response()
        }
        Err(refused) => refused,
    }
}

/// `GET /hitl/grants`: the "always allow" grants in force (approver or admin).
async fn grants(State(api): State<Api>, caller: Option<axum::Extension<Caller>>) -> Response {
    if let Err(refused) = admit(caller, Role::Approver) {
        return refused;
    }
    match on_broker(&api, |broker| Ok((broker.grants()?, broker.now_ms()))).await {
        Ok((grants, now_ms)) => {
            let views: Vec<Value> = grants.iter().map(airlock_broker::grant_view).collect();
            axum::Json(json!({"grants": views, "now_ms": now_ms})).into_response()
        }
        Err(refused) => refused,
    }
}

/// `DELETE /hitl/grants/{id}`: revokes a grant (approver or admin); audited
/// as `grant_revoked` with the token's user.
async fn revoke_grant(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    Path(id): Path<String>,
) -> Response {
    let caller = match admit(caller, Role::Approver) {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let by = caller
        .as_ref()
        .and_then(|caller| caller.user.clone())
        .or_else(|| caller.as_ref().map(|caller| caller.name.clone()))
        .unwrap_or_else(|| "local".to_owned());
    match on_broker(&api, move |broker| {
        broker.revoke_grant(&id, &by, Channel::Http)
    })
    .await
    {
        Ok(grant) => {
            axum::Json(json!({"revoked": airlock_broker::grant_view(&grant)})).into_response()
        }
        Err(refused) => refused,
    }
}

/// `GET /hitl/pending/{id}`: one approval, with its diff.
async fn pending_one(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    Path(id): Path<String>,
) -> Response {
    if let Err(refused) = admit(caller, Role::Approver) {
        return refused;
    }
    let found = on_broker(&api, move |broker| {
        let approval = broker.approval(&id)?;
        let offers = broker.always_offers(&approval);
        Ok((approval, offers))
    });
    match found.await {
        Ok((approval, offers)) => {
            let mut view = approval_view(&approval);
            view["always"] = offers;
            // What an approver edits before approving.
            if approval.status.as_str() == "pending"
                && let Some(content) = airlock_broker::proposed_content(&approval)
            {
                view["proposed_content"] = Value::String(content);
            }
            axum::Json(view).into_response()
        }
        Err(refused) => refused,
    }
}

/// A human's decision.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    decision: Decision,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    always: Option<Always>,
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Decision {
    Approve,
    Deny,
}

/// `always: true` (this session, for `approvals.grant_ttl`) or `{scope,
/// for_seconds}` (`for_seconds` absent: `approvals.grant_ttl`).
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
enum Always {
    Flag(bool),
    Scoped {
        scope: Scope,
        #[serde(default)]
        for_seconds: Option<u64>,
    },
}

#[derive(Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Scope {
    Session,
    Persistent,
}

/// `POST /hitl/decide/{id}`.
async fn decide(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    Path(id): Path<String>,
    body: Body,
) -> Response {
    let caller = match admit(caller, Role::Approver) {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let body: DecideBody = match parse(body) {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let always = match body.always {
        None | Some(Always::Flag(false)) => None,
        Some(Always::Flag(true)) => Some(AlwaysAllow {
            persistent: false,
            for_ms: None,
        }),
        Some(Always::Scoped { scope, for_seconds }) => Some(AlwaysAllow {
            persistent: scope == Scope::Persistent,
            for_ms: for_seconds.map(|seconds| seconds.saturating_mul(1000)),
        }),
    };
    let broker = api.runtime.broker();
    let decided = tokio::task::spawn_blocking(move || {
        let Some(token) = caller.as_ref() else {
            return Err(failure(
                StatusCode::FORBIDDEN,
                ErrorCode::Forbidden,
                "a bearer token is required",
            ));
        };
        let request = DecideRequest {
            approve: body.decision == Decision::Approve,
            reason: body.reason,
            always,
            // Who may decide is the broker's rule; this face says who asks.
            authority: token_authority(token),
            user: caller
                .as_ref()
                .and_then(|caller| caller.user.clone())
                .or_else(|| caller.as_ref().map(|caller| caller.name.clone()))
                .unwrap_or_default(),
            channel: Channel::Http,
            content: body.content.map(String::into_bytes),
        };
        broker
            .decide(&id, &request)
            .map_err(|error| broker_failure(&error))
    })
    .await;
    match joined(decided) {
        Ok(Ok(envelope)) => axum::Json(envelope).into_response(),
        Ok(Err(refused)) | Err(refused) => refused,
    }
}

/// Several approvals decided at once, each its own decision.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    /// The approvals (1 to 200); decided in the order they were created.
    ids: Vec<String>,
    decision: Decision,
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /hitl/decide-batch`: each approval decided as by
/// `/hitl/decide/{id}`, in creation order; approving stops at the first
/// change that cannot be applied (the rest stay pending, `skipped`).
async fn decide_batch(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    body: Body,
) -> Response {
    let caller = match admit(caller, Role::Approver) {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let body: BatchBody = match parse(body) {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let Some(token) = caller.as_ref() else {
        return failure(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            "a bearer token is required",
        );
    };
    let request = DecideRequest {
        approve: body.decision == Decision::Approve,
        reason: body.reason,
        always: None,
        authority: token_authority(token),
        user: token.user.clone().unwrap_or_else(|| token.name.clone()),
        channel: Channel::Http,
        content: None,
    };
    let ids = body.ids;
    let decided = on_broker(&api, move |broker| broker.decide_batch(&ids, &request)).await;
    match decided {
        Ok(outcomes) => {
            let results: Vec<Value> = outcomes
                .iter()
                .map(|(id, outcome)| match outcome {
                    airlock_broker::BatchOutcome::Decided(envelope) => {
                        json!({"id": id, "outcome": "decided", "envelope": envelope})
                    }
                    airlock_broker::BatchOutcome::Refused(error) => json!({
                        "id": id,
                        "outcome": "refused",
                        "error": {
                            "code": error.code().as_str(),
                            "message": error.public_message().unwrap_or_else(|| "an internal error".to_owned()),
                        },
                    }),
                    airlock_broker::BatchOutcome::Skipped => {
                        json!({"id": id, "outcome": "skipped"})
                    }
                })
                .collect();
            axum::Json(json!({ "results": results })).into_response()
        }
        Err(refused) => refused,
    }
}

/// An approver's edited version, to see its diff before approving it.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct PreviewBody {
    content: String,
}

/// `POST /hitl/preview/{id}`: the diff approving with `content` would
/// apply, computed as deciding would (the web UI shows it live while the
/// approver edits); nothing is decided.
async fn preview(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    Path(id): Path<String>,
    body: Body,
) -> Response {
    let caller = match admit(caller, Role::Approver) {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let body: PreviewBody = match parse(body) {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let content = body.content.into_bytes();
    // Only someone who may decide it may see what an edit of it would do.
    let Some(token) = caller.as_ref() else {
        return failure(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            "a bearer token is required",
        );
    };
    let authority = token_authority(token);
    let previewed = on_broker(&api, move |broker| {
        broker.may_decide(&broker.approval(&id)?, &authority)?;
        broker.preview_edit(&id, content)
    });
    match previewed.await {
        Ok(diff) => axum::Json(json!({ "diff": diff })).into_response(),
        Err(refused) => refused,
    }
}

/// `GET /hitl/result/{id}`: 202 while pending, 200 with the final envelope.
/// An agent sees only the results of its own calls.
async fn result(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    Path(id): Path<String>,
) -> Response {
    let caller = match admit(caller, Role::Agent) {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    let approval = match on_broker(&api, move |broker| broker.approval(&id)).await {
        Ok(approval) => approval,
        Err(refused) => return refused,
    };
    // An approver sees every approval (they decide them); an agent only its
    // own: the same user, token and agent that made the call.
    let sees_all = caller
        .as_ref()
        .is_some_and(|caller| caller.has(Role::Approver));
    if !sees_all && !principal_of(caller.as_ref()).owns(approval.owner.as_deref()) {
        // Someone else's call is as good as unknown.
        return failure(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            format!("no approval {}", approval.id),
        );
    }
    let status = approval.status.as_str();
    match approval.result {
        // Pending, approved, or being applied: the outcome is still to come.
        None if !approval.status.is_final() => (
            StatusCode::ACCEPTED,
            axum::Json(json!({"approval_id": approval.id, "status": status})),
        )
            .into_response(),
        Some(envelope) => axum::Json(envelope).into_response(),
        None => axum::Json(json!({"approval_id": approval.id, "status": status})).into_response(),
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct AuditParams {
    #[serde(default)]
    event_type: Option<String>,
    /// `key=value`, more than one separated by `,`.
    #[serde(default)]
    filter: Option<String>,
    #[serde(default)]
    since: Option<String>,
    /// The newest this many (default 200, at most 5000).
    #[serde(default)]
    limit: Option<usize>,
}

/// `GET /audit`: records matching the query, newest last.
async fn audit_query(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    params: Result<Query<AuditParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    if let Err(refused) = admit(caller, Role::Admin) {
        return refused;
    }
    let Ok(Query(params)) = params else {
        return failure(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidInput,
            "query parameters: event_type, filter (key=value[,key=value]), since, limit",
        );
    };
    let mut filters = Vec::new();
    for pair in params.filter.iter().flat_map(|filter| filter.split(',')) {
        let Some((key, value)) = pair.split_once('=') else {
            return failure(
                StatusCode::BAD_REQUEST,
                ErrorCode::InvalidInput,
                format!("filter {pair:?} is not key=value"),
            );
        };
        filters.push((key.to_owned(), value.to_owned()));
    }
    let query = airlock_audit_query(params.event_type, filters, params.since);
    let limit = params.limit.unwrap_or(200).min(5000);
    let broker = api.runtime.broker();
    let found =
        tokio::task::spawn_blocking(move || airlock_broker::query_audit(&broker, &query)).await;
    match joined(found) {
        Ok(Ok(mut records)) => {
            let skip = records.len().saturating_sub(limit);
            let records: Vec<Map<String, Value>> = records.drain(skip..).collect();
            axum::Json(json!({"records": records})).into_response()
        }
        Ok(Err(error)) => broker_failure(&error),
        Err(refused) => refused,
    }
}

/// `GET /metrics` on the HTTP listener: Prometheus text, for an admin
/// (while `telemetry.metrics` is on).
async fn metrics(State(api): State<Api>, caller: Option<axum::Extension<Caller>>) -> Response {
    if let Err(refused) = admit(caller, Role::Admin) {
        return refused;
    }
    if !api.runtime.broker().config().telemetry.metrics {
        return metrics_off();
    }
    metrics_answer(&api.runtime).await
}

/// The answer while `telemetry.metrics` is off.
pub(crate) fn metrics_off() -> Response {
    failure(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "metrics are off (telemetry.metrics: false)",
    )
}

/// The Prometheus text of the broker in force.
pub(crate) async fn metrics_answer(runtime: &Arc<Runtime>) -> Response {
    let broker = runtime.broker();
    match joined(tokio::task::spawn_blocking(move || broker.metrics_text()).await) {
        Ok(Ok(text)) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Ok(Err(error)) => broker_failure(&error),
        Err(refused) => refused,
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct StatsParams {
    /// Records from this UTC time (RFC 3339) or this last while (`30m`,
    /// `24h`, `7d`) on; all when absent.
    #[serde(default)]
    since: Option<String>,
    /// `tool`, `risk`, `approver` or `session`.
    #[serde(default)]
    by: Option<String>,
}

/// `GET /v1/stats`: approval analytics over the audit chain.
async fn stats(
    State(api): State<Api>,
    caller: Option<axum::Extension<Caller>>,
    params: Result<Query<StatsParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    if let Err(refused) = admit(caller, Role::Approver) {
        return refused;
    }
    let Ok(Query(params)) = params else {
        return failure(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidInput,
            "query parameters: since, by",
        );
    };
    let broker = api.runtime.broker();
    let since = match params
        .since
        .as_deref()
        .map(|text| airlock_broker::since_time(text, broker.now_ms()))
        .transpose()
    {
        Ok(since) => since,
        Err(message) => {
            return failure(StatusCode::BAD_REQUEST, ErrorCode::InvalidInput, message);
        }
    };
    let by = match params.by.as_deref().map(str::parse).transpose() {
        Ok(by) => by,
        Err(message) => {
            return failure(
                StatusCode::BAD_REQUEST,
                ErrorCode::InvalidInput,
                format!("by: {message}"),
            );
        }
    };
    let made = tokio::task::spawn_blocking(move || broker.stats(since.as_deref(), by)).await;
    match joined(made) {
        Ok(Ok(stats)) => axum::Json(stats).into_response(),
        Ok(Err(error)) => broker_failure(&error),
        Err(refused) => refused,
    }
}

fn airlock_audit_query(
    event_type: Option<String>,
    filters: Vec<(String, String)>,
    since: Option<String>,
) -> airlock_broker::AuditQuery {
    airlock_broker::AuditQuery {
        event_type,
        filters,
        since,
    }
}

/// `GET /audit/verify`: the chain's verification (`ok` false when it is
/// broken or was repaired).
async fn audit_verify(State(api): State<Api>, caller: Option<axum::Extension<Caller>>) -> Response {
    if let Err(refused) = admit(caller, Role::Admin) {
        return refused;
    }
    let broker = api.runtime.broker();
    let checked = tokio::task::spawn_blocking(move || {
        airlock_broker::check_audit(broker.root(), broker.config(), Some(&broker.store_handle()))
    })
    .await;
    match joined(checked) {
        Ok(Ok(check)) => axum::Json(check.to_json()).into_response(),
        Ok(Err(error)) => broker_failure(&error),
        Err(refused) => refused,
    }
}

/// `GET /openapi.json` (no token needed).
pub(crate) async fn openapi_json() -> Response {
    axum::Json(crate::openapi::document(
        schemars::schema_for!(CallBody),
        schemars::schema_for!(HookBody),
        schemars::schema_for!(DecideBody),
        schemars::schema_for!(PreviewBody),
        schemars::schema_for!(BatchBody),
        schemars::schema_for!(AuditParams),
        schemars::schema_for!(StatsParams),
        schemars::schema_for!(SessionsParams),
    ))
    .into_response()
}
