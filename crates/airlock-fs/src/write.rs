//! `write_file` in two halves, so a human can decide in between (spec 000):
//!
//! - [`prepare_write`] has no side effects. It resolves and checks the path,
//!   reads the current content, and returns a [`WritePlan`]: the unified diff a
//!   human approves, the hash of the content it was made against, and the new
//!   content. The plan is plain data (serde) so it can be stored and applied by
//!   another process later.
//! - [`commit_write`] applies a plan. It resolves the path afresh (every check
//!   again), refuses with `stale` when the file is no longer what the plan was
//!   made against, re-derives the diff so that what is written is exactly what
//!   was shown, and writes atomically: a temporary file in the same directory
//!   (`O_CREAT | O_EXCL | O_NOFOLLOW`), fsync, the old file's permission bits,
//!   `renameat` over the target, fsync of the directory. The check and the
//!   rename happen under an exclusive `flock` on the directory, so of many
//!   plans made against the same content exactly one applies and the others
//!   are `stale`, whichever threads or processes apply them.
//!
//! A create re-checks that the file still does not exist; if it appeared in the
//! meantime the answer is `stale` (not `file_exists`): the proposal was made
//! against a world that changed, which is what `stale` means everywhere else.
//! The final rename of a create uses `RENAME_NOREPLACE`, so a file appearing in
//! the last instant is not overwritten either.
//!
//! For undo, [`snapshot_before`] returns the content a plan is about to
//! replace, and [`restore`] puts it back (or removes a created file) if the
//! file still holds what was applied, else `conflict`.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, RenameFlags, Stat};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::change::{ChangePlan, CommitOptions, UndoFile};
use crate::error::FsError;
use crate::hash::sha256_hex;
use crate::sandbox::{Access, Sandbox, SandboxedPath, sync_directory};

/// Arguments of `write_file`, as the tool call carries them. The new content
/// is `content` (text, or standard base64 with `encoding: bytes`: spec 003's
/// `inline_text` and `inline_bytes`), or `blob_ref`, a blob in airlock's store
/// (spec 003's `blob_ref`, e.g. a large output read earlier); exactly one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    pub path: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub encoding: crate::read::Encoding,
    #[serde(default)]
    pub blob_ref: Option<String>,
    #[serde(default)]
    pub mode: WriteMode,
    /// Create missing parent directories (each must obey the create allowlist).
    #[serde(default)]
    pub create_parents: bool,
}

impl WriteParams {
    /// Parses the JSON arguments of a call; a bad argument is `invalid_input`.
    pub fn from_args(args: &serde_json::Value) -> Result<WriteParams, FsError> {
        WriteParams::deserialize(args).map_err(|error| FsError::InvalidInput {
            message: error.to_string(),
        })
    }

    /// A text write of `content` to `path` (overwrite, no parents).
    pub fn text(path: &str, content: &str) -> WriteParams {
        WriteParams {
            path: path.to_owned(),
            content: Some(content.to_owned()),
            encoding: crate::read::Encoding::Utf8,
            blob_ref: None,
            mode: WriteMode::Overwrite,
            create_parents: false,
        }
    }

