//! A stand-in for Telegram's Bot API (<https://core.telegram.org/bots/api>)
//! on a port of 127.0.0.1, speaking its wire protocol: `POST
//! /bot{token}/{method}` with a JSON body, answered `{ok: true, result}` or
//! `{ok: false, error_code, description[, parameters: {retry_after}]}`.
//! It refuses what Telegram refuses (a wrong token, an unknown method, a
//! body that is not JSON, HTML it cannot parse, a message over 4096
//! characters, bad buttons, an edit that changes nothing, an answer to a
//! callback query that is not open, two pollers at once), and lets a test
//! play the people: press a button, reply to a message, and see every
//! message as it stands.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The bot's token the stand-in accepts.
pub const TOKEN: &str = "123456:test-token_ABC";

/// A message as it stands in a chat.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub chat: i64,
    pub id: i64,
    /// The HTML sent.
    pub html: String,
    /// What a person sees: tags gone, entities decoded.
    pub text: String,
    /// The inline keyboard (`[]` without one).
    pub keyboard: Value,
    /// Edits made after it was sent.
    pub edits: usize,
    /// When the stand-in received it (Unix milliseconds).
    pub received_ms: u64,
}

impl Message {
    /// Every button's `(text, callback_data or url)`, row by row.
    pub fn buttons(&self) -> Vec<(String, String)> {
        self.keyboard
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|row| row.as_array().cloned().unwrap_or_default())
            .map(|button| {
                let target = button["callback_data"]
                    .as_str()
                    .or_else(|| button["url"].as_str())
                    .unwrap_or("")
                    .to_owned();
                (button["text"].as_str().unwrap_or("").to_owned(), target)
            })
            .collect()
    }

    /// The callback data of the button whose text starts with `label`.
    pub fn button(&self, label: &str) -> String {
        self.buttons()
            .into_iter()
            .find(|(text, _)| text.contains(label))
            .map(|(_, data)| data)
            .unwrap_or_else(|| panic!("no button {label:?} in {:?}", self.buttons()))
    }
}

/// An injected failure: the next call of `method` answers `status`.
#[derive(Debug, Clone)]
struct Failure {
    method: String,
    status: u16,
    retry_after: Option<u64>,
}

#[derive(Default)]
struct Inner {
    known_chats: HashSet<i64>,
    next_message: i64,
    next_update: i64,
    messages: Vec<Message>,
    updates: VecDeque<Value>,
    open_queries: HashSet<String>,
    /// `(callback query id, text, show_alert)`.
    answers: Vec<(String, String, bool)>,
    failures: Vec<Failure>,
    /// Every call: `(method, body)`.
    calls: Vec<(String, Value)>,
    /// Which poll is the current one; an older one is ended with 409.
    poll_generation: u64,
    conflicts: u64,
    failures_served: u64,
}

struct Shared {
    inner: Mutex<Inner>,
    /// Tests wait on this for a change.
    changed: Condvar,
    /// Long polls wait on this for an update.
    updated: Notify,
}

/// The stand-in, running until dropped.
pub struct TelegramStandIn {
    /// `api_url` for airlock: `http://127.0.0.1:PORT`.
    pub url: String,
    shared: Arc<Shared>,
    _runtime: tokio::runtime::Runtime,
}

