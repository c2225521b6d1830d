//! A stand-in for Discord on ports of 127.0.0.1, speaking its wire
//! protocol: the REST API (`Authorization: Bot TOKEN`, JSON; errors as
//! `{message, code}`; 429 with `retry_after`) and the Gateway over
//! WebSocket (`?v=10&encoding=json`; HELLO with a heartbeat interval,
//! IDENTIFY, READY with a session and a resume URL, heartbeats and their
//! ACKs, RESUME with the missed events replayed then RESUMED, INVALID_SESSION
//! for an unknown session, RECONNECT). It refuses what Discord refuses
//! (a wrong token, a bad API version, content over 2000 characters, bad
//! components, unknown channels and messages, an interaction answered late
//! or twice, a follow-up before the answer) and lets a test press buttons,
//! reply, drop the connection, ask for a reconnect and stop the ACKs.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;

/// The bot token accepted.
pub const TOKEN: &str = "discord-test-token.abc_DEF-123";
/// The application (and bot user) id.
pub const APPLICATION: &str = "777000000000000001";

/// A message as it stands in a channel.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscordMessage {
    pub channel: String,
    pub id: String,
    pub content: String,
    pub components: Value,
    pub edits: usize,
}

impl DiscordMessage {
    /// `(label, custom_id or url)` of every button.
    pub fn buttons(&self) -> Vec<(String, String)> {
        self.components
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|row| row["components"].as_array().cloned().unwrap_or_default())
            .map(|b| {
                let target = b["custom_id"].as_str().or(b["url"].as_str()).unwrap_or("");
                (
                    b["label"].as_str().unwrap_or("").to_owned(),
                    target.to_owned(),
                )
            })
            .collect()
    }

    pub fn button(&self, label: &str) -> String {
        self.buttons()
            .into_iter()
            .find(|(l, _)| l == label)
            .map(|(_, id)| id)
            .unwrap_or_else(|| panic!("no button {label:?} in {:?}", self.buttons()))
    }
}

/// An interaction sent to the bot.
#[derive(Debug, Clone)]
struct Interaction {
    sent: Instant,
    /// The answer: 5 (deferred) or 4.
    answered: Option<u64>,
    /// Follow-up contents.
    followups: Vec<String>,
}

#[derive(Default)]
struct Inner {
    channels: HashSet<String>,
    messages: Vec<DiscordMessage>,
    next_id: u64,
    interactions: HashMap<String, Interaction>,
    /// Dispatches sent in the current session, by sequence number.
    dispatched: Vec<Value>,
    session: Option<String>,
    socket: Option<mpsc::UnboundedSender<Frame>>,
    identifies: usize,
    resumes: usize,
    heartbeats: usize,
    acks: bool,
    failures: Vec<(String, u16, Option<f64>)>,
    failures_served: usize,
    calls: Vec<String>,
}

struct Shared {
    inner: Mutex<Inner>,
    changed: Condvar,
    ws_port: u16,
    heartbeat_ms: u64,
}

/// The stand-in, running until dropped.
pub struct DiscordStandIn {
    /// `api_url` for airlock: `http://127.0.0.1:PORT/api/v10`.
    pub url: String,
    shared: Arc<Shared>,
    _runtime: tokio::runtime::Runtime,
}

