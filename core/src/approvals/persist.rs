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

use serde_json::Value;
use tokio::sync::watch;

use super::{Execution, NewExecution};
use crate::args;
use crate::db::Db;
use crate::error::Result;
use gatehouse_model::{ExecutionId, State};

/// Most queued operations applied in one transaction.
const BATCH: usize = 512;

enum Op {
    /// A new pause, and the replica that owns it (`None` without a cluster).
    Insert(Arc<Execution>, Option<String>),
    Delete(ExecutionId),
    /// Held inside a request (PostgreSQL: the row stays for other replicas).
    Hold(ExecutionId),
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
        // A plain thread, not a runtime task: the writes block on the database, and
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

    /// Queues the row of a new pending execution, owned by `replica` (call
    /// under the store's lock).
    pub(super) fn insert(&self, execution: Arc<Execution>, replica: Option<String>) {
        self.push(Op::Insert(execution, replica));
    }

    /// Queues marking a row held inside its request (call under the store's lock).
    pub(super) fn hold(&self, id: &ExecutionId) {
        self.push(Op::Hold(id.clone()));
    }

    /// Queues the removal of a settled (or request-held) execution's row,
    /// arguments and all (call under the store's lock).
    pub(super) fn delete(&self, id: &ExecutionId) {
        self.push(Op::Delete(id.clone()));
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
        self.select("", args![])
    }

    /// The row of `id`, if stored.
    pub(super) fn load_one(&self, id: &ExecutionId) -> Result<Option<Stored>> {
        Ok(self.select("WHERE p.id = ?1", args![id])?.pop())
    }

    /// The rows owned by replicas other than `me` heard from after `cutoff_ms`.
    pub(super) fn load_remote(&self, me: &str, cutoff_ms: i64) -> Result<Vec<Stored>> {
        self.select(
            "WHERE p.replica <> ?1 AND p.replica IN (SELECT id FROM replicas WHERE seen_at > ?2)",
            args![me, cutoff_ms],
        )
    }

    fn select(&self, filter: &str, args: &[crate::db::Value]) -> Result<Vec<Stored>> {
        let sql = format!(
            "SELECT p.id, p.tool, p.upstream, p.upstream_tool, p.tool_digest, p.arguments, p.arguments_digest,
                    p.agent, p.credential_id, p.thread, p.owner, p.session_id, p.human_only, p.admin_only,
                    p.created_at, p.expires_at, a.state, a.at, a.actor, p.replica, p.held
             FROM pending_executions p
             LEFT JOIN audit_events a
               ON a.id = (SELECT MAX(b.id) FROM audit_events b WHERE b.execution_id = p.id)
             {filter}"
        );
        self.db.conn()?.query(&sql, args, |r| {
            let arguments: String = r.get(5)?;
            Ok(Stored {
                execution: Execution {
                    id: r.get(0)?,
                    request: NewExecution {
                        tool: r.get(1)?,
                        upstream: r.get(2)?,
                        upstream_tool: r.get(3)?,
                        tool_digest: r.get(4)?,
                        arguments: serde_json::from_str(&arguments).unwrap_or(Value::Null),
                        agent: r.get(7)?,
                        credential_id: r.get(8)?,
                        thread: r.get(9)?,
                        owner: r.get(10)?,
                        session_id: r.get(11)?,
                        human_only: r.get(12)?,
                        admin_only: r.get(13)?,
                        // Its expiry is stored; the TTL it was opened with is spent.
                        ttl: None,
                    },
                    arguments_digest: r.get(6)?,
                    created_at_ms: r.get(14)?,
                    expires_at_ms: r.get(15)?,
                },
                state: r.get(16)?,
                at_ms: r.get(17)?,
                actor: r.get(18)?,
                replica: r.get(19)?,
                held: r.get(20)?,
            })
        })
    }

    /// Deletes the rows of `ids` at once (at start, for those that settled).
    pub(super) fn delete_now(&self, ids: &[ExecutionId]) -> Result<()> {
        self.db.conn()?.transaction(|tx| {
            for id in ids {
                tx.execute("DELETE FROM pending_executions WHERE id = ?1", args![id])?;
            }
            Ok(())
        })
    }

    /// Marks `abandoned` every execution the audit log leaves unsettled (as
    /// of `before_ms` or earlier) that has no row here: it was held inside a
    /// request (or running) when the previous run ended, and that request is
    /// gone. With `only`, just that execution.
    pub(super) fn abandon_unstored(&self, now_ms: i64, before_ms: i64, only: Option<&str>) -> Result<usize> {
        self.db.conn()?.execute(
            "INSERT INTO audit_events (execution_id, at, state, tool, arguments_digest, agent, owner, actor, detail, credential_id, thread, upstream, owner_id)
             SELECT a.execution_id, CAST(?1 AS BIGINT), 'abandoned', a.tool, a.arguments_digest, a.agent, a.owner, 'system', 'the server restarted', a.credential_id, a.thread, a.upstream, a.owner_id
             FROM audit_events a
             WHERE a.id = (SELECT MAX(id) FROM audit_events b WHERE b.execution_id = a.execution_id)
               AND a.state IN ('pending', 'approved', 'running')
               AND NOT EXISTS (SELECT 1 FROM pending_executions p WHERE p.id = a.execution_id)
               AND a.at <= ?2 AND (?3 = '' OR a.execution_id = ?3)",
            args![now_ms, before_ms, only.unwrap_or_default()],
        )
    }