impl TelegramStandIn {
    /// Starts the stand-in; `chats` are the chats the bot is in.
    pub fn start(chats: &[i64]) -> TelegramStandIn {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                known_chats: chats.iter().copied().collect(),
                next_message: 100,
                next_update: 1,
                ..Inner::default()
            }),
            changed: Condvar::new(),
            updated: Notify::new(),
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new()
            .route("/{bot}/{method}", axum::routing::post(api))
            .fallback(|| async { not_found() })
            .with_state(shared.clone());
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TelegramStandIn {
            url,
            shared,
            _runtime: runtime,
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.shared.inner.lock().unwrap()
    }

    /// Waits (at most 20 s) until `check` finds what it looks for.
    pub fn wait_for<T>(
        &self,
        what: &str,
        mut check: impl FnMut(&StandInView<'_>) -> Option<T>,
    ) -> T {
        crate::standin::wait_on(
            &self.shared.inner,
            &self.shared.changed,
            &format!("telegram {what}"),
            |inner| {
                let calls: Vec<&String> = inner.calls.iter().map(|(m, _)| m).collect();
                format!("messages: {:#?}; calls: {calls:?}", inner.messages)
            },
            |inner| check(&StandInView { inner }),
        )
    }

    /// The `n`th message sent to `chat` (0 the first), once it is there.
    pub fn message(&self, chat: i64, n: usize) -> Message {
        self.wait_for(&format!("message {n} in chat {chat}"), |view| {
            view.messages_in(chat).get(n).cloned()
        })
    }

    /// Message `id` of `chat` once `check` holds for it.
    pub fn message_once(
        &self,
        chat: i64,
        id: i64,
        what: &str,
        check: impl Fn(&Message) -> bool,
    ) -> Message {
        self.wait_for(what, |view| {
            view.messages_in(chat)
                .into_iter()
                .find(|m| m.id == id && check(m))
        })
    }

    /// Every message of `chat`, as they stand now.
    pub fn messages(&self, chat: i64) -> Vec<Message> {
        StandInView {
            inner: &self.inner(),
        }
        .messages_in(chat)
    }

    /// User `user` presses the button with `data` on message `id` of
    /// `chat`; the callback query's id.
    pub fn press(&self, chat: i64, id: i64, user: i64, data: &str) -> String {
        let mut inner = self.inner();
        let query = format!("q{}", inner.next_update);
        inner.open_queries.insert(query.clone());
        let update_id = inner.next_update;
        inner.next_update += 1;
        inner.updates.push_back(json!({
            "update_id": update_id,
            "callback_query": {
                "id": query,
                "from": {"id": user, "is_bot": false, "first_name": format!("user{user}")},
                "message": {"message_id": id, "chat": {"id": chat, "type": "group"}, "date": 0},
                "chat_instance": "1",
                "data": data,
            }
        }));
        drop(inner);
        self.shared.updated.notify_waiters();
        query
    }

    /// User `user` replies `text` to message `id` of `chat`.
    pub fn reply(&self, chat: i64, id: i64, user: i64, text: &str) {
        let mut inner = self.inner();
        let update_id = inner.next_update;
        inner.next_update += 1;
        let message_id = inner.next_message;
        inner.next_message += 1;
        inner.updates.push_back(json!({
            "update_id": update_id,
            "message": {
                "message_id": message_id,
                "from": {"id": user, "is_bot": false, "first_name": format!("user{user}")},
                "chat": {"id": chat, "type": "group"},
                "date": 0,
                "text": text,
                "reply_to_message": {"message_id": id, "chat": {"id": chat, "type": "group"}, "date": 0},
            }
        }));
        drop(inner);
        self.shared.updated.notify_waiters();
    }

    /// What the bot answered to callback query `query`: `(text, alert)`.
    pub fn answer_to(&self, query: &str) -> (String, bool) {
        self.wait_for(&format!("an answer to {query}"), |view| {
            view.inner
                .answers
                .iter()
                .find(|(id, _, _)| id == query)
                .map(|(_, text, alert)| (text.clone(), *alert))
        })
    }

    /// The next `count` calls of `method` answer `status` (with
    /// `retry_after` seconds for a 429).
    pub fn fail(&self, method: &str, status: u16, retry_after: Option<u64>, count: usize) {
        let mut inner = self.inner();
        for _ in 0..count {
            inner.failures.push(Failure {
                method: method.to_owned(),
                status,
                retry_after,
            });
        }
    }

    /// Injected failures answered so far.
    pub fn failures_served(&self) -> u64 {
        self.inner().failures_served
    }

    /// Polls ended because another began (409).
    pub fn conflicts(&self) -> u64 {
        self.inner().conflicts
    }

    /// How many calls of `method` were made.
    pub fn calls_of(&self, method: &str) -> usize {
        self.inner()
            .calls
            .iter()
            .filter(|(m, _)| m == method)
            .count()
    }

    /// A raw request to the stand-in, as a client would make it: `(status,
    /// answer)`.
    pub fn raw(&self, path: &str, content_type: &str, body: &str) -> (u16, Value) {
        let addr = self.url.trim_start_matches("http://");
        let (status, _, answer) = crate::http::exchange(
            addr,
            "POST",
            path,
            &format!("Content-Type: {content_type}\r\n"),
            body.as_bytes(),
        );
        (status, serde_json::from_str(&answer).unwrap_or(Value::Null))
    }
}

