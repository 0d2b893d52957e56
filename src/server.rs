//! The listener: accepts connections up to a bound, serves each over HTTP/1.1
//! or HTTP/2 with a deadline for its request headers and for idleness, makes
//! idle connections give way when newcomers wait, and drains them on shutdown
//! (mini-redis's `server.rs` shape, with hyper doing the protocol).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::in_flight::hold_until_sent;

/// How long shutdown waits for open connections to finish their requests.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Bounds on what clients may hold.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections served at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// Time a client has to send a request's headers (slow-loris guard),
    /// and the time a new connection may stay without a first request.
    pub header_read_timeout: Duration,
    /// Time a connection may stay open with no request in progress once it
    /// has served one (keep-alive HTTP/1, HTTP/2 without open streams).
    pub idle_timeout: Duration,
}

/// Streams one HTTP/2 connection may have open at once.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 128;

/// How often an HTTP/2 connection is pinged; a peer that does not answer
/// within the header read timeout is dropped.
const H2_PING_INTERVAL: Duration = Duration::from_secs(20);

/// While newcomers wait for a place, connections idle at least this long
/// are closed to make room (a real client sends its request at once).
const PRESSURE_GRACE: Duration = Duration::from_secs(1);

/// How long a connection asked to close gracefully (idle, or under
/// pressure) may take before it is dropped: a silent HTTP/2 peer never
/// answers the GOAWAY's ping.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

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

/// Which protocol a new connection speaks, told from its first bytes (or
/// agreed in its TLS handshake).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    /// HTTP/2: over TLS by ALPN, or in the clear with prior knowledge (a
    /// proxy speaking HTTP/2).
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

/// A connection's byte stream: TCP in the clear, or TLS over it.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// A new connection made ready to serve: in the clear, its protocol told by
/// [`sniff`]; over TLS, the handshake done and the protocol the client chose
/// by ALPN (HTTP/2 if it offered it). `None` when the peer closed first.
async fn open(
    tcp: TcpStream,
    tls: Option<&tokio_rustls::TlsAcceptor>,
) -> std::io::Result<Option<(Protocol, Box<dyn Io>)>> {
    let Some(acceptor) = tls else {
        return Ok(sniff(&tcp).await?.map(|protocol| (protocol, Box::new(tcp) as Box<dyn Io>)));
    };
    let tls = acceptor.accept(tcp).await?;
    let protocol = match tls.get_ref().1.alpn_protocol() {
        Some(b"h2") => Protocol::Http2,
        _ => Protocol::Http1,
    };
    Ok(Some((protocol, Box::new(tls))))
}

/// What one connection is doing: requests in progress (a response counts
/// until its body has ended) and since when it has had none.
struct Activity {
    in_flight: AtomicUsize,
    /// Milliseconds after `base` when the last request ended (or the
    /// connection was accepted).
    idle_since: AtomicU64,
    /// Whether any request was served (a new connection's first request has
    /// the header deadline; later idleness has the idle timeout).
    served: AtomicBool,
    /// Woken when the last request in progress ends.
    became_idle: Notify,
    base: Instant,
}

/// A request in progress on a connection; ends when dropped.
struct Busy(Arc<Activity>);

impl Activity {
    fn new(base: Instant) -> Arc<Self> {
        Arc::new(Self {
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(base.elapsed().as_millis() as u64),
            served: AtomicBool::new(false),
            became_idle: Notify::new(),
            base,
        })
    }

    fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.served.store(true, Ordering::Release);
        Busy(self.clone())
    }

    fn idle_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = self.base + Duration::from_millis(self.idle_since.load(Ordering::Acquire));
        Some(Instant::now().saturating_duration_since(since))
    }

    /// Resolves when the connection should go: idle past its limit, or idle
    /// for [`PRESSURE_GRACE`] while `pressure` says newcomers wait.
    async fn expendable(&self, limits: &ConnectionLimits, pressure: &Notify) {
        loop {
            let Some(idle) = self.idle_for() else {
                self.became_idle.notified().await;
                continue;
            };
            let limit =
                if self.served.load(Ordering::Acquire) { limits.idle_timeout } else { limits.header_read_timeout };
            if idle >= limit {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(limit - idle) => {}
                // A request came and went meanwhile: idle since later, and
                // perhaps with the (other) idle limit.
                _ = self.became_idle.notified() => {}
                _ = pressure.notified() => {
                    if self.idle_for().is_some_and(|idle| idle >= PRESSURE_GRACE.min(limits.header_read_timeout)) {
                        return;
                    }
                }
            }
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.idle_since.store(activity.base.elapsed().as_millis() as u64, Ordering::Release);
        if activity.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            activity.became_idle.notify_one();
        }
    }
}

