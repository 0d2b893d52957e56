//! One client connection to an upstream (rmcp's child-process or Streamable
//! HTTP client) with its relay.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::service::{ClientCacheConfig, Peer, RunningService, ServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};

use super::relay::{InOrder, Relay, RelayState};
use crate::config::UpstreamConfig;

/// A live connection: what sends to the upstream and what relays back.
#[derive(Clone)]
pub(crate) struct Link {
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) relay: Arc<RelayState>,
    /// An agent session's own connection, held here so that it closes with
    /// that session; `None` for an upstream's shared connection (its
    /// supervisor owns that one).
    pub(crate) session: Option<Arc<RunningService<RoleClient, Relay>>>,
}

impl Link {
    /// Whether this is the upstream's shared connection (not one agent's).
    pub(crate) fn shared(&self) -> bool {
        self.session.is_none()
    }
}

/// Starts a client for `config` with `relay` as its handler; also returns a
/// stdio child's process id.
pub(crate) async fn connect(
    config: &UpstreamConfig,
    relay: Relay,
) -> anyhow::Result<(RunningService<RoleClient, Relay>, Option<u32>)> {
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
        let service = relay.clone().serve(InOrder::new(transport, relay.state.clone())).await?;
        without_cache(&service).await;
        return Ok((service, pid));
    }
    let url = config.url.as_ref().ok_or_else(|| anyhow::anyhow!("no command or url"))?;
    // Only the configured headers go upstream; a client's token never does.
    let mut headers = HashMap::new();
    for (name, value) in &config.headers {
        headers.insert(http::HeaderName::try_from(name.as_str())?, http::HeaderValue::try_from(value.as_str())?);
    }
    let client = http_client(config)?;
    let transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
        .custom_headers(headers)
        // The shared connection carries every stateless agent's calls: rmcp's
        // default of 16 requests in flight would queue the rest.
        .max_concurrent_requests(256)
        // An upstream that forgot the session (404) gets a new one.
        .reinit_on_expired_session(true);
    let transport = StreamableHttpClientTransport::with_client(client, transport_config);
    let service = relay.clone().serve(InOrder::new(transport, relay.state.clone())).await?;
    without_cache(&service).await;
    Ok((service, None))
}

/// rmcp's client caches list and read results (and serves stale ones on
/// error); a gateway must not hand one agent's cached answer to another, nor
/// keep an old one, so every connection asks the upstream each time.
async fn without_cache(service: &RunningService<RoleClient, Relay>) {
    service.peer().set_response_cache_config(ClientCacheConfig::disabled()).await;
}

/// Makes rustls' ring provider the process default: every reqwest client in
/// the process (rmcp's too) is built without one and needs it. Idempotent.
pub fn install_crypto_provider() {
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        // Fails only if another provider was installed first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The HTTP client for an upstream: rustls (ring), the system's roots plus
/// the upstream's `ca_file`.
fn http_client(config: &UpstreamConfig) -> anyhow::Result<upstream_http::Client> {
    install_crypto_provider();
    let mut builder = upstream_http::Client::builder();
    if let Some(path) = &config.ca_file {
        let pem = std::fs::read(path).map_err(|e| anyhow::anyhow!("ca_file {}: {e}", path.display()))?;
        let certs = upstream_http::Certificate::from_pem_bundle(&pem)
            .map_err(|e| anyhow::anyhow!("ca_file {}: {e}", path.display()))?;
        builder = builder.tls_certs_merge(certs);
    }
    Ok(builder.build()?)
}
