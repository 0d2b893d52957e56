//! One client connection to an upstream (a stdio child process of our own
//! making, or rmcp's Streamable HTTP client) with its relay, and the bounds
//! that keep a misbehaving upstream from exhausting the gateway: a longest
//! stdout line, a largest HTTP response, a bounded stderr tail, a connect
//! timeout, no HTTP redirects and a cleared child environment.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientCacheConfig, Peer, RunningService};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, Transport};
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio_util::task::TaskTracker;

use super::relay::{InOrder, Relay, RelayState};
use crate::config::UpstreamConfig;

/// The variables of Gatehouse's own environment a stdio child gets (when
/// set): where programs and temporary files are, who and where it runs,
/// locale, and the trusted CA files (paths, not secrets). Everything else is
/// cleared, so the gateway's secrets never reach an upstream unless `env` or
/// `inherit_env` names them (proxy variables may carry credentials, so they
/// are not here).
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "TMPDIR",
    "TZ",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];

/// How long a stdio child may take to exit after its stdin closes before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// How long rmcp's `Auto` lifecycle waits for an answer to `server/discover`
/// before it falls back to `initialize` (its private
/// `DEFAULT_AUTO_DISCOVER_TIMEOUT`, not configurable). A connection that
/// tries discover first gets this much on top of `connect_timeout`, so an
/// upstream that silently ignores the probe still has its whole
/// `connect_timeout` for `initialize`.
pub(crate) const DISCOVER_WAIT: Duration = Duration::from_secs(10);

/// How a connection starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    /// `server/discover` first: 2026-07-28 with an upstream that offers it,
    /// else `initialize` (2025-11-25) on the same connection.
    Auto,
    /// `initialize` only: an upstream known to speak 2025-11-25, or one whose
    /// last discover attempt failed outright (some exit on an unknown method).
    Initialize,
}

impl Lifecycle {
    fn mode(self) -> ClientLifecycleMode {
        match self {
            Lifecycle::Auto => ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
            Lifecycle::Initialize => ClientLifecycleMode::Initialize,
        }
    }

    /// How long starting may take in all.
    fn deadline(self, connect_timeout: Duration) -> Duration {
        match self {
            Lifecycle::Auto => connect_timeout.saturating_add(DISCOVER_WAIT),
            Lifecycle::Initialize => connect_timeout,
        }
    }

    /// The way to try after an attempt this way failed: the other one (an
    /// upstream that choked on discover gets `initialize`; one that refused
    /// `initialize`, perhaps 2026-07-28 only, gets discover again).
    pub(crate) fn other(self) -> Self {
        match self {
            Lifecycle::Auto => Lifecycle::Initialize,
            Lifecycle::Initialize => Lifecycle::Auto,
        }
    }
}

/// Whether the upstream at the other end of `peer` negotiated 2026-07-28 or later.
pub(crate) fn is_modern(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info().is_some_and(|i| i.protocol_version >= ProtocolVersion::V_2026_07_28)
}

/// How much of one stderr line goes to the debug log.
const LOGGED_LINE_BYTES: usize = 1024;

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    /// The child process could not be started.
    #[error("cannot start {command:?}: {source}")]
    Spawn {
        /// The configured command.
        command: String,
        /// Why.
        source: io::Error,
    },
    /// A configured header is not a valid HTTP header.
    #[error("header {0:?} is not a valid HTTP header")]
    Header(String),
    /// The `ca_file` could not be used.
    #[error("ca_file {path}: {message}")]
    CaFile {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The HTTP client could not be built.
    #[error("HTTP client: {0}")]
    Client(String),
    /// `server/discover` and `initialize` failed (the chain of causes).
    #[error("{at}: initialize failed: {message}")]
    Initialize {
        /// The command or URL.
        at: String,
        /// Why.
        message: String,
    },
    /// Starting and `initialize` took longer than `connect_timeout` (plus
    /// [`DISCOVER_WAIT`] when discover was tried first).
    #[error(
        "{at}: no answer to initialize within connect_timeout ({}){}",
        humantime::format_duration(*.timeout),
        if *.discovered { " (after waiting for an answer to server/discover)" } else { "" }
    )]
    Timeout {
        /// The command or URL.
        at: String,
        /// The configured timeout.
        timeout: Duration,
        /// Whether discover was tried first (and had [`DISCOVER_WAIT`] more).
        discovered: bool,
    },
    /// Neither `command` nor `url` (the config check prevents this).
    #[error("no command or url")]
    Unconfigured,
}

