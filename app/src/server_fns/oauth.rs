//! The OAuth consent page's data.

use gatehouse_model::ConsentInfo;
use leptos::prelude::*;

/// The sign-in request in `query` (the authorize URL's query string), as the
/// signed-in user would approve it.
#[server]
pub async fn load_consent(query: String) -> Result<ConsentInfo, ServerFnError> {
    use super::context as ctx;
    let (user, _) = ctx::context()?;
    let source = use_context::<std::sync::Arc<dyn ctx::OAuthConsent>>()
        .ok_or_else(|| ServerFnError::new("OAuth is not enabled"))?;
    let info = tokio::task::spawn_blocking(move || source.consent(&user, &query))
        .await
        .map_err(|e| ServerFnError::new(e.to_string()))?;
    if matches!(info, ConsentInfo::Refused(_)) {
        ctx::set_status(400);
    }
    Ok(info)
}
