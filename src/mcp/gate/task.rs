//! Tasks (SEP-2663, `io.modelcontextprotocol/tasks`): a client that declares
//! the extension gets a task for a paused call, at once, instead of an answer
//! it must hold a request open for. Its `tasks/get` shows the call
//! `input_required` (one URL elicitation: the approval page, as the other
//! modes give) while it waits for a person; once approved, the poll that
//! finds it so starts the run in the background (`working`), and the result
//! is kept in the database ([`TaskResults`]) for the polls that follow,
//! on any replica and after a restart (`completed`, the tool's own result).
//! Declined, expired or revoked: `completed` with Gatehouse's `isError`
//! answer, as the other modes give; cancelled: `cancelled`.
//!
//! The task id is the execution's id: the pause is already durable and
//! owned, so a task needs no record of its own until it has a result. Only
//! the credential that made the call (or its re-issued successor on the same
//! thread) sees a task; to anyone else it does not exist (`-32602`, as for
//! an unknown id).

use std::sync::Arc;
use std::time::Duration;

use gatehouse_core::approvals::{
    self, Decide, Decision, Execution, ExecutionId, Snapshot, State, TaskResult, TaskResults,
};
use gatehouse_core::clock::rfc3339;
use gatehouse_core::model::AuditEntry;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolResponse, CreateTaskResult, DetailedTask, ErrorData, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use rmcp::service::RequestContext;
use tokio_util::sync::CancellationToken;

use super::browser::approval_url;
use super::input_required::url_request;
use super::outcome::{run_approved, settled_result};
use crate::mcp::McpState;
use crate::mcp::tools::{self, Caller};
use crate::mcp::upstream::mcp_session::{Downstream, Origin};
use crate::tool_error::{Shape, ToolErrorCode, error_result, task_not_found};

/// How often a client is asked to poll a task.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// The key of the approval page's URL elicitation in `inputRequests`.
pub const APPROVAL_KEY: &str = "approval";

/// Whether the client of `ctx` declared the tasks extension (in the
/// request's `_meta` on 2026-07-28, at `initialize` on a session).
pub fn declared(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities().is_some_and(|c| c.supports_tasks())
}

fn results(state: &McpState) -> TaskResults {
    TaskResults::new(state.core.db.clone(), state.core.clock.clone())
}

/// The shape of Gatehouse's own answers for a call of `tool` (its
/// `outputSchema`, if it still has one).
fn shape_of(state: &McpState, tool: &str) -> Shape {
    tools::find(tool)
        .map(Shape::of)
        .or_else(|| state.upstreams.find(tool).map(|u| Shape::of(&u.tool)))
        .unwrap_or(Shape::Structured)
}

/// A task's base fields; `ttl_ms` counts from its creation.
fn task(id: &str, status: TaskStatus, created_ms: i64, updated_ms: i64, ttl_ms: i64) -> Task {
    Task::new(id, status, rfc3339(created_ms), rfc3339(updated_ms)).with_ttl_ms(ttl_ms.max(1) as u64)
}

/// A live task: it may wait until its execution expires, then keep its
/// result for the retention.
fn live(execution: &Execution, status: TaskStatus, updated_ms: i64) -> Task {
    let ttl = execution.expires_at_ms - execution.created_at_ms + approvals::RESULT_RETENTION.as_millis() as i64;
    task(&execution.id, status, execution.created_at_ms, updated_ms, ttl)
        .with_poll_interval_ms(POLL_INTERVAL.as_millis() as u64)
}

fn waiting_message(state: &McpState, execution: &Execution) -> String {
    format!(
        "The call to {} waits for a person's approval: ask the user to open {} to approve or decline it.",
        execution.tool,
        approval_url(state, execution)
    )
}

/// The answer to a call that just paused, for a client that declared tasks.
pub fn created(state: &McpState, execution: &Execution) -> CallToolResponse {
    let task = live(execution, TaskStatus::InputRequired, execution.created_at_ms)
        .with_status_message(waiting_message(state, execution));
    CallToolResponse::Task(CreateTaskResult::new(task))
}

/// What a task id names, for its owner.
enum Found {
    /// Finished as a task: its stored result.
    Stored(TaskResult),
    /// A live execution and its state.
    Live(Arc<Execution>, Snapshot),
    /// Settled without a stored result: the audit log's last word.
    Settled(AuditEntry),
}

