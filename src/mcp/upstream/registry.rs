//! The registry of agents' MCP sessions: every one the upstreams may need
//! to reach (for list changes and resource updates), and each one's own
//! sessions at HTTP upstreams, opened on first use and closed when the
//! agent's MCP session ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use rmcp::model::{ClientCapabilities, SetLevelRequestParams, TASKS_EXTENSION_ID};

use super::errors::{error_chain, sanitize};
use super::link::{self, Link, supports_logging};
use super::mcp_session::Downstream;
use super::relay::{Relay, RelayState};
use super::{Inner, Upstreams, agent_streams};

/// Where one upstream session of an agent's MCP session lives (empty until
/// opened); one lock per upstream, so a slow one does not hold up the others.
pub(crate) type LinkCell = Arc<tokio::sync::Mutex<Option<Link>>>;

/// Each agent MCP session's own sessions at HTTP upstreams: by the
/// [`Downstream`]'s key, then by upstream name. Kept here, not in the
/// `Downstream` (which the relay below needs), and dropped when the
/// `Downstream` is ([`ReleaseLinks`]), which closes them.
#[derive(Default)]
pub(crate) struct AgentLinks(Mutex<HashMap<u64, HashMap<String, LinkCell>>>);

impl AgentLinks {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, HashMap<String, LinkCell>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Held by a [`Downstream`] once it has upstream sessions of its own: when
/// the agent's MCP session ends, they are dropped (and so closed).
struct ReleaseLinks {
    upstreams: Weak<Inner>,
    key: u64,
}

impl Drop for ReleaseLinks {
    fn drop(&mut self) {
        let Some(inner) = self.upstreams.upgrade() else { return };
        // Dropped outside the lock: closing a connection is not done under it.
        let released = inner.agent_links.lock().remove(&self.key);
        drop(released);
    }
}

/// Of what an agent's client declared, what an upstream may count on
/// through Gatehouse: sampling, elicitation and roots, which it relays. Not
/// other extensions or experimental capabilities, which it cannot carry
/// back: an upstream told of them would answer in a form that never reaches
/// the agent. (Tasks only per request: [`relayable_per_request`].)
pub(crate) fn relayable(declared: &ClientCapabilities) -> ClientCapabilities {
    let mut caps = ClientCapabilities::default();
    caps.sampling = declared.sampling.clone();
    caps.elicitation = declared.elicitation.clone();
    caps.roots = declared.roots.clone();
    caps
}

/// What one request tells a 2026-07-28 upstream the agent can do:
/// [`relayable`], and the tasks extension when the agent declared it
/// (Gatehouse carries an upstream's task back under its own id,
/// [`super::tasks`]). A session's `initialize` never declares tasks: a
/// 2025-11-25 upstream's tasks are another protocol's.
pub(crate) fn relayable_per_request(declared: &ClientCapabilities) -> ClientCapabilities {
    let mut caps = relayable(declared);
    if let Some(tasks) = declared.extensions.as_ref().and_then(|e| e.get(TASKS_EXTENSION_ID)) {
        caps.extensions.get_or_insert_default().insert(TASKS_EXTENSION_ID.to_string(), tasks.clone());
    }
    caps
}

/// What a per-session connection declares: what the agent's client declared.
fn agent_capabilities(downstream: &Downstream) -> ClientCapabilities {
    relayable(&downstream.capabilities())
}

impl Upstreams {
    /// Where the agents' open SSE streams are recorded: give it to
    /// [`agent_streams::WatchedMcpSessions`] in front of rmcp's session manager.
    pub fn agent_streams(&self) -> agent_streams::AgentStreams {
        self.inner.streams.clone()
    }

    /// Registers an agent session so it hears list changes and resource updates.
    pub fn register(&self, downstream: &Arc<Downstream>) {
        let mut all = self.inner.downstreams.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|d| d.strong_count() > 0);
        all.push(Arc::downgrade(downstream));
    }

    /// The cell for `downstream`'s own session at upstream `name`.
    pub(crate) fn link_cell(&self, downstream: &Downstream, name: &str) -> LinkCell {
        let key = downstream.key;
        let upstreams = Arc::downgrade(&self.inner);
        downstream.end_with(|| Box::new(ReleaseLinks { upstreams, key }));
        let mut all = self.inner.agent_links.lock();
        all.entry(key).or_default().entry(name.to_string()).or_default().clone()
    }

    /// Every cell of `downstream`'s, for passing something to all of its own upstream sessions.
    pub(crate) fn link_cells(&self, downstream: &Downstream) -> Vec<LinkCell> {
        let all = self.inner.agent_links.lock();
        all.get(&downstream.key).map(|cells| cells.values().cloned().collect()).unwrap_or_default()
    }

    /// Drops every agent's own session at upstream `name` (it was removed
    /// or restarted with another config: the next call opens a new one).
    pub(crate) fn forget_links(&self, name: &str) {
        // Closed after the lock is let go, as `ReleaseLinks` does.
        let forgotten: Vec<LinkCell> =
            self.inner.agent_links.lock().values_mut().filter_map(|cells| cells.remove(name)).collect();
        drop(forgotten);
    }

