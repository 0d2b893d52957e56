//! Errors of the domain stores, and the one mapping from every core error
//! to what it answers with ([`Status`]): the JSON API and the pages' server
//! functions both read it, so a refusal has one status wherever it is met.

use crate::db::error::DbError;

/// What can go wrong in a store operation.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The database refused or failed.
    #[error("database error: {0}")]
    Db(DbError),
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

impl From<gatehouse_model::RuleError> for CoreError {
    fn from(e: gatehouse_model::RuleError) -> Self {
        CoreError::Invalid { field: e.field, reason: e.reason }
    }
}

/// Result alias for store operations.
pub type Result<T> = std::result::Result<T, CoreError>;

/// The kinds of answer a core error gets; each has one HTTP status and one
/// JSON API `error` code. Core knows no HTTP crate: statuses are plain
/// numbers, made into the server's types at the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusKind {
    /// The request is malformed or does not fit: 400 `bad_request`.
    BadRequest,
    /// It belongs to someone else, or is not allowed at all: 403 `forbidden`.
    Forbidden,
    /// Only an admin may do it (it changes the gate for everyone): 403
    /// `admin_required`.
    AdminRequired,
    /// No such thing: 404 `not_found`.
    NotFound,
    /// Conflicts with the current state: 409 `conflict`.
    Conflict,
    /// A per-user bound is reached: 429 `limit_reached`.
    LimitReached,
    /// Something failed on our side: 500 `internal_error`.
    Internal,
}

impl StatusKind {
    /// The HTTP status.
    pub fn status(self) -> u16 {
        match self {
            StatusKind::BadRequest => 400,
            StatusKind::Forbidden | StatusKind::AdminRequired => 403,
            StatusKind::NotFound => 404,
            StatusKind::Conflict => 409,
            StatusKind::LimitReached => 429,
            StatusKind::Internal => 500,
        }
    }

    /// The JSON API's `error` code.
    pub fn code(self) -> &'static str {
        match self {
            StatusKind::BadRequest => "bad_request",
            StatusKind::Forbidden => "forbidden",
            StatusKind::AdminRequired => "admin_required",
            StatusKind::NotFound => "not_found",
            StatusKind::Conflict => "conflict",
            StatusKind::LimitReached => "limit_reached",
            StatusKind::Internal => "internal_error",
        }
    }
}

/// What an error answers with, wherever it is answered (the JSON API's
/// status and code, a server function's status): implemented once per core
/// error type.
pub trait Status {
    /// The kind of answer.
    fn kind(&self) -> StatusKind;

    /// The HTTP status.
    fn status(&self) -> u16 {
        self.kind().status()
    }

    /// The JSON API's `error` code.
    fn code(&self) -> &'static str {
        self.kind().code()
    }
}

impl Status for CoreError {
    fn kind(&self) -> StatusKind {
        match self {
            CoreError::Invalid { .. } => StatusKind::BadRequest,
            // The last admin, a disabled user: the state refuses it.
            CoreError::Conflict(_) | CoreError::Refused(_) => StatusKind::Conflict,
            CoreError::Limit(_) => StatusKind::LimitReached,
            CoreError::NotFound(_) => StatusKind::NotFound,
            CoreError::Db(_) | CoreError::Migration(_) | CoreError::Password(_) | CoreError::Join(_) => {
                StatusKind::Internal
            }
        }
    }
}

impl From<rusqlite::Error> for CoreError {
    fn from(e: rusqlite::Error) -> Self {
        CoreError::Db(DbError::Sqlite(e))
    }
}
impl From<postgres::Error> for CoreError {
    fn from(e: postgres::Error) -> Self {
        CoreError::Db(DbError::Postgres(e))
    }
}
impl From<r2d2::Error> for CoreError {
    fn from(e: r2d2::Error) -> Self {
        CoreError::Db(DbError::Pool(e))
    }
}
