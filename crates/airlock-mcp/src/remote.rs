//! A streamable-HTTP upstream's raw lane, beside rmcp's client.
//!
//! rmcp's client carries every message of the connection. A `tools/call`
//! the fast lane forwards ([`Remote::call`]) is POSTed here instead, in
//! rmcp's session (its `Mcp-Session-Id` and the headers it sends, learned
//! from its own POSTs by [`Recording`]), under an id of the form
//! `airlock-raw-N` that rmcp's numeric ids never take. Its answer is read
//! off the POST's response (a JSON body or an SSE stream, resumed with
//! `Last-Event-ID` if the server closes it first), without rmcp's worker
//! tasks and typed messages. Any other message on that stream (the
//! server's request to the client, a log message) is handed to rmcp's
//! client as if its own transport had read it, so it is served as usual;
//! a request is marked as having come with that call (rmcp's
//! `InboundStreamOrigin`), so it reaches the client that made the call
//! even while other clients have calls in flight.
//!
//! A POST the server answers 404 (the session expired) was not acted on:
//! the call then goes rmcp's way, which makes the session again. Any other
//! refusal fails the call. A stream that ends without the answer fails the
//! call, not the connection; only a POST that cannot be sent at all counts
//! as the connection lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use http::{HeaderName, HeaderValue};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ProtocolVersion};
use rmcp::service::RxJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use serde_json::Value;
use tokio::sync::mpsc;

/// What a raw call's id starts with.
const RAW_ID: &str = "airlock-raw-";

/// The largest answer read (rmcp's own limit for a JSON body).
const MAX_ANSWER: usize = 16 * 1024 * 1024;

/// How often a stream closed before the answer is resumed.
const MAX_RESUMES: u32 = 16;

/// The next raw id, process-wide: an id is never used twice, even by a
/// call still in flight on a connection made before (the calls in flight
/// are kept by id across connections).
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// rmcp's session, as its own POSTs carry it.
#[derive(Default)]
struct Seen {
    session: Option<Arc<str>>,
    headers: HashMap<HeaderName, HeaderValue>,
    /// Whether rmcp has POSTed anything since initializing.
    posted: bool,
}

/// rmcp's HTTP client, recording the session it POSTs in.
#[derive(Clone)]
pub(crate) struct Recording {
    inner: reqwest::Client,
    seen: Arc<Mutex<Seen>>,
}

impl Recording {
    fn record(&self, session: Option<&Arc<str>>, headers: &HashMap<HeaderName, HeaderValue>) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.session = session.cloned();
            seen.headers = headers
                .iter()
                .filter(|(name, _)| {
                    let name = name.as_str();
                    // Headers of one message, never of the session.
                    !(name == "mcp-method" || name == "mcp-name" || name.starts_with("mcp-param-"))
                })
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect();
            seen.posted = true;
        }
    }
}

