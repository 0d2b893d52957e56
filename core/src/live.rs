//! Live state the pages watch: the connected MCP sessions, and a fan-out of
//! change events that SSE streams forward to browsers.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::sync::broadcast;

pub use gatehouse_model::{LiveEvent, McpSessionInfo, UpstreamInfo};

/// Shared live state; cheap to clone.
#[derive(Clone)]
pub struct LiveHub {
    events: broadcast::Sender<LiveEvent>,
    sessions: Arc<RwLock<HashMap<String, McpSessionInfo>>>,
    upstreams: Arc<RwLock<Vec<UpstreamInfo>>>,
}

impl Default for LiveHub {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveHub {
    /// An empty hub.
    pub fn new() -> Self {
        // Subscribers only need "something changed"; a lagging one re-reads everything.
        let (events, _) = broadcast::channel(256);
        Self { events, sessions: Arc::default(), upstreams: Arc::default() }
    }

    /// Tells every subscriber.
    pub fn publish(&self, event: LiveEvent) {
        let _ = self.events.send(event);
    }

    /// A new subscription to change events.
    pub fn subscribe(&self) -> broadcast::Receiver<LiveEvent> {
        self.events.subscribe()
    }

    /// Records an opened session.
    pub fn session_opened(&self, info: McpSessionInfo) {
        self.sessions.write().unwrap_or_else(|p| p.into_inner()).insert(info.session_id.clone(), info);
        self.publish(LiveEvent::SessionsChanged);
    }

    /// Forgets a closed session.
    pub fn session_closed(&self, session_id: &str) {
        let removed = self.sessions.write().unwrap_or_else(|p| p.into_inner()).remove(session_id);
        if removed.is_some() {
            self.publish(LiveEvent::SessionsChanged);
        }
    }

    /// Replaces the upstream health snapshot and tells subscribers.
    pub fn set_upstreams(&self, upstreams: Vec<UpstreamInfo>) {
        *self.upstreams.write().unwrap_or_else(|p| p.into_inner()) = upstreams;
        self.publish(LiveEvent::UpstreamsChanged);
    }

    /// The latest upstream health snapshot, by name.
    pub fn upstreams(&self) -> Vec<UpstreamInfo> {
        self.upstreams.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every connected session, oldest first.
    pub fn sessions(&self) -> Vec<McpSessionInfo> {
        let mut all: Vec<_> = self.sessions.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        all.sort_by(|a, b| a.opened_at_ms.cmp(&b.opened_at_ms).then(a.session_id.cmp(&b.session_id)));
        all
    }
}
