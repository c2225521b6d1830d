//! `write_file` in two halves, so a human can decide in between (spec 000):
//!
//! - [`prepare_write`] has no side effects. It resolves and checks the path,
//!   reads the current content, and returns a [`WritePlan`]: the unified diff a
//!   human approves, the hash of the content it was made against, and the new
//!   content. The plan is plain data (serde) so it can be stored and applied by
//!   another process later.
//! - [`commit_write`] applies a plan. It resolves the path afresh (every check
//!   again), refuses with `stale` when the file is no longer what the plan was
//!   made against, re-derives the diff so that what is written is exactly what
//!   was shown, and writes atomically: a temporary file in the same directory
//!   (`O_CREAT | O_EXCL | O_NOFOLLOW`), fsync, the old file's permission bits,
//!   `renameat` over the target, fsync of the directory. The check and the
//!   rename happen under an exclusive `flock` on the directory, so of many
//!   plans made against the same content exactly one applies and the others
//!   are `stale`, whichever threads or processes apply them.
//!
//! A create re-checks that the file still does not exist; if it appeared in the
//! meantime the answer is `stale` (not `file_exists`): the proposal was made
//! against a world that changed, which is what `stale` means everywhere else.
//! The final rename of a create uses `RENAME_NOREPLACE`, so a file appearing in
//! the last instant is not overwritten either.
//!
//! For undo, [`snapshot_before`] returns the content a plan is about to
//! replace, and [`restore`] puts it back (or removes a created file) if the
//! file still holds what was applied, else `conflict`.

use serde::{Deserialize, Serialize};

use crate::change::{ChangePlan, CommitOptions, UndoFile};
use crate::error::FsError;
use crate::files::{check_size, read_current, unified_diff};
use crate::hash::sha256_hex;
use crate::sandbox::{Access, Sandbox};

/// Arguments of `write_file`, as the tool call carries them. The new content
/// is `content` (text, or standard base64 with `encoding: bytes`: spec 003's
/// `inline_text` and `inline_bytes`), or `blob_ref`, a blob in airlock's store
/// (spec 003's `blob_ref`, e.g. a large output read earlier); exactly one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    pub path: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub encoding: crate::read::Encoding,
    #[serde(default)]
    pub blob_ref: Option<String>,
    #[serde(default)]
    pub mode: WriteMode,
    /// Create missing parent directories (each must obey the create allowlist).
    #[serde(default)]
    pub create_parents: bool,
}

impl WriteParams {
    /// Parses the JSON arguments of a call; a bad argument is `invalid_input`.
    pub fn from_args(args: &serde_json::Value) -> Result<WriteParams, FsError> {
        WriteParams::deserialize(args).map_err(|error| FsError::InvalidInput {
            message: error.to_string(),
        })
    }

    /// A text write of `content` to `path` (overwrite, no parents).
    pub fn text(path: &str, content: &str) -> WriteParams {
        WriteParams {
            path: path.to_owned(),
            content: Some(content.to_owned()),
            encoding: crate::read::Encoding::Utf8,
            blob_ref: None,
            mode: WriteMode::Overwrite,
            create_parents: false,
        }
    }

    /// The bytes to write.
    fn bytes(&self, sandbox: &Sandbox) -> Result<Vec<u8>, FsError> {
        use base64::Engine as _;
        let invalid = |message: &str| FsError::InvalidInput {
            message: message.to_owned(),
        };
        match (&self.content, &self.blob_ref) {
            (Some(_), Some(_)) => Err(invalid("give content or blob_ref, not both")),
            (None, None) => Err(invalid("content (or blob_ref) is required")),
            (Some(text), None) => match self.encoding {
                crate::read::Encoding::Utf8 => Ok(text.clone().into_bytes()),
                crate::read::Encoding::Bytes => base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|error| FsError::InvalidInput {
                        message: format!("content is not valid base64: {error}"),
                    }),
            },
            (None, Some(blob_ref)) => {
                let dir = sandbox
                    .blob_dir()
                    .ok_or_else(|| invalid("this workspace has no blob store"))?;
                crate::blob::read_blob(dir, blob_ref)
            }
        }
    }
}

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Create the file or replace its content.
    #[default]
    Overwrite,
    /// Only create; an existing file is `file_exists`.
    CreateNew,
}

/// A prepared write, waiting for a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WritePlan {
    /// The requested path, normalized, root-relative.
    pub path: String,
    /// What `path` resolved to when the plan was made (differs through a
    /// symlink). Applying refuses with `stale` if it resolves elsewhere then.
    pub resolved_path: String,
    /// The file did not exist.
    pub created: bool,
    /// Hash of the content the plan replaces; `None` for a create.
    pub base_hash: Option<String>,
    #[serde(with = "crate::change::content::required")]
    pub new_content: Vec<u8>,
    /// Unified diff, `--- a/<path>` / `+++ b/<path>` (`--- /dev/null` for a
    /// create); only the headers when nothing changes.
    pub diff: String,
    /// Hash of `diff`.
    pub patch_hash: String,
    pub create_parents: bool,
}

