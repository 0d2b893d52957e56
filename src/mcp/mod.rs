//! The `/mcp` endpoint: rmcp's Streamable HTTP service nested in the axum
//! router, behind Gatehouse's bearer authentication.

pub mod auth;
pub mod gate;
pub mod handler;
pub mod mcp_sessions;
pub mod paging;
pub mod results;
pub mod slots;
pub mod subjects;
pub mod tool_overview;
pub mod tools;
pub mod upstream;

use std::sync::Arc;

use axum::Router;
use gatehouse_core::Core;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::mcp::upstream::agent_streams::WatchedMcpSessions;
use crate::security::AllowList;

/// What the MCP side needs from the server: one `Arc`, cloned per request.
#[derive(Clone)]
pub struct McpState(Arc<McpShared>);

impl McpState {
    /// Wraps the shared parts.
    pub fn new(shared: McpShared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for McpState {
    type Target = McpShared;
    fn deref(&self) -> &McpShared {
        &self.0
    }
}

/// The parts of [`McpState`].
pub struct McpShared {
    /// Shared stores.
    pub core: Core,
    /// The configuration it runs with (limits, trust switches, page size);
    /// a reload swaps in the keys that apply at once.
    pub config: crate::config::live::LiveConfig,
    /// Counters exported at `/metrics`.
    pub metrics: Arc<auth::AuthMetrics>,
    /// Base URL for approval links.
    pub base_url: String,
    /// The OAuth authorization server's settings (challenges, the resource).
    pub oauth: crate::oauth::server::OAuthServer,
    /// Seals and opens 2026-07-28 `requestState` values (key in the data dir).
    pub codec: Arc<rmcp::model::RequestStateCodec>,
    /// Upstream MCP servers.
    pub upstreams: crate::mcp::upstream::Upstreams,
    /// Which credential each session belongs to; the session caps.
    pub mcp_sessions: Arc<mcp_sessions::McpSessionBindings>,
    /// `/mcp` requests in progress, per credential and in all.
    pub slots: Arc<slots::RequestSlots>,
    /// Every background task the server spawns (upstream supervisors and
    /// relays, the session sweeper, housekeeping, connections, URL
    /// elicitations): [`crate::startup::Application::run`] closes it and waits
    /// for it after the server has drained, so none is cut off mid-way.
    pub tasks: TaskTracker,
    /// Cancelled at shutdown; long-lived streams and tasks end with it.
    pub shutdown: CancellationToken,
}

/// rmcp's session manager. Idle sessions are closed by Gatehouse itself,
/// sooner and only when nothing is in progress
/// ([`mcp_sessions::McpSessionBindings::close_idle`], `session_idle_timeout`);
/// rmcp's own keep-alive, which counts only messages, is the backstop for a
/// session that is in use but silent (a stream with nothing to say), so it
/// waits until a pending call could have expired anyway.
pub fn session_manager(approval_ttl: std::time::Duration) -> Arc<LocalSessionManager> {
    let mut sessions = LocalSessionManager::default();
    let idle = sessions.session_config.keep_alive.unwrap_or_default();
    sessions.session_config.keep_alive = Some(idle.max(approval_ttl + std::time::Duration::from_secs(60)));
    Arc::new(sessions)
}

/// The `/mcp` routes: authentication in front of rmcp's service, whose
/// sessions and streams end at shutdown.
pub fn router(state: McpState, allow: &AllowList) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allow.hosts().to_vec())
        .with_allowed_origins(allow.mcp_origins().to_vec())
        .with_max_request_body_bytes(state.config.load().max_body_bytes)
        .with_cancellation_token(state.shutdown.clone());
    let factory_state = state.clone();
    // Relayed upstream requests need to know which agent streams are open.
    let sessions = WatchedMcpSessions::new(state.mcp_sessions.manager().clone(), state.upstreams.agent_streams());
    let service = StreamableHttpService::new(
        move || Ok(handler::GatehouseMcp::new(factory_state.clone())),
        Arc::new(sessions),
        config,
    );
    Router::new()
        .nest_service("/mcp", Endpoint(Arc::new(service)))
        .layer(axum::middleware::from_fn_with_state(state, auth::authenticate))
}

/// rmcp's service behind one `Arc`. axum's route and every middleware layer
/// clone the endpoint for each request, and rmcp's own `Clone` copies its
/// whole config (the host and origin lists, and a cancellation token whose
/// clone and drop take a lock): four times per request without this.
#[derive(Clone)]
struct Endpoint(Arc<StreamableHttpService<handler::GatehouseMcp, WatchedMcpSessions<LocalSessionManager>>>);

impl tower::Service<axum::extract::Request> for Endpoint {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: axum::extract::Request) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { Ok(service.handle(request).await.map(axum::body::Body::new)) })
    }
}
