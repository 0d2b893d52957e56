//! States good for one use: a sealed `requestState` Gatehouse handed an
//! agent for an upstream's input round may carry the call on once. Sealing
//! proves who may use it and until when; this table proves it was not used
//! before — on this replica or another, before a restart or after.
//!
//! A use is one `INSERT … ON CONFLICT DO NOTHING` of the state's hash: of two
//! replicas asked at once, one inserts the row and the other is refused. A
//! row lives until the state would have expired anyway (then the seal
//! refuses it), and the housekeeping sweep deletes it.

use std::sync::Arc;

use crate::args;
use crate::clock::Clock;
use crate::db::Db;
use crate::error::Result;

/// The spent states, in the database. Cheap to clone.
#[derive(Clone)]
pub struct SingleUse {
    db: Db,
    clock: Arc<dyn Clock>,
}

impl SingleUse {
    /// The table in `db`, timed by `clock`.
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock }
    }

    /// Spends `state`, good until `expires_at_ms`: `true` the first time,
    /// `false` if it was spent before (or has expired).
    pub fn spend(&self, state: &str, expires_at_ms: i64) -> Result<bool> {
        if expires_at_ms <= self.clock.now_ms() {
            return Ok(false);
        }
        let inserted = self.db.conn()?.execute(
            "INSERT INTO spent_states (hash, expires_at) VALUES (?1, ?2) ON CONFLICT (hash) DO NOTHING",
            args![crate::secret::hash(state), expires_at_ms],
        )?;
        Ok(inserted == 1)
    }

    /// Deletes the rows of states that have expired (their seal refuses them now).
    pub fn purge_expired(&self) -> Result<usize> {
        self.db.conn()?.execute("DELETE FROM spent_states WHERE expires_at <= ?1", args![self.clock.now_ms()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;
    use std::time::Duration;

    #[test]
    fn a_state_is_spent_once_even_by_a_second_store_on_the_same_database() {
        let db = Db::for_tests().unwrap();
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let (one, other) = (SingleUse::new(db.clone(), clock.clone()), SingleUse::new(db, clock.clone()));
        let until = clock.now_ms() + 60_000;
        assert!(one.spend("gh-upstream.a", until).unwrap());
        assert!(!one.spend("gh-upstream.a", until).unwrap(), "a replay on the same replica");
        assert!(!other.spend("gh-upstream.a", until).unwrap(), "a replay on another replica, or after a restart");
        assert!(other.spend("gh-upstream.b", until).unwrap(), "another state is its own");
        assert!(!one.spend("gh-upstream.c", clock.now_ms()).unwrap(), "an expired state is never spent");
        clock.advance(Duration::from_secs(61));
        assert_eq!(one.purge_expired().unwrap(), 2);
    }
}
