//! One client connection to an upstream, whichever its transport
//! ([`super::stdio`] or [`super::http`]): it is started within
//! `connect_timeout` the way [`Lifecycle`] says, wrapped so that what the
//! upstream sends is relayed in order ([`super::relay`]), and held as a
//! [`Link`] by whoever sends on it.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientCacheConfig, Peer, RunningService};
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};

use super::http::{self, HttpSetupError};
use super::relay::{InOrder, Relay, RelayState};
use super::stdio::{self, ChildWatch};
use crate::config::UpstreamConfig;

/// How long rmcp's `Auto` lifecycle waits for an answer to `server/discover`
/// before it falls back to `initialize` (its private
/// `DEFAULT_AUTO_DISCOVER_TIMEOUT`, not configurable). A connection that
/// tries discover first gets this much on top of `connect_timeout`, so an
/// upstream that silently ignores the probe still has its whole
/// `connect_timeout` for `initialize`.
pub(crate) const DISCOVER_WAIT: Duration = Duration::from_secs(10);

/// How a connection starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    /// `server/discover` first: 2026-07-28 with an upstream that offers it,
    /// else `initialize` (2025-11-25) on the same connection.
    Auto,
    /// `initialize` only: an upstream known to speak 2025-11-25, or one whose
    /// last discover attempt failed outright (some exit on an unknown method).
    Initialize,
}

impl Lifecycle {
    fn mode(self) -> ClientLifecycleMode {
        match self {
            Lifecycle::Auto => ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
            Lifecycle::Initialize => ClientLifecycleMode::Initialize,
        }
    }

    /// How long starting may take in all.
    fn deadline(self, connect_timeout: Duration) -> Duration {
        match self {
            Lifecycle::Auto => connect_timeout.saturating_add(DISCOVER_WAIT),
            Lifecycle::Initialize => connect_timeout,
        }
    }

    /// The way to try after an attempt this way failed: the other one (an
    /// upstream that choked on discover gets `initialize`; one that refused
    /// `initialize`, perhaps 2026-07-28 only, gets discover again).
    pub(crate) fn other(self) -> Self {
        match self {
            Lifecycle::Auto => Lifecycle::Initialize,
            Lifecycle::Initialize => Lifecycle::Auto,
        }
    }
}

/// Whether the upstream at the other end of `peer` negotiated 2026-07-28 or later.
pub(crate) fn is_modern(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info().is_some_and(|i| i.protocol_version >= ProtocolVersion::V_2026_07_28)
}

/// Whether the upstream at the other end of `peer` declared logging.
pub(crate) fn supports_logging(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info().is_some_and(|i| i.capabilities.logging.is_some())
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    /// The child process could not be started.
    #[error("cannot start {command:?}: {source}")]
    Spawn {
        /// The configured command.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP transport could not be set up (a header, the `ca_file`, the client).
    #[error(transparent)]
    Http(#[from] HttpSetupError),
    /// `server/discover` and `initialize` failed (the chain of causes).
    #[error("{at}: initialize failed: {message}")]
    Initialize {
        /// The command or URL.
        at: String,
        /// Why.
        message: String,
    },
    /// Starting and `initialize` took longer than `connect_timeout` (plus
    /// [`DISCOVER_WAIT`] when discover was tried first).
    #[error(
        "{at}: no answer to initialize within connect_timeout ({}){}",
        humantime::format_duration(*.timeout),
        if *.discovered { " (after waiting for an answer to server/discover)" } else { "" }
    )]
    Timeout {
        /// The command or URL.
        at: String,
        /// The configured timeout.
        timeout: Duration,
        /// Whether discover was tried first (and had [`DISCOVER_WAIT`] more).
        discovered: bool,
    },
    /// Neither `command` nor `url` (the config check prevents this).
    #[error("no command or url")]
    Unconfigured,
}

