//! The downstream side of proxying: one [`Downstream`] per agent MCP session,
//! holding what an upstream needs to reach that agent (its peer, log level,
//! resource subscriptions) and that session's own upstream sessions; and
//! [`AgentStreams`], which of each agent session's SSE streams are open, so a
//! relayed request that could not reach its agent fails at once.

// `logging/setLevel` is deprecated by SEP-2577 but still 2025-11-25.
#![allow(deprecated)]

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll};

use futures::Stream;
use rmcp::RoleServer;
use rmcp::model::{ClientCapabilities, ClientJsonRpcMessage, LoggingLevel, ProgressToken, ProtocolVersion, RequestId};
use rmcp::service::{Peer, RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::session::{RestoreOutcome, ServerSseMessage, SessionId, SessionManager};
use tokio_util::sync::CancellationToken;

use super::link::Link;

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// One downstream MCP session (or one stateless request), as upstreams see it.
pub struct Downstream {
    /// Process-unique key.
    pub(crate) key: u64,
    /// The agent's MCP session id; `None` for stateless requests, which then
    /// share each upstream's common client.
    session_id: OnceLock<String>,
    peer: OnceLock<Peer<RoleServer>>,
    level: Mutex<Option<LoggingLevel>>,
    /// A 2026-07-28 request's `io.modelcontextprotocol/logLevel` (set once,
    /// `None` inside when the request named none); replaces `level`.
    request_level: OnceLock<Option<LoggingLevel>>,
    subscriptions: Mutex<HashSet<String>>,
    /// This session's own sessions at HTTP upstreams, by upstream name; one
    /// lock per upstream, so a slow one does not hold up the others.
    links: Mutex<HashMap<String, LinkCell>>,
}

/// Where one upstream session of an agent session lives (empty until opened).
pub(crate) type LinkCell = Arc<tokio::sync::Mutex<Option<Link>>>;

impl Downstream {
    /// A downstream with nothing bound yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Downstream {
            key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            session_id: OnceLock::new(),
            peer: OnceLock::new(),
            level: Mutex::new(None),
            request_level: OnceLock::new(),
            subscriptions: Mutex::new(HashSet::new()),
            links: Mutex::new(HashMap::new()),
        })
    }

    /// Remembers the agent's peer and session id (the first ones seen win:
    /// both are fixed for a session's life).
    pub fn bind(&self, peer: &Peer<RoleServer>, session_id: Option<&str>) {
        if self.peer.get().is_none() {
            let _ = self.peer.set(peer.clone());
        }
        if let Some(sid) = session_id
            && self.session_id.get().is_none()
        {
            let _ = self.session_id.set(sid.to_string());
        }
    }

    /// The agent's peer, once a request has been seen.
    pub(crate) fn peer(&self) -> Option<&Peer<RoleServer>> {
        self.peer.get()
    }

    /// Whether this is a stateful session (it may own upstream sessions).
    pub(crate) fn stateful(&self) -> bool {
        self.session_id.get().is_some()
    }

    /// The agent's MCP session id (`None` for a stateless request).
    pub(crate) fn session_id(&self) -> Option<&str> {
        self.session_id.get().map(String::as_str)
    }

    /// What the agent's client declared it can do (sampling, elicitation, roots).
    pub(crate) fn capabilities(&self) -> ClientCapabilities {
        self.peer().and_then(|p| p.peer_info()).map(|i| i.capabilities.clone()).unwrap_or_default()
    }

    /// Sets the agent's `logging/setLevel`.
    pub fn set_level(&self, level: LoggingLevel) {
        *self.level.lock().unwrap_or_else(|p| p.into_inner()) = Some(level);
    }

    /// The level the agent asked for, if it asked.
    pub(crate) fn level(&self) -> Option<LoggingLevel> {
        *self.level.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes this (a 2026-07-28 request's) downstream hear log messages only
    /// at or above `level`, the request's `_meta` logLevel, and none when it
    /// named none: on 2026-07-28 a request asks for logs, or gets none.
    pub fn log_per_request(&self, level: Option<LoggingLevel>) {
        let _ = self.request_level.set(level);
    }

    /// Whether a message at `level` should reach the agent: at or above the
    /// request's logLevel on 2026-07-28; else at or above the session's
    /// `logging/setLevel` (default: info and up).
    pub(crate) fn wants_log(&self, level: LoggingLevel) -> bool {
        let floor = match self.request_level.get() {
            Some(None) => return false,
            Some(Some(asked)) => *asked,
            None => self.level().unwrap_or(LoggingLevel::Info),
        };
        severity(level) >= severity(floor)
    }

    /// Records a resource subscription; `false` if it was already there.
    pub(crate) fn subscribe(&self, uri: &str) -> bool {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).insert(uri.to_string())
    }

    /// Drops a resource subscription; `false` if there was none.
    pub(crate) fn unsubscribe(&self, uri: &str) -> bool {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).remove(uri)
    }

    /// The cell for this session's session at upstream `name`.
    pub(crate) fn link_cell(&self, name: &str) -> LinkCell {
        self.links.lock().unwrap_or_else(|p| p.into_inner()).entry(name.to_string()).or_default().clone()
    }

    /// Every cell, for passing something to all of this session's upstream sessions.
    pub(crate) fn link_cells(&self) -> Vec<LinkCell> {
        self.links.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// Every URI the agent subscribed to.
    pub(crate) fn subscriptions(&self) -> Vec<String> {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    /// Whether the agent subscribed to `uri`.
    pub(crate) fn subscribed(&self, uri: &str) -> bool {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).contains(uri)
    }
}

fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// Where a forwarded request came from: the agent's request, so that what the
/// upstream sends back while working on it (progress, sampling, elicitation)
/// reaches the same agent on the same stream, and its cancellation travels on.
#[derive(Clone)]
pub struct Origin {
    /// The agent's session.
    pub downstream: Arc<Downstream>,
    /// The agent's JSON-RPC request id.
    pub request_id: RequestId,
    /// The agent's progress token, if it asked for progress.
    pub progress: Option<ProgressToken>,
    /// Cancelled when the agent cancels its request.
    pub ct: CancellationToken,
    /// What the agent's client declared on this request (its `_meta` on
    /// 2026-07-28, else its session's `initialize`).
    pub capabilities: ClientCapabilities,
    /// The log level the request's `_meta` asked for (2026-07-28).
    pub log_level: Option<LoggingLevel>,
    /// Whether the agent speaks 2026-07-28 on this request: an upstream's
    /// input request then goes back to it as `input_required`, not as a
    /// server→client request (which rmcp refuses on that revision).
    pub modern: bool,
}

impl Origin {
    /// The origin of the request `ctx` is handling, for `downstream`.
    pub fn of(downstream: &Arc<Downstream>, ctx: &RequestContext<RoleServer>) -> Self {
        Origin {
            downstream: downstream.clone(),
            request_id: ctx.id.clone(),
            progress: ctx.meta.get_progress_token(),
            ct: ctx.ct.clone(),
            capabilities: ctx.client_capabilities().unwrap_or_else(|| downstream.capabilities()),
            log_level: ctx.meta.log_level(),
            modern: ctx.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28),
        }
    }
}

/// Which SSE streams of each agent session are open, as rmcp's session
/// manager hands them out (see [`WatchedSessions`]).
///
/// rmcp's local session worker writes a server→client message for a stream
/// that is gone (the agent dropped the response stream of its call, or has no
/// standalone GET stream) into a closed channel, caches it for a possible
/// resumption and reports success (`CachedTx::cache_and_send` in
/// `rmcp/src/transport/streamable_http_server/session/local.rs`). A relayed
/// request sent there would wait for an answer that cannot come, and so would
/// the upstream. Knowing which streams are open lets the relay refuse at once.
#[derive(Clone, Default)]
pub struct AgentStreams {
    sessions: Arc<Mutex<HashMap<SessionId, Weak<SessionStreams>>>>,
}

