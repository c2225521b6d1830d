//! The store's errors.

use airlock_core::StateError;

use crate::approvals::ApprovalStatus;

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A PostgreSQL statement failed (`code` is its SQLSTATE).
    #[error("postgres: {message}")]
    Postgres {
        message: String,
        code: Option<String>,
    },
    /// The database cannot be reached now (a connection failed, or was lost
    /// before a commit was known to land): try again later.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    #[error("cannot create {path}: {source}")]
    Create {
        path: String,
        source: std::io::Error,
    },
    #[error("no approval {0}")]
    NotFound(String),
    #[error("approval {id} is already {status}")]
    AlreadyDecided { id: String, status: ApprovalStatus },
    #[error("approval {0} has expired")]
    Expired(String),
    #[error("too many pending approvals ({pending} of at most {limit}{scope})")]
    RateLimited {
        pending: u64,
        limit: u64,
        scope: &'static str,
    },
    /// A migration's target already holds airlock state.
    #[error("the target database already holds airlock state; migrate into an empty one")]
    NotEmpty,
    #[error("the store lock is poisoned")]
    Poisoned,
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// A stored value this build cannot read (a newer format, say).
    #[error("approval {id}: {source}")]
    State { id: String, source: StateError },
    #[error(
        "the database is at schema version {found}, newer than this airlock ({supported}); use a newer airlock"
    )]
    NewerSchema { found: usize, supported: usize },
}
