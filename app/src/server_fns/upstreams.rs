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
    Ok(UpstreamList { show_errors, upstreams, elsewhere })
}
