//! `spawn_app` and the `TestApp` every test drives the server with: users and
//! sign-in, credentials, raw MCP requests and tool calls, decisions, rmcp
//! clients; and the "everything" fixture as an upstream.

use std::sync::Arc;
use std::time::Duration;

use gatehouse::config::{Config, UpstreamConfig};
use gatehouse::startup::Application;
use gatehouse::state::AppState;
use gatehouse_core::credentials::IssueRequest;
use gatehouse_core::{Core, ManualClock};
use reqwest::header::HeaderMap;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

mod fixtures;
mod oauth;

pub use fixtures::*;
pub use oauth::*;

pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

/// The password of every user [`TestApp::add_user`] adds.
pub const PASSWORD: &str = "correct horse battery";

/// A server running in this process on a free port with its own data dir.
pub struct TestApp {
    pub address: String,
    pub core: Core,
    pub clock: Arc<ManualClock>,
    pub client: reqwest::Client,
    pub upstreams: gatehouse::mcp::upstream::Upstreams,
    pub dir: tempfile::TempDir,
    /// The handlers' state, for routing requests without the listener
    /// (`tests/fuzz.rs` does).
    #[allow(dead_code)]
    pub state: AppState,
    shutdown: CancellationToken,
    /// The server's run, awaited by [`TestApp::restart`].
    run: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
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
    spawn_app_in(tempfile::tempdir().unwrap(), None, configure).await
}

/// With `GATEHOUSE_TEST_DATABASE_URL` set, the PostgreSQL schema of the app
/// whose data directory is `dir` (made on first use and named in the
/// directory, so a restart over the same directory finds the same data);
/// otherwise `None` (SQLite in the directory).
pub fn test_database_url(dir: &std::path::Path) -> Option<String> {
    let named = dir.join("test-database-url");
    if let Ok(url) = std::fs::read_to_string(&named) {
        return Some(url);
    }
    let url = gatehouse_core::db::test_database_url().unwrap()?;
    std::fs::write(&named, &url).unwrap();
    Some(url)
}

/// A server over `dir` (fresh, or one a stopped server left), its clock
/// starting at `now_ms` (the real time when `None`).
async fn spawn_app_in(dir: tempfile::TempDir, now_ms: Option<i64>, configure: impl FnOnce(&mut Config)) -> TestApp {
    let mut config = Config::default();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.data_dir = dir.path().to_path_buf();
    config.liveness_window = Duration::from_secs(3600);
    configure(&mut config);
    // Start at the real time, so credentials the CLI issues (real clock) line up.
    let clock = Arc::new(ManualClock::new(
        now_ms.unwrap_or_else(|| gatehouse_core::Clock::now_ms(&gatehouse_core::SystemClock)),
    ));
    // `configure` may point the data directory elsewhere (a restart over the same data).
    gatehouse_core::db::create_data_dir(&config.data_dir).unwrap();
    if config.database_url().is_none() {
        config.database.url = test_database_url(&config.data_dir);
    }
    let core = Core::new(gatehouse::startup::open_db(&config).unwrap(), clock.clone(), config.settings()).unwrap();
    // GATEHOUSE_TEST_LOG=debug shows the server's log beside a failing test.
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("GATEHOUSE_TEST_LOG"))
        .try_init();
    let shutdown = CancellationToken::new();
    let app = Application::build_with_core(&config, core.clone(), shutdown.clone()).await.unwrap();
    let upstreams = app.state().mcp.upstreams.clone();
    let state = app.state().clone();
    let host = app.address().to_string();
    let run = tokio::spawn(app.run());
    // No request of a test takes a minute: past it, fail naming it instead
    // of hanging the suite.
    let client =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).timeout(Duration::from_secs(60));
    // Serving HTTPS: the client trusts the configured certificate alone.
    let (scheme, client) = match config.tls() {
        Some(files) => ("https", trusting(client, &std::fs::read(&files.cert).unwrap())),
        None => ("http", client),
    };
    TestApp {
        address: format!("{scheme}://{host}"),
        core,
        clock,
        client: client.build().unwrap(),
        upstreams,
        dir,
        state,
        shutdown,
        run: Some(run),
    }
}

/// `client` over rustls, trusting the PEM certificate `cert` and no other.
pub fn trusting(client: reqwest::ClientBuilder, cert: &[u8]) -> reqwest::ClientBuilder {
    gatehouse::tls::install_crypto_provider();
    client
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(cert).unwrap())
}

