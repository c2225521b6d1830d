//! Planning the write-class tools other than `write_file`: `edit_file`,
//! `apply_patch`, `delete_file` and `move_file`. Each reads what it needs
//! through the sandbox and returns a [`ChangePlan`] without side effects; the
//! plan is applied later by [`crate::commit`].

use airlock_core::edit::{EditError, apply_edit};
use airlock_core::patch::{self, PatchError, PatchFormat, PatchOp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use airlock_core::plan::{ChangePlan, FileChange};

use crate::change::new_plan;
use crate::error::FsError;
use crate::files::{check_size, read_current};
use crate::hash::sha256_hex;
use crate::sandbox::{Access, FileKind, Sandbox, SandboxedPath};

/// Arguments of `edit_file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditParams {
    pub path: String,
    pub old_string: String,
    pub new_string: String,
    #[serde(default)]
    pub replace_all: bool,
}

/// Arguments of `apply_patch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchParams {
    pub patch: String,
    #[serde(default)]
    pub patch_format: PatchFormat,
    /// Report what would change and write nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// Arguments of `delete_file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteParams {
    pub path: String,
}

/// Arguments of `move_file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveParams {
    pub from: String,
    pub to: String,
    /// Create missing parent directories of `to`.
    #[serde(default)]
    pub create_parents: bool,
}

macro_rules! from_args {
    ($($params:ty),*) => {$(
        impl $params {
            /// Parses the JSON arguments of a call; a bad argument is `invalid_input`.
            pub fn from_args(args: &Value) -> Result<$params, FsError> {
                <$params>::deserialize(args).map_err(|error| FsError::InvalidInput {
                    message: error.to_string(),
                })
            }
        }
    )*};
}
from_args!(EditParams, PatchParams, DeleteParams, MoveParams);

/// Plans an edit: exact match first, then the fuzzy one (see
/// [`airlock_core::edit`]).
pub fn prepare_edit(sandbox: &Sandbox, params: &EditParams) -> Result<ChangePlan, FsError> {
    if params.old_string.is_empty() {
        return Err(FsError::EmptyOldString);
    }
    let target = sandbox.resolve("path", &params.path, Access::Write)?;
    let (text, _) = read_text(&target)?;
    let old = text.as_bytes();
    let path = target.requested().to_owned();
    let outcome = apply_edit(
        &text,
        &params.old_string,
        &params.new_string,
        params.replace_all,
    )
    .map_err(|error| match error {
        EditError::EmptyOldString => FsError::EmptyOldString,
        EditError::NotFound => FsError::EditTargetNotFound { path: path.clone() },
        EditError::Ambiguous { count } => FsError::Ambiguous {
            message: format!(
                "`{path}`: old_string matches {count} places; add context to make it unique or set replace_all"
            ),
        },
    })?;
    let max_replacements = sandbox.config().max_edit_replacements;
    if outcome.replacements as u64 > max_replacements {
        return Err(FsError::LimitExceeded {
            limit: "max_edit_replacements",
            message: format!(
                "`{path}`: the edit makes {} replacements, over file_broker.max_edit_replacements ({max_replacements})",
                outcome.replacements
            ),
        });
    }
    check_size(sandbox, outcome.content.len() as u64)?;
    let change = change_of(&target, Some(old), Some(outcome.content.into_bytes()));
    let mut report = Map::new();
    report.insert("replacements".to_owned(), json!(outcome.replacements));
    report.insert("fuzzy".to_owned(), json!(outcome.fuzzy));
    report.insert(
        "summary_text".to_owned(),
        json!(format!(
            "Updated {path} ({} replacements)",
            outcome.replacements
        )),
    );
    let summary = change.summary();
    Ok(new_plan(
        "edit_file",
        summary,
        vec![change],
        &[Some(old)],
        report,
    ))
}

