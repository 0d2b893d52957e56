//! Gatehouse: a self-hosted MCP gateway that makes AI agents ask a human
//! before they act. This crate is the server: configuration, the HTTP router,
//! the `/mcp` endpoint, the HTTP API and the embedded site.

// Rendering the site's deeply nested view types on the server needs more
// than the default query depth.
#![recursion_limit = "512"]

pub mod addresses;
pub mod api;
pub mod auth;
pub mod cli;
pub mod config;
pub mod error;
pub mod health;
pub mod housekeeping;
pub mod https;
pub mod in_flight;
pub mod mcp;
pub mod metrics;
pub mod notify;
pub mod oauth;
pub mod operations;
pub mod polled;
pub mod reload;
pub mod router;
pub mod security;
pub mod server;
pub mod server_fns;
pub mod shutdown;
pub mod site;
pub mod startup;
pub mod state;
pub mod telemetry;
pub mod throttle;
pub mod tls;
pub mod tool_error;
pub mod upstream_sources;
