//! The gate: policy decides each call; a gated call becomes a paused
//! execution, announced the session's way (browser, native or model mode);
//! `resume` waits for the decision and returns the real result.

use std::time::Duration;

use gatehouse_core::approvals::{Decision, Execution, NewExecution, RunError, State};
use gatehouse_core::clock::rfc3339;
use gatehouse_core::policy::Action;
use rmcp::RoleServer;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, ErrorData, Tool};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use super::McpState;
use super::native::{self, Mode};
use super::tools::{self, Caller, ResumeAction, ResumeArgs, error_result};
use crate::upstream::UpstreamTool;

/// How long one `resume` call waits before answering "still pending"; under
/// the TypeScript SDK's 60 s default request timeout.
pub const RESUME_SLICE: Duration = Duration::from_secs(45);

/// The approval page of an execution.
pub fn approval_url(state: &McpState, execution: &Execution) -> String {
    match &execution.session_id {
        Some(sid) => format!("{}/resume/{}?mcp_session_id={sid}", state.base_url, execution.id),
        None => format!("{}/resume/{}", state.base_url, execution.id),
    }
}

/// The browser-mode answer to a paused call (not an error: the call is fine, it waits).
pub fn pending_result(state: &McpState, execution: &Execution) -> CallToolResult {
    let url = approval_url(state, execution);
    let mut result = CallToolResult::structured(json!({
        "status": "user_approval_required",
        "executionId": execution.id,
        "approvalUrl": url,
        "expiresAt": rfc3339(execution.expires_at_ms),
    }));
    result.content = vec![ContentBlock::text(format!(
        "The call to {} needs a person's approval. Ask the user to open {url} to approve or decline it, \
         then call the `resume` tool with {{\"executionId\": \"{}\"}} to wait for the decision and get the result. \
         It expires at {}.",
        execution.tool,
        execution.id,
        rfc3339(execution.expires_at_ms)
    ))];
    result
}

