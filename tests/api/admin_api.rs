//! The admin API for orchestrators: issue, touch, revoke.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn orchestrator_lifecycle_issue_touch_revoke() {
    let app = spawn_app().await;
    let admin = app.api_token("orchestrator");
    let api = |method: reqwest::Method, path: &str| app.client.request(method, app.url(path)).bearer_auth(&admin);

    let response = api(reqwest::Method::POST, "/api/credentials")
        .json(&json!({"agent": "claude", "thread": "th-1", "provider": "ps-1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let issued: Value = response.json().await.unwrap();
    let token = issued["token"].as_str().unwrap().to_string();
    assert_eq!(issued["endpoint"], format!("{}/mcp", app.address));
    assert_eq!(issued["authorization"], format!("Bearer {token}"));
    assert_eq!(issued["thread"], "th-1");
    app.open_session(&token).await;

    // Touching the thread keeps it alive past the window.
    for _ in 0..3 {
        app.clock.advance(Duration::from_secs(40 * 60));
        let r = api(reqwest::Method::POST, "/api/threads/th-1/touch").send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(app.mcp(&token).json(&initialize_request("2025-11-25")).send().await.unwrap().status(), 200);

    // Re-issuing for the thread revokes the first token.
    let issue = |body: Value| {
        let request = api(reqwest::Method::POST, "/api/credentials").json(&body);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let second = issue(json!({"agent": "claude", "thread": "th-1"})).await;
    assert_eq!(app.mcp(&token).json(&initialize_request("2025-11-25")).send().await.unwrap().status(), 401);
    let second_token = second["token"].as_str().unwrap();

    let r = api(reqwest::Method::DELETE, "/api/threads/th-1/credentials").send().await.unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["revoked"], 1);
    assert_eq!(app.mcp(second_token).json(&initialize_request("2025-11-25")).send().await.unwrap().status(), 401);

    // Revoke by id; a second revoke is a 404 with a JSON body.
    let third = issue(json!({"agent": "x"})).await;
    let id = third["id"].as_str().unwrap();
    assert_eq!(api(reqwest::Method::DELETE, &format!("/api/credentials/{id}")).send().await.unwrap().status(), 200);
    let again = api(reqwest::Method::DELETE, &format!("/api/credentials/{id}")).send().await.unwrap();
    assert_eq!(again.status(), 404);
    assert_eq!(again.json::<Value>().await.unwrap()["error"], "not_found");

    // Touching a thread with nothing live is a 404.
    assert_eq!(api(reqwest::Method::POST, "/api/threads/th-1/touch").send().await.unwrap().status(), 404);
}

#[tokio::test]
async fn touching_one_thread_does_not_keep_another_alive() {
    let app = spawn_app().await;
    let admin = app.api_token("orchestrator");
    let a = app.issue("a", Some("A"));
    let _b = app.issue("b", Some("B"));
    for _ in 0..3 {
        app.clock.advance(Duration::from_secs(30 * 60));
        app.client.post(app.url("/api/threads/B/touch")).bearer_auth(&admin).send().await.unwrap();
    }
    assert_eq!(app.mcp(&a).json(&initialize_request("2025-11-25")).send().await.unwrap().status(), 401);
}

#[tokio::test]
async fn the_admin_api_needs_an_admin() {
    let app = spawn_app().await;
    let body = json!({"agent": "x"});
    let url = app.url("/api/credentials");
    let r = app.client.post(&url).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "unauthorized");
    let r = app.client.post(&url).bearer_auth("not-a-token").json(&body).send().await.unwrap();
    assert_eq!(r.status(), 401);
    // An agent credential is not an admin token.
    let agent = app.issue("sneaky", None);
    let r = app.client.post(&url).bearer_auth(&agent).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn bad_bodies_get_json_errors() {
    let app = spawn_app().await;
    let admin = app.api_token("orchestrator");
    let url = app.url("/api/credentials");
    for body in [r#"{"agent": 5}"#, "not json", r#"{"agent":"a","surprise":1}"#, r#"{"agent":"  "}"#] {
        let r = app
            .client
            .post(&url)
            .bearer_auth(&admin)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "bad_request");
        assert!(v["message"].as_str().unwrap().len() > 3);
    }
}
