//! The `[[notify]]` targets' delivery status, for admins on `/upstreams`.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// One notification target as the console shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NotifyTargetInfo {
    /// Its name (also the `/metrics` label).
    pub name: String,
    /// Scheme, host and port only: a path or query may hold a token.
    pub url: String,
    /// `json`, `slack` or `ntfy`.
    pub format: String,
    /// Messages the receiver accepted.
    pub delivered: u64,
    /// Messages given up on after retries.
    pub failed: u64,
    /// Messages dropped because its queue was full.
    pub dropped: u64,
    /// When a message was last accepted (Unix ms).
    pub last_success_ms: Option<i64>,
    /// When a message was last given up on (Unix ms).
    pub last_failure_ms: Option<i64>,
    /// Why that was (never the URL or secret).
    pub last_error: Option<String>,
}

/// Where the page reads the targets from (the server's notifier implements it).
#[cfg(feature = "ssr")]
pub trait NotifyTargets: Send + Sync {
    /// Every configured target with its status, in config order.
    fn notify_targets(&self) -> Vec<NotifyTargetInfo>;
}

/// What the notifications section shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NotifyList {
    /// Server time when read (Unix ms), for relative times.
    pub now_ms: i64,
    /// Every target (empty for non-admins: URLs and errors are operator matters).
    pub targets: Vec<NotifyTargetInfo>,
}

/// The `[[notify]]` targets and their delivery status: admins only (others
/// get an empty list).
#[server(prefix = "/api/fn", endpoint = "notify_targets")]
pub async fn list_notify_targets() -> Result<NotifyList, ServerFnError> {
    let (user, core) = super::context::context()?;
    let targets = match use_context::<std::sync::Arc<dyn NotifyTargets>>() {
        Some(n) if user.is_admin => n.notify_targets(),
        _ => Vec::new(),
    };
    Ok(NotifyList { now_ms: core.clock.now_ms(), targets })
}
