//! The textual half of the sandbox layer: lexical normalization, deny globs and
//! protected locations, applied to path-like arguments.
//!
//! This cannot see symlinks; the file tools resolve every path again with the
//! kernel's help. What it gives is an early, explainable refusal for paths that
//! are forbidden whatever the file system holds.

use std::sync::Arc;

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};

use super::decision::{Protected, Reason};
use crate::config::AbsolutePaths;
use crate::error_code::ErrorCode;

/// Lexically normalizes a relative path: drops empty and `.` segments and resolves
/// `..`. The workspace root is `""`. `None` for an absolute path, or when `..`
/// climbs above the start.
pub fn normalize_relative(path: &str) -> Option<String> {
    if path.starts_with('/') {
        return None;
    }
    normal_segments(path, false).map(|parts| parts.join("/"))
}

/// Normalizes an absolute path; `..` at the root stays at the root, as the kernel
/// does.
fn normalize_absolute(path: &str) -> String {
    let parts = normal_segments(path, true).unwrap_or_default();
    format!("/{}", parts.join("/"))
}

/// The segments of `path` without empty and `.` segments, `..` resolved. A `..`
/// above the start is dropped when `clamp` (as at `/`), else fails.
fn normal_segments(path: &str, clamp: bool) -> Option<Vec<&str>> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() && !clamp {
                    return None;
                }
            }
            part => parts.push(part),
        }
    }
    Some(parts)
}

/// The lexical normal form of a path argument, as rule conditions see it:
/// `./a/../b` is `b`, `/x/./y` is `/x/y`; a relative path climbing above its start
/// is left as written.
pub(crate) fn normalize_lexically(raw: &str) -> std::borrow::Cow<'_, str> {
    if raw.starts_with('/') {
        std::borrow::Cow::Owned(normalize_absolute(raw))
    } else {
        match normalize_relative(raw) {
            Some(normalized) if normalized == raw => std::borrow::Cow::Borrowed(raw),
            Some(normalized) => std::borrow::Cow::Owned(normalized),
            None => std::borrow::Cow::Borrowed(raw),
        }
    }
}

/// Globs in list order, with a set for the common "nothing matches" answer.
#[derive(Debug, Clone)]
pub(crate) struct PatternList {
    set: GlobSet,
    matchers: Vec<(GlobMatcher, Arc<str>)>,
}

impl PatternList {
    /// Each glob with the pattern (as written) to report when it matches.
    pub(crate) fn new(globs: Vec<(Glob, Arc<str>)>) -> Result<PatternList, globset::Error> {
        let mut builder = GlobSetBuilder::new();
        let mut matchers = Vec::with_capacity(globs.len());
        for (glob, pattern) in globs {
            matchers.push((glob.compile_matcher(), pattern));
            builder.add(glob);
        }
        Ok(PatternList {
            set: builder.build()?,
            matchers,
        })
    }

    /// The first pattern, in list order, that matches `name`.
    pub(crate) fn first_match(&self, name: &str) -> Option<&Arc<str>> {
        if !self.set.is_match(name) {
            return None;
        }
        self.matchers
            .iter()
            .find(|(matcher, _)| matcher.is_match(name))
            .map(|(_, pattern)| pattern)
    }
}

/// Whether the argument belongs to a built-in tool (a workspace path) or to
/// another server (whose paths may lie anywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Workspace,
    Foreign,
}

/// Where a path lies, lexically.
#[derive(Debug, PartialEq, Eq)]
enum Location {
    /// Inside the root, as a normalized relative path (`""` is the root).
    Inside(String),
    /// Outside the root, as a normalized absolute path.
    Outside(String),
    /// An absolute path while no root is bound: it cannot be placed.
    Unplaced(String),
    /// A relative path whose `..` climbs above an unbound root.
    Escapes,
}

