//! PostgreSQL: a pool of synchronous connections (used from blocking
//! threads, as the SQLite connection is), and migrations run once however
//! many replicas start together.

use std::time::Duration;

use super::postgres_schema::MIGRATIONS;
use super::sql::PgConn;
use crate::error::{CoreError, Result};

/// Connections per replica. Each request holds one only for its query.
pub(super) const POOL_SIZE: u32 = 16;

/// How long a request waits for a free connection before failing.
const POOL_WAIT: Duration = Duration::from_secs(5);

/// The advisory lock key that serialises migrations across replicas
/// (an arbitrary constant: "gatehouse" in ASCII, truncated).
const MIGRATION_LOCK: i32 = 0x6761_7465;

/// Makes pooled connections from a parsed URL.
#[derive(Debug, Clone)]
pub struct Manager {
    config: postgres::Config,
}

impl r2d2::ManageConnection for Manager {
    type Connection = PgConn;
    type Error = postgres::Error;

    fn connect(&self) -> std::result::Result<PgConn, postgres::Error> {
        self.config.connect(postgres::NoTls).map(PgConn::new)
    }

    fn is_valid(&self, conn: &mut PgConn) -> std::result::Result<(), postgres::Error> {
        conn.client().simple_query("").map(|_| ())
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.is_closed()
    }
}

/// Parses `url` (`postgres://user:pass@host:port/db?options=…`), opens the
/// pool and migrates the schema.
pub(super) fn connect(url: &str) -> Result<r2d2::Pool<Manager>> {
    let config: postgres::Config = url
        .parse()
        .map_err(|e: postgres::Error| CoreError::Invalid { field: "database_url", reason: e.to_string() })?;
    let pool = r2d2::Pool::builder()
        .max_size(POOL_SIZE)
        // Connections are made on demand and closed when idle a while, so a
        // quiet replica holds few of the server's connection slots.
        .min_idle(Some(0))
        .idle_timeout(Some(Duration::from_secs(30)))
        .connection_timeout(POOL_WAIT)
        // Checking a connection on checkout would query on the caller's
        // thread before `off_runtime` is in charge; a broken one fails its
        // query instead, and the pool drops it (`has_broken`).
        .test_on_check_out(false)
        .build(Manager { config })?;
    Ok(pool)
}

/// Parses `url` into the client configuration a listener connects with.
pub(super) fn config(url: &str) -> Result<postgres::Config> {
    url.parse().map_err(|e: postgres::Error| CoreError::Invalid { field: "database_url", reason: e.to_string() })
}

/// Applies the migrations this database has not had yet; returns the
/// version before and after.
pub(super) fn migrate(conn: &mut PgConn) -> Result<(i64, i64)> {
    super::sql::off_runtime(|| migrate_now(conn))
}

fn migrate_now(conn: &mut PgConn) -> Result<(i64, i64)> {
    let client = conn.client();
    client.batch_execute(
        "CREATE TABLE IF NOT EXISTS gatehouse_schema (version BIGINT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    )?;
    let mut tx = client.transaction()?;
    // Held until commit: a second replica waits here, then finds nothing to do.
    // (Per schema: several schemas in one database migrate independently.)
    tx.execute("SELECT pg_advisory_xact_lock($1, hashtext(current_schema()))", &[&MIGRATION_LOCK])?;
    let before: i64 = tx.query_one("SELECT COALESCE(MAX(version), 0) FROM gatehouse_schema", &[])?.get(0);
    let mut version = before;
    for (index, sql) in MIGRATIONS.iter().enumerate() {
        let step = i64::try_from(index).unwrap_or(i64::MAX) + 1;
        if step <= before {
            continue;
        }
        tx.batch_execute(sql)?;
        tx.execute("INSERT INTO gatehouse_schema (version) VALUES ($1)", &[&step])?;
        version = step;
    }
    tx.commit()?;
    Ok((before, version))
}

/// The schema version of a PostgreSQL database (0 before the first migration).
pub(super) fn schema_version(conn: &mut PgConn) -> Result<i64> {
    super::sql::off_runtime(|| schema_version_now(conn))
}

fn schema_version_now(conn: &mut PgConn) -> Result<i64> {
    let exists: bool = conn.client().query_one("SELECT to_regclass('gatehouse_schema') IS NOT NULL", &[])?.get(0);
    if !exists {
        return Ok(0);
    }
    Ok(conn.client().query_one("SELECT COALESCE(MAX(version), 0) FROM gatehouse_schema", &[])?.get(0))
}