    /// The bytes to write.
    fn bytes(&self, sandbox: &Sandbox) -> Result<Vec<u8>, FsError> {
        use base64::Engine as _;
        let invalid = |message: &str| FsError::InvalidInput {
            message: message.to_owned(),
        };
        match (&self.content, &self.blob_ref) {
            (Some(_), Some(_)) => Err(invalid("give content or blob_ref, not both")),
            (None, None) => Err(invalid("content (or blob_ref) is required")),
            (Some(text), None) => match self.encoding {
                crate::read::Encoding::Utf8 => Ok(text.clone().into_bytes()),
                crate::read::Encoding::Bytes => base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|error| FsError::InvalidInput {
                        message: format!("content is not valid base64: {error}"),
                    }),
            },
            (None, Some(blob_ref)) => {
                let dir = sandbox
                    .blob_dir()
                    .ok_or_else(|| invalid("this workspace has no blob store"))?;
                crate::blob::read_blob(dir, blob_ref)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Create the file or replace its content.
    #[default]
    Overwrite,
    /// Only create; an existing file is `file_exists`.
    CreateNew,
}

/// A prepared write, waiting for a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WritePlan {
    /// The requested path, normalized, root-relative.
    pub path: String,
    /// What `path` resolved to when the plan was made (differs through a
    /// symlink). Applying refuses with `stale` if it resolves elsewhere then.
    pub resolved_path: String,
    /// The file did not exist.
    pub created: bool,
    /// Hash of the content the plan replaces; `None` for a create.
    pub base_hash: Option<String>,
    #[serde(with = "crate::change::content::required")]
    pub new_content: Vec<u8>,
    /// Unified diff, `--- a/<path>` / `+++ b/<path>` (`--- /dev/null` for a
    /// create); only the headers when nothing changes.
    pub diff: String,
    /// Hash of `diff`.
    pub patch_hash: String,
    pub create_parents: bool,
}

impl WritePlan {
    /// `CREATE FILE <path>` or `MODIFY <path>`, with ` (-> <resolved>)` when a
    /// symlink makes the write land elsewhere.
    pub fn summary(&self) -> String {
        let verb = if self.created {
            "CREATE FILE"
        } else {
            "MODIFY"
        };
        if self.resolved_path == self.path {
            format!("{verb} {}", self.path)
        } else {
            format!("{verb} {} (-> {})", self.path, self.resolved_path)
        }
    }

    /// The diff, cut after `max_chars` characters (never inside a character)
    /// with a closing line saying so.
    pub fn diff_preview(&self, max_chars: u64) -> String {
        crate::change::preview(&self.diff, max_chars)
    }
}

/// The `data` of an applied write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteApplied {
    pub path: String,
    pub created: bool,
    /// `None` when the file was created.
    pub before_hash: Option<String>,
    pub after_hash: String,
}

/// What [`restore`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreOutcome {
    pub path: String,
    /// The file was removed (the undone write had created it).
    pub removed: bool,
    /// Hash of the content that was replaced or removed.
    pub before_hash: String,
    /// Hash of the restored content; `None` when removed.
    pub after_hash: Option<String>,
}

/// Plans a write without touching anything.
pub fn prepare_write(sandbox: &Sandbox, params: &WriteParams) -> Result<WritePlan, FsError> {
    let content = params.bytes(sandbox)?;
    check_size(sandbox, content.len() as u64)?;
    let target = sandbox.resolve("path", &params.path, Access::Write)?;
    // Nothing of a file that must not exist is read.
    if target.kind() == Some(crate::FileKind::File) && params.mode == WriteMode::CreateNew {
        return Err(FsError::FileExists {
            path: target.requested().to_owned(),
        });
    }
    let current = read_current(&target)?;
    if current.is_none() && !params.create_parents && !target.missing_parents().is_empty() {
        return Err(FsError::ParentNotFound {
            path: target.requested().to_owned(),
        });
    }
    let old = current.as_ref().map(|(bytes, _)| bytes.as_slice());
    // The diff names the file that really changes (symlinks resolved).
    let diff = unified_diff(target.resolved(), old, &content);
    Ok(WritePlan {
        path: target.requested().to_owned(),
        resolved_path: target.resolved().to_owned(),
        created: current.is_none(),
        base_hash: old.map(sha256_hex),
        new_content: content,
        patch_hash: sha256_hex(&diff),
        diff,
        create_parents: params.create_parents,
    })
}

