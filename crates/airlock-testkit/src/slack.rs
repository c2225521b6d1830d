//! A stand-in for Slack on ports of 127.0.0.1, speaking its wire protocol:
//! the Web API (`POST /api/{method}`, a bearer token, JSON, answered
//! `{ok: true, …}` or `{ok: false, error}`, 429 with `Retry-After`) and
//! Socket Mode (`apps.connections.open` hands out a one-time WebSocket URL;
//! the socket says `hello`, sends envelopes that must be acknowledged with
//! `{"envelope_id"}`, and `disconnect` when the app should connect again).
//! It refuses what Slack refuses (a wrong or missing token, an unknown
//! method, a body that is not JSON, an unknown channel or message, a
//! message without text, Block Kit Slack would not take, a ticket used
//! twice), and lets a test press buttons and reply in threads.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as Frame;

/// The bot token (`xoxb-…`) and the app-level token (`xapp-…`) accepted.
pub const BOT_TOKEN: &str = "xoxb-test-bot-token";
pub const APP_TOKEN: &str = "xapp-test-app-token";

/// A message as it stands in a channel.
#[derive(Debug, Clone, PartialEq)]
pub struct SlackMessage {
    pub channel: String,
    pub ts: String,
    /// The notification text.
    pub text: String,
    pub blocks: Value,
    pub edits: usize,
}

impl SlackMessage {
    /// Every plain text of its blocks, a line each.
    pub fn shown(&self) -> String {
        let mut out = Vec::new();
        collect_text(&self.blocks, &mut out);
        out.join("\n")
    }

    /// `(label, value or url)` of every button.
    pub fn buttons(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for block in self.blocks.as_array().into_iter().flatten() {
            if block["type"] == "actions" {
                for button in block["elements"].as_array().into_iter().flatten() {
                    let target = button["value"]
                        .as_str()
                        .or(button["url"].as_str())
                        .unwrap_or("");
                    out.push((
                        button["text"]["text"].as_str().unwrap_or("").to_owned(),
                        target.to_owned(),
                    ));
                }
            }
        }
        out
    }

    /// The value of the button labelled `label`.
    pub fn button(&self, label: &str) -> String {
        self.buttons()
            .into_iter()
            .find(|(text, _)| text == label)
            .map(|(_, value)| value)
            .unwrap_or_else(|| panic!("no button {label:?} in {:?}", self.buttons()))
    }
}

