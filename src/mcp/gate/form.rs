//! Native mode for a client that declares only form elicitation, where the
//! operator trusts client forms (`trust_client_forms`): the form is answered
//! by the client, which the agent may drive, so the answer is audited as the
//! agent's, never a person's, and never decides a `human_only` call.

use gatehouse_core::approvals::{Decide, Decision, Execution};
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::RequestContext;
use serde_json::json;

use super::browser::pending_result;
use super::outcome::finish_decided;
use crate::mcp::McpState;
use crate::mcp::tools::Caller;
use crate::tool_error::{Shape, ToolErrorCode, error_result};

/// The audit actor of an answer that came over the agent's own connection:
/// never a person, whatever the client shows.
pub(super) fn client_actor(caller: &Caller) -> String {
    gatehouse_core::model::Actor::Agent {
        name: caller.credential.agent.clone(),
        via: Some(gatehouse_core::model::Via::Client),
    }
    .to_string()
}

/// A client that declares only form elicitation: ask in the client itself;
/// Gatehouse's own answers in `shape` (the called tool's).
pub async fn ask_with_form(
    state: &McpState,
    caller: &Caller,
    execution: &Execution,
    shape: Shape,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let store = &state.core.approvals;
    // Held inside this request: it ends with it (or its session).
    store.hold(&execution.id);
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
    let ttl = std::time::Duration::from_millis((execution.expires_at_ms - state.core.clock.now_ms()).max(0) as u64);
    let answer = tokio::select! {
        a = ctx.peer.create_elicitation_with_timeout(params, Some(ttl)) => a,
        _ = ctx.ct.cancelled() => {
            store.forget(&execution.id, "the client cancelled the call");
            return shape.fit(error_result(ToolErrorCode::ExecutionCancelled,"cancelled by the client", json!({"executionId": execution.id})));
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
            return pending_result(state, execution, shape);
        }
    };
    // A browser decision may have come first; then that one stands.
    let _ = store.decide(Decide::actor(&execution.id, decision, &actor)).await;
    finish_decided(state, caller, &execution.id, shape).await
}
