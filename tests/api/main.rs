//! Integration tests: the real server on port 0 with a fresh database.

mod admin_api;
mod approvals;
mod browser;
mod cli;
mod console;
mod durable;
mod gate_holds;
mod grants;
mod helpers;
mod history;
mod mcp_auth;
mod mcp_transport;
mod native;
mod notify;
mod oauth;
mod operator;
mod page_guards;
mod pinning;
mod proxy;
mod relay_stress;
mod replicas;
mod shutdown;
mod starvation;
mod throttling;
mod upstreams;
mod users;
