//! Operations on the database file itself: migrating it on purpose
//! (`gatehouse migrate`), copying it while a server runs (`gatehouse backup`,
//! SQLite's online backup API) and the trivial query behind `/healthz`
//! (either backend).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use crate::args;
use crate::db::{DB_FILE, Db, PRIVATE_FILES};
use crate::error::CoreError;

/// The schema version of a SQLite file opened directly (its `user_version`,
/// which the migrations advance by one each); [`Db::schema_version`] is the
/// same for an open store.
fn schema_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Migrated {
    /// The database file.
    pub database: PathBuf,
    /// The schema version before (0: a new database).
    pub before: i64,
    /// The schema version after.
    pub after: i64,
}

impl Migrated {
    /// How many migrations were applied.
    pub fn applied(&self) -> i64 {
        self.after - self.before
    }
}

/// Opens (creating if needed) the database in `data_dir`, which migrates it
/// to this binary's schema, and says from which version to which. The data
/// directory must exist.
pub fn migrate(data_dir: &Path) -> Result<Migrated, CoreError> {
    let database = data_dir.join(DB_FILE);
    let before = match std::fs::metadata(&database) {
        Ok(meta) if meta.len() > 0 => schema_version(&open_read_only(&database)?)?,
        _ => 0,
    };
    let db = Db::open(data_dir)?;
    let after = db.schema_version()?;
    Ok(Migrated { database, before, after })
}

/// The trivial query `/healthz` runs: the store answers at all.
pub fn check(db: &Db) -> Result<(), CoreError> {
    db.conn()?.query_one("SELECT 1", args![], |row| row.get::<i64>(0)).map(|_| ())
}

/// A failed [`check`] in words safe to show anyone: the database's error
/// code (`DatabaseBusy`, `SystemIoFailure`, a PostgreSQL SQLSTATE, …),
/// never a path or a query.
pub fn public_reason(error: &CoreError) -> String {
    match error {
        CoreError::Db(e) => e.public_reason(),
        _ => "query failed".to_string(),
    }
}

/// Why a backup failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The data directory holds no database.
    #[error("no database at {0}")]
    NoDatabase(PathBuf),
    /// The destination exists and overwriting was not asked for.
    #[error("{0} already exists (use --force to overwrite it)")]
    Exists(PathBuf),
    /// The destination is the live database or one of its files.
    #[error("{0} is the live database's own file; back up to another path")]
    IsSource(PathBuf),
    /// The destination could not be made or replaced (the cause is the
    /// error's source, which `{:#}` prints after it).
    #[error("cannot write {path}")]
    Destination {
        /// The destination.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The database stayed locked for longer than [`BACKUP_BUSY_LIMIT`].
    #[error("the database stayed busy for {0:?}; try again")]
    Busy(Duration),
    /// The copy does not pass SQLite's `quick_check`.
    #[error("the copy failed SQLite's quick_check: {0}")]
    Check(String),
    /// SQLite failed (the cause is the error's source).
    #[error("database error")]
    Db(#[from] rusqlite::Error),
}

/// What [`backup`] wrote.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BackedUp {
    /// The copied database.
    pub source: PathBuf,
    /// The backup file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its schema version.
    pub schema_version: i64,
}

/// Pages copied per step of a backup (4 MiB at SQLite's default page size).
pub const BACKUP_PAGES_PER_STEP: i32 = 1024;
/// The pause between two steps, leaving the disk to the server.
pub const BACKUP_PAUSE: Duration = Duration::from_millis(5);
/// How long a backup waits, in all, for a database that is locked.
pub const BACKUP_BUSY_LIMIT: Duration = Duration::from_secs(30);

