//! A stdio upstream's connection: the server as a child process, one
//! JSON-RPC message a line each way, with a raw lane beside rmcp's client.
//!
//! rmcp's client sends and receives typed messages through it as through
//! its own child-process transport. A `tools/call` the fast lane forwards
//! ([`Raw::call`]) is written as a line of its own, under an id of the form
//! `airlock-raw-N` that rmcp's numeric ids never take, and its answer is
//! taken off the connection here, before rmcp would parse it: a proxied
//! call then costs no typed request, no trip through rmcp's service task
//! and no typed response (see `crate::lane`).
//!
//! The child is killed when the connection is dropped, as rmcp's transport
//! does.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use airlock_core::jsonrpc::{Frame, LineFramer};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::oneshot;

/// What a raw call's id starts with.
const RAW_ID: &str = "airlock-raw-";

/// The longest line read from a server (rmcp's own limit).
const MAX_LINE: usize = 16 * 1024 * 1024;

/// How long a server is given to exit, after stdin closes and again after
/// `SIGTERM` (rmcp's own wait).
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The writing half, shared by rmcp's sends and raw calls; `None` once
/// closed.
type Writer = Arc<tokio::sync::Mutex<Option<ChildStdin>>>;

/// The raw lane of one connection.
pub(crate) struct Raw {
    writer: Writer,
    next: AtomicU64,
    /// Raw calls waiting for their answer, by id; `None` once the
    /// connection ended, which ends every wait and refuses new calls.
    waiting: Mutex<Option<HashMap<String, oneshot::Sender<Value>>>>,
}

/// A raw call on its way; it stops waiting when dropped.
pub(crate) struct RawCall<'raw> {
    pub id: String,
    pub answer: oneshot::Receiver<Value>,
    raw: &'raw Raw,
}

impl Drop for RawCall<'_> {
    fn drop(&mut self) {
        self.raw.forget(&self.id);
    }
}

impl Raw {
    /// Sends `tools/call` of `tool` with `arguments`: its id and the
    /// answer to come (the whole JSON-RPC response). `None` when the
    /// connection is closed.
    pub(crate) async fn call(&self, tool: &str, arguments: Option<&Value>) -> Option<RawCall<'_>> {
        let id = format!("{RAW_ID}{}", self.next.fetch_add(1, Ordering::Relaxed));
        let (sender, answer) = oneshot::channel();
        self.waiting
            .lock()
            .ok()?
            .as_mut()?
            .insert(id.clone(), sender);
        let call = RawCall {
            id,
            answer,
            raw: self,
        };
        let mut params = serde_json::json!({"name": tool});
        if let Some(arguments) = arguments {
            params["arguments"] = arguments.clone();
        }
        let message = serde_json::json!({
            "jsonrpc": "2.0",
            "id": call.id,
            "method": "tools/call",
            "params": params,
        });
        // On failure the call is dropped, which forgets it.
        self.write(&message).await.ok()?;
        Some(call)
    }

    /// Tells the server the raw call `id` is cancelled; its answer, if one
    /// comes, is dropped.
    pub(crate) async fn cancel(&self, id: &str, reason: &str) {
        self.forget(id);
        let _ = self
            .write(&serde_json::json!({
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": id, "reason": reason},
            }))
            .await;
    }

    /// Gives up waiting for `id` (its wait timed out).
    pub(crate) fn forget(&self, id: &str) {
        if let Ok(mut waiting) = self.waiting.lock()
            && let Some(waiting) = waiting.as_mut()
        {
            waiting.remove(id);
        }
    }

    async fn write(&self, message: &Value) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
        line.push(b'\n');
        write_line(&self.writer, &line).await
    }

    /// Hands `message` to the raw call it answers; `false` if it answers
    /// none.
    fn answered(&self, message: &Value) -> bool {
        let Some(id) = message.get("id").and_then(Value::as_str) else {
            return false;
        };
        if !id.starts_with(RAW_ID) || message.get("method").is_some() {
            return false;
        }
        // An answer to a call that stopped waiting is dropped all the same:
        // rmcp knows nothing of it.
        let sender = self
            .waiting
            .lock()
            .ok()
            .and_then(|mut waiting| waiting.as_mut()?.remove(id));
        if let Some(sender) = sender {
            let _ = sender.send(message.clone());
        }
        true
    }

    fn end(&self) {
        if let Ok(mut waiting) = self.waiting.lock() {
            *waiting = None;
        }
    }
}

