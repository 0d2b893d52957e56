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
}

/// How many past reviews the page lists.
pub const REVIEWS_SHOWN: usize = 20;

/// Every exposed tool, the gate's verdict on each under the current rules,
/// and the held-back ones (any signed-in user).
#[server(prefix = "/api/fn", endpoint = "tools")]
pub async fn list_tools() -> Result<ToolsView, ServerFnError> {
    let catalog = ctx::tool_catalog()?;
    ctx::blocking(move |user, core| {
        let rules = core.policy.rules()?;
        let tools =
            catalog.exposed_tools().into_iter().map(|tool| gatehouse_core::policy::gate_for(&rules, tool)).collect();
        Ok(ToolsView {
            now_ms: core.clock.now_ms(),
            is_admin: user.is_admin,
            tools,
            held: catalog.held_tools(),
            reviews: core.changes.recent("tool", REVIEWS_SHOWN)?,
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
