//! `rate = "10/min"` on a rule: how many of the calls it matches go through
//! in a window, counted per agent (every credential and session of it), per
//! owner, or per tool. Counted in the database, so the limit holds across
//! replicas on PostgreSQL: one row per rule (or profile), subject and window, bumped and
//! read in one statement.

use gatehouse_model::Actor;

use crate::args;
use crate::db::Db;
use crate::error::Result;

pub use gatehouse_model::{Per, Rate};

/// One limit a call counts against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// Whose rate it is: a rule's (`Actor::Rule`) or a profile's
    /// (`Actor::Profile`); its written form keys the count, so a rule and a
    /// profile of one name count apart.
    pub by: Actor,
    /// Its rate.
    pub rate: Rate,
    /// Who is counted: `agent:<owner>/<name>`, `owner:<name>` or `tool:<name>`.
    pub subject: String,
}

/// A call over a limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited {
    /// The rule or profile whose limit it is.
    pub by: Actor,
    /// Seconds until its window ends.
    pub retry_after_secs: u64,
}

/// Counts one call against each limit; the first limit it is over, if any.
/// Earlier windows of the same rule and subject are dropped as it goes, so
/// the table holds one row per rule and subject. Each statement is atomic on
/// its own (the bump and the read are one upsert), so no transaction, and
/// no lock across replicas, is needed.
pub(super) fn take(db: &Db, now_ms: i64, limits: &[Limit]) -> Result<Option<Limited>> {
    let mut over = None;
    let mut tx = db.conn()?;
    {
        for limit in limits {
            let key = limit.by.to_string();
            let window_ms = (limit.rate.window_secs * 1000) as i64;
            let start = now_ms - now_ms.rem_euclid(window_ms);
            tx.execute(
                "DELETE FROM rate_counts WHERE rule = ?1 AND subject = ?2 AND window_start < ?3",
                args![key.as_str(), limit.subject.as_str(), start],
            )?;
            let count: i64 = tx.query_one(
                "INSERT INTO rate_counts (rule, subject, window_start, count) VALUES (?1, ?2, ?3, 1)
                 ON CONFLICT (rule, subject, window_start) DO UPDATE SET count = rate_counts.count + 1
                 RETURNING count",
                args![key.as_str(), limit.subject.as_str(), start],
                |r| r.get(0),
            )?;
            if count > i64::from(limit.rate.count) && over.is_none() {
                let left_ms = (start + window_ms - now_ms).max(0) as u64;
                over = Some(Limited { by: limit.by.clone(), retry_after_secs: left_ms.div_ceil(1000).max(1) });
            }
        }
    }
    Ok(over)
}