/// Copies the database in `data_dir` to a new owner-only file at `dest` with
/// SQLite's online backup API, in steps, while a server may be using it;
/// `force` replaces an existing `dest`. The copy is of one moment: the
/// source is read inside one read transaction, which in WAL mode never holds
/// up the server's writers. The source is opened read-only and never
/// migrated. A failed backup leaves no file behind.
pub fn backup(data_dir: &Path, dest: &Path, force: bool) -> Result<BackedUp, BackupError> {
    backup_in_steps(data_dir, dest, force, BACKUP_PAGES_PER_STEP)
}

fn backup_in_steps(data_dir: &Path, dest: &Path, force: bool, pages_per_step: i32) -> Result<BackedUp, BackupError> {
    let source = data_dir.join(DB_FILE);
    match std::fs::metadata(&source) {
        Ok(meta) if meta.is_file() && meta.len() > 0 => {}
        _ => return Err(BackupError::NoDatabase(source)),
    }
    refuse_own_files(data_dir, dest)?;
    create_owner_only(dest, force)?;
    match copy(&source, dest, pages_per_step) {
        Ok(schema_version) => {
            let bytes = std::fs::metadata(dest)
                .map_err(|source| BackupError::Destination { path: dest.to_path_buf(), source })?
                .len();
            Ok(BackedUp { source, path: dest.to_path_buf(), bytes, schema_version })
        }
        Err(e) => {
            let _ = std::fs::remove_file(dest);
            Err(e)
        }
    }
}

/// Refuses a destination that is the database, its WAL, its shared memory
/// or the key file (`--force` would delete the live file).
fn refuse_own_files(data_dir: &Path, dest: &Path) -> Result<(), BackupError> {
    let Ok(dest_real) = dest.canonicalize() else { return Ok(()) };
    let Ok(dir_real) = data_dir.canonicalize() else { return Ok(()) };
    if PRIVATE_FILES.iter().any(|file| dir_real.join(file) == dest_real) {
        return Err(BackupError::IsSource(dest.to_path_buf()));
    }
    Ok(())
}

/// Creates `dest` empty and readable by its owner only (an empty file is an
/// empty SQLite database), replacing an existing file only with `force`.
fn create_owner_only(dest: &Path, force: bool) -> Result<(), BackupError> {
    let failed = |source: std::io::Error| BackupError::Destination { path: dest.to_path_buf(), source };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(dest) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if !force {
                return Err(BackupError::Exists(dest.to_path_buf()));
            }
            // Removed rather than truncated: a symlink is replaced, not followed,
            // and the new file gets the owner-only mode whatever the old one had.
            std::fs::remove_file(dest).map_err(failed)?;
            for stale in ["-journal", "-wal", "-shm"] {
                let mut name = dest.as_os_str().to_owned();
                name.push(stale);
                let _ = std::fs::remove_file(PathBuf::from(name));
            }
            options.open(dest).map(drop).map_err(failed)
        }
        Err(e) => Err(failed(e)),
    }
}

fn open_read_only(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    Ok(conn)
}

