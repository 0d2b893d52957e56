//! Requests other than `tools/call` that reach an upstream — `resources/read`,
//! `resources/subscribe`, `prompts/get`, `completion/complete` — are decided
//! by `resource:<uri pattern>` and `prompt:<name pattern>` rules and audited.
//! A resource URI is first given its normal spelling ([`resource_uri`]), so a
//! rule cannot be dodged by spelling it differently and the upstream reads
//! the URI the rule was matched against. A tool profile that names the
//! agent and does not list the prompt or resource refuses it first, and
//! leaves it out of the agent's lists ([`Lens`]).

use gatehouse_core::approvals::{State, digest};
use gatehouse_core::audit;
use gatehouse_core::credentials::Credential;
use gatehouse_core::normalise;
use std::sync::Arc;

use gatehouse_core::model::Member;
use gatehouse_core::policy::{Action, Basis, Profile, RuleSet, Subject, Verdict, subject_verdict};
use rmcp::model::ErrorData;
use serde_json::{Value, json};

use super::McpState;

/// What the rules decide for `subject`. A rule on a resource also holds
/// with a query or fragment added: an upstream may drop them
/// (`file:///etc/passwd?` is that file), so the URI without them is decided
/// too and the stricter answer stands.
fn verdict(rules: &RuleSet, who: Option<Member<'_>>, subject: &Subject<'_>) -> Verdict {
    if let Some(who) = who
        && let Some(profile) = rules.hidden_by(who, |p| shows(p, subject))
    {
        return Verdict::outside(profile);
    }
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

/// Whether a profile shows `subject`.
fn shows(profile: &Profile, subject: &Subject<'_>) -> bool {
    match subject {
        Subject::Resource(uri) => profile.shows_resource(uri),
        Subject::Prompt(name) => profile.shows_prompt(name),
    }
}

/// Whether `rules` let a request on `subject` through, for anyone (nothing
/// is audited: [`check`] the request itself, which also applies the
/// caller's profiles).
pub fn allows(rules: &RuleSet, subject: Subject<'_>) -> bool {
    verdict(rules, None, &subject).action == Action::Allow
}

/// What one agent's lists of prompts, resources and templates show: what
/// its profiles list (everything, for an agent no profile names).
pub struct Lens<'c> {
    // `None`: the rules could not be read, and nothing is shown (fail closed).
    rules: Option<Arc<RuleSet>>,
    who: Option<Member<'c>>,
}

impl<'c> Lens<'c> {
    /// The lens of `credential` (none: an unauthenticated list, which sees
    /// what everyone sees).
    pub async fn of(state: &McpState, credential: Option<&'c Credential>) -> Lens<'c> {
        let rules =
            state.core.policy.current().await.inspect_err(|e| tracing::error!(error = %e, "policy unreadable")).ok();
        Lens { rules, who: credential.map(|c| Member { agent: &c.agent, owner: c.owner.as_deref() }) }
    }

    /// Whether it shows `subject` (a template by its text, as a resource).
    pub fn shows(&self, subject: Subject<'_>) -> bool {
        let Some(rules) = &self.rules else { return false };
        self.who.is_none_or(|who| rules.hidden_by(who, |p| shows(p, &subject)).is_none())
    }
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
    let who = Member { agent: &credential.agent, owner: credential.owner.as_deref() };
    let verdict = verdict(&rules, Some(who), &subject);
    let allowed = verdict.action == Action::Allow;
    let name = subject.name();
    // What refused it is on the record; what let it through, the agent's request.
    let actor = match &verdict.basis {
        Basis::Profile(profile) => gatehouse_core::model::Actor::Profile(profile.clone()).to_string(),
        _ => "agent".to_string(),
    };
    let entry = audit::Entry {
        execution_id: &gatehouse_core::secret::new_id("req"),
        state: if allowed { State::Allowed } else { State::Blocked },
        tool: &name,
        upstream: None,
        arguments_digest: &digest(arguments),
        agent: &credential.agent,
        owner: credential.owner.as_deref(),
        owner_id: credential.owner_id,
        credential_id: Some(&credential.id),
        thread: credential.thread.as_deref(),
        actor: Some(&actor),
        detail: Some(method),
        // Tool calls' arguments are kept by choice; a subject's entry names
        // what was read (its URI or prompt) and nothing more.
        arguments: None,
    };
    if let Err(e) = state.core.approvals.audit().append(entry).await {
        tracing::error!(error = %e, "audit write failed");
    }
    if allowed {
        return Ok(());
    }
    if let Basis::Profile(profile) = &verdict.basis {
        tracing::warn!(method, subject = ?name, agent = ?credential.agent, profile = ?profile, "request outside the agent's profile");
        return Err(ErrorData::invalid_request(
            format!("{method} of {name} is refused: it is not in profile {profile:?}, which this agent is held to"),
            Some(json!({"error": "blocked_by_policy", "subject": name, "profile": profile})),
        ));
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
