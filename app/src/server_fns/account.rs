//! The account page: the signed-in person's own password and browser
//! sessions, their agents and those agents' credentials, and what tells
//! them of a call that waits. Everyone sees only their own here, admins too
//! (everyone's is on the agents and users pages).

#[cfg(feature = "ssr")]
use super::context as ctx;
use gatehouse_model::CredentialView;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// What the account page shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AccountView {
    /// Server time when read (Unix ms).
    pub now_ms: i64,
    /// The viewer's name.
    pub username: String,
    /// Whether the viewer is an admin.
    pub is_admin: bool,
    /// The viewer's live browser sessions, this one included.
    pub my_sessions: usize,
    /// The credentials of the viewer's own agents, newest first.
    pub credentials: Vec<CredentialView>,
    /// The shared notification targets every waiting call is also sent to
    /// (`[[notify]]`): their names and kinds only, never a URL.
    pub channels: Vec<Channel>,
}

/// A notification target as a person who is told by it sees it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Channel {
    /// Its name.
    pub name: String,
    /// `json` (a webhook), `slack` or `ntfy`.
    pub format: String,
}

/// The signed-in person's account.
#[server(prefix = "/api/fn", endpoint = "account")]
pub async fn get_account() -> Result<AccountView, ServerFnError> {
    let channels = match use_context::<std::sync::Arc<dyn super::NotifyTargets>>() {
        Some(n) => n
            .notify_targets()
            .into_iter()
            .filter(|t| t.enabled)
            .map(|t| Channel { name: t.name, format: t.format })
            .collect(),
        None => Vec::new(),
    };
    ctx::blocking(move |user, core| {
        let credentials: Vec<CredentialView> =
            core.credentials.list()?.into_iter().filter(|c| c.owner_id == Some(user.id)).collect();
        Ok(AccountView {
            now_ms: core.clock.now_ms(),
            my_sessions: core.users.live_sessions(user.id)?,
            username: user.username.clone(),
            is_admin: user.is_admin,
            credentials,
            channels,
        })
    })
    .await
}