/// Where an exposed tool runs.
enum Target {
    /// Gatehouse's own tool.
    Builtin(&'static Tool),
    /// An upstream server's tool.
    Upstream(UpstreamTool),
}

impl Target {
    fn find(state: &McpState, name: &str) -> Option<Self> {
        tools::find(name).map(Target::Builtin).or_else(|| state.upstreams.find(name).map(Target::Upstream))
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
}

/// Every tool a client may see: built-ins and upstream tools, minus blocked ones.
pub fn list(state: &McpState) -> Vec<Tool> {
    let upstream = state.upstreams.tools().into_iter().map(|u| u.tool);
    tools::all().iter().cloned().chain(upstream).filter(|t| visible(state, t)).collect()
}

/// Whether a tool is visible in `tools/list` (blocked ones are hidden).
fn visible(state: &McpState, tool: &Tool) -> bool {
    if tool.name == tools::RESUME {
        return true;
    }
    state.core.policy.decide(&tool.name, tools::hints(tool)).map(|v| v.action != Action::Block).unwrap_or(false)
}

/// Runs an exposed tool now (policy already passed, or the call was
/// approved). `Err` is an upstream's own JSON-RPC error.
pub async fn run(
    state: &McpState,
    caller: &Caller,
    name: &str,
    arguments: &Value,
) -> Result<CallToolResult, ErrorData> {
    Ok(match Target::find(state, name) {
        Some(Target::Builtin(_)) => tools::run(state, caller, name, arguments),
        Some(Target::Upstream(tool)) => return state.upstreams.call(&tool, arguments, &caller.origin).await,
        None => error_result(
            format!("{name} is no longer available (its upstream may be down)"),
            json!({"error": "tool_unavailable", "tool": name}),
        ),
    })
}

/// One `tools/call`, as the handler received it.
pub struct Call<'a> {
    /// Exposed tool name.
    pub name: &'a str,
    /// Arguments (`Null` when none were sent).
    pub arguments: Value,
    /// The `requestState` echoed by a 2026-07-28 retry.
    pub request_state: Option<&'a str>,
    /// The session's announcement mode.
    pub mode: Mode,
}

/// Handles one `tools/call`.
pub async fn call(
    state: &McpState,
    caller: &Caller,
    call: Call<'_>,
    ctx: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    if call.name == tools::RESUME {
        return Ok(resume(state, caller, &call.arguments, call.mode, ctx).await.into());
    }
    let target = Target::find(state, call.name)
        .ok_or_else(|| ErrorData::invalid_params(format!("Unknown tool: {}", call.name), None))?;
    if let Some(request_state) = call.request_state {
        return Ok(native::retry(state, caller, request_state, &call.arguments, ctx).await);
    }
    if call.mode == Mode::Native && native::uses_url_error(state, ctx) {
        let digest = gatehouse_core::approvals::digest(&call.arguments);
        if let Some(execution) = state.core.approvals.find_live(&caller.credential.id, call.name, &digest) {
            return native::continue_after_url_error(state, caller, &execution).await;
        }
    }
    let verdict = state.core.policy.decide(call.name, tools::hints(target.tool())).map_err(|e| {
        tracing::error!(error = %e, "policy lookup failed");
        ErrorData::internal_error("policy lookup failed", None)
    })?;
    match verdict.action {
        Action::Allow => Ok(run(state, caller, call.name, &call.arguments).await?.into()),
        Action::Block => {
            tracing::warn!(tool = call.name, agent = %caller.credential.agent, "call blocked by policy");
            Ok(error_result(
                format!("{} is blocked by policy rule {:?}", call.name, verdict.rule.unwrap_or_default()),
                json!({"error": "blocked_by_policy", "tool": call.name}),
            )
            .into())
        }
        Action::RequireApproval => {
            let execution = state.core.approvals.open(NewExecution {
                tool: call.name.to_string(),
                upstream: target.upstream(),
                arguments: call.arguments,
                agent: caller.credential.agent.clone(),
                credential_id: caller.credential.id.clone(),
                owner: caller.credential.owner.clone(),
                session_id: caller.session_id.clone(),
                human_only: verdict.human_only,
            });
            tracing::info!(execution = %execution.id, tool = call.name, agent = %execution.agent, mode = ?call.mode, "call paused for approval");
            Ok(match call.mode {
                Mode::Native => return native::hold(state, caller, &execution, ctx).await,
                Mode::Model if state.allow_model_decisions && !execution.human_only => {
                    model_pending_result(state, &execution).into()
                }
                _ => pending_result(state, &execution).into(),
            })
        }
    }
}

/// Model mode: the browser answer, plus how the agent may decide itself.
fn model_pending_result(state: &McpState, execution: &Execution) -> CallToolResult {
    let mut result = pending_result(state, execution);
    result.content.push(ContentBlock::text(format!(
        "This session may decide itself: after confirming with the user, call `resume` with \
         {{\"executionId\": \"{}\", \"action\": \"accept\"}} (or \"decline\").",
        execution.id
    )));
    result
}

fn gone(execution_id: &str, error: &str, message: String) -> CallToolResult {
    error_result(message, json!({"error": error, "executionId": execution_id, "recovery": "re_execute"}))
}

/// Whether `caller` is the agent that made the execution (any of its sessions).
fn same_agent(caller: &Caller, execution: &Execution) -> bool {
    caller.credential.id == execution.credential_id
        || (caller.credential.agent == execution.agent && caller.credential.owner == execution.owner)
}

/// `resume {executionId, action?}`: waits one slice for the decision, then
/// runs the approved call and returns its result, or says why it will not run.
async fn resume(
    state: &McpState,
    caller: &Caller,
    arguments: &Value,
    mode: Mode,
    ctx: &RequestContext<RoleServer>,
) -> CallToolResult {
    let args: ResumeArgs = match serde_json::from_value(arguments.clone()) {
        Ok(a) => a,
        Err(e) => return error_result(format!("invalid arguments: {e}"), json!({"error": "invalid_arguments"})),
    };
    let id = args.execution_id;
    let store = &state.core.approvals;
    let Some((execution, _)) = store.get(&id) else {
        return settled_result(state, caller, &id);
    };
    if !same_agent(caller, &execution) {
        tracing::warn!(execution = %id, agent = %caller.credential.agent, "resume refused: another agent's execution");
        return error_result(
            "this execution belongs to another agent",
            json!({"error": "execution_forbidden", "executionId": id}),
        );
    }
    if let Some(action) = args.action {
        if mode != Mode::Model || !state.allow_model_decisions {
            return error_result(
                "this session may not decide calls itself; a person decides on the approval page",
                json!({"error": "model_decision_not_allowed", "executionId": id}),
            );
        }
        if execution.human_only {
            return error_result(
                "a policy rule requires a person to decide this call",
                json!({"error": "human_only", "executionId": id, "approvalUrl": approval_url(state, &execution)}),
            );
        }
        let decision = match action {
            ResumeAction::Accept => Decision::Accept,
            ResumeAction::Decline => Decision::Decline,
        };
        let _ = store.decide(&id, decision, &format!("agent:{}", caller.credential.agent));
    }
    let snapshot = tokio::select! {
        s = store.wait(&id, RESUME_SLICE) => s,
        _ = ctx.ct.cancelled() => {
            store.forget(&id, "the client cancelled its resume request");
            return gone(&id, "execution_cancelled", "cancelled by the client".into());
        }
    };
    match snapshot {
        Some(s) if s.state == State::Pending => pending_result(state, &execution),
        _ => finish_decided(state, caller, &id).await,
    }
}

/// After the decision: runs an approved call and returns its result, or
/// answers for a declined, expired or cancelled one.
pub async fn finish_decided(state: &McpState, caller: &Caller, id: &str) -> CallToolResult {
    let store = &state.core.approvals;
    match store.start_run(id) {
        Ok(execution) => {
            // The answer goes to `resume` (or a held call), not to the original
            // request: an upstream's JSON-RPC error becomes an error result.
            let result = run(state, caller, &execution.tool, &execution.arguments).await.unwrap_or_else(|e| {
                error_result(
                    format!("{} failed at its upstream: {}", execution.tool, e.message),
                    json!({"error": "upstream_error", "executionId": id, "code": e.code.0, "message": e.message, "data": e.data}),
                )
            });
            let failed = result.is_error == Some(true);
            store.finish(id, !failed, None);
            tracing::info!(execution = %id, tool = %execution.tool, failed, "approved call ran");
            result
        }
        Err(RunError::NotApproved("running")) => error_result(
            "this call is already running in another request",
            json!({"error": "execution_running", "executionId": id}),
        ),
        Err(_) => settled_result(state, caller, id),
    }
}

/// The answer for an execution that is no longer live, from the audit log.
pub fn settled_result(state: &McpState, caller: &Caller, id: &str) -> CallToolResult {
    let Some(last) = state.core.approvals.settled(id) else {
        return gone(id, "execution_not_found", format!("no execution {id}; make the call again"));
    };
    if last.agent != caller.credential.agent || last.owner != caller.credential.owner {
        return gone(id, "execution_not_found", format!("no execution {id}; make the call again"));
    }
    let by = state.core.approvals.audit().decided_by(id).ok().flatten().unwrap_or_default();
    match last.state.as_str() {
        "declined" => error_result(
            format!("The call to {} was declined ({by}). Do not retry it unless the user asks.", last.tool),
            json!({"error": "execution_declined", "executionId": id, "decidedBy": by}),
        ),
        "expired" => {
            gone(id, "execution_expired", format!("nobody decided on {} in time; make the call again", last.tool))
        }
        "completed" | "failed" => error_result(
            format!("the call to {} already ran; its result went to the request that ran it", last.tool),
            json!({"error": "execution_settled", "executionId": id, "state": last.state}),
        ),
        _ => gone(id, "execution_cancelled", format!("the call to {} was cancelled ({by})", last.tool)),
    }
}
