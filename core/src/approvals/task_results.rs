//! The results of tasks (SEP-2663) at rest: a gated call a client made as a
//! task runs in the background once approved, and nobody waits on a request
//! for it; its result is kept in `task_results` until the client's
//! `tasks/get` reads it (on any replica, after a restart) or its retention
//! passes.
//!
//! The row is written before the execution settles, so a poll never finds a
//! settled task without its result. Rows are bounded twice: each expires
//! after [`RESULT_RETENTION`], and one credential keeps at most
//! [`RESULTS_PER_CREDENTIAL`] (the oldest go first); the live tasks
//! themselves are executions, bounded by `max_executions_per_credential`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{Execution, belongs_to};
use crate::args;
use crate::clock::Clock;
use crate::credentials::Credential;
use crate::db::Db;
use crate::error::Result;
use crate::model::CredentialId;

/// How long a finished task's result is kept for the client to fetch.
pub const RESULT_RETENTION: Duration = Duration::from_secs(3600);

/// Finished task results one credential keeps; a new one past it drops the oldest.
pub const RESULTS_PER_CREDENTIAL: usize = 100;

/// A finished task's result, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskResult {
    /// The task (its execution's id).
    pub task_id: String,
    /// The credential that made the call.
    pub credential_id: CredentialId,
    /// Its thread (a re-issued credential continues its calls).
    pub thread: Option<String>,
    /// Its agent.
    pub agent: String,
    /// Its owner.
    pub owner: Option<String>,
    /// Its owner's id (what [`belongs_to`] compares).
    pub owner_id: Option<gatehouse_model::UserId>,
    /// The exposed tool that ran.
    pub tool: String,
    /// The task's final status (`completed`).
    pub status: String,
    /// The tool call's result (a `CallToolResult`).
    pub result: Value,
    /// When the call was made (Unix ms).
    pub created_at_ms: i64,
    /// When it finished (Unix ms).
    pub finished_at_ms: i64,
    /// When the result is dropped (Unix ms).
    pub expires_at_ms: i64,
}

impl TaskResult {
    /// Whether `credential` may read it: the one that made the call, or its
    /// re-issued successor on the same thread ([`belongs_to`]).
    pub fn belongs_to(&self, credential: &Credential) -> bool {
        belongs_to(
            credential,
            &self.credential_id,
            self.thread.as_deref(),
            &self.agent,
            (self.owner.as_deref(), self.owner_id),
        )
    }
}

/// The `task_results` table.
#[derive(Clone)]
pub struct TaskResults {
    db: Db,
    clock: Arc<dyn Clock>,
}

