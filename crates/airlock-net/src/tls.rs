//! Which servers airlock trusts.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// The largest `tls.ca_file` read; a bigger one is refused, not read.
pub const MAX_CA_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Why a TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// `tls.ca_file` is unusable; the message says why.
    #[error("tls.ca_file {path}: {problem}")]
    CaFile { path: PathBuf, problem: String },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The platform's root certificates, read once per process: reading them
/// costs a directory walk, and `serve --stdio` never pays it unless it
/// connects somewhere.
fn platform_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        // Unreadable entries are skipped: a server signed by one of them is
        // then refused, which is the safe way to fail.
        rustls_native_certs::load_native_certs().certs
    })
}

/// The client configuration every outbound TLS connection uses: the
/// platform's roots plus the certificates in `ca_file` (PEM), with the ring
/// provider. `ca_file` is read on every call, so a changed file counts from
/// the next connection made.
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut roots = RootCertStore::empty();
    // A platform certificate rustls cannot use is left out, as every client
    // does; the others still count.
    let _ = roots.add_parsable_certificates(platform_roots().iter().cloned());
    if let Some(path) = ca_file {
        for certificate in read_ca_file(path)? {
            roots.add(certificate).map_err(|error| TlsError::CaFile {
                path: path.to_owned(),
                problem: format!("a certificate cannot be used as a root: {error}"),
            })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The certificates of a PEM file: at least one, from a regular file of at
/// most [`MAX_CA_FILE_BYTES`].
fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let fail = |problem: String| TlsError::CaFile {
        path: path.to_owned(),
        problem,
    };
    let metadata = std::fs::metadata(path).map_err(|error| fail(error.to_string()))?;
    if !metadata.is_file() {
        return Err(fail("not a regular file".to_owned()));
    }
    if metadata.len() > MAX_CA_FILE_BYTES {
        return Err(fail(format!(
            "{} bytes, more than the {MAX_CA_FILE_BYTES} a CA file may have",
            metadata.len()
        )));
    }
    let bytes = std::fs::read(path).map_err(|error| fail(error.to_string()))?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| fail(format!("not PEM: {error}")))?;
    if certificates.is_empty() {
        return Err(fail(
            "holds no certificate (expected -----BEGIN CERTIFICATE-----)".to_owned(),
        ));
    }
    Ok(certificates)
}
