//! Telegram, through the Bot API (<https://core.telegram.org/bots/api>):
//! `POST {api_url}/bot{token}/{method}` with a JSON body, answered with
//! `{ok, result}` or `{ok: false, error_code, description, parameters}`.
//! Updates come by long polling (`getUpdates`, the bot connecting out, so it
//! works behind NAT); confirmations are `sendMessage` with an inline
//! keyboard and `parse_mode: HTML`, outcomes `editMessageText`, presses are
//! callback queries answered with `answerCallbackQuery`, and a text reply to
//! a confirmation (`reply_to_message`) decides it too (spec 001).
//!
//! No client crate is used: the well-kept ones (teloxide, frankenstein)
//! bring their own TLS stacks (native-tls, or rustls with aws-lc), while
//! airlock's one client must trust `tls.ca_file` on every connection; the
//! five methods used are plain JSON over HTTPS.

use std::sync::Arc;
use std::time::Duration;

use airlock_core::Channel;
use airlock_core::config::Config;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::card::{Card, CardState};
use crate::platform::{ApiError, Fut, Inbound, Platform, Settings, backoff};

/// Telegram's longest message text.
pub(crate) const MAX_TEXT: usize = 4096;
/// How long one `getUpdates` waits for an update, in seconds.
const LONG_POLL: u64 = 25;

/// A bot on the Bot API.
pub(crate) struct Telegram {
    http: reqwest::Client,
    /// `{api_url}/bot{token}/`: never logged (it holds the token).
    base: String,
}

impl Telegram {
    /// A client of the bot `token` at `api_url`, trusting what airlock
    /// trusts. A token is `digits:letters` as BotFather gives it; anything
    /// else (a `/` or `?` would change the URL) is refused.
    pub(crate) fn new(
        api_url: &str,
        token: &str,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Telegram, String> {
        if token.is_empty()
            || !token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b':' || b == b'_' || b == b'-')
        {
            return Err("the bot token has characters a Telegram token does not".to_owned());
        }
        let http = airlock_net::http_client(ca_file)
            .map_err(|error| error.to_string())?
            .timeout(Duration::from_secs(LONG_POLL + 10))
            .build()
            .map_err(|error| format!("cannot make an HTTP client: {error}"))?;
        Ok(Telegram {
            http,
            base: format!("{}/bot{token}/", api_url.trim_end_matches('/')),
        })
    }

    /// One call of `method`.
    pub(crate) async fn call(&self, method: &str, body: &Value) -> Result<Value, ApiError> {
        let answer = self
            .http
            .post(format!("{}{method}", self.base))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            // The URL holds the token: never in a message.
            .map_err(|error| ApiError::Unavailable(error.without_url().to_string()))?;
        let status = answer.status();
        let text = answer
            .text()
            .await
            .map_err(|error| ApiError::Unavailable(error.without_url().to_string()))?;
        let parsed: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if parsed["ok"] == json!(true) {
            return Ok(parsed["result"].clone());
        }
        let description = parsed["description"]
            .as_str()
            .unwrap_or("no description")
            .to_owned();
        if status.as_u16() == 429 {
            let seconds = parsed["parameters"]["retry_after"].as_u64().unwrap_or(1);
            return Err(ApiError::RateLimited(Duration::from_secs(seconds)));
        }
        if status.is_server_error() || parsed.is_null() {
            return Err(ApiError::Unavailable(format!("{status}: {description}")));
        }
        Err(ApiError::Refused(format!(
            "{} {description}",
            parsed["error_code"]
                .as_i64()
                .unwrap_or(status.as_u16().into())
        )))
    }

    /// `call`, tried again after rate limits and outages (see [`backoff`]).
    pub(crate) async fn call_retrying(
        &self,
        method: &str,
        body: &Value,
    ) -> Result<Value, ApiError> {
        backoff(|| self.call(method, body)).await
    }