fn collect_text(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(text) = map.get("text").and_then(Value::as_str) {
                out.push(text.to_owned());
            }
            for (key, inner) in map {
                if key != "text" || inner.is_object() {
                    collect_text(inner, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_text(v, out)),
        _ => {}
    }
}

#[derive(Default)]
struct Inner {
    channels: HashSet<String>,
    messages: Vec<SlackMessage>,
    /// `(channel, user, text, thread_ts)`.
    ephemerals: Vec<(String, String, String, Option<String>)>,
    next_ts: u64,
    tickets: HashSet<String>,
    next_ticket: u64,
    /// The connected socket's sender.
    socket: Option<mpsc::UnboundedSender<Frame>>,
    connections: usize,
    /// Envelope id -> when it was sent, and how long its ack took.
    sent: HashMap<String, Instant>,
    acked: HashMap<String, Duration>,
    next_envelope: u64,
    /// `(method, status, retry_after)`, taken in order.
    failures: Vec<(String, u16, Option<u64>)>,
    failures_served: usize,
    calls: Vec<String>,
}

struct Shared {
    inner: Mutex<Inner>,
    changed: Condvar,
    ws_port: u16,
}

/// The stand-in, running until dropped.
pub struct SlackStandIn {
    /// `api_url` for airlock: `http://127.0.0.1:PORT/api`.
    pub url: String,
    shared: Arc<Shared>,
    _runtime: tokio::runtime::Runtime,
}

impl SlackStandIn {
    /// Starts the stand-in; `channels` are the channels the bot is in.
    pub fn start(channels: &[&str]) -> SlackStandIn {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let api = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let sockets = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                channels: channels.iter().map(|c| (*c).to_owned()).collect(),
                next_ts: 1_700_000_000,
                ..Inner::default()
            }),
            changed: Condvar::new(),
            ws_port: sockets.local_addr().unwrap().port(),
        });
        let url = format!("http://{}/api", api.local_addr().unwrap());
        let app = Router::new()
            .route("/api/{method}", axum::routing::post(web_api))
            .with_state(shared.clone());
        runtime.spawn(async move {
            let _ = axum::serve(api, app).await;
        });
        let accepting = shared.clone();
        runtime.spawn(async move {
            while let Ok((tcp, _)) = sockets.accept().await {
                tokio::spawn(socket_mode(accepting.clone(), tcp));
            }
        });
        SlackStandIn {
            url,
            shared,
            _runtime: runtime,
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.shared.inner.lock().unwrap()
    }

    fn wait_for<T>(&self, what: &str, check: impl FnMut(&Inner) -> Option<T>) -> T {
        crate::standin::wait_on(
            &self.shared.inner,
            &self.shared.changed,
            &format!("slack {what}"),
            |inner| format!("messages: {:#?}; calls: {:?}", inner.messages, inner.calls),
            check,
        )
    }

    /// The `n`th message of `channel`, once it is there.
    pub fn message(&self, channel: &str, n: usize) -> SlackMessage {
        self.wait_for(&format!("message {n} in {channel}"), |inner| {
            inner
                .messages
                .iter()
                .filter(|m| m.channel == channel)
                .nth(n)
                .cloned()
        })
    }

    /// Message `ts` of `channel` once `check` holds for it.
    pub fn message_once(
        &self,
        channel: &str,
        ts: &str,
        what: &str,
        check: impl Fn(&SlackMessage) -> bool,
    ) -> SlackMessage {
        self.wait_for(what, |inner| {
            inner
                .messages
                .iter()
                .find(|m| m.channel == channel && m.ts == ts && check(m))
                .cloned()
        })
    }

    pub fn messages(&self, channel: &str) -> Vec<SlackMessage> {
        self.inner()
            .messages
            .iter()
            .filter(|m| m.channel == channel)
            .cloned()
            .collect()
    }

    /// The `n`th ephemeral message: `(channel, user, text, thread_ts)`.
    pub fn ephemeral(&self, n: usize) -> (String, String, String, Option<String>) {
        self.wait_for(&format!("ephemeral message {n}"), |inner| {
            inner.ephemerals.get(n).cloned()
        })
    }

    /// Waits until airlock's socket is connected (the `n`th connection).
    pub fn connected(&self, n: usize) {
        self.wait_for(&format!("connection {n}"), |inner| {
            (inner.connections >= n && inner.socket.is_some()).then_some(())
        });
    }

    fn envelope(&self, kind: &str, payload: Value) -> String {
        let mut inner = self.inner();
        inner.next_envelope += 1;
        let id = format!("env-{}", inner.next_envelope);
        let frame = json!({"envelope_id": id, "type": kind, "payload": payload,
                           "accepts_response_payload": false, "retry_attempt": 0, "retry_reason": ""});
        let socket = inner.socket.clone().expect("airlock's socket is connected");
        inner.sent.insert(id.clone(), Instant::now());
        socket.send(Frame::text(frame.to_string())).unwrap();
        id
    }

    /// User `user` presses the button with `value` on message `ts`; the
    /// envelope's id.
    pub fn press(&self, channel: &str, ts: &str, user: &str, value: &str) -> String {
        self.envelope(
            "interactive",
            json!({"type": "block_actions", "user": {"id": user}, "channel": {"id": channel},
                   "container": {"type": "message", "message_ts": ts, "channel_id": channel},
                   "message": {"ts": ts}, "trigger_id": "trigger-1",
                   "actions": [{"type": "button", "action_id": "x", "block_id": "b", "value": value}]}),
        )
    }

    /// User `user` writes `text` in the thread of message `thread_ts`.
    pub fn reply(&self, channel: &str, thread_ts: &str, user: &str, text: &str) -> String {
        let ts = {
            let mut inner = self.inner();
            inner.next_ts += 1;
            format!("{}.000100", inner.next_ts)
        };
        self.envelope(
            "events_api",
            json!({"type": "event_callback", "event": {"type": "message", "channel": channel,
                   "user": user, "text": text, "ts": ts, "thread_ts": thread_ts}}),
        )
    }

    /// Tells airlock to connect again (`disconnect`, reason
    /// `refresh_requested`).
    pub fn disconnect(&self) {
        let inner = self.inner();
        let socket = inner.socket.clone().expect("connected");
        socket
            .send(Frame::text(
                json!({"type": "disconnect", "reason": "refresh_requested"}).to_string(),
            ))
            .unwrap();
    }

    /// How long the acknowledgement of `envelope` took.
    pub fn acked(&self, envelope: &str) -> Duration {
        self.wait_for(&format!("the ack of {envelope}"), |inner| {
            inner.acked.get(envelope).copied()
        })
    }

    /// The next `count` calls of `method` answer `status` (a 429 with
    /// `Retry-After: retry_after`).
    pub fn fail(&self, method: &str, status: u16, retry_after: Option<u64>, count: usize) {
        let mut inner = self.inner();
        for _ in 0..count {
            inner
                .failures
                .push((method.to_owned(), status, retry_after));
        }
    }

    pub fn failures_served(&self) -> usize {
        self.inner().failures_served
    }

    /// A raw request to the Web API: `(status, answer)`.
    pub fn raw(
        &self,
        method: &str,
        token: Option<&str>,
        content_type: &str,
        body: &str,
    ) -> (u16, Value) {
        let addr = self
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/api")
            .to_owned();
        let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
        let (status, _, answer) = crate::http::exchange(
            &addr,
            "POST",
            &format!("/api/{method}"),
            &format!("{auth}Content-Type: {content_type}\r\n"),
            body.as_bytes(),
        );
        (status, serde_json::from_str(&answer).unwrap_or(Value::Null))
    }

    /// A raw Socket Mode connection with `ticket`: whether Slack said hello.
    pub fn raw_socket(&self, ticket: &str) -> bool {
        let url = format!(
            "ws://127.0.0.1:{}/link/?ticket={ticket}",
            self.shared.ws_port
        );
        self._runtime.block_on(async move {
            let Ok(mut socket) = airlock_net::websocket(&url, None).await else {
                return false;
            };
            matches!(socket.next().await, Some(Ok(Frame::Text(text))) if text.as_str().contains("\"hello\""))
        })
    }
}

