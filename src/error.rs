//! The HTTP API's error type: every 4xx/5xx is a JSON body `{error, message}`
//! and a log line.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gatehouse_core::approvals::AccessError;
use gatehouse_core::grants::GrantError;
use gatehouse_core::{CoreError, Status, StatusKind};
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
    /// An answer of `kind` saying `message` (an internal failure's message
    /// goes to the log only).
    fn of(kind: StatusKind, message: String) -> Self {
        match kind {
            StatusKind::BadRequest => ApiError::BadRequest(message),
            StatusKind::Forbidden => ApiError::Forbidden(message),
            StatusKind::AdminRequired => ApiError::AdminRequired(message),
            StatusKind::NotFound => ApiError::NotFound(message),
            StatusKind::Conflict => ApiError::Conflict(message),
            StatusKind::LimitReached => ApiError::LimitReached(message),
            StatusKind::Internal => ApiError::Internal(message),
        }
    }

    /// A core error as the API answers it: with core's status and code
    /// ([`Status`]) and its own message.
    fn answer<E: Status + std::fmt::Display>(e: &E) -> Self {
        Self::of(e.kind(), e.to_string())
    }

    /// Status and code from core's one table ([`StatusKind`]); only
    /// "unauthorized" is the API's own (core knows no sessions or tokens).
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        let kind = match self {
            ApiError::Unauthorized => return (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::BadRequest(_) => StatusKind::BadRequest,
            ApiError::Forbidden(_) => StatusKind::Forbidden,
            ApiError::AdminRequired(_) => StatusKind::AdminRequired,
            ApiError::NotFound(_) => StatusKind::NotFound,
            ApiError::Conflict(_) => StatusKind::Conflict,
            ApiError::LimitReached(_) => StatusKind::LimitReached,
            ApiError::Internal(_) => StatusKind::Internal,
        };
        (StatusCode::from_u16(kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), kind.code())
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
        Self::answer(&e)
    }
}

impl From<AccessError> for ApiError {
    fn from(e: AccessError) -> Self {
        match e {
            // The API's own words for it, as it has always said them.
            AccessError::NotFound => Self::of(e.kind(), "no such execution".into()),
            e => Self::answer(&e),
        }
    }
}

impl From<GrantError> for ApiError {
    fn from(e: GrantError) -> Self {
        Self::answer(&e)
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
