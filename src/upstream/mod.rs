//! Upstream MCP servers behind the gate: one supervised rmcp client per
//! `[[upstream]]` (a stdio child process or a Streamable HTTP server), its
//! tools exposed under the upstream's prefix, restarted with backoff when it
//! dies, its health visible in `/metrics`.
//!
//! Scope today: tools (listing, gated calls). Resources, prompts and the
//! server→client requests (sampling, elicitation, roots) are not proxied yet.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ErrorData, GetPromptRequestParams, GetPromptResult, Prompt,
    ReadResourceRequestParams, ReadResourceResult, Resource, ResourceTemplate, Tool,
};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use tokio_util::sync::CancellationToken;

use gatehouse_core::live::{LiveHub, UpstreamInfo};

use crate::config::UpstreamConfig;

/// Health of one upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Connected; its tools are exposed.
    Up,
    /// Not connected (yet, or it failed and is waiting to restart).
    Down,
    /// Disabled in the config.
    Disabled,
}

impl Health {
    /// The name shown in metrics and pages.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Up => "up",
            Health::Down => "down",
            Health::Disabled => "disabled",
        }
    }
}

struct Slot {
    config: UpstreamConfig,
    health: Health,
    last_error: Option<String>,
    tools: Vec<Tool>,
    prompts: Vec<Prompt>,
    resources: Vec<Resource>,
    templates: Vec<ResourceTemplate>,
    peer: Option<Peer<RoleClient>>,
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

/// All upstreams; cheap to clone.
#[derive(Clone, Default)]
pub struct Upstreams {
    slots: Arc<RwLock<HashMap<String, Slot>>>,
    calls_failed: Arc<AtomicU64>,
    live: Option<LiveHub>,
}

const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl Upstreams {
    /// Starts a supervisor per enabled upstream; they stop at `shutdown`.
    /// Health changes are published to `live` for the upstreams page.
    pub fn start(configs: &[UpstreamConfig], live: LiveHub, shutdown: CancellationToken) -> Self {
        let upstreams = Upstreams { live: Some(live), ..Upstreams::default() };
        for config in configs {
            let health = if config.enabled { Health::Down } else { Health::Disabled };
            upstreams.slots.write().unwrap_or_else(|p| p.into_inner()).insert(
                config.name.clone(),
                Slot {
                    config: config.clone(),
                    health,
                    last_error: None,
                    tools: Vec::new(),
                    prompts: Vec::new(),
                    resources: Vec::new(),
                    templates: Vec::new(),
                    peer: None,
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

    fn update(&self, name: &str, f: impl FnOnce(&mut Slot)) {
        if let Some(slot) = self.slots.write().unwrap_or_else(|p| p.into_inner()).get_mut(name) {
            f(slot);
        }
        self.publish();
    }

    fn publish(&self) {
        let Some(live) = &self.live else { return };
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<UpstreamInfo> = slots
            .iter()
            .map(|(name, s)| UpstreamInfo {
                name: name.clone(),
                health: s.health.as_str().to_string(),
                transport: if s.config.command.is_some() { "stdio" } else { "http" }.to_string(),
                tools: s.tools.len(),
                restarts: s.restarts,
                last_error: s.last_error.clone(),
            })
            .collect();
        drop(slots);
        all.sort_by(|a, b| a.name.cmp(&b.name));
        live.set_upstreams(all);
    }

    /// Keeps one upstream connected: connect, list tools, wait for it to end,
    /// back off (1 s doubling to 30 s, reset after a healthy minute), repeat.
    async fn supervise(self, config: UpstreamConfig, shutdown: CancellationToken) {
        let mut backoff = Duration::from_secs(1);
        loop {
            let started = tokio::time::Instant::now();
            match connect(&config).await {
                Ok((service, pid)) => {
                    self.update(&config.name, |s| s.pid = pid);
                    let peer = service.peer().clone();
                    match peer.list_all_tools().await {
                        Ok(tools) => {
                            let prefix = config.prefix();
                            let exposed: Vec<Tool> = tools
                                .into_iter()
                                .map(|mut t| {
                                    t.name = format!("{prefix}{}", t.name).into();
                                    t
                                })
                                .collect();
                            let (prompts, resources, templates) = list_extras(&peer, &prefix).await;
                            tracing::info!(upstream = %config.name, tools = exposed.len(), prompts = prompts.len(), resources = resources.len(), "upstream up");
                            self.update(&config.name, |s| {
                                s.health = Health::Up;
                                s.tools = exposed;
                                s.prompts = prompts;
                                s.resources = resources;
                                s.templates = templates;
                                s.peer = Some(peer);
                                s.last_error = None;
                            });
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
                    tracing::warn!(upstream = %config.name, error = %e, "upstream failed to start");
                    self.update(&config.name, |s| s.last_error = Some(e.to_string()));
                }
            }
            self.update(&config.name, |s| {
                s.health = Health::Down;
                s.tools.clear();
                s.prompts.clear();
                s.resources.clear();
                s.templates.clear();
                s.peer = None;
                s.pid = None;
                s.restarts += 1;
            });
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

    /// Every exposed upstream tool.
    pub fn tools(&self) -> Vec<UpstreamTool> {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        let mut all = Vec::new();
        for (name, slot) in slots.iter() {
            let prefix = slot.config.prefix();
            for tool in &slot.tools {
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
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        slots.iter().find_map(|(name, slot)| {
            let tool = slot.tools.iter().find(|t| t.name == exposed)?;
            let prefix = slot.config.prefix();
            Some(UpstreamTool {
                upstream: name.clone(),
                name: exposed.strip_prefix(prefix.as_str()).unwrap_or(exposed).to_string(),
                tool: tool.clone(),
            })
        })
    }

    /// Calls `tool` at its upstream. A call in flight when the upstream dies
    /// gets an error result.
    pub async fn call(&self, tool: &UpstreamTool, arguments: &serde_json::Value) -> CallToolResult {
        let peer =
            self.slots.read().unwrap_or_else(|p| p.into_inner()).get(&tool.upstream).and_then(|s| s.peer.clone());
        let failed = |message: String| {
            self.calls_failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(upstream = %tool.upstream, tool = %tool.name, %message, "upstream call failed");
            crate::mcp::tools::error_result(
                format!("upstream {} could not run {}: {message}", tool.upstream, tool.name),
                serde_json::json!({"error": "upstream_failed", "upstream": tool.upstream, "message": message}),
            )
        };
        let Some(peer) = peer else { return failed("the upstream is down".into()) };
        let mut params = CallToolRequestParams::new(tool.name.clone());
        if let Some(args) = arguments.as_object() {
            params = params.with_arguments(args.clone());
        }
        match peer.call_tool(params).await {
            Ok(result) => result,
            Err(e) => failed(e.to_string()),
        }
    }

    /// Whether any upstream is configured (then prompts and resources are offered).
    pub fn any(&self) -> bool {
        !self.slots.read().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Every upstream prompt, under its upstream's prefix.
    pub fn prompts(&self) -> Vec<Prompt> {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<Prompt> = slots.values().flat_map(|s| s.prompts.iter().cloned()).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Every upstream resource (URIs as the upstream gives them).
    pub fn resources(&self) -> Vec<Resource> {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        slots.values().flat_map(|s| s.resources.iter().cloned()).collect()
    }

    /// Every upstream resource template.
    pub fn resource_templates(&self) -> Vec<ResourceTemplate> {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        slots.values().flat_map(|s| s.templates.iter().cloned()).collect()
    }

    /// `prompts/get` for an exposed prompt name.
    pub async fn get_prompt(
        &self,
        exposed: &str,
        arguments: Option<rmcp::model::JsonObject>,
    ) -> Result<GetPromptResult, ErrorData> {
        let target = {
            let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
            slots.values().find_map(|s| {
                let prefix = s.config.prefix();
                s.prompts
                    .iter()
                    .any(|p| p.name == exposed)
                    .then(|| (s.peer.clone(), exposed.strip_prefix(prefix.as_str()).unwrap_or(exposed).to_string()))
            })
        };
        let Some((Some(peer), name)) = target else {
            return Err(ErrorData::invalid_params(format!("Unknown prompt: {exposed}"), None));
        };
        let mut params = GetPromptRequestParams::new(name);
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        peer.get_prompt(params)
            .await
            .map_err(|e| ErrorData::internal_error(format!("upstream prompt failed: {e}"), None))
    }

    /// `resources/read`: the upstream that listed `uri`, else the first that can read it.
    pub async fn read_resource(&self, uri: &str) -> Result<ReadResourceResult, ErrorData> {
        let peers: Vec<Peer<RoleClient>> = {
            let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
            let mut ordered: Vec<&Slot> = slots.values().filter(|s| s.peer.is_some()).collect();
            ordered.sort_by_key(|s| !s.resources.iter().any(|r| r.uri == uri));
            ordered.into_iter().filter_map(|s| s.peer.clone()).collect()
        };
        for peer in peers {
            if let Ok(result) = peer.read_resource(ReadResourceRequestParams::new(uri)).await {
                return Ok(result);
            }
        }
        Err(ErrorData::resource_not_found(format!("Resource not found: {uri}"), None))
    }

    /// Health of every upstream, by name.
    pub fn status(&self) -> Vec<Status> {
        let slots = self.slots.read().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<Status> = slots
            .iter()
            .map(|(name, s)| Status {
                name: name.clone(),
                health: s.health,
                last_error: s.last_error.clone(),
                tools: s.tools.len(),
                restarts: s.restarts,
                pid: s.pid,
            })
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Upstream calls that ended in a transport error.
    pub fn calls_failed(&self) -> u64 {
        self.calls_failed.load(Ordering::Relaxed)
    }
}

/// The upstream's prompts (renamed under `prefix`), resources and templates,
/// for whichever of them it declares.
async fn list_extras(peer: &Peer<RoleClient>, prefix: &str) -> (Vec<Prompt>, Vec<Resource>, Vec<ResourceTemplate>) {
    let caps = peer.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
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
    (prompts, resources, templates)
}

/// Starts the client for one upstream.
async fn connect(config: &UpstreamConfig) -> anyhow::Result<(RunningService<RoleClient, ()>, Option<u32>)> {
    if let Some(command) = &config.command {
        let mut cmd = tokio::process::Command::new(command);
        cmd.args(&config.args).envs(&config.env);
        if let Some(cwd) = &config.cwd {
            cmd.current_dir(cwd);
        }
        let (transport, stderr) = TokioChildProcess::builder(cmd).stderr(std::process::Stdio::piped()).spawn()?;
        if let Some(stderr) = stderr {
            let name = config.name.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncBufReadExt;
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(upstream = %name, "{line}");
                }
            });
        }
        let pid = transport.id();
        return Ok((().serve(transport).await?, pid));
    }
    let url = config.url.as_ref().ok_or_else(|| anyhow::anyhow!("no command or url"))?;
    // Only the configured headers go upstream; a client's token never does.
    let mut headers = HashMap::new();
    for (name, value) in &config.headers {
        headers.insert(http::HeaderName::try_from(name.as_str())?, http::HeaderValue::try_from(value.as_str())?);
    }
    let transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
        .custom_headers(headers)
        // Every downstream session shares this client: rmcp's default of 16
        // requests in flight would queue the rest.
        .max_concurrent_requests(256)
        .reinit_on_expired_session(true);
    Ok((().serve(StreamableHttpClientTransport::from_config(transport_config)).await?, None))
}
