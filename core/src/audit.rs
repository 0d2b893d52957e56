//! The audit log: every execution state change, who caused it and when, with
//! the argument digest (never the arguments themselves).

use std::sync::Arc;

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use crate::clock::{Clock, rfc3339};
use crate::db::Db;
use crate::error::Result;

/// One audit entry.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// The execution.
    pub execution_id: String,
    /// RFC 3339 time.
    pub at: String,
    /// The state entered (`pending`, `approved`, …, `abandoned`).
    pub state: String,
    /// Exposed tool name.
    pub tool: String,
    /// SHA-256 of the canonical arguments.
    pub arguments_digest: String,
    /// Agent name.
    pub agent: String,
    /// Owning user.
    pub owner: Option<String>,
    /// The credential that made the call.
    pub credential_id: Option<String>,
    /// That credential's thread.
    pub thread: Option<String>,
    /// Who caused it (`user:ada`, `agent`, `system`).
    pub actor: Option<String>,
    /// Extra words (error text, reason).
    pub detail: Option<String>,
}

impl AuditEvent {
    /// The state entered, typed: the one place stored names become states
    /// (`abandoned`, written at start for what a previous run left open, reads
    /// as cancelled).
    pub fn execution_state(&self) -> crate::approvals::State {
        crate::approvals::State::parse(&self.state).unwrap_or(crate::approvals::State::Cancelled)
    }
}

/// What is written for one transition.
pub struct Entry<'a> {
    /// The execution.
    pub execution_id: &'a str,
    /// New state.
    pub state: &'a str,
    /// Tool name.
    pub tool: &'a str,
    /// Argument digest.
    pub arguments_digest: &'a str,
    /// Agent.
    pub agent: &'a str,
    /// Owner.
    pub owner: Option<&'a str>,
    /// The calling credential.
    pub credential_id: Option<&'a str>,
    /// Its thread.
    pub thread: Option<&'a str>,
    /// Actor.
    pub actor: Option<&'a str>,
    /// Detail.
    pub detail: Option<&'a str>,
}

/// Append-only log in SQLite.
#[derive(Clone)]
pub struct AuditLog {
    db: Db,
    clock: Arc<dyn Clock>,
}

impl AuditLog {
    /// A log over `db`.
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock }
    }

    /// Appends one entry.
    pub fn record(&self, e: Entry<'_>) -> Result<()> {
        self.db.conn().prepare_cached(
            "INSERT INTO audit_events (execution_id, at, state, tool, arguments_digest, agent, owner, actor, detail, credential_id, thread)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )?.execute(params![e.execution_id, self.clock.now_ms(), e.state, e.tool, e.arguments_digest, e.agent, e.owner, e.actor, e.detail, e.credential_id, e.thread])?;
        Ok(())
    }

    /// The latest entry of an execution.
    pub fn latest(&self, execution_id: &str) -> Result<Option<AuditEvent>> {
        let conn = self.db.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT execution_id, at, state, tool, arguments_digest, agent, owner, actor, detail, credential_id, thread
             FROM audit_events WHERE execution_id = ?1 ORDER BY id DESC LIMIT 1",
        )?;
        Ok(stmt.query_row([execution_id], row).optional()?)
    }

    /// Who took an execution out of pending (the approve, decline, expiry or
    /// cancellation entry's actor).
    pub fn decided_by(&self, execution_id: &str) -> Result<Option<String>> {
        let conn = self.db.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT actor FROM audit_events WHERE execution_id = ?1
             AND state IN ('approved', 'declined', 'expired', 'cancelled', 'abandoned') ORDER BY id LIMIT 1",
        )?;
        Ok(stmt.query_row([execution_id], |r| r.get(0)).optional()?.flatten())
    }

    /// The newest `limit` entries, newest first, of everything an owner's
    /// agents did.
    pub fn recent_for_owner(&self, limit: usize, owner: &str) -> Result<Vec<AuditEvent>> {
        let conn = self.db.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT execution_id, at, state, tool, arguments_digest, agent, owner, actor, detail, credential_id, thread
             FROM audit_events WHERE owner = ?1 ORDER BY id DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![owner, limit as i64], row)?.collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// The newest `limit` entries, newest first, of one owner-less credential
    /// (another owner-less credential is someone else, whatever its agent name).
    pub fn recent_for_credential(&self, limit: usize, credential_id: &str) -> Result<Vec<AuditEvent>> {
        let conn = self.db.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT execution_id, at, state, tool, arguments_digest, agent, owner, actor, detail, credential_id, thread
             FROM audit_events WHERE credential_id = ?1 AND owner IS NULL ORDER BY id DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![credential_id, limit as i64], row)?.collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// After a restart, executions that were still live are `abandoned`.
    pub fn abandon_unsettled(&self) -> Result<usize> {
        let now = self.clock.now_ms();
        Ok(self.db.conn().execute(
            "INSERT INTO audit_events (execution_id, at, state, tool, arguments_digest, agent, owner, actor, detail, credential_id, thread)
             SELECT a.execution_id, ?1, 'abandoned', a.tool, a.arguments_digest, a.agent, a.owner, 'system', 'the server restarted', a.credential_id, a.thread
             FROM audit_events a
             WHERE a.id = (SELECT MAX(id) FROM audit_events b WHERE b.execution_id = a.execution_id)
               AND a.state IN ('pending', 'approved', 'running')",
            [now],
        )?)
    }
}

impl AuditLog {
    /// Deletes entries older than `retention` (audit retention); returns how
    /// many. Works in batches so a large backlog never holds the database
    /// for long at a time.
    pub fn prune_older_than(&self, retention: std::time::Duration) -> Result<usize> {
        const BATCH: i64 = 5_000;
        let cutoff = self.clock.now_ms().saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        let mut total = 0;
        loop {
            let n = self.db.conn().execute(
                "DELETE FROM audit_events WHERE id IN (SELECT id FROM audit_events WHERE at < ?1 LIMIT ?2)",
                params![cutoff, BATCH],
            )?;
            total += n;
            if (n as i64) < BATCH {
                return Ok(total);
            }
        }
    }
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AuditEvent> {
    Ok(AuditEvent {
        execution_id: r.get(0)?,
        at: rfc3339(r.get(1)?),
        state: r.get(2)?,
        tool: r.get(3)?,
        arguments_digest: r.get(4)?,
        agent: r.get(5)?,
        owner: r.get(6)?,
        actor: r.get(7)?,
        detail: r.get(8)?,
        credential_id: r.get(9)?,
        thread: r.get(10)?,
    })
}

#[cfg(test)]
mod prune_tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::time::Duration;

    #[test]
    fn entries_older_than_the_retention_are_pruned() {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let log = AuditLog::new(Db::open_in_memory().unwrap(), clock.clone());
        // Plain SQL rather than `Entry`, so this test does not care which
        // columns entries gain.
        let record = |id: &str| {
            log.db
                .conn()
                .execute(
                    "INSERT INTO audit_events (execution_id, at, state, tool, arguments_digest, agent)
                     VALUES (?1, ?2, 'pending', 't', 'd', 'a')",
                    params![id, clock.now_ms()],
                )
                .unwrap()
        };
        record("exec_old");
        clock.advance(Duration::from_secs(60 * 24 * 3600));
        record("exec_new");
        clock.advance(Duration::from_secs(31 * 24 * 3600));
        assert_eq!(log.prune_older_than(Duration::from_secs(90 * 24 * 3600)).unwrap(), 1);
        assert!(log.latest("exec_old").unwrap().is_none());
        assert!(log.latest("exec_new").unwrap().is_some());
    }
}
