//! `subscriptions/listen` streams (2026-07-28): the agents' open listens,
//! which hear what agent sessions hear — list changes (upstreams coming and
//! going or re-listing, policy and pin changes) and updates of the resources
//! they subscribed to — each through its stream's filter.
//!
//! One registry, bounded per credential: a listen is counted from the moment
//! its request is authenticated ([`Listeners::reserve`], before rmcp
//! acknowledges it, so a refusal is a plain error) until its stream has
//! ended; what it hears is attached once it is established
//! ([`Upstreams::listen`]) and detached when it ends, its upstream resource
//! subscriptions given up with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gatehouse_core::model::CredentialId;
use rmcp::model::{ErrorData, SubscribeRequestParams, UnsubscribeRequestParams};
use rmcp::service::SubscriptionSink;
use tokio_util::sync::CancellationToken;

use super::Upstreams;
use super::errors::sanitize;

/// How long one notification may take to reach a listen stream (an agent
/// that does not read its stream must not hold a task for ever).
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Most resource URIs one listen may subscribe to.
pub const MAX_LISTEN_RESOURCES: usize = 64;

/// Listens one credential may hold open: a quarter of the requests it may
/// have in progress (each listen holds one of those too), so listening never
/// leaves a credential without room to call.
pub fn per_credential(max_requests_per_credential: usize) -> usize {
    (max_requests_per_credential / 4).max(1)
}

/// Why a listen was refused before it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ListenRefused {
    /// The credential has as many listen streams open as it may.
    #[error(
        "this credential already has {0} subscriptions/listen streams open (a quarter of \
         max_requests_per_credential); close one before opening another"
    )]
    Credential(usize),
}

/// Every open listen, and how many each credential holds.
#[derive(Default)]
pub struct Listeners {
    state: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    next: u64,
    entries: HashMap<u64, Entry>,
    per_credential: HashMap<String, usize>,
}

struct Entry {
    credential: String,
    /// Cancelled when its credential is revoked: the listen ends.
    ended: CancellationToken,
    /// Where its notifications go (once established).
    sink: Option<SubscriptionSink>,
    /// Its resource subscriptions: (normal spelling, as the agent spelled it
    /// in its filter, which is what its notifications must name).
    resources: Vec<(String, String)>,
}

/// One listen's place in [`Listeners`], from authentication until its
/// stream has ended; dropping the last clone gives it back.
pub struct ListenPermit {
    listeners: Arc<Listeners>,
    key: u64,
    ended: CancellationToken,
}

impl ListenPermit {
    /// Resolves when the listen must end because its credential was revoked.
    pub async fn revoked(&self) {
        self.ended.cancelled().await;
    }
}

impl Drop for ListenPermit {
    fn drop(&mut self) {
        let mut open = self.listeners.lock();
        if let Some(entry) = open.entries.remove(&self.key)
            && let Some(count) = open.per_credential.get_mut(&entry.credential)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.per_credential.remove(&entry.credential);
            }
        }
    }
}

impl Listeners {
    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for one listen of `credential`, at most `limit` at once.
    pub fn reserve(self: &Arc<Self>, credential: &str, limit: usize) -> Result<Arc<ListenPermit>, ListenRefused> {
        let mut open = self.lock();
        let count = open.per_credential.entry(credential.to_string()).or_default();
        if *count >= limit {
            if *count == 0 {
                open.per_credential.remove(credential);
            }
            return Err(ListenRefused::Credential(limit));
        }
        *count += 1;
        open.next += 1;
        let key = open.next;
        let ended = CancellationToken::new();
        let entry =
            Entry { credential: credential.to_string(), ended: ended.clone(), sink: None, resources: Vec::new() };
        open.entries.insert(key, entry);
        Ok(Arc::new(ListenPermit { listeners: self.clone(), key, ended }))
    }

    /// Listens `credential` holds open.
    pub fn open(&self, credential: &str) -> usize {
        self.lock().per_credential.get(credential).copied().unwrap_or(0)
    }

    /// The credentials holding listens open (for the revocation sweep).
    pub fn credential_ids(&self) -> Vec<CredentialId> {
        self.lock().per_credential.keys().map(CredentialId::from).collect()
    }

