//! The OAuth consent page's data.

use gatehouse_model::ConsentInfo;
use leptos::prelude::*;

/// The sign-in request in `query` (the authorize URL's query string), as the
/// signed-in user would approve it.
#[server]
pub async fn load_consent(query: String) -> Result<ConsentInfo, ServerFnError> {
    use super::context as ctx;
    // A request the authorization endpoint already refused: its reason, to
    // anyone (signed in or not), so the page can say what went wrong.
    let parts = use_context::<http::request::Parts>();
    if let Some(refused) = parts.as_ref().and_then(|p| p.extensions.get::<ConsentInfo>()) {
        ctx::set_status(400);
        return Ok(refused.clone());
    }
    let (user, core) = ctx::context()?;
    let host = use_context::<http::request::Parts>()
        .and_then(|p| p.headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).map(str::to_string));
    let source = use_context::<std::sync::Arc<dyn ctx::OAuthConsent>>()
        .ok_or_else(|| ServerFnError::new("OAuth is not enabled"))?;
    let info = core
        .run(move |_| source.consent(&user, &query, host.as_deref()))
        .await
        .map_err(|e| ServerFnError::new(e.to_string()))?;
    if matches!(info, ConsentInfo::Refused(_)) {
        ctx::set_status(400);
    }
    Ok(info)
}
