//! What the live pages watch: change events, connected MCP sessions and
//! upstream health.

use serde::{Deserialize, Serialize};

/// Something changed that a page may want to re-read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LiveEvent {
    /// An MCP session opened or closed.
    SessionsChanged,
    /// A credential was issued, revoked or showed a (recorded) sign of life.
    CredentialsChanged,
    /// An execution was paused, decided or settled.
    ApprovalsChanged,
    /// An upstream server came up, went down or restarted.
    UpstreamsChanged,
    /// A user was invited, changed, disabled or removed, or browser sessions
    /// ended (live streams of an ended session close).
    UsersChanged,
    /// A grant was made, revoked, ended with its session or expired, or its
    /// use counts were written.
    GrantsChanged,
}

/// The SSE event a page's live stream sends just before it closes because
/// the browser session ended (signed out, disabled, removed, password
/// changed elsewhere); the page reloads and the server sends it to sign-in.
pub const SIGNED_OUT_EVENT: &str = "signed_out";

impl LiveEvent {
    /// The SSE event name.
    pub fn name(self) -> &'static str {
        match self {
            LiveEvent::SessionsChanged => "sessions_changed",
            LiveEvent::CredentialsChanged => "credentials_changed",
            LiveEvent::ApprovalsChanged => "approvals_changed",
            LiveEvent::UpstreamsChanged => "upstreams_changed",
            LiveEvent::UsersChanged => "users_changed",
            LiveEvent::GrantsChanged => "grants_changed",
        }
    }
}

/// A connected MCP session (Streamable HTTP, protocol before 2026-07-28).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct McpSessionInfo {
    /// The `Mcp-Session-Id`.
    pub session_id: String,
    /// The credential it authenticated with.
    pub credential_id: String,
    /// The credential's agent.
    pub agent: String,
    /// The credential's thread.
    pub thread: Option<String>,
    /// The credential's owner.
    pub owner: Option<String>,
    /// `clientInfo.name` from initialize.
    pub client_name: String,
    /// `clientInfo.version` from initialize.
    pub client_version: String,
    /// The negotiated protocol version.
    pub protocol_version: String,
    /// When it opened (Unix ms).
    pub opened_at_ms: i64,
}

impl McpSessionInfo {
    /// Client name and version, as one label.
    pub fn client(&self) -> String {
        format!("{} {}", self.client_name, self.client_version).trim().to_string()
    }
}

/// An upstream MCP server's health, as pages show it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct UpstreamInfo {
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
    /// The last error, if any (shown to admins only).
    pub last_error: Option<String>,
}
