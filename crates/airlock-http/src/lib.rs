//! airlock-http: the HTTP face of airlock (DESIGN §9, §10). The only crate that
//! knows axum.
//!
//! It serves MCP over streamable HTTP at `/mcp` (the default profile) and
//! `/mcp/{profile}` (that profile, bound by the endpoint). Where `auth.tokens`
//! are configured every request needs a bearer token with the `agent` (or
//! `admin`) role; without tokens it only listens on loopback addresses.

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

/// The configured agent tokens, as SHA-256 digests.
#[derive(Clone)]
struct Tokens(Arc<Vec<TokenConfig>>);

impl Tokens {
    /// The principal of a presented token with the agent (or admin) role.
    fn agent(&self, presented: &str) -> Option<HttpPrincipal> {
        let digest = Sha256::digest(presented.as_bytes());
        let mut found = None;
        for token in self.0.iter() {
            let expected = token
                .sha256
                .strip_prefix("sha256:")
                .unwrap_or(&token.sha256);
            let Ok(expected) = hex::decode(expected) else {
                continue;
            };
            // Every token is compared, in constant time.
            if constant_time_eq(&expected, &digest)
                && token
                    .roles
                    .iter()
                    .any(|role| matches!(role, Role::Agent | Role::Admin))
            {
                found = Some(HttpPrincipal {
                    user: token.user.clone(),
                    token_name: token.name.clone(),
                });
            }
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
    match presented.and_then(|token| tokens.agent(token)) {
        Some(principal) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        None => (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            "a bearer token with the agent role is required\n",
        )
            .into_response(),
    }
}

/// The router: `/mcp` and `/mcp/{profile}`.
pub fn router(gateway: Arc<Gateway>, tokens: Vec<TokenConfig>) -> Router {
    let mcp = airlock_mcp::streamable_http_service(gateway);
    let tokens = Tokens(Arc::new(tokens));
    Router::new()
        .route_service("/mcp", mcp.clone())
        .route_service("/mcp/{profile}", mcp)
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
