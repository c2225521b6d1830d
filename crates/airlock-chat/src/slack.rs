//! Slack, through Socket Mode and the Web API
//! (<https://docs.slack.dev/apis/events-api/using-socket-mode/>,
//! <https://docs.slack.dev/reference/methods/chat.postMessage>). The app
//! connects out: `apps.connections.open` with the app-level token gives a
//! one-time WebSocket URL; Slack says `hello`, then sends envelopes
//! (`interactive` for button presses, `events_api` for messages), each
//! acknowledged with `{"envelope_id"}` the moment it arrives (Slack wants
//! that within 3 s), and `disconnect` when the app should connect again.
//! Confirmations are `chat.postMessage` with Block Kit buttons, outcomes
//! `chat.update`, refusals `chat.postEphemeral`; a reply in the
//! confirmation's thread decides it too (spec 001).
//!
//! No client crate is used: slack-morphism, the well-kept one, brings its
//! own hyper-rustls stack and opens the Socket Mode connection itself, so
//! `tls.ca_file` would not reach it; the five methods and the socket are
//! plain JSON.

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

/// The longest text of a section block (Slack's limit).
pub(crate) const MAX_SECTION: usize = 3000;
/// How often the socket is pinged, and how long a silent one is trusted.
const PING: Duration = Duration::from_secs(20);
const SILENCE: Duration = Duration::from_secs(60);

pub(crate) struct Slack {
    http: reqwest::Client,
    api_url: String,
    bot_token: String,
    app_token: String,
    ca_file: Option<std::path::PathBuf>,
}

impl Slack {
    pub(crate) fn new(
        api_url: &str,
        bot_token: &str,
        app_token: &str,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Slack, String> {
        for (name, token) in [("bot", bot_token), ("app", app_token)] {
            if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!(
                    "the {name} token has characters a Slack token does not"
                ));
            }
        }
        let http = airlock_net::http_client(ca_file)
            .map_err(|error| error.to_string())?
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|error| format!("cannot make an HTTP client: {error}"))?;
        Ok(Slack {
            http,
            api_url: api_url.trim_end_matches('/').to_owned(),
            bot_token: bot_token.to_owned(),
            app_token: app_token.to_owned(),
            ca_file: ca_file.map(std::path::Path::to_path_buf),
        })
    }

    /// One Web API call with `token`: Slack answers HTTP 200 with `{ok:
    /// false, error}` for a refusal, 429 with `Retry-After` when limited.
    async fn call_with(&self, token: &str, method: &str, body: &Value) -> Result<Value, ApiError> {
        let answer = self
            .http
            .post(format!("{}/{method}", self.api_url))
            .header(reqwest::header::AUTHORIZATION, format!("Bearer {token}"))
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/json; charset=utf-8",
            )
            .body(body.to_string())
            .send()
            .await
            .map_err(crate::platform::transport_error)?;
        let status = answer.status();
        if status.as_u16() == 429 {
            let seconds = answer
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(1);
            return Err(ApiError::RateLimited(Duration::from_secs(seconds)));
        }
        if status.is_server_error() {
            return Err(ApiError::Unavailable(status.to_string()));
        }
        let text = answer
            .text()
            .await
            .map_err(crate::platform::transport_error)?;
        let parsed: Value = serde_json::from_str(&text)
            .map_err(|_| ApiError::Unavailable(format!("{status}: not JSON")))?;
        if parsed["ok"] == json!(true) {
            return Ok(parsed);
        }
        Err(ApiError::Refused(
            parsed["error"]
                .as_str()
                .unwrap_or("unknown_error")
                .to_owned(),
        ))
    }

    pub(crate) async fn call(&self, method: &str, body: &Value) -> Result<Value, ApiError> {
        backoff(|| self.call_with(&self.bot_token, method, body)).await
    }

    async fn send(&self, chat: &str, card: &Card) -> Result<String, ApiError> {
        let (text, blocks) = render(card);
        let sent = self
            .call(
                "chat.postMessage",
                &json!({"channel": chat, "text": text, "blocks": blocks,
                        "unfurl_links": false, "unfurl_media": false}),
            )
            .await?;
        sent["ts"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| ApiError::Refused("chat.postMessage returned no ts".to_owned()))
    }

    async fn change(&self, chat: &str, ts: &str, card: &Card) -> Result<(), ApiError> {
        let (text, blocks) = render(card);
        self.call(
            "chat.update",
            &json!({"channel": chat, "ts": ts, "text": text, "blocks": blocks}),
        )
        .await
        .map(|_| ())
    }

    /// Connects, reads envelopes, acknowledges each at once and hands
    /// presses and replies on; connects again after `disconnect`, a close
    /// or a minute of silence, with a growing pause after failures.
    async fn socket(self: Arc<Self>, inbound: mpsc::Sender<Inbound>) {
        let mut failures = 0u32;
        loop {
            match self.session(&inbound).await {
                Ok(()) => failures = 0,
                Err(error) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(20) {
                        eprintln!("airlock: slack: socket mode: {error}");
                    }
                }
            }
            if inbound.is_closed() {
                return;
            }
            let wait = if failures == 0 {
                0
            } else {
                250u64 << failures.min(5)
            };
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
    }

    /// One Socket Mode connection, until Slack or silence ends it.
    async fn session(&self, inbound: &mpsc::Sender<Inbound>) -> Result<(), String> {
        let empty = json!({});
        let opened = backoff(|| self.call_with(&self.app_token, "apps.connections.open", &empty))
            .await
            .map_err(|error| format!("apps.connections.open: {error}"))?;
        let url = opened["url"]
            .as_str()
            .ok_or("apps.connections.open returned no url")?;
        let mut socket = airlock_net::websocket(url, self.ca_file.as_deref())
            .await
            .map_err(|error| error.to_string())?;
        let mut ping = tokio::time::interval(PING);
        let mut heard = tokio::time::Instant::now();
        loop {
            tokio::select! {
                frame = socket.next() => {
                    let Some(frame) = frame else { return Ok(()) };
                    let frame = frame.map_err(|error| error.to_string())?;
                    heard = tokio::time::Instant::now();
                    let text = match frame {
                        Message::Text(text) => text,
                        Message::Close(_) => return Ok(()),
                        _ => continue,
                    };
                    let Ok(envelope) = serde_json::from_str::<Value>(text.as_str()) else {
                        continue;
                    };
                    // Acknowledged before anything else is done with it.
                    if let Some(id) = envelope["envelope_id"].as_str() {
                        socket
                            .send(Message::text(json!({"envelope_id": id}).to_string()))
                            .await
                            .map_err(|error| error.to_string())?;
                    }
                    match envelope["type"].as_str() {
                        Some("disconnect") => return Ok(()),
                        Some("interactive" | "events_api") => {
                            if let Some(event) = parse_envelope(&envelope)
                                && inbound.send(event).await.is_err()
                            {
                                return Ok(());
                            }
                        }
                        _ => {}
                    }
                }
                _ = ping.tick() => {
                    if heard.elapsed() > SILENCE {
                        return Err("no word from Slack for a minute; connecting again".to_owned());
                    }
                    socket
                        .send(Message::Ping(Vec::new().into()))
                        .await
                        .map_err(|error| error.to_string())?;
                }
            }
        }
    }
}

