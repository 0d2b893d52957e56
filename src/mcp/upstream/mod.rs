//! Upstream MCP servers behind the gate, proxied transparently.
//!
//! Each `[[upstream]]` has one supervised shared connection (a stdio child
//! process, or a Streamable HTTP client) that lists its tools, prompts and
//! resources under the upstream's prefix and is restarted with backoff when
//! it dies. An agent's MCP session gets sessions of its own at HTTP upstreams
//! ([`session::Downstream`]), so per-session state never crosses agents;
//! stdio upstreams are one process shared by all. What an upstream sends to
//! its client is relayed to the agent whose request caused it ([`relay`]).

// Logging, subscriptions and server→client requests are deprecated by
// SEP-2577 but are the 2025-11-25 protocol upstreams and agents speak.
#![allow(deprecated)]

pub mod link;
pub mod relay;
pub mod session;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientRequest, CompleteRequestParams,
    CompleteResult, ElicitationCapability, ErrorData, GetPromptRequestParams, GetPromptResult, LoggingLevel,
    PaginatedRequestParams, Prompt, ReadResourceRequestParams, ReadResourceResult, Reference, Resource,
    ResourceTemplate, RootsCapabilities, SamplingCapability, ServerResult, SetLevelRequestParams,
    SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, PeerRequestOptions};
use tokio_util::sync::CancellationToken;

use gatehouse_core::live::{LiveHub, UpstreamInfo};

use crate::config::UpstreamConfig;
use crate::tool_error::{ToolErrorCode, error_result};
use link::{ChildWatch, Link};
use relay::{Relay, RelayState};
use session::{Downstream, Origin};

/// Health of one upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Connected; its tools are exposed.
    Up,
    /// Not connected yet.
    Down,
    /// It failed or ended; waiting out the backoff, or starting again.
    Restarting,
    /// Disabled in the config.
    Disabled,
}

impl Health {
    /// The name shown in metrics and pages.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Up => "up",
            Health::Down => "down",
            Health::Restarting => "restarting",
            Health::Disabled => "disabled",
        }
    }
}

/// What an upstream offers, tool and prompt names prefixed.
#[derive(Default, Clone)]
struct Catalog {
    tools: Vec<Tool>,
    prompts: Vec<Prompt>,
    resources: Vec<Resource>,
    templates: Vec<ResourceTemplate>,
}

struct Slot {
    config: UpstreamConfig,
    health: Health,
    /// Why the connection last failed or ended (sanitized).
    last_error: Option<String>,
    /// What it offers, its names checked and its lists capped.
    offered: Catalog,
    /// What of that is exposed: `offered` less the names another upstream
    /// or a built-in tool also has ([`expose`]).
    catalog: Catalog,
    /// What its last listing refused or cut short.
    list_problems: Vec<String>,
    /// Names it offers that collide with another upstream's or a built-in.
    conflicts: Vec<String>,
    link: Option<Link>,
    restarts: u64,
    pid: Option<u32>,
    /// A stdio child's stderr tail (of the current or last process).
    child: Option<ChildWatch>,
    /// One catalogue refresh at a time.
    refresh: Arc<RefreshGate>,
}

impl Slot {
    /// Everything wrong with it, as shown: its last error, then what its
    /// listing refused, then its name collisions.
    fn shown_error(&self) -> Option<String> {
        let conflicts = (!self.conflicts.is_empty()).then(|| summary(&self.conflicts, "; "));
        let all: Vec<&str> =
            self.last_error.iter().chain(&self.list_problems).chain(&conflicts).map(String::as_str).collect();
        (!all.is_empty()).then(|| sanitize(&all.join("; ")))
    }
}

/// Coalesces catalogue refreshes of one upstream: one runs, at most one
/// waits (and lists after every change announced before it starts).
#[derive(Default)]
struct RefreshGate {
    queued: AtomicBool,
    running: tokio::sync::Mutex<()>,
}

/// A tool of an upstream, as exposed.
#[derive(Debug, Clone)]
pub struct UpstreamTool {
    /// The upstream's name.
    pub upstream: String,
    /// The tool's own name at the upstream.
    pub name: String,
    /// The tool as listed to clients (prefixed name).
    pub tool: Tool,
}

/// One upstream's health, for pages and metrics.
#[derive(Debug, Clone)]
pub struct Status {
    /// Name.
    pub name: String,
    /// Health.
    pub health: Health,
    /// Last error, if it failed.
    pub last_error: Option<String>,
    /// Tools it exposes now.
    pub tools: usize,
    /// Restarts since start.
    pub restarts: u64,
    /// Process id of a stdio upstream while it runs.
    pub pid: Option<u32>,
    /// The latest of a stdio upstream's stderr (at most `stderr_tail_bytes`).
    pub stderr_tail: Option<String>,
}

#[derive(Default)]
pub(crate) struct Inner {
    slots: RwLock<HashMap<String, Slot>>,
    calls_failed: AtomicU64,
    live: Option<LiveHub>,
    /// Every agent session, for list-change and resource-update notifications.
    downstreams: Mutex<Vec<Weak<Downstream>>>,
    /// Serialises (un)subscribing: an unsubscribe on a shared connection
    /// checks that no other agent still wants the URI, which a concurrent
    /// subscribe must not slip past.
    subscribing: tokio::sync::Mutex<()>,
    /// Which of the agents' SSE streams are open (relayed requests need one).
    pub(crate) streams: session::AgentStreams,
}

