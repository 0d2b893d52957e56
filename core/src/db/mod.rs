//! The database: embedded SQLite (one file in the data directory, WAL) by
//! default, or PostgreSQL shared by several replicas; migrations for both.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rusqlite::Connection;
use rusqlite_migration::{M, Migrations};

pub use self::error::DbError;
pub use self::sql::{Arg, Backend, Conn, FromValue, Row, Value};
use crate::error::{CoreError, Result};

pub mod error;
mod lane;
mod postgres;
mod postgres_schema;
mod sql;
mod sqlite_schema;
mod versioned;
mod wal_index;
mod writer;

pub use self::versioned::Versioned;
use self::wal_index::WalIndex;
pub use self::writer::{CAPACITY as WRITE_CAPACITY, Write};

/// File name of the database inside the data directory.
pub const DB_FILE: &str = "gatehouse.db";

/// Files in the data directory that hold secrets (hashes, keys, audit) and
/// must be readable by the owner only: the database, its WAL and shared
/// memory, and the `requestState` sealing key (written by the MCP side).
pub const PRIVATE_FILES: [&str; 4] = [DB_FILE, "gatehouse.db-wal", "gatehouse.db-shm", "request-state.key"];

/// Creates the data directory (and parents) readable by the owner only.
pub fn create_data_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Makes the data directory 0700 and its [`PRIVATE_FILES`] 0600 where they
/// are looser (a copied or restored directory), with a warning for each fix.
#[cfg(unix)]
pub fn restrict_permissions(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tighten = |path: &Path, mode: u32| -> std::io::Result<()> {
        let current = match std::fs::metadata(path) {
            Ok(meta) => meta.permissions().mode() & 0o777,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        if current & !mode != 0 {
            tracing::warn!(
                path = ?path,
                was = format!("{current:o}"),
                now = format!("{mode:o}"),
                "data directory permissions were looser than owner-only; fixed"
            );
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        }
        Ok(())
    };
    tighten(dir, 0o700)?;
    for file in PRIVATE_FILES {
        tighten(&dir.join(file), 0o600)?;
    }
    Ok(())
}

/// Permissions are a Unix notion here; elsewhere the directory's ACLs apply.
#[cfg(not(unix))]
pub fn restrict_permissions(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

/// Where the data lives: the embedded SQLite file (one connection behind a
/// mutex: SQLite serialises writers anyway and its queries take
/// microseconds) or a PostgreSQL server several replicas share (a pool).
#[derive(Clone)]
pub struct Db {
    inner: Inner,
    /// Bounds the store work running at once ([`Db::run`]).
    lane: lane::Lane,
    /// The one ordered writer ([`Db::queue`]), started at its first use.
    writes: Arc<OnceLock<writer::Writer>>,
    /// The SQLite file, when there is one: the writer opens its own
    /// connection to it, so its commits never hold the connection every
    /// request reads through (WAL lets reads go on beside one writer).
    file: Option<Arc<Path>>,
}

#[derive(Clone)]
enum Inner {
    /// The connection, how many `credentials` rows it has changed (an
    /// update hook counts them: SQLite's `data_version` sees only other
    /// connections' commits), and the WAL index that says when
    /// `data_version` needs reading (none for a database in memory).
    Sqlite(Arc<Mutex<Connection>>, Arc<AtomicU64>, Option<Arc<WalIndex>>),
    Postgres {
        pool: r2d2::Pool<postgres::Manager>,
        url: Arc<str>,
    },
}

impl Db {
    /// Opens (creating if needed) the database in `data_dir` and migrates it.
    /// The directory and the database files are made owner-only first and
    /// again once SQLite has created its WAL files.
    pub fn open(data_dir: &Path) -> Result<Self> {
        let path = data_dir.join(DB_FILE);
        let unusable = |e: std::io::Error| CoreError::Invalid { field: "data_dir", reason: e.to_string() };
        restrict_permissions(data_dir).map_err(unusable)?;
        // Create the file owner-only before SQLite does (it would use the
        // umask); SQLite gives the WAL and shared-memory files the same mode.
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options.open(&path).map_err(unusable)?;
        let mut db = Self::from_connection(Connection::open(&path)?)?;
        restrict_permissions(data_dir).map_err(unusable)?;
        // The migrations have read in WAL mode, so the index exists by now.
        if let Inner::Sqlite(_, _, index) = &mut db.inner {
            *index = WalIndex::open(&path).map(Arc::new);
        }
        db.file = Some(path.into());
        Ok(db)
    }

    /// Connects to PostgreSQL at `url` and migrates it. Blocks: call it
    /// before serving or from a blocking thread.
    pub fn connect(url: &str) -> Result<Self> {
        Ok(Self::connect_migrated(url)?.0)
    }

    /// [`Db::connect`], also saying from which schema version to which.
    pub fn connect_migrated(url: &str) -> Result<(Self, i64, i64)> {
        let pool = postgres::connect(url)?;
        let (before, after) = postgres::migrate(&mut *pool.get()?)?;
        let lane = lane::Lane::new(postgres::POOL_SIZE as usize);
        let db = Self { inner: Inner::Postgres { pool, url: url.into() }, lane, writes: Arc::default(), file: None };
        Ok((db, before, after))
    }

    /// A private in-memory SQLite database.
    pub fn open_in_memory() -> Result<Self> {
        Self::from_connection(Connection::open_in_memory()?)
    }

    /// The database a test runs on: PostgreSQL in a schema of its own when
    /// `GATEHOUSE_TEST_DATABASE_URL` is set (so one suite covers both
    /// backends), otherwise a private in-memory SQLite database.
    pub fn for_tests() -> Result<Self> {
        match test_database_url()? {
            Some(url) => Self::connect(&url),
            None => Self::open_in_memory(),
        }
    }

    fn from_connection(mut conn: Connection) -> Result<Self> {
        // WAL lets the CLI write while a server reads; the busy timeout makes
        // the two wait for each other instead of failing.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let migrations = Migrations::new(sqlite_schema::MIGRATIONS.iter().map(|sql| M::up(sql)).collect());
        migrations.to_latest(&mut conn)?;
        let credential_writes = Arc::new(AtomicU64::new(0));
        let counter = credential_writes.clone();
        conn.update_hook(Some(move |_: rusqlite::hooks::Action, _: &str, table: &str, _: i64| {
            if table == "credentials" {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
        Ok(Self {
            inner: Inner::Sqlite(Arc::new(Mutex::new(conn)), credential_writes, None),
            lane: lane::Lane::new(lane::SQLITE_LANE),
            writes: Arc::default(),
            file: None,
        })
    }

    /// A value that differs whenever the `credentials` table may have changed
    /// since it was read (before reading the rows it guards, on the same
    /// `conn`): this process's changes (the update hook) and any other
    /// process's commits (`PRAGMA data_version`, so a `gatehouse token revoke`
    /// from the CLI counts; read only when the WAL index says something was
    /// committed since the last read). `None` on PostgreSQL, where other
    /// replicas write and only a round trip could tell. (SQLite skips the hook
    /// for a `DELETE` without `WHERE`; nothing deletes credentials, they are
    /// revoked.)
    pub fn credentials_marker(&self, conn: &Conn<'_>) -> Result<Option<(i64, u64)>> {
        let (Inner::Sqlite(_, writes, index), Some(sqlite)) = (&self.inner, conn.sqlite()) else {
            return Ok(None);
        };
        let read = || sqlite.prepare_cached("PRAGMA data_version")?.query_row([], |row| row.get::<_, i64>(0));
        let version = match index {
            Some(index) => index.data_version(read)?,
            None => read()?,
        };
        Ok(Some((version, writes.load(Ordering::Relaxed))))
    }

    /// The same database without its writer: the writer thread's own
    /// handle (holding the queue it reads would keep the queue open forever).
    fn without_writer(&self) -> Self {
        Self { inner: self.inner.clone(), lane: self.lane.clone(), writes: Arc::default(), file: None }
    }

    /// The writer thread's handle: [`Db::without_writer`], on a connection
    /// of its own when the database is a SQLite file (an in-memory one has
    /// only the one connection).
    fn for_writer(&self) -> Self {
        let (Inner::Sqlite(_, writes, _), Some(file)) = (&self.inner, &self.file) else {
            return self.without_writer();
        };
        let opened = Connection::open(file).and_then(|conn| {
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            conn.pragma_update(None, "foreign_keys", "ON")?;
            conn.busy_timeout(std::time::Duration::from_secs(5))?;
            Ok(conn)
        });
        match opened {
            Ok(conn) => Self {
                inner: Inner::Sqlite(Arc::new(Mutex::new(conn)), writes.clone(), None),
                lane: self.lane.clone(),
                writes: Arc::default(),
                file: None,
            },
            Err(e) => {
                tracing::warn!(error = %e, "the writer shares the one connection: no second one could be opened");
                self.without_writer()
            }
        }
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        match self.inner {
            Inner::Sqlite(..) => Backend::Sqlite,
            Inner::Postgres { .. } => Backend::Postgres,
        }
    }

    /// The PostgreSQL URL (for a listener's own connection); `None` on SQLite.
    pub fn postgres_url(&self) -> Option<&str> {
        match &self.inner {
            Inner::Sqlite(..) => None,
            Inner::Postgres { url, .. } => Some(url),
        }
    }

    /// A connection for a short unit of work. On PostgreSQL this blocks
    /// (a pooled synchronous client), so async code calls the stores from
    /// `spawn_blocking`; a SQLite query takes microseconds under the lock.
    pub fn conn(&self) -> Result<Conn<'_>> {
        match &self.inner {
            // A panic while holding the lock cannot leave SQLite inconsistent
            // (statements are atomic), so a poisoned lock is still usable.
            Inner::Sqlite(conn, ..) => Ok(Conn::Sqlite(conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))),
            // The checkout may wait (up to `POOL_WAIT` for a free client, or
            // a connect): off the runtime too, as the queries are.
            Inner::Postgres { pool, .. } => Ok(Conn::Postgres(postgres::off_runtime(|| Ok(pool.get()?))?)),
        }
    }

    /// Runs `work` unless another replica is running the same `job` right
    /// now (PostgreSQL: a session advisory lock held meanwhile); `None` when
    /// skipped. On SQLite there is one process and `work` always runs. For
    /// sweeps that should happen once, not once per replica.
    pub fn exclusively<T>(&self, job: i32, work: impl FnOnce() -> Result<T>) -> Result<Option<T>> {
        let mut lock = match self.conn()? {
            Conn::Sqlite(conn) => {
                drop(conn);
                return work().map(Some);
            }
            pg => pg,
        };
        // Keyed by schema too: deployments (or tests) sharing one database
        // in separate schemas do not hold each other up.
        let got: bool = lock.query_one(
            "SELECT pg_try_advisory_lock(CAST(?1 AS INTEGER), hashtext(current_schema()))",
            crate::args![job],
            |r| r.get(0),
        )?;
        if !got {
            return Ok(None);
        }
        let done = work();
        let unlock = "SELECT pg_advisory_unlock(CAST(?1 AS INTEGER), hashtext(current_schema()))";
        if let Err(e) = lock.query_one(unlock, crate::args![job], |r| r.get::<bool>(0)) {
            // The session ends with the pooled connection at worst, and the lock with it.
            tracing::warn!(error = %e, "could not release an advisory lock");
        }
        done.map(Some)
    }

    /// Bumps the shared configuration version (policy rules, tool pins,
    /// grants) inside the writer's transaction, so every replica's cache
    /// sees the change on its next read. Nothing on SQLite (one process).
    pub fn bump_config(conn: &mut Conn<'_>) -> Result<()> {
        if conn.backend() == Backend::Postgres {
            conn.execute("UPDATE config_version SET version = version + 1", &[])?;
        }
        Ok(())
    }

    /// The shared configuration version a cache was filled at; `None` on
    /// SQLite, where only this process writes and caches are dropped locally.
    pub fn config_version(&self) -> Result<Option<i64>> {
        match self.backend() {
            Backend::Sqlite => Ok(None),
            Backend::Postgres => {
                self.conn()?.query_one("SELECT version FROM config_version", &[], |r| r.get(0)).map(Some)
            }
        }
    }

    /// The schema version (the number of migrations applied).
    pub fn schema_version(&self) -> Result<i64> {
        match self.conn()? {
            Conn::Sqlite(conn) => Ok(conn.pragma_query_value(None, "user_version", |row| row.get(0))?),
            Conn::Postgres(mut conn) => postgres::schema_version(&mut conn),
        }
    }
}

/// The client configuration of a PostgreSQL URL (a listener's own connection).
pub fn postgres_config(url: &str) -> Result<::postgres::Config> {
    postgres::config(url)
}

/// `GATEHOUSE_TEST_DATABASE_URL` with a fresh schema of its own set as the
/// search path, or `None` when the variable is unset.
pub fn test_database_url() -> Result<Option<String>> {
    let Ok(base) = std::env::var("GATEHOUSE_TEST_DATABASE_URL") else { return Ok(None) };
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let config = postgres::config(&base)?;
    postgres::off_runtime(|| {
        let mut client = config.connect(::postgres::NoTls)?;
        client.batch_execute(&format!("CREATE SCHEMA {schema}"))?;
        Ok(())
    })?;
    let separator = if base.contains('?') { '&' } else { '?' };
    Ok(Some(format!("{base}{separator}options=-c%20search_path%3D{schema}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    /// With every pooled client held, a store call from an async task waits
    /// `POOL_WAIT` for one and fails; the runtime's other tasks keep running
    /// meanwhile (before, the checkout blocked the worker it ran on).
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn waiting_for_a_pooled_connection_does_not_stall_the_runtime() {
        // On SQLite nothing is pooled, so nothing waits.
        let Some(url) = test_database_url().unwrap() else { return };
        let db = Db::connect(&url).unwrap();
        let held: Vec<_> = (0..postgres::POOL_SIZE).map(|_| db.conn().unwrap()).collect();
        let ticks = Arc::new(AtomicU32::new(0));
        let ticker = tokio::spawn({
            let ticks = ticks.clone();
            async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    ticks.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        // Spawned, so it runs on the runtime's only worker, beside the ticker.
        let waited = tokio::spawn({
            let db = db.clone();
            async move { db.conn().map(|_| ()) }
        })
        .await
        .unwrap();
        ticker.abort();
        assert!(waited.is_err(), "every client was held, so the checkout gave up");
        let ticks = ticks.load(Ordering::Relaxed);
        // 5 s of waiting is ~500 ticks; a stalled worker manages one.
        assert!(ticks > 50, "the other task kept running while the checkout waited: {ticks} ticks");
        drop(held);
    }
}