impl AgentStreams {
    /// The streams of session `id` (while the session lives).
    pub(crate) fn session(&self, id: &str) -> Option<Arc<SessionStreams>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).get(id).and_then(Weak::upgrade)
    }

    /// Starts watching a new session; the session's transport holds the
    /// returned record, so it goes when the session does.
    fn open(&self, id: &SessionId) -> Arc<SessionStreams> {
        let streams = Arc::new(SessionStreams::default());
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|_, s| s.strong_count() > 0);
        sessions.insert(id.clone(), Arc::downgrade(&streams));
        streams
    }
}

/// Where a relayed request travels to its agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// On the response stream of the agent's request with this id.
    Request(RequestId),
    /// On the session's standalone (GET) stream: the request belongs to no
    /// call of the agent's.
    Standalone,
}

/// One agent session's open streams.
#[derive(Default)]
pub(crate) struct SessionStreams {
    state: Mutex<Open>,
    /// Bumped on every change, for [`SessionStreams::all_closed`].
    changes: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct Open {
    /// Open response streams by the agent's JSON-RPC request id (a count: a
    /// resumed stream may briefly overlap the one it replaces).
    requests: HashMap<RequestId, usize>,
    /// rmcp's stream number (the part after `/` in its event ids) of each
    /// request's stream, to know which request a resumption reopens.
    numbers: HashMap<String, RequestId>,
    /// Open standalone streams (GET, with or without `Last-Event-ID`).
    standalone: usize,
}

impl SessionStreams {
    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a message for `delivery` would reach the agent now.
    pub(crate) fn is_open(&self, delivery: &Delivery) -> bool {
        let open = self.lock();
        match delivery {
            Delivery::Request(id) => open.requests.get(id).is_some_and(|n| *n > 0),
            Delivery::Standalone => open.standalone > 0,
        }
    }

