//! Building and running the server: open the data dir, bind the listener,
//! assemble the router ([`crate::router::app`]), serve until shutdown and
//! drain the background tasks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use gatehouse_core::cluster::Cluster;
use gatehouse_core::{Core, Db, SystemClock};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::site;
use crate::state::AppState;

/// Creates the data directory if needed and opens the configured database:
/// PostgreSQL at `database_url`, or SQLite in the data directory. Migrates it.
pub fn open_db(config: &Config) -> anyhow::Result<Db> {
    // The data dir holds more than the SQLite file (the request-state key).
    gatehouse_core::db::create_data_dir(&config.data_dir)
        .with_context(|| format!("cannot create data dir {}", config.data_dir.display()))?;
    if let Some(url) = config.database_url() {
        gatehouse_core::db::restrict_permissions(&config.data_dir)
            .with_context(|| format!("cannot make data dir {} owner-only", config.data_dir.display()))?;
        return Db::connect(url).with_context(|| format!("cannot open the PostgreSQL database at {}", redact(url)));
    }
    Db::open(&config.data_dir).with_context(|| format!("cannot open the database in {}", config.data_dir.display()))
}

/// The database and the stores over it: the one way the server and the CLI
/// reach the stores.
pub fn open_core(config: &Config) -> anyhow::Result<Core> {
    Ok(Core::new(open_db(config)?, Arc::new(SystemClock), config.settings())?)
}

/// A database URL fit for a log line or an error: the password removed.
pub fn redact(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else { return "(unparsable URL)".to_string() };
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some("***"));
    }
    // libpq-style URLs may carry it as a parameter too.
    if parsed.query_pairs().any(|(k, _)| k == "password") {
        let kept: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| (k.to_string(), if k == "password" { "***".to_string() } else { v.to_string() }))
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(kept);
    }
    parsed.to_string()
}

/// A bound, ready-to-run server.
pub struct Application {
    listener: TcpListener,
    router: Router,
    address: SocketAddr,
    state: AppState,
    /// The unauthenticated `/metrics` listener, if configured.
    metrics_listener: Option<TcpListener>,
    /// How long and how much of the audit log the background sweep keeps.
    retention: crate::housekeeping::Retention,
    /// The other replicas on the same PostgreSQL, if any.
    cluster: Option<Cluster>,
    /// HTTPS on the listener (`tls_cert`, `tls_key`), if configured.
    https: Option<crate::https::Https>,
}

impl Application {
    /// Opens the data directory and database, binds the listener (port 0
    /// picks a free one) and assembles the router.
    pub async fn build(config: &Config, shutdown: CancellationToken) -> anyhow::Result<Self> {
        Self::build_with_core(config, open_core(config)?, shutdown).await
    }

