//! Does `[[notify]]` delivery add anything to the gate? Wake latency
//! (decision POST → the waiting `resume` call returns), measured in one run
//! on two servers side by side: one without targets, one with a signed
//! `json` target (a local receiver in this process that answers 204). The
//! approvals alternate between the two, so both see the same machine load.
//!
//! `cargo run --release --example bench_notify -- target/release/gatehouse 1000`

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod support;
use support::{ACCEPT, messages, percentile, sign_in};

/// A running server with a signed-in admin and an MCP session.
struct Server {
    child: Child,
    _dir: tempfile::TempDir,
    base: String,
    cookie: String,
    token: String,
    sid: String,
    client: reqwest::Client,
}

impl Server {
    async fn start(bin: &str, config: Option<&str>) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_str().unwrap().to_string();
        let mut add = Command::new(bin)
            .args(["--data-dir", &data, "user", "add", "ada", "--admin", "--password-stdin"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        add.stdin.take().unwrap().write_all(b"bench password").unwrap();
        assert!(add.wait().unwrap().success());
        let issued = Command::new(bin)
            .args(["--data-dir", &data, "token", "issue", "--agent", "bench", "--owner", "ada", "--json"])
            .output()
            .unwrap();
        let token = serde_json::from_slice::<Value>(&issued.stdout).unwrap()["token"].as_str().unwrap().to_string();
        let mut command = Command::new(bin);
        command.args(["--listen", "127.0.0.1:0", "--data-dir", &data]);
        if let Some(text) = config {
            let path = dir.path().join("gatehouse.toml");
            std::fs::write(&path, text).unwrap();
            command.arg("--config").arg(path);
        }
        let mut child = command
            .env("GATEHOUSE_APPROVAL_TTL", "1h")
            .env("GATEHOUSE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut banner = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("listening on") {
            line.clear();
            assert!(banner.read_line(&mut line).unwrap() > 0, "the server exited");
        }
        let base = line.split("listening on ").nth(1).unwrap().trim().to_string();
        let client = reqwest::Client::builder().pool_max_idle_per_host(64).build().unwrap();
        let cookie = sign_in(&client, &base, "ada", "bench password").await.unwrap();
        let init = client
            .post(format!("{base}/mcp"))
            .bearer_auth(&token)
            .header("accept", ACCEPT)
            .json(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}))
            .send()
            .await
            .unwrap();
        let sid = init.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let server = Server { child, _dir: dir, base, cookie, token, sid, client };
        server
            .client
            .post(format!("{}/mcp", server.base))
            .bearer_auth(&server.token)
            .header("accept", ACCEPT)
            .header("mcp-session-id", &server.sid)
            .json(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
            .send()
            .await
            .unwrap();
        server
    }

    async fn rpc(&self, id: u64, method: &str, params: Value) -> Value {
        let r = self
            .client
            .post(format!("{}/mcp", self.base))
            .bearer_auth(&self.token)
            .header("accept", ACCEPT)
            .header("mcp-session-id", &self.sid)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .send()
            .await
            .unwrap();
        messages(r).await.unwrap_or_default().into_iter().find(|m| m["id"] == id).unwrap_or(Value::Null)
    }

    /// One approval: pause a call, let `resume` wait, decide; the wake latency in ms.
    async fn wake(self: &Arc<Self>, i: u64) -> f64 {
        let id = 1_000_000 + i * 2;
        let reply = self
            .rpc(id, "tools/call", json!({"name": "gatehouse_policy_set", "arguments": {"pattern": format!("bench_{id}"), "action": "allow"}}))
            .await;
        let eid = reply["result"]["structuredContent"]["executionId"].as_str().expect("paused").to_string();
        let waiter = {
            let (server, eid) = (self.clone(), eid.clone());
            tokio::spawn(async move {
                let reply = server
                    .rpc(id + 1, "tools/call", json!({"name": "resume", "arguments": {"executionId": eid}}))
                    .await;
                (Instant::now(), reply)
            })
        };
        // Let the resume call reach its wait before deciding.
        tokio::time::sleep(Duration::from_millis(3)).await;
        let start = Instant::now();
        let r = self
            .client
            .post(format!("{}/api/executions/{eid}/resume", self.base))
            .header("origin", &self.base)
            .header("cookie", &self.cookie)
            .json(&json!({"action": "accept"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let (done, reply) = waiter.await.unwrap();
        assert_eq!(reply["result"]["isError"], false, "{reply}");
        done.duration_since(start).as_secs_f64() * 1000.0
    }

    async fn metric(&self, prefix: &str) -> String {
        let metrics = self
            .client
            .get(format!("{}/metrics", self.base))
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metrics.lines().filter(|l| l.starts_with(prefix)).collect::<Vec<_>>().join("; ")
    }
}

fn report(name: &str, mut wake: Vec<f64>) {
    wake.sort_by(f64::total_cmp);
    println!(
        "{name}: wake latency over {} approvals: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        wake.len(),
        percentile(&wake, 0.5),
        percentile(&wake, 0.99),
        wake.last().unwrap()
    );
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let bin = args.next().unwrap_or_else(|| "target/release/gatehouse".into());
    let approvals: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);

    // The receiver: counts messages, answers 204 at once.
    let received = Arc::new(AtomicU64::new(0));
    let counter = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |_body: String| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::Relaxed);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let config =
        format!("[[notify]]\nurl = \"{hook}\"\nformat = \"json\"\nsecret = \"bench-signing-key-0123456789\"\n");
    let plain = Arc::new(Server::start(&bin, None).await);
    let notifying = Arc::new(Server::start(&bin, Some(&config)).await);
    // Warm both up (connections, caches) before measuring.
    for i in 0..20 {
        plain.wake(i).await;
        notifying.wake(i).await;
    }
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for i in 20..20 + approvals {
        without.push(plain.wake(i).await);
        with.push(notifying.wake(i).await);
    }
    report("without [[notify]]", without);
    report("with a json [[notify]] target", with);
    // Each approval makes two messages (pending, approved); let the last arrive.
    let expected = 2 * (approvals + 20);
    for _ in 0..100 {
        if received.load(Ordering::Relaxed) >= expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "receiver got {} messages (expected {expected}); {}",
        received.load(Ordering::Relaxed),
        notifying.metric("gatehouse_notify_messages_total").await
    );
    for server in [plain, notifying] {
        let mut server = Arc::try_unwrap(server).ok().expect("no other holder");
        let _ = server.child.kill();
        let _ = server.child.wait();
    }
}