    async fn send(&self, chat: &str, card: &Card) -> Result<String, ApiError> {
        let (text, keyboard) = render(card);
        let mut body = json!({
            "chat_id": chat_id(chat),
            "text": text,
            "parse_mode": "HTML",
            "link_preview_options": {"is_disabled": true},
            "reply_markup": {"inline_keyboard": keyboard},
        });
        let sent = match self.call_retrying("sendMessage", &body).await {
            // Telegram refuses link buttons to addresses it will not open
            // (localhost, a private name): the message goes without it.
            Err(ApiError::Refused(description)) if description.contains("BUTTON_URL_INVALID") => {
                body["reply_markup"]["inline_keyboard"] = without_links(&keyboard);
                self.call_retrying("sendMessage", &body).await?
            }
            other => other?,
        };
        sent["message_id"]
            .as_i64()
            .map(|id| id.to_string())
            .ok_or_else(|| ApiError::Refused("sendMessage returned no message_id".to_owned()))
    }

    async fn change(&self, chat: &str, message_id: &str, card: &Card) -> Result<(), ApiError> {
        let (text, keyboard) = render(card);
        let mut body = json!({
            "chat_id": chat_id(chat),
            "message_id": message_id.parse::<i64>().unwrap_or_default(),
            "text": text,
            "parse_mode": "HTML",
            "link_preview_options": {"is_disabled": true},
            "reply_markup": {"inline_keyboard": keyboard},
        });
        match self.call_retrying("editMessageText", &body).await {
            Ok(_) => Ok(()),
            // The message already shows this.
            Err(ApiError::Refused(description))
                if description.contains("message is not modified") =>
            {
                Ok(())
            }
            Err(ApiError::Refused(description)) if description.contains("BUTTON_URL_INVALID") => {
                body["reply_markup"]["inline_keyboard"] = without_links(&keyboard);
                self.call_retrying("editMessageText", &body)
                    .await
                    .map(|_| ())
            }
            Err(error) => Err(error),
        }
    }

    /// Long-polls for updates and hands presses and replies on.
    async fn poll(self: Arc<Self>, inbound: mpsc::Sender<Inbound>) {
        let mut offset: i64 = 0;
        let mut failures = 0u32;
        loop {
            let body = json!({
                "offset": offset,
                "timeout": LONG_POLL,
                "allowed_updates": ["message", "callback_query"],
            });
            match self.call("getUpdates", &body).await {
                Ok(updates) => {
                    failures = 0;
                    for update in updates.as_array().into_iter().flatten() {
                        if let Some(id) = update["update_id"].as_i64() {
                            offset = offset.max(id + 1);
                        }
                        if let Some(event) = parse_update(update)
                            && inbound.send(event).await.is_err()
                        {
                            return;
                        }
                    }
                }
                Err(ApiError::RateLimited(wait)) => {
                    tokio::time::sleep(wait.min(Duration::from_secs(60))).await;
                }
                Err(error) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(20) {
                        eprintln!("airlock: telegram: getUpdates: {error}");
                    }
                    let wait = 250u64 << failures.min(5);
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                }
            }
        }
    }
}

impl Platform for Telegram {
    fn channel(&self) -> Channel {
        Channel::Telegram
    }

    fn settings(&self, config: &Config) -> Option<Settings> {
        let telegram = config.channels.telegram.as_ref()?;
        Some(Settings {
            chats: telegram.chats.iter().map(i64::to_string).collect(),
            users: telegram.users.clone(),
            timeout: telegram.timeout,
        })
    }

