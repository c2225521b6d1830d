//! The read-only search tools (DESIGN §5): `grep`, `glob`, `list_dir`, `stat`
//! and `exists`.
//!
//! `grep` and `glob` walk the tree with ripgrep's own crates (`ignore` for the
//! walk, `grep-regex` and `grep-searcher` for the search), in parallel, and
//! sort what they found, so the result never depends on the scheduling. The
//! walk behaves like `rg`'s with `--no-require-git`:
//!
//! - `.gitignore`, `.ignore` and `.git/info/exclude` are honoured, also when
//!   the workspace is not a git repository; hidden files and directories are
//!   skipped; symlinks are not followed (a symlinked file is not searched).
//!   Ignore files above the workspace root and the user's global git excludes
//!   are not read, so the result depends on the workspace alone. When the
//!   search starts below the root (`path`), the ignore files of the
//!   directories in between still apply; the starting directory itself is
//!   searched even when it is hidden or ignored, as `rg <dir>` does.
//! - Every entry the walk yields is checked against the policy, as a read of
//!   its root-relative path: denied paths, protected paths and the state dir
//!   are never listed, searched or descended into.
//! - Files are opened beneath the root with no symlink allowed anywhere in
//!   the path, so a directory swapped for a link during the walk leads
//!   nowhere. Names that are not UTF-8 are skipped (the policy and the output
//!   are text).
//! - Entries that cannot be read (permissions, races) are skipped silently.
//!
//! - `glob_filter` is `rg -g GLOB`: a gitignore-style glob over the path
//!   relative to the workspace root (`!` excludes). A file it matches is
//!   searched even when hidden or ignored; when it includes, files it does
//!   not match are left out (directories are still walked). It does not apply
//!   to a `path` that names a file, which is searched as given.
//! - A file holding a NUL byte anywhere is binary, whatever its size and
//!   wherever the NUL is: it is searched with NUL bytes as line ends (as
//!   `rg --binary` does), its matching lines are counted but not shown, and
//!   it is reported once as `path: binary file matches (found "\0" byte around
//!   offset N)`, N being the first NUL's offset. (ripgrep's own detection
//!   depends on its buffer size; this is its result for every file that fits
//!   one buffer.)
//!
//! Output paths are root-relative and name what was really searched: a
//! `path` through a symlink is reported by its resolved location.
//!
//! Every tool's list output (`matches`, `paths`, `entries`) goes through the
//! `blob` module's `output_mode` handling: inline when small, a blob
//! reference (`blob`) instead when large under `auto`.

use std::fmt::Write as _;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use airlock_core::Policy;
use globset::{GlobBuilder, GlobMatcher};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::{Override, OverrideBuilder};
use ignore::{DirEntry, Match, ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};
use rustix::fs::FileType;
use serde::{Deserialize, Serialize};

use crate::blob::OutputMode;
use crate::blob::{BlobRef, shape_output};
use crate::error::FsError;
use crate::sandbox::{Access, FileKind, Sandbox, SandboxedPath, kind_of};

/// `max_results` of `grep` when the call gives none (then clamped to
/// `max_grep_results`).
pub const GREP_DEFAULT_MAX_RESULTS: u64 = 100;

/// Arguments of `grep`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepParams {
    /// A regular expression (Rust `regex` syntax, as `rg`), matched per line.
    pub pattern: String,
    /// A directory to search (default: the root) or a single file.
    #[serde(default)]
    pub path: Option<String>,
    /// Only files this glob matches, as `rg -g`: gitignore-style over the
    /// root-relative path (a glob without `/` matches the file name at any
    /// depth, `**` crosses directories, a leading `!` excludes); it overrides
    /// ignore rules and hiding for the files it matches.
    #[serde(default)]
    pub glob_filter: Option<String>,
    #[serde(default)]
    pub case_insensitive: bool,
    /// Lines to return; default [`GREP_DEFAULT_MAX_RESULTS`], never above
    /// `max_grep_results`. `0` only counts.
    #[serde(default)]
    pub max_results: Option<u64>,
    #[serde(default)]
    pub output_mode: OutputMode,
}

/// The `data` of a successful `grep`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrepData {
    /// The first `returned` matching lines as `path:line:text`, joined by
    /// `\n`, sorted by path (byte order) then line number. The text is the
    /// line without its `\n` (a `\r` before it stays, as `rg` prints it),
    /// bytes that are not UTF-8 replaced by U+FFFD. Absent when it went to a
    /// blob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<BlobRef>,
    /// Matching lines in everything searched (a line with several matches
    /// counts once, as `rg --count` does), returned or not.
    pub match_count: u64,
    /// More lines matched than were returned, or a scan limit left files out.
    pub truncated: bool,
    /// For a person (spec 003's `summary_text`): `3 matches`, `1 match`,
    /// `No matches found`.
    #[serde(default)]
    pub summary_text: String,
    /// Why, when truncated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated_reason: Option<TruncatedReason>,
    pub returned: u64,
    /// Binary files (holding a NUL byte) with matching lines, sorted by path:
    /// their lines are counted, not returned (see the module documentation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binary_matches: Vec<BinaryMatch>,
}

/// Why a grep or glob returned less than everything: the limit that applied,
/// by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[expect(
    clippy::enum_variant_names,
    reason = "the variants are the limits' names: max_results, max_scan_files, max_scan_bytes"
)]
pub enum TruncatedReason {
    /// More matched than `max_results` (or the configured cap) lets through.
    MaxResults,
    /// The walk found more files than `file_broker.max_scan_files`: only the
    /// first ones by path were looked at.
    MaxScanFiles,
    /// The files (by path) passed `file_broker.max_scan_bytes`: the rest were
    /// not searched.
    MaxScanBytes,
}

