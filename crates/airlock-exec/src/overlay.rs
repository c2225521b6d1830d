//! The file changes a previewed run made, read from the overlay's upper
//! directory: a file there is new or rewritten, a whiteout (a character
//! device 0/0) deletes what the workspace has at that path, an opaque
//! directory replaces the workspace's directory of that name.

use std::collections::BTreeSet;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// One change a previewed command would make, by workspace-relative path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A regular file created, or whose content or executable bit changed.
    Write {
        path: PathBuf,
        content: Vec<u8>,
        executable: bool,
    },
    /// A file deleted.
    Delete { path: PathBuf },
    /// Something the change engine does not carry: a symbolic link, a
    /// special file, a new empty directory.
    Unsupported { path: PathBuf, what: &'static str },
}

impl Change {
    pub fn path(&self) -> &Path {
        match self {
            Change::Write { path, .. }
            | Change::Delete { path }
            | Change::Unsupported { path, .. } => path,
        }
    }
}

/// The changes recorded in `upper` over the workspace at `root`, in path
/// order; nothing under a `hidden` path.
pub(crate) fn changes(root: &Path, upper: &Path, hidden: &[PathBuf]) -> io::Result<Vec<Change>> {
    let mut out = Vec::new();
    walk(root, upper, Path::new(""), &mut out)?;
    out.retain(|change| {
        let absolute = root.join(change.path());
        !hidden.iter().any(|hidden| absolute.starts_with(hidden))
    });
    out.sort_by(|a, b| a.path().cmp(b.path()));
    out.dedup_by(|a, b| a.path() == b.path());
    Ok(out)
}

fn sorted_entries(dir: &Path) -> io::Result<Vec<std::fs::DirEntry>> {
    let mut entries = std::fs::read_dir(dir)?.collect::<io::Result<Vec<_>>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    Ok(entries)
}

fn walk(root: &Path, upper: &Path, relative: &Path, out: &mut Vec<Change>) -> io::Result<()> {
    for entry in sorted_entries(&upper.join(relative))? {
        let path = relative.join(entry.file_name());
        let here = upper.join(&path);
        let lower = root.join(&path);
        let metadata = here.symlink_metadata()?;
        let kind = metadata.file_type();
        let lower_metadata = lower.symlink_metadata().ok();
        if kind.is_char_device() && metadata.rdev() == 0 {
            // A whiteout: what the workspace has here is gone.
            match &lower_metadata {
                Some(lower_metadata) if lower_metadata.is_dir() => {
                    deleted_under(root, &path, &BTreeSet::new(), out)?;
                }
                Some(_) => out.push(Change::Delete { path }),
                None => {}
            }
        } else if kind.is_dir() {
            let lower_is_dir = lower_metadata
                .as_ref()
                .is_some_and(std::fs::Metadata::is_dir);
            if lower_is_dir {
                if let Ok(name) = std::ffi::CString::new(here.as_os_str().as_bytes())
                    && crate::child::is_opaque(&name)
                {
                    // Replaced: what the workspace had here and the
                    // overlay does not is gone.
                    let kept = files_under(upper, &path)?;
                    deleted_under(root, &path, &kept, out)?;
                }
            } else {
                if let Some(lower_metadata) = &lower_metadata
                    && !lower_metadata.is_dir()
                {
                    out.push(Change::Delete { path: path.clone() });
                }
                if std::fs::read_dir(&here)?.next().is_none() {
                    out.push(Change::Unsupported {
                        path: path.clone(),
                        what: "a new empty directory",
                    });
                }
            }
            walk(root, upper, &path, out)?;
        } else if kind.is_file() {
            let content = std::fs::read(&here)?;
            let executable = metadata.permissions().mode() & 0o111 != 0;
            let unchanged = lower_metadata.as_ref().is_some_and(|lower_metadata| {
                lower_metadata.is_file()
                    && (lower_metadata.permissions().mode() & 0o111 != 0) == executable
                    && std::fs::read(&lower).is_ok_and(|old| old == content)
            });
            if !unchanged {
                out.push(Change::Write {
                    path,
                    content,
                    executable,
                });
            }
        } else if kind.is_symlink() {
            out.push(Change::Unsupported {
                path,
                what: "a symbolic link",
            });
        } else {
            out.push(Change::Unsupported {
                path,
                what: "a special file",
            });
        }
    }
    Ok(())
}

/// The relative paths of the files under `relative` in `base`.
fn files_under(base: &Path, relative: &Path) -> io::Result<BTreeSet<PathBuf>> {
    let mut found = BTreeSet::new();
    let mut pending = vec![relative.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in sorted_entries(&base.join(&dir))? {
            let path = dir.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                pending.push(path.clone());
            }
            found.insert(path);
        }
    }
    Ok(found)
}

/// Every non-directory of the workspace under `relative` not in `kept`, as
/// deleted.
fn deleted_under(
    root: &Path,
    relative: &Path,
    kept: &BTreeSet<PathBuf>,
    out: &mut Vec<Change>,
) -> io::Result<()> {
    for path in files_under(root, relative)? {
        if !kept.contains(&path) && !root.join(&path).is_dir() {
            out.push(Change::Delete { path });
        }
    }
    Ok(())
}