/// Plans a delete of one regular file.
pub fn prepare_delete(sandbox: &Sandbox, params: &DeleteParams) -> Result<ChangePlan, FsError> {
    let target = sandbox.resolve("path", &params.path, Access::Write)?;
    let (old, _) = read_existing(&target)?;
    no_link(&target, "delete_file")?;
    let change = change_of(&target, Some(&old), None);
    let mut report = Map::new();
    report.insert("deleted".to_owned(), json!(true));
    let summary = change.summary();
    Ok(new_plan(
        "delete_file",
        summary,
        vec![change],
        &[Some(&old)],
        report,
    ))
}

/// Plans a move of one regular file onto a free name.
pub fn prepare_move(sandbox: &Sandbox, params: &MoveParams) -> Result<ChangePlan, FsError> {
    let source = sandbox.resolve("from", &params.from, Access::Write)?;
    let (old, source_mode) = read_existing(&source)?;
    no_link(&source, "move_file")?;
    check_size(sandbox, old.len() as u64)?;
    let target = sandbox.resolve("to", &params.to, Access::Write)?;
    if target.exists() {
        return Err(FsError::FileExists {
            path: target.requested().to_owned(),
        });
    }
    if !params.create_parents && !target.missing_parents().is_empty() {
        return Err(FsError::ParentNotFound {
            path: target.requested().to_owned(),
        });
    }
    if source.resolved() == target.resolved() {
        return Err(FsError::InvalidInput {
            message: "from and to name the same file".to_owned(),
        });
    }
    let changes = vec![
        change_of(&source, Some(&old), None),
        FileChange {
            create_parents: params.create_parents,
            moved_from: Some(source.requested().to_owned()),
            mode: Some(source_mode),
            ..change_of(&target, None, Some(old.clone()))
        },
    ];
    let mut report = Map::new();
    report.insert("from".to_owned(), json!(source.requested()));
    report.insert("to".to_owned(), json!(target.requested()));
    let summary = changes[1].summary();
    Ok(new_plan(
        "move_file",
        summary,
        changes,
        &[Some(&old), None],
        report,
    ))
}

