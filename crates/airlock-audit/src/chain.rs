//! The hash of one record: pure functions over bytes, shared by append and verify.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::AuditError;

/// The prefix of an `event_hash` computed with plain SHA-256 (and of every `prev_hash`
/// of the first record, [`crate::ZERO_HASH`]).
pub const SHA256_PREFIX: &str = "sha256:";

/// The prefix of an `event_hash` computed with HMAC-SHA256 under the configured key.
pub const HMAC_PREFIX: &str = "hmac-sha256:";

/// Computes `event_hash` from a record's `prev_hash` and its canonical text.
#[derive(Clone)]
pub(crate) struct ChainHasher {
    /// The HMAC already keyed, cloned for each record so the key schedule runs once.
    keyed: Option<Hmac<Sha256>>,
}

impl ChainHasher {
    pub(crate) fn new(key: Option<&[u8]>) -> Result<Self, AuditError> {
        let keyed = match key {
            None => None,
            Some([]) => {
                return Err(AuditError::InvalidKey(
                    "the hmac key is empty; configure a key or none".to_owned(),
                ));
            }
            Some(key) => Some(
                Hmac::<Sha256>::new_from_slice(key)
                    .map_err(|error| AuditError::InvalidKey(error.to_string()))?,
            ),
        };
        Ok(ChainHasher { keyed })
    }

    pub(crate) fn is_keyed(&self) -> bool {
        self.keyed.is_some()
    }

    pub(crate) fn prefix(&self) -> &'static str {
        if self.is_keyed() {
            HMAC_PREFIX
        } else {
            SHA256_PREFIX
        }
    }

    fn digest(&self, prev_hash: &str, canonical: &[u8]) -> [u8; 32] {
        match &self.keyed {
            Some(keyed) => {
                let mut mac = keyed.clone();
                mac.update(prev_hash.as_bytes());
                mac.update(canonical);
                mac.finalize().into_bytes().into()
            }
            None => {
                let mut hasher = Sha256::new();
                hasher.update(prev_hash.as_bytes());
                hasher.update(canonical);
                hasher.finalize().into()
            }
        }
    }

    /// `sha256:<hex>` or `hmac-sha256:<hex>` of `prev_hash` followed by `canonical`.
    pub(crate) fn event_hash(&self, prev_hash: &str, canonical: &[u8]) -> String {
        let mut text = String::with_capacity(HMAC_PREFIX.len() + 64);
        text.push_str(self.prefix());
        text.push_str(&hex::encode(self.digest(prev_hash, canonical)));
        text
    }

    /// Whether `claimed` is the event hash of `prev_hash` followed by `canonical`,
    /// without allocating.
    pub(crate) fn matches(&self, prev_hash: &str, canonical: &[u8], claimed: &str) -> bool {
        let Some(claimed_hex) = claimed.strip_prefix(self.prefix()) else {
            return false;
        };
        let mut computed_hex = [0u8; 64];
        hex::encode_to_slice(self.digest(prev_hash, canonical), &mut computed_hex).is_ok()
            && claimed_hex.as_bytes() == computed_hex
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_keyed_hashes_are_prefixed_and_differ() {
        let plain = ChainHasher::new(None).unwrap();
        let keyed = ChainHasher::new(Some(b"k")).unwrap();
        let plain_hash = plain.event_hash(crate::ZERO_HASH, b"{}");
        let keyed_hash = keyed.event_hash(crate::ZERO_HASH, b"{}");
        let mut input = crate::ZERO_HASH.as_bytes().to_vec();
        input.extend_from_slice(b"{}");
        assert_eq!(plain_hash, airlock_core::canonical::sha256_hex(&input));
        assert!(keyed_hash.starts_with("hmac-sha256:"));
        assert_eq!(keyed_hash.len(), "hmac-sha256:".len() + 64);
        assert!(plain.matches(crate::ZERO_HASH, b"{}", &plain_hash));
        assert!(!plain.matches(crate::ZERO_HASH, b"{ }", &plain_hash));
        assert!(keyed.matches(crate::ZERO_HASH, b"{}", &keyed_hash));
        assert!(!ChainHasher::new(Some(b"other")).unwrap().matches(
            crate::ZERO_HASH,
            b"{}",
            &keyed_hash
        ));
        assert!(ChainHasher::new(Some(b"")).is_err());
    }
}
