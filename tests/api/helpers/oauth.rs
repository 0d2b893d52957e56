//! An OAuth client for the tests: registration and the PKCE pair.

use super::TestApp;

/// Registers a public client (RFC 7591) named `name` with one redirect URI;
/// its client_id.
pub async fn register_public_client(app: &TestApp, name: &str, redirect: &str) -> String {
    let r = app
        .client
        .post(app.url("/oauth/register"))
        .json(
            &serde_json::json!({"client_name": name, "redirect_uris": [redirect], "token_endpoint_auth_method": "none",
                      "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body.get("client_secret").is_none(), "a public client gets no secret");
    body["client_id"].as_str().unwrap().to_string()
}

/// RFC 7636 appendix B: a PKCE verifier and its S256 challenge.
pub const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
/// The S256 challenge of [`VERIFIER`].
pub const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
/// The redirect URI the tests' OAuth clients register.
pub const REDIRECT: &str = "http://127.0.0.1:5555/callback";
