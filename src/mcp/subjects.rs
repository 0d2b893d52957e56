//! Requests other than `tools/call` that reach an upstream — `resources/read`,
//! `resources/subscribe`, `prompts/get`, `completion/complete` — are decided
//! by `resource:<uri pattern>` and `prompt:<name pattern>` rules and audited.

use gatehouse_core::approvals::{State, digest};
use gatehouse_core::audit;
use gatehouse_core::credentials::Credential;
use gatehouse_core::policy::{Action, Subject};
use rmcp::model::ErrorData;
use serde_json::{Value, json};

use super::McpState;

/// Lets the request through, or refuses it with the rule that blocks it;
/// either way it is written to the audit log (`allowed` or `blocked`).
pub async fn check(
    state: &McpState,
    credential: &Credential,
    method: &'static str,
    subject: Subject<'_>,
    arguments: &Value,
) -> Result<(), ErrorData> {
    let verdict = state.core.policy.decide_subject(&subject).map_err(|e| {
        tracing::error!(error = %e, "policy lookup failed");
        ErrorData::internal_error("policy lookup failed", None)
    })?;
    let allowed = verdict.action == Action::Allow;
    let name = subject.name();
    // Written before the request goes on, on a blocking thread.
    let (log, tool, arguments_digest, who) =
        (state.core.approvals.audit().clone(), name.clone(), digest(arguments), credential.clone());
    let recorded = tokio::task::spawn_blocking(move || {
        log.record(audit::Entry {
            execution_id: &gatehouse_core::secret::new_id("req"),
            state: if allowed { State::Allowed.as_str() } else { State::Blocked.as_str() },
            tool: &tool,
            upstream: None,
            arguments_digest: &arguments_digest,
            agent: &who.agent,
            owner: who.owner.as_deref(),
            credential_id: Some(&who.id),
            thread: who.thread.as_deref(),
            actor: Some("agent"),
            detail: Some(method),
        })
        .map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    if let Err(e) = recorded {
        tracing::error!(error = %e, "audit write failed");
    }
    if allowed {
        return Ok(());
    }
    let rule = verdict.rule.unwrap_or_default();
    tracing::warn!(method, subject = ?name, agent = ?credential.agent, rule = ?rule, "request blocked by policy");
    Err(ErrorData::invalid_request(
        format!("{method} of {name} is refused by policy rule {rule:?}"),
        Some(json!({"error": "blocked_by_policy", "subject": name, "rule": rule})),
    ))
}
