//! One execution (the resume page), decisions, and the inbox.

#[cfg(feature = "ssr")]
use super::context as ctx;
use gatehouse_model::{ExecutionView, InboxView};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// What looking an execution up found.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum Lookup {
    /// Here it is.
    Found {
        /// The execution.
        execution: Box<ExecutionView>,
        /// Server time when read (Unix ms), for the countdown.
        now_ms: i64,
        /// Whether the viewer is an admin (who may decide admin-only calls).
        is_admin: bool,
    },
    /// It belongs to another user's agent (403).
    Forbidden,
    /// No such execution (404).
    NotFound,
}

/// One execution for the resume page.
#[server(prefix = "/api/fn", endpoint = "execution")]
pub async fn get_execution(id: String) -> Result<Lookup, ServerFnError> {
    ctx::lookup(&id)
}

/// Approve (`accept`) or decline (`decline`) an execution. Works as a plain
/// form post before hydration (the browser is sent back to the page).
#[server(prefix = "/api/fn", endpoint = "decide")]
pub async fn decide_execution(id: String, action: String) -> Result<String, ServerFnError> {
    let (user, core) = ctx::context()?;
    use gatehouse_model::Decision;
    let decision = match Decision::parse(&action) {
        Some(d @ (Decision::Accept | Decision::Decline)) => d,
        _ => return Err(ServerFnError::new(format!("unknown action {action:?}"))),
    };
    match core.approvals.decide_for(&user, &id, decision) {
        Ok(snapshot) => Ok(snapshot.state.as_str().to_string()),
        Err(e) => {
            ctx::set_status(e.status_code());
            Err(ServerFnError::new(e.to_string()))
        }
    }
}

/// The signed-in user's pending executions, soonest expiry first.
#[server(prefix = "/api/fn", endpoint = "pending")]
pub async fn list_pending() -> Result<InboxView, ServerFnError> {
    let (user, core) = ctx::context()?;
    Ok(core.approvals.inbox_for(&user))
}
