//! The database's one ordered writer: the writes whose caller need not wait
//! for the disk (an audit entry, a paused execution's row) are queued to one
//! thread that applies them in the order they were queued, many to a
//! transaction. Nothing is written under a lock: the approval store queues
//! a transition's audit entry and its row while it holds its lock (a push
//! onto a channel, no I/O), and whoever acts on the transition waits for
//! the writer first.
//!
//! The invariants:
//! - **Order.** Writes are applied in the order they were queued, so a
//!   settled execution's row is never deleted before the audit entry that
//!   says why (the crash consistency of `approvals::persist`).
//! - **Nothing seen before it is written.** Every read of what the writer
//!   writes first waits until what was queued before it is written
//!   ([`Db::flush_writes`], [`Db::writes_flushed`]); so do the cluster
//!   before telling another replica anything, and the approval store before
//!   an effect (a tool run, an answer) follows a transition.
//! - **Bounded.** The request path queues through [`Db::queue_bounded`],
//!   which waits for room past [`CAPACITY`] writes in flight (backpressure;
//!   a write is never dropped). [`Db::queue`] never waits: it is for callers
//!   under a lock whose writes are bounded by what they hold (the approval
//!   store's transitions, by its live executions).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{Conn, Db};
use crate::error::Result;

/// Writes in flight past which [`Db::queue_bounded`] waits for room.
pub const CAPACITY: usize = 4_096;

/// Writes applied at most in one transaction.
const BATCH: usize = 256;

/// How long a read waits for the writer before it reads anyway (a writer
/// stuck on a broken database must not hang every reader with it).
const FLUSH_WAIT: Duration = Duration::from_secs(10);

/// How long the writer holds a batch of request-path writes (audit entries
/// of calls that ran at once) open for more, unless someone waits for one:
/// one commit for many calls instead of one each. On SQLite every commit
/// holds the one connection every request also needs, so fewer commits is
/// what keeps the gate path fast under load.
const LINGER: Duration = Duration::from_millis(5);

