//! Who may call: the tokens of `auth.tokens`, read from the configuration
//! in force (a token made or revoked with `airlock token` counts at once),
//! and the workspace's own admin token, whose SHA-256 is kept in the state
//! dir and survives restarts until `airlock token rotate` replaces it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use airlock_broker::Runtime;
use airlock_core::config::Role;
use sha2::{Digest, Sha256};

use crate::Caller;

/// The file, in the state dir, that holds the admin token's SHA-256.
pub const ADMIN_TOKEN_FILE: &str = "http-admin-token.sha256";

/// The caller name of the workspace's admin token.
pub const ADMIN_TOKEN_NAME: &str = "local-admin";

/// The tokens a request may present.
#[derive(Clone)]
pub struct Auth {
    runtime: Arc<Runtime>,
    admin: Option<Arc<AdminFile>>,
    /// Bound to loopback: without configured tokens, a request without one
    /// is admitted (an agent on this machine). Never on any other address,
    /// whatever the configuration becomes while serving.
    loopback: bool,
}

impl Auth {
    /// The live configuration's tokens, and the admin token whose hash is
    /// in `admin_file` (if any).
    pub fn new(runtime: Arc<Runtime>, admin_file: Option<PathBuf>, loopback: bool) -> Auth {
        Auth {
            runtime,
            admin: admin_file.map(|path| {
                Arc::new(AdminFile {
                    path,
                    cache: Mutex::new(None),
                })
            }),
            loopback,
        }
    }

    /// Whether every request must present a token.
    pub(crate) fn required(&self) -> bool {
        !self.loopback || !self.runtime.broker().config().auth.tokens.is_empty()
    }

    /// The caller a presented token belongs to. Every candidate is compared,
    /// in constant time.
    pub(crate) fn identify(&self, presented: &str) -> Option<Caller> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut caller = self.identify_digest(&digest)?;
        caller.credential = Some(Credential {
            auth: self.clone(),
            digest,
        });
        Some(caller)
    }

    fn identify_digest(&self, digest: &[u8; 32]) -> Option<Caller> {
        let broker = self.runtime.broker();
        let mut found = None;
        for token in &broker.config().auth.tokens {
            let expected = token
                .sha256
                .strip_prefix("sha256:")
                .unwrap_or(&token.sha256);
            let Ok(expected) = hex::decode(expected) else {
                continue;
            };
            if constant_time_eq(&expected, digest) {
                found = Some(Caller {
                    name: token.name.clone(),
                    user: token.user.clone(),
                    roles: token.roles.clone(),
                    credential: None,
                });
            }
        }
        if let Some(admin) = self.admin.as_ref().and_then(|file| file.digest())
            && constant_time_eq(&admin, digest)
        {
            found = Some(Caller {
                name: ADMIN_TOKEN_NAME.to_owned(),
                user: None,
                roles: vec![Role::Admin],
                credential: None,
            });
        }
        found
    }
}

/// A presented token, to ask later whether it still signs in (a stream
/// stays open for hours; a revoke or a rotate must end it).
#[derive(Clone)]
pub(crate) struct Credential {
    auth: Auth,
    digest: [u8; 32],
}

impl Credential {
    /// Whether the token still belongs to a caller with the same roles.
    pub(crate) fn still_valid(&self, roles: &[Role]) -> bool {
        self.auth
            .identify_digest(&self.digest)
            .is_some_and(|caller| caller.roles == roles)
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential")
    }
}

/// The admin token's hash file, read again whenever it changes (a rotate
/// ends the old token at once).
struct AdminFile {
    path: PathBuf,
    cache: Mutex<Option<Cached>>,
}

/// The file as last read: which file (a rotate renames a new one over
/// it), when it was modified, its length, its digest.
#[derive(Clone, Copy)]
struct Cached {
    inode: u64,
    modified: Option<SystemTime>,
    len: u64,
    digest: Option<[u8; 32]>,
}

impl AdminFile {
    fn digest(&self) -> Option<[u8; 32]> {
        let Ok(metadata) = std::fs::metadata(&self.path) else {
            return None;
        };
        use std::os::unix::fs::MetadataExt as _;
        let (inode, modified, len) = (metadata.ino(), metadata.modified().ok(), metadata.len());
        let mut cache = self.cache.lock().ok()?;
        if let Some(cached) = *cache
            && (cached.inode, cached.modified, cached.len) == (inode, modified, len)
        {
            return cached.digest;
        }
        let digest = read_admin_digest(&self.path);
        *cache = Some(Cached {
            inode,
            modified,
            len,
            digest,
        });
        digest
    }
}

/// The SHA-256 in an admin token file (`sha256:<hex>`), if it holds one.
pub fn read_admin_digest(path: &Path) -> Option<[u8; 32]> {
    let text = std::fs::read_to_string(path).ok()?;
    let hex_digest = text.trim().strip_prefix("sha256:")?;
    hex::decode(hex_digest).ok()?.try_into().ok()
}

/// Makes a new admin token for the state dir `state_dir`: its SHA-256
/// replaces the one kept there (mode 0600, written beside and renamed, so a
/// reader never sees half of it). The token itself is returned, to be shown
/// once; it is kept nowhere.
pub fn new_admin_token(state_dir: &Path) -> std::io::Result<String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let digest = Sha256::digest(token.as_bytes());
    let path = state_dir.join(ADMIN_TOKEN_FILE);
    let temp = state_dir.join(format!(
        ".{ADMIN_TOKEN_FILE}.{}.new",
        uuid::Uuid::new_v4().simple()
    ));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)?;
    file.write_all(format!("sha256:{}\n", hex::encode(digest)).as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temp, &path)?;
    Ok(token)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
