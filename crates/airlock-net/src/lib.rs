//! airlock-net: the one client airlock connects out with. Webhooks, the chat
//! platforms' APIs and WebSockets, and MCP upstreams over streamable HTTP
//! all go through it, so every outbound connection trusts the same roots:
//! the platform's (`rustls-native-certs`, which honours `SSL_CERT_FILE` and
//! `SSL_CERT_DIR`) plus the PEM certificates of `tls.ca_file`, for private
//! CAs and tests. TLS is rustls with the ring provider; there is no OpenSSL.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = airlock_net::http_client(None)?.build()?;
//! let answer = client.get("https://example.com/").send().await?;
//! # Ok(()) }
//! ```

mod stream;
mod tls;
mod ws;

pub use stream::{TlsClientStream, tls_over};
pub use tls::{MAX_CA_FILE_BYTES, TlsError, client_config};
/// A WebSocket error.
pub use tokio_tungstenite::tungstenite::Error as WsError;
/// A WebSocket message (text, binary, ping, pong, close).
pub use tokio_tungstenite::tungstenite::Message as WsMessage;
/// A WebSocket close frame (a code and a reason).
pub use tokio_tungstenite::tungstenite::protocol::CloseFrame as WsCloseFrame;
pub use ws::{NetError, WebSocket, websocket};

use std::path::Path;

/// A `reqwest` client builder that speaks TLS with [`client_config`]'s
/// trust, follows no redirect (a redirect could carry a signed link or a
/// token elsewhere) and names airlock as its user agent. Callers add their
/// timeouts and build it.
pub fn http_client(ca_file: Option<&Path>) -> Result<reqwest::ClientBuilder, TlsError> {
    let mut config = (*client_config(ca_file)?).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("airlock/", env!("CARGO_PKG_VERSION"))))
}

/// POSTs the JSON text `body` to `url` (with `token` as a bearer token),
/// waiting at most `timeout` for the whole answer: its status and body. An
/// error says what failed (connecting, the TLS setup, the timeout).
pub async fn post_json(
    url: &str,
    token: Option<&str>,
    body: String,
    timeout: std::time::Duration,
    ca_file: Option<&Path>,
) -> Result<(u16, Vec<u8>), String> {
    let client = http_client(ca_file)
        .map_err(|error| error.to_string())?
        .timeout(timeout)
        .build()
        .map_err(|error| error.to_string())?;
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    if let Some(token) = token.filter(|token| !token.is_empty()) {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(|error| error.to_string())?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await.map_err(|error| error.to_string())?;
    Ok((status, bytes.to_vec()))
}
