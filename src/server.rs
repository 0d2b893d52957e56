//! The listener: accepts connections up to a bound, serves each over HTTP/1.1
//! or HTTP/2 with a deadline for its request headers, and drains them on
//! shutdown (mini-redis's `server.rs` shape, with hyper doing the protocol).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// How long shutdown waits for open connections to finish their requests.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Bounds on what clients may hold.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections served at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// Time a client has to send a request's headers (slow-loris guard).
    pub header_read_timeout: Duration,
}

/// hyper's executor for what a connection spawns (HTTP/2 streams), on the
/// application's tracker instead of bare `tokio::spawn`, so shutdown waits
/// for those too.
#[derive(Clone)]
struct TrackedExecutor(TaskTracker);

impl<F> hyper::rt::Executor<F> for TrackedExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        self.0.spawn(future);
    }
}

/// Which protocol a new connection speaks, told from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    /// Cleartext HTTP/2 with prior knowledge (a proxy speaking HTTP/2).
    Http2,
}

/// What every HTTP/2 connection opens with.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Tells HTTP/1 from HTTP/2 by peeking at the first bytes, leaving them in
/// the socket. hyper-util's auto builder reads them instead and hands hyper
/// a 24-byte prefix as its first read; hyper then grows its 8 KiB read
/// buffer to 16 KiB for the rest of the request, and keeps that size for
/// the connection's life: 8 KiB more for every open SSE watcher. Peeked,
/// hyper reads the whole request at once into 8 KiB. `None` when the peer
/// closed before saying anything.
async fn sniff(tcp: &TcpStream) -> std::io::Result<Option<Protocol>> {
    let mut first = [0u8; H2_PREFACE.len()];
    loop {
        let n = tcp.peek(&mut first).await?;
        if n == 0 {
            return Ok(None);
        }
        if first[..n] != H2_PREFACE[..n] {
            return Ok(Some(Protocol::Http1));
        }
        if n == H2_PREFACE.len() {
            return Ok(Some(Protocol::Http2));
        }
        // Part of the preface so far: a peek returns at once while any bytes
        // wait, so give the rest a moment to arrive (the caller's deadline
        // bounds this; real clients send the preface in one write).
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Serves `router` on `listener` until `shutdown`, then drains; each
/// connection (and each HTTP/2 stream hyper spawns) is a task on `tasks`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
    tasks: TaskTracker,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    // One builder per protocol, the protocol told by `sniff`.
    let mut http1 = auto::Builder::new(TrackedExecutor(tasks.clone())).http1_only();
    http1.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let mut http2 = auto::Builder::new(TrackedExecutor(tasks.clone())).http2_only();
    http2.http2().timer(TokioTimer::new());
    let builders = Arc::new([http1, http2]);
    loop {
        // Wait for a free place before accepting, so a flood queues in the
        // backlog instead of costing memory here.
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = shutdown.cancelled() => break,
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        // rmcp writes each reply in several small chunks: without TCP_NODELAY,
        // Nagle and delayed ACKs add ~40 ms to every request.
        let _ = tcp.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: http::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            router.clone().oneshot(request.map(axum::body::Body::new))
        });
        let builders = builders.clone();
        let watcher = graceful.watcher();
        let shutdown = shutdown.clone();
        tasks.spawn(async move {
            // A client that connects and says nothing gets the same deadline
            // as one that never finishes its headers (hyper's own timer only
            // starts once it reads).
            let protocol = tokio::select! {
                sniffed = tokio::time::timeout(limits.header_read_timeout, sniff(&tcp)) => sniffed,
                _ = shutdown.cancelled() => return,
            };
            let builder = match protocol {
                Ok(Ok(Some(Protocol::Http1))) => &builders[0],
                Ok(Ok(Some(Protocol::Http2))) => &builders[1],
                Ok(Ok(None)) => return,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "connection failed before its request"),
                Err(_) => return tracing::debug!(%peer, "connection sent nothing in time; closed"),
            };
            let connection = watcher.watch(builder.serve_connection(TokioIo::new(tcp), service));
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(DRAIN_TIMEOUT) => tracing::warn!("connections still open after the drain timeout"),
    }
}
