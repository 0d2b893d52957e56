//! The audit log's writer: entries that need not be on disk before their
//! caller goes on (a call a grant let through, a read a rule allowed) are
//! queued to one thread that appends them in the order they were queued,
//! many to a transaction. The queue is bounded ([`CAPACITY`]): past it the
//! caller waits for room (backpressure; an entry is never dropped). Every
//! read of the log first waits until what was queued before it is written
//! ([`Writer::flush`]), so a read never misses an entry whose effect was
//! already seen.
//!
//! Only callers that hold no lock queue here. A paused execution's
//! transitions are written at once, under the approval store's lock: the
//! crash consistency of `approvals::persist` rests on that entry being on
//! disk before anyone hears of the transition.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::Row;
use crate::db::Db;

/// Entries queued at most before a caller waits for room.
pub const CAPACITY: usize = 4_096;

/// Entries written at most in one transaction.
const BATCH: usize = 256;

/// How long a read waits for the writer before it reads anyway (a writer
/// stuck on a broken database must not hang every reader with it).
const FLUSH_WAIT: Duration = Duration::from_secs(10);

/// The queue's sending end and the number of the last entry queued.
struct Queue {
    last: u64,
    tx: Option<SyncSender<(u64, Box<Row>)>>,
}

/// How far the writer has got (the number of the last entry written or
/// given up on), and a signal when it moves.
#[derive(Default)]
struct Progress {
    done: Mutex<u64>,
    moved: Condvar,
    stopped: AtomicBool,
}

/// The queue to the writer thread.
pub(super) struct Writer {
    queue: Mutex<Queue>,
    progress: Arc<Progress>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Writer {
    /// Starts the writer thread over `db`; it ends once the `Writer` is
    /// dropped and what was queued is written.
    pub(super) fn start(db: Db) -> Self {
        let (tx, rx) = mpsc::sync_channel::<(u64, Box<Row>)>(CAPACITY);
        let progress = Arc::new(Progress::default());
        let writing = progress.clone();
        // A plain thread, not a runtime task: the writes block on the database.
        let spawned = std::thread::Builder::new().name("gatehouse-audit-writer".into()).spawn(move || {
            write_loop(&db, &rx, &writing);
            writing.stopped.store(true, Ordering::SeqCst);
            writing.moved.notify_all();
        });
        let tx = match spawned {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the audit writer; entries are written at once instead");
                None
            }
        };
        Self { queue: Mutex::new(Queue { last: 0, tx }), progress }
    }

    /// Queues `row` if there is room now; gives it back otherwise (the queue
    /// is full, or there is no writer).
    pub(super) fn try_push(&self, row: Box<Row>) -> Result<(), Box<Row>> {
        let mut queue = lock(&self.queue);
        let Some(tx) = queue.tx.as_ref() else { return Err(row) };
        let number = queue.last + 1;
        match tx.try_send((number, row)) {
            Ok(()) => {
                queue.last = number;
                Ok(())
            }
            Err(mpsc::TrySendError::Full((_, row))) => Err(row),
            Err(mpsc::TrySendError::Disconnected((_, row))) => {
                queue.tx = None;
                Err(row)
            }
        }
    }

    /// Queues `row`, waiting for room when the queue is full (blocking);
    /// gives it back when there is no writer (the caller writes it at once).
    pub(super) fn push(&self, row: Box<Row>) -> Option<Box<Row>> {
        // One lock around numbering and sending: the numbers reach the
        // writer in order, so "written up to n" means every entry up to n.
        let mut queue = lock(&self.queue);
        let Some(tx) = queue.tx.as_ref() else { return Some(row) };
        let number = queue.last + 1;
        match tx.send((number, row)) {
            Ok(()) => {
                queue.last = number;
                None
            }
            Err(mpsc::SendError((_, row))) => {
                queue.tx = None;
                Some(row)
            }
        }
    }

    /// Waits until every entry queued before this call is written (or the
    /// writer stopped, or [`FLUSH_WAIT`] passed).
    pub(super) fn flush(&self) {
        let target = lock(&self.queue).last;
        let mut done = lock(&self.progress.done);
        let deadline = std::time::Instant::now() + FLUSH_WAIT;
        while *done < target && !self.progress.stopped.load(Ordering::SeqCst) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                tracing::error!(queued = target, written = *done, "the audit writer is behind; reading without it");
                return;
            }
            done = self.progress.moved.wait_timeout(done, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

fn write_loop(db: &Db, rx: &mpsc::Receiver<(u64, Box<Row>)>, progress: &Progress) {
    // `recv` fails once the sender is gone and the queue is empty.
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(entry) => batch.push(entry),
                Err(_) => break,
            }
        }
        let last = batch.last().map_or(0, |(number, _)| *number);
        let written = db
            .conn()
            .and_then(|mut conn| conn.transaction(|tx| batch.iter().try_for_each(|(_, row)| super::insert(tx, row))));
        if let Err(e) = written {
            tracing::error!(error = %e, entries = batch.len(), "audit write failed");
        }
        // Moved on even after a failure: a reader must not hang on a disk error.
        *lock(&progress.done) = last;
        progress.moved.notify_all();
    }
}
