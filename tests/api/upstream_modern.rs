//! Upstreams in the era they speak: Gatehouse asks each upstream with
//! `server/discover` and speaks 2026-07-28 to those that offer it (falling
//! back to `initialize`), tells a 2026-07-28 upstream what the real agent can
//! do, and passes an upstream's `input_required` to the agent: as
//! `input_required` under Gatehouse's own sealed `requestState` to a
//! 2026-07-28 agent, as server→client requests to a 2025-11-25 session. A
//! 2025-11-25 session gets a 2025-11-25 session of its own at an upstream
//! that accepts `initialize` (even one that also speaks 2026-07-28); a
//! 2026-07-28 upstream's list changes and resource updates reach Gatehouse on
//! a `subscriptions/listen` it holds open there.

#![allow(deprecated)] // sampling and roots are deprecated by SEP-2577

use gatehouse::config::{Config, UpstreamConfig};
use gatehouse::mcp::upstream::input_required::PREFIX;
use gatehouse_core::approvals::Decision;
use gatehouse_core::policy::Action;
use gatehouse_fixtures::modern::{Options, serve};
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ElicitationCapability, Implementation, ListRootsResult, ProtocolVersion,
    ResourceUpdatedNotificationParam, RootsCapabilities, SamplingCapability, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Value, json};

use crate::helpers::*;

/// Every capability that can answer an upstream's input requests.
fn all_caps() -> Value {
    json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {}})
}

/// The modern fixture (2026-07-28 and, unless `only_modern`, 2025-11-25)
/// on a free port, behaving as `options` say; its `/mcp` URL.
async fn modern_upstream(options: Options) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { serve(listener, options).await.expect("the modern fixture serves") });
    url
}

/// The modern fixture as upstream `modern`, its names unprefixed.
fn modern(url: &str) -> UpstreamConfig {
    UpstreamConfig { url: Some(url.parse().unwrap()), prefix: Some(String::new()), ..upstream_named("modern") }
}

/// An app fronting the modern fixture whose `test_*` tools run at once;
/// `configure` as [`spawn_app_with`]'s.
pub(crate) async fn fronting_modern(only_modern: bool, configure: impl FnOnce(&mut Config)) -> TestApp {
    fronting_modern_with(Options { only_modern, ..Default::default() }, configure).await
}

/// [`fronting_modern`] with the fixture behaving as `options` say.
async fn fronting_modern_with(options: Options, configure: impl FnOnce(&mut Config)) -> TestApp {
    let url = modern_upstream(options).await;
    let app = spawn_app_with(|c| {
        c.upstream = vec![modern(&url)];
        c.policy_rules = vec![allow_rule("test_*")];
        configure(c);
    })
    .await;
    app.wait_for_upstream_tool("test_input_required_result_elicitation").await;
    app
}

/// The protocol revision upstream `name` negotiated, as `/metrics` shows it.
async fn negotiated(app: &TestApp, name: &str) -> Option<String> {
    let metrics = app.metrics().await;
    let prefix = format!("gatehouse_upstream_protocol{{upstream=\"{name}\",version=\"");
    let line = metrics.lines().find(|l| l.starts_with(&prefix))?;
    Some(line[prefix.len()..].split('"').next().unwrap().to_string())
}

/// What a user would answer to one input request (by its method): every
/// field of an elicitation's form as "Ada", a sampled message, one root.
fn answer(request: &Value) -> Value {
    match request["method"].as_str().unwrap() {
        "elicitation/create" => {
            let mut content = serde_json::Map::new();
            let properties =
                request["params"]["requestedSchema"]["properties"].as_object().cloned().unwrap_or_default();
            for (name, schema) in properties {
                let value = match schema["type"].as_str() {
                    Some("boolean") => json!(true),
                    Some("number") | Some("integer") => json!(1),
                    _ => json!("Ada"),
                };
                content.insert(name, value);
            }
            json!({"action": "accept", "content": content})
        }
        "sampling/createMessage" => json!({
            "role": "assistant", "content": {"type": "text", "text": "sampled by the agent"},
            "model": "test-model", "stopReason": "endTurn"
        }),
        "roots/list" => json!({"roots": [{"uri": "file:///agent/home", "name": "home"}]}),
        other => panic!("an input request Gatehouse should not pass on: {other}"),
    }
}

/// The answers to every input request of an `input_required` result.
fn answers(result: &Value) -> Value {
    let requests = result["inputRequests"].as_object().unwrap_or_else(|| panic!("no input requests: {result}"));
    requests.iter().map(|(key, request)| (key.clone(), answer(request))).collect::<serde_json::Map<_, _>>().into()
}

