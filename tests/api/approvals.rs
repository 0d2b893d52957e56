//! Gated calls in browser mode: pause, decide over the HTTP API, resume.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

/// An admin "ada" (who owns the agent) and a plain user "bob"; their cookies.
async fn users(app: &TestApp) -> (String, String) {
    app.add_user("ada", true).await;
    app.add_user("bob", false).await;
    let mut cookies = Vec::new();
    for name in ["ada", "bob"] {
        let r = app
            .client
            .post(format!("{}/api/auth/sign-in", app.address))
            .header("origin", &app.address)
            .json(&json!({"username": name, "password": "correct horse battery"}))
            .send()
            .await
            .unwrap();
        cookies.push(r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string());
    }
    (cookies[0].clone(), cookies[1].clone())
}

fn owned_token(app: &TestApp, agent: &str) -> String {
    app.issue_owned(agent, "ada")
}

const SET_RULE: &str = "gatehouse_policy_set";

#[tokio::test]
async fn a_gated_call_pauses_and_runs_once_approved() {
    let app = spawn_app().await;
    let (ada, _) = users(&app).await;
    let token = owned_token(&app, "claude");
    let sid = app.open_session(&token).await;

    let paused = tool_call(&app, &token, &sid, SET_RULE, json!({"pattern": "files__*", "action": "allow"})).await;
    let result = &paused["result"];
    assert_eq!(result["isError"], false, "a pause is not an error");
    let s = &result["structuredContent"];
    assert_eq!(s["status"], "user_approval_required");
    let eid = s["executionId"].as_str().unwrap().to_string();
    assert!(eid.starts_with("exec_"));
    assert_eq!(s["approvalUrl"], format!("{}/resume/{eid}?mcp_session_id={sid}", app.address));
    assert!(result["content"][0]["text"].as_str().unwrap().contains(&eid));
    assert!(app.core.policy.rules().unwrap().is_empty(), "nothing ran yet");

    let detail: Value = app
        .client
        .get(format!("{}/api/mcp-sessions/{sid}/executions/{eid}", app.address))
        .header("cookie", &ada)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(detail["state"], "pending");
    assert_eq!(detail["tool"], SET_RULE);
    assert_eq!(detail["agent"], "claude");
    assert_eq!(detail["arguments"]["pattern"], "files__*");
    assert_eq!(
        detail["argumentsDigest"],
        gatehouse_core::approvals::digest(&json!({"action": "allow", "pattern": "files__*"}))
    );

    // resume waits; the decision arrives while it waits.
    let resume = {
        let (token, sid, eid) = (token.clone(), sid.clone(), eid.clone());
        let app_address = app.address.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let r = client
                .post(format!("{app_address}/mcp"))
                .bearer_auth(&token)
                .header("accept", ACCEPT_BOTH)
                .header("mcp-session-id", &sid)
                .header("mcp-protocol-version", "2025-11-25")
                .json(&json!({"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"resume","arguments":{"executionId": eid}}}))
                .send()
                .await
                .unwrap();
            jsonrpc_messages(r).await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = decide(&app, &ada, &eid, "accept").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["state"], "approved");
    let messages = resume.await.unwrap();
    let result = &messages.iter().find(|m| m["id"] == 8).unwrap()["result"];
    assert_eq!(result["isError"], false);
    assert_eq!(result["structuredContent"]["pattern"], "files__*");
    assert_eq!(app.core.policy.rules().unwrap()[0].pattern, "files__*", "the approved call ran");

    // Same decision again: idempotent. A conflicting one: 409.
    assert_eq!(decide(&app, &ada, &eid, "accept").await.status(), 200);
    let conflict = decide(&app, &ada, &eid, "decline").await;
    assert_eq!(conflict.status(), 409);
    assert_eq!(conflict.json::<Value>().await.unwrap()["error"], "conflict");
    assert_eq!(app.core.approvals.len(), 0, "settled entries leave the store");

    let audit: Vec<String> = app
        .core
        .approvals
        .audit()
        .search(&Default::default(), &gatehouse_core::audit::HistoryScope::Owner("ada".into()), 10)
        .unwrap()
        .into_iter()
        .rev()
        .map(|e| e.state.to_string())
        .collect();
    assert_eq!(audit, ["pending", "approved", "running", "completed"]);
}

#[tokio::test]
async fn a_declined_call_does_not_run_and_resume_says_so() {
    let app = spawn_app().await;
    let (ada, _) = users(&app).await;
    let token = owned_token(&app, "claude");
    let sid = app.open_session(&token).await;
    let paused = tool_call(&app, &token, &sid, SET_RULE, json!({"pattern": "x", "action": "block"})).await;
    let eid = paused["result"]["structuredContent"]["executionId"].as_str().unwrap().to_string();
    assert_eq!(decide(&app, &ada, &eid, "decline").await.status(), 200);
    assert_eq!(decide(&app, &ada, &eid, "accept").await.status(), 409);
    let resumed = tool_call(&app, &token, &sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(resumed["result"]["isError"], true);
    assert_eq!(resumed["result"]["structuredContent"]["error"], "execution_declined");
    assert!(resumed["result"]["content"][0]["text"].as_str().unwrap().contains("declined"));
    assert!(app.core.policy.rules().unwrap().is_empty());
    let last = app.core.approvals.audit().latest(&eid).unwrap().unwrap();
    assert_eq!((last.state.as_str(), last.actor.as_deref()), ("declined", Some("user:ada")));
}

#[tokio::test]
async fn the_api_answers_401_403_404_and_400() {
    let app = spawn_app().await;
    let (ada, bob) = users(&app).await;
    let token = owned_token(&app, "claude");
    let sid = app.open_session(&token).await;
    let paused = tool_call(&app, &token, &sid, SET_RULE, json!({"pattern": "y", "action": "allow"})).await;
    let eid = paused["result"]["structuredContent"]["executionId"].as_str().unwrap().to_string();
    let url = format!("{}/api/executions/{eid}", app.address);
    assert_eq!(app.client.get(&url).send().await.unwrap().status(), 401);
    let forbidden = app.client.get(&url).header("cookie", &bob).send().await.unwrap();
    assert_eq!(forbidden.status(), 403);
    assert_eq!(forbidden.json::<Value>().await.unwrap()["error"], "forbidden");
    assert_eq!(decide(&app, &bob, &eid, "accept").await.status(), 403);
    assert_eq!(
        app.client
            .get(format!("{}/api/executions/exec_nope", app.address))
            .header("cookie", &ada)
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(decide(&app, &ada, "exec_nope", "accept").await.status(), 404);
    let bad = app
        .client
        .post(format!("{url}/resume"))
        .header("origin", &app.address)
        .header("cookie", &ada)
        .json(&json!({"action": "maybe"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(bad.json::<Value>().await.unwrap()["error"], "bad_request");
    assert_eq!(app.core.approvals.get(&eid).unwrap().1.state.as_str(), "pending", "bob's attempt changed nothing");
}

#[tokio::test]
async fn pending_calls_expire_after_the_ttl() {
    let app = spawn_app_with(|c| c.approval_ttl = Duration::from_millis(300)).await;
    let (ada, _) = users(&app).await;
    let token = owned_token(&app, "claude");
    let sid = app.open_session(&token).await;
    let paused = tool_call(&app, &token, &sid, SET_RULE, json!({"pattern": "z", "action": "allow"})).await;
    let eid = paused["result"]["structuredContent"]["executionId"].as_str().unwrap().to_string();
    let resumed = tool_call(&app, &token, &sid, "resume", json!({"executionId": eid})).await;
    let s = &resumed["result"]["structuredContent"];
    assert_eq!(s["error"], "execution_expired");
    assert_eq!(s["recovery"], "re_execute");
    assert_eq!(decide(&app, &ada, &eid, "accept").await.status(), 409);
    assert_eq!(app.core.approvals.len(), 0);
}

#[tokio::test]
async fn resume_works_from_another_session_of_the_same_agent_and_not_for_another_agent() {
    let app = spawn_app().await;
    let (ada, _) = users(&app).await;
    let token = owned_token(&app, "claude");
    let first = app.open_session(&token).await;
    let paused = tool_call(&app, &token, &first, SET_RULE, json!({"pattern": "w*", "action": "allow"})).await;
    let eid = paused["result"]["structuredContent"]["executionId"].as_str().unwrap().to_string();

    let intruder = owned_token(&app, "other-agent");
    let intruder_sid = app.open_session(&intruder).await;
    let refused = tool_call(&app, &intruder, &intruder_sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(refused["result"]["structuredContent"]["error"], "execution_forbidden");

    decide(&app, &ada, &eid, "accept").await;
    let second = app.open_session(&token).await;
    let resumed = tool_call(&app, &token, &second, "resume", json!({"executionId": eid})).await;
    assert_eq!(resumed["result"]["isError"], false);
    assert_eq!(resumed["result"]["structuredContent"]["pattern"], "w*");
}

#[tokio::test]
async fn ending_the_session_cancels_its_pending_calls_and_nothing_leaks() {
    let app = spawn_app().await;
    let (ada, _) = users(&app).await;
    let token = owned_token(&app, "claude");
    let sid = app.open_session(&token).await;
    app.wait_for_sessions(|n| n == 1).await;
    let paused = tool_call(&app, &token, &sid, SET_RULE, json!({"pattern": "q", "action": "allow"})).await;
    let eid = paused["result"]["structuredContent"]["executionId"].as_str().unwrap().to_string();
    assert_eq!(app.core.approvals.len(), 1);
    app.client
        .delete(format!("{}/mcp", app.address))
        .bearer_auth(&token)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    app.wait_for_sessions(|n| n == 0).await;
    assert_eq!(app.core.approvals.len(), 0);
    assert_eq!(app.core.approvals.audit().latest(&eid).unwrap().unwrap().state.as_str(), "cancelled");
    assert_eq!(decide(&app, &ada, &eid, "accept").await.status(), 409, "a decision after teardown is not kept");
    let metrics = app.metrics().await;
    assert!(metrics.contains("gatehouse_approval_store_entries 0"), "{metrics}");
}

#[tokio::test]
async fn read_only_tools_run_at_once_and_block_rules_hide_tools() {
    let app = spawn_app().await;
    users(&app).await;
    let token = owned_token(&app, "claude");
    let sid = app.open_session(&token).await;
    let listed = tool_call(&app, &token, &sid, "gatehouse_policies_list", json!({})).await;
    assert_eq!(listed["result"]["structuredContent"]["rules"], json!([]));

    app.core.policy.set("gatehouse_audit_*", gatehouse_core::policy::Action::Block, false).unwrap();
    let (_, _, messages) = app.call(&token, &sid, json!({"jsonrpc":"2.0","id":3,"method":"tools/list"})).await;
    let names: Vec<&str> =
        messages[0]["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(!names.contains(&"gatehouse_audit_recent"), "{names:?}");
    assert!(names.contains(&"gatehouse_policy_set") && names.contains(&"resume"));
    let blocked = tool_call(&app, &token, &sid, "gatehouse_audit_recent", json!({})).await;
    assert_eq!(blocked["result"]["isError"], true);
    assert_eq!(blocked["result"]["structuredContent"]["error"], "blocked_by_policy");

    // No allow rule lets an agent change the gate for everyone without a person.
    app.core.policy.set(SET_RULE, gatehouse_core::policy::Action::Allow, false).unwrap();
    let paused = tool_call(&app, &token, &sid, SET_RULE, json!({"pattern": "k", "action": "allow"})).await;
    assert_eq!(paused["result"]["structuredContent"]["status"], "user_approval_required");
}

#[tokio::test]
async fn execution_events_stream_the_state_live() {
    let app = spawn_app().await;
    let (ada, _) = users(&app).await;
    let token = owned_token(&app, "claude");
    let sid = app.open_session(&token).await;
    let paused = tool_call(&app, &token, &sid, SET_RULE, json!({"pattern": "e", "action": "allow"})).await;
    let eid = paused["result"]["structuredContent"]["executionId"].as_str().unwrap().to_string();
    let mut stream = app
        .client
        .get(format!("{}/api/executions/{eid}/events", app.address))
        .header("cookie", &ada)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let mut seen = String::new();
    while !seen.contains("pending") {
        seen.push_str(&String::from_utf8_lossy(&stream.chunk().await.unwrap().unwrap()));
    }
    decide(&app, &ada, &eid, "decline").await;
    while !seen.contains("declined") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), stream.chunk()).await.unwrap().unwrap();
        match chunk {
            Some(c) => seen.push_str(&String::from_utf8_lossy(&c)),
            None => break,
        }
    }
    assert!(seen.contains("\"declined\"") && seen.contains("user:ada"), "{seen}");
}

#[tokio::test]
async fn a_client_cancelling_its_resume_cancels_the_execution() {
    let app = spawn_app().await;
    users(&app).await;
    let token = owned_token(&app, "claude");
    let sid = app.open_session(&token).await;
    let paused = tool_call(&app, &token, &sid, SET_RULE, json!({"pattern": "c", "action": "allow"})).await;
    let eid = paused["result"]["structuredContent"]["executionId"].as_str().unwrap().to_string();
    let waiting = {
        let req = app
            .mcp(&token)
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&json!({"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"resume","arguments":{"executionId": eid}}}));
        tokio::spawn(async move { req.send().await })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (status, _, _) = app
        .call(&token, &sid, json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId": 41, "reason": "user pressed stop"}}))
        .await;
    assert_eq!(status, 202);
    for _ in 0..100 {
        if app.core.approvals.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(app.core.approvals.len(), 0, "the cancelled execution left the store");
    assert_eq!(app.core.approvals.audit().latest(&eid).unwrap().unwrap().state.as_str(), "cancelled");
    waiting.abort();
}
