//! Discord, through the Gateway and the REST API
//! (<https://discord.com/developers/docs/events/gateway>,
//! <https://discord.com/developers/docs/interactions/receiving-and-responding>).
//! The bot connects out to the Gateway: HELLO gives the heartbeat interval;
//! it IDENTIFYs once, heartbeats (the first after `interval × jitter`),
//! takes a heartbeat without an ACK since the last one for a dead
//! connection, and RESUMEs on `resume_gateway_url` after a drop, RECONNECT
//! or INVALID_SESSION `true` (a new IDENTIFY after INVALID_SESSION
//! `false`). Button presses arrive as INTERACTION_CREATE and are answered
//! at once with a deferred ephemeral response (Discord allows 3 s), the
//! words following as a follow-up; replies to a confirmation arrive as
//! MESSAGE_CREATE of type 19 (a reply). Confirmations are messages with
//! button components; outcomes edit them.
//!
//! No client crate is used: serenity and twilight bring their own TLS and
//! root stores (twilight's Gateway connector cannot be given roots), so
//! `tls.ca_file` would not reach them; the five routes and the Gateway's
//! few opcodes are plain JSON.

use std::sync::Arc;
use std::time::Duration;

use airlock_core::Channel;
use airlock_core::config::Config;
use airlock_net::WsMessage as Message;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::card::{Card, CardState};
use crate::platform::{ApiError, Fut, Inbound, Platform, Settings, backoff};

/// Discord's longest message content.
pub(crate) const MAX_CONTENT: usize = 2000;
/// GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT: replies and their
/// text (interactions come whatever the intents).
const INTENTS: u64 = (1 << 9) | (1 << 12) | (1 << 15);
/// Gateway close codes after which connecting again cannot help: bad
/// token, bad shard, sharding required, bad API version, bad or
/// disallowed intents.
const FATAL_CLOSE: [u16; 6] = [4004, 4010, 4011, 4012, 4013, 4014];

pub(crate) struct Discord {
    http: reqwest::Client,
    api_url: String,
    token: String,
    gateway_url: Option<String>,
    ca_file: Option<std::path::PathBuf>,
}

/// What a session knows for a RESUME.
#[derive(Debug, Clone)]
struct Session {
    id: String,
    resume_url: String,
    seq: Option<u64>,
}

/// How a Gateway connection ended.
enum Ended {
    /// Connect again and RESUME.
    Resume,
    /// Connect again and IDENTIFY afresh.
    Identify,
    /// Stop: the configuration must change first.
    Fatal(String),
}

