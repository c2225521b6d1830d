//! The textual half of the sandbox layer: lexical normalization, deny globs and
//! protected locations, applied to path-like arguments.
//!
//! This cannot see symlinks; the file tools resolve every path again with the
//! kernel's help. What it gives is an early, explainable refusal for paths that
//! are forbidden whatever the file system holds.

use std::sync::Arc;

use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};

use super::decision::{Protected, Reason};
use crate::config::AbsolutePaths;
use crate::error_code::ErrorCode;

/// Lexically normalizes a relative path: drops empty and `.` segments and resolves
/// `..`. The workspace root is `""`. `None` when `..` climbs above the start.
pub fn normalize_relative(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    Some(parts.join("/"))
}

/// Normalizes an absolute path; `..` at the root stays at the root, as the kernel
/// does.
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
    /// A relative path whose `..` climbs above the root.
    Escapes,
}

/// Compiled deny globs and protected locations.
#[derive(Debug, Clone)]
pub(crate) struct PathGuard {
    /// Absolute, canonical workspace root once bound.
    root: Option<String>,
    absolute_paths: AbsolutePaths,
    deny_set: GlobSet,
    /// The pattern (as written) behind each glob of `deny_set`.
    deny_patterns: Vec<Arc<str>>,
    deny_matchers: Vec<GlobMatcher>,
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
        let mut builder = GlobSetBuilder::new();
        let mut deny_patterns = Vec::new();
        let mut deny_matchers = Vec::new();
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
                let glob = path_glob(variant).map_err(|error| (i, glob_message(&error)))?;
                deny_matchers.push(glob.compile_matcher());
                builder.add(glob);
                deny_patterns.push(shared.clone());
            }
        }
        let deny_set = builder.build().map_err(|error| (0, glob_message(&error)))?;
        let mut guard = PathGuard {
            root: None,
            absolute_paths: config.absolute_paths,
            deny_set,
            deny_patterns,
            deny_matchers,
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
    pub(crate) fn bind(&mut self, root: &str, config_file: Option<&str>) {
        self.root = Some(normalize_absolute(root));
        if let Some(config_file) = config_file {
            self.config_file = config_file.to_owned();
        }
        self.derive_protected();
    }

    fn derive_protected(&mut self) {
        let mut protected = Vec::new();
        for (path, what) in [
            (&self.state_dir, Protected::StateDir),
            (&self.audit_log, Protected::AuditLog),
            (&self.config_file, Protected::ConfigFile),
        ] {
            match self.locate(path) {
                Location::Inside(rel) => protected.push((rel, what)),
                Location::Outside(abs) => protected.push((abs, what)),
                // Validation refuses such paths; nothing inside the root to guard.
                Location::Escapes => {}
            }
        }
        self.protected = protected;
    }

    fn locate(&self, raw: &str) -> Location {
        if raw.starts_with('/') {
            let absolute = normalize_absolute(raw);
            if let Some(root) = &self.root {
                if absolute == *root {
                    return Location::Inside(String::new());
                }
                if let Some(rest) = absolute.strip_prefix(root.as_str())
                    && let Some(rest) = rest.strip_prefix('/')
                {
                    return Location::Inside(rest.to_owned());
                }
                if root == "/" {
                    return Location::Inside(absolute[1..].to_owned());
                }
            }
            Location::Outside(absolute)
        } else {
            match normalize_relative(raw) {
                Some(relative) => Location::Inside(relative),
                None => Location::Escapes,
            }
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
        let location = self.locate(raw);
        if scope == Scope::Workspace {
            if raw.starts_with('/') && self.absolute_paths == AbsolutePaths::Reject {
                return forbidden(Reason::AbsolutePath {
                    param: param.to_owned(),
                    path: raw.to_owned(),
                });
            }
            if matches!(location, Location::Outside(_) | Location::Escapes) {
                return forbidden(Reason::EscapesRoot {
                    param: param.to_owned(),
                    path: raw.to_owned(),
                });
            }
        }
        let candidate = match &location {
            Location::Inside(path) | Location::Outside(path) => path.as_str(),
            // A foreign relative path above its server's directory: judge the text.
            Location::Escapes => raw,
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
        if matches!(location, Location::Escapes) {
            return None;
        }
        let protected = |what, ancestor| {
            forbidden(Reason::Protected {
                param: param.to_owned(),
                path: raw.to_owned(),
                what,
                ancestor,
            })
        };
        for (location, what) in &self.protected {
            let inside = is_within(candidate, location);
            let always = matches!(what, Protected::StateDir | Protected::AuditLog);
            if inside && (always || write) {
                return protected(*what, false);
            }
            if write && is_within(location, candidate) {
                return protected(*what, true);
            }
        }
        if write {
            let relative = matches!(location, Location::Inside(_));
            if candidate.split('/').any(|part| part == ".git") {
                return protected(Protected::Git, false);
            }
            if relative && candidate.is_empty() {
                return protected(Protected::Git, true);
            }
        }
        None
    }

    /// The first deny glob matching `path` or one of its ancestors.
    fn denied_by(&self, path: &str) -> Option<Arc<str>> {
        let mut end = 0;
        loop {
            let next = path[end..].find('/').map(|i| end + i);
            let prefix = &path[..next.unwrap_or(path.len())];
            if !prefix.is_empty() && self.deny_set.is_match(prefix) {
                let index = self
                    .deny_matchers
                    .iter()
                    .position(|matcher| matcher.is_match(prefix))?;
                return self.deny_patterns.get(index).cloned();
            }
            match next {
                Some(slash) => end = slash + 1,
                None => return None,
            }
        }
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
pub(crate) fn path_glob(pattern: &str) -> Result<globset::Glob, globset::Error> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
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
    }
}
