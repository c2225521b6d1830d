//! WebSocket connections (`ws://`, `wss://`) with airlock's TLS trust.

use std::path::Path;
use std::time::Duration;

use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_util::either::Either;

use crate::tls::{TlsError, client_config};

/// An open WebSocket, over TLS or not.
pub type WebSocket = WebSocketStream<Either<TcpStream, TlsStream<TcpStream>>>;

/// How long connecting, the TLS handshake and the WebSocket handshake may
/// take together.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// The largest message read; the platforms send far smaller ones.
const MAX_MESSAGE: usize = 4 * 1024 * 1024;

/// Why a connection could not be made. Messages name the host, never the
/// whole URL: a URL may carry a one-time ticket.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("not a ws:// or wss:// URL with a host")]
    BadUrl,
    #[error("cannot connect to {host}: {source}")]
    Connect {
        host: String,
        source: std::io::Error,
    },
    #[error("TLS with {host}: {source}")]
    Handshake {
        host: String,
        source: std::io::Error,
    },
    #[error("WebSocket handshake with {host}: {source}")]
    WebSocket {
        host: String,
        source: Box<tokio_tungstenite::tungstenite::Error>,
    },
    #[error("connecting to {host} took longer than {CONNECT_TIMEOUT:?}")]
    Timeout { host: String },
}

/// Opens a WebSocket to `url`, trusting what [`client_config`] trusts.
pub async fn websocket(url: &str, ca_file: Option<&Path>) -> Result<WebSocket, NetError> {
    let uri: http::Uri = url.parse().map_err(|_| NetError::BadUrl)?;
    let tls = match uri.scheme_str() {
        Some("wss") => true,
        Some("ws") => false,
        _ => return Err(NetError::BadUrl),
    };
    let host = uri
        .host()
        .filter(|host| !host.is_empty())
        .ok_or(NetError::BadUrl)?;
    // An IPv6 literal comes bracketed.
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let config = tls.then(|| client_config(ca_file)).transpose()?;
    let connect = async {
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|source| NetError::Connect {
                host: host.clone(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        let stream =
            match config {
                Some(config) => {
                    let name = ServerName::try_from(host.clone()).map_err(|_| NetError::BadUrl)?;
                    let connector = TlsConnector::from(config);
                    let stream = connector.connect(name, tcp).await.map_err(|source| {
                        NetError::Handshake {
                            host: host.clone(),
                            source,
                        }
                    })?;
                    Either::Right(stream)
                }
                None => Either::Left(tcp),
            };
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE));
        let (socket, _) = tokio_tungstenite::client_async_with_config(url, stream, Some(config))
            .await
            .map_err(|source| NetError::WebSocket {
                host: host.clone(),
                source: Box::new(source),
            })?;
        Ok(socket)
    };
    tokio::time::timeout(CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| NetError::Timeout { host: host.clone() })?
}