    /// Who owns `id`'s row (`Some(None)`: nobody), or `None` without a row.
    pub(super) fn owner_of(&self, id: &ExecutionId) -> Result<Option<Option<String>>> {
        self.db.conn()?.query_opt("SELECT replica FROM pending_executions WHERE id = ?1", args![id], |r| r.get(0))
    }

    /// Makes `me` the owner of `id` if `old` still is (`None`: nobody): of
    /// replicas racing for a row, exactly one wins.
    pub(super) fn claim(&self, id: &ExecutionId, me: &str, old: Option<&str>) -> Result<bool> {
        let changed = self.db.conn()?.execute(
            "UPDATE pending_executions SET replica = ?2 WHERE id = ?1 AND COALESCE(replica, '') = ?3",
            args![id, me, old.unwrap_or_default()],
        )?;
        Ok(changed == 1)
    }

    /// The rows whose owner is gone (none, or not heard from after
    /// `cutoff_ms`), other than `me`'s, each with its owner.
    pub(super) fn orphans(&self, me: &str, cutoff_ms: i64) -> Result<Vec<(ExecutionId, Option<String>)>> {
        self.db.conn()?.query(
            "SELECT id, replica FROM pending_executions
             WHERE replica IS NULL
                OR (replica <> ?1 AND replica NOT IN (SELECT id FROM replicas WHERE seen_at > ?2))",
            args![me, cutoff_ms],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    /// Live executions of `credential_id` on every replica (rows not yet
    /// written are not counted: the limit is approximate across replicas).
    pub(super) fn count_credential(&self, credential_id: &str) -> Result<usize> {
        self.db.conn()?.query_one(
            "SELECT COUNT(*) FROM pending_executions WHERE credential_id = ?1",
            args![credential_id],
            |r| r.get(0),
        )
    }

    /// Gives up `me`'s rows that are not held (graceful shutdown): other
    /// replicas adopt them at their next sweep. Held ones stay, to be
    /// abandoned by whoever adopts them once `me` is gone.
    pub(super) fn disown(&self, me: &str) -> Result<usize> {
        self.db
            .conn()?
            .execute("UPDATE pending_executions SET replica = NULL WHERE replica = ?1 AND held = 0", args![me])
    }

    /// Whether a row is stored for `id` (tests).
    #[cfg(test)]
    pub(super) fn is_stored(&self, id: &ExecutionId) -> bool {
        self.db
            .conn()
            .and_then(|mut conn| {
                conn.query_opt("SELECT 1 FROM pending_executions WHERE id = ?1", args![id], |_| Ok(()))
            })
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
    pub(super) state: Option<State>,
    /// When that state was written (Unix ms).
    pub(super) at_ms: Option<i64>,
    /// Who wrote it.
    pub(super) actor: Option<String>,
    /// The replica that owns it (`None`: nobody, or no cluster).
    pub(super) replica: Option<String>,
    /// Held inside a request (left `abandoned` by whoever adopts it).
    pub(super) held: bool,
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
    db.conn()?.transaction(|tx| {
        for (_, op) in batch {
            match op {
                Op::Insert(e, replica) => {
                    tx.execute(
                        "INSERT INTO pending_executions (id, tool, upstream, upstream_tool, tool_digest, arguments,
                            arguments_digest, agent, credential_id, thread, owner, session_id, human_only, admin_only, created_at, expires_at, replica)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)
                         ON CONFLICT (id) DO UPDATE SET tool = excluded.tool, upstream = excluded.upstream,
                            upstream_tool = excluded.upstream_tool, tool_digest = excluded.tool_digest,
                            arguments = excluded.arguments, arguments_digest = excluded.arguments_digest,
                            agent = excluded.agent, credential_id = excluded.credential_id, thread = excluded.thread,
                            owner = excluded.owner, session_id = excluded.session_id, human_only = excluded.human_only,
                            admin_only = excluded.admin_only, created_at = excluded.created_at, expires_at = excluded.expires_at",
                        args![
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
                            replica,
                        ],
                    )?;
                }
                Op::Delete(id) => {
                    tx.execute("DELETE FROM pending_executions WHERE id = ?1", args![id])?;
                }
                Op::Hold(id) => {
                    tx.execute("UPDATE pending_executions SET held = 1 WHERE id = ?1", args![id])?;
                }
            }
        }
        Ok(())
    })
}