/// Applies a plan, if the file is still what it was made against (through
/// [`crate::commit`], the engine every write-class tool uses).
pub fn commit_write(sandbox: &Sandbox, plan: &WritePlan) -> Result<WriteApplied, FsError> {
    let applied = crate::change::commit(
        sandbox,
        &ChangePlan::from(plan.clone()),
        CommitOptions::default(),
    )?;
    let after_hash = sha256_hex(&plan.new_content);
    let before_hash = applied.into_iter().next().and_then(|file| file.before_hash);
    Ok(WriteApplied {
        path: plan.path.clone(),
        created: plan.created,
        before_hash,
        after_hash,
    })
}

/// The content `plan` would replace (`None` for a create), checked against the
/// plan's base hash like [`commit_write`] does, so it is a faithful snapshot.
pub fn snapshot_before(sandbox: &Sandbox, plan: &WritePlan) -> Result<Option<Vec<u8>>, FsError> {
    let mut before = crate::change::snapshot(sandbox, &ChangePlan::from(plan.clone()))?;
    Ok(before.pop().flatten().map(|(bytes, _)| bytes))
}

/// Undoes a write: if `path` still hashes to `expected_current_hash`, puts
/// `before` back atomically (keeping the permission bits), or removes the file
/// when `before` is `None` (the write created it). Parent directories created
/// by the write stay. Anything else is `conflict`, and nothing changes.
pub fn restore(
    sandbox: &Sandbox,
    path: &str,
    expected_current_hash: &str,
    before: Option<&[u8]>,
) -> Result<RestoreOutcome, FsError> {
    let file = UndoFile {
        path: path.to_owned(),
        expected: Some(expected_current_hash.to_owned()),
        restore: before.map(<[u8]>::to_vec),
        mode: None,
    };
    let mut done = crate::change::undo(sandbox, &[file], CommitOptions::default())?;
    let done = done.pop().ok_or_else(|| FsError::Conflict {
        path: path.to_owned(),
    })?;
    Ok(RestoreOutcome {
        path: done.path,
        removed: before.is_none(),
        before_hash: expected_current_hash.to_owned(),
        after_hash: done.after_hash,
    })
}

pub(crate) fn check_size(sandbox: &Sandbox, size: u64) -> Result<(), FsError> {
    let limit = sandbox.config().max_write_bytes_hard;
    if size > limit {
        return Err(FsError::TooLarge {
            what: "content".to_owned(),
            size,
            limit,
        });
    }
    Ok(())
}

/// Takes an exclusive `flock` on `directory`, held (until the returned
/// descriptor is dropped) while a file in it is checked and replaced, so that
/// two appliers, in threads or in processes, never both pass the base-hash
/// check of the same file.
pub(crate) fn lock_directory(directory: &OwnedFd, path: &str) -> Result<OwnedFd, FsError> {
    let locked = rustix::fs::openat(
        directory,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| FsError::io(format!("cannot open the directory of `{path}`"), errno))?;
    loop {
        match rustix::fs::flock(&locked, FlockOperation::LockExclusive) {
            Ok(()) => return Ok(locked),
            Err(Errno::INTR) => {}
            Err(errno) => {
                return Err(FsError::io(
                    format!("cannot lock the directory of `{path}`"),
                    errno,
                ));
            }
        }
    }
}

/// The content and metadata of `name` in `directory`, not following a link;
/// `None` if there is no such name.
pub(crate) fn read_named(
    directory: &OwnedFd,
    name: &str,
    path: &str,
    limit: u64,
) -> Result<Option<(Vec<u8>, Stat)>, FsError> {
    let Some((file, stat)) = open_named(directory, name, path)? else {
        return Ok(None);
    };
    let bytes = read_bounded(file, &stat, limit, path)?;
    Ok(Some((bytes, stat)))
}