/// A scan limit that stopped a grep or glob.
#[derive(Debug, Clone, Copy)]
enum ScanLimit {
    Files,
    Bytes,
}

impl ScanLimit {
    fn reason(self) -> TruncatedReason {
        match self {
            ScanLimit::Files => TruncatedReason::MaxScanFiles,
            ScanLimit::Bytes => TruncatedReason::MaxScanBytes,
        }
    }
}

/// A binary file with matches, as `rg` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BinaryMatch {
    pub path: String,
    /// The offset of its first NUL byte.
    pub offset: u64,
}

/// Arguments of `glob`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobParams {
    /// Matched against each file's path relative to `path` (`*` stays within
    /// a path segment, `**` crosses them: `**/*.rs`).
    pub pattern: String,
    /// The directory to search from; default the root.
    #[serde(default)]
    pub path: Option<String>,
    /// Paths to return; default and cap `max_glob_results`.
    #[serde(default)]
    pub max_results: Option<u64>,
    #[serde(default)]
    pub output_mode: OutputMode,
}

/// The `data` of a successful `glob`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobData {
    /// Root-relative paths of matching files (never directories), newest
    /// modification first, then by path; joined by `\n`. Absent when it went
    /// to a blob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<BlobRef>,
    /// All matching files, returned or not.
    pub count: u64,
    pub truncated: bool,
    /// For a person (spec 003's `summary_text`): `2 files`, `1 file`, `No
    /// files matched`.
    #[serde(default)]
    pub summary_text: String,
    /// Why, when truncated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated_reason: Option<TruncatedReason>,
    /// Entries under the search's start that were not looked into, by why
    /// (each a file or a whole directory); absent when none was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_out: Option<LeftOut>,
}

/// Entries a walk did not look into, by why: hidden (a name starting with
/// `.`), ignored (`.gitignore`, `.ignore`, `.git/info/exclude`), protected
/// (airlock's state dir, `.git`, the configuration file). What deny globs
/// hide is not counted: a count would tell such a file exists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    pub hidden: u64,
    pub ignored: u64,
    pub protected: u64,
}

impl LeftOut {
    fn any(&self) -> bool {
        self.hidden + self.ignored + self.protected > 0
    }
}

/// [`LeftOut`], counted by the walker's threads.
#[derive(Default)]
struct LeftOutCounts {
    hidden: std::sync::atomic::AtomicU64,
    ignored: std::sync::atomic::AtomicU64,
    protected: std::sync::atomic::AtomicU64,
}

impl LeftOutCounts {
    fn count(counter: &std::sync::atomic::AtomicU64) {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn totals(&self) -> LeftOut {
        let read = |counter: &std::sync::atomic::AtomicU64| {
            counter.load(std::sync::atomic::Ordering::Relaxed)
        };
        LeftOut {
            hidden: read(&self.hidden),
            ignored: read(&self.ignored),
            protected: read(&self.protected),
        }
    }
}

/// Arguments of `list_dir`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirParams {
    /// Default: the root.
    #[serde(default)]
    pub path: Option<String>,
    /// Entries to return; default and cap `max_glob_results`.
    #[serde(default)]
    pub max_results: Option<u64>,
    #[serde(default)]
    pub output_mode: OutputMode,
}

/// The `data` of a successful `list_dir`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListDirData {
    /// The requested path, normalized, root-relative (`""` is the root).
    pub path: String,
    /// The directory's entries by name (byte order), directories with a
    /// trailing `/`, joined by `\n`. Hidden entries are listed; entries the
    /// policy refuses (denied paths, the state dir) and names that are not
    /// UTF-8 are not. A symlink is listed by its own name, without `/`.
    /// Absent when it went to a blob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<BlobRef>,
    /// All listed entries, returned or not.
    pub count: u64,
    pub truncated: bool,
}

/// Arguments of `stat` and `exists`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatParams {
    pub path: String,
}

/// Arguments of `exists`: the same as `stat`'s.
pub type ExistsParams = StatParams;

/// The `data` of a successful `stat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatData {
    /// The requested path, normalized, root-relative.
    pub path: String,
    /// Always true: a missing path is `not_found`.
    pub exists: bool,
    /// What the path names, symlinks followed as the policy allows.
    pub kind: FileKind,
    pub size_bytes: u64,
    /// Last modification, milliseconds since the Unix epoch.
    pub mtime_ms: i64,
    /// No write permission bit is set (for anyone).
    pub readonly: bool,
}

/// The `data` of a successful `exists`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExistsData {
    pub path: String,
    pub exists: bool,
    /// `null` when the path does not exist.
    pub kind: Option<FileKind>,
}

macro_rules! from_args {
    ($params:ty) => {
        impl $params {
            /// Parses the JSON arguments of a call; a bad argument is
            /// `invalid_input`.
            pub fn from_args(args: &serde_json::Value) -> Result<$params, FsError> {
                <$params>::deserialize(args).map_err(|error| FsError::InvalidInput {
                    message: error.to_string(),
                })
            }
        }
    };
}

from_args!(GrepParams);
from_args!(GlobParams);
from_args!(ListDirParams);
from_args!(StatParams);

