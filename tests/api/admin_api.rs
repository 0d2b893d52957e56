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

/// Admin API tokens from the browser: an admin mints one (shown once, to
/// them only), it works on the admin API, the list shows it without its
/// secret, revoking it ends it at once; each step is in the change log; a
/// plain user may do none of it.
#[tokio::test]
async fn admin_api_tokens_are_minted_listed_and_revoked_from_the_console() {
    let app = spawn_app().await;
    app.add_user("root", true).await;
    app.add_user("bob", false).await;
    let (root, bob) = (app.sign_in("root").await, app.sign_in("bob").await);
    for (name, form) in [
        ("api-tokens", vec![]),
        ("api-token-mint", vec![("name", "bob's")]),
        ("api-token-revoke", vec![("id", "api_x")]),
    ] {
        let r = app.post_fn(&bob, name, &form).await;
        assert_eq!(r.status(), 403, "{name}: a plain user may not");
    }
    assert!(app.core.api_tokens.list().unwrap().is_empty(), "nothing minted by bob");

    // As a plain form posts it (no JavaScript): back to the page that shows it.
    let r = app
        .same_origin(reqwest::Method::POST, "/api/fn/api-token-mint")
        .header("cookie", &root)
        .header("accept", "text/html")
        .form(&[("name", "deploy pipeline")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
    let listed = app.core.api_tokens.list().unwrap();
    assert_eq!(listed.len(), 1);
    let id = listed[0].id.clone();
    // The token, once, to root only: find its handle the way the page does.
    let handle: String = {
        let location = r.headers()["location"].to_str().unwrap().to_string();
        location
            .split("api_token=")
            .nth(1)
            .unwrap_or_else(|| panic!("redirected to the token: {location:?}"))
            .to_string()
    };
    let bobs_try = app.post_fn(&bob, "api-token-take", &[("handle", &handle)]).await;
    assert_eq!(bobs_try.status(), 403);
    let shown: Value = app.post_fn(&root, "api-token-take", &[("handle", &handle)]).await.json().await.unwrap();
    let token = shown["token"].as_str().expect("shown to its minter").to_string();
    let again: Value = app.post_fn(&root, "api-token-take", &[("handle", &handle)]).await.json().await.unwrap();
    assert!(again.is_null(), "shown once: {again}");

    let api = || app.client.get(app.url("/api/credentials")).bearer_auth(&token);
    assert_eq!(api().send().await.unwrap().status(), 200, "the token works on the admin API");
    let list: Value = app.post_fn(&root, "api-tokens", &[]).await.json().await.unwrap();
    assert_eq!(list[0]["name"], "deploy pipeline");
    assert!(!list.to_string().contains(&token), "never listed");

    let r = app.post_fn(&root, "api-token-revoke", &[("id", &id)]).await;
    assert!(r.status().is_success() || r.status().is_redirection(), "{}", r.status());
    assert_eq!(api().send().await.unwrap().status(), 401, "revoked at once");
    let r = app.post_fn(&root, "api-token-revoke", &[("id", &id)]).await;
    assert_eq!(r.status(), 404, "revoking twice says so");
    let actions: Vec<String> = app.core.changes.recent("user", 10).unwrap().into_iter().map(|c| c.action).collect();
    assert!(
        actions.contains(&"mint API token".to_string()) && actions.contains(&"revoke API token".to_string()),
        "{actions:?}"
    );
}
