//! Trying an upstream before it is saved ("Test" on the console's form): a
//! connection of its own, started as the supervisor starts one (discover,
//! then `initialize` alone if an upstream choked on it) with the same
//! capabilities, its lists read as the supervisor reads them, then closed.
//! Nothing is stored, exposed to agents or restarted.

use super::Upstreams;
use super::errors::{error_chain, in_words, sanitize};
use super::link::{self, Lifecycle, LinkError};
use super::listing::list_upstream;
use super::relay::{Relay, RelayState};
use super::stdio::ChildWatch;
use super::supervision::{STDERR_GRACE, place, shared_capabilities};
use gatehouse_core::model::{TestFailed, UpstreamTested};

use crate::config::UpstreamConfig;

impl Upstreams {
    /// Connects to `config`'s upstream on a connection of its own (what it
    /// sends on it reaches no agent: [`RelayState::isolated`]), lists what it offers
    /// within `connect_timeout` and `list_timeout`, and closes it.
    pub async fn probe(&self, config: &UpstreamConfig) -> Result<UpstreamTested, TestFailed> {
        let Ok(_one) = self.inner.probing.try_lock() else { return Err(TestFailed::Busy) };
        let said = |error: String| sanitize(&in_words(&error, &place(config), None));
        let mut lifecycle = Lifecycle::Auto;
        let connection = loop {
            let relay = RelayState::isolated(&config.name, self, config.call_timeout);
            let watch = config.command.is_some().then(|| ChildWatch::new(config));
            let handler = Relay::new(relay, shared_capabilities());
            let e = match link::connect(config, handler, watch.as_ref(), lifecycle).await {
                Ok(connection) => break connection,
                Err(e) => e,
            };
            // It answered, but not to discover: `initialize` alone, once, as the supervisor would.
            if lifecycle == Lifecycle::Auto && matches!(e, LinkError::Initialize { .. }) {
                lifecycle = Lifecycle::Initialize;
                continue;
            }
            if let Some(watch) = &watch {
                watch.stderr_read(STDERR_GRACE).await;
            }
            let stderr = watch.as_ref().and_then(ChildWatch::last_line);
            let error = sanitize(&in_words(&error_chain(&e), &place(config), stderr.as_deref()));
            tracing::info!(upstream = %config.name, %error, "an upstream's test failed to connect");
            return Err(TestFailed::Connect(error));
        };
        let peer = connection.service.peer().clone();
        let protocol = peer.peer_info().map(|i| i.protocol_version.to_string());
        let listed = list_upstream(config, &peer).await;
        // Closed (a stdio child killed) before the answer goes back.
        let _ = connection.service.cancel().await;
        let listing = listed.map_err(|e| TestFailed::List(said(e.to_string())))?;
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