/// Searches file contents for lines matching a regular expression.
pub fn grep(sandbox: &Sandbox, params: &GrepParams) -> Result<GrepData, FsError> {
    let limit = params
        .max_results
        .unwrap_or(GREP_DEFAULT_MAX_RESULTS)
        .min(sandbox.config().max_grep_results);
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let matcher = RegexMatcherBuilder::new()
        // As `rg`: `^` and `$` at line boundaries, no octal escapes, and a
        // line terminator that keeps every match within one line (which is
        // also what enables the searcher's line-oriented fast path).
        .multi_line(true)
        .octal(false)
        .case_insensitive(params.case_insensitive)
        .line_terminator(Some(b'\n'))
        // A NUL byte makes a file binary, which stops its search: a pattern
        // that needs one could never match.
        .ban_byte(Some(b'\0'))
        .build(&params.pattern)
        .map_err(|error| FsError::InvalidRegex {
            message: error.to_string(),
        })?;
    let file_filter = params
        .glob_filter
        .as_deref()
        .map(|glob| rg_glob(sandbox.root(), glob))
        .transpose()?;
    // NUL bytes become line ends and the whole file is searched, so whether a
    // file is binary never depends on where its NUL is.
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::convert(b'\0'))
        .build();

    let mut scan_limit = None;
    let found = match resolve_base(sandbox, params.path.as_deref())? {
        // A file named by `path` is searched whatever the filter says, as `rg`
        // searches a file it is given.
        Base::File(path) => {
            let mut found = Found::default();
            let rel = path.resolved();
            if let Some(Some(staged)) = path.staged() {
                // What a code-mode run staged, searched as the file.
                if staged.content.len() as u64 > sandbox.config().max_scan_bytes {
                    scan_limit = Some(ScanLimit::Bytes);
                } else {
                    search_one(
                        &mut searcher,
                        &matcher,
                        rel,
                        Source::Staged(&staged.content),
                        limit,
                        &mut found,
                    );
                }
                return finish_grep(sandbox, params, limit, found, scan_limit);
            }
            let (file, _) = path.open_for_read()?;
            let size = file.metadata().map_or(0, |meta| meta.len());
            if size > sandbox.config().max_scan_bytes {
                scan_limit = Some(ScanLimit::Bytes);
            } else {
                search_one(
                    &mut searcher,
                    &matcher,
                    rel,
                    Source::File(&file),
                    limit,
                    &mut found,
                );
            }
            found
        }
        Base::Directory(base) => {
            let config = sandbox.config();
            let staged_filter = file_filter.clone();
            let (files, over, _) =
                walked_files(sandbox, &base, file_filter, config.max_scan_files)?;
            let files = with_staged(sandbox, &base, files, |rel| {
                staged_filter.as_ref().is_none_or(|filter| {
                    !filter.matched(sandbox.root().join(rel), false).is_ignore()
                })
            });
            if over {
                scan_limit = Some(ScanLimit::Files);
            }
            let (found, cut) = search_files(
                sandbox,
                &files,
                &matcher,
                &searcher,
                limit,
                config.max_scan_bytes,
            );
            if cut {
                scan_limit = Some(ScanLimit::Bytes);
            }
            found
        }
    };

    finish_grep(sandbox, params, limit, found, scan_limit)
}

/// A grep's matches, sorted, cut to `limit` and shaped.
fn finish_grep(
    sandbox: &Sandbox,
    params: &GrepParams,
    limit: usize,
    mut found: Found,
    scan_limit: Option<ScanLimit>,
) -> Result<GrepData, FsError> {
    // As a session sees them (relative to its working directory).
    if sandbox.scope().is_some() {
        for file in &mut found.files {
            file.path = sandbox.shown(&file.path).into_owned();
        }
    }
    found
        .files
        .sort_unstable_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    let mut text = String::new();
    let mut returned = 0;
    let mut binary_matches = Vec::new();
    let mut text_matches = 0;
    for file in &found.files {
        if let Some(offset) = file.binary_at {
            // Reported like `rg`, in path order, whatever room is left.
            let _ = writeln!(
                text,
                "{}: binary file matches (found \"\\0\" byte around offset {offset})",
                file.path
            );
            binary_matches.push(BinaryMatch {
                path: file.path.clone(),
                offset,
            });
            continue;
        }
        text_matches += file.count;
        let room = limit - returned;
        if room == 0 {
            continue;
        }
        if file.kept <= room {
            text.push_str(&file.lines);
            returned += file.kept;
        } else {
            text.push_str(first_lines(&file.lines, room));
            returned += room;
        }
    }
    text.pop();
    let returned = returned as u64;
    let (matches, blob) = shape_output(sandbox, text, params.output_mode)?.into_fields();
    let truncated_reason = match scan_limit {
        Some(limit) => Some(limit.reason()),
        None => (text_matches > returned).then_some(TruncatedReason::MaxResults),
    };
    Ok(GrepData {
        matches,
        blob,
        match_count: found.match_count,
        summary_text: match found.match_count {
            0 => "No matches found".to_owned(),
            1 => "1 match".to_owned(),
            count => format!("{count} matches"),
        },
        truncated: truncated_reason.is_some(),
        truncated_reason,
        returned,
        binary_matches,
    })
}