/// A look at the stand-in's state.
pub struct StandInView<'a> {
    inner: &'a Inner,
}

impl StandInView<'_> {
    pub fn messages_in(&self, chat: i64) -> Vec<Message> {
        self.inner
            .messages
            .iter()
            .filter(|m| m.chat == chat)
            .cloned()
            .collect()
    }

    pub fn answers(&self) -> &[(String, String, bool)] {
        &self.inner.answers
    }

    /// How many calls of `method` were made.
    pub fn calls_of(&self, method: &str) -> usize {
        self.inner.calls.iter().filter(|(m, _)| m == method).count()
    }
}

fn reply(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

fn ok(result: Value) -> Response {
    reply(StatusCode::OK, json!({"ok": true, "result": result}))
}

fn error(code: u16, description: &str) -> Response {
    reply(
        StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST),
        json!({"ok": false, "error_code": code, "description": description}),
    )
}

fn bad(description: &str) -> Response {
    error(400, &format!("Bad Request: {description}"))
}

fn not_found() -> Response {
    error(404, "Not Found")
}

const METHODS: [&str; 6] = [
    "getMe",
    "getUpdates",
    "sendMessage",
    "editMessageText",
    "answerCallbackQuery",
    "deleteWebhook",
];

async fn api(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if bot.strip_prefix("bot") != Some(TOKEN) {
        return error(401, "Unauthorized");
    }
    if !METHODS.contains(&method.as_str()) {
        return not_found();
    }
    let json_body = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let body: Value = if body.is_empty() {
        json!({})
    } else if !json_body {
        return bad("unsupported content type; send application/json");
    } else {
        match serde_json::from_slice(&body) {
            Ok(value @ Value::Object(_)) => value,
            _ => return bad("can't parse JSON object"),
        }
    };
    {
        let mut inner = shared.inner.lock().unwrap();
        inner.calls.push((method.clone(), body.clone()));
        shared.changed.notify_all();
        if let Some(at) = inner.failures.iter().position(|f| f.method == method) {
            let failure = inner.failures.remove(at);
            inner.failures_served += 1;
            shared.changed.notify_all();
            return match failure.retry_after {
                Some(seconds) => reply(
                    StatusCode::TOO_MANY_REQUESTS,
                    json!({"ok": false, "error_code": 429,
                           "description": format!("Too Many Requests: retry after {seconds}"),
                           "parameters": {"retry_after": seconds}}),
                ),
                None => error(failure.status, "Internal Server Error"),
            };
        }
    }
    let answer = match method.as_str() {
        "getMe" => ok(
            json!({"id": 123456, "is_bot": true, "first_name": "airlock test", "username": "airlock_test_bot"}),
        ),
        "deleteWebhook" => ok(json!(true)),
        "getUpdates" => get_updates(&shared, &body).await,
        "sendMessage" => send_message(&shared, &body),
        "editMessageText" => edit_message(&shared, &body),
        "answerCallbackQuery" => answer_callback(&shared, &body),
        _ => not_found(),
    };
    shared.changed.notify_all();
    answer
}

async fn get_updates(shared: &Arc<Shared>, body: &Value) -> Response {
    let offset = body["offset"].as_i64().unwrap_or(0);
    let timeout = body["timeout"].as_u64().unwrap_or(0).min(50);
    let generation = {
        let mut inner = shared.inner.lock().unwrap();
        inner.poll_generation += 1;
        inner
            .updates
            .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
        inner.poll_generation
    };
    // An earlier poll still waiting is ended (Telegram: 409 Conflict).
    shared.updated.notify_waiters();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    loop {
        let notified = shared.updated.notified();
        {
            let mut inner = shared.inner.lock().unwrap();
            if inner.poll_generation != generation {
                inner.conflicts += 1;
                return error(
                    409,
                    "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
                );
            }
            if !inner.updates.is_empty() {
                let updates: Vec<Value> = inner.updates.iter().cloned().collect();
                return ok(Value::Array(updates));
            }
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return ok(json!([]));
        }
    }
}