/// A sessionless 2026-07-28 `tools/call` of `name` from a client declaring
/// `caps`, with `params` (`arguments`, `requestState`, `inputResponses`);
/// the JSON-RPC reply.
async fn modern_call(app: &TestApp, token: &str, caps: Value, name: &str, params: Value) -> Value {
    modern_call_in(app, token, "browser", caps, name, params).await
}

async fn modern_call_in(app: &TestApp, token: &str, mode: &str, caps: Value, name: &str, params: Value) -> Value {
    let response = app.modern_tool_call(token, mode, caps, name, params).send().await.unwrap();
    jsonrpc_messages(response).await.into_iter().find(|m| m["id"] == 1).expect("a reply")
}

/// The text of a complete tool result.
fn text(reply: &Value) -> String {
    let result = &reply["result"];
    assert_ne!(result["isError"], true, "the call failed: {reply}");
    assert_ne!(result["resultType"], "input_required", "still asking: {reply}");
    result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {reply}"))
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first answer, its `input_required` checked: Gatehouse's own state.
fn input_required(reply: &Value) -> (Value, String) {
    let result = reply["result"].clone();
    assert_eq!(result["resultType"], "input_required", "{reply}");
    let state = result["requestState"].as_str().unwrap_or_else(|| panic!("no requestState: {reply}")).to_string();
    assert!(state.starts_with(PREFIX), "the state handed to the agent is Gatehouse's own: {state}");
    (result, state)
}

/// Drives a 2026-07-28 call through every round of input; the final reply.
async fn answer_every_round(app: &TestApp, token: &str, name: &str, arguments: Value) -> (Value, usize) {
    let mut reply = modern_call(app, token, all_caps(), name, json!({"arguments": arguments})).await;
    let mut rounds = 0;
    let mut states = Vec::new();
    while reply["result"]["resultType"] == "input_required" {
        let (result, state) = input_required(&reply);
        assert!(!states.contains(&state), "each round has a state of its own");
        states.push(state.clone());
        rounds += 1;
        assert!(rounds <= 10, "too many rounds: {reply}");
        let params = json!({"arguments": arguments, "requestState": state, "inputResponses": answers(&result)});
        reply = modern_call(app, token, all_caps(), name, params).await;
    }
    (reply, rounds)
}

#[tokio::test]
async fn a_modern_upstream_is_spoken_to_in_2026_and_a_legacy_one_in_2025() {
    let app = fronting_modern(false, |_| {}).await;
    assert_eq!(negotiated(&app, "modern").await.as_deref(), Some("2026-07-28"));
    let status = app.upstreams.status();
    assert_eq!(status[0].protocol.as_deref(), Some("2026-07-28"));

    // The "everything" fixture answers discover with an error: initialize follows.
    let stdio = spawn_app_fronting(everything_stdio(), allow_test_tools).await;
    assert_eq!(negotiated(&stdio, "everything").await.as_deref(), Some("2025-11-25"));
    let token = stdio.issue("alpha", None);
    let sid = stdio.open_session(&token).await;
    assert!(!paused(&stdio.tool_call(&token, &sid, "ev__test_simple_text", json!({})).await));

    let fixture = Fixture::start(0).await;
    let http = spawn_app_fronting(everything(&fixture.url), allow_test_tools).await;
    assert_eq!(negotiated(&http, "everything").await.as_deref(), Some("2025-11-25"));
    let token = http.issue("alpha", None);
    let sid = http.open_session(&token).await;
    assert!(!paused(&http.tool_call(&token, &sid, "ev__test_simple_text", json!({})).await));
}

#[tokio::test]
async fn an_upstream_that_speaks_only_2026_works() {
    let app = fronting_modern(true, |_| {}).await;
    assert_eq!(negotiated(&app, "modern").await.as_deref(), Some("2026-07-28"));
    let token = app.issue("alpha", None);
    let (reply, rounds) = answer_every_round(&app, &token, "test_input_required_result_elicitation", json!({})).await;
    assert_eq!(rounds, 1);
    assert!(text(&reply).contains("Ada"), "{reply}");

    // A 2025-11-25 session reaches it too: its input requests become requests to the agent.
    let (agent, service) = connect_agent(&app, &token).await;
    let result = service
        .call_tool(tool_params("test_input_required_result_elicitation", json!({})))
        .await
        .expect("the call answers");
    assert!(result.content[0].as_text().unwrap().text.contains("Ada"), "{result:?}");
    assert_eq!(agent.asked(), vec!["elicitation/create"]);
}

#[tokio::test]
async fn a_2026_agent_answers_an_upstreams_input_requests_through_gatehouses_own_state() {
    let app = fronting_modern(false, |_| {}).await;
    let token = app.issue("alpha", None);

    let first = modern_call(&app, &token, all_caps(), "test_input_required_result_elicitation", json!({})).await;
    let (result, state) = input_required(&first);
    let request = &result["inputRequests"]["user_name"];
    assert_eq!(request["method"], "elicitation/create", "{first}");
    let params = json!({"requestState": state, "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}}});
    let done = modern_call(&app, &token, all_caps(), "test_input_required_result_elicitation", params).await;
    assert!(text(&done).contains("Ada"), "{done}");

    for (tool, key) in [
        ("test_input_required_result_sampling", "sample_request"),
        ("test_input_required_result_list_roots", "roots_request"),
    ] {
        let first = modern_call(&app, &token, all_caps(), tool, json!({})).await;
        let (result, _) = input_required(&first);
        assert!(result["inputRequests"].get(key).is_some(), "{tool}: {first}");
        let (done, rounds) = answer_every_round(&app, &token, tool, json!({})).await;
        assert_eq!(rounds, 1, "{tool}");
        text(&done);
    }

    // Several at once: every method, answered together.
    let first = modern_call(&app, &token, all_caps(), "test_input_required_result_multiple_inputs", json!({})).await;
    let (result, _) = input_required(&first);
    let methods: std::collections::BTreeSet<&str> =
        result["inputRequests"].as_object().unwrap().values().filter_map(|r| r["method"].as_str()).collect();
    assert_eq!(methods.len(), 3, "{first}");
    let (done, _) = answer_every_round(&app, &token, "test_input_required_result_multiple_inputs", json!({})).await;
    text(&done);

    // Several rounds, each with a state of its own.
    let (done, rounds) = answer_every_round(&app, &token, "test_input_required_result_multi_round", json!({})).await;
    assert_eq!(rounds, 2, "{done}");
    text(&done);
}

#[tokio::test]
async fn a_prompt_that_asks_for_input_reaches_a_2026_agent() {
    let app = fronting_modern(false, |_| {}).await;
    let token = app.issue("alpha", None);
    let get = |params: Value| {
        let mut params = params;
        params["name"] = json!("test_input_required_result_prompt");
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": all_caps(),
            "io.modelcontextprotocol/clientInfo": {"name": "itest", "version": "1"}
        });
        app.mcp(&token)
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "prompts/get")
            .header("mcp-name", "test_input_required_result_prompt")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/get", "params": params}))
    };
    let reply = |response: reqwest::Response| async {
        jsonrpc_messages(response).await.into_iter().find(|m| m["id"] == 1).expect("a reply")
    };
    let first = reply(get(json!({})).send().await.unwrap()).await;
    let (result, state) = input_required(&first);
    assert!(result["inputRequests"].get("user_context").is_some(), "{first}");
    let params = json!({"requestState": state, "inputResponses": answers(&result)});
    let done = reply(get(params).send().await.unwrap()).await;
    assert!(done["result"]["messages"].is_array(), "{done}");

    // A tampered state is invalid params.
    let tampered = json!({"requestState": format!("{state}x"), "inputResponses": answers(&result)});
    let refused = reply(get(tampered).send().await.unwrap()).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
}

