//! An execution as a person sees it: the JSON API's body, the execution
//! stream's message and the resume page's data.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::State;

/// An execution as a person sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionView {
    /// `exec_…`
    pub execution_id: String,
    /// Current state (`abandoned` reads as cancelled).
    pub state: State,
    /// Exposed tool name.
    pub tool: String,
    /// Upstream server, if any.
    pub upstream: Option<String>,
    /// Arguments (`None` once settled: only the digest is kept).
    pub arguments: Option<Value>,
    /// SHA-256 of the canonical arguments.
    pub arguments_digest: String,
    /// Agent name.
    pub agent: String,
    /// Owning user.
    pub owner: Option<String>,
    /// MCP session it was made in.
    pub session_id: Option<String>,
    /// RFC 3339 creation time (live executions).
    pub created_at: Option<String>,
    /// RFC 3339 expiry (live executions).
    pub expires_at: Option<String>,
    /// Expiry in Unix ms (for countdowns).
    pub expires_at_ms: Option<i64>,
    /// Who moved it out of pending, if anyone did.
    pub decision: Option<DecisionView>,
    /// Only an admin may decide it.
    pub admin_only: bool,
    /// Only a person may decide it, each time: no grant covers it.
    #[serde(default)]
    pub human_only: bool,
}

impl ExecutionView {
    /// Whether a viewer who may see it may also decide it: an admin-only
    /// call (one that changes the gate for everyone) needs an admin.
    pub fn decidable_by(&self, is_admin: bool) -> bool {
        !self.admin_only || is_admin
    }
}

/// The approvals inbox as one person sees it: the body of
/// `/api/approvals/events`' `inbox` events and of the inbox page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxView {
    /// Server time when read (Unix ms), so relative times render the same
    /// on the server and in the browser.
    pub now_ms: i64,
    /// Whether the viewer is an admin (who may decide admin-only calls).
    pub is_admin: bool,
    /// Pending executions the viewer may decide, soonest expiry first,
    /// without their arguments (each call's own page shows them).
    pub pending: Vec<ExecutionView>,
}

/// The SSE event name of an [`InboxView`] message.
pub const INBOX_EVENT: &str = "inbox";

/// Who decided and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionView {
    /// The state it led to.
    pub state: State,
    /// `user:ada`, `system`, …
    pub by: String,
}