fn answer(body: Value) -> Response {
    (StatusCode::OK, axum::Json(body)).into_response()
}

fn refused(error: &str) -> Response {
    answer(json!({"ok": false, "error": error}))
}

const METHODS: [&str; 5] = [
    "auth.test",
    "apps.connections.open",
    "chat.postMessage",
    "chat.update",
    "chat.postEphemeral",
];

async fn web_api(
    State(shared): State<Arc<Shared>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !METHODS.contains(&method.as_str()) {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"ok": false, "error": "unknown_method"})),
        )
            .into_response();
    }
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let wanted = if method == "apps.connections.open" {
        APP_TOKEN
    } else {
        BOT_TOKEN
    };
    match token {
        None => return refused("not_authed"),
        Some(token) if token != wanted => return refused("invalid_auth"),
        Some(_) => {}
    }
    let json_body = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let body: Value = if body.is_empty() {
        json!({})
    } else if !json_body {
        return refused("invalid_form_data");
    } else {
        match serde_json::from_slice(&body) {
            Ok(value @ Value::Object(_)) => value,
            _ => return refused("invalid_json"),
        }
    };
    let mut inner = shared.inner.lock().unwrap();
    inner.calls.push(method.clone());
    shared.changed.notify_all();
    if let Some(at) = inner.failures.iter().position(|(m, _, _)| *m == method) {
        let (_, status, retry_after) = inner.failures.remove(at);
        inner.failures_served += 1;
        shared.changed.notify_all();
        let mut response = (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            axum::Json(json!({"ok": false, "error": "ratelimited"})),
        )
            .into_response();
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert("retry-after", seconds.to_string().parse().unwrap());
        }
        return response;
    }
    let result = match method.as_str() {
        "auth.test" => answer(
            json!({"ok": true, "url": "https://airlock-test.slack.com/", "team": "airlock test",
                                     "user": "airlock", "team_id": "T0001", "user_id": "U0BOT", "bot_id": "B0001"}),
        ),
        "apps.connections.open" => {
            inner.next_ticket += 1;
            let ticket = format!("ticket-{}", inner.next_ticket);
            inner.tickets.insert(ticket.clone());
            answer(
                json!({"ok": true, "url": format!("ws://127.0.0.1:{}/link/?ticket={ticket}&app_id=A0001", shared.ws_port)}),
            )
        }
        "chat.postMessage" => post_message(&mut inner, &body),
        "chat.update" => update_message(&mut inner, &body),
        "chat.postEphemeral" => {
            let (Some(channel), Some(user), Some(text)) = (
                body["channel"].as_str(),
                body["user"].as_str(),
                body["text"].as_str(),
            ) else {
                return refused("invalid_arguments");
            };
            if !inner.channels.contains(channel) {
                return refused("channel_not_found");
            }
            let thread = body["thread_ts"].as_str().map(str::to_owned);
            inner
                .ephemerals
                .push((channel.to_owned(), user.to_owned(), text.to_owned(), thread));
            answer(json!({"ok": true, "message_ts": "1.1"}))
        }
        _ => refused("unknown_method"),
    };
    shared.changed.notify_all();
    result
}

