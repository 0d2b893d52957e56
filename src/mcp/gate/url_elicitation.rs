//! Native mode on 2025-11-25 for clients that declare URL elicitation: the
//! client offers the approval page (`elicitation/create {mode: "url"}`) while
//! the call is held with progress notifications, then
//! `notifications/elicitation/complete`; or, with `native_url = "error"`, the
//! `-32042` URL-elicitation-required error and a retry that continues the
//! same execution.

use std::time::Duration;

use gatehouse_core::approvals::{Decide, Decision, Execution, State};
use rmcp::RoleServer;
use rmcp::model::{
    CallToolResponse, CallToolResult, CustomNotification, ElicitationAction, ErrorCode, ErrorData,
    ProgressNotificationParam, ProtocolVersion, ServerNotification,
};
use rmcp::service::RequestContext;
use serde_json::json;

use super::browser::{approval_url, pending_result};
use super::form;
use super::outcome::finish_decided;
use crate::config::NativeUrl;
use crate::mcp::McpState;
use crate::mcp::tools::Caller;
use crate::tool_error::{Shape, ToolErrorCode, error_result};

/// Progress notifications while a 2025-11-25 call is held, so clients that
/// reset their timeout on progress keep waiting.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// Whether this (2025-era) client declared URL elicitation.
pub fn declares_url(ctx: &RequestContext<RoleServer>) -> bool {
    let modern = ctx.protocol_version().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    !modern && ctx.client_capabilities().and_then(|c| c.elicitation).is_some_and(|e| e.url.is_some())
}

/// Whether a call from this client is answered with the `-32042` error.
pub fn uses_url_error(state: &McpState, ctx: &RequestContext<RoleServer>) -> bool {
    state.config.load().native_url == NativeUrl::Error && declares_url(ctx)
}

/// `-32042` URL elicitation required, pointing at the approval page.
pub fn url_required_error(state: &McpState, execution: &Execution) -> ErrorData {
    ErrorData::new(
        ErrorCode(-32042),
        format!("{} needs a person's approval: open the URL, then retry the call", execution.tool),
        Some(json!({ "elicitations": [{
            "mode": "url",
            "elicitationId": execution.id,
            "url": approval_url(state, execution),
            "message": format!("Approve {} for agent {} in Gatehouse", execution.tool, execution.agent),
        }]})),
    )
}

/// The retry of a call answered with `-32042`: run it once decided, or ask
/// again; Gatehouse's own answers in `shape` (the called tool's).
pub async fn continue_after_url_error(
    state: &McpState,
    caller: &Caller,
    execution: &Execution,
    shape: Shape,
) -> Result<CallToolResponse, ErrorData> {
    match state.core.approvals.get(&execution.id) {
        Some((_, s)) if s.state == State::Pending => Err(url_required_error(state, execution)),
        _ => Ok(CallToolResponse::Complete(finish_decided(state, caller, &execution.id, shape).await)),
    }
}

/// How long `execution` may still wait (its own TTL, which a rule may set).
fn time_left(state: &McpState, execution: &Execution) -> Duration {
    Duration::from_millis((execution.expires_at_ms - state.core.clock.now_ms()).max(0) as u64)
}

/// Tells the client (on its session stream) when the person has decided, so it
/// retries; gives up at shutdown, when nobody is left to decide.
pub fn notify_when_decided(state: &McpState, execution: &Execution, ctx: &RequestContext<RoleServer>) {
    let (store, peer, id) = (state.core.approvals.clone(), ctx.peer.clone(), execution.id.clone());
    let (ttl, shutdown) = (time_left(state, execution), state.shutdown.clone());
    state.tasks.spawn(async move {
        let decided = tokio::select! {
            decided = store.wait(&id, ttl + Duration::from_secs(1)) => decided,
            _ = shutdown.cancelled() => return,
        };
        if decided.is_some_and(|s| s.state != State::Pending) {
            let complete = ServerNotification::CustomNotification(CustomNotification::new(
                "notifications/elicitation/complete",
                Some(json!({ "elicitationId": id })),
            ));
            let _ = peer.send_notification(complete).await;
        }
    });
}

/// 2025-11-25 with URL elicitation: show the approval URL in the client, hold
/// the call (with progress) until the decision, then finish it; Gatehouse's
/// own answers in `shape` (the called tool's).
pub async fn hold_with_url(
    state: &McpState,
    caller: &Caller,
    execution: &Execution,
    shape: Shape,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let store = &state.core.approvals;
    let id = execution.id.clone();
    // Held inside this request: it ends with it (or its session), and is not
    // kept across a restart.
    store.hold(&id);
    let url = match url::Url::parse(&approval_url(state, execution)) {
        Ok(u) => u,
        Err(_) => return pending_result(state, execution, shape),
    };
    let peer = ctx.peer.clone();
    let message =
        format!("Agent {} wants to run {}. Open the link to approve or decline.", execution.agent, execution.tool);
    let ttl = time_left(state, execution);
    let (elicit_id, elicit_url) = (id.clone(), url.clone());
    let mut elicit =
        state.tasks.spawn(async move { peer.elicit_url_with_timeout(message, elicit_url, elicit_id, Some(ttl)).await });
    let progress_token = ctx.meta.get_progress_token();
    let mut elicit_done = false;
    let mut ticks = 0u32;
    loop {
        tokio::select! {
            snapshot = store.wait(&id, PROGRESS_EVERY) => match snapshot {
                Some(s) if s.state == State::Pending => {
                    ticks += 1;
                    if let Some(token) = progress_token.clone() {
                        let progress = ProgressNotificationParam::new(token, ticks as f64)
                            .with_message("waiting for a person's approval");
                        let _ = ctx.peer.notify_progress(progress).await;
                    }
                }
                _ => break,
            },
            answer = &mut elicit, if !elicit_done => {
                elicit_done = true;
                // The user refused to open the page: nobody will decide in the browser.
                // Only a cancellation is taken from the client; approval stays with the page.
                if !matches!(answer, Ok(Ok(ElicitationAction::Accept))) {
                    let _ = store.decide(Decide::actor(&id, Decision::Cancel, &form::client_actor(caller))).await;
                }
            },
            _ = ctx.ct.cancelled() => {
                store.forget(&id, "the client cancelled the call");
                elicit.abort();
                return shape.fit(error_result(ToolErrorCode::ExecutionCancelled,"cancelled by the client", json!({"executionId": id})));
            }
        }
    }
    elicit.abort();
    let complete = ServerNotification::CustomNotification(CustomNotification::new(
        "notifications/elicitation/complete",
        Some(json!({ "elicitationId": id })),
    ));
    let _ = ctx.peer.send_notification(complete).await;
    finish_decided(state, caller, &id, shape).await
}