/// Finds `task_id` for `caller`: `-32602` when it is unknown or not theirs.
async fn find(state: &McpState, caller: &Caller, task_id: &str) -> Result<Found, ErrorData> {
    // Only execution ids name Gatehouse's tasks (no database read for others).
    if !task_id.starts_with("exec_") {
        return Err(task_not_found());
    }
    let id = ExecutionId::from(task_id);
    if let Some(stored) = stored(state, task_id).await? {
        return if stored.belongs_to(&caller.credential) { Ok(Found::Stored(stored)) } else { Err(task_not_found()) };
    }
    if let Some((execution, snapshot)) = state.core.approvals.get(&id) {
        return if execution.belongs_to(&caller.credential) {
            Ok(Found::Live(execution, snapshot))
        } else {
            Err(task_not_found())
        };
    }
    let Some((last, _)) = super::outcome::settled_for(state, caller, &id).await else {
        return Err(task_not_found());
    };
    // It may have finished between the first read and this one.
    if matches!(last.state, State::Completed | State::Failed)
        && let Some(stored) = stored(state, task_id).await?
    {
        return Ok(Found::Stored(stored));
    }
    Ok(Found::Settled(last))
}

async fn stored(state: &McpState, task_id: &str) -> Result<Option<TaskResult>, ErrorData> {
    let (results, id) = (results(state), task_id.to_string());
    let read = state.core.run(move |_| results.get(&id)).await;
    read.and_then(|got| got).map_err(|e| {
        tracing::error!(task = %task_id, error = %e, "task results unreadable");
        ErrorData::internal_error("task results unreadable", None)
    })
}

fn completed(id: &str, created_ms: i64, updated_ms: i64, ttl_ms: i64, result: serde_json::Value) -> DetailedTask {
    let result: JsonObject = match result {
        serde_json::Value::Object(result) => result,
        _ => JsonObject::new(),
    };
    DetailedTask::new(
        task(id, TaskStatus::Completed, created_ms, updated_ms, ttl_ms),
        TaskPayload::Completed { result },
    )
}

/// `tasks/get`: the task's state now; an approved call starts running here.
pub async fn get(state: &McpState, caller: &Caller, task_id: &str) -> Result<GetTaskResult, ErrorData> {
    let detailed = match find(state, caller, task_id).await? {
        Found::Stored(done) => completed(
            task_id,
            done.created_at_ms,
            done.finished_at_ms,
            done.expires_at_ms - done.created_at_ms,
            done.result,
        ),
        Found::Live(execution, snapshot) => {
            let now = state.core.clock.now_ms();
            match snapshot.state {
                State::Pending => DetailedTask::new(
                    live(&execution, TaskStatus::InputRequired, execution.created_at_ms)
                        .with_status_message(waiting_message(state, &execution)),
                    TaskPayload::InputRequired { input_requests: url_request(state, &execution) },
                ),
                State::Approved => {
                    start(state, caller, &execution).await;
                    working(&execution, now)
                }
                // Running here or on another replica; or settling just now.
                _ => working(&execution, now),
            }
        }
        Found::Settled(last) => settled(state, caller, task_id, &last).await,
    };
    Ok(GetTaskResult::new(detailed))
}

fn working(execution: &Execution, now: i64) -> DetailedTask {
    DetailedTask::new(
        live(execution, TaskStatus::Working, now)
            .with_status_message(format!("{} was approved and runs", execution.tool)),
        TaskPayload::Working,
    )
}

/// A task settled without a result of its own: cancelled, or Gatehouse's
/// answer (declined, expired, revoked, abandoned) in the tool's shape.
async fn settled(state: &McpState, caller: &Caller, task_id: &str, last: &AuditEntry) -> DetailedTask {
    let id = ExecutionId::from(task_id);
    let first = state.core.run(move |core| core.approvals.audit().timeline(&id)).await;
    let created = first.ok().and_then(Result::ok).and_then(|t| t.first().map(|e| e.at_ms)).unwrap_or(last.at_ms);
    let ttl = last.at_ms - created + approvals::RESULT_RETENTION.as_millis() as i64;
    if last.state == State::Cancelled {
        let mut task = task(task_id, TaskStatus::Cancelled, created, last.at_ms, ttl);
        task.status_message = last.detail.clone();
        return DetailedTask::new(task, TaskPayload::Cancelled);
    }
    let answer = settled_result(state, caller, &ExecutionId::from(task_id), shape_of(state, &last.tool)).await;
    completed(
        task_id,
        created,
        last.at_ms,
        ttl,
        serde_json::to_value(crate::mcp::results::Served::served(answer)).unwrap_or_default(),
    )
}