impl Platform for Slack {
    fn channel(&self) -> Channel {
        Channel::Slack
    }

    fn settings(&self, config: &Config) -> Option<Settings> {
        let slack = config.channels.slack.as_ref()?;
        Some(Settings {
            chats: slack.channels.clone(),
            users: slack.users.clone(),
            timeout: slack.timeout,
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
            if !refused && matches!(inbound, Inbound::Reply { .. }) {
                // The updated confirmation says what happened.
                return Ok(());
            }
            let mut body = json!({
                "channel": inbound.chat(),
                "user": inbound.platform_user(),
                "text": escape(text),
            });
            if let Inbound::Reply { reply_to, .. } = inbound {
                body["thread_ts"] = json!(reply_to);
            }
            self.call("chat.postEphemeral", &body).await.map(|_| ())
        })
    }

    fn listen(self: Arc<Self>, inbound: mpsc::Sender<Inbound>) -> Fut<'static, ()> {
        Box::pin(self.socket(inbound))
    }
}

/// A press (`block_actions`) or a reply in a thread (`message` event) from
/// a Socket Mode envelope.
pub(crate) fn parse_envelope(envelope: &Value) -> Option<Inbound> {
    let payload = &envelope["payload"];
    match envelope["type"].as_str()? {
        "interactive" if payload["type"] == "block_actions" => {
            let action = payload["actions"].as_array()?.first()?;
            Some(Inbound::Press {
                chat: payload["channel"]["id"]
                    .as_str()
                    .or_else(|| payload["container"]["channel_id"].as_str())?
                    .to_owned(),
                message_id: payload["message"]["ts"]
                    .as_str()
                    .or_else(|| payload["container"]["message_ts"].as_str())?
                    .to_owned(),
                platform_user: payload["user"]["id"].as_str()?.to_owned(),
                data: action["value"].as_str()?.to_owned(),
                handle: payload["trigger_id"].as_str().unwrap_or("").to_owned(),
            })
        }
        "events_api" => {
            let event = &payload["event"];
            // Only people's messages in a thread; a bot's own, an edit
            // (`subtype`) or a top-level message is not an answer.
            if event["type"] != "message"
                || event.get("subtype").is_some()
                || event.get("bot_id").is_some()
            {
                return None;
            }
            let thread = event["thread_ts"].as_str()?;
            let ts = event["ts"].as_str()?;
            if thread == ts {
                return None;
            }
            Some(Inbound::Reply {
                chat: event["channel"].as_str()?.to_owned(),
                message_id: ts.to_owned(),
                reply_to: thread.to_owned(),
                platform_user: event["user"].as_str()?.to_owned(),
                text: event["text"].as_str()?.to_owned(),
            })
        }
        _ => None,
    }
}

