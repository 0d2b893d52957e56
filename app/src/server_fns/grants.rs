//! The grants page: live grants the viewer may see, and revoking one.

use gatehouse_model::{GrantId, GrantsView};
use leptos::prelude::*;

#[cfg(feature = "ssr")]
use super::context as ctx;

/// Live grants the signed-in user may see (everyone's for admins), newest first.
#[server(prefix = "/api/fn", endpoint = "grants")]
pub async fn list_grants() -> Result<GrantsView, ServerFnError> {
    ctx::blocking(|user, core| {
        let grants = core.grants.list_for(&user)?;
        Ok(GrantsView { now_ms: core.clock.now_ms(), is_admin: user.is_admin, grants })
    })
    .await
}

/// Revokes grant `id` at once (its agent's owner or an admin); recorded in
/// the change log. Works as a plain form post before hydration.
#[server(prefix = "/api/fn", endpoint = "revoke-grant")]
pub async fn revoke_grant(id: GrantId) -> Result<(), ServerFnError> {
    let (user, core) = ctx::context()?;
    match core.run(move |core| core.grants.revoke_for(&user, &id)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => {
            ctx::set_status(gatehouse_core::Status::status(&e));
            Err(ServerFnError::new(e.to_string()))
        }
        Err(e) => Err(ServerFnError::new(e.to_string())),
    }
}
