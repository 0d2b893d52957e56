//! The users page, for admins: they invite users (a one-time link instead of a
//! typed password), make reset links, disable, enable, promote, demote and
//! remove users. Every change goes to the change log.

use gatehouse_model::{ChangeEntry, LinkPurpose, PasswordLink, UserView};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// What the users page shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UsersView {
    /// Server time when read (Unix ms).
    pub now_ms: i64,
    /// The viewer's name.
    pub username: String,
    /// Every user.
    pub users: Vec<UserView>,
    /// The latest user changes, newest first.
    pub changes: Vec<ChangeEntry>,
}

/// What a one-time link opened on the set-password page is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum LinkInfo {
    /// It sets `username`'s password.
    Valid {
        /// Whose password it sets.
        username: String,
        /// Invite or reset.
        purpose: LinkPurpose,
    },
    /// It is no longer usable; the message says why.
    Refused(String),
}

#[cfg(feature = "ssr")]
mod server {
    use gatehouse_core::CoreError;
    use gatehouse_core::changes::Change;
    use gatehouse_core::users::User;
    use leptos::prelude::*;

    use super::super::context::{self as ctx, set_status};

    /// Runs `work` in the stores' lane for the signed-in user; `admin`
    /// refuses everyone else with 403. Errors answer with their status.
    pub async fn blocking<T: Send + 'static>(
        admin: bool,
        work: impl FnOnce(User, gatehouse_core::Core) -> Result<T, CoreError> + Send + 'static,
    ) -> Result<T, ServerFnError> {
        let (user, core) = ctx::context()?;
        if admin && !user.is_admin {
            set_status(403);
            return Err(ServerFnError::new("only an admin may manage users"));
        }
        match core.clone().run(move |core| work(user, core)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                set_status(gatehouse_core::Status::status(&e));
                Err(ServerFnError::new(e.to_string()))
            }
            Err(e) => Err(ServerFnError::new(e.to_string())),
        }
    }

    /// Writes a user change to the change log, as `by` made it.
    pub fn record(
        core: &gatehouse_core::Core,
        by: &User,
        target: &str,
        action: &str,
        detail: Option<&str>,
    ) -> Result<(), CoreError> {
        core.changes.record(Change { actor: &by.actor().to_string(), subject: "user", target, action, detail })
    }

    /// The error a failed password check answers with.
    pub fn refuse(code: u16, message: &str) -> ServerFnError {
        set_status(code);
        ServerFnError::new(message)
    }
}

/// Every user and the latest changes to them (admins only: 403 otherwise;
/// a person's own account is [`super::get_account`]).
#[server(prefix = "/api/fn", endpoint = "users")]
pub async fn list_users() -> Result<UsersView, ServerFnError> {
    server::blocking(true, |user, core| {
        Ok(UsersView {
            now_ms: core.clock.now_ms(),
            users: core.users.list()?,
            changes: core.changes.recent("user", 10)?,
            username: user.username,
        })
    })
    .await
}

/// Adds `username` (an admin if `admin` is `on`) without a password and
/// makes their one-time invite link; the browser is sent to
/// `/users?link=ID`, where the link is shown once to this admin.
#[server(prefix = "/api/fn", endpoint = "invite")]
pub async fn invite_user(username: String, #[server(default)] admin: Option<String>) -> Result<(), ServerFnError> {
    let is_admin = admin.is_some_and(|a| a == "on" || a == "true");
    let username = username.trim().to_string();
    issue_link(move |core| core.users.invite(&username, is_admin), if is_admin { Some("admin") } else { None }).await
}

/// A new one-time link for `username`: a reset link (their password works
/// until it is used), or a fresh invite if they never chose a password.
#[server(prefix = "/api/fn", endpoint = "reset-link")]
pub async fn reset_link(username: String) -> Result<(), ServerFnError> {
    issue_link(move |core| core.users.new_link(&username), None).await
}

#[cfg(feature = "ssr")]
async fn issue_link(
    make: impl FnOnce(&gatehouse_core::Core) -> Result<gatehouse_core::users::IssuedLink, gatehouse_core::CoreError>
    + Send
    + 'static,
    detail: Option<&'static str>,
) -> Result<(), ServerFnError> {
    let links = use_context::<super::HeldLinks>().ok_or_else(|| ServerFnError::new("no link store"))?;
    let base = links.base_url().to_string();
    let id = server::blocking(true, move |user, core| {
        let issued = make(&core)?;
        server::record(&core, &user, &issued.username, issued.purpose.as_str(), detail)?;
        // The link itself is never logged.
        tracing::info!(username = %issued.username, purpose = issued.purpose.as_str(), by = %user.username, "password link made");
        let link = PasswordLink {
            id: gatehouse_core::secret::new_id("link"),
            url: gatehouse_model::routes::password_link(&base, &issued.token),
            username: issued.username,
            purpose: issued.purpose,
            expires_ms: issued.expires_ms,
        };
        core.show_once.hold(&user.username, &link)?;
        Ok(link.id)
    })
    .await?;
    leptos_axum::redirect(&gatehouse_model::routes::users_link(&id));
    Ok(())
}

