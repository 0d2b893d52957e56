//! What the approval store answers: an execution's state at one moment
//! ([`Snapshot`]), what a wait came to, why an operation was refused, and
//! what a restart found. Plain data (serde where it crosses to another
//! replica), so the bus messages and every caller can name it without the
//! store.

use gatehouse_model::State;
use serde::{Deserialize, Serialize};

/// The state of an execution at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// State.
    pub state: State,
    /// Who moved it there (`user:ada`, `agent`, `system`).
    pub actor: Option<String>,
    /// Extra words (error text).
    pub detail: Option<String>,
    /// Who took it out of pending (kept through running and completion).
    pub decided_by: Option<String>,
}

/// Why a decision was not recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum DecideError {
    /// No such execution, live or in the audit log.
    #[error("execution not found")]
    NotFound,
    /// Another decision (or expiry) came first: the state it left.
    #[error("execution is already {0}")]
    Conflict(State),
    /// Storage failed.
    #[error("{0}")]
    Storage(String),
}

/// What waiting for a decision came to ([`ApprovalStore::wait_or_forget`](super::ApprovalStore::wait_or_forget)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    /// The time slice ended with no decision.
    StillPending,
    /// It left `pending` (decided, expired, cancelled): its state then.
    Moved(Snapshot),
    /// It was not live when the wait began (settled: the audit log answers).
    NotLive,
    /// The client cancelled; the execution was forgotten.
    Cancelled,
}

/// Why an approved call could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// Not approved (pending or settled).
    #[error("execution is {0}, not approved")]
    NotApproved(State),
    /// No live execution.
    #[error("execution not found")]
    NotFound,
}

/// Why a new execution was not opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The credential already has as many live executions as allowed.
    #[error("this credential already has {limit} calls waiting or running (max_executions_per_credential)")]
    TooMany {
        /// The configured limit.
        limit: usize,
    },
}

/// What [`ApprovalStore::restore`](super::ApprovalStore::restore) found of a previous run's pauses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    /// Still pending: live again, expiry re-armed.
    pub pending: usize,
    /// Approved and still within their run window: live again.
    pub approved: usize,
    /// Their TTL (or run window) passed while Gatehouse was stopped: now `expired`.
    pub expired: usize,
    /// Held inside a request, or running, when the previous run ended: now `abandoned`.
    pub abandoned: usize,
}
