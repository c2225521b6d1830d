//! The kernel-backed path sandbox.
//!
//! A [`Sandbox`] holds an `O_PATH` descriptor of the canonical workspace root.
//! [`Sandbox::resolve`] turns a path argument into a [`SandboxedPath`], the only
//! way to get one:
//!
//! 1. textual checks: NUL bytes, absolute paths (`absolute_paths`), `..` that
//!    climbs above the root, then the policy's deny globs and protected paths on
//!    the lexically normalized path;
//! 2. the kernel walks the path from the root descriptor with `openat2`:
//!    `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` (plus `RESOLVE_NO_SYMLINKS` under
//!    `follow_symlinks: deny`), so no symlink, `..` inside a link, or directory
//!    swapped for a link can lead the walk out of the root;
//! 3. the real location of what was opened is read back from
//!    `/proc/self/fd/<n>`, made root-relative, and checked by the policy again,
//!    so a link `ok.txt -> .env` is `path_denied` and a link into the state dir
//!    is refused;
//! 4. for a write to a file that does not exist, the create allowlist.
//!
//! `follow_symlinks: allow` walks without `RESOLVE_BENEATH`, so links may pass
//! anywhere (absolute links, links that leave and come back), but what they
//! finally reach must still lie inside the root: step 3 refuses the rest. Under
//! `within_root_only` every step of the walk stays beneath the root, which also
//! refuses absolute links even when they point back inside.
//!
//! A `SandboxedPath` keeps descriptors, not path strings: the directory holding
//! the target (reopened by its canonical path, beneath the root, with no
//! symlinks allowed) and the target's single-component name. Reads and writes go
//! through `openat`/`renameat` on that directory with `O_NOFOLLOW`, never through
//! a full path again. A later step (applying an approved plan) resolves afresh.
//!
//! A hard link is another name of a file that may live outside the root or be
//! a protected one, and nothing in the path shows it. So a regular file with
//! more than one link is neither read nor written (nor searched) unless
//! `allow_hardlinks` says so, and even then never when it is the same file as
//! a protected one ([`LinkGuard`]). Writes replace a name with a new file
//! (rename), so they never change another name's content anyway.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::overlay::{Overlay, StagedFile};

use airlock_core::config::{AbsolutePaths, FileBrokerConfig, FollowSymlinks};
use airlock_core::policy::normalize_relative;
use airlock_core::{ErrorCode, Policy};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use crate::error::FsError;

/// Whether a path is resolved to be read or to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    Read,
    Write,
}

/// What a resolved path names (`"file"`, `"directory"`, `"other"` in tool
/// output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    File,
    Directory,
    /// A FIFO, socket or device: never read or written.
    Other,
}

/// The workspace root, opened once, with the file-tool configuration and the
/// (bound) policy. Cheap to share: `resolve` takes `&self`.
#[derive(Debug)]
pub struct Sandbox {
    /// The canonical, absolute root.
    root: PathBuf,
    /// `O_PATH | O_DIRECTORY` descriptor of `root`; every walk starts here.
    root_fd: OwnedFd,
    config: FileBrokerConfig,
    policy: Arc<Policy>,
    /// `allowlisted_create_dirs`, normalized (`"src/"` is `"src"`, `"./"` is `""`).
    create_dirs: Vec<String>,
    /// Where large outputs are stored ([`Sandbox::with_blob_dir`]).
    blob_dir: Option<PathBuf>,
    links: Arc<LinkGuard>,
    /// A code-mode run's staged files, read as if written
    /// ([`Sandbox::with_overlay`]).
    overlay: Option<Arc<Overlay>>,
    /// A session's roots and working directory ([`Sandbox::scoped`]).
    scope: Option<Arc<Scope>>,
}

/// What a session may reach of the workspace (DESIGN §5.3): directories
/// (root-relative, resolved), each writable or not, and the directory
/// relative paths start from. Checked on the path the kernel resolved, so
/// no symlink, `..` or absolute path leads out of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// `(directory, writable)`; `""` is the whole root.
    pub roots: Vec<(String, bool)>,
    /// Inside one of the roots.
    pub workdir: String,
}

impl Scope {
    /// Whether `path` (root-relative, resolved) may be reached, and
    /// written when `write`: the deepest root holding it decides.
    pub fn allows(&self, path: &str, write: bool) -> bool {
        self.roots
            .iter()
            .filter(|(dir, _)| within(path, dir))
            .max_by_key(|(dir, _)| dir.len())
            .is_some_and(|(_, writable)| *writable || !write)
    }

    fn refusal(&self, param: &str, path: &str, write: bool) -> FsError {
        let reachable = self.roots.iter().any(|(dir, _)| within(path, dir));
        FsError::Refused {
            code: ErrorCode::RootNotAllowed,
            message: if reachable && write {
                format!("{param} `{path}` is in a read-only root of this session")
            } else {
                format!("{param} `{path}` is outside this session's roots")
            },
        }
    }
}