/// The link made as `id`, once, to the admin who made it.
#[server(prefix = "/api/fn", endpoint = "held-link")]
pub async fn take_link(id: String) -> Result<Option<PasswordLink>, ServerFnError> {
    let links = use_context::<super::HeldLinks>().ok_or_else(|| ServerFnError::new("no link store"))?;
    let (user, core) = crate::server_fns::context::context()?;
    links.take(core, id, user.username).await
}

/// Disables `username` (`disabled` = `true`: they cannot sign in, their
/// browser sessions end at once and their agents' credentials are revoked)
/// or enables them again (`false`).
#[server(prefix = "/api/fn", endpoint = "user-disabled")]
pub async fn set_user_disabled(username: String, disabled: String) -> Result<(), ServerFnError> {
    let disabled = disabled == "true";
    server::blocking(true, move |user, core| {
        if core.users.set_disabled(&username, disabled)? {
            let detail = if disabled {
                let revoked = core.credentials.revoke_by_owner(&username)?;
                Some(format!("sessions ended, {revoked} credential(s) revoked"))
            } else {
                None
            };
            let action = if disabled { "disable" } else { "enable" };
            server::record(&core, &user, &username, action, detail.as_deref())?;
            tracing::info!(%username, action, by = %user.username, "user changed");
        }
        Ok(())
    })
    .await
}

/// Makes `username` an admin (`admin` = `true`) or not.
#[server(prefix = "/api/fn", endpoint = "user-admin")]
pub async fn set_user_admin(username: String, admin: String) -> Result<(), ServerFnError> {
    let admin = admin == "true";
    server::blocking(true, move |user, core| {
        if core.users.set_admin(&username, admin)? {
            let action = if admin { "promote" } else { "demote" };
            server::record(&core, &user, &username, action, None)?;
            tracing::info!(%username, action, by = %user.username, "user changed");
        }
        Ok(())
    })
    .await
}

/// Removes `username`: their browser sessions, OAuth codes and tokens end at
/// once, every credential their agents hold is revoked, their calls waiting
/// for a decision are settled as revoked and their grants end. The audit log
/// keeps them as `NAME (removed #ID)`, without their user id, as does every
/// other place that named them, so a user added later with the same name
/// inherits neither grants, history, credentials' lines nor task results.
#[server(prefix = "/api/fn", endpoint = "user-remove")]
pub async fn remove_user(username: String) -> Result<(), ServerFnError> {
    server::blocking(true, move |user, core| {
        let id = core.users.removable(&username)?;
        // Settled first, so their audit entries are written before the user
        // goes: the removal then takes the user id off them and renames
        // their owner, with everything else that named the user
        // (`removed_name`), before anyone could take the name again.
        let settled = core.approvals.forget_owner(id);
        // Both are tried whatever the other does.
        let revoked = core.credentials.revoke_by_owner(&username);
        let grants = core.grants.end_owner(id);
        core.users.remove(&username)?;
        let (revoked, grants) = (revoked?, grants?);
        let detail = format!("{revoked} credential(s) revoked");
        server::record(&core, &user, &username, "remove", Some(&detail))?;
        tracing::info!(%username, revoked, settled, grants, by = %user.username, "user removed");
        Ok(())
    })
    .await
}

/// Changes the viewer's own password (`current` must be right; `new` twice)
/// and signs out their other browser sessions; this one stays.
#[server(prefix = "/api/fn", endpoint = "password")]
pub async fn change_password(current: String, new: String, confirm: String) -> Result<(), ServerFnError> {
    use gatehouse_core::users::BrowserSession;
    let (user, core) = crate::server_fns::context::context()?;
    if new != confirm {
        return Err(server::refuse(400, "the new password and its confirmation differ"));
    }
    let keep = use_context::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<BrowserSession>().cloned())
        .ok_or_else(|| server::refuse(401, "only a browser session can change its password"))?;
    match core.users.change_own_password(user.clone(), current, new, keep).await {
        Ok(true) => {}
        Ok(false) => return Err(server::refuse(403, "the current password is not right")),
        Err(e @ gatehouse_core::CoreError::Invalid { .. }) => return Err(server::refuse(400, &e.to_string())),
        Err(e) => return Err(ServerFnError::new(e.to_string())),
    }
    let name = user.username.clone();
    core.run(move |core| server::record(&core, &user, &name, "password", Some("changed")))
        .await
        .map_err(|e| ServerFnError::new(e.to_string()))?
        .map_err(|e| ServerFnError::new(e.to_string()))?;
    leptos_axum::redirect(&format!("{}?changed=password", gatehouse_model::routes::ACCOUNT));
    Ok(())
}

