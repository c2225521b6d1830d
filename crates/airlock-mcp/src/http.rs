//! The streamable-HTTP endpoint: rmcp's service, with the fast lane
//! (`crate::lane`) in front of it. A POST of a session whose client has
//! its standalone GET stream open, whose body is a `tools/call` the lane
//! takes, is answered with an `application/json` body straight from the
//! lane; every other request, and every POST the lane leaves, reaches rmcp
//! as it came (the body, once read, is handed on unchanged).
//!
//! The lane takes only what rmcp would accept and serve as a request of
//! the session: `Content-Type: application/json`, an `Accept` naming both
//! `application/json` and `text/event-stream`, the session's negotiated
//! `MCP-Protocol-Version`, no resumption and no SEP-2243 headers (rmcp
//! checks those against the body). Anything else goes to rmcp, which
//! answers it or says what is wrong.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, Limited};
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tower_service::Service;

use crate::face::McpFace;
use crate::lane::{Lane, Listening};
use crate::server::Session;

/// What rmcp accepts as a request body (its default limit).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// The body of an answer.
pub type McpBody = BoxBody<Bytes, Infallible>;

/// The streamable-HTTP MCP endpoint as a tower service (see
/// [`crate::streamable_http_service`]).
#[derive(Clone)]
pub struct McpHttp {
    inner: StreamableHttpService<Session, LocalSessionManager>,
    face: Arc<McpFace>,
}

impl McpHttp {
    pub(crate) fn new(
        inner: StreamableHttpService<Session, LocalSessionManager>,
        face: Arc<McpFace>,
    ) -> McpHttp {
        McpHttp { inner, face }
    }
}

impl<B> Service<Request<B>> for McpHttp
where
    B: Body + Send + 'static,
    B::Data: Send + 'static,
    B::Error: std::fmt::Display + std::error::Error + Send + Sync + 'static,
{
    type Response = Response<McpBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<McpBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.serve(request).await) })
    }
}

impl McpHttp {
    async fn serve<B>(mut self, request: Request<B>) -> Response<McpBody>
    where
        B: Body + Send + 'static,
        B::Data: Send + 'static,
        B::Error: std::fmt::Display + std::error::Error + Send + Sync + 'static,
    {
        let (parts, body) = request.into_parts();
        let id = parts
            .headers
            .get("mcp-session-id")
            .and_then(|id| id.to_str().ok())
            .map(str::to_owned);
        let Some(id) = id else {
            return self.rmcp(Request::from_parts(parts, body)).await;
        };
        let lane = self.face.http_lanes.get(&id);
        // Every request of a session comes on its path with its token: a
        // GET stream, a DELETE or a POSTed answer too (rmcp checks only the
        // session id, and only airlock's handlers the binding).
        if lane.as_ref().is_some_and(|lane| lane.conflicts(&parts)) {
            return plain(
                StatusCode::FORBIDDEN,
                "Forbidden: this session was started on another endpoint or with another token",
            );
        }
        let seen = |lane: &Option<Arc<Lane>>| {
            if let Some(lane) = lane {
                lane.seen_by_rmcp();
            }
        };
        match parts.method {
            Method::GET => {
                // A resumed stream is a POST's, never the standalone one.
                let resumes = parts.headers.contains_key("last-event-id");
                let response = self.rmcp(Request::from_parts(parts, body)).await;
                seen(&lane);
                let streams = response.status() == StatusCode::OK
                    && content_type_is(response.headers(), "text/event-stream");
                if resumes || !streams {
                    return response;
                }
                match self.face.http_lanes.listen(&id) {
                    Some(listening) => response.map(|body| {
                        Counted {
                            body,
                            _listening: listening,
                        }
                        .boxed()
                    }),
                    None => response,
                }
            }
            Method::DELETE => {
                let response = self.rmcp(Request::from_parts(parts, body)).await;
                if response.status().is_success() {
                    self.face.http_lanes.close(&id);
                }
                response
            }
            Method::POST
                if lane
                    .as_ref()
                    .is_some_and(|lane| laneable(&parts.headers, lane)) =>
            {
                let bytes = match Limited::new(body, MAX_BODY).collect().await {
                    Ok(collected) => collected.to_bytes(),
                    Err(error) => {
                        return if error.is::<http_body_util::LengthLimitError>() {
                            plain(StatusCode::PAYLOAD_TOO_LARGE, "Payload Too Large")
                        } else {
                            plain(StatusCode::BAD_REQUEST, "Bad Request: unreadable body")
                        };
                    }
                };
                // Checked as a stdio line is; anything it refuses is rmcp's
                // to answer.
                let taken = airlock_core::jsonrpc::check_message(&bytes)
                    .ok()
                    .zip(lane.as_ref())
                    .and_then(|(message, lane)| lane.take(&message, Some(&parts)));
                match taken {
                    Some(answer) => match (Detached(Some(answer))).await {
                        Some(mut line) => {
                            if line.last() == Some(&b'\n') {
                                line.pop();
                            }
                            Response::builder()
                                .status(StatusCode::OK)
                                .header(header::CONTENT_TYPE, "application/json")
                                .body(Full::new(Bytes::from(line)).boxed())
                                .unwrap_or_else(|_| internal())
                        }
                        // Cancelled by the client: no answer, as rmcp sends
                        // none (its stream ends without one).
                        None => Response::builder()
                            .status(StatusCode::OK)
                            .header(header::CONTENT_TYPE, "text/event-stream")
                            .body(Full::new(Bytes::new()).boxed())
                            .unwrap_or_else(|_| internal()),
                    },
                    None => {
                        let response = self
                            .rmcp(Request::from_parts(parts, Full::new(bytes)))
                            .await;
                        seen(&lane);
                        response
                    }
                }
            }
            _ => {
                let response = self.rmcp(Request::from_parts(parts, body)).await;
                seen(&lane);
                response
            }
        }
    }