/// Finds files by a glob pattern.
pub fn glob(sandbox: &Sandbox, params: &GlobParams) -> Result<GlobData, FsError> {
    let config = sandbox.config();
    let limit = params
        .max_results
        .unwrap_or(config.max_glob_results)
        .min(config.max_glob_results);
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let matcher = path_glob(&params.pattern)?;
    let base = match resolve_base(sandbox, params.path.as_deref())? {
        Base::Directory(base) => base,
        Base::File(path) => {
            return Err(FsError::NotADirectory {
                path: path.requested().to_owned(),
            });
        }
    };
    let (files, over, left_out) = walked_files(sandbox, &base, None, config.max_scan_files)?;
    let files = with_staged(sandbox, &base, files, |_| true);
    let base_prefix = if base.is_empty() { 0 } else { base.len() + 1 };
    let mut found: Vec<GlobHit> = Vec::new();
    for rel in &files {
        let Some(below_base) = rel.get(base_prefix..) else {
            continue;
        };
        if !matcher.is_match(below_base) {
            continue;
        }
        if let Some(Some(staged)) = sandbox.overlay().and_then(|overlay| overlay.get(rel)) {
            let ms = staged.mtime_ms;
            found.push((
                (
                    i64::try_from(ms / 1000).unwrap_or(i64::MAX),
                    (ms % 1000) * 1_000_000,
                ),
                rel.clone(),
            ));
            continue;
        }
        // The time comes from the file as opened beneath the root, like a
        // grep's content, not from the walk's lookup by path.
        if let Ok(stat) = sandbox.stat_walked(rel)
            && kind_of(&stat) == FileKind::File
        {
            found.push(((stat.st_mtime, stat.st_mtime_nsec), rel.clone()));
        }
    }
    // Newest first, then by path.
    found.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let count = found.len();
    let paths: Vec<String> = found
        .into_iter()
        .take(limit)
        .map(|(_, path)| sandbox.shown(&path).into_owned())
        .collect();
    let truncated_reason = if over {
        Some(TruncatedReason::MaxScanFiles)
    } else {
        (count > paths.len()).then_some(TruncatedReason::MaxResults)
    };
    let (paths, blob) = shape_output(sandbox, paths.join("\n"), params.output_mode)?.into_fields();
    Ok(GlobData {
        paths,
        blob,
        count: count as u64,
        summary_text: match count {
            0 => "No files matched".to_owned(),
            1 => "1 file".to_owned(),
            count => format!("{count} files"),
        },
        truncated: truncated_reason.is_some(),
        truncated_reason,
        left_out: left_out.any().then_some(left_out),
    })
}

/// Lists the direct entries of a directory.
pub fn list_dir(sandbox: &Sandbox, params: &ListDirParams) -> Result<ListDirData, FsError> {
    let config = sandbox.config();
    let limit = params
        .max_results
        .unwrap_or(config.max_glob_results)
        .min(config.max_glob_results);
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let path = sandbox.resolve("path", params.path.as_deref().unwrap_or(""), Access::Read)?;
    let policy = sandbox.policy();
    let mut names: Vec<String> = Vec::new();
    // A directory only a code-mode run's staged files are in.
    let staged_here = sandbox
        .overlay()
        .is_some_and(|overlay| !overlay.files_below(path.resolved()).is_empty());
    let on_disk = if path.kind().is_none() && staged_here {
        Vec::new()
    } else {
        path.list_directory()?
    };
    for entry in on_disk {
        let Some(name) = entry.name.to_str() else {
            continue;
        };
        let rel = if path.resolved().is_empty() {
            name.to_owned()
        } else {
            format!("{}/{name}", path.resolved())
        };
        if policy.check_workspace_path("path", &rel, false).is_some()
            || crate::files::is_staging_name(name)
        {
            continue;
        }
        let mut shown = name.to_owned();
        if entry.file_type == FileType::Directory {
            shown.push('/');
        }
        names.push(shown);
    }
    if let Some(overlay) = sandbox.overlay() {
        staged_entries(overlay, path.resolved(), &mut names);
    }
    names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let count = names.len();
    names.truncate(limit);
    let truncated = count > names.len();
    let (entries, blob) =
        shape_output(sandbox, names.join("\n"), params.output_mode)?.into_fields();
    Ok(ListDirData {
        path: sandbox.shown(path.requested()).into_owned(),
        entries,
        blob,
        count: count as u64,
        truncated,
    })
}

/// What a path names: kind, size, modification time. A missing path is
/// `not_found`.
pub fn stat(sandbox: &Sandbox, params: &StatParams) -> Result<StatData, FsError> {
    let path = sandbox.resolve("path", &params.path, Access::Read)?;
    let not_found = || FsError::NotFound {
        path: sandbox.shown(path.requested()).into_owned(),
    };
    if let Some(staged) = path.staged() {
        let staged = staged.ok_or_else(not_found)?;
        return Ok(StatData {
            path: sandbox.shown(path.requested()).into_owned(),
            exists: true,
            kind: FileKind::File,
            size_bytes: staged.content.len() as u64,
            mtime_ms: i64::try_from(staged.mtime_ms).unwrap_or(i64::MAX),
            readonly: staged.mode.is_some_and(|mode| mode & 0o222 == 0),
        });
    }
    let stat = path.stat_existing()?.ok_or_else(not_found)?;
    Ok(StatData {
        path: sandbox.shown(path.requested()).into_owned(),
        exists: true,
        kind: kind_of(&stat),
        size_bytes: u64::try_from(stat.st_size).unwrap_or(0),
        mtime_ms: stat.st_mtime.saturating_mul(1000)
            + i64::try_from(stat.st_mtime_nsec / 1_000_000).unwrap_or(0),
        readonly: stat.st_mode & 0o222 == 0,
    })
}

/// The modification time of `path` in nanoseconds since the epoch, as the
/// disk holds it (a write's receipt, spec 003's `new_mtime_ns`); `None`
/// where it cannot be read.
pub fn mtime_ns(sandbox: &Sandbox, path: &str) -> Option<i64> {
    let path = sandbox.resolve("path", path, Access::Read).ok()?;
    let stat = path.stat_existing().ok()??;
    Some(
        stat.st_mtime
            .saturating_mul(1_000_000_000)
            .saturating_add(i64::try_from(stat.st_mtime_nsec).unwrap_or(0)),
    )
}

