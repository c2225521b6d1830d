//! Grants: a human's "always allow" for a tool (and optionally a path glob), in
//! one session or persistently, until an optional expiry.

use std::sync::Arc;

use globset::GlobMatcher;

use crate::call::{ToolCall, UnixMillis};

/// The grants in force, as a decision sees them: asked for only when a grant
/// could change the decision (a call that would ask, layer 7), so a call the
/// policy decides on its own never reads the grant store.
pub trait Grants {
    fn get(&self) -> &[Grant];
}

impl Grants for [Grant] {
    fn get(&self) -> &[Grant] {
        self
    }
}

impl Grants for Vec<Grant> {
    fn get(&self) -> &[Grant] {
        self
    }
}

impl<const N: usize> Grants for [Grant; N] {
    fn get(&self) -> &[Grant] {
        self
    }
}

/// Grants loaded on first use, at most once (the two evaluations of
/// `evaluate_resolved` share them).
pub struct LazyGrants<F> {
    load: F,
    loaded: std::cell::OnceCell<Vec<Grant>>,
}

impl<F: Fn() -> Vec<Grant>> LazyGrants<F> {
    pub fn new(load: F) -> LazyGrants<F> {
        LazyGrants {
            load,
            loaded: std::cell::OnceCell::new(),
        }
    }

    /// Whether a decision asked for them.
    pub fn loaded(&self) -> bool {
        self.loaded.get().is_some()
    }
}

impl<F: Fn() -> Vec<Grant>> Grants for LazyGrants<F> {
    fn get(&self) -> &[Grant] {
        self.loaded.get_or_init(&self.load)
    }
}

/// Where a grant applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantScope {
    /// Only calls of this session.
    Session(String),
    /// Every session.
    Persistent,
}

/// An "always allow" decision. It turns an ask into an allow, never a deny, and
/// only where the risk policy has `allow_skip`.
#[derive(Debug, Clone)]
pub struct Grant {
    pub id: Arc<str>,
    /// The exact tool name the grant covers.
    pub tool: String,
    path_glob: Option<(String, GlobMatcher)>,
    pub scope: GrantScope,
    /// The grant no longer applies to calls received at or after this time.
    pub expires_at: Option<UnixMillis>,
    /// Whose calls it covers: see [`GrantHolder`].
    pub holder: GrantHolder,
}

/// Whose calls a grant covers. An approver's "always allow" answers one
/// principal's request: a session grant covers that principal's calls in
/// that session only (another principal naming the same session string gets
/// nothing), a persistent one that user's calls in every session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantHolder {
    /// The user the grant was made for (`None`: calls made for no user).
    pub user: Option<String>,
    /// For a session grant, the owner key ([`crate::Principal::owner_key`])
    /// of the principal whose session it is.
    pub owner: Option<String>,
}

impl Grant {
    /// A grant; `path_glob` limits it to calls whose every path argument matches.
    pub fn new(
        id: impl Into<Arc<str>>,
        tool: impl Into<String>,
        path_glob: Option<&str>,
        scope: GrantScope,
        expires_at: Option<UnixMillis>,
        holder: GrantHolder,
    ) -> Result<Grant, globset::Error> {
        let path_glob = match path_glob {
            Some(pattern) => Some((
                pattern.to_owned(),
                super::paths::path_glob(pattern)?.compile_matcher(),
            )),
            None => None,
        };
        Ok(Grant {
            id: id.into(),
            tool: tool.into(),
            path_glob,
            scope,
            expires_at,
            holder,
        })
    }

    /// The path glob as written.
    pub fn path_glob(&self) -> Option<&str> {
        self.path_glob.as_ref().map(|(pattern, _)| pattern.as_str())
    }

    /// Whether the grant covers `call`, whose path arguments are `paths` in
    /// workspace-relative form (`None` for a path outside the workspace).
    pub(crate) fn covers(&self, call: &ToolCall, paths: &[Option<String>]) -> bool {
        if self.tool != call.tool {
            return false;
        }
        if self
            .expires_at
            .is_some_and(|expiry| call.received_at >= expiry)
        {
            return false;
        }
        if self.holder.user != call.principal.user {
            return false;
        }
        if let GrantScope::Session(session) = &self.scope
            && (call.session.as_deref() != Some(session.as_str())
                || self.holder.owner.as_deref() != Some(call.principal.owner_key().as_str()))
        {
            return false;
        }
        match &self.path_glob {
            None => true,
            Some((_, matcher)) => {
                !paths.is_empty()
                    && paths
                        .iter()
                        .all(|path| path.as_ref().is_some_and(|path| matcher.is_match(path)))
            }
        }
    }
}
