//! Paused executions at rest: the `pending_executions` table and the one
//! writer thread that keeps it.
//!
//! Crash consistency. The audit log is the record of an execution's *state*
//! (written synchronously with every transition, before any caller hears of
//! it); this table holds only what the execution *is* (tool, arguments,
//! owner, expiry). So the table needs two writes per execution — insert on
//! pause, delete on settle — and neither is on the store's lock: they are
//! queued (in transition order, since they are queued under the lock) to a
//! dedicated thread that applies them in batches, one transaction each.
//! A pause is announced only once its row is committed ([`Persist::flush`]
//! awaits the writer without holding any lock or blocking a runtime thread).
//! If the process dies with a delete still queued, the next start finds the
//! row, reads the audit log's last word (settled) and deletes it; a decision
//! is never lost because the audit entry that records it was written first.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use rusqlite::params;
use serde_json::Value;
use tokio::sync::watch;

use super::Execution;
use crate::db::Db;
use crate::error::Result;

/// Most queued operations applied in one transaction.
const BATCH: usize = 512;

enum Op {
    Insert(Arc<Execution>),
    Delete(String),
}

/// The queue to the writer thread, and how far it has committed.
pub(super) struct Persist {
    db: Db,
    tx: mpsc::Sender<(u64, Op)>,
    /// The sequence number of the last queued operation.
    queued: AtomicU64,
    /// The sequence number of the last committed operation.
    committed: watch::Receiver<u64>,
}