/// The names that make a directory a workspace (`airlock` finds the
/// nearest one above where it runs).
const DEFAULT_STATE_DIR: &str = ".airlock";
const CONFIG_FILE_NAME: &str = "airlock.yaml";

/// Compiled deny globs and protected locations.
#[derive(Debug, Clone)]
pub(crate) struct PathGuard {
    /// Absolute, canonical workspace root once bound.
    root: Option<String>,
    absolute_paths: AbsolutePaths,
    deny: PatternList,
    /// Protected locations in the same form `locate` gives: relative when inside
    /// the root, absolute otherwise.
    protected: Vec<(String, Protected)>,
    /// The configured locations, kept to re-derive `protected` when bound.
    state_dir: String,
    audit_log: String,
    config_file: String,
}

pub(crate) struct PathGuardConfig<'a> {
    pub absolute_paths: AbsolutePaths,
    pub deny_globs: &'a [String],
    pub state_dir: &'a str,
    pub audit_log: &'a str,
}

impl PathGuard {
    /// Compiles the deny globs; an error names the index of the bad glob.
    pub(crate) fn new(config: PathGuardConfig<'_>) -> Result<PathGuard, (usize, String)> {
        let mut globs = Vec::new();
        for (i, pattern) in config.deny_globs.iter().enumerate() {
            if pattern.is_empty() {
                return Err((i, "must not be empty".to_owned()));
            }
            let shared: Arc<str> = Arc::from(pattern.as_str());
            // `dir/**` also denies `dir` itself, so listing it reveals nothing.
            let variants = match pattern.strip_suffix("/**") {
                Some(dir) if !dir.is_empty() => vec![pattern.as_str(), dir],
                _ => vec![pattern.as_str()],
            };
            for variant in variants {
                let glob =
                    glob_for_paths(variant, true).map_err(|error| (i, glob_message(&error)))?;
                globs.push((glob, shared.clone()));
            }
        }
        let deny = PatternList::new(globs).map_err(|error| (0, glob_message(&error)))?;
        let mut guard = PathGuard {
            root: None,
            absolute_paths: config.absolute_paths,
            deny,
            protected: Vec::new(),
            state_dir: config.state_dir.to_owned(),
            audit_log: config.audit_log.to_owned(),
            config_file: "airlock.yaml".to_owned(),
        };
        guard.derive_protected();
        Ok(guard)
    }

    /// Binds the guard to the canonical workspace root and the config file's path
    /// (absolute, or relative to the root).
    pub(crate) fn protected_paths(&self) -> Vec<(String, Protected)> {
        vec![
            (self.state_dir.clone(), Protected::StateDir),
            (self.audit_log.clone(), Protected::AuditLog),
            (self.config_file.clone(), Protected::ConfigFile),
            ("airlock.yaml".to_owned(), Protected::ConfigFile),
        ]
    }

    pub(crate) fn bind(&mut self, root: &str, config_file: Option<&str>) {
        self.root = Some(normalize_absolute(root));
        if let Some(config_file) = config_file {
            self.config_file = config_file.to_owned();
        }
        self.derive_protected();
    }

    fn derive_protected(&mut self) {
        let mut protected = Vec::new();
        // The default config file is protected even when --config names another:
        // it is what every run without --config reads.
        let default_config = "airlock.yaml".to_owned();
        for (path, what) in [
            (&self.state_dir, Protected::StateDir),
            (&self.audit_log, Protected::AuditLog),
            (&self.config_file, Protected::ConfigFile),
            (&default_config, Protected::ConfigFile),
        ] {
            match self.locate(path) {
                Location::Inside(rel) => protected.push((rel.to_lowercase(), what)),
                Location::Outside(abs) | Location::Unplaced(abs) => {
                    protected.push((abs.to_lowercase(), what));
                }
                // Validation refuses relative paths that climb out of the root.
                Location::Escapes => {}
            }
        }
        self.protected = protected;
    }