fn post_message(inner: &mut Inner, body: &Value) -> Response {
    let Some(channel) = body["channel"].as_str() else {
        return refused("channel_not_found");
    };
    if !inner.channels.contains(channel) {
        return refused("channel_not_found");
    }
    let text = body["text"].as_str().unwrap_or("");
    if text.is_empty() && body["blocks"].is_null() {
        return refused("no_text");
    }
    if let Err(error) = check_blocks(&body["blocks"]) {
        return refused(&error);
    }
    inner.next_ts += 1;
    let ts = format!("{}.000200", inner.next_ts);
    inner.messages.push(SlackMessage {
        channel: channel.to_owned(),
        ts: ts.clone(),
        text: text.to_owned(),
        blocks: body["blocks"].clone(),
        edits: 0,
    });
    answer(json!({"ok": true, "channel": channel, "ts": ts}))
}

fn update_message(inner: &mut Inner, body: &Value) -> Response {
    let (Some(channel), Some(ts)) = (body["channel"].as_str(), body["ts"].as_str()) else {
        return refused("message_not_found");
    };
    if let Err(error) = check_blocks(&body["blocks"]) {
        return refused(&error);
    }
    let Some(message) = inner
        .messages
        .iter_mut()
        .find(|m| m.channel == channel && m.ts == ts)
    else {
        return refused("message_not_found");
    };
    message.text = body["text"].as_str().unwrap_or("").to_owned();
    message.blocks = body["blocks"].clone();
    message.edits += 1;
    answer(json!({"ok": true, "channel": channel, "ts": ts}))
}

/// Block Kit as Slack checks it (the parts airlock could get wrong):
/// known block types, text objects of a known type within 3000
/// characters, buttons with a plain-text label of at most 75, an
/// `action_id`, and a value or a URL.
fn check_blocks(blocks: &Value) -> Result<(), String> {
    if blocks.is_null() {
        return Ok(());
    }
    let blocks = blocks.as_array().ok_or("invalid_blocks_format")?;
    if blocks.len() > 50 {
        return Err("invalid_blocks".to_owned());
    }
    let text = |object: &Value| -> Result<(), String> {
        let kind = object["type"].as_str().unwrap_or("");
        let text = object["text"].as_str().unwrap_or("");
        if !matches!(kind, "plain_text" | "mrkdwn")
            || text.is_empty()
            || text.chars().count() > 3000
        {
            return Err("invalid_blocks".to_owned());
        }
        Ok(())
    };
    for block in blocks {
        match block["type"].as_str().unwrap_or("") {
            "section" => text(&block["text"])?,
            "context" => {
                for element in block["elements"].as_array().ok_or("invalid_blocks")? {
                    text(element)?;
                }
            }
            "actions" => {
                let elements = block["elements"].as_array().ok_or("invalid_blocks")?;
                if elements.is_empty() || elements.len() > 25 {
                    return Err("invalid_blocks".to_owned());
                }
                for button in elements {
                    let label = &button["text"];
                    if button["type"] != "button"
                        || label["type"] != "plain_text"
                        || label["text"]
                            .as_str()
                            .is_none_or(|l| l.is_empty() || l.chars().count() > 75)
                        || button["action_id"]
                            .as_str()
                            .is_none_or(|a| a.is_empty() || a.len() > 255)
                        || (button["value"].as_str().is_none() && button["url"].as_str().is_none())
                        || button["value"].as_str().is_some_and(|v| v.len() > 2000)
                    {
                        return Err("invalid_blocks".to_owned());
                    }
                }
            }
            "rich_text" => {
                for element in block["elements"].as_array().ok_or("invalid_blocks")? {
                    for inner in element["elements"].as_array().ok_or("invalid_blocks")? {
                        if inner["type"] != "text"
                            || inner["text"].as_str().is_none_or(str::is_empty)
                        {
                            return Err("invalid_blocks".to_owned());
                        }
                    }
                }
            }
            "divider" => {}
            _ => return Err("invalid_blocks".to_owned()),
        }
    }
    Ok(())
}

