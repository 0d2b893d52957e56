//! How a client hears about a pause, chosen per session with
//! `/mcp?elicitation_mode=browser|native|model` (default `browser`).
//!
//! `native` uses what the client declared: on 2026-07-28 an input-required
//! result with a URL input request and an integrity-protected `requestState`;
//! on earlier versions URL-mode elicitation while the call is held (with
//! progress notifications), or a form elicitation where only form is declared;
//! the browser answer where nothing is declared.

use std::time::Duration;

use gatehouse_core::approvals::{Decision, Execution, State};
use rmcp::RoleServer;
use rmcp::model::{
    CallToolResponse, CallToolResult, CustomNotification, ElicitRequestParams, ElicitationAction, ElicitationSchema,
    ErrorCode, ErrorData, InputRequest, InputRequests, InputRequiredResult, ProgressNotificationParam, ProtocolVersion,
    RequestStateCodec, SealOptions, ServerNotification,
};
use rmcp::service::RequestContext;
use serde_json::json;

use super::McpState;
use super::gate::{self, approval_url};
use super::tools::{Caller, error_result};
use crate::config::NativeUrl;

/// How paused calls are announced to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Return the approval URL; the agent calls `resume` (works everywhere).
    Browser,
    /// Use the client's elicitation support.
    Native,
    /// The agent itself may decide through `resume {executionId, action}`.
    Model,
}

impl Mode {
    /// The mode named in the request URL's query (`elicitation_mode=`).
    pub fn of(parts: Option<&http::request::Parts>) -> Mode {
        let query = parts.and_then(|p| p.uri.query()).unwrap_or("");
        let value = url::form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == "elicitation_mode")
            .map(|(_, v)| v.into_owned());
        match value.as_deref() {
            Some("native") => Mode::Native,
            Some("model") => Mode::Model,
            _ => Mode::Browser,
        }
    }
}

/// How long one retried 2026-07-28 call is held before answering "still
/// pending" (the Python SDK retries an input-required answer a bounded number
/// of times, so each round should last).
pub const RETRY_HOLD: Duration = Duration::from_secs(50);
/// Progress notifications while a 2025-11-25 call is held, so clients that
/// reset their timeout on progress keep waiting.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// Loads the data dir's request-state key, creating it on first start.
pub fn load_codec(data_dir: &std::path::Path) -> anyhow::Result<RequestStateCodec> {
    let path = data_dir.join("request-state.key");
    let key = match std::fs::read(&path) {
        Ok(key) if key.len() >= 32 => key,
        _ => {
            let key = gatehouse_core::secret::random_bytes(32);
            write_private(&path, &key)?;
            key
        }
    };
    RequestStateCodec::try_new(key).map_err(|e| anyhow::anyhow!("request-state key: {e}"))
}

fn write_private(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(data)
}

/// What the request state is bound to besides its payload: who may retry
/// (the credential, or its thread's line of credentials: a re-issued
/// credential continues its predecessor's calls) and the exact arguments.
fn binding(credential: &gatehouse_core::credentials::Credential, digest: &str) -> Vec<u8> {
    let principal = match &credential.thread {
        Some(thread) => serde_json::to_string(&("thread", thread, &credential.agent, &credential.owner)),
        None => serde_json::to_string(&("credential", &credential.id)),
    }
    .unwrap_or_default();
    format!("{principal}|{digest}").into_bytes()
}

/// The audit actor of an answer that came over the agent's own connection:
/// never a person, whatever the client shows.
fn client_actor(caller: &Caller) -> String {
    format!("agent:{} via client", caller.credential.agent)
}

fn url_request(state: &McpState, execution: &Execution) -> InputRequests {
    let request: InputRequest = serde_json::from_value(json!({
        "method": "elicitation/create",
        "params": {
            "mode": "url",
            "message": format!("Approve {} for agent {} in Gatehouse", execution.tool, execution.agent),
            "url": approval_url(state, execution),
            "elicitationId": execution.id,
        }
    }))
    .expect("a URL elicitation request is a valid input request");
    InputRequests::from([("approval".to_string(), request)])
}

/// Whether this (2025-era) client declared URL elicitation.
fn declares_url(ctx: &RequestContext<RoleServer>) -> bool {
    let modern = ctx.protocol_version().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    !modern && ctx.client_capabilities().and_then(|c| c.elicitation).is_some_and(|e| e.url.is_some())
}