/// All upstreams; cheap to clone.
#[derive(Clone, Default)]
pub struct Upstreams {
    pub(crate) inner: Arc<Inner>,
}

const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Longest exposed tool or prompt name.
const MAX_NAME_LEN: usize = 128;

/// How many refused names or name collisions one message quotes.
const QUOTED_NAMES: usize = 3;

/// What a shared connection declares: everything an agent might answer;
/// requests that find no capable agent get an error.
fn shared_capabilities() -> ClientCapabilities {
    let mut caps = ClientCapabilities::default();
    caps.sampling = Some(SamplingCapability::default());
    caps.elicitation = Some(ElicitationCapability::default());
    caps.roots = Some(RootsCapabilities::default());
    caps
}

/// What a per-session connection declares: what the agent's client declared.
fn agent_capabilities(downstream: &Downstream) -> ClientCapabilities {
    let declared = downstream.capabilities();
    let mut caps = ClientCapabilities::default();
    caps.sampling = declared.sampling;
    caps.elicitation = declared.elicitation;
    caps.roots = declared.roots;
    caps
}

/// The answer to a call its agent cancelled (which nobody reads).
fn cancelled() -> CallToolResult {
    error_result(ToolErrorCode::Cancelled, "cancelled by the agent", serde_json::Value::Null)
}

fn upstream_error(what: &str, e: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(sanitize(&format!("upstream {what} failed: {e}")), None)
}

/// The error `what` gets when the upstream has not answered within `call_timeout`.
fn timed_out(what: &str, timeout: Duration) -> ErrorData {
    ErrorData::internal_error(
        format!("upstream {what} failed: no answer within call_timeout ({})", humantime::format_duration(timeout)),
        None,
    )
}

/// `request` on `link`, or an error once its `call_timeout` passes
/// (dropping an rmcp request future cancels it at the upstream).
async fn within<T>(
    link: &Link,
    what: &str,
    request: impl Future<Output = Result<T, rmcp::service::ServiceError>>,
) -> Result<T, ErrorData> {
    let timeout = link.call_timeout;
    match tokio::time::timeout(timeout, request).await {
        Ok(answer) => answer.map_err(|e| pass_error(what, e)),
        Err(_) => {
            let upstream = link.relay.upstream();
            tracing::warn!(upstream, what, timeout = %humantime::format_duration(timeout), "upstream request timed out");
            Err(timed_out(what, timeout))
        }
    }
}

/// An error and its causes, on one line (a cause already quoted by the
/// message before it is not repeated).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !text.contains(&part) {
            text = format!("{text}: {part}");
        }
        source = cause.source();
    }
    text
}

