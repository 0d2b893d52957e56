//! The one procedure every run of a tool goes through before it runs —
//! a first call, an upstream's input round of an allowed or approved call,
//! a grant's run: **decide** (the rules, their conditions, the annotation
//! defaults), **limit** (the matching rules' rates, counted in the database)
//! and **record** (a refusal is audited here; what runs is audited when it
//! ends, [`super::record::AtOnce`]). A second path that does part of this is
//! where a gate leaks, so there is none: the engine and the upstream round
//! both call [`admit`].

use gatehouse_core::approvals::State;
use gatehouse_core::model::KeptArguments;
use gatehouse_core::policy::{Action, CallDetail, Facts, Verdict};
use rmcp::model::{CallToolResponse, ErrorData, Tool};
use serde_json::{Value, json};

use super::{granted, record};
use crate::mcp::McpState;
use crate::mcp::tools::{self, Caller};
use crate::tool_error::{Shape, ToolErrorCode, error_result};

/// One run of a tool about to happen.
pub struct Run<'a> {
    /// Who makes it.
    pub caller: &'a Caller,
    /// The exposed tool name.
    pub tool: &'a str,
    /// Its upstream (none: Gatehouse's own tool).
    pub upstream: Option<&'a str>,
    /// The definition agents are shown.
    pub definition: &'a Tool,
    /// The arguments it runs with.
    pub arguments: &'a Value,
    /// The shape Gatehouse's own answers take for this tool.
    pub shape: Shape,
    /// The approved execution this run continues (an input round of an
    /// approved call): the person's approval covers "needs approval".
    pub approved: Option<&'a str>,
}

/// What the procedure says of one run.
pub enum Admitted {
    /// Run it now; the audit's actor for what let it through
    /// ([`record::decided_by`], `grant:<id>`, or `execution:<id>`), and
    /// its arguments as the record keeps them ([`record::kept`]).
    Run(String, Option<KeptArguments>),
    /// It needs a person's decision, which it does not have.
    Ask(Verdict),
    /// Refused (blocked, over a rate), already on the record: the answer.
    Refused(CallToolResponse),
}

/// Decides, limits and records one run (see the module doc).
pub async fn admit(state: &McpState, run: &Run<'_>) -> Result<Admitted, ErrorData> {
    let caller = run.caller;
    let annotations = tools::annotations(run.definition);
    let facts = Facts {
        who: Some(tools::who(&caller.credential)),
        call: Some(CallDetail {
            arguments: run.arguments,
            annotations: &annotations,
            now_ms: state.core.clock.now_ms(),
        }),
        ..Facts::tool(run.tool, run.upstream, tools::hints(run.definition))
    };
    let verdict = state.core.policy.decide(&facts).await.map_err(|e| {
        tracing::error!(error = %e, "policy lookup failed");
        ErrorData::internal_error("policy lookup failed", None)
    })?;
    record::shadows(state, caller, run.tool, run.upstream, run.arguments, &verdict).await;
    // What the record keeps of a call that does not wait for a person.
    let kept = || record::kept(state, &verdict, run.upstream, false, run.arguments);
    if verdict.action == Action::Block {
        tracing::warn!(tool = run.tool, agent = %caller.credential.agent, rule = ?verdict.rule, "call blocked by policy");
        let message = record::blocked_message(run.tool, &verdict);
        let by = record::decided_by(&verdict);
        let (tool, upstream, arguments) = (run.tool, run.upstream, run.arguments);
        record::refused(state, State::Blocked, caller, tool, upstream, arguments, kept(), (&by, &message)).await;
        let refusal = error_result(ToolErrorCode::BlockedByPolicy, message, json!({"tool": run.tool}));
        return Ok(Admitted::Refused(run.shape.fit(refusal).into()));
    }
    if !verdict.limits.is_empty() {
        // Counted across every session, credential and replica (the database).
        let limited = state.core.policy.take_rates(verdict.limits.clone()).await.map_err(|e| {
            tracing::error!(error = %e, "rate limit count failed");
            ErrorData::internal_error("rate limit count failed", None)
        })?;
        if let Some(limited) = limited {
            use gatehouse_core::model::Actor;
            let (whose, name) = match &limited.by {
                Actor::Profile(name) => ("profile", name.clone()),
                Actor::Rule(name) => ("policy rule", name.clone()),
                other => ("limit", other.to_string()),
            };
            let message = format!(
                "{} is over the rate limit of {whose} {name:?}; try again in {} s",
                run.tool, limited.retry_after_secs
            );
            tracing::warn!(tool = run.tool, agent = %caller.credential.agent, by = %limited.by, "call over a rate limit");
            let by = limited.by.to_string();
            let (tool, upstream, arguments) = (run.tool, run.upstream, run.arguments);
            record::refused(state, State::Limited, caller, tool, upstream, arguments, kept(), (&by, &message)).await;
            let mut details = json!({"tool": run.tool, "retryAfter": limited.retry_after_secs});
            details[if whose == "profile" { "profile" } else { "rule" }] = json!(name);
            let refusal = error_result(ToolErrorCode::RateLimited, message, details);
            return Ok(Admitted::Refused(run.shape.fit(refusal).into()));
        }
    }
    if verdict.action == Action::Allow {
        return Ok(Admitted::Run(record::decided_by(&verdict), kept()));
    }
    if let Some(execution) = run.approved {
        // A person approved this call; its rounds continue it (on its record).
        let by = gatehouse_core::model::Actor::Execution(execution.to_string()).to_string();
        return Ok(Admitted::Run(by, None));
    }
    // A person's grant lets it run now — never for a human_only call
    // (gate-changing tools are human_only too).
    if !verdict.human_only
        && !tools::changes_gate(run.tool)
        && let Some(grant) = granted::lookup(state, caller, run.tool, run.arguments).await
    {
        return Ok(Admitted::Run(grant, kept()));
    }
    Ok(Admitted::Ask(verdict))
}