/// Whether a call from this client is answered with the `-32042` error.
pub fn uses_url_error(state: &McpState, ctx: &RequestContext<RoleServer>) -> bool {
    state.native_url == NativeUrl::Error && declares_url(ctx)
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

/// The retry of a call answered with `-32042`: run it once decided, or ask again.
pub async fn continue_after_url_error(
    state: &McpState,
    caller: &Caller,
    execution: &Execution,
) -> Result<CallToolResponse, ErrorData> {
    match state.core.approvals.get(&execution.id) {
        Some((_, s)) if s.state == State::Pending => Err(url_required_error(state, execution)),
        _ => Ok(CallToolResponse::Complete(gate::finish_decided(state, caller, &execution.id).await)),
    }
}

/// Tells the client (on its session stream) when the person has decided, so it retries.
fn notify_when_decided(state: &McpState, execution: &Execution, ctx: &RequestContext<RoleServer>) {
    let (store, peer, id) = (state.core.approvals.clone(), ctx.peer.clone(), execution.id.clone());
    let ttl = store.ttl();
    tokio::spawn(async move {
        let decided = store.wait(&id, ttl + Duration::from_secs(1)).await;
        if decided.is_some_and(|s| s.state != State::Pending) {
            let complete = ServerNotification::CustomNotification(CustomNotification::new(
                "notifications/elicitation/complete",
                Some(json!({ "elicitationId": id })),
            ));
            let _ = peer.send_notification(complete).await;
        }
    });
}

/// Announces a paused call natively; falls back to the browser answer where
/// the client declared no elicitation.
pub async fn hold(
    state: &McpState,
    caller: &Caller,
    execution: &Execution,
    ctx: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    if uses_url_error(state, ctx) {
        notify_when_decided(state, execution, ctx);
        return Err(url_required_error(state, execution));
    }
    Ok(hold_declared(state, caller, execution, ctx).await)
}

async fn hold_declared(
    state: &McpState,
    caller: &Caller,
    execution: &Execution,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResponse {
    let modern = ctx.protocol_version().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    if modern {
        let ttl = Duration::from_millis((execution.expires_at_ms - state.core.clock.now_ms()).max(1_000) as u64);
        let sealed = state.codec.seal_with(
            execution.id.as_bytes(),
            &SealOptions::new().associated_data(&binding(&caller.credential, &execution.arguments_digest)).ttl(ttl),
        );
        return CallToolResponse::InputRequired(InputRequiredResult::new(
            Some(url_request(state, execution)),
            Some(sealed),
        ));
    }
    let elicitation = ctx.client_capabilities().and_then(|c| c.elicitation);
    match elicitation {
        Some(e) if e.url.is_some() => CallToolResponse::Complete(hold_with_url(state, caller, execution, ctx).await),
        // A form is answered by the client, which the agent may drive: it
        // decides only where the operator trusts client forms, and never a
        // call a rule reserves for a person.
        Some(_) if state.limits.trust_client_forms && !execution.human_only => {
            CallToolResponse::Complete(ask_with_form(state, caller, execution, ctx).await)
        }
        _ => CallToolResponse::Complete(gate::pending_result(state, execution)),
    }
}

/// 2025-11-25 with URL elicitation: show the approval URL in the client, hold
/// the call (with progress) until the decision, then finish it.
async fn hold_with_url(
    state: &McpState,
    caller: &Caller,
    execution: &Execution,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let store = &state.core.approvals;
    let id = execution.id.clone();
    let url = match url::Url::parse(&approval_url(state, execution)) {
        Ok(u) => u,
        Err(_) => return gate::pending_result(state, execution),
    };
    let peer = ctx.peer.clone();
    let message =
        format!("Agent {} wants to run {}. Open the link to approve or decline.", execution.agent, execution.tool);
    let ttl = store.ttl();
    let (elicit_id, elicit_url) = (id.clone(), url.clone());
    let mut elicit =
        tokio::spawn(async move { peer.elicit_url_with_timeout(message, elicit_url, elicit_id, Some(ttl)).await });
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
                    let _ = store.decide(&id, Decision::Cancel, &client_actor(caller));
                }
            },
            _ = ctx.ct.cancelled() => {
                store.forget(&id, "the client cancelled the call");
                elicit.abort();
                return error_result("cancelled by the client", json!({"error": "execution_cancelled", "executionId": id}));
            }
        }
    }
    elicit.abort();
    let complete = ServerNotification::CustomNotification(CustomNotification::new(
        "notifications/elicitation/complete",
        Some(json!({ "elicitationId": id })),
    ));
    let _ = ctx.peer.send_notification(complete).await;
    gate::finish_decided(state, caller, &id).await
}

