//! A request counts as in progress until its response body has ended: an
//! SSE stream or a long-poll holds its place for as long as it is open. The
//! connection's idle tracking and the `/mcp` request slots both count that
//! way, by wrapping the response body with what they hold.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use hyper::body::{Frame, SizeHint};

pin_project_lite::pin_project! {
    /// A body that keeps `hold` until the body is dropped (sent in full, or
    /// the connection went away).
    pub struct Holding<B, H> {
        #[pin]
        inner: B,
        hold: H,
    }
}

impl<B, H> hyper::body::Body for Holding<B, H>
where
    B: hyper::body::Body,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `response` with `hold` kept until its body is dropped.
pub fn hold_until_sent<H: Send + 'static>(response: axum::response::Response, hold: H) -> axum::response::Response {
    response.map(|inner| Body::new(Holding { inner, hold }))
}
