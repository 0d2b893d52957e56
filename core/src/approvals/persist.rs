//! Paused executions at rest: the `pending_executions` table, written by
//! the database's ordered writer.
//!
//! Crash consistency. The audit log is the record of an execution's *state*;
//! this table holds only what the execution *is* (tool, arguments, owner,
//! expiry). So the table needs two writes per execution — insert on pause,
//! delete on settle. A transition's audit entry and its change to this
//! table are queued together, entry first, under the store's lock (no I/O
//! there), and the writer applies them in that order, so a row is never
//! deleted before the entry that says why. Nothing acts on a transition
//! before the writer has applied it: a pause is announced, a decision
//! answered and an approved call run only after [`Persist::flush`], which
//! holds no lock and blocks no thread. If the process dies with a delete
//! still queued, the next start finds the row, reads the audit log's last
//! word and settles it.

use std::sync::Arc;

use serde_json::Value;

use super::{Execution, NewExecution};
use crate::args;
use crate::db::{Conn, Db, Write};
use crate::error::Result;
use gatehouse_model::{ExecutionId, State};

enum Op {
    /// A new pause, and the replica that owns it (`None` without a cluster).
    Insert(Arc<Execution>, Option<String>),
    Delete(ExecutionId),
    /// Held inside a request (PostgreSQL: the row stays for other replicas).
    Hold(ExecutionId),
}

/// The table, through the database's writer.
pub(super) struct Persist {
    db: Db,
}

impl Persist {
    /// The table in `db`.
    pub(super) fn new(db: Db) -> Self {
        Self { db }
    }

    fn push(&self, op: Op) {
        self.db.queue(Box::new(op));
    }

    /// A connection for a read (or a direct write) of the table, once the
    /// writer has applied what was queued before it.
    fn conn(&self) -> Result<Conn<'_>> {
        self.db.flush_writes();
        self.db.conn()
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
        self.db.writes_flushed().await;
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
                    p.created_at, p.expires_at, a.state, a.at, a.actor, p.replica, p.held, p.owner_id
             FROM pending_executions p
             LEFT JOIN audit_events a
               ON a.id = (SELECT MAX(b.id) FROM audit_events b WHERE b.execution_id = p.id)
             {filter}"
        );
        self.conn()?.query(&sql, args, |r| {
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
                        owner_id: r.get(21)?,
                        session_id: r.get(11)?,
                        human_only: r.get(12)?,
                        admin_only: r.get(13)?,
                        // Its expiry is stored; the TTL it was opened with is spent.
                        ttl: None,
                        asked_by: None,
                        kept_arguments: None,
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
        self.conn()?.transaction(|tx| {
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
        self.conn()?.execute(
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
        self.conn()?.query_opt("SELECT replica FROM pending_executions WHERE id = ?1", args![id], |r| r.get(0))
    }

    /// Makes `me` the owner of `id` if `old` still is (`None`: nobody): of
    /// replicas racing for a row, exactly one wins.
    pub(super) fn claim(&self, id: &ExecutionId, me: &str, old: Option<&str>) -> Result<bool> {
        let changed = self.conn()?.execute(
            "UPDATE pending_executions SET replica = ?2 WHERE id = ?1 AND COALESCE(replica, '') = ?3",
            args![id, me, old.unwrap_or_default()],
        )?;
        Ok(changed == 1)
    }

    /// The rows whose owner is gone (none, or not heard from after
    /// `cutoff_ms`), other than `me`'s, each with its owner.
    pub(super) fn orphans(&self, me: &str, cutoff_ms: i64) -> Result<Vec<(ExecutionId, Option<String>)>> {
        self.conn()?.query(
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
        self.conn()?.query_one(
            "SELECT COUNT(*) FROM pending_executions WHERE credential_id = ?1",
            args![credential_id],
            |r| r.get(0),
        )
    }

    /// Gives up `me`'s rows that are not held (graceful shutdown): other
    /// replicas adopt them at their next sweep. Held ones stay, to be
    /// abandoned by whoever adopts them once `me` is gone.
    pub(super) fn disown(&self, me: &str) -> Result<usize> {
        self.conn()?.execute("UPDATE pending_executions SET replica = NULL WHERE replica = ?1 AND held = 0", args![me])
    }

    /// Whether a row is stored for `id` (tests).
    #[cfg(test)]
    pub(super) fn is_stored(&self, id: &ExecutionId) -> bool {
        self.conn()
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

impl Write for Op {
    fn write(&self, tx: &mut Conn<'_>) -> Result<()> {
        match self {
            Op::Insert(e, replica) => {
                tx.execute(
                        "INSERT INTO pending_executions (id, tool, upstream, upstream_tool, tool_digest, arguments,
                            arguments_digest, agent, credential_id, thread, owner, session_id, human_only, admin_only, created_at, expires_at, replica, owner_id)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
                         ON CONFLICT (id) DO UPDATE SET tool = excluded.tool, upstream = excluded.upstream,
                            upstream_tool = excluded.upstream_tool, tool_digest = excluded.tool_digest,
                            arguments = excluded.arguments, arguments_digest = excluded.arguments_digest,
                            agent = excluded.agent, credential_id = excluded.credential_id, thread = excluded.thread,
                            owner = excluded.owner, owner_id = excluded.owner_id, session_id = excluded.session_id, human_only = excluded.human_only,
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
                            e.owner_id,
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
        Ok(())
    }
}
