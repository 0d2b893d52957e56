//! Gatehouse's domain: the SQLite store, agent credentials, users and browser
//! sessions, admin API tokens and the live event hub.
//!
//! Both the server (`gatehouse`) and the site's server functions
//! (`gatehouse-app` with `ssr`) depend on this crate, so neither depends on the
//! other.

pub mod api_tokens;
pub mod clock;
pub mod credentials;
pub mod db;
pub mod error;
pub mod live;
pub mod secret;
pub mod users;

pub use clock::{Clock, ManualClock, SystemClock};
pub use db::Db;
pub use error::CoreError;

use std::sync::Arc;
use std::time::Duration;

/// Everything the server and the site share, cheap to clone.
#[derive(Clone)]
pub struct Core {
    /// The embedded database.
    pub db: Db,
    /// Source of "now" (injected in tests).
    pub clock: Arc<dyn Clock>,
    /// Agent credentials for `/mcp`.
    pub credentials: credentials::CredentialStore,
    /// Users, browser sessions and the first-run setup token.
    pub users: users::UserStore,
    /// Admin API tokens for orchestrators.
    pub api_tokens: api_tokens::ApiTokenStore,
    /// Live MCP sessions and the event fan-out the pages subscribe to.
    pub live: live::LiveHub,
}

impl Core {
    /// Builds the shared stores over an open database.
    pub fn new(db: Db, clock: Arc<dyn Clock>, liveness_window: Duration) -> Self {
        let live = live::LiveHub::new();
        Self {
            credentials: credentials::CredentialStore::new(
                db.clone(),
                clock.clone(),
                liveness_window,
                live.clone(),
            ),
            users: users::UserStore::new(db.clone(), clock.clone()),
            api_tokens: api_tokens::ApiTokenStore::new(db.clone(), clock.clone()),
            live,
            db,
            clock,
        }
    }
}
