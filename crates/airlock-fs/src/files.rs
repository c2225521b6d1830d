//! The file primitives every change is made of: reading a file by name from an
//! open directory within a size limit, locking a directory, staging new
//! content in a temporary file beside its target and renaming it into place,
//! and the names of those staging files. Nothing here plans or decides: the
//! `change` module builds on these, and the legacy single-file API in `write`
//! on `change`.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, RenameFlags, Stat};
use rustix::io::Errno;
use uuid::Uuid;

use crate::error::FsError;
use crate::sandbox::{Sandbox, SandboxedPath, sync_directory};

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
/// Through an overlay, what a run staged there instead. The second value
/// is the permission bits.
pub(crate) fn read_current(target: &SandboxedPath) -> Result<Option<(Vec<u8>, u32)>, FsError> {
    if let Some(staged) = target.staged() {
        return Ok(staged.map(|file| (file.content.clone(), file.mode.unwrap_or(0o644) & 0o1777)));
    }
    if !target.exists() {
        return Ok(None);
    }
    let (file, stat) = target.open_for_read()?;
    let bytes = read_bounded(file, &stat, target.content_limit(), target.requested())?;
    Ok(Some((bytes, stat.st_mode & 0o1777)))
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

/// `path`'s whole current content and permission bits, `None` when it does
/// not exist (what a code-mode run's first change of a file replaces).
pub fn current_content(sandbox: &Sandbox, path: &str) -> Result<Option<(Vec<u8>, u32)>, FsError> {
    let target = sandbox.resolve("path", path, crate::Access::Write)?;
    read_current(&target)
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
