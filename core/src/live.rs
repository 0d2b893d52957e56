//! Live state the pages watch: the connected MCP sessions, and a fan-out of
//! change events that SSE streams forward to browsers. On a cluster the hub
//! is a [`Domain`] of the replica bus: it relays its events, sessions and
//! upstream health ([`LiveMessage`]) and shows the other replicas'.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::cluster::{Cluster, Domain, Incoming, Topic};

pub use gatehouse_model::{LiveEvent, McpSessionInfo, UpstreamInfo};

/// Shared live state; cheap to clone.
#[derive(Clone)]
pub struct LiveHub {
    events: broadcast::Sender<LiveEvent>,
    sessions: Arc<RwLock<HashMap<String, McpSessionInfo>>>,
    upstreams: Arc<RwLock<Vec<UpstreamInfo>>>,
    /// Other replicas' sessions and upstream health, by replica (PostgreSQL).
    elsewhere: Arc<RwLock<HashMap<String, Elsewhere>>>,
    /// The other replicas, once this one has joined them.
    cluster: Arc<OnceLock<Cluster>>,
    /// How many `ApprovalsChanged` events were told here (this replica's and
    /// relayed ones): what is computed from the approvals stays valid while
    /// it stands.
    approvals_version: Arc<AtomicU64>,
}

