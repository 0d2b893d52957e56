//! The client side of one upstream connection: what the upstream sends to
//! its "client" (progress, log messages, resource updates, list changes,
//! sampling/elicitation/roots requests) is relayed to the agent whose request
//! caused it, and the agent's answers go back.

// Sampling, roots and logging are deprecated by SEP-2577 but are the
// 2025-11-25 protocol that upstreams and agents speak.
#![allow(deprecated)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, ClientResult, CreateMessageRequest, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequest, ElicitRequestParams, ElicitResult, ErrorCode, ErrorData, GetExtensions,
    GetMeta, Implementation, JsonRpcMessage, JsonRpcNotification, JsonRpcRequest, ListRootsRequest, ListRootsResult,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, ProtocolVersion, RequestId,
    ResourceUpdatedNotificationParam, ServerNotification, ServerRequest,
};
use rmcp::service::{
    InboundStreamOrigin, NotificationContext, OriginatingRequestId, PeerRequestOptions, RequestContext, RequestHandle,
    RxJsonRpcMessage, ServiceError, ServiceRole, TxJsonRpcMessage,
};
use rmcp::transport::Transport;
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::agent_streams::{Delivery, McpSessionStreams};
use super::mcp_session::{Downstream, Origin};
use super::{Inner, Upstreams};

/// A call forwarded on this connection and still running.
struct InFlight {
    entry: u64,
    /// The request id on the upstream connection (once sent).
    upstream_id: Option<RequestId>,
    /// The progress token rmcp gave the upstream request (once sent).
    upstream_progress: Option<ProgressToken>,
    origin: Origin,
}

/// One shared connection's `subscriptions/listen` (2026-07-28), held open by
/// `subscription.rs`; here, below it, so that the relay state can carry it.
#[derive(Default)]
pub(crate) struct ListenState {
    /// The resources to watch changed: the listen is re-opened.
    pub(super) changed: Notify,
    /// The resource URIs (as the upstream spells them) its acknowledged filter carries.
    pub(super) carried: watch::Sender<BTreeSet<String>>,
}

/// State shared between a connection's handler and the code that sends on it.
pub(crate) struct RelayState {
    upstream: String,
    /// The agent session that owns this connection; `None` for an upstream's
    /// shared connection (stdio, or HTTP for stateless agents and listings).
    owner: Option<Weak<Downstream>>,
    upstreams: Weak<Inner>,
    calls: Mutex<Vec<InFlight>>,
    next_entry: AtomicU64,
    /// The application's background tasks (the upstreams' tracker): what
    /// this connection spawns is drained at shutdown with the rest.
    pub(crate) tasks: TaskTracker,
    /// The upstream's `call_timeout`: the longest a request it sends is
    /// relayed for (the call it belongs to is bounded by the same).
    call_timeout: Duration,
    /// This (shared, 2026-07-28) connection's upstream refused `initialize`:
    /// 2025-11-25 agent sessions use this connection rather than sessions of
    /// their own, and it is not asked again while this connection lives.
    initialize_refused: AtomicBool,
    /// Gatehouse's own `subscriptions/listen` on this connection (2026-07-28).
    pub(crate) listen: ListenState,
}

/// Removes an in-flight entry when the forwarded call ends, however it ends.
pub(crate) struct InFlightGuard {
    relay: Arc<RelayState>,
    entry: u64,
}

/// Marks a forwarded request with its in-flight entry. It rides in the
/// request's (never serialized) extensions down to [`InOrder::send`], which
/// records the id and progress token rmcp gave the request before the
/// upstream can see it, so nothing the upstream sends about the call can
/// arrive before the call is known by its upstream id.
#[derive(Clone, Copy)]
struct CallEntry(u64);

impl InFlightGuard {
    /// Marks `request` as this call, for [`InOrder::send`] to recognise.
    pub(crate) fn mark(&self, request: &mut ClientRequest) {
        request.extensions_mut().insert(CallEntry(self.entry));
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.relay.calls.lock().unwrap_or_else(|p| p.into_inner()).retain(|c| c.entry != self.entry);
    }
}

/// Where a relayed request goes: the agent's session, the request it is
/// about (none: the standalone stream), and the streams whose closing means
/// nobody is left to answer.
type Route = (Arc<Downstream>, Option<RequestId>, Vec<Delivery>);