impl DiscordStandIn {
    /// Starts the stand-in; `channels` are the channels the bot is in; the
    /// Gateway asks for a heartbeat every `heartbeat_ms`.
    pub fn start(channels: &[&str], heartbeat_ms: u64) -> DiscordStandIn {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let api = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let gateway = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                channels: channels.iter().map(|c| (*c).to_owned()).collect(),
                next_id: 900_000_000_000_000_000,
                acks: true,
                ..Inner::default()
            }),
            changed: Condvar::new(),
            ws_port: gateway.local_addr().unwrap().port(),
            heartbeat_ms,
        });
        let url = format!("http://{}/api/v10", api.local_addr().unwrap());
        let app = Router::new()
            .route("/api/v10/{*route}", axum::routing::any(rest))
            .with_state(shared.clone());
        runtime.spawn(async move {
            let _ = axum::serve(api, app).await;
        });
        let accepting = shared.clone();
        runtime.spawn(async move {
            while let Ok((tcp, _)) = gateway.accept().await {
                tokio::spawn(connection(accepting.clone(), tcp));
            }
        });
        DiscordStandIn {
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
            &format!("discord {what}"),
            |inner| {
                format!(
                    "messages: {:#?}; calls: {:?}; identifies {}, resumes {}",
                    inner.messages, inner.calls, inner.identifies, inner.resumes
                )
            },
            check,
        )
    }

    pub fn message(&self, channel: &str, n: usize) -> DiscordMessage {
        self.wait_for(&format!("message {n} in {channel}"), |inner| {
            inner
                .messages
                .iter()
                .filter(|m| m.channel == channel)
                .nth(n)
                .cloned()
        })
    }

    pub fn message_once(
        &self,
        channel: &str,
        id: &str,
        what: &str,
        check: impl Fn(&DiscordMessage) -> bool,
    ) -> DiscordMessage {
        self.wait_for(what, |inner| {
            inner
                .messages
                .iter()
                .find(|m| m.channel == channel && m.id == id && check(m))
                .cloned()
        })
    }

    pub fn messages(&self, channel: &str) -> Vec<DiscordMessage> {
        self.inner()
            .messages
            .iter()
            .filter(|m| m.channel == channel)
            .cloned()
            .collect()
    }

    /// Waits until the bot holds a session (READY or RESUMED) with
    /// `identifies` IDENTIFYs and `resumes` RESUMEs made.
    pub fn ready(&self, identifies: usize, resumes: usize) {
        self.wait_for(
            &format!("{identifies} identify and {resumes} resumes"),
            |inner| {
                (inner.socket.is_some()
                    && inner.identifies == identifies
                    && inner.resumes == resumes)
                    .then_some(())
            },
        );
    }

    /// The heartbeats received so far.
    pub fn heartbeats_now(&self) -> usize {
        self.inner().heartbeats
    }

    /// Waits for `n` heartbeats in all.
    pub fn heartbeats(&self, n: usize) {
        self.wait_for(&format!("{n} heartbeats"), |inner| {
            (inner.heartbeats >= n).then_some(())
        });
    }

    fn dispatch(inner: &mut Inner, event: &str, data: Value) {
        let seq = inner.dispatched.len() as u64 + 1;
        let frame = json!({"op": 0, "t": event, "s": seq, "d": data});
        inner.dispatched.push(frame.clone());
        if let Some(socket) = &inner.socket {
            let _ = socket.send(Frame::text(frame.to_string()));
        }
    }

    /// User `user` presses the button `custom_id` on message `id`; the
    /// interaction's id.
    pub fn press(&self, channel: &str, id: &str, user: &str, custom_id: &str) -> String {
        let mut inner = self.inner();
        inner.next_id += 1;
        let interaction = inner.next_id.to_string();
        inner.interactions.insert(
            interaction.clone(),
            Interaction {
                sent: Instant::now(),
                answered: None,
                followups: Vec::new(),
            },
        );
        let data = json!({"id": interaction, "application_id": APPLICATION, "type": 3,
            "token": format!("itoken-{interaction}"), "version": 1, "channel_id": channel,
            "member": {"user": {"id": user, "username": format!("user{user}")}},
            "message": {"id": id, "channel_id": channel},
            "data": {"custom_id": custom_id, "component_type": 2}});
        DiscordStandIn::dispatch(&mut inner, "INTERACTION_CREATE", data);
        interaction
    }

    /// User `user` replies `text` to message `id` (type 19); or, with
    /// `kind` 6, pins it (a message that references it without replying).
    pub fn reply(&self, channel: &str, id: &str, user: &str, text: &str, kind: u64) {
        let mut inner = self.inner();
        inner.next_id += 1;
        let message = inner.next_id.to_string();
        let data = json!({"id": message, "type": kind, "channel_id": channel,
            "author": {"id": user, "username": format!("user{user}")}, "content": text,
            "message_reference": {"message_id": id, "channel_id": channel}});
        DiscordStandIn::dispatch(&mut inner, "MESSAGE_CREATE", data);
    }

    /// The follow-up answering interaction `id`, once it came.
    pub fn followup(&self, interaction: &str) -> String {
        self.wait_for(&format!("a follow-up of {interaction}"), |inner| {
            inner
                .interactions
                .get(interaction)
                .and_then(|i| i.followups.first().cloned())
        })
    }

    /// How the interaction was first answered, and how long after it was sent.
    pub fn answered(&self, interaction: &str) -> Option<u64> {
        self.inner()
            .interactions
            .get(interaction)
            .and_then(|i| i.answered)
    }

    /// Drops the Gateway connection (no close frame).
    pub fn drop_connection(&self) {
        let mut inner = self.inner();
        if let Some(socket) = inner.socket.take() {
            // An empty binary frame is the connection's signal to go.
            let _ = socket.send(Frame::Binary(Vec::new().into()));
        }
    }

    /// Sends RECONNECT (op 7).
    pub fn ask_reconnect(&self) {
        let inner = self.inner();
        if let Some(socket) = &inner.socket {
            let _ = socket.send(Frame::text(json!({"op": 7, "d": null}).to_string()));
        }
    }

    /// Heartbeats get (or stop getting) their ACK.
    pub fn acks(&self, on: bool) {
        self.inner().acks = on;
    }

    /// The next `count` REST calls whose route starts with `route` answer
    /// `status` (a 429 with `retry_after` seconds).
    pub fn fail(&self, route: &str, status: u16, retry_after: Option<f64>, count: usize) {
        let mut inner = self.inner();
        for _ in 0..count {
            inner.failures.push((route.to_owned(), status, retry_after));
        }
    }

    pub fn failures_served(&self) -> usize {
        self.inner().failures_served
    }

    /// A raw REST request: `(status, answer)`.
    pub fn raw(&self, method: &str, route: &str, token: Option<&str>, body: &str) -> (u16, Value) {
        let addr = self
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/api/v10")
            .to_owned();
        let auth = token.map_or_else(String::new, |t| format!("Authorization: Bot {t}\r\n"));
        let (status, _, answer) = crate::http::exchange(
            &addr,
            method,
            &format!("/api/v10{route}"),
            &format!("{auth}Content-Type: application/json\r\n"),
            body.as_bytes(),
        );
        (status, serde_json::from_str(&answer).unwrap_or(Value::Null))
    }

    /// A raw Gateway connection to `query`: the close code it ends with
    /// after HELLO and `first` (or `None` when it stays open).
    pub fn raw_gateway(&self, query: &str, first: Value) -> Option<u16> {
        let url = format!("ws://127.0.0.1:{}/{query}", self.shared.ws_port);
        self._runtime.block_on(async move {
            let mut socket = airlock_net::websocket(&url, None).await.ok()?;
            let _ = socket.send(Frame::text(first.to_string())).await;
            loop {
                match tokio::time::timeout(Duration::from_secs(2), socket.next()).await {
                    Ok(Some(Ok(Frame::Close(frame)))) => return frame.map(|f| u16::from(f.code)),
                    Ok(Some(Ok(_))) => continue,
                    _ => return None,
                }
            }
        })
    }
}