impl Persist {
    /// Starts the writer thread over `db`. The thread ends when the
    /// `Persist` is dropped, after applying what was queued.
    pub(super) fn start(db: Db) -> Self {
        let (tx, rx) = mpsc::channel::<(u64, Op)>();
        let (done, committed) = watch::channel(0u64);
        let writer_db = db.clone();
        // A plain thread, not a runtime task: the writes block on SQLite, and
        // the CLI builds the stores without a runtime.
        let spawned = std::thread::Builder::new()
            .name("gatehouse-pending-writer".into())
            .spawn(move || write_loop(&writer_db, &rx, &done));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the pending-executions writer; pauses will not survive a restart");
        }
        Self { db, tx, queued: AtomicU64::new(0), committed }
    }

    fn push(&self, op: Op) {
        let seq = self.queued.fetch_add(1, Ordering::SeqCst) + 1;
        if self.tx.send((seq, op)).is_err() {
            tracing::error!("the pending-executions writer has stopped; a pause will not survive a restart");
        }
    }

    /// Queues the row of a new pending execution (call under the store's lock).
    pub(super) fn insert(&self, execution: Arc<Execution>) {
        self.push(Op::Insert(execution));
    }

    /// Queues the removal of a settled (or request-held) execution's row,
    /// arguments and all (call under the store's lock).
    pub(super) fn delete(&self, id: &str) {
        self.push(Op::Delete(id.to_string()));
    }

    /// Waits until everything queued so far is committed (or the writer has
    /// stopped). Holds no lock and blocks no thread.
    pub(super) async fn flush(&self) {
        let target = self.queued.load(Ordering::SeqCst);
        let mut committed = self.committed.clone();
        let _ = committed.wait_for(|c| *c >= target).await;
    }

    /// The rows left by a previous run, each with the audit log's last state
    /// for it and when that was written.
    pub(super) fn load(&self) -> Result<Vec<Stored>> {
        let conn = self.db.conn();
        let mut stmt = conn.prepare(
            "SELECT p.id, p.tool, p.upstream, p.upstream_tool, p.tool_digest, p.arguments, p.arguments_digest,
                    p.agent, p.credential_id, p.thread, p.owner, p.session_id, p.human_only, p.admin_only,
                    p.created_at, p.expires_at, a.state, a.at, a.actor
             FROM pending_executions p
             LEFT JOIN audit_events a
               ON a.id = (SELECT MAX(b.id) FROM audit_events b WHERE b.execution_id = p.id)",
        )?;
        let rows = stmt
            .query_map([], |r| {
                let arguments: String = r.get(5)?;
                Ok(Stored {
                    execution: Execution {
                        id: r.get(0)?,
                        tool: r.get(1)?,
                        upstream: r.get(2)?,
                        upstream_tool: r.get(3)?,
                        tool_digest: r.get(4)?,
                        arguments: serde_json::from_str(&arguments).unwrap_or(Value::Null),
                        arguments_digest: r.get(6)?,
                        agent: r.get(7)?,
                        credential_id: r.get(8)?,
                        thread: r.get(9)?,
                        owner: r.get(10)?,
                        session_id: r.get(11)?,
                        human_only: r.get(12)?,
                        admin_only: r.get(13)?,
                        created_at_ms: r.get(14)?,
                        expires_at_ms: r.get(15)?,
                    },
                    state: r.get(16)?,
                    at_ms: r.get(17)?,
                    actor: r.get(18)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Deletes the rows of `ids` at once (at start, for those that settled).
    pub(super) fn delete_now(&self, ids: &[String]) -> Result<()> {
        let mut conn = self.db.conn();
        let tx = conn.transaction()?;
        {
            let mut stmt = tx.prepare_cached("DELETE FROM pending_executions WHERE id = ?1")?;
            for id in ids {
                stmt.execute([id])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Marks `abandoned` every execution the audit log leaves unsettled that
    /// has no row here: it was held inside a request (or running) when the
    /// previous run ended, and that request is gone.
    pub(super) fn abandon_unstored(&self, now_ms: i64) -> Result<usize> {
        Ok(self.db.conn().execute(
            "INSERT INTO audit_events (execution_id, at, state, tool, arguments_digest, agent, owner, actor, detail, credential_id, thread, upstream)
             SELECT a.execution_id, ?1, 'abandoned', a.tool, a.arguments_digest, a.agent, a.owner, 'system', 'the server restarted', a.credential_id, a.thread, a.upstream
             FROM audit_events a
             WHERE a.id = (SELECT MAX(id) FROM audit_events b WHERE b.execution_id = a.execution_id)
               AND a.state IN ('pending', 'approved', 'running')
               AND NOT EXISTS (SELECT 1 FROM pending_executions p WHERE p.id = a.execution_id)",
            [now_ms],
        )?)
    }

    /// Whether a row is stored for `id` (tests).
    #[cfg(test)]
    pub(super) fn is_stored(&self, id: &str) -> bool {
        use rusqlite::OptionalExtension;
        self.db
            .conn()
            .query_row("SELECT 1 FROM pending_executions WHERE id = ?1", [id], |_| Ok(()))
            .optional()
            .ok()
            .flatten()
            .is_some()
    }
}

/// A row left by a previous run.
pub(super) struct Stored {
    /// The execution as it was paused.
    pub(super) execution: Execution,
    /// The audit log's last state for it (`None`: no entry, e.g. pruned).
    pub(super) state: Option<String>,
    /// When that state was written (Unix ms).
    pub(super) at_ms: Option<i64>,
    /// Who wrote it.
    pub(super) actor: Option<String>,
}

fn write_loop(db: &Db, rx: &mpsc::Receiver<(u64, Op)>, done: &watch::Sender<u64>) {
    // `recv` fails once every sender is gone and the queue is empty.
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let last = batch.last().map(|(seq, _)| *seq).unwrap_or(0);
        if let Err(e) = apply(db, &batch) {
            tracing::error!(error = %e, operations = batch.len(), "writing paused executions failed");
        }
        // Advanced even after a failure: a waiter must not hang on a disk error.
        done.send_replace(last);
    }
}

fn apply(db: &Db, batch: &[(u64, Op)]) -> Result<()> {
    let mut conn = db.conn();
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare_cached(
            "INSERT OR REPLACE INTO pending_executions (id, tool, upstream, upstream_tool, tool_digest, arguments,
                arguments_digest, agent, credential_id, thread, owner, session_id, human_only, admin_only, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
        )?;
        let mut delete = tx.prepare_cached("DELETE FROM pending_executions WHERE id = ?1")?;
        for (_, op) in batch {
            match op {
                Op::Insert(e) => {
                    insert.execute(params![
                        e.id,
                        e.tool,
                        e.upstream,
                        e.upstream_tool,
                        e.tool_digest,
                        e.arguments.to_string(),
                        e.arguments_digest,
                        e.agent,
                        e.credential_id,
                        e.thread,
                        e.owner,
                        e.session_id,
                        e.human_only,
                        e.admin_only,
                        e.created_at_ms,
                        e.expires_at_ms,
                    ])?;
                }
                Op::Delete(id) => {
                    delete.execute([id])?;
                }
            }
        }
    }
    tx.commit()?;
    Ok(())
}
