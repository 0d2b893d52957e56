//! Trying an upstream before it is saved ("Test" on the console's form): a
//! connection of its own, its lists read as the supervisor reads them, then
//! closed. Nothing is stored, exposed to agents or restarted.

use super::errors::{error_chain, in_words, sanitize};
use super::link::{self, Lifecycle};
use super::listing::list_upstream;
use super::relay::{Relay, RelayState};
use super::stdio::ChildWatch;
use super::supervision::{STDERR_GRACE, place};
use super::Upstreams;
use gatehouse_core::model::UpstreamTested;

use crate::config::UpstreamConfig;

/// Why a test failed, in words (sanitized: no URL credentials or queries).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Another test runs on this replica: one at a time, since each may
    /// start a process on this host.
    #[error("another test is running; try again in a moment")]
    Busy,
    /// It did not start, or did not answer `initialize`.
    #[error("{0}")]
    Connect(String),
    /// It started but listing what it offers failed.
    #[error("it connected, but listing what it offers failed: {0}")]
    List(String),
}

impl Upstreams {
    /// Connects to `config`'s upstream on a connection of its own (what it
    /// sends on it reaches no agent: [`RelayState::isolated`]), lists what it offers
    /// within `connect_timeout` and `list_timeout`, and closes it.
    pub async fn probe(&self, config: &UpstreamConfig) -> Result<UpstreamTested, ProbeError> {
        let Ok(_one) = self.inner.probing.try_lock() else { return Err(ProbeError::Busy) };
        let relay = RelayState::isolated(&config.name, self, config.call_timeout);
        let watch = config.command.is_some().then(|| ChildWatch::new(config));
        let handler = Relay::new(relay, Default::default());
        let said = |error: String| sanitize(&in_words(&error, &place(config), None));
        let connection = match link::connect(config, handler, watch.as_ref(), Lifecycle::Auto).await {
            Ok(connection) => connection,
            Err(e) => {
                if let Some(watch) = &watch {
                    watch.stderr_read(STDERR_GRACE).await;
                }
                let stderr = watch.as_ref().and_then(ChildWatch::last_line);
                let error = sanitize(&in_words(&error_chain(&e), &place(config), stderr.as_deref()));
                tracing::info!(upstream = %config.name, %error, "an upstream's test failed to connect");
                return Err(ProbeError::Connect(error));
            }
        };
        let peer = connection.service.peer().clone();
        let protocol = peer.peer_info().map(|i| i.protocol_version.to_string());
        let listed = list_upstream(config, &peer).await;
        // Closed (a stdio child killed) before the answer goes back.
        let _ = connection.service.cancel().await;
        let listing = listed.map_err(|e| ProbeError::List(said(e.to_string())))?;
        let lists = listing.lists;
        Ok(UpstreamTested {
            protocol,
            tools: lists.tools.iter().map(|t| t.name.to_string()).collect(),
            prompts: lists.prompts.len(),
            resources: lists.resources.len() + lists.templates.len(),
            problems: listing.problems,
        })
    }
}
