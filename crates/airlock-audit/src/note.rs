//! Checkpoints as C2SP signed notes (`c2sp.org/signed-note`,
//! `c2sp.org/tlog-checkpoint`), so that witness tooling can read and
//! cosign them, and the instance's Ed25519 key that signs them.
//!
//! ```text
//! example.com/airlock/3f9c…            origin
//! 1000                                 tree size
//! CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=   root hash (base64)
//!
//! — example.com/airlock/3f9c… Az3grlgt…        key id ‖ Ed25519 signature
//! ```
//!
//! A key is identified by its name and a 4-byte id, `SHA-256(name ‖ 0x0A ‖
//! 0x01 ‖ public key)[:4]`; its verifier key is
//! `<name>+<hex id>+<base64(0x01 ‖ public key)>`, and the key file holds
//! `PRIVATE+KEY+<name>+<hex id>+<base64(0x01 ‖ seed)>` (the form Go's
//! `sumdb/note` reads).

use std::fmt;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};
use sha2::{Digest, Sha256};

use crate::AuditError;
use crate::merkle::Hash;

/// The signature type byte of Ed25519 in signed notes.
const ED25519_TYPE: u8 = 0x01;
/// The em dash and space that start a signature line.
const SIGNATURE_PREFIX: &str = "\u{2014} ";
/// What the key file's line starts with.
const PRIVATE_PREFIX: &str = "PRIVATE+KEY+";
/// A note larger than this is refused unread.
pub const MAX_NOTE_BYTES: usize = 1 << 20;
/// Signature lines beyond this many are refused.
const MAX_SIGNATURES: usize = 100;

/// Why a note, a checkpoint or a key cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    #[error("not a signed note: {0}")]
    Malformed(String),
    #[error("not a checkpoint: {0}")]
    NotCheckpoint(String),
    #[error("invalid key name {0:?}: it must be non-empty, without spaces or '+'")]
    BadName(String),
    #[error("not a verifier key (name+hexid+base64key): {0}")]
    BadVerifier(String),
    #[error("the note has no signature by {name}+{id:08x}")]
    NotSigned { name: String, id: u32 },
    #[error("the signature by {name}+{id:08x} does not verify: the note was changed or forged")]
    BadSignature { name: String, id: u32 },
}

