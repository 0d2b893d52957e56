//! Native mode on 2026-07-28: an input-required result with a URL input
//! request and a sealed `requestState`; the retried call runs once approved.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

/// A stateless 2026-07-28 `tools/call` in `mode`; returns its result.
async fn modern(app: &TestApp, token: &str, mode: &str, name: &str, args: Value, request_state: Option<&str>) -> Value {
    let mut params = json!({"arguments": args});
    if let Some(state) = request_state {
        params["requestState"] = json!(state);
    }
    let capabilities = json!({"elicitation": {"url": {}}});
    let response = app.modern_tool_call(token, mode, capabilities, name, params).send().await.unwrap();
    assert_eq!(response.status(), 200);
    jsonrpc_messages(response).await.into_iter().find(|m| m["id"] == 1).expect("a reply")["result"].clone()
}

/// The JSON-RPC error of a refused `requestState` (invalid params, naming it).
async fn refused(app: &TestApp, token: &str, args: Value, request_state: &str) -> Value {
    let params = json!({"arguments": args, "requestState": request_state});
    let capabilities = json!({"elicitation": {"url": {}}});
    let response =
        app.modern_tool_call(token, "native", capabilities, "gatehouse_policy_set", params).send().await.unwrap();
    let reply = jsonrpc_messages(response).await.into_iter().find(|m| m["id"] == 1).expect("a reply");
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert_eq!(reply["error"]["data"]["error"], "invalid_request_state", "{reply}");
    reply["error"].clone()
}

/// `gatehouse_policy_set` in native mode.
async fn modern_call(app: &TestApp, token: &str, args: Value, request_state: Option<&str>) -> Value {
    modern(app, token, "native", "gatehouse_policy_set", args, request_state).await
}

async fn setup() -> (TestApp, String) {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let token = app.issue_owned("py-agent", "ada");
    (app, token)
}

#[tokio::test]
async fn input_required_then_the_retry_runs_once_approved() {
    let (app, token) = setup().await;
    let args = json!({"pattern": "modern_*", "action": "allow"});
    let first = modern_call(&app, &token, args.clone(), None).await;
    assert_eq!(first["resultType"], "input_required", "{first}");
    let request = &first["inputRequests"]["approval"];
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["mode"], "url");
    let url = request["params"]["url"].as_str().unwrap();
    assert!(url.starts_with(&format!("{}/resume/exec_", app.address)), "{url}");
    let state = first["requestState"].as_str().unwrap().to_string();
    let eid = url.split("/resume/").nth(1).unwrap().split('?').next().unwrap().to_string();

    // The retry is held until the decision arrives.
    let decider = {
        let approvals = app.core.approvals.clone();
        let eid = eid.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            approvals
                .decide(gatehouse_core::approvals::Decide::actor(
                    &eid.as_str().into(),
                    gatehouse_core::approvals::Decision::Accept,
                    "user:ada",
                ))
                .await
                .unwrap();
        })
    };
    let done = modern_call(&app, &token, args.clone(), Some(&state)).await;
    decider.await.unwrap();
    assert_eq!(done["isError"], false, "{done}");
    assert_eq!(done["structuredContent"]["pattern"], "modern_*");

    // Replayed after it settled: refused.
    let replay = modern_call(&app, &token, args, Some(&state)).await;
    assert_eq!(replay["structuredContent"]["error"], "execution_settled", "{replay}");
}

#[tokio::test]
async fn tampered_other_credential_and_changed_arguments_are_refused() {
    let (app, token) = setup().await;
    let args = json!({"pattern": "t", "action": "allow"});
    let first = modern_call(&app, &token, args.clone(), None).await;
    let state = first["requestState"].as_str().unwrap().to_string();

    let mut tampered = state.clone().into_bytes();
    let last = tampered.len() - 2;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    refused(&app, &token, args.clone(), std::str::from_utf8(&tampered).unwrap()).await;

    let other = app.issue_owned("py-agent", "ada");
    refused(&app, &other, args.clone(), &state).await;

    refused(&app, &token, json!({"pattern": "changed", "action": "allow"}), &state).await;
    assert!(app.core.policy.rules().unwrap().is_empty());
}

#[tokio::test]
async fn an_expired_request_state_is_refused() {
    let app = spawn_app_with(|c| c.approval_ttl = Duration::from_millis(1500)).await;
    app.add_user("ada", true).await;
    let token = app.issue_owned("py-agent", "ada");
    let args = json!({"pattern": "late", "action": "allow"});
    let first = modern_call(&app, &token, args.clone(), None).await;
    let state = first["requestState"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(2600)).await;
    // The seal's own expiry refuses it outright.
    refused(&app, &token, args, &state).await;
}

#[tokio::test]
async fn a_human_only_rule_refuses_the_models_decision() {
    let app = spawn_app_with(|c| c.allow_model_decisions = true).await;
    app.add_user("ada", true).await;
    let token = app.issue_owned("self-decider", "ada");
    // gatehouse_policy_remove changes the gate for everyone: always human_only.
    let paused = modern(&app, &token, "model", "gatehouse_policy_remove", json!({"pattern": "m"}), None).await;
    let eid = paused["structuredContent"]["executionId"].as_str().unwrap().to_string();
    let refused = modern(&app, &token, "model", "resume", json!({"executionId": eid, "action": "accept"}), None).await;
    assert_eq!(refused["structuredContent"]["error"], "human_only", "{refused}");
    assert_eq!(app.core.approvals.get(&eid.as_str().into()).unwrap().1.state.as_str(), "pending");
}

#[tokio::test]
async fn a_re_issued_credential_continues_its_threads_request_state() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let issue = |thread: &str| app.issue_credential("py-agent", Some("ada"), Some(thread)).1;
    let first = issue("t1");
    let args = json!({"pattern": "turns", "action": "allow"});
    let paused = modern_call(&app, &first, args.clone(), None).await;
    let state = paused["requestState"].as_str().unwrap().to_string();
    let url = paused["inputRequests"]["approval"]["params"]["url"].as_str().unwrap();
    let eid = url.split("/resume/").nth(1).unwrap().split('?').next().unwrap().to_string();
    app.core
        .approvals
        .decide(gatehouse_core::approvals::Decide::actor(
            &eid.as_str().into(),
            gatehouse_core::approvals::Decision::Accept,
            "user:ada",
        ))
        .await
        .unwrap();
    // Another thread's credential of the same agent cannot use the state.
    let stranger = issue("t2");
    refused(&app, &stranger, args.clone(), &state).await;
    // The orchestrator re-issues the thread's credential: the retry continues.
    let next = issue("t1");
    let done = modern_call(&app, &next, args, Some(&state)).await;
    assert_eq!(done["isError"], false, "{done}");
    assert_eq!(done["structuredContent"]["pattern"], "turns");
}

#[tokio::test]
async fn model_decisions_are_refused_unless_configured() {
    let (app, token) = setup().await;
    let paused =
        modern(&app, &token, "model", "gatehouse_policy_set", json!({"pattern": "x", "action": "allow"}), None).await;
    let eid = paused["structuredContent"]["executionId"].as_str().unwrap().to_string();
    let refused = modern(&app, &token, "model", "resume", json!({"executionId": eid, "action": "accept"}), None).await;
    assert_eq!(refused["structuredContent"]["error"], "model_decision_not_allowed", "{refused}");
}
