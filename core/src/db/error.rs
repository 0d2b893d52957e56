//! What the database layer can fail with, on either backend. It imports
//! nothing of the crate: `crate::error` wraps it, the stores return it.

/// What the database layer can fail with.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// SQLite refused or failed.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL refused or failed.
    #[error(transparent)]
    Postgres(#[from] postgres::Error),
    /// No PostgreSQL connection became free in time, or none could be made.
    #[error("no database connection: {0}")]
    Pool(#[from] r2d2::Error),
    /// A column held something the code did not expect.
    #[error("column {column}: {reason}")]
    Type {
        /// Which column (from 0).
        column: usize,
        /// What was found.
        reason: String,
    },
    /// A query that must return a row returned none.
    #[error("query returned no rows")]
    NoRow,
}

impl DbError {
    /// Whether a UNIQUE or PRIMARY KEY constraint refused the write.
    pub fn is_unique_violation(&self) -> bool {
        match self {
            DbError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => e.code == rusqlite::ErrorCode::ConstraintViolation,
            DbError::Postgres(e) => e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION),
            _ => false,
        }
    }

    /// The failure in words safe to show anyone: an error code, never a
    /// path or a query.
    pub fn public_reason(&self) -> String {
        match self {
            DbError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => format!("{:?}", e.code),
            DbError::Postgres(e) => e.code().map_or_else(|| "connection failed".into(), |c| c.code().to_string()),
            DbError::Pool(_) => "no connection".into(),
            _ => "query failed".into(),
        }
    }
}
