//! Discovery: the protected resource's metadata (RFC 9728), which names this
//! Gatehouse as its own authorization server, and the authorization server's
//! metadata (RFC 8414). Both are public.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use gatehouse_core::oauth::SCOPE;
use serde::Serialize;

use super::paths;
use super::server::OAuthServer;

/// RFC 9728 §2.
#[derive(Debug, Serialize)]
pub struct ResourceMetadata {
    /// `<base>/mcp`
    pub resource: String,
    /// This Gatehouse.
    pub authorization_servers: Vec<String>,
    /// `["mcp"]`
    pub scopes_supported: Vec<&'static str>,
    /// Tokens go in the `Authorization` header only.
    pub bearer_methods_supported: Vec<&'static str>,
    /// For people reading it.
    pub resource_name: &'static str,
}

/// RFC 8414 §2 (and the Client ID Metadata Document flag).
#[derive(Debug, Serialize)]
pub struct ServerMetadata {
    /// The issuer identifier.
    pub issuer: String,
    /// The consent page.
    pub authorization_endpoint: String,
    /// Codes and refresh tokens for tokens.
    pub token_endpoint: String,
    /// RFC 7591 registration.
    pub registration_endpoint: String,
    /// RFC 7009 revocation.
    pub revocation_endpoint: String,
    /// `["mcp"]`
    pub scopes_supported: Vec<&'static str>,
    /// `["code"]`
    pub response_types_supported: Vec<&'static str>,
    /// `["query"]`
    pub response_modes_supported: Vec<&'static str>,
    /// Codes and refresh tokens.
    pub grant_types_supported: Vec<&'static str>,
    /// How clients authenticate at the token endpoint.
    pub token_endpoint_auth_methods_supported: Vec<&'static str>,
    /// The same at the revocation endpoint.
    pub revocation_endpoint_auth_methods_supported: Vec<&'static str>,
    /// `["S256"]` only.
    pub code_challenge_methods_supported: Vec<&'static str>,
    /// `client_id` may be the URL of the client's metadata document.
    pub client_id_metadata_document_supported: bool,
    /// Redirects carry `iss` (RFC 9207).
    pub authorization_response_iss_parameter_supported: bool,
}

const AUTH_METHODS: [&str; 3] = ["none", "client_secret_post", "client_secret_basic"];

fn public_json(body: impl Serialize) -> Response {
    let mut response = Json(body).into_response();
    // Public and the same for everyone: caches and browsers may keep it.
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300"));
    response
}

/// `GET /.well-known/oauth-protected-resource[/mcp]`
pub async fn resource_metadata(State(oauth): State<OAuthServer>, headers: HeaderMap) -> Response {
    let server = &oauth.seen_by(&headers);
    public_json(ResourceMetadata {
        resource: server.resource.clone(),
        authorization_servers: vec![server.issuer.clone()],
        scopes_supported: vec![SCOPE],
        bearer_methods_supported: vec!["header"],
        resource_name: "Gatehouse MCP gateway",
    })
}

/// `GET /.well-known/oauth-authorization-server`
pub async fn server_metadata(State(oauth): State<OAuthServer>, headers: HeaderMap) -> Response {
    let server = &oauth.seen_by(&headers);
    public_json(ServerMetadata {
        issuer: server.issuer.clone(),
        authorization_endpoint: server.url(paths::AUTHORIZE),
        token_endpoint: server.url(paths::TOKEN),
        registration_endpoint: server.url(paths::REGISTER),
        revocation_endpoint: server.url(paths::REVOKE),
        scopes_supported: vec![SCOPE],
        response_types_supported: vec!["code"],
        response_modes_supported: vec!["query"],
        grant_types_supported: vec!["authorization_code", "refresh_token"],
        token_endpoint_auth_methods_supported: AUTH_METHODS.to_vec(),
        revocation_endpoint_auth_methods_supported: AUTH_METHODS.to_vec(),
        code_challenge_methods_supported: vec!["S256"],
        client_id_metadata_document_supported: true,
        authorization_response_iss_parameter_supported: true,
    })
}
