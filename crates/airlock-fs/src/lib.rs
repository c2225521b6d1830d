//! airlock-fs: the only crate of airlock that touches workspace files.
//!
//! - [`Sandbox`] opens the workspace root once and resolves every path argument
//!   into a [`SandboxedPath`] with the kernel's help (`openat2` with
//!   `RESOLVE_BENEATH`), checking the policy's deny globs and protected paths on
//!   both the requested and the resolved path, the `follow_symlinks` setting and
//!   the create allowlist. Only the resolver can make a `SandboxedPath`.
//! - [`read_file`] reads a line range or byte window with a byte cap and the
//!   hash of the whole file ([`ReadParams`] -> [`ReadData`]).
//! - Every write-class tool plans a [`ChangePlan`] (`airlock_core::plan`)
//!   without side effects ([`prepare_write`], [`prepare_edit`], [`prepare_patch`],
//!   [`prepare_delete`], [`prepare_move`]); [`commit`] applies one, all or
//!   nothing across files, with a journal that [`recover`] rolls forward after
//!   a crash; [`undo`] reverts through the same engine.
//! - [`grep`], [`glob`], [`list_dir`], [`stat`] and [`exists`] search and
//!   describe the workspace; large outputs become blobs ([`BlobRef`]).
//! - [`sha256_hex`] is the hash format of the whole project: `sha256:<64 hex>`.
//!
//! Errors are [`FsError`]; [`FsError::code`] is the envelope's error code.
//!
//! ```
//! use std::sync::Arc;
//!
//! use airlock_fs::{CommitOptions, ReadParams, Sandbox, WriteParams, commit, prepare_write, read_file};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # std::fs::create_dir(dir.path().join("src"))?;
//! # std::fs::write(dir.path().join("src/main.rs"), "fn main() {}\n")?;
//! let root = std::fs::canonicalize(dir.path())?;
//! let mut loaded = airlock_core::config::load("", "airlock.yaml")?;
//! let root_text = root.to_str().ok_or("root is not utf-8")?;
//! loaded.policy.bind_workspace(root_text, Some("airlock.yaml"));
//! let sandbox = Sandbox::open(&root, &loaded.config.file_broker, Arc::new(loaded.policy))?;
//!
//! let args = serde_json::json!({"path": "src/main.rs"});
//! let read = read_file(&sandbox, &ReadParams::from_args(&args)?)?;
//! assert_eq!(read.content.as_deref(), Some("fn main() {}\n"));
//!
//! let args = serde_json::json!({"path": "src/new.rs", "content": "fn f() {}\n"});
//! let plan = prepare_write(&sandbox, &WriteParams::from_args(&args)?)?;
//! assert_eq!(plan.summary, "CREATE FILE src/new.rs");
//! // ... a human approves plan.diff_preview(8_000) ...
//! let applied = commit(&sandbox, &plan, CommitOptions::default())?;
//! assert_eq!(applied[0].after_hash, Some(airlock_fs::sha256_hex("fn f() {}\n")));
//! # Ok(())
//! # }
//! ```

mod blob;
mod change;
mod diff;
mod error;
mod files;
mod hash;
mod overlay;
mod plans;
mod read;
mod sandbox;
mod search;
mod write;

pub use airlock_core::plan::{ChangePlan, FileChange, preview};
pub use blob::{BlobRef, OutputMode, PREVIEW_BYTES, read_blob, shape_text, store_blob};
pub use change::{
    Before, CommitOptions, FileApplied, Recovered, UndoFile, already_applied, commit, edited,
    new_plan, recover, snapshot, undo,
};
pub use plans::{
    CommandChange, DeleteParams, EditParams, MoveParams, PatchParams, prepare_command_changes,
    prepare_delete, prepare_edit, prepare_move, prepare_patch,
};
pub use search::{
    ExistsData, ExistsParams, GREP_DEFAULT_MAX_RESULTS, GlobData, GlobParams, GrepData, GrepParams,
    ListDirData, ListDirParams, StatData, StatParams, exists, glob, grep, list_dir, mtime_ns, stat,
};

pub use error::FsError;
pub use files::{current_content, current_hash};
pub use hash::{ContentHasher, sha256_hex, sha256_reader};
pub use overlay::{Overlay, StagedFile};
pub use read::{Encoding, LineRange, ReadData, ReadParams, read_file};
pub use sandbox::{Access, FileKind, Sandbox, SandboxedPath, Scope};
pub use write::{WriteMode, WriteParams, prepare_write};