/// Text for a field Slack reads as mrkdwn (the notification text): `&`,
/// `<` and `>` as entities, so no link, mention or command can be made.
pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// At most `max` characters of `text` (cut with `…`).
fn bounded(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Plain text (never mrkdwn: agent text is shown as it is, and Slack
/// makes no link, mention or formatting of it).
fn plain(text: &str) -> Value {
    json!({"type": "plain_text", "text": bounded(text, MAX_SECTION), "emoji": false})
}

/// A preformatted block of agent text.
fn preformatted(text: &str, max: usize) -> Value {
    let text = if text.is_empty() { " " } else { text };
    json!({"type": "rich_text", "elements": [
        {"type": "rich_text_preformatted", "elements": [{"type": "text", "text": bounded(text, max)}]}
    ]})
}

/// The notification text and the blocks of a card.
pub(crate) fn render(card: &Card) -> (String, Value) {
    let headline = match &card.state {
        CardState::Asking { .. } => format!("⚠️ Approval needed · {} risk", card.risk),
        CardState::Outcome { words, .. } => words.clone(),
    };
    let mut facts = format!("Tool: {}", card.tool);
    if let Some(path) = &card.path {
        facts.push_str(&format!("\nPath: {path}"));
    }
    facts.push_str(&format!("\nRequested by: {}", card.requested_by));
    if let Some(session) = &card.session {
        facts.push_str(&format!("\nSession: {session}"));
    }
    let mut blocks = vec![
        json!({"type": "section", "text": plain(&bounded(&headline, 600))}),
        json!({"type": "section", "text": plain(&facts)}),
        json!({"type": "section", "text": plain("Parameters:")}),
        preformatted(&card.params, 1000),
    ];
    let cut = card.diff.chars().count() > MAX_SECTION;
    let label = format!(
        "Diff (+{} −{} lines{}):",
        card.added,
        card.removed,
        match (cut, card.web.is_some()) {
            (false, _) => "",
            (true, true) => ", shortened: the whole diff is in the web UI",
            (true, false) => ", shortened: `airlock show` has the whole diff",
        }
    );
    blocks.push(json!({"type": "section", "text": plain(&label)}));
    blocks.push(preformatted(&card.diff, MAX_SECTION));
    if let CardState::Asking {
        waiting,
        always,
        require_reason,
        batch,
    } = &card.state
    {
        let mut tail = format!("Expires: {} (then denied).", card.expires);
        if *waiting > 0 {
            tail.push_str(&format!(
                " {waiting} more waiting in this session after this one."
            ));
        }
        tail.push_str(if *require_reason {
            " A reason is required: reply in the thread \"yes: <reason>\" to approve, or \"no\" to deny."
        } else {
            " Press a button, or reply in the thread \"yes\" to approve or \"no\" to deny."
        });
        blocks.push(json!({"type": "context", "elements": [plain(&tail)]}));
        let id = &card.id;
        let button = |label: &str, action: &str, value: String, style: Option<&str>| {
            let mut button = json!({"type": "button", "text": {"type": "plain_text", "text": label},
                                    "action_id": action, "value": value});
            if let Some(style) = style {
                button["style"] = json!(style);
            }
            button
        };
        let mut buttons = Vec::new();
        if !*require_reason {
            buttons.push(button(
                "Approve",
                "approve",
                format!("a|{id}"),
                Some("primary"),
            ));
        }
        buttons.push(button("Deny", "deny", format!("d|{id}"), Some("danger")));
        if !*require_reason {
            if always.is_some() {
                buttons.push(button(
                    "Always allow (this session)",
                    "always",
                    format!("s|{id}"),
                    None,
                ));
            }
            if *waiting > 0 {
                let all = waiting + 1;
                buttons.push(button(
                    &format!("Approve all {all}"),
                    "approve_all",
                    format!("b|{id}|{all}|{batch}"),
                    None,
                ));
            }
        }
        if let Some(web) = &card.web {
            buttons.push(
                json!({"type": "button", "text": {"type": "plain_text", "text": "Open in web UI"},
                                "action_id": "web", "url": web}),
            );
        }
        blocks.push(json!({"type": "actions", "elements": buttons}));
    }
    let notification = escape(&bounded(
        &format!(
            "{headline}: {} {}",
            card.tool,
            card.path.as_deref().unwrap_or("")
        ),
        300,
    ));
    (notification, Value::Array(blocks))
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
            web: None,
            state: match outcome {
                Some(words) => CardState::Outcome { words, last: true },
                None => CardState::Asking {
                    waiting: 1,
                    always: Some("x".to_owned()),
                    require_reason: false,
                    batch: "0123456789ab".to_owned(),
                },
            },
        }
    }

    /// Every text object in `blocks`.
    fn texts(value: &Value, out: &mut Vec<Value>) {
        match value {
            Value::Object(map) => {
                if map
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t == "plain_text" || t == "mrkdwn")
                {
                    out.push(value.clone());
                }
                map.values().for_each(|v| texts(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| texts(v, out)),
            _ => {}
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn agent_text_is_never_mrkdwn_and_fits_slacks_limits(
            text in "[<>&*_~`@!|a-z\n\u{202e}]{0,5000}",
            outcome in proptest::option::of("[<>&*_`a-z]{0,700}"),
        ) {
            let (notification, blocks) = render(&card(text, outcome));
            prop_assert!(!notification.contains('<') && !notification.contains('>'));
            let mut found = Vec::new();
            texts(&blocks, &mut found);
            for text in &found {
                prop_assert_eq!(&text["type"], "plain_text", "{}", text);
                prop_assert!(text["text"].as_str().unwrap_or("").chars().count() <= MAX_SECTION);
            }
            for block in blocks.as_array().unwrap() {
                if block["type"] == "rich_text" {
                    let inner = &block["elements"][0]["elements"][0];
                    prop_assert_eq!(&inner["type"], "text");
                    prop_assert!(inner.get("style").is_none());
                    prop_assert!(inner["text"].as_str().unwrap().chars().count() <= MAX_SECTION);
                }
            }
        }
    }

    #[test]
    fn envelopes_become_presses_and_thread_replies() {
        let press = json!({"envelope_id": "e1", "type": "interactive", "payload": {
            "type": "block_actions", "user": {"id": "U42"}, "channel": {"id": "C1"},
            "message": {"ts": "100.1"}, "trigger_id": "t1",
            "actions": [{"action_id": "approve", "value": "a|hitl-1"}]}});
        assert_eq!(
            parse_envelope(&press),
            Some(Inbound::Press {
                chat: "C1".to_owned(),
                message_id: "100.1".to_owned(),
                platform_user: "U42".to_owned(),
                data: "a|hitl-1".to_owned(),
                handle: "t1".to_owned(),
            })
        );
        let reply = json!({"envelope_id": "e2", "type": "events_api", "payload": {"event": {
            "type": "message", "channel": "C1", "user": "U42", "text": "yes", "ts": "101.2", "thread_ts": "100.1"}}});
        assert_eq!(
            parse_envelope(&reply),
            Some(Inbound::Reply {
                chat: "C1".to_owned(),
                message_id: "101.2".to_owned(),
                reply_to: "100.1".to_owned(),
                platform_user: "U42".to_owned(),
                text: "yes".to_owned(),
            })
        );
        for other in [
            // A top-level message, a bot's, an edit.
            json!({"type": "events_api", "payload": {"event": {"type": "message", "channel": "C1", "user": "U1", "text": "yes", "ts": "1.1"}}}),
            json!({"type": "events_api", "payload": {"event": {"type": "message", "channel": "C1", "bot_id": "B1", "text": "yes", "ts": "1.2", "thread_ts": "1.1"}}}),
            json!({"type": "events_api", "payload": {"event": {"type": "message", "subtype": "message_changed", "channel": "C1", "ts": "1.2", "thread_ts": "1.1"}}}),
        ] {
            assert_eq!(parse_envelope(&other), None, "{other}");
        }
    }
}
