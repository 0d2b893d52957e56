//! `/healthz` (the store answers) and `/readyz` (start-up work done, not
//! shutting down), both unauthenticated, for load balancers and orchestrators.
//! Neither says more than a word about what is wrong; the log has the rest.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use gatehouse_core::Core;
use tokio_util::sync::CancellationToken;

/// What the health endpoints read: a sub-state of the application's
/// ([`axum::extract::FromRef`], in `state.rs`), so this file needs nothing
/// else of it.
#[derive(Clone)]
pub struct Health {
    /// The stores (`/healthz` runs a trivial query).
    pub core: Core,
    /// Start-up done.
    pub ready: Readiness,
    /// Cancelled once shutdown begins.
    pub shutdown: CancellationToken,
}

/// How long `/healthz` waits for the store before answering 503.
pub const STORE_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the server has finished its start-up work (migrations, the
/// paused executions restored, background tasks started). Cheap to clone;
/// every clone shares the flag.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks start-up done ([`crate::startup::Application::run`] does, once serving).
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether start-up is done.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// `GET /healthz`: 200 `{"status":"ok","store":"ok"}` when a trivial query
/// succeeds within [`STORE_CHECK_TIMEOUT`], else 503
/// `{"status":"unavailable","store":REASON}` with a short reason (never a
/// path or a query).
pub async fn healthz(State(health): State<Health>) -> Response {
    let check = health.core.run(|core| gatehouse_core::maintenance::check(&core.db));
    let reason = match tokio::time::timeout(STORE_CHECK_TIMEOUT, check).await {
        Ok(Ok(Ok(()))) => {
            return (StatusCode::OK, Json(json!({"status": "ok", "store": "ok"}))).into_response();
        }
        Ok(Ok(Err(e))) => {
            tracing::warn!(error = %e, "health check: the store query failed");
            gatehouse_core::maintenance::public_reason(&e)
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "health check: the store query did not finish");
            "check failed".to_string()
        }
        Err(_) => {
            tracing::warn!(timeout = ?STORE_CHECK_TIMEOUT, "health check: the store did not answer in time");
            "timed out".to_string()
        }
    };
    (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "unavailable", "store": reason}))).into_response()
}

/// `GET /readyz`: 200 `{"status":"ready"}` once start-up is done; 503
/// `{"status":"starting"}` before and `{"status":"stopping"}` once shutdown
/// has begun, so a load balancer stops sending new work.
pub async fn readyz(State(health): State<Health>) -> Response {
    let (code, status) = if health.shutdown.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "stopping")
    } else if health.ready.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    };
    (code, Json(json!({"status": status}))).into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use crate::router::app;
    use crate::state::AppState;
    use crate::state::for_tests as state;

    async fn get(state: &AppState, path: &str) -> (StatusCode, serde_json::Value) {
        let request = Request::get(path).header("host", "127.0.0.1").body(Body::empty()).unwrap();
        let response = app(state.clone()).oneshot(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn readyz_is_503_until_start_up_is_done_and_again_once_shutdown_begins() {
        let (state, _dir) = state();
        assert_eq!(
            get(&state, "/readyz").await,
            (StatusCode::SERVICE_UNAVAILABLE, serde_json::json!({"status": "starting"}))
        );
        state.ready.set_ready();
        assert_eq!(get(&state, "/readyz").await, (StatusCode::OK, serde_json::json!({"status": "ready"})));
        state.mcp.shutdown.cancel();
        assert_eq!(
            get(&state, "/readyz").await,
            (StatusCode::SERVICE_UNAVAILABLE, serde_json::json!({"status": "stopping"}))
        );
    }

    #[tokio::test]
    async fn healthz_reports_the_store_and_is_503_when_it_does_not_answer() {
        let (state, _dir) = state();
        assert_eq!(get(&state, "/healthz").await, (StatusCode::OK, serde_json::json!({"status": "ok", "store": "ok"})));
        // Whoever holds the connection for longer than the timeout makes the store unavailable.
        let (locked, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let db = state.core().db.clone();
        let holder = std::thread::spawn(move || {
            let _guard = db.conn();
            locked.0.send(()).unwrap();
            let _ = release.1.recv();
        });
        locked.1.recv().unwrap();
        let (status, body) = get(&state, "/healthz").await;
        release.0.send(()).unwrap();
        holder.join().unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, serde_json::json!({"status": "unavailable", "store": "timed out"}));
        assert_eq!(get(&state, "/healthz").await.0, StatusCode::OK, "and healthy again once it answers");
    }
}
