//! A 2026-07-28 agent's retry of a call whose upstream asked for input (the
//! state was sealed by [`crate::mcp::upstream::input_required`]): the gate
//! checks it against what runs now before the answers go upstream.

use gatehouse_core::approvals::digest;
use gatehouse_core::policy::{Action, CallDetail, Facts};
use rmcp::model::{CallToolResponse, ErrorData, InputResponses};
use serde_json::{Value, json};

use super::granted;
use super::outcome::tool_digest;
use super::tool_call::Call;
use crate::mcp::McpState;
use crate::mcp::tools::{self, Caller};
use crate::mcp::upstream::input_required::{self as upstream_input, Continuation, ToolRound};
use crate::tool_error::{Shape, ToolErrorCode, error_result};

/// A 2026-07-28 agent's retry of a `tools/call` (of the tool, or of `resume`
/// for an approved one) carrying a state [`is_wrapped`]: opened, checked
/// against the call and against what runs now (the same upstream tool and
/// definition; policy still lets it run without a new approval), then the
/// answers and the upstream's state go to the upstream. Refusals are error
/// results, as the gate's own are.
pub async fn retry_call(
    state: &McpState,
    caller: &Caller,
    call: &Call<'_>,
    input_responses: Option<InputResponses>,
) -> Result<CallToolResponse, ErrorData> {
    let shape = match state.upstreams.find(call.name) {
        Some(tool) if call.name != tools::RESUME => Shape::of(&tool.tool),
        _ => Shape::Structured,
    };
    let credential = &caller.credential;
    let refuse = |code: ToolErrorCode, message: String| -> Result<CallToolResponse, ErrorData> {
        Ok(shape.fit(error_result(code, message, json!({"tool": call.name, "recovery": "re_execute"}))).into())
    };
    let round = upstream_input::open_tool_round(state, credential, call.request_state.unwrap_or_default())?;
    let ToolRound { exposed, digest: approved_digest, tool_digest: approved_tool, execution, arguments, .. } = round;
    let resumed = call.name == tools::RESUME
        && execution.is_some()
        && call.arguments.get("executionId").and_then(Value::as_str) == execution.as_deref();
    let arguments = if call.name == exposed && digest(&call.arguments) == approved_digest {
        call.arguments.clone()
    } else if resumed {
        arguments.unwrap_or_default()
    } else {
        let why = "it belongs to another call (another tool, or other arguments)";
        return Err(upstream_input::refused(credential, why));
    };
    if state.upstreams.held_tool(&exposed).is_some() {
        return refuse(ToolErrorCode::ToolChanged, format!("{exposed} changed at its upstream; it is held back"));
    }
    let Some(tool) = state.upstreams.find(&exposed) else {
        return refuse(ToolErrorCode::ToolUnavailable, format!("{exposed} is no longer available"));
    };
    if tool.upstream != round.upstream || tool.name != round.name || tool_digest(&tool.tool) != approved_tool {
        let why = format!("{exposed} changed since the call began (another upstream, or a new definition)");
        return refuse(ToolErrorCode::ToolChanged, why);
    }
    // The rules may have changed between rounds: a block now holds, and a
    // call that did not need approval then needs it (or a grant) now.
    let annotations = tools::annotations(&tool.tool);
    let facts = Facts {
        who: Some(tools::who(&caller.credential)),
        call: Some(CallDetail { arguments: &arguments, annotations: &annotations, now_ms: state.core.clock.now_ms() }),
        ..Facts::tool(&exposed, Some(&tool.upstream), tools::hints(&tool.tool))
    };
    let verdict = state.core.policy.decide(&facts).await.map_err(|e| {
        tracing::error!(error = %e, "policy lookup failed");
        ErrorData::internal_error("policy lookup failed", None)
    })?;
    match verdict.action {
        Action::Block => {
            return refuse(ToolErrorCode::BlockedByPolicy, super::record::blocked_message(&exposed, &verdict));
        }
        Action::RequireApproval
            if execution.is_none()
                && (verdict.human_only || granted::lookup(state, caller, &exposed, &arguments).await.is_none()) =>
        {
            let why = format!("{exposed} now needs approval; make the call again without the requestState");
            return refuse(ToolErrorCode::InvalidRequestState, why);
        }
        _ => {}
    }
    if execution.is_some()
        && let Err(why) = state.upstreams.spend(call.request_state.unwrap_or_default())
    {
        return Err(upstream_input::refused(credential, &why));
    }
    let answers = Continuation { input_responses, request_state: round.state };
    let answer = state.upstreams.call(&tool, &arguments, &caller.origin, shape, answers).await?;
    Ok(upstream_input::seal_call_answer(state, caller, &tool, &arguments, execution, round.round + 1, answer))
}
