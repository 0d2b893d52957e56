//! What every server function starts from (server side only): the signed-in
//! user, the stores, blocking work off the async threads, and the status an
//! error answers with.

use gatehouse_core::Status;
use gatehouse_core::approvals::AccessError;
use gatehouse_core::users::User;
use leptos::prelude::*;

/// The signed-in user and the stores, or an error. Nobody signed in (no
/// session cookie, or an expired one) answers 401 — or, for a plain form
/// post (no JavaScript: it accepts `text/html`), a redirect to the sign-in
/// page — never a 500.
pub fn context() -> Result<(User, gatehouse_core::Core), ServerFnError> {
    let parts = use_context::<http::request::Parts>().ok_or_else(|| ServerFnError::new("no request context"))?;
    let Some(user) = parts.extensions.get::<User>().cloned() else {
        if accepts_html(&parts) {
            leptos_axum::redirect("/sign-in");
        } else {
            set_status(401);
        }
        return Err(ServerFnError::new("not signed in"));
    };
    let core = use_context::<gatehouse_core::Core>().ok_or_else(|| ServerFnError::new("no core"))?;
    Ok((user, core))
}

/// Whether the browser asked for a page (a plain form, a navigation), not data.
fn accepts_html(parts: &http::request::Parts) -> bool {
    parts.headers.get(http::header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("text/html"))
}

/// Whether a browser posted a plain form (without JavaScript): it is
/// answered with a redirect, to a page.
pub fn plain_form() -> bool {
    use_context::<http::request::Parts>().is_some_and(|p| p.method == http::Method::POST && accepts_html(&p))
}

/// Sets the HTTP status of the page (or server function) response, as
/// a core error says ([`Status`]); unless a browser posted a plain form
/// (without JavaScript): that one is redirected back with the error in the
/// URL, and a status would undo the redirect (the browser would show the
/// raw error instead of the page).
pub fn set_status(code: u16) {
    if plain_form() {
        return;
    }
    if let (Some(response), Ok(code)) =
        (use_context::<leptos_axum::ResponseOptions>(), http::StatusCode::from_u16(code))
    {
        response.set_status(code);
    }
}

/// Runs database work for the signed-in user in the stores' lane; an
/// access error sets the response status as the JSON API would.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce(User, gatehouse_core::Core) -> Result<T, AccessError> + Send + 'static,
) -> Result<T, ServerFnError> {
    let (user, core) = context()?;
    match core.clone().run(move |core| work(user, core)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => {
            set_status(e.status());
            Err(ServerFnError::new(e.to_string()))
        }
        Err(e) => Err(ServerFnError::new(e.to_string())),
    }
}

/// Where the pages read the exposed tools from (the server's MCP side
/// implements it; the pages never reach into it otherwise).
pub trait ToolCatalog: Send + Sync {
    /// Every exposed tool: Gatehouse's own, then the upstreams', by name.
    fn exposed_tools(&self) -> Vec<gatehouse_model::ToolInfo>;

    /// Tells every connected agent that the lists changed (a rule changed
    /// which tools it may see).
    fn lists_changed(&self);

    /// Every upstream tool held back because its definition is not the
    /// pinned one, with both definitions, by name.
    fn held_tools(&self) -> Vec<gatehouse_model::ToolChange>;

    /// An admin's (`actor`, `user:<name>`) decision on the held-back `tool` of
    /// `upstream` whose offered definition has `digest`: accept pins it and
    /// exposes the tool, reject keeps it held back. Both are recorded in the
    /// change log. `Err((status, message))`: 404 not held back, 409 changed
    /// again since the page showed it, 500 storage.
    fn review_change(
        &self,
        upstream: &str,
        tool: &str,
        digest: &str,
        accept: bool,
        actor: &str,
    ) -> Result<(), (u16, String)>;
}

/// The tool catalogue the server provided to this request.
pub fn tool_catalog() -> Result<std::sync::Arc<dyn ToolCatalog>, ServerFnError> {
    use_context::<std::sync::Arc<dyn ToolCatalog>>().ok_or_else(|| ServerFnError::new("no tool catalogue"))
}

/// Where the OAuth consent page reads a sign-in request from (the server's
/// authorization server implements it: the same checks the authorize
/// endpoint makes).
pub trait OAuthConsent: Send + Sync {
    /// The request in `query` (the authorize URL's query string), made to
    /// `host`, as the signed-in `user` would approve it, or why it cannot be.
    fn consent(&self, user: &User, query: &str, host: Option<&str>) -> gatehouse_model::ConsentInfo;
}
