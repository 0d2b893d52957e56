//! A 2026-07-28 agent's retry of a call whose upstream asked for input (the
//! state was sealed by [`crate::mcp::upstream::input_required`]): the state
//! is spent (once, in the database), checked against what runs now, and the
//! round goes through the same procedure as a first call ([`super::admit`])
//! before the answers go upstream.

use gatehouse_core::approvals::{ExecutionId, State, digest};
use gatehouse_core::single_use::SingleUse;
use rmcp::model::{CallToolResponse, ErrorData, InputResponses};
use serde_json::{Value, json};

use super::admit::{Admitted, Run, admit};
use super::outcome::tool_digest;
use super::record::AtOnce;
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
    // One use of this state, on every replica and after a restart: a replay
    // would run the upstream again with other answers.
    let token = call.request_state.unwrap_or_default();
    spend(state, token).await.map_err(|why| upstream_input::refused(credential, &why))?;
    if let Some(id) = &execution {
        still_running(state, id).await.map_err(|why| upstream_input::refused(credential, &why))?;
        // Its deadline moves while the round runs: the sweep never ends a
        // call in the middle of one.
        super::record::awaits_input(state, id, true).await;
    }
    // The same procedure as a first call: the rules may have changed between
    // rounds (a block now holds; a call that did not need approval then needs
    // it, or a grant, now), each round counts against the rates, and each is
    // on the record.
    let run = Run {
        caller,
        tool: &exposed,
        upstream: Some(&tool.upstream),
        definition: &tool.tool,
        arguments: &arguments,
        shape,
        approved: execution.as_deref(),
    };
    let decided_by = match admit(state, &run).await? {
        Admitted::Run(decided_by, kept) => (decided_by, kept),
        Admitted::Refused(answer) => return Ok(answer),
        Admitted::Ask(_) => {
            let why = format!("{exposed} now needs approval; make the call again without the requestState");
            return refuse(ToolErrorCode::InvalidRequestState, why);
        }
    };
    // The first call asked; this is the agent's `round.round`-th answer.
    let next = round.round + 1;
    let record = AtOnce::start(state, caller, &exposed, Some(&tool.upstream), &arguments, decided_by)
        .round(round.round, execution.as_deref());
    let answers = Continuation { input_responses, request_state: round.state };
    let answer = state
        .upstreams
        .call(&tool, &arguments, &caller.origin, shape, answers)
        .await
        .map(|answer| upstream_input::seal_call_answer(state, caller, &tool, &arguments, execution, next, answer));
    record.end(answer, caller.origin.ct.is_cancelled()).await
}

/// Spends a wrapped state ([`SingleUse`]): refused if it was used before.
async fn spend(state: &McpState, token: &str) -> Result<(), String> {
    let token = token.to_string();
    let until = state.core.clock.now_ms() + upstream_input::STATE_TTL.as_millis() as i64;
    let spent =
        state.core.run(move |core| SingleUse::new(core.db.clone(), core.clock.clone()).spend(&token, until)).await;
    match spent {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err("it was already used: each round of a call runs once".into()),
        Ok(Err(e)) | Err(e) => {
            tracing::error!(error = %e, "could not record a spent requestState");
            Err("Gatehouse could not record its use; try again".into())
        }
    }
}

/// Whether the approved execution `id` still goes on (its last word on the
/// record is `running`: not cancelled, revoked, failed or done since).
async fn still_running(state: &McpState, id: &str) -> Result<(), String> {
    let execution = ExecutionId::from(id.to_string());
    let latest = state.core.run(move |core| core.approvals.audit().latest(&execution)).await;
    match latest {
        Ok(Ok(Some(entry))) if entry.state == State::Running => Ok(()),
        Ok(Ok(Some(entry))) => Err(format!("the call {id} is no longer running (it is {})", entry.state.as_str())),
        Ok(Ok(None)) => Err(format!("no call {id}")),
        Ok(Err(e)) | Err(e) => {
            tracing::error!(error = %e, "could not read an execution's state");
            Err("Gatehouse could not read the call's state; try again".into())
        }
    }
}