fn error(status: u16, message: &str, code: u64) -> Response {
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        axum::Json(json!({"message": message, "code": code})),
    )
        .into_response()
}

fn ok(body: Value) -> Response {
    (StatusCode::OK, axum::Json(body)).into_response()
}

async fn rest(
    State(shared): State<Arc<Shared>>,
    method: Method,
    Path(route): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let route = format!("/{route}");
    let token_ok = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bot {TOKEN}"));
    // Interaction callbacks and webhooks are authorized by their token.
    let by_token = route.starts_with("/interactions/") || route.starts_with("/webhooks/");
    if !token_ok && !by_token {
        return error(401, "401: Unauthorized", 0);
    }
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(value) => value,
            Err(_) => return error(400, "The request body contains invalid JSON.", 50109),
        }
    };
    let mut inner = shared.inner.lock().unwrap();
    inner.calls.push(format!("{method} {route}"));
    shared.changed.notify_all();
    if let Some(at) = inner
        .failures
        .iter()
        .position(|(r, _, _)| route.starts_with(r.as_str()))
    {
        let (_, status, retry_after) = inner.failures.remove(at);
        inner.failures_served += 1;
        return match retry_after {
            Some(seconds) => (
                StatusCode::TOO_MANY_REQUESTS,
                axum::Json(json!({"message": "You are being rate limited.", "retry_after": seconds, "global": false})),
            )
                .into_response(),
            None => error(status, "Internal Server Error", 0),
        };
    }
    let parts: Vec<&str> = route.trim_start_matches('/').split('/').collect();
    let answer = match (method.as_str(), parts.as_slice()) {
        ("GET", ["gateway", "bot"]) => ok(
            json!({"url": format!("ws://127.0.0.1:{}", shared.ws_port), "shards": 1,
            "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}}),
        ),
        ("GET", ["users", "@me"]) => {
            ok(json!({"id": APPLICATION, "username": "airlock-test", "bot": true}))
        }
        ("POST", ["channels", channel, "messages"]) => {
            if !inner.channels.contains(*channel) {
                return error(404, "Unknown Channel", 10003);
            }
            if let Err(refused) = check_message(&body) {
                return refused;
            }
            inner.next_id += 1;
            let id = inner.next_id.to_string();
            inner.messages.push(DiscordMessage {
                channel: (*channel).to_owned(),
                id: id.clone(),
                content: body["content"].as_str().unwrap_or("").to_owned(),
                components: body.get("components").cloned().unwrap_or(json!([])),
                edits: 0,
            });
            ok(json!({"id": id, "channel_id": channel, "content": body["content"]}))
        }
        ("PATCH", ["channels", channel, "messages", id]) => {
            if let Err(refused) = check_message(&body) {
                return refused;
            }
            let Some(message) = inner
                .messages
                .iter_mut()
                .find(|m| m.channel == *channel && m.id == *id)
            else {
                return error(404, "Unknown Message", 10008);
            };
            message.content = body["content"].as_str().unwrap_or("").to_owned();
            message.components = body.get("components").cloned().unwrap_or(json!([]));
            message.edits += 1;
            ok(json!({"id": id, "channel_id": channel}))
        }
        ("POST", ["interactions", id, token, "callback"]) => {
            let Some(interaction) = inner.interactions.get_mut(*id) else {
                return error(404, "Unknown interaction", 10062);
            };
            if *token != format!("itoken-{id}")
                || interaction.sent.elapsed() > Duration::from_secs(3)
            {
                return error(404, "Unknown interaction", 10062);
            }
            if interaction.answered.is_some() {
                return error(400, "Interaction has already been acknowledged.", 40060);
            }
            let Some(kind @ 4..=7) = body["type"].as_u64() else {
                return error(400, "Invalid Form Body", 50035);
            };
            interaction.answered = Some(kind);
            (StatusCode::NO_CONTENT, "").into_response()
        }
        ("POST", ["webhooks", application, token]) => {
            let id = token.trim_start_matches("itoken-");
            let Some(interaction) = inner.interactions.get_mut(id) else {
                return error(404, "Unknown Webhook", 10015);
            };
            if *application != APPLICATION || interaction.answered.is_none() {
                return error(404, "Unknown Webhook", 10015);
            }
            if let Err(refused) = check_message(&body) {
                return refused;
            }
            interaction
                .followups
                .push(body["content"].as_str().unwrap_or("").to_owned());
            ok(json!({"id": "1", "content": body["content"]}))
        }
        _ => error(404, "404: Not Found", 0),
    };
    shared.changed.notify_all();
    answer
}

/// A message body as Discord checks it: content of at most 2000
/// characters, and action rows of one to five buttons, each with a style
/// of 1 to 4 and a `custom_id` of 1 to 100 characters, or style 5 and a
/// URL; labels of at most 80.
#[allow(clippy::result_large_err)]
fn check_message(body: &Value) -> Result<(), Response> {
    let invalid = || Err(error(400, "Invalid Form Body", 50035));
    let content = body["content"].as_str().unwrap_or("");
    if content.chars().count() > 2000 {
        return invalid();
    }
    let Some(rows) = body.get("components") else {
        return if content.is_empty() {
            Err(error(400, "Cannot send an empty message", 50006))
        } else {
            Ok(())
        };
    };
    let Some(rows) = rows.as_array() else {
        return invalid();
    };
    if rows.len() > 5 {
        return invalid();
    }
    for row in rows {
        let Some(buttons) = row["components"].as_array() else {
            return invalid();
        };
        if row["type"] != 1 || buttons.is_empty() || buttons.len() > 5 {
            return invalid();
        }
        for button in buttons {
            let label_ok = button["label"]
                .as_str()
                .is_some_and(|l| !l.is_empty() && l.chars().count() <= 80);
            let ok = button["type"] == 2
                && label_ok
                && match button["style"].as_u64() {
                    Some(1..=4) => button["custom_id"]
                        .as_str()
                        .is_some_and(|c| (1..=100).contains(&c.chars().count())),
                    Some(5) => button["url"]
                        .as_str()
                        .is_some_and(|u| u.starts_with("https://") || u.starts_with("http://")),
                    _ => false,
                };
            if !ok {
                return invalid();
            }
        }
    }
    Ok(())
}

/// One Gateway connection (the handshake callback's error type is
/// tungstenite's).
#[allow(clippy::result_large_err)]
async fn connection(shared: Arc<Shared>, tcp: tokio::net::TcpStream) {
    let mut query = String::new();
    let accepted = tokio_tungstenite::accept_hdr_async(
        tcp,
        |request: &tokio_tungstenite::tungstenite::handshake::server::Request, response| {
            query = request.uri().query().unwrap_or("").to_owned();
            Ok(response)
        },
    )
    .await;
    let Ok(socket) = accepted else { return };
    let (mut write, mut read) = socket.split();
    let close = |code: u16, reason: &'static str| {
        Frame::Close(Some(CloseFrame {
            code: code.into(),
            reason: reason.into(),
        }))
    };
    let hello = json!({"op": 10, "d": {"heartbeat_interval": shared.heartbeat_ms}});
    if write.send(Frame::text(hello.to_string())).await.is_err() {
        return;
    }
    if !query.split('&').any(|p| p == "v=10") || !query.split('&').any(|p| p == "encoding=json") {
        let _ = write.send(close(4012, "Invalid API version")).await;
        return;
    }
    let (sender, mut outgoing) = mpsc::unbounded_channel::<Frame>();
    loop {
        tokio::select! {
            frame = outgoing.recv() => {
                match frame {
                    Some(Frame::Binary(bytes)) if bytes.is_empty() => return,
                    Some(frame) => if write.send(frame).await.is_err() { return },
                    None => return,
                }
            }
            frame = read.next() => {
                let Some(Ok(Frame::Text(text))) = frame else {
                    forget(&shared, &sender);
                    return;
                };
                let Ok(payload) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                if let Some(ending) = gateway_op(&shared, &sender, &payload) {
                    let _ = write.send(close(ending.0, ending.1)).await;
                    return;
                }
            }
        }
    }
}

