//! The history and an execution's timeline.

#[cfg(feature = "ssr")]
use super::context as ctx;
use gatehouse_model::{AuditEntry, CallsPage, ExecutionId, HistoryPickers};
use leptos::prelude::*;

/// The history's filters from a query string; a 400 with why if they do
/// not parse.
#[cfg(feature = "ssr")]
fn parse_filter(query: &str) -> Result<gatehouse_model::HistoryFilter, ServerFnError> {
    gatehouse_model::HistoryFilter::from_query(query).map_err(|e| {
        ctx::set_status(400);
        ServerFnError::new(format!("these filters do not parse: {e}"))
    })
}

/// One page of the history as the page shows it: a row per call (its steps
/// folded in), with what each grant that decided a call on it allows.
/// `query` is the page's query string (the filters and the cursor).
#[server(prefix = "/api/fn", endpoint = "calls")]
pub async fn get_calls(query: String) -> Result<CallsPage, ServerFnError> {
    let filter = parse_filter(&query)?;
    ctx::blocking(move |user, core| core.calls_page(&user, &filter, gatehouse_model::HISTORY_PAGE_SIZE)).await
}

/// What the history's filters suggest: the agents the viewer may see, the
/// tools exposed now and their upstreams.
#[server(prefix = "/api/fn", endpoint = "history_pickers")]
pub async fn get_history_pickers() -> Result<HistoryPickers, ServerFnError> {
    let exposed = ctx::tool_catalog()?.exposed_tools();
    ctx::blocking(move |user, core| {
        let visible =
            |owner_id: &Option<gatehouse_model::UserId>| gatehouse_core::approvals::may_decide(&user, *owner_id);
        let mut agents: Vec<String> =
            core.credentials.list()?.into_iter().filter(|c| visible(&c.owner_id)).map(|c| c.agent).collect();
        agents.sort();
        agents.dedup();
        let mut upstreams: Vec<String> = exposed.iter().filter_map(|t| t.upstream.clone()).collect();
        upstreams.sort();
        upstreams.dedup();
        Ok(HistoryPickers { agents, tools: exposed.into_iter().map(|t| t.name).collect(), upstreams })
    })
    .await
}

/// Every audit entry of one execution, oldest first.
#[server(prefix = "/api/fn", endpoint = "timeline")]
pub async fn get_timeline(id: ExecutionId) -> Result<Vec<AuditEntry>, ServerFnError> {
    ctx::blocking(move |user, core| core.approvals.timeline_for(&user, &id)).await
}
