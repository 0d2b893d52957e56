//! PostgreSQL: a pool of synchronous connections (used from blocking
//! threads, as the SQLite connection is), and migrations run once however
//! many replicas start together.

use std::collections::HashMap;
use std::time::Duration;

use super::postgres_schema::MIGRATIONS;
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
    off_runtime(|| migrate_now(conn))
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
    off_runtime(|| schema_version_now(conn))
}

fn schema_version_now(conn: &mut PgConn) -> Result<i64> {
    let exists: bool = conn.client().query_one("SELECT to_regclass('gatehouse_schema') IS NOT NULL", &[])?.get(0);
    if !exists {
        return Ok(0);
    }
    Ok(conn.client().query_one("SELECT COALESCE(MAX(version), 0) FROM gatehouse_schema", &[])?.get(0))
}

/// A pooled PostgreSQL connection with its prepared statements, keyed by
/// the query as the stores wrote it.
pub struct PgConn {
    /// Always `Some` until dropped (see the `Drop` impl).
    client: Option<postgres::Client>,
    statements: HashMap<String, postgres::Statement>,
}

impl Drop for PgConn {
    /// A client says goodbye to the server on its own small runtime, which
    /// tokio refuses inside another one: a pool dropped by async code (a
    /// server shutting down, a test ending) closes its clients off-runtime.
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = off_runtime(move || {
                drop(client);
                Ok(())
            });
        }
    }
}

/// Prepared statements kept per connection; the audit filter builds its SQL,
/// so the cache is bounded.
const STATEMENT_CACHE: usize = 256;

impl PgConn {
    pub(super) fn new(client: postgres::Client) -> Self {
        Self { client: Some(client), statements: HashMap::new() }
    }

    /// The client (present for as long as the connection lives).
    #[allow(clippy::missing_panics_doc)]
    pub(super) fn client(&mut self) -> &mut postgres::Client {
        self.client.as_mut().expect("a PgConn holds its client until dropped")
    }

    /// Whether the server closed the connection (the pool then drops it).
    pub(super) fn is_closed(&self) -> bool {
        self.client.as_ref().is_none_or(postgres::Client::is_closed)
    }

    pub(super) fn statement(&mut self, sql: &str) -> Result<postgres::Statement> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client().prepare(&dollar_placeholders(sql))?;
        if self.statements.len() >= STATEMENT_CACHE {
            self.statements.clear();
        }
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

/// `?N` (and bare `?`) placeholders as PostgreSQL's `$N`, leaving quoted
/// text alone.
pub fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut quoted = false;
    let mut next_bare = 0;
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted => {
                out.push('$');
                if chars.peek().is_some_and(char::is_ascii_digit) {
                    while let Some(d) = chars.next_if(char::is_ascii_digit) {
                        out.push(d);
                    }
                } else {
                    next_bare += 1;
                    out.push_str(&next_bare.to_string());
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Runs a blocking PostgreSQL call wherever the store was called from. The
/// synchronous client drives its own small runtime, which tokio refuses to
/// start on a thread already driving async tasks: on a multi-thread worker
/// the call runs under `block_in_place` (the worker's other tasks move to
/// another thread meanwhile); inside a current-thread runtime (tests) it
/// runs on a short-lived thread of its own. Work that came through the lane
/// ([`super::Db::run`]) is on a blocking thread already and takes neither detour.
pub(super) fn off_runtime<T: Send>(work: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        Ok(_) => std::thread::scope(|scope| {
            scope.spawn(work).join().unwrap_or_else(|_| Err(CoreError::Join("database call panicked".into())))
        }),
        Err(_) => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::dollar_placeholders;

    #[test]
    fn placeholders_become_dollars_outside_quotes() {
        assert_eq!(dollar_placeholders("SELECT ?1, ?12 WHERE a = '?2'"), "SELECT $1, $12 WHERE a = '?2'");
        assert_eq!(dollar_placeholders("a IN (?, ?)"), "a IN ($1, $2)");
    }
}