/// A client that declares only form elicitation: ask in the client itself.
async fn ask_with_form(
    state: &McpState,
    caller: &Caller,
    execution: &Execution,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let store = &state.core.approvals;
    let arguments = serde_json::to_string_pretty(&execution.arguments).unwrap_or_default();
    let message = format!(
        "Agent {} wants to run {} with these arguments:\n{arguments}\n\nApprove this call?",
        execution.agent, execution.tool
    );
    let schema = ElicitationSchema::from_json_schema(
        json!({
            "type": "object",
            "properties": { "approve": { "type": "boolean", "title": format!("Run {}", execution.tool), "default": false } },
            "required": ["approve"]
        })
        .as_object()
        .cloned()
        .unwrap_or_default(),
    )
    .expect("a boolean form schema is valid");
    let params = ElicitRequestParams::FormElicitationParams { meta: None, message, requested_schema: schema };
    let actor = client_actor(caller);
    let answer = tokio::select! {
        a = ctx.peer.create_elicitation_with_timeout(params, Some(store.ttl())) => a,
        _ = ctx.ct.cancelled() => {
            store.forget(&execution.id, "the client cancelled the call");
            return error_result("cancelled by the client", json!({"error": "execution_cancelled", "executionId": execution.id}));
        }
    };
    let decision = match answer {
        Ok(r)
            if r.action == ElicitationAction::Accept
                && r.content.as_ref().and_then(|c| c.get("approve")).and_then(|v| v.as_bool()) == Some(true) =>
        {
            Decision::Accept
        }
        Ok(r) if r.action == ElicitationAction::Cancel => Decision::Cancel,
        Ok(_) => Decision::Decline,
        Err(e) => {
            tracing::warn!(execution = %execution.id, error = %e, "form elicitation failed; leaving the call to the browser");
            return gate::pending_result(state, execution);
        }
    };
    // A browser decision may have come first; then that one stands.
    let _ = store.decide(&execution.id, decision, &actor);
    gate::finish_decided(state, caller, &execution.id).await
}

/// A 2026-07-28 retry carrying the `requestState` of an earlier answer: verify
/// it, hold the call up to [`RETRY_HOLD`], then run it or answer again.
pub async fn retry(
    state: &McpState,
    caller: &Caller,
    request_state: &str,
    arguments: &serde_json::Value,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResponse {
    let digest = gatehouse_core::approvals::digest(arguments);
    let opened = state.codec.open_with(request_state, &binding(&caller.credential, &digest));
    let id = match opened.map(|bytes| String::from_utf8(bytes).unwrap_or_default()) {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!(agent = %caller.credential.agent, error = %e, "refused a requestState");
            return CallToolResponse::Complete(error_result(
                format!("the requestState was refused ({e}); make the call again without it"),
                json!({"error": "invalid_request_state", "recovery": "re_execute"}),
            ));
        }
    };
    let store = &state.core.approvals;
    match store.get(&id) {
        // Decided before this retry arrived (declined, expired, cancelled), or
        // replayed after it ran: the audit log answers; nothing runs again.
        None => return CallToolResponse::Complete(gate::settled_result(state, caller, &id)),
        Some((execution, _)) if !execution.belongs_to(&caller.credential) => {
            tracing::warn!(execution = %id, credential = %caller.credential.id, "requestState retry from another credential refused");
            return CallToolResponse::Complete(error_result(
                "this execution belongs to another credential",
                json!({"error": "execution_forbidden", "executionId": id}),
            ));
        }
        Some(_) => {}
    }
    let snapshot = tokio::select! {
        s = store.wait(&id, RETRY_HOLD) => s,
        _ = ctx.ct.cancelled() => {
            store.forget(&id, "the client cancelled the call");
            return CallToolResponse::Complete(error_result("cancelled by the client", json!({"error": "execution_cancelled", "executionId": id})));
        }
    };
    match snapshot {
        Some(s) if s.state == State::Pending => {
            CallToolResponse::InputRequired(InputRequiredResult::from_request_state(request_state.to_string()))
        }
        _ => CallToolResponse::Complete(gate::finish_decided(state, caller, &id).await),
    }
}