impl WritePlan {
    /// `CREATE FILE <path>` or `MODIFY <path>`, with ` (-> <resolved>)` when a
    /// symlink makes the write land elsewhere.
    pub fn summary(&self) -> String {
        let verb = if self.created {
            "CREATE FILE"
        } else {
            "MODIFY"
        };
        if self.resolved_path == self.path {
            format!("{verb} {}", self.path)
        } else {
            format!("{verb} {} (-> {})", self.path, self.resolved_path)
        }
    }

    /// The diff, cut after `max_chars` characters (never inside a character)
    /// with a closing line saying so.
    pub fn diff_preview(&self, max_chars: u64) -> String {
        crate::change::preview(&self.diff, max_chars)
    }
}

/// The `data` of an applied write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteApplied {
    pub path: String,
    pub created: bool,
    /// `None` when the file was created.
    pub before_hash: Option<String>,
    pub after_hash: String,
}

/// What [`restore`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreOutcome {
    pub path: String,
    /// The file was removed (the undone write had created it).
    pub removed: bool,
    /// Hash of the content that was replaced or removed.
    pub before_hash: String,
    /// Hash of the restored content; `None` when removed.
    pub after_hash: Option<String>,
}

/// Plans a write without touching anything.
pub fn prepare_write(sandbox: &Sandbox, params: &WriteParams) -> Result<WritePlan, FsError> {
    let content = params.bytes(sandbox)?;
    check_size(sandbox, content.len() as u64)?;
    let target = sandbox.resolve("path", &params.path, Access::Write)?;
    // Nothing of a file that must not exist is read.
    if target.kind() == Some(crate::FileKind::File) && params.mode == WriteMode::CreateNew {
        return Err(FsError::FileExists {
            path: target.requested().to_owned(),
        });
    }
    let current = read_current(&target)?;
    if current.is_none() && !params.create_parents && !target.missing_parents().is_empty() {
        return Err(FsError::ParentNotFound {
            path: target.requested().to_owned(),
        });
    }
    let old = current.as_ref().map(|(bytes, _)| bytes.as_slice());
    // The diff names the file that really changes (symlinks resolved).
    let diff = unified_diff(target.resolved(), old, &content);
    Ok(WritePlan {
        path: target.requested().to_owned(),
        resolved_path: target.resolved().to_owned(),
        created: current.is_none(),
        base_hash: old.map(sha256_hex),
        new_content: content,
        patch_hash: sha256_hex(&diff),
        diff,
        create_parents: params.create_parents,
    })
}

/// Applies a plan, if the file is still what it was made against (through
/// [`crate::commit`], the engine every write-class tool uses).
pub fn commit_write(sandbox: &Sandbox, plan: &WritePlan) -> Result<WriteApplied, FsError> {
    let applied = crate::change::commit(
        sandbox,
        &ChangePlan::from(plan.clone()),
        CommitOptions::default(),
    )?;
    let after_hash = sha256_hex(&plan.new_content);
    let before_hash = applied.into_iter().next().and_then(|file| file.before_hash);
    Ok(WriteApplied {
        path: plan.path.clone(),
        created: plan.created,
        before_hash,
        after_hash,
    })
}

/// The content `plan` would replace (`None` for a create), checked against the
/// plan's base hash like [`commit_write`] does, so it is a faithful snapshot.
pub fn snapshot_before(sandbox: &Sandbox, plan: &WritePlan) -> Result<Option<Vec<u8>>, FsError> {
    let mut before = crate::change::snapshot(sandbox, &ChangePlan::from(plan.clone()))?;
    Ok(before.pop().flatten().map(|(bytes, _)| bytes))
}

/// Undoes a write: if `path` still hashes to `expected_current_hash`, puts
/// `before` back atomically (keeping the permission bits), or removes the file
/// when `before` is `None` (the write created it). Parent directories created
/// by the write stay. Anything else is `conflict`, and nothing changes.
pub fn restore(
    sandbox: &Sandbox,
    path: &str,
    expected_current_hash: &str,
    before: Option<&[u8]>,
) -> Result<RestoreOutcome, FsError> {
    let file = UndoFile {
        path: path.to_owned(),
        expected: Some(expected_current_hash.to_owned()),
        restore: before.map(<[u8]>::to_vec),
        mode: None,
    };
    let mut done = crate::change::undo(sandbox, &[file], CommitOptions::default())?;
    let done = done.pop().ok_or_else(|| FsError::Conflict {
        path: path.to_owned(),
    })?;
    Ok(RestoreOutcome {
        path: done.path,
        removed: before.is_none(),
        before_hash: expected_current_hash.to_owned(),
        after_hash: done.after_hash,
    })
}

impl From<WritePlan> for ChangePlan {
    fn from(plan: WritePlan) -> ChangePlan {
        let summary = plan.summary();
        let change = crate::change::FileChange {
            path: plan.path,
            resolved_path: plan.resolved_path,
            before_hash: plan.base_hash,
            after: Some(plan.new_content),
            create_parents: plan.create_parents,
            moved_from: None,
            mode: None,
        };
        ChangePlan {
            tool: "write_file".to_owned(),
            summary,
            changes: vec![change],
            diff: plan.diff,
            patch_hash: plan.patch_hash,
            report: serde_json::Map::new(),
        }
    }
}
