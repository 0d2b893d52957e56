//! What a 2026-07-28 agent gets, on the raw wire (no session, `_meta` on
//! every request): `resultType` on every result, caching hints that never
//! let a client keep what a rule took away, `subscriptions/listen` streams
//! bounded per credential, and log messages only when a request asks.

use std::time::Duration;

use gatehouse_core::policy::Action;
use serde_json::{Value, json};

use crate::helpers::*;

/// A sessionless 2026-07-28 request of `method` with `params` (any `_meta`
/// in them is added to the required keys), with the headers rmcp requires.
fn modern(app: &TestApp, token: &str, id: u64, method: &str, mut params: Value) -> reqwest::RequestBuilder {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "itest", "version": "1"}
    });
    if let Some(extra) = params.get("_meta").and_then(Value::as_object) {
        meta.as_object_mut().unwrap().extend(extra.clone());
    }
    params["_meta"] = meta;
    let mut request = app.mcp(token).header("mcp-protocol-version", "2026-07-28").header("mcp-method", method);
    let name = match method {
        "tools/call" | "prompts/get" => params["name"].as_str(),
        "resources/read" => params["uri"].as_str(),
        _ => None,
    };
    if let Some(name) = name {
        request = request.header("mcp-name", name.to_string());
    }
    request.json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

/// [`modern`], sent: every JSON-RPC message of the answer (200 asserted).
async fn modern_messages(app: &TestApp, token: &str, method: &str, params: Value) -> Vec<Value> {
    let response = modern(app, token, 1, method, params).send().await.unwrap();
    assert_eq!(response.status(), 200, "{method}");
    jsonrpc_messages(response).await
}

/// [`modern_messages`]' `result` (a JSON-RPC error fails the test).
async fn modern_result(app: &TestApp, token: &str, method: &str, params: Value) -> Value {
    let messages = modern_messages(app, token, method, params).await;
    let reply = messages.iter().find(|m| m["id"] == 1).unwrap_or_else(|| panic!("no reply to {method}: {messages:?}"));
    assert!(reply.get("result").is_some(), "{method}: {reply}");
    reply["result"].clone()
}

/// A `subscriptions/listen` stream, read as its messages arrive.
struct Listen {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

impl Listen {
    /// A listen request `id` for `notifications` (a `SubscriptionFilter`).
    fn request(app: &TestApp, token: &str, id: u64, notifications: Value) -> reqwest::RequestBuilder {
        modern(app, token, id, "subscriptions/listen", json!({"notifications": notifications}))
    }

    /// Opens listen `id` and reads its acknowledgement (asserting it comes
    /// first and names the subscription); the stream and the accepted filter.
    async fn open(app: &TestApp, token: &str, id: u64, notifications: Value) -> (Listen, Value) {
        let response = Self::request(app, token, id, notifications).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
        let mut listen = Listen { response, buffer: Vec::new() };
        let ack = listen.next().await;
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "the acknowledgement comes first: {ack}");
        assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], json!(id), "{ack}");
        (listen, ack["params"]["notifications"].clone())
    }

    /// The next JSON-RPC message on the stream (within 30 s).
    async fn next(&mut self) -> Value {
        loop {
            while let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let event = String::from_utf8(event).unwrap();
                let data: String = event.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect();
                if data.starts_with('{') {
                    return serde_json::from_str(&data).unwrap();
                }
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.response.chunk())
                .await
                .expect("a message within 30 s")
                .unwrap()
                .expect("the stream stays open");
            self.buffer.extend_from_slice(&chunk);
        }
    }

    /// Reads until a notification `method` arrives; the methods of every
    /// message before it.
    async fn until(&mut self, method: &str) -> Vec<String> {
        let mut before = Vec::new();
        loop {
            let message = self.next().await;
            let seen = message["method"].as_str().unwrap_or_default().to_string();
            if seen == method {
                return before;
            }
            before.push(seen);
        }
    }
}

