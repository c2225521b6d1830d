//! `write_file`'s plan (spec 000): [`prepare_write`] has no side effects. It
//! resolves and checks the path, reads the current content, and returns a
//! [`ChangePlan`] of one change: the unified diff a human approves, the hash
//! of the content it was made against, and the new content. Applying it is
//! [`crate::commit`]'s work, as for every write-class tool: a create whose
//! file appeared in the meantime is `stale` (not `file_exists`), since the
//! proposal was made against a world that changed.

use serde::{Deserialize, Serialize};

use airlock_core::plan::{ChangePlan, FileChange};

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

/// Plans a write without touching anything.
pub fn prepare_write(sandbox: &Sandbox, params: &WriteParams) -> Result<ChangePlan, FsError> {
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
    let change = FileChange {
        path: target.requested().to_owned(),
        resolved_path: target.resolved().to_owned(),
        before_hash: old.map(sha256_hex),
        after: Some(content),
        create_parents: params.create_parents,
        moved_from: None,
        mode: None,
    };
    Ok(ChangePlan {
        tool: "write_file".to_owned(),
        summary: change.summary(),
        changes: vec![change],
        patch_hash: sha256_hex(&diff),
        diff,
        report: serde_json::Map::new(),
    })
}