    fn locate(&self, raw: &str) -> Location {
        if raw.starts_with('/') {
            return self.place_absolute(normalize_absolute(raw));
        }
        match normalize_relative(raw) {
            Some(relative) => Location::Inside(relative),
            // Climbing above the root: once bound, see where it lands.
            None => match &self.root {
                Some(root) => self.place_absolute(normalize_absolute(&format!("{root}/{raw}"))),
                None => Location::Escapes,
            },
        }
    }

    fn place_absolute(&self, absolute: String) -> Location {
        let Some(root) = &self.root else {
            return Location::Unplaced(absolute);
        };
        if absolute == *root {
            return Location::Inside(String::new());
        }
        if root == "/" {
            return Location::Inside(absolute[1..].to_owned());
        }
        match absolute
            .strip_prefix(root.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
        {
            Some(rest) => Location::Inside(rest.to_owned()),
            None => Location::Outside(absolute),
        }
    }

    /// The protected locations as absolute paths (the configured ones, the
    /// default config file and the root's `.git`), once bound; empty before.
    pub(crate) fn protected_absolute(&self) -> Vec<(String, Protected)> {
        let Some(root) = &self.root else {
            return Vec::new();
        };
        let join = |rel: &str| {
            if rel.is_empty() {
                root.clone()
            } else if root == "/" {
                format!("/{rel}")
            } else {
                format!("{root}/{rel}")
            }
        };
        let default_config = "airlock.yaml".to_owned();
        let git = ".git".to_owned();
        [
            (&self.state_dir, Protected::StateDir),
            (&self.audit_log, Protected::AuditLog),
            (&self.config_file, Protected::ConfigFile),
            (&default_config, Protected::ConfigFile),
            (&git, Protected::Git),
        ]
        .into_iter()
        .filter_map(|(raw, what)| match self.locate(raw) {
            Location::Inside(rel) => Some((join(&rel), what)),
            Location::Outside(abs) | Location::Unplaced(abs) => Some((abs, what)),
            Location::Escapes => None,
        })
        .collect()
    }

    /// The workspace-relative form of `raw`, if it lies inside the root.
    pub(crate) fn workspace_relative(&self, raw: &str) -> Option<String> {
        match self.locate(raw) {
            Location::Inside(relative) => Some(relative),
            Location::Outside(_) | Location::Unplaced(_) | Location::Escapes => None,
        }
    }

    /// Checks one path argument. `write` is whether the call can change things.
    pub(crate) fn check(
        &self,
        param: &str,
        raw: &str,
        scope: Scope,
        write: bool,
    ) -> Option<(Reason, ErrorCode)> {
        let forbidden = |reason| Some((reason, ErrorCode::PathForbidden));
        if raw.contains('\0') {
            return forbidden(Reason::NulByte {
                param: param.to_owned(),
            });
        }
        if scope == Scope::Workspace
            && raw.starts_with('/')
            && self.absolute_paths == AbsolutePaths::Reject
        {
            let inside = self
                .root
                .as_deref()
                .and_then(|root| raw.strip_prefix(root))
                .and_then(|rest| rest.strip_prefix('/'))
                .and_then(normalize_relative)
                .filter(|rel| !rel.is_empty() && rel != "." && !rel.starts_with(".."));
            return forbidden(Reason::AbsolutePath {
                param: param.to_owned(),
                path: raw.to_owned(),
                inside,
            });
        }
        let location = self.locate(raw);
        let escapes = || {
            forbidden(Reason::EscapesRoot {
                param: param.to_owned(),
                path: raw.to_owned(),
            })
        };
        let candidate = match &location {
            Location::Inside(path) => path.as_str(),
            Location::Outside(path) if scope == Scope::Foreign => path.as_str(),
            // Outside the sandbox for a built-in tool; and without a bound root
            // nothing can be placed: refuse rather than guess.
            Location::Outside(_) | Location::Unplaced(_) | Location::Escapes => {
                return escapes();
            }
        };
        if let Some(pattern) = self.denied_by(candidate) {
            return Some((
                Reason::DenyGlob {
                    param: param.to_owned(),
                    path: raw.to_owned(),
                    pattern,
                },
                ErrorCode::PathDenied,
            ));
        }
        let protected = |what, ancestor| {
            forbidden(Reason::Protected {
                param: param.to_owned(),
                path: raw.to_owned(),
                what,
                ancestor,
            })
        };
        // Case-insensitive, so `.GIT` or `AIRLOCK.YAML` on a case-insensitive file
        // system are still caught.
        let folded = candidate.to_lowercase();
        for (location, what) in &self.protected {
            let inside = is_within(&folded, location);
            let always = matches!(what, Protected::StateDir | Protected::AuditLog);
            if inside && (always || write) {
                return protected(*what, false);
            }
            if write && is_within(location, &folded) {
                return protected(*what, true);
            }
        }
        // Any workspace's markers, at any depth: a nested `.airlock/` is
        // another workspace's state (never read or written) and a nested
        // `airlock.yaml` its policy (never written), so no call can plant a
        // workspace that a later command, run from below, would find.
        if folded.split('/').any(|part| part == DEFAULT_STATE_DIR) {
            return protected(Protected::StateDir, false);
        }
        if write && folded.rsplit('/').next() == Some(CONFIG_FILE_NAME) {
            return protected(Protected::ConfigFile, false);
        }
        if write {
            if folded.split('/').any(|part| part == ".git") {
                return protected(Protected::Git, false);
            }
            if matches!(location, Location::Inside(_)) && folded.is_empty() {
                return protected(Protected::Git, true);
            }
        }
        None
    }

    /// The first deny glob matching `path` or one of its ancestors.
    fn denied_by(&self, path: &str) -> Option<Arc<str>> {
        let ancestors = path.match_indices('/').map(|(slash, _)| &path[..slash]);
        ancestors
            .chain(std::iter::once(path))
            .filter(|prefix| !prefix.is_empty())
            .find_map(|prefix| self.deny.first_match(prefix).cloned())
    }
}

/// Whether `path` is `location` or lies below it. The root (`""`) contains every
/// relative path.
fn is_within(path: &str, location: &str) -> bool {
    if location.is_empty() {
        return !path.starts_with('/');
    }
    path == location
        || path
            .strip_prefix(location)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// A glob over paths: `*` stays within one segment, `**` crosses them.
pub(crate) fn path_glob(pattern: &str) -> Result<Glob, globset::Error> {
    glob_for_paths(pattern, false)
}

/// Deny globs are case-insensitive, so that a case-insensitive file system
/// cannot be used to slip past them.
fn glob_for_paths(pattern: &str, case_insensitive: bool) -> Result<Glob, globset::Error> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .case_insensitive(case_insensitive)
        .build()
}

/// An error message for a glob that does not compile.
pub(crate) fn glob_message(error: &globset::Error) -> String {
    format!("invalid glob: {}", error.kind())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> PathGuard {
        let globs = ["**/.env", "**/*.pem", "**/*id_rsa*", "**/secrets/**"].map(String::from);
        let mut guard = PathGuard::new(PathGuardConfig {
            absolute_paths: AbsolutePaths::Reject,
            deny_globs: &globs,
            state_dir: ".airlock",
            audit_log: ".airlock/audit.jsonl",
        })
        .unwrap();
        guard.bind("/work/repo", Some("/work/repo/airlock.yaml"));
        guard
    }

    fn code(raw: &str, scope: Scope, write: bool) -> Option<&'static str> {
        guard()
            .check("path", raw, scope, write)
            .map(|(_, code)| code.as_str())
    }