/// An app fronting `upstream` (the "everything" fixture, over either
/// transport), configured further by `configure`; ready once the fixture's
/// tools are listed.
pub async fn spawn_app_fronting(upstream: UpstreamConfig, configure: impl FnOnce(&mut Config)) -> TestApp {
    let probe = format!("{}probe_whoami", upstream.prefix());
    let app = spawn_app_with(|c| {
        c.upstream = vec![upstream];
        configure(c);
    })
    .await;
    app.wait_for_upstream_tool(&probe).await;
    app
}

impl TestApp {
    /// Stops this server as a signal would (connections drained, background
    /// tasks ended, queued writes flushed) and starts a new one over the same
    /// data directory, its clock `later` past this one's; `configure` as at
    /// first (the config is not kept).
    pub async fn restart(mut self, later: Duration, configure: impl FnOnce(&mut Config)) -> TestApp {
        self.shutdown.cancel();
        if let Some(run) = self.run.take() {
            run.await.unwrap().unwrap();
        }
        let now = gatehouse_core::Clock::now_ms(self.clock.as_ref()) + later.as_millis() as i64;
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        spawn_app_in(dir, Some(now), configure).await
    }

    /// This server's URL for `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    // -----------------------------------------------------------------------
    // The browser side

    /// Adds a user whose password is [`PASSWORD`].
    pub async fn add_user(&self, name: &str, admin: bool) {
        let users = self.core.users.clone();
        let name = name.to_string();
        tokio::task::spawn_blocking(move || users.add(&name, PASSWORD, admin).unwrap()).await.unwrap();
    }

    /// A request sent as a page of this site sends it (with its Origin).
    pub fn same_origin(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client.request(method, self.url(path)).header("origin", &self.address)
    }

    /// A server function posted as a form (what `ActionForm` sends without
    /// JavaScript), as `cookie`, answered as JSON.
    pub async fn post_fn(&self, cookie: &str, name: &str, form: &[(&str, &str)]) -> reqwest::Response {
        self.same_origin(reqwest::Method::POST, &format!("/api/fn/{name}"))
            .header("cookie", cookie)
            .header("accept", "application/json")
            .form(form)
            .send()
            .await
            .unwrap()
    }

    /// A JSON sign-in as `username` with `password`, from this site.
    pub fn sign_in_request(&self, username: &str, password: &str) -> reqwest::RequestBuilder {
        self.same_origin(reqwest::Method::POST, "/api/auth/sign-in")
            .json(&json!({"username": username, "password": password}))
    }

    /// [`Self::sign_in_request`], sent.
    pub async fn sign_in_with(&self, username: &str, password: &str) -> reqwest::Response {
        self.sign_in_request(username, password).send().await.unwrap()
    }

    /// Signs `username` in (password [`PASSWORD`]); its session cookie.
    pub async fn sign_in(&self, username: &str) -> String {
        let r = self.sign_in_with(username, PASSWORD).await;
        assert_eq!(r.status(), 200, "{username} signs in");
        session_cookie(&r)
    }

    /// An admin "ada" and a plain user "bob", signed in; their cookies.
    pub async fn ada_and_bob(&self) -> (String, String) {
        self.add_user("ada", true).await;
        self.add_user("bob", false).await;
        (self.sign_in("ada").await, self.sign_in("bob").await)
    }

