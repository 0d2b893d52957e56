//! Building and running the server: bind the listener, assemble the router
//! (`app`), serve with graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::FromRef;
use axum::middleware::{from_fn, from_fn_with_state};
use axum::response::IntoResponse;
use axum::routing::get;
use gatehouse_app::{App, shell};
use gatehouse_core::{Core, Db, SystemClock};
use leptos::config::LeptosOptions;
use leptos::prelude::provide_context;
use leptos_axum::{LeptosRoutes, generate_route_list};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_cookies::CookieManagerLayer;

use crate::config::Config;
use crate::mcp::{self, McpState, auth::AuthMetrics};
use crate::security::{self, AllowList};
use crate::{api, auth, site};

/// Shared state of the HTTP handlers.
#[derive(Clone)]
pub struct AppState {
    /// Stores shared with the site's server functions.
    pub core: Core,
    /// The base URL for links and client configs (public URL or bound address).
    pub base_url: String,
    /// Served over HTTPS (cookie attributes).
    pub https: bool,
    /// Leptos site settings.
    pub leptos_options: LeptosOptions,
    /// Cancelled at shutdown; long-lived streams end with it.
    pub shutdown: CancellationToken,
    /// Accepted hosts and origins.
    pub allow: AllowList,
    /// Credential rejection counters.
    pub auth_metrics: Arc<AuthMetrics>,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Seals 2026-07-28 `requestState` values.
    pub codec: Arc<rmcp::model::RequestStateCodec>,
    /// Whether model-mode sessions may decide their own calls.
    pub allow_model_decisions: bool,
    /// How native mode asks URL-capable 2025-11-25 clients.
    pub native_url: crate::config::NativeUrl,
    /// Upstream MCP servers (supervised).
    pub upstreams: crate::upstream::Upstreams,
    /// Items per page of the merged MCP lists.
    pub list_page_size: usize,
    /// Which credential each MCP session belongs to; the session caps.
    pub sessions: Arc<crate::mcp::sessions::SessionBindings>,
    /// Trust switches and caps.
    pub limits: crate::config::Limits,
    /// Failed sign-in and live-stream limits of the browser side.
    pub throttles: crate::throttle::Throttles,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

/// Leptos settings from the top-level `Leptos.toml`, compiled in.
pub fn leptos_options() -> LeptosOptions {
    leptos::config::get_config_from_str(include_str!("../Leptos.toml")).expect("Leptos.toml is valid")
}

/// The whole router: `/mcp`, the API, the site. Tests call this directly.
pub fn app(state: AppState) -> Router {
    let mcp = mcp::router(
        McpState {
            core: state.core.clone(),
            max_body_bytes: state.max_body_bytes,
            metrics: state.auth_metrics.clone(),
            base_url: state.base_url.clone(),
            codec: state.codec.clone(),
            allow_model_decisions: state.allow_model_decisions,
            native_url: state.native_url,
            upstreams: state.upstreams.clone(),
            list_page_size: state.list_page_size,
            sessions: state.sessions.clone(),
            limits: state.limits.clone(),
        },
        &state.allow,
        state.shutdown.clone(),
    );
    let core = state.core.clone();
    let pages = Router::<AppState>::new()
        .leptos_routes_with_context(&state, generate_route_list(App), move || provide_context(core.clone()), {
            let options = state.leptos_options.clone();
            move || shell(options.clone())
        })
        .layer(from_fn(auth::require_user_for_pages));
    // Unknown paths: a JSON 404 under /api, the site's own 404 page elsewhere.
    let not_found_page = {
        let core = state.core.clone();
        let options = state.leptos_options.clone();
        leptos_axum::render_app_to_stream_with_context(
            move || provide_context(core.clone()),
            move || shell(options.clone()),
        )
    };
    let fallback = move |request: axum::extract::Request| {
        let not_found_page = not_found_page.clone();
        async move {
            if request.uri().path().starts_with("/api/") {
                let message = format!("no route for {} {}", request.method(), request.uri().path());
                crate::error::ApiError::NotFound(message).into_response()
            } else {
                not_found_page(request).await.into_response()
            }
        }
    };
    let site = Router::new()
        .merge(api::router())
        .merge(pages)
        .fallback(fallback)
        .route("/pkg/{*path}", get(site::pkg))
        .route("/favicon.ico", get(site::favicon))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(admin_metrics))
        .layer(from_fn_with_state(state.clone(), auth::load_user))
        .layer(CookieManagerLayer::new())
        .layer(axum::extract::DefaultBodyLimit::max(state.max_body_bytes))
        .with_state(state.clone());
    // The security headers go outermost, so refusals (a foreign Host, a
    // cross-site POST) carry them too.
    Router::new()
        .merge(mcp)
        .merge(site)
        .layer(from_fn_with_state(state.allow.clone(), security::check_host_and_origin))
        .layer(from_fn_with_state(security::HeaderPolicy { https: state.https }, security::security_headers))
}

