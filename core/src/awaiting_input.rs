//! Approved calls waiting on their agent: the upstream asked for input,
//! the call stays `running` on the record, and each of the agent's answers
//! carries it on one round (`gate::upstream_round`). An agent that never
//! answers would leave it `running` for good; this table holds each such
//! call's deadline (renewed by every round that asks again), and the
//! housekeeping sweep ends a call past it as `expired`, so the history
//! never shows a call running that nobody will finish.

use std::sync::Arc;

use crate::args;
use crate::audit::{AuditLog, Entry};
use crate::clock::Clock;
use crate::db::Db;
use crate::error::Result;
use gatehouse_model::{ExecutionId, State};

/// What the record says of a call its agent left waiting.
pub const EXPIRED_DETAIL: &str = "the agent never answered the upstream's request for input";

/// The waiting calls, in the database. Cheap to clone.
#[derive(Clone)]
pub struct AwaitingInput {
    db: Db,
    clock: Arc<dyn Clock>,
}

impl AwaitingInput {
    /// The table in `db`, timed by `clock`.
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock }
    }

    /// `execution` waits for its agent until `until_ms` (a later round that
    /// asks again moves the deadline).
    pub fn wait(&self, execution: &str, until_ms: i64) -> Result<()> {
        self.db.conn()?.execute(
            "INSERT INTO awaiting_input (execution_id, until) VALUES (?1, ?2)
             ON CONFLICT (execution_id) DO UPDATE SET until = ?2",
            args![execution, until_ms],
        )?;
        Ok(())
    }

    /// `execution` waits no more (a round finished it).
    pub fn done(&self, execution: &str) -> Result<()> {
        self.db.conn()?.execute("DELETE FROM awaiting_input WHERE execution_id = ?1", args![execution])?;
        Ok(())
    }

    /// Ends every call past its deadline whose last word is still
    /// `running` (`expired`, by `system`); how many.
    pub fn expire_overdue(&self, audit: &AuditLog) -> Result<usize> {
        let now = self.clock.now_ms();
        let overdue: Vec<String> = self.db.conn()?.query(
            "SELECT execution_id FROM awaiting_input WHERE until <= ?1 ORDER BY until LIMIT 1000",
            args![now],
            |r| r.get(0),
        )?;
        let mut ended = 0;
        for id in overdue {
            let execution = ExecutionId::from(id.clone());
            if let Some(last) = audit.latest(&execution)?
                && last.state == State::Running
            {
                audit.record(Entry {
                    execution_id: &id,
                    state: State::Expired,
                    tool: &last.tool,
                    upstream: last.upstream.as_deref(),
                    arguments_digest: &last.arguments_digest,
                    agent: &last.agent,
                    owner: last.owner.as_deref(),
                    owner_id: last.owner_id,
                    credential_id: last.credential_id.as_deref(),
                    thread: last.thread.as_deref(),
                    actor: Some("system"),
                    detail: Some(EXPIRED_DETAIL),
                    arguments: None,
                });
                ended += 1;
            }
            self.done(&id)?;
        }
        audit.flush();
        Ok(ended)
    }
}
