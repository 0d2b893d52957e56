//! What the console shows once — the token of a credential minted in the
//! browser, an invite or reset link an admin made — as its pages reach it.
//! The secret itself waits in core's [`ShowOnce`] store (in the database, so
//! the redirect to the page that shows it may land on any replica; for at
//! most ten minutes, to the user who made it); this adds where the server is
//! reachable, which the secrets are built from.
//!
//! [`ShowOnce`]: gatehouse_core::show_once::ShowOnce

use std::marker::PhantomData;
use std::sync::Arc;

use gatehouse_core::show_once::Shown;
use gatehouse_model::{MintedCredential, PasswordLink};
use leptos::prelude::ServerFnError;

/// Secrets of one kind the console shows once, and the server's base URL.
/// Cheap to clone.
pub struct ShownOnce<T> {
    base_url: Arc<str>,
    kind: PhantomData<fn() -> T>,
}

impl<T> Clone for ShownOnce<T> {
    fn clone(&self) -> Self {
        Self { base_url: self.base_url.clone(), kind: PhantomData }
    }
}

/// Tokens minted in the browser, shown once on `/agents?minted=ID`.
pub type MintedTokens = ShownOnce<MintedCredential>;
/// Invite and reset links, shown once on `/users?link=ID`.
pub type HeldLinks = ShownOnce<PasswordLink>;

impl<T: Shown + Send + 'static> ShownOnce<T> {
    /// For a server reachable at `base_url`.
    pub fn new(base_url: &str) -> Self {
        Self { base_url: base_url.trim_end_matches('/').into(), kind: PhantomData }
    }

    /// The server's base URL (links start with it).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The secret held as `id`, if `viewer` made it and it was not shown
    /// yet (in the stores' lane: the store may wait for PostgreSQL).
    pub async fn take(
        &self,
        core: gatehouse_core::Core,
        id: String,
        viewer: String,
    ) -> Result<Option<T>, ServerFnError> {
        core.run(move |core| core.show_once.take::<T>(&id, &viewer))
            .await
            .map_err(|e| ServerFnError::new(e.to_string()))?
            .map_err(|e| ServerFnError::new(e.to_string()))
    }
}

impl MintedTokens {
    /// The `/mcp` URL agents connect to.
    pub fn endpoint(&self) -> String {
        format!("{}/mcp", self.base_url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_built_without_a_double_slash() {
        assert_eq!(MintedTokens::new("http://gh.test/").endpoint(), "http://gh.test/mcp");
        assert_eq!(HeldLinks::new("http://gh.test/").base_url(), "http://gh.test");
    }
}