/// What another replica last told about itself.
#[derive(Default)]
struct Elsewhere {
    sessions: HashMap<String, McpSessionInfo>,
    upstreams: Vec<UpstreamInfo>,
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
        Self {
            events,
            sessions: Arc::default(),
            upstreams: Arc::default(),
            elsewhere: Arc::default(),
            cluster: Arc::default(),
            approvals_version: Arc::default(),
        }
    }

    /// Joins a replica's cluster (from [`Cluster::join`]'s `register`): the
    /// other replicas' messages come here, and this hub's go to them.
    pub fn join(&self, cluster: &Cluster) {
        cluster.register(self.clone());
        self.relay_to(cluster.clone());
    }

    /// From now on, events and sessions are told to the other replicas too
    /// (the command line's announcer: it hears nothing back).
    pub fn relay_to(&self, cluster: Cluster) {
        let _ = self.cluster.set(cluster);
    }

    /// Tells every subscriber, on this replica and the others.
    pub fn publish(&self, event: LiveEvent) {
        self.publish_local(event);
        self.relay(LiveMessage::Live { event });
    }

    /// Tells this replica's subscribers only (an event another replica relayed).
    pub fn publish_local(&self, event: LiveEvent) {
        if event == LiveEvent::ApprovalsChanged {
            // Before the subscribers hear of it, so whatever they compute
            // next is not taken for the state before.
            self.approvals_version.fetch_add(1, Ordering::AcqRel);
        }
        let _ = self.events.send(event);
    }

    /// The approvals' change counter: read it before reading the approvals,
    /// and what was read is current while it stands.
    pub fn approvals_version(&self) -> u64 {
        self.approvals_version.load(Ordering::Acquire)
    }

    fn relay(&self, message: LiveMessage) {
        if let Some(cluster) = self.cluster.get() {
            cluster.send(None, message);
        }
    }

    fn elsewhere(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Elsewhere>> {
        self.elsewhere.write().unwrap_or_else(|p| p.into_inner())
    }

    /// A session opened on another replica.
    pub fn remote_session_opened(&self, replica: &str, info: McpSessionInfo) {
        self.elsewhere().entry(replica.to_string()).or_default().sessions.insert(info.session_id.clone(), info);
        self.publish_local(LiveEvent::SessionsChanged);
    }

    /// A session closed on another replica.
    pub fn remote_session_closed(&self, replica: &str, session_id: &str) {
        if let Some(there) = self.elsewhere().get_mut(replica) {
            there.sessions.remove(session_id);
        }
        self.publish_local(LiveEvent::SessionsChanged);
    }

    /// Another replica's upstream health.
    pub fn remote_upstreams(&self, replica: &str, upstreams: Vec<UpstreamInfo>) {
        self.elsewhere().entry(replica.to_string()).or_default().upstreams = upstreams;
        self.publish_local(LiveEvent::UpstreamsChanged);
    }

    /// Forgets what replicas not in `alive` said (they stopped or died).
    pub fn forget_replicas_except(&self, alive: &[String]) {
        let mut elsewhere = self.elsewhere();
        let before = elsewhere.len();
        elsewhere.retain(|replica, _| alive.contains(replica));
        if elsewhere.len() != before {
            drop(elsewhere);
            self.publish_local(LiveEvent::SessionsChanged);
            self.publish_local(LiveEvent::UpstreamsChanged);
        }
    }

    /// This replica's own sessions.
    pub fn sessions_here(&self) -> Vec<McpSessionInfo> {
        self.sessions.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// This replica's own upstream health.
    pub fn upstreams_here(&self) -> Vec<UpstreamInfo> {
        self.upstreams.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Other replicas' upstream health, by replica.
    pub fn upstreams_elsewhere(&self) -> Vec<(String, Vec<UpstreamInfo>)> {
        let mut all: Vec<_> = self
            .elsewhere
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(replica, there)| (replica.clone(), there.upstreams.clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// A new subscription to change events.
    pub fn subscribe(&self) -> broadcast::Receiver<LiveEvent> {
        self.events.subscribe()
    }

    /// Records an opened session.
    pub fn session_opened(&self, info: McpSessionInfo) {
        self.sessions.write().unwrap_or_else(|p| p.into_inner()).insert(info.session_id.clone(), info.clone());
        self.publish_local(LiveEvent::SessionsChanged);
        self.relay(LiveMessage::SessionOpened { info });
    }

    /// Forgets a closed session.
    pub fn session_closed(&self, session_id: &str) {
        let removed = self.sessions.write().unwrap_or_else(|p| p.into_inner()).remove(session_id);
        if removed.is_some() {
            self.publish_local(LiveEvent::SessionsChanged);
            self.relay(LiveMessage::SessionClosed { session_id: session_id.to_string() });
        }
    }

    /// Replaces the upstream health snapshot and tells subscribers.
    pub fn set_upstreams(&self, upstreams: Vec<UpstreamInfo>) {
        *self.upstreams.write().unwrap_or_else(|p| p.into_inner()) = upstreams.clone();
        self.publish_local(LiveEvent::UpstreamsChanged);
        self.relay(LiveMessage::Upstreams { upstreams });
    }

    /// The latest upstream health snapshot, by name.
    pub fn upstreams(&self) -> Vec<UpstreamInfo> {
        self.upstreams.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every connected session, on this replica and the others, oldest first.
    pub fn sessions(&self) -> Vec<McpSessionInfo> {
        let mut all = self.sessions_here();
        all.extend(
            self.elsewhere
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .flat_map(|e| e.sessions.values().cloned()),
        );
        all.sort_by(|a, b| a.opened_at_ms.cmp(&b.opened_at_ms).then(a.session_id.cmp(&b.session_id)));
        all
    }
}

/// What one replica's hub tells the others.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LiveMessage {
    /// Something changed that pages re-read.
    Live {
        /// Which change.
        event: LiveEvent,
    },
    /// An MCP session opened on the sender.
    SessionOpened {
        /// The session.
        info: McpSessionInfo,
    },
    /// An MCP session closed on the sender.
    SessionClosed {
        /// Its id.
        session_id: String,
    },
    /// The sender's upstream health, whole.
    Upstreams {
        /// Each upstream.
        upstreams: Vec<UpstreamInfo>,
    },
}

impl Topic for LiveMessage {
    const TOPIC: &'static str = "live";
}

impl Domain for LiveHub {
    type Message = LiveMessage;

    fn receive(&self, incoming: Incoming<LiveMessage>) {
        let from = &incoming.from;
        match incoming.message {
            LiveMessage::Live { event } => self.publish_local(event),
            LiveMessage::SessionOpened { info } => self.remote_session_opened(from, info),
            LiveMessage::SessionClosed { session_id } => self.remote_session_closed(from, &session_id),
            LiveMessage::Upstreams { upstreams } => self.remote_upstreams(from, upstreams),
        }
    }

    /// The newcomer gets this replica's sessions and upstream health.
    fn greeted(&self, replica: &str) {
        let Some(cluster) = self.cluster.get() else { return };
        for info in self.sessions_here() {
            cluster.send(Some(replica), LiveMessage::SessionOpened { info });
        }
        cluster.send(Some(replica), LiveMessage::Upstreams { upstreams: self.upstreams_here() });
    }

    /// Whatever this replica missed meanwhile, its pages re-read.
    fn reconnected(&self) {
        for event in ALL_EVENTS {
            self.publish_local(event);
        }
    }

    fn alive(&self, replicas: &[String]) {
        self.forget_replicas_except(replicas);
    }
}

/// Every live event (a reconnected listener re-announces them all).
const ALL_EVENTS: [LiveEvent; 6] = [
    LiveEvent::SessionsChanged,
    LiveEvent::CredentialsChanged,
    LiveEvent::ApprovalsChanged,
    LiveEvent::UpstreamsChanged,
    LiveEvent::UsersChanged,
    LiveEvent::GrantsChanged,
];
