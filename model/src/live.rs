//! What the live pages watch: change events, connected MCP sessions and
//! upstream health.

use crate::CredentialId;
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
    /// Every kind, in declaration order.
    pub const ALL: [LiveEvent; 6] = [
        LiveEvent::SessionsChanged,
        LiveEvent::CredentialsChanged,
        LiveEvent::ApprovalsChanged,
        LiveEvent::UpstreamsChanged,
        LiveEvent::UsersChanged,
        LiveEvent::GrantsChanged,
    ];

    /// The name a page's stream sends for this kind (its serde name too).
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

/// One message of a page's change stream (`/api/live/events`): the server
/// writes it with [`StreamEvent::data`] as the data of an unnamed SSE
/// message, the page reads it back with [`StreamEvent::parse`]. One type at
/// both ends, so a kind can't be spelt two ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEvent {
    /// The stream opened: a page reads what it shows (it may have changed
    /// between the render and the connection).
    Hello,
    /// Something of this kind changed.
    Changed(LiveEvent),
    /// The stream fell behind and missed changes: a page reads everything.
    Resync,
}

impl StreamEvent {
    /// The message's data, as it goes on the wire.
    pub fn data(self) -> &'static str {
        match self {
            StreamEvent::Hello => "hello",
            StreamEvent::Changed(kind) => kind.name(),
            StreamEvent::Resync => "resync",
        }
    }

    /// The event a message's data names (`None` for anything else).
    pub fn parse(data: &str) -> Option<Self> {
        match data {
            "hello" => Some(StreamEvent::Hello),
            "resync" => Some(StreamEvent::Resync),
            name => LiveEvent::ALL.into_iter().find(|k| k.name() == name).map(StreamEvent::Changed),
        }
    }

    /// Whether a page showing things of `kinds` should read them again: on
    /// one of those changes, and always on [`Hello`](Self::Hello) and
    /// [`Resync`](Self::Resync).
    pub fn touches(self, kinds: &[LiveEvent]) -> bool {
        match self {
            StreamEvent::Hello | StreamEvent::Resync => true,
            StreamEvent::Changed(kind) => kinds.contains(&kind),
        }
    }
}

/// By wire name, so a burst's messages go out in the same (alphabetical)
/// order as ever.
impl Ord for StreamEvent {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.data().cmp(other.data())
    }
}

impl PartialOrd for StreamEvent {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A connected MCP session (Streamable HTTP, protocol before 2026-07-28).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct McpSessionInfo {
    /// The `Mcp-Session-Id`.
    pub session_id: String,
    /// The credential it authenticated with.
    pub credential_id: CredentialId,
    /// The credential's agent.
    pub agent: String,
    /// The credential's thread.
    pub thread: Option<String>,
    /// The credential's owner.
    pub owner: Option<String>,
    /// The owner's id: what access compares.
    #[serde(default)]
    pub owner_id: Option<crate::UserId>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_has_one_name_on_every_wire() {
        for kind in LiveEvent::ALL {
            assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{}\"", kind.name()));
            assert_eq!(StreamEvent::parse(kind.name()), Some(StreamEvent::Changed(kind)));
        }
        for event in [StreamEvent::Hello, StreamEvent::Resync] {
            assert_eq!(StreamEvent::parse(event.data()), Some(event));
        }
        assert_eq!(StreamEvent::parse("inbox"), None);
    }

    #[test]
    fn hello_and_resync_touch_every_page() {
        let grants = [LiveEvent::GrantsChanged];
        assert!(StreamEvent::Hello.touches(&grants) && StreamEvent::Resync.touches(&[]));
        assert!(StreamEvent::Changed(LiveEvent::GrantsChanged).touches(&grants));
        assert!(!StreamEvent::Changed(LiveEvent::UsersChanged).touches(&grants));
    }
}
