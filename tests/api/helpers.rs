//! `spawn_app` and small MCP helpers shared by the tests.

use std::sync::Arc;
use std::time::Duration;

use gatehouse::config::Config;
use gatehouse::startup::Application;
use gatehouse_core::credentials::IssueRequest;
use gatehouse_core::{Core, Db, ManualClock};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

/// A server running in this process on a free port with its own data dir.
pub struct TestApp {
    pub address: String,
    pub core: Core,
    pub clock: Arc<ManualClock>,
    pub client: reqwest::Client,
    pub upstreams: gatehouse::mcp::upstream::Upstreams,
    pub dir: tempfile::TempDir,
    shutdown: CancellationToken,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

pub async fn spawn_app_with(configure: impl FnOnce(&mut Config)) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.path().to_path_buf(),
        liveness_window: Duration::from_secs(3600),
        ..Config::default()
    };
    configure(&mut config);
    // Start at the real time, so credentials the CLI issues (real clock) line up.
    let clock = Arc::new(ManualClock::new(gatehouse_core::Clock::now_ms(&gatehouse_core::SystemClock)));
    let core = Core::new(Db::open(dir.path()).unwrap(), clock.clone(), config.settings()).unwrap();
    let shutdown = CancellationToken::new();
    let app = Application::build_with_core(&config, core.clone(), shutdown.clone()).await.unwrap();
    let upstreams = app.state().mcp.upstreams.clone();
    let host = app.address().to_string();
    tokio::spawn(app.run());
    TestApp {
        address: format!("http://{host}"),
        core,
        clock,
        client: reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap(),
        upstreams,
        dir,
        shutdown,
    }
}

impl TestApp {
    /// Adds a user whose password is `correct horse battery`.
    pub async fn add_user(&self, name: &str, admin: bool) {
        let users = self.core.users.clone();
        let name = name.to_string();
        tokio::task::spawn_blocking(move || users.add(&name, "correct horse battery", admin).unwrap()).await.unwrap();
    }

    /// A token for `agent` owned by `owner`.
    pub fn issue_owned(&self, agent: &str, owner: &str) -> String {
        self.core
            .credentials
            .issue(IssueRequest { agent: agent.into(), owner: Some(owner.into()), ..Default::default() })
            .unwrap()
            .token
    }

    pub fn issue(&self, agent: &str, thread: Option<&str>) -> String {
        self.core
            .credentials
            .issue(IssueRequest { agent: agent.into(), thread: thread.map(Into::into), ..Default::default() })
            .unwrap()
            .token
    }

    pub fn mcp(&self, token: &str) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}/mcp", self.address))
            .bearer_auth(token)
            .header("accept", ACCEPT_BOTH)
            .header("content-type", "application/json")
    }

    /// initialize + notifications/initialized; returns the session id.
    pub async fn open_session(&self, token: &str) -> String {
        let response = self.mcp(token).json(&initialize_request("2025-11-25")).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let sid = response.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let body = jsonrpc_messages(response).await;
        assert_eq!(body[0]["result"]["protocolVersion"], "2025-11-25");
        let ack = self
            .mcp(token)
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .unwrap();
        assert_eq!(ack.status(), 202);
        sid
    }

    /// A request within a session, returning the JSON-RPC messages it produced.
    pub async fn call(&self, token: &str, sid: &str, body: Value) -> (reqwest::StatusCode, HeaderMap, Vec<Value>) {
        let response = self
            .mcp(token)
            .header("mcp-session-id", sid)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        (status, headers, jsonrpc_messages(response).await)
    }

    /// Waits (briefly) until the live registry agrees with `predicate`.
    pub async fn wait_for_sessions(&self, predicate: impl Fn(usize) -> bool) {
        for _ in 0..200 {
            if predicate(self.core.live.sessions().len()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("sessions never reached the expected count: {}", self.core.live.sessions().len());
    }

    /// `/metrics` as an admin API token reads it (the main address wants an admin).
    pub async fn metrics(&self) -> String {
        let api = self.core.api_tokens.issue("metrics").unwrap();
        let r = self.client.get(format!("{}/metrics", self.address)).bearer_auth(&api.token).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.text().await.unwrap()
    }
}

pub fn initialize_request(version: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "itest", "version": "1.0"}}
    })
}

/// JSON-RPC messages of a response, whether JSON or SSE.
pub async fn jsonrpc_messages(response: reqwest::Response) -> Vec<Value> {
    let sse =
        response.headers().get("content-type").is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"));
    let text = response.text().await.unwrap();
    if sse {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .filter(|d| d.starts_with('{'))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    } else if text.trim().is_empty() {
        vec![]
    } else {
        vec![serde_json::from_str(&text).unwrap_or(Value::String(text))]
    }
}

/// Signs `username` in (password `correct horse battery`); its session cookie.
pub async fn sign_in(app: &TestApp, username: &str) -> String {
    let r = app
        .client
        .post(format!("{}/api/auth/sign-in", app.address))
        .header("origin", &app.address)
        .json(&json!({"username": username, "password": "correct horse battery"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{username} signs in");
    r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string()
}

/// A `tools/call` in session `sid`; the reply (200 asserted).
pub async fn tool_call(app: &TestApp, token: &str, sid: &str, name: &str, args: Value) -> Value {
    let (status, _, messages) = app
        .call(
            token,
            sid,
            json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name": name, "arguments": args}}),
        )
        .await;
    assert_eq!(status, 200, "{messages:?}");
    messages
        .iter()
        .find(|m| m.get("id").is_some())
        .cloned()
        .unwrap_or_else(|| panic!("no reply to {name}: {messages:?}"))
}

/// A browser decision on an execution, as the signed-in `cookie`.
pub async fn decide(app: &TestApp, cookie: &str, eid: &str, action: &str) -> reqwest::Response {
    app.client
        .post(format!("{}/api/executions/{eid}/resume", app.address))
        .header("origin", &app.address)
        .header("cookie", cookie)
        .json(&json!({"action": action}))
        .send()
        .await
        .unwrap()
}

/// A config-file policy rule that lets calls matching `pattern` run at once.
pub fn allow_rule(pattern: &str) -> gatehouse_core::policy::Rule {
    gatehouse_core::policy::Rule {
        pattern: pattern.into(),
        action: gatehouse_core::policy::Action::Allow,
        human_only: false,
        source: "config".into(),
    }
}

/// An enabled `[[upstream]]` named `name` with nothing else set (add a
/// `command` or a `url`).
pub fn upstream_named(name: &str) -> gatehouse::config::UpstreamConfig {
    gatehouse::config::UpstreamConfig { name: name.into(), ..Default::default() }
}
