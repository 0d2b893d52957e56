//! The home page: connected sessions and credentials.

#[cfg(feature = "ssr")]
use super::context as ctx;
use gatehouse_model::{CredentialView, McpSessionInfo};
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
    let (user, core) = ctx::context()?;
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