/// One write the writer applies, inside its transaction.
pub trait Write: Send {
    /// Applies it on `conn` (inside the batch's transaction).
    fn write(&self, conn: &mut Conn<'_>) -> Result<()>;
}

/// A queued write and its number.
/// A queued write: its number, the write, and whether someone acts on it
/// soon (a transition under a lock: the store waits for it), so it is not
/// held back to share a transaction ([`LINGER`]).
type Job = (u64, Box<dyn Write>, bool);

/// How far the writer has got (the number of the last write applied or
/// given up on), with a signal for threads and one for tasks.
struct Progress {
    done: AtomicU64,
    signal: Mutex<()>,
    moved: Condvar,
    stopped: AtomicBool,
    /// The same number for async waiters (`u64::MAX` once stopped).
    watch: watch::Sender<u64>,
    /// Callers waiting for a flush right now: the writer stops lingering.
    waiting: std::sync::atomic::AtomicUsize,
    /// The writer thread, woken from its linger by whoever cannot wait
    /// ([`Progress::hurry`]). It lingers parked, not in `recv`: a send to a
    /// receiver blocked in `recv` wakes its thread, one wake-up (a futex and
    /// a context switch) per audited call.
    thread: std::sync::OnceLock<std::thread::Thread>,
}

impl Progress {
    /// Ends the writer's linger now: a write someone acts on, a flush
    /// waited for, or a full batch.
    fn hurry(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

/// The queue to the writer thread.
pub(super) struct Writer {
    /// The sending end; numbering and sending happen under this lock, so
    /// the numbers reach the writer in order and "written up to n" means
    /// every write up to n.
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    /// The number of the last write queued (changed under `tx`'s lock).
    last: AtomicU64,
    progress: Arc<Progress>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Writer {
    /// Starts the writer thread over `db` (a handle without a writer of its
    /// own, so the thread does not keep its queue open); it ends once the
    /// `Writer` is dropped and what was queued is written.
    fn start(db: Db) -> Self {
        let (tx, rx) = mpsc::channel::<Job>();
        let progress = Arc::new(Progress {
            done: AtomicU64::new(0),
            signal: Mutex::new(()),
            moved: Condvar::new(),
            stopped: AtomicBool::new(false),
            watch: watch::channel(0).0,
            waiting: std::sync::atomic::AtomicUsize::new(0),
            thread: std::sync::OnceLock::new(),
        });
        let writing = progress.clone();
        // A plain thread, not a runtime task: the writes block on the
        // database, and the CLI builds the stores without a runtime.
        let spawned = std::thread::Builder::new().name("gatehouse-db-writer".into()).spawn(move || {
            let _ = writing.thread.set(std::thread::current());
            write_loop(&db, &rx, &writing);
            writing.stopped.store(true, Ordering::SeqCst);
            writing.watch.send_replace(u64::MAX);
            let _signal = lock(&writing.signal);
            writing.moved.notify_all();
        });
        let tx = match spawned {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the database writer; writes are made at once instead");
                None
            }
        };
        Self { tx: Mutex::new(tx), last: AtomicU64::new(0), progress }
    }

    fn in_flight(&self) -> u64 {
        self.last.load(Ordering::SeqCst).saturating_sub(self.progress.done.load(Ordering::SeqCst))
    }

    /// Queues `write`; gives it back when there is no writer, or when
    /// `bounded` and [`CAPACITY`] writes are in flight.
    fn push(&self, write: Box<dyn Write>, bounded: bool) -> std::result::Result<(), Box<dyn Write>> {
        let mut tx = lock(&self.tx);
        if bounded && self.in_flight() >= CAPACITY as u64 {
            return Err(write);
        }
        let Some(sender) = tx.as_ref() else { return Err(write) };
        let number = self.last.load(Ordering::SeqCst) + 1;
        match sender.send((number, write, !bounded)) {
            Ok(()) => {
                self.last.store(number, Ordering::SeqCst);
                if !bounded || self.in_flight() >= BATCH as u64 {
                    self.progress.hurry();
                }
                Ok(())
            }
            Err(mpsc::SendError((_, write, _))) => {
                *tx = None;
                Err(write)
            }
        }
    }

    /// Waits (blocking) until `reached` holds of the writer's progress, it
    /// stopped, or [`FLUSH_WAIT`] passed; false on the last.
    fn wait_until(&self, reached: impl Fn(u64) -> bool) -> bool {
        let deadline = Instant::now() + FLUSH_WAIT;
        let mut signal = lock(&self.progress.signal);
        while !reached(self.progress.done.load(Ordering::SeqCst)) && !self.progress.stopped.load(Ordering::SeqCst) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            signal = self.progress.moved.wait_timeout(signal, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        true
    }

    /// Waits until every write queued before this call is applied.
    fn flush(&self) {
        let target = self.last.load(Ordering::SeqCst);
        let _waiting = Waiting::new(&self.progress);
        if !self.wait_until(|done| done >= target) {
            tracing::error!(queued = target, "the database writer is behind; reading without it");
        }
    }

    /// [`Writer::flush`] for async callers: holds no thread.
    async fn flushed(&self) {
        let target = self.last.load(Ordering::SeqCst);
        let mut done = self.progress.watch.subscribe();
        let _waiting = Waiting::new(&self.progress);
        if tokio::time::timeout(FLUSH_WAIT, done.wait_for(|d| *d >= target)).await.is_err() {
            tracing::error!(queued = target, "the database writer is behind; going on without it");
        }
    }
}

/// Counts a flush caller while it waits (the writer stops lingering).
struct Waiting<'a>(&'a Progress);

impl<'a> Waiting<'a> {
    fn new(progress: &'a Progress) -> Self {
        progress.waiting.fetch_add(1, Ordering::SeqCst);
        progress.hurry();
        Waiting(progress)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

fn write_loop(db: &Db, rx: &mpsc::Receiver<Job>, progress: &Progress) {
    // `recv` fails once the sender is gone and the queue is empty.
    while let Ok(first) = rx.recv() {
        let started = Instant::now();
        let mut batch = vec![first];
        loop {
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            // Only request-path writes that nobody waits for linger.
            let urgent = batch.iter().any(|(_, _, urgent)| *urgent) || progress.waiting.load(Ordering::SeqCst) > 0;
            let left = LINGER.saturating_sub(started.elapsed());
            if urgent || batch.len() >= BATCH || left.is_zero() {
                break;
            }
            // Parked, not in `recv`: senders then wake no one (see
            // `Progress::thread`); what cannot wait unparks it.
            std::thread::park_timeout(left);
        }
        let last = batch.last().map_or(0, |(number, ..)| *number);
        let written = db
            .conn()
            .and_then(|mut conn| conn.transaction(|tx| batch.iter().try_for_each(|(_, job, _)| job.write(tx))));
        if let Err(e) = written {
            tracing::error!(error = %e, writes = batch.len(), "a batch of queued writes failed");
        }
        // Moved on even after a failure: a reader must not hang on a disk error.
        progress.done.store(last, Ordering::SeqCst);
        progress.watch.send_replace(last);
        let _signal = lock(&progress.signal);
        progress.moved.notify_all();
    }
}

impl Db {
    fn writer(&self) -> &Writer {
        self.writes.get_or_init(|| Writer::start(self.for_writer()))
    }

    /// Writes `write` at once (no writer could be started).
    fn write_now(&self, write: &dyn Write) {
        if let Err(e) = self.conn().and_then(|mut conn| write.write(&mut conn)) {
            tracing::error!(error = %e, "a write failed");
        }
    }

    /// Queues `write` for the writer without waiting, however many are in
    /// flight: for callers under a lock, whose writes are bounded by what
    /// they hold (see the module doc).
    pub fn queue(&self, write: Box<dyn Write>) {
        if let Err(write) = self.writer().push(write, false) {
            self.write_now(&*write);
        }
    }

    /// Queues `write` for the writer: at once while fewer than [`CAPACITY`]
    /// are in flight, otherwise once there is room (waiting in the stores'
    /// lane, not on a runtime thread).
    pub async fn queue_bounded(&self, write: Box<dyn Write>) -> Result<()> {
        let Err(write) = self.writer().push(write, true) else { return Ok(()) };
        let db = self.clone();
        self.run(move || {
            let writer = db.writer();
            // No write is dropped: wait as long as the writer is working.
            while !writer.wait_until(|done| writer.last.load(Ordering::SeqCst).saturating_sub(done) < CAPACITY as u64) {
            }
            if let Err(write) = writer.push(write, false) {
                db.write_now(&*write);
            }
        })
        .await
    }

    /// Waits (blocking) until every write queued so far is applied. Call it
    /// holding no connection (on SQLite the writer needs the one there is).
    pub fn flush_writes(&self) {
        if let Some(writer) = self.writes.get() {
            writer.flush();
        }
    }

    /// [`Db::flush_writes`] for async callers: holds no thread.
    pub async fn writes_flushed(&self) {
        if let Some(writer) = self.writes.get() {
            writer.flushed().await;
        }
    }
}