    #[test]
    fn normalization() {
        assert_eq!(normalize_relative("./a//b/../c/").as_deref(), Some("a/c"));
        assert_eq!(normalize_relative("a/../..").as_deref(), None);
        assert_eq!(normalize_relative(".").as_deref(), Some(""));
        assert_eq!(normalize_relative("/src/x").as_deref(), None);
        assert_eq!(normalize_absolute("/a/../../b/./c"), "/b/c");
    }

    #[test]
    fn workspace_paths() {
        use Scope::Workspace as W;
        let cases = [
            ("src/main.rs", true, None),
            ("../etc/passwd", false, Some("path_forbidden")),
            ("src/../../x", false, Some("path_forbidden")),
            ("/etc/passwd", false, Some("path_forbidden")),
            ("a\0b", false, Some("path_forbidden")),
            (".env", false, Some("path_denied")),
            ("config/prod/.env", false, Some("path_denied")),
            ("keys/server.pem", false, Some("path_denied")),
            ("home/.ssh/id_rsa.pub", false, Some("path_denied")),
            ("secrets", false, Some("path_denied")),
            ("app/secrets/token.txt", false, Some("path_denied")),
            (".airlock/approvals.db", false, Some("path_forbidden")),
            ("./.airlock", false, Some("path_forbidden")),
            ("airlock.yaml", false, None),
            ("airlock.yaml", true, Some("path_forbidden")),
            (".git/config", false, None),
            (".git/hooks/pre-commit", true, Some("path_forbidden")),
            ("vendor/dep/.git/HEAD", true, Some("path_forbidden")),
            (".", true, Some("path_forbidden")),
            (".", false, None),
            ("src/.gitignore", true, None),
        ];
        for (raw, write, expected) in cases {
            assert_eq!(code(raw, W, write), expected, "{raw} write={write}");
        }
    }

