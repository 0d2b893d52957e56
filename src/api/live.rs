//! Server-sent events for the pages: the "something changed" fan-out of the
//! live hub, and the one way every SSE response here is built (keep-alives,
//! ended at shutdown, counted against the browser session's stream limit).

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::pin::Pin;
use std::time::Duration;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, KeepAliveStream, Sse};
use axum::response::{IntoResponse, Response};

use futures::{Stream, StreamExt};
use gatehouse_core::live::LiveEvent;
use gatehouse_core::model::{INBOX_EVENT, SIGNED_OUT_EVENT, StreamEvent};
use gatehouse_core::users::User;

use crate::auth::{BrowserSession, SignedIn};
use crate::error::ApiError;
use crate::state::AppState;
use crate::throttle::StreamSlot;

type BoxedEvents = Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>>;

/// An SSE response as every endpoint here sends it.
pub type EventStream = Sse<KeepAliveStream<BoxedEvents>>;

/// As an extractor: a place for one more live stream of the signed-in
/// browser session; 401 without a session, 429 when the session already
/// holds the most streams it may. The place is given back when the stream
/// (which holds the slot) ends.
impl FromRequestParts<AppState> for StreamSlot {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let session = parts.extensions.get::<BrowserSession>().ok_or_else(|| ApiError::Unauthorized.into_response())?;
        state.throttles.streams.acquire(&session.0).map_err(IntoResponse::into_response)
    }
}