/// Whether a path exists. A missing path is not an error; a path the policy
/// refuses still is, with its code.
pub fn exists(sandbox: &Sandbox, params: &ExistsParams) -> Result<ExistsData, FsError> {
    let missing = || ExistsData {
        path: normalized_or_raw(&params.path),
        exists: false,
        kind: None,
    };
    let path = match sandbox.resolve("path", &params.path, Access::Read) {
        Ok(path) => path,
        // A dangling symlink, or a parent that is a file.
        Err(FsError::NotFound { .. } | FsError::NotADirectory { .. }) => return Ok(missing()),
        Err(error) => return Err(error),
    };
    if let Some(staged) = path.staged() {
        return Ok(ExistsData {
            path: path.requested().to_owned(),
            exists: staged.is_some(),
            kind: staged.map(|_| FileKind::File),
        });
    }
    Ok(match path.stat_existing()? {
        Some(stat) => ExistsData {
            path: path.requested().to_owned(),
            exists: true,
            kind: Some(kind_of(&stat)),
        },
        None => ExistsData {
            path: path.requested().to_owned(),
            exists: false,
            kind: None,
        },
    })
}

/// Where a `grep` or `glob` starts.
enum Base {
    /// A single file, resolved.
    File(SandboxedPath),
    /// A directory, by its resolved root-relative path (`""` is the root).
    Directory(String),
}

fn resolve_base(sandbox: &Sandbox, path: Option<&str>) -> Result<Base, FsError> {
    let path = sandbox.resolve("path", path.unwrap_or(""), Access::Read)?;
    match path.kind() {
        Some(FileKind::Directory) => Ok(Base::Directory(path.resolved().to_owned())),
        Some(FileKind::File) => Ok(Base::File(path)),
        Some(FileKind::Other) => Err(FsError::NotRegularFile {
            path: path.requested().to_owned(),
        }),
        None => Err(FsError::NotFound {
            path: path.requested().to_owned(),
        }),
    }
}

/// A walk of the directory `base` (root-relative) with the rules of the module
/// documentation; `file_filter` restricts which files are yielded.
fn walker(
    sandbox: &Sandbox,
    base: &str,
    file_filter: Option<Override>,
    left_out: Arc<LeftOutCounts>,
) -> Result<WalkBuilder, FsError> {
    let root = sandbox.root();
    let start = if base.is_empty() {
        root.to_path_buf()
    } else {
        root.join(base)
    };
    let mut builder = WalkBuilder::new(&start);
    // The walker reads no ignore file itself: `IgnoreRules` does, safely;
    // nor does it hide dot files: `EntryFilter` does, counting them.
    builder
        .hidden(false)
        .ignore(false)
        .git_ignore(false)
        .git_exclude(false)
        .require_git(false)
        .git_global(false)
        .parents(false)
        .follow_links(false);
    // The walker consults the filter before hiding, as `rg` does; the ignore
    // files are consulted (by `EntryFilter`) only where it says nothing.
    if let Some(filter) = &file_filter {
        builder.overrides(filter.clone());
    }
    let entry_filter = EntryFilter {
        policy: sandbox.shared_policy(),
        root_prefix: root_prefix_len(root),
        ignores: IgnoreRules::new(sandbox)?,
        file_filter,
        left_out,
    };
    builder.filter_entry(move |entry| entry_filter.admits(entry));
    Ok(builder)
}

/// Decides, for each entry below the start of a walk, whether it is yielded
/// (and, for a directory, descended into).
struct EntryFilter {
    policy: Arc<Policy>,
    root_prefix: usize,
    ignores: IgnoreRules,
    file_filter: Option<Override>,
    /// What was not admitted, and why.
    left_out: Arc<LeftOutCounts>,
}

impl EntryFilter {
    fn admits(&self, entry: &DirEntry) -> bool {
        let Some(rel) = relative(entry.path(), self.root_prefix) else {
            return false;
        };
        let is_dir = entry.file_type().is_some_and(|kind| kind.is_dir());
        // Denied paths and the state dir are never searched; of protected
        // paths (the configuration file, `.git`) no file is shown either (the
        // write check refuses them; directories get the read check, so a
        // directory merely holding the config file is still searched).
        if let Some(refusal) = self.policy.check_workspace_path("path", rel, !is_dir) {
            // Only airlock's own fixed places are counted: a count of what
            // deny globs hide would tell whether such a file exists.
            if refusal.code != airlock_core::ErrorCode::PathDenied {
                LeftOutCounts::count(&self.left_out.protected);
            }
            return false;
        }
        // Files a crashed apply may have left behind are airlock's own.
        if rel
            .rsplit('/')
            .next()
            .is_some_and(crate::files::is_staging_name)
        {
            return false;
        }
        let filtered = self.file_filter.as_ref().map_or(Match::None, |filter| {
            filter.matched(entry.path(), is_dir).map(|_| ())
        });
        // As ripgrep: the filter first, then hiding, then the ignore files.
        let hidden = entry.depth() > 0
            && entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.starts_with('.'));
        match filtered {
            Match::Whitelist(()) => true,
            Match::Ignore(()) => false,
            Match::None if hidden => {
                LeftOutCounts::count(&self.left_out.hidden);
                false
            }
            Match::None => {
                let ignored = self.ignores.ignores(rel, entry.path(), is_dir);
                if ignored {
                    LeftOutCounts::count(&self.left_out.ignored);
                }
                !ignored
            }
        }
    }
}

