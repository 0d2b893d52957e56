//! The embedded SQLite database: one file in the data directory, WAL, migrations.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::Connection;
use rusqlite_migration::{M, Migrations};

use crate::error::Result;

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "gatehouse.db";

const MIGRATIONS: &[&str] = &[
    // 1: users, browser sessions, setup token, agent credentials, admin API tokens.
    r#"
    CREATE TABLE users (
        id            INTEGER PRIMARY KEY,
        username      TEXT NOT NULL UNIQUE,
        password_hash TEXT NOT NULL,
        is_admin      INTEGER NOT NULL DEFAULT 0,
        created_at    INTEGER NOT NULL
    );
    CREATE TABLE browser_sessions (
        token_hash  TEXT PRIMARY KEY,
        user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        created_at  INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL
    );
    CREATE TABLE setup_tokens (
        token_hash  TEXT PRIMARY KEY,
        created_at  INTEGER NOT NULL
    );
    CREATE TABLE credentials (
        id               TEXT PRIMARY KEY,
        token_hash       TEXT NOT NULL UNIQUE,
        agent            TEXT NOT NULL,
        thread           TEXT,
        provider_session TEXT,
        owner            TEXT,
        created_at       INTEGER NOT NULL,
        last_seen_at     INTEGER NOT NULL,
        revoked_at       INTEGER,
        revoked_reason   TEXT
    );
    CREATE INDEX credentials_thread ON credentials(thread) WHERE revoked_at IS NULL;
    CREATE INDEX credentials_provider ON credentials(provider_session) WHERE revoked_at IS NULL;
    CREATE TABLE api_tokens (
        id           TEXT PRIMARY KEY,
        name         TEXT NOT NULL,
        token_hash   TEXT NOT NULL UNIQUE,
        created_at   INTEGER NOT NULL,
        last_used_at INTEGER,
        revoked_at   INTEGER
    );
    "#,
    // 2: policy rules and the audit log of executions.
    r#"
    CREATE TABLE policy_rules (
        pattern     TEXT PRIMARY KEY,
        action      TEXT NOT NULL,
        human_only  INTEGER NOT NULL DEFAULT 0,
        updated_at  INTEGER NOT NULL
    );
    CREATE TABLE audit_events (
        id               INTEGER PRIMARY KEY,
        execution_id     TEXT NOT NULL,
        at               INTEGER NOT NULL,
        state            TEXT NOT NULL,
        tool             TEXT NOT NULL,
        arguments_digest TEXT NOT NULL,
        agent            TEXT NOT NULL,
        owner            TEXT,
        actor            TEXT,
        detail           TEXT
    );
    CREATE INDEX audit_execution ON audit_events(execution_id);
    "#,
    // 3: who made each call, so only that credential (or its successor on the
    // same thread) reads or resumes it.
    r#"
    ALTER TABLE audit_events ADD COLUMN credential_id TEXT;
    ALTER TABLE audit_events ADD COLUMN thread TEXT;
    CREATE INDEX audit_credential ON audit_events(credential_id);
    "#,
];

/// A shared connection to the database. SQLite serialises writers anyway, and
/// the queries here take microseconds, so one connection behind a mutex is
/// simpler than a pool and not slower at this scale.
#[derive(Clone)]
pub struct Db {
    conn: Arc<Mutex<Connection>>,
}

impl Db {
    /// Opens (creating if needed) the database in `data_dir` and migrates it.
    pub fn open(data_dir: &Path) -> Result<Self> {
        Self::from_connection(Connection::open(data_dir.join(DB_FILE))?)
    }

    /// A private in-memory database (tests).
    pub fn open_in_memory() -> Result<Self> {
        Self::from_connection(Connection::open_in_memory()?)
    }

    fn from_connection(mut conn: Connection) -> Result<Self> {
        // WAL lets the CLI write while a server reads; the busy timeout makes
        // the two wait for each other instead of failing.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let migrations = Migrations::new(MIGRATIONS.iter().map(|sql| M::up(sql)).collect());
        migrations.to_latest(&mut conn)?;
        Ok(Self { conn: Arc::new(Mutex::new(conn)) })
    }

    /// Locks the connection for a short synchronous query.
    pub fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent
        // (statements are atomic), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
