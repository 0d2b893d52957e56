//! Scoped grants over the HTTP API: list the ones the signed-in user may see,
//! revoke one (its agent's owner or an admin). Made with a decision:
//! `POST /api/executions/{eid}/resume {action: "accept", grant: {scope, arguments?}}`.

use axum::extract::{Path, State};
use axum::response::IntoResponse;
use gatehouse_core::Core;
use gatehouse_core::model::GrantId;
use serde_json::json;

use crate::auth::SignedIn;
use crate::error::{ApiError, ApiJson};

/// `GET /api/grants`: live grants, newest first (everyone's for admins).
pub async fn list(State(core): State<Core>, SignedIn(user): SignedIn) -> Result<impl IntoResponse, ApiError> {
    let listed = core.run(move |core| core.grants.list_for(&user)).await??;
    Ok(ApiJson(json!({ "grants": listed })))
}

/// `DELETE /api/grants/{id}`: revokes at once; the next call waits again.
pub async fn revoke(
    State(core): State<Core>,
    SignedIn(user): SignedIn,
    Path(id): Path<GrantId>,
) -> Result<impl IntoResponse, ApiError> {
    let revoked = core.run(move |core| core.grants.revoke_for(&user, &id)).await??;
    Ok(ApiJson(json!({ "revoked": revoked.id })))
}
