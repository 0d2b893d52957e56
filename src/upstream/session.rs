//! The downstream side of proxying: one [`Downstream`] per agent MCP session,
//! holding what an upstream needs to reach that agent (its peer, log level,
//! resource subscriptions) and that session's own upstream sessions.

// `logging/setLevel` is deprecated by SEP-2577 but still 2025-11-25.
#![allow(deprecated)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::RoleServer;
use rmcp::model::{ClientCapabilities, LoggingLevel, ProgressToken, RequestId};
use rmcp::service::{Peer, RequestContext};
use tokio_util::sync::CancellationToken;

use super::link::Link;

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// One downstream MCP session (or one stateless request), as upstreams see it.
pub struct Downstream {
    /// Process-unique key.
    pub(crate) key: u64,
    /// The agent's MCP session id; `None` for stateless requests, which then
    /// share each upstream's common client.
    session_id: OnceLock<String>,
    peer: OnceLock<Peer<RoleServer>>,
    level: Mutex<Option<LoggingLevel>>,
    subscriptions: Mutex<HashSet<String>>,
    /// This session's own sessions at HTTP upstreams, by upstream name; one
    /// lock per upstream, so a slow one does not hold up the others.
    links: Mutex<HashMap<String, LinkCell>>,
}

/// Where one upstream session of an agent session lives (empty until opened).
pub(crate) type LinkCell = Arc<tokio::sync::Mutex<Option<Link>>>;

impl Downstream {
    /// A downstream with nothing bound yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Downstream {
            key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            session_id: OnceLock::new(),
            peer: OnceLock::new(),
            level: Mutex::new(None),
            subscriptions: Mutex::new(HashSet::new()),
            links: Mutex::new(HashMap::new()),
        })
    }

    /// Remembers the agent's peer and session id (the first ones seen win:
    /// both are fixed for a session's life).
    pub fn bind(&self, peer: &Peer<RoleServer>, session_id: Option<&str>) {
        if self.peer.get().is_none() {
            let _ = self.peer.set(peer.clone());
        }
        if let Some(sid) = session_id
            && self.session_id.get().is_none()
        {
            let _ = self.session_id.set(sid.to_string());
        }
    }

    /// The agent's peer, once a request has been seen.
    pub(crate) fn peer(&self) -> Option<&Peer<RoleServer>> {
        self.peer.get()
    }

    /// Whether this is a stateful session (it may own upstream sessions).
    pub(crate) fn stateful(&self) -> bool {
        self.session_id.get().is_some()
    }

    /// What the agent's client declared it can do (sampling, elicitation, roots).
    pub(crate) fn capabilities(&self) -> ClientCapabilities {
        self.peer().and_then(|p| p.peer_info()).map(|i| i.capabilities.clone()).unwrap_or_default()
    }

    /// Sets the agent's `logging/setLevel`.
    pub fn set_level(&self, level: LoggingLevel) {
        *self.level.lock().unwrap_or_else(|p| p.into_inner()) = Some(level);
    }

    /// The level the agent asked for, if it asked.
    pub(crate) fn level(&self) -> Option<LoggingLevel> {
        *self.level.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a message at `level` should reach the agent (default: info and up).
    pub(crate) fn wants_log(&self, level: LoggingLevel) -> bool {
        severity(level) >= severity(self.level().unwrap_or(LoggingLevel::Info))
    }

    /// Records a resource subscription; `false` if it was already there.
    pub(crate) fn subscribe(&self, uri: &str) -> bool {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).insert(uri.to_string())
    }

    /// Drops a resource subscription; `false` if there was none.
    pub(crate) fn unsubscribe(&self, uri: &str) -> bool {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).remove(uri)
    }

    /// The cell for this session's session at upstream `name`.
    pub(crate) fn link_cell(&self, name: &str) -> LinkCell {
        self.links.lock().unwrap_or_else(|p| p.into_inner()).entry(name.to_string()).or_default().clone()
    }

    /// Every cell, for passing something to all of this session's upstream sessions.
    pub(crate) fn link_cells(&self) -> Vec<LinkCell> {
        self.links.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// Every URI the agent subscribed to.
    pub(crate) fn subscriptions(&self) -> Vec<String> {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    /// Whether the agent subscribed to `uri`.
    pub(crate) fn subscribed(&self, uri: &str) -> bool {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).contains(uri)
    }
}

fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// Where a forwarded request came from: the agent's request, so that what the
/// upstream sends back while working on it (progress, sampling, elicitation)
/// reaches the same agent on the same stream, and its cancellation travels on.
#[derive(Clone)]
pub struct Origin {
    /// The agent's session.
    pub downstream: Arc<Downstream>,
    /// The agent's JSON-RPC request id.
    pub request_id: RequestId,
    /// The agent's progress token, if it asked for progress.
    pub progress: Option<ProgressToken>,
    /// Cancelled when the agent cancels its request.
    pub ct: CancellationToken,
}

impl Origin {
    /// The origin of the request `ctx` is handling, for `downstream`.
    pub fn of(downstream: &Arc<Downstream>, ctx: &RequestContext<RoleServer>) -> Self {
        Origin {
            downstream: downstream.clone(),
            request_id: ctx.id.clone(),
            progress: ctx.meta.get_progress_token(),
            ct: ctx.ct.clone(),
        }
    }
}
