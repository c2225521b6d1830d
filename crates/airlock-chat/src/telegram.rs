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

/// Telegram's longest message text, in UTF-16 code units (as Telegram
/// counts; everything here is measured so).
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
            .map_err(|error| crate::platform::transport_error(error.without_url()))?;
        let status = answer.status();
        let text = answer
            .text()
            .await
            .map_err(|error| crate::platform::transport_error(error.without_url()))?;
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
    if escaped.encode_utf16().count() <= budget {
        return (escaped, false);
    }
    let mut out = String::new();
    let mut used = 0;
    for line in text.split_inclusive('\n') {
        let line = escape(line);
        let n = line.encode_utf16().count();
        if used + n > budget {
            if out.is_empty() {
                // One long line: cut it at a character, never inside an
                // entity.
                let mut cut = String::new();
                let mut count = 0;
                for c in text.chars() {
                    let piece = escape(&c.to_string());
                    let width = piece.encode_utf16().count();
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

/// A one-line field, escaped, at most `max` characters (cut with `…`).
fn field(text: &str, max: usize) -> String {
    let (escaped, cut) = escaped_within(text, max);
    if cut {
        format!("{escaped}…")
    } else {
        escaped
    }
}

/// `…` on a line of its own after text that was cut.
fn ellipsis(text: &str, cut: bool) -> &'static str {
    match (cut, text.ends_with('\n') || text.is_empty()) {
        (false, _) => "",
        (true, true) => "…",
        (true, false) => "\n…",
    }
}

/// The longest a one-line field (a path, a name, an outcome) is shown.
const FIELD: usize = 300;

/// The message and its inline keyboard.
pub(crate) fn render(card: &Card) -> (String, Value) {
    let mut head = String::new();
    match &card.state {
        CardState::Asking { .. } => head.push_str(&format!(
            "<b>⚠️ Approval needed</b> · <b>{}</b> risk\n",
            field(&card.risk, FIELD)
        )),
        CardState::Outcome { words, .. } => {
            head.push_str(&format!("<b>{}</b>\n", field(words, 2 * FIELD)));
        }
    }
    head.push_str(&format!(
        "<b>Tool:</b> <code>{}</code>\n",
        field(&card.tool, FIELD)
    ));
    if let Some(path) = &card.path {
        head.push_str(&format!(
            "<b>Path:</b> <code>{}</code>\n",
            field(path, FIELD)
        ));
    }
    head.push_str(&format!(
        "<b>Requested by:</b> {}\n",
        field(&card.requested_by, FIELD)
    ));
    if let Some(session) = &card.session {
        head.push_str(&format!(
            "<b>Session:</b> <code>{}</code>\n",
            field(session, FIELD)
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
            field(&card.expires, FIELD)
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
        ellipsis(&params, params_cut)
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
    let fixed = head.encode_utf16().count()
        + params_block.encode_utf16().count()
        + diff_label(true).encode_utf16().count()
        + "<pre>\n…</pre>".encode_utf16().count()
        + tail.encode_utf16().count();
    let budget = MAX_TEXT.saturating_sub(fixed);
    let (diff, diff_cut) = escaped_within(&card.diff, budget);
    let text = format!(
        "{head}{params_block}{}<pre>{diff}{}</pre>{tail}",
        diff_label(diff_cut),
        ellipsis(&diff, diff_cut)
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
        batch,
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
            rows.push(json!([{"text": format!("✅ Approve all {all}"), "callback_data": format!("b|{id}|{all}|{batch}")}]));
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Text made of what hostile input is made of: markup, entities,
    /// quotes, newlines, escapes, wide characters.
    fn hostile() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just("<".to_owned()),
                Just(">".to_owned()),
                Just("&".to_owned()),
                Just("&amp;".to_owned()),
                Just("\"".to_owned()),
                Just("</pre><a href=\"https://evil.example\">x</a>".to_owned()),
                Just("\n".to_owned()),
                Just("\u{1b}[2K".to_owned()),
                Just("\u{202e}".to_owned()),
                Just("界".to_owned()),
                Just("😀".to_owned()),
                "[a-z ]{1,20}",
            ],
            0..400,
        )
        .prop_map(|parts| parts.concat())
    }

    fn card(path: String, params: String, diff: String, outcome: Option<String>) -> Card {
        Card {
            id: "hitl-0123456789abcdef0123456789abcdef".to_owned(),
            tool: "write_file".to_owned(),
            risk: "medium".to_owned(),
            path: Some(path.clone()),
            requested_by: path,
            session: Some("s1".to_owned()),
            expires: "12:00:00 UTC".to_owned(),
            params,
            diff,
            added: 1,
            removed: 2,
            web: None,
            state: match outcome {
                Some(words) => CardState::Outcome { words, last: true },
                None => CardState::Asking {
                    waiting: 3,
                    always: Some("x".to_owned()),
                    require_reason: false,
                    batch: "0123456789ab".to_owned(),
                },
            },
        }
    }

    /// The HTML with airlock's own tags and the four entities taken out:
    /// nothing of markup may remain.
    fn markup_left(html: &str) -> Option<char> {
        let mut rest = html.to_owned();
        for tag in ["<b>", "</b>", "<code>", "</code>", "<pre>", "</pre>"] {
            rest = rest.replace(tag, "");
        }
        for entity in ["&lt;", "&gt;", "&amp;", "&quot;"] {
            rest = rest.replace(entity, "");
        }
        rest.chars().find(|c| matches!(c, '<' | '>' | '&'))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn hostile_text_never_becomes_markup_and_fits_a_message(
            path in hostile(),
            params in hostile(),
            diff in hostile(),
            outcome in proptest::option::of(hostile()),
        ) {
            let (html, _) = render(&card(path, params, diff, outcome));
            prop_assert_eq!(markup_left(&html), None, "{}", html);
            prop_assert!(html.encode_utf16().count() <= MAX_TEXT, "{} units", html.encode_utf16().count());
            // Tags balance: each of airlock's opens as often as it closes.
            for tag in ["b", "code", "pre"] {
                prop_assert_eq!(
                    html.matches(&format!("<{tag}>")).count(),
                    html.matches(&format!("</{tag}>")).count()
                );
            }
        }
    }

    #[test]
    fn a_long_diff_is_shortened_and_says_where_the_rest_is() {
        let diff = "+line of the diff\n".repeat(2000);
        let (html, _) = render(&card("a.txt".to_owned(), "{}".to_owned(), diff, None));
        assert!(html.chars().count() <= MAX_TEXT);
        assert!(
            html.contains("shortened: `airlock show` has the whole diff"),
            "{html}"
        );
        assert!(html.contains("+line of the diff\n…</pre>"), "{html}");
    }

    #[test]
    fn updates_become_presses_and_replies() {
        let press = json!({"update_id": 5, "callback_query": {"id": "q1", "from": {"id": 42},
            "message": {"message_id": 100, "chat": {"id": -100}}, "data": "a|hitl-1"}});
        assert_eq!(
            parse_update(&press),
            Some(Inbound::Press {
                chat: "-100".to_owned(),
                message_id: "100".to_owned(),
                platform_user: "42".to_owned(),
                data: "a|hitl-1".to_owned(),
                handle: "q1".to_owned(),
            })
        );
        let reply = json!({"update_id": 6, "message": {"message_id": 101, "from": {"id": 42},
            "chat": {"id": -100}, "text": "yes", "reply_to_message": {"message_id": 100}}});
        assert_eq!(
            parse_update(&reply),
            Some(Inbound::Reply {
                chat: "-100".to_owned(),
                message_id: "101".to_owned(),
                reply_to: "100".to_owned(),
                platform_user: "42".to_owned(),
                text: "yes".to_owned(),
            })
        );
        // A message that replies to nothing, a sticker, a channel post.
        for other in [
            json!({"update_id": 7, "message": {"message_id": 1, "from": {"id": 1}, "chat": {"id": 1}, "text": "hi"}}),
            json!({"update_id": 8, "message": {"message_id": 1, "from": {"id": 1}, "chat": {"id": 1}, "sticker": {},
                   "reply_to_message": {"message_id": 100}}}),
            json!({"update_id": 9, "channel_post": {}}),
        ] {
            assert_eq!(parse_update(&other), None, "{other}");
        }
    }
}
