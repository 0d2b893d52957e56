//! The application state: the MCP side's state embedded, plus what the
//! browser side adds. [`AppState::new`] builds it without binding anything,
//! so tests can route requests through [`crate::router::app`] directly.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::FromRef;
use gatehouse_core::Core;
use leptos::config::LeptosOptions;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::mcp::McpState;
use crate::security::AllowList;

/// Shared state of the HTTP handlers.
#[derive(Clone)]
pub struct AppState {
    /// Everything `/mcp` needs (stores, limits, upstreams, sessions, metrics).
    pub mcp: McpState,
    /// Served over HTTPS (cookie attributes, HSTS).
    pub https: bool,
    /// Leptos site settings.
    pub leptos_options: LeptosOptions,
    /// Accepted hosts and origins.
    pub allow: AllowList,
    /// Proxies whose `X-Forwarded-For` names the client (see [`crate::auth::ClientAddr`]).
    pub trusted_proxies: crate::addresses::TrustedProxies,
    /// Failed sign-in and live-stream limits of the browser side.
    pub throttles: crate::throttle::Throttles,
    /// Tokens minted in the browser, held until their page shows them once.
    pub minted: gatehouse_app::server_fns::MintedTokens,
    /// Invite and reset links made in the browser, held until their page shows them once.
    pub links: gatehouse_app::server_fns::HeldLinks,
    /// `[[notify]]` targets and their delivery status (started by [`crate::startup::Application::run`]).
    pub notify: crate::notify::Notifier,
    /// Set once start-up is done (`/readyz`).
    pub ready: crate::health::Readiness,
    /// The running upstreams' sources: the config file and the console's.
    pub upstream_sources: crate::upstream_sources::UpstreamSources,
    /// The notification targets' sources: the config file and the console's.
    pub notify_sources: crate::notify::NotifySources,
}

impl AppState {
    /// The state for a server reachable at `bound` (its links use the public
    /// URL if configured); starts the configured upstreams, their tasks
    /// tracked by the new `mcp.tasks` that the server drains at shutdown.
    pub fn new(config: &Config, core: Core, bound: SocketAddr, shutdown: CancellationToken) -> anyhow::Result<Self> {
        crate::tls::install_crypto_provider();
        // The built-in tools' names, which no upstream tool may shadow.
        let reserved = crate::mcp::tools::all().iter().map(|t| t.name.to_string()).collect();
        let tasks = TaskTracker::new();
        // The file's upstreams and the ones added in the browser, started together.
        let stored = core
            .upstreams
            .stored()
            .inspect_err(|e| tracing::error!(error = %e, "the stored upstreams could not be read: they start later"))
            .ok();
        let running = crate::upstream_sources::UpstreamSources::at_start(config, &stored.clone().unwrap_or_default());
        let upstreams = crate::mcp::upstream::Upstreams::start(
            &running,
            reserved,
            core.live.clone(),
            core.pins.clone(),
            shutdown.clone(),
            tasks.clone(),
        );
        let throttles = crate::throttle::Throttles::new(core.clock.clone()).shared_through(&core.db);
        let base_url = config.base_url(bound);
        let mcp = McpState::new(crate::mcp::McpShared {
            metrics: Arc::default(),
            oauth: crate::oauth::server::OAuthServer::new(&base_url, &config.oauth).fixed(config.public_url.is_some()),
            base_url: base_url.clone(),
            codec: Arc::new(crate::mcp::gate::input_required::load_codec(&config.data_dir, &core.db)?),
            upstreams,
            mcp_sessions: crate::mcp::mcp_sessions::McpSessionBindings::new(
                crate::mcp::session_manager(config.approval_ttl),
                crate::mcp::mcp_sessions::SessionLimits {
                    per_credential: config.max_sessions_per_credential,
                    total: config.max_sessions,
                    idle_timeout: config.session_idle_timeout,
                },
            ),
            slots: crate::mcp::slots::RequestSlots::new(config.max_requests_per_credential, config.mcp_requests()),
            tasks,
            shutdown,
            config: crate::config::live::LiveConfig::new(config.clone()),
            core,
        });
        mcp.config.set_upstreams(running);
        // The file's notification targets and the ones added in the browser, together.
        let stored_targets = mcp
            .core
            .notify
            .all()
            .inspect_err(
                |e| tracing::error!(error = %e, "the stored notification targets could not be read: they start later"),
            )
            .ok();
        let notify = crate::notify::Notifier::new(&crate::notify::NotifySources::at_start(
            &config.notify_targets,
            stored_targets.as_deref().unwrap_or_default(),
        ));
        let notify_sources =
            crate::notify::NotifySources::new(mcp.core.clone(), notify.clone(), &config.notify_targets, stored_targets);
        Ok(Self {
            minted: gatehouse_app::server_fns::MintedTokens::new(&base_url),
            links: gatehouse_app::server_fns::HeldLinks::new(&base_url),
            notify,
            notify_sources,
            upstream_sources: crate::upstream_sources::UpstreamSources::new(config, mcp.clone(), stored),
            mcp,
            https: config.https(),
            leptos_options: leptos_options(),
            allow: AllowList::new(config.public_url.as_ref(), &config.allowed_hosts, &config.allowed_origins),
            trusted_proxies: crate::addresses::TrustedProxies::new(config.proxy_networks.clone()),
            throttles,
            ready: crate::health::Readiness::default(),
        })
    }

    /// The shared stores.
    pub fn core(&self) -> &Core {
        &self.mcp.core
    }
}

// Sub-states: a handler takes only what it reads (`State<Core>`), and its
// file needs nothing of `AppState`.

impl FromRef<AppState> for Core {
    fn from_ref(state: &AppState) -> Self {
        state.mcp.core.clone()
    }
}

impl FromRef<AppState> for McpState {
    fn from_ref(state: &AppState) -> Self {
        state.mcp.clone()
    }
}

impl FromRef<AppState> for crate::oauth::server::OAuthServer {
    fn from_ref(state: &AppState) -> Self {
        state.mcp.oauth.clone()
    }
}

impl FromRef<AppState> for crate::health::Health {
    fn from_ref(state: &AppState) -> Self {
        Self { core: state.mcp.core.clone(), ready: state.ready.clone(), shutdown: state.mcp.shutdown.clone() }
    }
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

/// Leptos settings from the top-level `Leptos.toml`, compiled in.
/// The bundle's name is this build's content-hashed one
/// ([`crate::site::bundle_name`]), so pages link files a browser may keep.
pub fn leptos_options() -> LeptosOptions {
    let mut options =
        leptos::config::get_config_from_str(include_str!("../Leptos.toml")).expect("Leptos.toml is valid");
    options.output_name = crate::site::bundle_name().into();
    options
}

/// A state over an in-memory database and a temporary data dir, for the
/// unit tests that route requests through [`crate::router::app`].
#[cfg(test)]
pub(crate) fn for_tests() -> (AppState, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.data_dir = dir.path().to_path_buf();
    let core = Core::new(
        gatehouse_core::Db::open_in_memory().unwrap(),
        Arc::new(gatehouse_core::SystemClock),
        config.settings(),
    )
    .unwrap();
    (AppState::new(&config, core, config.listen, CancellationToken::new()).unwrap(), dir)
}
