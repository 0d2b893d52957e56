//! `GET /api/live/events`: server-sent "something changed" events for the
//! signed-in user's pages, which re-read their data on each.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use tokio_stream::wrappers::BroadcastStream;

use crate::auth::SignedIn;
use crate::startup::AppState;

/// The SSE stream. A subscriber that falls behind gets a `resync` event.
pub async fn events(State(state): State<AppState>, SignedIn(_user): SignedIn) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let shutdown = state.shutdown.clone();
    let hello = futures::stream::once(async { Ok(Event::default().data("hello")) });
    let changes = BroadcastStream::new(state.core.live.subscribe()).map(|item| {
        Ok(match item {
            Ok(event) => Event::default().data(event.name()),
            Err(_lagged) => Event::default().data("resync"),
        })
    });
    let stream = hello.chain(changes).take_until(async move { shutdown.cancelled_owned().await });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