/// `text` with every URL's credentials (`user:pass@`), query and fragment
/// removed, so an upstream's error never shows a secret its URL carries.
pub fn sanitize(text: &str) -> String {
    let ends_url = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let scheme = rest[..at].bytes().rev().take_while(|b| b.is_ascii_alphanumeric() || b"+-.".contains(b)).count();
        out.push_str(&rest[..at + 3]);
        rest = &rest[at + 3..];
        if scheme == 0 {
            continue;
        }
        let (url, after) = rest.split_at(rest.find(ends_url).unwrap_or(rest.len()));
        let (authority, path) = url.split_at(url.find(['/', '?', '#']).unwrap_or(url.len()));
        out.push_str(authority.rsplit_once('@').map_or(authority, |(_, host)| host));
        match path.find(['?', '#']) {
            Some(query) => {
                out.push_str(&path[..query]);
                // Punctuation closing the text around the URL stays: "(http://h/p?k=v)".
                let cut = &path[query..];
                out.push_str(&cut[cut.trim_end_matches([')', ']', '}', '.', ',', ';', ':']).len()..]);
            }
            None => out.push_str(path),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Whether an upstream's tool or prompt may be exposed under `exposed`:
/// 1 to 128 of `A-Z a-z 0-9 _ . -` (its own name not empty).
fn valid_name(own: &str, exposed: &str) -> bool {
    !own.is_empty()
        && exposed.len() <= MAX_NAME_LEN
        && exposed.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The first few of `items` joined by `separator`, and how many more there are.
fn summary(items: &[String], separator: &str) -> String {
    let mut text = items.iter().take(QUOTED_NAMES).map(String::as_str).collect::<Vec<_>>().join(separator);
    if items.len() > QUOTED_NAMES {
        text.push_str(&format!(" (and {} more)", items.len() - QUOTED_NAMES));
    }
    text
}

/// A name from an upstream as it may be quoted: escaped and cut short.
fn quoted(name: &str) -> String {
    let cut: String = name.chars().take(64).collect();
    if cut.len() < name.len() { format!("{cut:?}…") } else { format!("{cut:?}") }
}

/// Recomputes what every upstream exposes from what each offers: a tool or
/// prompt name that two upstreams offer is exposed by neither (whichever
/// started first), and one that a built-in tool has is not exposed at all.
fn expose(slots: &mut HashMap<String, Slot>) {
    let mut tool_owners: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut prompt_owners: HashMap<&str, Vec<&str>> = HashMap::new();
    for (name, slot) in slots.iter() {
        for tool in &slot.offered.tools {
            tool_owners.entry(tool.name.as_ref()).or_default().push(name);
        }
        for prompt in &slot.offered.prompts {
            prompt_owners.entry(prompt.name.as_str()).or_default().push(name);
        }
    }
    let collision = |kind: &str, exposed: &str, owners: &[&str], me: &str| -> Option<String> {
        if kind == "tool" && crate::mcp::tools::find(exposed).is_some() {
            return Some(format!(
                "tool {} of upstream {me} would shadow a built-in Gatehouse tool; not exposed",
                quoted(exposed)
            ));
        }
        let mut others: Vec<&str> = owners.iter().copied().filter(|o| *o != me).collect();
        others.sort_unstable();
        (!others.is_empty()).then(|| {
            format!(
                "{kind} {} is offered by upstreams {me} and {}; neither exposes it",
                quoted(exposed),
                others.join(", ")
            )
        })
    };
    let mut computed: Vec<(String, Catalog, Vec<String>)> = Vec::new();
    for (name, slot) in slots.iter() {
        let mut conflicts = Vec::new();
        let mut catalog = Catalog {
            resources: slot.offered.resources.clone(),
            templates: slot.offered.templates.clone(),
            ..Catalog::default()
        };
        for tool in &slot.offered.tools {
            match collision("tool", &tool.name, &tool_owners[tool.name.as_ref()], name) {
                Some(conflict) => conflicts.push(conflict),
                None => catalog.tools.push(tool.clone()),
            }
        }
        for prompt in &slot.offered.prompts {
            match collision("prompt", &prompt.name, &prompt_owners[prompt.name.as_str()], name) {
                Some(conflict) => conflicts.push(conflict),
                None => catalog.prompts.push(prompt.clone()),
            }
        }
        computed.push((name.clone(), catalog, conflicts));
    }
    for (name, catalog, conflicts) in computed {
        let Some(slot) = slots.get_mut(&name) else { continue };
        if !conflicts.is_empty() && conflicts != slot.conflicts {
            tracing::warn!(upstream = %name, collisions = conflicts.len(), "{}", summary(&conflicts, "; "));
        }
        slot.catalog = catalog;
        slot.conflicts = conflicts;
    }
}

impl Upstreams {
    /// Starts a supervisor per enabled upstream; they stop at `shutdown`.
    /// Health changes are published to `live` for the upstreams page.
    pub fn start(configs: &[UpstreamConfig], live: LiveHub, shutdown: CancellationToken) -> Self {
        let upstreams = Upstreams { inner: Arc::new(Inner { live: Some(live), ..Inner::default() }) };
        for config in configs {
            let health = if config.enabled { Health::Down } else { Health::Disabled };
            upstreams.slots_mut().insert(
                config.name.clone(),
                Slot {
                    config: config.clone(),
                    health,
                    last_error: None,
                    offered: Catalog::default(),
                    catalog: Catalog::default(),
                    list_problems: Vec::new(),
                    conflicts: Vec::new(),
                    link: None,
                    restarts: 0,
                    pid: None,
                    child: None,
                    refresh: Arc::default(),
                },
            );
            if config.enabled {
                tokio::spawn(upstreams.clone().supervise(config.clone(), shutdown.clone()));
            }
        }
        upstreams.publish();
        upstreams
    }

    fn slots(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Slot>> {
        self.inner.slots.read().unwrap_or_else(|p| p.into_inner())
    }

    fn slots_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Slot>> {
        self.inner.slots.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes one upstream's slot, then recomputes what every upstream
    /// exposes (one's catalogue decides what another's collides with).
    fn update(&self, name: &str, f: impl FnOnce(&mut Slot)) {
        {
            let mut slots = self.slots_mut();
            if let Some(slot) = slots.get_mut(name) {
                f(slot);
            }
            expose(&mut slots);
        }
        self.publish();
    }

    /// Records why upstream `name` failed (sanitized) and logs it.
    fn fail(&self, name: &str, what: &str, error: String) {
        let error = sanitize(&error);
        tracing::warn!(upstream = %name, %error, "{what}");
        self.update(name, |s| s.last_error = Some(error));
    }

    fn publish(&self) {
        let Some(live) = &self.inner.live else { return };
        let mut all: Vec<UpstreamInfo> = self
            .slots()
            .iter()
            .map(|(name, s)| UpstreamInfo {
                name: name.clone(),
                health: s.health.as_str().to_string(),
                transport: if s.config.command.is_some() { "stdio" } else { "http" }.to_string(),
                tools: s.catalog.tools.len(),
                restarts: s.restarts,
                last_error: s.shown_error(),
            })
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        live.set_upstreams(all);
    }

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

    /// Tells every agent session that the tool, prompt and resource lists changed.
    pub fn announce_lists_changed(&self) {
        for downstream in self.downstreams() {
            let Some(peer) = downstream.peer().cloned() else { continue };
            if !downstream.stateful() {
                continue;
            }
            tokio::spawn(async move {
                let _ = peer.notify_tool_list_changed().await;
                let _ = peer.notify_prompt_list_changed().await;
                let _ = peer.notify_resource_list_changed().await;
            });
        }
    }

    /// Keeps one upstream connected: connect, list what it offers, wait for
    /// it to end, back off (1 s doubling to 30 s, reset after a healthy
    /// minute), repeat.
    async fn supervise(self, config: UpstreamConfig, shutdown: CancellationToken) {
        let mut backoff = Duration::from_secs(1);
        loop {
            let started = tokio::time::Instant::now();
            let relay = RelayState::new(&config.name, None, &self);
            let watch = config.command.is_some().then(|| ChildWatch::new(&config));
            self.update(&config.name, |s| s.child = watch.clone());
            let connecting = link::connect(&config, Relay::new(relay.clone(), shared_capabilities()), watch.as_ref());
            let connected = tokio::select! {
                connected = connecting => connected,
                _ = shutdown.cancelled() => return,
            };
            match connected {
                Ok(connection) => {
                    let service = connection.service;
                    self.update(&config.name, |s| s.pid = connection.pid);
                    let peer = service.peer().clone();
                    match load_catalog(&config, &peer).await {
                        Ok(listing) => {
                            let catalog = listing.catalog;
                            tracing::info!(upstream = %config.name, tools = catalog.tools.len(), prompts = catalog.prompts.len(), resources = catalog.resources.len(), "upstream up");
                            let link = Link {
                                peer: peer.clone(),
                                relay,
                                session: None,
                                call_timeout: config.call_timeout,
                                watch: watch.clone(),
                            };
                            self.update(&config.name, |s| {
                                s.health = Health::Up;
                                s.offered = catalog;
                                s.list_problems = listing.problems;
                                s.link = Some(link);
                                s.last_error = None;
                            });
                            self.announce_lists_changed();
                            // After a restart: what agents had subscribed to on the
                            // shared connection (their own HTTP sessions renew theirs).
                            let shared_subscriptions: Vec<String> = self
                                .downstreams()
                                .iter()
                                .filter(|d| config.url.is_none() || !d.stateful())
                                .flat_map(|d| d.subscriptions())
                                .collect();
                            self.resubscribe(&config.name, &peer, shared_subscriptions, config.call_timeout).await;
                            tokio::select! {
                                quit = service.waiting() => {
                                    let reason = watch.as_ref().and_then(ChildWatch::violation).unwrap_or_else(|| format!("{quit:?}"));
                                    self.fail(&config.name, "upstream ended", format!("ended: {reason}"));
                                }
                                _ = shutdown.cancelled() => return,
                            }
                        }
                        Err(e) => {
                            self.fail(&config.name, "upstream listing failed", e.to_string());
                            let _ = service.cancel().await;
                        }
                    }
                }
                Err(e) => self.fail(&config.name, "upstream failed to start", error_chain(&e)),
            }
            if let Some(line) = watch.as_ref().and_then(ChildWatch::last_line) {
                tracing::warn!(upstream = %config.name, stderr = %sanitize(&line), "upstream's last stderr line");
            }
            let mut was_up = false;
            self.update(&config.name, |s| {
                was_up = s.health == Health::Up;
                s.health = Health::Restarting;
                s.offered = Catalog::default();
                s.list_problems.clear();
                s.link = None;
                s.pid = None;
                s.restarts += 1;
            });
            if was_up {
                self.announce_lists_changed();
            }
            if started.elapsed() > Duration::from_secs(60) {
                backoff = Duration::from_secs(1);
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.cancelled() => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// An upstream said its lists changed: re-list it, one refresh at a time
    /// (a storm of notifications costs one listing running and one waiting).
    pub(crate) fn request_refresh(&self, name: &str) {
        let Some(gate) = self.slots().get(name).map(|s| s.refresh.clone()) else { return };
        if gate.queued.swap(true, Ordering::AcqRel) {
            // One is waiting to start; it will see this change too.
            return;
        }
        let upstreams = self.clone();
        let name = name.to_string();
        tokio::spawn(async move {
            let _one_at_a_time = gate.running.lock().await;
            gate.queued.store(false, Ordering::Release);
            upstreams.refresh(&name).await;
        });
    }

    /// Re-lists an upstream after it said its lists changed, and tells the agents.
    async fn refresh(&self, name: &str) {
        let Some((link, config)) = self.slots().get(name).and_then(|s| Some((s.link.clone()?, s.config.clone())))
        else {
            return;
        };
        match load_catalog(&config, &link.peer).await {
            Ok(listing) => {
                tracing::info!(upstream = %name, tools = listing.catalog.tools.len(), "upstream lists changed");
                // Only if the connection listed is still the one in use (not
                // replaced by a restart meanwhile).
                self.update(name, |s| {
                    if s.link.as_ref().is_some_and(|l| Arc::ptr_eq(&l.relay, &link.relay)) {
                        s.offered = listing.catalog;
                        s.list_problems = listing.problems;
                    }
                });
                self.announce_lists_changed();
            }
            Err(e) => tracing::warn!(upstream = %name, error = %sanitize(&e.to_string()), "upstream re-list failed"),
        }
    }

    /// The connection `downstream` uses for upstream `name`: its own session
    /// at an HTTP upstream (opened on first use), else the shared one.
    async fn link(&self, name: &str, downstream: &Arc<Downstream>) -> Result<Link, String> {
        let (http, shared) = {
            let slots = self.slots();
            let slot = slots.get(name).ok_or_else(|| format!("no upstream {name}"))?;
            (slot.config.url.is_some(), slot.link.clone())
        };
        let shared = shared.ok_or_else(|| "the upstream is down".to_string())?;
        if !http || !downstream.stateful() {
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
        let connecting = link::connect(&config, Relay::new(relay.clone(), agent_capabilities(downstream)), None);
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

    /// Subscribes `peer` (a new connection to upstream `name`) to those of
    /// `uris` that `name` serves, each within `timeout`.
    async fn resubscribe(&self, name: &str, peer: &Peer<RoleClient>, uris: Vec<String>, timeout: Duration) {
        for uri in uris {
            if self.resource_owner(&uri).as_deref() == Some(name) {
                let _ = tokio::time::timeout(timeout, peer.subscribe(SubscribeRequestParams::new(uri))).await;
            }
        }
    }

    /// Every exposed upstream tool.
    pub fn tools(&self) -> Vec<UpstreamTool> {
        let slots = self.slots();
        let mut all = Vec::new();
        for (name, slot) in slots.iter() {
            let prefix = slot.config.prefix();
            for tool in &slot.catalog.tools {
                all.push(UpstreamTool {
                    upstream: name.clone(),
                    name: tool.name.strip_prefix(prefix.as_str()).unwrap_or(&tool.name).to_string(),
                    tool: tool.clone(),
                });
            }
        }
        all.sort_by(|a, b| a.tool.name.cmp(&b.tool.name));
        all
    }

    /// The upstream tool exposed as `exposed`, if any.
    pub fn find(&self, exposed: &str) -> Option<UpstreamTool> {
        // On every call: look the one tool up instead of copying and sorting them all.
        let slots = self.slots();
        slots.iter().find_map(|(name, slot)| {
            let tool = slot.catalog.tools.iter().find(|t| t.name == exposed)?;
            let prefix = slot.config.prefix();
            Some(UpstreamTool {
                upstream: name.clone(),
                name: exposed.strip_prefix(prefix.as_str()).unwrap_or(exposed).to_string(),
                tool: tool.clone(),
            })
        })
    }

    /// Calls `tool` at its upstream for the agent request `origin`: progress
    /// and server→client requests flow back to that request, its cancellation
    /// flows on. A call in flight when the upstream dies gets an error result;
    /// the upstream's own JSON-RPC error is passed through as it is.
    pub async fn call(
        &self,
        tool: &UpstreamTool,
        arguments: &serde_json::Value,
        origin: &Origin,
    ) -> Result<CallToolResult, ErrorData> {
        let failed = |message: String| {
            let message = sanitize(&message);
            self.inner.calls_failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(upstream = %tool.upstream, tool = %tool.name, message = ?message, "upstream call failed");
            error_result(
                ToolErrorCode::UpstreamFailed,
                format!("upstream {} could not run {}: {message}", tool.upstream, tool.name),
                serde_json::json!({"upstream": tool.upstream, "message": message}),
            )
        };
        let link = tokio::select! {
            link = self.link(&tool.upstream, &origin.downstream) => match link {
                Ok(link) => link,
                Err(e) => return Ok(failed(e)),
            },
            _ = origin.ct.cancelled() => return Ok(cancelled()),
        };
        let mut params = CallToolRequestParams::new(tool.name.clone());
        if let Some(args) = arguments.as_object() {
            params = params.with_arguments(args.clone());
        }
        let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let in_flight = link.relay.track(origin);
        in_flight.mark(&mut request);
        let handle = match link.peer.send_request_with_option(request, PeerRequestOptions::no_options()).await {
            Ok(handle) => handle,
            Err(e) => return Ok(failed(link.why(&e))),
        };
        match relay::await_or_cancel(handle, &origin.ct, "cancelled by the agent", Some(link.call_timeout)).await {
            Ok(ServerResult::CallToolResult(result)) => Ok(result),
            Ok(_) => Ok(failed("the upstream answered tools/call with something else".into())),
            Err(rmcp::service::ServiceError::McpError(e)) => Err(e),
            Err(rmcp::service::ServiceError::Cancelled { .. }) => Ok(cancelled()),
            Err(rmcp::service::ServiceError::Timeout { timeout }) => Ok(failed(format!(
                "no answer within call_timeout ({}); cancelled at the upstream",
                humantime::format_duration(timeout)
            ))),
            Err(e) => Ok(failed(link.why(&e))),
        }
    }

    /// Whether any upstream is configured (then prompts, resources and completions are offered).
    pub fn any(&self) -> bool {
        !self.slots().is_empty()
    }

    /// Every upstream prompt, under its upstream's prefix.
    pub fn prompts(&self) -> Vec<Prompt> {
        let mut all: Vec<Prompt> = self.slots().values().flat_map(|s| s.catalog.prompts.iter().cloned()).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Every upstream resource (URIs as the upstream gives them).
    pub fn resources(&self) -> Vec<Resource> {
        let mut all: Vec<Resource> = self.slots().values().flat_map(|s| s.catalog.resources.iter().cloned()).collect();
        all.sort_by(|a, b| a.uri.cmp(&b.uri));
        all
    }

    /// Every upstream resource template.
    pub fn resource_templates(&self) -> Vec<ResourceTemplate> {
        let mut all: Vec<ResourceTemplate> =
            self.slots().values().flat_map(|s| s.catalog.templates.iter().cloned()).collect();
        all.sort_by(|a, b| a.uri_template.cmp(&b.uri_template));
        all
    }

    /// The upstream offering the prompt exposed as `exposed`, and its own name for it.
    fn prompt_owner(&self, exposed: &str) -> Option<(String, String)> {
        self.slots().iter().find_map(|(name, s)| {
            let prefix = s.config.prefix();
            s.catalog
                .prompts
                .iter()
                .any(|p| p.name == exposed)
                .then(|| (name.clone(), exposed.strip_prefix(prefix.as_str()).unwrap_or(exposed).to_string()))
        })
    }

    /// The upstream that serves `uri`: the one that listed it, else the one
    /// with a template whose fixed part it starts with. Never a guess: a URI no
    /// upstream offers, or one several offer, is sent to none of them.
    fn resource_owner(&self, uri: &str) -> Option<String> {
        let slots = self.slots();
        let one = |owners: Vec<&String>| match owners.as_slice() {
            [only] => Some((*only).clone()),
            [] => None,
            several => {
                // Two upstreams claiming one URI: sending it to either could
                // hand one upstream's reads to the other, so neither gets it.
                tracing::warn!(uri = ?uri, upstreams = ?several, "resource URI offered by several upstreams; refused");
                None
            }
        };
        let listed: Vec<&String> = slots
            .iter()
            .filter(|(_, s)| s.catalog.resources.iter().any(|r| r.uri == uri))
            .map(|(name, _)| name)
            .collect();
        if !listed.is_empty() {
            return one(listed);
        }
        one(slots
            .iter()
            .filter(|(_, s)| {
                s.catalog.templates.iter().any(|t| {
                    let fixed = t.uri_template.split('{').next().unwrap_or_default();
                    t.uri_template == uri || (!fixed.is_empty() && uri.starts_with(fixed))
                })
            })
            .map(|(name, _)| name)
            .collect())
    }

    /// `prompts/get` for an exposed prompt name.
    pub async fn get_prompt(
        &self,
        exposed: &str,
        arguments: Option<rmcp::model::JsonObject>,
        downstream: &Arc<Downstream>,
    ) -> Result<GetPromptResult, ErrorData> {
        let (upstream, name) = self
            .prompt_owner(exposed)
            .ok_or_else(|| ErrorData::invalid_params(format!("Unknown prompt: {exposed}"), None))?;
        let link = self.link(&upstream, downstream).await.map_err(|e| upstream_error("prompts/get", e))?;
        let mut params = GetPromptRequestParams::new(name);
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        within(&link, "prompts/get", link.peer.get_prompt(params)).await
    }

    /// `resources/read`, at the upstream that serves `uri`.
    pub async fn read_resource(
        &self,
        uri: &str,
        downstream: &Arc<Downstream>,
    ) -> Result<ReadResourceResult, ErrorData> {
        let upstream = self
            .resource_owner(uri)
            .ok_or_else(|| ErrorData::resource_not_found(format!("Resource not found: {uri}"), None))?;
        let link = self.link(&upstream, downstream).await.map_err(|e| upstream_error("resources/read", e))?;
        within(&link, "resources/read", link.peer.read_resource(ReadResourceRequestParams::new(uri))).await
    }

    /// `completion/complete` for a prompt argument or a resource template.
    pub async fn complete(
        &self,
        mut params: CompleteRequestParams,
        downstream: &Arc<Downstream>,
    ) -> Result<CompleteResult, ErrorData> {
        let upstream = match &mut params.r#ref {
            Reference::Prompt(prompt) => {
                let (upstream, name) = self
                    .prompt_owner(&prompt.name)
                    .ok_or_else(|| ErrorData::invalid_params(format!("Unknown prompt: {}", prompt.name), None))?;
                prompt.name = name;
                upstream
            }
            Reference::Resource(resource) => self
                .resource_owner(&resource.uri)
                .ok_or_else(|| ErrorData::invalid_params(format!("Unknown resource: {}", resource.uri), None))?,
            _ => return Err(ErrorData::invalid_params("unknown completion reference", None)),
        };
        let link = self.link(&upstream, downstream).await.map_err(|e| upstream_error("completion/complete", e))?;
        if link.peer.peer_info().is_none_or(|i| i.capabilities.completions.is_none()) {
            // Nothing to suggest: an empty completion rather than an error.
            return Ok(CompleteResult::default());
        }
        within(&link, "completion/complete", link.peer.complete(params)).await
    }

    /// `resources/subscribe`: remembered for the agent, passed to the upstream
    /// that serves `uri` (on the agent's own session, or the shared one).
    pub async fn subscribe(&self, uri: &str, downstream: &Arc<Downstream>) -> Result<(), ErrorData> {
        if !downstream.stateful() {
            // Updates are sent to a session; a stateless request has none.
            return Err(ErrorData::invalid_request("resources/subscribe needs an MCP session", None));
        }
        let upstream = self
            .resource_owner(uri)
            .ok_or_else(|| ErrorData::resource_not_found(format!("Resource not found: {uri}"), None))?;
        let link = self.link(&upstream, downstream).await.map_err(|e| upstream_error("resources/subscribe", e))?;
        let _serial = self.inner.subscribing.lock().await;
        downstream.subscribe(uri);
        let subscribed =
            within(&link, "resources/subscribe", link.peer.subscribe(SubscribeRequestParams::new(uri))).await;
        if subscribed.is_err() {
            downstream.unsubscribe(uri);
        }
        subscribed
    }

    /// `resources/unsubscribe`; a shared connection stays subscribed while
    /// another agent still is.
    pub async fn unsubscribe(&self, uri: &str, downstream: &Arc<Downstream>) -> Result<(), ErrorData> {
        let Some(upstream) = self.resource_owner(uri) else {
            downstream.unsubscribe(uri);
            return Ok(());
        };
        let link = self.link(&upstream, downstream).await.map_err(|e| upstream_error("resources/unsubscribe", e))?;
        let _serial = self.inner.subscribing.lock().await;
        downstream.unsubscribe(uri);
        if link.shared() && self.downstreams().iter().any(|d| d.subscribed(uri)) {
            return Ok(());
        }
        within(&link, "resources/unsubscribe", link.peer.unsubscribe(UnsubscribeRequestParams::new(uri))).await
    }

    /// `logging/setLevel`: kept for the agent (messages from shared
    /// connections are filtered by it) and passed to its own upstream sessions.
    pub async fn set_level(&self, level: LoggingLevel, downstream: &Arc<Downstream>) {
        downstream.set_level(level);
        for cell in downstream.link_cells() {
            let link = cell.lock().await.clone();
            if let Some(link) = link
                && supports_logging(&link.peer)
            {
                let _ = within(&link, "logging/setLevel", link.peer.set_level(SetLevelRequestParams::new(level))).await;
            }
        }
    }

    /// The agent's roots changed: its own upstream sessions hear it (and ask
    /// again). A shared connection does not: whose roots would it ask for?
    pub async fn roots_changed(&self, downstream: &Arc<Downstream>) {
        for cell in downstream.link_cells() {
            let link = cell.lock().await.clone();
            if let Some(link) = link {
                let _ = tokio::time::timeout(link.call_timeout, link.peer.notify_roots_list_changed()).await;
            }
        }
    }

    /// Health of every upstream, by name.
    pub fn status(&self) -> Vec<Status> {
        let mut all: Vec<Status> = self
            .slots()
            .iter()
            .map(|(name, s)| Status {
                name: name.clone(),
                health: s.health,
                last_error: s.shown_error(),
                tools: s.catalog.tools.len(),
                restarts: s.restarts,
                pid: s.pid,
                stderr_tail: s.child.as_ref().map(ChildWatch::stderr_tail),
            })
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Upstream calls that ended in a transport error.
    pub fn calls_failed(&self) -> u64 {
        self.inner.calls_failed.load(Ordering::Relaxed)
    }
}

/// An upstream's JSON-RPC error passes through as it is; anything else is ours.
fn pass_error(what: &str, e: rmcp::service::ServiceError) -> ErrorData {
    match e {
        rmcp::service::ServiceError::McpError(e) => e,
        e => upstream_error(what, e),
    }
}

fn supports_logging(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info().is_some_and(|i| i.capabilities.logging.is_some())
}

/// Why an upstream's catalogue could not be listed.
#[derive(Debug, thiserror::Error)]
enum ListError {
    /// `tools/list` failed.
    #[error("tools/list failed: {0}")]
    Tools(String),
    /// The whole listing took longer than `list_timeout`.
    #[error("no complete catalogue within list_timeout ({})", humantime::format_duration(*.0))]
    Timeout(Duration),
}

/// A catalogue as listed, and what the listing refused or cut short.
struct Listing {
    catalog: Catalog,
    problems: Vec<String>,
}

/// Everything an upstream offers, within `list_timeout`, with tool and
/// prompt names under its prefix; names that may not be exposed are refused
/// and long lists cut at `max_list_pages` / `max_list_items`.
async fn load_catalog(config: &UpstreamConfig, peer: &Peer<RoleClient>) -> Result<Listing, ListError> {
    tokio::time::timeout(config.list_timeout, list_catalog(config, peer))
        .await
        .map_err(|_| ListError::Timeout(config.list_timeout))?
}

async fn list_catalog(config: &UpstreamConfig, peer: &Peer<RoleClient>) -> Result<Listing, ListError> {
    let caps = peer.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
    let mut problems = Vec::new();
    let tools = list_pages(config, "tools", &mut problems, |p| async move {
        peer.list_tools(p).await.map(|r| (r.tools, r.next_cursor))
    })
    .await
    .map_err(|e| ListError::Tools(error_chain(&e)))?;
    let tools = checked_names(
        config,
        "tool",
        tools,
        &mut problems,
        |t| t.name.to_string(),
        |t, exposed| {
            t.name = exposed.into();
        },
    );
    let prompts = if caps.prompts.is_some() {
        let listed = list_pages(config, "prompts", &mut problems, |p| async move {
            peer.list_prompts(p).await.map(|r| (r.prompts, r.next_cursor))
        })
        .await;
        let prompts = optional(config, "prompts", listed, &mut problems);
        checked_names(config, "prompt", prompts, &mut problems, |p| p.name.clone(), |p, exposed| p.name = exposed)
    } else {
        Vec::new()
    };
    let (resources, templates) = if caps.resources.is_some() {
        let listed = list_pages(config, "resources", &mut problems, |p| async move {
            peer.list_resources(p).await.map(|r| (r.resources, r.next_cursor))
        })
        .await;
        let resources = optional(config, "resources", listed, &mut problems);
        let listed = list_pages(config, "resource templates", &mut problems, |p| async move {
            peer.list_resource_templates(p).await.map(|r| (r.resource_templates, r.next_cursor))
        })
        .await;
        (resources, optional(config, "resources/templates", listed, &mut problems))
    } else {
        (Vec::new(), Vec::new())
    };
    Ok(Listing { catalog: Catalog { tools, prompts, resources, templates }, problems })
}

/// A list an upstream may fail to give (prompts, resources): its failure
/// is noted, and nothing listed.
fn optional<T>(
    config: &UpstreamConfig,
    what: &str,
    listed: Result<Vec<T>, rmcp::service::ServiceError>,
    problems: &mut Vec<String>,
) -> Vec<T> {
    listed.unwrap_or_else(|e| {
        let problem = sanitize(&format!("{what}/list failed: {}", error_chain(&e)));
        tracing::warn!(upstream = %config.name, "{problem}");
        problems.push(problem);
        Vec::new()
    })
}

/// Follows one list's pages, stopping (with a problem noted) after
/// `max_list_pages` pages or `max_list_items` items.
async fn list_pages<T, F, Fut>(
    config: &UpstreamConfig,
    what: &str,
    problems: &mut Vec<String>,
    mut page: F,
) -> Result<Vec<T>, rmcp::service::ServiceError>
where
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), rmcp::service::ServiceError>>,
{
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for pages in 1.. {
        let params = cursor.take().map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let (got, next) = page(params).await?;
        items.extend(got);
        let cut = if items.len() > config.max_list_items {
            items.truncate(config.max_list_items);
            Some(format!("max_list_items ({})", config.max_list_items))
        } else if next.is_some() && pages >= config.max_list_pages {
            Some(format!("max_list_pages ({})", config.max_list_pages))
        } else {
            None
        };
        if let Some(limit) = cut {
            let problem = format!("{what} list cut at {limit}; the rest is not exposed");
            tracing::warn!(upstream = %config.name, "{problem}");
            problems.push(problem);
            break;
        }
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(items)
}

/// Puts `items` under the upstream's prefix, refusing those whose name may
/// not be exposed ([`valid_name`]) or that the upstream lists twice.
fn checked_names<T>(
    config: &UpstreamConfig,
    kind: &str,
    items: Vec<T>,
    problems: &mut Vec<String>,
    name: impl Fn(&T) -> String,
    rename: impl Fn(&mut T, String),
) -> Vec<T> {
    let prefix = config.prefix();
    let mut seen = std::collections::HashSet::new();
    let mut refused = Vec::new();
    let mut kept = Vec::new();
    for mut item in items {
        let own = name(&item);
        let exposed = format!("{prefix}{own}");
        if !valid_name(&own, &exposed) || !seen.insert(exposed.clone()) {
            refused.push(quoted(&own));
            continue;
        }
        rename(&mut item, exposed);
        kept.push(item);
    }
    if !refused.is_empty() {
        let problem = format!(
            "{kind} names refused (not 1 to {MAX_NAME_LEN} of A-Z a-z 0-9 _ . -, or listed twice): {}",
            summary(&refused, ", ")
        );
        // One line however many: a hostile list must not flood the log.
        tracing::warn!(upstream = %config.name, refused = refused.len(), "{problem}");
        problems.push(problem);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_removes_url_credentials_queries_and_fragments() {
        assert_eq!(
            sanitize("error sending request for url (http://user:secret@127.0.0.1:1/mcp?key=secret)"),
            "error sending request for url (http://127.0.0.1:1/mcp)"
        );
        assert_eq!(sanitize("https://tok@h.example/a/b#frag and more"), "https://h.example/a/b and more");
        assert_eq!(sanitize("http://a:b@h?x=1"), "http://h");
        assert_eq!(sanitize("\"https://u:p@x:8443/p?q=s\": refused"), "\"https://x:8443/p\": refused");
        assert_eq!(sanitize("two: http://a@h/x?1 https://b@k/y?2."), "two: http://h/x https://k/y.");
        let plain = "connection refused (os error 111); no URL here: a@b ?q";
        assert_eq!(sanitize(plain), plain);
        assert_eq!(sanitize("weird ://x@y?z"), "weird ://x@y?z");
    }

    #[test]
    fn names_must_be_short_and_plain() {
        assert!(valid_name("read_file", "files__read_file"));
        assert!(valid_name("a.b-c", "a.b-c"));
        assert!(!valid_name("", "files__"));
        assert!(!valid_name("read file", "files__read file"));
        assert!(!valid_name("naïve", "naïve"));
        assert!(!valid_name("x\n", "x\n"));
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert!(!valid_name(&long, &long));
        assert!(valid_name(&long[1..], &long[1..]));
    }

    #[test]
    fn error_chains_do_not_repeat_a_quoted_cause() {
        let inner = std::io::Error::other("refused");
        let outer = link::LinkError::Spawn { command: "x".into(), source: inner };
        assert_eq!(error_chain(&outer), "cannot start \"x\": refused");
    }
}
