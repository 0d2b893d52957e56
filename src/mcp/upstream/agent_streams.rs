//! Which SSE streams of each agent's MCP session are open, as rmcp's session
//! manager hands them out, so a request relayed to an agent whose stream is
//! gone fails at once instead of waiting for an answer that cannot come.
//! The lowest part of the upstream side: it knows nothing of upstreams.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};

use futures::Stream;
use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::session::{RestoreOutcome, ServerSseMessage, SessionId, SessionManager};

/// Which SSE streams of each agent MCP session are open, as rmcp's session
/// manager hands them out (see [`WatchedMcpSessions`]).
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
    by_mcp_session: Arc<Mutex<HashMap<SessionId, Weak<McpSessionStreams>>>>,
}

impl AgentStreams {
    /// The streams of session `id` (while the session lives).
    pub(crate) fn of_mcp_session(&self, id: &str) -> Option<Arc<McpSessionStreams>> {
        self.by_mcp_session.lock().unwrap_or_else(|p| p.into_inner()).get(id).and_then(Weak::upgrade)
    }

    /// Starts watching a new session; the session's transport holds the
    /// returned record, so it goes when the session does.
    fn open(&self, id: &SessionId) -> Arc<McpSessionStreams> {
        let streams = Arc::new(McpSessionStreams::default());
        let mut sessions = self.by_mcp_session.lock().unwrap_or_else(|p| p.into_inner());
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
pub(crate) struct McpSessionStreams {
    state: Mutex<Open>,
    /// Bumped on every change, for [`McpSessionStreams::all_closed`].
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

impl McpSessionStreams {
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
    streams: Arc<McpSessionStreams>,
    delivery: Option<Delivery>,
}

impl Watched {
    fn new(
        inner: impl Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        streams: Arc<McpSessionStreams>,
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

/// A session's transport, holding its [`McpSessionStreams`] for as long as the
/// session runs.
pub struct WatchedTransport<T> {
    inner: T,
    _streams: Arc<McpSessionStreams>,
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
pub struct WatchedMcpSessions<M> {
    inner: Arc<M>,
    streams: AgentStreams,
}

impl<M> WatchedMcpSessions<M> {
    /// Watches the streams of `inner`'s sessions into `streams`.
    pub fn new(inner: Arc<M>, streams: AgentStreams) -> Self {
        WatchedMcpSessions { inner, streams }
    }

    /// The record of `id`, made afresh if the session predates it (restored).
    fn record(&self, id: &SessionId) -> Arc<McpSessionStreams> {
        self.streams.of_mcp_session(id).unwrap_or_else(|| self.streams.open(id))
    }
}

impl<M: SessionManager> SessionManager for WatchedMcpSessions<M> {
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
