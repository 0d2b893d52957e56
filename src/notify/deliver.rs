//! Delivery: one worker per target, fed by a bounded queue. A full queue
//! drops the new message (counted) rather than wait, each attempt has a
//! timeout, failures are retried with exponential backoff, redirects are
//! never followed, and every outcome is counted and kept for the console.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::config::Target;
use super::format::{self, Notice};

/// Messages waiting per target; more are dropped (and counted).
pub const QUEUE_CAPACITY: usize = 256;
/// Attempts per message (the first and its retries).
pub const ATTEMPTS: u32 = 4;
/// Wait before the first retry; doubled each time, at most [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(8);
/// After shutdown begins, how long a worker may go on sending what is queued
/// (single attempts); below the server's drain deadline for background tasks.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Why one attempt failed (worded for the console; never the URL or secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// The receiver answered with a status outside 2xx.
    #[error("HTTP {0}")]
    Status(u16),
    /// The request did not complete.
    #[error("{0}")]
    Request(String),
}

impl DeliveryError {
    /// Whether another attempt could succeed: network trouble, 408, 429, 5xx.
    fn retryable(&self) -> bool {
        match self {
            DeliveryError::Status(code) => *code >= 500 || matches!(code, 408 | 429),
            DeliveryError::Request(_) => true,
        }
    }
}

/// What the console and `/metrics` show of one target.
#[derive(Debug, Default)]
pub struct TargetStatus {
    /// Messages the receiver accepted.
    pub delivered: AtomicU64,
    /// Messages given up on after the last attempt.
    pub failed: AtomicU64,
    /// Messages dropped because the queue was full (or at shutdown).
    pub dropped: AtomicU64,
    last: Mutex<Last>,
}

/// The latest outcomes of a target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Last {
    /// When a message was last accepted (Unix ms).
    pub success_ms: Option<i64>,
    /// When a message was last given up on (Unix ms).
    pub failure_ms: Option<i64>,
    /// Why that was.
    pub error: Option<String>,
}

impl TargetStatus {
    /// The latest outcomes.
    pub fn last(&self) -> Last {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn succeeded(&self, now_ms: i64) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
        self.last.lock().unwrap_or_else(|p| p.into_inner()).success_ms = Some(now_ms);
    }

    fn gave_up(&self, now_ms: i64, error: &DeliveryError) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.failure_ms = Some(now_ms);
        last.error = Some(error.to_string());
    }
}

/// The HTTP client for every target: no redirects (a redirect would carry
/// the signed message somewhere the operator did not configure).
pub fn client() -> upstream_http::Client {
    crate::tls::install_crypto_provider();
    upstream_http::Client::builder()
        .redirect(upstream_http::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("a client without custom TLS settings builds")
}

/// A target's queue and what drains it.
pub struct Worker {
    /// The target.
    pub target: Arc<Target>,
    /// Its counters and latest outcomes.
    pub status: Arc<TargetStatus>,
    /// Its queue.
    pub rx: mpsc::Receiver<Notice>,
    /// The shared client.
    pub client: upstream_http::Client,
    /// The stores' "now", for the console's times.
    pub clock: Arc<dyn gatehouse_core::Clock>,
    /// Cancelled at shutdown.
    pub shutdown: CancellationToken,
}

impl Worker {
    /// Sends each queued message until the queue closes (the watcher ended);
    /// after shutdown begins, for at most [`SHUTDOWN_GRACE`], without retries.
    pub async fn run(mut self) {
        let shutdown = self.shutdown.clone();
        let status = self.status.clone();
        let deadline = async {
            shutdown.cancelled().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        let mut rx = std::mem::replace(&mut self.rx, mpsc::channel(1).1);
        tokio::select! {
            _ = async {
                while let Some(notice) = rx.recv().await {
                    self.deliver(&notice).await;
                }
            } => {}
            _ = deadline => {
                let left = rx.len() as u64;
                status.dropped.fetch_add(left, Ordering::Relaxed);
                tracing::warn!(target_name = %self.target.name, left, "notifications still queued at shutdown were dropped");
            }
        }
    }

    async fn deliver(&self, notice: &Notice) {
        let outgoing = format::render(&self.target, notice);
        let delivery = uuid::Uuid::new_v4().to_string();
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=ATTEMPTS {
            let error = match self.attempt(&outgoing, &delivery).await {
                Ok(()) => {
                    self.status.succeeded(self.clock.now_ms());
                    return;
                }
                Err(e) => e,
            };
            let last = attempt == ATTEMPTS || !error.retryable() || self.shutdown.is_cancelled();
            tracing::warn!(
                target_name = %self.target.name,
                execution = %notice.execution_id,
                event = %notice.event,
                attempt,
                error = %error,
                gave_up = last,
                "notification not delivered"
            );
            if last {
                self.status.gave_up(self.clock.now_ms(), &error);
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = self.shutdown.cancelled() => {
                    self.status.gave_up(self.clock.now_ms(), &error);
                    return;
                }
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    async fn attempt(&self, outgoing: &format::Outgoing, delivery: &str) -> Result<(), DeliveryError> {
        send_once(&self.client, &self.target, outgoing, delivery).await
    }
}

/// One attempt to deliver `outgoing` to `target` (`delivery`: the id a
/// receiver may dedupe retries by), signed if the target signs.
pub async fn send_once(
    client: &upstream_http::Client,
    target: &Target,
    outgoing: &format::Outgoing,
    delivery: &str,
) -> Result<(), DeliveryError> {
    let mut request = client
        .post(target.url.clone())
        .timeout(target.timeout)
        .header("content-type", outgoing.content_type)
        .header("user-agent", concat!("gatehouse/", env!("CARGO_PKG_VERSION")))
        .header("gatehouse-delivery", delivery);
    for (name, value) in &outgoing.headers {
        request = request.header(*name, value);
    }
    if target.format == super::config::Format::Json
        && let Some(secret) = &target.secret
    {
        // Signed per attempt: a retry carries a fresh timestamp, so it is
        // not refused as a replay by a receiver that checks freshness.
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or_default();
        request = request.header("gatehouse-signature", format::sign(secret, unix, &outgoing.body));
    }
    let response = request.body(outgoing.body.clone()).send().await.map_err(describe)?;
    let status = response.status();
    if status.is_success() { Ok(()) } else { Err(DeliveryError::Status(status.as_u16())) }
}

/// A request error without its URL (a path or query may hold a token).
fn describe(error: upstream_http::Error) -> DeliveryError {
    let timeout = error.is_timeout();
    let error = error.without_url();
    if timeout {
        return DeliveryError::Request("timed out".into());
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    DeliveryError::Request(text)
}