/// One Socket Mode connection (the handshake callback's error type is
/// tungstenite's): the ticket must be one handed out and not
/// used; then `hello`, envelopes out, acknowledgements in.
#[allow(clippy::result_large_err)]
async fn socket_mode(shared: Arc<Shared>, tcp: tokio::net::TcpStream) {
    let mut path = String::new();
    let accepted = tokio_tungstenite::accept_hdr_async(
        tcp,
        |request: &tokio_tungstenite::tungstenite::handshake::server::Request, response| {
            path = request.uri().to_string();
            Ok(response)
        },
    )
    .await;
    let Ok(socket) = accepted else { return };
    let ticket = path
        .split(['?', '&'])
        .find_map(|part| part.strip_prefix("ticket="))
        .unwrap_or("")
        .to_owned();
    let (mut write, mut read) = socket.split();
    let (sender, mut outgoing) = mpsc::unbounded_channel::<Frame>();
    let admitted = {
        let mut inner = shared.inner.lock().unwrap();
        let admitted = inner.tickets.remove(&ticket);
        if admitted {
            inner.connections += 1;
            inner.socket = Some(sender.clone());
            shared.changed.notify_all();
        }
        admitted
    };
    if !admitted {
        let _ = write.send(Frame::Close(None)).await;
        return;
    }
    let hello = json!({"type": "hello", "num_connections": 1,
                       "debug_info": {"host": "stand-in"}, "connection_info": {"app_id": "A0001"}});
    if write.send(Frame::text(hello.to_string())).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            frame = outgoing.recv() => {
                let Some(frame) = frame else { return };
                let closing = frame.is_text() && frame.to_text().is_ok_and(|t| t.contains("\"disconnect\""));
                if write.send(frame).await.is_err() {
                    return;
                }
                if closing {
                    // Slack closes the old socket after asking.
                    forget(&shared, &sender);
                    let _ = write.send(Frame::Close(None)).await;
                    return;
                }
            }
            frame = read.next() => {
                match frame {
                    Some(Ok(Frame::Text(text))) => {
                        let Ok(ack) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                        if let Some(id) = ack["envelope_id"].as_str() {
                            let mut inner = shared.inner.lock().unwrap();
                            if let Some(sent) = inner.sent.get(id).copied() {
                                inner.acked.insert(id.to_owned(), sent.elapsed());
                            }
                            shared.changed.notify_all();
                        }
                    }
                    Some(Ok(_)) => {}
                    _ => {
                        forget(&shared, &sender);
                        return;
                    }
                }
            }
        }
    }
}

/// The socket of `sender` is gone.
fn forget(shared: &Shared, sender: &mpsc::UnboundedSender<Frame>) {
    let mut inner = shared.inner.lock().unwrap();
    if inner
        .socket
        .as_ref()
        .is_some_and(|s| s.same_channel(sender))
    {
        inner.socket = None;
    }
    shared.changed.notify_all();
}
