//! The token endpoint (RFC 6749 §3.2 with PKCE, RFC 8707 resources) and
//! revocation (RFC 7009). Both take form posts, authenticate the client the
//! way it registered, and do their store work on the blocking pool.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use gatehouse_core::Core;
use gatehouse_core::oauth::{AuthMethod, Client, OAuthError, OAuthStore, SCOPE};
use oauth2::basic::{BasicTokenResponse, BasicTokenType};
use oauth2::{AccessToken, EmptyExtraTokenFields, RefreshToken, Scope};
use serde::Deserialize;

use super::OAuthResponseError;
use crate::mcp::McpState;

/// The form fields of a token request (repeating one is an error).
#[derive(Debug, Default, Deserialize)]
pub struct TokenRequest {
    grant_type: Option<String>,
    code: Option<String>,
    redirect_uri: Option<String>,
    code_verifier: Option<String>,
    refresh_token: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    resource: Option<String>,
    #[allow(dead_code)]
    scope: Option<String>,
}

/// The form fields of a revocation request.
#[derive(Debug, Default, Deserialize)]
pub struct RevokeRequest {
    token: Option<String>,
    #[allow(dead_code)]
    token_type_hint: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
}

fn parse_form<T: serde::de::DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> Result<T, OAuthError> {
    let form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !form {
        return Err(OAuthError::InvalidRequest("send application/x-www-form-urlencoded".into()));
    }
    serde_urlencoded::from_bytes(body).map_err(|e| OAuthError::InvalidRequest(format!("invalid form: {e}")))
}

fn required(value: Option<String>, name: &str) -> Result<String, OAuthError> {
    value.filter(|v| !v.is_empty()).ok_or_else(|| OAuthError::InvalidRequest(format!("{name} is missing")))
}

/// Who the client says it is, and how it proves it (RFC 6749 §2.3.1).
fn client_credentials(
    headers: &HeaderMap,
    client_id: Option<String>,
    client_secret: Option<String>,
) -> Result<(String, Option<String>, AuthMethod), OAuthError> {
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"));
    if let Some((_, encoded)) = basic {
        if client_secret.is_some() {
            return Err(OAuthError::InvalidRequest("use one way of client authentication".into()));
        }
        let bad = || OAuthError::InvalidClient("malformed Basic client authentication".into());
        let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).map_err(|_| bad())?;
        let decoded = String::from_utf8(decoded).map_err(|_| bad())?;
        let (id, secret) = decoded.split_once(':').ok_or_else(bad)?;
        let unescape = |s: &str| -> String {
            url::form_urlencoded::parse(format!("x={s}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        };
        let (id, secret) = (unescape(id), unescape(secret));
        if client_id.as_deref().is_some_and(|c| c != id) {
            return Err(OAuthError::InvalidClient("client_id differs from the authenticated client".into()));
        }
        return Ok((id, Some(secret), AuthMethod::ClientSecretBasic));
    }
    let client_id = required(client_id, "client_id")?;
    Ok(match client_secret {
        Some(secret) => (client_id, Some(secret), AuthMethod::ClientSecretPost),
        None => (client_id, None, AuthMethod::None),
    })
}

/// Runs OAuth store work in the stores' lane ([`Core::run`]).
async fn in_store<T: Send + 'static>(
    core: &Core,
    work: impl FnOnce(&OAuthStore) -> Result<T, OAuthError> + Send + 'static,
) -> Result<T, OAuthError> {
    core.run(move |core| work(&core.oauth)).await.map_err(OAuthError::Store)?
}

fn authenticate(oauth: &OAuthStore, id: &str, secret: Option<&str>, via: AuthMethod) -> Result<Client, OAuthError> {
    oauth.authenticate_client(id, secret, via)
}

/// `POST /oauth/token`: `authorization_code` (with `code_verifier`) or
/// `refresh_token`.
pub async fn token(State(state): State<McpState>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    match issue(&state, &headers, &body).await {
        Ok(response) => response,
        Err(e) => OAuthResponseError(e).into_response(),
    }
}

async fn issue(state: &McpState, headers: &HeaderMap, body: &[u8]) -> Result<Response, OAuthError> {
    let request: TokenRequest = parse_form(headers, body)?;
    let (client_id, secret, via) = client_credentials(headers, request.client_id, request.client_secret)?;
    let core = &state.core;
    let server = state.oauth.seen_by(headers);
    let tokens = match request.grant_type.as_deref() {
        Some("authorization_code") => {
            let code = required(request.code, "code")?;
            let redirect_uri = required(request.redirect_uri, "redirect_uri")?;
            let verifier = required(request.code_verifier, "code_verifier")?;
            let resource = server.resource_param(request.resource.as_deref())?;
            in_store(core, move |o| {
                let client = authenticate(o, &client_id, secret.as_deref(), via)?;
                o.exchange_code(&client, &code, &redirect_uri, &verifier, &resource)
            })
            .await?
        }
        Some("refresh_token") => {
            let refresh = required(request.refresh_token, "refresh_token")?;
            let resource = match request.resource.as_deref() {
                Some(r) => Some(server.resource_param(Some(r))?),
                None => None,
            };
            in_store(core, move |o| {
                let client = authenticate(o, &client_id, secret.as_deref(), via)?;
                o.refresh(&client, &refresh, resource.as_deref())
            })
            .await?
        }
        Some(other) => return Err(OAuthError::UnsupportedGrantType(format!("grant_type {other:?} is not supported"))),
        None => return Err(OAuthError::InvalidRequest("grant_type is missing".into())),
    };
    tracing::info!(credential = %tokens.credential_id, "OAuth tokens issued");
    let mut body = BasicTokenResponse::new(
        AccessToken::new(tokens.access_token),
        BasicTokenType::Bearer,
        EmptyExtraTokenFields {},
    );
    body.set_expires_in(Some(&tokens.expires_in));
    body.set_refresh_token(Some(RefreshToken::new(tokens.refresh_token)));
    body.set_scopes(Some(vec![Scope::new(SCOPE.to_string())]));
    let mut response = axum::Json(body).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response.headers_mut().insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    Ok(response)
}

/// `POST /oauth/revoke`: revokes the client's token and the credential it
/// stands for; 200 whether or not the token was known (RFC 7009 §2.2).
pub async fn revoke(State(core): State<Core>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let result = async {
        let request: RevokeRequest = parse_form(&headers, &body)?;
        let token = required(request.token, "token")?;
        let (client_id, secret, via) = client_credentials(&headers, request.client_id, request.client_secret)?;
        in_store(&core, move |o| {
            let client = authenticate(o, &client_id, secret.as_deref(), via)?;
            o.revoke(&client, &token)
        })
        .await
    }
    .await;
    match result {
        Ok(revoked) => {
            if revoked {
                tracing::info!("OAuth token revoked by its client");
            }
            StatusCode::OK.into_response()
        }
        Err(e) => OAuthResponseError(e).into_response(),
    }
}
