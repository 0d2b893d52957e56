//! Server functions the pages call, one file per area, and the data they
//! return (the shared model's views, with what a page needs around them).
//! The types compile on both sides; the bodies run only on the server,
//! against the same stores the HTTP API uses.

pub mod agents;
#[cfg(feature = "ssr")]
pub mod context;
pub mod executions;
pub mod grants;
#[cfg(feature = "ssr")]
mod held_links;
pub mod history;
#[cfg(feature = "ssr")]
mod minted;
pub mod notify;
pub mod oauth;
pub mod overview;
pub mod policies;
pub mod tools;
pub mod upstreams;
pub mod users;

pub use agents::*;
#[cfg(feature = "ssr")]
pub use context::{OAuthConsent, ToolCatalog};
pub use executions::*;
pub use grants::*;
#[cfg(feature = "ssr")]
pub use held_links::HeldLinks;
pub use history::*;
#[cfg(feature = "ssr")]
pub use minted::MintedTokens;
pub use notify::*;
pub use oauth::*;
pub use overview::*;
pub use policies::*;
pub use tools::*;
pub use upstreams::*;
pub use users::*;
