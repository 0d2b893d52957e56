//! The approval engine: a call → policy → open an execution → announce the
//! pause the session's way ([`super::announce`]) → finish it once decided, or
//! answer for it from the audit log once settled.

use gatehouse_core::approvals::{self, Execution, NewExecution, OpenError, RunError};
use gatehouse_core::model::AuditEntry;
use gatehouse_core::policy::{self, Action, Rule};
use rmcp::RoleServer;
use rmcp::model::{CallToolResponse, CallToolResult, ErrorData, InputResponses, Tool};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use super::{Mode, announce, granted, input_required, resume, url_elicitation};
use crate::mcp::McpState;
use crate::mcp::tools::{self, Caller};
use crate::mcp::upstream::input_required as upstream_input;
use crate::mcp::upstream::merged::{self, HeldTool, UpstreamTool};
use crate::tool_error::{Shape, ToolErrorCode, error_result};

/// Where an exposed tool runs.
enum Target {
    /// Gatehouse's own tool.
    Builtin(&'static Tool),
    /// An upstream server's tool.
    Upstream(Box<UpstreamTool>),
}

impl Target {
    fn find(state: &McpState, name: &str) -> Option<Self> {
        tools::find(name)
            .map(Target::Builtin)
            .or_else(|| state.upstreams.find(name).map(|u| Target::Upstream(Box::new(u))))
    }

    fn tool(&self) -> &Tool {
        match self {
            Target::Builtin(t) => t,
            Target::Upstream(u) => &u.tool,
        }
    }

    fn upstream(&self) -> Option<String> {
        match self {
            Target::Builtin(_) => None,
            Target::Upstream(u) => Some(u.upstream.clone()),
        }
    }