    /// Every agent session still open.
    pub(crate) fn downstreams(&self) -> Vec<Arc<Downstream>> {
        let mut all = self.inner.downstreams.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|d| d.strong_count() > 0);
        all.iter().filter_map(Weak::upgrade).collect()
    }

    /// Tells every agent session and every listen stream that the tool,
    /// prompt and resource lists changed.
    pub fn announce_lists_changed(&self) {
        self.tell_listeners_lists_changed();
        for downstream in self.downstreams() {
            let Some(peer) = downstream.peer().cloned() else { continue };
            if !downstream.stateful() {
                continue;
            }
            self.inner.tasks.spawn(async move {
                let _ = peer.notify_tool_list_changed().await;
                let _ = peer.notify_prompt_list_changed().await;
                let _ = peer.notify_resource_list_changed().await;
            });
        }
    }

    /// Whether `downstream` reaches upstream `name` through its shared
    /// connection (whose relay state is `shared`) rather than a session of
    /// its own: at a stdio upstream, for a stateless request, or when the
    /// upstream refused `initialize` (it speaks only 2026-07-28).
    pub(crate) fn uses_shared(&self, name: &str, downstream: &Downstream, shared: &RelayState) -> bool {
        let http = self.slots().get(name).is_some_and(|s| s.config.url.is_some());
        !http || !downstream.stateful() || shared.initialize_refused()
    }

    /// The connection `downstream` uses for upstream `name`: its own session
    /// at an HTTP upstream (opened on first use), else the shared one.
    ///
    /// A 2025-11-25 agent session gets a 2025-11-25 session of its own even
    /// when the shared connection speaks 2026-07-28 (an upstream may speak
    /// both, and list only 2026-07-28 in discover): on that revision an
    /// upstream can still ask its client mid-call (sampling, elicitation,
    /// roots) and keep resource subscriptions, which 2026-07-28 removed. An
    /// upstream that refuses `initialize` is served on the shared connection,
    /// and not asked again while that connection lives.
    pub(super) async fn link(&self, name: &str, downstream: &Arc<Downstream>) -> Result<Link, String> {
        let (http, shared) = {
            let slots = self.slots();
            let slot = slots.get(name).ok_or_else(|| format!("no upstream {name}"))?;
            (slot.config.url.is_some(), slot.link.clone())
        };
        let shared = shared.ok_or_else(|| "the upstream is down".to_string())?;
        // 2026-07-28 agents (stateless) carry what they need in each request's `_meta`.
        if !http || !downstream.stateful() || shared.relay.initialize_refused() {
            return Ok(shared);
        }
        let modern = link::is_modern(&shared.peer);
        let cell = self.link_cell(downstream, name);
        let mut slot = cell.lock().await;
        if let Some(link) = slot.as_ref()
            && !link.peer.is_transport_closed()
        {
            return Ok(link.clone());
        }
        if shared.relay.initialize_refused() {
            // Found out while this caller waited for the cell.
            return Ok(shared);
        }
        // Only when opening a session: the config is not copied on every call.
        let config = self.slots().get(name).map(|s| s.config.clone()).ok_or_else(|| format!("no upstream {name}"))?;
        let relay = RelayState::new(name, Some(downstream), self, config.call_timeout);
        // A 2025-11-25 session: no discover round trip.
        let handler = Relay::new(relay.clone(), agent_capabilities(downstream));
        let connection = match link::connect(&config, handler, None, link::Lifecycle::Initialize).await {
            Ok(connection) => connection,
            Err(e) if modern => {
                // It speaks 2026-07-28 on the shared connection, which serves.
                if matches!(e, link::LinkError::Initialize { .. }) {
                    shared.relay.refuse_initialize();
                }
                let why = sanitize(&error_chain(&e));
                tracing::debug!(upstream = %name, error = %why, "no 2025-11-25 session; the shared 2026-07-28 connection serves");
                return Ok(shared);
            }
            Err(e) => return Err(sanitize(&format!("could not open a session: {}", error_chain(&e)))),
        };
        let link = Link {
            peer: connection.service.peer().clone(),
            relay,
            agent_service: Some(Arc::new(connection.service)),
            call_timeout: config.call_timeout,
            watch: None,
        };
        // A replaced session starts as the agent left the old one.
        if let Some(level) = downstream.level()
            && supports_logging(&link.peer)
        {
            let _ =
                tokio::time::timeout(link.call_timeout, link.peer.set_level(SetLevelRequestParams::new(level))).await;
        }
        self.resubscribe(name, &link.peer, downstream.subscriptions(), link.call_timeout).await;
        tracing::debug!(upstream = %name, session = downstream.key, "upstream session opened for agent session");
        *slot = Some(link.clone());
        Ok(link)
    }
}