impl Discord {
    pub(crate) fn new(
        api_url: &str,
        token: &str,
        gateway_url: Option<&str>,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Discord, String> {
        if token.is_empty()
            || !token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err("the bot token has characters a Discord token does not".to_owned());
        }
        let http = airlock_net::http_client(ca_file)
            .map_err(|error| error.to_string())?
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|error| format!("cannot make an HTTP client: {error}"))?;
        Ok(Discord {
            http,
            api_url: api_url.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            gateway_url: gateway_url.map(str::to_owned),
            ca_file: ca_file.map(std::path::Path::to_path_buf),
        })
    }

    /// One REST call: 429 carries `retry_after` in (fractional) seconds.
    async fn call_once(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.api_url))
            .header(
                reqwest::header::AUTHORIZATION,
                format!("Bot {}", self.token),
            );
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        // A path may hold an interaction's token: errors never name it.
        let answer = request
            .send()
            .await
            .map_err(|error| crate::platform::transport_error(error.without_url()))?;
        let status = answer.status();
        let text = answer
            .text()
            .await
            .map_err(|error| crate::platform::transport_error(error.without_url()))?;
        let parsed: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(parsed);
        }
        if status.as_u16() == 429 {
            let seconds = parsed["retry_after"]
                .as_f64()
                .unwrap_or(1.0)
                .clamp(0.0, 60.0);
            return Err(ApiError::RateLimited(Duration::from_secs_f64(seconds)));
        }
        if status.is_server_error() {
            return Err(ApiError::Unavailable(status.to_string()));
        }
        Err(ApiError::Refused(format!(
            "{status}: {} (code {})",
            parsed["message"].as_str().unwrap_or("no message"),
            parsed["code"]
        )))
    }

    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        backoff(|| self.call_once(method.clone(), path, body)).await
    }

    async fn send(&self, chat: &str, card: &Card) -> Result<String, ApiError> {
        let (content, components) = render(card);
        let sent = self
            .call(
                reqwest::Method::POST,
                &format!("/channels/{chat}/messages"),
                Some(&json!({"content": content, "components": components,
                             "allowed_mentions": {"parse": []}})),
            )
            .await?;
        // It goes into URL paths later: a snowflake, digits only.
        sent["id"]
            .as_str()
            .filter(|id| is_snowflake(id))
            .map(str::to_owned)
            .ok_or_else(|| ApiError::Refused("the message has no id".to_owned()))
    }

    async fn change(&self, chat: &str, message_id: &str, card: &Card) -> Result<(), ApiError> {
        let (content, components) = render(card);
        self.call(
            reqwest::Method::PATCH,
            &format!("/channels/{chat}/messages/{message_id}"),
            Some(&json!({"content": content, "components": components,
                         "allowed_mentions": {"parse": []}})),
        )
        .await
        .map(|_| ())
    }

    /// Keeps a Gateway session open for as long as the runner runs.
    async fn gateway(self: Arc<Self>, inbound: mpsc::Sender<Inbound>) {
        let mut session: Option<Session> = None;
        let mut failures = 0u32;
        loop {
            let ended = self.connection(&mut session, &inbound).await;
            if inbound.is_closed() {
                return;
            }
            match ended {
                Ok(Ended::Resume) => failures = 0,
                Ok(Ended::Identify) => {
                    session = None;
                    // Discord asks for a pause of 1 to 5 s before a new
                    // IDENTIFY.
                    tokio::time::sleep(Duration::from_millis(
                        1000 + u64::from(jitter_per_mille()) * 4,
                    ))
                    .await;
                }
                Ok(Ended::Fatal(why)) => {
                    eprintln!(
                        "airlock: discord: {why}; the Gateway stays closed until the configuration changes"
                    );
                    return;
                }
                Err(error) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(20) {
                        eprintln!("airlock: discord: gateway: {error}");
                    }
                }
            }
            if failures > 0 {
                tokio::time::sleep(Duration::from_millis(250u64 << failures.min(5))).await;
            }
        }
    }

    /// The Gateway's address: configured, or asked of the API.
    async fn gateway_address(&self) -> Result<String, String> {
        if let Some(url) = &self.gateway_url {
            return Ok(url.clone());
        }
        let answer = self
            .call(reqwest::Method::GET, "/gateway/bot", None)
            .await
            .map_err(|error| format!("GET /gateway/bot: {error}"))?;
        answer["url"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "GET /gateway/bot returned no url".to_owned())
    }

    /// One Gateway connection.
    async fn connection(
        &self,
        session: &mut Option<Session>,
        inbound: &mpsc::Sender<Inbound>,
    ) -> Result<Ended, String> {
        let base = match session {
            Some(session) => session.resume_url.clone(),
            None => self.gateway_address().await?,
        };
        let url = format!("{}/?v=10&encoding=json", base.trim_end_matches('/'));
        let mut socket = airlock_net::websocket(&url, self.ca_file.as_deref())
            .await
            .map_err(|error| error.to_string())?;
        // HELLO first, within a while.
        let hello = tokio::time::timeout(Duration::from_secs(15), socket.next())
            .await
            .map_err(|_| "no HELLO from the Gateway".to_owned())?;
        let interval = match hello {
            Some(Ok(Message::Text(text))) => {
                let hello: Value =
                    serde_json::from_str(text.as_str()).map_err(|e| e.to_string())?;
                if hello["op"] != 10 {
                    return Err(format!("expected HELLO, got op {}", hello["op"]));
                }
                hello["d"]["heartbeat_interval"]
                    .as_u64()
                    .ok_or("HELLO without an interval")?
            }
            _ => return Err("the Gateway closed before HELLO".to_owned()),
        };
        let first = match session {
            Some(session) => {
                json!({"op": 6, "d": {"token": self.token, "session_id": session.id, "seq": session.seq}})
            }
            None => json!({"op": 2, "d": {"token": self.token, "intents": INTENTS,
                "properties": {"os": std::env::consts::OS, "browser": "airlock", "device": "airlock"}}}),
        };
        send(&mut socket, &first).await?;
        let interval = Duration::from_millis(interval.max(100));
        let mut next_beat =
            tokio::time::Instant::now() + interval.mul_f64(f64::from(jitter_per_mille()) / 1000.0);
        let mut acked = true;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next_beat) => {
                    if !acked {
                        // A zombie connection: close it (not 1000, which
                        // would end the session) and resume.
                        let _ = socket.close(Some(close_frame(4000))).await;
                        return Ok(Ended::Resume);
                    }
                    let seq = session.as_ref().and_then(|s| s.seq);
                    send(&mut socket, &json!({"op": 1, "d": seq})).await?;
                    acked = false;
                    next_beat = tokio::time::Instant::now() + interval;
                }
                frame = socket.next() => {
                    let text = match frame {
                        Some(Ok(Message::Text(text))) => text,
                        Some(Ok(Message::Close(frame))) => {
                            let code = frame.map_or(1000, |f| u16::from(f.code));
                            if FATAL_CLOSE.contains(&code) {
                                return Ok(Ended::Fatal(format!("the Gateway closed with {code}")));
                            }
                            // Invalid seq, session timed out: start afresh.
                            return Ok(if matches!(code, 4007 | 4009) { Ended::Identify } else { Ended::Resume });
                        }
                        Some(Ok(_)) => continue,
                        Some(Err(error)) => return Err(error.to_string()),
                        None => return Ok(Ended::Resume),
                    };
                    let Ok(payload) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                    match payload["op"].as_u64() {
                        Some(0) => {
                            if let (Some(seq), Some(session)) = (payload["s"].as_u64(), session.as_mut()) {
                                session.seq = Some(seq);
                            }
                            let data = &payload["d"];
                            match payload["t"].as_str() {
                                Some("READY") => {
                                    *session = Some(Session {
                                        id: data["session_id"].as_str().unwrap_or_default().to_owned(),
                                        resume_url: data["resume_gateway_url"].as_str().unwrap_or(&base).to_owned(),
                                        seq: payload["s"].as_u64(),
                                    });
                                }
                                Some("INTERACTION_CREATE") => {
                                    if let Some(press) = parse_interaction(data) {
                                        // Answered at once (Discord allows
                                        // 3 s), then decided: the words
                                        // follow the "thinking…".
                                        let deferred = self.defer(data);
                                        let inbound = inbound.clone();
                                        tokio::spawn(async move {
                                            deferred.await;
                                            let _ = inbound.send(press).await;
                                        });
                                    }
                                }
                                Some("MESSAGE_CREATE") => {
                                    if let Some(reply) = parse_reply(data)
                                        && inbound.send(reply).await.is_err()
                                    {
                                        return Ok(Ended::Resume);
                                    }
                                }
                                _ => {}
                            }
                        }
                        // The Gateway asks for a heartbeat now.
                        Some(1) => {
                            let seq = session.as_ref().and_then(|s| s.seq);
                            send(&mut socket, &json!({"op": 1, "d": seq})).await?;
                        }
                        Some(7) => {
                            let _ = socket.close(Some(close_frame(4000))).await;
                            return Ok(Ended::Resume);
                        }
                        Some(9) => {
                            let _ = socket.close(Some(close_frame(4000))).await;
                            return Ok(if payload["d"] == json!(true) { Ended::Resume } else { Ended::Identify });
                        }
                        Some(11) => acked = true,
                        _ => {}
                    }
                }
            }
        }
    }

    /// Answers an interaction with "thinking…", seen only by the person
    /// who pressed; the words follow when the decision is taken.
    fn defer(&self, interaction: &Value) -> impl std::future::Future<Output = ()> + Send + 'static {
        let target = match (interaction["id"].as_str(), interaction["token"].as_str()) {
            (Some(id), Some(token)) if is_snowflake(id) => Some(format!(
                "{}/interactions/{id}/{token}/callback",
                self.api_url
            )),
            _ => None,
        };
        let http = self.http.clone();
        let bot = format!("Bot {}", self.token);
        async move {
            let Some(url) = target else { return };
            let answer = http
                .post(url)
                .header(reqwest::header::AUTHORIZATION, bot)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(json!({"type": 5, "data": {"flags": 64}}).to_string())
                .send()
                .await;
            if let Err(error) = answer {
                // The URL holds the interaction's token: not in the log.
                eprintln!(
                    "airlock: discord: answering an interaction: {}",
                    error.without_url()
                );
            }
        }
    }
}

