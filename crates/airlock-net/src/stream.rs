//! TLS over a stream another library opened (a database driver's socket),
//! with the same trust as every other connection airlock makes out.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::tls::client_config;

/// A client TLS session over `S`, the server's certificate checked against
/// the platform's roots and `tls.ca_file` for the name it was reached by.
#[derive(Debug)]
pub struct TlsClientStream<S>(TlsStream<S>);

/// Starts TLS on `stream` to the server known as `server_name` (a DNS name
/// or an IP address), trusting [`client_config`]'s roots.
pub async fn tls_over<S>(
    stream: S,
    server_name: &str,
    ca_file: Option<&Path>,
) -> io::Result<TlsClientStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let config = client_config(ca_file).map_err(io::Error::other)?;
    let name = ServerName::try_from(server_name.to_owned()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{server_name:?} is not a server name TLS can check"),
        )
    })?;
    let stream = TlsConnector::from(config).connect(name, stream).await?;
    Ok(TlsClientStream(stream))
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsClientStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsClientStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