/// A live connection: what sends to the upstream and what relays back.
#[derive(Clone)]
pub(crate) struct Link {
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) relay: Arc<RelayState>,
    /// An agent session's own connection, held here so that it closes with
    /// that session; `None` for an upstream's shared connection (its
    /// supervisor owns that one).
    pub(crate) session: Option<Arc<RunningService<RoleClient, Relay>>>,
    /// The upstream's `call_timeout`, for what is sent on this connection.
    pub(crate) call_timeout: Duration,
    /// A stdio child's watch (to say why its connection failed).
    pub(crate) watch: Option<ChildWatch>,
}

impl Link {
    /// Whether this is the upstream's shared connection (not one agent's).
    pub(crate) fn shared(&self) -> bool {
        self.session.is_none()
    }

    /// Why a request on this connection failed, naming the limit that
    /// Gatehouse enforced if that is why.
    pub(crate) fn why(&self, e: &rmcp::service::ServiceError) -> String {
        if let Some(violation) = self.watch.as_ref().and_then(ChildWatch::violation) {
            return violation;
        }
        match response_too_large(e) {
            Some(max) => format!("the upstream's response was larger than max_response_bytes ({max} bytes)"),
            None => super::errors::error_chain(e),
        }
    }
}

/// The limit an HTTP response exceeded, if that is what `e` comes from.
fn response_too_large(e: &(dyn std::error::Error + 'static)) -> Option<usize> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut next = Some(e);
    while let Some(error) = next {
        if let Some(StreamableHttpError::ResponseBodyTooLarge { max_size }) =
            error.downcast_ref::<StreamableHttpError<upstream_http::Error>>()
        {
            return Some(*max_size);
        }
        next = error.source();
    }
    None
}

/// A started connection.
pub(crate) struct Connection {
    pub(crate) service: RunningService<RoleClient, Relay>,
    /// A stdio child's process id.
    pub(crate) pid: Option<u32>,
}

/// What the supervisor reads about a stdio child after it ends.
#[derive(Clone)]
pub(crate) struct ChildWatch {
    /// The latest bytes it wrote to stderr.
    stderr: Arc<Mutex<StderrTail>>,
    /// Set once it wrote a line longer than `max_line_bytes`.
    overlong: Arc<AtomicBool>,
    max_line_bytes: usize,
}

impl ChildWatch {
    /// A watch for the next child of `config`.
    pub(crate) fn new(config: &UpstreamConfig) -> Self {
        ChildWatch {
            stderr: Arc::new(Mutex::new(StderrTail::new(config.stderr_tail_bytes))),
            overlong: Arc::new(AtomicBool::new(false)),
            max_line_bytes: config.max_line_bytes,
        }
    }

    /// The stderr tail as text.
    pub(crate) fn stderr_tail(&self) -> String {
        self.stderr.lock().unwrap_or_else(|p| p.into_inner()).text()
    }

    /// The last non-empty stderr line (its first 200 characters).
    pub(crate) fn last_line(&self) -> Option<String> {
        let tail = self.stderr_tail();
        let line = tail.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
        Some(line.chars().take(200).collect())
    }

    /// Why the connection was failed by Gatehouse, if it was.
    pub(crate) fn violation(&self) -> Option<String> {
        self.overlong
            .load(Ordering::Relaxed)
            .then(|| format!("the upstream wrote a line longer than max_line_bytes ({} bytes)", self.max_line_bytes))
    }
}

/// Starts a client for `config` with `relay` as its handler, within
/// `connect_timeout` (spawn or connect, then `lifecycle`: discover or
/// `initialize`; [`DISCOVER_WAIT`] more when discover is tried); a stdio
/// child reports its stderr and line-length violation to `watch`.
pub(crate) async fn connect(
    config: &UpstreamConfig,
    relay: Relay,
    watch: Option<&ChildWatch>,
    lifecycle: Lifecycle,
) -> Result<Connection, LinkError> {
    let at = match (&config.command, &config.url) {
        (Some(command), _) => command.clone(),
        (None, Some(url)) => url.to_string(),
        (None, None) => return Err(LinkError::Unconfigured),
    };
    let timeout = config.connect_timeout;
    let watch = watch.cloned().unwrap_or_else(|| ChildWatch::new(config));
    let discovered = lifecycle == Lifecycle::Auto;
    tokio::time::timeout(lifecycle.deadline(timeout), connect_now(config, relay, &at, watch, lifecycle))
        .await
        .map_err(|_| LinkError::Timeout { at: at.clone(), timeout, discovered })?
}

async fn connect_now(
    config: &UpstreamConfig,
    relay: Relay,
    at: &str,
    watch: ChildWatch,
    lifecycle: Lifecycle,
) -> Result<Connection, LinkError> {
    let initialize_failed = |e: rmcp::service::ClientInitializeError| LinkError::Initialize {
        at: at.to_string(),
        message: super::errors::error_chain(&e),
    };
    if let Some(command) = &config.command {
        let (transport, pid) = spawn_child(config, command, &watch, &relay.state.tasks)?;
        let transport = InOrder::new(transport, relay.state.clone());
        let service = relay.clone().serve_with_lifecycle(transport, lifecycle.mode()).await.map_err(|e| {
            // The child may have been failed by us; say so rather than "connection closed".
            match watch.violation() {
                Some(why) => LinkError::Initialize { at: at.to_string(), message: why },
                None => initialize_failed(e),
            }
        })?;
        without_cache(&service).await;
        return Ok(Connection { service, pid });
    }
    let url = config.url.as_ref().ok_or(LinkError::Unconfigured)?;
    // Only the configured headers go upstream; a client's token never does.
    let mut headers = HashMap::new();
    for (name, value) in &config.headers {
        let bad = || LinkError::Header(name.clone());
        headers.insert(
            http::HeaderName::try_from(name.as_str()).map_err(|_| bad())?,
            http::HeaderValue::try_from(value.as_str()).map_err(|_| bad())?,
        );
    }
    let client = http_client(config)?;
    let transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
        .custom_headers(headers)
        // The shared connection carries every stateless agent's calls: rmcp's
        // default of 16 requests in flight would queue the rest.
        .max_concurrent_requests(256)
        .max_json_response_size(config.max_response_bytes)
        .max_sse_event_size(config.max_response_bytes)
        // An upstream that forgot the session (404) gets a new one.
        .reinit_on_expired_session(true);
    let transport = StreamableHttpClientTransport::with_client(client, transport_config);
    let transport = InOrder::new(transport, relay.state.clone());
    let service = relay.clone().serve_with_lifecycle(transport, lifecycle.mode()).await.map_err(initialize_failed)?;
    without_cache(&service).await;
    Ok(Connection { service, pid: None })
}

/// Starts a stdio child with a cleared environment (plus [`INHERITED_ENV`],
/// `inherit_env` and `env`), its stdout read through a line-length guard and
/// its stderr kept as a bounded tail (read by a task on `tasks`, which
/// ends when the child closes its stderr).
fn spawn_child(
    config: &UpstreamConfig,
    command: &str,
    watch: &ChildWatch,
    tasks: &TaskTracker,
) -> Result<(ChildTransport, Option<u32>), LinkError> {
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(&config.args).env_clear();
    for name in INHERITED_ENV.iter().copied().chain(config.inherit_env.iter().map(String::as_str)) {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    cmd.envs(&config.env);
    if let Some(cwd) = &config.cwd {
        cmd.current_dir(cwd);
    }
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        // Whatever way the connection ends, the child does not outlive it.
        .kill_on_drop(true);
    let spawn_error = |source| LinkError::Spawn { command: command.to_string(), source };
    let mut child = cmd.spawn().map_err(spawn_error)?;
    let missing = || spawn_error(io::Error::other("a standard stream was not piped"));
    let stdout = child.stdout.take().ok_or_else(missing)?;
    let stdin = child.stdin.take().ok_or_else(missing)?;
    let stderr = child.stderr.take().ok_or_else(missing)?;
    tasks.spawn(capture_stderr(config.name.clone(), stderr, watch.stderr.clone()));
    let stdout = LineLimit { inner: stdout, max: config.max_line_bytes, run: 0, tripped: watch.overlong.clone() };
    // rmcp's own cap (which drops a long line and carries on) stays above
    // ours, so ours decides: a long line fails the connection.
    let io = AsyncRwTransport::new(stdout, stdin).with_max_line_length(config.max_line_bytes.saturating_add(2));
    let pid = child.id();
    Ok((ChildTransport { child, io }, pid))
}

/// rmcp's client caches list and read results (and serves stale ones on
/// error); a gateway must not hand one agent's cached answer to another, nor
/// keep an old one, so every connection asks the upstream each time.
async fn without_cache(service: &RunningService<RoleClient, Relay>) {
    service.peer().set_response_cache_config(ClientCacheConfig::disabled()).await;
}

/// Makes rustls' ring provider the process default: every reqwest client in
/// the process (rmcp's too) is built without one and needs it. Idempotent.
pub fn install_crypto_provider() {
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        // Fails only if another provider was installed first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The HTTP client for an upstream: rustls (ring), the system's roots plus
/// the upstream's `ca_file`; redirects are not followed (one would carry the
/// configured headers and the session to wherever the upstream points), and
/// the TCP/TLS connect is bounded by `connect_timeout`.
fn http_client(config: &UpstreamConfig) -> Result<upstream_http::Client, LinkError> {
    install_crypto_provider();
    let mut builder = upstream_http::Client::builder()
        .redirect(upstream_http::redirect::Policy::none())
        .connect_timeout(config.connect_timeout);
    if let Some(path) = &config.ca_file {
        let ca_error = |message: String| LinkError::CaFile { path: path.display().to_string(), message };
        let pem = std::fs::read(path).map_err(|e| ca_error(e.to_string()))?;
        let certs = upstream_http::Certificate::from_pem_bundle(&pem).map_err(|e| ca_error(e.to_string()))?;
        builder = builder.tls_certs_merge(certs);
    }
    builder.build().map_err(|e| LinkError::Client(super::errors::error_chain(&e)))
}

/// A stdio child and the transport over its stdin and (guarded) stdout.
pub(crate) struct ChildTransport {
    child: Child,
    io: AsyncRwTransport<RoleClient, LineLimit<ChildStdout>, ChildStdin>,
}

impl Transport<RoleClient> for ChildTransport {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.io.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.io.receive()
    }

    /// Closes its stdin (the stdio way to ask a server to stop), gives it a
    /// moment to exit, then kills it.
    async fn close(&mut self) -> Result<(), Self::Error> {
        self.io.close().await?;
        if tokio::time::timeout(EXIT_GRACE, self.child.wait()).await.is_err() {
            self.child.start_kill()?;
        }
        Ok(())
    }
}

/// A reader that fails once more than `max` bytes pass without a newline,
/// so a child cannot make the gateway buffer an endless line.
pub(crate) struct LineLimit<R> {
    inner: R,
    max: usize,
    /// Bytes since the last newline.
    run: usize,
    tripped: Arc<AtomicBool>,
}

impl<R> LineLimit<R> {
    /// Counts `bytes` into the current line; `false` once it is too long.
    fn admit(&mut self, bytes: &[u8]) -> bool {
        let mut pieces = bytes.split(|b| *b == b'\n');
        if let Some(first) = pieces.next() {
            self.run = self.run.saturating_add(first.len());
        }
        for piece in pieces {
            // A newline ended the line before this piece.
            self.run = piece.len();
            if self.run > self.max {
                break;
            }
        }
        self.run <= self.max
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineLimit<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.tripped.load(Ordering::Relaxed) {
            return Poll::Ready(Err(too_long(self.max)));
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        let this = &mut *self;
        if this.admit(&buf.filled()[before..]) {
            return Poll::Ready(Ok(()));
        }
        buf.set_filled(before);
        this.tripped.store(true, Ordering::Relaxed);
        Poll::Ready(Err(too_long(this.max)))
    }
}

fn too_long(max: usize) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("line longer than max_line_bytes ({max} bytes)"))
}

/// The latest bytes of a child's stderr, at most `max` of them.
pub(crate) struct StderrTail {
    max: usize,
    bytes: VecDeque<u8>,
}

impl StderrTail {
    fn new(max: usize) -> Self {
        StderrTail { max, bytes: VecDeque::new() }
    }

    fn push(&mut self, chunk: &[u8]) {
        let keep = &chunk[chunk.len().saturating_sub(self.max)..];
        let overflow = (self.bytes.len() + keep.len()).saturating_sub(self.max);
        self.bytes.drain(..overflow);
        self.bytes.extend(keep);
    }

    /// The tail as text (never longer than `max` bytes: a character cut at
    /// the start is dropped, invalid bytes shown as `\x..`).
    pub(crate) fn text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        let mut all = [a, b].concat();
        let cut = all.iter().take_while(|b| (**b & 0b1100_0000) == 0b1000_0000).count();
        all.drain(..cut);
        match String::from_utf8(all) {
            Ok(text) => text,
            Err(e) => {
                let escaped = e.as_bytes().escape_ascii().to_string();
                escaped[escaped.len().saturating_sub(self.max)..].to_string()
            }
        }
    }
}

