//! An upstream's tasks (SEP-2663, `io.modelcontextprotocol/tasks`) on their
//! way to the agent, and back.
//!
//! A 2026-07-28 upstream hears that the agent takes tasks only when the
//! agent declared the extension on its request (`relayable_per_request`
//! in the registry). A `tools/call` it answers with a task reaches the
//! agent as a task whose id is Gatehouse's own ([`super::task_ids`]).
//!
//! `tasks/get`, `tasks/update` and `tasks/cancel` of such an id go, opened,
//! to the upstream over its shared connection (the task lives at the
//! upstream, not on a connection), with the agent's capabilities in `_meta`;
//! what comes back names the agent's id, never the upstream's. The status,
//! timestamps, poll interval and payload are the upstream's; the ttl is the
//! upstream's up to [`MAX_TASK_TTL`] (the id's own lifetime). An
//! `input_required` task's input requests are bounded as an upstream's
//! `input_required` answer is ([`super::input_required`]).
//!
//! Policy: the call was decided (allowed, or run under a person's grant)
//! when it was made, and its task is that call. Polling, answering and
//! cancelling it are not decided again: they carry nothing to the upstream
//! beyond continuing the call it was allowed to make, like a 2025-11-25
//! call still in flight when a rule changes. A rule that blocks the tool
//! since then stops new calls, not the task already running (which the
//! agent may still cancel).

use rmcp::model::{
    CancelTaskParams, CancelTaskRequest, ClientRequest, ErrorData, GetTaskParams, GetTaskRequest, GetTaskResult,
    InputResponses, ServerResult, TaskPayload, UpdateTaskParams, UpdateTaskRequest,
};

use super::Upstreams;
use super::errors::sanitize;
use super::forwarding::send;
use super::input_required::check_input_requests;
use super::link::{self, Link};
pub use super::task_ids::{MAX_TASK_ID_BYTES, MAX_TASK_TTL, Owner, PREFIX, owner};
use super::task_ids::{agent_view, open};
use crate::mcp::McpState;
use crate::mcp::tools::Caller;
use crate::tool_error::task_not_found;

/// The error a `tasks/*` request gets when the upstream's answer is unusable.
fn upstream_failed(upstream: &str, what: &str, why: &str) -> ErrorData {
    ErrorData::internal_error(sanitize(&format!("upstream {upstream} {what} failed: {why}")), None)
}

impl Upstreams {
    /// The shared connection to upstream `name`, for one of its tasks: "not
    /// found" when no such upstream is configured now or it no longer speaks
    /// 2026-07-28 (the task cannot be there), an error while it is down.
    fn task_link(&self, name: &str, what: &str) -> Result<Link, ErrorData> {
        let shared = {
            let slots = self.slots();
            let slot = slots.get(name).ok_or_else(task_not_found)?;
            slot.link.clone()
        };
        let link = shared.ok_or_else(|| upstream_failed(name, what, "the upstream is down"))?;
        if !link::is_modern(&link.peer) {
            return Err(task_not_found());
        }
        Ok(link)
    }
}

/// `tasks/get` of an upstream's task: the upstream's answer under the agent's id.
pub async fn get(state: &McpState, caller: &Caller, task_id: &str) -> Result<GetTaskResult, ErrorData> {
    let opened = open(state, &caller.credential, task_id)?;
    let what = "tasks/get";
    let link = state.upstreams.task_link(&opened.upstream, what)?;
    let request = ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(opened.task)));
    let ServerResult::GetTaskResult(got) = send(&link, what, request, &caller.origin).await? else {
        return Err(upstream_failed(&opened.upstream, what, "the upstream answered with something else"));
    };
    let mut detailed = got.task;
    if let TaskPayload::InputRequired { input_requests } = &detailed.payload {
        check_input_requests(input_requests).map_err(|why| upstream_failed(&opened.upstream, what, &why))?;
    }
    agent_view(&mut detailed.task, task_id);
    // `resultType: complete`, and the upstream's `_meta` left behind.
    Ok(GetTaskResult::new(detailed))
}

/// `tasks/update` of an upstream's task: the agent's answers to the upstream.
pub async fn update(
    state: &McpState,
    caller: &Caller,
    task_id: &str,
    responses: &InputResponses,
) -> Result<(), ErrorData> {
    let opened = open(state, &caller.credential, task_id)?;
    let what = "tasks/update";
    let link = state.upstreams.task_link(&opened.upstream, what)?;
    let params = UpdateTaskParams::new(opened.task, responses.clone());
    let request = ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(params));
    acknowledged(&opened.upstream, what, send(&link, what, request, &caller.origin).await?)
}

/// `tasks/cancel` of an upstream's task, passed on (cancellation is the
/// upstream's to carry out; `tasks/get` shows when it has).
pub async fn cancel(state: &McpState, caller: &Caller, task_id: &str) -> Result<(), ErrorData> {
    let opened = open(state, &caller.credential, task_id)?;
    let what = "tasks/cancel";
    let link = state.upstreams.task_link(&opened.upstream, what)?;
    let request = ClientRequest::CancelTaskRequest(CancelTaskRequest::new(CancelTaskParams::new(opened.task)));
    acknowledged(&opened.upstream, what, send(&link, what, request, &caller.origin).await?)
}

/// An upstream's answer to `tasks/update` or `tasks/cancel`: an empty acknowledgement.
fn acknowledged(upstream: &str, what: &str, answer: ServerResult) -> Result<(), ErrorData> {
    match answer {
        ServerResult::TaskAckResult(_) | ServerResult::EmptyResult(_) => Ok(()),
        _ => Err(upstream_failed(upstream, what, "the upstream answered with something else")),
    }
}
