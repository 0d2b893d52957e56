//! Why a grant was refused, and what each refusal answers with.

use super::*;

/// Why a grant was not made or revoked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// No such grant or execution (or no longer live).
    #[error("{0}")]
    NotFound(String),
    /// It belongs to another user's agent.
    #[error("this belongs to another user's agent")]
    Forbidden,
    /// The call is `human_only`: a person decides each one.
    #[error("a person decides every call to {0}: it cannot be allowed in advance")]
    HumanOnly(String),
    /// Only an admin decides this tool, so only an admin may grant it.
    #[error("this call changes the gate for everyone: only an admin can grant it")]
    AdminRequired,
    /// The request does not fit the call.
    #[error("{0}")]
    Invalid(String),
    /// Another decision came first.
    #[error("execution is already {0}")]
    Conflict(String),
    /// Storage failed.
    #[error("{0}")]
    Storage(String),
    /// The agent's owner holds as many live grants as one user may
    /// (`max_grants_per_user`); the message says so.
    #[error("{0}")]
    Limit(String),
}

impl crate::error::Status for GrantError {
    fn kind(&self) -> crate::error::StatusKind {
        use crate::error::StatusKind;
        match self {
            GrantError::NotFound(_) => StatusKind::NotFound,
            // The API has always answered `forbidden` for a human-only tool.
            GrantError::Forbidden | GrantError::HumanOnly(_) => StatusKind::Forbidden,
            GrantError::AdminRequired => StatusKind::AdminRequired,
            GrantError::Invalid(_) => StatusKind::BadRequest,
            GrantError::Conflict(_) => StatusKind::Conflict,
            GrantError::Limit(_) => StatusKind::LimitReached,
            GrantError::Storage(_) => StatusKind::Internal,
        }
    }
}

impl From<CoreError> for GrantError {
    fn from(e: CoreError) -> Self {
        GrantError::Storage(e.to_string())
    }
}

impl From<AccessError> for GrantError {
    fn from(e: AccessError) -> Self {
        match e {
            AccessError::NotFound => GrantError::NotFound("execution not found".into()),
            AccessError::Forbidden => GrantError::Forbidden,
            AccessError::AdminRequired => GrantError::AdminRequired,
            AccessError::Conflict(s) => GrantError::Conflict(s.to_string()),
            AccessError::Invalid(s) => GrantError::Invalid(s),
            AccessError::Storage(s) => GrantError::Storage(s),
        }
    }
}
