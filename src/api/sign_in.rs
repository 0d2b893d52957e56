//! Browser sign-in and sign-out (cookie sessions), first-run setup and
//! setting a password from a one-time link: `POST /api/auth/…`, as JSON or
//! as plain form posts (pages without JavaScript).

use std::net::IpAddr;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use bytes::Bytes;
use gatehouse_core::CoreError;
use gatehouse_core::changes::Change;
use gatehouse_core::model::{SIGN_IN_ATTEMPT_COOKIE, SIGN_IN_ATTEMPT_SECS, SignInAttempt, routes};
use gatehouse_core::users::User;
use serde::Deserialize;
use serde_json::json;
use tower_cookies::{Cookie, Cookies, cookie::SameSite};

use crate::auth::{ClientAddr, cookie_name};
use crate::error::ApiError;
use crate::state::AppState;
use crate::throttle::username_tag;

fn session_cookie(state: &AppState, value: String) -> Cookie<'static> {
    let mut cookie = Cookie::new(cookie_name(state.https), value);
    cookie.set_http_only(true);
    cookie.set_same_site(SameSite::Lax);
    cookie.set_path("/");
    cookie.set_secure(state.https);
    cookie
}

/// Carries a refused form sign-in back to the page, once (the page clears
/// it): the name stays in its field, and the address says nothing.
fn attempt_cookie(state: &AppState, mut attempt: SignInAttempt) -> Cookie<'static> {
    // A name longer than any real one is kept short: a cookie past the
    // browser's size bound would be dropped whole.
    attempt.username = attempt.username.chars().take(128).collect();
    let mut cookie = Cookie::new(SIGN_IN_ATTEMPT_COOKIE, attempt.to_cookie_value());
    cookie.set_http_only(true);
    cookie.set_same_site(SameSite::Strict);
    cookie.set_path("/");
    cookie.set_secure(state.https);
    cookie.set_max_age(tower_cookies::cookie::time::Duration::seconds(SIGN_IN_ATTEMPT_SECS as i64));
    cookie
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

/// Only paths on this site, so `next` cannot send the browser elsewhere.
fn safe_next(next: Option<&str>) -> String {
    next.and_then(gatehouse_app::redirect::safe_next).unwrap_or("/").to_string()
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
/// Form posts are redirected (to `next`, or back with an error). Failures
/// are limited per client address and per username (429 with `Retry-After`).
pub async fn sign_in(
    State(state): State<AppState>,
    ClientAddr(addr): ClientAddr,
    cookies: Cookies,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let form = is_form(&headers);
    let SignIn { username, password, next } = parse_body(&headers, &body)?;
    let next = safe_next(next.as_deref());
    // What was typed as the name may be a password in the wrong field: logs
    // get a short hash and the length, never the text.
    let tag = username_tag(&username);
    let attempt = match state.throttles.sign_in.begin(addr, Some(&username)) {
        Ok(attempt) => attempt,
        Err(limit) => {
            tracing::warn!(username_tag = %tag, client = ?addr, "sign-in throttled");
            return Ok(if form {
                let attempt = SignInAttempt { username, retry_after_secs: Some(limit.retry_after_secs()) };
                cookies.add(attempt_cookie(&state, attempt));
                Redirect::to(&format!("/sign-in?next={}", enc(&next))).into_response()
            } else {
                limit.into_response()
            });
        }
    };
    let Some(user) = state.mcp.core.users.sign_in(username.clone(), password).await? else {
        attempt.failed();
        tracing::warn!(username_tag = %tag, username_chars = username.chars().count(), client = ?addr, "sign-in refused");
        return Ok(if form {
            cookies.add(attempt_cookie(&state, SignInAttempt { username, retry_after_secs: None }));
            Redirect::to(&format!("/sign-in?next={}", enc(&next))).into_response()
        } else {
            (
                StatusCode::UNAUTHORIZED,
                Json(json!({"error": "invalid_credentials", "message": "that name and password did not match"})),
            )
                .into_response()
        });
    };
    attempt.succeeded();
    let token = state.mcp.core.users.create_session(&user)?;
    cookies.add(session_cookie(&state, token));
    tracing::info!(username = ?user.username, "signed in");
    Ok(if form {
        Redirect::to(&next).into_response()
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
        state.mcp.core.users.end_session(cookie.value())?;
    }
    cookies.remove(session_cookie(&state, String::new()));
    Ok(if is_form(&headers) {
        Redirect::to("/sign-in").into_response()
    } else {
        Json(json!({"signedOut": true})).into_response()
    })
}

/// A page that posts a one-time token (the setup link, an invite or reset
/// link) with a new password.
struct TokenPage<'a> {
    /// Posted as a form (refusals go back to the page) or as JSON (400).
    form: bool,
    /// The page to send a refused form back to.
    page: &'static str,
    token: &'a str,
    addr: Option<IpAddr>,
    /// The log line of a refusal.
    what: &'static str,
}

impl TokenPage<'_> {
    /// Back to the page with the error (a form), or a 400 (JSON).
    fn refuse(&self, message: String) -> Result<Response, ApiError> {
        tracing::warn!(%message, client = ?self.addr, "{}", self.what);
        if self.form {
            let (page, token, error) = (self.page, enc(self.token), enc(&message));
            Ok(Redirect::to(&format!("{page}?token={token}&error={error}")).into_response())
        } else {
            Err(ApiError::BadRequest(message))
        }
    }
}

