//! What the home page shows at a glance, read from the audit log: decisions
//! per day, how long people take to decide, the busiest tools and agents.

use serde::{Deserialize, Serialize};

/// How many days the home page's chart covers.
pub const ACTIVITY_DAYS: usize = 14;

/// One day's decisions by people.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DayDecisions {
    /// Midnight UTC that starts the day (Unix ms).
    pub day_ms: i64,
    /// Calls approved that day.
    pub approved: u64,
    /// Calls declined that day.
    pub declined: u64,
}

/// A name and how many calls it made or had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Busiest {
    /// The tool's or agent's name.
    pub name: String,
    /// Calls in the window.
    pub calls: u64,
}

/// The audit log's activity over the last [`ACTIVITY_DAYS`] days, as the
/// viewer may see it (everyone's for admins, their agents' otherwise).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Activity {
    /// One entry per day, oldest first, today last (days without a decision
    /// included, at zero).
    pub days: Vec<DayDecisions>,
    /// The median time from pause to a person's decision, over the window
    /// (ms); `None` when nobody decided anything.
    pub median_decision_ms: Option<i64>,
    /// Decisions the median is over.
    pub decisions: u64,
    /// Calls in the window (each once, whatever became of it).
    pub calls: u64,
    /// The most called tools, most first (at most five).
    pub tools: Vec<Busiest>,
    /// The busiest agents, most first (at most five).
    pub agents: Vec<Busiest>,
}

/// The median of `values` (the lower middle one of an even count), `None`
/// for none.
pub fn median(values: &mut [i64]) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(values[(values.len() - 1) / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_value() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [5]), Some(5));
        assert_eq!(median(&mut [9, 1, 5]), Some(5));
        assert_eq!(median(&mut [4, 1, 3, 2]), Some(2));
    }
}
