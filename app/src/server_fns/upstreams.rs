//! The upstreams page.

#[cfg(feature = "ssr")]
use super::context as ctx;
use gatehouse_model::UpstreamInfo;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// What the upstreams page shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UpstreamList {
    /// Whether errors are included (admins only: an upstream's error text
    /// may carry paths, hosts or secrets from its configuration).
    pub show_errors: bool,
    /// Every configured upstream, by name.
    pub upstreams: Vec<UpstreamInfo>,
    /// The same as other replicas on one PostgreSQL see them, by replica
    /// (each replica connects to its upstreams itself); empty on SQLite.
    pub elsewhere: Vec<(String, Vec<UpstreamInfo>)>,
    /// Whether each upstream's tool annotations are trusted, and whether an
    /// admin said so here (else the config file's `trust_annotations`), by name.
    pub trust: Vec<(String, bool, bool)>,
    /// Whether the viewer may change the trust (admins).
    pub is_admin: bool,
}

/// Every configured upstream and its health (any signed-in user); the last
/// error only for admins.
#[server(prefix = "/api/fn", endpoint = "upstreams")]
pub async fn list_upstreams() -> Result<UpstreamList, ServerFnError> {
    let (user, core) = ctx::context()?;
    let show_errors = user.is_admin;
    let shown = |list: Vec<UpstreamInfo>| -> Vec<UpstreamInfo> {
        list.into_iter()
            .map(|u| UpstreamInfo { last_error: if show_errors { u.last_error } else { None }, ..u })
            .collect()
    };
    let upstreams = shown(core.live.upstreams());
    let elsewhere = core
        .live
        .upstreams_elsewhere()
        .into_iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(replica, list)| (replica, shown(list)))
        .collect();
    let names: Vec<String> = upstreams.iter().map(|u| u.name.clone()).collect();
    let trust = ctx::blocking(move |_, core| {
        names
            .into_iter()
            .map(|name| {
                let trust = core.policy.trust(&name)?;
                let by_admin = matches!(trust, gatehouse_core::policy::Trust::Admin(_));
                Ok((name, trust.trusted(), by_admin))
            })
            .collect::<Result<Vec<_>, gatehouse_core::approvals::AccessError>>()
    })
    .await?;
    Ok(UpstreamList { show_errors, upstreams, elsewhere, trust, is_admin: user.is_admin })
}

/// Trusts (`trust = "on"`) or stops trusting (`"off"`) an upstream's tool
/// annotations: trusted, a tool it calls read-only runs at once when no
/// rule says otherwise. Admins only; recorded in the change log. Works as a
/// plain form post.
#[server(prefix = "/api/fn", endpoint = "upstream_trust")]
pub async fn set_upstream_trust(upstream: String, trust: String) -> Result<bool, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::changes::Change;
    let trusted = match trust.as_str() {
        "on" => true,
        "off" => false,
        other => {
            ctx::set_status(400);
            return Err(ServerFnError::new(format!("trust is on or off, not {other:?}")));
        }
    };
    let catalog = ctx::tool_catalog()?;
    ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Err(AccessError::Forbidden);
        }
        core.policy.set_trust(&upstream, trusted)?;
        let actor = user.actor().to_string();
        let action = if trusted { "trust annotations" } else { "distrust annotations" };
        core.changes.record(Change { actor: &actor, subject: "upstream", target: &upstream, action, detail: None })?;
        tracing::info!(upstream = %upstream, trusted, by = %user.username, "upstream annotations trust changed");
        Ok(())
    })
    .await?;
    // What agents may run at once changed: their lists may too.
    catalog.lists_changed();
    Ok(trusted)
}
