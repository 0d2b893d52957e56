//! Tool profiles on the policies page: every profile (the config file's
//! read-only, the database's changeable by admins) and the one form that
//! adds or replaces one.

use gatehouse_model::Profile;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::context as ctx;

/// What the profiles section shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProfilesView {
    /// Whether the viewer may change profiles.
    pub is_admin: bool,
    /// Every profile: the config file's first, then the database's.
    pub profiles: Vec<Profile>,
}

/// A profile as the form holds it (`draft[name]`, … in a form): each list
/// as comma-separated patterns, everything as typed. [`ProfileDraft::profile`]
/// reads it into the one [`Profile`] contract.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ProfileDraft {
    /// Its name.
    pub name: String,
    /// Agents, comma-separated `owner/agent` patterns.
    #[serde(default)]
    pub agents: Option<String>,
    /// Owners, comma-separated.
    #[serde(default)]
    pub owners: Option<String>,
    /// Tools, comma-separated patterns of exposed names.
    #[serde(default)]
    pub tools: Option<String>,
    /// Upstreams whose every tool is shown, comma-separated.
    #[serde(default)]
    pub upstreams: Option<String>,
    /// Prompts, comma-separated patterns.
    #[serde(default)]
    pub prompts: Option<String>,
    /// Resources, comma-separated URI patterns.
    #[serde(default)]
    pub resources: Option<String>,
    /// The rate limit (`100/hour`).
    #[serde(default)]
    pub rate: Option<String>,
    /// Whom it counts (`agent`, `owner`, `tool`).
    #[serde(default)]
    pub rate_per: Option<String>,
}

impl ProfileDraft {
    /// The draft of a saved profile (what Edit fills the form with).
    pub fn of(profile: &Profile) -> Self {
        let join = |list: &Vec<String>| Some(list.join(", ")).filter(|s| !s.is_empty());
        ProfileDraft {
            name: profile.name.clone(),
            agents: join(&profile.agents),
            owners: join(&profile.owners),
            tools: join(&profile.tools),
            upstreams: join(&profile.upstreams),
            prompts: join(&profile.prompts),
            resources: join(&profile.resources),
            rate: profile.rate.map(|r| r.to_string()),
            rate_per: profile.rate.map(|_| profile.rate_per.as_str().to_string()),
        }
    }

    /// The profile it describes, read by the contract's own parsers and
    /// checked as the store will; a refusal names the field.
    #[cfg(feature = "ssr")]
    fn profile(self) -> Result<Profile, gatehouse_core::error::CoreError> {
        let list = super::comma_list;
        let text = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
        let profile = Profile {
            agents: list(self.agents),
            owners: list(self.owners),
            tools: list(self.tools),
            upstreams: list(self.upstreams),
            prompts: list(self.prompts),
            resources: list(self.resources),
            rate: text(self.rate).map(|r| r.parse()).transpose()?,
            rate_per: text(self.rate_per).unwrap_or_default().parse()?,
            ..Profile::new(&self.name)
        };
        gatehouse_core::policy::PolicyStore::check_profile(profile)
    }
}

/// Every profile (any signed-in user may read them: they say what agents see).
#[server(prefix = "/api/fn", endpoint = "profiles")]
pub async fn list_profiles() -> Result<ProfilesView, ServerFnError> {
    ctx::blocking(move |user, core| {
        let profiles = core.policy.rules()?.profiles().to_vec();
        Ok(ProfilesView { is_admin: user.is_admin, profiles })
    })
    .await
}

/// Adds or replaces the database profile of the draft's name (admins only);
/// the change log records who. Agents are told their lists changed.
#[server(prefix = "/api/fn", endpoint = "profile_save")]
pub async fn save_profile(draft: ProfileDraft) -> Result<(), ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::changes::Change;
    let catalog = ctx::tool_catalog()?;
    ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Err(AccessError::Forbidden);
        }
        let profile = core.policy.set_profile(draft.profile()?)?;
        let detail = describe(&profile);
        let actor = user.actor().to_string();
        let change =
            Change { actor: &actor, subject: "profile", target: &profile.name, action: "set", detail: Some(&detail) };
        core.changes.record(change)?;
        tracing::info!(profile = %profile.name, detail, by = %user.username, "tool profile saved");
        Ok(())
    })
    .await?;
    catalog.lists_changed();
    Ok(())
}

/// Removes the database profile `name` (admins only).
#[server(prefix = "/api/fn", endpoint = "profile_remove")]
pub async fn remove_profile(name: String) -> Result<bool, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::changes::Change;
    let catalog = ctx::tool_catalog()?;
    let removed = ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Err(AccessError::Forbidden);
        }
        let removed = core.policy.remove_profile(&name)?;
        if removed {
            let actor = user.actor().to_string();
            let change = Change { actor: &actor, subject: "profile", target: &name, action: "remove", detail: None };
            core.changes.record(change)?;
            tracing::info!(profile = %name, by = %user.username, "tool profile removed");
        }
        Ok(removed)
    })
    .await?;
    catalog.lists_changed();
    Ok(removed)
}

/// What the change log says a saved profile does.
#[cfg(feature = "ssr")]
fn describe(profile: &Profile) -> String {
    let mut parts = Vec::new();
    for (label, list) in [
        ("agents", &profile.agents),
        ("owners", &profile.owners),
        ("tools", &profile.tools),
        ("upstreams", &profile.upstreams),
        ("prompts", &profile.prompts),
        ("resources", &profile.resources),
    ] {
        if !list.is_empty() {
            parts.push(format!("{label} {}", list.join(", ")));
        }
    }
    if let Some(rate) = &profile.rate {
        parts.push(format!("at most {rate} per {}", profile.rate_per.as_str()));
    }
    parts.join(", ")
}
