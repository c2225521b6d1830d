//! airlock-http: the HTTP face of airlock (DESIGN §9, §10). The only crate that
//! knows axum.
//!
//! It serves MCP over streamable HTTP at `/mcp` (the default profile) and
//! `/mcp/{profile}` (that profile, bound by the endpoint; 404 for a profile the
//! configuration does not have). Where `auth.tokens` are configured every
//! request needs a bearer token (401 without a known one) with the `agent` (or
//! `admin`) role (403 for a token without it); without tokens it only listens
//! on loopback addresses.

use std::net::SocketAddr;
use std::sync::Arc;

use airlock_core::config::{Role, TokenConfig};
use airlock_mcp::{Gateway, HttpPrincipal};
use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

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
    #[error("{0}")]
    Serve(std::io::Error),
}

/// The configured tokens, as SHA-256 digests.
#[derive(Clone)]
struct Tokens(Arc<Vec<TokenConfig>>);

/// What a presented bearer token turned out to be.
enum Presented {
    /// A configured token with the agent (or admin) role.
    Agent(HttpPrincipal),
    /// A configured token whose roles do not include MCP (an approver's).
    WithoutMcpRole,
    /// No configured token.
    Unknown,
}

impl Tokens {
    /// Looks a presented token up among the configured ones.
    fn check(&self, presented: &str) -> Presented {
        let digest = Sha256::digest(presented.as_bytes());
        let mut found = Presented::Unknown;
        for token in self.0.iter() {
            let expected = token
                .sha256
                .strip_prefix("sha256:")
                .unwrap_or(&token.sha256);
            let Ok(expected) = hex::decode(expected) else {
                continue;
            };
            // Every token is compared, in constant time.
            if !constant_time_eq(&expected, &digest) {
                continue;
            }
            let may_use_mcp = token.roles.iter().any(|role| match role {
                Role::Agent | Role::Admin => true,
                Role::Approver => false,
            });
            found = if may_use_mcp {
                Presented::Agent(HttpPrincipal {
                    user: token.user.clone(),
                    token_name: token.name.clone(),
                })
            } else {
                Presented::WithoutMcpRole
            };
        }
        found
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn authenticate(tokens: Tokens, mut request: Request, next: Next) -> Response {
    if tokens.0.is_empty() {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim);
    match presented.map(|token| tokens.check(token)) {
        Some(Presented::Agent(principal)) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Some(Presented::WithoutMcpRole) => (
            StatusCode::FORBIDDEN,
            "this token does not have the agent role, which MCP requires\n",
        )
            .into_response(),
        Some(Presented::Unknown) | None => (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            "a bearer token with the agent role is required\n",
        )
            .into_response(),
    }
}

/// `/mcp/{profile}` serves only the profiles the configuration in force
/// has: any other name is a 404, never a session that lists nothing.
async fn require_profile(gateway: Arc<Gateway>, request: Request, next: Next) -> Response {
    let profile = request
        .uri()
        .path()
        .strip_prefix("/mcp/")
        .unwrap_or_default();
    if gateway.broker().policy().has_profile(profile) {
        return next.run(request).await;
    }
    (
        StatusCode::NOT_FOUND,
        format!("no profile named {profile} in the configuration\n"),
    )
        .into_response()
}

/// The router: `/mcp` and `/mcp/{profile}`.
pub fn router(gateway: Arc<Gateway>, tokens: Vec<TokenConfig>) -> Router {
    let mcp = airlock_mcp::streamable_http_service(gateway.clone());
    let tokens = Tokens(Arc::new(tokens));
    let profiled = Router::new()
        .route_service("/mcp/{profile}", mcp.clone())
        .route_layer(axum::middleware::from_fn(move |request, next| {
            require_profile(gateway.clone(), request, next)
        }));
    Router::new()
        .route_service("/mcp", mcp)
        .merge(profiled)
        // Outermost: nothing, not even whether a profile exists, is told
        // before the token checks out.
        .layer(axum::middleware::from_fn(move |request, next| {
            authenticate(tokens.clone(), request, next)
        }))
}

/// Serves the router on `addr` until the process ends.
pub async fn serve(
    gateway: Arc<Gateway>,
    tokens: Vec<TokenConfig>,
    addr: SocketAddr,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), HttpError> {
    if tokens.is_empty() && !addr.ip().is_loopback() {
        return Err(HttpError::OpenToNetwork(addr));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| HttpError::Bind { addr, error })?;
    let bound = listener.local_addr().map_err(HttpError::Serve)?;
    ready(bound);
    axum::serve(listener, router(gateway, tokens))
        .await
        .map_err(HttpError::Serve)
}
