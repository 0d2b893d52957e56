//! Server functions the pages call, and the data they return (the shared
//! model's views, with what a page needs around them). The types compile on
//! both sides; the bodies run only on the server, against the same stores the
//! HTTP API uses.

use gatehouse_model::{
    AuditEntry, CredentialView, ExecutionView, HistoryFilter, HistoryPage, InboxView, McpSessionInfo, UpstreamInfo,
};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// What the home page shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Overview {
    /// The signed-in user's name.
    pub username: String,
    /// Whether they are an admin (sees every agent).
    pub is_admin: bool,
    /// Server time when this was read (Unix ms), so relative times render the
    /// same on the server and after hydration.
    pub now_ms: i64,
    /// Connected MCP sessions.
    pub sessions: Vec<McpSessionInfo>,
    /// Credentials, newest first.
    pub credentials: Vec<CredentialView>,
}

/// The signed-in user's view of sessions and credentials: admins see all,
/// others only agents they own.
#[server(prefix = "/api/fn", endpoint = "overview")]
pub async fn get_overview() -> Result<Overview, ServerFnError> {
    let (user, core) = server::context()?;
    let visible = |owner: &Option<String>| user.is_admin || owner.as_deref() == Some(user.username.as_str());
    let credentials = core
        .credentials
        .list()
        .map_err(|e| ServerFnError::new(e.to_string()))?
        .into_iter()
        .filter(|c| visible(&c.owner))
        .collect();
    let sessions = core.live.sessions().into_iter().filter(|s| visible(&s.owner)).collect();
    Ok(Overview {
        username: user.username,
        is_admin: user.is_admin,
        now_ms: core.clock.now_ms(),
        sessions,
        credentials,
    })
}

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

#[cfg(feature = "ssr")]
mod server {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::users::User;
    use leptos::prelude::*;

    /// The signed-in user and the stores, or an error.
    pub fn context() -> Result<(User, gatehouse_core::Core), ServerFnError> {
        let parts = use_context::<http::request::Parts>().ok_or_else(|| ServerFnError::new("no request context"))?;
        let user = parts.extensions.get::<User>().cloned().ok_or_else(|| ServerFnError::new("not signed in"))?;
        let core = use_context::<gatehouse_core::Core>().ok_or_else(|| ServerFnError::new("no core"))?;
        Ok((user, core))
    }

    /// Sets the HTTP status of the page (or server function) response.
    /// Sets the HTTP status of the page (or server function) response, as
    /// the approval error says ([`AccessError::status_code`]).
    pub fn set_status(code: u16) {
        if let (Some(response), Ok(code)) =
            (use_context::<leptos_axum::ResponseOptions>(), http::StatusCode::from_u16(code))
        {
            response.set_status(code);
        }
    }

    /// Runs database work for the signed-in user on the blocking pool; an
    /// access error sets the response status as the JSON API would.
    pub async fn blocking<T: Send + 'static>(
        work: impl FnOnce(User, gatehouse_core::Core) -> Result<T, AccessError> + Send + 'static,
    ) -> Result<T, ServerFnError> {
        let (user, core) = context()?;
        match tokio::task::spawn_blocking(move || work(user, core)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                set_status(e.status_code());
                Err(ServerFnError::new(e.to_string()))
            }
            Err(e) => Err(ServerFnError::new(e.to_string())),
        }
    }

    pub fn lookup(id: &str) -> Result<super::Lookup, ServerFnError> {
        let (user, core) = context()?;
        Ok(match core.approvals.view_for(&user, id) {
            Ok(view) => {
                super::Lookup::Found { execution: Box::new(view), now_ms: core.clock.now_ms(), is_admin: user.is_admin }
            }
            Err(e @ AccessError::Forbidden) => {
                set_status(e.status_code());
                super::Lookup::Forbidden
            }
            Err(e @ AccessError::NotFound) => {
                set_status(e.status_code());
                super::Lookup::NotFound
            }
            Err(e) => return Err(ServerFnError::new(e.to_string())),
        })
    }
}

/// One execution for the resume page.
#[server(prefix = "/api/fn", endpoint = "execution")]
pub async fn get_execution(id: String) -> Result<Lookup, ServerFnError> {
    server::lookup(&id)
}

/// Approve (`accept`) or decline (`decline`) an execution. Works as a plain
/// form post before hydration (the browser is sent back to the page).
#[server(prefix = "/api/fn", endpoint = "decide")]
pub async fn decide_execution(id: String, action: String) -> Result<String, ServerFnError> {
    let (user, core) = server::context()?;
    use gatehouse_model::Decision;
    let decision = match Decision::parse(&action) {
        Some(d @ (Decision::Accept | Decision::Decline)) => d,
        _ => return Err(ServerFnError::new(format!("unknown action {action:?}"))),
    };
    match core.approvals.decide_for(&user, &id, decision) {
        Ok(snapshot) => Ok(snapshot.state.as_str().to_string()),
        Err(e) => {
            server::set_status(e.status_code());
            Err(ServerFnError::new(e.to_string()))
        }
    }
}

/// The signed-in user's pending executions, soonest expiry first.
#[server(prefix = "/api/fn", endpoint = "pending")]
pub async fn list_pending() -> Result<InboxView, ServerFnError> {
    let (user, core) = server::context()?;
    Ok(core.approvals.inbox_for(&user))
}

/// What the upstreams page shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UpstreamList {
    /// Whether errors are included (admins only: an upstream's error text
    /// may carry paths, hosts or secrets from its configuration).
    pub show_errors: bool,
    /// Every configured upstream, by name.
    pub upstreams: Vec<UpstreamInfo>,
}

/// Every configured upstream and its health (any signed-in user); the last
/// error only for admins.
#[server(prefix = "/api/fn", endpoint = "upstreams")]
pub async fn list_upstreams() -> Result<UpstreamList, ServerFnError> {
    let (user, core) = server::context()?;
    let show_errors = user.is_admin;
    let upstreams = core
        .live
        .upstreams()
        .into_iter()
        .map(|u| UpstreamInfo { last_error: if show_errors { u.last_error } else { None }, ..u })
        .collect();
    Ok(UpstreamList { show_errors, upstreams })
}

/// One page of the history the signed-in user may read, newest first;
/// `query` is the page's query string (the filters and the cursor).
#[server(prefix = "/api/fn", endpoint = "history")]
pub async fn get_history(query: String) -> Result<HistoryPage, ServerFnError> {
    let filter = HistoryFilter::from_query(&query).map_err(|e| {
        server::set_status(400);
        ServerFnError::new(format!("these filters do not parse: {e}"))
    })?;
    server::blocking(move |user, core| core.approvals.history_for(&user, &filter, gatehouse_model::HISTORY_PAGE_SIZE))
        .await
}

/// Every audit entry of one execution, oldest first.
#[server(prefix = "/api/fn", endpoint = "timeline")]
pub async fn get_timeline(id: String) -> Result<Vec<AuditEntry>, ServerFnError> {
    server::blocking(move |user, core| core.approvals.timeline_for(&user, &id)).await
}