#[tokio::test]
async fn a_tampered_or_foreign_state_is_refused() {
    let app = fronting_modern(false, |_| {}).await;
    let token = app.issue("alpha", None);
    let other = app.issue("beta", None);
    let tool = "test_input_required_result_elicitation";
    let first = modern_call(&app, &token, all_caps(), tool, json!({})).await;
    let (result, state) = input_required(&first);
    let responses = answers(&result);
    let retry = |state: String| json!({"requestState": state, "inputResponses": responses.clone()});
    // Refused outright (invalid params), never as if it were the tool's answer.
    let refused = |reply: &Value| {
        assert_eq!(reply["error"]["code"], -32602, "refused: {reply}");
        assert_eq!(reply["error"]["data"]["error"], "invalid_request_state", "{reply}");
        assert!(reply["error"]["message"].as_str().unwrap_or_default().contains("requestState was refused"), "{reply}");
    };

    // Altered: its signature, or the payload it signs.
    let flip = |text: &str, at: usize| {
        let mut bytes = text.to_string().into_bytes();
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        String::from_utf8(bytes).unwrap()
    };
    refused(&modern_call(&app, &token, all_caps(), tool, retry(flip(&state, state.len() - 3))).await);
    let body_at = state.find('.').and_then(|v| state[v + 1..].find('.').map(|b| v + 1 + b + 5)).unwrap();
    refused(&modern_call(&app, &token, all_caps(), tool, retry(flip(&state, body_at))).await);
    // Another credential's.
    refused(&modern_call(&app, &other, all_caps(), tool, retry(state.clone())).await);
    // Another tool's.
    refused(&modern_call(&app, &token, all_caps(), "test_input_required_result_sampling", retry(state.clone())).await);
    // Other arguments.
    let mut changed = retry(state.clone());
    changed["arguments"] = json!({"x": 1});
    refused(&modern_call(&app, &token, all_caps(), tool, changed).await);
    // Unwrapped: not Gatehouse's gate state either (the two never open as each other).
    let bare = state.strip_prefix(PREFIX).unwrap().to_string();
    refused(&modern_call(&app, &token, all_caps(), tool, retry(bare)).await);
    // The upstream's own state reaches it unaltered (its tool checks that).
    let (done, _) = answer_every_round(&app, &token, "test_input_required_result_tampered_state", json!({})).await;
    text(&done);

    // The real one still works.
    assert!(text(&modern_call(&app, &token, all_caps(), tool, retry(state)).await).contains("Ada"));
}

