//! The history and an execution's timeline.

#[cfg(feature = "ssr")]
use super::context as ctx;
use gatehouse_model::{AuditEntry, ExecutionId, HistoryPage};
use leptos::prelude::*;

/// One page of the history the signed-in user may read, newest first;
/// `query` is the page's query string (the filters and the cursor).
#[server(prefix = "/api/fn", endpoint = "history")]
pub async fn get_history(query: String) -> Result<HistoryPage, ServerFnError> {
    let filter = gatehouse_model::HistoryFilter::from_query(&query).map_err(|e| {
        ctx::set_status(400);
        ServerFnError::new(format!("these filters do not parse: {e}"))
    })?;
    ctx::blocking(move |user, core| core.approvals.history_for(&user, &filter, gatehouse_model::HISTORY_PAGE_SIZE))
        .await
}

/// Every audit entry of one execution, oldest first.
#[server(prefix = "/api/fn", endpoint = "timeline")]
pub async fn get_timeline(id: ExecutionId) -> Result<Vec<AuditEntry>, ServerFnError> {
    ctx::blocking(move |user, core| core.approvals.timeline_for(&user, &id)).await
}