impl TaskResults {
    /// The results kept in `db`, timed by `clock`.
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock }
    }

    /// Stores the result of `execution`, run as a task (before it settles);
    /// drops expired results and the credential's oldest beyond
    /// [`RESULTS_PER_CREDENTIAL`].
    pub fn save(&self, execution: &Execution, status: &str, result: &Value) -> Result<()> {
        let now = self.clock.now_ms();
        let expires = now + RESULT_RETENTION.as_millis() as i64;
        self.db.conn()?.transaction(|tx| {
            tx.execute("DELETE FROM task_results WHERE expires_at <= ?1", args![now])?;
            tx.execute(
                "INSERT INTO task_results (task_id, credential_id, thread, agent, owner, tool, status, result,
                    created_at, finished_at, expires_at, owner_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
                 ON CONFLICT (task_id) DO NOTHING",
                args![
                    execution.id,
                    execution.credential_id,
                    execution.thread,
                    execution.agent,
                    execution.owner,
                    execution.tool,
                    status,
                    result.to_string(),
                    execution.created_at_ms,
                    now,
                    expires,
                    execution.owner_id,
                ],
            )?;
            tx.execute(
                "DELETE FROM task_results WHERE credential_id = ?1 AND task_id NOT IN
                    (SELECT task_id FROM task_results WHERE credential_id = ?1
                     ORDER BY finished_at DESC, task_id DESC LIMIT ?2)",
                args![execution.credential_id, RESULTS_PER_CREDENTIAL],
            )?;
            Ok(())
        })
    }

    /// The stored result of `task_id`, unless it expired.
    pub fn get(&self, task_id: &str) -> Result<Option<TaskResult>> {
        let now = self.clock.now_ms();
        self.db.conn()?.query_opt(
            "SELECT task_id, credential_id, thread, agent, owner, tool, status, result, created_at, finished_at, expires_at,
                    owner_id
             FROM task_results WHERE task_id = ?1 AND expires_at > ?2",
            args![task_id, now],
            |r| {
                let result: String = r.get(7)?;
                Ok(TaskResult {
                    task_id: r.get(0)?,
                    credential_id: r.get(1)?,
                    thread: r.get(2)?,
                    agent: r.get(3)?,
                    owner: r.get(4)?,
                    tool: r.get(5)?,
                    status: r.get(6)?,
                    result: serde_json::from_str(&result).unwrap_or(Value::Null),
                    created_at_ms: r.get(8)?,
                    finished_at_ms: r.get(9)?,
                    expires_at_ms: r.get(10)?,
                    owner_id: r.get(11)?,
                })
            },
        )
    }

    /// Deletes the results past their retention (housekeeping); how many.
    pub fn purge_expired(&self) -> Result<usize> {
        self.db.conn()?.execute("DELETE FROM task_results WHERE expires_at <= ?1", args![self.clock.now_ms()])
    }

    /// Results stored for `credential_id` (tests, metrics).
    pub fn count(&self, credential_id: &str) -> Result<usize> {
        self.db.conn()?.query_one(
            "SELECT COUNT(*) FROM task_results WHERE credential_id = ?1",
            args![credential_id],
            |r| r.get(0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn execution(id: &str, credential: &str) -> Execution {
        Execution {
            id: id.into(),
            request: crate::approvals::NewExecution {
                tool: "t".into(),
                upstream: None,
                upstream_tool: None,
                tool_digest: String::new(),
                arguments: Value::Null,
                agent: "claude".into(),
                credential_id: credential.into(),
                thread: None,
                owner: Some("ada".into()),
                owner_id: Some(1.into()),
                session_id: None,
                human_only: false,
                admin_only: false,
                ttl: None,
                asked_by: None,
                kept_arguments: None,
            },
            arguments_digest: String::new(),
            created_at_ms: 0,
            expires_at_ms: 0,
        }
    }

    #[test]
    fn a_result_is_kept_until_its_retention_passes_and_a_credential_keeps_a_bounded_number() {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let results = TaskResults::new(Db::for_tests().unwrap(), clock.clone());
        let result = serde_json::json!({"content": [], "isError": false});
        results.save(&execution("exec_a", "cred_1"), "completed", &result).unwrap();
        let stored = results.get("exec_a").unwrap().expect("stored");
        assert_eq!((stored.status.as_str(), &stored.result), ("completed", &result));
        clock.advance(RESULT_RETENTION);
        assert!(results.get("exec_a").unwrap().is_none(), "expired");
        assert_eq!(results.purge_expired().unwrap(), 1);

        for i in 0..RESULTS_PER_CREDENTIAL + 5 {
            clock.advance(Duration::from_millis(1));
            results.save(&execution(&format!("exec_{i}"), "cred_1"), "completed", &result).unwrap();
        }
        results.save(&execution("exec_other", "cred_2"), "completed", &result).unwrap();
        assert_eq!(results.count("cred_1").unwrap(), RESULTS_PER_CREDENTIAL);
        assert!(results.get("exec_0").unwrap().is_none(), "the oldest went first");
        assert!(results.get(&format!("exec_{}", RESULTS_PER_CREDENTIAL + 4)).unwrap().is_some());
        assert_eq!(results.count("cred_2").unwrap(), 1, "another credential's are untouched");
    }
}