#[tokio::test]
async fn a_2026_upstream_sees_the_agents_own_capabilities() {
    let app = fronting_modern(false, |_| {}).await;
    let token = app.issue("alpha", None);
    let without = modern_call(&app, &token, json!({"elicitation": {}}), "test_missing_capability", json!({})).await;
    assert_eq!(without["error"]["code"], -32021, "the upstream saw no sampling: {without}");
    let with = modern_call(&app, &token, json!({"sampling": {}}), "test_missing_capability", json!({})).await;
    assert!(with.get("result").is_some(), "the upstream saw sampling: {with}");
}

/// A 2025-11-25 agent that answers every input request, recording which,
/// and records the list changes and resource updates it hears.
#[derive(Clone, Default)]
struct Agent {
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    heard: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Agent {
    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }

    fn heard(&self, what: &str) -> bool {
        self.heard.lock().unwrap().iter().any(|h| h == what)
    }
}

impl ClientHandler for Agent {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.roots = Some(RootsCapabilities::default());
        caps.sampling = Some(SamplingCapability::default());
        caps.elicitation = Some(ElicitationCapability::default());
        ClientConfig::new(caps, Implementation::new("modern-test-agent", "1.0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        self.asked.lock().unwrap().push("elicitation/create".into());
        let request = json!({"method": "elicitation/create", "params": params});
        Ok(serde_json::from_value(answer(&request)).unwrap())
    }

    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, rmcp::ErrorData> {
        self.asked.lock().unwrap().push("sampling/createMessage".into());
        Ok(serde_json::from_value(answer(&json!({"method": "sampling/createMessage"}))).unwrap())
    }

    async fn list_roots(&self, _ctx: RequestContext<RoleClient>) -> Result<ListRootsResult, rmcp::ErrorData> {
        self.asked.lock().unwrap().push("roots/list".into());
        Ok(serde_json::from_value(answer(&json!({"method": "roots/list"}))).unwrap())
    }

    async fn on_tool_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        self.heard.lock().unwrap().push("tools/list_changed".into());
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        self.heard.lock().unwrap().push(format!("updated {}", params.uri));
    }
}

async fn connect_agent(app: &TestApp, token: &str) -> (Agent, RunningService<RoleClient, Agent>) {
    let agent = Agent::default();
    let service = app.connect(agent.clone(), token).await;
    (agent, service)
}

#[tokio::test]
async fn a_2025_session_is_asked_the_upstreams_input_requests_as_requests() {
    // Only 2026-07-28: a 2025-11-25 session reaches it on the shared
    // connection, where it asks with `input_required`.
    let app = fronting_modern(true, |_| {}).await;
    let token = app.issue("alpha", None);
    let (agent, service) = connect_agent(&app, &token).await;

    let result = service
        .call_tool(tool_params("test_input_required_result_elicitation", json!({})))
        .await
        .expect("the call answers");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert!(result.content[0].as_text().unwrap().text.contains("Ada"), "{result:?}");
    assert_eq!(agent.asked(), vec!["elicitation/create"]);

    agent.asked.lock().unwrap().clear();
    let result = service
        .call_tool(tool_params("test_input_required_result_multiple_inputs", json!({})))
        .await
        .expect("the call answers");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let mut asked = agent.asked();
    asked.sort();
    asked.dedup();
    assert_eq!(asked, vec!["elicitation/create", "roots/list", "sampling/createMessage"]);

    let result = service
        .call_tool(tool_params("test_input_required_result_multi_round", json!({})))
        .await
        .expect("the call answers");
    assert_ne!(result.is_error, Some(true), "several rounds: {result:?}");

    let prompt = service
        .get_prompt(rmcp::model::GetPromptRequestParams::new("test_input_required_result_prompt"))
        .await
        .expect("the prompt answers");
    assert!(!prompt.messages.is_empty());
}

