//! An execution as a person sees it: the JSON API's body, the execution
//! stream's message and the resume page's data.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ExecutionId, State};

/// An execution as a person sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionView {
    /// `exec_…`
    pub execution_id: ExecutionId,
    /// Current state (`abandoned` reads as cancelled).
    pub state: State,
    /// Exposed tool name.
    pub tool: String,
    /// Upstream server, if any.
    pub upstream: Option<String>,
    /// Arguments, while it is live (`None` once settled: see `kept`).
    pub arguments: Option<Value>,
    /// Once settled, its arguments as the record kept them
    /// (`keep_arguments`), bounded and redacted; `None` if it kept none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<crate::kept::KeptArguments>,
    /// SHA-256 of the canonical arguments.
    pub arguments_digest: String,
    /// Agent name.
    pub agent: String,
    /// Owning user.
    pub owner: Option<String>,
    /// Owning user's id: what access compares (`None`: owner-less, or the
    /// owner was removed).
    #[serde(default)]
    pub owner_id: Option<crate::UserId>,
    /// MCP session it was made in.
    pub session_id: Option<String>,
    /// RFC 3339 creation time (live executions).
    pub created_at: Option<String>,
    /// Creation in Unix ms (live executions; with `expires_at_ms`, its TTL).
    #[serde(default)]
    pub created_at_ms: Option<i64>,
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
    /// Its arguments on one line, cut at [`PREVIEW_CHARS`] (the inbox shows
    /// it in place of the arguments, which only the call's page shows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// The grant its page offers the viewer, who approved calls like it
    /// before (only while pending, to who may make it, unless they turned
    /// the offer down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<crate::grants::GrantSuggestion>,
    /// Once it failed: where and why, as its record says ("upstream X
    /// answered with an error: …"), bounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// How much of a call's arguments the inbox shows.
pub const PREVIEW_CHARS: usize = 120;

/// `arguments` as compact JSON on one line, cut at [`PREVIEW_CHARS`]
/// characters with "…" (`{}` for none).
pub fn preview_of(arguments: &Value) -> String {
    let text = serde_json::to_string(arguments).unwrap_or_default();
    if text.chars().count() <= PREVIEW_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(PREVIEW_CHARS).collect();
    cut.push('…');
    cut
}

/// A pending call "expires soon" within this long of its expiry…
pub const EXPIRES_SOON_MS: i64 = 2 * 60 * 1000;
/// …or within this share (percent) of its TTL, whichever is longer.
pub const EXPIRES_SOON_PERCENT: i64 = 20;

impl ExecutionView {
    /// Whether it is about to expire at `now_ms`: in the last
    /// [`EXPIRES_SOON_PERCENT`] % of its TTL or the last [`EXPIRES_SOON_MS`]
    /// (the inbox highlights it). Never for one without an expiry.
    pub fn expires_soon(&self, now_ms: i64) -> bool {
        let Some(expires) = self.expires_at_ms else { return false };
        let ttl = self.created_at_ms.map(|c| expires - c).unwrap_or(0);
        let left = expires - now_ms;
        left <= EXPIRES_SOON_MS.max(ttl * EXPIRES_SOON_PERCENT / 100)
    }

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
    /// How many executions are pending that the viewer may decide (the
    /// header's count), of which `pending` lists at most [`INBOX_LIMIT`].
    pub total: usize,
    /// Pending executions the viewer may decide, soonest expiry first,
    /// without their arguments (each call's own page shows them); at most
    /// [`INBOX_LIMIT`] of them, so an event's size does not grow with the
    /// backlog (every open page is sent one after each burst of changes).
    pub pending: Vec<ExecutionView>,
}

impl InboxView {
    /// Whether some pending executions are left out of `pending`.
    pub fn truncated(&self) -> bool {
        self.total > self.pending.len()
    }
}

/// The most executions an [`InboxView`] lists.
pub const INBOX_LIMIT: usize = 50;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preview_is_one_short_line() {
        assert_eq!(preview_of(&serde_json::json!({"path": "/tmp/a"})), r#"{"path":"/tmp/a"}"#);
        let long = preview_of(&serde_json::json!({"text": "x\n".repeat(200)}));
        assert_eq!(long.chars().count(), PREVIEW_CHARS + 1);
        assert!(long.ends_with('…') && !long.contains('\n'));
    }

    fn view(created: i64, expires: i64) -> ExecutionView {
        ExecutionView {
            execution_id: "exec_1".into(),
            state: State::Pending,
            tool: "t".into(),
            upstream: None,
            arguments: None,
            kept: None,
            arguments_digest: String::new(),
            agent: "a".into(),
            owner: None,
            owner_id: None,
            session_id: None,
            created_at: None,
            created_at_ms: Some(created),
            expires_at: None,
            expires_at_ms: Some(expires),
            decision: None,
            admin_only: false,
            human_only: false,
            preview: None,
            suggestion: None,
            failure: None,
        }
    }

    #[test]
    fn it_expires_soon_in_the_last_fifth_of_its_ttl_or_the_last_two_minutes() {
        let hour = view(0, 3_600_000);
        assert!(!hour.expires_soon(2_879_000), "12:01 of 60 min left");
        assert!(hour.expires_soon(2_880_000), "the last 20 %");
        let ten = view(0, 600_000);
        assert!(!ten.expires_soon(479_000));
        assert!(ten.expires_soon(480_000), "the last 2 minutes are also the last 20 %");
        let short = view(0, 60_000);
        assert!(short.expires_soon(0), "a 1-minute TTL is always within 2 minutes");
        assert!(!ExecutionView { expires_at_ms: None, ..view(0, 0) }.expires_soon(0));
    }
}
