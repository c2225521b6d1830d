//! MCP over stdio, framed by airlock (DESIGN §13): every line is either a
//! JSON-RPC message handed to rmcp, or answered with a JSON-RPC error at
//! once (`airlock_core::jsonrpc`: `-32700` for what is not JSON, `-32600`
//! for JSON that is no message, nesting past the limit, or a line over
//! `mcp.max_message_bytes`, which is dropped as it streams past, never held
//! whole), and the session goes on. rmcp's own line codec would drop such
//! lines without a word, and hold an over-long one up to its own limit.

use std::collections::VecDeque;
use std::sync::Arc;

use airlock_core::jsonrpc::{self, Frame, LineFramer, Rejection};
use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// How much of stdin is read at a time.
const READ_CHUNK: usize = 64 * 1024;

/// A server transport over a byte reader and writer, one JSON-RPC message a
/// line each way.
pub(crate) struct LineTransport<R, W> {
    reader: R,
    writer: Arc<tokio::sync::Mutex<W>>,
    framer: LineFramer,
    max: usize,
    pending: VecDeque<Frame>,
    buffer: Vec<u8>,
    ended: bool,
    /// Answers the calls it can without rmcp (`crate::lane`).
    lane: Option<Arc<crate::lane::Lane>>,
    /// The lane's calls in flight: finished (within [`DRAIN`]) when the
    /// input ends, as rmcp finishes its own.
    laned: tokio::task::JoinSet<()>,
}

/// How long the calls in flight may take to finish once the client closed
/// its input (rmcp's own wait for its handlers).
const DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub(crate) fn new(
        reader: R,
        writer: W,
        max_message_bytes: usize,
        lane: Option<Arc<crate::lane::Lane>>,
    ) -> LineTransport<R, W> {
        LineTransport {
            reader,
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            framer: LineFramer::new(max_message_bytes),
            max: max_message_bytes,
            pending: VecDeque::new(),
            buffer: vec![0; READ_CHUNK],
            ended: false,
            lane,
            laned: tokio::task::JoinSet::new(),
        }
    }

    /// The next message of the stream, answering every line that is not one.
    async fn next_message(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            while let Some(frame) = self.pending.pop_front() {
                let line = match frame {
                    Frame::TooLong => {
                        answer(&self.writer, &jsonrpc::too_long(self.max)).await;
                        continue;
                    }
                    Frame::Line(line) => line,
                };
                // A byte order mark at the start is no content (rmcp's codec
                // drops it too).
                let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&line);
                if jsonrpc::is_blank(line) {
                    continue;
                }
                let value = match jsonrpc::check_message(line) {
                    Ok(value) => value,
                    Err(rejection) => {
                        answer(&self.writer, &rejection).await;
                        continue;
                    }
                };
                if let Some(answer) = self.lane.as_ref().and_then(|lane| lane.take(&value, None)) {
                    let writer = self.writer.clone();
                    while self.laned.try_join_next().is_some() {}
                    self.laned.spawn(async move {
                        let Some(line) = answer.await else { return };
                        let mut writer = writer.lock().await;
                        if writer.write_all(&line).await.is_ok() {
                            let _ = writer.flush().await;
                        }
                    });
                    continue;
                }
                let id = value.get("id").cloned();
                match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value) {
                    Ok(message) => return Some(message),
                    // A notification gets no answer, even a wrong one.
                    Err(_) if id.is_none() => {}
                    Err(error) => {
                        let rejection = Rejection {
                            code: jsonrpc::INVALID_REQUEST,
                            message: format!("invalid request: {error}"),
                            id: id.unwrap_or(Value::Null),
                        };
                        answer(&self.writer, &rejection).await;
                    }
                }
            }
            if self.ended {
                let laned = &mut self.laned;
                let _ = tokio::time::timeout(DRAIN, async {
                    while laned.join_next().await.is_some() {}
                })
                .await;
                return None;
            }
            let mut frames = Vec::new();
            match self.reader.read(&mut self.buffer).await {
                Ok(0) | Err(_) => {
                    self.framer.finish(&mut frames);
                    self.ended = true;
                }
                Ok(read) => self.framer.push(&self.buffer[..read], &mut frames),
            }
            self.pending.extend(frames);
        }
    }
}

/// Writes one error response; a client that stopped reading is no reason to
/// stop reading it.
async fn answer<W: AsyncWrite + Unpin>(writer: &tokio::sync::Mutex<W>, rejection: &Rejection) {
    let mut line = rejection.response().into_bytes();
    line.push(b'\n');
    let mut writer = writer.lock().await;
    if writer.write_all(&line).await.is_ok() {
        let _ = writer.flush().await;
    }
}

impl<R, W> rmcp::transport::Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), std::io::Error>> + Send + 'static {
        let writer = self.writer.clone();
        let line = serde_json::to_vec(&item);
        async move {
            let mut line = line.map_err(std::io::Error::other)?;
            line.push(b'\n');
            let mut writer = writer.lock().await;
            writer.write_all(&line).await?;
            writer.flush().await
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.next_message()
    }

    async fn close(&mut self) -> Result<(), std::io::Error> {
        self.writer.lock().await.shutdown().await
    }
}
