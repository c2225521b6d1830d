//! airlock-http: the HTTP face of airlock (DESIGN §9, §10). The only crate that
//! knows axum.
//!
//! It serves MCP over streamable HTTP at `/mcp` (the default profile) and
//! `/mcp/{profile}` (that profile, bound by the endpoint; 404 for a profile the
//! configuration does not have), and the approval API ([`api`]). Where
//! `auth.tokens` are configured every request needs a bearer token (401
//! without a known one) whose roles allow what it asks (403 otherwise: MCP
//! and submitting calls need `agent`, deciding `approver`, the audit `admin`;
//! `admin` holds every role). Without configured tokens it listens only on
//! loopback, MCP and calls are open to local agents, and deciding needs the
//! admin token generated at start (its hash kept in the state dir, the token
//! shown once in a login URL).

mod api;
mod auth;
pub use auth::{ADMIN_TOKEN_FILE, ADMIN_TOKEN_NAME, Auth, new_admin_token, read_admin_digest};
mod events;
mod guard;
mod links;
mod notify;
mod openapi;
mod web;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use airlock_broker::Runtime;
use airlock_core::ErrorCode;
use airlock_core::HttpPrincipal;
use airlock_core::config::{Role, TokenConfig};
use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Errors starting the HTTP face.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error(
        "refusing to serve {0} without auth.tokens: without tokens airlock listens only on loopback"
    )]
    OpenToNetwork(SocketAddr),
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("cannot keep the admin token in the state dir: {0}")]
    AdminToken(std::io::Error),
    #[error("cannot make the key for signed links: {0}")]
    LinkKey(String),
    #[error("--public-url `{0}` is not an http:// or https:// url")]
    PublicUrl(String),
    #[error("{0}")]
    Serve(std::io::Error),
    #[error(
        "refusing to serve metrics without a token on {0}: --metrics-addr takes a loopback address; from another host, scrape /metrics on the HTTP listener with an admin token"
    )]
    MetricsOpenToNetwork(SocketAddr),
}

/// Who a request comes from: a token's name, user and roles, and the
/// token itself (as its digest, to see later whether it still counts).
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub name: String,
    pub user: Option<String>,
    pub roles: Vec<Role>,
    pub credential: Option<auth::Credential>,
}

impl Caller {
    /// Whether the caller holds `role` (admin holds every role).
    pub(crate) fn has(&self, role: Role) -> bool {
        self.roles.contains(&Role::Admin) || self.roles.contains(&role)
    }
}

fn unauthorized(message: &str) -> Response {
    let mut response = api::failure(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message);
    response.headers_mut().insert(
        axum::http::header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Bearer"),
    );
    response
}

/// Outermost: a presented token must be known (401), and with configured
/// tokens every request must present one; the caller goes into the
/// request's extensions.
async fn identify(auth: Auth, mut request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        // The scheme is case-insensitive (RFC 7235).
        .map(|value| {
            value
                .split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, token)| token.trim())
        });
    match presented {
        Some(Some(token)) => match auth.identify(token) {
            Some(caller) => {
                request.extensions_mut().insert(caller);
            }
            None => return unauthorized("the bearer token is not known"),
        },
        Some(None) => return unauthorized("the Authorization header must be \"Bearer <token>\""),
        None if auth.required() => return unauthorized("a bearer token is required"),
        None => {}
    }
    next.run(request).await
}

/// MCP needs the agent role (403 for a token without it); the token's user
/// is the calls' user.
async fn require_mcp(mut request: Request, next: Next) -> Response {
    if let Some(caller) = request.extensions().get::<Caller>().cloned() {
        if !caller.has(Role::Agent) {
            return api::failure(
                StatusCode::FORBIDDEN,
                ErrorCode::Forbidden,
                "this token does not have the agent role, which MCP requires",
            );
        }
        request.extensions_mut().insert(HttpPrincipal {
            admin: caller.roles.contains(&Role::Admin),
            user: caller.user,
            token_name: caller.name,
        });
    }
    next.run(request).await
}

