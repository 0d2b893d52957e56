//! Bearer authentication for `/mcp`, binding of sessions to the credential
//! that opened them, and JSON-RPC errors for bodies rmcp cannot parse.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gatehouse_core::credentials::Rejection;
use gatehouse_core::model::CredentialId;
use serde_json::json;

use super::McpState;
use super::slots::{Slot, SlotRefused};
use super::upstream::listeners;

/// Rejection counters, by reason.
#[derive(Debug, Default)]
pub struct AuthMetrics {
    /// `missing_bearer_token`
    pub missing: AtomicU64,
    /// `unknown_or_expired_token`
    pub unknown: AtomicU64,
}

fn unauthorized(state: &McpState, host: Option<&str>, rejection: Rejection) -> Response {
    let counter = match rejection {
        Rejection::MissingBearerToken => &state.metrics.missing,
        Rejection::UnknownOrExpiredToken => &state.metrics.unknown,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    // Never log the token: only why it was refused.
    tracing::warn!(reason = rejection.reason(), "rejected MCP credential");
    let message = match rejection {
        Rejection::MissingBearerToken => {
            "send Authorization: Bearer <token>; mint one with `gatehouse token issue --agent NAME`"
        }
        Rejection::UnknownOrExpiredToken => "the bearer token is unknown, revoked or expired; ask for a new one",
    };
    // With OAuth on, the challenge points clients at the resource metadata
    // (RFC 9728 §5.1), where discovery of the sign-in starts.
    let challenge = state.oauth.seen_from(host).challenge(match rejection {
        Rejection::MissingBearerToken => None,
        Rejection::UnknownOrExpiredToken => Some("invalid_token"),
    });
    let mut response = (
        StatusCode::UNAUTHORIZED,
        axum::Json(json!({ "error": "invalid_mcp_credential", "reason": rejection.reason(), "message": message })),
    )
        .into_response();
    let h = response.headers_mut();
    if let Ok(challenge) = HeaderValue::from_str(&challenge) {
        h.insert(header::WWW_AUTHENTICATE, challenge);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn jsonrpc_error(status: StatusCode, code: i64, message: String) -> Response {
    tracing::warn!(status = status.as_u16(), code, message = ?message, "bad MCP request");
    (status, axum::Json(json!({ "jsonrpc": "2.0", "id": null, "error": { "code": code, "message": message } })))
        .into_response()
}

/// What `/mcp` reads of a POST body before rmcp does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Posted {
    /// It carries a JSON-RPC request (a message with a `method` and an
    /// `id`), which rmcp answers when its handler is done: a `tools/call`
    /// may be held that way for minutes. Answers to the requests Gatehouse
    /// relayed to the agent, and notifications, carry none: rmcp takes them
    /// at once (202). Read only when the credential has no slot free.
    request: bool,
    /// It is an `initialize` request (the one that opens a session).
    initialize: bool,
}

impl Posted {
    /// Reads `body` (one message, or a batch: any request in it counts). A
    /// body that is not JSON-RPC counts as a request (without a slot free it
    /// is refused like one; with one, rmcp refuses it).
    fn of(body: &[u8]) -> Self {
        #[derive(serde::Deserialize)]
        struct Message<'a> {
            #[serde(borrow)]
            method: Option<std::borrow::Cow<'a, str>>,
            id: Option<serde::de::IgnoredAny>,
        }
        let request = |m: &Message<'_>| m.method.is_some() && m.id.is_some();
        let unreadable = Posted { request: true, initialize: false };
        if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            return match serde_json::from_slice::<Vec<Message<'_>>>(body) {
                Ok(batch) => Posted { request: batch.iter().any(request), initialize: false },
                Err(_) => unreadable,
            };
        }
        match serde_json::from_slice::<Message<'_>>(body) {
            Ok(m) => Posted { request: request(&m), initialize: m.method.as_deref() == Some("initialize") },
            Err(_) => unreadable,
        }
    }
}