/// A Discord id: 1 to 20 digits.
fn is_snowflake(id: &str) -> bool {
    (1..=20).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_digit())
}

fn close_frame(code: u16) -> airlock_net::WsCloseFrame {
    airlock_net::WsCloseFrame {
        code: code.into(),
        reason: "".into(),
    }
}

async fn send(socket: &mut airlock_net::WebSocket, payload: &Value) -> Result<(), String> {
    socket
        .send(Message::text(payload.to_string()))
        .await
        .map_err(|error| error.to_string())
}

/// A number in 0..1000 that differs between calls and processes (the
/// first heartbeat's jitter; nothing secret depends on it).
fn jitter_per_mille() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (nanos ^ std::process::id().wrapping_mul(2_654_435_761)) % 1000
}

impl Platform for Discord {
    fn channel(&self) -> Channel {
        Channel::Discord
    }

    fn settings(&self, config: &Config) -> Option<Settings> {
        let discord = config.channels.discord.as_ref()?;
        Some(Settings {
            chats: discord.channels.clone(),
            users: discord.users.clone(),
            timeout: discord.timeout,
        })
    }

    fn render(&self, card: &Card) -> (String, Value) {
        render(card)
    }

    fn post<'a>(&'a self, chat: &'a str, card: &'a Card) -> Fut<'a, Result<String, ApiError>> {
        Box::pin(self.send(chat, card))
    }

    fn edit<'a>(
        &'a self,
        chat: &'a str,
        message_id: &'a str,
        card: &'a Card,
    ) -> Fut<'a, Result<(), ApiError>> {
        Box::pin(self.change(chat, message_id, card))
    }

    fn answer<'a>(
        &'a self,
        inbound: &'a Inbound,
        text: &'a str,
        refused: bool,
    ) -> Fut<'a, Result<(), ApiError>> {
        Box::pin(async move {
            let content = format!("`` {} ``", bounded(&unfence(text), MAX_CONTENT - 10));
            match inbound {
                Inbound::Press { handle, .. } => {
                    // `application id/interaction token`.
                    self.call(
                        reqwest::Method::POST,
                        &format!("/webhooks/{handle}"),
                        Some(&json!({"content": content, "flags": 64, "allowed_mentions": {"parse": []}})),
                    )
                    .await
                    .map(|_| ())
                }
                Inbound::Reply {
                    chat, message_id, ..
                } => {
                    if !refused {
                        return Ok(());
                    }
                    self.call(
                        reqwest::Method::POST,
                        &format!("/channels/{chat}/messages"),
                        Some(&json!({"content": content, "allowed_mentions": {"parse": []},
                                     "message_reference": {"message_id": message_id, "fail_if_not_exists": false}})),
                    )
                    .await
                    .map(|_| ())
                }
            }
        })
    }

    fn listen(self: Arc<Self>, inbound: mpsc::Sender<Inbound>) -> Fut<'static, ()> {
        Box::pin(self.gateway(inbound))
    }
}

