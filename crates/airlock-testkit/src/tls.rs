//! TLS for the tests: a CA made for the test, and a proxy that puts TLS in
//! front of any plain local server (a webhook receiver, an MCP server, a
//! chat platform's stand-in) with a certificate that CA signs for
//! `localhost` and `127.0.0.1`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};

/// A certificate authority made for one test, and a server certificate it
/// signed.
pub struct TestCa {
    ca_pem: String,
    server: Arc<rustls::ServerConfig>,
    /// The server certificate (for `localhost` and `127.0.0.1`) and its
    /// key, PEM: for a server that reads them from files.
    server_cert_pem: String,
    server_key_pem: String,
}

impl TestCa {
    pub fn new() -> TestCa {
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
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(
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
        TestCa {
            ca_pem: ca_cert.pem(),
            server: Arc::new(server),
            server_cert_pem: leaf.pem(),
            server_key_pem: key.serialize_pem(),
        }
    }

    /// The CA's certificate, PEM: what `tls.ca_file` names.
    pub fn pem(&self) -> &str {
        &self.ca_pem
    }

    /// The server certificate the CA signed, and its private key (PEM).
    pub fn server_pem(&self) -> (&str, &str) {
        (&self.server_cert_pem, &self.server_key_pem)
    }

    /// Writes the CA's certificate to `path`.
    pub fn write_pem(&self, path: &Path) {
        std::fs::write(path, &self.ca_pem).unwrap();
    }

    /// A proxy on a port of 127.0.0.1 that ends TLS and passes the bytes on
    /// to `target`, for as long as the returned value lives.
    pub fn proxy(&self, target: SocketAddr) -> TlsProxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(self.server.clone());
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let port = listener.local_addr().unwrap().port();
        runtime.spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that does not trust the CA ends the handshake.
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut plain) = TcpStream::connect(target).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        TlsProxy {
            port,
            _runtime: runtime,
        }
    }
}

impl Default for TestCa {
    fn default() -> TestCa {
        TestCa::new()
    }
}

/// A running TLS proxy; it stops when dropped.
pub struct TlsProxy {
    /// Its port on 127.0.0.1 (`https://localhost:{port}` names it).
    pub port: u16,
    _runtime: tokio::runtime::Runtime,
}

impl TlsProxy {
    /// `https://localhost:{port}{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }
}