#[tokio::test]
async fn a_gated_call_is_approved_first_then_its_upstream_asks_for_input() {
    let gate = |c: &mut Config| {
        c.policy_rules =
            vec![allow_rule("test_*"), config_rule("test_input_required_result_elicitation", Action::RequireApproval)];
    };
    // Only 2026-07-28, so the 2025-11-25 session is asked through `input_required` too.
    let app = fronting_modern(true, gate).await;
    let token = app.issue("alpha", None);
    let tool = "test_input_required_result_elicitation";

    // A 2025-11-25 session: paused, approved, resumed; then the upstream asks it.
    let (agent, service) = connect_agent(&app, &token).await;
    let pending = service.call_tool(tool_params(tool, json!({}))).await.unwrap();
    assert!(agent.asked().is_empty(), "nothing is asked before the approval");
    let id = pending.structured_content.expect("paused")["executionId"].as_str().unwrap().to_string();
    app.core
        .approvals
        .decide(gatehouse_core::approvals::Decide::actor(&id.as_str().into(), Decision::Accept, "user:test"))
        .await
        .unwrap();
    let done = service.call_tool(tool_params("resume", json!({"executionId": id}))).await.unwrap();
    assert!(done.content[0].as_text().unwrap().text.contains("Ada"), "{done:?}");
    assert_eq!(agent.asked(), vec!["elicitation/create"]);

    // A 2026-07-28 agent in native mode: the approval's input request, then the upstream's.
    let caps = json!({"elicitation": {"url": {}, "form": {}}});
    let first = modern_call_in(&app, &token, "native", caps.clone(), tool, json!({})).await;
    let gate_state = first["result"]["requestState"].as_str().expect("paused for approval").to_string();
    assert!(!gate_state.starts_with(PREFIX), "the gate's own state: {first}");
    let id = first["result"]["inputRequests"]["approval"]["params"]["elicitationId"].as_str().unwrap().to_string();
    app.core
        .approvals
        .decide(gatehouse_core::approvals::Decide::actor(&id.as_str().into(), Decision::Accept, "user:test"))
        .await
        .unwrap();
    let asked = modern_call_in(&app, &token, "native", caps.clone(), tool, json!({"requestState": gate_state})).await;
    let (result, state) = input_required(&asked);
    assert!(result["inputRequests"].get("user_name").is_some(), "{asked}");
    let params = json!({"requestState": state, "inputResponses": answers(&result)});
    let done = modern_call_in(&app, &token, "native", caps.clone(), tool, params.clone()).await;
    assert!(text(&done).contains("Ada"), "{done}");
    // The approval ran the call once: its round is not run again by a replay.
    let replay = modern_call_in(&app, &token, "native", caps, tool, params).await;
    assert_eq!(replay["error"]["data"]["error"], "invalid_request_state", "{replay}");
    assert!(replay["error"]["message"].as_str().unwrap().contains("already used"), "{replay}");
}

#[tokio::test]
async fn a_2025_session_gets_a_2025_session_at_an_upstream_that_speaks_both() {
    let app = fronting_modern(false, |_| {}).await;
    assert_eq!(negotiated(&app, "modern").await.as_deref(), Some("2026-07-28"), "the shared connection");
    let token = app.issue("alpha", None);

    // Its tool asks mid-call with a request of its own, which only a 2025-11-25 session carries.
    let (agent, service) = connect_agent(&app, &token).await;
    let result = service.call_tool(tool_params("test_legacy_elicitation", json!({}))).await.expect("the call answers");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert!(result.content[0].as_text().unwrap().text.contains("Hello, Ada"), "{result:?}");
    assert_eq!(agent.asked(), vec!["elicitation/create"]);
    // And resources/subscribe, which 2026-07-28 removed, is the session's own.
    service.subscribe(SubscribeRequestParams::new("test://stateless-static-text")).await.expect("subscribed");
    service.unsubscribe(UnsubscribeRequestParams::new("test://stateless-static-text")).await.expect("unsubscribed");

    // A 2026-07-28 agent keeps the shared 2026-07-28 connection.
    let modern = modern_call(&app, &token, all_caps(), "test_legacy_elicitation", json!({})).await;
    assert_eq!(modern["result"]["isError"], true, "{modern}");
    assert!(modern["result"]["content"][0]["text"].as_str().unwrap().contains("2025-11-25 session"), "{modern}");
}

