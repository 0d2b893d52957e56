//! Failed sign-ins (and setup attempts) per client address and per
//! username, as every replica on one PostgreSQL sees them: the server's
//! sign-in throttle counts here on PostgreSQL, so N replicas do not give N
//! times the attempts. (On SQLite one process counts in memory and this
//! table stays empty.) The limits and the backoff are the throttle's; this
//! store only keeps the counts, changed atomically.

use std::sync::Arc;

use crate::args;
use crate::clock::Clock;
use crate::db::{Conn, Db};
use crate::error::Result;

/// One address's or username's failures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Failures {
    /// Failures counted (since the last success, or since they were forgotten).
    pub count: u32,
    /// When the last one happened (Unix ms; 0: never).
    pub last_failure_ms: i64,
    /// Attempts are refused until then (Unix ms; 0: not locked).
    pub blocked_until_ms: i64,
}

/// The shared failure counts. Cheap to clone.
#[derive(Clone)]
pub struct SignInFailures {
    db: Db,
    clock: Arc<dyn Clock>,
}

impl SignInFailures {
    /// The counts in `db`, swept by `clock`.
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock }
    }

    /// The failures of `subject` in `scope` (`address` or `username`); none
    /// counted is the default.
    pub fn get(&self, scope: &str, subject: &str) -> Result<Failures> {
        stored(&mut self.db.conn()?, scope, subject)
    }

    /// Counts one failure of `subject` in `scope`: `update` turns the
    /// failures as stored into the new ones, inside one transaction (so two
    /// replicas counting at once both count), and the row may be forgotten
    /// from `forget_at_ms` on. Returns the new failures.
    pub fn record(
        &self,
        scope: &str,
        subject: &str,
        update: impl FnOnce(Failures) -> (Failures, i64),
    ) -> Result<Failures> {
        self.db.conn()?.transaction(|conn| {
            // The transaction holds the schema's write lock (see
            // `Conn::transaction`): no other replica counts in between.
            let before = stored(conn, scope, subject)?;
            let (failures, forget_at_ms) = update(before);
            conn.execute(
                "INSERT INTO sign_in_failures (scope, subject, failures, last_failure_at, blocked_until, forget_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                 ON CONFLICT (scope, subject) DO UPDATE SET failures = excluded.failures, \
                 last_failure_at = excluded.last_failure_at, blocked_until = excluded.blocked_until, \
                 forget_at = excluded.forget_at",
                args![
                    scope,
                    subject,
                    failures.count,
                    failures.last_failure_ms,
                    failures.blocked_until_ms,
                    forget_at_ms
                ],
            )?;
            Ok(failures)
        })
    }

    /// Forgets the failures of `subject` in `scope` (a successful sign-in).
    pub fn forget(&self, scope: &str, subject: &str) -> Result<()> {
        self.db
            .conn()?
            .execute("DELETE FROM sign_in_failures WHERE scope = ?1 AND subject = ?2", args![scope, subject])?;
        Ok(())
    }

    /// Deletes the rows that may be forgotten by now (the housekeeping
    /// sweep); how many.
    pub fn purge_forgotten(&self) -> Result<usize> {
        self.db.conn()?.execute("DELETE FROM sign_in_failures WHERE forget_at <= ?1", args![self.clock.now_ms()])
    }
}

/// The failures stored for `subject` in `scope` (none: the default).
fn stored(conn: &mut Conn<'_>, scope: &str, subject: &str) -> Result<Failures> {
    let found = conn.query_opt(
        "SELECT failures, last_failure_at, blocked_until FROM sign_in_failures WHERE scope = ?1 AND subject = ?2",
        args![scope, subject],
        |r| {
            Ok(Failures {
                count: u32::try_from(r.get::<i64>(0)?).unwrap_or(u32::MAX),
                last_failure_ms: r.get(1)?,
                blocked_until_ms: r.get(2)?,
            })
        },
    )?;
    Ok(found.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    #[test]
    fn failures_are_counted_forgotten_and_swept() {
        let clock = Arc::new(ManualClock::new(1_000));
        let store = SignInFailures::new(Db::for_tests().unwrap(), clock.clone());
        assert_eq!(store.get("username", "u1").unwrap(), Failures::default());
        let once = |f: Failures| (Failures { count: f.count + 1, last_failure_ms: 1_000, blocked_until_ms: 0 }, 2_000);
        store.record("username", "u1", once).unwrap();
        let twice = store.record("username", "u1", once).unwrap();
        assert_eq!(twice.count, 2);
        assert_eq!(store.get("username", "u1").unwrap(), twice);
        assert_eq!(store.get("address", "u1").unwrap(), Failures::default(), "scopes do not mix");
        store.record("address", "10.0.0.1", once).unwrap();
        store.forget("username", "u1").unwrap();
        assert_eq!(store.get("username", "u1").unwrap().count, 0);
        assert_eq!(store.purge_forgotten().unwrap(), 0);
        clock.advance(std::time::Duration::from_secs(1));
        assert_eq!(store.purge_forgotten().unwrap(), 1);
    }
}