    /// Ends every listen of `credential_id` (revoked); how many there were.
    pub fn close_credential(&self, credential_id: &str) -> usize {
        let open = self.lock();
        let theirs: Vec<&Entry> = open.entries.values().filter(|e| e.credential == credential_id).collect();
        theirs.iter().for_each(|e| e.ended.cancel());
        theirs.len()
    }

    /// Every established listen's sink.
    fn sinks(&self) -> Vec<SubscriptionSink> {
        self.lock().entries.values().filter_map(|e| e.sink.clone()).collect()
    }

    /// Whether a listen is subscribed to `uri` (normal spelling).
    pub(crate) fn wants(&self, uri: &str) -> bool {
        self.lock().entries.values().any(|e| e.resources.iter().any(|(normal, _)| normal == uri))
    }

    /// Every URI listens are subscribed to (normal spelling).
    pub(crate) fn resources(&self) -> Vec<String> {
        self.lock().entries.values().flat_map(|e| e.resources.iter().map(|(normal, _)| normal.clone())).collect()
    }

    /// The sinks subscribed to `uri` or `normal` (an update's URI as the
    /// upstream sent it, and its normal spelling), each with the spelling
    /// its filter accepted.
    fn subscribed(&self, uri: &str, normal: Option<&str>) -> Vec<(SubscriptionSink, String)> {
        let open = self.lock();
        let mut found = Vec::new();
        for entry in open.entries.values() {
            let Some(sink) = &entry.sink else { continue };
            for (known, spelled) in &entry.resources {
                if known == uri || Some(known.as_str()) == normal {
                    found.push((sink.clone(), spelled.clone()));
                }
            }
        }
        found
    }

    fn attach(&self, key: u64, sink: SubscriptionSink) {
        if let Some(entry) = self.lock().entries.get_mut(&key) {
            entry.sink = Some(sink);
        }
    }

    fn add_resource(&self, key: u64, normal: &str, spelled: &str) {
        if let Some(entry) = self.lock().entries.get_mut(&key) {
            entry.resources.push((normal.to_string(), spelled.to_string()));
        }
    }

    /// Detaches listen `key`'s sink and resources; the resources it held.
    fn detach(&self, key: u64) -> Vec<String> {
        match self.lock().entries.get_mut(&key) {
            Some(entry) => {
                entry.sink = None;
                std::mem::take(&mut entry.resources).into_iter().map(|(normal, _)| normal).collect()
            }
            None => Vec::new(),
        }
    }
}

/// An established listen: hears notifications until dropped, then gives up
/// the upstream subscriptions nobody else holds.
pub struct Listening {
    upstreams: Upstreams,
    key: u64,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let resources = self.upstreams.inner.listeners.detach(self.key);
        if resources.is_empty() {
            return;
        }
        let upstreams = self.upstreams.clone();
        self.upstreams.inner.tasks.spawn(async move { upstreams.unsubscribe_shared(resources).await });
    }
}

impl Upstreams {
    /// The open listens (their count is claimed when a listen is authenticated).
    pub fn listeners(&self) -> &Arc<Listeners> {
        &self.inner.listeners
    }

    /// Whether an upstream serves the resource `uri` (normal spelling).
    pub fn serves_resource(&self, uri: &str) -> bool {
        self.resource_route(uri).is_some()
    }

    /// Starts listen `permit` on `sink`, subscribed at the upstreams to
    /// `resources` ((normal spelling, as the filter spells it), already
    /// allowed by policy) on their shared connections, as a stateless
    /// agent's `resources/subscribe` would be.
    pub async fn listen(
        &self,
        permit: &ListenPermit,
        sink: SubscriptionSink,
        resources: Vec<(String, String)>,
    ) -> Result<Listening, ErrorData> {
        let listeners = &self.inner.listeners;
        listeners.attach(permit.key, sink);
        // Dropped on an error below: what was subscribed is given up again.
        let listening = Listening { upstreams: self.clone(), key: permit.key };
        for (normal, spelled) in resources {
            let (upstream, spelling) = self
                .resource_route(&normal)
                .ok_or_else(|| ErrorData::invalid_params(format!("Resource not found: {normal}"), None))?;
            let link = self
                .slots()
                .get(&upstream)
                .and_then(|s| s.link.clone())
                .ok_or_else(|| ErrorData::internal_error(format!("upstream {upstream} is down"), None))?;
            let _serial = self.inner.subscribing.lock().await;
            listeners.add_resource(permit.key, &normal, &spelled);
            if super::link::is_modern(&link.peer) {
                // 2026-07-28 has no resources/subscribe: Gatehouse's listen carries it.
                self.watch_resource(&upstream, &link, &spelling).await?;
                continue;
            }
            let subscribed =
                tokio::time::timeout(link.call_timeout, link.peer.subscribe(SubscribeRequestParams::new(spelling)))
                    .await;
            match subscribed {
                Ok(Ok(())) => {}
                Ok(Err(rmcp::service::ServiceError::McpError(e))) => return Err(e),
                Ok(Err(e)) => {
                    return Err(ErrorData::internal_error(
                        sanitize(&format!("upstream resources/subscribe failed: {e}")),
                        None,
                    ));
                }
                Err(_) => {
                    return Err(ErrorData::internal_error(
                        "upstream resources/subscribe failed: no answer within call_timeout",
                        None,
                    ));
                }
            }
        }
        Ok(listening)
    }

