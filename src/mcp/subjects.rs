//! Requests other than `tools/call` that reach an upstream — `resources/read`,
//! `resources/subscribe`, `prompts/get`, `completion/complete` — are decided
//! by `resource:<uri pattern>` and `prompt:<name pattern>` rules and audited.
//! A resource URI is first given its normal spelling ([`resource_uri`]), so a
//! rule cannot be dodged by spelling it differently and the upstream reads
//! the URI the rule was matched against.

use gatehouse_core::approvals::{State, digest};
use gatehouse_core::audit;
use gatehouse_core::credentials::Credential;
use gatehouse_core::normalise;
use gatehouse_core::policy::{Action, Rule, Subject, Verdict, subject_verdict};
use rmcp::model::ErrorData;
use serde_json::{Value, json};

use super::McpState;

/// What the rules decide for `subject`. A rule on a resource also holds
/// with a query or fragment added: an upstream may drop them
/// (`file:///etc/passwd?` is that file), so the URI without them is decided
/// too and the stricter answer stands.
fn verdict(rules: &[Rule], subject: &Subject<'_>) -> Verdict {
    let mut verdict = subject_verdict(rules, subject);
    if verdict.action == Action::Allow
        && let Subject::Resource(uri) = subject
        && let Some(cut) = uri.find(['?', '#'])
    {
        let bare = subject_verdict(rules, &Subject::Resource(&uri[..cut]));
        if bare.action != Action::Allow {
            verdict = bare;
        }
    }
    verdict
}

/// Whether `rules` let a request on `subject` through (nothing is audited:
/// [`check`] the request itself).
pub fn allows(rules: &[Rule], subject: Subject<'_>) -> bool {
    verdict(rules, &subject).action == Action::Allow
}

/// Lets the request through, or refuses it with the rule that blocks it;
/// either way it is written to the audit log (`allowed` or `blocked`).
pub async fn check(
    state: &McpState,
    credential: &Credential,
    method: &'static str,
    subject: Subject<'_>,
    arguments: &Value,
) -> Result<(), ErrorData> {
    let rules = state.core.policy.current().await.map_err(|e| {
        tracing::error!(error = %e, "policy lookup failed");
        ErrorData::internal_error("policy lookup failed", None)
    })?;
    let verdict = verdict(&rules, &subject);
    let allowed = verdict.action == Action::Allow;
    let name = subject.name();
    let entry = audit::Entry {
        execution_id: &gatehouse_core::secret::new_id("req"),
        state: if allowed { State::Allowed } else { State::Blocked },
        tool: &name,
        upstream: None,
        arguments_digest: &digest(arguments),
        agent: &credential.agent,
        owner: credential.owner.as_deref(),
        credential_id: Some(&credential.id),
        thread: credential.thread.as_deref(),
        actor: Some("agent"),
        detail: Some(method),
    };
    if let Err(e) = state.core.approvals.audit().append(entry).await {
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

/// The normal spelling of the resource URI an agent sent with `method`
/// (`gatehouse_core::normalise::resource_uri`: RFC 3986 case, percent-encoding
/// and dot-segment normalisation, repeated slashes collapsed): what rules
/// match, routing uses and the upstream receives. A URI that cannot be
/// normalised safely (an encoded `/` or dot segment, a backslash, a control
/// character, …) is refused as invalid params, and logged.
pub fn resource_uri(method: &'static str, uri: &str, credential: &Credential) -> Result<String, ErrorData> {
    normalise::resource_uri(uri).map_err(|e| {
        let shown: String = uri.chars().take(200).collect();
        tracing::warn!(
            method,
            uri = ?shown,
            agent = ?credential.agent,
            reason = %e,
            "resource URI refused: it cannot be normalised safely"
        );
        ErrorData::invalid_params(
            format!("{method}: the resource URI is refused: {e}"),
            Some(json!({"error": "unsafe_resource_uri", "reason": e.to_string()})),
        )
    })
}
