//! What `/metrics` reads about approvals.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Decision;

/// Counters and a histogram for `/metrics`, by name.
#[derive(Debug, Default)]
pub struct ApprovalMetrics {
    /// Executions approved.
    pub accepted: AtomicU64,
    /// Executions declined.
    pub declined: AtomicU64,
    /// Executions cancelled by a decision.
    pub cancelled: AtomicU64,
    /// Executions nobody decided in time.
    pub expired: AtomicU64,
    /// Histogram of seconds from pause to decision: one count per bound of
    /// [`WAIT_BUCKETS`], then the +Inf bucket.
    pub wait_buckets: [AtomicU64; WAIT_BUCKETS.len() + 1],
    /// Sum of waits (ms).
    pub wait_sum_ms: AtomicU64,
    /// Entries in the audit log at the last housekeeping sweep (its size bound
    /// is `audit_max_entries`).
    pub audit_entries: AtomicU64,
}

/// Upper bounds (seconds) of the wait histogram's buckets.
pub const WAIT_BUCKETS: [f64; 8] = [1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0];

impl ApprovalMetrics {
    /// The counter of one kind of decision.
    pub fn decided(&self, decision: Decision) -> &AtomicU64 {
        match decision {
            Decision::Accept => &self.accepted,
            Decision::Decline => &self.declined,
            Decision::Cancel => &self.cancelled,
        }
    }

    pub(super) fn observe_wait(&self, ms: i64) {
        let secs = ms.max(0) as f64 / 1000.0;
        let i = WAIT_BUCKETS.iter().position(|b| secs <= *b).unwrap_or(WAIT_BUCKETS.len());
        self.wait_buckets[i].fetch_add(1, Ordering::Relaxed);
        self.wait_sum_ms.fetch_add(ms.max(0) as u64, Ordering::Relaxed);
    }
}
