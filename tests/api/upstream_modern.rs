//! Upstreams in the era they speak: Gatehouse asks each upstream with
//! `server/discover` and speaks 2026-07-28 to those that offer it (falling
//! back to `initialize`), tells a 2026-07-28 upstream what the real agent can
//! do, and passes an upstream's `input_required` to the agent: as
//! `input_required` under Gatehouse's own sealed `requestState` to a
//! 2026-07-28 agent, as server→client requests to a 2025-11-25 session.

#![allow(deprecated)] // sampling and roots are deprecated by SEP-2577

use gatehouse::config::{Config, UpstreamConfig};
use gatehouse::mcp::upstream::input_required::PREFIX;
use gatehouse_core::approvals::Decision;
use gatehouse_core::policy::Action;
use gatehouse_fixtures::modern::{Options, serve};
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ElicitationCapability, Implementation, ListRootsResult, ProtocolVersion, RootsCapabilities,
    SamplingCapability,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Value, json};

use crate::helpers::*;

/// Every capability that can answer an upstream's input requests.
fn all_caps() -> Value {
    json!({"elicitation": {"form": {}}, "sampling": {}, "roots": {}})
}

/// The modern fixture (2026-07-28 and, unless `only_modern`, 2025-11-25)
/// on a free port; its `/mcp` URL.
async fn modern_upstream(only_modern: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { serve(listener, Options { only_modern, ..Default::default() }).await.expect("the modern fixture serves") });
    url
}

/// The modern fixture as upstream `modern`, its names unprefixed.
fn modern(url: &str) -> UpstreamConfig {
    UpstreamConfig { url: Some(url.parse().unwrap()), prefix: Some(String::new()), ..upstream_named("modern") }
}

/// An app fronting the modern fixture whose `test_*` tools run at once;
/// `configure` as [`spawn_app_with`]'s.
pub(crate) async fn fronting_modern(only_modern: bool, configure: impl FnOnce(&mut Config)) -> TestApp {
    let url = modern_upstream(only_modern).await;
    let app = spawn_app_with(|c| {
        c.upstreams = vec![modern(&url)];
        c.policy = vec![allow_rule("test_*")];
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
    let refused = |reply: &Value| {
        assert_eq!(reply["result"]["isError"], true, "refused: {reply}");
        let said = reply["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
        assert!(said.contains("requestState was refused"), "{reply}");
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

/// A 2025-11-25 agent that answers every input request, recording which.
#[derive(Clone, Default)]
struct Agent {
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Agent {
    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
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
}

async fn connect_agent(app: &TestApp, token: &str) -> (Agent, RunningService<RoleClient, Agent>) {
    let agent = Agent::default();
    let service = app.connect(agent.clone(), token).await;
    (agent, service)
}

#[tokio::test]
async fn a_2025_session_is_asked_the_upstreams_input_requests_as_requests() {
    let app = fronting_modern(false, |_| {}).await;
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
        c.policy =
            vec![allow_rule("test_*"), config_rule("test_input_required_result_elicitation", Action::RequireApproval)];
    };
    let app = fronting_modern(false, gate).await;
    let token = app.issue("alpha", None);
    let tool = "test_input_required_result_elicitation";

    // A 2025-11-25 session: paused, approved, resumed; then the upstream asks it.
    let (agent, service) = connect_agent(&app, &token).await;
    let pending = service.call_tool(tool_params(tool, json!({}))).await.unwrap();
    assert!(agent.asked().is_empty(), "nothing is asked before the approval");
    let id = pending.structured_content.expect("paused")["executionId"].as_str().unwrap().to_string();
    app.core.approvals.decide(&id, Decision::Accept, "user:test").unwrap();
    let done = service.call_tool(tool_params("resume", json!({"executionId": id}))).await.unwrap();
    assert!(done.content[0].as_text().unwrap().text.contains("Ada"), "{done:?}");
    assert_eq!(agent.asked(), vec!["elicitation/create"]);

    // A 2026-07-28 agent in native mode: the approval's input request, then the upstream's.
    let caps = json!({"elicitation": {"url": {}, "form": {}}});
    let first = modern_call_in(&app, &token, "native", caps.clone(), tool, json!({})).await;
    let gate_state = first["result"]["requestState"].as_str().expect("paused for approval").to_string();
    assert!(!gate_state.starts_with(PREFIX), "the gate's own state: {first}");
    let id = first["result"]["inputRequests"]["approval"]["params"]["elicitationId"].as_str().unwrap().to_string();
    app.core.approvals.decide(&id, Decision::Accept, "user:test").unwrap();
    let asked = modern_call_in(&app, &token, "native", caps.clone(), tool, json!({"requestState": gate_state})).await;
    let (result, state) = input_required(&asked);
    assert!(result["inputRequests"].get("user_name").is_some(), "{asked}");
    let params = json!({"requestState": state, "inputResponses": answers(&result)});
    let done = modern_call_in(&app, &token, "native", caps.clone(), tool, params.clone()).await;
    assert!(text(&done).contains("Ada"), "{done}");
    // The approval ran the call once: its round is not run again by a replay.
    let replay = modern_call_in(&app, &token, "native", caps, tool, params).await;
    assert_eq!(replay["result"]["isError"], true, "{replay}");
    assert!(replay["result"]["content"][0]["text"].as_str().unwrap().contains("already used"), "{replay}");
}
