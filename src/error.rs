//! The HTTP API's error type: every 4xx/5xx is a JSON body `{error, message}`
//! and a log line.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gatehouse_core::CoreError;
use serde_json::json;

/// An error answered by the HTTP API.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed (body, parameters).
    #[error("{0}")]
    BadRequest(String),
    /// No valid browser session or API token.
    #[error("sign in or present an admin API token")]
    Unauthorized,
    /// Authenticated, but not allowed.
    #[error("{0}")]
    Forbidden(String),
    /// Allowed only to an admin (a call that changes the gate for everyone).
    #[error("{0}")]
    AdminRequired(String),
    /// No such thing.
    #[error("{0}")]
    NotFound(String),
    /// Conflicts with the current state.
    #[error("{0}")]
    Conflict(String),
    /// A per-user bound is reached (the message names its config key): 429.
    #[error("{0}")]
    LimitReached(String),
    /// Something failed on our side (details only in the log).
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::AdminRequired(_) => (StatusCode::FORBIDDEN, "admin_required"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ApiError::LimitReached(_) => (StatusCode::TOO_MANY_REQUESTS, "limit_reached"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        match &self {
            ApiError::Internal(detail) => tracing::error!(error = %detail, "request failed"),
            other => tracing::warn!(status = status.as_u16(), error = code, message = %other, "request refused"),
        }
        (status, Json(json!({ "error": code, "message": self.to_string() }))).into_response()
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        match e {
            CoreError::Invalid { .. } => ApiError::BadRequest(e.to_string()),
            CoreError::Conflict(_) | CoreError::Refused(_) => ApiError::Conflict(e.to_string()),
            CoreError::Limit(message) => ApiError::LimitReached(message),
            CoreError::NotFound(_) => ApiError::NotFound(e.to_string()),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        ApiError::BadRequest(rejection.body_text())
    }
}

/// `axum::Json` whose rejections are [`ApiError`]s (JSON bodies, not text).
#[derive(axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

impl<T: serde::Serialize> IntoResponse for ApiJson<T> {
    fn into_response(self) -> Response {
        Json(self.0).into_response()
    }
}

/// Runs blocking store work (database calls, password hashing) off the
/// async workers; its error becomes the API's.
pub async fn blocking<T, E>(f: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, ApiError>
where
    T: Send + 'static,
    E: Send + 'static,
    ApiError: From<E>,
{
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError::Internal(e.to_string()))?.map_err(ApiError::from)
}
