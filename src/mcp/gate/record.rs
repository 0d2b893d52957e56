//! Every call on the record: a call that runs at once (allowed by a rule,
//! the tool's annotations or a grant) or is refused at once is audited like
//! a paused one — who, which tool and upstream, the arguments' digest (and
//! the arguments themselves where `keep_arguments` says: [`kept`]), what
//! decided, how long it ran and how it ended.
//!
//! One entry per call, written when it ends, through the database's one
//! ordered writer: nothing on the request path waits for the disk (only for
//! room, past the writer's bound). A call whose client goes away before it
//! ends is recorded as `cancelled` when its future is dropped.

use std::time::Instant;

use gatehouse_core::approvals::{State, digest};
use gatehouse_core::audit::{self, AT_ONCE_PREFIX};
use gatehouse_core::model::{Actor, Hint, Keep, KeptArguments};
use gatehouse_core::policy::{Basis, Verdict};
use rmcp::model::{CallToolResponse, CallToolResult, ErrorData};
use serde_json::Value;

use crate::mcp::McpState;
use crate::mcp::tools::Caller;

/// What let a call run or refused it, as the audit's actor: a rule, an
/// annotation, or Gatehouse's own rule for the tools that change the gate.
pub fn decided_by(verdict: &Verdict) -> String {
    let actor = match &verdict.basis {
        Basis::Rule(name) => Actor::Rule(name.clone()),
        Basis::Profile(name) => Actor::Profile(name.clone()),
        Basis::ReadOnly => Actor::Annotation(Hint::ReadOnly),
        Basis::NotDestructive | Basis::MayDestroy => Actor::Annotation(Hint::NotReadOnly),
        Basis::UntrustedHints => Actor::Annotation(Hint::Untrusted),
        Basis::ChangesGate => Actor::ChangesGate,
    };
    actor.to_string()
}

/// The arguments of one call as the record keeps them, or `None` where it
/// keeps none: the global `keep_arguments`, overridden by the deciding
/// rules' and the upstream's (the one that keeps less, when both say);
/// `waited` says the call paused for a person. Bounded and redacted
/// (`keep_arguments_max_bytes`, `redact_arguments`).
pub fn kept(
    state: &McpState,
    verdict: &Verdict,
    upstream: Option<&str>,
    waited: bool,
    arguments: &Value,
) -> Option<KeptArguments> {
    let config = state.config.load();
    let of_upstream = upstream.and_then(|name| config.upstream.iter().find(|u| u.name == name)?.keep_arguments);
    Keep::of(config.keep_arguments, verdict.keep_arguments, of_upstream)
        .keeps(waited)
        .then(|| KeptArguments::keep(arguments, &config.redact_arguments, config.keep_arguments_max_bytes))
}

/// What every audit entry of one call holds: who made it, the tool, its
/// upstream and the arguments' digest; its arguments as kept, if they are.
struct CallOf<'a> {
    caller: &'a Caller,
    tool: &'a str,
    upstream: Option<&'a str>,
    digest: String,
    kept: Option<KeptArguments>,
}

impl<'a> CallOf<'a> {
    fn new(caller: &'a Caller, tool: &'a str, upstream: Option<&'a str>, arguments: &Value) -> Self {
        CallOf { caller, tool, upstream, digest: digest(arguments), kept: None }
    }

    /// Its entry: `state`, caused by `actor`, under execution id `id`.
    fn entry<'e>(&'e self, id: &'e str, state: State, actor: &'e str, detail: &'e str) -> audit::Entry<'e> {
        let credential = &self.caller.credential;
        audit::Entry {
            execution_id: id,
            state,
            tool: self.tool,
            upstream: self.upstream,
            arguments_digest: &self.digest,
            agent: &credential.agent,
            owner: credential.owner.as_deref(),
            owner_id: credential.owner_id,
            credential_id: Some(&credential.id),
            thread: credential.thread.as_deref(),
            actor: Some(actor),
            detail: Some(detail),
            arguments: self.kept.as_ref(),
        }
    }

    /// Appends a one-entry record of it (a fresh `call_…` id).
    async fn append(&self, state: &McpState, outcome: State, actor: &str, detail: &str) {
        let id = gatehouse_core::secret::new_ordered_id(AT_ONCE_PREFIX);
        if let Err(e) = state.core.approvals.audit().append(self.entry(&id, outcome, actor, detail)).await {
            tracing::error!(error = %e, "audit write failed");
        }
    }
}

/// One run of a tool, from the decision until it ends: a call that runs
/// at once, or one input round of a call (recorded on its approved
/// execution, if it has one).
pub struct AtOnce<'a> {
    id: String,
    state: &'a McpState,
    call: CallOf<'a>,
    decided_by: String,
    /// What the entry's detail begins with: "ran at once", "round 2".
    label: String,
    /// Recorded on an approved execution (its rounds): asking for input
    /// again leaves it `running`, not `allowed`.
    on_execution: bool,
    started: Instant,
    ended: bool,
}

impl<'a> AtOnce<'a> {
    /// A call about to run, let through by `decided_by`, its arguments
    /// `kept` on its entry if they are ([`kept`]).
    pub fn start(
        state: &'a McpState,
        caller: &'a Caller,
        tool: &'a str,
        upstream: Option<&'a str>,
        arguments: &Value,
        (decided_by, kept): (String, Option<KeptArguments>),
    ) -> Self {
        AtOnce {
            id: gatehouse_core::secret::new_ordered_id(AT_ONCE_PREFIX),
            state,
            call: CallOf { kept, ..CallOf::new(caller, tool, upstream, arguments) },
            decided_by,
            label: "ran at once".into(),
            on_execution: false,
            started: Instant::now(),
            ended: false,
        }
    }

