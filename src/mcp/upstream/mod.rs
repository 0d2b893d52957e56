//! Upstream MCP servers behind the gate, proxied transparently.
//!
//! Each `[[upstream]]` has one supervised shared connection (a stdio child
//! process, [`stdio`], or a Streamable HTTP client, `http`) that lists its
//! tools, prompts and resources under the upstream's prefix ([`listing`])
//! and is restarted with backoff when it dies ([`supervision`]). What they
//! offer is merged into the lists agents see ([`merged`]); an agent's
//! requests are sent to the upstream that offers what they name
//! (`forwarding`). An agent's MCP session ([`mcp_session::Downstream`]) gets
//! sessions of its own at HTTP upstreams (`registry`), so per-session state
//! never crosses agents; stdio upstreams are one process shared by all. What
//! an upstream sends to its client is relayed to the agent whose request
//! caused it ([`relay`]), over one connection ([`link`]), on the agent's
//! stream while it is open ([`agent_streams`]); a 2026-07-28 upstream's list
//! changes and resource updates are heard on a `subscriptions/listen`
//! Gatehouse holds open to it (`subscription`). An upstream's tasks reach the
//! agent under Gatehouse's own ids ([`tasks`]).
//!
//! Imports between these files run one way, lowest first: `errors`,
//! `agent_streams`, `mcp_session`, `stdio`, `http`, `relay`, `link`, then
//! what sends on a link (`listing`, `merged`, `subscription`, `registry`,
//! `forwarding`, ...); `Upstreams` (here) is the handle they all share.

// Logging, subscriptions and server→client requests are deprecated by
// SEP-2577 but are the 2025-11-25 protocol upstreams and agents speak.
#![allow(deprecated)]

pub mod agent_streams;
pub mod errors;
mod forwarding;
mod http;
pub mod input_required;
pub mod link;
pub mod listeners;
pub mod listing;
pub mod mcp_session;
pub mod merged;
pub mod probe;
pub mod reconfigure;
mod registry;
pub mod relay;
pub mod stdio;
mod subscription;
pub mod supervision;
pub mod task_ids;
pub mod tasks;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use gatehouse_core::live::{LiveHub, UpstreamInfo};
use tokio_util::task::TaskTracker;

use crate::config::UpstreamConfig;
use errors::{sanitize, summary};
use link::Link;
use listing::UpstreamLists;
use mcp_session::Downstream;
use merged::{RefreshGate, expose};
use stdio::ChildWatch;
use supervision::Health;

/// One upstream: its config, health and what it offers.
struct Slot {
    config: UpstreamConfig,
    health: Health,
    /// Why the connection last failed or ended (sanitized).
    last_error: Option<String>,
    /// What it offers, its names checked and its lists capped.
    offered: UpstreamLists,
    /// What of that is exposed: `offered` less the names another upstream
    /// or a built-in tool also has ([`expose`]).
    exposed: UpstreamLists,
    /// What its last listing refused or cut short.
    list_problems: Vec<String>,
    /// Names it offers that collide with another upstream's or a built-in.
    conflicts: Vec<String>,
    /// Its tools held back: their definitions are not the pinned ones.
    held: Vec<merged::HeldTool>,
    link: Option<Link>,
    /// The protocol revision its shared connection negotiated (while up).
    protocol: Option<String>,
    restarts: u64,
    pid: Option<u32>,
    /// A stdio child's stderr tail (of the current or last process).
    child: Option<ChildWatch>,
    /// One re-listing at a time.
    refresh: Arc<RefreshGate>,
}

impl Slot {
    /// A slot for `config`, nothing connected or listed yet.
    fn new(config: &UpstreamConfig) -> Self {
        Slot {
            config: config.clone(),
            health: if config.enabled { Health::Down } else { Health::Disabled },
            last_error: None,
            offered: UpstreamLists::default(),
            exposed: UpstreamLists::default(),
            list_problems: Vec::new(),
            conflicts: Vec::new(),
            held: Vec::new(),
            link: None,
            protocol: None,
            restarts: 0,
            pid: None,
            child: None,
            refresh: Arc::default(),
        }
    }

