//! Dynamic client registration (RFC 7591): open to anyone, as MCP clients
//! register themselves. What a registration claims (its name above all) is
//! not verified, and the consent page says so. Registrations nobody has
//! started to use (never shown on a signed-in person's consent page) are
//! forgotten after `oauth.unused_registration_ttl` (10 minutes) and bounded
//! per client address (`oauth.max_unused_registrations_per_address`, counted
//! in the database so replicas agree): at the bound the address's oldest one
//! makes room, so a flood from a shared address (an agent on the same
//! laptop, clients behind one NAT) keeps nobody from registering; only 20
//! within three minutes are refused (429, retry within them).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gatehouse_core::Core;
use gatehouse_core::oauth::{ClientMetadata, OAuthError};
use serde::{Deserialize, Serialize};

use super::OAuthResponseError;
use crate::auth::ClientAddr;

/// The RFC 7591 §2 fields Gatehouse reads (others are ignored).
#[derive(Debug, Deserialize)]
pub struct RegistrationRequest {
    /// Where codes may be sent.
    #[serde(default)]
    pub redirect_uris: Vec<String>,
    /// The client's name, shown (as unverified) on the consent page.
    pub client_name: Option<String>,
    /// `none` (public), `client_secret_post` or `client_secret_basic` (default).
    pub token_endpoint_auth_method: Option<String>,
    /// Must include `authorization_code`; may include `refresh_token`.
    pub grant_types: Option<Vec<String>>,
    /// Only `code`.
    pub response_types: Option<Vec<String>>,
}

/// RFC 7591 §3.2.1.
#[derive(Debug, Serialize)]
pub struct RegistrationResponse {
    /// The new client's id.
    pub client_id: String,
    /// Its secret (confidential clients only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// Registration time (Unix seconds).
    pub client_id_issued_at: i64,
    /// 0: the secret does not expire.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret_expires_at: Option<i64>,
    /// As registered.
    pub client_name: String,
    /// As registered.
    pub redirect_uris: Vec<String>,
    /// As registered.
    pub token_endpoint_auth_method: &'static str,
    /// What it may use.
    pub grant_types: Vec<&'static str>,
    /// `["code"]`
    pub response_types: Vec<&'static str>,
}

/// `POST /oauth/register` with a JSON body.
pub async fn register(
    State(core): State<Core>,
    from: ClientAddr,
    body: axum::body::Bytes,
) -> Result<Response, OAuthResponseError> {
    let request: RegistrationRequest = serde_json::from_slice(&body)
        .map_err(|e| OAuthError::InvalidClientMetadata(format!("not a registration request: {e}")))?;
    let metadata = ClientMetadata::check(
        request.client_name.as_deref(),
        &request.redirect_uris,
        request.token_endpoint_auth_method.as_deref(),
        request.grant_types.as_deref(),
        request.response_types.as_deref(),
    )?;
    let from_log = from.0;
    let from = registration_key(from);
    let registered = core.run(move |core| core.oauth.register(metadata, &from)).await.map_err(OAuthError::Store)??;
    let client = registered.client;
    tracing::info!(client = %client.client_id, name = ?client.name, from = ?from_log, "OAuth client registered");
    let body = RegistrationResponse {
        client_secret_expires_at: registered.secret.as_ref().map(|_| 0),
        client_secret: registered.secret,
        client_id: client.client_id,
        client_id_issued_at: registered.issued_at_secs,
        client_name: client.name,
        redirect_uris: client.redirect_uris,
        token_endpoint_auth_method: client.auth_method.as_str(),
        grant_types: vec!["authorization_code", "refresh_token"],
        response_types: vec!["code"],
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// The key registrations are bounded under: an IPv4 address itself, an IPv6
/// address by its /48 (a site is given a whole /48: counted by /64, one
/// site could fill the global cap alone, 500 × the per-address bound).
fn registration_key(from: ClientAddr) -> String {
    from.0.map_or_else(|| "unknown".to_string(), |ip| crate::addresses::network_key(ip, 48).to_string())
}
