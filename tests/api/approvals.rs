//! Gated calls in browser mode: pause, decide over the HTTP API, resume.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

const SET_RULE: &str = "gatehouse_policy_set";

/// Claude's session (its credential owned by ada) and its `gatehouse_policy_set`
/// of `pattern` with `action`, waiting for a person: (token, sid, eid).
async fn paused(
    app: &TestApp,
    pattern: &str,
    action: &str,
) -> (String, String, gatehouse_core::approvals::ExecutionId) {
    let token = app.issue_owned("claude", "ada");
    let sid = app.open_session(&token).await;
    let reply = app.tool_call(&token, &sid, SET_RULE, json!({"pattern": pattern, "action": action})).await;
    let eid = execution_id(&reply);
    (token, sid, eid)
}

#[tokio::test]
async fn a_gated_call_pauses_and_runs_once_approved() {
    let app = spawn_app().await;
    let (ada, _) = app.ada_and_bob().await;
    let token = app.issue_owned("claude", "ada");
    let sid = app.open_session(&token).await;

    let paused = app.tool_call(&token, &sid, SET_RULE, json!({"pattern": "files__*", "action": "allow"})).await;
    let result = &paused["result"];
    assert_eq!(result["isError"], false, "a pause is not an error");
    let s = &result["structuredContent"];
    assert_eq!(s["status"], "user_approval_required");
    let eid = s["executionId"].as_str().unwrap().to_string();
    assert!(eid.starts_with("exec_"));
    assert_eq!(s["approvalUrl"], format!("{}/resume/{eid}?mcp_session_id={sid}", app.address));
    assert!(result["content"][0]["text"].as_str().unwrap().contains(&eid));
    assert!(app.core.policy.rules().unwrap().is_empty(), "nothing ran yet");

    let detail: Value =
        app.get_as(&ada, &format!("/api/mcp-sessions/{sid}/executions/{eid}")).await.json().await.unwrap();
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
        let req = app.in_session(&token, &sid).json(&tool_call_request(8, "resume", json!({"executionId": eid})));
        tokio::spawn(async move { jsonrpc_messages(req.send().await.unwrap()).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = app.decide(&ada, &eid, "accept").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["state"], "approved");
    let messages = resume.await.unwrap();
    let result = &messages.iter().find(|m| m["id"] == 8).unwrap()["result"];
    assert_eq!(result["isError"], false);
    assert_eq!(result["structuredContent"]["pattern"], "files__*");
    assert_eq!(app.core.policy.rules().unwrap()[0].pattern, "files__*", "the approved call ran");

    // Same decision again: idempotent. A conflicting one: 409.
    assert_eq!(app.decide(&ada, &eid, "accept").await.status(), 200);
    let conflict = app.decide(&ada, &eid, "decline").await;
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
    let (ada, _) = app.ada_and_bob().await;
    let (token, sid, eid) = paused(&app, "x", "block").await;
    assert_eq!(app.decide(&ada, &eid, "decline").await.status(), 200);
    assert_eq!(app.decide(&ada, &eid, "accept").await.status(), 409);
    let resumed = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(resumed["result"]["isError"], true);
    assert_eq!(resumed["result"]["structuredContent"]["error"], "execution_declined");
    assert!(resumed["result"]["content"][0]["text"].as_str().unwrap().contains("declined"));
    assert!(app.core.policy.rules().unwrap().is_empty());
    let last = app.core.approvals.audit().latest(&eid).unwrap().unwrap();
    assert_eq!((last.state.as_str(), last.actor.as_deref()), ("declined", Some("user:ada#1")));
}

#[tokio::test]
async fn the_api_answers_401_403_404_and_400() {
    let app = spawn_app().await;
    let (ada, bob) = app.ada_and_bob().await;
    let (_, _, eid) = paused(&app, "y", "allow").await;
    let path = format!("/api/executions/{eid}");
    assert_eq!(app.client.get(app.url(&path)).send().await.unwrap().status(), 401);
    let forbidden = app.get_as(&bob, &path).await;
    assert_eq!(forbidden.status(), 403);
    assert_eq!(forbidden.json::<Value>().await.unwrap()["error"], "forbidden");
    assert_eq!(app.decide(&bob, &eid, "accept").await.status(), 403);
    assert_eq!(app.get_as(&ada, "/api/executions/exec_nope").await.status(), 404);
    assert_eq!(app.decide(&ada, "exec_nope", "accept").await.status(), 404);
    let bad = app
        .same_origin(reqwest::Method::POST, &format!("{path}/resume"))
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
    let (ada, _) = app.ada_and_bob().await;
    let (token, sid, eid) = paused(&app, "z", "allow").await;
    let resumed = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    let s = &resumed["result"]["structuredContent"];
    assert_eq!(s["error"], "execution_expired");
    assert_eq!(s["recovery"], "re_execute");
    assert_eq!(app.decide(&ada, &eid, "accept").await.status(), 409);
    assert_eq!(app.core.approvals.len(), 0);
}

#[tokio::test]
async fn resume_works_from_another_session_of_the_same_agent_and_not_for_another_agent() {
    let app = spawn_app().await;
    let (ada, _) = app.ada_and_bob().await;
    let (token, _, eid) = paused(&app, "w*", "allow").await;

    let intruder = app.issue_owned("other-agent", "ada");
    let intruder_sid = app.open_session(&intruder).await;
    let refused = app.tool_call(&intruder, &intruder_sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(refused["result"]["structuredContent"]["error"], "execution_forbidden");

    app.decide(&ada, &eid, "accept").await;
    let second = app.open_session(&token).await;
    let resumed = app.tool_call(&token, &second, "resume", json!({"executionId": eid})).await;
    assert_eq!(resumed["result"]["isError"], false);
    assert_eq!(resumed["result"]["structuredContent"]["pattern"], "w*");
}

#[tokio::test]
async fn read_only_tools_run_at_once_and_block_rules_hide_tools() {
    let app = spawn_app().await;
    app.ada_and_bob().await;
    let token = app.issue_owned("claude", "ada");
    let sid = app.open_session(&token).await;
    let listed = app.tool_call(&token, &sid, "gatehouse_policies_list", json!({})).await;
    assert_eq!(listed["result"]["structuredContent"]["rules"], json!([]));

    app.core
        .policy
        .set(gatehouse_core::policy::Rule::new(
            "gatehouse_audit_*".parse().unwrap(),
            gatehouse_core::policy::Action::Block,
        ))
        .unwrap();
    let (_, _, messages) = app.call(&token, &sid, json!({"jsonrpc":"2.0","id":3,"method":"tools/list"})).await;
    let names: Vec<&str> =
        messages[0]["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(!names.contains(&"gatehouse_audit_recent"), "{names:?}");
    assert!(names.contains(&"gatehouse_policy_set") && names.contains(&"resume"));
    let blocked = app.tool_call(&token, &sid, "gatehouse_audit_recent", json!({})).await;
    assert_eq!(blocked["result"]["isError"], true);
    assert_eq!(blocked["result"]["structuredContent"]["error"], "blocked_by_policy");

    // No allow rule lets an agent change the gate for everyone without a person.
    app.core
        .policy
        .set(gatehouse_core::policy::Rule::new(SET_RULE.parse().unwrap(), gatehouse_core::policy::Action::Allow))
        .unwrap();
    let paused = app.tool_call(&token, &sid, SET_RULE, json!({"pattern": "k", "action": "allow"})).await;
    assert_eq!(paused["result"]["structuredContent"]["status"], "user_approval_required");
}

#[tokio::test]
async fn execution_events_stream_the_state_live() {
    let app = spawn_app().await;
    let (ada, _) = app.ada_and_bob().await;
    let (_, _, eid) = paused(&app, "e", "allow").await;
    let mut stream = app.get_as(&ada, &format!("/api/executions/{eid}/events")).await;
    assert_eq!(stream.status(), 200);
    let mut seen = String::new();
    while !seen.contains(r#""state":"pending""#) || !seen.contains("event: inbox") {
        seen.push_str(&String::from_utf8_lossy(&stream.chunk().await.unwrap().unwrap()));
    }
    // Beside it, the viewer's inbox (the header's count).
    let inbox = seen.split("event: inbox\ndata: ").nth(1).unwrap().lines().next().unwrap();
    let inbox: gatehouse_core::model::InboxView = serde_json::from_str(inbox).unwrap();
    assert_eq!((inbox.total, inbox.pending[0].execution_id.as_str()), (1, eid.as_str()), "{seen}");
    app.decide(&ada, &eid, "decline").await;
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
    app.ada_and_bob().await;
    let (token, sid, eid) = paused(&app, "c", "allow").await;
    let waiting = {
        let req = app.in_session(&token, &sid).json(&tool_call_request(41, "resume", json!({"executionId": eid})));
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