impl StreamableHttpClient for Recording {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        self.record(session_id.as_ref(), &custom_headers);
        self.inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        self.record(session_id.as_ref(), &custom_headers);
        self.inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: rmcp::transport::streamable_http_client::StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        self.record(session_id.as_ref(), &custom_headers);
        self.inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<reqwest::Error>> {
        if let Ok(mut seen) = self.seen.lock() {
            *seen = Seen::default();
        }
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<
        futures_util::stream::BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
        StreamableHttpError<reqwest::Error>,
    > {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<
        futures_util::stream::BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
        StreamableHttpError<reqwest::Error>,
    > {
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// The raw lane of one streamable-HTTP connection.
pub(crate) struct Remote {
    client: reqwest::Client,
    uri: Arc<str>,
    seen: Arc<Mutex<Seen>>,
    /// Into rmcp's client, as if its transport had read it.
    inject: mpsc::UnboundedSender<RxJsonRpcMessage<RoleClient>>,
}

/// How a raw call ended.
pub(crate) enum Outcome {
    /// The server's JSON-RPC response to it.
    Answered(Value),
    /// The server answered 404 (its session ended), so it did nothing: the
    /// call goes rmcp's way.
    Declined,
    /// The POST could not be sent: the connection is gone.
    Lost(String),
    /// The server answered something that is not MCP.
    Failed(String),
}

/// The parts of a connection: rmcp's client (to pass to its transport),
/// the lane, and what the lane hands rmcp (for [`Injected`]).
pub(crate) fn connection(
    client: reqwest::Client,
    uri: &str,
) -> (
    Recording,
    Arc<Remote>,
    mpsc::UnboundedReceiver<RxJsonRpcMessage<RoleClient>>,
) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (inject, injected) = mpsc::unbounded_channel();
    let recording = Recording {
        inner: client.clone(),
        seen: seen.clone(),
    };
    let remote = Arc::new(Remote {
        client,
        uri: uri.into(),
        seen,
        inject,
    });
    (recording, remote, injected)
}

impl Remote {
    /// Whether calls may take the lane: rmcp has POSTed in its session on
    /// `version`, a protocol with `initialize` whose requests carry no
    /// headers of their own.
    pub(crate) fn ready(&self, version: &ProtocolVersion) -> bool {
        version.has_initialize()
            && *version < ProtocolVersion::V_2026_07_28
            && self.seen.lock().is_ok_and(|seen| seen.posted)
    }

    /// The session's headers on `request`.
    fn in_session(&self, mut request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if let Ok(seen) = self.seen.lock() {
            for (name, value) in &seen.headers {
                request = request.header(name, value);
            }
            if let Some(session) = &seen.session {
                request = request.header("mcp-session-id", session.as_ref());
            }
        }
        request
    }

    /// A new raw id.
    pub(crate) fn id(&self) -> String {
        format!("{RAW_ID}{}", NEXT_ID.fetch_add(1, Ordering::Relaxed))
    }

    /// POSTs `tools/call` of `tool` with `arguments` under `id`, and reads
    /// its answer.
    pub(crate) async fn call(&self, id: &str, tool: &str, arguments: Option<&Value>) -> Outcome {
        let mut params = serde_json::Map::new();
        params.insert("name".to_owned(), Value::String(tool.to_owned()));
        if let Some(arguments) = arguments {
            params.insert("arguments".to_owned(), arguments.clone());
        }
        let message = serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params,
        });
        let Ok(body) = serde_json::to_vec(&message) else {
            return Outcome::Failed("the call cannot be written as JSON".to_owned());
        };
        let request = self
            .in_session(self.client.post(self.uri.as_ref()))
            .header(http::header::ACCEPT, "text/event-stream, application/json")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body);
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => return Outcome::Lost(error.to_string()),
        };
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Outcome::Declined;
        }
        if status != reqwest::StatusCode::OK {
            return Outcome::Failed(format!("the server answered HTTP {status}"));
        }
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .map(|essence| essence.trim().to_ascii_lowercase())
            .unwrap_or_default();
        match content_type.as_str() {
            "application/json" => self.json(id, response).await,
            "text/event-stream" => self.stream(id, response).await,
            other => Outcome::Failed(format!("the server answered with {other:?}")),
        }
    }

    /// An answer in a JSON body: the response itself (or a batch holding
    /// it).
    async fn json(&self, id: &str, response: reqwest::Response) -> Outcome {
        let body = http_body_util::Limited::new(reqwest::Body::from(response), MAX_ANSWER);
        let bytes = match http_body_util::BodyExt::collect(body).await {
            Ok(collected) => collected.to_bytes(),
            Err(error) if error.is::<http_body_util::LengthLimitError>() => {
                return Outcome::Failed("the answer is too large".to_owned());
            }
            Err(error) => return Outcome::Failed(format!("reading the answer: {error}")),
        };
        let Ok(value) = serde_json::from_slice::<Value>(&bytes) else {
            return Outcome::Failed(format!(
                "the answer is not JSON: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ));
        };
        let messages = match value {
            Value::Array(messages) => messages,
            message => vec![message],
        };
        let mut answer = None;
        for message in messages {
            if answer.is_none() && is_answer_to(&message, id) {
                answer = Some(message);
            } else {
                self.hand_on(id, message);
            }
        }
        answer.map_or_else(
            || Outcome::Failed("the JSON answer holds no response to the call".to_owned()),
            Outcome::Answered,
        )
    }

    /// An answer on an SSE stream: every other message on it goes to rmcp;
    /// a stream that ends first is resumed from its last event id (after
    /// the `retry` the server asked for), as rmcp resumes one.
    async fn stream(&self, id: &str, response: reqwest::Response) -> Outcome {
        use futures_util::StreamExt as _;
        let over = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut body = Capped::new(reqwest::Body::from(response), &over);
        let mut last_event: Option<String> = None;
        let mut retry = std::time::Duration::ZERO;
        let mut resumes = 0;
        let mut read = 0usize;
        loop {
            let mut events = sse_stream::SseStream::new(body);
            while let Some(event) = events.next().await {
                // A broken stream is resumed as one that ended; one past
                // its cap (see `Capped`) is the server's failure.
                let event = match event {
                    Ok(event) => event,
                    Err(_) if over.load(Ordering::Relaxed) => {
                        return Outcome::Failed("the answer's stream is too large".to_owned());
                    }
                    Err(_) => break,
                };
                if let Some(event_id) = event.id {
                    last_event = Some(event_id);
                }
                if let Some(ms) = event.retry {
                    retry = std::time::Duration::from_millis(ms);
                }
                let Some(data) = event.data else {
                    continue;
                };
                read += data.len();
                if read > MAX_ANSWER {
                    return Outcome::Failed("the answer's stream is too large".to_owned());
                }
                if data.trim().is_empty() {
                    continue;
                }
                let Ok(message) = serde_json::from_str::<Value>(&data) else {
                    continue;
                };
                if is_answer_to(&message, id) {
                    return Outcome::Answered(message);
                }
                self.hand_on(id, message);
            }
            let Some(event_id) = &last_event else {
                return Outcome::Failed("the stream ended before the answer came".to_owned());
            };
            resumes += 1;
            if resumes > MAX_RESUMES {
                return Outcome::Failed("the stream kept ending before the answer came".to_owned());
            }
            tokio::time::sleep(retry).await;
            let request = self
                .in_session(self.client.get(self.uri.as_ref()))
                .header(http::header::ACCEPT, "text/event-stream")
                .header("last-event-id", event_id.as_str());
            body = match request.send().await {
                Ok(response) if response.status() == reqwest::StatusCode::OK => {
                    Capped::new(reqwest::Body::from(response), &over)
                }
                Ok(response) => {
                    return Outcome::Failed(format!(
                        "resuming the stream: HTTP {}",
                        response.status()
                    ));
                }
                Err(error) => return Outcome::Lost(error.to_string()),
            };
        }
    }

    /// A message on the stream of call `id` that is not its answer:
    /// rmcp's to serve. A request says it came with that call (as rmcp's
    /// own transport says of a request on a POST's stream), so it goes to
    /// the client that made the call, however many have calls in flight.
    fn hand_on(&self, id: &str, message: Value) {
        let Ok(mut message) = serde_json::from_value::<RxJsonRpcMessage<RoleClient>>(message)
        else {
            return;
        };
        if let rmcp::model::JsonRpcMessage::Request(request) = &mut message {
            use rmcp::model::GetExtensions as _;
            request.request.extensions_mut().insert(
                rmcp::service::InboundStreamOrigin::OutboundRequest(
                    rmcp::model::NumberOrString::String(id.into()),
                ),
            );
        }
        let _ = self.inject.send(message);
    }

    /// Tells the server the call `id` is cancelled (as rmcp tells it).
    pub(crate) async fn cancel(&self, id: &str, reason: &str) {
        let message = serde_json::json!({
            "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": reason},
        });
        let Ok(body) = serde_json::to_vec(&message) else {
            return;
        };
        let request = self
            .in_session(self.client.post(self.uri.as_ref()))
            .header(http::header::ACCEPT, "text/event-stream, application/json")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body);
        let _ = request.send().await;
    }
}