/// Reads a child's stderr into its bounded tail, and each line (cut short)
/// to the debug log; never holds more than one chunk and one logged line.
async fn capture_stderr(name: String, mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<StderrTail>>) {
    let mut chunk = vec![0u8; 8192];
    let mut line = Vec::new();
    loop {
        let n = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        tail.lock().unwrap_or_else(|p| p.into_inner()).push(&chunk[..n]);
        for piece in chunk[..n].split_inclusive(|b| *b == b'\n') {
            let (text, ended) = match piece.strip_suffix(b"\n") {
                Some(text) => (text, true),
                None => (piece, false),
            };
            let room = LOGGED_LINE_BYTES.saturating_sub(line.len());
            line.extend_from_slice(&text[..text.len().min(room)]);
            if ended {
                tracing::debug!(upstream = %name, "{}", String::from_utf8_lossy(&line));
                line.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_limit_counts_across_reads_and_resets_at_newlines() {
        let mut limit =
            LineLimit { inner: tokio::io::empty(), max: 5, run: 0, tripped: Arc::new(AtomicBool::new(false)) };
        assert!(limit.admit(b"abc"));
        assert!(limit.admit(b"de\nabcde\n"));
        assert!(limit.admit(b"abcde"));
        assert!(!limit.admit(b"f"));
        let mut limit =
            LineLimit { inner: tokio::io::empty(), max: 5, run: 0, tripped: Arc::new(AtomicBool::new(false)) };
        assert!(!limit.admit(b"ab\nabcdef\nab"), "a long line in the middle of a chunk");
    }

    #[tokio::test]
    async fn a_line_limit_fails_the_read_of_a_long_line() {
        let tripped = Arc::new(AtomicBool::new(false));
        let mut limit = LineLimit { inner: &b"ok\n0123456789\n"[..], max: 4, run: 0, tripped: tripped.clone() };
        let mut all = Vec::new();
        let err = limit.read_to_end(&mut all).await.unwrap_err();
        assert!(err.to_string().contains("max_line_bytes (4 bytes)"), "{err}");
        assert!(tripped.load(Ordering::Relaxed));
    }

    #[test]
    fn a_stderr_tail_keeps_only_the_latest_bytes() {
        let mut tail = StderrTail::new(8);
        tail.push(b"0123456789");
        tail.push(b"ab");
        assert_eq!(tail.text(), "456789ab");
        tail.push(&[b'x'; 100]);
        assert_eq!(tail.text(), "xxxxxxxx");
        let mut tail = StderrTail::new(3);
        tail.push("aé".as_bytes());
        tail.push(b"b");
        assert_eq!(tail.text(), "éb");
    }
}
