//! The tools page: every exposed tool and what the gate does with it, the
//! upstream tools held back because their definitions changed, and an
//! admin's decision on those.

#[cfg(feature = "ssr")]
use super::context as ctx;
use gatehouse_model::{ChangeEntry, ToolChange, ToolGate};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// What the tools page shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolsView {
    /// Server time when read (Unix ms).
    pub now_ms: i64,
    /// Whether the viewer may accept or reject changes.
    pub is_admin: bool,
    /// Every exposed tool with the gate's verdict, Gatehouse's own first.
    pub tools: Vec<ToolGate>,
    /// Upstream tools held back for review, by name.
    pub held: Vec<ToolChange>,
    /// The latest accepted and rejected changes, newest first.
    pub reviews: Vec<ChangeEntry>,
    /// The agents whose list the viewer may see, `owner/agent` (an agent
    /// with no owner: `/agent`), each once, by name.
    pub agents: Vec<String>,
    /// The agent the list is seen as, when one was chosen: `tools` is then
    /// its `tools/list`, with what the gate does for it.
    pub seen_as: Option<SeenAs>,
}

/// Whose eyes the tools page looks through.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SeenAs {
    /// `owner/agent`.
    pub agent: String,
    /// The profiles that name it.
    pub profiles: Vec<String>,
    /// How many exposed tools it does not see (its profiles, or rules that
    /// block them for it).
    pub hidden: usize,
}

/// How many past reviews the page lists.
pub const REVIEWS_SHOWN: usize = 20;

/// Every exposed tool, the gate's verdict on each under the current rules,
/// and the held-back ones (any signed-in user). With `agent` (`owner/agent`,
/// one of the viewer's own, or anyone's for an admin): the list as that
/// agent's `tools/list` has it (its profiles and the rules scoped to it;
/// what it does not see is left out) and the gate for it.
#[server(prefix = "/api/fn", endpoint = "tools")]
pub async fn list_tools(agent: Option<String>) -> Result<ToolsView, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::policy::{Action, Who, gate_as};
    let catalog = ctx::tool_catalog()?;
    ctx::blocking(move |user, core| {
        let rules = core.policy.rules()?;
        let credentials: Vec<_> = core
            .credentials
            .list()?
            .into_iter()
            .filter(|c| gatehouse_core::approvals::may_decide(&user, c.owner_id))
            .filter(|c| c.status == gatehouse_model::CredentialStatus::Active)
            .collect();
        let key = |agent: &str, owner: Option<&str>| format!("{}/{agent}", owner.unwrap_or_default());
        let mut agents: Vec<String> = credentials.iter().map(|c| key(&c.agent, c.owner.as_deref())).collect();
        agents.sort();
        agents.dedup();
        let chosen = agent.filter(|a| !a.trim().is_empty());
        let (tools, seen_as) = match chosen {
            None => (catalog.exposed_tools().into_iter().map(|tool| gate_as(&rules, tool, None)).collect(), None),
            Some(chosen) => {
                // Only an agent the viewer may see: another user's agent
                // is not named back (403, as for one that does not exist).
                let theirs: Vec<_> =
                    credentials.iter().filter(|c| key(&c.agent, c.owner.as_deref()) == chosen).collect();
                let Some(first) = theirs.first() else {
                    return Err(AccessError::Forbidden);
                };
                // A rule's bare agent name in an allow rule names it only
                // if an admin minted it: shown as its least trusted credential.
                let who = Who {
                    agent: &first.agent,
                    owner: first.owner.as_deref(),
                    thread: None,
                    by_admin: theirs.iter().all(|c| c.by_admin),
                };
                let all = catalog.exposed_tools();
                let total = all.len();
                let seen: Vec<_> = all
                    .into_iter()
                    .map(|tool| gate_as(&rules, tool, Some(who)))
                    .filter(|gate| gate.action != Action::Block || gate.tool.name == gatehouse_model::tools::RESUME)
                    .collect();
                let profiles = rules.profiles_of(who.member()).map(|p| p.name.clone()).collect();
                let hidden = total - seen.len();
                (seen, Some(SeenAs { agent: chosen, profiles, hidden }))
            }
        };
        Ok(ToolsView {
            now_ms: core.clock.now_ms(),
            is_admin: user.is_admin,
            tools,
            held: catalog.held_tools(),
            reviews: core.changes.recent("tool", REVIEWS_SHOWN)?,
            agents,
            seen_as,
        })
    })
    .await
}

/// An admin accepts (`decision` = `accept`: the offered definition is pinned
/// and the tool exposed again) or rejects (`reject`: it stays held back) the
/// changed definition `digest` of `upstream`'s `tool`. Others get 403; a
/// definition that changed again since the page showed it, 409.
#[server(prefix = "/api/fn", endpoint = "tool-review")]
pub async fn review_tool_change(
    upstream: String,
    tool: String,
    digest: String,
    decision: String,
) -> Result<(), ServerFnError> {
    let catalog = ctx::tool_catalog()?;
    let (user, core) = ctx::context()?;
    let refuse = |status: u16, message: String| {
        ctx::set_status(status);
        Err(ServerFnError::new(message))
    };
    if !user.is_admin {
        return refuse(403, "only an admin may accept or reject a tool change".into());
    }
    let accept = match decision.as_str() {
        "accept" => true,
        "reject" => false,
        other => return refuse(400, format!("decision must be accept or reject, not {other:?}")),
    };
    let actor = user.actor().to_string();
    let reviewed = core
        .run(move |_| catalog.review_change(&upstream, &tool, &digest, accept, &actor))
        .await
        .map_err(|e| ServerFnError::new(e.to_string()))?;
    match reviewed {
        Ok(()) => Ok(()),
        Err((status, message)) => refuse(status, message),
    }
}
