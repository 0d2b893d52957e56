//! Who is signed in, for the header every page carries.

use leptos::prelude::*;

/// The signed-in user's name, or `None` for nobody (a not-found page is
/// drawn for anyone; this never redirects or sets a status).
#[server(prefix = "/api/fn", endpoint = "me")]
pub async fn signed_in_as() -> Result<Option<String>, ServerFnError> {
    let parts = use_context::<http::request::Parts>().ok_or_else(|| ServerFnError::new("no request context"))?;
    Ok(parts.extensions.get::<gatehouse_core::users::User>().map(|u| u.username.clone()))
}