/// Serves `router` on `listener` until `shutdown`, then drains; each
/// connection (and each HTTP/2 stream hyper spawns) is a task on `tasks`.
/// With `tls`, every connection is TLS: its handshake first, under the same
/// deadline as a first request's headers.
///
/// A connection holds one of `max_connections` places from accept to close.
/// It gives its place up when it has had no request in progress for its
/// limit (the header deadline before its first request, the idle timeout
/// after), and sooner while newcomers wait for a place: then every
/// connection idle for a second goes first, so a flood of silent or idle
/// connections (HTTP/1 or HTTP/2, with or without a credential) cannot keep
/// the people who decide out.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
    tasks: TaskTracker,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    // Newcomers wait for a place: idle connections, make room.
    let pressure = Arc::new(Notify::new());
    let base = Instant::now();
    // One builder per protocol, the protocol told by `sniff`.
    let mut http1 = auto::Builder::new(TrackedExecutor(tasks.clone())).http1_only();
    http1.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let mut http2 = auto::Builder::new(TrackedExecutor(tasks.clone())).http2_only();
    http2
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .keep_alive_interval(H2_PING_INTERVAL)
        .keep_alive_timeout(limits.header_read_timeout);
    let builders = Arc::new([http1, http2]);
    loop {
        // Wait for a free place before accepting, so a flood queues in the
        // backlog instead of costing memory here; while waiting, ask idle
        // connections to make room.
        let Some(permit) = place(&permits, &pressure, &shutdown).await else { break };
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
        let activity = Activity::new(base);
        let router = router.clone();
        let service = hyper::service::service_fn({
            let activity = activity.clone();
            move |mut request: http::Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                let busy = activity.begin();
                let response = router.clone().oneshot(request.map(axum::body::Body::new));
                async move { Ok::<_, std::convert::Infallible>(hold_until_sent(response.await?, busy)) }
            }
        });
        let builders = builders.clone();
        let (shutdown, pressure) = (shutdown.clone(), pressure.clone());
        let tls = tls.clone();
        tasks.spawn(async move {
            // A client that connects and says nothing gets the same deadline
            // as one that never finishes its headers (hyper's own timer only
            // starts once it reads), and goes sooner under pressure: for its
            // first bytes in the clear, for the whole handshake over TLS.
            let opened = tokio::select! {
                opened = open(tcp, tls.as_ref()) => opened,
                _ = activity.expendable(&limits, &pressure) => {
                    return tracing::debug!(%peer, "connection sent nothing in time; closed");
                }
                _ = shutdown.cancelled() => return,
            };
            let (protocol, io) = match opened {
                Ok(Some(opened)) => opened,
                Ok(None) => return,
                Err(e) => return tracing::debug!(%peer, error = %e, "connection failed before its request"),
            };
            let builder = match protocol {
                Protocol::Http1 => &builders[0],
                Protocol::Http2 => &builders[1],
            };
            let connection = builder.serve_connection(TokioIo::new(io), service);
            tokio::pin!(connection);
            // Asked to close (idle, pressure, shutdown): by when it must have.
            let mut closing: Option<Instant> = None;
            let ended = loop {
                let deadline = closing.unwrap_or_else(Instant::now);
                tokio::select! {
                    ended = connection.as_mut() => break ended,
                    _ = activity.expendable(&limits, &pressure), if closing.is_none() => {
                        tracing::debug!(%peer, "idle connection closed");
                        connection.as_mut().graceful_shutdown();
                        closing = Some(Instant::now() + CLOSE_GRACE);
                    }
                    _ = shutdown.cancelled(), if closing.is_none() => {
                        connection.as_mut().graceful_shutdown();
                        closing = Some(Instant::now() + DRAIN_TIMEOUT);
                    }
                    _ = tokio::time::sleep_until(deadline.into()), if closing.is_some() => {
                        tracing::debug!(%peer, "connection dropped after its close grace");
                        break Ok(());
                    }
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    // Every connection gives its place back once it has closed (each is
    // dropped at the latest DRAIN_TIMEOUT after shutdown).
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(DRAIN_TIMEOUT + CLOSE_GRACE, permits.acquire_many(all)).await.is_err() {
        tracing::warn!("connections still open after the drain timeout");
    }
}

/// A connection place, or `None` at shutdown. While none is free, every
/// quarter of [`PRESSURE_GRACE`] idle connections are asked to make room.
async fn place(
    permits: &Arc<Semaphore>,
    pressure: &Notify,
    shutdown: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    if let Ok(permit) = permits.clone().try_acquire_owned() {
        return Some(permit);
    }
    let wait = permits.clone().acquire_owned();
    tokio::pin!(wait);
    loop {
        pressure.notify_waiters();
        tokio::select! {
            permit = &mut wait => return permit.ok(),
            _ = tokio::time::sleep(PRESSURE_GRACE / 4) => {}
            _ = shutdown.cancelled() => return None,
        }
    }
}