    /// A GET of `path` with the browser session `cookie`.
    pub async fn get_as(&self, cookie: &str, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).header("cookie", cookie).send().await.unwrap()
    }

    /// A browser decision on an execution, as the signed-in `cookie`.
    pub async fn decide(&self, cookie: &str, eid: &str, action: &str) -> reqwest::Response {
        self.same_origin(reqwest::Method::POST, &format!("/api/executions/{eid}/resume"))
            .header("cookie", cookie)
            .json(&json!({"action": action}))
            .send()
            .await
            .unwrap()
    }

    // -----------------------------------------------------------------------
    // Credentials

    /// A credential for `agent`, optionally owned and in a thread: (id, token).
    pub fn issue_credential(&self, agent: &str, owner: Option<&str>, thread: Option<&str>) -> (String, String) {
        let issued = self
            .core
            .credentials
            .issue(IssueRequest {
                agent: agent.into(),
                owner: owner.map(Into::into),
                thread: thread.map(Into::into),
                ..Default::default()
            })
            .unwrap();
        (issued.id.into_string(), issued.token)
    }

    /// A token for `agent` owned by `owner`.
    pub fn issue_owned(&self, agent: &str, owner: &str) -> String {
        self.issue_credential(agent, Some(owner), None).1
    }

    /// A token for `agent` (owned by nobody), optionally in `thread`.
    pub fn issue(&self, agent: &str, thread: Option<&str>) -> String {
        self.issue_credential(agent, None, thread).1
    }

    /// The `gatehouse` binary's command line on this server's data dir.
    pub fn cli_command(&self) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gatehouse"));
        command.arg("--data-dir").arg(self.dir.path());
        // The same database the server uses (PostgreSQL when the suite runs on it).
        if let Some(url) = self.core.db.postgres_url() {
            command.arg("--database-url").arg(url);
        }
        command
    }

    /// Runs `gatehouse --data-dir <this server's> <args>`; its output.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        self.cli_command().args(args).output().unwrap()
    }

    /// An admin API token named `name`.
    pub fn api_token(&self, name: &str) -> String {
        self.core.api_tokens.issue(name).unwrap().token
    }

    // -----------------------------------------------------------------------
    // MCP over HTTP

    /// A POST to `path` (`/mcp` and its query) that accepts JSON and SSE, with no token.
    pub fn mcp_at(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.post(self.url(path)).header("accept", ACCEPT_BOTH).header("content-type", "application/json")
    }

    /// A POST to `/mcp` with `token`.
    pub fn mcp(&self, token: &str) -> reqwest::RequestBuilder {
        self.mcp_at("/mcp").bearer_auth(token)
    }

    /// A POST to `/mcp` with `token` within session `sid` (2025-11-25).
    pub fn in_session(&self, token: &str, sid: &str) -> reqwest::RequestBuilder {
        self.mcp(token).header("mcp-session-id", sid).header("mcp-protocol-version", "2025-11-25")
    }

    /// initialize + notifications/initialized; returns the session id.
    pub async fn open_session(&self, token: &str) -> String {
        self.open_session_with(token, initialize_request("2025-11-25")).await
    }

    /// [`Self::open_session`] with an initialize request of one's own.
    pub async fn open_session_with(&self, token: &str, initialize: Value) -> String {
        let version = initialize["params"]["protocolVersion"].clone();
        let response = self.mcp(token).json(&initialize).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let sid = response.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let body = jsonrpc_messages(response).await;
        assert_eq!(body[0]["result"]["protocolVersion"], version);
        let ack = self
            .in_session(token, &sid)
            .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .unwrap();
        assert_eq!(ack.status(), 202);
        sid
    }

    /// A request within a session, returning the JSON-RPC messages it produced.
    pub async fn call(&self, token: &str, sid: &str, body: Value) -> (reqwest::StatusCode, HeaderMap, Vec<Value>) {
        let response = self.in_session(token, sid).json(&body).send().await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        (status, headers, jsonrpc_messages(response).await)
    }

    /// A `tools/call` in session `sid`; the reply (200 asserted).
    pub async fn tool_call(&self, token: &str, sid: &str, name: &str, args: Value) -> Value {
        let (status, _, messages) = self.call(token, sid, tool_call_request(7, name, args)).await;
        assert_eq!(status, 200, "{messages:?}");
        messages
            .iter()
            .find(|m| m.get("id").is_some())
            .cloned()
            .unwrap_or_else(|| panic!("no reply to {name}: {messages:?}"))
    }

    /// A sessionless 2026-07-28 `tools/call` of `name` to
    /// `/mcp?elicitation_mode={mode}` from a client declaring `capabilities`;
    /// `params` are the call's other params (`arguments`, `requestState`).
    pub fn modern_tool_call(
        &self,
        token: &str,
        mode: &str,
        capabilities: Value,
        name: &str,
        mut params: Value,
    ) -> reqwest::RequestBuilder {
        params["name"] = json!(name);
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "itest", "version": "1"}
        });
        self.mcp_at(&format!("/mcp?elicitation_mode={mode}"))
            .bearer_auth(token)
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", name)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
    }

    /// A native-mode 2026-07-28 call of `name` with `arguments` from a
    /// client that takes URL elicitation, continuing an earlier answer's
    /// `requestState` if given; the call's `result`.
    pub async fn native_url_call(&self, token: &str, name: &str, arguments: &Value, state: Option<&str>) -> Value {
        let mut params = json!({"arguments": arguments});
        if let Some(state) = state {
            params["requestState"] = json!(state);
        }
        let response = self
            .modern_tool_call(token, "native", json!({"elicitation": {"url": {}}}), name, params)
            .send()
            .await
            .unwrap();
        jsonrpc_messages(response).await.into_iter().find(|m| m["id"] == 1).expect("a reply")["result"].clone()
    }

    /// A sessionless 2026-07-28 `tasks/*` request (`params` besides `taskId`
    /// and `_meta`) from a client declaring `capabilities`; its `result` (or
    /// `error`).
    pub async fn task_request(
        &self,
        token: &str,
        capabilities: Value,
        method: &str,
        task_id: &str,
        mut params: Value,
    ) -> Value {
        params["taskId"] = json!(task_id);
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "itest", "version": "1"}
        });
        let response = self
            .mcp(token)
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .header("mcp-name", task_id)
            .json(&json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}))
            .send()
            .await
            .unwrap();
        let reply = jsonrpc_messages(response).await.into_iter().find(|m| m["id"] == 2).expect("a reply");
        reply.get("result").cloned().unwrap_or_else(|| reply["error"].clone())
    }

    /// A GET stream of session `sid` with `token` (200 asserted), open for
    /// as long as the response is kept.
    pub async fn open_stream(&self, token: &str, sid: &str) -> reqwest::Response {
        let response = self
            .client
            .get(self.url("/mcp"))
            .bearer_auth(token)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", sid)
            .header("mcp-protocol-version", "2025-11-25")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "the stream opens");
        response
    }

    /// A DELETE of `/mcp` session `sid` with `token`.
    pub async fn end_session(&self, token: &str, sid: &str) -> reqwest::Response {
        self.client.delete(self.url("/mcp")).bearer_auth(token).header("mcp-session-id", sid).send().await.unwrap()
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
        let r = self.client.get(self.url("/metrics")).bearer_auth(self.api_token("metrics")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        r.text().await.unwrap()
    }

    // -----------------------------------------------------------------------
    // rmcp clients and upstreams

    /// An rmcp client with `handler`, connected to `/mcp` with `token`.
    pub async fn connect<H: ClientHandler>(&self, handler: H, token: &str) -> RunningService<RoleClient, H> {
        self.connect_at("/mcp", handler, token).await
    }

    /// [`Self::connect`] to `path` (`/mcp` with a query).
    pub async fn connect_at<H: ClientHandler>(
        &self,
        path: &str,
        handler: H,
        token: &str,
    ) -> RunningService<RoleClient, H> {
        let config = StreamableHttpClientTransportConfig::with_uri(self.url(path)).auth_header(token);
        handler.serve(StreamableHttpClientTransport::from_config(config)).await.expect("connects")
    }

    /// Waits (up to 30 s) until an upstream's tool `name` is listed.
    pub async fn wait_for_upstream_tool(&self, name: &str) {
        for _ in 0..600 {
            if self.upstreams.find(name).is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("upstream tool {name} never appeared: {:?}", self.upstreams.status());
    }
}

/// Waits until `done` holds, checking every 25 ms; panics naming `what`
/// after 30 s (a bound on liveness, not a measure of speed).
pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..1_200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("never happened: {what}");
}

