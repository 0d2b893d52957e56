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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientRequest, CompleteRequestParams,
    CompleteResult, ElicitationCapability, ErrorData, GetPromptRequestParams, GetPromptResult, LoggingLevel, Prompt,
    ReadResourceRequestParams, ReadResourceResult, Reference, Resource, ResourceTemplate, RootsCapabilities,
    SamplingCapability, ServerResult, SetLevelRequestParams, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, PeerRequestOptions};
use tokio_util::sync::CancellationToken;

use gatehouse_core::live::{LiveHub, UpstreamInfo};

use crate::config::UpstreamConfig;
use link::Link;
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

/// What an upstream offers, as exposed (tool and prompt names prefixed).
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
    last_error: Option<String>,
    catalog: Catalog,
    link: Option<Link>,
    restarts: u64,
    pid: Option<u32>,
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
}

/// All upstreams; cheap to clone.
#[derive(Clone, Default)]
pub struct Upstreams {
    pub(crate) inner: Arc<Inner>,
}

const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long opening an agent's session at an HTTP upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

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
    crate::mcp::tools::error_result("cancelled by the agent", serde_json::json!({"error": "cancelled"}))
}

fn upstream_error(what: &str, e: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(format!("upstream {what} failed: {e}"), None)
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
                    catalog: Catalog::default(),
                    link: None,
                    restarts: 0,
                    pid: None,
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

    fn update(&self, name: &str, f: impl FnOnce(&mut Slot)) {
        if let Some(slot) = self.slots_mut().get_mut(name) {
            f(slot);
        }
        self.publish();
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
                last_error: s.last_error.clone(),
            })
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        live.set_upstreams(all);
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
            match link::connect(&config, Relay::new(relay.clone(), shared_capabilities())).await {
                Ok((service, pid)) => {
                    self.update(&config.name, |s| s.pid = pid);
                    let peer = service.peer().clone();
                    match load_catalog(&peer, &config.prefix()).await {
                        Ok(catalog) => {
                            tracing::info!(upstream = %config.name, tools = catalog.tools.len(), prompts = catalog.prompts.len(), resources = catalog.resources.len(), "upstream up");
                            self.update(&config.name, |s| {
                                s.health = Health::Up;
                                s.catalog = catalog;
                                s.link = Some(Link { peer: peer.clone(), relay, session: None });
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
                            self.resubscribe(&config.name, &peer, shared_subscriptions).await;
                            tokio::select! {
                                quit = service.waiting() => {
                                    let reason = format!("{quit:?}");
                                    tracing::warn!(upstream = %config.name, %reason, "upstream ended");
                                    self.update(&config.name, |s| s.last_error = Some(format!("ended: {reason}")));
                                }
                                _ = shutdown.cancelled() => return,
                            }
                        }
                        Err(e) => {
                            tracing::warn!(upstream = %config.name, error = %e, "upstream tools/list failed");
                            self.update(&config.name, |s| s.last_error = Some(format!("tools/list failed: {e}")));
                            let _ = service.cancel().await;
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(upstream = %config.name, error = format!("{e:#}"), "upstream failed to start");
                    self.update(&config.name, |s| s.last_error = Some(format!("{e:#}")));
                }
            }
            let mut was_up = false;
            self.update(&config.name, |s| {
                was_up = s.health == Health::Up;
                s.health = Health::Restarting;
                s.catalog = Catalog::default();
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

    /// Re-lists an upstream after it said its lists changed, and tells the agents.
    pub(crate) async fn refresh(&self, name: &str) {
        let Some((link, prefix)) = self.slots().get(name).and_then(|s| Some((s.link.clone()?, s.config.prefix())))
        else {
            return;
        };
        match load_catalog(&link.peer, &prefix).await {
            Ok(catalog) => {
                tracing::info!(upstream = %name, tools = catalog.tools.len(), "upstream lists changed");
                // Only if the connection listed is still the one in use (not
                // replaced by a restart meanwhile).
                self.update(name, |s| {
                    if s.link.as_ref().is_some_and(|l| Arc::ptr_eq(&l.relay, &link.relay)) {
                        s.catalog = catalog;
                    }
                });
                self.announce_lists_changed();
            }
            Err(e) => tracing::warn!(upstream = %name, error = %e, "upstream re-list failed"),
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
        let connecting = link::connect(&config, Relay::new(relay.clone(), agent_capabilities(downstream)));
        let (service, _) = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
            .await
            .map_err(|_| format!("could not open a session in {} s", CONNECT_TIMEOUT.as_secs()))?
            .map_err(|e| format!("could not open a session: {e}"))?;
        let link = Link { peer: service.peer().clone(), relay, session: Some(Arc::new(service)) };
        // A replaced session starts as the agent left the old one.
        if let Some(level) = downstream.level()
            && supports_logging(&link.peer)
        {
            let _ = link.peer.set_level(SetLevelRequestParams::new(level)).await;
        }
        self.resubscribe(name, &link.peer, downstream.subscriptions()).await;
        tracing::debug!(upstream = %name, session = downstream.key, "upstream session opened for agent session");
        *slot = Some(link.clone());
        Ok(link)
    }

    /// Subscribes `peer` (a new connection to upstream `name`) to those of
    /// `uris` that `name` serves.
    async fn resubscribe(&self, name: &str, peer: &Peer<RoleClient>, uris: Vec<String>) {
        for uri in uris {
            if self.resource_owner(&uri).as_deref() == Some(name) {
                let _ = peer.subscribe(SubscribeRequestParams::new(uri)).await;
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
            self.inner.calls_failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(upstream = %tool.upstream, tool = %tool.name, %message, "upstream call failed");
            crate::mcp::tools::error_result(
                format!("upstream {} could not run {}: {message}", tool.upstream, tool.name),
                serde_json::json!({"error": "upstream_failed", "upstream": tool.upstream, "message": message}),
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
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let in_flight = link.relay.track(origin);
        let handle = match link.peer.send_request_with_option(request, PeerRequestOptions::no_options()).await {
            Ok(handle) => handle,
            Err(e) => return Ok(failed(e.to_string())),
        };
        in_flight.sent(handle.id.clone(), handle.progress_token.clone());
        match relay::await_or_cancel(handle, &origin.ct, "cancelled by the agent").await {
            Ok(ServerResult::CallToolResult(result)) => Ok(result),
            Ok(_) => Ok(failed("the upstream answered tools/call with something else".into())),
            Err(rmcp::service::ServiceError::McpError(e)) => Err(e),
            Err(rmcp::service::ServiceError::Cancelled { .. }) => Ok(cancelled()),
            Err(e) => Ok(failed(e.to_string())),
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

    /// The upstream that serves `uri`: the one that listed it, else one with a
    /// template whose fixed part it starts with. Never a guess: a URI no
    /// upstream offers is not sent to any of them.
    fn resource_owner(&self, uri: &str) -> Option<String> {
        let slots = self.slots();
        let listed = slots.iter().find(|(_, s)| s.catalog.resources.iter().any(|r| r.uri == uri));
        let templated = || {
            slots.iter().find(|(_, s)| {
                s.catalog.templates.iter().any(|t| {
                    let fixed = t.uri_template.split('{').next().unwrap_or_default();
                    t.uri_template == uri || (!fixed.is_empty() && uri.starts_with(fixed))
                })
            })
        };
        listed.or_else(templated).map(|(name, _)| name.clone())
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
        link.peer.get_prompt(params).await.map_err(|e| pass_error("prompts/get", e))
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
        link.peer.read_resource(ReadResourceRequestParams::new(uri)).await.map_err(|e| pass_error("resources/read", e))
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
        link.peer.complete(params).await.map_err(|e| pass_error("completion/complete", e))
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
        if let Err(e) = link.peer.subscribe(SubscribeRequestParams::new(uri)).await {
            downstream.unsubscribe(uri);
            return Err(pass_error("resources/subscribe", e));
        }
        Ok(())
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
        link.peer
            .unsubscribe(UnsubscribeRequestParams::new(uri))
            .await
            .map_err(|e| pass_error("resources/unsubscribe", e))
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
                let _ = link.peer.set_level(SetLevelRequestParams::new(level)).await;
            }
        }
    }

    /// The agent's roots changed: its own upstream sessions hear it (and ask
    /// again). A shared connection does not: whose roots would it ask for?
    pub async fn roots_changed(&self, downstream: &Arc<Downstream>) {
        for cell in downstream.link_cells() {
            let link = cell.lock().await.clone();
            if let Some(link) = link {
                let _ = link.peer.notify_roots_list_changed().await;
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
                last_error: s.last_error.clone(),
                tools: s.catalog.tools.len(),
                restarts: s.restarts,
                pid: s.pid,
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

/// Everything an upstream offers, with tool and prompt names under `prefix`.
async fn load_catalog(peer: &Peer<RoleClient>, prefix: &str) -> Result<Catalog, rmcp::service::ServiceError> {
    let caps = peer.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
    let tools = peer
        .list_all_tools()
        .await?
        .into_iter()
        .map(|mut t| {
            t.name = format!("{prefix}{}", t.name).into();
            t
        })
        .collect();
    let prompts = if caps.prompts.is_some() {
        peer.list_all_prompts()
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|mut p| {
                p.name = format!("{prefix}{}", p.name);
                p
            })
            .collect()
    } else {
        Vec::new()
    };
    let (resources, templates) = if caps.resources.is_some() {
        (
            peer.list_all_resources().await.unwrap_or_default(),
            peer.list_all_resource_templates().await.unwrap_or_default(),
        )
    } else {
        (Vec::new(), Vec::new())
    };
    Ok(Catalog { tools, prompts, resources, templates })
}
