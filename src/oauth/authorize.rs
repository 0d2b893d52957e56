//! The authorization endpoint (RFC 6749 §4.1.1 with PKCE): `GET` checks the
//! request and shows the consent page (after sign-in), `POST` carries the
//! person's decision back to the client.
//!
//! Until the client and its redirect URI are known to match, nothing is
//! redirected anywhere (an error page instead), so the endpoint can never
//! be used as an open redirector. The decision is a same-origin form post
//! (the Origin check of [`crate::security`] applies), the page cannot be
//! framed, and every check runs again on the post.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use gatehouse_core::Core;
use gatehouse_core::model::{ConsentInfo, ConsentView};
use gatehouse_core::oauth::{Client, ClientKind, Consent, OAuthError, is_pkce_value, redirect_matches};
use gatehouse_core::users::User;
use serde::Deserialize;
use url::Url;

use super::{OAuthServer, client_metadata};
use crate::error::ApiError;
use crate::state::AppState;

/// Renders the site for a request (the Leptos app, with its context).
pub type Render = Arc<dyn Fn(Request) -> Pin<Box<dyn Future<Output = Response> + Send>> + Send + Sync>;

/// The query of an authorization request (RFC 6749 §4.1.1, RFC 7636, RFC 8707).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AuthorizeParams {
    /// Must be `code`.
    pub response_type: Option<String>,
    /// The client.
    pub client_id: Option<String>,
    /// One of its registered redirect URIs.
    pub redirect_uri: Option<String>,
    /// The PKCE S256 challenge.
    pub code_challenge: Option<String>,
    /// Must be `S256`.
    pub code_challenge_method: Option<String>,
    /// The client's state, returned as is.
    pub state: Option<String>,
    /// This Gatehouse's `/mcp`.
    pub resource: Option<String>,
    /// Ignored beyond `mcp` (the only scope).
    pub scope: Option<String>,
}

impl AuthorizeParams {
    /// The fields to carry through the consent form (those present).
    fn fields(&self) -> Vec<(String, String)> {
        [
            ("response_type", &self.response_type),
            ("client_id", &self.client_id),
            ("redirect_uri", &self.redirect_uri),
            ("code_challenge", &self.code_challenge),
            ("code_challenge_method", &self.code_challenge_method),
            ("state", &self.state),
            ("resource", &self.resource),
            ("scope", &self.scope),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k.to_string(), v)))
        .collect()
    }

    /// The sign-in page, coming back to this request once signed in.
    fn sign_in_first(&self) -> Response {
        let query = serde_urlencoded::to_string(self.fields()).unwrap_or_default();
        let back = format!("{}?{query}", super::paths::AUTHORIZE);
        let next: String = url::form_urlencoded::byte_serialize(back.as_bytes()).collect();
        Redirect::to(&format!("/sign-in?next={next}")).into_response()
    }
}

/// Why a request is not shown for consent.
#[derive(Debug)]
pub enum Refusal {
    /// The client or its redirect URI is not known: say so on the page,
    /// never redirect.
    Page(String),
    /// The client is known: send its browser back with this error URL.
    Redirect(String),
}

/// A request that passed every check.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The client.
    pub client: Client,
    /// Its redirect URI, matched.
    pub redirect_uri: String,
    /// The PKCE challenge.
    pub code_challenge: String,
    /// The canonical resource.
    pub resource: String,
    /// The client's state.
    pub state: Option<String>,
}

/// `redirect_uri` with the response parameters added (RFC 6749 §4.1.2, RFC 9207 `iss`).
fn redirect_with(redirect_uri: &str, pairs: &[(&str, &str)], state: Option<&str>, issuer: &str) -> String {
    let Ok(mut url) = Url::parse(redirect_uri) else { return redirect_uri.to_string() };
    {
        let mut query = url.query_pairs_mut();
        for (k, v) in pairs {
            query.append_pair(k, v);
        }
        if let Some(state) = state {
            query.append_pair("state", state);
        }
        query.append_pair("iss", issuer);
    }
    url.to_string()
}

