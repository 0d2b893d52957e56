//! The agents page: credentials and sessions, minting and revoking. Admins
//! see and act on everyone's; other users on their own agents only.

use gatehouse_model::{CredentialView, McpSessionInfo, MintedCredential};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::context as ctx;

/// What the agents page shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentsView {
    /// Server time when read (Unix ms).
    pub now_ms: i64,
    /// Whether the viewer is an admin (sees and mints for everyone).
    pub is_admin: bool,
    /// The viewer's name (the owner of what they mint).
    pub username: String,
    /// Credentials the viewer may see, newest first.
    pub credentials: Vec<CredentialView>,
    /// Connected MCP sessions the viewer may see.
    pub sessions: Vec<McpSessionInfo>,
    /// The tool profiles that name each agent shown, by (agent, owner):
    /// what it sees at all (none: every tool the rules let it).
    pub profiles: Vec<(AgentKey, Vec<String>)>,
}

/// An agent: its name and its owner's.
pub type AgentKey = (String, Option<String>);

/// Credentials and sessions the signed-in user may see.
#[server(prefix = "/api/fn", endpoint = "agents")]
pub async fn list_agents() -> Result<AgentsView, ServerFnError> {
    ctx::blocking(|user, core| {
        let visible =
            |owner_id: &Option<gatehouse_model::UserId>| gatehouse_core::approvals::may_decide(&user, *owner_id);
        let credentials: Vec<CredentialView> =
            core.credentials.list()?.into_iter().filter(|c| visible(&c.owner_id)).collect();
        let sessions = core.live.sessions().into_iter().filter(|s| visible(&s.owner_id)).collect();
        let rules = core.policy.rules()?;
        let mut profiles: Vec<(AgentKey, Vec<String>)> = Vec::new();
        for c in &credentials {
            let key = (c.agent.clone(), c.owner.clone());
            if profiles.iter().any(|(k, _)| *k == key) {
                continue;
            }
            let who = gatehouse_model::Member { agent: &c.agent, owner: c.owner.as_deref() };
            profiles.push((key.clone(), rules.profiles_of(who).map(|p| p.name.clone()).collect()));
        }
        Ok(AgentsView {
            now_ms: core.clock.now_ms(),
            is_admin: user.is_admin,
            username: user.username,
            credentials,
            sessions,
            profiles,
        })
    })
    .await
}

/// Mints a credential for `agent` (on `thread`, if given), owned by the
/// signed-in user, or by `owner` when an admin names one. The browser is
/// sent to `/agents?minted=ID`, where the token is shown once.
#[server(prefix = "/api/fn", endpoint = "mint")]
pub async fn mint_credential(agent: String, thread: String, owner: String) -> Result<(), ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::credentials::IssueRequest;
    let minted_tokens = use_context::<super::MintedTokens>().ok_or_else(|| ServerFnError::new("no token store"))?;
    let endpoint = minted_tokens.endpoint();
    let id = ctx::blocking(move |user, core| {
        let owner = match owner.trim() {
            "" => user.username.clone(),
            named if named == user.username || user.is_admin => named.to_string(),
            _ => return Err(AccessError::Forbidden),
        };
        let thread = Some(thread.trim().to_string()).filter(|t| !t.is_empty());
        let issued = core.credentials.issue(IssueRequest {
            agent: agent.trim().to_string(),
            thread,
            provider_session: None,
            owner: Some(owner),
            via: gatehouse_core::credentials::IssuedVia::Console,
            oauth_client: None,
        })?;
        tracing::info!(credential = %issued.id, agent = %issued.credential.agent, by = %user.username, "credential minted in the browser");
        let minted = MintedCredential {
            id: issued.id,
            agent: issued.credential.agent,
            thread: issued.credential.thread,
            owner: issued.credential.owner,
            token: issued.token,
            endpoint,
        };
        core.show_once.hold(&user.username, &minted)?;
        Ok(minted.id)
    })
    .await?;
    leptos_axum::redirect(&gatehouse_model::routes::agents_minted(&id));
    Ok(())
}

/// The token minted as `id`, once, to the user who minted it.
#[server(prefix = "/api/fn", endpoint = "minted")]
pub async fn take_minted(id: String) -> Result<Option<MintedCredential>, ServerFnError> {
    let minted_tokens = use_context::<super::MintedTokens>().ok_or_else(|| ServerFnError::new("no token store"))?;
    let (user, core) = ctx::context()?;
    minted_tokens.take(core, id, user.username).await
}

/// Revokes one credential (`scope` = `credential`), a thread's, or an
/// agent's (`owner`'s agent of that name; empty for an owner-less one),
/// among those the signed-in user may act on: their own, or anyone's for an
/// admin. Returns how many it revoked.
#[server(prefix = "/api/fn", endpoint = "revoke")]
pub async fn revoke_credentials(scope: String, target: String, owner: String) -> Result<usize, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::credentials::Owned;
    use gatehouse_model::RevokeScope;
    ctx::blocking(move |user, core| {
        let scope = RevokeScope::parse(&scope).ok_or_else(|| AccessError::Invalid(format!("unknown scope {scope:?}")))?;
        let named_owner = Some(owner.as_str()).filter(|o| !o.is_empty());
        let owned = match (user.is_admin, scope) {
            (false, _) => Owned::By(Some(user.username.as_str())),
            // Two users may each have an agent of the same name.
            (true, RevokeScope::Agent) => Owned::By(named_owner),
            (true, _) => Owned::ByAnyone,
        };
        let n = core.credentials.revoke_owned(scope, &target, owned)?;
        tracing::info!(scope = scope.as_str(), target = %target, revoked = n, by = %user.username, "credentials revoked in the browser");
        Ok(n)
    })
    .await
}