/// `GET /metrics` on the main address: for an admin (API token or browser
/// session) only, since it names upstreams and counts what agents do.
async fn admin_metrics(axum::extract::State(state): axum::extract::State<AppState>, _admin: auth::Admin) -> String {
    metrics(&state)
}

/// `/metrics` alone, without authentication, for the `metrics_listen` address.
pub fn metrics_router(state: AppState) -> Router {
    let policy = security::HeaderPolicy { https: state.https };
    Router::new()
        .route(
            "/metrics",
            get(|axum::extract::State(state): axum::extract::State<AppState>| async move { metrics(&state) }),
        )
        .with_state(state)
        .layer(from_fn_with_state(policy, security::security_headers))
}

/// The Prometheus text of `/metrics`.
fn metrics(state: &AppState) -> String {
    use std::fmt::Write;
    let auth = &state.auth_metrics;
    let approvals = &state.core.approvals;
    let m = approvals.metrics();
    let mut out = String::new();
    let _ = write!(
        out,
        "# HELP gatehouse_credentials_rejected_total MCP requests refused for their credential.\n\
         # TYPE gatehouse_credentials_rejected_total counter\n\
         gatehouse_credentials_rejected_total{{reason=\"missing_bearer_token\"}} {}\n\
         gatehouse_credentials_rejected_total{{reason=\"unknown_or_expired_token\"}} {}\n\
         # HELP gatehouse_mcp_sessions Connected MCP sessions.\n\
         # TYPE gatehouse_mcp_sessions gauge\n\
         gatehouse_mcp_sessions {}\n\
         # HELP gatehouse_approvals_pending Executions waiting for a decision.\n\
         # TYPE gatehouse_approvals_pending gauge\n\
         gatehouse_approvals_pending {}\n\
         # HELP gatehouse_approval_store_entries Live entries in the approval store (pending, approved, running).\n\
         # TYPE gatehouse_approval_store_entries gauge\n\
         gatehouse_approval_store_entries {}\n\
         # HELP gatehouse_approval_decisions_total Decisions on paused executions.\n\
         # TYPE gatehouse_approval_decisions_total counter\n",
        auth.missing.load(Ordering::Relaxed),
        auth.unknown.load(Ordering::Relaxed),
        state.core.live.sessions().len(),
        approvals.pending().len(),
        approvals.len(),
    );
    for (i, name) in ["accept", "decline", "cancel", "expire"].iter().enumerate() {
        let _ = writeln!(
            out,
            "gatehouse_approval_decisions_total{{decision=\"{name}\"}} {}",
            m.decisions[i].load(Ordering::Relaxed)
        );
    }
    out.push_str("# HELP gatehouse_approval_wait_seconds Time from pause to decision.\n# TYPE gatehouse_approval_wait_seconds histogram\n");
    let mut cumulative = 0;
    for (i, bound) in gatehouse_core::approvals::WAIT_BUCKETS.iter().enumerate() {
        cumulative += m.wait_buckets[i].load(Ordering::Relaxed);
        let _ = writeln!(out, "gatehouse_approval_wait_seconds_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    cumulative += m.wait_buckets[gatehouse_core::approvals::WAIT_BUCKETS.len()].load(Ordering::Relaxed);
    let _ = writeln!(out, "gatehouse_approval_wait_seconds_bucket{{le=\"+Inf\"}} {cumulative}");
    let _ =
        writeln!(out, "gatehouse_approval_wait_seconds_sum {}", m.wait_sum_ms.load(Ordering::Relaxed) as f64 / 1000.0);
    let _ = writeln!(out, "gatehouse_approval_wait_seconds_count {cumulative}");
    out.push_str("# HELP gatehouse_upstream_up Whether an upstream MCP server is connected (1) or not (0).\n# TYPE gatehouse_upstream_up gauge\n");
    let upstreams = state.upstreams.status();
    for u in &upstreams {
        let _ = writeln!(
            out,
            "gatehouse_upstream_up{{upstream=\"{}\",health=\"{}\"}} {}",
            u.name,
            u.health.as_str(),
            u8::from(u.health == crate::upstream::Health::Up)
        );
    }
    out.push_str("# HELP gatehouse_upstream_tools Tools an upstream exposes.\n# TYPE gatehouse_upstream_tools gauge\n");
    for u in &upstreams {
        let _ = writeln!(out, "gatehouse_upstream_tools{{upstream=\"{}\"}} {}", u.name, u.tools);
    }
    out.push_str("# HELP gatehouse_upstream_restarts_total Times an upstream was (re)started after ending.\n# TYPE gatehouse_upstream_restarts_total counter\n");
    for u in &upstreams {
        let _ = writeln!(out, "gatehouse_upstream_restarts_total{{upstream=\"{}\"}} {}", u.name, u.restarts);
    }
    out
}

/// A bound, ready-to-run server.
pub struct Application {
    listener: TcpListener,
    router: Router,
    address: SocketAddr,
    state: AppState,
    /// The unauthenticated `/metrics` listener, if configured.
    metrics_listener: Option<TcpListener>,
    /// Audit entries older than this are deleted in the background.
    audit_retention: std::time::Duration,
}

impl Application {
    /// Opens the data directory and database, binds the listener (port 0
    /// picks a free one) and assembles the router.
    pub async fn build(config: &Config, shutdown: CancellationToken) -> anyhow::Result<Self> {
        gatehouse_core::db::create_data_dir(&config.data_dir)
            .map_err(|e| anyhow::anyhow!("cannot create data dir {}: {e}", config.data_dir.display()))?;
        let db = Db::open(&config.data_dir)?;
        let core = Core::new(db, Arc::new(SystemClock), config.settings())?;
        Self::build_with_core(config, core, shutdown).await
    }

    /// Like [`Application::build`] over prepared stores (tests inject a clock).
    pub async fn build_with_core(config: &Config, core: Core, shutdown: CancellationToken) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
        let address = listener.local_addr()?;
        crate::upstream::link::install_crypto_provider();
        let upstreams = crate::upstream::Upstreams::start(&config.upstreams, core.live.clone(), shutdown.clone());
        let core_clock = core.clock.clone();
        let state = AppState {
            core,
            base_url: config.base_url(address),
            https: config.https(),
            leptos_options: leptos_options(),
            shutdown: shutdown.clone(),
            allow: AllowList::new(config.public_url.as_ref(), &config.allowed_hosts, &config.allowed_origins),
            auth_metrics: Arc::default(),
            max_body_bytes: config.max_body_bytes,
            codec: Arc::new(crate::mcp::gate::input_required::load_codec(&config.data_dir)?),
            allow_model_decisions: config.allow_model_decisions,
            native_url: config.native_url,
            upstreams,
            list_page_size: config.list_page_size,
            sessions: crate::mcp::sessions::SessionBindings::new(
                crate::mcp::session_manager(config.approval_ttl),
                config.limits.max_sessions_per_credential,
                config.limits.max_sessions,
            ),
            limits: config.limits.clone(),
            throttles: crate::throttle::Throttles::new(core_clock),
        };
        let metrics_listener = match config.metrics_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot listen on {addr} for metrics: {e}"))?,
            ),
            None => None,
        };
        Ok(Self {
            router: app(state.clone()),
            listener,
            address,
            state,
            metrics_listener,
            audit_retention: config.audit_retention,
        })
    }

    /// The bound address of the unauthenticated `/metrics` listener, if any.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics_listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The shared state (for start-up messages and tests).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until the shutdown token is cancelled, then drains.
    pub async fn run(self) -> anyhow::Result<()> {
        if !site::has_front_end() {
            tracing::warn!(
                "this binary was built without the front end; pages will not hydrate (run scripts/build.sh)"
            );
        }
        tracing::info!(address = %self.address, "listening");
        let state = self.state;
        let shutdown = state.shutdown.clone();
        let sweeper =
            tokio::spawn(crate::mcp::sessions::sweeper(state.core.clone(), state.sessions.clone(), shutdown.clone()));
        let housekeeping =
            tokio::spawn(crate::housekeeping::run(state.core.clone(), self.audit_retention, shutdown.clone()));
        let limits = crate::server::ConnectionLimits {
            max_connections: state.limits.max_connections,
            header_read_timeout: state.limits.header_read_timeout,
        };
        let metrics = self.metrics_listener.map(|listener| {
            tracing::info!(address = ?listener.local_addr().ok(), "serving /metrics without authentication");
            tokio::spawn(crate::server::serve(listener, metrics_router(state.clone()), limits, shutdown.clone()))
        });
        crate::server::serve(self.listener, self.router, limits, shutdown).await;
        sweeper.await?;
        housekeeping.await?;
        if let Some(metrics) = metrics {
            metrics.await?;
        }
        Ok(())
    }
}
