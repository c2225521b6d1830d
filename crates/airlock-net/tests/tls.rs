//! The outbound client against a local TLS server whose certificate is
//! signed by a CA made in the test: trusted with `tls.ca_file`, refused
//! without it; bad CA files are named with what is wrong.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

struct Server {
    addr: SocketAddr,
    ca_pem: String,
}

/// A CA, a certificate for localhost and 127.0.0.1 it signs, and a server
/// that answers `GET /` with "hello over tls" and echoes WebSocket text on
/// `/ws`.
async fn server() -> Server {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "airlock test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from(leaf.der().to_vec())],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that does not trust us ends the handshake.
                let Ok(mut stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = [0u8; 4];
                if stream.read_exact(&mut head).await.is_err() {
                    return;
                }
                if &head == b"GET " {
                    let mut path = [0u8; 3];
                    let _ = stream.read_exact(&mut path).await;
                    if &path == b"/ws" {
                        let prefixed = Prefixed {
                            prefix: b"GET /ws".to_vec(),
                            stream,
                        };
                        let mut socket = tokio_tungstenite::accept_async(prefixed).await.unwrap();
                        while let Some(Ok(Message::Text(text))) = socket.next().await {
                            socket
                                .send(Message::text(format!("echo {text}")))
                                .await
                                .unwrap();
                        }
                        return;
                    }
                    let mut rest = vec![0u8; 4096];
                    let _ = stream.read(&mut rest).await;
                    let body = "hello over tls";
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                    let _ = stream.shutdown().await;
                }
            });
        }
    });
    Server {
        addr,
        ca_pem: ca_cert.pem(),
    }
}

/// A stream whose first bytes were already read.
struct Prefixed<S> {
    prefix: Vec<u8>,
    stream: S,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            let taken: Vec<u8> = self.prefix.drain(..n).collect();
            buf.put_slice(&taken);
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn https_is_trusted_through_the_ca_file_and_refused_without_it() {
    let server = server().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = write(dir.path(), "ca.pem", &server.ca_pem);
    for host in ["localhost", "127.0.0.1"] {
        let url = format!("https://{host}:{}/", server.addr.port());
        let client = airlock_net::http_client(Some(&ca))
            .unwrap()
            .build()
            .unwrap();
        let answer = client.get(&url).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.text().await.unwrap(), "hello over tls");

        let untrusting = airlock_net::http_client(None).unwrap().build().unwrap();
        let error = untrusting.get(&url).send().await.unwrap_err();
        let chain = error_chain(&error);
        assert!(chain.contains("UnknownIssuer"), "{chain}");
    }
}

#[tokio::test]
async fn wss_is_trusted_through_the_ca_file_and_refused_without_it() {
    let server = server().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = write(dir.path(), "ca.pem", &server.ca_pem);
    let url = format!("wss://localhost:{}/ws", server.addr.port());
    let mut socket = airlock_net::websocket(&url, Some(&ca)).await.unwrap();
    socket.send(Message::text("ping")).await.unwrap();
    let answer = socket.next().await.unwrap().unwrap();
    assert_eq!(answer, Message::text("echo ping"));

    let error = airlock_net::websocket(&url, None).await.unwrap_err();
    let text = error_chain(&error);
    assert!(text.starts_with("TLS with localhost: "), "{text}");
    assert!(text.contains("UnknownIssuer"), "{text}");

    for bad in ["https://localhost/", "wss://", "not a url"] {
        let error = airlock_net::websocket(bad, None).await.unwrap_err();
        assert_eq!(error.to_string(), "not a ws:// or wss:// URL with a host");
    }
}

#[test]
fn a_bad_ca_file_is_named_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let empty = write(dir.path(), "empty.pem", "");
    let prose = write(dir.path(), "prose.pem", "just some words\n");
    let torn = write(
        dir.path(),
        "torn.pem",
        "-----BEGIN CERTIFICATE-----\nMIIB\n",
    );
    let big = dir.path().join("big.pem");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(airlock_net::MAX_CA_FILE_BYTES + 1)
        .unwrap();
    let cases: [(&Path, &str); 6] = [
        (&missing, "No such file or directory (os error 2)"),
        (dir.path(), "not a regular file"),
        (
            &empty,
            "holds no certificate (expected -----BEGIN CERTIFICATE-----)",
        ),
        (
            &prose,
            "holds no certificate (expected -----BEGIN CERTIFICATE-----)",
        ),
        (&torn, "not PEM"),
        (
            &big,
            "8388609 bytes, more than the 8388608 a CA file may have",
        ),
    ];
    for (path, problem) in cases {
        let error = airlock_net::client_config(Some(path)).unwrap_err();
        let text = error.to_string();
        let expected = format!("tls.ca_file {}: {problem}", path.display());
        assert!(text.starts_with(&expected), "{text} / {expected}");
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}