/// Starts an approved call in the background (once: only one `start_run`
/// wins), owned by the server's task tracker; bounded by the upstream's
/// `call_timeout`, and by the credential's live executions. Its result is
/// stored before the execution settles, so no poll misses it.
async fn start(state: &McpState, caller: &Caller, execution: &Execution) {
    let store = &state.core.approvals;
    // On a cluster, run where the client polls.
    store.take_over(&execution.id).await;
    let Ok(execution) = store.start_run(&execution.id).await else { return };
    let shape = shape_of(state, &execution.tool);
    // Nobody waits on a request for it: what an upstream asks back has no one
    // to reach, and the poll ending must not cancel the call.
    let origin = Origin {
        downstream: Downstream::new(),
        request_id: caller.origin.request_id.clone(),
        progress: None,
        ct: CancellationToken::new(),
        // Declares nothing it could not answer: an upstream that needs the
        // agent's input refuses (-32021) or asks, and the asking is refused below.
        capabilities: Default::default(),
        log_level: None,
        modern: true,
    };
    let caller = Caller { credential: caller.credential.clone(), session_id: caller.session_id.clone(), origin };
    let (state, tasks) = (state.clone(), state.tasks.clone());
    tasks.spawn(async move {
        let result = match run_approved(&state, &caller, &execution, shape).await {
            CallToolResponse::Complete(result) => result,
            // Nobody holds a request open for a task's run, so an upstream's
            // questions (or its own task) have no one to reach.
            _ => shape.fit(error_result(
                ToolErrorCode::UpstreamError,
                "the upstream asked for input while the approved task ran; tasks cannot carry its questions yet: call the tool again without tasks",
                serde_json::json!({"executionId": execution.id}),
            )),
        };
        let failed = result.is_error == Some(true);
        let failure = failed.then(|| super::record::failure(&result, execution.upstream.as_deref()));
        // Inlined as a complete result: `resultType` included (SEP-2663 clients check it).
        let value = serde_json::to_value(crate::mcp::results::Served::served(result)).unwrap_or_default();
        if let Err(e) = results(&state).save(&execution, "completed", &value) {
            tracing::error!(execution = %execution.id, error = %e, "a task's result could not be stored");
        }
        state.core.approvals.finish(&execution.id, !failed, failure.as_deref());
        tracing::info!(execution = %execution.id, tool = %execution.tool, failed, "approved task ran");
    });
}

/// `tasks/cancel`: cancels a call still waiting (or approved, not yet
/// running), audited as a client's cancellation; a running call finishes
/// and keeps its result; a finished task stays as it is (idempotent).
pub async fn cancel(state: &McpState, caller: &Caller, task_id: &str) -> Result<(), ErrorData> {
    if let Found::Live(execution, _) = find(state, caller, task_id).await? {
        let store = &state.core.approvals;
        store.take_over(&execution.id).await;
        if store.forget(&execution.id, "the client cancelled the task (tasks/cancel)") {
            tracing::info!(execution = %execution.id, agent = %caller.credential.agent, "task cancelled by the client");
        }
    }
    Ok(())
}

/// `tasks/update`: the approval is given on its page, not by the client, so
/// there is nothing to answer; only a declined or cancelled approval request
/// (the user would not open the page) cancels the call, as in URL
/// elicitation. Acknowledged either way.
pub async fn update(
    state: &McpState,
    caller: &Caller,
    task_id: &str,
    responses: &rmcp::model::InputResponses,
) -> Result<(), ErrorData> {
    let Found::Live(execution, snapshot) = find(state, caller, task_id).await? else { return Ok(()) };
    let refused = responses
        .get(APPROVAL_KEY)
        .and_then(|r| r.get("action"))
        .and_then(|a| a.as_str())
        .is_some_and(|a| a == "decline" || a == "cancel");
    if refused && snapshot.state == State::Pending {
        let store = &state.core.approvals;
        store.take_over(&execution.id).await;
        let _ = store.decide(Decide::actor(&execution.id, Decision::Cancel, &super::form::client_actor(caller))).await;
    }
    Ok(())
}