/// Plans a patch (V4A or unified): every operation must succeed, or nothing is
/// planned. The report lists `files_changed`, `changed_paths` (sorted), `ops`
/// counts and `summary_text`.
pub fn prepare_patch(sandbox: &Sandbox, params: &PatchParams) -> Result<ChangePlan, FsError> {
    if params.patch.trim().is_empty() {
        return Err(FsError::InvalidInput {
            message: "patch is empty".to_owned(),
        });
    }
    check_size(sandbox, params.patch.len() as u64)?;
    let parsed = patch::parse(&params.patch, params.patch_format).map_err(patch_error)?;
    let config = sandbox.config();
    let format = match parsed.format {
        PatchFormat::V4a => airlock_core::config::PatchFormatName::V4a,
        PatchFormat::Unified | PatchFormat::Auto => airlock_core::config::PatchFormatName::Unified,
    };
    if !config.allowed_patch_formats.contains(&format) {
        let name = match format {
            airlock_core::config::PatchFormatName::V4a => "v4a",
            airlock_core::config::PatchFormatName::Unified => "unified",
        };
        return Err(FsError::LimitExceeded {
            limit: "allowed_patch_formats",
            message: format!("the patch is in the {name} format, which is not allowed here"),
        });
    }
    // A move changes two files.
    let changed: u64 = parsed
        .ops
        .iter()
        .map(|op| match op {
            PatchOp::Update {
                path,
                move_to: Some(to),
                ..
            } if to != path => 2,
            _ => 1,
        })
        .sum();
    if changed > config.max_changed_files {
        return Err(FsError::LimitExceeded {
            limit: "max_changed_files",
            message: format!(
                "the patch changes {changed} files, over file_broker.max_changed_files ({})",
                config.max_changed_files
            ),
        });
    }
    let mut changes = Vec::new();
    let mut olds: Vec<Option<Vec<u8>>> = Vec::new();
    let (mut added, mut updated, mut deleted, mut moved) = (0u64, 0u64, 0u64, 0u64);
    for op in &parsed.ops {
        match op {
            PatchOp::Add { path, content } => {
                let target = sandbox.resolve("patch", path, Access::Write)?;
                if target.exists() {
                    return Err(FsError::FileExists {
                        path: target.requested().to_owned(),
                    });
                }
                check_size(sandbox, content.len() as u64)?;
                changes.push(FileChange {
                    create_parents: true,
                    ..change_of(&target, None, Some(content.clone().into_bytes()))
                });
                olds.push(None);
                added += 1;
            }
            PatchOp::Delete { path } => {
                let target = sandbox.resolve("patch", path, Access::Write)?;
                let (old, _) = read_existing(&target)?;
                no_link(&target, "a Delete File")?;
                changes.push(change_of(&target, Some(&old), None));
                olds.push(Some(old));
                deleted += 1;
            }
            PatchOp::Update {
                path,
                move_to,
                chunks,
            } => {
                let target = sandbox.resolve("patch", path, Access::Write)?;
                let (text, source_mode) = read_text(&target)?;
                let new =
                    patch::apply_chunks(target.requested(), &text, chunks).map_err(patch_error)?;
                let old = text.into_bytes();
                check_size(sandbox, new.len() as u64)?;
                let source = change_of(&target, Some(&old), Some(new.into_bytes()));
                match move_to {
                    None => {
                        changes.push(source);
                        olds.push(Some(old));
                        updated += 1;
                    }
                    Some(to) => {
                        no_link(&target, "a Move to")?;
                        let destination = sandbox.resolve("patch", to, Access::Write)?;
                        if destination.exists() {
                            return Err(FsError::FileExists {
                                path: destination.requested().to_owned(),
                            });
                        }
                        let after = source.after.clone();
                        changes.push(FileChange {
                            after: None,
                            ..source
                        });
                        olds.push(Some(old));
                        changes.push(FileChange {
                            create_parents: true,
                            moved_from: Some(target.requested().to_owned()),
                            mode: Some(source_mode),
                            ..change_of(&destination, None, after)
                        });
                        olds.push(None);
                        moved += 1;
                    }
                }
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for change in &changes {
        if !seen.insert(change.resolved_path.as_str()) {
            return Err(FsError::ParseError {
                message: format!("the patch changes `{}` more than once", change.path),
            });
        }
    }
    if changes.is_empty() {
        return Err(FsError::ParseError {
            message: "the patch contains no file operation".to_owned(),
        });
    }
    let shown: Vec<&FileChange> = changes
        .iter()
        .filter(|change| {
            !(change.after.is_none()
                && changes
                    .iter()
                    .any(|other| other.moved_from.as_deref() == Some(change.path.as_str())))
        })
        .collect();
    let summary = match shown.as_slice() {
        [one] => one.summary(),
        many => format!(
            "PATCH {} files: {}",
            many.len(),
            many.iter()
                .map(|change| change.summary())
                .collect::<Vec<_>>()
                .join("; ")
        ),
    };
    let mut changed_paths: Vec<String> = changes.iter().map(|c| c.path.clone()).collect();
    changed_paths.sort();
    let mut report = Map::new();
    report.insert("files_changed".to_owned(), json!(changed_paths.len()));
    report.insert("changed_paths".to_owned(), json!(changed_paths));
    report.insert(
        "ops".to_owned(),
        json!({"add": added, "update": updated, "delete": deleted, "move": moved}),
    );
    report.insert(
        "summary_text".to_owned(),
        json!(format!(
            "Applied patch: {added} added, {updated} updated, {deleted} deleted, {moved} moved"
        )),
    );
    report.insert(
        "patch_format".to_owned(),
        serde_json::to_value(parsed.format).unwrap_or(Value::Null),
    );
    let olds: Vec<Option<&[u8]>> = olds.iter().map(Option::as_deref).collect();
    Ok(new_plan("apply_patch", summary, changes, &olds, report))
}

fn patch_error(error: PatchError) -> FsError {
    match error {
        PatchError::Parse { line, message } => FsError::ParseError {
            message: format!("line {line}: {message}"),
        },
        PatchError::HunkRejected { path, message } => FsError::HunkRejected {
            message: format!("`{path}`: {message}"),
        },
        PatchError::Ambiguous { path, message } => FsError::Ambiguous {
            message: format!("`{path}`: {message}"),
        },
    }
}

/// The change of `target` from `before` (`None`: absent) to `after`
/// (`None`: removed), creating no parents.
fn change_of(target: &SandboxedPath, before: Option<&[u8]>, after: Option<Vec<u8>>) -> FileChange {
    FileChange {
        path: target.requested().to_owned(),
        resolved_path: target.resolved().to_owned(),
        before_hash: before.map(sha256_hex),
        after,
        create_parents: false,
        moved_from: None,
        mode: None,
    }
}

/// Deleting or moving acts on a file, never through a symbolic link: the
/// link and its target are different things, and a human approving
/// `DELETE link` must not see something else disappear. Naming the file
/// itself is the fix.
fn no_link(target: &SandboxedPath, what: &str) -> Result<(), FsError> {
    if target.requested() == target.resolved() {
        return Ok(());
    }
    Err(FsError::InvalidInput {
        message: format!(
            "`{}` leads through a symbolic link to `{}`; {what} names the file itself",
            target.requested(),
            target.resolved()
        ),
    })
}

/// The whole content of an existing regular file, and its permission bits.
fn read_existing(target: &SandboxedPath) -> Result<(Vec<u8>, u32), FsError> {
    match target.kind() {
        None => Err(FsError::NotFound {
            path: target.requested().to_owned(),
        }),
        Some(FileKind::Directory) => Err(FsError::IsDirectory {
            path: target.requested().to_owned(),
        }),
        Some(FileKind::File | FileKind::Other) => {
            read_current(target)?.ok_or_else(|| FsError::NotFound {
                path: target.requested().to_owned(),
            })
        }
    }
}

/// The content of an existing file as UTF-8 text (edits and patches).
fn read_text(target: &SandboxedPath) -> Result<(String, u32), FsError> {
    let (bytes, mode) = read_existing(target)?;
    let text = String::from_utf8(bytes).map_err(|_| FsError::InvalidUtf8 {
        path: target.requested().to_owned(),
    })?;
    Ok((text, mode))
}

/// One file a previewed command changed: what it holds afterwards, or
/// `None` when the command deleted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandChange {
    /// Root-relative.
    pub path: String,
    pub after: Option<Vec<u8>>,
    /// For a file the command created: whether it is executable.
    pub executable: bool,
}

/// Plans the file changes a command made in its preview as one plan, applied
/// like a patch's: every path through the sandbox as a write, the file's
/// current content hashed (so a file changed since the preview is stale),
/// the size and file-count limits. `summary` names the command.
pub fn prepare_command_changes(
    sandbox: &Sandbox,
    summary: String,
    changes: Vec<CommandChange>,
    report: Map<String, Value>,
) -> Result<ChangePlan, FsError> {
    let config = sandbox.config();
    if changes.len() as u64 > config.max_changed_files {
        return Err(FsError::LimitExceeded {
            limit: "max_changed_files",
            message: format!(
                "the command changes {} files, over file_broker.max_changed_files ({})",
                changes.len(),
                config.max_changed_files
            ),
        });
    }
    let mut planned = Vec::new();
    let mut olds: Vec<Option<Vec<u8>>> = Vec::new();
    for change in changes {
        let target = sandbox.resolve("path", &change.path, Access::Write)?;
        let old = match target.kind() {
            None => None,
            Some(FileKind::Directory) => {
                return Err(FsError::IsDirectory {
                    path: target.requested().to_owned(),
                });
            }
            Some(FileKind::File | FileKind::Other) => {
                read_current(&target)?.map(|(bytes, _)| bytes)
            }
        };
        if old.is_none() && change.after.is_none() {
            continue;
        }
        if let Some(after) = &change.after {
            check_size(sandbox, after.len() as u64)?;
        } else {
            no_link(&target, "a command's delete")?;
        }
        let created = old.is_none();
        planned.push(FileChange {
            create_parents: true,
            mode: (created && change.executable).then_some(0o755),
            ..change_of(&target, old.as_deref(), change.after)
        });
        olds.push(old);
    }
    let olds: Vec<Option<&[u8]>> = olds.iter().map(Option::as_deref).collect();
    Ok(new_plan("exec", summary, planned, &olds, report))
}
