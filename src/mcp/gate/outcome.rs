//! What becomes of a gated call: where it runs ([`Target`]), running it
//! once approved, and the answer for one that will not run (held back,
//! declined, expired, revoked, cancelled) or that settled, from the audit
//! log. The engine ([`super::engine`]) and the ways a pause is announced
//! (its modes) both end here; nothing here imports them.

use gatehouse_core::approvals::{self, Execution, ExecutionId, RunError, State};
use gatehouse_core::model::AuditEntry;
use rmcp::model::{CallToolResponse, CallToolResult, ErrorData, Tool};
use serde_json::{Value, json};

use crate::mcp::McpState;
use crate::mcp::tools::{self, Caller};
use crate::mcp::upstream::input_required as upstream_input;
use crate::mcp::upstream::merged::{self, HeldTool, UpstreamTool};
use crate::tool_error::{Shape, ToolErrorCode, error_result};

/// Where an exposed tool runs.
pub(super) enum Target {
    /// Gatehouse's own tool.
    Builtin(&'static Tool),
    /// An upstream server's tool.
    Upstream(Box<UpstreamTool>),
}

impl Target {
    pub(super) fn find(state: &McpState, name: &str) -> Option<Self> {
        tools::find(name)
            .map(Target::Builtin)
            .or_else(|| state.upstreams.find(name).map(|u| Target::Upstream(Box::new(u))))
    }

    pub(super) fn tool(&self) -> &Tool {
        match self {
            Target::Builtin(t) => t,
            Target::Upstream(u) => &u.tool,
        }
    }

    pub(super) fn upstream(&self) -> Option<String> {
        match self {
            Target::Builtin(_) => None,
            Target::Upstream(u) => Some(u.upstream.clone()),
        }
    }

    /// The tool's own name at its upstream.
    pub(super) fn upstream_tool(&self) -> Option<String> {
        match self {
            Target::Builtin(_) => None,
            Target::Upstream(u) => Some(u.name.clone()),
        }
    }

