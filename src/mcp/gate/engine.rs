//! The approval engine: a call → policy → open an execution → announce the
//! pause the session's way ([`super::announce`]); what becomes of it once
//! decided or settled is [`super::outcome`].

use gatehouse_core::approvals::{NewExecution, OpenError};
use gatehouse_core::credentials::Credential;
use gatehouse_core::policy::{self, Action, Facts, RuleSet};
use rmcp::RoleServer;
use rmcp::model::{CallToolResponse, ErrorData, Tool};
use rmcp::service::RequestContext;
use serde_json::json;

use super::admit::{Admitted, Run, admit};
use super::outcome::{Target, held_back, held_shape, run_target, tool_digest};
use super::record::{self, AtOnce};
use super::tool_call::Call;
use super::{Mode, announce, input_required, resume, upstream_round, url_elicitation};
use crate::mcp::McpState;
use crate::mcp::tools::{self, Caller};
use crate::mcp::upstream::input_required as upstream_input;
use crate::tool_error::{Shape, ToolErrorCode, error_result};

/// Every tool a client may see: built-ins and upstream tools, minus the
/// ones blocked for it (by rules for every call, or scoped to it).
pub async fn list(state: &McpState, credential: Option<&Credential>) -> Vec<Tool> {
    // The rules once for the whole list (on PostgreSQL each read checks the
    // shared version: one round trip, not one per tool). Unreadable, every
    // tool but `resume` is hidden: fail closed.
    let rules =
        state.core.policy.current().await.inspect_err(|e| tracing::error!(error = %e, "policy unreadable")).ok();
    let upstream = state.upstreams.tools().into_iter().map(|u| (Some(u.upstream), u.tool));
    tools::all()
        .iter()
        .map(|t| (None, t.clone()))
        .chain(upstream)
        .filter(|(upstream, t)| visible(rules.as_deref(), credential, upstream.as_deref(), t))
        .map(|(_, t)| t)
        .collect()
}

/// Whether a tool is visible in `tools/list` (blocked ones are hidden; a
/// rule with a condition is decided when the call is made).
fn visible(rules: Option<&RuleSet>, credential: Option<&Credential>, upstream: Option<&str>, tool: &Tool) -> bool {
    if tool.name == tools::RESUME {
        return true;
    }
    let facts = Facts { who: credential.map(tools::who), ..Facts::tool(&tool.name, upstream, tools::hints(tool)) };
    rules.is_some_and(|rules| policy::decide_with(rules, &facts).action != Action::Block)
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
        return upstream_round::retry_call(state, caller, &call, answers).await;
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
    let upstream = target.upstream();
    let arguments = &call.arguments;
    let run = Run {
        caller,
        tool: call.name,
        upstream: upstream.as_deref(),
        definition: target.tool(),
        arguments,
        shape,
        approved: None,
    };
    let verdict = match admit(state, &run).await? {
        Admitted::Refused(answer) => return Ok(answer),
        Admitted::Run(decided_by, kept) => {
            let record = AtOnce::start(state, caller, call.name, upstream.as_deref(), arguments, (decided_by, kept));
            let answer = run_target(state, caller, &target, arguments, shape, None).await;
            return record.end(answer, ctx.ct.is_cancelled()).await;
        }
        Admitted::Ask(verdict) => verdict,
    };
    let changes_gate = tools::changes_gate(call.name);
    let limit = state.config.load().max_gated_arguments_bytes;
    let size = serde_json::to_vec(arguments).map(|v| v.len()).unwrap_or(usize::MAX);
    if size > limit {
        tracing::warn!(tool = call.name, agent = %caller.credential.agent, size, limit, "gated call's arguments too large");
        return Ok(shape.fit(error_result(ToolErrorCode::ArgumentsTooLarge,
            format!("the arguments of {} are {size} bytes; a call that waits for approval may carry at most {limit} (max_gated_arguments_bytes)", call.name),
            json!({"limit": "max_gated_arguments_bytes", "max": limit, "size": size})))
        .into());
    }
    if let Target::Builtin(_) = &target
        && let Err(refused) = tools::check_arguments(call.name, &call.arguments)
    {
        tracing::info!(tool = call.name, agent = %caller.credential.agent, "gated call refused: its arguments would not be taken");
        return Ok(shape.fit(refused).into());
    }
    let kept_arguments = record::kept(state, &verdict, upstream.as_deref(), true, &call.arguments);
    let opened = state
        .core
        .approvals
        .open(NewExecution {
            tool: call.name.to_string(),
            upstream: target.upstream(),
            upstream_tool: target.upstream_tool(),
            tool_digest: tool_digest(target.tool()),
            arguments: call.arguments,
            agent: caller.credential.agent.clone(),
            credential_id: caller.credential.id.clone(),
            thread: caller.credential.thread.clone(),
            owner: caller.credential.owner.clone(),
            owner_id: caller.credential.owner_id,
            session_id: caller.session_id.clone(),
            human_only: verdict.human_only,
            admin_only: changes_gate,
            ttl: verdict.approval_ttl,
            asked_by: Some(record::decided_by(&verdict)),
            kept_arguments,
        })
        .await;
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
    tracing::info!(execution = %execution.id, tool = call.name, agent = %execution.agent, mode = ?call.mode, "call paused for approval");
    announce::announce(state, caller, &execution, call.mode, shape, ctx).await
}