/// A live connection: what sends to the upstream and what relays back.
#[derive(Clone)]
pub(crate) struct Link {
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) relay: Arc<RelayState>,
    /// The service of an agent MCP session's own upstream session, held
    /// here so that it closes with the agent's session; `None` for an
    /// upstream's shared connection (its supervisor owns that one).
    pub(crate) agent_service: Option<Arc<RunningService<RoleClient, Relay>>>,
    /// The upstream's `call_timeout`, for what is sent on this connection.
    pub(crate) call_timeout: Duration,
    /// A stdio child's watch (to say why its connection failed).
    pub(crate) watch: Option<ChildWatch>,
}

impl Link {
    /// Whether this is the upstream's shared connection (not one agent's).
    pub(crate) fn shared(&self) -> bool {
        self.agent_service.is_none()
    }

    /// Why a request on this connection failed, naming the limit that
    /// Gatehouse enforced if that is why.
    pub(crate) fn why(&self, e: &rmcp::service::ServiceError) -> String {
        if let Some(violation) = self.watch.as_ref().and_then(ChildWatch::violation) {
            return violation;
        }
        match http::response_too_large(e) {
            Some(max) => format!("the upstream's response was larger than max_response_bytes ({max} bytes)"),
            None => super::errors::error_chain(e),
        }
    }
}

/// A started connection.
pub(crate) struct Connection {
    pub(crate) service: RunningService<RoleClient, Relay>,
    /// A stdio child's process id.
    pub(crate) pid: Option<u32>,
}

/// Starts a client for `config` with `relay` as its handler, within
/// `connect_timeout` (spawn or connect, then `lifecycle`: discover or
/// `initialize`; [`DISCOVER_WAIT`] more when discover is tried); a stdio
/// child reports its stderr and line-length violation to `watch`.
pub(crate) async fn connect(
    config: &UpstreamConfig,
    relay: Relay,
    watch: Option<&ChildWatch>,
    lifecycle: Lifecycle,
) -> Result<Connection, LinkError> {
    let at = match (&config.command, &config.url) {
        (Some(command), _) => command.clone(),
        (None, Some(url)) => url.to_string(),
        (None, None) => return Err(LinkError::Unconfigured),
    };
    let timeout = config.connect_timeout;
    let watch = watch.cloned().unwrap_or_else(|| ChildWatch::new(config));
    let discovered = lifecycle == Lifecycle::Auto;
    tokio::time::timeout(lifecycle.deadline(timeout), connect_now(config, relay, &at, watch, lifecycle))
        .await
        .map_err(|_| LinkError::Timeout { at: at.clone(), timeout, discovered })?
}

async fn connect_now(
    config: &UpstreamConfig,
    relay: Relay,
    at: &str,
    watch: ChildWatch,
    lifecycle: Lifecycle,
) -> Result<Connection, LinkError> {
    let initialize_failed = |e: rmcp::service::ClientInitializeError| LinkError::Initialize {
        at: at.to_string(),
        message: super::errors::error_chain(&e),
    };
    if let Some(command) = &config.command {
        let (transport, pid) = stdio::spawn_child(config, command, &watch, &relay.state.tasks)
            .map_err(|source| LinkError::Spawn { command: command.clone(), source })?;
        let transport = InOrder::new(transport, relay.state.clone());
        let service = relay.clone().serve_with_lifecycle(transport, lifecycle.mode()).await.map_err(|e| {
            // The child may have been failed by us; say so rather than "connection closed".
            match watch.violation() {
                Some(why) => LinkError::Initialize { at: at.to_string(), message: why },
                None => initialize_failed(e),
            }
        })?;
        without_cache(&service).await;
        return Ok(Connection { service, pid });
    }
    let url = config.url.as_ref().ok_or(LinkError::Unconfigured)?;
    let transport = http::transport(config, url.as_str())?;
    let transport = InOrder::new(transport, relay.state.clone());
    let service = relay.clone().serve_with_lifecycle(transport, lifecycle.mode()).await.map_err(initialize_failed)?;
    without_cache(&service).await;
    Ok(Connection { service, pid: None })
}

/// rmcp's client caches list and read results (and serves stale ones on
/// error); a gateway must not hand one agent's cached answer to another, nor
/// keep an old one, so every connection asks the upstream each time.
async fn without_cache(service: &RunningService<RoleClient, Relay>) {
    service.peer().set_response_cache_config(ClientCacheConfig::disabled()).await;
}
