//! The home page's activity, counted by the database over a window of the
//! audit log (never the whole log read into memory: every call is audited).

use gatehouse_model::{ACTIVITY_DAYS, Activity, Busiest, DayDecisions, HistoryFilter, State, activity::median};

use super::{AuditLog, DAY_MS, HistoryScope, matching};
use crate::db::Value;
use crate::error::Result;

/// At most this many decisions feed the median (the window's newest).
const MEDIAN_SAMPLE: i64 = 10_000;

impl AuditLog {
    /// The last [`ACTIVITY_DAYS`] days (today included, UTC days) of what
    /// `scope` may read.
    pub fn activity(&self, scope: &HistoryScope) -> Result<Activity> {
        self.flush();
        let today = self.clock.now_ms().div_euclid(DAY_MS);
        let first_day = today - (ACTIVITY_DAYS as i64 - 1);
        let since = first_day * DAY_MS;
        // What `scope` may read since the window began, over table alias `t`.
        let window = |t: &str| -> Result<(String, Vec<Value>)> {
            let (mut clauses, mut values) = matching(&HistoryFilter::default(), scope, t)?;
            clauses.push(format!("{t}at >= ?"));
            values.push(Value::Int(since));
            Ok((clauses.join(" AND "), values))
        };
        let (within, values) = window("")?;
        let decided = format!("state IN ('{}', '{}')", State::Approved.as_str(), State::Declined.as_str());
        let mut conn = self.db.conn()?;

        let mut days: Vec<DayDecisions> =
            (first_day..=today).map(|d| DayDecisions { day_ms: d * DAY_MS, ..Default::default() }).collect();
        let counted = conn.query(
            &format!("SELECT at / {DAY_MS}, state, COUNT(*) FROM audit_events WHERE {within} AND {decided} GROUP BY at / {DAY_MS}, state"),
            &values,
            |r| Ok((r.get::<i64>(0)?, r.get::<State>(1)?, r.get::<i64>(2)?)),
        )?;
        for (day, state, n) in counted {
            if let Some(slot) = usize::try_from(day - first_day).ok().and_then(|i| days.get_mut(i)) {
                let n = u64::try_from(n).unwrap_or(0);
                match state {
                    State::Approved => slot.approved += n,
                    _ => slot.declined += n,
                }
            }
        }

        // From the pause to the decision, per decided call.
        let (decided_within, decided_values) = window("d.")?;
        let mut waits = conn.query(
            &format!(
                "SELECT d.at - p.at FROM audit_events d JOIN audit_events p
                 ON p.execution_id = d.execution_id AND p.state = '{}'
                 WHERE {decided_within} AND d.{decided} ORDER BY d.id DESC LIMIT {MEDIAN_SAMPLE}",
                State::Pending.as_str(),
            ),
            &decided_values,
            |r| r.get::<i64>(0),
        )?;
        let decisions = waits.len() as u64;

        // Each call once: a shadow rule's entry is not a call of its own.
        let counted_calls = format!("{within} AND state <> '{}'", State::Shadow.as_str());
        let calls = conn
            .query(
                &format!("SELECT COUNT(DISTINCT execution_id) FROM audit_events WHERE {counted_calls}"),
                &values,
                |r| r.get::<i64>(0),
            )?
            .first()
            .copied()
            .unwrap_or(0);
        let mut busiest = |column: &str| -> Result<Vec<Busiest>> {
            conn.query(
                &format!(
                    "SELECT {column}, COUNT(DISTINCT execution_id) AS n FROM audit_events WHERE {counted_calls}
                     GROUP BY {column} ORDER BY n DESC, {column} LIMIT 5"
                ),
                &values,
                |r| Ok(Busiest { name: r.get(0)?, calls: u64::try_from(r.get::<i64>(1)?).unwrap_or(0) }),
            )
        };
        let tools = busiest("tool")?;
        let agents = busiest("agent")?;
        Ok(Activity {
            days,
            median_decision_ms: median(&mut waits),
            decisions,
            calls: u64::try_from(calls).unwrap_or(0),
            tools,
            agents,
        })
    }
}