/// A name for a temporary file that no other process picks: a hash of the
/// new key's seed (never the seed itself).
fn uuid_like(seed: &[u8; 32]) -> String {
    let digest = Sha256::digest(seed);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks a key name (and a checkpoint origin): non-empty, no Unicode space,
/// no `+`, no control character.
pub fn check_name(name: &str) -> Result<(), NoteError> {
    if name.is_empty()
        || name
            .chars()
            .any(|c| c.is_whitespace() || c == '+' || c.is_control())
    {
        return Err(NoteError::BadName(name.to_owned()));
    }
    Ok(())
}

fn key_id(name: &str, public: &[u8]) -> u32 {
    let mut hasher = Sha256::new();
    hasher.update(name.as_bytes());
    hasher.update([b'\n', ED25519_TYPE]);
    hasher.update(public);
    let digest = hasher.finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// An Ed25519 signing key with its name: the instance's audit key.
pub struct SigningKey {
    name: String,
    pair: Ed25519KeyPair,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("SigningKey")
            .field("verifier", &self.verifier().to_string())
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A key from its 32-byte seed.
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<SigningKey, NoteError> {
        check_name(name)?;
        let pair = Ed25519KeyPair::from_seed_unchecked(seed)
            .map_err(|_| NoteError::Malformed("an Ed25519 seed".into()))?;
        Ok(SigningKey {
            name: name.to_owned(),
            pair,
        })
    }

    /// Reads the key file at `path`, or creates it (mode 0600, never
    /// replacing one that appears meanwhile) with a new random key named
    /// `name`. The name of an existing key is the one it was made with.
    pub fn load_or_create(path: &Path, name: &str) -> Result<SigningKey, AuditError> {
        match std::fs::read_to_string(path) {
            Ok(text) => return Self::parse_file(path, &text),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(AuditError::io(path, error)),
        }
        let mut seed = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut seed)
            .map_err(|_| AuditError::InvalidKey("no randomness for a new audit key".into()))?;
        let key = SigningKey::from_seed(name, &seed)
            .map_err(|error| AuditError::InvalidKey(error.to_string()))?;
        let line = format!(
            "{PRIVATE_PREFIX}{}+{:08x}+{}\n",
            key.name,
            key.id(),
            BASE64.encode([&[ED25519_TYPE][..], &seed[..]].concat())
        );
        // Written whole to a file of its own, then linked into place: a
        // process starting at the same moment sees no key or a whole one,
        // never a half-written file, and never replaces one.
        let temporary = path.with_file_name(format!(
            ".{}.{}.tmp",
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("audit.key"),
            uuid_like(&seed)
        ));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
            .and_then(|mut file| {
                file.write_all(line.as_bytes())?;
                file.sync_all()
            });
        if let Err(error) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(AuditError::io(&temporary, error));
        }
        let linked = std::fs::hard_link(&temporary, path);
        let _ = std::fs::remove_file(&temporary);
        match linked {
            Ok(()) => {
                // The new name is durable too: after a power loss the key
                // is still there, not silently made again.
                if let Some(dir) = path.parent()
                    && let Ok(dir) = std::fs::File::open(dir)
                {
                    dir.sync_all()
                        .map_err(|error| AuditError::io(path, error))?;
                }
                Ok(key)
            }
            // Another process made it first: that one is the key.
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                let text =
                    std::fs::read_to_string(path).map_err(|error| AuditError::io(path, error))?;
                Self::parse_file(path, &text)
            }
            Err(error) => Err(AuditError::io(path, error)),
        }
    }

    /// Reads an existing key file.
    pub fn load(path: &Path) -> Result<SigningKey, AuditError> {
        let text = std::fs::read_to_string(path).map_err(|error| AuditError::io(path, error))?;
        Self::parse_file(path, &text)
    }

    fn parse_file(path: &Path, text: &str) -> Result<SigningKey, AuditError> {
        let bad = |why: &str| AuditError::InvalidKey(format!("{}: {why}", path.display()));
        let rest = text
            .trim_end_matches('\n')
            .strip_prefix(PRIVATE_PREFIX)
            .ok_or_else(|| bad("not an audit key file (PRIVATE+KEY+name+id+key)"))?;
        // A name has no '+'; base64 may.
        let mut parts = rest.splitn(3, '+');
        let (Some(name), Some(id), Some(encoded)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("not an audit key file (PRIVATE+KEY+name+id+key)"));
        };
        let bytes = BASE64
            .decode(encoded)
            .map_err(|_| bad("the key is not base64"))?;
        let Some((&ED25519_TYPE, seed)) = bytes.split_first() else {
            return Err(bad("not an Ed25519 key"));
        };
        let seed: [u8; 32] = seed
            .try_into()
            .map_err(|_| bad("the seed is not 32 bytes"))?;
        let key = SigningKey::from_seed(name, &seed).map_err(|error| bad(&error.to_string()))?;
        if format!("{:08x}", key.id()) != id {
            return Err(bad("the key id does not match the key"));
        }
        Ok(key)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn public(&self) -> [u8; 32] {
        let mut public = [0u8; 32];
        public.copy_from_slice(self.pair.public_key().as_ref());
        public
    }

    /// The key id (the 4 bytes every signature starts with).
    pub fn id(&self) -> u32 {
        key_id(&self.name, &self.public())
    }

    /// What anyone needs to check this key's notes.
    pub fn verifier(&self) -> Verifier {
        Verifier {
            name: self.name.clone(),
            id: self.id(),
            public: self.public(),
        }
    }

    /// The signature line for `text`: `— <name> <base64(id ‖ signature)>\n`.
    pub fn signature_line(&self, text: &str) -> String {
        let signature = self.pair.sign(text.as_bytes());
        let mut bytes = Vec::with_capacity(4 + 64);
        bytes.extend_from_slice(&self.id().to_be_bytes());
        bytes.extend_from_slice(signature.as_ref());
        format!("{SIGNATURE_PREFIX}{} {}\n", self.name, BASE64.encode(bytes))
    }

    /// `text` (ending in `\n`) as a signed note.
    pub fn sign(&self, text: &str) -> String {
        format!("{text}\n{}", self.signature_line(text))
    }
}

/// A verifier key: a name, a key id and an Ed25519 public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    pub name: String,
    pub id: u32,
    pub public: [u8; 32],
}

impl fmt::Display for Verifier {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut key = Vec::with_capacity(33);
        key.push(ED25519_TYPE);
        key.extend_from_slice(&self.public);
        write!(
            formatter,
            "{}+{:08x}+{}",
            self.name,
            self.id,
            BASE64.encode(key)
        )
    }
}

impl std::str::FromStr for Verifier {
    type Err = NoteError;

    /// `<name>+<hex id>+<base64(0x01 ‖ key)>`; the id must be the key's.
    fn from_str(text: &str) -> Result<Verifier, NoteError> {
        let text = text.trim();
        let bad = |why: &str| NoteError::BadVerifier(why.to_owned());
        // A name has no '+'; base64 may.
        let mut parts = text.splitn(3, '+');
        let (Some(name), Some(id), Some(encoded)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("three parts joined by '+' are needed"));
        };
        check_name(name)?;
        if id.len() != 8 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("the key id is not 8 hex digits"));
        }
        let id = u32::from_str_radix(id, 16).map_err(|_| bad("the key id is not hex"))?;
        let bytes = BASE64
            .decode(encoded)
            .map_err(|_| bad("the key is not base64"))?;
        let Some((&ED25519_TYPE, public)) = bytes.split_first() else {
            return Err(bad("not an Ed25519 key (type 0x01)"));
        };
        let public: [u8; 32] = public
            .try_into()
            .map_err(|_| bad("an Ed25519 key is 32 bytes"))?;
        if key_id(name, &public) != id {
            return Err(bad("the key id does not match the name and key"));
        }
        Ok(Verifier {
            name: name.to_owned(),
            id,
            public,
        })
    }
}

