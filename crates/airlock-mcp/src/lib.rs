//! airlock-mcp: the MCP face of airlock (DESIGN §9). The only crate that knows
//! rmcp.
//!
//! An [`McpFace`] serves the runtime of one workspace (`airlock_broker::Runtime`)
//! and makes the connections to its upstream MCP servers. Each MCP session gets a [`Session`] (an rmcp
//! `ServerHandler`) bound to a profile; every `tools/call` becomes a
//! `ToolCall` handed to the broker, and the human is asked inside the client
//! where it can be (elicitation, or a 2026-07-28 `InputRequiredResult`).

mod ask;
mod asks;
mod caller;
mod child;
mod face;
mod http;
mod hub;
mod lane;
mod remote;
mod resources;
mod result;
mod rounds;
mod server;
mod stdio;
mod tools;
mod upstream;

pub use face::McpFace;
pub use http::{McpBody, McpHttp};
pub use server::{Session, SessionOptions};

/// The built-in tools exactly as `tools/list` serves them (name,
/// description, input schema, annotations), `proposal_status` last: what
/// `airlock tools` prints.
pub fn builtin_tools() -> Vec<serde_json::Value> {
    tools::builtin()
        .iter()
        .filter_map(|tool| serde_json::to_value(tool).ok())
        .collect()
}

/// Errors starting the MCP face.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("{0}")]
    Broker(#[from] airlock_broker::BrokerError),
    #[error("upstream {name}: {message}")]
    Upstream { name: String, message: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Protocol(String),
}

use std::sync::Arc;

/// Serves one session over stdin/stdout until the client closes it.
///
/// When both are pipes (as for every client that starts airlock as a
/// subprocess) they are driven by the runtime's event loop; tokio's
/// `stdin()`/`stdout()` hand each read and write to a blocking thread, which
/// costs a thread hand-off per message on the read path.
pub async fn serve_stdio(face: Arc<McpFace>, options: SessionOptions) -> Result<(), McpError> {
    let max = usize::try_from(face.broker().config().mcp.max_message_bytes).unwrap_or(usize::MAX);
    let session = Session::new(face, options);
    let lane = Some(lane::Lane::new(session.clone()));
    match stdio_pipes() {
        Some((input, output)) => {
            serve_on(session, stdio::LineTransport::new(input, output, max, lane)).await
        }
        None => {
            let transport =
                stdio::LineTransport::new(tokio::io::stdin(), tokio::io::stdout(), max, lane);
            serve_on(session, transport).await
        }
    }
}

/// Stdin and stdout as non-blocking pipes, when they are pipes.
fn stdio_pipes() -> Option<(
    tokio::net::unix::pipe::Receiver,
    tokio::net::unix::pipe::Sender,
)> {
    use std::os::fd::AsFd as _;
    use tokio::net::unix::pipe;
    let input = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let output = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    let is_pipe = |fd: &std::os::fd::OwnedFd| {
        use std::os::unix::fs::FileTypeExt as _;
        std::fs::File::from(fd.try_clone().ok()?)
            .metadata()
            .ok()
            .map(|meta| meta.file_type().is_fifo())
    };
    if is_pipe(&input) != Some(true) || is_pipe(&output) != Some(true) {
        return None;
    }
    Some((
        pipe::Receiver::from_owned_fd(input).ok()?,
        pipe::Sender::from_owned_fd(output).ok()?,
    ))
}

async fn serve_on<T, E, A>(session: Session, transport: T) -> Result<(), McpError>
where
    T: rmcp::transport::IntoTransport<rmcp::RoleServer, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    use rmcp::ServiceExt as _;
    let running = session
        .serve(transport)
        .await
        .map_err(|error| McpError::Protocol(error.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|error| McpError::Protocol(error.to_string()))?;
    Ok(())
}

/// The streamable-HTTP MCP endpoint as a tower service: one session per MCP
/// session (the profile and user of each come from the request, see
/// `airlock_core::HttpPrincipal`). It checks neither `Host` nor `Origin`: whatever
/// mounts it must (airlock-http does, for every route).
pub fn streamable_http_service(face: Arc<McpFace>) -> McpHttp {
    let sessions = face.clone();
    let inner = rmcp::transport::StreamableHttpService::new(
        move || {
            Ok(Session::new(
                face.clone(),
                SessionOptions {
                    profile: None,
                    user: None,
                    http: true,
                    session: None,
                },
            ))
        },
        Arc::default(),
        // Host and Origin are checked once, for every route, by the HTTP face
        // that mounts this service (its own list of the listener's names,
        // `--public-url` and `http.allowed_hosts` included).
        rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .disable_allowed_origins(),
    );
    McpHttp::new(inner, sessions)
}