    /// Resolves once none of `deliveries` would reach the agent (at once if none does).
    pub(crate) async fn all_closed(&self, deliveries: &[Delivery]) {
        let mut changes = self.changes.subscribe();
        while deliveries.iter().any(|d| self.is_open(d)) {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    fn add(&self, delivery: &Delivery) {
        match delivery {
            Delivery::Request(id) => *self.lock().requests.entry(id.clone()).or_default() += 1,
            Delivery::Standalone => self.lock().standalone += 1,
        }
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn remove(&self, delivery: &Delivery) {
        {
            let mut open = self.lock();
            match delivery {
                Delivery::Request(id) => {
                    if let Some(n) = open.requests.get_mut(id) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            open.requests.remove(id);
                            open.numbers.retain(|_, r| r != id);
                        }
                    }
                }
                Delivery::Standalone => open.standalone = open.standalone.saturating_sub(1),
            }
        }
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Remembers which request rmcp's stream `number` carries.
    fn learn(&self, number: &str, id: &RequestId) {
        let mut open = self.lock();
        if open.requests.contains_key(id) && !open.numbers.contains_key(number) {
            open.numbers.insert(number.to_string(), id.clone());
        }
    }

    /// What a resumption from `last_event_id` reopens: a request's stream
    /// (`<index>/<stream number>`) or the standalone one (`<index>`).
    fn resumed(&self, last_event_id: &str) -> Option<Delivery> {
        match last_event_id.split_once('/') {
            Some((_, number)) => self.lock().numbers.get(number).cloned().map(Delivery::Request),
            None => Some(Delivery::Standalone),
        }
    }
}

/// The stream number in one of rmcp's event ids (`<index>/<number>`).
fn stream_number(event_id: &str) -> Option<&str> {
    event_id.split_once('/').map(|(_, number)| number)
}

/// An SSE stream handed to an agent, counted open until it ends or is
/// dropped (the agent's connection went away).
struct Watched {
    inner: Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>,
    streams: Arc<SessionStreams>,
    delivery: Option<Delivery>,
}

impl Watched {
    fn new(
        inner: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        streams: Arc<SessionStreams>,
        delivery: Option<Delivery>,
    ) -> Self {
        Watched { inner: Box::pin(inner), streams, delivery }
    }

    fn release(&mut self) {
        if let Some(delivery) = self.delivery.take() {
            self.streams.remove(&delivery);
        }
    }
}

impl Stream for Watched {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ServerSseMessage>> {
        let this = &mut *self;
        match this.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(message)) => {
                if let (Some(Delivery::Request(id)), Some(number)) =
                    (&this.delivery, message.event_id.as_deref().and_then(stream_number))
                {
                    this.streams.learn(number, id);
                }
                Poll::Ready(Some(message))
            }
            Poll::Ready(None) => {
                this.release();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.release();
    }
}

/// A session's transport, holding its [`SessionStreams`] for as long as the
/// session runs.
pub struct WatchedTransport<T> {
    inner: T,
    _streams: Arc<SessionStreams>,
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for WatchedTransport<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// rmcp's session manager with its agents' streams watched: every stream it
/// hands out is recorded in [`AgentStreams`] while it is open. Everything
/// else is rmcp's, unchanged.
pub struct WatchedSessions<M> {
    inner: Arc<M>,
    streams: AgentStreams,
}

impl<M> WatchedSessions<M> {
    /// Watches the streams of `inner`'s sessions into `streams`.
    pub fn new(inner: Arc<M>, streams: AgentStreams) -> Self {
        WatchedSessions { inner, streams }
    }

    /// The record of `id`, made afresh if the session predates it (restored).
    fn record(&self, id: &SessionId) -> Arc<SessionStreams> {
        self.streams.session(id).unwrap_or_else(|| self.streams.open(id))
    }
}

impl<M: SessionManager> SessionManager for WatchedSessions<M> {
    type Error = M::Error;
    type Transport = WatchedTransport<M::Transport>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, inner) = self.inner.create_session().await?;
        let streams = self.streams.open(&id);
        Ok((id, WatchedTransport { inner, _streams: streams }))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<rmcp::model::ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let delivery = match &message {
            ClientJsonRpcMessage::Request(request) => Some(Delivery::Request(request.id.clone())),
            _ => None,
        };
        // Open before rmcp hands the request to the handler, which may relay at once.
        let streams = self.record(id);
        if let Some(delivery) = &delivery {
            streams.add(delivery);
        }
        let mut watched = Watched::new(futures::stream::empty(), streams, delivery);
        let inner = self.inner.create_stream(id, message).await?;
        watched.inner = Box::pin(inner);
        Ok(watched)
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let inner = self.inner.create_standalone_stream(id).await?;
        let streams = self.record(id);
        streams.add(&Delivery::Standalone);
        Ok(Watched::new(inner, streams, Some(Delivery::Standalone)))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let inner = self.inner.resume(id, last_event_id.clone()).await?;
        let streams = self.record(id);
        let delivery = streams.resumed(&last_event_id);
        if let Some(delivery) = &delivery {
            streams.add(delivery);
        }
        Ok(Watched::new(inner, streams, delivery))
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(match self.inner.restore_session(id.clone()).await? {
            RestoreOutcome::Restored(inner) => {
                RestoreOutcome::Restored(WatchedTransport { inner, _streams: self.streams.open(&id) })
            }
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            _ => RestoreOutcome::NotSupported,
        })
    }

    fn event_store(&self) -> Option<Arc<dyn rmcp::transport::streamable_http_server::session::EventStore>> {
        self.inner.event_store()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_modern_request_hears_logs_only_when_it_asks_and_at_its_level() {
        let session = Downstream::new();
        assert!(session.wants_log(LoggingLevel::Info) && !session.wants_log(LoggingLevel::Debug), "2025: info and up");
        let silent = Downstream::new();
        silent.log_per_request(None);
        assert!(!silent.wants_log(LoggingLevel::Emergency), "2026 without logLevel: nothing");
        let asked = Downstream::new();
        asked.log_per_request(Some(LoggingLevel::Warning));
        assert!(asked.wants_log(LoggingLevel::Error) && !asked.wants_log(LoggingLevel::Info));
        asked.set_level(LoggingLevel::Debug);
        assert!(!asked.wants_log(LoggingLevel::Info), "the request's level stands");
    }
}
