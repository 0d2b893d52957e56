//! The admin API for orchestrators: issue, touch and revoke agent credentials.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use gatehouse_core::Core;
use gatehouse_core::credentials::IssueRequest;
use gatehouse_core::credentials::IssuedCredential;
use serde::Deserialize;
use serde_json::json;

use crate::auth::Admin;
use crate::error::{ApiError, ApiJson};
use crate::mcp::McpState;

/// Body of `POST /api/credentials`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IssueBody {
    /// Agent name.
    pub agent: String,
    /// Orchestrator thread; re-issuing for it revokes its earlier credentials.
    pub thread: Option<String>,
    /// Provider session (also accepted as `provider`).
    #[serde(alias = "provider")]
    pub provider_session: Option<String>,
    /// Owning user (defaults to the signed-in admin).
    pub owner: Option<String>,
}

/// `POST /api/credentials`
pub async fn issue(
    State(mcp): State<McpState>,
    admin: Admin,
    ApiJson(body): ApiJson<IssueBody>,
) -> Result<impl IntoResponse, ApiError> {
    let owner = body.owner.or(match &admin {
        Admin::User(u) => Some(u.username.clone()),
        Admin::ApiToken(_) => None,
    });
    let request = IssueRequest {
        agent: body.agent,
        thread: body.thread,
        provider_session: body.provider_session,
        owner,
        via: gatehouse_core::credentials::IssuedVia::Api,
        oauth_client: None,
    };
    let issued = mcp.core.run(move |core| core.credentials.issue(request)).await??;
    tracing::info!(credential = %issued.id, agent = %issued.credential.agent, by = %admin.actor(), "credential issued");
    Ok((StatusCode::CREATED, ApiJson(IssuedCredential::new(issued, &mcp.base_url))))
}

/// `GET /api/credentials`
pub async fn list(State(core): State<Core>, _admin: Admin) -> Result<impl IntoResponse, ApiError> {
    Ok(ApiJson(core.run(|core| core.credentials.list()).await??))
}

/// `POST /api/threads/{thread}/touch`: a sign of life for the thread's credentials.
pub async fn touch_thread(
    State(core): State<Core>,
    _admin: Admin,
    Path(thread): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let key = thread.clone();
    match core.run(move |core| core.credentials.touch_thread(&key)).await?? {
        0 => Err(ApiError::NotFound(format!("no live credential for thread {thread:?}"))),
        n => Ok(ApiJson(json!({ "thread": thread, "touched": n }))),
    }
}

/// `DELETE /api/credentials/{id}`
pub async fn revoke(
    State(core): State<Core>,
    admin: Admin,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let key = id.clone();
    if !core.run(move |core| core.credentials.revoke(&key)).await?? {
        return Err(ApiError::NotFound(format!("no live credential {id:?}")));
    }
    tracing::info!(credential = %id, by = %admin.actor(), "credential revoked");
    Ok(ApiJson(json!({ "id": id, "revoked": 1 })))
}

/// `DELETE /api/threads/{thread}/credentials`
pub async fn revoke_thread(
    State(core): State<Core>,
    admin: Admin,
    Path(thread): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let key = thread.clone();
    let n = core.run(move |core| core.credentials.revoke_thread(&key)).await??;
    tracing::info!(%thread, revoked = n, by = %admin.actor(), "thread credentials revoked");
    Ok(ApiJson(json!({ "thread": thread, "revoked": n })))
}

/// `DELETE /api/provider-sessions/{session}/credentials`
pub async fn revoke_provider_session(
    State(core): State<Core>,
    admin: Admin,
    Path(session): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let key = session.clone();
    let n = core.run(move |core| core.credentials.revoke_provider_session(&key)).await??;
    tracing::info!(provider_session = %session, revoked = n, by = %admin.actor(), "provider session credentials revoked");
    Ok(ApiJson(json!({ "providerSession": session, "revoked": n })))
}
