//! The session registry: every agent session the upstreams may need to
//! reach (for list changes and resource updates), and each agent session's
//! own sessions at HTTP upstreams, opened on first use.

use std::sync::{Arc, Weak};

use rmcp::model::{ClientCapabilities, SetLevelRequestParams, TASKS_EXTENSION_ID};

use super::Upstreams;
use super::errors::{error_chain, sanitize};
use super::forwarding::supports_logging;
use super::link::{self, Link};
use super::relay::{Relay, RelayState};
use super::session::{self, Downstream};

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
    /// [`session::WatchedSessions`] in front of rmcp's session manager.
    pub fn agent_streams(&self) -> session::AgentStreams {
        self.inner.streams.clone()
    }

    /// Registers an agent session so it hears list changes and resource updates.
    pub fn register(&self, downstream: &Arc<Downstream>) {
        let mut all = self.inner.downstreams.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|d| d.strong_count() > 0);
        all.push(Arc::downgrade(downstream));
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

    /// The connection `downstream` uses for upstream `name`: its own session
    /// at an HTTP upstream (opened on first use), else the shared one.
    pub(super) async fn link(&self, name: &str, downstream: &Arc<Downstream>) -> Result<Link, String> {
        let (http, shared) = {
            let slots = self.slots();
            let slot = slots.get(name).ok_or_else(|| format!("no upstream {name}"))?;
            (slot.config.url.is_some(), slot.link.clone())
        };
        let shared = shared.ok_or_else(|| "the upstream is down".to_string())?;
        // 2026-07-28 has no sessions: every request carries what it needs
        // (the agent's capabilities in its `_meta`), so the shared one serves.
        if !http || !downstream.stateful() || link::is_modern(&shared.peer) {
            return Ok(shared);
        }
        let cell = downstream.link_cell(name);
        let mut slot = cell.lock().await;
        if let Some(link) = slot.as_ref()
            && !link.peer.is_transport_closed()
        {
            return Ok(link.clone());
        }
        // Only when opening a session: the config is not copied on every call.
        let config = self.slots().get(name).map(|s| s.config.clone()).ok_or_else(|| format!("no upstream {name}"))?;
        let relay = RelayState::new(name, Some(downstream), self);
        // The shared connection found it speaks 2025-11-25: no discover round trip.
        let handler = Relay::new(relay.clone(), agent_capabilities(downstream));
        let connecting = link::connect(&config, handler, None, link::Lifecycle::Initialize);
        let connection =
            connecting.await.map_err(|e| sanitize(&format!("could not open a session: {}", error_chain(&e))))?;
        let link = Link {
            peer: connection.service.peer().clone(),
            relay,
            session: Some(Arc::new(connection.service)),
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
