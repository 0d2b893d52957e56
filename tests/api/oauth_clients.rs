//! OAuth clients as the authorization server meets them: clients known by
//! their metadata document, registration floods that never lock out another
//! address, and the per-user bound on signed-in clients.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;
use crate::oauth::{access, approved_code, authorize_path, decide, exchange};

/// A client metadata document served on loopback: its URL, and how many
/// times it was fetched.
async fn serve_document(name: &str) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/client.json", listener.local_addr().unwrap());
    let document = json!({"client_id": url, "client_name": name, "redirect_uris": [REDIRECT],
                          "token_endpoint_auth_method": "none"});
    let fetched = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = fetched.clone();
    let router = axum::Router::new().route(
        "/client.json",
        axum::routing::get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            let document = document.clone();
            async move { axum::Json(document) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (url, fetched)
}

#[tokio::test]
async fn clients_known_by_their_metadata_document() {
    let (document, fetched) = serve_document("VS Code").await;
    let app = spawn_app_with(|c| c.oauth.allow_private_client_metadata = true).await;
    app.add_user("bob", false).await;
    // Signed out, nothing is fetched: sign in first.
    let r = app.client.get(app.url(&authorize_path(&app, &document, &[]))).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert!(r.headers()["location"].to_str().unwrap().starts_with("/sign-in?next="));
    assert_eq!(fetched.load(std::sync::atomic::Ordering::SeqCst), 0, "no fetch for a signed-out visitor");
    let bob = app.sign_in("bob").await;
    let r = app.get_as(&bob, &authorize_path(&app, &document, &[])).await;
    assert_eq!(r.status(), 200);
    let html = r.text().await.unwrap();
    assert!(html.contains("VS Code") && html.contains("127.0.0.1"), "named, and vouched for by its host");
    assert_eq!(fetched.load(std::sync::atomic::Ordering::SeqCst), 1);
    let code = approved_code(&app, &bob, &document, "vs code").await;
    let (status, tokens) = exchange(&app, &document, &code, VERIFIER).await;
    assert_eq!(status, 200, "{tokens}");
    app.open_session(&access(&tokens)).await;

    // By default only public https documents are fetched (no SSRF to loopback).
    let strict = spawn_app().await;
    strict.add_user("bob", false).await;
    let bob = strict.sign_in("bob").await;
    let r = strict.get_as(&bob, &authorize_path(&strict, &document, &[])).await;
    assert_eq!(r.status(), 400);
    assert!(r.headers().get("location").is_none());
}

#[tokio::test]
async fn a_registration_flood_from_one_address_never_locks_out_a_client_from_another() {
    let app = spawn_app().await;
    app.add_user("bob", false).await;
    let body = json!({"client_name": "flood", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"});
    // One address registers until refused: a 429 with an OAuth error naming the limit.
    let mut accepted = 0;
    let refusal = loop {
        let r = app.client.post(app.url("/oauth/register")).json(&body).send().await.unwrap();
        if r.status() != 201 {
            break r;
        }
        accepted += 1;
        assert!(accepted <= 1000, "registration from one address is never refused");
    };
    assert_eq!(accepted, 20, "oauth.max_unused_registrations_per_address defaults to 20");
    assert_eq!(refusal.status(), 429);
    let wait: u64 = refusal.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=600).contains(&wait), "{wait}");
    let reply: Value = refusal.json().await.unwrap();
    assert_eq!(reply["error"], "temporarily_unavailable", "{reply}");
    let description = reply["error_description"].as_str().unwrap();
    assert!(description.contains("max_unused_registrations_per_address"), "{description}");
    // It stays refused while the flood goes on within the minute.
    for _ in 0..50 {
        let r = app.client.post(app.url("/oauth/register")).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 429);
    }

    // A client on another address registers and signs in all the way.
    let elsewhere = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let r = elsewhere
        .post(app.url("/oauth/register"))
        .json(&json!({"client_name": "Claude Code", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "a client from 127.0.0.2 is not refused");
    let client_id = r.json::<Value>().await.unwrap()["client_id"].as_str().unwrap().to_string();
    let bob = app.sign_in("bob").await;
    let code = approved_code(&app, &bob, &client_id, "bob's laptop").await;
    let resource = app.url("/mcp");
    let r = elsewhere
        .post(app.url("/oauth/token"))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", REDIRECT),
            ("client_id", client_id.as_str()),
            ("code_verifier", VERIFIER),
            ("resource", resource.as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let tokens: Value = r.json().await.unwrap();
    app.open_session(&access(&tokens)).await;

    // Unused registrations expire in minutes: then the first address may register again.
    app.clock.advance(Duration::from_secs(10 * 60 + 1));
    register_public_client(&app, "back again", REDIRECT).await;
}

/// Issue 40: an agent on the same laptop (one address) floods registration;
/// minutes on, the person's own client registers anyway, and once its
/// consent page is open no flood can take its place.
#[tokio::test]
async fn a_flood_from_a_shared_address_never_keeps_its_neighbours_client_from_signing_in() {
    let app = spawn_app().await;
    app.add_user("bob", false).await;
    let bob = app.sign_in("bob").await;
    let flood = json!({"client_name": "flood", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"});
    let register = || async { app.client.post(app.url("/oauth/register")).json(&flood).send().await.unwrap() };
    let mut accepted = 0;
    while register().await.status() == 201 {
        accepted += 1;
        assert!(accepted <= 20);
    }
    let refused = register().await;
    assert_eq!(refused.status(), 429);
    let wait: u64 = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=180).contains(&wait), "a refusal lasts a few minutes at most, not {wait} s");

    // Three minutes on, bob's client registers from the same address (an
    // unused flood registration made room) and bob opens its consent page.
    app.clock.advance(Duration::from_secs(181));
    let client_id = register_public_client(&app, "Claude Code", REDIRECT).await;
    let page =
        app.client.get(app.url(&authorize_path(&app, &client_id, &[]))).header("cookie", &bob).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("Claude Code"));

    // The flood goes on for minutes: it only ever evicts its own.
    for _ in 0..5 {
        app.clock.advance(Duration::from_secs(181));
        let mut accepted = 0;
        while register().await.status() == 201 {
            accepted += 1;
            assert!(accepted <= 20);
        }
        assert_eq!(accepted, 20, "every few minutes the flood replaces its own 20");
    }
    let code = approved_code(&app, &bob, &client_id, "bob's laptop").await;
    let (status, tokens) = exchange(&app, &client_id, &code, VERIFIER).await;
    assert_eq!(status, 200, "{tokens}");
    app.open_session(&access(&tokens)).await;
}

#[tokio::test]
async fn oauth_clients_per_user_are_bounded_with_an_error_naming_the_limit() {
    let app = spawn_app_with(|c| c.max_oauth_clients_per_user = 1).await;
    app.add_user("bob", false).await;
    let bob = app.sign_in("bob").await;
    let first = register_public_client(&app, "Claude Code", REDIRECT).await;
    let code = approved_code(&app, &bob, &first, "bob's laptop").await;
    let (status, tokens) = exchange(&app, &first, &code, VERIFIER).await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(tokens["token_type"].as_str().map(str::to_ascii_lowercase).as_deref(), Some("bearer"));
    // A second client: the consent is refused, saying which limit.
    let second = register_public_client(&app, "Another client", REDIRECT).await;
    let r = decide(&app, &bob, &second, "approve", "bob's desktop").await;
    assert_eq!(r.status(), 400);
    let text = r.text().await.unwrap();
    assert!(text.contains("max_oauth_clients_per_user"), "{text}");
    // Revoking the first client's credential (on the Agents page) makes room.
    let credential = app
        .core
        .credentials
        .list()
        .unwrap()
        .into_iter()
        .find(|c| c.agent == "bob's laptop")
        .expect("the first client's credential");
    assert!(app.core.credentials.revoke(&credential.id).unwrap());
    let code = approved_code(&app, &bob, &second, "bob's desktop").await;
    assert_eq!(exchange(&app, &second, &code, VERIFIER).await.0, 200);
}
