//! Change plans: what every write-class tool proposes, and the one engine that
//! applies them.
//!
//! A [`ChangePlan`] (`airlock_core::plan`) is a list of [`FileChange`]s, one per path: the hash the
//! file must have (or its absence) and what it becomes (new bytes, or absence).
//! A write or edit is one change; a delete is one change to absence; a move is
//! two (the source to absence, the target from absence, marked `moved_from`);
//! a patch is any number. The plan carries one unified diff over all its files
//! and the hash of that diff; a human approves the diff.
//!
//! [`commit`] applies a plan all or nothing:
//!
//! 1. every path is resolved afresh (every sandbox check again) and must lead
//!    where it led when the plan was made;
//! 2. under an exclusive workspace lock (`apply.lock` in the journal directory)
//!    and exclusive `flock`s on every directory involved (taken in path order,
//!    so two commits never deadlock), each file's current content is read and
//!    its hash compared with the plan's: any difference is `stale`, and nothing
//!    is written;
//! 3. the diff is derived again from the current contents and must be the one
//!    that was approved;
//! 4. one change is placed with a single atomic rename (or unlink). Several are
//!    staged first (each new content in a temporary file next to its target,
//!    fsynced), then a journal naming every step is written and fsynced in the
//!    journal directory (the commit point), then the renames and unlinks run,
//!    and the journal is removed. A crash after the commit point is rolled
//!    forward by [`recover`] on the next start; a crash before it leaves only
//!    temporary files, never a changed target.
//!
//! [`undo`] reverts an applied plan through the same engine, with `conflict`
//! instead of `stale` when a file no longer holds what was applied.

use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use airlock_core::plan::{ChangePlan, FileChange};
use rustix::fs::{AtFlags, FlockOperation, Mode};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::FsError;
use crate::files::{Placement, lock_directory, permission_bits, read_named, stage};
use crate::hash::sha256_hex;
use crate::sandbox::{Access, Sandbox, SandboxedPath, sync_directory};

/// A plan over `changes`, whose current contents are `olds` (same order):
/// the diff over all of them and its hash are derived here.
pub fn new_plan(
    tool: &str,
    summary: String,
    changes: Vec<FileChange>,
    olds: &[Option<&[u8]>],
    report: serde_json::Map<String, serde_json::Value>,
) -> ChangePlan {
    let diff = render_diff(&changes, olds);
    ChangePlan {
        tool: tool.to_owned(),
        summary,
        patch_hash: sha256_hex(&diff),
        diff,
        changes,
        report,
    }
}

/// What [`commit`] or [`undo`] did to one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileApplied {
    pub path: String,
    /// `None`: the file did not exist.
    pub before_hash: Option<String>,
    /// `None`: the file no longer exists.
    pub after_hash: Option<String>,
}

/// One file of an undo: it must hold `expected` (`None`: be absent), and gets
/// `restore` back (`None`: is removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoFile {
    pub path: String,
    pub expected: Option<String>,
    pub restore: Option<Vec<u8>>,
    /// Permission bits when the file is created again (`None`: the default).
    pub mode: Option<u32>,
}

/// Where a commit keeps its lock and journal.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommitOptions<'a> {
    /// The journal directory (in the state dir). Without one, only single-file
    /// plans can be applied, and commits are serialized by directory locks only.
    pub journal_dir: Option<&'a Path>,
    /// Recorded in the journal, so that whoever recovers an interrupted commit
    /// can say which one it was (the broker: `<approval id>:apply|undo`).
    pub label: Option<&'a str>,
    /// Testing crash recovery: stop (as a crash would) after this many steps of
    /// a journaled commit, leaving the journal behind.
    #[doc(hidden)]
    pub interrupt_after: Option<usize>,
}

/// What one change replaces: the file's content and permission bits, or
/// `None` when it does not exist.
pub type Before = Option<(Vec<u8>, u32)>;

/// The content a plan is about to replace and its permission bits, per change
/// (`None` where the file does not exist), checked against the plan's hashes
/// like [`commit`] does, so it is a faithful snapshot for undo.
pub fn snapshot(sandbox: &Sandbox, plan: &ChangePlan) -> Result<Vec<Before>, FsError> {
    plan.changes
        .iter()
        .map(|change| {
            let target = resolve_change(sandbox, change)?;
            let current = crate::files::read_current(&target)?;
            let hash = current.as_ref().map(|(bytes, _)| sha256_hex(bytes));
            check_hash(
                &change.path,
                change.before_hash.as_deref(),
                hash.as_deref(),
                Mismatch::Stale,
            )?;
            Ok(current)
        })
        .collect()
}

