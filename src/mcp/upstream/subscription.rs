//! Gatehouse's own `subscriptions/listen` at each 2026-07-28 upstream.
//!
//! On 2026-07-28 an upstream tells its client about list changes and
//! resource updates only on a listen stream the client holds open (there are
//! no sessions to send them on, and `resources/subscribe` is gone). So each
//! shared 2026-07-28 connection holds one listen, in a task owned by the
//! upstreams' tracker and tied to the connection's life: it asks for the list
//! changes the upstream's capabilities offer and for updates of the resources
//! agents reach through that connection, and feeds what it hears into the
//! same path a 2025-11-25 upstream's notifications take
//! ([`RelayState::lists_changed`], [`RelayState::resource_updated`]), so
//! re-listing, pinning and telling agents are one path.
//!
//! One listen per upstream, re-opened with the new filter when the set of
//! resources changes (the new one is acknowledged before the old one is
//! cancelled, so nothing falls between them): one stream and one request
//! slot however many resources are watched, where a listen per URI would
//! hold a stream for each. The set is bounded by [`MAX_WATCHED_RESOURCES`].

use std::collections::BTreeSet;
use std::time::Duration;

use rmcp::model::{ErrorCode, ErrorData, ServerCapabilities, ServerNotification, SubscriptionFilter};
use rmcp::service::{ServiceError, Subscription};
use tokio_util::sync::CancellationToken;

use super::Upstreams;
use super::errors::sanitize;
use super::link::{self, Link};
use super::relay::RelayState;

/// Most resources Gatehouse watches at one 2026-07-28 upstream on behalf of
/// the agents that reach it through its shared connection (each is one URI
/// in the listen's filter, re-sent whenever the set changes).
pub const MAX_WATCHED_RESOURCES: usize = 256;

/// The longest wait between two attempts to re-open a listen that ended.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A listen that lasted this long was healthy: the next failure backs off from the start.
const HEALTHY: Duration = Duration::from_secs(60);

/// Why a resource cannot be watched at a 2026-07-28 upstream.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WatchError {
    /// The upstream does not declare `resources.subscribe`.
    #[error("upstream {0} does not offer resource subscriptions")]
    Unsupported(String),
    /// Watching it would exceed [`MAX_WATCHED_RESOURCES`].
    #[error(
        "Gatehouse already watches {MAX_WATCHED_RESOURCES} resources at upstream {0} (the most it watches at one upstream)"
    )]
    TooMany(String),
    /// The upstream did not acknowledge a listen carrying it in time.
    #[error("upstream {0} did not acknowledge subscriptions/listen for the resource within call_timeout")]
    NotAcknowledged(String),
}

impl From<WatchError> for ErrorData {
    fn from(e: WatchError) -> Self {
        match e {
            WatchError::Unsupported(_) => ErrorData::new(ErrorCode::METHOD_NOT_FOUND, e.to_string(), None),
            WatchError::TooMany(_) => ErrorData::invalid_request(e.to_string(), None),
            WatchError::NotAcknowledged(_) => ErrorData::internal_error(e.to_string(), None),
        }
    }
}

/// The next notification of `current`, or never when there is none.
async fn next(current: &mut Option<Subscription>) -> Result<Option<ServerNotification>, ServiceError> {
    match current {
        Some(subscription) => subscription.next().await,
        None => std::future::pending().await,
    }
}

/// How long telling the upstream a listen is cancelled may take (the
/// connection may be gone; shutdown waits for this).
const CANCEL_WAIT: Duration = Duration::from_secs(2);

/// Cancels `subscription` at the upstream (within `timeout`, at most [`CANCEL_WAIT`]).
async fn end(mut subscription: Subscription, timeout: Duration) {
    let _ = tokio::time::timeout(timeout.min(CANCEL_WAIT), subscription.cancel()).await;
}

impl Upstreams {
    /// Starts the listen of upstream `name`'s shared connection `link`, if it
    /// speaks 2026-07-28; it ends when `ended` is cancelled (the connection
    /// ended, or shutdown).
    pub(super) fn start_listening(&self, name: &str, link: &Link, ended: CancellationToken) {
        if !link::is_modern(&link.peer) {
            return;
        }
        self.inner.tasks.spawn(self.clone().keep_listening(name.to_string(), link.clone(), ended));
    }