/// What the Gateway does with one payload from the bot; `Some` closes the
/// connection with that code and reason.
fn gateway_op(
    shared: &Shared,
    sender: &mpsc::UnboundedSender<Frame>,
    payload: &Value,
) -> Option<(u16, &'static str)> {
    let mut inner = shared.inner.lock().unwrap();
    match payload["op"].as_u64() {
        Some(1) => {
            inner.heartbeats += 1;
            if inner.acks {
                let _ = sender.send(Frame::text(json!({"op": 11}).to_string()));
            }
        }
        Some(2) => {
            if payload["d"]["token"] != TOKEN {
                return Some((4004, "Authentication failed."));
            }
            inner.identifies += 1;
            inner.next_id += 1;
            let session = format!("session-{}", inner.next_id);
            inner.session = Some(session.clone());
            inner.dispatched.clear();
            inner.socket = Some(sender.clone());
            let ready = json!({"v": 10, "session_id": session,
                "resume_gateway_url": format!("ws://127.0.0.1:{}", shared.ws_port),
                "user": {"id": APPLICATION, "username": "airlock-test", "bot": true},
                "application": {"id": APPLICATION}, "guilds": []});
            DiscordStandIn::dispatch(&mut inner, "READY", ready);
        }
        Some(6) => {
            let known = inner.session.as_deref() == payload["d"]["session_id"].as_str()
                && payload["d"]["token"] == TOKEN;
            if !known {
                let _ = sender.send(Frame::text(json!({"op": 9, "d": false}).to_string()));
                return None;
            }
            inner.resumes += 1;
            let seq = payload["d"]["seq"].as_u64().unwrap_or(0) as usize;
            // The events the bot missed, then RESUMED.
            for missed in inner.dispatched.iter().skip(seq) {
                let _ = sender.send(Frame::text(missed.to_string()));
            }
            inner.socket = Some(sender.clone());
            DiscordStandIn::dispatch(&mut inner, "RESUMED", json!({}));
        }
        _ => {}
    }
    shared.changed.notify_all();
    None
}

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
