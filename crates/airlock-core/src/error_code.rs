//! The machine-readable error codes of the envelope (DESIGN §5).

use std::fmt;

use serde::{Deserialize, Serialize};

/// `error.code` of an envelope whose status is `denied` or `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    PathForbidden,
    PathDenied,
    CreateNotAllowed,
    NotFound,
    IsDirectory,
    NotADirectory,
    FileExists,
    ParentNotFound,
    Conflict,
    Stale,
    Ambiguous,
    EditTargetNotFound,
    InvalidInput,
    InvalidInputEmptyOldString,
    InvalidUtf8,
    TooLarge,
    InlineRequiredTooLarge,
    ParseError,
    HunkRejected,
    InvalidRegex,
    InvalidPattern,
    UnknownTool,
    UpstreamError,
    /// The upstream server cannot be reached (not running, connection
    /// refused or lost, or no answer within its `timeout`).
    UpstreamUnavailable,
    /// `exec`: the kernel offers no sandbox (and `exec.sandbox` is not `none`).
    SandboxUnavailable,
    /// The shared store (`store.url`, PostgreSQL) cannot be reached now;
    /// nothing was decided or changed that the store did not record. Try
    /// again.
    StoreUnavailable,
    /// `exec`: the command ran past its timeout and was killed.
    ExecTimeout,
    /// `exec`: the command could not be started.
    ExecFailed,
    RateLimited,
    Expired,
    AlreadyDecided,
    NotInAllowlist,
    IoError,
    /// A profile or rule refused the call.
    PolicyDenied,
    /// HTTP: no bearer token, or not a known one.
    Unauthorized,
    /// HTTP: the token's roles (or user) may not do this, or the request
    /// came from a host name or browser origin the listener does not answer.
    Forbidden,
    /// HTTP: a JSON endpoint was sent something other than `application/json`.
    UnsupportedMediaType,
    /// A configured capability limit (spec 003) refuses the call.
    LimitExceeded,
    /// Code mode: the script ran out of CPU or wall time.
    ScriptTimeout,
    /// Code mode: the script reached its memory limit.
    ScriptMemory,
    /// Code mode: another limit of the run (calls, stack, source, result).
    ScriptLimit,
    /// Code mode: the script threw, left a call unawaited, or waits on
    /// nothing.
    ScriptError,
    /// Code mode: a resumed run made another call than the one logged
    /// where its replay stood.
    ReplayDivergence,
    /// No session with this id is open for this principal (another's id
    /// gets this too: no oracle).
    SessionNotFound,
    /// The session outlived its `ttl` or `idle_ttl`.
    SessionExpired,
    /// The session was closed.
    SessionClosed,
    /// The call names another session than the one its endpoint is bound to.
    SessionMismatch,
    /// A session root or path outside the session's workspaces or roots, or
    /// a write to a read-only root.
    RootNotAllowed,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::PathForbidden => "path_forbidden",
            ErrorCode::PathDenied => "path_denied",
            ErrorCode::CreateNotAllowed => "create_not_allowed",
            ErrorCode::NotFound => "not_found",
            ErrorCode::IsDirectory => "is_directory",
            ErrorCode::NotADirectory => "not_a_directory",
            ErrorCode::FileExists => "file_exists",
            ErrorCode::ParentNotFound => "parent_not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Stale => "stale",
            ErrorCode::Ambiguous => "ambiguous",
            ErrorCode::EditTargetNotFound => "edit_target_not_found",
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::InvalidInputEmptyOldString => "invalid_input_empty_old_string",
            ErrorCode::InvalidUtf8 => "invalid_utf8",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::InlineRequiredTooLarge => "inline_required_too_large",
            ErrorCode::ParseError => "parse_error",
            ErrorCode::HunkRejected => "hunk_rejected",
            ErrorCode::InvalidRegex => "invalid_regex",
            ErrorCode::InvalidPattern => "invalid_pattern",
            ErrorCode::UnknownTool => "unknown_tool",
            ErrorCode::UpstreamError => "upstream_error",
            ErrorCode::UpstreamUnavailable => "upstream_unavailable",
            ErrorCode::SandboxUnavailable => "sandbox_unavailable",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::ExecTimeout => "exec_timeout",
            ErrorCode::ExecFailed => "exec_failed",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Expired => "expired",
            ErrorCode::AlreadyDecided => "already_decided",
            ErrorCode::NotInAllowlist => "not_in_allowlist",
            ErrorCode::IoError => "io_error",
            ErrorCode::PolicyDenied => "policy_denied",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::LimitExceeded => "limit_exceeded",
            ErrorCode::ScriptTimeout => "script_timeout",
            ErrorCode::ScriptMemory => "script_memory",
            ErrorCode::ScriptLimit => "script_limit",
            ErrorCode::ScriptError => "script_error",
            ErrorCode::ReplayDivergence => "replay_divergence",
            ErrorCode::SessionNotFound => "session_not_found",
            ErrorCode::SessionExpired => "session_expired",
            ErrorCode::SessionClosed => "session_closed",
            ErrorCode::SessionMismatch => "session_mismatch",
            ErrorCode::RootNotAllowed => "root_not_allowed",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