    async fn rmcp<B>(&mut self, request: Request<B>) -> Response<McpBody>
    where
        B: Body + Send + 'static,
        B::Data: Send + 'static,
        B::Error: std::fmt::Display,
    {
        match self.inner.call(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// A laned call, run on the request's own task (no hand-off to another
/// task and thread). If the request is dropped first (the client went
/// away), the call is spawned to run to its end and be audited, as it
/// does under rmcp.
struct Detached(Option<crate::lane::Answer>);

impl Future for Detached {
    type Output = Option<Vec<u8>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Vec<u8>>> {
        let Some(answer) = self.0.as_mut() else {
            return Poll::Ready(None);
        };
        let output = std::task::ready!(answer.as_mut().poll(cx));
        self.0 = None;
        Poll::Ready(output)
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        if let Some(answer) = self.0.take() {
            tokio::spawn(answer);
        }
    }
}

/// Whether a POST's headers are ones the lane may answer for `lane`'s
/// session (see the module's doc).
fn laneable(headers: &http::HeaderMap, lane: &Lane) -> bool {
    if !content_type_is(headers, "application/json") {
        return false;
    }
    let mut json = false;
    let mut sse = false;
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for entry in value.split(',').map(str::trim) {
            json |= entry.eq_ignore_ascii_case("application/json");
            sse |= entry.eq_ignore_ascii_case("text/event-stream");
        }
    }
    if !(json && sse) {
        return false;
    }
    let Some(version) = lane.protocol() else {
        return false;
    };
    let mut versions = headers.get_all("mcp-protocol-version").iter();
    if versions.next().and_then(|value| value.to_str().ok()) != Some(version.as_str())
        || versions.next().is_some()
    {
        return false;
    }
    !headers.keys().any(|name| {
        let name = name.as_str();
        name == "last-event-id"
            || name == "mcp-method"
            || name == "mcp-name"
            || name.starts_with("mcp-param-")
    })
}

fn content_type_is(headers: &http::HeaderMap, essence: &str) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            value
                .split(';')
                .next()
                .is_some_and(|found| found.trim().eq_ignore_ascii_case(essence))
        })
}

fn plain(status: StatusCode, text: &'static str) -> Response<McpBody> {
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::from_static(text.as_bytes())).boxed())
        .unwrap_or_else(|_| internal())
}

fn internal() -> Response<McpBody> {
    let mut response =
        Response::new(Full::new(Bytes::from_static(b"Internal Server Error")).boxed());
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response
}

/// A GET stream's body, counted as open until it is dropped.
struct Counted {
    body: McpBody,
    _listening: Listening,
}

impl Body for Counted {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
