//! OAuth 2.1 sign-in of MCP clients, with Gatehouse as the authorization
//! server: discovery from a 401, registration, the consent page, codes with
//! PKCE, resource binding, rotating refresh tokens, revocation, liveness —
//! and the refusals the RFCs name, with their error codes.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

/// A gated built-in tool (a person decides every call).
const GATED: &str = "gatehouse_policy_set";

/// A valid authorization request of `client_id`, with `extra` pairs
/// replacing its fields (an empty value drops the field).
fn request_pairs(app: &TestApp, client_id: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = [
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", REDIRECT),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
        ("state", "xyz"),
        ("resource", &app.url("/mcp")),
        ("scope", "mcp"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in extra {
        pairs.retain(|(key, _)| key != k);
        if !v.is_empty() {
            pairs.push((k.to_string(), v.to_string()));
        }
    }
    pairs
}

/// The authorize URL's path and query for `client_id`, with `extra` pairs replacing defaults.
pub(crate) fn authorize_path(app: &TestApp, client_id: &str, extra: &[(&str, &str)]) -> String {
    format!("/oauth/authorize?{}", serde_urlencoded::to_string(request_pairs(app, client_id, extra)).unwrap())
}

/// The consent form posted as `cookie` from this site; the response.
pub(crate) async fn decide(
    app: &TestApp,
    cookie: &str,
    client_id: &str,
    decision: &str,
    agent: &str,
) -> reqwest::Response {
    let form = request_pairs(app, client_id, &[("decision", decision), ("agent", agent)]);
    app.same_origin(Method::POST, "/oauth/authorize").header("cookie", cookie).form(&form).send().await.unwrap()
}

/// The query parameters of a redirect's `Location`.
fn location_params(r: &reqwest::Response) -> (String, Vec<(String, String)>) {
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let url = url::Url::parse(&location).unwrap();
    let params = url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    (location, params)
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// `POST /oauth/token` with `form`; (status, JSON body).
async fn token(app: &TestApp, form: &[(&str, &str)]) -> (u16, Value) {
    let r = app.client.post(app.url("/oauth/token")).form(form).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// Approves `client_id` as `cookie` (agent `agent`); the one-time code.
pub(crate) async fn approved_code(app: &TestApp, cookie: &str, client_id: &str, agent: &str) -> String {
    let r = decide(app, cookie, client_id, "approve", agent).await;
    assert_eq!(r.status(), 303);
    let (location, params) = location_params(&r);
    assert!(location.starts_with(REDIRECT), "{location}");
    assert_eq!(param(&params, "state"), Some("xyz"));
    assert_eq!(param(&params, "iss"), Some(app.address.as_str()));
    param(&params, "code").expect("a code").to_string()
}

pub(crate) async fn exchange(app: &TestApp, client_id: &str, code: &str, verifier: &str) -> (u16, Value) {
    let resource = app.url("/mcp");
    token(
        app,
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", REDIRECT),
            ("client_id", client_id),
            ("code_verifier", verifier),
            ("resource", &resource),
        ],
    )
    .await
}

async fn refresh(app: &TestApp, client_id: &str, refresh_token: &str) -> (u16, Value) {
    token(app, &[("grant_type", "refresh_token"), ("refresh_token", refresh_token), ("client_id", client_id)]).await
}

/// A user `bob`, signed in, whose client "Claude Code" is signed in as agent
/// "bob's laptop": (app, bob's cookie, client_id, token response).
async fn signed_in_client() -> (TestApp, String, String, Value) {
    let app = spawn_app().await;
    app.add_user("bob", false).await;
    let bob = app.sign_in("bob").await;
    let client_id = register_public_client(&app, "Claude Code", REDIRECT).await;
    let code = approved_code(&app, &bob, &client_id, "bob's laptop").await;
    let (status, tokens) = exchange(&app, &client_id, &code, VERIFIER).await;
    assert_eq!(status, 200, "{tokens}");
    (app, bob, client_id, tokens)
}

pub(crate) fn access(tokens: &Value) -> String {
    tokens["access_token"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn discovery_leads_from_a_401_to_this_gatehouse() {
    let app = spawn_app().await;
    let r = app.mcp_at("/mcp").json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_string();
    let metadata_url = app.url("/.well-known/oauth-protected-resource/mcp");
    assert!(challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")), "{challenge}");

    let resource: Value = app.client.get(&metadata_url).send().await.unwrap().json().await.unwrap();
    assert_eq!(resource["resource"], app.url("/mcp"));
    assert_eq!(resource["authorization_servers"], json!([app.address]));
    let root: Value =
        app.client.get(app.url("/.well-known/oauth-protected-resource")).send().await.unwrap().json().await.unwrap();
    assert_eq!(root, resource);
    // Without a public_url, a client that says localhost is answered for localhost.
    let port = app.address.rsplit(':').next().unwrap();
    let local: Value = app
        .client
        .get(&metadata_url)
        .header("host", format!("localhost:{port}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(local["resource"], format!("http://localhost:{port}/mcp"));
    assert_eq!(local["authorization_servers"], json!([format!("http://localhost:{port}")]));

    let server: Value =
        app.client.get(app.url("/.well-known/oauth-authorization-server")).send().await.unwrap().json().await.unwrap();
    assert_eq!(server["issuer"], app.address);
    assert_eq!(server["authorization_endpoint"], app.url("/oauth/authorize"));
    assert_eq!(server["token_endpoint"], app.url("/oauth/token"));
    assert_eq!(server["registration_endpoint"], app.url("/oauth/register"));
    assert_eq!(server["revocation_endpoint"], app.url("/oauth/revoke"));
    assert_eq!(server["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(server["client_id_metadata_document_supported"], true);

    // Turned off: no discovery, and the 401 does not point at any.
    let off = spawn_app_with(|c| c.oauth.enabled = false).await;
    let r = off.mcp_at("/mcp").json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert!(!r.headers()["www-authenticate"].to_str().unwrap().contains("resource_metadata"));
    let r = off.client.get(off.url("/.well-known/oauth-authorization-server")).send().await.unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn a_person_signs_a_client_in_as_their_own_agent() {
    let app = spawn_app().await;
    app.add_user("bob", false).await;
    let client_id = register_public_client(&app, "Claude Code", REDIRECT).await;
    let path = authorize_path(&app, &client_id, &[]);

    // Signed out: to the sign-in page, which comes back here.
    let r = app.client.get(app.url(&path)).send().await.unwrap();
    assert_eq!(r.status(), 303);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let next: String = url::form_urlencoded::byte_serialize(path.as_bytes()).collect();
    assert_eq!(location, format!("/sign-in?next={next}"));

    // Signed in: the consent page, framed by nobody, posting only here and to the client.
    let bob = app.sign_in("bob").await;
    let r = app.get_as(&bob, &path).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    let csp = r.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(csp.ends_with("form-action 'self' http://127.0.0.1:5555"), "{csp}");
    let html = r.text().await.unwrap();
    for shown in ["Claude Code", REDIRECT, "bob", "name=\"agent\"", "Allow", "Deny", "the name is the client"] {
        assert!(html.contains(shown), "the page shows {shown:?}");
    }

    // Allow, under another agent name.
    let code = approved_code(&app, &bob, &client_id, "bob's laptop").await;
    let (status, tokens) = exchange(&app, &client_id, &code, VERIFIER).await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(tokens["token_type"].as_str().unwrap().to_ascii_lowercase(), "bearer");
    assert_eq!(tokens["expires_in"], 900);
    assert_eq!(tokens["scope"], "mcp");
    assert!(tokens["refresh_token"].as_str().unwrap().starts_with("grt_"));

    // The token opens a session; a gated call pauses, owned by bob, as "bob's laptop".
    let token = access(&tokens);
    let sid = app.open_session(&token).await;
    let reply = app.tool_call(&token, &sid, GATED, json!({"pattern": "x__*", "action": "allow"})).await;
    let eid = execution_id(&reply);
    let credentials: Value = {
        let ada_cookie = {
            app.add_user("ada", true).await;
            app.sign_in("ada").await
        };
        let r = app.get_as(&ada_cookie, &format!("/api/executions/{eid}")).await;
        let execution: Value = r.json().await.unwrap();
        assert_eq!(execution["agent"], "bob's laptop", "{execution}");
        assert_eq!(execution["owner"], "bob", "{execution}");
        app.get_as(&ada_cookie, "/api/credentials").await.json().await.unwrap()
    };
    let listed = credentials.as_array().unwrap().iter().find(|c| c["agent"] == "bob's laptop").unwrap().clone();
    assert_eq!(listed["owner"], "bob");
    assert_eq!(listed["issued_via"], "oauth");
    assert_eq!(listed["oauth_client"], "Claude Code");
    // The Agents page says how it was issued.
    let page = app.get_as(&bob, "/agents").await.text().await.unwrap();
    assert!(page.contains("OAuth sign-in") && page.contains("Claude Code"), "the agents page shows the OAuth client");
}

#[tokio::test]
async fn deny_sends_access_denied_back_and_makes_nothing() {
    let app = spawn_app().await;
    app.add_user("bob", false).await;
    let bob = app.sign_in("bob").await;
    let client_id = register_public_client(&app, "Cursor", REDIRECT).await;
    let r = decide(&app, &bob, &client_id, "deny", "x").await;
    assert_eq!(r.status(), 303);
    let (location, params) = location_params(&r);
    assert!(location.starts_with(REDIRECT));
    assert_eq!(param(&params, "error"), Some("access_denied"));
    assert_eq!(param(&params, "state"), Some("xyz"));
    assert!(param(&params, "code").is_none());
    assert!(app.core.credentials.list().unwrap().is_empty());
}

#[tokio::test]
async fn the_rfcs_refusals_come_with_their_error_codes() {
    let (app, bob, client_id, tokens) = signed_in_client().await;

    // A wrong PKCE verifier, then the right one, then the code again.
    let code = approved_code(&app, &bob, &client_id, "second").await;
    let wrong = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXj";
    let (status, body) = exchange(&app, &client_id, &code, wrong).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")), "{body}");
    let (status, second) = exchange(&app, &client_id, &code, VERIFIER).await;
    assert_eq!(status, 200);
    let (status, body) = exchange(&app, &client_id, &code, VERIFIER).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")), "reused code: {body}");
    // ...which also revokes what the code made.
    let r = app.mcp(&access(&second)).json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_eq!(r.status(), 401);

    // An unregistered redirect URI: an error page, never a redirect.
    for redirect in ["https://evil.example/cb", "http://127.0.0.1:5555/elsewhere"] {
        let r = app.get_as(&bob, &authorize_path(&app, &client_id, &[("redirect_uri", redirect)])).await;
        assert_eq!(r.status(), 400, "{redirect}");
        assert!(r.headers().get("location").is_none());
        assert!(r.text().await.unwrap().contains("is not a redirect URI this client registered"));
    }
    // Unknown client: the same, saying why, signed in or not.
    let r = app.get_as(&bob, &authorize_path(&app, "client_nope", &[])).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("This client is not registered here"));
    let r = app.client.get(app.url(&authorize_path(&app, "client_nope", &[]))).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.headers().get("location").is_none());
    assert!(r.text().await.unwrap().contains("This client is not registered here"), "the reason, even signed out");

    // Errors the client may hear go back to it.
    for (extra, error) in [
        (("resource", "https://other.example/mcp"), "invalid_target"),
        (("code_challenge", ""), "invalid_request"),
        (("code_challenge_method", "plain"), "invalid_request"),
        (("response_type", "token"), "unsupported_response_type"),
    ] {
        let r = app.get_as(&bob, &authorize_path(&app, &client_id, &[extra])).await;
        assert_eq!(r.status(), 303, "{extra:?}");
        let (_, params) = location_params(&r);
        assert_eq!(param(&params, "error"), Some(error), "{extra:?}");
        assert_eq!(param(&params, "state"), Some("xyz"));
    }

    // A token for another resource is refused at the token endpoint.
    let code = approved_code(&app, &bob, &client_id, "third").await;
    let (status, body) = token(
        &app,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", REDIRECT),
            ("client_id", &client_id),
            ("code_verifier", VERIFIER),
            ("resource", "https://other.example/mcp"),
        ],
    )
    .await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_target")), "{body}");

    // Unknown grant types and clients.
    let (status, body) = token(&app, &[("grant_type", "password"), ("client_id", &client_id)]).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("unsupported_grant_type")));
    let (status, body) = refresh(&app, "client_nope", tokens["refresh_token"].as_str().unwrap()).await;
    assert_eq!((status, body["error"].as_str()), (401, Some("invalid_client")));

    // Revoked on the Agents page: the refresh token is dead too.
    let credential = app.core.credentials.list().unwrap().into_iter().find(|c| c.agent == "bob's laptop").unwrap();
    assert!(app.core.credentials.revoke(&credential.id).unwrap());
    let (status, body) = refresh(&app, &client_id, tokens["refresh_token"].as_str().unwrap()).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")), "refresh after revoke: {body}");
    let r = app.mcp(&access(&tokens)).json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn refresh_tokens_rotate_and_credentials_lapse_like_any_other() {
    let (app, _bob, client_id, tokens) = signed_in_client().await;
    // Refresh: a new pair; the old refresh token is used up.
    let (status, second) = refresh(&app, &client_id, tokens["refresh_token"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{second}");
    assert_ne!(second["refresh_token"], tokens["refresh_token"]);
    app.open_session(&access(&second)).await;

    // Access tokens live 15 minutes; traffic within the hour keeps the credential.
    app.clock.advance(Duration::from_secs(16 * 60));
    let r = app.mcp(&access(&second)).json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers()["www-authenticate"].to_str().unwrap().contains("invalid_token"));
    let (status, third) = refresh(&app, &client_id, second["refresh_token"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{third}");
    app.open_session(&access(&third)).await;

    // The stolen first refresh token comes back: the agent is cut off.
    let (status, body) = refresh(&app, &client_id, tokens["refresh_token"].as_str().unwrap()).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")));
    let r = app.mcp(&access(&third)).json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_eq!(r.status(), 401, "a reused refresh token revokes the credential");

    // A fresh sign-in, then an hour (the liveness window here) of silence.
    let (app, _bob, client_id, tokens) = signed_in_client().await;
    app.clock.advance(Duration::from_secs(3601));
    let (status, body) = refresh(&app, &client_id, tokens["refresh_token"].as_str().unwrap()).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")), "a lapsed agent signs in again");
    let listed = app.core.credentials.list().unwrap();
    assert_eq!(listed[0].status.as_str(), "expired");
}

#[tokio::test]
async fn revocation_by_the_client_ends_its_tokens() {
    let (app, _bob, client_id, tokens) = signed_in_client().await;
    // Unknown tokens: 200 all the same (RFC 7009 §2.2).
    let r = app
        .client
        .post(app.url("/oauth/revoke"))
        .form(&[("token", "grt_nothing"), ("client_id", client_id.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = app
        .client
        .post(app.url("/oauth/revoke"))
        .form(&[("token", tokens["refresh_token"].as_str().unwrap()), ("client_id", client_id.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = app.mcp(&access(&tokens)).json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let (status, body) = refresh(&app, &client_id, tokens["refresh_token"].as_str().unwrap()).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("invalid_grant")));
}

#[tokio::test]
async fn consent_cannot_be_given_from_another_site_or_by_nobody() {
    let app = spawn_app().await;
    app.add_user("bob", false).await;
    let bob = app.sign_in("bob").await;
    let client_id = register_public_client(&app, "Claude Code", REDIRECT).await;
    let form = request_pairs(&app, &client_id, &[("decision", "approve"), ("agent", "x")]);
    // A page on another site posting the form with bob's cookie.
    let r = app
        .client
        .post(app.url("/oauth/authorize"))
        .header("origin", "https://evil.example")
        .header("cookie", &bob)
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // Nobody signed in: to the sign-in page, no code.
    let r = app.same_origin(Method::POST, "/oauth/authorize").form(&form).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert!(r.headers()["location"].to_str().unwrap().starts_with("/sign-in?next="));
    assert!(app.core.credentials.list().unwrap().is_empty());
    // A tampered redirect in the form: refused, nowhere to go.
    let tampered = request_pairs(
        &app,
        &client_id,
        &[("decision", "approve"), ("agent", "x"), ("redirect_uri", "https://evil.example/cb")],
    );
    let r =
        app.same_origin(Method::POST, "/oauth/authorize").header("cookie", &bob).form(&tampered).send().await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.headers().get("location").is_none());
    // An agent name the credential store would refuse (150 characters, 300 bytes) is refused here.
    let long = "é".repeat(150);
    let r = decide(&app, &bob, &client_id, "approve", &long).await;
    assert_eq!(r.status(), 400);
    assert!(r.headers().get("location").is_none());
}

#[tokio::test]
async fn registration_is_checked_and_open_to_clients_anywhere() {
    let app = spawn_app().await;
    for (body, error) in [
        (json!({"redirect_uris": ["http://evil.example/cb"]}), "invalid_redirect_uri"),
        (json!({"redirect_uris": []}), "invalid_redirect_uri"),
        (json!({"redirect_uris": [REDIRECT], "grant_types": ["implicit"]}), "invalid_client_metadata"),
        (
            json!({"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "private_key_jwt"}),
            "invalid_client_metadata",
        ),
        (json!("not an object"), "invalid_client_metadata"),
    ] {
        let r = app.client.post(app.url("/oauth/register")).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let reply: Value = r.json().await.unwrap();
        assert_eq!(reply["error"], error, "{body}");
    }
    // A confidential client (the RFC 7591 default) gets a secret and must use it.
    let r = app
        .client
        .post(app.url("/oauth/register"))
        .header("origin", "https://inspector.example")
        .json(&json!({"client_name": "web", "redirect_uris": ["https://app.example/cb"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "registration is open to browser-based clients");
    assert_eq!(r.headers()["access-control-allow-origin"], "*");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["token_endpoint_auth_method"], "client_secret_basic");
    let client_id = body["client_id"].as_str().unwrap();
    let r = app
        .client
        .post(app.url("/oauth/token"))
        .basic_auth(client_id, Some("wrong"))
        .form(&[("grant_type", "refresh_token"), ("refresh_token", "grt_x")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "invalid_client");
    let r = app
        .client
        .post(app.url("/oauth/token"))
        .basic_auth(client_id, body["client_secret"].as_str())
        .form(&[("grant_type", "refresh_token"), ("refresh_token", "grt_x")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "invalid_grant", "authenticated, but no such token");
}
