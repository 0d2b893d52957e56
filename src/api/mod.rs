//! The HTTP API: sign-in, the admin API for orchestrators, and the live SSE
//! stream the pages listen to.

pub mod credentials;
pub mod executions;
pub mod grants;
pub mod history;
pub mod live;
pub mod sign_in;
pub mod theme;

use axum::Router;
use axum::routing::{delete, get, post};

use gatehouse_core::model::routes;

use crate::state::AppState;

/// Routes under `/api`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(routes::API_SIGN_IN, post(sign_in::sign_in))
        .route(routes::API_SIGN_OUT, post(sign_in::sign_out))
        .route(routes::API_THEME, post(theme::set))
        .route(routes::API_SETUP, post(sign_in::setup))
        .route(routes::API_SET_PASSWORD, post(sign_in::set_password))
        .route("/api/credentials", post(credentials::issue).get(credentials::list))
        .route("/api/credentials/{id}", delete(credentials::revoke))
        .route("/api/threads/{thread}/touch", post(credentials::touch_thread))
        .route("/api/threads/{thread}/credentials", delete(credentials::revoke_thread))
        .route("/api/provider-sessions/{session}/credentials", delete(credentials::revoke_provider_session))
        .route(routes::LIVE_EVENTS, get(live::events))
        .route(&routes::execution("{eid}"), get(executions::get))
        .route(&routes::execution_resume("{eid}"), post(executions::resume))
        .route(&routes::execution_decline_suggestion("{eid}"), post(executions::decline_suggestion))
        .route(&routes::execution_events("{eid}"), get(executions::events))
        .route("/api/mcp-sessions/{sid}/executions/{eid}", get(executions::get_in_session))
        .route("/api/mcp-sessions/{sid}/executions/{eid}/resume", post(executions::resume_in_session))
        .route(routes::APPROVAL_EVENTS, get(live::inbox_events))
        .route(routes::API_GRANTS, get(grants::list))
        .route(&routes::grant("{id}"), delete(grants::revoke))
        .route(routes::API_HISTORY, get(history::page))
        .route("/api/history/export.jsonl", get(history::export_jsonl))
        .route("/api/history/export.csv", get(history::export_csv))
}
