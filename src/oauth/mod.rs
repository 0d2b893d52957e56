//! Gatehouse as the OAuth 2.1 authorization server of MCP clients (the MCP
//! authorization spec, 2025-11-25): discovery (RFC 9728, RFC 8414), client
//! registration (RFC 7591, and Client ID Metadata Documents), the consent
//! page, the token endpoint (authorization code with PKCE S256, rotating
//! refresh tokens, RFC 8707 resource binding) and revocation (RFC 7009).
//! The protocol state lives in [`gatehouse_core::oauth`]; this is the HTTP.

pub mod authorize;
pub mod client_metadata;
pub mod discovery;
pub mod register;
pub mod server;
pub mod token;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use gatehouse_core::oauth::OAuthError;
use gatehouse_core::users::User;
use oauth2::StandardErrorResponse;
use oauth2::basic::BasicErrorResponseType;
use tower_http::cors::{Any, CorsLayer};

use crate::state::AppState;

pub use server::{OAuthServer, paths};

/// The authorization server's routes (none when `[oauth] enabled = false`);
/// `render` draws the consent page.
pub fn router(enabled: bool, render: authorize::Render) -> Router<AppState> {
    if !enabled {
        return Router::new();
    }
    // Discovery, registration, tokens and revocation answer browser-based
    // clients too (no cookies are read or set there).
    let cors = CorsLayer::new().allow_origin(Any).allow_methods([Method::GET, Method::POST]).allow_headers([
        header::CONTENT_TYPE,
        header::AUTHORIZATION,
        header::HeaderName::from_static("mcp-protocol-version"),
    ]);
    let open = Router::new()
        .route(paths::RESOURCE_METADATA_MCP, get(discovery::resource_metadata))
        .route(paths::RESOURCE_METADATA, get(discovery::resource_metadata))
        .route(paths::SERVER_METADATA, get(discovery::server_metadata))
        .route(paths::TOKEN, post(token::token))
        .route(paths::REGISTER, post(register::register))
        .route(paths::REVOKE, post(token::revoke))
        .layer(cors);
    let decide_render = render.clone();
    let start = move |State(state): State<AppState>, user: Option<Extension<User>>, request: Request| {
        let render = render.clone();
        async move { authorize::start(state, render, user, request).await }
    };
    // The decision draws the consent page again when it is refused.
    let decide = move |State(state): State<AppState>, user: Option<Extension<User>>, request: Request| {
        let render = decide_render.clone();
        async move { authorize::decide(state, render, user, request).await }
    };
    Router::new().merge(open).route(paths::AUTHORIZE, get(start).post(decide))
}

/// An OAuth error as the RFCs answer it: a JSON `{error, error_description}`
/// body (built with the `oauth2` crate's types), 400 — or 401 with a
/// challenge for client authentication, 429 with `Retry-After` when an
/// address registered too many clients, 503 when busy, 500 for our faults.
#[derive(Debug)]
pub struct OAuthResponseError(pub OAuthError);

impl From<OAuthError> for OAuthResponseError {
    fn from(e: OAuthError) -> Self {
        Self(e)
    }
}

impl IntoResponse for OAuthResponseError {
    fn into_response(self) -> Response {
        let e = self.0;
        let status = match &e {
            OAuthError::InvalidClient(_) => StatusCode::UNAUTHORIZED,
            OAuthError::TemporarilyUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            OAuthError::TooManyRegistrations { .. } => StatusCode::TOO_MANY_REQUESTS,
            OAuthError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        };
        let description = match &e {
            OAuthError::Store(inner) => {
                tracing::error!(error = %inner, "OAuth request failed in the store");
                "internal error".to_string()
            }
            other => {
                tracing::warn!(error = other.code(), message = %other, "OAuth request refused");
                other.to_string()
            }
        };
        let retry_after = match &e {
            OAuthError::TooManyRegistrations { retry_after_secs, .. } => Some(*retry_after_secs),
            _ => None,
        };
        let kind = match e.code() {
            "invalid_client" => BasicErrorResponseType::InvalidClient,
            "invalid_grant" => BasicErrorResponseType::InvalidGrant,
            "invalid_request" => BasicErrorResponseType::InvalidRequest,
            "unsupported_grant_type" => BasicErrorResponseType::UnsupportedGrantType,
            other => BasicErrorResponseType::Extension(other.to_string()),
        };
        let body = StandardErrorResponse::new(kind, Some(description), None);
        let mut response = (status, axum::Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(r#"Basic realm="gatehouse""#));
        }
        if let Some(secs) = retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