/// The copy itself; the schema version copied.
fn copy(source: &Path, dest: &Path, pages_per_step: i32) -> Result<i64, BackupError> {
    let src = open_read_only(source)?;
    // One read transaction across every step: the pages copied are all of
    // one snapshot, so the server's writes in between neither restart the
    // copy nor wait for it.
    src.execute_batch("BEGIN")?;
    let schema_version = schema_version(&src)?;
    let mut dst = Connection::open(dest)?;
    {
        let backup = Backup::new(&src, &mut dst)?;
        let started = Instant::now();
        let mut busy = Duration::ZERO;
        loop {
            match backup.step(pages_per_step)? {
                StepResult::Done => break,
                StepResult::More => std::thread::sleep(BACKUP_PAUSE),
                // Busy, Locked and whatever later versions add: wait and retry, bounded.
                _ => {
                    if busy >= BACKUP_BUSY_LIMIT {
                        return Err(BackupError::Busy(started.elapsed()));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                    busy += Duration::from_millis(50);
                }
            }
        }
    }
    src.execute_batch("COMMIT")?;
    drop(src);
    // A backup is one self-contained file: no WAL beside it.
    dst.pragma_update_and_check(None, "journal_mode", "DELETE", |row| row.get::<_, String>(0))?;
    let check: String = dst.query_row("PRAGMA quick_check", [], |row| row.get(0))?;
    if check != "ok" {
        return Err(BackupError::Check(check));
    }
    drop(dst);
    std::fs::File::open(dest)
        .and_then(|file| file.sync_all())
        .map_err(|source| BackupError::Destination { path: dest.to_path_buf(), source })?;
    Ok(schema_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_in_many_steps_is_one_consistent_snapshot_while_another_connection_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path()).unwrap();
        let insert = |n: i64| {
            db.conn()
                .unwrap()
                .execute(
                    "INSERT INTO changes (at, actor, subject, target, action, detail) VALUES (?1, 'a', 's', 't', 'x', ?2)",
                    args![n, "x".repeat(2000)],
                )
                .unwrap();
        };
        for n in 0..500 {
            insert(n);
        }
        let dest = dir.path().join("copy.db");
        let (source, target) = (dir.path().to_path_buf(), dest.clone());
        // One page a step: hundreds of steps, with writes landing between them.
        let copying = std::thread::spawn(move || backup_in_steps(&source, &target, false, 1));
        let mut written = 0;
        while !copying.is_finished() {
            insert(1000 + written);
            written += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        copying.join().unwrap().unwrap();
        assert!(written > 0, "the writer ran during the copy");
        let copy = Connection::open(&dest).unwrap();
        let check: String = copy.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(check, "ok");
        let rows: i64 = copy.query_row("SELECT count(*) FROM changes", [], |r| r.get(0)).unwrap();
        assert!((500..500 + written).contains(&rows), "{rows} rows of 500 + {written}");
    }

    #[test]
    fn a_failed_query_is_named_by_its_code_without_the_message() {
        let conn = Connection::open_in_memory().unwrap();
        let error = CoreError::from(conn.execute("DELETE FROM secret_table_name", []).unwrap_err());
        let reason = public_reason(&error);
        assert!(!reason.contains("secret_table_name") && !reason.is_empty(), "{reason}");
    }

    #[test]
    fn migrate_reports_versions_and_backup_copies_a_readable_owner_only_file() {
        let dir = tempfile::tempdir().unwrap();
        let first = migrate(dir.path()).unwrap();
        assert_eq!(first.before, 0);
        assert!(first.after > 0);
        let again = migrate(dir.path()).unwrap();
        assert_eq!((again.before, again.after, again.applied()), (first.after, first.after, 0));

        let db = Db::open(dir.path()).unwrap();
        db.conn()
            .unwrap()
            .execute("INSERT INTO policy_rules (pattern, action, updated_at) VALUES ('x*', 'block', 1)", args![])
            .unwrap();
        check(&db).unwrap();
        let dest = dir.path().join("copy.db");
        let done = backup(dir.path(), &dest, false).unwrap();
        assert_eq!(done.schema_version, first.after);
        assert_eq!(done.bytes, std::fs::metadata(&dest).unwrap().len());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let copy = Connection::open(&dest).unwrap();
        let n: i64 = copy.query_row("SELECT count(*) FROM policy_rules", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 1);
        drop(copy);

        assert!(matches!(backup(dir.path(), &dest, false), Err(BackupError::Exists(_))));
        backup(dir.path(), &dest, true).unwrap();
        assert!(matches!(backup(dir.path(), &dir.path().join(DB_FILE), true), Err(BackupError::IsSource(_))));
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(backup(empty.path(), &dest, true), Err(BackupError::NoDatabase(_))));
        assert!(dest.exists(), "a refused backup leaves the old file alone");
        // With no server (no WAL files beside the database) too.
        drop(db);
        backup(dir.path(), &dir.path().join("again.db"), false).unwrap();
    }
}
