//! Streamable HTTP transport rules on `/mcp` (MCP 2025-11-25).

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn initialize_issues_a_session_and_tools_are_listed_and_called() {
    let app = spawn_app().await;
    let token = app.issue("claude", Some("thread-1"));
    let sid = app.open_session(&token).await;
    assert!(!sid.is_empty());

    let (status, _, messages) = app.call(&token, &sid, json!({"jsonrpc":"2.0","id":2,"method":"tools/list"})).await;
    assert_eq!(status, 200);
    let tools = messages[0]["result"]["tools"].as_array().unwrap();
    let status_tool = tools.iter().find(|t| t["name"] == "gatehouse_status").expect("gatehouse_status listed");
    assert_eq!(status_tool["annotations"]["readOnlyHint"], true);
    assert!(status_tool["description"].as_str().unwrap().len() > 20);

    let (_, _, messages) = app.call(&token, &sid, tool_call_request(3, "gatehouse_status", json!({}))).await;
    let result = &messages[0]["result"];
    assert_eq!(result["isError"], false);
    let s = &result["structuredContent"];
    assert_eq!(s["agent"], "claude");
    assert_eq!(s["thread"], "thread-1");
    assert_eq!(s["sessionId"], sid.as_str());
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(s["livenessWindowSeconds"], 3600);
    assert!(s["lapsesAt"].as_str().unwrap() > s["lastSignOfLife"].as_str().unwrap());
}

#[tokio::test]
async fn notifications_and_responses_get_202() {
    let app = spawn_app().await;
    let token = app.issue("a", None);
    let sid = app.open_session(&token).await;
    let (status, _, body) = app
        .call(&token, &sid, json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId": 99}}))
        .await;
    assert_eq!(status, 202);
    assert!(body.is_empty());
    let (status, _, _) = app.call(&token, &sid, json!({"jsonrpc":"2.0","id":"srv-1","result":{}})).await;
    assert_eq!(status, 202);
}

#[tokio::test]
async fn missing_session_id_is_400_and_unknown_is_404() {
    let app = spawn_app().await;
    let token = app.issue("a", None);
    app.open_session(&token).await;
    let response = app
        .mcp(&token)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let (status, _, _) =
        app.call(&token, "no-such-session", json!({"jsonrpc":"2.0","id":2,"method":"tools/list"})).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn delete_ends_the_session() {
    let app = spawn_app().await;
    let token = app.issue("a", None);
    let sid = app.open_session(&token).await;
    app.wait_for_sessions(|n| n == 1).await;
    let response = app.end_session(&token, &sid).await;
    assert!(response.status().is_success(), "{}", response.status());
    let (status, _, _) = app.call(&token, &sid, json!({"jsonrpc":"2.0","id":2,"method":"ping"})).await;
    assert_eq!(status, 404);
    app.wait_for_sessions(|n| n == 0).await;
}

#[tokio::test]
async fn unsupported_protocol_version_header_is_400() {
    let app = spawn_app().await;
    let token = app.issue("a", None);
    let sid = app.open_session(&token).await;
    let response = app
        .mcp(&token)
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "1999-01-01")
        .json(&json!({"jsonrpc":"2.0","id":2,"method":"ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
}

#[tokio::test]
async fn foreign_origin_and_host_are_403() {
    let app = spawn_app().await;
    let token = app.issue("a", None);
    let response = app
        .mcp(&token)
        .header("origin", "https://evil.example")
        .json(&initialize_request("2025-11-25"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let response =
        app.mcp(&token).header("host", "evil.example").json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_eq!(response.status(), 403);
    // A loopback origin (a local inspector) is fine.
    let response = app
        .mcp(&token)
        .header("origin", "http://localhost:6274")
        .json(&initialize_request("2025-11-25"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn get_opens_an_sse_stream() {
    let app = spawn_app().await;
    let token = app.issue("a", None);
    let sid = app.open_session(&token).await;
    let response = app
        .client
        .get(app.url("/mcp"))
        .bearer_auth(&token)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
}

#[tokio::test]
async fn malformed_json_is_a_parse_error_and_the_server_keeps_serving() {
    let app = spawn_app().await;
    let token = app.issue("a", None);
    let response = app.mcp(&token).body("{not json").send().await.unwrap();
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32700);
    assert_eq!(body["jsonrpc"], "2.0");

    let response = app.mcp(&token).body(r#"{"hello":"world"}"#).send().await.unwrap();
    assert_eq!(response.status(), 400);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32600);

    // Still serving.
    app.open_session(&token).await;
}

#[tokio::test]
async fn oversized_bodies_are_refused() {
    let app = spawn_app_with(|c| c.max_body_bytes = 4096).await;
    let token = app.issue("a", None);
    let big = json!({"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad": "x".repeat(10_000)}});
    let response = app.mcp(&token).json(&big).send().await.unwrap();
    assert_eq!(response.status(), 413);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32600);
    app.open_session(&token).await;
}

#[tokio::test]
async fn unknown_tools_get_a_jsonrpc_error() {
    let app = spawn_app().await;
    let token = app.issue("a", None);
    let sid = app.open_session(&token).await;
    let (_, _, messages) = app.call(&token, &sid, tool_call_request(5, "nope", json!({}))).await;
    assert_eq!(messages[0]["error"]["code"], -32602);
}

#[tokio::test]
async fn sessions_appear_in_the_live_registry_with_their_agent() {
    let app = spawn_app().await;
    let token = app.issue("codex", Some("t9"));
    let mut events = app.core.live.subscribe();
    let sid = app.open_session(&token).await;
    app.wait_for_sessions(|n| n == 1).await;
    let session = &app.core.live.sessions()[0];
    assert_eq!(session.session_id, sid);
    assert_eq!(session.agent, "codex");
    assert_eq!(session.client_name, "itest");
    assert_eq!(session.protocol_version, "2025-11-25");
    let mut saw = false;
    while let Ok(event) = events.try_recv() {
        saw |= event == gatehouse_core::live::LiveEvent::SessionsChanged;
    }
    assert!(saw, "a sessions_changed event was published");
}
