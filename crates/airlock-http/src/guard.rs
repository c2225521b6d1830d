//! What a browser may not do to the listener: reach it under a name that is
//! not its own (DNS rebinding), call it from another site (CSRF, a page's
//! `fetch`), or send a JSON endpoint a body a form or `text/plain` request
//! can carry without a CORS preflight. The rules themselves are
//! [`airlock_core::origin`]; this applies them to every request, before the
//! token is even looked at, so `/mcp`, the API, the UI and signed links are
//! covered alike.

use std::net::SocketAddr;
use std::sync::Arc;

use airlock_broker::Runtime;
use airlock_core::ErrorCode;
use airlock_core::origin::Listener;
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::api::failure;

/// Where the listener is: its bound address and the `--public-url` it is
/// reached as. The configured extra hosts and origins are read from the
/// configuration in force at each request, so a reload applies at once.
#[derive(Clone)]
pub(crate) struct Site {
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) bound: SocketAddr,
    pub(crate) public_url: Option<String>,
}

impl Site {
    fn listener(&self) -> Result<Listener, airlock_core::origin::OriginError> {
        let broker = self.runtime.broker();
        let http = &broker.config().http;
        Listener::new(
            self.bound,
            self.public_url.as_deref(),
            &http.allowed_hosts,
            &http.allowed_origins,
        )
    }
}

/// Outermost: `Host` must name the listener, and a browser's `Origin` must
/// be the listener's own or a listed one.
pub(crate) async fn check_host_and_origin(site: Site, request: Request, next: Next) -> Response {
    let listener = match site.listener() {
        Ok(listener) => listener,
        Err(message) => {
            return failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::IoError,
                format!("the listener's names are misconfigured: {message}"),
            );
        }
    };
    // HTTP/1.1 carries the Host header; HTTP/2 the request's authority.
    let host = match request.headers().get(header::HOST) {
        Some(value) => value.to_str().ok().map(str::to_owned),
        None => request
            .uri()
            .authority()
            .map(|authority| authority.to_string()),
    };
    let Some(host) = host else {
        return failure(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidInput,
            "a Host header is required",
        );
    };
    if !listener.host_allowed(&host) {
        return failure(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            format!(
                "this listener does not answer to the host `{}` (add it to http.allowed_hosts if it is yours)",
                printable(&host)
            ),
        );
    }
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !listener.origin_allowed(origin, &host) {
            return failure(
                StatusCode::FORBIDDEN,
                ErrorCode::Forbidden,
                format!(
                    "requests from the origin `{}` are refused (add it to http.allowed_origins if it is yours)",
                    printable(origin)
                ),
            );
        }
    }
    next.run(request).await
}

/// JSON endpoints take `application/json` only (415 otherwise): a form or
/// `text/plain` body is what a cross-site page can send without asking.
pub(crate) async fn require_json(request: Request, next: Next) -> Response {
    if request.method() == Method::POST && !is_json(request.headers().get(header::CONTENT_TYPE)) {
        return failure(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::UnsupportedMediaType,
            "the body must be sent as Content-Type: application/json",
        );
    }
    next.run(request).await
}

/// `application/json`, in any case, with or without parameters.
fn is_json(value: Option<&header::HeaderValue>) -> bool {
    value
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// A header value as it may be shown in a message: at most 200 characters,
/// nothing but printable ASCII.
fn printable(value: &str) -> String {
    value
        .chars()
        .take(200)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}