/// Opens the regular file `name` in `directory` (no symlink, no blocking),
/// or `None` when it does not exist.
fn open_named(
    directory: &OwnedFd,
    name: &str,
    path: &str,
) -> Result<Option<(File, Stat)>, FsError> {
    let fd = match rustix::fs::openat(
        directory,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => {
            return Err(FsError::Changed {
                path: path.to_owned(),
            });
        }
        Err(Errno::NXIO) => {
            return Err(FsError::NotRegularFile {
                path: path.to_owned(),
            });
        }
        Err(errno) => return Err(FsError::io(format!("cannot open `{path}`"), errno)),
    };
    let stat = rustix::fs::fstat(&fd)
        .map_err(|errno| FsError::io(format!("cannot stat `{path}`"), errno))?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => {}
        FileType::Directory => {
            return Err(FsError::IsDirectory {
                path: path.to_owned(),
            });
        }
        _ => {
            return Err(FsError::NotRegularFile {
                path: path.to_owned(),
            });
        }
    }
    Ok(Some((File::from(fd), stat)))
}

/// The hash of the regular file `name` in `directory`, read in pieces (never
/// held in memory whole), or `None` when it does not exist.
pub(crate) fn hash_named(
    directory: &OwnedFd,
    name: &str,
    path: &str,
) -> Result<Option<String>, FsError> {
    let Some((file, _)) = open_named(directory, name, path)? else {
        return Ok(None);
    };
    let (hash, _) = crate::sha256_reader(file)
        .map_err(|error| FsError::io(format!("cannot read `{path}`"), error))?;
    Ok(Some(hash))
}

/// The whole current content and its metadata, or `None` if absent. A
/// change keeps what it replaces (for the diff and for undo), so a file over
/// the content limit is `too_large` before a byte of it is read.
pub(crate) fn read_current(target: &SandboxedPath) -> Result<Option<(Vec<u8>, Stat)>, FsError> {
    if !target.exists() {
        return Ok(None);
    }
    let (file, stat) = target.open_for_read()?;
    let bytes = read_bounded(file, &stat, target.content_limit(), target.requested())?;
    Ok(Some((bytes, stat)))
}

/// All of an open regular file, refused as `too_large` when it holds more than
/// `limit` bytes: by its size first, then by what is read (it may grow).
pub(crate) fn read_bounded(
    file: File,
    stat: &Stat,
    limit: u64,
    path: &str,
) -> Result<Vec<u8>, FsError> {
    let too_large = |size: u64| FsError::TooLarge {
        what: format!("`{path}`"),
        size,
        limit,
    };
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size > limit {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0) + 1);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|error| FsError::io(format!("cannot read `{path}`"), error))?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

pub(crate) fn unified_diff(path: &str, old: Option<&[u8]>, new: &[u8]) -> String {
    let from = old.map(|_| path);
    crate::change::file_diff(from, Some(path), old, Some(new))
}