/// Ends every browser session of the viewer but this one; the browser is
/// sent to `/account?signed_out=N` to say how many ended.
#[server(prefix = "/api/fn", endpoint = "sign-out-others")]
pub async fn sign_out_others() -> Result<(), ServerFnError> {
    use gatehouse_core::users::BrowserSession;
    let keep = use_context::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<BrowserSession>().cloned())
        .ok_or_else(|| server::refuse(401, "only a browser session can sign out its others"))?;
    let n = server::blocking(false, move |user, core| core.users.end_other_sessions(user.id, &keep)).await?;
    leptos_axum::redirect(&format!("{}?signed_out={n}", gatehouse_model::routes::ACCOUNT));
    Ok(())
}

/// What the one-time link `token` is (no sign-in needed: the token is the
/// key). Cheap: no password is hashed.
#[server(prefix = "/api/fn", endpoint = "password-link")]
pub async fn password_link_info(token: String) -> Result<LinkInfo, ServerFnError> {
    use gatehouse_core::users::LinkCheck;
    let core = use_context::<gatehouse_core::Core>().ok_or_else(|| ServerFnError::new("no core"))?;
    let check = core
        .run(move |core| core.users.password_link(&token))
        .await
        .map_err(|e| ServerFnError::new(e.to_string()))?
        .map_err(|e| ServerFnError::new(e.to_string()))?;
    Ok(match check {
        LinkCheck::Valid { username, purpose } => LinkInfo::Valid { username, purpose },
        other => LinkInfo::Refused(other.check().err().map(|e| e.to_string()).unwrap_or_default()),
    })
}

/// Every admin API token, newest first (admins only).
#[server(prefix = "/api/fn", endpoint = "api-tokens")]
pub async fn list_api_tokens() -> Result<Vec<gatehouse_model::ApiTokenView>, ServerFnError> {
    server::blocking(true, |_, core| {
        Ok(core
            .api_tokens
            .list()?
            .into_iter()
            .map(|t| gatehouse_model::ApiTokenView {
                id: t.id,
                name: t.name,
                created_ms: t.created_ms,
                revoked: t.revoked,
            })
            .collect())
    })
    .await
}

/// Mints an admin API token named `name` (admins only; in the change log);
/// the browser is sent to `/users?api_token=HANDLE`, where the token is
/// shown once to this admin.
#[server(prefix = "/api/fn", endpoint = "api-token-mint")]
pub async fn mint_api_token(name: String) -> Result<(), ServerFnError> {
    let handle = server::blocking(true, move |user, core| {
        let issued = core.api_tokens.issue(name.trim())?;
        core.changes.record(gatehouse_core::changes::Change {
            actor: &user.actor().to_string(),
            subject: "user",
            target: &issued.id,
            action: "mint API token",
            detail: Some(&issued.name),
        })?;
        // The token itself is never logged.
        tracing::info!(id = %issued.id, name = %issued.name, by = %user.username, "admin API token minted");
        let shown = gatehouse_model::MintedApiToken {
            handle: gatehouse_core::secret::new_id("shown"),
            id: issued.id,
            name: issued.name,
            token: issued.token,
        };
        core.show_once.hold(&user.username, &shown)?;
        Ok(shown.handle)
    })
    .await?;
    leptos_axum::redirect(&format!("{}?api_token={handle}", gatehouse_model::routes::USERS));
    Ok(())
}

/// The admin API token minted as `handle`, if this admin minted it and it
/// was not shown yet.
#[server(prefix = "/api/fn", endpoint = "api-token-take")]
pub async fn take_api_token(handle: String) -> Result<Option<gatehouse_model::MintedApiToken>, ServerFnError> {
    server::blocking(true, move |user, core| core.show_once.take(&handle, &user.username)).await
}

/// Revokes admin API token `id` at once (admins only; in the change log).
#[server(prefix = "/api/fn", endpoint = "api-token-revoke")]
pub async fn revoke_api_token(id: String) -> Result<(), ServerFnError> {
    server::blocking(true, move |user, core| {
        if !core.api_tokens.revoke(&id)? {
            return Err(gatehouse_core::CoreError::NotFound(format!("no live API token {id:?}")));
        }
        core.changes.record(gatehouse_core::changes::Change {
            actor: &user.actor().to_string(),
            subject: "user",
            target: &id,
            action: "revoke API token",
            detail: None,
        })?;
        tracing::info!(%id, by = %user.username, "admin API token revoked");
        Ok(())
    })
    .await
}