/// The client named by `client_id`: a registered one, or one known by its
/// metadata document (fetched again when `fetch` and the copy is stale).
async fn find_client(state: &AppState, client_id: &str, fetch: bool) -> Result<Client, String> {
    let id = client_id.to_string();
    let known = state
        .mcp
        .core
        .run(move |core| core.oauth.client(&id))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    if !client_metadata::is_document_url(client_id) {
        return known.ok_or_else(|| {
            "This client is not registered here (it may have been forgotten after a day unused). Connect it again."
                .into()
        });
    }
    let now = state.mcp.core.clock.now_ms();
    if let Some(client) = &known
        && (!fetch || client.fetched_at_ms.is_some_and(|t| now - t < client_metadata::FRESH_FOR_MS))
    {
        return Ok(client.clone());
    }
    if !fetch {
        return Err("This client's metadata document has not been read; start connecting again.".into());
    }
    let metadata = state.mcp.oauth.documents.fetch(client_id).await.map_err(|e| e.to_string())?;
    let id = client_id.to_string();
    state
        .mcp
        .core
        .run(move |core| core.oauth.save_document_client(&id, metadata))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// Every check of an authorization request, in the order RFC 6749 §4.1.2.1 gives.
/// `server` is the authorization server as this request sees it.
pub async fn check(
    state: &AppState,
    server: &OAuthServer,
    params: &AuthorizeParams,
    fetch: bool,
) -> Result<Checked, Refusal> {
    let client_id = params.client_id.as_deref().filter(|c| !c.is_empty());
    let client_id = client_id.ok_or_else(|| Refusal::Page("The request names no client (client_id).".into()))?;
    let client = find_client(state, client_id, fetch).await.map_err(Refusal::Page)?;
    check_with_client(server, client, params)
}

fn check_with_client(server: &OAuthServer, client: Client, params: &AuthorizeParams) -> Result<Checked, Refusal> {
    let redirect_uri =
        params.redirect_uri.clone().ok_or_else(|| Refusal::Page("The request names no redirect_uri.".into()))?;
    if !redirect_matches(&client.redirect_uris, &redirect_uri) {
        return Err(Refusal::Page(format!(
            "{redirect_uri:?} is not a redirect URI this client registered, so Gatehouse will not send you there."
        )));
    }
    let state = params.state.clone();
    let back = |error: &str, description: String| {
        Refusal::Redirect(redirect_with(
            &redirect_uri,
            &[("error", error), ("error_description", &description)],
            state.as_deref(),
            &server.issuer,
        ))
    };
    if params.response_type.as_deref() != Some("code") {
        return Err(back("unsupported_response_type", "only response_type=code is supported".into()));
    }
    let challenge = params.code_challenge.clone().filter(|c| is_pkce_value(c));
    let Some(code_challenge) = challenge else {
        return Err(back("invalid_request", "a PKCE code_challenge is required".into()));
    };
    if params.code_challenge_method.as_deref() != Some("S256") {
        return Err(back("invalid_request", "code_challenge_method must be S256".into()));
    }
    let resource = match server.resource_param(params.resource.as_deref()) {
        Ok(r) => r,
        Err(e) => return Err(back(e.code(), e.to_string())),
    };
    Ok(Checked { client, redirect_uri, code_challenge, resource, state })
}

/// Where a redirect URI leads, in words.
fn redirect_to(redirect_uri: &str) -> String {
    match Url::parse(redirect_uri) {
        Ok(url) if url.scheme() == "http" => {
            format!("an app on this computer (port {})", url.port_or_known_default().unwrap_or(80))
        }
        Ok(url) if url.scheme() == "https" => format!("the website {}", url.host_str().unwrap_or_default()),
        Ok(url) => format!("the app that opens {}: links", url.scheme()),
        Err(_) => redirect_uri.to_string(),
    }
}

/// The longest consent form read (the authorization request's fields and the decision).
const MAX_FORM_BYTES: usize = 64 * 1024;

/// The names the person's agents already go by: of their credentials, OAuth
/// codes waiting to be exchanged, and grants. A client given one of them acts
/// as that agent and inherits its grants. Database work: off the async workers.
fn taken_names(core: &Core, owner: &User) -> Result<BTreeSet<String>, gatehouse_core::CoreError> {
    let mut names: BTreeSet<String> = core.credentials.agent_names_of(&owner.username)?.into_iter().collect();
    names.extend(core.grants.agents_of(owner.id));
    Ok(names)
}

/// The client's name, numbered ("Claude Code 2") when one of the person's
/// agents already goes by it: a new client starts as a new agent, with no
/// grants, as the consent page promises. A name is only the client's claim.
fn fresh_name(client_name: &str, taken: &BTreeSet<String>) -> String {
    let mut base: String = client_name.trim().chars().filter(|c| !c.is_control()).collect();
    // Room for a number within the credential store's 200 bytes.
    while base.len() > 190 {
        base.pop();
    }
    if base.is_empty() {
        base = "agent".into();
    }
    if !taken.contains(&base) {
        return base;
    }
    (2u64..).map(|n| format!("{base} {n}")).find(|name| !taken.contains(name)).unwrap_or(base)
}

/// The agent name on the consent form and what choosing it means.
struct AgentChoice {
    name: String,
    /// One of the person's agents already goes by it.
    exists: bool,
    /// The live grants that agent holds (inherited when chosen).
    grants: usize,
    /// Why the last decision was refused.
    error: Option<String>,
}

impl AgentChoice {
    fn of(core: &Core, owner: &User, name: String, taken: &BTreeSet<String>, error: Option<String>) -> Self {
        let exists = taken.contains(&name);
        let grants = if exists { core.grants.count_for_agent(&name, owner.id) } else { 0 };
        Self { name, exists, grants, error }
    }
}

/// What the consent page shows for a checked request.
fn view(checked: &Checked, params: &AuthorizeParams, user: &User, agent: AgentChoice) -> ConsentView {
    let verified_host = (checked.client.kind == ClientKind::MetadataDocument)
        .then(|| Url::parse(&checked.client.client_id).ok().and_then(|u| u.host_str().map(str::to_string)))
        .flatten();
    ConsentView {
        client_id: checked.client.client_id.clone(),
        client_name: checked.client.name.clone(),
        verified_host,
        redirect_to: redirect_to(&checked.redirect_uri),
        redirect_uri: checked.redirect_uri.clone(),
        user: user.username.clone(),
        agent: agent.name,
        agent_exists: agent.exists,
        inherited_grants: agent.grants,
        agent_error: agent.error,
        fields: params.fields(),
    }
}

/// The consent page's data source (see [`gatehouse_app::server_fns::OAuthConsent`]).
pub struct ConsentSource {
    /// The stores.
    pub core: Core,
    /// The authorization server's settings.
    pub server: OAuthServer,
}

impl gatehouse_app::server_fns::OAuthConsent for ConsentSource {
    fn consent(&self, user: &User, query: &str, host: Option<&str>) -> ConsentInfo {
        let params: AuthorizeParams = match serde_urlencoded::from_str(query) {
            Ok(p) => p,
            Err(e) => return ConsentInfo::Refused(format!("The request is malformed: {e}.")),
        };
        let Some(client_id) = params.client_id.clone() else {
            return ConsentInfo::Refused("The request names no client (client_id).".into());
        };
        // The GET handler has just fetched a metadata document if needed.
        let client = match self.core.oauth.client(&client_id) {
            Ok(Some(client)) => client,
            Ok(None) => return ConsentInfo::Refused("This client is not registered here. Connect it again.".into()),
            Err(e) => return ConsentInfo::Refused(format!("Could not look the client up: {e}")),
        };
        match check_with_client(&self.server.seen_from(host), client, &params) {
            Ok(checked) => {
                // A person has started to use this registration: it no longer
                // counts against its address, nor makes room for another.
                if let Err(e) = self.core.oauth.seen(&checked.client.client_id, user.id) {
                    tracing::warn!(error = %e, "could not mark a client as seen");
                }
                // A new client starts as a new agent: the name suggested is
                // one no agent of this person goes by.
                let taken = match taken_names(&self.core, user) {
                    Ok(taken) => taken,
                    Err(e) => return ConsentInfo::Refused(format!("Could not look your agents up: {e}")),
                };
                let name = fresh_name(&checked.client.name, &taken);
                let agent = AgentChoice::of(&self.core, user, name, &taken, None);
                ConsentInfo::Ask(Box::new(view(&checked, &params, user, agent)))
            }
            Err(Refusal::Page(why)) => ConsentInfo::Refused(why),
            Err(Refusal::Redirect(_)) => {
                ConsentInfo::Refused("The request is not valid; start connecting again.".into())
            }
        }
    }
}

/// The CSP `form-action` source for where the decision redirects: Chrome
/// checks a form's redirects against `form-action` too.
fn form_action_source(redirect_uri: &str) -> Option<String> {
    let url = Url::parse(redirect_uri).ok()?;
    match url.scheme() {
        "http" | "https" => Some(url.origin().ascii_serialization()),
        scheme => Some(format!("{scheme}:")),
    }
}

/// `GET /oauth/authorize`: errors the client can be told of go back to it;
/// others are shown; a signed-out visitor signs in first; then the consent page.
pub async fn start(state: AppState, render: Render, user: Option<Extension<User>>, mut request: Request) -> Response {
    let query = request.uri().query().unwrap_or_default().to_string();
    let params: AuthorizeParams = match serde_urlencoded::from_str(&query) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "malformed authorization request");
            let why = format!("The request is malformed: {e}.");
            request.extensions_mut().insert(ConsentInfo::Refused(why));
            return page(render, request, StatusCode::BAD_REQUEST, None).await;
        }
    };
    // A metadata document is fetched only for a signed-in person: otherwise
    // anyone could make Gatehouse fetch (and remember) any URL they name.
    if user.is_none() && params.client_id.as_deref().is_some_and(client_metadata::is_document_url) {
        return params.sign_in_first();
    }
    let server = state.mcp.oauth.seen_by(request.headers());
    let checked = match check(&state, &server, &params, true).await {
        Ok(checked) => checked,
        Err(Refusal::Redirect(url)) => return Redirect::to(&url).into_response(),
        Err(Refusal::Page(why)) => {
            tracing::warn!(reason = %why, "authorization request refused");
            // The page says why (signed in or not): it reads this first.
            request.extensions_mut().insert(ConsentInfo::Refused(why));
            return page(render, request, StatusCode::BAD_REQUEST, None).await;
        }
    };
    if user.is_none() {
        return params.sign_in_first();
    }
    let source = form_action_source(&checked.redirect_uri);
    page(render, request, StatusCode::OK, source).await
}

