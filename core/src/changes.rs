//! The change log: who changed the gate's configuration and when — policy
//! rules, tool pins, users. (What agents did is the audit log's.) Shown on
//! the console pages beside what changed.

use std::sync::Arc;

use gatehouse_model::ChangeEntry;

use crate::args;
use crate::clock::{Clock, rfc3339};
use crate::db::Db;
use crate::error::Result;

/// What is written for one change.
pub struct Change<'a> {
    /// Who made it: `user:ada`, `agent:claude (approved by user:ada)`, `cli`.
    pub actor: &'a str,
    /// What kind of thing changed: `policy`, `tool`, `user`.
    pub subject: &'a str,
    /// Which one: a rule's pattern, a tool's name, a user's name.
    pub target: &'a str,
    /// What happened: `set`, `remove`, `accept`, `reject`, `invite`, …
    pub action: &'a str,
    /// The new value or the reason, if any.
    pub detail: Option<&'a str>,
}

/// Append-only log in the database.
#[derive(Clone)]
pub struct ChangeLog {
    db: Db,
    clock: Arc<dyn Clock>,
}

impl ChangeLog {
    /// A log over `db`.
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock }
    }

    /// Appends one change.
    pub fn record(&self, c: Change<'_>) -> Result<()> {
        self.db.conn()?.execute(
            "INSERT INTO changes (at, actor, subject, target, action, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            args![self.clock.now_ms(), c.actor, c.subject, c.target, c.action, c.detail],
        )?;
        Ok(())
    }

    /// The newest `limit` changes of one kind of subject, newest first.
    pub fn recent(&self, subject: &str, limit: usize) -> Result<Vec<ChangeEntry>> {
        self.db.conn()?.query(
            "SELECT id, at, actor, subject, target, action, detail FROM changes WHERE subject = ?1 ORDER BY id DESC LIMIT ?2",
            args![subject, limit],
            |r| {
                let at_ms: i64 = r.get(1)?;
                Ok(ChangeEntry {
                    id: r.get(0)?,
                    at_ms,
                    at: rfc3339(at_ms),
                    actor: r.get(2)?,
                    subject: r.get(3)?,
                    target: r.get(4)?,
                    action: r.get(5)?,
                    detail: r.get(6)?,
                })
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn changes_are_listed_newest_first_by_subject() {
        let log = ChangeLog::new(Db::for_tests().unwrap(), Arc::new(ManualClock::new(1_700_000_000_000)));
        for (subject, target) in [("policy", "fs_*"), ("user", "bob"), ("policy", "rm")] {
            log.record(Change { actor: "user:ada", subject, target, action: "set", detail: None }).unwrap();
        }
        let policy = log.recent("policy", 10).unwrap();
        assert_eq!(policy.iter().map(|c| c.target.as_str()).collect::<Vec<_>>(), ["rm", "fs_*"]);
        assert_eq!(policy[0].actor, "user:ada");
    }
}