/// `/mcp/{profile}` serves only the profiles the configuration in force
/// has: any other name is a 404, never a session that lists nothing.
async fn require_profile(runtime: Arc<Runtime>, request: Request, next: Next) -> Response {
    let profile = request
        .uri()
        .path()
        .strip_prefix("/mcp/")
        .unwrap_or_default();
    if runtime.broker().policy().has_profile(profile) {
        return next.run(request).await;
    }
    (
        StatusCode::NOT_FOUND,
        format!("no profile named {profile} in the configuration\n"),
    )
        .into_response()
}

/// Where the router is served: the address the listener is bound to, and the
/// URL people reach it at (`--public-url`; default `http://<bound>`). Links
/// and webhooks point at the URL; `Host` and `Origin` must name one or the
/// other (or `http.allowed_hosts` / `http.allowed_origins`).
#[derive(Debug, Clone)]
pub struct Listening {
    pub bound: SocketAddr,
    pub public_url: Option<String>,
}

impl Listening {
    /// What links and the UI address start with.
    fn base(&self) -> String {
        match &self.public_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("http://{}", self.bound),
        }
    }
}

/// What serves MCP at `/mcp` and `/mcp/{profile}`: any tower service of
/// HTTP requests (the MCP face's streamable-HTTP service). A request reaches
/// it only after this face checked its `Host`, `Origin`, token, role and
/// profile, with the caller put in its extensions as an
/// [`HttpPrincipal`].
pub trait McpService:
    tower_service::Service<
        Request,
        Response: IntoResponse,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> McpService for S where
    S: tower_service::Service<
            Request,
            Response: IntoResponse,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// The router: `/mcp`, `/mcp/{profile}` (served by `mcp`), the approval API,
/// the web UI and signed links. Must be made inside the tokio runtime (it
/// starts the watcher behind `/hitl/events` and the webhook deliveries).
pub fn router(
    runtime: Arc<Runtime>,
    mcp: impl McpService,
    auth: Auth,
    listening: Listening,
) -> Result<Router, HttpError> {
    let base = listening.base();
    if let Some(url) = &listening.public_url
        && airlock_core::origin::origin_of_url(url).is_none()
    {
        return Err(HttpError::PublicUrl(url.clone()));
    }
    let site = guard::Site {
        runtime: runtime.clone(),
        bound: listening.bound,
        public_url: listening.public_url.clone(),
    };
    let profile_runtime = runtime.clone();
    let profiled = Router::new()
        .route_service("/mcp/{profile}", mcp.clone())
        .route_layer(axum::middleware::from_fn(move |request, next| {
            require_profile(profile_runtime.clone(), request, next)
        }));
    let mcp_routes = Router::new()
        .route_service("/mcp", mcp)
        .merge(profiled)
        .route_layer(axum::middleware::from_fn(require_mcp));
    let events = events::Events::new(runtime.clone());
    let links = links::Links::new(&runtime, base.clone()).map_err(HttpError::LinkKey)?;
    notify::start(runtime.clone(), &events, links.clone(), base);
    let guarded = Router::new()
        .merge(mcp_routes)
        .merge(api::routes(runtime.clone(), events))
        // Outermost: nothing, not even whether a profile exists, is told
        // before the token checks out.
        .layer(axum::middleware::from_fn(move |request, next| {
            identify(auth.clone(), request, next)
        }));
    // Without a token: the static UI (it holds no data), the API's
    // description, and signed links (the signature is the credential).
    let open = Router::new()
        .merge(web::routes())
        .merge(links::routes(runtime, links))
        .route("/openapi.json", axum::routing::get(api::openapi_json));
    Ok(guarded
        .merge(open)
        .layer(axum::extract::DefaultBodyLimit::max(api::MAX_BODY))
        // Outermost of all: a request under a name or from an origin that is
        // not the listener's is refused before anything else is looked at.
        .layer(axum::middleware::from_fn(move |request, next| {
            guard::check_host_and_origin(site.clone(), request, next)
        })))
}

