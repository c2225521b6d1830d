//! airlock-mcp: the MCP face of airlock (DESIGN §9). The only crate that knows
//! rmcp.
//!
//! A [`Gateway`] holds the broker of one workspace and the connections to its
//! upstream MCP servers. Each MCP session gets a [`Session`] (an rmcp
//! `ServerHandler`) bound to a profile; every `tools/call` becomes a
//! `ToolCall` handed to the broker, and the human is asked inside the client
//! where it can be (elicitation, or a 2026-07-28 `InputRequiredResult`).

mod gateway;
mod result;
mod rounds;
mod server;
mod tools;
mod upstream;

pub use gateway::{Gateway, GatewayOptions, Reloader};
pub use server::{HttpPrincipal, Session, SessionOptions};

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
pub async fn serve_stdio(gateway: Arc<Gateway>, options: SessionOptions) -> Result<(), McpError> {
    use rmcp::ServiceExt as _;
    let session = Session::new(gateway, options);
    let running = session
        .serve(rmcp::transport::stdio())
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
/// [`HttpPrincipal`]).
pub fn streamable_http_service(
    gateway: Arc<Gateway>,
) -> rmcp::transport::StreamableHttpService<
    Session,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    rmcp::transport::StreamableHttpService::new(
        move || {
            Ok(Session::new(
                gateway.clone(),
                SessionOptions {
                    profile: None,
                    user: None,
                    http: true,
                },
            ))
        },
        Arc::default(),
        rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default(),
    )
}