    /// Holds the listen open: opens it, hears it, re-opens it when the
    /// resources to watch change, and when it ends while the connection lives
    /// (backing off 1 s doubling to 30 s). An upstream that does not offer
    /// `subscriptions/listen` (-32601) is not asked again on this connection.
    async fn keep_listening(self, name: String, link: Link, ended: CancellationToken) {
        let capabilities = link.peer.peer_info().map(|i| i.capabilities.clone()).unwrap_or_default();
        let state = &link.relay.listen;
        let mut current: Option<Subscription> = None;
        let mut opened = tokio::time::Instant::now();
        let mut backoff = Duration::from_secs(1);
        let mut stale = true;
        loop {
            if stale {
                stale = false;
                let filter = self.listen_filter(&name, &capabilities, &link.relay);
                if filter == SubscriptionFilter::default() {
                    // Nothing to hear: no listen (until resources are watched).
                    if let Some(old) = current.take() {
                        end(old, link.call_timeout).await;
                    }
                    state.carried.send_replace(BTreeSet::new());
                } else {
                    let listen = tokio::time::timeout(link.call_timeout, link.peer.listen(filter));
                    let opening = tokio::select! {
                        opening = listen => opening,
                        () = ended.cancelled() => break,
                    };
                    match opening {
                        Ok(Ok(subscription)) => {
                            let carried = subscription.acknowledged().resource_subscriptions.clone();
                            state.carried.send_replace(carried.unwrap_or_default().into_iter().collect());
                            // The new one hears everything from here on; the old one can go.
                            if let Some(old) = current.replace(subscription) {
                                end(old, link.call_timeout).await;
                            }
                            opened = tokio::time::Instant::now();
                            tracing::debug!(upstream = %name, "listening to the upstream");
                        }
                        Ok(Err(ServiceError::McpError(e))) if e.code == ErrorCode::METHOD_NOT_FOUND => {
                            tracing::info!(upstream = %name, "the upstream does not offer subscriptions/listen; its list changes are not heard");
                            if let Some(old) = current.take() {
                                end(old, link.call_timeout).await;
                            }
                            state.carried.send_replace(BTreeSet::new());
                            return;
                        }
                        failed => {
                            let why = match failed {
                                Ok(Err(e)) => sanitize(&link.why(&e)),
                                _ => "no acknowledgement within call_timeout".to_string(),
                            };
                            tracing::warn!(upstream = %name, error = %why, "subscriptions/listen to the upstream failed; trying again");
                            // An open one (with the old filter) keeps being heard meanwhile.
                            if !self.wait(&ended, &mut backoff).await {
                                break;
                            }
                            stale = true;
                            continue;
                        }
                    }
                }
            }
            tokio::select! {
                () = ended.cancelled() => break,
                () = state.changed.notified() => stale = true,
                heard = next(&mut current) => match heard {
                    Ok(Some(notification)) => hear(&link.relay, notification).await,
                    ended_how => {
                        if ended.is_cancelled() {
                            break;
                        }
                        let why = match &ended_how {
                            Err(e) => sanitize(&link.why(e)),
                            _ => format!("{:?}", current.as_ref().and_then(Subscription::end)),
                        };
                        tracing::warn!(upstream = %name, ended = %why, "the upstream's subscriptions/listen ended; re-opening it");
                        current = None;
                        state.carried.send_replace(BTreeSet::new());
                        if opened.elapsed() > HEALTHY {
                            backoff = Duration::from_secs(1);
                        }
                        if !self.wait(&ended, &mut backoff).await {
                            break;
                        }
                        stale = true;
                    }
                },
            }
        }
        if let Some(old) = current {
            end(old, link.call_timeout).await;
        }
    }

    /// Waits out `backoff` (doubling it for next time); `false` if `ended` came first.
    async fn wait(&self, ended: &CancellationToken, backoff: &mut Duration) -> bool {
        let wait = *backoff;
        *backoff = (*backoff * 2).min(MAX_BACKOFF);
        tokio::select! {
            () = tokio::time::sleep(wait) => true,
            () = ended.cancelled() => false,
        }
    }

    /// What upstream `name`'s listen asks for: the list changes it offers,
    /// and updates of the resources it serves that agents reaching it through
    /// `shared` subscribed to (sessions and listens), as it spells them.
    fn listen_filter(&self, name: &str, capabilities: &ServerCapabilities, shared: &RelayState) -> SubscriptionFilter {
        let watched = self.watched(name, shared);
        let mut filter =
            SubscriptionFilter::builder().tools_list_changed().prompts_list_changed().resources_list_changed();
        if !watched.is_empty() {
            filter = filter.resource_subscriptions(watched.into_iter().take(MAX_WATCHED_RESOURCES));
        }
        filter.build().supported_by(capabilities)
    }

    /// The resources of upstream `name` (as it spells them) that agents
    /// reaching it through the shared connection `shared` subscribed to.
    fn watched(&self, name: &str, shared: &RelayState) -> BTreeSet<String> {
        let sessions = self
            .downstreams()
            .into_iter()
            .filter(|d| self.uses_shared(name, d, shared))
            .flat_map(|d| d.subscriptions());
        sessions
            .chain(self.inner.listeners.resources())
            .filter_map(|uri| {
                self.resource_route(&uri).filter(|(owner, _)| owner == name).map(|(_, spelling)| spelling)
            })
            .collect()
    }

    /// Makes the listen on `link` (upstream `name`'s shared 2026-07-28
    /// connection) carry the resource `spelling`, already recorded as
    /// subscribed by whoever asked: re-opens it and waits for the upstream
    /// to acknowledge a filter with it.
    pub(super) async fn watch_resource(&self, name: &str, link: &Link, spelling: &str) -> Result<(), WatchError> {
        let offers = link
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.resources.as_ref().is_some_and(|r| r.subscribe == Some(true)));
        if !offers {
            return Err(WatchError::Unsupported(name.to_string()));
        }
        if self.watched(name, &link.relay).len() > MAX_WATCHED_RESOURCES {
            return Err(WatchError::TooMany(name.to_string()));
        }
        let state = &link.relay.listen;
        let mut carried = state.carried.subscribe();
        state.changed.notify_one();
        match tokio::time::timeout(link.call_timeout, carried.wait_for(|c| c.contains(spelling))).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(WatchError::NotAcknowledged(name.to_string())),
        }
    }

    /// The resources to watch at `link`'s upstream changed (one was given
    /// up): its listen is re-opened with what is still wanted.
    pub(super) fn rewatch(&self, link: &Link) {
        link.relay.listen.changed.notify_one();
    }
}

/// Feeds what the upstream's listen carried into the path its 2025-11-25
/// notifications take.
async fn hear(relay: &RelayState, notification: ServerNotification) {
    match notification {
        ServerNotification::ToolListChangedNotification(_)
        | ServerNotification::PromptListChangedNotification(_)
        | ServerNotification::ResourceListChangedNotification(_) => relay.lists_changed(),
        ServerNotification::ResourceUpdatedNotification(n) => relay.resource_updated(n.params).await,
        // rmcp lets through only what the acknowledged filter holds.
        _ => {}
    }
}
