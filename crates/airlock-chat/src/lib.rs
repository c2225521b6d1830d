//! airlock-chat: approvals where people already are. Telegram (Bot API long
//! polling), Slack (Socket Mode) and Discord (the Gateway), as approver
//! channels beside
//! the terminal, the web UI, MCP and signed links (DESIGN §7.1). Every
//! channel connects outbound only, so a laptop behind NAT needs no public
//! address.
//!
//! The channels run in one process per state dir at a time: every `serve`
//! and `watch` calls [`spawn`], which takes `<state dir>/channels.lock` (a
//! `flock` the kernel drops with its process) or tries again every 500 ms,
//! so another process takes over when the holder ends (an MCP client starts
//! many `serve --stdio`, and Telegram refuses two pollers of one bot).

mod card;
mod discord;
mod platform;
mod runner;
mod slack;
mod telegram;
mod words;

use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use airlock_broker::{Broker, LiveChannel};
use rustix::fs::{FlockOperation, flock};
use serde_json::json;
use tokio::sync::Notify;

pub use runner::Brokers;

use crate::discord::Discord;
use crate::platform::{ApiError, Platform};
use crate::runner::Runner;
use crate::slack::Slack;
use crate::telegram::Telegram;

/// How often a process that does not hold the channels tries to take them,
/// and how often the holder looks at which channels are configured.
const RETRY: Duration = Duration::from_millis(500);

/// What the channels need besides the broker.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The web UI's address (`serve --public-url`): "Open in web UI" buttons
    /// and links to the whole diff.
    pub public_url: Option<String>,
}

/// Runs the configured chat channels in this process whenever it holds the
/// state dir's channel lock, for as long as the tokio runtime runs. Returns
/// at once.
pub fn spawn(brokers: Brokers, options: Options) {
    tokio::spawn(run(brokers, options));
}

