//! The policies page: every rule (the config file's read-only, the
//! database's changeable by admins), who changed them, and what a rule
//! being edited would do to each tool it matches.

use gatehouse_model::{Action, Basis, ChangeEntry, Rule, ToolGate};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::context as ctx;

/// What the policies page shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PoliciesView {
    /// Server time when read (Unix ms).
    pub now_ms: i64,
    /// Whether the viewer may change rules.
    pub is_admin: bool,
    /// Every rule: the config file's first, then the database's.
    pub rules: Vec<Rule>,
    /// The latest rule changes, newest first.
    pub changes: Vec<ChangeEntry>,
    /// Patterns of the rules that match no exposed tool right now (for
    /// example an upstream's own tool name, without its prefix).
    pub unmatched: Vec<String>,
}

/// One tool a rule being edited matches: what the gate does now, and would do.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RulePreview {
    /// The tool and what the gate does with it now.
    pub now: ToolGate,
    /// What the gate would do with the rule saved.
    pub then: Action,
    /// Whether only a person could decide then.
    pub then_human_only: bool,
    /// Why, then.
    pub then_basis: Basis,
}

/// Rules and their recent changes.
#[server(prefix = "/api/fn", endpoint = "policies")]
pub async fn list_policies() -> Result<PoliciesView, ServerFnError> {
    let catalog = ctx::tool_catalog()?;
    ctx::blocking(move |user, core| {
        let rules = core.policy.rules()?.as_ref().clone();
        let tools = catalog.exposed_tools();
        let unmatched = gatehouse_core::policy::unmatched(&rules, tools.iter().map(|t| t.name.as_str()))
            .into_iter()
            .map(|rule| rule.pattern.clone())
            .collect();
        Ok(PoliciesView {
            now_ms: core.clock.now_ms(),
            is_admin: user.is_admin,
            rules,
            changes: core.changes.recent("policy", 20)?,
            unmatched,
        })
    })
    .await
}

/// The exposed tools `pattern` matches, and what the gate would do with
/// each if the rule `{pattern, action, human_only}` were saved.
#[server(prefix = "/api/fn", endpoint = "policy_preview")]
pub async fn preview_rule(
    pattern: String,
    action: String,
    human_only: bool,
) -> Result<Vec<RulePreview>, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::policy::{gate_for, matches, parse_action, validate_pattern};
    let catalog = ctx::tool_catalog()?;
    ctx::blocking(move |_user, core| {
        let pattern = pattern.trim().to_string();
        validate_pattern(&pattern)?;
        let action = parse_action(&action)?;
        let now = core.policy.rules()?;
        // Saving replaces the database's rule for the pattern, if there is one.
        let mut then: Vec<Rule> =
            now.iter().filter(|r| !(r.pattern == pattern && r.source == "database")).cloned().collect();
        then.push(Rule {
            pattern: pattern.clone(),
            action,
            human_only,
            source: "database".into(),
            approval_ttl_secs: None,
        });
        let previews = catalog
            .exposed_tools()
            .into_iter()
            .filter(|t| matches(&pattern, &t.name))
            .map(|tool| {
                let after = gate_for(&then, tool.clone());
                RulePreview {
                    now: gate_for(&now, tool),
                    then: after.action,
                    then_human_only: after.human_only,
                    then_basis: after.basis,
                }
            })
            .collect();
        Ok::<_, AccessError>(previews)
    })
    .await
}

/// Adds or replaces the database rule for `pattern` (admins only); the
/// change log records who. `human_only` is a checkbox: present means on.
#[server(prefix = "/api/fn", endpoint = "policy_save")]
pub async fn save_rule(pattern: String, action: String, human_only: Option<String>) -> Result<(), ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::changes::Change;
    use gatehouse_core::policy::parse_action;
    let catalog = ctx::tool_catalog()?;
    ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Err(AccessError::Forbidden);
        }
        let pattern = pattern.trim();
        let action = parse_action(&action)?;
        let human_only = human_only.is_some_and(|v| !v.is_empty() && v != "false");
        core.policy.set(pattern, action, human_only)?;
        let detail = format!("{}{}", action.as_str(), if human_only { ", human only" } else { "" });
        let actor = format!("user:{}", user.username);
        core.changes.record(Change {
            actor: &actor,
            subject: "policy",
            target: pattern,
            action: "set",
            detail: Some(&detail),
        })?;
        tracing::info!(pattern, action = action.as_str(), human_only, by = %user.username, "policy rule saved");
        Ok(())
    })
    .await?;
    catalog.lists_changed();
    Ok(())
}

/// Removes the database rule for `pattern` (admins only).
#[server(prefix = "/api/fn", endpoint = "policy_remove")]
pub async fn remove_rule(pattern: String) -> Result<bool, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::changes::Change;
    let catalog = ctx::tool_catalog()?;
    let removed = ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Err(AccessError::Forbidden);
        }
        let removed = core.policy.remove(&pattern)?;
        if removed {
            let actor = format!("user:{}", user.username);
            core.changes.record(Change {
                actor: &actor,
                subject: "policy",
                target: &pattern,
                action: "remove",
                detail: None,
            })?;
            tracing::info!(pattern = %pattern, by = %user.username, "policy rule removed");
        }
        Ok(removed)
    })
    .await?;
    catalog.lists_changed();
    Ok(removed)
}
