//! MCP sessions of clients that never end them: at its cap a credential's
//! least recently used session not in use makes room for its next one,
//! sessions in use are never taken, idle sessions end after
//! `session_idle_timeout` while the pauses their clients wait on live on,
//! and on two replicas each keeps its own sessions and its own cap.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

const SET_RULE: &str = "gatehouse_policy_set";

/// A `ping` in session `sid`: its HTTP status (404 once the session is gone).
async fn ping(app: &TestApp, token: &str, sid: &str) -> u16 {
    let response = app.in_session(token, sid).json(&json!({"jsonrpc": "2.0", "id": 99, "method": "ping"})).send().await;
    response.unwrap().status().as_u16()
}

/// Whether this replica still has session `sid` bound.
fn is_open(app: &TestApp, sid: &str) -> bool {
    app.state.mcp.mcp_sessions.owner(sid).is_some()
}

/// A `gatehouse_mcp_sessions_closed_total` counter from `/metrics`.
async fn closed_total(app: &TestApp, reason: &str) -> u64 {
    let metrics = app.metrics().await;
    let line = format!("gatehouse_mcp_sessions_closed_total{{reason=\"{reason}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(line.as_str())).expect("the counter is exported").parse().unwrap()
}

/// One run of a command-line client that never sends DELETE (the
/// conformance suite's, the inspector CLI): its own connections, initialize,
/// `notifications/initialized`, a GET stream as the TypeScript SDK opens one,
/// one `tools/call`; then it exits and its connections close.
async fn one_run(app: &TestApp, token: &str) -> Result<(), String> {
    let client = reqwest::Client::new();
    let post = |sid: Option<&str>, body: Value| {
        let request = client
            .post(app.url("/mcp"))
            .bearer_auth(token)
            .header("accept", ACCEPT_BOTH)
            .header("content-type", "application/json")
            .json(&body);
        match sid {
            Some(sid) => request.header("mcp-session-id", sid).header("mcp-protocol-version", "2025-11-25"),
            None => request,
        }
    };
    let initialized = post(None, initialize_request("2025-11-25")).send().await.unwrap();
    if initialized.status() != 200 {
        return Err(format!("initialize: {} {}", initialized.status(), initialized.text().await.unwrap()));
    }
    let sid = initialized.headers()["mcp-session-id"].to_str().unwrap().to_string();
    jsonrpc_messages(initialized).await;
    let ack = post(Some(&sid), json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).send().await;
    assert_eq!(ack.unwrap().status(), 202);
    let stream = client
        .get(app.url("/mcp"))
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let called = post(Some(&sid), tool_call_request(2, "gatehouse_status", json!({}))).send().await.unwrap();
    if called.status() != 200 {
        return Err(format!("tools/call: {} {}", called.status(), called.text().await.unwrap()));
    }
    let reply = jsonrpc_messages(called).await.into_iter().find(|m| m["id"] == 2).expect("a reply");
    if reply["result"]["isError"] != false {
        return Err(format!("tools/call failed: {reply}"));
    }
    // The client exits: its stream and connections go, no DELETE is sent.
    drop(stream);
    Ok(())
}

#[tokio::test]
async fn forty_runs_of_a_client_that_never_ends_its_sessions_all_pass_with_the_default_limits() {
    let app = spawn_app().await;
    let token = app.issue("conformance", None);
    for run in 1..=40 {
        if let Err(e) = one_run(&app, &token).await {
            panic!("run {run} failed: {e}");
        }
    }
    let cap = app.state.mcp.config.load().max_sessions_per_credential;
    assert_eq!(cap, 16, "the default limit");
    assert_eq!(app.state.mcp.mcp_sessions.len(), cap, "the credential holds its cap, no more");
    assert_eq!(closed_total(&app, "evicted").await, 40 - cap as u64, "each run past the cap evicted one session");
    assert_eq!(closed_total(&app, "idle").await, 0);
    app.wait_for_sessions(|n| n == cap).await;
}

#[tokio::test]
async fn sixteen_sessions_in_use_refuse_a_seventeenth_and_one_that_ends_its_stream_makes_room() {
    let app = spawn_app().await;
    let token = app.issue("busy", None);
    let mut sessions = Vec::new();
    for _ in 0..16 {
        let sid = app.open_session(&token).await;
        let stream = app.open_stream(&token, &sid).await;
        sessions.push((sid, stream));
    }
    let refused = app.mcp(&token).json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("max_sessions_per_credential"), "{body}");
    assert_eq!(closed_total(&app, "evicted").await, 0, "nothing in use was closed");
    for (sid, _) in &sessions {
        assert_eq!(ping(&app, &token, sid).await, 200, "every busy session still works");
    }
    // Another credential is not affected, and takes nothing from this one.
    let other = app.issue("other", None);
    app.open_session(&other).await;

    // One client goes (its stream closes): its session makes room, only it.
    let (gone, stream) = sessions.remove(5);
    drop(stream);
    let mut opened = None;
    for _ in 0..200 {
        let response = app.mcp(&token).json(&initialize_request("2025-11-25")).send().await.unwrap();
        if response.status() == 200 {
            opened = Some(response.headers()["mcp-session-id"].to_str().unwrap().to_string());
            break;
        }
        assert_eq!(response.status(), 429);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let new = opened.expect("the session whose stream closed makes room");
    assert!(!is_open(&app, &gone), "the idle one was evicted");
    assert_eq!(ping(&app, &token, &gone).await, 404, "and is gone for its client");
    assert!(is_open(&app, &new));
    for (sid, _) in &sessions {
        assert!(is_open(&app, sid), "no session in use was taken");
    }
    assert_eq!(closed_total(&app, "evicted").await, 1);
}

#[tokio::test]
async fn an_idle_session_ends_while_its_browser_pause_is_resumed_from_a_new_session() {
    let app = spawn_app_with(|c| c.session_idle_timeout = Duration::from_secs(1)).await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    let token = app.issue_owned("claude", "ada");

    // A browser-mode pause, announced in a session the client then leaves idle.
    let idle = app.open_session(&token).await;
    let reply = app.tool_call(&token, &idle, SET_RULE, json!({"pattern": "idle_*", "action": "allow"})).await;
    assert_eq!(reply["result"]["structuredContent"]["status"], "user_approval_required", "{reply}");
    let eid = execution_id(&reply);

    // Busy meanwhile, for longer than the timeout: a session with its GET
    // stream open, and one whose `resume` long-poll is in flight.
    let streaming = app.open_session(&token).await;
    let stream = app.open_stream(&token, &streaming).await;
    let waiting = app.open_session(&token).await;
    let reply = app.tool_call(&token, &waiting, SET_RULE, json!({"pattern": "held_*", "action": "allow"})).await;
    let held = execution_id(&reply);
    let poll = app.in_session(&token, &waiting).json(&tool_call_request(8, "resume", json!({"executionId": held})));
    let poll = tokio::spawn(async move { jsonrpc_messages(poll.send().await.unwrap()).await });

    wait_until("the idle session is closed", || !is_open(&app, &idle)).await;
    assert_eq!(ping(&app, &token, &idle).await, 404);
    assert_eq!(app.core.approvals.get(&eid).expect("its pause lives on").1.state.as_str(), "pending");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(is_open(&app, &streaming) && is_open(&app, &waiting), "sessions in use outlive the timeout");

    // Approved in the browser, resumed from a new session: the real result.
    assert_eq!(app.decide(&ada, &eid, "accept").await.status(), 200);
    let fresh = app.open_session(&token).await;
    let resumed = app.tool_call(&token, &fresh, "resume", json!({"executionId": eid})).await;
    assert_eq!(resumed["result"]["isError"], false, "{resumed}");
    assert_eq!(resumed["result"]["structuredContent"]["pattern"], "idle_*");

    // The long-poll was never cut off: it returns the approved call's result.
    assert_eq!(app.decide(&ada, &held, "accept").await.status(), 200);
    let messages = poll.await.unwrap();
    let reply = messages.iter().find(|m| m["id"] == 8).unwrap_or_else(|| panic!("{messages:?}"));
    assert_eq!(reply["result"]["structuredContent"]["pattern"], "held_*", "{reply}");

    // Once its stream ends, the streaming session goes idle and ends too.
    drop(stream);
    wait_until("the streaming session is closed once unused", || !is_open(&app, &streaming)).await;
    assert!(closed_total(&app, "idle").await >= 2);
    assert_eq!(closed_total(&app, "evicted").await, 0);
}

#[tokio::test]
async fn on_two_replicas_each_keeps_its_own_sessions_and_cap() {
    let a = spawn_app_with(|c| c.max_sessions_per_credential = 2).await;
    let Some(url) = a.core.db.postgres_url().map(str::to_string) else { return };
    let b = spawn_app_with(|c| {
        c.database.url = Some(url);
        c.max_sessions_per_credential = 2;
    })
    .await;
    a.add_user("ada", true).await;
    let token = a.issue_owned("claude", "ada");

    // On A: a pause announced in a session left idle, and a busy session.
    let announced = a.open_session(&token).await;
    let reply = a.tool_call(&token, &announced, SET_RULE, json!({"pattern": "replica_*", "action": "allow"})).await;
    let eid = execution_id(&reply);
    let busy = a.open_session(&token).await;
    let _stream = a.open_stream(&token, &busy).await;

    // B counts only its own sessions: the same credential opens its two there.
    let b1 = b.open_session(&token).await;
    let b2 = b.open_session(&token).await;
    // At B's cap, B makes room with B's own idle session, never one of A's.
    let b3 = b.open_session(&token).await;
    assert!(!is_open(&b, &b1) && is_open(&b, &b2) && is_open(&b, &b3));
    assert!(is_open(&a, &announced) && is_open(&a, &busy), "A's sessions are A's");

    // At A's cap, A evicts the idle session whose pause is pending...
    let a3 = a.open_session(&token).await;
    assert!(!is_open(&a, &announced) && is_open(&a, &busy) && is_open(&a, &a3));
    assert_eq!(a.core.approvals.get(&eid).expect("the pause outlives it").1.state.as_str(), "pending");
    // ...which is decided and resumed on B.
    let ada = b.sign_in("ada").await;
    assert_eq!(b.decide(&ada, eid.as_str(), "accept").await.status(), 200);
    let resumed = b.tool_call(&token, &b2, "resume", json!({"executionId": eid})).await;
    assert_eq!(resumed["result"]["isError"], false, "{resumed}");
    assert_eq!(resumed["result"]["structuredContent"]["pattern"], "replica_*");
}
