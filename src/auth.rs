//! Who is calling: the browser user of a session cookie ([`load_user`],
//! [`SignedIn`]), the client's address ([`ClientAddr`]), and who may use the
//! admin API ([`Admin`]: an admin's browser session or an admin API token).
//! Signing in, out and up is [`crate::api::sign_in`].

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::{header, request::Parts};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use gatehouse_core::users::User;
use tower_cookies::Cookies;

use crate::error::ApiError;
use crate::mcp::auth::bearer_token;
use crate::state::AppState;

/// Name of the session cookie (`__Host-` prefixed under HTTPS).
pub fn cookie_name(https: bool) -> &'static str {
    if https { "__Host-gatehouse_session" } else { "gatehouse_session" }
}

pub use gatehouse_core::users::BrowserSession;

/// The client's address: the connection's peer, or, when the peer is one
/// of `trusted_proxies`, the last hop of `X-Forwarded-For` that is not a
/// trusted proxy (the header of anyone else is ignored, as any client can
/// write it); `None` when served without connection info.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub Option<IpAddr>);

impl ClientAddr {
    /// The key limits count this address under: an IPv4 address itself, an
    /// IPv6 address by its /64 (one host usually holds a whole /64);
    /// `unknown` without connection info.
    pub fn key(&self) -> String {
        self.0.map_or_else(|| "unknown".to_string(), |ip| crate::throttle::address_key(ip).to_string())
    }
}

impl FromRequestParts<AppState> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
        Ok(ClientAddr(state.trusted_proxies.client(peer, &parts.headers)))
    }
}

/// Puts the signed-in [`User`] (if any) and their [`BrowserSession`] into the
/// request's extensions.
pub async fn load_user(State(state): State<AppState>, cookies: Cookies, mut request: Request, next: Next) -> Response {
    if let Some(cookie) = cookies.get(cookie_name(state.https)) {
        // Every console request passes here: the lookup runs in the stores'
        // lane, not on a worker the other connections need.
        let token = cookie.value().to_string();
        match state.mcp.core.run(move |core| core.users.session_user(&token)).await.and_then(|found| found) {
            Ok(Some(user)) => {
                request.extensions_mut().insert(user);
                request.extensions_mut().insert(BrowserSession(gatehouse_core::secret::hash(cookie.value())));
            }
            Ok(None) => {}
            Err(e) => return ApiError::from(e).into_response(),
        }
    }
    next.run(request).await
}

/// Sends visitors who are not signed in to the sign-in page, then back.
///
/// Server functions (`/api/fn/…`) need a signed-in user too, except the
/// ones in [`PUBLIC_SERVER_FNS`]: without one they answer 401 with a JSON
/// `{error, message}` (a plain form post, which accepts `text/html`, is sent
/// to the sign-in page instead), before their arguments are even decoded —
/// never the 500 a server function's own error would give.
pub async fn require_user_for_pages(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let signed_in = request.extensions().get::<User>().is_some();
    if !signed_in && path.starts_with("/api/fn/") && !PUBLIC_SERVER_FNS.contains(&path) {
        let plain_form = request
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/html"));
        if plain_form {
            return Redirect::to("/sign-in").into_response();
        }
        return ApiError::Unauthorized.into_response();
    }
    let public = matches!(path, "/sign-in" | "/setup" | "/set-password")
        || path.starts_with("/api/")
        || path.starts_with("/pkg/");
    if public || signed_in {
        return next.run(request).await;
    }
    let wanted = request.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let next_param: String = url::form_urlencoded::byte_serialize(wanted.as_bytes()).collect();
    Redirect::to(&format!("/sign-in?next={next_param}")).into_response()
}

/// Server functions anyone may call: what a one-time password link is (the
/// token in it is the key).
pub const PUBLIC_SERVER_FNS: &[&str] = &["/api/fn/password-link"];

/// Who is calling the admin API.
#[derive(Debug, Clone)]
pub enum Admin {
    /// An admin signed in through the browser.
    User(User),
    /// An orchestrator with an admin API token (its id).
    ApiToken(String),
}

impl Admin {
    /// Who to record as the actor.
    pub fn actor(&self) -> String {
        match self {
            Admin::User(u) => u.actor().to_string(),
            Admin::ApiToken(id) => gatehouse_core::model::Actor::ApiToken(id.clone()).to_string(),
        }
    }
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        // A bearer header, when present, is the only credential considered.
        if parts.headers.contains_key(header::AUTHORIZATION) {
            let Some(token) = bearer_token(&parts.headers).map(str::to_string) else {
                return Err(ApiError::Unauthorized);
            };
            return match state.mcp.core.run(move |core| core.api_tokens.authenticate(&token)).await?? {
                Some(id) => Ok(Admin::ApiToken(id)),
                None => Err(ApiError::Unauthorized),
            };
        }
        match parts.extensions.get::<User>() {
            Some(user) if user.is_admin => Ok(Admin::User(user.clone())),
            Some(_) => Err(ApiError::Forbidden("the admin API needs an admin".into())),
            None => Err(ApiError::Unauthorized),
        }
    }
}

/// A signed-in browser user (401 otherwise).
pub struct SignedIn(pub User);

impl<S: Send + Sync> FromRequestParts<S> for SignedIn {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<User>().cloned().map(SignedIn).ok_or(ApiError::Unauthorized)
    }
}
