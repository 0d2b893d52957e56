//! Browser sign-in (cookie sessions), first-run setup, and who may use the
//! admin API (an admin's browser session or an admin API token).

use axum::Json;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{HeaderMap, StatusCode, header, request::Parts};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use bytes::Bytes;
use gatehouse_core::users::User;
use serde::Deserialize;
use serde_json::json;
use tower_cookies::{Cookie, Cookies, cookie::SameSite};

use crate::error::{ApiError, blocking};
use crate::startup::AppState;

/// Name of the session cookie (`__Host-` prefixed under HTTPS).
pub fn cookie_name(https: bool) -> &'static str {
    if https { "__Host-gatehouse_session" } else { "gatehouse_session" }
}

fn session_cookie(state: &AppState, value: String) -> Cookie<'static> {
    let mut cookie = Cookie::new(cookie_name(state.https), value);
    cookie.set_http_only(true);
    cookie.set_same_site(SameSite::Lax);
    cookie.set_path("/");
    cookie.set_secure(state.https);
    cookie
}

/// Puts the signed-in [`User`] (if any) into the request's extensions.
pub async fn load_user(State(state): State<AppState>, cookies: Cookies, mut request: Request, next: Next) -> Response {
    if let Some(cookie) = cookies.get(cookie_name(state.https)) {
        match state.core.users.session_user(cookie.value()) {
            Ok(Some(user)) => {
                request.extensions_mut().insert(user);
            }
            Ok(None) => {}
            Err(e) => return ApiError::Internal(e.to_string()).into_response(),
        }
    }
    next.run(request).await
}

/// Sends visitors who are not signed in to the sign-in page, then back.
pub async fn require_user_for_pages(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let public = matches!(path, "/sign-in" | "/setup") || path.starts_with("/api/") || path.starts_with("/pkg/");
    if public || request.extensions().get::<User>().is_some() {
        return next.run(request).await;
    }
    let wanted = request.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let next_param: String = url::form_urlencoded::byte_serialize(wanted.as_bytes()).collect();
    Redirect::to(&format!("/sign-in?next={next_param}")).into_response()
}

/// A form post (browser without JS) or a JSON call.
fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
}

fn parse_body<T: serde::de::DeserializeOwned>(headers: &HeaderMap, body: &Bytes) -> Result<T, ApiError> {
    if is_form(headers) {
        serde_urlencoded::from_bytes(body).map_err(|e| ApiError::BadRequest(format!("invalid form: {e}")))
    } else {
        serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))
    }
}

/// Only same-site relative paths, so `next` cannot redirect elsewhere.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.starts_with("/\\") => n.to_string(),
        _ => "/".to_string(),
    }
}

fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[derive(Deserialize)]
struct SignIn {
    username: String,
    password: String,
    next: Option<String>,
}

/// `POST /api/auth/sign-in {username, password}`: sets the session cookie.
/// Form posts are redirected (to `next`, or back with an error).
pub async fn sign_in(
    State(state): State<AppState>,
    cookies: Cookies,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let form = is_form(&headers);
    let SignIn { username, password, next } = parse_body(&headers, &body)?;
    let users = state.core.users.clone();
    let name = username.clone();
    let user = blocking(move || users.verify_password(&name, &password)).await?;
    let Some(user) = user else {
        tracing::warn!(username = %username, "sign-in refused");
        return Ok(if form {
            Redirect::to(&format!("/sign-in?error=1&next={}", enc(&safe_next(next.as_deref())))).into_response()
        } else {
            (
                StatusCode::UNAUTHORIZED,
                Json(json!({"error": "invalid_credentials", "message": "that name and password did not match"})),
            )
                .into_response()
        });
    };
    let token = state.core.users.create_session(&user)?;
    cookies.add(session_cookie(&state, token));
    tracing::info!(username = %user.username, "signed in");
    Ok(if form {
        Redirect::to(&safe_next(next.as_deref())).into_response()
    } else {
        Json(json!({"username": user.username, "isAdmin": user.is_admin})).into_response()
    })
}

/// `POST /api/auth/sign-out`: ends the session.
pub async fn sign_out(
    State(state): State<AppState>,
    cookies: Cookies,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(cookie) = cookies.get(cookie_name(state.https)) {
        state.core.users.end_session(cookie.value())?;
    }
    cookies.remove(session_cookie(&state, String::new()));
    Ok(if is_form(&headers) {
        Redirect::to("/sign-in").into_response()
    } else {
        Json(json!({"signedOut": true})).into_response()
    })
}

#[derive(Deserialize)]
struct Setup {
    token: String,
    username: String,
    password: String,
}

/// `POST /api/auth/setup {token, username, password}`: the one-time link
/// creates the first admin and signs them in.
pub async fn setup(
    State(state): State<AppState>,
    cookies: Cookies,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let form = is_form(&headers);
    let Setup { token, username, password } = parse_body(&headers, &body)?;
    let users = state.core.users.clone();
    let t = token.clone();
    let result = blocking(move || users.complete_setup(&t, &username, &password)).await;
    let user = match result {
        Ok(user) => user,
        Err(ApiError::BadRequest(message)) if form => {
            tracing::warn!(%message, "setup refused");
            return Ok(Redirect::to(&format!("/setup?token={}&error={}", enc(&token), enc(&message))).into_response());
        }
        Err(e) => return Err(e),
    };
    let session = state.core.users.create_session(&user)?;
    cookies.add(session_cookie(&state, session));
    tracing::info!(username = %user.username, "first admin created");
    Ok(if form {
        Redirect::to("/").into_response()
    } else {
        (StatusCode::CREATED, Json(json!({"username": user.username, "isAdmin": true}))).into_response()
    })
}

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
            Admin::User(u) => format!("user:{}", u.username),
            Admin::ApiToken(id) => format!("api_token:{id}"),
        }
    }
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        // A bearer header, when present, is the only credential considered.
        if let Some(value) = parts.headers.get(header::AUTHORIZATION) {
            let token = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).map(str::trim);
            return match token {
                Some(t) if !t.is_empty() => match state.core.api_tokens.authenticate(t)? {
                    Some(id) => Ok(Admin::ApiToken(id)),
                    None => Err(ApiError::Unauthorized),
                },
                _ => Err(ApiError::Unauthorized),
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
