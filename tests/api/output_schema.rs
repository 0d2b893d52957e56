//! A gated tool that declares an `outputSchema` (the fixture's
//! `get-structured-content`, server-everything's): SDK clients check every
//! `structuredContent` of such a tool against its schema (the TypeScript SDK
//! v1 even an error's), so Gatehouse's own answers for it — the pause, a
//! decline, an expiry, a block — are `isError` results with no
//! `structuredContent`, the details in `_meta["gatehouse/details"]` and the
//! link in the text. Once approved, the tool's own structured result comes
//! back untouched (through `resume`, a 2026-07-28 retry, a retry after
//! `-32042`); tools without an output schema keep the structured pause.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

const STRUCTURED: &str = "ev__get-structured-content";
const DETAILS: &str = gatehouse::tool_error::META_KEY;

/// What the fixture answers for Chicago.
fn chicago() -> Value {
    json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82})
}

/// The result's text blocks, joined.
fn text(result: &Value) -> String {
    result["content"].as_array().unwrap().iter().filter_map(|c| c["text"].as_str()).collect::<Vec<_>>().join("\n")
}

/// Asserts `result` is Gatehouse's answer in the output-schema shape; its details.
fn gate_answer(result: &Value) -> Value {
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "no structuredContent of Gatehouse's own: {result}");
    result["_meta"][DETAILS].clone()
}

/// Asserts `result` is the tool's own conforming result, untouched.
fn the_tools_own(result: &Value) {
    assert_ne!(result["isError"], true, "{result}");
    assert_eq!(result["structuredContent"], chicago(), "{result}");
    assert!(result.get("_meta").and_then(|m| m.get(DETAILS)).is_none(), "{result}");
}

