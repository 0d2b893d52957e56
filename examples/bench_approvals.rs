//! Approval benchmarks against the real binary:
//! 1. wake latency: decision POST → the waiting `resume` call returns, over N approvals;
//! 2. resident memory with M pending executions, each watched by one SSE stream.
//!
//! `cargo run --release --example bench_approvals -- target/release/gatehouse 1000 10000`
//! (raise `ulimit -n` first: the watchers need M sockets on each side).
//! With `BENCH_HTTP2=1` the watchers share HTTP/2 connections (cleartext, prior
//! knowledge), [`H2_STREAMS`] streams each, as a proxy speaking HTTP/2 to
//! Gatehouse would carry them, instead of one HTTP/1.1 connection each.
//! With `BENCH_TLS=1` Gatehouse serves HTTPS itself (a self-signed
//! certificate made for the run) and every client speaks TLS, HTTP/2 by ALPN:
//! with `BENCH_HTTP2=1` too, [`H2_STREAMS`] watchers share a connection, as
//! a browser's live pages would.
//!
//! `bench_approvals --running WAIT_URL DECIDE_URL TOKEN USER PASSWORD N` measures
//! only the wake latency against servers already running: the call waits on
//! `WAIT_URL`, the decision is made on `DECIDE_URL` (another replica on the same
//! PostgreSQL: `scripts/bench-replicas.sh`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use gatehouse::throttle::STREAMS_PER_SESSION;

mod support;
use support::{ACCEPT, messages, percentile, post, sign_in};

/// Streams per HTTP/2 connection with `BENCH_HTTP2` (the server allows
/// `gatehouse::server::MAX_STREAMS_PER_CONNECTION`, 128).
const H2_STREAMS: usize = 100;

/// With `BENCH_TLS`, the server's certificate (PEM), which every client trusts.
static CERT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

/// A client builder: trusting [`CERT`] alone when the server speaks TLS.
fn builder() -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder();
    match CERT.get() {
        Some(cert) => builder
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(cert).unwrap()),
        None => builder,
    }
}

/// Resident memory in MiB, 0 once the process is gone.
fn rss_mib(pid: u32) -> f64 {
    support::rss_mib(pid).unwrap_or(0.0)
}

struct Mcp {
    client: reqwest::Client,
    url: String,
    token: String,
    sid: String,
}

impl Mcp {
    async fn rpc(&self, id: u64, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let r = post(&self.client, &self.url, &self.token, &self.sid, &request).await.unwrap();
        messages(r).await.unwrap_or_default().into_iter().find(|m| m["id"] == id).unwrap_or(Value::Null)
    }

    async fn pause(&self, id: u64) -> String {
        let reply = self
            .rpc(id, "tools/call", json!({"name": "gatehouse_policy_set", "arguments": {"pattern": format!("bench_{id}"), "action": "allow"}}))
            .await;
        reply["result"]["structuredContent"]["executionId"]
            .as_str()
            .unwrap_or_else(|| panic!("not paused: {reply}"))
            .to_string()
    }
}

impl Mcp {
    /// An initialized MCP session at `base`.
    async fn open(client: &reqwest::Client, base: &str, token: &str) -> Self {
        let init = client
            .post(format!("{base}/mcp"))
            .bearer_auth(token)
            .header("accept", ACCEPT)
            .json(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}))
            .send()
            .await
            .unwrap();
        let sid = init.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let mcp = Mcp { client: client.clone(), url: format!("{base}/mcp"), token: token.to_string(), sid };
        let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
        post(&mcp.client, &mcp.url, &mcp.token, &mcp.sid, &initialized).await.unwrap();
        mcp
    }
}

