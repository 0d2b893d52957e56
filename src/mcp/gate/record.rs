//! Every call on the record: a call that runs at once (allowed by a rule,
//! the tool's annotations or a grant) or is refused at once is audited like
//! a paused one — who, which tool and upstream, the arguments' digest (never
//! the arguments), what decided, how long it ran and how it ended.
//!
//! One entry per call, written when it ends, through the database's one
//! ordered writer: nothing on the request path waits for the disk (only for
//! room, past the writer's bound). A call whose client goes away before it
//! ends is recorded as `cancelled` when its future is dropped.

use std::time::Instant;

use gatehouse_core::approvals::{State, digest};
use gatehouse_core::audit::{self, AT_ONCE_PREFIX};
use gatehouse_core::policy::{Basis, Verdict};
use rmcp::model::{CallToolResponse, ErrorData};
use serde_json::Value;

use crate::mcp::McpState;
use crate::mcp::tools::Caller;

/// What let a call run or refused it, as the audit's actor: `rule:<name>`,
/// `annotation:readOnlyHint`, `annotation:destructiveHint`, `grant:<id>`.
pub fn decided_by(verdict: &Verdict) -> String {
    match &verdict.basis {
        Basis::Rule(name) => format!("rule:{name}"),
        Basis::ReadOnly => "annotation:readOnlyHint".into(),
        Basis::NotDestructive | Basis::MayDestroy => "annotation:destructiveHint".into(),
        Basis::ChangesGate => "gatehouse:changes-gate".into(),
    }
}

/// One call that runs at once, from the decision until it ends.
pub struct AtOnce<'a> {
    id: String,
    state: &'a McpState,
    caller: &'a Caller,
    tool: &'a str,
    upstream: Option<String>,
    digest: String,
    decided_by: String,
    started: Instant,
    ended: bool,
}

impl<'a> AtOnce<'a> {
    /// A call about to run, let through by `decided_by`.
    pub fn start(
        state: &'a McpState,
        caller: &'a Caller,
        tool: &'a str,
        upstream: Option<String>,
        arguments: &Value,
        decided_by: String,
    ) -> Self {
        AtOnce {
            id: gatehouse_core::secret::new_id(AT_ONCE_PREFIX),
            state,
            caller,
            tool,
            upstream,
            digest: digest(arguments),
            decided_by,
            started: Instant::now(),
            ended: false,
        }
    }

    /// Records how it ended (`cancelled`: the agent cancelled it, whatever
    /// the answer), and hands the answer back.
    pub async fn end(
        mut self,
        answer: Result<CallToolResponse, ErrorData>,
        cancelled: bool,
    ) -> Result<CallToolResponse, ErrorData> {
        self.ended = true;
        let (state, outcome) = match &answer {
            _ if cancelled => (State::Cancelled, "cancelled by the agent".to_string()),
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
                (State::Failed, "isError".to_string())
            }
            Ok(CallToolResponse::Complete(_)) => (State::Completed, "ok".into()),
            // It goes on (the agent answers an input request, or polls a task).
            Ok(CallToolResponse::InputRequired(_)) => (State::Allowed, "input required".into()),
            Ok(CallToolResponse::Task(_)) => (State::Allowed, "task".into()),
            Ok(_) => (State::Allowed, "answered".into()),
            Err(e) => (State::Failed, format!("JSON-RPC error {}: {}", e.code.0, e.message)),
        };
        let detail = format!("ran at once · {} ms · {outcome}", self.started.elapsed().as_millis());
        let entry = self.entry(state, &detail);
        if let Err(e) = self.state.core.approvals.audit().append(entry).await {
            tracing::error!(error = %e, "audit write failed");
        }
        answer
    }

    fn entry<'e>(&'e self, state: State, detail: &'e str) -> audit::Entry<'e> {
        let credential = &self.caller.credential;
        audit::Entry {
            execution_id: &self.id,
            state,
            tool: self.tool,
            upstream: self.upstream.as_deref(),
            arguments_digest: &self.digest,
            agent: &credential.agent,
            owner: credential.owner.as_deref(),
            credential_id: Some(&credential.id),
            thread: credential.thread.as_deref(),
            actor: Some(&self.decided_by),
            detail: Some(detail),
        }
    }
}

impl Drop for AtOnce<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // The request was dropped mid-call (its client went away): `record`
        // only queues, so it is fit for a destructor.
        let detail = format!("ran at once · {} ms · the client went away first", self.started.elapsed().as_millis());
        self.state.core.approvals.audit().record(self.entry(State::Cancelled, &detail));
    }
}

/// Records what each shadow rule would have done to this call, where that
/// differs from what is done (`shadow`, by `shadow:<rule>`).
pub async fn shadows(
    state: &McpState,
    caller: &Caller,
    tool: &str,
    upstream: Option<&str>,
    arguments: &Value,
    verdict: &Verdict,
) {
    if verdict.shadow.is_empty() {
        return;
    }
    let credential = &caller.credential;
    let digest = digest(arguments);
    for hit in &verdict.shadow {
        let actor = format!("shadow:{}", hit.rule);
        let detail = format!("would have: {} (it was: {})", hit.would.label(), verdict.action.label());
        let entry = audit::Entry {
            execution_id: &gatehouse_core::secret::new_id(AT_ONCE_PREFIX),
            state: State::Shadow,
            tool,
            upstream,
            arguments_digest: &digest,
            agent: &credential.agent,
            owner: credential.owner.as_deref(),
            credential_id: Some(&credential.id),
            thread: credential.thread.as_deref(),
            actor: Some(&actor),
            detail: Some(&detail),
        };
        if let Err(e) = state.core.approvals.audit().append(entry).await {
            tracing::error!(error = %e, "audit write failed");
        }
    }
}

/// Records a call refused at once: `blocked` by a rule, or `limited` by a
/// rule's rate.
#[allow(clippy::too_many_arguments)] // what the entry holds
pub async fn refused(
    state: &McpState,
    outcome: State,
    caller: &Caller,
    tool: &str,
    upstream: Option<&str>,
    arguments: &Value,
    verdict: &Verdict,
    why: &str,
) {
    let credential = &caller.credential;
    let actor = decided_by(verdict);
    let entry = audit::Entry {
        execution_id: &gatehouse_core::secret::new_id(AT_ONCE_PREFIX),
        state: outcome,
        tool,
        upstream,
        arguments_digest: &digest(arguments),
        agent: &credential.agent,
        owner: credential.owner.as_deref(),
        credential_id: Some(&credential.id),
        thread: credential.thread.as_deref(),
        actor: Some(&actor),
        detail: Some(why),
    };
    if let Err(e) = state.core.approvals.audit().append(entry).await {
        tracing::error!(error = %e, "audit write failed");
    }
}

/// What an agent reads when a rule blocks its call: the rule, and why its
/// condition counted as a match if it could not be evaluated.
pub fn blocked_message(tool: &str, verdict: &Verdict) -> String {
    let rule = verdict.rule.as_deref().unwrap_or_default();
    match &verdict.condition_error {
        Some(why) => format!(
            "{tool} is blocked by policy rule {rule:?}: its condition could not be evaluated ({why}), which blocks"
        ),
        None => format!("{tool} is blocked by policy rule {rule:?}"),
    }
}