pub fn initialize_request(version: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "itest", "version": "1.0"}}
    })
}

/// The JSON-RPC `tools/call` request `id` of `name` with `args`.
pub fn tool_call_request(id: u64, name: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}})
}

/// rmcp's params of a call to `name` with `args` (none if not an object).
pub fn tool_params(name: &str, args: Value) -> CallToolRequestParams {
    let params = CallToolRequestParams::new(name.to_string());
    match args {
        Value::Object(args) => params.with_arguments(args),
        _ => params,
    }
}

/// The execution id of a `tools/call` reply that waits for a person.
pub fn execution_id(reply: &Value) -> gatehouse_core::approvals::ExecutionId {
    reply["result"]["structuredContent"]["executionId"].as_str().unwrap_or_else(|| panic!("not paused: {reply}")).into()
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

/// The session cookie a sign-in response sets (`name=value`).
pub fn session_cookie(response: &reqwest::Response) -> String {
    response.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string()
}

/// The start-up banner of a `gatehouse` binary started with piped stdout,
/// read up to its last line, and the address it listens on. The reader is
/// handed back: kept open, the child's stdout stays writable.
pub fn read_banner(child: &mut std::process::Child) -> (std::io::BufReader<std::process::ChildStdout>, String, String) {
    use std::io::BufRead;
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout piped"));
    let mut banner = String::new();
    let mut line = String::new();
    while !banner.contains("token issue") {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "banner ended early: {banner}");
        banner.push_str(&line);
    }
    let address = banner.split("listening on http://").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
    (stdout, banner, address)
}
