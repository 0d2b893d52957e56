//! Server functions the pages call, one file per area, and the data they
//! return (the shared model's views, with what a page needs around them).
//! The types compile on both sides; the bodies run only on the server,
//! against the same stores the HTTP API uses.

#[cfg(feature = "ssr")]
mod context;
pub mod executions;
pub mod history;
pub mod overview;
pub mod upstreams;

pub use executions::*;
pub use history::*;
pub use overview::*;
pub use upstreams::*;