/// A button press from an INTERACTION_CREATE (a message component).
pub(crate) fn parse_interaction(data: &Value) -> Option<Inbound> {
    if data["type"] != 3 {
        return None;
    }
    let user = data["member"]["user"]["id"]
        .as_str()
        .or_else(|| data["user"]["id"].as_str())?;
    let application = data["application_id"].as_str()?;
    let token = data["token"].as_str()?;
    // Ids and tokens go into a URL path: nothing else may.
    let safe = |s: &str| {
        !s.is_empty()
            && s.len() <= 500
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    };
    if !is_snowflake(application) || !safe(token) || !data["id"].as_str().is_some_and(is_snowflake)
    {
        return None;
    }
    Some(Inbound::Press {
        chat: data["channel_id"].as_str()?.to_owned(),
        message_id: data["message"]["id"].as_str()?.to_owned(),
        platform_user: user.to_owned(),
        data: data["data"]["custom_id"].as_str()?.to_owned(),
        handle: format!("{application}/{token}"),
    })
}

/// A reply (message type 19) to another message, from a MESSAGE_CREATE; a
/// bot's message, a pin or a forward is not an answer.
pub(crate) fn parse_reply(data: &Value) -> Option<Inbound> {
    if data["type"] != 19 || data["author"]["bot"] == json!(true) {
        return None;
    }
    Some(Inbound::Reply {
        chat: data["channel_id"].as_str()?.to_owned(),
        message_id: data["id"].as_str()?.to_owned(),
        reply_to: data["message_reference"]["message_id"].as_str()?.to_owned(),
        platform_user: data["author"]["id"].as_str()?.to_owned(),
        text: data["content"].as_str()?.to_owned(),
    })
}