    /// Whether this is still exactly what `execution` was approved to run:
    /// the same upstream, the same tool there, the same definition.
    fn is_what_was_approved(&self, execution: &Execution) -> bool {
        self.upstream() == execution.upstream
            && self.upstream_tool() == execution.upstream_tool
            && tool_digest(self.tool()) == execution.tool_digest
    }
}

/// SHA-256 of what a person approves when they approve a call to a tool:
/// the tool exactly as agents are shown it, every field, under its exposed
/// name — the same digest as a pin's ([`merged::tool_digest`]).
pub fn tool_digest(tool: &Tool) -> String {
    merged::tool_digest(tool, &tool.name)
}

/// Runs a resolved tool now (policy already passed, or the call was
/// approved as `execution`): the tool's own result, or Gatehouse's error in
/// `shape` when the upstream could not run it, or the upstream's request
/// for input (for a 2026-07-28 agent, under Gatehouse's own `requestState`).
/// `Err` is an upstream's own JSON-RPC error.
pub(super) async fn run_target(
    state: &McpState,
    caller: &Caller,
    target: &Target,
    arguments: &Value,
    shape: Shape,
    execution: Option<&str>,
) -> Result<CallToolResponse, ErrorData> {
    match target {
        Target::Builtin(tool) => Ok(tools::run(state, caller, &tool.name, arguments, execution).await.into()),
        Target::Upstream(tool) => {
            let answer = state.upstreams.call(tool, arguments, &caller.origin, shape, Default::default()).await?;
            let execution = execution.map(String::from);
            Ok(upstream_input::seal_call_answer(state, caller, tool, arguments, execution, 1, answer))
        }
    }
}

/// The shape of the answer to a call of a held-back tool: for an
/// `outputSchema` in the definition offered now or in the pinned one (the
/// one the agent was shown last).
pub(super) fn held_shape(state: &McpState, held: &HeldTool) -> Shape {
    let pinned = state.core.pins.get(&held.upstream, &held.name).ok().flatten().and_then(|p| p.view);
    let pinned_schema = pinned.is_some_and(|v| v.definition.get("outputSchema").is_some_and(|s| !s.is_null()));
    if pinned_schema { Shape::OutputSchema } else { Shape::of(&held.tool) }
}

/// The answer for a call to a tool held back because its upstream changed
/// its definition, or added it after its tools were pinned: never
/// forwarded, and nothing of the new definition told.
pub(super) fn held_back(state: &McpState, held: &HeldTool, execution_id: Option<&str>, shape: Shape) -> CallToolResult {
    let (tool, upstream): (&str, &str) = (&held.tool.name, &held.upstream);
    let mut details = json!({"tool": tool, "upstream": upstream, "reviewUrl": format!("{}{}", state.base_url, gatehouse_core::model::routes::TOOLS)});
    if let Some(id) = execution_id {
        details["executionId"] = json!(id);
        details["recovery"] = json!("re_execute");
    }
    let why = if held.is_new {
        format!("{tool} is new at its upstream {upstream}, whose tools are pinned")
    } else {
        format!("{tool} changed at its upstream {upstream} since its definition was pinned")
    };
    shape.fit(error_result(
        ToolErrorCode::ToolChanged,
        format!(
            "{why}; it is held back until an admin reviews the change. Do not retry until the user says it was accepted."
        ),
        details,
    ))
}

/// The answer for a call that will not run (gone, expired, revoked): make it again.
pub(super) fn gone(execution_id: &str, code: ToolErrorCode, message: String) -> CallToolResult {
    error_result(code, message, json!({"executionId": execution_id, "recovery": "re_execute"}))
}

/// After the decision: runs an approved call and returns its result (the
/// tool's own, untouched), or answers for a declined, expired or cancelled
/// one in `shape` (the request's: the call's own, or `resume`'s). For a
/// 2025-11-25 session, whose upstream's input requests are asked of it
/// during the call, so the answer is always complete.
pub async fn finish_decided(state: &McpState, caller: &Caller, id: &ExecutionId, shape: Shape) -> CallToolResult {
    match finish_decided_response(state, caller, id, shape).await {
        CallToolResponse::Complete(result) => result,
        _ => shape.fit(error_result(
            ToolErrorCode::UpstreamFailed,
            "the upstream asked for input in a form this session cannot answer",
            json!({"executionId": id}),
        )),
    }
}

/// [`finish_decided`], where the upstream may still ask a 2026-07-28 agent
/// for input (the approval covered the call; its input rounds continue it).
pub async fn finish_decided_response(
    state: &McpState,
    caller: &Caller,
    id: &ExecutionId,
    shape: Shape,
) -> CallToolResponse {
    let store = &state.core.approvals;
    match store.start_run(id).await {
        Ok(execution) => {
            let answer = run_approved(state, caller, &execution, shape).await;
            if matches!(answer, CallToolResponse::InputRequired(_)) {
                // Its input rounds carry it on (gate::upstream_round), each once.
                store.suspend(id, "the upstream asked the agent for input; its answers continue the call");
                super::record::awaits_input(state, id.as_str(), true).await;
                tracing::info!(execution = %id, tool = %execution.tool, "approved call waits for the agent's input");
                return answer;
            }
            let failure = match &answer {
                CallToolResponse::Complete(r) if r.is_error == Some(true) => {
                    Some(super::record::failure(r, execution.upstream.as_deref()))
                }
                _ => None,
            };
            let failed = failure.is_some();
            store.finish(id, !failed, failure.as_deref());
            tracing::info!(execution = %id, tool = %execution.tool, failed, "approved call ran");
            answer
        }
        Err(RunError::NotApproved(State::Running)) => shape
            .fit(error_result(
                ToolErrorCode::ExecutionRunning,
                "this call is already running in another request",
                json!({"executionId": id}),
            ))
            .into(),
        Err(_) => settled_result(state, caller, id, shape).await.into(),
    }
}

/// Runs exactly what was approved: the same upstream's same tool with the
/// same definition, or nothing.
pub(super) async fn run_approved(
    state: &McpState,
    caller: &Caller,
    execution: &Execution,
    shape: Shape,
) -> CallToolResponse {
    let id = &execution.id;
    if let Some(held) = state.upstreams.held_tool(&execution.tool) {
        tracing::warn!(execution = %id, tool = %execution.tool, "approved tool is held back (its definition changed); refused");
        return held_back(state, &held, Some(id), shape).into();
    }
    let Some(target) = Target::find(state, &execution.tool) else {
        return shape
            .fit(error_result(
                ToolErrorCode::ToolUnavailable,
                format!("{} is no longer available (its upstream may be down)", execution.tool),
                json!({"tool": execution.tool, "executionId": id}),
            ))
            .into();
    };
    if !target.is_what_was_approved(execution) {
        tracing::warn!(execution = %id, tool = %execution.tool, "approved tool changed before it ran; refused");
        return shape.fit(error_result(
            ToolErrorCode::ToolChanged,
            format!(
                "{} changed after it was approved (another upstream, or a new definition); it did not run. Make the call again to ask anew.",
                execution.tool
            ),
            json!({"tool": execution.tool, "executionId": id, "recovery": "re_execute"}),
        )).into();
    }
    // The answer goes to `resume` (or a held call), not to the original
    // request: an upstream's JSON-RPC error becomes an error result.
    run_target(state, caller, &target, &execution.arguments, shape, Some(id)).await.unwrap_or_else(|e| {
        shape
            .fit(error_result(
                ToolErrorCode::UpstreamError,
                format!("{} failed at its upstream: {}", execution.tool, e.message),
                json!({"executionId": id, "code": e.code.0, "message": e.message, "data": e.data}),
            ))
            .into()
    })
}

/// The answer for an execution that is no longer live, from the audit log,
/// in `shape` (the request's).
pub async fn settled_result(state: &McpState, caller: &Caller, id: &ExecutionId, shape: Shape) -> CallToolResult {
    shape.fit(settled(state, caller, id).await)
}

/// The audit log's last word on execution `id`, if it was `caller`'s (its
/// credential's, or a thread predecessor's): one check for every way an agent
/// asks about a settled call (resume, a retry, a task's poll).
pub(super) async fn settled_for(state: &McpState, caller: &Caller, id: &ExecutionId) -> Option<(AuditEntry, String)> {
    let (last, by) = state.core.approvals.settled(id).await?;
    let mine = last.credential_id.as_deref().is_some_and(|credential_id| {
        approvals::belongs_to(
            &caller.credential,
            credential_id,
            last.thread.as_deref(),
            &last.agent,
            (last.owner.as_deref(), last.owner_id),
        )
    });
    mine.then_some((last, by))
}

async fn settled(state: &McpState, caller: &Caller, id: &ExecutionId) -> CallToolResult {
    let Some((last, by)) = settled_for(state, caller, id).await else {
        return gone(id, ToolErrorCode::ExecutionNotFound, format!("no execution {id}; make the call again"));
    };
    let cancelled =
        || gone(id, ToolErrorCode::ExecutionCancelled, format!("the call to {} was cancelled ({by})", last.tool));
    match last.state {
        State::Declined => {
            // The person's reason (the declined entry's detail) tells the
            // agent how to change course.
            let mut details = json!({"executionId": id, "decidedBy": by});
            let text = match &last.detail {
                Some(reason) => {
                    details["reason"] = json!(reason);
                    format!(
                        "The call to {} was declined ({by}) with this reason: {reason}\nDo not retry it as it was; take the reason into account.",
                        last.tool
                    )
                }
                None => format!("The call to {} was declined ({by}). Do not retry it unless the user asks.", last.tool),
            };
            error_result(ToolErrorCode::ExecutionDeclined, text, details)
        }
        State::Expired => gone(
            id,
            ToolErrorCode::ExecutionExpired,
            format!(
                "the approval for {} expired ({}); it did not run. Call the tool again to request a new approval.",
                last.tool,
                last.detail.as_deref().unwrap_or("nobody decided in time")
            ),
        ),
        State::Revoked => gone(
            id,
            ToolErrorCode::ExecutionRevoked,
            format!("the credential that made the call to {} was revoked", last.tool),
        ),
        State::Completed | State::Failed => error_result(
            ToolErrorCode::ExecutionSettled,
            format!("the call to {} already ran; its result went to the request that ran it", last.tool),
            json!({"executionId": id, "state": last.state}),
        ),
        State::Cancelled => cancelled(),
        // Not settled: the audit log's last word is still pending, approved
        // or running (another replica holds the call, or it moved on between
        // the caller's look and this read). It has always been answered as
        // cancelled, and still is: changing what the agent hears is not
        // this refactoring's to do.
        State::Pending | State::Approved | State::Running => cancelled(),
        // Audit-only states of requests that never pause (a grant's or the
        // policy's at once): no execution an agent holds ends in them.
        // Answered as before.
        State::Allowed | State::Blocked | State::Limited | State::Shadow => cancelled(),
    }
}
