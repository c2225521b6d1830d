//! What every chat platform gives the runner: post, edit, answer, listen.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use airlock_core::Channel;
use airlock_core::config::{ChatUser, Config};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::card::Card;

pub(crate) type Fut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A platform's part of the configuration in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Where approvals go when the requester names no chat.
    pub chats: Vec<String>,
    pub users: BTreeMap<String, ChatUser>,
    /// Seconds a confirmation waits.
    pub timeout: u64,
}

/// What a person did in a chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Inbound {
    /// A button pressed on a message.
    Press {
        chat: String,
        message_id: String,
        platform_user: String,
        /// The button's data.
        data: String,
        /// What the platform answers the press through (a callback query
        /// id, an interaction).
        handle: String,
    },
    /// A text message that replies to another.
    Reply {
        chat: String,
        /// The reply itself.
        message_id: String,
        /// The message it replies to.
        reply_to: String,
        platform_user: String,
        text: String,
    },
}

impl Inbound {
    pub(crate) fn chat(&self) -> &str {
        match self {
            Inbound::Press { chat, .. } | Inbound::Reply { chat, .. } => chat,
        }
    }

    pub(crate) fn platform_user(&self) -> &str {
        match self {
            Inbound::Press { platform_user, .. } | Inbound::Reply { platform_user, .. } => {
                platform_user
            }
        }
    }
}

/// Why a platform call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ApiError {
    /// The platform said no; trying again will not help.
    Refused(String),
    /// 429: wait this long.
    RateLimited(Duration),
    /// 5xx or no answer: try again later.
    Unavailable(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Refused(message) => write!(f, "refused: {message}"),
            ApiError::RateLimited(wait) => write!(f, "rate limited for {wait:?}"),
            ApiError::Unavailable(message) => write!(f, "unavailable: {message}"),
        }
    }
}

/// A failure to reach a platform, with its causes: an untrusted
/// certificate will not change by trying again (refused); anything else
/// may (unavailable).
pub(crate) fn transport_error(error: impl std::error::Error) -> ApiError {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    if text.contains("invalid peer certificate") {
        ApiError::Refused(text)
    } else {
        ApiError::Unavailable(text)
    }
}

/// Attempts of one call through [`backoff`].
const ATTEMPTS: u32 = 6;
/// The longest wait a rate limit gets.
const MAX_RATE_WAIT: Duration = Duration::from_secs(60);

/// Runs `call` until it succeeds or is refused: a rate limit waits as long
/// as the platform says (at most a minute), an outage waits 250 ms, then
/// twice as long each time (at most 8 s), for [`ATTEMPTS`] attempts in all.
/// The caller's next pass tries again after that.
pub(crate) async fn backoff<T, F, Fu>(mut call: F) -> Result<T, ApiError>
where
    F: FnMut() -> Fu,
    Fu: Future<Output = Result<T, ApiError>>,
{
    let mut wait = Duration::from_millis(250);
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(value) => return Ok(value),
            Err(ApiError::Refused(message)) => return Err(ApiError::Refused(message)),
            Err(error) if attempt >= ATTEMPTS => return Err(error),
            Err(ApiError::RateLimited(asked)) => {
                tokio::time::sleep(asked.min(MAX_RATE_WAIT)).await;
            }
            Err(ApiError::Unavailable(_)) => {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(8));
            }
        }
        attempt += 1;
    }
}

/// A platform's connection.
pub(crate) trait Platform: Send + Sync + 'static {
    fn channel(&self) -> Channel;
    /// Its part of `config`; `None` when it is not configured.
    fn settings(&self, config: &Config) -> Option<Settings>;
    /// What `card` looks like on this platform: its text and its buttons
    /// (or blocks).
    fn render(&self, card: &Card) -> (String, serde_json::Value);
    /// A digest of what `card` looks like on this platform: a message is
    /// edited only when this changes.
    fn digest(&self, card: &Card) -> String {
        let (text, buttons) = self.render(card);
        digest(&format!("{text}\n{buttons}"))
    }
    /// Posts `card` in `chat`; the message's id.
    fn post<'a>(&'a self, chat: &'a str, card: &'a Card) -> Fut<'a, Result<String, ApiError>>;
    /// Makes message `message_id` show `card`.
    fn edit<'a>(
        &'a self,
        chat: &'a str,
        message_id: &'a str,
        card: &'a Card,
    ) -> Fut<'a, Result<(), ApiError>>;
    /// Answers what a person did (`refused`: it changed nothing).
    fn answer<'a>(
        &'a self,
        inbound: &'a Inbound,
        text: &'a str,
        refused: bool,
    ) -> Fut<'a, Result<(), ApiError>>;
    /// Receives presses and replies for as long as it runs.
    fn listen(self: Arc<Self>, inbound: mpsc::Sender<Inbound>) -> Fut<'static, ()>;
}

/// SHA-256 of `text`, hex.
pub(crate) fn digest(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}