/// A decision with a reason, as the approval page posts it.
async fn decide_with(app: &TestApp, cookie: &str, eid: &str, action: &str, reason: &str) {
    let r = app
        .same_origin(reqwest::Method::POST, &format!("/api/executions/{eid}/resume"))
        .header("cookie", cookie)
        .json(&json!({"action": action, "reason": reason}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn browser_mode_pauses_a_tool_with_an_output_schema_without_structured_content() {
    let app = spawn_app_fronting(everything_stdio(), |_| {}).await;
    let (ada, _) = app.ada_and_bob().await;
    let token = app.issue_owned("claude", "ada");
    let sid = app.open_session(&token).await;

    let (_, _, listed) = app.call(&token, &sid, json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
    let tools = listed[0]["result"]["tools"].as_array().unwrap();
    let tool = tools.iter().find(|t| t["name"] == STRUCTURED).expect("listed");
    assert_eq!(tool["outputSchema"]["required"], json!(["temperature", "conditions", "humidity"]));

    // The pause: an error result (so no client checks it against the schema),
    // the link in the text and in _meta.
    let paused = app.tool_call(&token, &sid, STRUCTURED, json!({"location": "Chicago"})).await;
    let result = &paused["result"];
    let details = gate_answer(result);
    assert_eq!(details["status"], "user_approval_required", "{result}");
    let eid = details["executionId"].as_str().unwrap().to_string();
    let url = format!("{}/resume/{eid}?mcp_session_id={sid}", app.address);
    assert_eq!(details["approvalUrl"], url);
    assert!(details["expiresAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{details}");
    let said = text(result);
    assert!(said.contains(&url) && said.contains(&eid), "{said}");
    assert!(said.contains("has not failed"), "{said}");

    // A tool without an output schema keeps the structured pause, exactly.
    let plain = app.tool_call(&token, &sid, "ev__probe_mutable", json!({})).await;
    assert_eq!(plain["result"]["isError"], false, "{plain}");
    assert_eq!(plain["result"]["structuredContent"]["status"], "user_approval_required");
    assert!(plain["result"].get("_meta").is_none(), "{plain}");

    // Approved: resume returns the tool's own structured result, untouched.
    assert_eq!(app.decide(&ada, &eid, "accept").await.status(), 200);
    let resumed = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    the_tools_own(&resumed["result"]);

    // resume declares no output schema: its own answers stay structured.
    let again = app.tool_call(&token, &sid, STRUCTURED, json!({"location": "Chicago"})).await;
    let eid = gate_answer(&again["result"])["executionId"].as_str().unwrap().to_string();
    decide_with(&app, &ada, &eid, "decline", "not Chicago").await;
    let declined = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(declined["result"]["isError"], true);
    assert_eq!(declined["result"]["structuredContent"]["error"], "execution_declined", "{declined}");

    // Blocked: Gatehouse's refusal in the same shape.
    app.core
        .policy
        .set(gatehouse_core::policy::Rule::new(STRUCTURED.parse().unwrap(), gatehouse_core::policy::Action::Block))
        .unwrap();
    let blocked = app.tool_call(&token, &sid, STRUCTURED, json!({"location": "Chicago"})).await;
    assert_eq!(gate_answer(&blocked["result"])["error"], "blocked_by_policy", "{blocked}");
    assert_eq!(app.core.approvals.len(), 1, "only probe_mutable's pause is left");
}

/// A 2026-07-28 native call of the structured tool: its first answer is
/// input required (the approval page); the execution id and the requestState.
async fn ask(app: &TestApp, token: &str, args: &Value) -> (String, String) {
    let first = app.native_url_call(token, STRUCTURED, args, None).await;
    assert_eq!(first["resultType"], "input_required", "{first}");
    let url = first["inputRequests"]["approval"]["params"]["url"].as_str().unwrap();
    let eid = url.split("/resume/").nth(1).unwrap().split('?').next().unwrap().to_string();
    (eid, first["requestState"].as_str().unwrap().to_string())
}

#[tokio::test]
async fn a_2026_retry_of_a_tool_with_an_output_schema_gets_its_result_or_gatehouses_answer_without_structured_content()
{
    let app = spawn_app_fronting(everything_stdio(), |c| c.approval_ttl = Duration::from_secs(3)).await;
    let (ada, _) = app.ada_and_bob().await;
    let token = app.issue_owned("py-agent", "ada");
    let args = json!({"location": "Chicago"});

    // Approved: the retry returns the tool's own conforming result.
    let (eid, state) = ask(&app, &token, &args).await;
    assert_eq!(app.decide(&ada, &eid, "accept").await.status(), 200);
    let done = app.native_url_call(&token, STRUCTURED, &args, Some(&state)).await;
    the_tools_own(&done);

    // Declined with a reason: said in the text and in _meta, no structuredContent.
    let (eid, state) = ask(&app, &token, &args).await;
    decide_with(&app, &ada, &eid, "decline", "ask for New York").await;
    let declined = app.native_url_call(&token, STRUCTURED, &args, Some(&state)).await;
    let details = gate_answer(&declined);
    assert_eq!(details["error"], "execution_declined", "{declined}");
    assert_eq!(details["reason"], "ask for New York");
    assert_eq!(details["executionId"], eid);
    assert!(text(&declined).contains("ask for New York"), "{declined}");

    // Nobody decides: the held retry answers that it expired, the same way.
    let (eid, state) = ask(&app, &token, &args).await;
    let expired = app.native_url_call(&token, STRUCTURED, &args, Some(&state)).await;
    let details = gate_answer(&expired);
    assert_eq!(details["error"], "execution_expired", "{expired}");
    assert_eq!(details["executionId"], eid);
    assert_eq!(details["recovery"], "re_execute");
    assert_eq!(app.core.approvals.len(), 0);
}

#[tokio::test]
async fn after_the_32042_error_the_retry_of_a_tool_with_an_output_schema_returns_its_own_result() {
    let app = spawn_app_fronting(everything_stdio(), |c| c.native_url = gatehouse::config::NativeUrl::Error).await;
    let (ada, _) = app.ada_and_bob().await;
    let token = app.issue_owned("claude", "ada");
    let mut initialize = initialize_request("2025-11-25");
    initialize["params"]["capabilities"] = json!({"elicitation": {"url": {}}});
    let sid = app.open_session_with(&token, initialize).await;
    let native_call = || {
        app.mcp_at("/mcp?elicitation_mode=native")
            .bearer_auth(&token)
            .header("mcp-session-id", sid.as_str())
            .header("mcp-protocol-version", "2025-11-25")
            .json(&tool_call_request(9, STRUCTURED, json!({"location": "Chicago"})))
    };
    let reply = |messages: Vec<Value>| messages.into_iter().find(|m| m["id"] == 9).expect("a reply");

    let first = reply(jsonrpc_messages(native_call().send().await.unwrap()).await);
    assert_eq!(first["error"]["code"], -32042, "{first}");
    let eid = first["error"]["data"]["elicitations"][0]["elicitationId"].as_str().unwrap().to_string();
    assert_eq!(app.decide(&ada, &eid, "accept").await.status(), 200);
    let retried = reply(jsonrpc_messages(native_call().send().await.unwrap()).await);
    the_tools_own(&retried["result"]);
}
