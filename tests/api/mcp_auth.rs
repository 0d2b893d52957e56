//! Bearer authentication on `/mcp`.

use std::time::Duration;

use serde_json::json;

use crate::helpers::*;

async fn assert_rejected(response: reqwest::Response, reason: &str) {
    assert_eq!(response.status(), 401);
    assert!(response.headers()["www-authenticate"].to_str().unwrap().starts_with("Bearer"));
    assert_eq!(response.headers()["cache-control"], "no-store");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "invalid_mcp_credential");
    assert_eq!(body["reason"], reason);
}

#[tokio::test]
async fn missing_and_unknown_tokens_are_401() {
    let app = spawn_app().await;
    let response = app.mcp_at("/mcp").json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_rejected(response, "missing_bearer_token").await;
    let response = app.mcp("made-up-token").json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_rejected(response, "unknown_or_expired_token").await;
}

#[tokio::test]
async fn tokens_in_the_query_string_are_not_accepted() {
    let app = spawn_app().await;
    let token = app.issue("a", None);
    let response =
        app.mcp_at(&format!("/mcp?access_token={token}")).json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_rejected(response, "missing_bearer_token").await;
}

#[tokio::test]
async fn revoked_credentials_stop_working_mid_session() {
    let app = spawn_app().await;
    let token = app.issue("a", Some("t"));
    let sid = app.open_session(&token).await;
    app.core.credentials.revoke_thread("t").unwrap();
    let response =
        app.in_session(&token, &sid).json(&json!({"jsonrpc":"2.0","id":2,"method":"ping"})).send().await.unwrap();
    assert_rejected(response, "unknown_or_expired_token").await;
}

#[tokio::test]
async fn credentials_lapse_without_signs_of_life_and_traffic_keeps_them_alive() {
    let app = spawn_app().await; // liveness window: 1 h
    let token = app.issue("a", None);
    let sid = app.open_session(&token).await;
    for _ in 0..4 {
        app.clock.advance(Duration::from_secs(50 * 60));
        let (status, _, _) = app.call(&token, &sid, json!({"jsonrpc":"2.0","id":2,"method":"ping"})).await;
        assert_eq!(status, 200, "traffic within the window keeps it alive");
    }
    app.clock.advance(Duration::from_secs(3600));
    let response =
        app.in_session(&token, &sid).json(&json!({"jsonrpc":"2.0","id":3,"method":"ping"})).send().await.unwrap();
    assert_rejected(response, "unknown_or_expired_token").await;
}

#[tokio::test]
async fn a_session_cannot_be_used_with_another_agents_token() {
    let app = spawn_app().await;
    let mine = app.issue("a", None);
    let theirs = app.issue("b", None);
    let sid = app.open_session(&mine).await;
    app.wait_for_sessions(|n| n == 1).await;
    let (status, _, _) = app.call(&theirs, &sid, json!({"jsonrpc":"2.0","id":2,"method":"tools/list"})).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn rejections_are_counted_in_metrics() {
    let app = spawn_app().await;
    app.mcp("bad").json(&initialize_request("2025-11-25")).send().await.unwrap();
    let text = app.metrics().await;
    assert!(text.contains("gatehouse_credentials_rejected_total{reason=\"unknown_or_expired_token\"} 1"), "{text}");
}