    /// The tool's own name at its upstream.
    fn upstream_tool(&self) -> Option<String> {
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

/// Every tool a client may see: built-ins and upstream tools, minus blocked ones.
pub fn list(state: &McpState) -> Vec<Tool> {
    // The rules once for the whole list (on PostgreSQL each read checks the
    // shared version: one round trip, not one per tool). Unreadable, every
    // tool but `resume` is hidden: fail closed.
    let rules = state.core.policy.rules().inspect_err(|e| tracing::error!(error = %e, "policy unreadable")).ok();
    let upstream = state.upstreams.tools().into_iter().map(|u| u.tool);
    tools::all().iter().cloned().chain(upstream).filter(|t| visible(rules.as_ref().map(|r| r.as_slice()), t)).collect()
}

/// Whether a tool is visible in `tools/list` (blocked ones are hidden).
fn visible(rules: Option<&[Rule]>, tool: &Tool) -> bool {
    if tool.name == tools::RESUME {
        return true;
    }
    rules.is_some_and(|rules| policy::decide_with(rules, &tool.name, tools::hints(tool)).action != Action::Block)
}

/// Runs a resolved tool now (policy already passed, or the call was
/// approved as `execution`): the tool's own result, or Gatehouse's error in
/// `shape` when the upstream could not run it, or the upstream's request
/// for input (for a 2026-07-28 agent, under Gatehouse's own `requestState`).
/// `Err` is an upstream's own JSON-RPC error.
async fn run_target(
    state: &McpState,
    caller: &Caller,
    target: &Target,
    arguments: &Value,
    shape: Shape,
    execution: Option<&str>,
) -> Result<CallToolResponse, ErrorData> {
    match target {
        Target::Builtin(tool) => Ok(tools::run(state, caller, &tool.name, arguments).into()),
        Target::Upstream(tool) => {
            let answer = state.upstreams.call(tool, arguments, &caller.origin, shape, Default::default()).await?;
            let execution = execution.map(String::from);
            Ok(upstream_input::seal_call_answer(state, caller, tool, arguments, execution, 1, answer))
        }
    }
}

/// One `tools/call`, as the handler received it.
pub struct Call<'a> {
    /// Exposed tool name.
    pub name: &'a str,
    /// Arguments (`Null` when none were sent).
    pub arguments: Value,
    /// The `requestState` echoed by a 2026-07-28 retry.
    pub request_state: Option<&'a str>,
    /// The answers a 2026-07-28 retry carries (to an upstream's input requests).
    pub input_responses: Option<InputResponses>,
    /// The session's announcement mode.
    pub mode: Mode,
}

/// Handles one `tools/call`. Gatehouse's own answers (a pause, a refusal,
/// an error) are shaped for what the called tool declares ([`Shape`]): a
/// tool with an `outputSchema` never gets a `structuredContent` that is not
/// its own; `resume` declares none and keeps the structured answers.
pub async fn call(
    state: &McpState,
    caller: &Caller,
    mut call: Call<'_>,
    ctx: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    if call.request_state.is_some_and(upstream_input::is_wrapped) {
        // The retry of a call whose upstream asked for input (of the tool, or of `resume`).
        let answers = call.input_responses.take();
        return upstream_input::retry_call(state, caller, &call, answers).await;
    }
    if call.name == tools::RESUME {
        return Ok(resume::resume(state, caller, &call.arguments, call.mode, ctx).await);
    }
    if let Some(held) = state.upstreams.held_tool(call.name) {
        tracing::warn!(tool = call.name, upstream = %held.upstream, agent = %caller.credential.agent, "call to a held-back tool refused");
        return Ok(held_back(state, &held, None, held_shape(state, &held)).into());
    }
    let target = Target::find(state, call.name)
        .ok_or_else(|| ErrorData::invalid_params(format!("Unknown tool: {}", call.name), None))?;
    let shape = Shape::of(target.tool());
    if let Some(request_state) = call.request_state {
        return input_required::retry(state, caller, request_state, &call.arguments, shape, ctx).await;
    }
    // A client that declared tasks got a task, not the -32042 error, for its first call.
    if call.mode == Mode::Native && url_elicitation::uses_url_error(state, ctx) && !super::task::declared(ctx) {
        let digest = gatehouse_core::approvals::digest(&call.arguments);
        if let Some(execution) = state.core.approvals.find_live(&caller.credential.id, call.name, &digest) {
            return url_elicitation::continue_after_url_error(state, caller, &execution, shape).await;
        }
    }
    let verdict = state.core.policy.decide(call.name, tools::hints(target.tool())).map_err(|e| {
        tracing::error!(error = %e, "policy lookup failed");
        ErrorData::internal_error("policy lookup failed", None)
    })?;
    let changes_gate = tools::changes_gate(call.name);
    match verdict.action {
        Action::Allow => run_target(state, caller, &target, &call.arguments, shape, None).await,
        Action::Block => {
            tracing::warn!(tool = call.name, agent = %caller.credential.agent, "call blocked by policy");
            Ok(shape
                .fit(error_result(
                    ToolErrorCode::BlockedByPolicy,
                    format!("{} is blocked by policy rule {:?}", call.name, verdict.rule.unwrap_or_default()),
                    json!({"tool": call.name}),
                ))
                .into())
        }
        Action::RequireApproval => {
            // A person's grant lets it run now — never for a human_only call
            // (gate-changing tools are human_only too).
            if !verdict.human_only
                && !changes_gate
                && granted::lookup(state, caller, call.name, target.upstream().as_deref(), &call.arguments)
                    .await
                    .is_some()
            {
                return run_target(state, caller, &target, &call.arguments, shape, None).await;
            }
            let limit = state.limits.max_gated_arguments_bytes;
            let size = serde_json::to_vec(&call.arguments).map(|v| v.len()).unwrap_or(usize::MAX);
            if size > limit {
                tracing::warn!(tool = call.name, agent = %caller.credential.agent, size, limit, "gated call's arguments too large");
                return Ok(shape.fit(error_result(ToolErrorCode::ArgumentsTooLarge,
                    format!("the arguments of {} are {size} bytes; a call that waits for approval may carry at most {limit} (max_gated_arguments_bytes)", call.name),
                    json!({"limit": "max_gated_arguments_bytes", "max": limit, "size": size})))
                .into());
            }
            let opened = state.core.approvals.open(NewExecution {
                tool: call.name.to_string(),
                upstream: target.upstream(),
                upstream_tool: target.upstream_tool(),
                tool_digest: tool_digest(target.tool()),
                arguments: call.arguments,
                agent: caller.credential.agent.clone(),
                credential_id: caller.credential.id.clone(),
                thread: caller.credential.thread.clone(),
                owner: caller.credential.owner.clone(),
                session_id: caller.session_id.clone(),
                human_only: verdict.human_only,
                admin_only: changes_gate,
                ttl: verdict.approval_ttl,
            });
            let execution = match opened {
                Ok(execution) => execution,
                Err(e @ OpenError::TooMany { limit }) => {
                    tracing::warn!(tool = call.name, agent = %caller.credential.agent, limit, "too many live executions");
                    return Ok(shape
                        .fit(error_result(
                            ToolErrorCode::TooManyExecutions,
                            format!("{e}; wait for a decision on those first"),
                            json!({"limit": "max_executions_per_credential", "max": limit}),
                        ))
                        .into());
                }
            };
            // Written ahead: the client hears of the pause only once it would
            // survive a restart (awaited off the store's lock).
            state.core.approvals.flush().await;
            tracing::info!(execution = %execution.id, tool = call.name, agent = %execution.agent, mode = ?call.mode, "call paused for approval");
            announce::announce(state, caller, &execution, call.mode, shape, ctx).await
        }
    }
}

/// The shape of the answer to a call of a held-back tool: for an
/// `outputSchema` in the definition offered now or in the pinned one (the
/// one the agent was shown last).
fn held_shape(state: &McpState, held: &HeldTool) -> Shape {
    let pinned = state.core.pins.get(&held.upstream, &held.name).ok().flatten().and_then(|p| p.view);
    let pinned_schema = pinned.is_some_and(|v| v.definition.get("outputSchema").is_some_and(|s| !s.is_null()));
    if pinned_schema { Shape::OutputSchema } else { Shape::of(&held.tool) }
}

/// The answer for a call to a tool held back because its upstream changed
/// its definition, or added it after its tools were pinned: never
/// forwarded, and nothing of the new definition told.
fn held_back(state: &McpState, held: &HeldTool, execution_id: Option<&str>, shape: Shape) -> CallToolResult {
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

pub(super) fn gone(execution_id: &str, code: ToolErrorCode, message: String) -> CallToolResult {
    error_result(code, message, json!({"executionId": execution_id, "recovery": "re_execute"}))
}

/// After the decision: runs an approved call and returns its result (the
/// tool's own, untouched), or answers for a declined, expired or cancelled
/// one in `shape` (the request's: the call's own, or `resume`'s). For a
/// 2025-11-25 session, whose upstream's input requests are asked of it
/// during the call, so the answer is always complete.
pub async fn finish_decided(state: &McpState, caller: &Caller, id: &str, shape: Shape) -> CallToolResult {
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
pub async fn finish_decided_response(state: &McpState, caller: &Caller, id: &str, shape: Shape) -> CallToolResponse {
    let store = &state.core.approvals;
    match store.start_run(id) {
        Ok(execution) => {
            let answer = run_approved(state, caller, &execution, shape).await;
            let failed = matches!(&answer, CallToolResponse::Complete(r) if r.is_error == Some(true));
            store.finish(id, !failed, None);
            tracing::info!(execution = %id, tool = %execution.tool, failed, "approved call ran");
            answer
        }
        Err(RunError::NotApproved("running")) => shape
            .fit(error_result(
                ToolErrorCode::ExecutionRunning,
                "this call is already running in another request",
                json!({"executionId": id}),
            ))
            .into(),
        Err(_) => settled_result(state, caller, id, shape).into(),
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
pub fn settled_result(state: &McpState, caller: &Caller, id: &str, shape: Shape) -> CallToolResult {
    shape.fit(settled(state, caller, id))
}

/// The audit log's last word on execution `id`, if it was `caller`'s (its
/// credential's, or a thread predecessor's): one check for every way an agent
/// asks about a settled call (resume, a retry, a task's poll).
pub(super) fn settled_for(state: &McpState, caller: &Caller, id: &str) -> Option<AuditEntry> {
    let last = state.core.approvals.settled(id)?;
    let mine = last.credential_id.as_deref().is_some_and(|credential_id| {
        approvals::belongs_to(
            &caller.credential,
            credential_id,
            last.thread.as_deref(),
            &last.agent,
            last.owner.as_deref(),
        )
    });
    mine.then_some(last)
}

fn settled(state: &McpState, caller: &Caller, id: &str) -> CallToolResult {
    let Some(last) = settled_for(state, caller, id) else {
        return gone(id, ToolErrorCode::ExecutionNotFound, format!("no execution {id}; make the call again"));
    };
    let by = state.core.approvals.audit().decided_by(id).ok().flatten().unwrap_or_default();
    match last.state.as_str() {
        "declined" => {
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
        "expired" => gone(
            id,
            ToolErrorCode::ExecutionExpired,
            format!(
                "the approval for {} expired ({}); it did not run. Call the tool again to request a new approval.",
                last.tool,
                last.detail.as_deref().unwrap_or("nobody decided in time")
            ),
        ),
        "revoked" => gone(
            id,
            ToolErrorCode::ExecutionRevoked,
            format!("the credential that made the call to {} was revoked", last.tool),
        ),
        "completed" | "failed" => error_result(
            ToolErrorCode::ExecutionSettled,
            format!("the call to {} already ran; its result went to the request that ran it", last.tool),
            json!({"executionId": id, "state": last.state}),
        ),
        _ => gone(id, ToolErrorCode::ExecutionCancelled, format!("the call to {} was cancelled ({by})", last.tool)),
    }
}