    /// Unsubscribes the shared connections from those of `resources` that
    /// no agent session and no listen still holds.
    async fn unsubscribe_shared(&self, resources: Vec<String>) {
        for uri in resources {
            let _serial = self.inner.subscribing.lock().await;
            if self.inner.listeners.wants(&uri) || self.downstreams().iter().any(|d| d.subscribed(&uri)) {
                continue;
            }
            let Some((upstream, spelling)) = self.resource_route(&uri) else { continue };
            let Some(link) = self.slots().get(&upstream).and_then(|s| s.link.clone()) else { continue };
            if super::link::is_modern(&link.peer) {
                self.rewatch(&link);
                continue;
            }
            let _ =
                tokio::time::timeout(link.call_timeout, link.peer.unsubscribe(UnsubscribeRequestParams::new(spelling)))
                    .await;
        }
    }

    /// Tells every listen whose filter takes them that the lists changed.
    pub(super) fn tell_listeners_lists_changed(&self) {
        for sink in self.inner.listeners.sinks() {
            self.inner.tasks.spawn(async move {
                // A filter without one of them refuses it: nothing is sent.
                let _ = tokio::time::timeout(SEND_TIMEOUT, sink.notify_tool_list_changed()).await;
                let _ = tokio::time::timeout(SEND_TIMEOUT, sink.notify_prompt_list_changed()).await;
                let _ = tokio::time::timeout(SEND_TIMEOUT, sink.notify_resource_list_changed()).await;
            });
        }
    }

    /// Tells the listens subscribed to it that resource `uri` (as the
    /// upstream's shared connection named it) was updated.
    pub(super) async fn tell_listeners_updated(&self, uri: &str) {
        let normal = gatehouse_core::normalise::resource_uri(uri).ok();
        for (sink, spelled) in self.inner.listeners.subscribed(uri, normal.as_deref()) {
            let _ = tokio::time::timeout(SEND_TIMEOUT, sink.notify_resource_updated(spelled)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_gets_its_listens_and_no_more_and_a_closed_one_frees_its_place() {
        let listeners = Arc::new(Listeners::default());
        let first = listeners.reserve("a", 2).unwrap();
        let _second = listeners.reserve("a", 2).unwrap();
        assert_eq!(listeners.reserve("a", 2).err(), Some(ListenRefused::Credential(2)));
        let other = listeners.reserve("b", 2).expect("another credential has its own places");
        drop(first);
        assert_eq!(listeners.open("a"), 1);
        let again = listeners.reserve("a", 2).unwrap();
        assert_eq!(listeners.close_credential("a"), 2, "revoking ends both of a's listens");
        assert!(again.ended.is_cancelled() && !other.ended.is_cancelled(), "and only a's");
    }

    #[test]
    fn refusals_leave_nothing_behind() {
        let listeners = Arc::new(Listeners::default());
        for _ in 0..5 {
            assert!(listeners.reserve("a", 0).is_err());
        }
        let open = listeners.lock();
        assert!(open.entries.is_empty() && open.per_credential.is_empty());
    }

    #[test]
    fn per_credential_is_a_quarter_of_the_requests_and_at_least_one() {
        assert_eq!(per_credential(32), 8);
        assert_eq!(per_credential(2), 1);
    }
}