/// Agent text that cannot close a code span or block: every backtick is
/// followed by a zero-width space, so no run of two or three forms.
pub(crate) fn unfence(text: &str) -> String {
    text.replace('`', "`\u{200b}")
}

fn bounded(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A one-line field as an inline code span: `` text `` (markdown, links and
/// mentions inside are not rendered).
fn span(text: &str, max: usize) -> String {
    let one_line = text.replace('\n', " ");
    // Bounded once unfenced: breaking backticks can double a text.
    format!("`` {} ``", bounded(&unfence(&one_line), max))
}

/// The longest a one-line field is shown.
const FIELD: usize = 150;

/// The message's content and its components.
pub(crate) fn render(card: &Card) -> (String, Value) {
    let mut head = match &card.state {
        CardState::Asking { .. } => {
            format!("**⚠️ Approval needed** · {} risk\n", span(&card.risk, 20))
        }
        CardState::Outcome { words, .. } => format!("**Outcome:** {}\n", span(words, 2 * FIELD)),
    };
    head.push_str(&format!("**Tool:** {}\n", span(&card.tool, FIELD)));
    if let Some(path) = &card.path {
        head.push_str(&format!("**Path:** {}\n", span(path, FIELD)));
    }
    head.push_str(&format!(
        "**Requested by:** {}\n",
        span(&card.requested_by, FIELD)
    ));
    if let Some(session) = &card.session {
        head.push_str(&format!("**Session:** {}\n", span(session, FIELD)));
    }
    let mut tail = String::new();
    if let CardState::Asking {
        waiting,
        require_reason,
        ..
    } = &card.state
    {
        head.push_str(&format!(
            "**Expires:** {} (then denied)\n",
            span(&card.expires, 40)
        ));
        if *waiting > 0 {
            tail.push_str(&format!(
                "\n{waiting} more waiting in this session after this one."
            ));
        }
        tail.push_str(if *require_reason {
            "\nA reason is required: reply `yes: <reason>` to approve, or `no` to deny."
        } else {
            "\nPress a button, or reply `yes` to approve or `no` to deny."
        });
    }
    let params = format!(
        "**Parameters:**\n```\n{}\n```\n",
        bounded(&unfence(&card.params), 300)
    );
    let label = |cut: bool| {
        format!(
            "**Diff** (+{} −{} lines{}):\n",
            card.added,
            card.removed,
            match (cut, card.web.is_some()) {
                (false, _) => "",
                (true, true) => ", shortened: the whole diff is in the web UI",
                (true, false) => ", shortened: `airlock show` has the whole diff",
            }
        )
    };
    let fixed = head.chars().count()
        + params.chars().count()
        + label(true).chars().count()
        + "```diff\n\n```".chars().count()
        + tail.chars().count();
    let budget = MAX_CONTENT.saturating_sub(fixed);
    let whole = unfence(&card.diff);
    let (diff, cut) = if whole.chars().count() <= budget {
        (whole, false)
    } else {
        // Cut before unfencing grows it, at a character, with room for …
        let mut kept = String::new();
        for c in card.diff.chars() {
            let piece = unfence(&c.to_string());
            if kept.chars().count() + piece.chars().count() + 1 > budget {
                break;
            }
            kept.push_str(&piece);
        }
        kept.push('…');
        (kept, true)
    };
    let content = format!("{head}{params}{}```diff\n{diff}\n```{tail}", label(cut));
    (content, components(card))
}

/// Action rows of buttons (at most five a row): approve, deny, always
/// allow, approve all, the web UI.
fn components(card: &Card) -> Value {
    let CardState::Asking {
        waiting,
        always,
        require_reason,
        batch,
    } = &card.state
    else {
        return json!([]);
    };
    let id = &card.id;
    let button = |label: String, style: u8, custom_id: String| json!({"type": 2, "style": style, "label": label, "custom_id": custom_id});
    let mut buttons = Vec::new();
    if !*require_reason {
        buttons.push(button("Approve".to_owned(), 3, format!("a|{id}")));
    }
    buttons.push(button("Deny".to_owned(), 4, format!("d|{id}")));
    if !*require_reason {
        if always.is_some() {
            buttons.push(button(
                "Always allow (this session)".to_owned(),
                2,
                format!("s|{id}"),
            ));
        }
        if *waiting > 0 {
            let all = waiting + 1;
            buttons.push(button(
                format!("Approve all {all}"),
                1,
                format!("b|{id}|{all}|{batch}"),
            ));
        }
    }
    if let Some(web) = &card.web {
        buttons.push(json!({"type": 2, "style": 5, "label": "Open in web UI", "url": web}));
    }
    json!([{"type": 1, "components": buttons}])
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn card(text: String, outcome: Option<String>) -> Card {
        Card {
            id: "hitl-0123456789abcdef0123456789abcdef".to_owned(),
            tool: text.clone(),
            risk: "medium".to_owned(),
            path: Some(text.clone()),
            requested_by: text.clone(),
            session: Some(text.clone()),
            expires: "12:00:00 UTC".to_owned(),
            params: text.clone(),
            diff: text,
            added: 1,
            removed: 0,
            web: Some("https://airlock.example/".to_owned()),
            state: match outcome {
                Some(words) => CardState::Outcome { words, last: true },
                None => CardState::Asking {
                    waiting: 2,
                    always: Some("x".to_owned()),
                    require_reason: false,
                    batch: "0123456789ab".to_owned(),
                },
            },
        }
    }

    /// The fences and spans airlock wrote: a run of backticks in the
    /// content is one of them, never the agent's.
    fn runs(content: &str) -> Vec<usize> {
        let mut runs = Vec::new();
        let mut run = 0;
        for c in content.chars() {
            if c == '`' {
                run += 1;
            } else {
                if run > 0 {
                    runs.push(run);
                }
                run = 0;
            }
        }
        if run > 0 {
            runs.push(run);
        }
        runs
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn agent_text_never_closes_a_code_block_and_the_message_fits(
            text in "[``````a-z\n@*_|~<>#\u{202e}]{0,3000}",
            outcome in proptest::option::of("[`a-z ]{0,500}"),
        ) {
            let (content, components) = render(&card(text.clone(), outcome));
            prop_assert!(content.chars().count() <= MAX_CONTENT, "{} characters", content.chars().count());
            // Only airlock's spans (2) and fences (3) are runs of more
            // than one backtick; the agent's backticks stand alone.
            let fences = runs(&content).into_iter().filter(|r| *r >= 3).count();
            prop_assert_eq!(fences, 4, "{}", content);
            prop_assert!(runs(&content).into_iter().all(|r| r <= 3));
            let rows = components.as_array().unwrap();
            for row in rows {
                let buttons = row["components"].as_array().unwrap();
                prop_assert!((1..=5).contains(&buttons.len()));
            }
        }
    }

    #[test]
    fn interactions_and_replies_are_read() {
        let press = json!({"id": "9", "application_id": "77", "type": 3, "token": "tok-1",
            "channel_id": "55", "member": {"user": {"id": "42"}}, "message": {"id": "100"},
            "data": {"custom_id": "a|hitl-1", "component_type": 2}});
        assert_eq!(
            parse_interaction(&press),
            Some(Inbound::Press {
                chat: "55".to_owned(),
                message_id: "100".to_owned(),
                platform_user: "42".to_owned(),
                data: "a|hitl-1".to_owned(),
                handle: "77/tok-1".to_owned(),
            })
        );
        let mut hostile = press.clone();
        hostile["token"] = json!("../../channels/1/messages");
        assert_eq!(parse_interaction(&hostile), None);
        let reply = json!({"id": "101", "type": 19, "channel_id": "55", "author": {"id": "42"},
            "content": "yes", "message_reference": {"message_id": "100"}});
        assert_eq!(
            parse_reply(&reply),
            Some(Inbound::Reply {
                chat: "55".to_owned(),
                message_id: "101".to_owned(),
                reply_to: "100".to_owned(),
                platform_user: "42".to_owned(),
                text: "yes".to_owned(),
            })
        );
        // A pin (type 6) that references the message, a bot's reply.
        let mut pin = reply.clone();
        pin["type"] = json!(6);
        assert_eq!(parse_reply(&pin), None);
        let mut bot = reply;
        bot["author"]["bot"] = json!(true);
        assert_eq!(parse_reply(&bot), None);
    }
}
