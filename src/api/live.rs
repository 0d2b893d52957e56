//! Server-sent events for the pages: the "something changed" fan-out of the
//! live hub, and the one way every SSE response here is built (keep-alives,
//! ended at shutdown, counted against the browser session's stream limit).

use std::convert::Infallible;
use std::pin::Pin;
use std::time::Duration;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, KeepAliveStream, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use gatehouse_core::live::LiveEvent;

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
/// holds `slot` for as long as it lives.
pub fn sse(
    stream: impl Stream<Item = Result<Event, Infallible>> + Send + 'static,
    state: &AppState,
    slot: StreamSlot,
) -> EventStream {
    let shutdown = state.mcp.shutdown.clone();
    let stream = stream.take_until(async move { shutdown.cancelled_owned().await }).map(move |event| {
        let _held = &slot;
        event
    });
    Sse::new(Box::pin(stream) as BoxedEvents).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// How long a burst of hub events is gathered into one message per kind.
pub const COALESCE: Duration = Duration::from_millis(100);

/// `hello`, then the names of the hub events `keep` accepts; a subscriber
/// that fell behind gets `resync` (pages re-read everything on any event).
/// A burst is coalesced: each kind is sent once per [`COALESCE`] window, so N
/// executions opened at once cost a page one re-read, not N.
pub fn hub_events(state: &AppState, slot: StreamSlot, keep: fn(LiveEvent) -> bool) -> EventStream {
    let hello = futures::stream::once(async { Ok(Event::default().data("hello")) });
    sse(hello.chain(coalesced(state.mcp.core.live.subscribe(), keep)), state, slot)
}

fn coalesced(
    events: tokio::sync::broadcast::Receiver<LiveEvent>,
    keep: fn(LiveEvent) -> bool,
) -> impl Stream<Item = Result<Event, Infallible>> {
    use tokio::sync::broadcast::error::RecvError;
    futures::stream::unfold(events, move |mut events| async move {
        let mut names = std::collections::BTreeSet::new();
        // The first event of a burst...
        while names.is_empty() {
            match events.recv().await {
                Ok(event) if keep(event) => {
                    names.insert(event.name());
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => {
                    names.insert("resync");
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
                        names.insert(event.name());
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => {
                        names.insert("resync");
                    }
                    Err(RecvError::Closed) => break,
                },
            }
        }
        let batch: Vec<Result<Event, Infallible>> = names.into_iter().map(|n| Ok(Event::default().data(n))).collect();
        Some((futures::stream::iter(batch), events))
    })
    .flatten()
}

/// `GET /api/live/events`: every change (sessions, credentials, approvals).
pub async fn events(State(state): State<AppState>, SignedIn(_user): SignedIn, slot: StreamSlot) -> EventStream {
    hub_events(&state, slot, |_| true)
}