/// The ignore files of the walk, read by airlock itself rather than by the
/// walker (which opens them with a blocking `open` through any symlink: a
/// FIFO named `.gitignore` would hang it, a link to `/dev/zero` exhaust
/// memory). Each is opened beneath the root through no symlink,
/// non-blocking, and used only when it is a regular file, at most
/// [`MAX_IGNORE_FILE_BYTES`] of it.
///
/// The rules are ripgrep's: for an entry, each kind (`.ignore`, then
/// `.gitignore`, then `.git/info/exclude`) is looked up from the entry's
/// directory upwards to the workspace root, the deepest file that says
/// anything wins for its kind, and the first kind that says anything
/// decides; `.gitignore` and `exclude` files above the root of a nested
/// repository (a directory holding `.git`) do not apply inside it. A
/// directory's rules are read once per walk.
struct IgnoreRules {
    root: Arc<crate::sandbox::BeneathRoot>,
    root_path: std::path::PathBuf,
    directories: Mutex<std::collections::HashMap<String, Arc<DirectoryRules>>>,
}

/// The ignore files of one directory.
#[derive(Default)]
struct DirectoryRules {
    dot_ignore: Option<Gitignore>,
    gitignore: Option<Gitignore>,
    exclude: Option<Gitignore>,
    /// The directory holds `.git`: the root of a repository.
    has_git: bool,
}

/// The most of an ignore file that is read; the rest is left out.
const MAX_IGNORE_FILE_BYTES: usize = 4 << 20;

