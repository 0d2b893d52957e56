//! Who is signed in and the theme they chose, for the header every page
//! carries.

use gatehouse_model::Theme;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// The viewer, as the header shows them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Viewer {
    /// Who is signed in; `None` for nobody.
    pub username: Option<String>,
    /// The theme their browser keeps.
    pub theme: Theme,
    /// Upstream tools held back for review (admins only: they decide them).
    pub held: usize,
    /// Whether they are an admin (the header lists the admins' pages).
    pub is_admin: bool,
}

/// The viewer of this request (a not-found page is drawn for anyone: this
/// never redirects or sets a status).
#[server(prefix = "/api/fn", endpoint = "me")]
pub async fn get_viewer() -> Result<Viewer, ServerFnError> {
    let parts = use_context::<http::request::Parts>().ok_or_else(|| ServerFnError::new("no request context"))?;
    let cookies = parts.headers.get(http::header::COOKIE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let user = parts.extensions.get::<gatehouse_core::users::User>();
    let held = match user {
        Some(u) if u.is_admin => super::context::tool_catalog().map(|c| c.held_tools().len()).unwrap_or(0),
        _ => 0,
    };
    Ok(Viewer {
        username: user.map(|u| u.username.clone()),
        theme: Theme::from_cookie_header(cookies),
        held,
        is_admin: user.is_some_and(|u| u.is_admin),
    })
}

/// The refused sign-in this browser was just sent back with, once: the
/// cookie is cleared as it is read (reloading the page, or coming Back to
/// it later, shows no stale refusal).
#[server(prefix = "/api/fn", endpoint = "sign-in-attempt")]
pub async fn sign_in_attempt() -> Result<Option<gatehouse_model::SignInAttempt>, ServerFnError> {
    use gatehouse_model::{SIGN_IN_ATTEMPT_COOKIE, SignInAttempt};
    let parts = use_context::<http::request::Parts>().ok_or_else(|| ServerFnError::new("no request context"))?;
    let cookies = parts.headers.get(http::header::COOKIE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let attempt = SignInAttempt::from_cookie_header(cookies);
    if gatehouse_model::cookie_value(cookies, SIGN_IN_ATTEMPT_COOKIE).is_some()
        && let Some(response) = use_context::<leptos_axum::ResponseOptions>()
    {
        let gone = format!("{SIGN_IN_ATTEMPT_COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict");
        if let Ok(value) = http::HeaderValue::from_str(&gone) {
            response.append_header(http::header::SET_COOKIE, value);
        }
    }
    Ok(attempt)
}
