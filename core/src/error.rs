//! Errors of the domain stores.

/// What can go wrong in a store operation.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The database refused or failed.
    #[error("database error: {0}")]
    Db(crate::db::DbError),
    /// A migration could not be applied.
    #[error("database migration failed: {0}")]
    Migration(#[from] rusqlite_migration::Error),
    /// The input is not acceptable (names the field and why).
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// Which input field.
        field: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// A row that must be unique already exists.
    #[error("{0} already exists")]
    Conflict(String),
    /// The thing asked for does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The change is refused as things stand (the last admin, a disabled user).
    #[error("{0}")]
    Refused(String),
    /// A per-user bound is reached; the message names its config key.
    #[error("{0}")]
    Limit(String),
    /// Password hashing failed (never the password itself).
    #[error("password hashing failed: {0}")]
    Password(String),
    /// Blocking work could not be joined.
    #[error("background task failed: {0}")]
    Join(String),
}

/// Result alias for store operations.
pub type Result<T> = std::result::Result<T, CoreError>;