async fn write_line(writer: &Writer, line: &[u8]) -> std::io::Result<()> {
    let mut writer = writer.lock().await;
    let Some(stdin) = writer.as_mut() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "the connection is closed",
        ));
    };
    stdin.write_all(line).await?;
    stdin.flush().await
}

/// The transport of a stdio upstream's connection.
pub(crate) struct ChildLines {
    /// Killed when dropped.
    child: Child,
    stdout: ChildStdout,
    framer: LineFramer,
    pending: VecDeque<Frame>,
    buffer: Vec<u8>,
    ended: bool,
    raw: Arc<Raw>,
    upstream: Weak<crate::upstream::Upstream>,
}

impl ChildLines {
    /// Starts `command` (its stdin and stdout piped; it is killed when the
    /// connection is dropped).
    pub(crate) fn spawn(
        mut command: tokio::process::Command,
        upstream: Weak<crate::upstream::Upstream>,
    ) -> std::io::Result<(ChildLines, Arc<Raw>)> {
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true);
        let mut child = command.spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("the child's stdio is not piped"));
        };
        let raw = Arc::new(Raw {
            writer: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
            next: AtomicU64::new(1),
            waiting: Mutex::new(Some(HashMap::new())),
        });
        Ok((
            ChildLines {
                child,
                stdout,
                framer: LineFramer::new(MAX_LINE),
                pending: VecDeque::new(),
                buffer: vec![0; 64 * 1024],
                ended: false,
                raw: raw.clone(),
                upstream,
            },
            raw,
        ))
    }

    async fn next_message(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            while let Some(frame) = self.pending.pop_front() {
                // As rmcp's transport reads a server: a line past the limit
                // is dropped, a byte order mark is no content, what is not
                // JSON is ignored, and JSON that is no message is answered
                // with an Invalid Request error.
                let Frame::Line(line) = frame else { continue };
                let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&line);
                let Ok(value) = serde_json::from_slice::<Value>(line) else {
                    continue;
                };
                if value.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
                    && self.raw.answered(&value)
                {
                    continue;
                }
                let Ok(message) = serde_json::from_value::<RxJsonRpcMessage<RoleClient>>(value)
                else {
                    let refusal = TxJsonRpcMessage::<RoleClient>::error(
                        rmcp::ErrorData::invalid_request("Invalid request", None),
                        None,
                    );
                    if let Ok(mut line) = serde_json::to_vec(&refusal) {
                        line.push(b'\n');
                        if write_line(&self.raw.writer, &line).await.is_err() {
                            self.ended = true;
                        }
                    }
                    continue;
                };
                // The server's progress goes on as it arrives (see `Ordered`).
                if let rmcp::model::JsonRpcMessage::Notification(notification) = &message
                    && let rmcp::model::ServerNotification::ProgressNotification(progress) =
                        &notification.notification
                    && let Some(upstream) = self.upstream.upgrade()
                {
                    upstream.pass_progress(progress.params.clone()).await;
                }
                return Some(message);
            }
            if self.ended {
                self.raw.end();
                return None;
            }
            let mut frames = Vec::new();
            match self.stdout.read(&mut self.buffer).await {
                // A last line without its newline is dropped, as rmcp does.
                Ok(0) | Err(_) => self.ended = true,
                Ok(read) => self.framer.push(&self.buffer[..read], &mut frames),
            }
            self.pending.extend(frames);
        }
    }
}

impl Drop for ChildLines {
    fn drop(&mut self) {
        self.raw.end();
    }
}

impl rmcp::transport::Transport<RoleClient> for ChildLines {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
        let writer = self.raw.writer.clone();
        let line = serde_json::to_vec(&item);
        async move {
            let mut line = line.map_err(std::io::Error::other)?;
            line.push(b'\n');
            write_line(&writer, &line).await
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.next_message()
    }

    /// The MCP specification's stdio shutdown, as rmcp's transport does it:
    /// stdin closed, then `SIGTERM` if the server has not exited within
    /// [`EXIT_WAIT`], then `SIGKILL` after as long again.
    async fn close(&mut self) -> Result<(), std::io::Error> {
        self.raw.end();
        if let Some(mut stdin) = self.raw.writer.lock().await.take() {
            let _ = stdin.shutdown().await;
        }
        let child = &mut self.child;
        if tokio::time::timeout(EXIT_WAIT, child.wait()).await.is_ok() {
            return Ok(());
        }
        if let Some(pid) = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            if tokio::time::timeout(EXIT_WAIT, child.wait()).await.is_ok() {
                return Ok(());
            }
        }
        child.kill().await
    }
}
