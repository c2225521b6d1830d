//! Content hashes in airlock's one format: `sha256:<64 lowercase hex>`.

use std::io::{self, Read};

use sha2::{Digest, Sha256};

/// The hash of `bytes` as `sha256:<64 hex>` (airlock's one helper, in
/// `airlock_core::canonical`).
pub use airlock_core::canonical::sha256_hex;

/// Hashes everything `reader` yields, without holding it in memory. Returns the
/// hash and the number of bytes read.
pub fn sha256_reader(mut reader: impl Read) -> io::Result<(String, u64)> {
    let mut hasher = ContentHasher::new();
    let mut buffer = vec![0; 64 * 1024];
    loop {
        match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buffer[..n]),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    let size = hasher.len;
    Ok((hasher.finish(), size))
}

/// A streaming SHA-256 that renders as `sha256:<64 hex>` and counts bytes.
#[derive(Debug, Clone, Default)]
pub struct ContentHasher {
    inner: Sha256,
    len: u64,
}

impl ContentHasher {
    pub fn new() -> ContentHasher {
        ContentHasher::default()
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.inner.update(bytes);
        self.len += bytes.len() as u64;
    }

    /// Bytes hashed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn finish(self) -> String {
        airlock_core::canonical::prefixed_hex("sha256:", &self.inner.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        assert_eq!(
            sha256_hex(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let big = vec![7u8; 200_000];
        assert_eq!(
            sha256_reader(&big[..]).unwrap(),
            (sha256_hex(&big), 200_000)
        );
    }
}