    /// Input round `round` of a call (its upstream asked for input), on
    /// `execution`'s record if a person approved the call, else as a call
    /// of its own.
    pub fn round(mut self, round: usize, execution: Option<&str>) -> Self {
        self.label = format!("input round {round}");
        if let Some(id) = execution {
            self.id = id.to_string();
            self.on_execution = true;
            // Its pending entry holds them already.
            self.call.kept = None;
        }
        self
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
                (State::Failed, failure(result, self.call.upstream))
            }
            Ok(CallToolResponse::Complete(_)) => (State::Completed, "ok".into()),
            // It goes on (the agent answers an input request, or polls a task).
            Ok(CallToolResponse::InputRequired(_)) if self.on_execution => (State::Running, "input required".into()),
            Ok(CallToolResponse::InputRequired(_)) => (State::Allowed, "input required".into()),
            Ok(CallToolResponse::Task(_)) => (State::Allowed, "task".into()),
            Ok(_) => (State::Allowed, "answered".into()),
            Err(e) => (State::Failed, format!("the call was refused: {} (JSON-RPC error {})", e.message, e.code.0)),
        };
        let detail = format!("{} · {} ms · {outcome}", self.label, self.started.elapsed().as_millis());
        let entry = self.call.entry(&self.id, state, &self.decided_by, &detail);
        if let Err(e) = self.state.core.approvals.audit().append(entry).await {
            tracing::error!(error = %e, "audit write failed");
        }
        if self.on_execution {
            awaits_input(self.state, &self.id, state == State::Running).await;
        }
        answer
    }
}

/// Longest error text a failed call's record keeps (what the person reads
/// on its page and in the history): enough for a message, not a dump.
const FAILURE_CHARS: usize = 300;

/// What a failed call's record says: where it failed (the upstream, or
/// Gatehouse for its own tools) and the error text the tool answered with,
/// bounded. Hidden characters stay as they are here; every page shows them.
pub fn failure(result: &CallToolResult, upstream: Option<&str>) -> String {
    let text: String = result
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.trim().to_string()))
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "(no error text)".into());
    let mut said: String = text.chars().take(FAILURE_CHARS).collect();
    if said.len() < text.len() {
        said.push('…');
    }
    match upstream {
        Some(name) => format!("upstream {name} answered with an error: {said}"),
        None => format!("Gatehouse answered with an error: {said}"),
    }
}

impl Drop for AtOnce<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // The request was dropped mid-call (its client went away): `record`
        // only queues, so it is fit for a destructor.
        let detail = format!("{} · {} ms · the client went away first", self.label, self.started.elapsed().as_millis());
        self.state.core.approvals.audit().record(self.call.entry(
            &self.id,
            State::Cancelled,
            &self.decided_by,
            &detail,
        ));
    }
}

/// Notes that the approved `execution` waits on its agent's answers to an
/// upstream's request for input (`waiting`), until twice a `requestState`'s
/// lifetime (past it, housekeeping ends the call as `expired`), or that it
/// waits no more.
pub async fn awaits_input(state: &McpState, execution: &str, waiting: bool) {
    let until = state.core.clock.now_ms() + 2 * crate::mcp::upstream::input_required::STATE_TTL.as_millis() as i64;
    let execution = execution.to_string();
    let noted = state
        .core
        .run(move |core| {
            let table = gatehouse_core::awaiting_input::AwaitingInput::new(core.db.clone(), core.clock.clone());
            if waiting { table.wait(&execution, until) } else { table.done(&execution) }
        })
        .await;
    if let Ok(Err(e)) | Err(e) = noted {
        tracing::error!(error = %e, "could not note a call waiting for its agent's input");
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
    let call = CallOf::new(caller, tool, upstream, arguments);
    for hit in &verdict.shadow {
        let detail = format!("would have: {} (it was: {})", hit.would.label(), verdict.action.label());
        call.append(state, State::Shadow, &Actor::Shadow(hit.rule.clone()).to_string(), &detail).await;
    }
}

/// Records a call refused at once: `blocked` by a rule, or `limited` by a
/// rule's rate; `actor` is what refused it ([`decided_by`], or
/// `rule:<name>` for a rate); its arguments `kept` if they are.
#[allow(clippy::too_many_arguments)] // what the entry holds
pub async fn refused(
    state: &McpState,
    outcome: State,
    caller: &Caller,
    tool: &str,
    upstream: Option<&str>,
    arguments: &Value,
    kept: Option<KeptArguments>,
    (actor, why): (&str, &str),
) {
    CallOf { kept, ..CallOf::new(caller, tool, upstream, arguments) }.append(state, outcome, actor, why).await;
}

/// What an agent reads when a rule blocks its call: the rule, and why its
/// condition counted as a match if it could not be evaluated.
pub fn blocked_message(tool: &str, verdict: &Verdict) -> String {
    if let Basis::Profile(profile) = &verdict.basis {
        return format!("{tool} is not among the tools of profile {profile:?}, which this agent is held to");
    }
    let rule = verdict.rule.as_deref().unwrap_or_default();
    match &verdict.condition_error {
        Some(why) => format!(
            "{tool} is blocked by policy rule {rule:?}: its condition could not be evaluated ({why}), which blocks"
        ),
        None => format!("{tool} is blocked by policy rule {rule:?}"),
    }
}