impl IgnoreRules {
    fn new(sandbox: &Sandbox) -> Result<IgnoreRules, FsError> {
        Ok(IgnoreRules {
            root: Arc::new(sandbox.beneath_root()?),
            root_path: sandbox.root().to_path_buf(),
            directories: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// Whether the entry at `rel` (root-relative, not the root) is ignored.
    fn ignores(&self, rel: &str, path: &Path, is_dir: bool) -> bool {
        let mut found = [Match::None, Match::None, Match::None];
        let mut saw_git = false;
        let mut directory = rel;
        loop {
            directory = match directory.rsplit_once('/') {
                Some((parent, _)) => parent,
                None if directory.is_empty() => break,
                None => "",
            };
            let rules = self.rules(directory);
            let kinds = [
                (&rules.dot_ignore, true),
                (&rules.gitignore, !saw_git),
                (&rules.exclude, !saw_git),
            ];
            for ((matcher, applies), slot) in kinds.into_iter().zip(found.iter_mut()) {
                if let (Some(matcher), true, true) = (matcher, applies, slot.is_none()) {
                    *slot = matcher.matched(path, is_dir).map(|_| ());
                }
            }
            saw_git |= rules.has_git;
            if directory.is_empty() {
                break;
            }
        }
        found
            .into_iter()
            .find(|found| !found.is_none())
            .is_some_and(|found| found.is_ignore())
    }

    fn rules(&self, directory: &str) -> Arc<DirectoryRules> {
        let cached = self
            .directories
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(directory)
            .cloned();
        if let Some(rules) = cached {
            return rules;
        }
        let rules = Arc::new(self.read_rules(directory));
        self.directories
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(directory.to_owned(), rules.clone());
        rules
    }

    fn read_rules(&self, directory: &str) -> DirectoryRules {
        let join = |name: &str| {
            if directory.is_empty() {
                name.to_owned()
            } else {
                format!("{directory}/{name}")
            }
        };
        let absolute = if directory.is_empty() {
            self.root_path.clone()
        } else {
            self.root_path.join(directory)
        };
        let parse = |name: &str| {
            let rel = join(name);
            let bytes = self.root.read_regular(&rel, MAX_IGNORE_FILE_BYTES)?;
            gitignore_from(&absolute, &self.root_path.join(&rel), &bytes)
        };
        let git = join(".git");
        let has_git = self.root.exists(&git);
        DirectoryRules {
            dot_ignore: parse(".ignore"),
            gitignore: parse(".gitignore"),
            exclude: if self.root.is_directory(&git) {
                parse(".git/info/exclude")
            } else {
                None
            },
            has_git,
        }
    }
}

/// The rules of one ignore file's `bytes`, rooted at `directory`, read as
/// ripgrep reads them: line by line up to the first line that is not UTF-8,
/// a byte order mark at the start dropped, unusable lines left out. `None`
/// when it holds no rule.
fn gitignore_from(directory: &Path, file: &Path, bytes: &[u8]) -> Option<Gitignore> {
    let mut builder = GitignoreBuilder::new(directory);
    let mut lines = bytes.split(|&b| b == b'\n').peekable();
    let mut first = true;
    while let Some(line) = lines.next() {
        // A last empty piece after the final newline is no line.
        if line.is_empty() && lines.peek().is_none() {
            break;
        }
        let line = match lines.peek() {
            Some(_) => line.strip_suffix(b"\r").unwrap_or(line),
            None => line,
        };
        let Ok(line) = std::str::from_utf8(line) else {
            break;
        };
        let line = if first {
            line.trim_start_matches('\u{feff}')
        } else {
            line
        };
        first = false;
        let _unusable_line = builder.add_line(Some(file.to_path_buf()), line);
    }
    builder.build().ok().filter(|rules| !rules.is_empty())
}

/// `glob_filter` as `rg -g` reads it: an override glob relative to the root.
fn rg_glob(root: &Path, glob: &str) -> Result<Override, FsError> {
    let invalid = |error: ignore::Error| FsError::InvalidPattern {
        message: error.to_string(),
    };
    let mut builder = OverrideBuilder::new(root);
    builder.add(glob).map_err(invalid)?;
    builder.build().map_err(invalid)
}

/// A glob over `/`-separated paths: `*` stays within a segment, `**` crosses
/// them.
fn path_glob(pattern: &str) -> Result<GlobMatcher, FsError> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|error| FsError::InvalidPattern {
            message: error.kind().to_string(),
        })
}

/// How many leading bytes of a walked path are the root and its separator.
fn root_prefix_len(root: &Path) -> usize {
    let root = root.as_os_str().len();
    if root == 1 { 1 } else { root + 1 }
}

/// The root-relative form of a path the walk yielded; `None` when it is not
/// UTF-8 (or, which cannot happen, not below the root).
fn relative(path: &Path, root_prefix: usize) -> Option<&str> {
    let bytes = path.as_os_str().as_encoded_bytes();
    std::str::from_utf8(bytes.get(root_prefix..)?).ok()
}

/// The requested path in its normal form when it has one, for an `exists`
/// that found nothing.
fn normalized_or_raw(raw: &str) -> String {
    airlock_core::policy::normalize_relative(raw).unwrap_or_else(|| raw.to_owned())
}

/// What a grep found, per file, before sorting.
#[derive(Default)]
struct Found {
    files: Vec<FileMatches>,
    match_count: u64,
}

struct FileMatches {
    path: String,
    /// Up to the limit of formatted lines, each ending in `\n`.
    lines: String,
    kept: usize,
    /// Its matching lines.
    count: u64,
    /// Where its first NUL byte is, if it is binary.
    binary_at: Option<u64>,
}

/// The first `n` lines of `lines` (each ending in `\n`), `n` at most their
/// number.
fn first_lines(lines: &str, n: usize) -> &str {
    let end = lines
        .match_indices('\n')
        .nth(n.saturating_sub(1))
        .map_or(lines.len(), |(newline, _)| newline + 1);
    if n == 0 { "" } else { &lines[..end] }
}

/// The walked files as a code-mode run's overlay has them: those it
/// staged or removed replaced by what it staged below `base` that `keep`
/// admits, in path order.
fn with_staged(
    sandbox: &Sandbox,
    base: &str,
    mut files: Vec<String>,
    keep: impl Fn(&str) -> bool,
) -> Vec<String> {
    let Some(overlay) = sandbox.overlay() else {
        return files;
    };
    files.retain(|rel| overlay.get(rel).is_none());
    files.extend(
        overlay
            .files_below(base)
            .into_iter()
            .map(|(rel, _)| rel)
            .filter(|rel| keep(rel))
            .map(str::to_owned),
    );
    files.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    files
}

/// A listing of `directory` as a code-mode run's overlay has it: removed
/// files left out, staged ones in (a staged file in a new directory shows
/// as that directory).
fn staged_entries(overlay: &crate::Overlay, directory: &str, names: &mut Vec<String>) {
    let prefix = if directory.is_empty() {
        String::new()
    } else {
        format!("{directory}/")
    };
    for (path, state) in overlay.entries() {
        let Some(rest) = path.strip_prefix(prefix.as_str()) else {
            continue;
        };
        if rest.is_empty() {
            continue;
        }
        match (rest.split_once('/'), state) {
            (None, None) => names.retain(|name| name != rest),
            (None, Some(_)) => {
                if !names.iter().any(|name| name == rest) {
                    names.push(rest.to_owned());
                }
            }
            (Some((sub, _)), Some(_)) => {
                let shown = format!("{sub}/");
                if !names.contains(&shown) {
                    names.push(shown);
                }
            }
            (Some(_), None) => {}
        }
    }
}

/// What one grep searches: an open file, or content a code-mode run
/// staged.
enum Source<'f> {
    File(&'f File),
    Staged(&'f [u8]),
}

/// Searches one source and records its matching lines in `found`.
fn search_one(
    searcher: &mut Searcher,
    matcher: &RegexMatcher,
    rel: &str,
    source: Source<'_>,
    limit: usize,
    found: &mut Found,
) {
    let mut sink = LineSink {
        path: rel,
        lines: String::new(),
        kept: 0,
        limit,
        count: 0,
        binary_at: None,
    };
    // A read error midway keeps the lines found before it, as `rg` does.
    let _ = match source {
        Source::File(file) => searcher.search_file(matcher, file, &mut sink),
        Source::Staged(content) => searcher.search_slice(matcher, content, &mut sink),
    };
    if sink.count > 0 {
        found.match_count += sink.count;
        found.files.push(FileMatches {
            path: rel.to_owned(),
            lines: sink.lines,
            kept: sink.kept,
            count: sink.count,
            binary_at: sink.binary_at,
        });
    }
}

/// Formats matching lines as `path:line:text\n`, up to `limit` of them, and
/// counts them all.
struct LineSink<'a> {
    path: &'a str,
    lines: String,
    kept: usize,
    limit: usize,
    count: u64,
    /// The offset of the first NUL byte, once one was seen.
    binary_at: Option<u64>,
}

impl Sink for LineSink<'_> {
    type Error = io::Error;

    fn binary_data(&mut self, _searcher: &Searcher, offset: u64) -> Result<bool, io::Error> {
        self.binary_at.get_or_insert(offset);
        Ok(true)
    }

    fn matched(&mut self, _searcher: &Searcher, found: &SinkMatch<'_>) -> Result<bool, io::Error> {
        let first = found.line_number().unwrap_or(0);
        for (number, line) in (first..).zip(found.lines()) {
            self.count += 1;
            if self.kept < self.limit {
                self.kept += 1;
                let text = line.strip_suffix(b"\n").unwrap_or(line);
                self.lines.push_str(self.path);
                // Writing to a String cannot fail.
                let _ = write!(self.lines, ":{number}:");
                self.lines.push_str(&String::from_utf8_lossy(text));
                self.lines.push('\n');
            }
        }
        Ok(true)
    }
}