/// Renders the consent page; `form_action` widens the CSP for the redirect.
async fn page(render: Render, request: Request, status: StatusCode, form_action: Option<String>) -> Response {
    let nonce = request.extensions().get::<leptos::nonce::Nonce>().map(|n| n.to_string());
    let mut response = render(request).await;
    if status != StatusCode::OK {
        *response.status_mut() = status;
    }
    if let (Some(nonce), Some(source)) = (nonce, form_action) {
        let csp = crate::security::content_security_policy(&nonce)
            .replace("form-action 'self'", &format!("form-action 'self' {source}"));
        if let Ok(value) = HeaderValue::from_str(&csp) {
            response.headers_mut().insert(header::CONTENT_SECURITY_POLICY, value);
        }
    }
    response
}

/// The consent form's fields.
#[derive(Debug, Deserialize)]
pub struct DecisionForm {
    #[serde(flatten)]
    params: AuthorizeParams,
    /// `approve` or `deny`.
    decision: Option<String>,
    /// The agent name chosen.
    agent: Option<String>,
    /// `yes`: the person confirms that the client acts as their existing
    /// agent of that name, inheriting its grants.
    inherit: Option<String>,
}

/// `POST /oauth/authorize`: the signed-in person's decision. Allow makes a
/// one-time code (the credential is made when the client exchanges it) and
/// sends the browser back with it; Deny sends `access_denied`. Allowing
/// under the name of one of the person's existing agents (whose grants the
/// client would inherit) needs the confirmation box: without it the page
/// comes back (400) saying so, with the name kept.
pub async fn decide(
    state: AppState,
    render: Render,
    user: Option<Extension<User>>,
    request: Request,
) -> Result<Response, ApiError> {
    let (mut parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|e| ApiError::BadRequest(format!("invalid form: {e}")))?;
    let form: DecisionForm =
        serde_urlencoded::from_bytes(&body).map_err(|e| ApiError::BadRequest(format!("invalid form: {e}")))?;
    let Some(Extension(user)) = user else {
        return Ok(form.params.sign_in_first());
    };
    let server = state.mcp.oauth.seen_by(&parts.headers);
    let checked = match check(&state, &server, &form.params, false).await {
        Ok(checked) => checked,
        Err(Refusal::Redirect(url)) => return Ok(Redirect::to(&url).into_response()),
        Err(Refusal::Page(why)) => return Err(ApiError::BadRequest(why)),
    };
    let issuer = server.issuer.clone();
    match form.decision.as_deref() {
        Some("deny") => {
            tracing::info!(user = %user.username, client = %checked.client.client_id, "OAuth sign-in denied");
            let url = redirect_with(
                &checked.redirect_uri,
                &[("error", "access_denied"), ("error_description", "the person declined")],
                checked.state.as_deref(),
                &issuer,
            );
            Ok(Redirect::to(&url).into_response())
        }
        Some("approve") => {
            let agent = form.agent.as_deref().map(str::trim).unwrap_or_default().to_string();
            // The credential store's own rule (200 bytes), checked here so a
            // name it would refuse never reaches the code exchange.
            if agent.len() > 200 || agent.chars().any(char::is_control) {
                return Err(ApiError::BadRequest(
                    "the agent name must be at most 200 bytes, without control characters".into(),
                ));
            }
            let owner = user.clone();
            let taken = state
                .mcp
                .core
                .run(move |core| taken_names(&core, &owner))
                .await
                .map_err(|e| ApiError::Internal(e.to_string()))?
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            let agent = if agent.is_empty() { fresh_name(&checked.client.name, &taken) } else { agent };
            // An existing agent's name: the client would inherit its grants,
            // and gated calls they cover would not wait. Only on purpose.
            if taken.contains(&agent) && form.inherit.as_deref() != Some("yes") {
                tracing::info!(user = %user.username, client = %checked.client.client_id, agent = %agent, "OAuth consent refused: existing agent name without confirmation");
                let error = "You already have an agent of this name: tick the box to let this client act as it \
                             and inherit its grants, or choose another name."
                    .to_string();
                let choice = AgentChoice::of(&state.mcp.core, &user, agent, &taken, Some(error));
                let shown = view(&checked, &form.params, &user, choice);
                parts.method = Method::GET;
                let mut request = Request::from_parts(parts, Body::empty());
                request.extensions_mut().insert(ConsentInfo::Ask(Box::new(shown)));
                let source = form_action_source(&checked.redirect_uri);
                return Ok(page(render, request, StatusCode::BAD_REQUEST, source).await);
            }
            let consent = Consent {
                client_id: checked.client.client_id.clone(),
                redirect_uri: checked.redirect_uri.clone(),
                code_challenge: checked.code_challenge.clone(),
                resource: checked.resource.clone(),
                owner: user.username.clone(),
                agent: agent.clone(),
            };
            let code = state
                .mcp
                .core
                .run(move |core| core.oauth.create_code(&consent))
                .await
                .map_err(|e| ApiError::Internal(e.to_string()))?
                .map_err(|e| match e {
                    OAuthError::Store(e) => ApiError::Internal(e.to_string()),
                    other => ApiError::BadRequest(other.to_string()),
                })?;
            tracing::info!(user = %user.username, client = %checked.client.client_id, agent = %agent, "OAuth sign-in allowed");
            let url = redirect_with(&checked.redirect_uri, &[("code", &code)], checked.state.as_deref(), &issuer);
            let mut response = Redirect::to(&url).into_response();
            response.headers_mut().insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
            Ok(response)
        }
        _ => Err(ApiError::BadRequest("decision must be approve or deny".into())),
    }
}

/// Wraps a Leptos renderer as a [`Render`].
pub fn render_with<F, Fut>(render: F) -> Render
where
    F: Fn(Request<Body>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send + 'static,
{
    Arc::new(move |request| Box::pin(render(request)))
}
