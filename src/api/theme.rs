//! `POST /api/theme`: the header's System / Light / Dark, remembered in a
//! cookie for a year, then back to the page it was chosen on. A plain form
//! post, so it works before (and without) the page's script.

use axum::Form;
use axum::response::{IntoResponse, Redirect, Response};
use gatehouse_core::model::{THEME_COOKIE, Theme};
use serde::Deserialize;
use tower_cookies::{Cookie, Cookies, cookie::SameSite};

use crate::error::ApiError;

/// The form.
#[derive(Deserialize)]
pub struct ThemeForm {
    theme: String,
    next: Option<String>,
}

/// Sets the theme cookie (System expires it) and goes back to `next` (a path
/// on this site only).
pub async fn set(cookies: Cookies, Form(form): Form<ThemeForm>) -> Response {
    let Some(theme) = Theme::parse(&form.theme) else {
        return ApiError::BadRequest(format!("{:?} is not a theme: system, light or dark", form.theme)).into_response();
    };
    let mut cookie = Cookie::new(THEME_COOKIE, theme.as_str().to_string());
    cookie.set_path("/");
    cookie.set_same_site(SameSite::Lax);
    // System forgets the choice: the cookie expires at once.
    let days = if theme == Theme::System { 0 } else { 365 };
    cookie.set_max_age(tower_cookies::cookie::time::Duration::days(days));
    cookies.add(cookie);
    let next = form.next.as_deref().and_then(gatehouse_app::redirect::safe_next).unwrap_or("/");
    Redirect::to(next).into_response()
}