/// The one agent all `calls` belong to, if they all belong to one.
fn single_agent(calls: &[InFlight]) -> Option<&InFlight> {
    let last = calls.last()?;
    calls.iter().all(|c| c.origin.downstream.key == last.origin.downstream.key).then_some(last)
}

impl RelayState {
    pub(crate) fn new(
        upstream: &str,
        owner: Option<&Arc<Downstream>>,
        upstreams: &Upstreams,
        call_timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(RelayState {
            upstream: upstream.to_string(),
            owner: owner.map(Arc::downgrade),
            upstreams: Arc::downgrade(&upstreams.inner),
            calls: Mutex::new(Vec::new()),
            next_entry: AtomicU64::new(0),
            tasks: upstreams.inner.tasks.clone(),
            call_timeout,
            initialize_refused: AtomicBool::new(false),
            listen: Default::default(),
        })
    }

    /// The state of a connection that belongs to nothing (a test of an
    /// upstream not yet saved): what it says or asks reaches no agent and
    /// no other upstream; what it spawns is still tracked by `upstreams`.
    pub(crate) fn isolated(upstream: &str, upstreams: &Upstreams, call_timeout: Duration) -> Arc<Self> {
        let mut state = Arc::into_inner(Self::new(upstream, None, upstreams, call_timeout)).expect("just made");
        state.upstreams = Weak::new();
        Arc::new(state)
    }

    /// Whether this connection's upstream refused a 2025-11-25 `initialize`.
    pub(crate) fn initialize_refused(&self) -> bool {
        self.initialize_refused.load(Ordering::Relaxed)
    }

    /// Remembers that this connection's upstream refused `initialize`.
    pub(crate) fn refuse_initialize(&self) {
        self.initialize_refused.store(true, Ordering::Relaxed);
    }

    /// Records a call about to be forwarded (before it is sent, so that
    /// whatever the upstream sends about it finds its agent).
    pub(crate) fn track(self: &Arc<Self>, origin: &Origin) -> InFlightGuard {
        let entry = self.next_entry.fetch_add(1, Ordering::Relaxed);
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).push(InFlight {
            entry,
            upstream_id: None,
            upstream_progress: None,
            origin: origin.clone(),
        });
        InFlightGuard { relay: self.clone(), entry }
    }

    /// The upstream's name.
    pub(crate) fn upstream(&self) -> &str {
        &self.upstream
    }

    /// Records what rmcp assigned to the call `entry` as it goes out.
    fn sending(&self, entry: u64, upstream_id: RequestId, upstream_progress: Option<ProgressToken>) {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(call) = calls.iter_mut().find(|c| c.entry == entry) {
            call.upstream_id = Some(upstream_id);
            call.upstream_progress = upstream_progress;
        }
    }

    fn owner(&self) -> Option<Arc<Downstream>> {
        self.owner.as_ref().and_then(Weak::upgrade)
    }

    /// The agent request a server→client request belongs to: the call whose
    /// response stream carried it (HTTP), else the latest call in flight when
    /// every call in flight is the same agent's (a shared stdio upstream cannot
    /// say which call a request is about, and it must never reach another
    /// agent), else the owning session with no request; or why there is none.
    ///
    /// Also returns the agent's calls that may be the one the request is about
    /// (all of its calls in flight here when the route is a guess): the
    /// request waits for its answer while any of their streams is open, since
    /// the guessed stream may end first while the agent is answering.
    fn route(&self, extensions: &rmcp::model::Extensions) -> Result<Route, &'static str> {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let on_stream = match extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => calls.iter().find(|c| c.upstream_id.as_ref() == Some(id)),
            _ => None,
        };
        if let Some(call) = on_stream {
            let id = call.origin.request_id.clone();
            return Ok((call.origin.downstream.clone(), Some(id.clone()), vec![Delivery::Request(id)]));
        }
        if let Some(call) = single_agent(&calls) {
            let candidates = calls.iter().map(|c| Delivery::Request(c.origin.request_id.clone())).collect();
            return Ok((call.origin.downstream.clone(), Some(call.origin.request_id.clone()), candidates));
        }
        let busy = !calls.is_empty();
        drop(calls);
        match (&self.owner, self.owner()) {
            (_, Some(owner)) => Ok((owner, None, vec![Delivery::Standalone])),
            (Some(_), None) => Err("the agent's session has ended"),
            (None, None) if busy => {
                Err("no single agent to answer it (several agents have calls in flight at this shared upstream)")
            }
            (None, None) => Err(NO_AGENT_IN_FLIGHT),
        }
    }

    /// Who hears a session-wide message (a log line): the owning session, or
    /// on a shared connection the one agent with calls in flight (nobody when
    /// several agents have: it cannot be told whose it is).
    fn audience(&self) -> Option<Arc<Downstream>> {
        if let Some(owner) = self.owner() {
            return Some(owner);
        }
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        single_agent(&calls).map(|c| c.origin.downstream.clone())
    }

    /// Passes a progress update to the agent request it is about, under the
    /// agent's own progress token (none: the agent did not ask for progress).
    async fn forward_progress(&self, params: ProgressNotificationParam) {
        let found = {
            let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            calls
                .iter()
                .find(|c| c.upstream_progress.as_ref() == Some(&params.progress_token))
                .map(|c| (c.origin.downstream.clone(), c.origin.progress.clone()))
        };
        match found {
            Some((downstream, Some(token))) => {
                if let Some(peer) = downstream.peer() {
                    let mut forwarded = params;
                    forwarded.progress_token = token;
                    let _ = peer.notify_progress(forwarded).await;
                }
            }
            Some((_, None)) => {}
            None => tracing::debug!(upstream = %self.upstream, "progress for no call in flight dropped"),
        }
    }

    /// Passes a log message to its audience, at the level the agent asked for.
    async fn forward_log(&self, params: LoggingMessageNotificationParam) {
        match self.audience() {
            Some(downstream) => {
                if downstream.wants_log(params.level)
                    && let Some(peer) = downstream.peer()
                {
                    let _ = peer.notify_logging_message(params).await;
                }
            }
            None => tracing::debug!(upstream = %self.upstream, "log message for no single agent dropped"),
        }
    }
}