/// The error a request gets when `credential_id` has no slot free (`refused`).
fn no_slot(credential_id: &CredentialId, refused: SlotRefused) -> Response {
    let status = match refused {
        SlotRefused::Credential(_) => StatusCode::TOO_MANY_REQUESTS,
        SlotRefused::Full(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    tracing::warn!(credential = %credential_id, "MCP request refused: no slot");
    jsonrpc_error(status, -32000, refused.to_string())
}

/// Authenticates every `/mcp` request; the accepted credential goes into the
/// request extensions for the tool handlers.
pub async fn authenticate(State(state): State<McpState>, mut request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).map(str::to_string);
    let Some(token) = bearer_token(request.headers()) else {
        return unauthorized(&state, host.as_deref(), Rejection::MissingBearerToken);
    };
    let oauth_resource = (state.oauth.enabled && token.starts_with(gatehouse_core::oauth::ACCESS_PREFIX))
        .then(|| state.oauth.seen_from(host.as_deref()).resource);
    let token = token.to_string();
    let lookup = move |core: gatehouse_core::Core| match oauth_resource {
        Some(resource) => core.oauth.authenticate(&token, &resource).map_err(|e| e.to_string()),
        None => core.credentials.authenticate(&token).map_err(|e| e.to_string()),
    };
    let accepted = state.core.quick(lookup).await.map_err(|e| e.to_string()).and_then(|found| found);
    let credential = match accepted {
        Ok(Ok(credential)) => credential,
        Ok(Err(rejection)) => return unauthorized(&state, host.as_deref(), rejection),
        Err(e) => {
            tracing::error!(error = %e, "credential lookup failed");
            return jsonrpc_error(StatusCode::INTERNAL_SERVER_ERROR, -32603, "internal error".into());
        }
    };
    // A session belongs to the credential that opened it, from the moment its
    // id is issued: an unbound or foreign id does not exist for this caller.
    let session = request.headers().get("mcp-session-id").map(|v| v.to_str().unwrap_or_default().to_string());
    let in_use = match &session {
        Some(sid) => match state.mcp_sessions.enter(sid, &credential.id) {
            Some(in_use) => Some(Arc::new(in_use)),
            None => {
                tracing::warn!(credential = %credential.id, "session id not bound to this credential");
                return jsonrpc_error(StatusCode::NOT_FOUND, -32001, "Session not found".into());
            }
        },
        None => None,
    };
    let credential_id = credential.id.clone();
    request.extensions_mut().insert(credential);
    if let Some(in_use) = &in_use {
        // rmcp hands the request's parts to the handler with the JSON-RPC
        // request: the session stays in use while the handler still runs it
        // (a call held inside its request), even if the client dropped the
        // response stream.
        request.extensions_mut().insert(in_use.clone());
    }
    // A request holds its slot (if it takes one) until its response has
    // ended (a long-poll or a stream for as long as it is open); the session
    // is in use as long (a GET stream for as long as the client reads it).
    let (response, slot) = serve_authenticated(&state, session, credential_id, request, next).await;
    crate::in_flight::hold_until_sent(response, (slot, in_use))
}

/// The rest of an authenticated request: its slot, session ends, body
/// limits, session reservations and the JSON-RPC errors rmcp does not give.
/// Returns the response and the slot it holds until it has ended.
///
/// Every request takes a slot while one is free. When none is, a POST that
/// carries no JSON-RPC request (the agent's answer to a request Gatehouse
/// relayed to it, a notification such as `notifications/cancelled`) goes on
/// without one: rmcp takes it at once, and the call held waiting for that
/// answer already holds a slot, so an agent whose slots are all held by such
/// calls can still answer (or cancel) them, instead of being refused a slot
/// that only its answer would free.
async fn serve_authenticated(
    state: &McpState,
    session: Option<String>,
    credential_id: CredentialId,
    request: Request,
    next: Next,
) -> (Response, Option<Slot>) {
    if request.method() != Method::POST {
        let slot = match state.slots.claim(&credential_id) {
            Ok(slot) => slot,
            Err(refused) => return (no_slot(&credential_id, refused), None),
        };
        return (serve_other(state, session, request, next).await, Some(slot));
    }
    serve_post(state, session, credential_id, request, next).await
}

/// A GET (stream) or DELETE (session end).
async fn serve_other(state: &McpState, session: Option<String>, request: Request, next: Next) -> Response {
    if request.method() == Method::DELETE {
        // rmcp answers a session DELETE with 202; clients (the Python SDK)
        // expect 200 or 204 for a completed termination, and it is complete.
        let mut response = next.run(request).await;
        if response.status().is_success()
            && let Some(sid) = &session
        {
            state.mcp_sessions.unbind(sid);
        }
        if response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
        return response;
    }
    next.run(request).await
}

/// A POST: its slot taken, its body read (bounded); when no slot is free,
/// a body that carries no request goes on without one.
async fn serve_post(
    state: &McpState,
    session: Option<String>,
    credential_id: CredentialId,
    request: Request,
    next: Next,
) -> (Response, Option<Slot>) {
    // Claimed first, as every request's: the common case reads nothing more.
    let claimed = state.slots.claim(&credential_id);
    let json_body = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("application/json"));
    let (mut parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, state.config.load().max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => {
            let message = format!("request body exceeds {} bytes (max_body_bytes)", state.config.load().max_body_bytes);
            return (jsonrpc_error(StatusCode::PAYLOAD_TOO_LARGE, -32600, message), None);
        }
    };
    let slot = match claimed {
        Ok(slot) => Some(slot),
        Err(refused) if Posted::of(&bytes).request => return (no_slot(&credential_id, refused), None),
        // The agent's answer to a relayed request, or a notification.
        Err(_) => None,
    };
    // A new session holds a place from its `initialize` until its id is bound.
    let reservation = match session {
        None if Posted::of(&bytes).initialize => match state.mcp_sessions.reserve(&credential_id).await {
            Ok(r) => Some(r),
            Err(limit) => {
                tracing::warn!(credential = %credential_id, %limit, "MCP session refused");
                return (jsonrpc_error(StatusCode::TOO_MANY_REQUESTS, -32000, limit.to_string()), slot);
            }
        },
        _ => None,
    };
    // A listen is counted from here until its stream has ended, so that one
    // over the limit is refused plainly, before rmcp acknowledges it. It is
    // a 2026-07-28 request, whose `Mcp-Method` header rmcp requires and
    // checks against the body: the header says what it is.
    let listen = if parts.headers.get("mcp-method").is_some_and(|m| m == "subscriptions/listen") {
        let limit = listeners::per_credential(state.config.load().max_requests_per_credential);
        match state.upstreams.listeners().reserve(&credential_id, limit) {
            Ok(permit) => {
                parts.extensions.insert(permit.clone());
                Some(permit)
            }
            Err(refused) => {
                tracing::warn!(credential = %credential_id, %refused, "subscriptions/listen refused");
                return (jsonrpc_error(StatusCode::TOO_MANY_REQUESTS, -32000, refused.to_string()), slot);
            }
        }
    } else {
        None
    };
    let response = next.run(Request::from_parts(parts, Body::from(bytes.clone()))).await;
    if let Some(reservation) = reservation
        && let Some(sid) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok())
    {
        reservation.bind(sid);
    }
    // rmcp answers an undecodable JSON body with a bare 415; give the client
    // the JSON-RPC error the spec asks for instead.
    if json_body && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        let refused = match serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
            Err(e) => jsonrpc_error(StatusCode::BAD_REQUEST, -32700, format!("Parse error: {e}")),
            Ok(_) => {
                jsonrpc_error(StatusCode::BAD_REQUEST, -32600, "Invalid Request: not a JSON-RPC 2.0 message".into())
            }
        };
        return (refused, slot);
    }
    match listen {
        Some(permit) => (crate::in_flight::hold_until_sent(response, permit), slot),
        None => (response, slot),
    }
}