    fn digest(&self, card: &Card) -> String {
        let (text, keyboard) = render(card);
        crate::platform::digest(&format!("{text}\n{keyboard}"))
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
            match inbound {
                Inbound::Press { handle, .. } => {
                    // Telegram shows at most 200 characters.
                    let text: String = text.chars().take(200).collect();
                    self.call_retrying(
                        "answerCallbackQuery",
                        &json!({"callback_query_id": handle, "text": text, "show_alert": refused}),
                    )
                    .await
                    .map(|_| ())
                }
                Inbound::Reply {
                    chat, message_id, ..
                } => {
                    if !refused {
                        // The edited confirmation says what happened.
                        return Ok(());
                    }
                    self.call_retrying(
                        "sendMessage",
                        &json!({
                            "chat_id": chat_id(chat),
                            "text": escape(text),
                            "parse_mode": "HTML",
                            "reply_parameters": {
                                "message_id": message_id.parse::<i64>().unwrap_or_default(),
                                "allow_sending_without_reply": true,
                            },
                        }),
                    )
                    .await
                    .map(|_| ())
                }
            }
        })
    }

    fn listen(self: Arc<Self>, inbound: mpsc::Sender<Inbound>) -> Fut<'static, ()> {
        Box::pin(self.poll(inbound))
    }
}

/// A chat id as Telegram takes it: a number (ids are numbers; a name like
/// `@channel` stays a string).
fn chat_id(chat: &str) -> Value {
    chat.parse::<i64>()
        .map_or_else(|_| Value::String(chat.to_owned()), Value::from)
}

/// A press (callback query) or a reply to a message, from an update.
pub(crate) fn parse_update(update: &Value) -> Option<Inbound> {
    if let Some(query) = update.get("callback_query") {
        let message = &query["message"];
        return Some(Inbound::Press {
            chat: message["chat"]["id"].as_i64()?.to_string(),
            message_id: message["message_id"].as_i64()?.to_string(),
            platform_user: query["from"]["id"].as_i64()?.to_string(),
            data: query["data"].as_str()?.to_owned(),
            handle: query["id"].as_str()?.to_owned(),
        });
    }
    let message = update.get("message")?;
    Some(Inbound::Reply {
        chat: message["chat"]["id"].as_i64()?.to_string(),
        message_id: message["message_id"].as_i64()?.to_string(),
        reply_to: message["reply_to_message"]["message_id"]
            .as_i64()?
            .to_string(),
        platform_user: message["from"]["id"].as_i64()?.to_string(),
        text: message["text"].as_str()?.to_owned(),
    })
}

/// Text for Telegram's HTML: `&`, `<`, `>` and `"` as entities.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// At most `budget` characters of `text` once escaped, cut at a line's end
/// where one is near; `true` when something was cut.
fn escaped_within(text: &str, budget: usize) -> (String, bool) {
    let escaped = escape(text);
    if escaped.chars().count() <= budget {
        return (escaped, false);
    }
    let mut out = String::new();
    let mut used = 0;
    for line in text.split_inclusive('\n') {
        let line = escape(line);
        let n = line.chars().count();
        if used + n > budget {
            if out.is_empty() {
                // One long line: cut it at a character, never inside an
                // entity.
                let mut cut = String::new();
                let mut count = 0;
                for c in text.chars() {
                    let piece = escape(&c.to_string());
                    let width = piece.chars().count();
                    if count + width > budget {
                        break;
                    }
                    cut.push_str(&piece);
                    count += width;
                }
                return (cut, true);
            }
            return (out, true);
        }
        out.push_str(&line);
        used += n;
    }
    (out, true)
}