/// An upstream connection's transport that relays progress and log messages as they arrive, before
/// whatever follows them. rmcp runs notification handlers as tasks of their own, so a call's last
/// progress update could otherwise reach the agent after the call's result (and be lost to it).
/// It also records each forwarded call's upstream request id and progress token as the call goes
/// out (rmcp assigns both inside `send_request`, and the upstream may answer before that returns).
pub(crate) struct InOrder<T> {
    inner: T,
    relay: Arc<RelayState>,
    /// A forward under way when rmcp last stopped waiting on `receive` (it
    /// polls it in a `select!`): finished first on the next call, so no
    /// notification is dropped half-forwarded and none overtakes it.
    forwarding: Option<futures::future::BoxFuture<'static, ()>>,
}

impl<T> InOrder<T> {
    pub(crate) fn new(inner: T, relay: Arc<RelayState>) -> Self {
        InOrder { inner, relay, forwarding: None }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for InOrder<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(JsonRpcRequest { id, request, .. }) = &item
            && let Some(CallEntry(entry)) = request.extensions().get::<CallEntry>()
        {
            self.relay.sending(*entry, id.clone(), request.get_meta().get_progress_token());
        }
        self.inner.send(item)
    }

    /// Cancel-safe: a forward is held in `self` until it ends.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            if let Some(forwarding) = self.forwarding.as_mut() {
                forwarding.await;
                self.forwarding = None;
            }
            let message = self.inner.receive().await?;
            if let JsonRpcMessage::Notification(JsonRpcNotification { notification, .. }) = &message {
                let relay = self.relay.clone();
                match notification {
                    ServerNotification::ProgressNotification(n) => {
                        let params = n.params.clone();
                        self.forwarding = Some(Box::pin(async move { relay.forward_progress(params).await }));
                        continue;
                    }
                    ServerNotification::LoggingMessageNotification(n) => {
                        let params = n.params.clone();
                        self.forwarding = Some(Box::pin(async move { relay.forward_log(params).await }));
                        continue;
                    }
                    _ => {}
                }
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// rmcp's client handler for one upstream connection.
#[derive(Clone)]
pub(crate) struct Relay {
    pub(crate) state: Arc<RelayState>,
    /// What this connection tells the upstream it can do: what the owning
    /// agent's client can do, or everything for a shared connection (requests
    /// that find no capable agent are answered with an error).
    capabilities: ClientCapabilities,
}

impl Relay {
    pub(crate) fn new(state: Arc<RelayState>, capabilities: ClientCapabilities) -> Self {
        Relay { state, capabilities }
    }

    /// Sends `request` to the agent the upstream's request belongs to, on the
    /// response stream of the agent's call (or its standalone stream when the
    /// request belongs to no call), and waits for the answer, the upstream's
    /// cancellation (passed on) or that stream closing (see
    /// [`RelayState::deliver`]).
    async fn ask(
        &self,
        request: ServerRequest,
        ctx: &RequestContext<RoleClient>,
        what: &str,
        declared: fn(&ClientCapabilities) -> bool,
    ) -> Result<ClientResult, ErrorData> {
        let (downstream, request_id, witnesses) =
            self.state.route(&ctx.extensions).map_err(|why| self.state.refuse(what, ErrorCode::INTERNAL_ERROR, why))?;
        let target = Asked { downstream, request_id, witnesses };
        self.state.deliver(target, request, ctx.ct.clone(), what, declared).await
    }
}

/// Why a request of a shared connection's has no agent to go to: none has
/// a call in flight there.
const NO_AGENT_IN_FLIGHT: &str = "no agent has a call in flight at this shared upstream";

/// The agent a relayed request goes to: its session, the agent request it
/// is about (none: the standalone stream), and the agent's calls whose
/// streams may carry it.
pub(crate) struct Asked {
    pub(crate) downstream: Arc<Downstream>,
    pub(crate) request_id: Option<RequestId>,
    pub(crate) witnesses: Vec<Delivery>,
}

impl RelayState {
    /// A request of the upstream's that is not relayed: logged, and the error
    /// the upstream (or the forwarded call) gets.
    pub(crate) fn refuse(&self, what: &str, code: ErrorCode, why: impl std::fmt::Display) -> ErrorData {
        tracing::warn!(upstream = %self.upstream, what, %why, "upstream request not relayed");
        ErrorData::new(code, format!("{what} could not be relayed: {why}"), None)
    }

    /// The open streams of `downstream`'s session (none for a stateless request).
    fn streams(&self, downstream: &Downstream) -> Option<Arc<McpSessionStreams>> {
        let mcp_session = downstream.mcp_session_id()?;
        self.upstreams.upgrade()?.streams.of_mcp_session(mcp_session)
    }

    /// Sends `request` to the agent `target` names and waits for the answer,
    /// `ct` (passed on as a cancellation), the stream closing or the
    /// upstream's `call_timeout` passing (then it is cancelled at the agent).
    /// What cannot be delivered (a capability the agent's client did not
    /// declare, a closed stream, an ended session) is an error at once, with
    /// a warning, never a wait the upstream can only time out of; a request
    /// or an answer lost on the way is an error once `call_timeout` passes,
    /// never a wait without end.
    pub(crate) async fn deliver(
        &self,
        target: Asked,
        mut request: ServerRequest,
        ct: CancellationToken,
        what: &str,
        declared: fn(&ClientCapabilities) -> bool,
    ) -> Result<ClientResult, ErrorData> {
        let refuse = |code: ErrorCode, why: String| self.refuse(what, code, why);
        let Asked { downstream, request_id, witnesses } = target;
        if !declared(&downstream.capabilities()) {
            return Err(refuse(ErrorCode::METHOD_NOT_FOUND, format!("the agent's client does not support {what}")));
        }
        let Some(peer) = downstream.peer().cloned() else {
            return Err(refuse(ErrorCode::INTERNAL_ERROR, "the agent's session is not ready".into()));
        };
        let mut delivery = match request_id {
            Some(id) => Delivery::Request(id),
            None => Delivery::Standalone,
        };
        let streams = self.streams(&downstream);
        if let Some(streams) = &streams
            && !streams.is_open(&delivery)
        {
            // A guessed call may have just ended: its latest sibling still open carries it.
            match witnesses.iter().rev().find(|d| streams.is_open(d)) {
                Some(open) => delivery = open.clone(),
                None => return Err(refuse(ErrorCode::INTERNAL_ERROR, closed(&delivery).into())),
            }
        }
        if let Delivery::Request(id) = &delivery {
            request.extensions_mut().insert(OriginatingRequestId(id.clone()));
        }
        let bound = self.call_timeout;
        // In a task of its own: rmcp would otherwise mark the request as coming
        // from the *upstream's* request id, which the agent's session does not know.
        let sent = self.tasks.spawn(async move {
            let mut handle = peer
                .send_request_with_option(request, PeerRequestOptions::no_options())
                .await
                .map_err(Unanswered::Agent)?;
            let gone = async {
                match &streams {
                    Some(streams) => streams.all_closed(&witnesses).await,
                    None => std::future::pending().await,
                }
            };
            // Sent without rmcp's timeouts: the receiver is all there is to await.
            tokio::select! {
                answer = &mut handle.rx => {
                    answer.map_err(|_| Unanswered::Agent(ServiceError::TransportClosed))?.map_err(Unanswered::Agent)
                }
                _ = ct.cancelled() => {
                    let _ = handle.cancel(Some("cancelled by the upstream".into())).await;
                    Err(Unanswered::Agent(ServiceError::Cancelled { reason: Some("cancelled by the upstream".into()) }))
                }
                _ = gone => {
                    let _ = handle.cancel(Some(closed(&delivery).into())).await;
                    Err(Unanswered::Closed(delivery))
                }
                _ = tokio::time::sleep(bound) => {
                    let _ = handle.cancel(Some("no answer within the upstream's call_timeout".into())).await;
                    Err(Unanswered::TimedOut(bound))
                }
            }
        });
        match sent.await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(Unanswered::Agent(ServiceError::McpError(e)))) => Err(e),
            Ok(Err(Unanswered::Agent(e))) => {
                Err(refuse(ErrorCode::INTERNAL_ERROR, format!("the agent did not answer: {e}")))
            }
            Ok(Err(Unanswered::Closed(delivery))) => Err(refuse(ErrorCode::INTERNAL_ERROR, closed(&delivery).into())),
            Ok(Err(Unanswered::TimedOut(bound))) => Err(refuse(
                ErrorCode::INTERNAL_ERROR,
                format!(
                    "the agent did not answer within the upstream's call_timeout ({})",
                    humantime::format_duration(bound)
                ),
            )),
            Err(e) => Err(refuse(ErrorCode::INTERNAL_ERROR, format!("the relay failed: {e}"))),
        }
    }

    fn upstreams(&self) -> Option<Upstreams> {
        self.upstreams.upgrade().map(|inner| Upstreams { inner })
    }

    /// The upstream said its lists changed (as a 2025-11-25 notification, or
    /// on Gatehouse's `subscriptions/listen`): on the shared connection,
    /// re-list it (pinning what is new) and tell every agent.
    pub(crate) fn lists_changed(&self) {
        if self.owner.is_some() {
            // The upstream's shared connection hears the same change.
            return;
        }
        if let Some(upstreams) = self.upstreams() {
            upstreams.request_refresh(&self.upstream);
        }
    }

    /// The upstream said resource `params.uri` was updated (as a 2025-11-25
    /// notification, or on Gatehouse's `subscriptions/listen`): the agents
    /// subscribed to it through this connection hear it.
    pub(crate) async fn resource_updated(&self, params: ResourceUpdatedNotificationParam) {
        let targets = match (self.owner(), self.upstreams()) {
            (Some(owner), _) => vec![owner],
            (None, Some(upstreams)) => {
                // Listens subscribe on the shared connections.
                upstreams.tell_listeners_updated(&params.uri).await;
                // Agent sessions with sessions of their own at this upstream hear it there.
                upstreams.downstreams().into_iter().filter(|d| upstreams.uses_shared(&self.upstream, d, self)).collect()
            }
            (None, None) => Vec::new(),
        };
        // Subscriptions are kept in the normal spelling the agent's requests get.
        let normal = gatehouse_core::normalise::resource_uri(&params.uri).ok();
        for downstream in targets {
            if (downstream.subscribed(&params.uri) || normal.as_deref().is_some_and(|n| downstream.subscribed(n)))
                && let Some(peer) = downstream.peer()
            {
                let _ = peer.notify_resource_updated(params.clone()).await;
            }
        }
    }
}

