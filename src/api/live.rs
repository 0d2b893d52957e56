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
use tokio_stream::wrappers::BroadcastStream;

use crate::auth::{BrowserSession, SignedIn};
use crate::error::ApiError;
use crate::startup::AppState;
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
    let shutdown = state.shutdown.clone();
    let stream = stream.take_until(async move { shutdown.cancelled_owned().await }).map(move |event| {
        let _held = &slot;
        event
    });
    Sse::new(Box::pin(stream) as BoxedEvents).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// `hello`, then the name of every hub event `keep` accepts; a subscriber
/// that fell behind gets `resync` (pages re-read everything on any event).
pub fn hub_events(state: &AppState, slot: StreamSlot, keep: fn(LiveEvent) -> bool) -> EventStream {
    let hello = futures::stream::once(async { Ok(Event::default().data("hello")) });
    let changes = BroadcastStream::new(state.core.live.subscribe()).filter_map(move |item| async move {
        match item {
            Ok(event) if keep(event) => Some(Ok(Event::default().data(event.name()))),
            Ok(_) => None,
            Err(_lagged) => Some(Ok(Event::default().data("resync"))),
        }
    });
    sse(hello.chain(changes), state, slot)
}

/// `GET /api/live/events`: every change (sessions, credentials, approvals).
pub async fn events(State(state): State<AppState>, SignedIn(_user): SignedIn, slot: StreamSlot) -> EventStream {
    hub_events(&state, slot, |_| true)
}
