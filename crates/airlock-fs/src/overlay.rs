//! What a code-mode run has staged and not written (DESIGN §5.2): each
//! file's new content or its removal, by resolved root-relative path. A
//! [`Sandbox::with_overlay`](crate::Sandbox::with_overlay) reads through
//! it: plans, reads, stats, greps and globs made with it see the staged
//! files as if they were written; nothing else does, and nothing in the
//! workspace changes until the run's one plan is applied.

use std::collections::BTreeMap;

/// A staged file's content and permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedFile {
    pub content: Vec<u8>,
    /// Permission bits it keeps (a moved or edited file's); `None`: 0666
    /// less the umask, as a created file.
    pub mode: Option<u32>,
    /// When it was staged (what `stat` and `glob` show as its time).
    pub mtime_ms: u64,
}

/// The staged files of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overlay {
    /// `Some`: written with this content; `None`: removed.
    files: BTreeMap<String, Option<StagedFile>>,
}

impl Overlay {
    pub fn new() -> Overlay {
        Overlay::default()
    }

    /// Stages `resolved`'s new state: its content, or `None` for removed.
    pub fn stage(&mut self, resolved: &str, state: Option<StagedFile>) {
        self.files.insert(resolved.to_owned(), state);
    }

    /// What is staged at `resolved`: `None` when nothing is, `Some(None)`
    /// when it is removed.
    pub fn get(&self, resolved: &str) -> Option<&Option<StagedFile>> {
        self.files.get(resolved)
    }

    /// Every staged path with its state, in path order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Option<StagedFile>)> {
        self.files
            .iter()
            .map(|(path, state)| (path.as_str(), state))
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The staged files (not removals) at or below `base` (`""` the root).
    pub(crate) fn files_below(&self, base: &str) -> Vec<(&str, &StagedFile)> {
        self.files
            .iter()
            .filter_map(|(path, state)| {
                let file = state.as_ref()?;
                let below = base.is_empty()
                    || path
                        .strip_prefix(base)
                        .is_some_and(|rest| rest.starts_with('/'));
                below.then_some((path.as_str(), file))
            })
            .collect()
    }
}
