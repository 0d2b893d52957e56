//! The gate: policy decides each call; a gated call becomes a paused
//! execution, answered in browser mode with the approval URL; `resume` waits
//! for the decision and returns the real result.

use std::time::Duration;

use gatehouse_core::approvals::{Execution, NewExecution, RunError, State};
use gatehouse_core::clock::rfc3339;
use gatehouse_core::policy::Action;
use rmcp::model::{CallToolResult, ContentBlock, ErrorData};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::McpState;
use super::tools::{self, Caller, ResumeArgs, error_result};

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

/// Whether a tool is visible in `tools/list` (blocked ones are hidden).
pub fn visible(state: &McpState, name: &str) -> bool {
    if name == tools::RESUME {
        return true;
    }
    let Some(tool) = tools::find(name) else { return false };
    state.core.policy.decide(name, tools::hints(&tool)).map(|v| v.action != Action::Block).unwrap_or(false)
}

/// Handles one `tools/call`.
pub async fn call(
    state: &McpState,
    caller: &Caller,
    name: &str,
    arguments: Value,
    cancel: &CancellationToken,
) -> Result<CallToolResult, ErrorData> {
    if name == tools::RESUME {
        return Ok(resume(state, caller, &arguments, cancel).await);
    }
    let tool = tools::find(name).ok_or_else(|| ErrorData::invalid_params(format!("Unknown tool: {name}"), None))?;
    let verdict = state.core.policy.decide(name, tools::hints(&tool)).map_err(|e| {
        tracing::error!(error = %e, "policy lookup failed");
        ErrorData::internal_error("policy lookup failed", None)
    })?;
    match verdict.action {
        Action::Allow => Ok(tools::run(state, caller, name, &arguments)),
        Action::Block => {
            tracing::warn!(tool = name, agent = %caller.credential.agent, "call blocked by policy");
            Ok(error_result(
                format!("{name} is blocked by policy rule {:?}", verdict.rule.unwrap_or_default()),
                json!({"error": "blocked_by_policy", "tool": name}),
            ))
        }
        Action::RequireApproval => {
            let execution = state.core.approvals.open(NewExecution {
                tool: name.to_string(),
                upstream: None,
                arguments,
                agent: caller.credential.agent.clone(),
                credential_id: caller.credential.id.clone(),
                owner: caller.credential.owner.clone(),
                session_id: caller.session_id.clone(),
                human_only: verdict.human_only,
            });
            tracing::info!(execution = %execution.id, tool = name, agent = %execution.agent, "call paused for approval");
            Ok(pending_result(state, &execution))
        }
    }
}

fn gone(execution_id: &str, error: &str, message: String) -> CallToolResult {
    error_result(message, json!({"error": error, "executionId": execution_id, "recovery": "re_execute"}))
}

/// Whether `caller` is the agent that made the execution (any of its sessions).
fn same_agent(caller: &Caller, execution: &Execution) -> bool {
    caller.credential.id == execution.credential_id
        || (caller.credential.agent == execution.agent && caller.credential.owner == execution.owner)
}

/// `resume {executionId}`: waits one slice for the decision, then runs the
/// approved call and returns its result, or says why it will not run.
async fn resume(state: &McpState, caller: &Caller, arguments: &Value, cancel: &CancellationToken) -> CallToolResult {
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
    let snapshot = tokio::select! {
        s = store.wait(&id, RESUME_SLICE) => s,
        _ = cancel.cancelled() => {
            store.forget(&id, "the client cancelled its resume request");
            return gone(&id, "execution_cancelled", "cancelled by the client".into());
        }
    };
    let Some(snapshot) = snapshot else { return settled_result(state, caller, &id) };
    match snapshot.state {
        State::Pending => pending_result(state, &execution),
        State::Approved => match store.start_run(&id) {
            Ok(execution) => {
                let result = tools::run(state, caller, &execution.tool, &execution.arguments);
                let failed = result.is_error == Some(true);
                store.finish(&id, !failed, None);
                tracing::info!(execution = %id, tool = %execution.tool, failed, "approved call ran");
                result
            }
            Err(RunError::NotApproved(s)) if s == "running" => error_result(
                "this call is already running in another resume",
                json!({"error": "execution_running", "executionId": id}),
            ),
            Err(_) => settled_result(state, caller, &id),
        },
        _ => settled_result(state, caller, &id),
    }
}

/// The answer for an execution that is no longer live, from the audit log.
fn settled_result(state: &McpState, caller: &Caller, id: &str) -> CallToolResult {
    let Some(last) = state.core.approvals.settled(id) else {
        return gone(id, "execution_not_found", format!("no execution {id}; make the call again"));
    };
    if last.agent != caller.credential.agent || last.owner != caller.credential.owner {
        return gone(id, "execution_not_found", format!("no execution {id}; make the call again"));
    }
    let by = last.actor.clone().unwrap_or_default();
    match last.state.as_str() {
        "declined" => error_result(
            format!("The call to {} was declined ({by}). Do not retry it unless the user asks.", last.tool),
            json!({"error": "execution_declined", "executionId": id, "decidedBy": by}),
        ),
        "expired" => gone(id, "execution_expired", format!("nobody decided on {} in time; make the call again", last.tool)),
        "completed" | "failed" => error_result(
            format!("the call to {} already ran; its result went to the resume that ran it", last.tool),
            json!({"error": "execution_settled", "executionId": id, "state": last.state}),
        ),
        _ => gone(id, "execution_cancelled", format!("the call to {} was cancelled", last.tool)),
    }
}