/// Runs the chat channels in the foreground (`airlock channels run`): waits
/// for the lock, then runs them until the process ends.
pub async fn run(brokers: Brokers, options: Options) {
    let mut lock: Option<File> = None;
    let mut running: Vec<(&'static str, tokio::task::JoinHandle<()>)> = Vec::new();
    // What each runner sees as running here (a call asked on one of them
    // is shown there only).
    let names: Arc<RwLock<Vec<&'static str>>> = Arc::new(RwLock::new(Vec::new()));
    // A platform whose runner ended while configured (a fatal refusal):
    // not started again until its configuration changes.
    let mut ended: Vec<(&'static str, String)> = Vec::new();
    let mut presence = None;
    let mut said: Vec<String> = Vec::new();
    let mut say = |name: &str, error: &str| {
        let line = format!("{name}: {error}");
        if !said.contains(&line) {
            eprintln!("airlock: {line}; it stays off until this changes");
            said.retain(|said| !said.starts_with(name));
            said.push(line);
        }
    };
    loop {
        let broker = brokers();
        let mut wanted = configured(&broker);
        // A channel without its token stays off (said once), and a process
        // that cannot run any does not take the lock from one that can.
        wanted.retain(|name| {
            let missing = token_envs(&broker, name)
                .iter()
                .find_map(|env| token(env).err());
            match missing {
                None => true,
                Some(error) => {
                    say(name, &error);
                    false
                }
            }
        });
        ended.retain(|(name, section)| *section == section_of(&broker, name));
        wanted.retain(|name| !ended.iter().any(|(ended, _)| ended == name));
        if !wanted.is_empty() && lock.is_none() {
            lock = take_lock(&broker);
        }
        if lock.is_some() {
            for (name, task) in &running {
                if task.is_finished() && wanted.contains(name) {
                    ended.push((name, section_of(&broker, name)));
                    say(name, "its connection was refused for good");
                }
            }
            running.retain(|(_, task)| !task.is_finished());
            for name in &wanted {
                if running.iter().any(|(running, _)| running == name) {
                    continue;
                }
                // Live before the first message can be posted, so a call
                // that waits for a person (`elicitation_fallback: auto`)
                // finds it.
                if presence.is_none() {
                    presence = broker.announce(LiveChannel::Chat).ok();
                }
                match start(name, &brokers, &broker, &options, &names) {
                    Ok(task) => {
                        eprintln!("airlock: {name}: connected as an approver channel");
                        running.push((name, task));
                    }
                    Err(error) => say(name, &error),
                }
            }
            if let Ok(mut names) = names.write() {
                *names = running.iter().map(|(name, _)| *name).collect();
            }
            if running.is_empty() {
                presence = None;
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// A platform's configuration, as text to compare.
fn section_of(broker: &Broker, name: &str) -> String {
    let channels = &broker.config().channels;
    let section = match name {
        "telegram" => serde_json::to_string(&channels.telegram),
        "slack" => serde_json::to_string(&channels.slack),
        "discord" => serde_json::to_string(&channels.discord),
        _ => Ok(String::new()),
    };
    section.unwrap_or_default()
}

/// The platforms configured now, by name.
fn configured(broker: &Broker) -> Vec<&'static str> {
    let channels = &broker.config().channels;
    let mut names = Vec::new();
    if channels.telegram.is_some() {
        names.push("telegram");
    }
    if channels.slack.is_some() {
        names.push("slack");
    }
    if channels.discord.is_some() {
        names.push("discord");
    }
    names
}

/// The environment variables holding `name`'s tokens.
fn token_envs(broker: &Broker, name: &str) -> Vec<String> {
    let channels = &broker.config().channels;
    match name {
        "telegram" => channels
            .telegram
            .iter()
            .map(|c| c.token_env.clone())
            .collect(),
        "slack" => channels
            .slack
            .iter()
            .flat_map(|c| [c.bot_token_env.clone(), c.app_token_env.clone()])
            .collect(),
        "discord" => channels
            .discord
            .iter()
            .map(|c| c.token_env.clone())
            .collect(),
        _ => Vec::new(),
    }
}

/// The state dir's channel lock, when no other process holds it.
fn take_lock(broker: &Broker) -> Option<File> {
    let path: PathBuf = broker
        .root()
        .join(&broker.config().workspace.state_dir)
        .join("channels.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .ok()?;
    flock(&file, FlockOperation::NonBlockingLockExclusive).ok()?;
    Some(file)
}

/// Reads a token from the environment variable `name`.
fn token(name: &str) -> Result<String, String> {
    match std::env::var(name) {
        Ok(token) if !token.trim().is_empty() => Ok(token.trim().to_owned()),
        _ => Err(format!(
            "the environment variable {name} (its token) is not set"
        )),
    }
}

fn telegram(broker: &Broker) -> Result<Telegram, String> {
    let config = broker
        .config()
        .channels
        .telegram
        .as_ref()
        .ok_or("channels.telegram is not configured")?;
    Telegram::new(
        &config.api_url,
        &token(&config.token_env)?,
        broker.ca_file().as_deref(),
    )
}

fn slack(broker: &Broker) -> Result<Slack, String> {
    let config = broker
        .config()
        .channels
        .slack
        .as_ref()
        .ok_or("channels.slack is not configured")?;
    Slack::new(
        &config.api_url,
        &token(&config.bot_token_env)?,
        &token(&config.app_token_env)?,
        broker.ca_file().as_deref(),
    )
}

fn discord(broker: &Broker) -> Result<Discord, String> {
    let config = broker
        .config()
        .channels
        .discord
        .as_ref()
        .ok_or("channels.discord is not configured")?;
    Discord::new(
        &config.api_url,
        &token(&config.token_env)?,
        config.gateway_url.as_deref(),
        broker.ca_file().as_deref(),
    )
}

fn start(
    name: &str,
    brokers: &Brokers,
    broker: &Broker,
    options: &Options,
    running: &Arc<RwLock<Vec<&'static str>>>,
) -> Result<tokio::task::JoinHandle<()>, String> {
    match name {
        "telegram" => Ok(spawn_runner(telegram(broker)?, brokers, options, running)),
        "slack" => Ok(spawn_runner(slack(broker)?, brokers, options, running)),
        "discord" => Ok(spawn_runner(discord(broker)?, brokers, options, running)),
        other => Err(format!("{other} is not a chat channel")),
    }
}

fn spawn_runner<P: Platform>(
    platform: P,
    brokers: &Brokers,
    options: &Options,
    running: &Arc<RwLock<Vec<&'static str>>>,
) -> tokio::task::JoinHandle<()> {
    let wake = Arc::new(Notify::new());
    wake_on_feed(brokers.clone(), wake.clone());
    let runner = Arc::new(Runner {
        platform: Arc::new(platform),
        brokers: brokers.clone(),
        web: options.public_url.clone(),
        running: running.clone(),
        batches: std::sync::atomic::AtomicUsize::new(0),
        refused: std::sync::Mutex::new(std::collections::HashMap::new()),
        strangers: std::sync::Mutex::new(std::collections::HashMap::new()),
        posting: tokio::sync::RwLock::new(()),
    });
    tokio::spawn(runner.run(wake))
}

/// Wakes `wake` on every change of the feed (a blocking thread parked on
/// it, as the other faces wait).
fn wake_on_feed(brokers: Brokers, wake: Arc<Notify>) {
    let spawned = std::thread::Builder::new()
        .name("airlock-chat-feed".to_owned())
        .spawn(move || {
            loop {
                // Dropped with its runner: nobody to wake.
                if Arc::strong_count(&wake) == 1 {
                    return;
                }
                let broker = brokers();
                let Ok(cursor) = broker.cursor() else {
                    std::thread::sleep(RETRY);
                    continue;
                };
                broker.park(cursor, None);
                wake.notify_one();
            }
        });
    if let Err(error) = spawned {
        eprintln!("airlock: chat: cannot watch the feed: {error}");
    }
}

/// What `airlock channels test` found: a line per thing tried, and whether
/// any of it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tested {
    pub lines: Vec<String>,
    pub failed: bool,
}

/// `airlock channels test NAME`: who the bot is and what the platform
/// answered to a test message in each configured chat. `Err` when the
/// platform cannot be reached or refuses the bot.
pub async fn test(broker: &Broker, name: &str) -> Result<Tested, String> {
    match name {
        "telegram" => {
            let bot = telegram(broker)?;
            let settings = bot
                .settings(broker.config())
                .ok_or("channels.telegram is not configured")?;
            let me = bot
                .call_retrying("getMe", &json!({}))
                .await
                .map_err(|error| format!("telegram: getMe: {}", api_words(&error)))?;
            let mut lines = vec![format!(
                "telegram: connected as @{} (bot id {})",
                me["username"].as_str().unwrap_or("?"),
                me["id"]
            )];
            if settings.chats.is_empty() {
                lines.push(
                    "telegram: no chats configured (channels.telegram.chats): approvals go only to requesters' chats".to_owned(),
                );
            }
            let mut failed = false;
            for chat in &settings.chats {
                let body = json!({
                    "chat_id": chat.parse::<i64>().unwrap_or_default(),
                    "text": "airlock: this chat receives approval requests.",
                });
                match bot.call_retrying("sendMessage", &body).await {
                    Ok(sent) => lines.push(format!(
                        "telegram: chat {chat}: test message sent (message id {})",
                        sent["message_id"]
                    )),
                    Err(error) => {
                        lines.push(format!("telegram: chat {chat}: {}", api_words(&error)));
                        failed = true;
                    }
                }
            }
            Ok(Tested { lines, failed })
        }
        "slack" => {
            let bot = slack(broker)?;
            let settings = bot
                .settings(broker.config())
                .ok_or("channels.slack is not configured")?;
            let me = bot
                .call("auth.test", &json!({}))
                .await
                .map_err(|error| format!("slack: auth.test: {}", api_words(&error)))?;
            let mut lines = vec![format!(
                "slack: connected as {} (user {}) in {}",
                me["user"].as_str().unwrap_or("?"),
                me["user_id"].as_str().unwrap_or("?"),
                me["team"].as_str().unwrap_or("?")
            )];
            let mut failed = false;
            for chat in &settings.chats {
                let body = json!({"channel": chat, "text": "airlock: this channel receives approval requests."});
                match bot.call("chat.postMessage", &body).await {
                    Ok(sent) => lines.push(format!(
                        "slack: channel {chat}: test message sent (ts {})",
                        sent["ts"].as_str().unwrap_or("?")
                    )),
                    Err(error) => {
                        lines.push(format!("slack: channel {chat}: {}", api_words(&error)));
                        failed = true;
                    }
                }
            }
            Ok(Tested { lines, failed })
        }
        "discord" => {
            let bot = discord(broker)?;
            let settings = bot
                .settings(broker.config())
                .ok_or("channels.discord is not configured")?;
            let me = bot
                .call(reqwest::Method::GET, "/users/@me", None)
                .await
                .map_err(|error| format!("discord: GET /users/@me: {}", api_words(&error)))?;
            let mut lines = vec![format!(
                "discord: connected as {} (user {})",
                me["username"].as_str().unwrap_or("?"),
                me["id"].as_str().unwrap_or("?")
            )];
            let mut failed = false;
            for chat in &settings.chats {
                let body = json!({"content": "airlock: this channel receives approval requests.",
                                  "allowed_mentions": {"parse": []}});
                match bot
                    .call(
                        reqwest::Method::POST,
                        &format!("/channels/{chat}/messages"),
                        Some(&body),
                    )
                    .await
                {
                    Ok(sent) => lines.push(format!(
                        "discord: channel {chat}: test message sent (message id {})",
                        sent["id"].as_str().unwrap_or("?")
                    )),
                    Err(error) => {
                        lines.push(format!("discord: channel {chat}: {}", api_words(&error)));
                        failed = true;
                    }
                }
            }
            Ok(Tested { lines, failed })
        }
        other => Err(format!(
            "no chat channel named {other} (telegram, slack, discord)"
        )),
    }
}

fn api_words(error: &ApiError) -> String {
    error.to_string()
}
