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
    use gatehouse_core::users::User;
    let parts = use_context::<http::request::Parts>()
        .ok_or_else(|| ServerFnError::new("no request context"))?;
    let user = parts
        .extensions
        .get::<User>()
        .cloned()
        .ok_or_else(|| ServerFnError::new("not signed in"))?;
    let core = use_context::<gatehouse_core::Core>().ok_or_else(|| ServerFnError::new("no core"))?;
    let visible = |owner: &Option<String>| user.is_admin || owner.as_deref() == Some(user.username.as_str());
    let window = core.credentials.liveness_window().as_millis() as i64;
    let credentials = core
        .credentials
        .list()
        .map_err(|e| ServerFnError::new(e.to_string()))?
        .into_iter()
        .filter(|c| visible(&c.credential.owner))
        .map(|c| CredentialRow {
            id: c.credential.id,
            agent: c.credential.agent,
            thread: c.credential.thread,
            owner: c.credential.owner,
            status: c.status.to_string(),
            last_seen_ms: c.credential.last_seen_ms,
            expires_ms: c.credential.last_seen_ms + window,
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