/// Decision `POST` on `decide_base` → the waiting `resume` on `mcp` returns,
/// `n` times; each in milliseconds, sorted.
async fn wake_latency(
    mcp: &std::sync::Arc<Mcp>,
    client: &reqwest::Client,
    decide_base: &str,
    cookie: &str,
    n: u64,
) -> Vec<f64> {
    let mut wake = Vec::new();
    for i in 0..n {
        let eid = mcp.pause(1_000_000 + i * 2).await;
        let waiter = {
            let (mcp, eid) = (mcp.clone(), eid.clone());
            tokio::spawn(async move {
                let reply = mcp
                    .rpc(1_000_001 + i * 2, "tools/call", json!({"name": "resume", "arguments": {"executionId": eid}}))
                    .await;
                (Instant::now(), reply)
            })
        };
        // Let the resume call reach its wait before deciding.
        tokio::time::sleep(Duration::from_millis(3)).await;
        let start = Instant::now();
        let r = client
            .post(format!("{decide_base}/api/executions/{eid}/resume"))
            .header("origin", decide_base)
            .header("cookie", cookie)
            .json(&json!({"action": "accept"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let (done, reply) = waiter.await.unwrap();
        assert_eq!(reply["result"]["isError"], false, "{reply}");
        wake.push(done.duration_since(start).as_secs_f64() * 1000.0);
    }
    wake.sort_by(f64::total_cmp);
    wake
}

fn report_wake(n: u64, wake: &[f64]) {
    println!(
        "wake latency over {n} approvals: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        percentile(wake, 0.5),
        percentile(wake, 0.99),
        wake.last().unwrap()
    );
}

/// `--running WAIT_URL DECIDE_URL TOKEN USER PASSWORD N`: wake latency only.
async fn running(mut args: impl Iterator<Item = String>) {
    let mut next = || args.next().expect("--running WAIT_URL DECIDE_URL TOKEN USER PASSWORD N");
    let (wait_base, decide_base, token, user, password) = (next(), next(), next(), next(), next());
    let n: u64 = next().parse().expect("N");
    let client = reqwest::Client::builder().pool_max_idle_per_host(64).build().unwrap();
    let cookie = sign_in(&client, &decide_base, &user, &password).await.unwrap();
    let mcp = std::sync::Arc::new(Mcp::open(&client, &wait_base, &token).await);
    report_wake(n, &wake_latency(&mcp, &client, &decide_base, &cookie, n).await);
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("--running") {
        args.next();
        return running(args).await;
    }
    let bin = args.next().unwrap_or_else(|| "target/release/gatehouse".into());
    let approvals: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let watchers: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap().to_string();

    let mut add = Command::new(&bin)
        .args(["--data-dir", &data, "user", "add", "ada", "--admin", "--password-stdin"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    add.stdin.take().unwrap().write_all(b"bench password").unwrap();
    assert!(add.wait().unwrap().success());
    let issued = Command::new(&bin)
        .args(["--data-dir", &data, "token", "issue", "--agent", "bench", "--owner", "ada", "--json"])
        .output()
        .unwrap();
    let token = serde_json::from_slice::<Value>(&issued.stdout).unwrap()["token"].as_str().unwrap().to_string();

    // The gate's own limits, raised through its configuration for the
    // scenario measured: one agent token holding `watchers` live executions
    // (the default allows 20 per credential), and one connection per watcher
    // plus a few for the bench (the default serves 1024 at once).
    let max_executions = (watchers + approvals + 16).to_string();
    let max_connections = (watchers + 256).to_string();
    println!(
        "limits raised for this run: GATEHOUSE_MAX_EXECUTIONS_PER_CREDENTIAL={max_executions} \
         (and GATEHOUSE_MAX_REQUESTS_PER_CREDENTIAL), \
         GATEHOUSE_MAX_CONNECTIONS={max_connections}; watchers spread over browser sessions of \
         {STREAMS_PER_SESSION} streams each (the per-session limit)"
    );
    let tls = std::env::var_os("BENCH_TLS").is_some();
    if tls {
        gatehouse::tls::install_crypto_provider();
        let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        std::fs::write(dir.path().join("cert.pem"), made.cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), made.signing_key.serialize_pem()).unwrap();
        CERT.set(made.cert.pem().into_bytes()).unwrap();
    }
    let mut server = Command::new(&bin);
    if tls {
        server
            .env("GATEHOUSE_TLS_CERT", dir.path().join("cert.pem"))
            .env("GATEHOUSE_TLS_KEY", dir.path().join("key.pem"));
    }
    let mut server = server
        .args(["--listen", "127.0.0.1:0", "--data-dir", &data])
        .env("GATEHOUSE_APPROVAL_TTL", "1h")
        .env("GATEHOUSE_LOG", "warn")
        .env("GATEHOUSE_MAX_EXECUTIONS_PER_CREDENTIAL", &max_executions)
        .env("GATEHOUSE_MAX_REQUESTS_PER_CREDENTIAL", &max_executions)
        .env("GATEHOUSE_MAX_CONNECTIONS", &max_connections)
        // One browser session per 16 watchers, all of them ada's.
        .env("GATEHOUSE_MAX_BROWSER_SESSIONS_PER_USER", "1000000")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = server.id();
    let mut banner = BufReader::new(server.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening on") {
        line.clear();
        banner.read_line(&mut line).unwrap();
    }
    let base = line.split("listening on ").nth(1).unwrap().trim().to_string();

    let client = builder().pool_max_idle_per_host(64).build().unwrap();
    let cookie = sign_in(&client, &base, "ada", "bench password").await.unwrap();
    let mcp = std::sync::Arc::new(Mcp::open(&client, &base, &token).await);

    // 1. Wake latency.
    report_wake(approvals, &wake_latency(&mcp, &client, &base, &cookie, approvals).await);

    // 2. Memory with many pending executions, each watched by one SSE stream.
    let idle = rss_mib(pid);
    let idle_anon = support::anon_mib(pid).unwrap_or(0.0);
    let mut ids = Vec::with_capacity(watchers as usize);
    let mut batch = Vec::new();
    for i in 0..watchers {
        let mcp = mcp.clone();
        batch.push(tokio::spawn(async move { mcp.pause(10_000_000 + i).await }));
        if batch.len() == 64 {
            for t in batch.drain(..) {
                ids.push(t.await.unwrap());
            }
        }
    }
    for t in batch.drain(..) {
        ids.push(t.await.unwrap());
    }
    let pending_only = rss_mib(pid);
    let pending_anon = support::anon_mib(pid).unwrap_or(0.0);
    // A browser session holds at most STREAMS_PER_SESSION live streams: sign
    // in once per that many watchers. Four at once: sign-ins in flight for a
    // username count against its failure threshold (5), and hashing runs
    // two per core anyway.
    let started = Instant::now();
    let sessions = ids.len().div_ceil(STREAMS_PER_SESSION);
    let mut cookies = Vec::with_capacity(sessions);
    let mut signing = Vec::new();
    for _ in 0..sessions {
        let (client, base) = (client.clone(), base.clone());
        signing.push(tokio::spawn(
            async move { sign_in(&client, &base, "ada", "bench password").await.expect("sign-in") },
        ));
        if signing.len() == 4 {
            for t in signing.drain(..) {
                cookies.push(t.await.unwrap());
            }
        }
    }
    for t in signing.drain(..) {
        cookies.push(t.await.unwrap());
    }
    println!("signed in {sessions} browser sessions in {:.1} s", started.elapsed().as_secs_f64());
    let sessions_only = rss_mib(pid);
    // Every page stream starts with the viewer's inbox (`inbox` event: the
    // count and at most INBOX_LIMIT of the pending executions).
    let inbox_bytes = {
        let mut r = client
            .get(format!("{base}/api/approvals/events"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap();
        let mut got = Vec::new();
        while !got.windows(2).any(|w| w == b"\n\n") {
            got.extend_from_slice(&r.chunk().await.unwrap().expect("an inbox event"));
        }
        got.len()
    };
    println!("the inbox event each watcher is sent first: {:.1} KiB", inbox_bytes as f64 / 1024.0);
    // The machine is shared: stop opening watchers once the server holds more
    // than this (a global OOM kill is no measurement).
    let cap_mib: f64 = std::env::var("BENCH_RSS_CAP_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(1536.0);
    let http2 = std::env::var_os("BENCH_HTTP2").is_some();
    let h2_clients: Vec<reqwest::Client> = if http2 {
        (0..ids.len().div_ceil(H2_STREAMS))
            // Over TLS, HTTP/2 is what ALPN agrees on; in the clear, prior knowledge.
            .map(|_| if tls { builder() } else { builder().http2_prior_knowledge() }.build().unwrap())
            .collect()
    } else {
        Vec::new()
    };
    println!(
        "watchers on {}{}",
        if http2 {
            format!("HTTP/2, {H2_STREAMS} streams per connection")
        } else if tls {
            "HTTP/2, one connection each".into()
        } else {
            "HTTP/1.1, one connection each".into()
        },
        if tls { ", over TLS" } else { "" }
    );
    let mut streams = Vec::with_capacity(ids.len());
    for (n, chunk) in ids.chunks(64).enumerate() {
        let rss = rss_mib(pid);
        if rss > cap_mib {
            println!(
                "STOPPED opening watchers at {} of {}: server resident {rss:.1} MiB > cap {cap_mib} MiB (BENCH_RSS_CAP_MIB)",
                streams.len(),
                ids.len()
            );
            break;
        }
        let opened: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(i, eid)| {
                // One connection per stream, as one browser tab per approval
                // would (or a share of an HTTP/2 connection).
                let c = match h2_clients.get((n * 64 + i) / H2_STREAMS) {
                    Some(shared) => shared.clone(),
                    None => builder().build().unwrap(),
                };
                let url = format!("{base}/api/executions/{eid}/events");
                let cookie = cookies[(n * 64 + i) / STREAMS_PER_SESSION].clone();
                tokio::spawn(async move {
                    let mut r = c.get(url).header("cookie", cookie).send().await.unwrap();
                    assert_eq!(r.status(), 200);
                    let first = r.chunk().await.unwrap().unwrap();
                    assert!(String::from_utf8_lossy(&first).contains("pending"));
                    (c, r)
                })
            })
            .collect();
        for t in opened {
            streams.push(t.await.unwrap());
        }
    }
    let watched = rss_mib(pid);
    // /metrics is for admins: read it with the admin's session.
    let metrics = client
        .get(format!("{base}/metrics"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap()
        .text()
        .await
        .unwrap();
    let pending_gauge = metrics
        .lines()
        .find(|l| l.starts_with("gatehouse_approvals_pending "))
        .expect("gatehouse_approvals_pending in /metrics")
        .to_string();
    println!(
        "resident memory: {idle:.1} MiB idle, {pending_only:.1} MiB with {watchers} pending, \
         {sessions_only:.1} MiB with {sessions} browser sessions signed in, \
         {watched:.1} MiB with {} SSE watchers ({pending_gauge})",
        streams.len()
    );
    println!(
        "of which anonymous (heap and stacks; the rest is the executable's own pages): \
         {idle_anon:.1} MiB idle, {pending_anon:.1} MiB with {watchers} pending"
    );
    println!(
        "per SSE watcher: {:.1} KiB ({watched:.1} − {sessions_only:.1} MiB over {})",
        (watched - sessions_only) * 1024.0 / streams.len() as f64,
        streams.len()
    );
    drop(streams);
    let _ = server.kill();
    let _ = server.wait();
}
