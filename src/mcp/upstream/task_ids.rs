//! Gatehouse's ids for upstreams' tasks (SEP-2663): an upstream's task
//! reaches the agent under an id of Gatehouse's own, the upstream's name and
//! its task id sealed with the request-state codec under [`PREFIX`], bound to
//! the credential (or its thread's line, as the gate's own states are) and
//! to a domain of its own. No record is kept: the id carries everything, and
//! an id that was altered, has expired or belongs to another credential is
//! refused exactly as an unknown one (`-32602` "task not found",
//! [`task_not_found`]). Forwarding `tasks/*` is [`super::tasks`].

use std::time::Duration;

use gatehouse_core::credentials::Credential;
use rmcp::model::{CreateTaskResult, ErrorData, SealOptions, Task};
use serde::{Deserialize, Serialize};

use crate::mcp::McpState;
use crate::tool_error::task_not_found;

/// What begins the id of every upstream's task Gatehouse hands an agent.
pub const PREFIX: &str = "gh-upstream-task.";
/// The sealed ids' associated-data domain (the other sealed values' differ).
const DOMAIN: &str = "gatehouse/upstream-task/v1";
/// The payload's tag.
const TAG: &str = "upstream_task";
/// Longest task id an upstream may hand back (Gatehouse's own id carries it,
/// and agents send that in the `Mcp-Name` header).
pub const MAX_TASK_ID_BYTES: usize = 256;
/// How long Gatehouse's id for an upstream's task stays good: the upstream's
/// ttl, but never longer than this (nor forever when it gives none).
pub const MAX_TASK_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Who answers for a task id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// Gatehouse's own tasks (a gated call, its id an execution's), and
    /// every id that names nothing: the gate answers those "not found".
    Gate,
    /// An upstream's task, under Gatehouse's sealed id.
    Upstream,
}

/// Where a `tasks/*` request for `task_id` goes: the one routing decision.
pub fn owner(task_id: &str) -> Owner {
    if task_id.starts_with(PREFIX) { Owner::Upstream } else { Owner::Gate }
}

/// The payload sealed into Gatehouse's task id.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Sealed {
    /// Always [`TAG`].
    t: String,
    /// The upstream that runs the task.
    pub(super) upstream: String,
    /// The upstream's own task id.
    pub(super) task: String,
}

/// The associated data an id is sealed with: this domain and whose it is.
fn binding(credential: &Credential) -> Vec<u8> {
    format!("{DOMAIN}|{}", credential.principal()).into_bytes()
}

/// The ttl the agent is told (and the id's lifetime), in milliseconds.
fn bounded_ttl_ms(upstream: Option<u64>) -> u64 {
    let max = MAX_TASK_TTL.as_millis() as u64;
    upstream.unwrap_or(max).clamp(1, max)
}

/// An upstream's `CreateTaskResult`, checked against the bounds (its `_meta`
/// dropped: nothing of it is Gatehouse's to pass on).
pub(super) fn checked(created: CreateTaskResult) -> Result<CreateTaskResult, String> {
    let id = &created.task.task_id;
    if id.is_empty() || id.len() > MAX_TASK_ID_BYTES {
        return Err(format!("the upstream's task id is {} bytes; 1 to {MAX_TASK_ID_BYTES} are passed on", id.len()));
    }
    Ok(CreateTaskResult::new(created.task))
}

/// The agent's view of an upstream's task: Gatehouse's id, the bounded ttl.
pub(super) fn agent_view(task: &mut Task, agent_id: &str) {
    task.task_id = agent_id.to_string();
    task.ttl_ms = Some(bounded_ttl_ms(task.ttl_ms));
}

/// The task an upstream's `tools/call` created, as its agent gets it: under
/// Gatehouse's id, sealed for `credential`.
pub fn seal(state: &McpState, credential: &Credential, upstream: &str, created: CreateTaskResult) -> CreateTaskResult {
    let mut task = created.task;
    let sealed = Sealed { t: TAG.into(), upstream: upstream.to_string(), task: task.task_id.clone() };
    let ttl = Duration::from_millis(bounded_ttl_ms(task.ttl_ms));
    let payload = serde_json::to_vec(&sealed).unwrap_or_default();
    let id = state.codec.seal_with(&payload, &SealOptions::new().associated_data(&binding(credential)).ttl(ttl));
    agent_view(&mut task, &format!("{PREFIX}{id}"));
    CreateTaskResult::new(task)
}

/// Opens Gatehouse's id `task_id` for `credential`; any failure is "not
/// found" to the agent (the reason is logged).
pub(super) fn open(state: &McpState, credential: &Credential, task_id: &str) -> Result<Sealed, ErrorData> {
    let refuse = |why: &str| {
        tracing::warn!(agent = %credential.agent, credential = %credential.id, why, "refused an upstream task id");
        task_not_found()
    };
    let sealed = task_id.strip_prefix(PREFIX).ok_or_else(|| refuse("it is not one Gatehouse gave"))?;
    let payload = state.codec.open_with(sealed, &binding(credential)).map_err(|e| refuse(&e.to_string()))?;
    let opened: Sealed = serde_json::from_slice(&payload).map_err(|_| refuse("its payload is not Gatehouse's"))?;
    if opened.t != TAG {
        return Err(refuse("its payload is not Gatehouse's"));
    }
    Ok(opened)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::TaskStatus;

    #[test]
    fn only_gatehouses_sealed_prefix_routes_to_an_upstream() {
        assert_eq!(owner("exec_abc"), Owner::Gate);
        assert_eq!(owner("nonexistent-task-id"), Owner::Gate);
        assert_eq!(owner(&format!("{PREFIX}x")), Owner::Upstream);
        // An upstream input state is not a task id, and the other way round.
        assert_eq!(owner(super::super::input_required::PREFIX), Owner::Gate);
        assert!(!PREFIX.starts_with(super::super::input_required::PREFIX));
    }

    #[test]
    fn an_upstreams_task_id_and_ttl_are_bounded() {
        let task = |id: &str| CreateTaskResult::new(Task::new(id, TaskStatus::Working, "t", "t"));
        assert!(checked(task("a-uuid")).is_ok());
        assert!(checked(task("")).is_err());
        assert!(checked(task(&"x".repeat(MAX_TASK_ID_BYTES + 1))).unwrap_err().contains("256"));
        let max = MAX_TASK_TTL.as_millis() as u64;
        assert_eq!(bounded_ttl_ms(Some(300_000)), 300_000);
        assert_eq!(bounded_ttl_ms(None), max, "unlimited at the upstream is Gatehouse's longest here");
        assert_eq!(bounded_ttl_ms(Some(u64::MAX)), max);
        assert_eq!(bounded_ttl_ms(Some(0)), 1);
    }
}