    /// Like [`Application::build`] over prepared stores (tests inject a clock).
    pub async fn build_with_core(config: &Config, core: Core, shutdown: CancellationToken) -> anyhow::Result<Self> {
        // On PostgreSQL, join the other replicas first: restore then takes
        // only what no live replica holds.
        let db = core.db.clone();
        let (clock, live) = (core.clock.clone(), core.live.clone());
        let cluster = core
            .run(move |_| Cluster::join(&db, clock, |cluster| live.join(cluster)))
            .await?
            .context("cannot join the other replicas on PostgreSQL")?;
        if let Some(cluster) = &cluster {
            core.approvals.join(cluster.clone());
        }
        // What a previous run left paused is live again before anything is served.
        core.approvals.restore().await.context("cannot restore the paused executions")?;
        // The certificate is read before anything listens: a bad file stops the start.
        let https = match config.tls() {
            Some(files) => Some(crate::https::Https::load(files).await.context("cannot serve HTTPS")?),
            None => None,
        };
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
        let address = listener.local_addr()?;
        let state = AppState::new(config, core, address, shutdown)?;
        let metrics_listener = match config.metrics_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot listen on {addr} for metrics: {e}"))?,
            ),
            None => None,
        };
        Ok(Self {
            router: crate::router::app(state.clone()),
            listener,
            address,
            state,
            metrics_listener,
            retention: crate::housekeeping::Retention::of(config),
            cluster,
            https,
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

    /// Serves until the shutdown token is cancelled, then drains: the open
    /// connections (up to [`crate::server::DRAIN_TIMEOUT`]), then every
    /// background task (up to [`TASKS_DRAIN_TIMEOUT`]).
    pub async fn run(self) -> anyhow::Result<()> {
        if !site::has_front_end() {
            tracing::warn!(
                "this binary was built without the front end; pages will not hydrate (run scripts/build.sh)"
            );
        }
        tracing::info!(address = %self.address, "listening");
        let state = self.state;
        let shutdown = state.mcp.shutdown.clone();
        let tasks = state.mcp.tasks.clone();
        let sweeper = tasks.spawn(crate::mcp::mcp_sessions::sweeper(
            state.core().clone(),
            state.mcp.mcp_sessions.clone(),
            state.mcp.upstreams.listeners().clone(),
            shutdown.clone(),
        ));
        state.notify.start(state.core(), &state.mcp.base_url, &tasks, &shutdown);
        // The console's upstreams (the database's), started now and followed.
        state.upstream_sources.watch(shutdown.clone(), &tasks);
        state.notify_sources.watch(shutdown.clone(), &tasks);
        let housekeeping =
            tasks.spawn(crate::housekeeping::run(state.core().clone(), self.retention, shutdown.clone()));
        // Other replicas' decisions, hand-overs and executions (none on SQLite).
        let following = {
            let (approvals, stop) = (state.core().approvals.clone(), shutdown.clone());
            tasks.spawn(async move { approvals.follow(stop.cancelled_owned()).await })
        };
        let limits = crate::server::ConnectionLimits {
            max_connections: state.mcp.config.load().max_connections,
            header_read_timeout: state.mcp.config.load().header_read_timeout,
            idle_timeout: state.mcp.config.load().idle_timeout,
        };
        let metrics = self.metrics_listener.map(|listener| {
            tracing::info!(address = ?listener.local_addr().ok(), "serving /metrics without authentication");
            tasks.spawn(crate::server::serve(
                listener,
                crate::metrics::metrics_router(state.clone()),
                None,
                limits,
                shutdown.clone(),
                tasks.clone(),
            ))
        });
        // Rules that match no tool (once the upstreams are listed) are logged.
        tasks.spawn(crate::mcp::tool_overview::warn_unmatched_rules(
            state.mcp.clone(),
            crate::mcp::tool_overview::UNMATCHED_CHECK_WAIT,
            shutdown.clone(),
        ));
        // Start-up is done: migrated, paused executions restored, tasks running.
        state.ready.set_ready();
        if let Some(https) = &self.https {
            https.follow(shutdown.clone(), &tasks);
        }
        let tls = self.https.as_ref().map(|https| https.acceptor().clone());
        crate::server::serve(self.listener, self.router, tls, limits, shutdown, tasks.clone()).await;
        drain(&tasks).await;
        // Every queued write (paused executions, audit entries: one writer) reaches the disk before exit.
        state.core().approvals.flush().await;
        following.await?;
        if let Some(cluster) = self.cluster {
            // Hand this replica's paused executions to the others and stop
            // its heartbeat, so they need not wait for it to go stale.
            state.core().approvals.leave().await;
            state.core().run(move |_| cluster.leave()).await?;
        }
        // Finished by now; awaited for a panic in any of them.
        sweeper.await?;
        housekeeping.await?;
        if let Some(metrics) = metrics {
            metrics.await?;
        }
        Ok(())
    }
}

/// How long shutdown waits for background tasks once the connections have drained.
pub const TASKS_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Closes `tasks` (waiting ends once none runs) and waits for them (each
/// ends at shutdown or within its own bound), logging any still running
/// after [`TASKS_DRAIN_TIMEOUT`] rather than holding the process.
async fn drain(tasks: &TaskTracker) {
    tasks.close();
    if tokio::time::timeout(TASKS_DRAIN_TIMEOUT, tasks.wait()).await.is_err() {
        tracing::warn!(remaining = tasks.len(), "background tasks still running after the drain timeout");
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn a_database_url_is_printed_without_its_password() {
        let shown = redact("postgres://gatehouse:s3cret@db.internal:5432/gatehouse?sslmode=disable");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("gatehouse:***@db.internal:5432/gatehouse"), "{shown}");
        assert_eq!(redact("not a url"), "(unparsable URL)");
        let param = redact("postgres://gatehouse@db/gatehouse?password=s3cret&sslmode=disable");
        assert!(!param.contains("s3cret") && param.contains("sslmode=disable"), "{param}");
    }
}
