//! The `resume` tool: waits one slice for a paused call's decision, then runs
//! the approved call and returns its result, or says why it will not run.
//! Only the credential that made the call (or its re-issued successor on the
//! same thread) may resume it.

use std::time::Duration;

use gatehouse_core::approvals::{ExecutionId, Waited};
use rmcp::RoleServer;
use rmcp::model::{CallToolResponse, CallToolResult};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use super::Mode;
use super::agent_decides;
use super::browser::pending_result;
use super::outcome::{finish_decided_response, gone, settled_result};
use crate::mcp::McpState;
use crate::mcp::tools::{Caller, ResumeArgs};
use crate::tool_error::{Shape, ToolErrorCode, error_result};

/// How long one `resume` call waits before answering "still pending"; under
/// the TypeScript SDK's 60 s default request timeout.
pub const RESUME_SLICE: Duration = Duration::from_secs(45);

fn forbidden(id: &str) -> CallToolResult {
    error_result(
        ToolErrorCode::ExecutionForbidden,
        "this execution belongs to another credential",
        json!({"executionId": id}),
    )
}

/// Waits up to `slice` for `id`'s decision on behalf of a request (`resume`,
/// a 2026-07-28 retry). The client cancelling the request cancels the call,
/// as it abandoned it; Gatehouse shutting down does not: the pause is stored
/// and continues after the restart, so the wait just answers "still pending".
pub(super) async fn wait(
    state: &McpState,
    id: &ExecutionId,
    slice: Duration,
    ctx: &RequestContext<RoleServer>,
) -> Waited {
    let store = &state.core.approvals;
    // Biased: at shutdown the token is cancelled before the requests are, so
    // this branch is seen first and nothing is forgotten.
    tokio::select! {
        biased;
        _ = state.shutdown.cancelled() => Waited::StillPending,
        waited = store.wait_or_forget(id, slice, ctx.ct.cancelled()) => waited,
    }
}

/// `resume {executionId, action?}`: waits one slice for the decision, then
/// runs the approved call and returns its result, or says why it will not run.
/// `resume` declares no `outputSchema`: its own answers keep their
/// `structuredContent` whatever the paused tool declares
/// ([`Shape::Structured`]), and the tool's result passes as it is (or its
/// upstream's request for input, for a 2026-07-28 agent).
pub async fn resume(
    state: &McpState,
    caller: &Caller,
    arguments: &Value,
    mode: Mode,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResponse {
    let args: ResumeArgs = match serde_json::from_value(arguments.clone()) {
        Ok(a) => a,
        Err(e) => {
            return error_result(ToolErrorCode::InvalidArguments, format!("invalid arguments: {e}"), Value::Null)
                .into();
        }
    };
    let id = args.execution_id;
    let store = &state.core.approvals;
    let Some((execution, _)) = store.get(&id) else {
        return settled_result(state, caller, &id, Shape::Structured).await.into();
    };
    if !execution.belongs_to(&caller.credential) {
        tracing::warn!(execution = %id, agent = %caller.credential.agent, credential = %caller.credential.id, "resume refused: another credential's execution");
        return forbidden(&id).into();
    }
    // Run where the agent is: on a cluster, take it over from its owner.
    store.take_over(&id).await;
    if let Some(action) = args.action
        && let Err(refused) = agent_decides::decide(state, caller, mode, &execution, action).await
    {
        return refused.into();
    }
    match wait(state, &id, RESUME_SLICE, ctx).await {
        Waited::StillPending => pending_result(state, &execution, Shape::Structured).into(),
        Waited::Cancelled => gone(&id, ToolErrorCode::ExecutionCancelled, "cancelled by the client".into()).into(),
        Waited::Moved(_) | Waited::NotLive => finish_decided_response(state, caller, &id, Shape::Structured).await,
    }
}