/// Whether `message` is the response (or error) to request `id`.
fn is_answer_to(message: &Value, id: &str) -> bool {
    message.get("id").and_then(Value::as_str) == Some(id)
        && message.get("method").is_none()
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// A response body read up to [`MAX_ANSWER`] bytes: past that it ends in
/// an error, so a server that never ends a line or an event cannot grow
/// the SSE parser's buffer without bound.
struct Capped {
    body: reqwest::Body,
    read: usize,
    /// Set once the cap is passed.
    over: Arc<std::sync::atomic::AtomicBool>,
}

impl Capped {
    fn new(body: reqwest::Body, over: &Arc<std::sync::atomic::AtomicBool>) -> Capped {
        Capped {
            body,
            read: 0,
            over: over.clone(),
        }
    }
}

impl http_body::Body for Capped {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, std::io::Error>>> {
        let this = &mut *self;
        let frame = std::task::ready!(std::pin::Pin::new(&mut this.body).poll_frame(cx));
        std::task::Poll::Ready(match frame {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    this.read += data.len();
                    if this.read > MAX_ANSWER {
                        this.over.store(true, Ordering::Relaxed);
                        return std::task::Poll::Ready(Some(Err(std::io::Error::other(
                            "the answer's stream is too large",
                        ))));
                    }
                }
                Some(Ok(frame))
            }
            Some(Err(error)) => Some(Err(std::io::Error::other(error))),
            None => None,
        })
    }
}
