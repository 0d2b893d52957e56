//! `rate = "10/min"` on a rule: how many of the calls it matches go through
//! in a window, counted per agent (every credential and session of it), per
//! owner, or per tool. Counted in the database, so the limit holds across
//! replicas on PostgreSQL: one row per rule, subject and window, bumped and
//! read in one statement.

use crate::args;
use crate::db::Db;
use crate::error::{CoreError, Result};

/// A number of calls per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Calls let through per window.
    pub count: u32,
    /// The window, seconds.
    pub window_secs: u64,
}

impl Rate {
    /// `10/min`, `5/s`, `100/hour`, `1000/day` (also `second`, `minute`, `h`, `d`).
    pub fn parse(text: &str) -> Result<Rate> {
        let invalid = || CoreError::Invalid {
            field: "rate",
            reason: format!("{text:?}: write calls per unit, e.g. \"10/min\" (units: s, min, hour, day)"),
        };
        let (count, unit) = text.trim().split_once('/').ok_or_else(invalid)?;
        let count: u32 = count.trim().parse().map_err(|_| invalid())?;
        let window_secs = match unit.trim() {
            "s" | "sec" | "second" => 1,
            "m" | "min" | "minute" => 60,
            "h" | "hour" => 3600,
            "d" | "day" => 86_400,
            _ => return Err(invalid()),
        };
        if count == 0 {
            return Err(CoreError::Invalid {
                field: "rate",
                reason: "at least 1 call (to refuse every call, block)".into(),
            });
        }
        Ok(Rate { count, window_secs })
    }
}

/// Whom a rule's rate counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Per {
    /// Each agent (by name and owner), over all its credentials and sessions.
    #[default]
    Agent,
    /// Each owner, over all their agents.
    Owner,
    /// Each tool, over every agent.
    Tool,
}

impl Per {
    /// From `agent`, `owner` or `tool` (empty: agent).
    pub fn parse(text: Option<&str>) -> Result<Per> {
        match text.map(str::trim).unwrap_or_default() {
            "" | "agent" => Ok(Per::Agent),
            "owner" => Ok(Per::Owner),
            "tool" => Ok(Per::Tool),
            other => {
                Err(CoreError::Invalid { field: "rate_per", reason: format!("{other:?} is not agent, owner or tool") })
            }
        }
    }
}

/// One limit a call counts against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// The rule's name.
    pub rule: String,
    /// Its rate.
    pub rate: Rate,
    /// Who is counted: `agent:<owner>/<name>`, `owner:<name>` or `tool:<name>`.
    pub subject: String,
}

/// A call over a limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited {
    /// The rule whose limit it is.
    pub rule: String,
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
            let window_ms = (limit.rate.window_secs * 1000) as i64;
            let start = now_ms - now_ms.rem_euclid(window_ms);
            tx.execute(
                "DELETE FROM rate_counts WHERE rule = ?1 AND subject = ?2 AND window_start < ?3",
                args![limit.rule.as_str(), limit.subject.as_str(), start],
            )?;
            let count: i64 = tx.query_one(
                "INSERT INTO rate_counts (rule, subject, window_start, count) VALUES (?1, ?2, ?3, 1)
                 ON CONFLICT (rule, subject, window_start) DO UPDATE SET count = rate_counts.count + 1
                 RETURNING count",
                args![limit.rule.as_str(), limit.subject.as_str(), start],
                |r| r.get(0),
            )?;
            if count > i64::from(limit.rate.count) && over.is_none() {
                let left_ms = (start + window_ms - now_ms).max(0) as u64;
                over = Some(Limited { rule: limit.rule.clone(), retry_after_secs: left_ms.div_ceil(1000).max(1) });
            }
        }
    }
    Ok(over)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_written() {
        assert_eq!(Rate::parse("10/min").unwrap(), Rate { count: 10, window_secs: 60 });
        assert_eq!(Rate::parse(" 5 / s ").unwrap(), Rate { count: 5, window_secs: 1 });
        assert_eq!(Rate::parse("100/hour").unwrap().window_secs, 3600);
        assert_eq!(Rate::parse("1000/day").unwrap().window_secs, 86_400);
        for bad in ["10", "ten/min", "10/week", "0/min", "-1/min", ""] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Per::parse(None).unwrap(), Per::Agent);
        assert_eq!(Per::parse(Some("owner")).unwrap(), Per::Owner);
        assert!(Per::parse(Some("session")).is_err());
    }
}