/// How a person signs in to the web UI of a server that just started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Login {
    /// The login URL with a new admin token in its fragment (shown once).
    New(String),
    /// The admin token made at an earlier start stays valid.
    Kept,
    /// Only configured tokens (none was generated).
    Configured,
}

/// `GET /metrics` alone, without a token, on a loopback address of its
/// own (`--metrics-addr`), for a local Prometheus or agent; `Host` must name
/// the listener (no DNS rebinding). Runs until the process stops.
pub async fn serve_metrics(
    runtime: Arc<Runtime>,
    addr: SocketAddr,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), HttpError> {
    if !addr.ip().is_loopback() {
        return Err(HttpError::MetricsOpenToNetwork(addr));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| HttpError::Bind { addr, error })?;
    let bound = listener.local_addr().map_err(HttpError::Serve)?;
    let site = guard::Site {
        runtime: runtime.clone(),
        bound,
        public_url: None,
    };
    let router = Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let runtime = runtime.clone();
                async move {
                    if !runtime.broker().config().telemetry.metrics {
                        return api::metrics_off();
                    }
                    api::metrics_answer(&runtime).await
                }
            }),
        )
        .layer(axum::middleware::from_fn(move |request, next| {
            guard::check_host_and_origin(site.clone(), request, next)
        }));
    ready(bound);
    axum::serve(listener, router)
        .await
        .map_err(HttpError::Serve)
}

/// Serves the router on `addr` until the process ends. Links and the UI
/// address start with `public_url` (default `http://<bound address>`).
/// `ready` gets the bound address and, without configured tokens, the login
/// URL with the generated admin token (shown once).
pub async fn serve(
    runtime: Arc<Runtime>,
    mcp: impl McpService,
    tokens: Vec<TokenConfig>,
    addr: SocketAddr,
    public_url: Option<String>,
    ready: impl FnOnce(SocketAddr, Login),
) -> Result<(), HttpError> {
    if tokens.is_empty() && !addr.ip().is_loopback() {
        return Err(HttpError::OpenToNetwork(addr));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| HttpError::Bind { addr, error })?;
    let bound = listener.local_addr().map_err(HttpError::Serve)?;
    // The workspace's admin token: made at the first start without
    // configured tokens and shown once; kept (as its hash) across restarts
    // until `airlock token rotate`.
    let broker = runtime.broker();
    let state_dir = broker.root().join(&broker.config().workspace.state_dir);
    drop(broker);
    // It is this machine's key: honoured on a loopback listener only, so a
    // server bound for a phone accepts configured tokens alone.
    let loopback = addr.ip().is_loopback();
    let admin_file = state_dir.join(ADMIN_TOKEN_FILE);
    let login = if !loopback {
        Login::Configured
    } else if admin_file.exists() {
        Login::Kept
    } else if tokens.is_empty() {
        let token = new_admin_token(&state_dir).map_err(HttpError::AdminToken)?;
        Login::New(format!("http://{bound}/#token={token}"))
    } else {
        Login::Configured
    };
    let auth = Auth::new(runtime.clone(), loopback.then_some(admin_file), loopback);
    // While this serves, a webhook told of new approvals is a live approver
    // channel (`elicitation_fallback: auto` waits for its person).
    let _webhooks = runtime
        .broker()
        .config()
        .notify
        .webhooks
        .iter()
        .any(|hook| {
            hook.events
                .contains(&airlock_core::config::WebhookEvent::Created)
        })
        .then(|| {
            runtime
                .broker()
                .announce(airlock_broker::LiveChannel::Webhooks)
                .ok()
        })
        .flatten();
    if public_url.is_none()
        && bound.ip().is_unspecified()
        && !runtime.broker().config().notify.webhooks.is_empty()
    {
        eprintln!(
            "airlock: webhook links will point at http://{bound}, which no other machine can open; \
             give --public-url"
        );
    }
    let listening = Listening { bound, public_url };
    let app = router(runtime, mcp, auth, listening)?;
    ready(bound, login);
    // Answers go out as they are written: without TCP_NODELAY a response
    // written in two parts waits for the client's delayed ACK (~40 ms).
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await.map_err(HttpError::Serve)
}