/// Calls trigger `tool` on `service` until the fixture says it reached
/// `streams` listen streams (Gatehouse's listen opens, or re-opens, in the
/// background).
async fn trigger_until(service: &RunningService<RoleClient, Agent>, tool: &str, streams: usize) {
    let want = format!("sent to {streams} listen stream(s)");
    for _ in 0..200 {
        let result = service.call_tool(tool_params(tool, json!({}))).await.expect("the trigger answers");
        if result.content[0].as_text().unwrap().text.contains(&want) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{tool} never reached {streams} listen stream(s)");
}

#[tokio::test]
async fn a_2026_upstreams_list_change_reaches_gatehouse_and_the_agents() {
    let options = Options { only_modern: true, list_triggers: true };
    let app = fronting_modern_with(options, |_| {}).await;
    let token = app.issue("alpha", None);
    let (agent, service) = connect_agent(&app, &token).await;

    // Gatehouse's listen at the upstream hears it, re-lists and tells the agent's session.
    trigger_until(&service, "test_trigger_tool_change", 1).await;
    wait_until("the agent hears tools/list_changed", || agent.heard("tools/list_changed")).await;
    assert!(service.list_all_tools().await.unwrap().iter().any(|t| t.name == "test_trigger_tool_change"));
}

#[tokio::test]
async fn a_2025_session_subscribes_to_a_resource_at_an_upstream_that_speaks_only_2026() {
    let options = Options { only_modern: true, list_triggers: true };
    let app = fronting_modern_with(options, |_| {}).await;
    let token = app.issue("alpha", None);
    let (agent, service) = connect_agent(&app, &token).await;
    let uri = "test://stateless-static-text";

    // Carried by Gatehouse's listen at the upstream, acknowledged before subscribe answers.
    service.subscribe(SubscribeRequestParams::new(uri)).await.expect("subscribed");
    trigger_until(&service, "test_trigger_resource_update", 1).await;
    wait_until("the agent hears the update", || agent.heard(&format!("updated {uri}"))).await;

    // Given up: the listen is re-opened without it.
    service.unsubscribe(UnsubscribeRequestParams::new(uri)).await.expect("unsubscribed");
    trigger_until(&service, "test_trigger_resource_update", 0).await;

    // Another agent's session does not hear what it did not subscribe to.
    let (other, other_service) = connect_agent(&app, &token).await;
    service.subscribe(SubscribeRequestParams::new(uri)).await.expect("subscribed again");
    agent.heard.lock().unwrap().clear();
    trigger_until(&other_service, "test_trigger_resource_update", 1).await;
    wait_until("the subscriber hears it", || agent.heard(&format!("updated {uri}"))).await;
    assert!(!other.heard(&format!("updated {uri}")), "only the subscriber");
}

/// The rule of the replay tests: the eliciting tool runs at once, twice a day per agent.
fn twice_a_day(tool: &str) -> gatehouse_core::policy::Rule {
    gatehouse_core::policy::Rule {
        name: "two elicitations".into(),
        rate: Some("2/day".parse().unwrap()),
        ..config_rule(tool, Action::Allow)
    }
}

/// The history's entries for `tool`, oldest first.
fn entries_for(app: &TestApp, tool: &str) -> Vec<gatehouse_core::model::AuditEntry> {
    use gatehouse_core::audit::HistoryScope;
    use gatehouse_core::model::HistoryFilter;
    let filter = HistoryFilter { tool: tool.into(), ..Default::default() };
    let mut entries = app.core.approvals.audit().search(&filter, &HistoryScope::All, 100).unwrap();
    entries.reverse();
    entries
}

fn refused_as_used(reply: &Value) -> bool {
    reply["error"]["data"]["error"] == "invalid_request_state"
        && reply["error"]["message"].as_str().is_some_and(|m| m.contains("already used"))
}

#[tokio::test]
async fn an_upstream_round_is_run_once_counted_against_the_rate_and_on_the_record() {
    let tool = "test_input_required_result_elicitation";
    let app = fronting_modern(true, |c| c.policy_rules = vec![twice_a_day(tool)]).await;
    let token = app.issue("alpha", None);
    let first = modern_call(&app, &token, all_caps(), tool, json!({})).await;
    let (result, state) = input_required(&first);
    let params = json!({"requestState": state, "inputResponses": answers(&result)});
    assert!(text(&modern_call(&app, &token, all_caps(), tool, params).await).contains("Ada"));

    // The first call's state, sent again ten times with other answers: never run again.
    for i in 0..10 {
        let other: Value =
            serde_json::from_str(&answers(&result).to_string().replace("Ada", &format!("Mallory {i}"))).unwrap();
        let replay =
            modern_call(&app, &token, all_caps(), tool, json!({"requestState": state, "inputResponses": other})).await;
        assert!(refused_as_used(&replay), "replay {i}: {replay}");
    }
    // The call and its one round counted: a third run is over the rate.
    let third = modern_call(&app, &token, all_caps(), tool, json!({})).await;
    assert_eq!(third["result"]["structuredContent"]["error"], "rate_limited", "{third}");
    let states: Vec<_> =
        entries_for(&app, tool).iter().map(|e| (e.state.as_str(), e.detail.clone().unwrap_or_default())).collect();
    assert_eq!(states.len(), 3, "the call, its round and the refusal, each on the record: {states:?}");
    assert_eq!(states[0].0, "allowed");
    assert!(states[0].1.ends_with("input required"), "{states:?}");
    assert_eq!(states[1].0, "completed");
    assert!(states[1].1.starts_with("input round 1 · "), "{states:?}");
    assert_eq!(states[2].0, "limited");
}

#[tokio::test]
async fn a_round_blocked_since_the_first_call_is_refused_and_recorded() {
    let tool = "test_input_required_result_elicitation";
    let app = fronting_modern(true, |_| {}).await;
    let token = app.issue("alpha", None);
    let first = modern_call(&app, &token, all_caps(), tool, json!({})).await;
    let (result, state) = input_required(&first);
    app.core.policy.set(gatehouse_core::policy::Rule::new(tool.parse().unwrap(), Action::Block)).unwrap();
    let params = json!({"requestState": state, "inputResponses": answers(&result)});
    let round = modern_call(&app, &token, all_caps(), tool, params).await;
    assert_eq!(round["result"]["structuredContent"]["error"], "blocked_by_policy", "{round}");
    assert_eq!(entries_for(&app, tool).last().unwrap().state.as_str(), "blocked");
}

#[tokio::test]
async fn a_spent_round_stays_spent_after_a_restart_and_on_another_replica() {
    let tool = "test_input_required_result_multi_round";
    let url = modern_upstream(Options { only_modern: true, ..Default::default() }).await;
    let configure = |c: &mut Config| {
        c.upstream = vec![modern(&url)];
        c.policy_rules = vec![allow_rule("test_*")];
    };
    let app = spawn_app_with(configure).await;
    app.wait_for_upstream_tool(tool).await;
    let token = app.issue("alpha", None);
    let first = modern_call(&app, &token, all_caps(), tool, json!({})).await;
    let (result, state) = input_required(&first);
    let params = json!({"requestState": state, "inputResponses": answers(&result)});
    let second = modern_call(&app, &token, all_caps(), tool, params.clone()).await;
    assert!(second["result"].is_object(), "the round ran: {second}");

    // Another replica on the same PostgreSQL refuses it too.
    if let Some(db) = app.core.db.postgres_url().map(str::to_string) {
        let other = spawn_app_with(|c| {
            configure(c);
            c.database.url = Some(db);
        })
        .await;
        other.wait_for_upstream_tool(tool).await;
        assert!(refused_as_used(&modern_call(&other, &token, all_caps(), tool, params.clone()).await));
    }
    let app = app.restart(std::time::Duration::from_secs(1), configure).await;
    app.wait_for_upstream_tool(tool).await;
    let replay = modern_call(&app, &token, all_caps(), tool, params).await;
    assert!(refused_as_used(&replay), "after a restart: {replay}");
}

/// A gated call of `tool` paused, approved by a person, then retried: its
/// id, and the upstream's answer to the retry (it asks for input).
async fn approved_then_asked(
    app: &TestApp,
    token: &str,
    caps: &Value,
    tool: &str,
) -> (String, gatehouse_core::approvals::ExecutionId, Value) {
    let first = modern_call_in(app, token, "native", caps.clone(), tool, json!({})).await;
    let gate_state = first["result"]["requestState"].as_str().expect("paused for approval").to_string();
    let id = first["result"]["inputRequests"]["approval"]["params"]["elicitationId"].as_str().unwrap().to_string();
    let eid: gatehouse_core::approvals::ExecutionId = id.as_str().into();
    app.core
        .approvals
        .decide(gatehouse_core::approvals::Decide::actor(&eid, Decision::Accept, "user:test"))
        .await
        .unwrap();
    let asked = modern_call_in(app, token, "native", caps.clone(), tool, json!({"requestState": gate_state})).await;
    (id, eid, asked)
}

#[tokio::test]
async fn an_approved_calls_round_runs_only_while_the_call_is_running() {
    let tool = "test_input_required_result_multi_round";
    let gate = |c: &mut Config| c.policy_rules = vec![allow_rule("test_*"), config_rule(tool, Action::RequireApproval)];
    let app = fronting_modern(true, gate).await;
    let token = app.issue("alpha", None);
    let caps = json!({"elicitation": {"url": {}, "form": {}}, "sampling": {}, "roots": {}});
    let (id, eid, asked) = approved_then_asked(&app, &token, &caps, tool).await;
    let (result, state) = input_required(&asked);
    assert_eq!(
        app.core.approvals.audit().latest(&eid).unwrap().unwrap().state.as_str(),
        "running",
        "it waits for the agent"
    );
    assert!(app.core.approvals.is_empty(), "its place in the store is freed while the agent answers");

    // Settled meanwhile (here by hand, as a removal of its owner would): its round does not run.
    let execution = app.core.approvals.audit().latest(&eid).unwrap().unwrap();
    app.core
        .approvals
        .audit()
        .append(gatehouse_core::audit::Entry {
            execution_id: &id,
            state: gatehouse_core::approvals::State::Cancelled,
            tool,
            upstream: execution.upstream.as_deref(),
            arguments_digest: &execution.arguments_digest,
            agent: &execution.agent,
            owner: execution.owner.as_deref(),
            owner_id: execution.owner_id,
            credential_id: execution.credential_id.as_deref(),
            thread: execution.thread.as_deref(),
            actor: Some("system"),
            detail: Some("test"),
            arguments: None,
        })
        .await
        .unwrap();
    let params = json!({"requestState": state, "inputResponses": answers(&result)});
    let round = modern_call_in(&app, &token, "native", caps, tool, params).await;
    assert_eq!(round["error"]["data"]["error"], "invalid_request_state", "{round}");
    assert!(round["error"]["message"].as_str().unwrap().contains("no longer running"), "{round}");
}

/// Issue 40: an approved call whose upstream asked for input, and whose
/// agent never answers, does not stay `running` for good: past twice a
/// `requestState`'s lifetime the housekeeping sweep ends it as `expired`,
/// saying why (and not before).
#[tokio::test]
async fn an_approved_call_whose_agent_never_answers_its_upstream_ends_as_expired() {
    let tool = "test_input_required_result_multi_round";
    let gate = |c: &mut Config| c.policy_rules = vec![allow_rule("test_*"), config_rule(tool, Action::RequireApproval)];
    let app = fronting_modern(true, gate).await;
    let token = app.issue("alpha", None);
    let caps = json!({"elicitation": {"url": {}, "form": {}}, "sampling": {}, "roots": {}});
    let (_id, eid, asked) = approved_then_asked(&app, &token, &caps, tool).await;
    input_required(&asked);
    let latest = || app.core.approvals.audit().latest(&eid).unwrap().unwrap();
    assert_eq!(latest().state.as_str(), "running");

    let retention = gatehouse::housekeeping::Retention::of(&Config::default());
    app.clock.advance(std::time::Duration::from_secs(15 * 60));
    let swept = gatehouse::housekeeping::sweep(&app.core, retention).await.unwrap();
    assert_eq!(swept.expired_calls, 0, "within its time it waits");
    assert_eq!(latest().state.as_str(), "running");

    app.clock.advance(std::time::Duration::from_secs(15 * 60 + 1));
    let swept = gatehouse::housekeeping::sweep(&app.core, retention).await.unwrap();
    assert_eq!(swept.expired_calls, 1);
    let last = latest();
    assert_eq!(last.state.as_str(), "expired");
    assert_eq!(last.actor.as_deref(), Some("system"));
    assert_eq!(last.detail.as_deref(), Some(gatehouse_core::awaiting_input::EXPIRED_DETAIL));
    let swept = gatehouse::housekeeping::sweep(&app.core, retention).await.unwrap();
    assert_eq!(swept.expired_calls, 0, "ended once");
}
