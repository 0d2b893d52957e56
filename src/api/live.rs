//! Server-sent events for the pages: the "something changed" fan-out of the
//! live hub, and the one way every SSE response here is built (keep-alives,
//! ended at shutdown).

use std::convert::Infallible;
use std::pin::Pin;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, KeepAliveStream, Sse};
use futures::{Stream, StreamExt};
use gatehouse_core::live::LiveEvent;
use tokio_stream::wrappers::BroadcastStream;

use crate::auth::SignedIn;
use crate::startup::AppState;

type BoxedEvents = Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>>;

/// An SSE response as every endpoint here sends it.
pub type EventStream = Sse<KeepAliveStream<BoxedEvents>>;

/// Wraps `stream` with keep-alives; it ends when the server shuts down.
pub fn sse(stream: impl Stream<Item = Result<Event, Infallible>> + Send + 'static, state: &AppState) -> EventStream {
    let shutdown = state.shutdown.clone();
    let stream = stream.take_until(async move { shutdown.cancelled_owned().await });
    Sse::new(Box::pin(stream) as BoxedEvents).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// `hello`, then the name of every hub event `keep` accepts; a subscriber
/// that fell behind gets `resync` (pages re-read everything on any event).
pub fn hub_events(state: &AppState, keep: fn(LiveEvent) -> bool) -> EventStream {
    let hello = futures::stream::once(async { Ok(Event::default().data("hello")) });
    let changes = BroadcastStream::new(state.core.live.subscribe()).filter_map(move |item| async move {
        match item {
            Ok(event) if keep(event) => Some(Ok(Event::default().data(event.name()))),
            Ok(_) => None,
            Err(_lagged) => Some(Ok(Event::default().data("resync"))),
        }
    });
    sse(hello.chain(changes), state)
}

/// `GET /api/live/events`: every change (sessions, credentials, approvals).
pub async fn events(State(state): State<AppState>, SignedIn(_user): SignedIn) -> EventStream {
    hub_events(&state, |_| true)
}