    /// Everything wrong with it, as shown: its last error, then what its
    /// listing refused, then its name collisions.
    fn shown_error(&self) -> Option<String> {
        let conflicts = (!self.conflicts.is_empty()).then(|| summary(&self.conflicts, "; "));
        let all: Vec<&str> =
            self.last_error.iter().chain(&self.list_problems).chain(&conflicts).map(String::as_str).collect();
        (!all.is_empty()).then(|| sanitize(&all.join("; ")))
    }
}

/// What every part of the upstream side shares.
#[derive(Default)]
pub(crate) struct Inner {
    slots: RwLock<HashMap<String, Slot>>,
    calls_failed: AtomicU64,
    live: Option<LiveHub>,
    /// Pinned tool definitions (none: nothing is pinned).
    pins: Option<gatehouse_core::pins::ToolPins>,
    /// Names of Gatehouse's built-in tools, which no upstream tool may shadow
    /// (given, so this side needs nothing from the tool handlers).
    reserved: HashSet<String>,
    /// Every agent session, for list-change and resource-update notifications.
    downstreams: Mutex<Vec<Weak<Downstream>>>,
    /// The agents' open `subscriptions/listen` streams (2026-07-28), which
    /// hear list changes and resource updates as sessions do.
    listeners: Arc<listeners::Listeners>,
    /// Serialises (un)subscribing: an unsubscribe on a shared connection
    /// checks that no other agent still wants the URI, which a concurrent
    /// subscribe must not slip past.
    subscribing: tokio::sync::Mutex<()>,
    /// Which of the agents' SSE streams are open (relayed requests need one).
    pub(crate) streams: agent_streams::AgentStreams,
    /// Each agent MCP session's own sessions at HTTP upstreams.
    agent_links: registry::AgentLinks,
    /// The application's background tasks: everything this side spawns is
    /// tracked here, so shutdown can wait for it.
    tasks: TaskTracker,
    /// Cancelled at shutdown; each supervisor stops on a child of it.
    shutdown: tokio_util::sync::CancellationToken,
    /// Each running supervisor, by upstream: how to stop it, and its task
    /// (awaited, so a stopped one writes nothing into a slot after it).
    supervisors: Mutex<HashMap<String, supervision::Supervisor>>,
    /// Held while an upstream is tested ([`probe`]): one at a time.
    probing: tokio::sync::Mutex<()>,
}

/// All upstreams; cheap to clone.
#[derive(Clone, Default)]
pub struct Upstreams {
    pub(crate) inner: Arc<Inner>,
}

impl Upstreams {
    fn slots(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Slot>> {
        self.inner.slots.read().unwrap_or_else(|p| p.into_inner())
    }

    fn slots_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Slot>> {
        self.inner.slots.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes one upstream's slot, then recomputes what every upstream
    /// exposes (one's lists decide what another's collide with).
    fn update(&self, name: &str, f: impl FnOnce(&mut Slot)) {
        let pins = self.inner.pins.as_ref().map(|p| {
            p.all().unwrap_or_else(|e| {
                // No pins known: every pinning upstream's tools are held back.
                tracing::error!(error = %e, "reading tool pins failed");
                std::sync::Arc::default()
            })
        });
        {
            let mut slots = self.slots_mut();
            if let Some(slot) = slots.get_mut(name) {
                f(slot);
            }
            expose(&mut slots, &self.inner.reserved, pins.as_deref());
        }
        self.publish();
    }

    /// Shows every upstream's health on the upstreams page.
    fn publish(&self) {
        let Some(live) = &self.inner.live else { return };
        let mut all: Vec<UpstreamInfo> = self
            .slots()
            .iter()
            .map(|(name, s)| UpstreamInfo {
                name: name.clone(),
                health: s.health.as_str().to_string(),
                transport: if s.config.command.is_some() { "stdio" } else { "http" }.to_string(),
                tools: s.exposed.tools.len(),
                restarts: s.restarts,
                last_error: s.shown_error(),
            })
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        live.set_upstreams(all);
    }

    /// Whether any upstream is configured (then prompts, resources and completions are offered).
    pub fn any(&self) -> bool {
        !self.slots().is_empty()
    }

    /// Upstream calls that ended in a transport error.
    pub fn calls_failed(&self) -> u64 {
        self.inner.calls_failed.load(Ordering::Relaxed)
    }
}
