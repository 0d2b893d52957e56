//! Server functions the pages call, and the data they return. The types
//! compile on both sides; the bodies run only on the server, against the same
//! stores the HTTP API uses.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// A connected MCP session, as the home page shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SessionRow {
    /// `Mcp-Session-Id`.
    pub session_id: String,
    /// Agent name.
    pub agent: String,
    /// Thread, if any.
    pub thread: Option<String>,
    /// Client name and version.
    pub client: String,
    /// Negotiated protocol version.
    pub protocol_version: String,
    /// When it opened (Unix ms).
    pub opened_at_ms: i64,
}

/// An agent credential, as the home page shows it (never the token).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CredentialRow {
    /// `cred_…`.
    pub id: String,
    /// Agent name.
    pub agent: String,
    /// Thread, if any.
    pub thread: Option<String>,
    /// Owner, if any.
    pub owner: Option<String>,
    /// `active`, `expired` or `revoked`.
    pub status: String,
    /// Last sign of life (Unix ms).
    pub last_seen_ms: i64,
    /// When it lapses without a further sign of life (Unix ms).
    pub expires_ms: i64,
}

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
    pub sessions: Vec<SessionRow>,
    /// Credentials, newest first.
    pub credentials: Vec<CredentialRow>,
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
        .map(|c| CredentialRow {
            id: c.id,
            agent: c.agent,
            thread: c.thread,
            owner: c.owner,
            status: c.status.to_string(),
            last_seen_ms: c.last_seen_ms,
            expires_ms: c.expires_ms,
        })
        .collect();
    let sessions = core
        .live
        .sessions()
        .into_iter()
        .filter(|s| visible(&s.owner))
        .map(|s| SessionRow {
            session_id: s.session_id,
            agent: s.agent,
            thread: s.thread,
            client: format!("{} {}", s.client_name, s.client_version).trim().to_string(),
            protocol_version: s.protocol_version,
            opened_at_ms: s.opened_at_ms,
        })
        .collect();
    Ok(Overview {
        username: user.username,
        is_admin: user.is_admin,
        now_ms: core.clock.now_ms(),
        sessions,
        credentials,
    })
}

/// A paused (or settled) execution, as the resume page shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExecutionData {
    /// `exec_…`
    pub execution_id: String,
    /// `pending`, `approved`, `running`, `completed`, `failed`, `declined`, `expired`, `cancelled`.
    pub state: String,
    /// Exposed tool name.
    pub tool: String,
    /// Upstream server, if any.
    pub upstream: Option<String>,
    /// Pretty-printed arguments (`None` once settled).
    pub arguments: Option<String>,
    /// SHA-256 of the canonical arguments.
    pub arguments_digest: String,
    /// Agent name.
    pub agent: String,
    /// Owning user.
    pub owner: Option<String>,
    /// Expiry (Unix ms), for the countdown.
    pub expires_at_ms: Option<i64>,
    /// Who decided (`user:ada`, `system`).
    pub decided_by: Option<String>,
    /// Server time when read (Unix ms).
    pub now_ms: i64,
    /// Only an admin may decide it (it changes the gate for everyone).
    pub admin_only: bool,
    /// Whether the signed-in user may decide it (an admin-only call needs an admin).
    pub can_decide: bool,
}

/// What looking an execution up found.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum Lookup {
    /// Here it is.
    Found(Box<ExecutionData>),
    /// It belongs to another user's agent (403).
    Forbidden,
    /// No such execution (404).
    NotFound,
}

#[cfg(feature = "ssr")]
mod server {
    use gatehouse_core::approvals::{AccessError, ExecutionView};
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
    pub fn set_status(code: http::StatusCode) {
        if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
            response.set_status(code);
        }
    }

    pub fn data(view: ExecutionView, now_ms: i64, user: &User) -> super::ExecutionData {
        super::ExecutionData {
            can_decide: !view.admin_only || user.is_admin,
            admin_only: view.admin_only,
            execution_id: view.execution_id,
            state: view.state.as_str().to_string(),
            tool: view.tool,
            upstream: view.upstream,
            arguments: view.arguments.map(|a| serde_json::to_string_pretty(&a).unwrap_or_default()),
            arguments_digest: view.arguments_digest,
            agent: view.agent,
            owner: view.owner,
            expires_at_ms: view.expires_at_ms,
            decided_by: view.decision.map(|d| d.by),
            now_ms,
        }
    }

    pub fn lookup(id: &str) -> Result<super::Lookup, ServerFnError> {
        let (user, core) = context()?;
        Ok(match core.approvals.view_for(&user, id) {
            Ok(view) => super::Lookup::Found(Box::new(data(view, core.clock.now_ms(), &user))),
            Err(AccessError::Forbidden) => {
                set_status(http::StatusCode::FORBIDDEN);
                super::Lookup::Forbidden
            }
            Err(AccessError::NotFound) => {
                set_status(http::StatusCode::NOT_FOUND);
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
    use gatehouse_core::approvals::{AccessError, Decision};
    let (user, core) = server::context()?;
    let decision = match action.as_str() {
        "accept" => Decision::Accept,
        "decline" => Decision::Decline,
        other => return Err(ServerFnError::new(format!("unknown action {other:?}"))),
    };
    match core.approvals.decide_for(&user, &id, decision) {
        Ok(snapshot) => Ok(snapshot.state.as_str().to_string()),
        Err(e) => {
            server::set_status(match e {
                AccessError::NotFound => http::StatusCode::NOT_FOUND,
                AccessError::Forbidden | AccessError::AdminRequired => http::StatusCode::FORBIDDEN,
                AccessError::Conflict(_) => http::StatusCode::CONFLICT,
                AccessError::Storage(_) => http::StatusCode::INTERNAL_SERVER_ERROR,
            });
            Err(ServerFnError::new(e.to_string()))
        }
    }
}

/// The signed-in user's pending executions, soonest expiry first.
#[server(prefix = "/api/fn", endpoint = "pending")]
pub async fn list_pending() -> Result<Vec<ExecutionData>, ServerFnError> {
    let (user, core) = server::context()?;
    let now = core.clock.now_ms();
    Ok(core.approvals.pending_for(&user).into_iter().map(|v| server::data(v, now, &user)).collect())
}

/// An upstream server's health, as the upstreams page shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UpstreamRow {
    /// Configured name.
    pub name: String,
    /// `up`, `down` or `disabled`.
    pub health: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// Tools it exposes now.
    pub tools: usize,
    /// Restarts since the server started.
    pub restarts: u64,
    /// The last error, if any (admins only).
    pub last_error: Option<String>,
}

/// What the upstreams page shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UpstreamList {
    /// Whether errors are included (admins only: an upstream's error text
    /// may carry paths, hosts or secrets from its configuration).
    pub show_errors: bool,
    /// Every configured upstream, by name.
    pub upstreams: Vec<UpstreamRow>,
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
        .map(|u| UpstreamRow {
            name: u.name,
            health: u.health,
            transport: u.transport,
            tools: u.tools,
            restarts: u.restarts,
            last_error: if show_errors { u.last_error } else { None },
        })
        .collect();
    Ok(UpstreamList { show_errors, upstreams })
}