/// A note's text and signature lines, parsed but not yet verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The signed text, ending in `\n`.
    pub text: String,
    /// `(key name, key id, signature bytes)`.
    pub signatures: Vec<(String, u32, Vec<u8>)>,
}

impl Note {
    /// Parses a signed note: valid UTF-8 without control characters other
    /// than `\n`, the text separated from the signature lines by the last
    /// blank line.
    pub fn parse(note: &str) -> Result<Note, NoteError> {
        let bad = |why: &str| NoteError::Malformed(why.to_owned());
        if note.len() > MAX_NOTE_BYTES {
            return Err(bad("larger than 1 MiB"));
        }
        if note.chars().any(|c| c.is_control() && c != '\n') {
            return Err(bad("control characters other than newlines"));
        }
        if !note.ends_with('\n') {
            return Err(bad("it does not end with a newline"));
        }
        let split = note
            .rfind("\n\n")
            .ok_or_else(|| bad("no blank line before the signatures"))?;
        let text = &note[..=split];
        let mut signatures = Vec::new();
        for line in note[split + 2..].lines() {
            if signatures.len() == MAX_SIGNATURES {
                return Err(bad("more than 100 signatures"));
            }
            let rest = line
                .strip_prefix(SIGNATURE_PREFIX)
                .ok_or_else(|| bad("a signature line must start with an em dash and a space"))?;
            let (name, encoded) = rest
                .split_once(' ')
                .ok_or_else(|| bad("a signature line is '— name signature'"))?;
            check_name(name)?;
            let bytes = BASE64
                .decode(encoded)
                .map_err(|_| bad("a signature is not base64"))?;
            if bytes.len() < 5 {
                return Err(bad("a signature is too short"));
            }
            let id = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            signatures.push((name.to_owned(), id, bytes[4..].to_vec()));
        }
        if signatures.is_empty() {
            return Err(bad("no signature lines"));
        }
        Ok(Note {
            text: text.to_owned(),
            signatures,
        })
    }

    /// The note's text if `verifier` signed it. Signatures by other keys are
    /// ignored; one by this key that fails rejects the note.
    pub fn verify(&self, verifier: &Verifier) -> Result<&str, NoteError> {
        let mut found = false;
        for (name, id, signature) in &self.signatures {
            if name != &verifier.name || *id != verifier.id {
                continue;
            }
            found = true;
            UnparsedPublicKey::new(&ED25519, &verifier.public)
                .verify(self.text.as_bytes(), signature)
                .map_err(|_| NoteError::BadSignature {
                    name: verifier.name.clone(),
                    id: verifier.id,
                })?;
        }
        if found {
            Ok(&self.text)
        } else {
            Err(NoteError::NotSigned {
                name: verifier.name.clone(),
                id: verifier.id,
            })
        }
    }
}

/// A tree head as the body of a checkpoint note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub origin: String,
    pub size: u64,
    pub root: Hash,
}

impl Checkpoint {
    /// The note text: origin, size and base64 root, each on its line.
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            BASE64.encode(self.root)
        )
    }

    /// Reads a checkpoint body (extension lines are allowed and ignored).
    pub fn parse(text: &str) -> Result<Checkpoint, NoteError> {
        let bad = |why: &str| NoteError::NotCheckpoint(why.to_owned());
        let mut lines = text.split('\n');
        let origin = lines.next().unwrap_or_default();
        let size = lines.next().ok_or_else(|| bad("no tree size line"))?;
        let root = lines.next().ok_or_else(|| bad("no root hash line"))?;
        if origin.is_empty() {
            return Err(bad("the origin line is empty"));
        }
        if size.is_empty()
            || !size.bytes().all(|b| b.is_ascii_digit())
            || (size.len() > 1 && size.starts_with('0'))
        {
            return Err(bad("the tree size is not a decimal without leading zeroes"));
        }
        let size: u64 = size
            .parse()
            .map_err(|_| bad("the tree size is too large"))?;
        let root: Hash = BASE64
            .decode(root)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(|| bad("the root hash is not 32 bytes of base64"))?;
        Ok(Checkpoint {
            origin: origin.to_owned(),
            size,
            root,
        })
    }

    /// Parses and verifies a signed checkpoint note.
    pub fn open(note: &str, verifier: &Verifier) -> Result<Checkpoint, NoteError> {
        let parsed = Note::parse(note)?;
        Checkpoint::parse(parsed.verify(verifier)?)
    }
}
