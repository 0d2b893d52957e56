//! Server functions the pages call, one file per area, and the data they
//! return (the shared model's views, with what a page needs around them).
//! The types compile on both sides; the bodies run only on the server,
//! against the same stores the HTTP API uses.

pub mod account;
pub mod agents;
#[cfg(feature = "ssr")]
pub mod context;
pub mod executions;
pub mod grants;
pub mod history;
pub mod me;
pub mod notify;
pub mod oauth;
pub mod overview;
pub mod policies;
pub mod profiles;
#[cfg(feature = "ssr")]
mod shown_once;
pub mod tools;
pub mod upstreams;
pub mod users;

pub use account::*;
pub use agents::*;

/// A form field of comma-separated patterns, each trimmed, empty ones dropped.
#[cfg(feature = "ssr")]
fn comma_list(field: Option<String>) -> Vec<String> {
    field.unwrap_or_default().split(',').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect()
}
#[cfg(feature = "ssr")]
pub use context::{OAuthConsent, ToolCatalog};
pub use executions::*;
pub use grants::*;
pub use history::*;
pub use me::*;
pub use notify::*;
pub use oauth::*;
pub use overview::*;
pub use policies::*;
pub use profiles::*;
#[cfg(feature = "ssr")]
pub use shown_once::{HeldLinks, MintedTokens, ShownOnce};
pub use tools::*;
pub use upstreams::*;
pub use users::*;