/// Makes one [`FileCollector`] per walker thread.
struct FileCollectors<'s> {
    root_prefix: usize,
    files: &'s Mutex<Vec<String>>,
}

impl<'s> ParallelVisitorBuilder<'s> for FileCollectors<'s> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        Box::new(FileCollector {
            root_prefix: self.root_prefix,
            found: Vec::new(),
            files: self.files,
        })
    }
}

/// Gathers the root-relative paths of the files one walker thread is given;
/// hands them over when the walk is done (on drop), so threads never contend
/// during it.
struct FileCollector<'s> {
    root_prefix: usize,
    found: Vec<String>,
    files: &'s Mutex<Vec<String>>,
}

impl ParallelVisitor for FileCollector<'_> {
    fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) -> WalkState {
        if let Ok(entry) = entry
            && entry.file_type().is_some_and(|kind| kind.is_file())
            && let Some(rel) = relative(entry.path(), self.root_prefix)
        {
            self.found.push(rel.to_owned());
        }
        WalkState::Continue
    }
}

impl Drop for FileCollector<'_> {
    fn drop(&mut self) {
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        files.append(&mut self.found);
    }
}

/// The files below `base` that a walk yields, sorted by path (byte order),
/// at most `max_files` of them (the first in that order) and whether there
/// were more: which files a limit leaves out never depends on scheduling.
fn walked_files(
    sandbox: &Sandbox,
    base: &str,
    file_filter: Option<Override>,
    max_files: u64,
) -> Result<(Vec<String>, bool, LeftOut), FsError> {
    let files = Mutex::new(Vec::new());
    let left_out = Arc::new(LeftOutCounts::default());
    walker(sandbox, base, file_filter, left_out.clone())?
        .build_parallel()
        .visit(&mut FileCollectors {
            root_prefix: root_prefix_len(sandbox.root()),
            files: &files,
        });
    let mut files = files.into_inner().unwrap_or_else(PoisonError::into_inner);
    files.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let max = usize::try_from(max_files).unwrap_or(usize::MAX);
    let over = files.len() > max;
    files.truncate(max);
    Ok((files, over, left_out.totals()))
}

/// What searching one file of a grep gave: its size and its matches.
struct Searched {
    size: u64,
    matches: Option<FileMatches>,
}

/// Searches `files` (sorted) in parallel, taking them in their order, until
/// they are done or the bytes of the files taken pass `max_bytes`. The results
/// kept are those of the longest prefix of `files` whose sizes add up to at
/// most `max_bytes`; every file of that prefix has been taken (taking stops
/// only once the files taken, all before the next one, are over the limit) and
/// searched, so what is found never depends on scheduling. The second value
/// says some files were left out.
fn search_files(
    sandbox: &Sandbox,
    files: &[String],
    matcher: &RegexMatcher,
    searcher: &Searcher,
    limit: usize,
    max_bytes: u64,
) -> (Found, bool) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let seen = std::sync::atomic::AtomicU64::new(0);
    let results: Mutex<Vec<(usize, Searched)>> = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(files.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let mut searcher = searcher.clone();
            let (next, seen, results) = (&next, &seen, &results);
            scope.spawn(move || {
                let mut mine = Vec::new();
                loop {
                    // Files are taken in order; once the bytes seen pass the
                    // limit, every file the limit keeps has been taken.
                    if seen.load(std::sync::atomic::Ordering::Relaxed) > max_bytes {
                        break;
                    }
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(rel) = files.get(index) else {
                        break;
                    };
                    if let Some(Some(staged)) =
                        sandbox.overlay().and_then(|overlay| overlay.get(rel))
                    {
                        let size = staged.content.len() as u64;
                        seen.fetch_add(size, std::sync::atomic::Ordering::Relaxed);
                        let mut found = Found::default();
                        search_one(
                            &mut searcher,
                            matcher,
                            rel,
                            Source::Staged(&staged.content),
                            limit,
                            &mut found,
                        );
                        mine.push((
                            index,
                            Searched {
                                size,
                                matches: found.files.pop(),
                            },
                        ));
                        continue;
                    }
                    let Ok(file) = sandbox.open_walked_file(rel) else {
                        mine.push((
                            index,
                            Searched {
                                size: 0,
                                matches: None,
                            },
                        ));
                        continue;
                    };
                    let size = file.metadata().map_or(0, |meta| meta.len());
                    seen.fetch_add(size, std::sync::atomic::Ordering::Relaxed);
                    // Every file taken is searched: whether the limit keeps it
                    // is decided afterwards, in path order.
                    let mut found = Found::default();
                    search_one(
                        &mut searcher,
                        matcher,
                        rel,
                        Source::File(&file),
                        limit,
                        &mut found,
                    );
                    mine.push((
                        index,
                        Searched {
                            size,
                            matches: found.files.pop(),
                        },
                    ));
                }
                results
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .append(&mut mine);
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(PoisonError::into_inner);
    results.sort_unstable_by_key(|(index, _)| *index);
    let mut found = Found::default();
    let mut total: u64 = 0;
    let mut expected = 0;
    for (index, searched) in results {
        total = total.saturating_add(searched.size);
        // A gap means a file was never taken: the limit was passed before it.
        if index != expected || total > max_bytes {
            return (found, true);
        }
        expected += 1;
        if let Some(matches) = searched.matches {
            found.match_count += matches.count;
            found.files.push(matches);
        }
    }
    (found, expected < files.len())
}

/// A file `glob` matched: its modification time (seconds, nanoseconds) and
/// root-relative path.
type GlobHit = ((i64, u64), String);
