//! The header of SQLite's WAL index (the `-shm` file): one `pread` that
//! tells whether anything was committed since it was last read, so `PRAGMA
//! data_version` is asked only when something was.
//!
//! Every commit, by any connection in any process, rewrites this header
//! before it becomes visible: readers learn the newest snapshot from it, and
//! its change counter (`iChange`) moves on every write. `PRAGMA
//! data_version` can only be read by starting a read transaction, whose
//! shared-memory locks are `fcntl` calls: measured at about a tenth of the
//! CPU of a whole `/mcp` request (BENCHMARKS.md, "The gate's own path").
//! Layout: <https://www.sqlite.org/walformat.html>, "The WAL-Index Header" —
//! two copies of a 48-byte header, the second written first, so a reader that
//! sees them differ caught a write half-way.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

/// Bytes in one copy of the header.
const HEADER: usize = 48;
/// Bytes covered by the header's checksum (the rest is the checksum).
const CHECKSUMMED: usize = 40;
/// Offset of `isInit` in a copy.
const IS_INIT: usize = 12;

/// One copy of the header, as read: a marker that changes with every commit.
pub type Header = [u8; HEADER];

/// The open `-shm` file of a database in WAL mode, and the header it held
/// when `data_version` was last read.
pub struct WalIndex {
    file: File,
    last: Mutex<Option<(Header, i64)>>,
}

impl WalIndex {
    /// Opens the WAL index next to `db_path`, once a connection has it open
    /// (SQLite creates it with the first read in WAL mode and keeps it while
    /// any connection stays open). `None` if there is none to read.
    pub fn open(db_path: &Path) -> Option<Self> {
        let mut name = db_path.as_os_str().to_owned();
        name.push("-shm");
        let file = File::open(name).ok()?;
        let index = Self { file, last: Mutex::new(None) };
        index.header().map(|_| index)
    }

    /// SQLite's `data_version`: the value `read` gave last time if the header
    /// has not moved since (nothing was committed), else `read` again. The
    /// header is read first, so a commit between the two reads moves it and
    /// the next call reads again.
    pub fn data_version<E>(&self, read: impl FnOnce() -> Result<i64, E>) -> Result<i64, E> {
        let header = self.header();
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(now), Some((then, version))) = (header, *last)
            && now == then
        {
            return Ok(version);
        }
        let version = read()?;
        *last = header.map(|h| (h, version));
        Ok(version)
    }

    /// The header now, or `None` when it cannot be trusted this instant (a
    /// write half-way, not yet initialised, a short read): the caller then
    /// asks SQLite instead.
    pub fn header(&self) -> Option<Header> {
        let mut both = [0u8; 2 * HEADER];
        self.file.read_exact_at(&mut both, 0).ok()?;
        let (first, second) = both.split_at(HEADER);
        let first: Header = first.try_into().ok()?;
        (first == second && first[IS_INIT] == 1 && checksum_holds(&first)).then_some(first)
    }
}

/// SQLite's header checksum (`walChecksumBytes` over the first 40 bytes, in
/// the machine's byte order, as `walIndexWriteHdr` computes it): a torn read
/// that happens to give two equal copies still fails it.
fn checksum_holds(header: &Header) -> bool {
    let word = |at: usize| u32::from_ne_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    let (mut s1, mut s2) = (0u32, 0u32);
    for at in (0..CHECKSUMMED).step_by(8) {
        s1 = s1.wrapping_add(word(at)).wrapping_add(s2);
        s2 = s2.wrapping_add(word(at + 4)).wrapping_add(s1);
    }
    (s1, s2) == (word(CHECKSUMMED), word(CHECKSUMMED + 4))
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::*;

    fn wal_db(dir: &Path) -> (Connection, std::path::PathBuf) {
        let path = dir.join("t.db");
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        (conn, path)
    }

    #[test]
    fn every_commit_from_another_connection_moves_the_header() {
        let dir = tempfile::tempdir().unwrap();
        let (_ours, path) = wal_db(dir.path());
        let index = WalIndex::open(&path).expect("a WAL index to read");
        let other = Connection::open(&path).unwrap();
        let mut seen = vec![index.header().unwrap()];
        for i in 0..20 {
            other.execute("INSERT INTO t VALUES (?1)", [i]).unwrap();
            let now = index.header().expect("a settled header between commits");
            assert!(!seen.contains(&now), "commit {i} left the header as an earlier one");
            seen.push(now);
        }
        // A checkpoint that restarts the WAL, then a commit, moves it too.
        other.pragma_update(None, "wal_checkpoint", "TRUNCATE").unwrap();
        other.execute("INSERT INTO t VALUES (99)", []).unwrap();
        assert!(!seen.contains(&index.header().unwrap()));
    }

    #[test]
    fn reads_alone_leave_it_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (ours, path) = wal_db(dir.path());
        let index = WalIndex::open(&path).unwrap();
        let before = index.header().unwrap();
        let n: i64 = ours.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 0);
        assert_eq!(index.header().unwrap(), before);
    }

    #[test]
    fn a_damaged_header_fails_its_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let (_ours, path) = wal_db(dir.path());
        let header = WalIndex::open(&path).unwrap().header().unwrap();
        assert!(checksum_holds(&header));
        for at in [8, 16, 32, 40] {
            let mut damaged = header;
            damaged[at] ^= 1;
            assert!(!checksum_holds(&damaged), "a flipped bit at byte {at} passed");
        }
    }

    #[test]
    fn data_version_is_read_again_only_after_a_commit() {
        let dir = tempfile::tempdir().unwrap();
        let (ours, path) = wal_db(dir.path());
        let index = WalIndex::open(&path).unwrap();
        let other = Connection::open(&path).unwrap();
        let reads = std::cell::Cell::new(0);
        let version = || {
            index.data_version(|| {
                reads.set(reads.get() + 1);
                ours.query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0))
            })
        };
        let first = version().unwrap();
        assert_eq!(version().unwrap(), first);
        assert_eq!(reads.get(), 1, "nothing was committed: SQLite is not asked again");
        other.execute("INSERT INTO t VALUES (1)", []).unwrap();
        let second = version().unwrap();
        assert_eq!(reads.get(), 2);
        assert_ne!(second, first, "another connection's commit moves data_version");
        // Our own commit moves the header but not data_version: asked once more.
        ours.execute("INSERT INTO t VALUES (2)", []).unwrap();
        assert_eq!(version().unwrap(), second);
        assert_eq!(reads.get(), 3);
        assert_eq!(version().unwrap(), second);
        assert_eq!(reads.get(), 3);
    }

    #[test]
    fn no_index_without_wal() {
        let dir = tempfile::tempdir().unwrap();
        assert!(WalIndex::open(&dir.path().join("missing.db")).is_none());
    }
}
