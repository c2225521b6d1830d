//! The errors of the file tools, each with its envelope error code.

use std::io;

use airlock_core::ErrorCode;

/// Why a file operation was refused or failed. [`FsError::code`] gives the
/// envelope's `error.code`; `Display` gives its message (lowercase, no trailing
/// period).
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("{param} contains a nul byte")]
    NulByte { param: String },

    #[error("{param} `{path}` is absolute and absolute paths are rejected{}", match inside {
        Some(rel) => format!("; it is `{rel}` in the workspace: pass that, or set file_broker.absolute_paths: within_root"),
        None => "; paths are relative to the workspace root".to_owned(),
    })]
    AbsolutePath {
        param: String,
        path: String,
        inside: Option<String>,
    },

    #[error("{param} `{path}` leaves the workspace root")]
    EscapesRoot { param: String, path: String },

    #[error("{param} `{path}` passes through a symbolic link and follow_symlinks is deny")]
    SymlinkDenied { param: String, path: String },

    #[error("{param} `{path}` leaves the workspace root through a symbolic link")]
    SymlinkEscape { param: String, path: String },

    #[error("{param} `{path}` runs into a symbolic link loop or a magic link")]
    SymlinkLoop { param: String, path: String },

    #[error("{param} `{path}` is a symbolic link whose target does not exist")]
    DanglingSymlink { param: String, path: String },

    #[error("{param} `{path}` resolves to a name that is not valid utf-8")]
    NonUtf8Name { param: String, path: String },

    /// The file system changed between two steps of a resolution (a race).
    #[error("`{path}` changed while it was being resolved")]
    Changed { path: String },

    #[error("{param} is too long")]
    NameTooLong { param: String },

    /// The policy's textual check refused the requested or the resolved path.
    #[error("{message}")]
    Refused { code: ErrorCode, message: String },

    #[error(
        "`{path}` does not exist and new files may only be created at the root level or under {allowed}"
    )]
    CreateNotAllowed { path: String, allowed: String },

    #[error("`{path}` does not exist")]
    NotFound { path: String },

    #[error("`{path}` is a directory")]
    IsDirectory { path: String },

    #[error("a parent of `{path}` is not a directory")]
    NotADirectory { path: String },

    #[error("`{path}` is not a regular file")]
    NotRegularFile { path: String },
    #[error(
        "`{path}` has {links} hard links: it may be another name of a file outside the workspace or of a protected one (file_broker.allow_hardlinks allows them)"
    )]
    HardLinked { path: String, links: u64 },
    #[error("`{path}` is another name (a hard link) of a protected file")]
    HardLinkedToProtected { path: String },

    #[error("`{path}` already exists")]
    FileExists { path: String },

    #[error("the parent directory of `{path}` does not exist (create_parents is false)")]
    ParentNotFound { path: String },

    #[error("`{path}` changed since the proposal: {reason}")]
    Stale { path: String, reason: String },

    #[error("`{path}` no longer holds the content that was applied, so it is left as it is")]
    Conflict { path: String },

    #[error("`{path}`: the selected bytes are not valid utf-8 (ask for encoding bytes)")]
    InvalidUtf8 { path: String },

    #[error("{what} is {size} bytes, over file_broker.max_write_bytes_hard ({limit})")]
    TooLarge { what: String, size: u64, limit: u64 },

    #[error(
        "the content is {size} bytes, over max_inline_bytes {limit}, and output_mode is require_inline"
    )]
    InlineRequiredTooLarge { size: u64, limit: u64 },

    #[error("invalid arguments: {message}")]
    InvalidInput { message: String },

    /// A spec 003 capability limit (`file_broker.<limit>`) refuses the call.
    #[error("{message} (file_broker.{limit})")]
    LimitExceeded {
        limit: &'static str,
        message: String,
    },

    #[error("old_string is empty; give the exact text to replace")]
    EmptyOldString,

    #[error(
        "`{path}`: old_string was not found (neither exactly nor with whitespace and punctuation normalised)"
    )]
    EditTargetNotFound { path: String },

    /// More than one place matches and the tool may not guess.
    #[error("{message}")]
    Ambiguous { message: String },

    #[error("the patch cannot be parsed: {message}")]
    ParseError { message: String },

    /// A patch chunk that cannot be placed in its file.
    #[error("{message}")]
    HunkRejected { message: String },

    #[error("invalid regular expression: {message}")]
    InvalidRegex { message: String },

    #[error("invalid glob pattern: {message}")]
    InvalidPattern { message: String },

    #[error("{context}: {error}")]
    Io { context: String, error: io::Error },
}

impl FsError {
    /// The envelope's `error.code` for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            FsError::NulByte { .. }
            | FsError::AbsolutePath { .. }
            | FsError::EscapesRoot { .. }
            | FsError::SymlinkDenied { .. }
            | FsError::SymlinkEscape { .. }
            | FsError::SymlinkLoop { .. }
            | FsError::DanglingSymlink { .. }
            | FsError::NonUtf8Name { .. }
            | FsError::Changed { .. }
            | FsError::HardLinked { .. }
            | FsError::HardLinkedToProtected { .. } => ErrorCode::PathForbidden,
            FsError::NameTooLong { .. }
            | FsError::NotRegularFile { .. }
            | FsError::InvalidInput { .. } => ErrorCode::InvalidInput,
            FsError::Refused { code, .. } => *code,
            FsError::CreateNotAllowed { .. } => ErrorCode::CreateNotAllowed,
            FsError::NotFound { .. } => ErrorCode::NotFound,
            FsError::IsDirectory { .. } => ErrorCode::IsDirectory,
            FsError::NotADirectory { .. } => ErrorCode::NotADirectory,
            FsError::FileExists { .. } => ErrorCode::FileExists,
            FsError::ParentNotFound { .. } => ErrorCode::ParentNotFound,
            FsError::Stale { .. } => ErrorCode::Stale,
            FsError::Conflict { .. } => ErrorCode::Conflict,
            FsError::InvalidUtf8 { .. } => ErrorCode::InvalidUtf8,
            FsError::TooLarge { .. } => ErrorCode::TooLarge,
            FsError::LimitExceeded { .. } => ErrorCode::LimitExceeded,
            FsError::InlineRequiredTooLarge { .. } => ErrorCode::InlineRequiredTooLarge,
            FsError::Io { .. } => ErrorCode::IoError,
            FsError::EmptyOldString => ErrorCode::InvalidInputEmptyOldString,
            FsError::EditTargetNotFound { .. } => ErrorCode::EditTargetNotFound,
            FsError::Ambiguous { .. } => ErrorCode::Ambiguous,
            FsError::ParseError { .. } => ErrorCode::ParseError,
            FsError::HunkRejected { .. } => ErrorCode::HunkRejected,
            FsError::InvalidRegex { .. } => ErrorCode::InvalidRegex,
            FsError::InvalidPattern { .. } => ErrorCode::InvalidPattern,
        }
    }

    pub(crate) fn io(context: impl Into<String>, error: impl Into<io::Error>) -> FsError {
        FsError::Io {
            context: context.into(),
            error: error.into(),
        }
    }
}
