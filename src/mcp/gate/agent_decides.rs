//! The agent decides for itself ([`Mode::AgentDecides`], asked for with
//! `elicitation_mode=model`, opt-in with `allow_model_decisions`): the agent
//! may decide its own call through `resume {executionId, action}` — never a
//! `human_only` call, never one that changes the gate.

use gatehouse_core::approvals::{Decide, Decision, Execution};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

use super::Mode;
use super::browser::{approval_url, pending_result};
use crate::mcp::McpState;
use crate::mcp::tools::{Caller, ResumeAction};
use crate::tool_error::{Shape, ToolErrorCode, error_result};

/// Whether this session's pauses are announced with the model's own way to decide.
pub fn may_decide(state: &McpState, mode: Mode, execution: &Execution) -> bool {
    mode == Mode::AgentDecides && state.config.load().allow_model_decisions && !execution.human_only
}

/// The browser answer (in `shape`), plus how the agent may decide itself.
pub fn pending_result_for_agent(state: &McpState, execution: &Execution, shape: Shape) -> CallToolResult {
    let mut result = pending_result(state, execution, shape);
    result.content.push(ContentBlock::text(format!(
        "This session may decide itself: after confirming with the user, call `resume` with \
         {{\"executionId\": \"{}\", \"action\": \"accept\"}} (or \"decline\").",
        execution.id
    )));
    result
}

/// Records the agent's own decision on `execution`, or says why it may not
/// make one (the session did not ask to decide itself, the operator did not
/// allow it, or a person must decide).
pub async fn decide(
    state: &McpState,
    caller: &Caller,
    mode: Mode,
    execution: &Execution,
    action: ResumeAction,
) -> Result<(), CallToolResult> {
    let id = &execution.id;
    if mode != Mode::AgentDecides || !state.config.load().allow_model_decisions {
        return Err(error_result(
            ToolErrorCode::ModelDecisionNotAllowed,
            "this session may not decide calls itself; a person decides on the approval page",
            json!({"executionId": id}),
        ));
    }
    if execution.human_only {
        return Err(error_result(
            ToolErrorCode::HumanOnly,
            "a policy rule requires a person to decide this call",
            json!({"executionId": id, "approvalUrl": approval_url(state, execution)}),
        ));
    }
    let decision = match action {
        ResumeAction::Accept => Decision::Accept,
        ResumeAction::Decline => Decision::Decline,
    };
    let actor = gatehouse_core::model::Actor::agent(&caller.credential.agent).to_string();
    let _ = state.core.approvals.decide(Decide::actor(id, decision, &actor)).await;
    Ok(())
}