#[tokio::test]
async fn every_result_is_complete_and_lists_and_reads_may_not_be_kept_or_shared() {
    let fixture = Fixture::start(0).await;
    let app = spawn_app_fronting(everything(&fixture.url), allow_test_tools).await;
    let token = app.issue("alpha", None);

    let calls = [
        ("tools/call", json!({"name": "ev__test_simple_text", "arguments": {}})),
        ("prompts/get", json!({"name": "ev__test_simple_prompt"})),
        ("resources/read", json!({"uri": "test://static-text"})),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "ev__test_prompt_with_arguments"},
                   "argument": {"name": "arg1", "value": "pa"}}),
        ),
        ("tools/list", json!({})),
        ("prompts/list", json!({})),
        ("resources/list", json!({})),
        ("resources/templates/list", json!({})),
    ];
    for (method, params) in calls {
        let result = modern_result(&app, &token, method, params).await;
        assert_eq!(result["resultType"], "complete", "{method}: {result}");
        let cacheable = method.ends_with("/list") || method == "resources/read";
        if cacheable {
            assert_eq!(result["cacheScope"], "private", "{method}: never shared between agents: {result}");
            assert!(result["ttlMs"].is_u64(), "{method}: {result}");
        }
        if method.ends_with("/list") {
            assert_eq!(result["ttlMs"], 0, "{method}: Gatehouse's own lists change with rules and upstreams");
        }
    }
    let completion = modern_result(
        &app,
        &token,
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "ev__test_prompt_with_arguments"},
               "argument": {"name": "arg1", "value": "pa"}}),
    )
    .await;
    assert_eq!(completion["completion"]["values"], json!(["paris", "park", "party"]), "the upstream's answer");
}