    #[test]
    fn foreign_paths() {
        use Scope::Foreign as F;
        assert_eq!(code("/tmp/notes.txt", F, true), None);
        assert_eq!(code("/home/u/.env", F, false), Some("path_denied"));
        assert_eq!(
            code("/work/repo/.airlock/key", F, false),
            Some("path_forbidden")
        );
        assert_eq!(
            code("/work/repo/.git/config", F, true),
            Some("path_forbidden")
        );
        assert_eq!(code("/work/repo", F, true), Some("path_forbidden"));
        assert_eq!(code("../../x/.env", F, false), Some("path_denied"));
        assert_eq!(code("user@example.com", F, true), None);
        // Relative paths climbing out of the root are placed against it.
        assert_eq!(
            code("../repo/.airlock/approvals.db", F, false),
            Some("path_forbidden")
        );
        assert_eq!(
            code("../repo/.git/hooks/pre-commit", F, true),
            Some("path_forbidden")
        );
        assert_eq!(code("../other/notes.txt", F, true), None);
        // Case does not help.
        assert_eq!(
            code("/work/repo/.AIRLOCK/key", F, false),
            Some("path_forbidden")
        );
        assert_eq!(
            code("/work/repo/.GIT/config", F, true),
            Some("path_forbidden")
        );
        assert_eq!(code("/home/u/.ENV", F, false), Some("path_denied"));
    }

    #[test]
    fn an_unbound_guard_refuses_what_it_cannot_place() {
        let globs = ["**/.env"].map(String::from);
        let guard = PathGuard::new(PathGuardConfig {
            absolute_paths: AbsolutePaths::WithinRoot,
            deny_globs: &globs,
            state_dir: ".airlock",
            audit_log: ".airlock/audit.jsonl",
        })
        .unwrap();
        let code = |raw: &str, scope| {
            guard
                .check("path", raw, scope, false)
                .map(|(_, code)| code.as_str())
        };
        assert_eq!(
            code("/anything/.airlock/x", Scope::Foreign),
            Some("path_forbidden")
        );
        assert_eq!(code("../x", Scope::Foreign), Some("path_forbidden"));
        assert_eq!(
            code("/work/repo/a.txt", Scope::Workspace),
            Some("path_forbidden")
        );
        assert_eq!(code("src/a.rs", Scope::Workspace), None);
    }
}