/// The message and its inline keyboard.
pub(crate) fn render(card: &Card) -> (String, Value) {
    let mut head = String::new();
    match &card.state {
        CardState::Asking { .. } => head.push_str(&format!(
            "<b>⚠️ Approval needed</b> · <b>{}</b> risk\n",
            escape(&card.risk)
        )),
        CardState::Outcome { words, .. } => head.push_str(&format!("<b>{}</b>\n", escape(words))),
    }
    head.push_str(&format!(
        "<b>Tool:</b> <code>{}</code>\n",
        escape(&card.tool)
    ));
    if let Some(path) = &card.path {
        head.push_str(&format!("<b>Path:</b> <code>{}</code>\n", escape(path)));
    }
    head.push_str(&format!(
        "<b>Requested by:</b> {}\n",
        escape(&card.requested_by)
    ));
    if let Some(session) = &card.session {
        head.push_str(&format!(
            "<b>Session:</b> <code>{}</code>\n",
            escape(session)
        ));
    }
    let mut tail = String::new();
    if let CardState::Asking {
        waiting,
        require_reason,
        ..
    } = &card.state
    {
        head.push_str(&format!(
            "<b>Expires:</b> {} (then denied)\n",
            escape(&card.expires)
        ));
        if *waiting > 0 {
            tail.push_str(&format!(
                "\n{waiting} more waiting in this session after this one."
            ));
        }
        if *require_reason {
            tail.push_str(
                "\nA reason is required: reply <code>yes: &lt;reason&gt;</code> to approve, or \"no\" to deny.",
            );
        } else {
            tail.push_str("\nPress a button, or reply \"yes\" to approve or \"no\" to deny.");
        }
    }
    let (params, params_cut) = escaped_within(&card.params, 600);
    let params_block = format!(
        "<b>Parameters:</b>\n<pre>{params}{}</pre>\n",
        if params_cut { "\n…" } else { "" }
    );
    let diff_label = |cut: bool| {
        format!(
            "<b>Diff</b> (+{} −{} lines{}):\n",
            card.added,
            card.removed,
            if !cut {
                String::new()
            } else if card.web.is_some() {
                ", shortened: the whole diff is in the web UI".to_owned()
            } else {
                ", shortened: `airlock show` has the whole diff".to_owned()
            }
        )
    };
    let fixed = head.chars().count()
        + params_block.chars().count()
        + diff_label(true).chars().count()
        + "<pre></pre>\n…".len()
        + tail.chars().count();
    let budget = MAX_TEXT.saturating_sub(fixed + 16);
    let (diff, diff_cut) = escaped_within(&card.diff, budget);
    let text = format!(
        "{head}{params_block}{}<pre>{diff}{}</pre>{tail}",
        diff_label(diff_cut),
        if diff_cut { "\n…" } else { "" }
    );
    (text, keyboard(card))
}

/// The buttons: approve, deny, always allow (where the risk allows it and
/// the call has a session), approve all of the session's waiting ones, and
/// the web UI. None once decided; no approving button where a reason is
/// required (a reply gives it).
fn keyboard(card: &Card) -> Value {
    let CardState::Asking {
        waiting,
        always,
        require_reason,
    } = &card.state
    else {
        return json!([]);
    };
    let id = &card.id;
    let mut rows = Vec::new();
    if *require_reason {
        rows.push(json!([{"text": "❌ Deny", "callback_data": format!("d|{id}")}]));
    } else {
        rows.push(json!([
            {"text": "✅ Approve", "callback_data": format!("a|{id}")},
            {"text": "❌ Deny", "callback_data": format!("d|{id}")},
        ]));
        if always.is_some() {
            rows.push(json!([{"text": "♾ Always allow (this session)", "callback_data": format!("s|{id}")}]));
        }
        if *waiting > 0 {
            let all = waiting + 1;
            rows.push(json!([{"text": format!("✅ Approve all {all}"), "callback_data": format!("b|{id}|{all}")}]));
        }
    }
    if let Some(web) = &card.web {
        rows.push(json!([{"text": "Open in web UI", "url": web}]));
    }
    Value::Array(rows)
}

/// A keyboard without its link buttons.
fn without_links(keyboard: &Value) -> Value {
    let rows = keyboard.as_array().into_iter().flatten().filter_map(|row| {
        let kept: Vec<Value> = row
            .as_array()
            .into_iter()
            .flatten()
            .filter(|button| button.get("url").is_none())
            .cloned()
            .collect();
        (!kept.is_empty()).then_some(Value::Array(kept))
    });
    Value::Array(rows.collect())
}