/// Wraps `stream` with keep-alives; it ends when the server shuts down, and
/// holds `slot` for as long as it lives. It also ends, with a
/// [`SIGNED_OUT_EVENT`], as soon as its browser session no longer signs
/// anyone in: a disabled user's open page stops receiving at once.
pub fn sse(
    stream: impl Stream<Item = Result<Event, Infallible>> + Send + 'static,
    state: &AppState,
    slot: StreamSlot,
) -> EventStream {
    use futures::FutureExt;
    let shutdown = state.mcp.shutdown.clone();
    let ended =
        session_ended(state.mcp.core.clone(), state.mcp.core.live.subscribe(), slot.session().into()).boxed().shared();
    let said_why = ended.clone();
    let stream = stream
        .take_until(async move { shutdown.cancelled_owned().await })
        .take_until(ended)
        .map(move |event| {
            let _held = &slot;
            event
        })
        // Ended because the session did: say so, so the page reloads (an
        // event without data would never be dispatched).
        .chain(futures::stream::once(async move { said_why.peek().is_some() }).filter_map(|signed_out| {
            futures::future::ready(
                signed_out.then(|| Ok(Event::default().event(SIGNED_OUT_EVENT).data("session ended"))),
            )
        }));
    Sse::new(Box::pin(stream) as BoxedEvents).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// Completes once `session` no longer signs anyone in, checked on every
/// user change the hub announces (and on a missed one).
async fn session_ended(
    core: gatehouse_core::Core,
    mut events: tokio::sync::broadcast::Receiver<LiveEvent>,
    session: String,
) {
    use tokio::sync::broadcast::error::RecvError;
    let session = BrowserSession(session);
    loop {
        match events.recv().await {
            Ok(LiveEvent::UsersChanged) | Err(RecvError::Lagged(_)) => {
                let session = session.clone();
                let live = core.run(move |core| core.users.session_live(&session)).await;
                if matches!(live, Ok(Ok(false))) {
                    return;
                }
            }
            Ok(_) => {}
            Err(RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}

/// How long a burst of hub events is gathered into one message per kind.
pub const COALESCE: Duration = Duration::from_millis(100);

/// What a change of `LiveEvent` kinds looks like to a stream: the kinds
/// seen in one [`COALESCE`] window ([`StreamEvent::Resync`] when the
/// subscriber fell behind and missed some).
type Batch = BTreeSet<StreamEvent>;

/// The hub's events `keep` accepts, in bursts: each kind once per
/// [`COALESCE`] window, so N executions opened at once cost a page one
/// message, not N.
fn batches(
    events: tokio::sync::broadcast::Receiver<LiveEvent>,
    keep: fn(LiveEvent) -> bool,
) -> impl Stream<Item = Batch> {
    use tokio::sync::broadcast::error::RecvError;
    futures::stream::unfold(events, move |mut events| async move {
        let mut batch = Batch::new();
        // The first event of a burst...
        while batch.is_empty() {
            match events.recv().await {
                Ok(event) if keep(event) => {
                    batch.insert(StreamEvent::Changed(event));
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => {
                    batch.insert(StreamEvent::Resync);
                }
                Err(RecvError::Closed) => return None,
            }
        }
        // ...and whatever follows it within the window.
        let window = tokio::time::sleep(COALESCE);
        tokio::pin!(window);
        loop {
            tokio::select! {
                _ = &mut window => break,
                next = events.recv() => match next {
                    Ok(event) if keep(event) => {
                        batch.insert(StreamEvent::Changed(event));
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => {
                        batch.insert(StreamEvent::Resync);
                    }
                    Err(RecvError::Closed) => break,
                },
            }
        }
        Some((batch, events))
    })
}

/// Whether a batch may have changed someone's inbox.
fn touches_inbox(batch: &Batch) -> bool {
    batch.iter().any(|e| e.touches(&[LiveEvent::ApprovalsChanged]))
}

/// `user`'s inbox as an `inbox` event (shared by every stream of theirs
/// until the approvals change).
async fn inbox_event(state: &AppState, user: &User) -> Event {
    let inbox = state.mcp.core.approvals.inbox(user).await;
    Event::default().event(INBOX_EVENT).data(serde_json::to_string(&inbox).unwrap_or_default())
}

/// `GET /api/live/events`: `hello`, the viewer's inbox, then the name of
/// every kind of change (sessions, credentials, approvals, upstreams;
/// pages re-read what they show), with a fresh `inbox` event whenever the
/// approvals changed (the navigation's pending count).
pub async fn events(State(state): State<AppState>, SignedIn(user): SignedIn, slot: StreamSlot) -> EventStream {
    // Subscribed before the first inbox is read: a change in between is sent.
    let hub = state.mcp.core.live.subscribe();
    let first = [Ok(Event::default().data(StreamEvent::Hello.data())), Ok(inbox_event(&state, &user).await)];
    let changes = {
        let state = state.clone();
        batches(hub, |_| true)
            .then(move |batch| {
                let (state, user) = (state.clone(), user.clone());
                async move {
                    let mut out: Vec<Result<Event, Infallible>> =
                        batch.iter().map(|e| Ok(Event::default().data(e.data()))).collect();
                    if touches_inbox(&batch) {
                        out.push(Ok(inbox_event(&state, &user).await));
                    }
                    futures::stream::iter(out)
                }
            })
            .flatten()
    };
    sse(futures::stream::iter(first).chain(changes), &state, slot)
}

/// `user`'s inbox now, then again after every burst of changes to the approvals.
pub fn inbox_updates(state: &AppState, user: User) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static {
    let state = state.clone();
    let now = futures::stream::once(futures::future::ready(()));
    let bursts = batches(state.mcp.core.live.subscribe(), |e| e == LiveEvent::ApprovalsChanged).map(|_| ());
    now.chain(bursts).then(move |()| {
        let (state, user) = (state.clone(), user.clone());
        async move { Ok(inbox_event(&state, &user).await) }
    })
}

/// `GET /api/approvals/events`: the viewer's inbox now and again after
/// every burst of changes to the approvals, as `inbox` events.
pub async fn inbox_events(State(state): State<AppState>, SignedIn(user): SignedIn, slot: StreamSlot) -> EventStream {
    let inbox = inbox_updates(&state, user);
    sse(inbox, &state, slot)
}
