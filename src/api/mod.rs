//! The HTTP API: sign-in, the admin API for orchestrators, and the live SSE
//! stream the pages listen to.

pub mod credentials;
pub mod executions;
pub mod live;

use axum::Router;
use axum::routing::{delete, get, post};

use crate::auth;
use crate::state::AppState;

/// Routes under `/api`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/auth/sign-in", post(auth::sign_in))
        .route("/api/auth/sign-out", post(auth::sign_out))
        .route("/api/auth/setup", post(auth::setup))
        .route("/api/credentials", post(credentials::issue).get(credentials::list))
        .route("/api/credentials/{id}", delete(credentials::revoke))
        .route("/api/threads/{thread}/touch", post(credentials::touch_thread))
        .route("/api/threads/{thread}/credentials", delete(credentials::revoke_thread))
        .route("/api/provider-sessions/{session}/credentials", delete(credentials::revoke_provider_session))
        .route("/api/live/events", get(live::events))
        .route("/api/executions/{eid}", get(executions::get))
        .route("/api/executions/{eid}/resume", post(executions::resume))
        .route("/api/executions/{eid}/events", get(executions::events))
        .route("/api/mcp-sessions/{sid}/executions/{eid}", get(executions::get_in_session))
        .route("/api/mcp-sessions/{sid}/executions/{eid}/resume", post(executions::resume_in_session))
        .route("/api/approvals/events", get(executions::inbox_events))
}
