//! The stdio transport: an upstream's child process of Gatehouse's own
//! making, with the bounds that keep a misbehaving child from exhausting the
//! gateway: a longest stdout line, a bounded stderr tail, a grace period
//! before it is killed, and a cleared environment. It knows nothing of the
//! relay or the connection built on it (`link.rs`).

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio_util::task::TaskTracker;

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

/// How much of one stderr line goes to the debug log.
const LOGGED_LINE_BYTES: usize = 1024;

/// What the supervisor reads about a stdio child after it ends.
#[derive(Clone)]
pub(crate) struct ChildWatch {
    /// The latest bytes it wrote to stderr.
    stderr: Arc<Mutex<StderrTail>>,
    /// Set once it wrote a line longer than `max_line_bytes`.
    overlong: Arc<AtomicBool>,
    max_line_bytes: usize,
    /// Told once its stderr is read to the end (the child closed it).
    stderr_closed: Arc<tokio::sync::Notify>,
}

impl ChildWatch {
    /// A watch for the next child of `config`.
    pub(crate) fn new(config: &UpstreamConfig) -> Self {
        ChildWatch {
            stderr: Arc::new(Mutex::new(StderrTail::new(config.stderr_tail_bytes))),
            overlong: Arc::new(AtomicBool::new(false)),
            max_line_bytes: config.max_line_bytes,
            stderr_closed: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Waits (up to `within`) for its stderr to be read to the end, so a
    /// child that failed has said its last word before it is reported.
    pub(crate) async fn stderr_read(&self, within: std::time::Duration) {
        let _ = tokio::time::timeout(within, self.stderr_closed.notified()).await;
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

/// Starts a stdio child with a cleared environment (plus [`INHERITED_ENV`],
/// `inherit_env` and `env`), its stdout read through a line-length guard and
/// its stderr kept as a bounded tail (read by a task on `tasks`, which
/// ends when the child closes its stderr).
pub(super) fn spawn_child(
    config: &UpstreamConfig,
    command: &str,
    watch: &ChildWatch,
    tasks: &TaskTracker,
) -> io::Result<(ChildTransport, Option<u32>)> {
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
    let mut child = cmd.spawn()?;
    let missing = || io::Error::other("a standard stream was not piped");
    let stdout = child.stdout.take().ok_or_else(missing)?;
    let stdin = child.stdin.take().ok_or_else(missing)?;
    let stderr = child.stderr.take().ok_or_else(missing)?;
    tasks.spawn(capture_stderr(config.name.clone(), stderr, watch.stderr.clone(), watch.stderr_closed.clone()));
    let stdout = LineLimit { inner: stdout, max: config.max_line_bytes, run: 0, tripped: watch.overlong.clone() };
    // rmcp's own cap (which drops a long line and carries on) stays above
    // ours, so ours decides: a long line fails the connection.
    let io = AsyncRwTransport::new(stdout, stdin).with_max_line_length(config.max_line_bytes.saturating_add(2));
    let pid = child.id();
    Ok((ChildTransport { child, io }, pid))
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
async fn capture_stderr(
    name: String,
    mut stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<StderrTail>>,
    closed: Arc<tokio::sync::Notify>,
) {
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
    // A permit if nobody waits yet: the supervisor's wait then ends at once.
    closed.notify_one();
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
