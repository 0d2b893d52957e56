//! Transparent proxying, seen by a real MCP client (rmcp's) talking to
//! Gatehouse fronting the "everything" fixture over Streamable HTTP: session
//! isolation, roots, progress, logging, cancellation, resource updates,
//! list changes, pagination, and a restarted upstream.

#![allow(deprecated)] // roots, logging and subscriptions are 2025-11-25 features

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gatehouse::config::UpstreamConfig;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest, Implementation,
    ListRootsResult, LoggingLevel, LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam,
    ProtocolVersion, ResourceUpdatedNotificationParam, Root, RootsCapabilities, SetLevelRequestParams,
    SubscribeRequestParams,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde_json::Value;

use crate::helpers::*;

/// What the agent's client heard, in order.
#[derive(Clone, Default)]
pub(crate) struct Agent {
    /// Names the agent's root, `file:///agent/<name>`.
    name: String,
    heard: Arc<Mutex<Vec<String>>>,
}

impl Agent {
    fn heard(&self) -> Vec<String> {
        self.heard.lock().unwrap().clone()
    }

    fn push(&self, event: String) {
        self.heard.lock().unwrap().push(event);
    }

    async fn wait_for(&self, what: &str, pred: impl Fn(&[String]) -> bool) {
        for _ in 0..200 {
            if pred(&self.heard()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("never heard {what}: {:?}", self.heard());
    }
}

impl ClientHandler for Agent {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.roots = Some(RootsCapabilities::default());
        ClientConfig::new(caps, Implementation::new("proxy-test-agent", "1.0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn list_roots(&self, _ctx: RequestContext<RoleClient>) -> Result<ListRootsResult, rmcp::ErrorData> {
        self.push("roots asked".into());
        Ok(ListRootsResult::new(vec![Root::new(format!("file:///agent/{}", self.name))]))
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _ctx: NotificationContext<RoleClient>) {
        self.push(format!("progress {}", params.progress));
    }

    async fn on_logging_message(&self, params: LoggingMessageNotificationParam, _ctx: NotificationContext<RoleClient>) {
        self.push(format!("log {}", params.data.as_str().unwrap_or_default()));
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        self.push(format!("updated {}", params.uri));
    }

    async fn on_tool_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        self.push("tools changed".into());
    }
}

pub(crate) async fn connect(app: &TestApp, token: &str) -> (Agent, RunningService<RoleClient, Agent>) {
    connect_as(app, token, "home").await
}

/// A client for agent `token` whose root is `file:///agent/<name>`.
async fn connect_as(app: &TestApp, token: &str, name: &str) -> (Agent, RunningService<RoleClient, Agent>) {
    let agent = Agent { name: name.into(), ..Agent::default() };
    let service = app.connect(agent.clone(), token).await;
    (agent, service)
}

/// Polls the fixture until `probe_waiting` reports `n` running waits.
async fn until_waiting(service: &RunningService<RoleClient, Agent>, n: u32) {
    for _ in 0..200 {
        if call(service, "ev__probe_waiting", Value::Null).await == n.to_string() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the upstream never had {n} waits running");
}

pub(crate) async fn call(service: &RunningService<RoleClient, Agent>, name: &str, args: Value) -> String {
    let result = service.call_tool(tool_params(name, args)).await.expect("the call answers");
    assert_ne!(result.is_error, Some(true), "{name} failed: {result:?}");
    assert!(result.structured_content.is_none(), "{name} did not run at once: {result:?}");
    result.content[0].as_text().expect("text").text.clone()
}

async fn spawn_fronting(fixture: &Fixture, page_size: usize) -> TestApp {
    fronting(everything(&fixture.url), page_size).await
}

/// An app fronting `upstream` with `page_size` items a list page, whose
/// `ev__test_*` tools run at once.
async fn fronting(upstream: UpstreamConfig, page_size: usize) -> TestApp {
    spawn_app_fronting(upstream, |c| {
        allow_test_tools(c);
        c.list_page_size = page_size;
    })
    .await
}

#[tokio::test]
async fn each_agent_session_gets_its_own_upstream_session_and_no_agent_token_goes_upstream() {
    let fixture = Fixture::start(0).await;
    let app = spawn_fronting(&fixture, 100).await;
    let (token_a, token_b) = (app.issue("alpha", None), app.issue("beta", None));
    let (_, a) = connect(&app, &token_a).await;
    let (_, b) = connect(&app, &token_b).await;

    let seen = |s: String| serde_json::from_str::<Value>(&s).unwrap();
    let a1 = seen(call(&a, "ev__probe_whoami", Value::Null).await);
    let a2 = seen(call(&a, "ev__probe_whoami", Value::Null).await);
    let b1 = seen(call(&b, "ev__probe_whoami", Value::Null).await);
    assert!(a1["session"].is_string(), "{a1}");
    assert_eq!(a1["session"], a2["session"], "one agent session keeps one upstream session");
    assert_ne!(a1["session"], b1["session"], "two agents never share an upstream session");

    for headers in [&a1["headers"], &b1["headers"]] {
        assert_eq!(headers["x-upstream-key"], "configured-secret", "configured headers go upstream: {headers}");
        assert!(headers.get("authorization").is_none(), "the agent's token must not go upstream: {headers}");
        let all = headers.to_string();
        assert!(!all.contains(&token_a) && !all.contains(&token_b), "{all}");
    }
}

#[tokio::test]
async fn an_upstream_jsonrpc_error_reaches_the_agent_as_that_error() {
    let fixture = Fixture::start(0).await;
    let app = spawn_fronting(&fixture, 100).await;
    let (_, service) = connect(&app, &app.issue("alpha", None)).await;
    let err = service.call_tool(CallToolRequestParams::new("ev__probe_invalid_params")).await.unwrap_err();
    match err {
        rmcp::service::ServiceError::McpError(e) => {
            assert_eq!(e.code.0, -32602);
            assert!(e.message.contains("wants different arguments"), "{}", e.message);
            assert_eq!(e.data.unwrap()["hint"], "any");
        }
        other => panic!("expected the upstream's JSON-RPC error, got {other:?}"),
    }
}

#[tokio::test]
async fn an_agent_session_that_ends_closes_its_upstream_session() {
    let fixture = Fixture::start(0).await;
    let app = spawn_fronting(&fixture, 100).await;
    let (_, watcher) = connect(&app, &app.issue("watcher", None)).await;
    let open = || async { call(&watcher, "ev__probe_sessions", Value::Null).await.parse::<u32>().unwrap() };
    let before = open().await;
    let (_, agent) = connect(&app, &app.issue("alpha", None)).await;
    call(&agent, "ev__probe_whoami", Value::Null).await;
    assert_eq!(open().await, before + 1, "the agent got its own upstream session");
    agent.cancel().await.unwrap();
    for _ in 0..100 {
        if open().await == before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the upstream session outlived the agent's session");
}

#[tokio::test]
async fn roots_progress_logs_and_cancellation_travel_between_agent_and_upstream() {
    let fixture = Fixture::start(0).await;
    let app = spawn_fronting(&fixture, 100).await;
    let token = app.issue("alpha", None);
    let (agent, service) = connect(&app, &token).await;

    // The upstream asks the agent's client for roots, mid-call.
    let roots = call(&service, "ev__probe_roots", Value::Null).await;
    assert!(roots.contains("file:///agent/home"), "{roots}");
    assert!(agent.heard().contains(&"roots asked".to_string()));
    // The agent says its roots changed: its upstream session hears it.
    let before = call(&service, "ev__probe_roots_changes", Value::Null).await.parse::<u32>().unwrap();
    service.notify_roots_list_changed().await.unwrap();
    let mut changes = before;
    for _ in 0..100 {
        changes = call(&service, "ev__probe_roots_changes", Value::Null).await.parse().unwrap();
        if changes > before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(changes, before + 1, "roots/list_changed reached the upstream once");

    // Progress comes back under the agent's own token (rmcp's client sends one).
    service.call_tool(tool_params("ev__test_tool_with_progress", serde_json::json!({}))).await.unwrap();
    agent.wait_for("three progress updates", |h| h.iter().filter(|e| e.starts_with("progress")).count() >= 3).await;

    // Log messages at the level the agent asked for.
    service.set_level(SetLevelRequestParams::new(LoggingLevel::Debug)).await.unwrap();
    call(&service, "ev__test_tool_with_logging", Value::Null).await;
    agent.wait_for("three log lines", |h| h.iter().filter(|e| e.starts_with("log Tool")).count() >= 3).await;

    // The agent cancels a long call: the upstream hears it.
    let before = call(&service, "ev__probe_cancellations", Value::Null).await;
    let wait = tool_params("ev__probe_wait", serde_json::json!({"ms": 30000}));
    let handle = service
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(wait)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    until_waiting(&service, 1).await;
    handle.cancel(Some("changed my mind".into())).await.unwrap();
    let expected = (before.parse::<u32>().unwrap() + 1).to_string();
    for _ in 0..100 {
        if call(&service, "ev__probe_cancellations", Value::Null).await == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the upstream never saw the cancellation");
}

#[tokio::test]
async fn resource_updates_and_list_changes_reach_the_agent() {
    let fixture = Fixture::start(0).await;
    let app = spawn_fronting(&fixture, 100).await;
    let token = app.issue("alpha", None);
    let (agent, service) = connect(&app, &token).await;

    let uri = "test://watched-resource";
    service.subscribe(SubscribeRequestParams::new(uri)).await.unwrap();
    assert_eq!(call(&service, "ev__probe_touch", serde_json::json!({"uri": uri})).await, "notified");
    agent.wait_for("the resource update", |h| h.contains(&format!("updated {uri}"))).await;

    // A policy change (here: blocking a tool hides it) is announced too.
    // (Policy changes need a person's approval: given here through the store.)
    let set = tool_params(
        "gatehouse_policy_set",
        serde_json::json!({"pattern": "ev__test_audio_content", "action": "block"}),
    );
    let pending = service.call_tool(set).await.unwrap();
    let id = pending.structured_content.unwrap()["executionId"].as_str().unwrap().to_string();
    app.core
        .approvals
        .decide(gatehouse_core::approvals::Decide::actor(
            &id.as_str().into(),
            gatehouse_core::approvals::Decision::Accept,
            "user:test",
        ))
        .await
        .unwrap();
    let resume = tool_params("resume", serde_json::json!({"executionId": id}));
    let done = service.call_tool(resume).await.unwrap();
    assert_eq!(done.structured_content.unwrap()["action"], "block");
    agent.wait_for("tools/list_changed", |h| h.contains(&"tools changed".to_string())).await;
    let tools = service.list_all_tools().await.unwrap();
    assert!(!tools.iter().any(|t| t.name == "ev__test_audio_content"), "a blocked tool is hidden");
    agent.heard.lock().unwrap().clear();

    call(&service, "ev__probe_add_tool", serde_json::json!({"name": "fresh_tool"})).await;
    agent.wait_for("tools/list_changed", |h| h.contains(&"tools changed".to_string())).await;
    // New at an upstream whose tools are pinned: held back until an admin
    // accepts it, then listed and announced again.
    wait_until("the new tool is held back", || app.upstreams.held_tool("ev__fresh_tool").is_some()).await;
    let tools = service.list_all_tools().await.unwrap();
    assert!(!tools.iter().any(|t| t.name == "ev__fresh_tool"), "not listed before an admin accepts it");
    agent.heard.lock().unwrap().clear();
    let digest = app.upstreams.held_tool("ev__fresh_tool").unwrap().digest;
    app.upstreams.review("everything", "fresh_tool", &digest, true, "user:test").unwrap();
    agent.wait_for("tools/list_changed", |h| h.contains(&"tools changed".to_string())).await;
    let tools = service.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "ev__fresh_tool"), "the new tool is listed under the prefix");
}

#[tokio::test]
async fn merged_lists_are_paginated_and_a_foreign_cursor_is_invalid_params() {
    let fixture = Fixture::start(0).await;
    let app = spawn_fronting(&fixture, 4).await;
    let token = app.issue("alpha", None);
    let (_, service) = connect(&app, &token).await;

    let first = service.list_tools(None).await.unwrap();
    assert_eq!(first.tools.len(), 4);
    assert!(first.next_cursor.is_some());
    let all = service.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = all.iter().map(|t| t.name.as_ref()).collect();
    let count = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), count, "no tool twice across pages");
    assert!(names.contains(&"gatehouse_status") && names.contains(&"ev__test_simple_text"), "{names:?}");
    assert_eq!(count, app.upstreams.tools().len() + gatehouse::mcp::tools::all().len(), "every tool once");

    let mut bad = PaginatedRequestParams::default();
    bad.cursor = Some("not-a-cursor".into());
    let err = service.list_tools(Some(bad)).await.unwrap_err();
    assert!(matches!(&err, rmcp::service::ServiceError::McpError(e) if e.code.0 == -32602), "{err:?}");
}

#[tokio::test]
async fn an_upstream_that_restarted_and_forgot_the_session_is_reinitialised() {
    let fixture = Fixture::start(0).await;
    let port = fixture.port();
    let app = spawn_fronting(&fixture, 100).await;
    let token = app.issue("alpha", None);
    let (_, service) = connect(&app, &token).await;
    let session = |s: String| serde_json::from_str::<Value>(&s).unwrap()["session"].clone();
    let before = session(call(&service, "ev__probe_whoami", Value::Null).await);

    let Fixture { mut child, .. } = fixture;
    child.kill().await.unwrap();
    let _again = Fixture::start(port).await;
    // The restarted upstream answers 404 for the old session; the next calls
    // get a new one (allowing the supervisor a moment to reconnect too).
    for _ in 0..100 {
        if let Ok(result) = service.call_tool(tool_params("ev__probe_whoami", serde_json::json!({}))).await
            && result.is_error != Some(true)
        {
            let after = session(result.content[0].as_text().unwrap().text.clone());
            assert_ne!(before, after, "a new upstream session");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("calls never worked again after the upstream restarted");
}

#[tokio::test]
async fn a_shared_stdio_upstream_asks_the_agent_whose_call_caused_the_request() {
    let app = fronting(everything_stdio(), 100).await;
    let mut agents = Vec::new();
    for name in ["alpha", "beta"] {
        let (agent, service) = connect_as(&app, &app.issue(name, None), name).await;
        agents.push((name, agent, service));
    }
    for (name, agent, service) in &agents {
        let roots = call(service, "ev__probe_roots", Value::Null).await;
        assert!(roots.contains(&format!("file:///agent/{name}")), "{name} got {roots}");
        assert_eq!(agent.heard(), vec!["roots asked".to_string()], "only {name} was asked");
    }
}

#[tokio::test]
async fn an_https_upstream_is_reached_with_its_configured_ca() {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let (cert_pem, key_pem) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_pem, cert.cert.pem()).unwrap();
    std::fs::write(&key_pem, cert.signing_key.serialize_pem()).unwrap();
    let fixture =
        Fixture::start_with(0, &["--tls-cert", cert_pem.to_str().unwrap(), "--tls-key", key_pem.to_str().unwrap()])
            .await;
    assert!(fixture.url.starts_with("https://"), "{}", fixture.url);

    let mut upstream = everything(&fixture.url);
    upstream.ca_file = Some(cert_pem.clone());
    let app = fronting(upstream, 100).await;
    let token = app.issue("alpha", None);
    let (_, service) = connect(&app, &token).await;
    let whoami = call(&service, "ev__probe_whoami", Value::Null).await;
    assert!(whoami.contains("configured-secret"), "{whoami}");

    // Without the CA the upstream's certificate is not trusted: it stays down.
    let untrusted = spawn_app_with({
        let upstream = everything(&fixture.url);
        move |c| c.upstream = vec![upstream]
    })
    .await;
    for _ in 0..100 {
        if let Some(error) = untrusted.upstreams.status()[0].last_error.clone() {
            assert!(untrusted.upstreams.find("ev__probe_whoami").is_none());
            assert!(!error.is_empty());
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("an untrusted certificate did not fail the connection");
}

#[tokio::test]
async fn a_shared_stdio_upstream_never_asks_another_agent() {
    let app = fronting(everything_stdio(), 100).await;
    let (alpha, alpha_service) = connect_as(&app, &app.issue("alpha", None), "alpha").await;
    let (beta, beta_service) = connect_as(&app, &app.issue("beta", None), "beta").await;

    // Alpha has a call in flight at the shared upstream while beta's call asks for roots:
    // the upstream cannot say whose call it is about, so nobody is asked.
    let wait = tool_params("ev__probe_wait", serde_json::json!({"ms": 30000}));
    let alpha_wait = alpha_service
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(wait)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    until_waiting(&alpha_service, 1).await;
    let refused = beta_service.call_tool(CallToolRequestParams::new("ev__probe_roots")).await.unwrap_err();
    assert!(refused.to_string().contains("no single agent"), "{refused}");
    assert!(alpha.heard().is_empty() && beta.heard().is_empty(), "{:?} {:?}", alpha.heard(), beta.heard());

    // Once only beta's call is in flight, beta is asked.
    alpha_wait.cancel(None).await.unwrap();
    until_waiting(&beta_service, 0).await;
    let roots = call(&beta_service, "ev__probe_roots", Value::Null).await;
    assert!(roots.contains("file:///agent/beta"), "{roots}");
    assert!(alpha.heard().is_empty(), "alpha was never asked: {:?}", alpha.heard());
}

/// A call that must end within `NEVER_HANGS`, however it ends.
const NEVER_HANGS: Duration = Duration::from_secs(10);

#[tokio::test]
async fn an_agent_whose_client_did_not_declare_sampling_gets_a_clear_error_at_once() {
    // An HTTP upstream hears the agent's own capabilities: it does not even ask.
    let fixture = Fixture::start(0).await;
    let app = spawn_fronting(&fixture, 100).await;
    let (agent, service) = connect(&app, &app.issue("alpha", None)).await;
    let sampling = tool_params("ev__test_sampling", serde_json::json!({"prompt": "hello"}));
    let result =
        tokio::time::timeout(NEVER_HANGS, service.call_tool(sampling.clone())).await.expect("no hang").unwrap();
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert!(result.content[0].as_text().unwrap().text.contains("does not support sampling"), "{result:?}");

    // A shared stdio upstream was told everything is supported, and asks:
    // Gatehouse answers it with an error at once, which ends the agent's call.
    let app = fronting(everything_stdio(), 100).await;
    let (_, service) = connect(&app, &app.issue("alpha", None)).await;
    let refused = tokio::time::timeout(NEVER_HANGS, service.call_tool(sampling)).await.expect("no hang").unwrap_err();
    let message = refused.to_string();
    assert!(message.contains("sampling/createMessage could not be relayed"), "{message}");
    assert!(message.contains("the agent's client does not support sampling/createMessage"), "{message}");
    assert!(agent.heard().is_empty(), "{:?}", agent.heard());
}

/// Polls `probe_last_ask` until it differs from `before` (each outcome is
/// numbered, so a second alike outcome still differs); what it became.
async fn next_ask(watcher: &RunningService<RoleClient, Agent>, before: &Value) -> Value {
    let start = std::time::Instant::now();
    while start.elapsed() < NEVER_HANGS {
        let now: Value = serde_json::from_str(&call(watcher, "ev__probe_last_ask", Value::Null).await).unwrap();
        if &now != before {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the upstream's request to the agent was still waiting after {NEVER_HANGS:?}");
}

#[tokio::test]
async fn an_agent_that_disconnects_mid_call_leaves_no_upstream_waiting() {
    let fixture = Fixture::start(0).await;
    let app = spawn_fronting(&fixture, 100).await;
    let (_, watcher) = connect_as(&app, &app.issue("watcher", None), "watcher").await;
    let before: Value = serde_json::from_str(&call(&watcher, "ev__probe_last_ask", Value::Null).await).unwrap();

    // The agent's connection drops (no DELETE: its session stays) while the
    // upstream works on its call; then the upstream asks it for roots.
    let token = app.issue("alpha", None);
    let mut initialize = initialize_request("2025-11-25");
    initialize["params"]["capabilities"] = serde_json::json!({"roots": {}});
    let response = app.mcp(&token).json(&initialize).send().await.unwrap();
    let sid = response.headers()["mcp-session-id"].to_str().unwrap().to_string();
    jsonrpc_messages(response).await;
    let (status, _, _) =
        app.call(&token, &sid, serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    assert_eq!(status, 202);
    let call_body = tool_call_request(7, "ev__probe_ask_later", serde_json::json!({"ms": 300}));
    let response = app.in_session(&token, &sid).json(&call_body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    drop(response);
    let ask = next_ask(&watcher, &before).await;
    eprintln!("after the agent's connection dropped, the upstream's request ended: {ask}");
    let error = ask["error"].as_str().unwrap_or_else(|| panic!("the request did not fail: {ask}"));
    assert!(error.contains("roots/list could not be relayed"), "{error}");
    assert!(error.contains("the agent's stream for the call it belongs to is closed"), "{error}");
    assert!(ask["ms"].as_u64().unwrap() < 5000, "{ask}");

    // An agent whose client ends its session mid-call: the upstream's request fails as promptly.
    let calls_before = call(&watcher, "ev__probe_ask_later_calls", Value::Null).await;
    let (_, agent) = connect_as(&app, &app.issue("beta", None), "beta").await;
    let later = tool_params("ev__probe_ask_later", serde_json::json!({"ms": 1500}));
    let _pending = agent
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(later)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    // End the session only once the upstream is working on the call.
    let start = std::time::Instant::now();
    while call(&watcher, "ev__probe_ask_later_calls", Value::Null).await == calls_before {
        assert!(start.elapsed() < NEVER_HANGS, "the call never reached the upstream");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    agent.cancel().await.unwrap();
    let again = next_ask(&watcher, &ask).await;
    eprintln!("after the agent ended its session, the upstream's request ended: {again}");
    assert!(again["error"].is_string(), "the request did not fail: {again}");
    assert!(again["ms"].as_u64().unwrap() < 5000, "{again}");
}