/// Whether root-relative `path` is `dir` or inside it.
fn within(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path == dir
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// A path that went through [`Sandbox::resolve`]: inside the root, allowed by
/// the policy both as requested and as resolved. Only the resolver makes one.
#[derive(Debug)]
pub struct SandboxedPath {
    requested: String,
    resolved: String,
    target: Target,
    access: Access,
    links: Arc<LinkGuard>,
    /// The most of an existing file's content a change may hold
    /// (`max_write_bytes_hard`): its before-content is kept for the diff and
    /// for undo, and undo writes it back.
    content_limit: u64,
    /// What a run staged at this path (through an overlay): its content,
    /// or `Some(None)` for removed. Seen instead of the file.
    staged: Option<Option<StagedFile>>,
}

/// Whether a regular file with more than one name may be read or written
/// (`file_broker.allow_hardlinks`), and never when it is a protected file
/// under another name.
#[derive(Debug)]
pub(crate) struct LinkGuard {
    allow: bool,
    /// The protected locations, absolute (state dir, audit log, the
    /// configuration files, the root's `.git`).
    protected: Vec<(PathBuf, airlock_core::policy::Protected)>,
}

/// How many entries of the protected locations are looked at, at most, to
/// find the files a hard link could be another name of.
const MAX_PROTECTED_ENTRIES: usize = 100_000;

impl LinkGuard {
    fn new(config: &FileBrokerConfig, policy: &Policy) -> LinkGuard {
        LinkGuard {
            allow: config.allow_hardlinks,
            protected: policy
                .protected_locations()
                .into_iter()
                .map(|(path, what)| (PathBuf::from(path), what))
                .collect(),
        }
    }

    /// Refuses a regular file (`stat`) with several links, unless they are
    /// allowed and it is none of the protected files (unreadable ones for a
    /// read; any for a write).
    pub(crate) fn check(&self, stat: &Stat, path: &str, write: bool) -> Result<(), FsError> {
        if kind_of(stat) != FileKind::File || stat.st_nlink <= 1 {
            return Ok(());
        }
        if !self.allow {
            return Err(FsError::HardLinked {
                path: path.to_owned(),
                links: stat.st_nlink,
            });
        }
        if self.is_protected(stat.st_dev, stat.st_ino, write) {
            return Err(FsError::HardLinkedToProtected {
                path: path.to_owned(),
            });
        }
        Ok(())
    }

    /// Whether `(dev, ino)` is a file of a protected location: only those a
    /// read must not reach (state dir, audit log), or (`write`) any.
    fn is_protected(&self, dev: u64, ino: u64, write: bool) -> bool {
        use airlock_core::policy::Protected;
        let mut budget = MAX_PROTECTED_ENTRIES;
        let mut pending: Vec<PathBuf> = self
            .protected
            .iter()
            .filter(|(_, what)| write || matches!(what, Protected::StateDir | Protected::AuditLog))
            .map(|(path, _)| path.clone())
            .collect();
        while let Some(path) = pending.pop() {
            let Ok(stat) = rustix::fs::lstat(&path) else {
                continue;
            };
            match kind_of(&stat) {
                FileKind::File if stat.st_dev == dev && stat.st_ino == ino => return true,
                FileKind::Directory => {
                    let Ok(entries) = std::fs::read_dir(&path) else {
                        continue;
                    };
                    for entry in entries.flatten() {
                        if budget == 0 {
                            // Too much to look through: assume the worst.
                            return true;
                        }
                        budget -= 1;
                        pending.push(entry.path());
                    }
                }
                FileKind::File | FileKind::Other => {}
            }
        }
        false
    }
}

#[derive(Debug)]
enum Target {
    /// The target exists: `name` inside the directory `parent`.
    Existing {
        parent: OwnedFd,
        name: String,
        kind: FileKind,
    },
    /// The target does not exist. `base` is its deepest existing directory and
    /// `missing` the components below it (the last one is the target's name).
    Missing { base: OwnedFd, missing: Vec<String> },
}

/// How often `openat2` is retried when the kernel reports a concurrent rename
/// (`EAGAIN`) during a `RESOLVE_BENEATH` walk.
const OPENAT2_RETRIES: usize = 16;

impl Sandbox {
    /// Opens the workspace `root`. `policy` must be bound
    /// ([`Policy::bind_workspace`]) to the same root, canonicalized.
    pub fn open(
        root: &Path,
        config: &FileBrokerConfig,
        policy: Arc<Policy>,
    ) -> Result<Sandbox, FsError> {
        let cannot_open = |error: io::Error| {
            FsError::io(
                format!("cannot open the workspace root {}", root.display()),
                error,
            )
        };
        let canonical = std::fs::canonicalize(root).map_err(cannot_open)?;
        let root_fd = rustix::fs::open(
            &canonical,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| cannot_open(errno.into()))?;
        // The descriptor is what counts: make sure it is the directory that was
        // canonicalized, not something swapped in between.
        if fd_path(&root_fd)? != canonical {
            return Err(cannot_open(io::Error::other(
                "the root changed while it was being opened",
            )));
        }
        let create_dirs = config
            .allowlisted_create_dirs
            .iter()
            .filter_map(|dir| normalize_relative(dir))
            .collect();
        Ok(Sandbox {
            root: canonical,
            root_fd,
            config: config.clone(),
            links: Arc::new(LinkGuard::new(config, &policy)),
            policy,
            create_dirs,
            blob_dir: None,
            overlay: None,
            scope: None,
        })
    }

    /// This sandbox reading through `overlay`: what a code-mode run staged
    /// is seen by the plans, reads, stats, greps and globs made with the
    /// result, and by nothing else.
    pub fn with_overlay(&self, overlay: Arc<Overlay>) -> Result<Sandbox, FsError> {
        let root_fd = self
            .root_fd
            .try_clone()
            .map_err(|error| FsError::io("cannot share the workspace root", error))?;
        Ok(Sandbox {
            root: self.root.clone(),
            root_fd,
            config: self.config.clone(),
            policy: Arc::clone(&self.policy),
            create_dirs: self.create_dirs.clone(),
            blob_dir: self.blob_dir.clone(),
            links: Arc::clone(&self.links),
            overlay: Some(overlay),
            scope: self.scope.clone(),
        })
    }

    /// This sandbox as a session sees it: only `scope`'s roots reached,
    /// relative paths from its working directory, and `config`'s limits
    /// (the session's, never above this sandbox's).
    pub fn scoped(&self, scope: Arc<Scope>, config: FileBrokerConfig) -> Result<Sandbox, FsError> {
        let root_fd = self
            .root_fd
            .try_clone()
            .map_err(|error| FsError::io("cannot share the workspace root", error))?;
        // A session may allow fewer hard-linked files than the workspace.
        let links = if config.allow_hardlinks == self.links.allow {
            Arc::clone(&self.links)
        } else {
            Arc::new(LinkGuard {
                allow: config.allow_hardlinks && self.links.allow,
                protected: self.links.protected.clone(),
            })
        };
        Ok(Sandbox {
            root: self.root.clone(),
            root_fd,
            config,
            policy: Arc::clone(&self.policy),
            create_dirs: self.create_dirs.clone(),
            blob_dir: self.blob_dir.clone(),
            links,
            overlay: self.overlay.clone(),
            scope: Some(scope),
        })
    }

    /// The session scope this sandbox has, if any.
    pub fn scope(&self) -> Option<&Scope> {
        self.scope.as_deref()
    }

    /// Root-relative `rel` as a tool's answer shows it: in a session with a
    /// working directory, relative to it (`.` for itself) and absolute
    /// outside it, so that the path given back names the same file.
    pub fn shown<'a>(&self, rel: &'a str) -> std::borrow::Cow<'a, str> {
        match &self.scope {
            Some(scope) if !scope.workdir.is_empty() => {
                if rel == scope.workdir {
                    ".".into()
                } else if let Some(rest) = rel
                    .strip_prefix(scope.workdir.as_str())
                    .and_then(|rest| rest.strip_prefix('/'))
                {
                    rest.into()
                } else if rel.is_empty() {
                    self.root.to_string_lossy().into_owned().into()
                } else {
                    format!("{}/{rel}", self.root.to_string_lossy()).into()
                }
            }
            _ => rel.into(),
        }
    }

    /// The staged files this sandbox reads through, if any.
    pub(crate) fn overlay(&self) -> Option<&Overlay> {
        self.overlay.as_deref()
    }

    /// Stores outputs larger than `max_inline_bytes` (under `output_mode:
    /// auto`) as blobs in `dir`, normally `<root>/<state_dir>/blobs`. Without
    /// a blob dir such output is returned inline (see the `blob` module).
    pub fn with_blob_dir(self, dir: PathBuf) -> Sandbox {
        Sandbox {
            blob_dir: Some(dir),
            ..self
        }
    }

    /// The blob dir, if one was given.
    pub fn blob_dir(&self) -> Option<&Path> {
        self.blob_dir.as_deref()
    }

    /// The canonical workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn config(&self) -> &FileBrokerConfig {
        &self.config
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Resolves the path argument `param` = `raw` for `access`. See the module
    /// documentation for the checks, in order.
    pub fn resolve(
        &self,
        param: &str,
        raw: &str,
        access: Access,
    ) -> Result<SandboxedPath, FsError> {
        self.resolve_checked(param, raw, access, true)
    }

    /// [`Sandbox::resolve`], optionally without the create allowlist (for undo,
    /// which only ever replaces or removes an existing file).
    pub(crate) fn resolve_checked(
        &self,
        param: &str,
        raw: &str,
        access: Access,
        check_create: bool,
    ) -> Result<SandboxedPath, FsError> {
        let requested = self.normalize(param, raw)?;
        let write = access == Access::Write;
        self.check_policy(param, &requested, write)?;
        if let Some(scope) = &self.scope
            && !scope.allows(&requested, write)
        {
            return Err(scope.refusal(param, &requested, write));
        }
        let (resolved, target) = self.locate(param, &requested, access)?;
        if let Some(scope) = &self.scope
            && !scope.allows(&resolved, write)
        {
            return Err(scope.refusal(param, &resolved, write));
        }
        if resolved != requested {
            self.check_policy(param, &resolved, write)
                .map_err(|error| match error {
                    FsError::Refused { code, message } => FsError::Refused {
                        code,
                        message: format!("{message} (reached through `{requested}`)"),
                    },
                    error => error,
                })?;
        }
        // Missing parent directories need no check of their own: each is an
        // ancestor of the file, so it lies at the root level, above an
        // allowlisted directory, or inside one.
        if write
            && check_create
            && matches!(target, Target::Missing { .. })
            && !self.create_allowed(&resolved)
        {
            return Err(FsError::CreateNotAllowed {
                path: resolved,
                allowed: self.allowed_dirs_text(),
            });
        }
        let staged = self
            .overlay
            .as_ref()
            .and_then(|overlay| overlay.get(&resolved).cloned());
        Ok(SandboxedPath {
            requested,
            resolved,
            target,
            access,
            links: Arc::clone(&self.links),
            content_limit: self.config.max_write_bytes_hard,
            staged,
        })
    }

    /// Where the path argument `raw` of a built-in tool really leads, as the
    /// tool will resolve it (root-relative, symlinks followed under the
    /// configured rule), without the policy's checks; `None` when it cannot
    /// be resolved (the tool itself then says why). The broker decides the
    /// policy on this path as well as on `raw`.
    pub fn resolved_for_policy(&self, raw: &str) -> Option<String> {
        let requested = self.normalize("path", raw).ok()?;
        let (resolved, _) = self.locate("path", &requested, Access::Read).ok()?;
        Some(resolved)
    }

    /// Where a path argument of another server's tool really leads, when a
    /// symlink takes it elsewhere: an absolute path, a relative one placed
    /// against the root, `..` and symlinks resolved as far as the path exists
    /// (a dangling link is followed to the name it would create). Only names
    /// are looked up; nothing is opened. `None` when no symlink is on the way
    /// (the policy already placed the path as written) or it cannot be placed
    /// (`~`).
    pub fn resolved_foreign(&self, raw: &str) -> Option<String> {
        if raw.starts_with('~') || raw.contains('\0') {
            return None;
        }
        // Where the walk is, as components; a relative path starts at the root.
        let mut current: Vec<String> = if raw.starts_with('/') {
            Vec::new()
        } else {
            self.root
                .to_str()?
                .split('/')
                .filter(|part| !part.is_empty())
                .map(str::to_owned)
                .collect()
        };
        // The components still to walk, in reverse (next one last).
        let mut rest: Vec<String> = raw
            .split('/')
            .rev()
            .filter(|part| !part.is_empty() && *part != ".")
            .map(str::to_owned)
            .collect();
        let mut hops = 0;
        let mut exists = true;
        while let Some(part) = rest.pop() {
            if part == ".." {
                current.pop();
                continue;
            }
            current.push(part);
            if !exists {
                continue;
            }
            let path = format!("/{}", current.join("/"));
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    hops += 1;
                    if hops > 40 {
                        return None;
                    }
                    let target = std::fs::read_link(&path).ok()?;
                    let target = target.to_str()?;
                    current.pop();
                    if target.starts_with('/') {
                        current.clear();
                    }
                    rest.extend(
                        target
                            .split('/')
                            .rev()
                            .filter(|part| !part.is_empty() && *part != ".")
                            .map(str::to_owned),
                    );
                }
                Ok(_) => {}
                Err(_) => exists = false,
            }
        }
        (hops > 0).then(|| format!("/{}", current.join("/")))
    }

    /// The textual half: NUL, absolute paths, `..` above the root. Returns the
    /// lexically normalized root-relative path (`""` is the root).
    fn normalize(&self, param: &str, raw: &str) -> Result<String, FsError> {
        if raw.contains('\0') {
            return Err(FsError::NulByte {
                param: param.to_owned(),
            });
        }
        let escapes = || FsError::EscapesRoot {
            param: param.to_owned(),
            path: raw.to_owned(),
        };
        if raw.starts_with('/') {
            // A session takes absolute paths under the root: its answers
            // show paths outside its working directory so.
            let absolute_paths = if self.scope.is_some() {
                AbsolutePaths::WithinRoot
            } else {
                self.config.absolute_paths
            };
            return match absolute_paths {
                AbsolutePaths::Reject => Err(FsError::AbsolutePath {
                    param: param.to_owned(),
                    path: raw.to_owned(),
                    inside: Path::new(&normalize_absolute(raw))
                        .strip_prefix(&self.root)
                        .ok()
                        .and_then(Path::to_str)
                        .filter(|rel| !rel.is_empty())
                        .map(str::to_owned),
                }),
                AbsolutePaths::WithinRoot => {
                    let absolute = normalize_absolute(raw);
                    match Path::new(&absolute).strip_prefix(&self.root) {
                        Ok(rest) => rest.to_str().map(str::to_owned).ok_or_else(escapes),
                        Err(_) => Err(escapes()),
                    }
                }
            };
        }
        match &self.scope {
            // Relative paths start from the session's working directory.
            Some(scope) if !scope.workdir.is_empty() => {
                normalize_relative(&format!("{}/{raw}", scope.workdir)).ok_or_else(escapes)
            }
            _ => normalize_relative(raw).ok_or_else(escapes),
        }
    }

    fn check_policy(&self, param: &str, path: &str, write: bool) -> Result<(), FsError> {
        match self.policy.check_workspace_path(param, path, write) {
            Some(refusal) => Err(FsError::Refused {
                code: refusal.code,
                message: refusal.message,
            }),
            None => Ok(()),
        }
    }

    /// The kernel half: walks `requested` from the root and finds what it really
    /// names, as a root-relative path and descriptors to act on.
    fn locate(
        &self,
        param: &str,
        requested: &str,
        access: Access,
    ) -> Result<(String, Target), FsError> {
        let fd = match self.open_beneath(requested, OFlags::PATH) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return self.locate_missing(param, requested, access),
            Err(errno) => return Err(self.resolution_error(param, requested, errno)),
        };
        let stat = rustix::fs::fstat(&fd)
            .map_err(|errno| FsError::io(format!("cannot stat `{requested}`"), errno))?;
        let kind = kind_of(&stat);
        let resolved = self.relative_path_of(param, requested, &fd)?;
        let (parent_dir, name) = match resolved.rsplit_once('/') {
            Some((dir, name)) => (dir, name),
            None if resolved.is_empty() => ("", "."),
            None => ("", resolved.as_str()),
        };
        let parent = self.open_canonical_dir(param, requested, parent_dir)?;
        let name = name.to_owned();
        Ok((resolved, Target::Existing { parent, name, kind }))
    }

    /// `requested` does not exist: find its deepest existing directory.
    fn locate_missing(
        &self,
        param: &str,
        requested: &str,
        access: Access,
    ) -> Result<(String, Target), FsError> {
        let components: Vec<&str> = requested.split('/').collect();
        for depth in (0..components.len()).rev() {
            let prefix = components[..depth].join("/");
            let base = match self.open_beneath(&prefix, OFlags::PATH | OFlags::DIRECTORY) {
                Ok(base) => base,
                Err(Errno::NOENT) => continue,
                Err(errno) => return Err(self.resolution_error(param, requested, errno)),
            };
            let base_resolved = self.relative_path_of(param, requested, &base)?;
            // The first missing component may still be a name: a symlink whose
            // target does not exist. Writing through it could create a file
            // anywhere, so it is refused; reading it finds nothing.
            let first_missing = components[depth];
            match rustix::fs::statat(&base, first_missing, AtFlags::SYMLINK_NOFOLLOW) {
                Err(Errno::NOENT) => {}
                Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink => {
                    return Err(match access {
                        Access::Read => FsError::NotFound {
                            path: requested.to_owned(),
                        },
                        Access::Write => FsError::DanglingSymlink {
                            param: param.to_owned(),
                            path: requested.to_owned(),
                        },
                    });
                }
                Ok(_) => {
                    return Err(FsError::Changed {
                        path: requested.to_owned(),
                    });
                }
                Err(errno) => return Err(self.resolution_error(param, requested, errno)),
            }
            let missing: Vec<String> = components[depth..]
                .iter()
                .map(|part| (*part).to_owned())
                .collect();
            let resolved = if base_resolved.is_empty() {
                missing.join("/")
            } else {
                format!("{base_resolved}/{}", missing.join("/"))
            };
            return Ok((resolved, Target::Missing { base, missing }));
        }
        // Even the root could not be opened: it was removed.
        Err(FsError::io(
            "cannot open the workspace root",
            io::Error::from(Errno::NOENT),
        ))
    }

    /// Opens `rel` from the root under the configured symlink policy.
    fn open_beneath(&self, rel: &str, oflags: OFlags) -> Result<OwnedFd, Errno> {
        let resolve = match self.config.follow_symlinks {
            FollowSymlinks::Deny => {
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
            }
            FollowSymlinks::WithinRootOnly => ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            // Links may lead anywhere during the walk; `relative_path_of` refuses
            // a final location outside the root.
            FollowSymlinks::Allow => ResolveFlags::NO_MAGICLINKS,
        };
        openat2_retrying(&self.root_fd, rel, oflags, resolve)
    }

    /// Opens a directory by its canonical root-relative path: beneath the root,
    /// through no symlink at all.
    fn open_canonical_dir(
        &self,
        param: &str,
        requested: &str,
        rel: &str,
    ) -> Result<OwnedFd, FsError> {
        let resolve =
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        openat2_retrying(
            &self.root_fd,
            rel,
            OFlags::PATH | OFlags::DIRECTORY,
            resolve,
        )
        .map_err(|errno| match errno {
            // A canonical path that no longer resolves cleanly: it changed
            // under us.
            Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV => FsError::Changed {
                path: requested.to_owned(),
            },
            errno => self.resolution_error(param, requested, errno),
        })
    }

    /// Where `fd` really is, relative to the root; refused when outside.
    fn relative_path_of(
        &self,
        param: &str,
        requested: &str,
        fd: &OwnedFd,
    ) -> Result<String, FsError> {
        let real = fd_path(fd)?;
        match real.strip_prefix(&self.root) {
            Ok(rest) => rest
                .to_str()
                .map(str::to_owned)
                .ok_or_else(|| FsError::NonUtf8Name {
                    param: param.to_owned(),
                    path: requested.to_owned(),
                }),
            Err(_) => Err(FsError::SymlinkEscape {
                param: param.to_owned(),
                path: requested.to_owned(),
            }),
        }
    }

    fn resolution_error(&self, param: &str, requested: &str, errno: Errno) -> FsError {
        let param = param.to_owned();
        let path = requested.to_owned();
        match errno {
            Errno::NOENT => FsError::NotFound { path },
            Errno::NOTDIR => FsError::NotADirectory { path },
            // Only a symlink can lead a walk of a `..`-free path out of the root.
            Errno::XDEV => FsError::SymlinkEscape { param, path },
            Errno::LOOP => match self.config.follow_symlinks {
                FollowSymlinks::Deny => FsError::SymlinkDenied { param, path },
                FollowSymlinks::WithinRootOnly | FollowSymlinks::Allow => {
                    FsError::SymlinkLoop { param, path }
                }
            },
            Errno::NAMETOOLONG => FsError::NameTooLong { param },
            Errno::NOSYS => FsError::io(
                "openat2 is not available on this kernel, and paths are never resolved without it",
                errno,
            ),
            errno => FsError::io(format!("cannot resolve {param} `{path}`"), errno),
        }
    }

    /// New files only at the root level or under an allowlisted directory.
    fn create_allowed(&self, resolved: &str) -> bool {
        let Some((parent, _)) = resolved.rsplit_once('/') else {
            return true;
        };
        self.create_dirs.iter().any(|dir| {
            dir.is_empty()
                || parent == dir
                || parent
                    .strip_prefix(dir.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }

    /// Opens a directory by its canonical root-relative path (journal recovery).
    pub(crate) fn open_directory(&self, rel: &str) -> Result<OwnedFd, FsError> {
        self.open_canonical_dir("path", rel, rel)
    }

    fn allowed_dirs_text(&self) -> String {
        if self.config.allowlisted_create_dirs.is_empty() {
            "no directory (allowlisted_create_dirs is empty)".to_owned()
        } else {
            self.config.allowlisted_create_dirs.join(", ")
        }
    }
}

impl SandboxedPath {
    /// The path as requested, lexically normalized and root-relative (`""` is
    /// the root).
    pub fn requested(&self) -> &str {
        &self.requested
    }

    /// What the path really names, root-relative, symlinks resolved. For a
    /// target that does not exist: its deepest existing directory, resolved,
    /// followed by the missing components.
    pub fn resolved(&self) -> &str {
        &self.resolved
    }

    pub fn exists(&self) -> bool {
        match &self.staged {
            Some(staged) => staged.is_some(),
            None => matches!(self.target, Target::Existing { .. }),
        }
    }

    /// What a run staged here, if this path was resolved through an
    /// overlay that has it: `Some(None)` for removed.
    pub fn staged(&self) -> Option<Option<&StagedFile>> {
        self.staged.as_ref().map(Option::as_ref)
    }

    /// What the target is, or `None` when it does not exist.
    pub fn kind(&self) -> Option<FileKind> {
        if let Some(staged) = &self.staged {
            return staged.as_ref().map(|_| FileKind::File);
        }
        match &self.target {
            Target::Existing { kind, .. } => Some(*kind),
            Target::Missing { .. } => None,
        }
    }

    /// The directories (resolved, root-relative, outermost first) that a write
    /// with `create_parents` creates. Empty when the parent exists.
    pub fn missing_parents(&self) -> Vec<String> {
        let Target::Missing { missing, .. } = &self.target else {
            return Vec::new();
        };
        let components: Vec<&str> = self.resolved.split('/').collect();
        let existing = components.len() - missing.len();
        (existing + 1..components.len())
            .map(|end| components[..end].join("/"))
            .collect()
    }

    /// The directory a commit locks for this target: its parent when it
    /// exists, else its deepest existing directory.
    pub(crate) fn lock_directory(&self) -> &OwnedFd {
        match &self.target {
            Target::Existing { parent, .. } => parent,
            Target::Missing { base, .. } => base,
        }
    }

    /// Whether the target is still absent, looked up from its deepest existing
    /// directory without following links (under a lock, before a create).
    pub(crate) fn still_missing(&self) -> Result<bool, FsError> {
        let Target::Missing { base, missing } = &self.target else {
            return Ok(false);
        };
        match rustix::fs::statat(base, missing.join("/").as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT | Errno::NOTDIR) => Ok(true),
            Ok(_) => Ok(false),
            Err(errno) => Err(FsError::io(
                format!("cannot look up `{}`", self.requested),
                errno,
            )),
        }
    }

    /// The existing target's directory and name (for reading it under a lock).
    pub(crate) fn existing_entry(&self) -> Option<(&OwnedFd, &str)> {
        match &self.target {
            Target::Existing { parent, name, .. } => Some((parent, name.as_str())),
            Target::Missing { .. } => None,
        }
    }

    /// Opens the target for reading: a regular file, or an error (a hard
    /// link too, unless allowed).
    pub(crate) fn open_for_read(&self) -> Result<(File, Stat), FsError> {
        // A staged file is read from the overlay ([`Self::staged`]); here
        // it is one the run removed, or a caller that forgot the overlay.
        if self.staged.is_some() {
            return Err(FsError::NotFound {
                path: self.requested.clone(),
            });
        }
        let (file, stat) = self.open_regular()?;
        self.links
            .check(&stat, &self.requested, self.access == Access::Write)?;
        Ok((file, stat))
    }

    /// The most of this file's current content a change may read and keep.
    pub(crate) fn content_limit(&self) -> u64 {
        self.content_limit
    }

    /// Opens the target for airlock's own look at it (a hash after a crash),
    /// never for an agent: a regular file, whatever its links.
    pub(crate) fn open_regular(&self) -> Result<(File, Stat), FsError> {
        let (parent, name, kind) = match &self.target {
            Target::Existing { parent, name, kind } => (parent, name, *kind),
            Target::Missing { .. } => {
                return Err(FsError::NotFound {
                    path: self.requested.clone(),
                });
            }
        };
        self.expect_file_kind(kind)?;
        // O_NONBLOCK so that a FIFO swapped in cannot block the open; it is
        // refused by the type check below, and regular files ignore the flag.
        let fd = rustix::fs::openat(
            parent,
            name.as_str(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| match errno {
            Errno::NOENT => FsError::NotFound {
                path: self.requested.clone(),
            },
            Errno::LOOP => FsError::Changed {
                path: self.requested.clone(),
            },
            Errno::NXIO => FsError::NotRegularFile {
                path: self.requested.clone(),
            },
            errno => FsError::io(format!("cannot open `{}`", self.requested), errno),
        })?;
        let stat = rustix::fs::fstat(&fd)
            .map_err(|errno| FsError::io(format!("cannot stat `{}`", self.requested), errno))?;
        self.expect_file_kind(kind_of(&stat))?;
        Ok((File::from(fd), stat))
    }

    fn expect_file_kind(&self, kind: FileKind) -> Result<(), FsError> {
        match kind {
            FileKind::File => Ok(()),
            FileKind::Directory => Err(FsError::IsDirectory {
                path: self.requested.clone(),
            }),
            FileKind::Other => Err(FsError::NotRegularFile {
                path: self.requested.clone(),
            }),
        }
    }

    /// The directory to write the target into and the target's name in it.
    /// Creates missing parents (one `mkdirat` at a time, each beneath the
    /// previous descriptor) when `create_parents`, else `parent_not_found`.
    pub(crate) fn directory_for_write(
        &self,
        create_parents: bool,
    ) -> Result<(OwnedFd, String), FsError> {
        let (base, missing) = match &self.target {
            Target::Existing { parent, name, .. } => {
                return Ok((self.dup(parent)?, name.clone()));
            }
            Target::Missing { base, missing } => (base, missing),
        };
        let Some((name, directories)) = missing.split_last() else {
            return Err(FsError::NotFound {
                path: self.requested.clone(),
            });
        };
        if !directories.is_empty() && !create_parents {
            return Err(FsError::ParentNotFound {
                path: self.requested.clone(),
            });
        }
        let mut directory = self.dup(base)?;
        for component in directories {
            match rustix::fs::mkdirat(&directory, component.as_str(), Mode::from_raw_mode(0o777)) {
                Ok(()) => sync_directory(&directory)?,
                // Someone made it meanwhile; it is opened below without
                // following links, like one we made.
                Err(Errno::EXIST) => {}
                Err(errno) => {
                    return Err(FsError::io(
                        format!("cannot create a parent directory of `{}`", self.requested),
                        errno,
                    ));
                }
            }
            directory = openat2_retrying(
                &directory,
                component,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW,
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            )
            .map_err(|errno| match errno {
                Errno::NOTDIR | Errno::LOOP | Errno::NOENT | Errno::XDEV => FsError::Changed {
                    path: self.requested.clone(),
                },
                errno => FsError::io(
                    format!("cannot open a parent of `{}`", self.requested),
                    errno,
                ),
            })?;
        }
        Ok((directory, name.clone()))
    }

    fn dup(&self, fd: &OwnedFd) -> Result<OwnedFd, FsError> {
        fd.try_clone()
            .map_err(|error| FsError::io("cannot duplicate a directory descriptor", error))
    }
}

/// `openat2`, retried while the kernel reports a concurrent rename.
fn openat2_retrying(
    dir: &OwnedFd,
    rel: &str,
    oflags: OFlags,
    resolve: ResolveFlags,
) -> Result<OwnedFd, Errno> {
    let path = if rel.is_empty() { "." } else { rel };
    let mut last = Errno::AGAIN;
    for _ in 0..OPENAT2_RETRIES {
        match rustix::fs::openat2(dir, path, oflags | OFlags::CLOEXEC, Mode::empty(), resolve) {
            Err(errno @ (Errno::AGAIN | Errno::INTR)) => last = errno,
            result => return result,
        }
    }
    Err(last)
}

/// Where an open descriptor really is, as the kernel says.
fn fd_path(fd: &OwnedFd) -> Result<PathBuf, FsError> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()))
        .map_err(|error| FsError::io("cannot read /proc/self/fd to locate a path", error))
}