/// Redeems a one-time token: counted against the sign-in lockout of the
/// client's address, `check`ed before any password is hashed (a wrong token
/// is a failed attempt), then `finish`ed. `Ok(Err(response))` is the refusal
/// to send.
async fn redeem_token<Fut>(
    state: &AppState,
    page: &TokenPage<'_>,
    check: impl FnOnce() -> Result<Result<(), String>, CoreError>,
    finish: impl FnOnce() -> Fut,
) -> Result<Result<User, Response>, ApiError>
where
    Fut: std::future::Future<Output = Result<User, CoreError>>,
{
    let attempt = match state.throttles.sign_in.begin(page.addr, None) {
        Ok(attempt) => attempt,
        Err(limit) if page.form => return page.refuse(limit.to_string()).map(Err),
        Err(limit) => return Ok(Err(limit.into_response())),
    };
    if let Err(refusal) = check()? {
        attempt.failed();
        return page.refuse(refusal).map(Err);
    }
    match finish().await {
        Ok(user) => {
            attempt.succeeded();
            Ok(Ok(user))
        }
        Err(e @ CoreError::Invalid { field: "token", .. }) => {
            attempt.failed();
            page.refuse(e.to_string()).map(Err)
        }
        Err(e @ CoreError::Invalid { .. }) => page.refuse(e.to_string()).map(Err),
        Err(e) => Err(e.into()),
    }
}

#[derive(Deserialize)]
struct Setup {
    token: String,
    username: String,
    password: String,
}

/// `POST /api/auth/setup {token, username, password}`: the one-time link
/// creates the first admin and signs them in. The token is checked before
/// any password is hashed, and wrong tokens count as failed attempts from the
/// client's address.
pub async fn setup(
    State(state): State<AppState>,
    ClientAddr(addr): ClientAddr,
    cookies: Cookies,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let form = is_form(&headers);
    let Setup { token, username, password } = parse_body(&headers, &body)?;
    let page = TokenPage { form, page: "/setup", token: &token, addr, what: "setup refused" };
    let users = &state.mcp.core.users;
    let redeemed = redeem_token(
        &state,
        &page,
        || Ok(users.setup_token(&token)?.check().map_err(|r| r.to_string())),
        || users.finish_setup(token.clone(), username, password),
    )
    .await?;
    let user = match redeemed {
        Ok(user) => user,
        Err(refused) => return Ok(refused),
    };
    let session = state.mcp.core.users.create_session(&user)?;
    cookies.add(session_cookie(&state, session));
    tracing::info!(username = ?user.username, "first admin created");
    Ok(if form {
        Redirect::to("/").into_response()
    } else {
        (StatusCode::CREATED, Json(json!({"username": user.username, "isAdmin": true}))).into_response()
    })
}

#[derive(Deserialize)]
struct SetPassword {
    token: String,
    password: String,
}

/// `POST /api/auth/set-password {token, password}`: a one-time invite or
/// reset link sets the user's password, ends their other sessions and signs
/// them in. Like setup, the link is checked before any password is hashed
/// and wrong links count as failed attempts from the client's address.
pub async fn set_password(
    State(state): State<AppState>,
    ClientAddr(addr): ClientAddr,
    cookies: Cookies,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let form = is_form(&headers);
    let SetPassword { token, password } = parse_body(&headers, &body)?;
    let page = TokenPage { form, page: routes::SET_PASSWORD, token: &token, addr, what: "password link refused" };
    let users = &state.mcp.core.users;
    let redeemed = redeem_token(
        &state,
        &page,
        || Ok(users.password_link(&token)?.check().map_err(|r| r.to_string())),
        || users.set_password_with_link(token.clone(), password),
    )
    .await?;
    let user = match redeemed {
        Ok(user) => user,
        Err(refused) => return Ok(refused),
    };
    state.mcp.core.changes.record(Change {
        actor: &user.actor().to_string(),
        subject: "user",
        target: &user.username,
        action: "password",
        detail: Some("set with a one-time link"),
    })?;
    let session = state.mcp.core.users.create_session(&user)?;
    cookies.add(session_cookie(&state, session));
    tracing::info!(username = ?user.username, "password set with a one-time link");
    Ok(if form {
        Redirect::to(routes::HOME).into_response()
    } else {
        Json(json!({"username": user.username, "isAdmin": user.is_admin})).into_response()
    })
}
