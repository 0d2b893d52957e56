//! How a pause is announced: the session's mode and what its client
//! declared pick one of the ways in this folder (a client that declared
//! tasks gets a task).

use gatehouse_core::approvals::Execution;
use rmcp::RoleServer;
use rmcp::model::{CallToolResponse, ErrorData, ProtocolVersion};
use rmcp::service::RequestContext;

use super::{Mode, agent_decides, browser, form, input_required, task, url_elicitation};
use crate::mcp::McpState;
use crate::mcp::tools::Caller;
use crate::tool_error::Shape;

/// Answers a call that just paused, the session's way, in `shape` (what
/// the called tool declares).
pub async fn announce(
    state: &McpState,
    caller: &Caller,
    execution: &Execution,
    mode: Mode,
    shape: Shape,
    ctx: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    match mode {
        // A task answers now and needs no request held open, whatever the
        // mode; except where the model may decide itself (through `resume`).
        _ if task::declared(ctx) && !agent_decides::may_decide(state, mode, execution) => {
            Ok(task::created(state, execution))
        }
        Mode::Native => native(state, caller, execution, shape, ctx).await,
        _ if agent_decides::may_decide(state, mode, execution) => {
            Ok(agent_decides::pending_result_for_agent(state, execution, shape).into())
        }
        _ => Ok(browser::pending_result(state, execution, shape).into()),
    }
}

/// Native mode: what the client declared decides; the browser answer where
/// it declared nothing usable.
async fn native(
    state: &McpState,
    caller: &Caller,
    execution: &Execution,
    shape: Shape,
    ctx: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    if url_elicitation::uses_url_error(state, ctx) {
        url_elicitation::notify_when_decided(state, execution, ctx);
        return Err(url_elicitation::url_required_error(state, execution));
    }
    let modern = ctx.protocol_version().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    if modern {
        return Ok(input_required::input_required(state, caller, execution));
    }
    let elicitation = ctx.client_capabilities().and_then(|c| c.elicitation);
    Ok(CallToolResponse::Complete(match elicitation {
        Some(e) if e.url.is_some() => url_elicitation::hold_with_url(state, caller, execution, shape, ctx).await,
        // A form is answered by the client, which the agent may drive: it
        // decides only where the operator trusts client forms, and never a
        // call a rule reserves for a person.
        Some(_) if state.config.load().trust_client_forms && !execution.human_only => {
            form::ask_with_form(state, caller, execution, shape, ctx).await
        }
        _ => browser::pending_result(state, execution, shape),
    }))
}