pub(crate) fn kind_of(stat: &Stat) -> FileKind {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => FileKind::File,
        FileType::Directory => FileKind::Directory,
        _ => FileKind::Other,
    }
}

/// Flushes a directory's entries (after a create, rename or unlink in it).
pub(crate) fn sync_directory(directory: &OwnedFd) -> Result<(), FsError> {
    let readable = rustix::fs::openat(
        directory,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| FsError::io("cannot open a directory to sync it", errno))?;
    rustix::fs::fsync(&readable).map_err(|errno| FsError::io("cannot sync a directory", errno))
}

/// Lexically normalizes an absolute path; `..` at `/` stays at `/`, as the
/// kernel does.
fn normalize_absolute(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

// What the search tools (grep, glob, list_dir, stat) need beyond resolution.

/// A descriptor of the root, for work that outlives a borrow of the sandbox
/// (a walk's filter): it reads small files beneath the root safely.
#[derive(Debug)]
pub(crate) struct BeneathRoot {
    fd: OwnedFd,
}

impl BeneathRoot {
    /// Up to `limit` bytes of the regular file at `rel`, opened beneath the
    /// root through no symlink and without blocking; `None` for anything
    /// else (missing, a FIFO, a device, a directory, unreadable).
    pub(crate) fn read_regular(&self, rel: &str, limit: usize) -> Option<Vec<u8>> {
        use std::io::Read as _;
        let fd = openat2_retrying(
            &self.fd,
            rel,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY,
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .ok()?;
        if kind_of(&rustix::fs::fstat(&fd).ok()?) != FileKind::File {
            return None;
        }
        let mut bytes = Vec::new();
        File::from(fd)
            .take(u64::try_from(limit).unwrap_or(u64::MAX))
            .read_to_end(&mut bytes)
            .ok()?;
        Some(bytes)
    }

    /// Whether anything is at `rel` (not following a final symlink).
    pub(crate) fn exists(&self, rel: &str) -> bool {
        rustix::fs::statat(&self.fd, rel, AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// Whether `rel` is a directory (not following a final symlink).
    pub(crate) fn is_directory(&self, rel: &str) -> bool {
        rustix::fs::statat(&self.fd, rel, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|stat| kind_of(&stat) == FileKind::Directory)
    }
}

/// One entry of a directory read through its descriptor.
#[derive(Debug)]
pub(crate) struct ListedEntry {
    pub(crate) name: std::ffi::OsString,
    /// Of the entry itself: a symlink is a symlink, not what it points to.
    pub(crate) file_type: FileType,
}

impl Sandbox {
    /// The policy, shared, for work that outlives a borrow of the sandbox (the
    /// filter of a directory walk must be `'static`).
    pub(crate) fn shared_policy(&self) -> Arc<Policy> {
        Arc::clone(&self.policy)
    }

    /// The hard-link rule, for a commit that reads a target under its locks.
    pub(crate) fn link_guard(&self) -> &LinkGuard {
        &self.links
    }

    /// A descriptor of the root that a walk's filter may keep.
    pub(crate) fn beneath_root(&self) -> Result<BeneathRoot, FsError> {
        let fd = self
            .root_fd
            .try_clone()
            .map_err(|error| FsError::io("cannot duplicate the root descriptor", error))?;
        Ok(BeneathRoot { fd })
    }

    /// Opens a regular file that a directory walk found, by its canonical
    /// root-relative path: beneath the root, through no symlink at all (the
    /// file itself included). A walk lists directories by path, so this is
    /// where a directory swapped for a link after it was listed is caught.
    pub(crate) fn open_walked_file(&self, rel: &str) -> Result<File, Errno> {
        let fd = openat2_retrying(
            &self.root_fd,
            rel,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY,
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )?;
        // A FIFO or device swapped in is refused before it is read, and so is
        // a hard link the configuration does not allow.
        let stat = rustix::fs::fstat(&fd)?;
        if kind_of(&stat) != FileKind::File || self.links.check(&stat, rel, false).is_err() {
            return Err(Errno::INVAL);
        }
        Ok(File::from(fd))
    }

    /// The status of what a walk found at `rel`, looked up like
    /// [`Sandbox::open_walked_file`] does, without opening it for reading.
    pub(crate) fn stat_walked(&self, rel: &str) -> Result<Stat, Errno> {
        let fd = openat2_retrying(
            &self.root_fd,
            rel,
            OFlags::PATH | OFlags::NOFOLLOW,
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )?;
        rustix::fs::fstat(&fd)
    }
}

impl SandboxedPath {
    /// The status of the existing target (not following a link swapped in
    /// since it was resolved), or `None` when it does not exist.
    pub(crate) fn stat_existing(&self) -> Result<Option<Stat>, FsError> {
        let Target::Existing { parent, name, .. } = &self.target else {
            return Ok(None);
        };
        match rustix::fs::statat(parent, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(stat)),
            Err(Errno::NOENT) => Ok(None),
            Err(errno) => Err(FsError::io(
                format!("cannot stat `{}`", self.requested),
                errno,
            )),
        }
    }

    /// The entries of the target directory, `.` and `..` left out, in the
    /// order the file system gives them. The directory is opened from its
    /// parent's descriptor without following links, and read through that
    /// descriptor.
    pub(crate) fn list_directory(&self) -> Result<Vec<ListedEntry>, FsError> {
        use std::os::unix::ffi::OsStrExt;

        let (parent, name, kind) = match &self.target {
            Target::Existing { parent, name, kind } => (parent, name, *kind),
            Target::Missing { .. } => {
                return Err(FsError::NotFound {
                    path: self.requested.clone(),
                });
            }
        };
        match kind {
            FileKind::Directory => {}
            FileKind::File | FileKind::Other => {
                return Err(FsError::NotADirectory {
                    path: self.requested.clone(),
                });
            }
        }
        let directory = rustix::fs::openat(
            parent,
            name.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| match errno {
            Errno::NOENT => FsError::NotFound {
                path: self.requested.clone(),
            },
            Errno::NOTDIR | Errno::LOOP => FsError::Changed {
                path: self.requested.clone(),
            },
            errno => FsError::io(format!("cannot open `{}`", self.requested), errno),
        })?;
        let cannot_list =
            |errno: Errno| FsError::io(format!("cannot list `{}`", self.requested), errno);
        let mut entries = Vec::new();
        let mut dir = rustix::fs::Dir::read_from(&directory).map_err(cannot_list)?;
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(cannot_list)?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let file_type = match entry.file_type() {
                // Some file systems do not say; ask without following links.
                FileType::Unknown => {
                    match rustix::fs::statat(
                        &directory,
                        entry.file_name(),
                        AtFlags::SYMLINK_NOFOLLOW,
                    ) {
                        Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                        // Removed meanwhile.
                        Err(Errno::NOENT) => continue,
                        Err(errno) => return Err(cannot_list(errno)),
                    }
                }
                file_type => file_type,
            };
            entries.push(ListedEntry {
                name: std::ffi::OsStr::from_bytes(name).to_owned(),
                file_type,
            });
        }
        Ok(entries)
    }
}