/// A chat id as Telegram takes it; `None` when it is neither an integer nor
/// an `@name`.
fn chat_of(body: &Value) -> Option<i64> {
    body["chat_id"]
        .as_i64()
        .or_else(|| body["chat_id"].as_str()?.parse().ok())
}

fn send_message(shared: &Arc<Shared>, body: &Value) -> Response {
    let Some(chat) = chat_of(body) else {
        return bad("chat_id is empty");
    };
    let (html, text) = match checked_text(body) {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let keyboard = match checked_keyboard(body) {
        Ok(keyboard) => keyboard,
        Err(refused) => return refused,
    };
    let mut inner = shared.inner.lock().unwrap();
    if !inner.known_chats.contains(&chat) {
        return bad("chat not found");
    }
    let id = inner.next_message;
    inner.next_message += 1;
    inner.messages.push(Message {
        chat,
        id,
        html,
        text: text.clone(),
        keyboard,
        edits: 0,
        received_ms: unix_ms(),
    });
    ok(json!({"message_id": id, "chat": {"id": chat, "type": "group"}, "date": 0, "text": text}))
}

fn edit_message(shared: &Arc<Shared>, body: &Value) -> Response {
    let Some(chat) = chat_of(body) else {
        return bad("chat_id is empty");
    };
    let Some(id) = body["message_id"].as_i64() else {
        return bad("message_id is empty");
    };
    let (html, text) = match checked_text(body) {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let keyboard = match checked_keyboard(body) {
        Ok(keyboard) => keyboard,
        Err(refused) => return refused,
    };
    let mut inner = shared.inner.lock().unwrap();
    let Some(message) = inner
        .messages
        .iter_mut()
        .find(|m| m.chat == chat && m.id == id)
    else {
        return bad("message to edit not found");
    };
    if message.html == html && message.keyboard == keyboard {
        return bad(
            "message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
        );
    }
    message.html = html;
    message.text = text.clone();
    message.keyboard = keyboard;
    message.edits += 1;
    ok(json!({"message_id": id, "chat": {"id": chat, "type": "group"}, "date": 0, "text": text}))
}

fn answer_callback(shared: &Arc<Shared>, body: &Value) -> Response {
    let Some(query) = body["callback_query_id"].as_str() else {
        return bad("callback_query_id is empty");
    };
    let text = body["text"].as_str().unwrap_or("").to_owned();
    if text.chars().count() > 200 {
        return bad("text is too long");
    }
    let mut inner = shared.inner.lock().unwrap();
    if !inner.open_queries.remove(query) {
        return bad("query is too old and response timeout expired or query ID is invalid");
    }
    let alert = body["show_alert"].as_bool().unwrap_or(false);
    inner.answers.push((query.to_owned(), text, alert));
    ok(json!(true))
}

/// The message's HTML and what a person sees of it, or Telegram's refusal.
#[allow(clippy::result_large_err)]
fn checked_text(body: &Value) -> Result<(String, String), Response> {
    let Some(html) = body["text"].as_str() else {
        return Err(bad("message text is empty"));
    };
    let text = match body["parse_mode"].as_str() {
        None => html.to_owned(),
        Some("HTML") => {
            parse_html(html).map_err(|problem| bad(&format!("can't parse entities: {problem}")))?
        }
        Some(_) => return Err(bad("unsupported parse_mode")),
    };
    if text.trim().is_empty() {
        return Err(bad("message text is empty"));
    }
    if text.encode_utf16().count() > 4096 {
        return Err(bad("message is too long"));
    }
    Ok((html.to_owned(), text))
}

/// An inline keyboard as Telegram checks it: rows of buttons, each with a
/// text and exactly one of `callback_data` (1 to 64 bytes) or an http(s)
/// `url` Telegram can open (not a local address).
#[allow(clippy::result_large_err)]
fn checked_keyboard(body: &Value) -> Result<Value, Response> {
    let markup = &body["reply_markup"];
    if markup.is_null() {
        return Ok(json!([]));
    }
    let Some(rows) = markup["inline_keyboard"].as_array() else {
        return Err(bad(
            "field \"inline_keyboard\" of the InlineKeyboardMarkup must be an Array",
        ));
    };
    for row in rows {
        let Some(buttons) = row.as_array() else {
            return Err(bad(
                "field \"inline_keyboard\" of the InlineKeyboardMarkup must be an Array of Arrays",
            ));
        };
        for button in buttons {
            if button["text"].as_str().is_none_or(str::is_empty) {
                return Err(bad("text buttons are unallowed in the inline keyboard"));
            }
            match (button["callback_data"].as_str(), button["url"].as_str()) {
                (Some(data), None) => {
                    if data.is_empty() || data.len() > 64 {
                        return Err(bad("BUTTON_DATA_INVALID"));
                    }
                }
                (None, Some(url)) => {
                    let rest = url
                        .strip_prefix("https://")
                        .or_else(|| url.strip_prefix("http://"));
                    let host = rest
                        .map(|rest| rest.split(['/', ':', '?', '#']).next().unwrap_or(""))
                        .unwrap_or("");
                    if host.is_empty()
                        || host == "localhost"
                        || host.starts_with("127.")
                        || host == "[::1]"
                    {
                        return Err(bad("BUTTON_URL_INVALID"));
                    }
                }
                _ => return Err(bad("can't find field \"text\"")),
            }
        }
    }
    Ok(Value::Array(rows.clone()))
}

/// The visible text of Telegram HTML: only its tags, balanced; only
/// `&lt; &gt; &amp; &quot;` and numeric entities.
pub fn parse_html(html: &str) -> Result<String, String> {
    const TAGS: [&str; 15] = [
        "b",
        "strong",
        "i",
        "em",
        "u",
        "ins",
        "s",
        "strike",
        "del",
        "span",
        "tg-spoiler",
        "a",
        "code",
        "pre",
        "blockquote",
    ];
    let mut text = String::new();
    let mut open: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(c) = rest.chars().next() {
        match c {
            '<' => {
                let end = rest.find('>').ok_or_else(|| {
                    format!(
                        "unclosed start tag at byte offset {}",
                        html.len() - rest.len()
                    )
                })?;
                let tag = &rest[1..end];
                if let Some(name) = tag.strip_prefix('/') {
                    match open.pop() {
                        Some(top) if top == name => {}
                        _ => return Err(format!("unmatched end tag \"{name}\"")),
                    }
                } else {
                    let name = tag.split_whitespace().next().unwrap_or("");
                    if !TAGS.contains(&name) {
                        return Err(format!("unsupported start tag \"{name}\""));
                    }
                    open.push(name.to_owned());
                }
                rest = &rest[end + 1..];
            }
            '&' => {
                let end = rest
                    .find(';')
                    .filter(|end| *end <= 10)
                    .ok_or("character entity expected")?;
                let entity = &rest[1..end];
                let decoded = match entity {
                    "lt" => '<',
                    "gt" => '>',
                    "amp" => '&',
                    "quot" => '"',
                    _ => {
                        let number = entity
                            .strip_prefix("#x")
                            .map(|hex| u32::from_str_radix(hex, 16))
                            .or_else(|| entity.strip_prefix('#').map(str::parse))
                            .ok_or_else(|| format!("unsupported entity \"{entity}\""))?
                            .map_err(|_| format!("bad entity \"{entity}\""))?;
                        char::from_u32(number).ok_or("bad entity")?
                    }
                };
                text.push(decoded);
                rest = &rest[end + 1..];
            }
            c => {
                text.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    if let Some(tag) = open.pop() {
        return Err(format!(
            "can't find end tag corresponding to start tag \"{tag}\""
        ));
    }
    Ok(text)
}

/// The system clock, in Unix milliseconds.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