/// Permission bits to keep when replacing a file. Set-user-ID and set-group-ID
/// are dropped: rewritten content must not inherit them.
pub(crate) fn permission_bits(stat: &Stat) -> Mode {
    Mode::from_raw_mode(stat.st_mode & 0o1777)
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Placement {
    /// Replace the existing file, giving the new one these permission bits.
    Replace { mode: Mode },
    /// The name must still be free; the new file gets these permission bits
    /// (`None`: 0666 less the umask).
    CreateNew { mode: Option<Mode> },
}

/// Writes `bytes` as `name` in `directory`, atomically: staged in a
/// temporary file, then renamed into place.
pub(crate) fn write_atomically(
    directory: &OwnedFd,
    name: &str,
    temp: &str,
    bytes: &[u8],
    placement: Placement,
    path: &str,
) -> Result<(), FsError> {
    let temp = stage(directory, temp, bytes, placement, path)?;
    if let Err(error) = place(directory, &temp, name, placement, path) {
        // Best effort: the temporary file is debris, and the error that
        // matters is the one above.
        let _ = rustix::fs::unlinkat(directory, temp.as_str(), AtFlags::empty());
        return Err(error);
    }
    sync_directory(directory)
}

/// The prefix of the temporary files a write stages next to its target.
pub(crate) const STAGING_PREFIX: &str = ".airlock-tmp-";

/// Whether a file name is one of airlock's staging files: never listed or
/// searched, and removed by recovery when a crash left it behind.
pub(crate) fn is_staging_name(name: &str) -> bool {
    name.strip_prefix(STAGING_PREFIX)
        .is_some_and(|rest| rest.len() == 32 && rest.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A new staging file name.
pub(crate) fn staging_name() -> String {
    format!("{STAGING_PREFIX}{}", Uuid::new_v4().simple())
}

/// Writes `bytes` to a new temporary file `temp` (a [`staging_name`]) in
/// `directory` (with the placement's permission bits), fsynced; returns its
/// name.
pub(crate) fn stage(
    directory: &OwnedFd,
    temp: &str,
    bytes: &[u8],
    placement: Placement,
    path: &str,
) -> Result<String, FsError> {
    let temp = temp.to_owned();
    let create_mode = match placement {
        Placement::Replace { mode } => mode,
        Placement::CreateNew { mode } => mode.unwrap_or(Mode::from_raw_mode(0o666)),
    };
    let fd = rustix::fs::openat(
        directory,
        temp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        create_mode,
    )
    .map_err(|errno| {
        FsError::io(
            format!("cannot create a temporary file next to `{path}`"),
            errno,
        )
    })?;
    let mut file = File::from(fd);
    if let Err(error) = fill(&mut file, bytes, placement) {
        let _ = rustix::fs::unlinkat(directory, temp.as_str(), AtFlags::empty());
        return Err(FsError::io(format!("cannot write `{path}`"), error));
    }
    Ok(temp)
}

fn fill(file: &mut File, bytes: &[u8], placement: Placement) -> io::Result<()> {
    file.write_all(bytes)?;
    if let Placement::Replace { mode } | Placement::CreateNew { mode: Some(mode) } = placement {
        // The umask may have taken bits away at creation.
        rustix::fs::fchmod(&*file, mode)?;
    }
    file.sync_all()
}

pub(crate) fn place(
    directory: &OwnedFd,
    temp: &str,
    name: &str,
    placement: Placement,
    path: &str,
) -> Result<(), FsError> {
    let result = match placement {
        Placement::Replace { .. } => rustix::fs::renameat(directory, temp, directory, name),
        Placement::CreateNew { .. } => {
            match rustix::fs::renameat_with(
                directory,
                temp,
                directory,
                name,
                RenameFlags::NOREPLACE,
            ) {
                // A file system without RENAME_NOREPLACE: a hard link is just as
                // exclusive.
                Err(Errno::INVAL | Errno::NOSYS) => {
                    rustix::fs::linkat(directory, temp, directory, name, AtFlags::empty()).map(
                        |()| {
                            // The content is in place under `name`; the extra
                            // name is debris if it cannot be removed.
                            let _ = rustix::fs::unlinkat(directory, temp, AtFlags::empty());
                        },
                    )
                }
                result => result,
            }
        }
    };
    result.map_err(|errno| match errno {
        Errno::EXIST => FsError::Stale {
            path: path.to_owned(),
            reason: "the file was created since".to_owned(),
        },
        Errno::ISDIR => FsError::IsDirectory {
            path: path.to_owned(),
        },
        errno => FsError::io(format!("cannot move the new content into `{path}`"), errno),
    })
}

/// The hash of `path`'s current content, or `None` when it does not exist. Used
/// to tell, after a crash, whether an interrupted apply reached its rename.
pub fn current_hash(sandbox: &Sandbox, path: &str) -> Result<Option<String>, FsError> {
    let target = sandbox.resolve("path", path, crate::Access::Read)?;
    if !target.exists() {
        return Ok(None);
    }
    let (file, _) = target.open_regular()?;
    let (hash, _) = crate::sha256_reader(file)
        .map_err(|error| FsError::io(format!("cannot read {path}"), error))?;
    Ok(Some(hash))
}