/// The token of an `Authorization: Bearer <token>` header (scheme in any
/// case), for agent and admin tokens alike; tokens are never read from the URL.
pub fn bearer_token(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::Posted;

    #[test]
    fn a_body_carries_a_request_when_a_message_has_a_method_and_an_id() {
        let request = Posted { request: true, initialize: false };
        let none = Posted { request: false, initialize: false };
        let call = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#;
        assert_eq!(Posted::of(call), request);
        let initialize = br#" {"jsonrpc":"2.0","id":"a","method":"initialize","params":{}}"#;
        assert_eq!(Posted::of(initialize), Posted { request: true, initialize: true });
        // What an agent posts back: its answer to a relayed request, or a notification.
        assert_eq!(Posted::of(br#"{"jsonrpc":"2.0","id":0,"result":{"role":"assistant"}}"#), none);
        assert_eq!(Posted::of(br#"{"jsonrpc":"2.0","id":0,"error":{"code":-1,"message":"no"}}"#), none);
        assert_eq!(Posted::of(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#), none);
        // A batch is a request if any message in it is one.
        assert_eq!(Posted::of(br#"[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","method":"n"}]"#), none);
        assert_eq!(
            Posted::of(br#"[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#),
            request
        );
        // What is not JSON-RPC counts as a request: refused a slot like one.
        assert_eq!(Posted::of(b"not json"), request);
        assert_eq!(Posted::of(b"[1,2]"), request);
    }
}