/// The plan with its file's new content replaced by `content`: an approver's
/// edited version of a proposal. Only a plan that writes exactly one file
/// (not a removal or a move) can be edited; the file must still hold what the
/// plan was made against (else `stale`), and the content must fit the write
/// limit. The diff is rendered again against the current content, and the
/// report says `edited: true`.
pub fn edited(
    sandbox: &Sandbox,
    plan: &ChangePlan,
    content: Vec<u8>,
) -> Result<ChangePlan, FsError> {
    let change = plan
        .editable_change()
        .map_err(|error| FsError::InvalidInput {
            message: error.to_string(),
        })?;
    crate::files::check_size(sandbox, content.len() as u64)?;
    let before = snapshot(sandbox, plan)?;
    let old = before
        .first()
        .and_then(|before| before.as_ref())
        .map(|(bytes, _)| bytes.as_slice());
    let mut report = plan.report.clone();
    report.insert("edited".to_owned(), serde_json::Value::Bool(true));
    let changed = FileChange {
        after: Some(content),
        ..change.clone()
    };
    Ok(new_plan(
        &plan.tool,
        plan.summary.clone(),
        vec![changed],
        &[old],
        report,
    ))
}

/// Whether every file of the plan already holds its after-state (a crash came
/// after the apply).
pub fn already_applied(sandbox: &Sandbox, plan: &ChangePlan) -> Result<bool, FsError> {
    for change in &plan.changes {
        let current = crate::files::current_hash(sandbox, &change.path)?;
        if current != change.after_hash() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Applies a plan, if every file is still what it was made against.
pub fn commit(
    sandbox: &Sandbox,
    plan: &ChangePlan,
    options: CommitOptions<'_>,
) -> Result<Vec<FileApplied>, FsError> {
    for change in &plan.changes {
        if let Some(after) = &change.after {
            crate::files::check_size(sandbox, after.len() as u64)?;
        }
    }
    let steps: Vec<Step<'_>> = plan
        .changes
        .iter()
        .map(|change| Step {
            path: &change.path,
            resolved: Some(&change.resolved_path),
            expected: change.before_hash.as_deref(),
            after: change.after.as_deref(),
            create_parents: change.create_parents,
            mode: change.mode,
        })
        .collect();
    let verify = |olds: &[Option<Vec<u8>>]| {
        let olds: Vec<Option<&[u8]>> = olds.iter().map(Option::as_deref).collect();
        let diff = render_diff(&plan.changes, &olds);
        if diff != plan.diff || sha256_hex(&diff) != plan.patch_hash {
            return Err(FsError::InvalidInput {
                message: format!(
                    "the plan for `{}` does not match its own diff or patch hash",
                    plan.primary_path().unwrap_or("")
                ),
            });
        }
        Ok(())
    };
    apply_steps(sandbox, &steps, options, Mismatch::Stale, true, &verify)
}

/// Reverts an applied change: every file must still hold what was applied,
/// else `conflict` and nothing changes.
pub fn undo(
    sandbox: &Sandbox,
    files: &[UndoFile],
    options: CommitOptions<'_>,
) -> Result<Vec<FileApplied>, FsError> {
    let steps: Vec<Step<'_>> = files
        .iter()
        .map(|file| Step {
            path: &file.path,
            resolved: None,
            expected: file.expected.as_deref(),
            after: file.restore.as_deref(),
            create_parents: true,
            mode: file.mode,
        })
        .collect();
    apply_steps(sandbox, &steps, options, Mismatch::Conflict, false, &|_| {
        Ok(())
    })
}

/// A journaled commit that [`recover`] finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The label the commit was made with ([`CommitOptions::label`]).
    pub label: Option<String>,
    /// Paths left as they were because something other than airlock changed
    /// them after the commit point.
    pub skipped: Vec<String>,
}

/// Rolls forward every journaled commit that was interrupted after its commit
/// point (a crash, or a step that failed). Each step is finished only if its
/// file still holds what the commit found (or already what it wrote); a file
/// changed by someone else since is left alone and reported.
pub fn recover(sandbox: &Sandbox, journal_dir: &Path) -> Result<Vec<Recovered>, FsError> {
    if !journal_dir.exists() {
        return Ok(Vec::new());
    }
    let _lock = workspace_lock(journal_dir)?;
    recover_locked(sandbox, journal_dir)
}

/// [`recover`], with the workspace lock already held.
fn recover_locked(sandbox: &Sandbox, journal_dir: &Path) -> Result<Vec<Recovered>, FsError> {
    let entries = match std::fs::read_dir(journal_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => {
            return Err(FsError::io(
                format!("cannot list {}", journal_dir.display()),
                error,
            ));
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    let mut recovered = Vec::new();
    for path in paths {
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => {
                return Err(FsError::io(
                    format!("cannot read {}", path.display()),
                    error,
                ));
            }
        };
        let journal: Journal = serde_json::from_str(&text)
            .map_err(|error| error.to_string())
            .and_then(|journal: Journal| journal.validate(sandbox).map(|()| journal))
            .map_err(|message| FsError::Io {
                context: format!("journal {} is unusable", path.display()),
                error: std::io::Error::other(message),
            })?;
        let skipped = roll_forward(sandbox, &journal, true)?;
        std::fs::remove_file(&path)
            .map_err(|error| FsError::io(format!("cannot remove {}", path.display()), error))?;
        sync_path_dir(journal_dir)?;
        recovered.push(Recovered {
            label: journal.label,
            skipped,
        });
    }
    clean_staging(sandbox, journal_dir)?;
    Ok(recovered)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mismatch {
    Stale,
    Conflict,
}

struct Step<'a> {
    path: &'a str,
    /// Where the path must resolve (plans); `None` for undo.
    resolved: Option<&'a str>,
    expected: Option<&'a str>,
    after: Option<&'a [u8]>,
    create_parents: bool,
    mode: Option<u32>,
}

/// A journal: the steps of a commit past its commit point.
#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    id: String,
    #[serde(default)]
    label: Option<String>,
    steps: Vec<JournalStep>,
}

impl Journal {
    /// A journal is data from disk: every name must be one plain component,
    /// every temporary file airlock's, and every target writable by policy.
    fn validate(&self, sandbox: &Sandbox) -> Result<(), String> {
        let plain = |name: &str| {
            !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
        };
        for step in &self.steps {
            if !plain(&step.name) {
                return Err(format!("bad file name {:?}", step.name));
            }
            if let Some(temp) = &step.temp
                && !(plain(temp) && temp.starts_with(".airlock-tmp-"))
            {
                return Err(format!("bad temporary file name {temp:?}"));
            }
            let target = if step.dir.is_empty() {
                step.name.clone()
            } else {
                format!("{}/{}", step.dir, step.name)
            };
            if let Some(refusal) = sandbox.policy().check_workspace_path("path", &target, true) {
                return Err(refusal.message);
            }
        }
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct JournalStep {
    /// The directory, canonical and root-relative.
    dir: String,
    name: String,
    action: Action,
    /// The staged new content (replace and create).
    temp: Option<String>,
    /// The hash the file had (`None`: absent).
    before_hash: Option<String>,
    /// The hash it gets (`None`: removed).
    #[serde(default)]
    after_hash: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Action {
    Replace,
    Create,
    Delete,
}

/// A step resolved, checked and (for several) staged.
struct Ready {
    path: String,
    dir: OwnedFd,
    name: String,
    action: Action,
    placement: Placement,
    temp: Option<String>,
    before_hash: Option<String>,
    after_hash: Option<String>,
}

/// Checks the current contents (in step order) under the locks.
type Verify<'a> = &'a dyn Fn(&[Option<Vec<u8>>]) -> Result<(), FsError>;

fn apply_steps(
    sandbox: &Sandbox,
    steps: &[Step<'_>],
    options: CommitOptions<'_>,
    mismatch: Mismatch,
    check_create: bool,
    verify: Verify<'_>,
) -> Result<Vec<FileApplied>, FsError> {
    if steps.len() > 1 && options.journal_dir.is_none() {
        return Err(FsError::InvalidInput {
            message: "a change to several files needs a journal directory".to_owned(),
        });
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut targets = Vec::with_capacity(steps.len());
    for step in steps {
        let target = sandbox.resolve_checked("path", step.path, Access::Write, check_create)?;
        if let Some(resolved) = step.resolved
            && target.resolved() != resolved
        {
            return Err(mismatch_error(
                mismatch,
                step.path,
                &format!(
                    "it now resolves to `{}`, not `{resolved}`",
                    target.resolved()
                ),
            ));
        }
        if !seen.insert(target.resolved().to_owned()) {
            return Err(FsError::InvalidInput {
                message: format!("`{}` is changed twice in one plan", target.resolved()),
            });
        }
        // An early answer, before any lock or parent directory.
        match (step.expected, target.exists()) {
            (None, true) => {
                return Err(mismatch_error(
                    mismatch,
                    step.path,
                    "the file was created since",
                ));
            }
            (Some(_), false) => {
                return Err(mismatch_error(
                    mismatch,
                    step.path,
                    "the file was removed since",
                ));
            }
            _ => {}
        }
        targets.push(target);
    }

    let _workspace = options.journal_dir.map(workspace_lock).transpose()?;
    // A commit interrupted earlier is finished before this one looks at the
    // files (the broker normally does this itself first, and audits it).
    if let Some(journal_dir) = options.journal_dir {
        recover_locked(sandbox, journal_dir)?;
    }
    let _directories = lock_directories(&targets)?;

    // Under the locks: what each file holds now.
    let mut olds = Vec::with_capacity(steps.len());
    let mut stats = Vec::with_capacity(steps.len());
    for (step, target) in steps.iter().zip(&targets) {
        let current = match target.existing_entry() {
            Some((parent, name)) => read_named(
                parent,
                name,
                step.path,
                sandbox.config().max_write_bytes_hard,
            )?,
            None => {
                if !target.still_missing()? {
                    return Err(mismatch_error(
                        mismatch,
                        step.path,
                        "the file was created since",
                    ));
                }
                None
            }
        };
        if let Some((_, stat)) = &current {
            // A hard link made since the plan is refused like one the plan saw.
            sandbox.link_guard().check(stat, step.path, true)?;
        }
        let hash = current.as_ref().map(|(bytes, _)| sha256_hex(bytes));
        check_hash(step.path, step.expected, hash.as_deref(), mismatch)?;
        let (bytes, stat) = match current {
            Some((bytes, stat)) => (Some(bytes), Some(stat)),
            None => (None, None),
        };
        olds.push(bytes);
        stats.push(stat);
    }
    verify(&olds)?;

    let mut ready = Vec::with_capacity(steps.len());
    for (((step, target), before), stat) in steps.iter().zip(&targets).zip(olds).zip(stats) {
        let (dir, name) = target.directory_for_write(step.create_parents)?;
        let (action, placement) = match (&stat, step.after) {
            (Some(stat), Some(_)) => (
                Action::Replace,
                Placement::Replace {
                    mode: permission_bits(stat),
                },
            ),
            (None, _) => (
                Action::Create,
                Placement::CreateNew {
                    mode: step.mode.map(Mode::from_raw_mode),
                },
            ),
            (Some(_), None) => (Action::Delete, Placement::CreateNew { mode: None }),
        };
        ready.push(Ready {
            path: step.path.to_owned(),
            dir,
            name,
            action,
            placement,
            temp: None,
            before_hash: before.as_deref().map(sha256_hex),
            after_hash: step.after.map(sha256_hex),
        });
    }

    // Every staging file is named before it exists, in a ledger a crash
    // leaves behind for recovery to clean up.
    for (step, one) in steps.iter().zip(ready.iter_mut()) {
        if step.after.is_some() {
            one.temp = Some(crate::files::staging_name());
        }
    }
    let mut ledger = match options.journal_dir {
        Some(journal_dir) => Some(StagingLedger::begin(sandbox, journal_dir, &ready)?),
        None => None,
    };
    if ready.len() == 1 {
        let (step, one) = (&steps[0], &ready[0]);
        match (step.after, &one.temp) {
            (Some(after), Some(temp)) => crate::files::write_atomically(
                &one.dir,
                &one.name,
                temp,
                after,
                one.placement,
                &one.path,
            )?,
            _ => remove(&one.dir, &one.name, &one.path)?,
        }
    } else if !ready.is_empty() {
        let journal_dir = options.journal_dir.ok_or_else(|| FsError::InvalidInput {
            message: "a change to several files needs a journal directory".to_owned(),
        })?;
        commit_journaled(
            sandbox,
            steps,
            &mut ready,
            journal_dir,
            options,
            ledger.as_mut(),
        )?;
    }

    Ok(ready
        .into_iter()
        .map(|one| FileApplied {
            path: one.path,
            before_hash: one.before_hash,
            after_hash: one.after_hash,
        })
        .collect())
}

fn commit_journaled(
    sandbox: &Sandbox,
    steps: &[Step<'_>],
    ready: &mut [Ready],
    journal_dir: &Path,
    options: CommitOptions<'_>,
    ledger: Option<&mut StagingLedger>,
) -> Result<(), FsError> {
    // Stage every new content next to its target.
    let staged = stage_all(steps, ready);
    if let Err(error) = staged {
        discard_temps(ready);
        return Err(error);
    }
    let mut journal = Journal {
        id: Uuid::new_v4().simple().to_string(),
        label: options.label.map(str::to_owned),
        steps: Vec::with_capacity(ready.len()),
    };
    for one in ready.iter() {
        journal.steps.push(JournalStep {
            dir: relative_dir(sandbox, &one.dir)?,
            name: one.name.clone(),
            action: one.action,
            temp: one.temp.clone(),
            before_hash: one.before_hash.clone(),
            after_hash: one.after_hash.clone(),
        });
    }
    let journal_path = journal_dir.join(format!("{}.json", journal.id));
    if let Err(error) = write_journal(&journal_path, &journal) {
        discard_temps(ready);
        return Err(error);
    }
    if let Some(ledger) = ledger {
        ledger.journal = Some(journal_path.clone());
    }
    // Past the commit point the commit only goes forward: if a step fails,
    // the journal stays and recovery (at the next commit or start) finishes
    // it; nothing is rolled back into a mix of old and new.
    if let Some(done) = options.interrupt_after {
        roll_forward_steps(
            sandbox,
            &journal.steps[..done.min(journal.steps.len())],
            false,
        )?;
        return Err(FsError::io(
            "commit interrupted for a test",
            std::io::Error::other("interrupted"),
        ));
    }
    let skipped = roll_forward(sandbox, &journal, false).map_err(|error| FsError::Io {
        context: format!(
            "the apply stopped after its commit point ({error}); it is finished by recovery"
        ),
        error: std::io::Error::other("interrupted apply"),
    })?;
    if let Some(path) = skipped.first() {
        return Err(FsError::Stale {
            path: path.clone(),
            reason: "it changed during the apply".to_owned(),
        });
    }
    std::fs::remove_file(&journal_path)
        .map_err(|error| FsError::io(format!("cannot remove {}", journal_path.display()), error))?;
    sync_path_dir(journal_dir)
}

fn stage_all(steps: &[Step<'_>], ready: &mut [Ready]) -> Result<(), FsError> {
    for (step, one) in steps.iter().zip(ready.iter_mut()) {
        if let (Some(after), Some(temp)) = (step.after, &one.temp) {
            stage(&one.dir, temp, after, one.placement, &one.path)?;
        }
    }
    Ok(())
}

/// The staging files one commit is about to create, written down (in the
/// journal directory, as `<id>.staging`) before any of them exists. When
/// the commit is over, whatever it left is removed with the ledger; a
/// process killed meanwhile leaves the ledger, and recovery (after the
/// journals, which may still need their staged files) removes what it
/// names. Staging happens under the workspace lock, so at recovery no
/// ledger belongs to a live commit. Not synced: a `kill -9` keeps the page
/// cache; only a power loss can leave debris behind, never a lost change.
struct StagingLedger {
    path: PathBuf,
    /// The journal of a commit past its commit point: while it exists, its
    /// staged files belong to it (recovery places them), not to the ledger.
    journal: Option<PathBuf>,
    entries: Vec<StagedEntry>,
    /// The directories of the entries, as the commit holds them.
    dirs: Vec<Option<OwnedFd>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StagedEntry {
    /// Canonical, root-relative.
    dir: String,
    temp: String,
}

const LEDGER_EXTENSION: &str = "staging";

impl StagingLedger {
    fn begin(
        sandbox: &Sandbox,
        journal_dir: &Path,
        ready: &[Ready],
    ) -> Result<StagingLedger, FsError> {
        let mut entries = Vec::new();
        let mut dirs = Vec::new();
        for one in ready {
            if let Some(temp) = &one.temp {
                entries.push(StagedEntry {
                    dir: relative_dir(sandbox, &one.dir)?,
                    temp: temp.clone(),
                });
                dirs.push(one.dir.try_clone().ok());
            }
        }
        let path = journal_dir.join(format!("{}.{LEDGER_EXTENSION}", Uuid::new_v4().simple()));
        if !entries.is_empty() {
            let text = serde_json::to_vec(&entries).map_err(|error| FsError::Io {
                context: "cannot encode the staging ledger".to_owned(),
                error: std::io::Error::other(error.to_string()),
            })?;
            std::fs::write(&path, text)
                .map_err(|error| FsError::io(format!("cannot write {}", path.display()), error))?;
        }
        Ok(StagingLedger {
            path,
            journal: None,
            entries,
            dirs,
        })
    }
}

impl Drop for StagingLedger {
    fn drop(&mut self) {
        if self.entries.is_empty() || self.journal.as_deref().is_some_and(Path::exists) {
            return;
        }
        // A staging file still there was never placed (an error, or a step
        // recovery finishes from the journal, which stays): only the
        // ledger's own names, which nothing else uses, are removed.
        let mut all_gone = true;
        for (entry, dir) in self.entries.iter().zip(&self.dirs) {
            let Some(dir) = dir else {
                all_gone = false;
                continue;
            };
            match rustix::fs::unlinkat(dir, entry.temp.as_str(), AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(_) => all_gone = false,
            }
        }
        if all_gone {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Removes what the staging ledgers in `journal_dir` name (after the
/// journals were finished), then the ledgers; returns how many files were
/// removed.
fn clean_staging(sandbox: &Sandbox, journal_dir: &Path) -> Result<usize, FsError> {
    let entries = match std::fs::read_dir(journal_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => {
            return Err(FsError::io(
                format!("cannot list {}", journal_dir.display()),
                error,
            ));
        }
    };
    let mut removed = 0;
    for ledger in entries.filter_map(Result::ok).map(|entry| entry.path()) {
        if ledger.extension().is_none_or(|ext| ext != LEDGER_EXTENSION) {
            continue;
        }
        // A ledger is data from disk: only airlock's own staging names, in
        // directories resolved beneath the root, are ever removed. One that
        // cannot be read was cut short by the crash before any staging file
        // existed.
        let staged: Vec<StagedEntry> = std::fs::read(&ledger)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        for entry in staged {
            if !crate::files::is_staging_name(&entry.temp) {
                continue;
            }
            let Ok(dir) = sandbox.open_directory(&entry.dir) else {
                continue;
            };
            if rustix::fs::unlinkat(&dir, entry.temp.as_str(), AtFlags::empty()).is_ok() {
                removed += 1;
                let _ = sync_directory(&dir);
            }
        }
        std::fs::remove_file(&ledger)
            .map_err(|error| FsError::io(format!("cannot remove {}", ledger.display()), error))?;
    }
    Ok(removed)
}

fn discard_temps(ready: &[Ready]) {
    for one in ready {
        if let Some(temp) = &one.temp {
            let _ = rustix::fs::unlinkat(&one.dir, temp.as_str(), AtFlags::empty());
        }
    }
}

fn remove(dir: &OwnedFd, name: &str, path: &str) -> Result<(), FsError> {
    rustix::fs::unlinkat(dir, name, AtFlags::empty()).map_err(|errno| match errno {
        Errno::ISDIR | Errno::PERM => FsError::IsDirectory {
            path: path.to_owned(),
        },
        errno => FsError::io(format!("cannot remove `{path}`"), errno),
    })?;
    sync_directory(dir)
}

/// Finishes a journal's steps; returns the paths skipped because their file
/// holds neither what the commit found nor what it wrote (`check`: look; a
/// live commit that holds its locks does not need to).
fn roll_forward(sandbox: &Sandbox, journal: &Journal, check: bool) -> Result<Vec<String>, FsError> {
    roll_forward_steps(sandbox, &journal.steps, check)
}

fn roll_forward_steps(
    sandbox: &Sandbox,
    steps: &[JournalStep],
    check: bool,
) -> Result<Vec<String>, FsError> {
    let mut skipped = Vec::new();
    for step in steps {
        let dir = sandbox.open_directory(&step.dir)?;
        let path = if step.dir.is_empty() {
            step.name.clone()
        } else {
            format!("{}/{}", step.dir, step.name)
        };
        let current = if check {
            // Hashed as it is read: whatever the file holds now, it is never
            // held in memory whole.
            crate::files::hash_named(&dir, &step.name, &path)?
        } else {
            step.before_hash.clone()
        };
        let finished = current == step.after_hash;
        let untouched = current == step.before_hash;
        match &step.temp {
            Some(temp) => {
                let staged =
                    match rustix::fs::statat(&dir, temp.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(_) => true,
                        Err(Errno::NOENT) => false,
                        Err(errno) => {
                            return Err(FsError::io(
                                format!("cannot look up a staged file for `{path}`"),
                                errno,
                            ));
                        }
                    };
                if !staged {
                    // Placed before the interruption (or removed as debris).
                    if !finished {
                        skipped.push(path);
                    }
                    continue;
                }
                if untouched {
                    rustix::fs::renameat(&dir, temp.as_str(), &dir, step.name.as_str()).map_err(
                        |errno| {
                            FsError::io(format!("cannot move the new content into `{path}`"), errno)
                        },
                    )?;
                } else {
                    let _ = rustix::fs::unlinkat(&dir, temp.as_str(), AtFlags::empty());
                    if !finished {
                        skipped.push(path);
                    }
                }
            }
            None => {
                if untouched && current.is_some() {
                    remove(&dir, &step.name, &path)?;
                } else if !finished {
                    skipped.push(path);
                }
            }
        }
        sync_directory(&dir)?;
    }
    Ok(skipped)
}

fn write_journal(path: &Path, journal: &Journal) -> Result<(), FsError> {
    let text = serde_json::to_vec_pretty(journal).map_err(|error| FsError::Io {
        context: "cannot encode the journal".to_owned(),
        error: std::io::Error::other(error.to_string()),
    })?;
    let temp = path.with_extension("tmp");
    let cannot =
        |error: std::io::Error| FsError::io(format!("cannot write {}", path.display()), error);
    let mut file = File::create(&temp).map_err(cannot)?;
    file.write_all(&text).map_err(cannot)?;
    file.sync_all().map_err(cannot)?;
    drop(file);
    std::fs::rename(&temp, path).map_err(cannot)?;
    match path.parent() {
        Some(dir) => sync_path_dir(dir),
        None => Ok(()),
    }
}

fn sync_path_dir(dir: &Path) -> Result<(), FsError> {
    File::open(dir)
        .and_then(|file| file.sync_all())
        .map_err(|error| FsError::io(format!("cannot sync {}", dir.display()), error))
}

/// The workspace-wide apply lock in the journal directory: applies by airlock
/// processes never interleave.
fn workspace_lock(journal_dir: &Path) -> Result<File, FsError> {
    std::fs::create_dir_all(journal_dir)
        .map_err(|error| FsError::io(format!("cannot create {}", journal_dir.display()), error))?;
    let path = journal_dir.join("apply.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|error| FsError::io(format!("cannot open {}", path.display()), error))?;
    loop {
        match rustix::fs::flock(&file, FlockOperation::LockExclusive) {
            Ok(()) => return Ok(file),
            Err(Errno::INTR) => {}
            Err(errno) => {
                return Err(FsError::io(
                    format!("cannot lock {}", path.display()),
                    errno,
                ));
            }
        }
    }
}

/// Locks every directory the targets live in, once each, in path order.
fn lock_directories(targets: &[SandboxedPath]) -> Result<Vec<OwnedFd>, FsError> {
    let mut directories: Vec<(PathBuf, &OwnedFd, &str)> = Vec::with_capacity(targets.len());
    for target in targets {
        let fd = target.lock_directory();
        let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd()))
            .map_err(|error| FsError::io("cannot read /proc/self/fd to locate a path", error))?;
        directories.push((real, fd, target.requested()));
    }
    directories.sort_by(|a, b| a.0.cmp(&b.0));
    directories.dedup_by(|a, b| a.0 == b.0);
    directories
        .into_iter()
        .map(|(_, fd, path)| lock_directory(fd, path))
        .collect()
}

fn relative_dir(sandbox: &Sandbox, dir: &OwnedFd) -> Result<String, FsError> {
    let real = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd()))
        .map_err(|error| FsError::io("cannot read /proc/self/fd to locate a path", error))?;
    real.strip_prefix(sandbox.root())
        .ok()
        .and_then(Path::to_str)
        .map(str::to_owned)
        .ok_or_else(|| FsError::Changed {
            path: real.display().to_string(),
        })
}

fn resolve_change(sandbox: &Sandbox, change: &FileChange) -> Result<SandboxedPath, FsError> {
    let target = sandbox.resolve("path", &change.path, Access::Write)?;
    if target.resolved() != change.resolved_path {
        return Err(mismatch_error(
            Mismatch::Stale,
            &change.path,
            &format!(
                "it now resolves to `{}`, not `{}`",
                target.resolved(),
                change.resolved_path
            ),
        ));
    }
    Ok(target)
}

fn check_hash(
    path: &str,
    expected: Option<&str>,
    current: Option<&str>,
    mismatch: Mismatch,
) -> Result<(), FsError> {
    match (expected, current) {
        (None, None) => Ok(()),
        (Some(expected), Some(current)) if expected == current => Ok(()),
        (None, Some(_)) => Err(mismatch_error(mismatch, path, "the file was created since")),
        (Some(_), None) => Err(mismatch_error(mismatch, path, "the file was removed since")),
        (Some(expected), Some(current)) => Err(mismatch_error(
            mismatch,
            path,
            &format!("its hash is {current}, not {expected}"),
        )),
    }
}

fn mismatch_error(mismatch: Mismatch, path: &str, reason: &str) -> FsError {
    match mismatch {
        Mismatch::Stale => FsError::Stale {
            path: path.to_owned(),
            reason: reason.to_owned(),
        },
        Mismatch::Conflict => FsError::Conflict {
            path: path.to_owned(),
        },
    }
}

/// One unified diff over all changes, naming each file where it really is
/// (symlinks resolved): a move shows as `--- a/<from>` / `+++ b/<to>` (its
/// source's removal is not shown again), a create from `/dev/null`, a delete
/// to `/dev/null`.
pub(crate) fn render_diff(changes: &[FileChange], olds: &[Option<&[u8]>]) -> String {
    let mut out = String::new();
    for (index, change) in changes.iter().enumerate() {
        let is_move_source = change.after.is_none()
            && changes
                .iter()
                .any(|other| other.moved_from.as_deref() == Some(change.path.as_str()));
        if is_move_source {
            continue;
        }
        let source = change
            .moved_from
            .as_ref()
            .and_then(|from| changes.iter().position(|other| other.path == *from));
        let old = match (&change.moved_from, source) {
            (Some(_), Some(source)) => olds.get(source).copied().flatten(),
            (Some(_), None) => None,
            (None, _) => olds.get(index).copied().flatten(),
        };
        // The diff names the files that really change: where a symlink
        // leads, not the name it was reached by.
        let from = match (&change.moved_from, source, old) {
            (Some(_), Some(source), _) => Some(changes[source].resolved_path.as_str()),
            (Some(from), None, _) => Some(from.as_str()),
            (None, _, Some(_)) => Some(change.resolved_path.as_str()),
            (None, _, None) => None,
        };
        let to = change.after.as_ref().map(|_| change.resolved_path.as_str());
        out.push_str(&file_diff(from, to, old, change.after.as_deref()));
    }
    out
}

/// A file's name in a diff header: as it is, or, where it holds a line
/// break, a control or direction character or a quote (a hostile name
/// could otherwise draw header lines of its own), quoted as git quotes
/// such names, each such character escaped.
fn header_name(prefix: &str, path: &str) -> String {
    if !path
        .chars()
        .any(|c| airlock_core::display::is_unsafe(c) || c == '"' || c == '\\')
    {
        return format!("{prefix}{path}");
    }
    let mut quoted = String::from("\"");
    for c in prefix.chars().chain(path.chars()) {
        match c {
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            '\r' => quoted.push_str("\\r"),
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if airlock_core::display::is_unsafe(c) => {
                quoted.push_str(&format!("\\u{{{:04x}}}", u32::from(c)));
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// The unified diff of one file, from `from` (`None`: /dev/null) to `to`.
/// Text content larger than this (on either side) is not diffed line by
/// line: the diff names both sides by hash and size.
pub const LARGE_DIFF_BYTES: usize = 1 << 20;

pub(crate) fn file_diff(
    from: Option<&str>,
    to: Option<&str>,
    old: Option<&[u8]>,
    new: Option<&[u8]>,
) -> String {
    let from = from.map_or_else(|| "/dev/null".to_owned(), |path| header_name("a/", path));
    let to = to.map_or_else(|| "/dev/null".to_owned(), |path| header_name("b/", path));
    let large = |bytes: Option<&[u8]>| bytes.is_some_and(|bytes| bytes.len() > LARGE_DIFF_BYTES);
    let (old_text, new_text) = match (text_of(old), text_of(new)) {
        (Some(old_text), Some(new_text)) if !large(old) && !large(new) => (old_text, new_text),
        // Binary content has no text diff, and a lossy one would hide
        // changes (two different invalid bytes both render as U+FFFD); a
        // large one no person reads: the human sees the hashes and sizes of
        // what is replaced.
        (old_text, new_text) => {
            let what = if old_text.is_some() && new_text.is_some() {
                "Large content"
            } else {
                "Binary content"
            };
            let describe = |bytes: Option<&[u8]>| {
                bytes.map_or_else(
                    || "nothing".to_owned(),
                    |bytes| format!("{} ({} bytes)", sha256_hex(bytes), bytes.len()),
                )
            };
            if old == new {
                return format!("--- {from}\n+++ {to}\n");
            }
            return format!(
                "--- {from}\n+++ {to}\n{what} differs: {} -> {}\n",
                describe(old),
                describe(new)
            );
        }
    };
    crate::diff::unified(&from, &to, old_text, new_text)
}

/// The bytes as text (absent content is empty text); `None` when they are
/// not UTF-8.
fn text_of(bytes: Option<&[u8]>) -> Option<&str> {
    match bytes {
        None => Some(""),
        Some(bytes) => std::str::from_utf8(bytes).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::file_diff;

    #[test]
    fn a_hostile_name_cannot_draw_header_lines() {
        let diff = file_diff(
            Some("x\n+++ b/README.md\n@@ -1 +1 @@"),
            Some("x\n+++ b/README.md\n@@ -1 +1 @@"),
            Some(b"a\n"),
            Some(b"b\n"),
        );
        assert!(
            diff.starts_with(
                "--- \"a/x\\n+++ b/README.md\\n@@ -1 +1 @@\"\n+++ \"b/x\\n+++ b/README.md\\n@@ -1 +1 @@\"\n@@ -1 +1 @@\n-a\n+b\n"
            ),
            "{diff}"
        );
        assert_eq!(
            file_diff(
                Some("plain/é.txt"),
                Some("plain/é.txt"),
                Some(b"a\n"),
                Some(b"b\n")
            )
            .lines()
            .next(),
            Some("--- a/plain/é.txt")
        );
        assert!(
            file_diff(None, Some("rtl\u{202e}txt.exe"), None, Some(b"b\n"))
                .contains("+++ \"b/rtl\\u{202e}txt.exe\"\n")
        );
    }
}