/// Why a relayed request got no answer.
enum Unanswered {
    /// rmcp's error: the session ended, the agent's JSON-RPC error, a cancellation.
    Agent(ServiceError),
    /// The stream it went out on closed first (the agent went away).
    Closed(Delivery),
    /// No answer within the upstream's `call_timeout` (the request or the
    /// answer was lost on the way, or the agent never answered).
    TimedOut(Duration),
}

/// Why a request for `delivery` cannot reach the agent.
fn closed(delivery: &Delivery) -> &'static str {
    match delivery {
        Delivery::Request(_) => {
            "the agent's stream for the call it belongs to is closed (the agent disconnected or gave up the call)"
        }
        Delivery::Standalone => {
            "it belongs to no call of the agent's, and the agent has no standalone (GET) stream open to receive it"
        }
    }
}

fn unexpected(what: &str) -> ErrorData {
    ErrorData::internal_error(format!("the agent answered {what} with an unexpected result"), None)
}

impl ClientHandler for Relay {
    fn get_info(&self) -> ClientConfig {
        // What `initialize` asks for: 2025-11-25, in which an upstream sends
        // requests to its client, relayed to agents. (A 2026-07-28 upstream,
        // found with `server/discover`, asks with `input_required` instead.)
        ClientConfig::new(self.capabilities.clone(), Implementation::new("gatehouse", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        ctx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        match self.ask(request, &ctx, "sampling/createMessage", |c| c.sampling.is_some()).await? {
            ClientResult::CreateMessageResult(r) => Ok(*r),
            _ => Err(unexpected("sampling/createMessage")),
        }
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        ctx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match self.ask(request, &ctx, "elicitation/create", |c| c.elicitation.is_some()).await? {
            ClientResult::ElicitResult(r) => Ok(r),
            _ => Err(unexpected("elicitation/create")),
        }
    }

    async fn list_roots(&self, ctx: RequestContext<RoleClient>) -> Result<ListRootsResult, ErrorData> {
        // Asked on a shared connection with no agent's call in flight (an
        // upstream asks at start): Gatehouse itself has no roots, and says
        // so, rather than an error the upstream logs as a failure.
        if self.state.route(&ctx.extensions).err() == Some(NO_AGENT_IN_FLIGHT) {
            tracing::debug!(upstream = %self.state.upstream, "roots/list with no agent in flight: no roots");
            return Ok(ListRootsResult::default());
        }
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        match self.ask(request, &ctx, "roots/list", |c| c.roots.is_some()).await? {
            ClientResult::ListRootsResult(r) => Ok(r),
            _ => Err(unexpected("roots/list")),
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        self.state.resource_updated(params).await;
    }

    async fn on_tool_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        self.state.lists_changed();
    }

    async fn on_prompt_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        self.state.lists_changed();
    }

    async fn on_resource_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        self.state.lists_changed();
    }
}

/// Waits for the answer to a forwarded request (either direction); if `ct` is
/// cancelled first, tells the peer the request is cancelled, with `reason`;
/// if `timeout` passes first, tells it the request timed out.
pub(crate) async fn await_or_cancel<R: ServiceRole>(
    mut handle: RequestHandle<R>,
    ct: &CancellationToken,
    reason: &str,
    timeout: Option<Duration>,
) -> Result<R::PeerResp, ServiceError> {
    let deadline = async {
        match timeout {
            Some(timeout) => tokio::time::sleep(timeout).await,
            None => std::future::pending().await,
        }
    };
    // The handle is sent without rmcp's timeouts, so its receiver is all there is to await.
    tokio::select! {
        answer = &mut handle.rx => answer.map_err(|_| ServiceError::TransportClosed)?,
        _ = ct.cancelled() => {
            let _ = handle.cancel(Some(reason.to_string())).await;
            Err(ServiceError::Cancelled { reason: Some(reason.to_string()) })
        }
        _ = deadline => {
            let _ = handle.cancel(Some("call_timeout".to_string())).await;
            Err(ServiceError::Timeout { timeout: timeout.unwrap_or_default() })
        }
    }
}