#[tokio::test]
async fn a_listen_hears_the_tool_list_change_a_new_rule_makes_and_a_prompts_only_one_does_not() {
    let fixture = Fixture::start(0).await;
    let app = spawn_app_fronting(everything(&fixture.url), allow_test_tools).await;
    let token = app.issue("alpha", None);
    let listed = |result: &Value| -> Vec<String> {
        result["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    };
    assert!(
        listed(&modern_result(&app, &token, "tools/list", json!({})).await).contains(&"ev__test_audio_content".into())
    );

    let (mut tools, accepted) = Listen::open(&app, &token, 41, json!({"toolsListChanged": true})).await;
    assert_eq!(accepted, json!({"toolsListChanged": true}));
    let (mut prompts, accepted) = Listen::open(&app, &token, 42, json!({"promptsListChanged": true})).await;
    assert_eq!(accepted, json!({"promptsListChanged": true}));

    // An admin blocks a tool in the console.
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    let r = app
        .post_fn(&ada, "policy_save", &[("draft[pattern]", "ev__test_audio_content"), ("draft[action]", "block")])
        .await;
    assert!(r.status().is_success(), "{}", r.status());

    let seen = tools.until("notifications/tools/list_changed").await;
    assert!(seen.is_empty(), "nothing else came first: {seen:?}");
    let before = prompts.until("notifications/prompts/list_changed").await;
    assert!(
        !before.iter().any(|m| m == "notifications/tools/list_changed"),
        "a prompts-only filter never hears of tools: {before:?}"
    );
    // Re-listing (nothing cached: ttlMs 0) shows the tool gone.
    assert!(
        !listed(&modern_result(&app, &token, "tools/list", json!({})).await).contains(&"ev__test_audio_content".into())
    );
}

#[tokio::test]
async fn a_listen_hears_updates_of_the_resources_it_may_read_and_is_never_given_one_a_rule_blocks() {
    let app = spawn_app_fronting(everything_stdio(), |c| {
        c.policy_rules = vec![config_rule("resource:test://static-binary", Action::Block)];
    })
    .await;
    let token = app.issue("alpha", None);
    let watched = "test://static-text";
    let filter = json!({"resourceSubscriptions": [watched, "test://static-binary", "test://nobody-serves-this"]});
    let (mut listen, accepted) = Listen::open(&app, &token, 7, filter).await;
    assert_eq!(
        accepted,
        json!({"resourceSubscriptions": [watched]}),
        "a blocked URI and one no upstream serves are left out of the acknowledgement"
    );

    // The upstream (one stdio process: the connection the listen subscribes
    // on, just after its acknowledgement) announces a change.
    let touch = |uri: &str| json!({"name": "ev__probe_touch", "arguments": {"uri": uri}});
    let mut notified = false;
    for _ in 0..200 {
        let touched = modern_result(&app, &token, "tools/call", touch(watched)).await;
        if touched["content"][0]["text"] == "notified" {
            notified = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(notified, "the upstream was subscribed to {watched}");
    let blocked = modern_result(&app, &token, "tools/call", touch("test://static-binary")).await;
    assert_eq!(blocked["content"][0]["text"], "not subscribed", "never to what a rule blocks");
    let update = loop {
        let message = listen.next().await;
        if message["method"] == "notifications/resources/updated" {
            break message;
        }
    };
    assert_eq!(update["params"]["uri"], watched);
    assert_eq!(update["params"]["_meta"][SUBSCRIPTION_ID], 7, "{update}");
}

#[tokio::test]
async fn listens_are_bounded_per_credential_with_a_clear_error_and_a_closed_one_frees_its_place() {
    // A quarter of 8 requests: 2 listens per credential.
    let app = spawn_app_with(|c| c.max_requests_per_credential = 8).await;
    let alpha = app.issue("alpha", None);
    let beta = app.issue("beta", None);
    let filter = json!({"toolsListChanged": true});

    let (first, _) = Listen::open(&app, &beta, 1, filter.clone()).await;
    let (_second, _) = Listen::open(&app, &beta, 2, filter.clone()).await;
    let refused = Listen::request(&app, &beta, 3, filter.clone()).send().await.unwrap();
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("2 subscriptions/listen streams") && message.contains("max_requests_per_credential"),
        "the error names the limit: {message}"
    );
    // The credential can still call, and another credential listen.
    let called = modern_result(&app, &beta, "tools/list", json!({})).await;
    assert_eq!(called["resultType"], "complete");
    let (_other, _) = Listen::open(&app, &alpha, 1, filter.clone()).await;

    // Closing a stream gives its place back.
    drop(first);
    for _ in 0..200 {
        let again = Listen::request(&app, &beta, 4, filter.clone()).send().await.unwrap();
        if again.status() == 200 {
            return;
        }
        assert_eq!(again.status(), 429);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("a closed listen never gave its place back");
}

#[tokio::test]
async fn revoking_a_credential_ends_its_listens_with_their_final_result() {
    let app = spawn_app().await;
    let (id, token) = app.issue_credential("alpha", None, None);
    let (_, other) = app.issue_credential("beta", None, None);
    let (mut revoked, _) = Listen::open(&app, &token, 9, json!({"toolsListChanged": true})).await;
    let (_kept, _) = Listen::open(&app, &other, 9, json!({"toolsListChanged": true})).await;
    assert!(app.core.credentials.revoke(&id).unwrap());
    let end = loop {
        let message = revoked.next().await;
        if message["id"] == 9 {
            break message;
        }
    };
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(end["result"]["_meta"][SUBSCRIPTION_ID], 9, "{end}");
    wait_until("the revoked listen's place is given back", || app.state.mcp.upstreams.listeners().open(&id) == 0).await;
}

#[tokio::test]
async fn upstream_log_messages_reach_a_modern_call_only_when_it_asks_and_at_its_level() {
    let fixture = Fixture::start(0).await;
    let app = spawn_app_fronting(everything(&fixture.url), allow_test_tools).await;
    let token = app.issue("alpha", None);
    let logs = |messages: &[Value]| messages.iter().filter(|m| m["method"] == "notifications/message").count();
    let call = |level: Option<&str>| {
        let mut params = json!({"name": "ev__test_tool_with_logging", "arguments": {}});
        if let Some(level) = level {
            params["_meta"] = json!({"io.modelcontextprotocol/logLevel": level});
        }
        params
    };

    let silent = modern_messages(&app, &token, "tools/call", call(None)).await;
    assert_eq!(logs(&silent), 0, "no logLevel, no log messages: {silent:?}");
    assert_eq!(silent.last().unwrap()["result"]["resultType"], "complete", "the call still ran: {silent:?}");

    // The fixture logs three lines at info.
    let info = modern_messages(&app, &token, "tools/call", call(Some("info"))).await;
    assert_eq!(logs(&info), 3, "{info:?}");
    let debug = modern_messages(&app, &token, "tools/call", call(Some("debug"))).await;
    assert_eq!(logs(&debug), 3, "{debug:?}");
    let warning = modern_messages(&app, &token, "tools/call", call(Some("warning"))).await;
    assert_eq!(logs(&warning), 0, "info lines are below warning: {warning:?}");
}

#[tokio::test]
async fn merged_lists_pass_on_what_is_left_of_the_upstreams_ttl_and_the_tool_list_never_is_kept() {
    // The modern fixture gives every list `ttlMs: 300000` (public).
    let app = crate::upstream_modern::fronting_modern(false, |_| {}).await;
    let token = app.issue("lister", None);
    for method in ["prompts/list", "resources/list", "resources/templates/list"] {
        let list = modern_result(&app, &token, method, json!({})).await;
        let ttl = list["ttlMs"].as_u64().unwrap_or_else(|| panic!("{method} has no ttlMs: {list}"));
        assert!(ttl > 0 && ttl <= 300_000, "{method}: what is left of the upstream's 300000: {ttl}");
        assert_eq!(list["cacheScope"], "private", "{method}: {list}");
    }
    let tools = modern_result(&app, &token, "tools/list", json!({})).await;
    assert_eq!((tools["ttlMs"].as_u64(), tools["cacheScope"].as_str()), (Some(0), Some("private")), "{tools}");
}
