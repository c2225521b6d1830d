//! Which approver channels are live for the workspace: what
//! `elicitation_fallback: auto` asks before it makes a call wait for a human
//! nobody is there to be.
//!
//! A process that can put an approval before a person (`airlock watch`, a
//! `serve --http` with a web UI connected) holds an exclusive `flock` on its
//! own file under `<state dir>/live/` for as long as it can. A lock the
//! kernel holds is released when its process dies however it dies, so a
//! channel is live exactly while its lock cannot be taken: no heartbeat, no
//! clock, nothing to go stale. Files left by dead processes are removed by
//! whoever finds them.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, flock};

use crate::broker::Broker;

/// A kind of approver channel that announces itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveChannel {
    /// `airlock watch` at a terminal.
    Watch,
    /// A web UI (an approver's event stream) connected to `serve --http`.
    WebUi,
    /// A `serve --http` that sends new approvals to a webhook.
    Webhooks,
    /// The process running the chat channels (Telegram, Slack, Discord).
    Chat,
}

impl LiveChannel {
    fn prefix(self) -> &'static str {
        match self {
            LiveChannel::Watch => "watch",
            LiveChannel::WebUi => "web",
            LiveChannel::Webhooks => "hook",
            LiveChannel::Chat => "chat",
        }
    }

    /// How a person would call it.
    pub fn describe(self) -> &'static str {
        match self {
            LiveChannel::Watch => "airlock watch",
            LiveChannel::WebUi => "the web UI",
            LiveChannel::Webhooks => "a webhook (sent by serve --http)",
            LiveChannel::Chat => "a chat channel (Telegram, Slack or Discord)",
        }
    }
}

/// A channel announced live; it stops being so when this is dropped (or its
/// process ends).
#[derive(Debug)]
pub struct Presence {
    path: PathBuf,
    /// Holds the lock.
    _file: File,
}

impl Drop for Presence {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

impl Broker {
    fn live_dir(&self) -> PathBuf {
        self.root
            .join(&self.config.workspace.state_dir)
            .join("live")
    }

    /// Announces `channel` live until the returned guard is dropped.
    pub fn announce(&self, channel: LiveChannel) -> std::io::Result<Presence> {
        let dir = self.live_dir();
        fs::create_dir_all(&dir)?;
        let name = format!(
            "{}-{}-{}",
            channel.prefix(),
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        // Locked under a name no reader looks at, then renamed: a reader
        // never sees the file before its lock is held (and removes it).
        let unlocked = dir.join(format!(".new-{name}"));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&unlocked)?;
        flock(&file, FlockOperation::NonBlockingLockExclusive)?;
        // For a person looking: who holds it.
        let _ = writeln!(file, "{}", std::process::id());
        let path = dir.join(name);
        fs::rename(&unlocked, &path)?;
        Ok(Presence { path, _file: file })
    }

    /// The approver channels live now: the announced ones whose process
    /// holds its lock (a webhook counts while a `serve --http` that sends it
    /// new approvals runs).
    pub fn live_channels(&self) -> Vec<String> {
        let mut live = Vec::new();
        if let Ok(entries) = fs::read_dir(self.live_dir()) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                let channel = if name.starts_with("watch-") {
                    LiveChannel::Watch
                } else if name.starts_with("web-") {
                    LiveChannel::WebUi
                } else if name.starts_with("hook-") {
                    LiveChannel::Webhooks
                } else if name.starts_with("chat-") {
                    LiveChannel::Chat
                } else {
                    continue;
                };
                if held(&entry.path()) {
                    let described = channel.describe().to_owned();
                    if !live.contains(&described) {
                        live.push(described);
                    }
                }
            }
        }
        live
    }
}

/// Whether some live process holds `path`'s lock; a file nobody holds is
/// left by a process that ended, and is removed.
fn held(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    match flock(&file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            // Free: its holder is gone.
            let _ = fs::remove_file(path);
            false
        }
        Err(_) => true,
    }
}
