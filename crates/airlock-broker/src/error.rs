//! The broker's own failures (a tool's failure is an envelope, not an error).

use airlock_core::ErrorCode;
use airlock_store::StoreError;

/// Errors that stop the broker itself (not a tool's error, which is an envelope).
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("audit log: {0}")]
    Audit(#[from] airlock_audit::AuditError),
    #[error("sandbox: {0}")]
    Sandbox(#[from] airlock_fs::FsError),
    #[error("{code}: {message}")]
    Refused { code: ErrorCode, message: String },
    #[error("upstream {name}: {message}")]
    Upstream { name: String, message: String },
    #[error("corrupt approval {id}: {message}")]
    Corrupt { id: String, message: String },
}

impl BrokerError {
    pub(crate) fn refused(code: ErrorCode, message: impl Into<String>) -> BrokerError {
        BrokerError::Refused {
            code,
            message: message.into(),
        }
    }

    /// What a client may be told: a refusal's own message (without its
    /// code, which goes beside it), or the store's word on an approval;
    /// `None` for an internal failure, whose text (paths, SQL) stays in the
    /// server's log.
    pub fn public_message(&self) -> Option<String> {
        match self {
            BrokerError::Refused { message, .. } => Some(message.clone()),
            BrokerError::Store(
                StoreError::NotFound(_)
                | StoreError::AlreadyDecided { .. }
                | StoreError::Expired(_)
                | StoreError::RateLimited { .. },
            ) => Some(self.to_string()),
            BrokerError::Sandbox(error) if error.code() != ErrorCode::IoError => {
                Some(self.to_string())
            }
            BrokerError::Upstream { .. } => Some(self.to_string()),
            BrokerError::Store(StoreError::Unavailable(_))
            | BrokerError::Audit(airlock_audit::AuditError::Database(_)) => Some(
                "the shared store cannot be reached now; nothing more was done, try again"
                    .to_owned(),
            ),
            BrokerError::Store(_)
            | BrokerError::Audit(_)
            | BrokerError::Sandbox(_)
            | BrokerError::Corrupt { .. } => None,
        }
    }

    /// The envelope error code this failure maps to.
    pub fn code(&self) -> ErrorCode {
        match self {
            BrokerError::Store(StoreError::NotFound(_)) => ErrorCode::NotFound,
            BrokerError::Store(StoreError::AlreadyDecided { .. }) => ErrorCode::AlreadyDecided,
            BrokerError::Store(StoreError::Expired(_)) => ErrorCode::Expired,
            BrokerError::Store(StoreError::RateLimited { .. }) => ErrorCode::RateLimited,
            BrokerError::Store(StoreError::Unavailable(_))
            | BrokerError::Audit(airlock_audit::AuditError::Database(_)) => {
                ErrorCode::StoreUnavailable
            }
            BrokerError::Refused { code, .. } => *code,
            BrokerError::Sandbox(error) => error.code(),
            BrokerError::Upstream { .. } => ErrorCode::UpstreamError,
            BrokerError::Store(_) | BrokerError::Audit(_) | BrokerError::Corrupt { .. } => {
                ErrorCode::IoError
            }
        }
    }
}
