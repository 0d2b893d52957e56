//! Configuration: defaults, then `gatehouse.toml`, then `GATEHOUSE_*`
//! environment variables, then command-line flags. Unknown keys and bad values
//! are start-up errors that name the key (and the file line).
//!
//! One tree, [`FileConfig`] (`tree.rs`), holds every key and its default;
//! `env.rs` lays the environment over the file with figment; `validate.rs`
//! lays the flags over that, checks it and resolves it into [`Config`], what
//! the server runs with (and from which [`Config::settings`] derives the
//! core's). `upstreams.rs` holds the `[[upstream]]` tables and their checks;
//! `[[notify]]` is [`crate::notify::config`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use url::Url;

use crate::telemetry::LogFormat;

mod env;
pub mod error;
#[cfg(test)]
mod tests;
mod tree;
mod upstreams;
mod validate;

pub use error::ConfigError;
pub use tree::{DatabaseTable, FileConfig, NativeUrl, OAuthConfig, PolicyRule};
pub use upstreams::{UpstreamConfig, upstream_defaults};

/// Values given on the command line (they win over everything else).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--listen`
    pub listen: Option<SocketAddr>,
    /// `--data-dir`
    pub data_dir: Option<PathBuf>,
    /// `--public-url`
    pub public_url: Option<Url>,
    /// `--database-url`
    pub database_url: Option<String>,
    /// `--log-format`
    pub log_format: Option<LogFormat>,
    /// `--metrics-listen`
    pub metrics_listen: Option<SocketAddr>,
}

impl Overrides {
    /// `tree` with the flags given laid over it.
    fn apply(&self, mut tree: FileConfig) -> FileConfig {
        if let Some(listen) = self.listen {
            tree.listen = listen;
        }
        if let Some(dir) = &self.data_dir {
            tree.data_dir = dir.clone();
        }
        if let Some(url) = &self.public_url {
            tree.public_url = Some(url.clone());
        }
        if let Some(url) = &self.database_url {
            tree.database.url = Some(url.clone());
        }
        if let Some(format) = self.log_format {
            tree.log_format = format;
        }
        if let Some(listen) = self.metrics_listen {
            tree.metrics_listen = Some(listen);
        }
        tree
    }
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Directory holding the database.
    pub data_dir: PathBuf,
    /// The URL people and agents reach Gatehouse at, if not the listen address.
    pub public_url: Option<Url>,
    /// PostgreSQL shared by several replicas; `None`: SQLite in `data_dir`.
    pub database_url: Option<String>,
    /// A credential lapses after this long without a sign of life.
    pub liveness_window: Duration,
    /// Pending approvals expire after this long.
    pub approval_ttl: Duration,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Log line format.
    pub log_format: LogFormat,
    /// Extra accepted `Host` values.
    pub allowed_hosts: Vec<String>,
    /// Extra accepted `/mcp` origins.
    pub allowed_origins: Vec<String>,
    /// Reverse proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Policy rules from the file.
    pub policy: Vec<gatehouse_core::policy::Rule>,
    /// Whether model-mode sessions may decide their own calls (opt-in).
    pub allow_model_decisions: bool,
    /// How native mode asks URL-capable 2025-11-25 clients.
    pub native_url: NativeUrl,
    /// Upstream MCP servers.
    pub upstreams: Vec<UpstreamConfig>,
    /// Items per page of the merged MCP lists.
    pub list_page_size: usize,
    /// Gate limits (trust switches, windows and caps).
    pub limits: Limits,
    /// Audit entries older than this are deleted.
    pub audit_retention: Duration,
    /// A separate address serving `/metrics` without authentication (on the
    /// main address it needs an admin).
    pub metrics_listen: Option<SocketAddr>,
    /// Where messages about executions go (`[[notify]]`).
    pub notify: Vec<crate::notify::Target>,
    /// The OAuth authorization server (`[oauth]`).
    pub oauth: OAuthConfig,
}

/// What bounds the gate: who may decide besides a person, and how much one
/// credential or client may hold. Each has a config key of the same name.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Whether a client-answered form elicitation may decide a call.
    pub trust_client_forms: bool,
    /// An approved call must start within this long (never longer than `approval_ttl`).
    pub run_window: Duration,
    /// Calls one credential may have waiting or running.
    pub max_executions_per_credential: usize,
    /// Largest arguments (serialised JSON bytes) of a call that waits for approval.
    pub max_gated_arguments_bytes: usize,
    /// MCP sessions one credential may hold open.
    pub max_sessions_per_credential: usize,
    /// MCP sessions open in all.
    pub max_sessions: usize,
    /// TCP connections served at once (more wait to be accepted).
    pub max_connections: usize,
    /// Time a client has to send its request headers.
    pub header_read_timeout: Duration,
    /// A connection with no request in progress is closed after this long
    /// (keep-alive HTTP/1, HTTP/2 with no open stream).
    pub idle_timeout: Duration,
    /// `/mcp` requests one credential may have in progress at once.
    pub max_requests_per_credential: usize,
    /// Connections `/mcp` requests never take: at most `max_connections -
    /// reserved_connections` of them are in progress at once, so held waits
    /// leave room for the console, sign-in and `/healthz` (see
    /// [`Limits::mcp_requests`]).
    pub reserved_connections: usize,
    /// Live agent credentials one user may own (minted; OAuth sign-ins count apart).
    pub max_credentials_per_user: usize,
    /// Browser sessions one user keeps; a sign-in past it ends the oldest.
    pub max_browser_sessions_per_user: usize,
    /// OAuth clients signed in as one user's agents at once.
    pub max_oauth_clients_per_user: usize,
    /// Live grants for one user's agents.
    pub max_grants_per_user: usize,
}

impl Limits {
    /// `/mcp` requests in progress at once across all credentials: what
    /// `max_connections` leaves after `reserved_connections`, which counts
    /// for at most half of them (so a small `max_connections` still serves
    /// agents).
    pub fn mcp_requests(&self) -> usize {
        let reserved = self.reserved_connections.min(self.max_connections / 2);
        (self.max_connections - reserved).max(1)
    }
}

impl Default for Limits {
    /// The defaults of [`FileConfig::default`].
    fn default() -> Self {
        validate::limits(&FileConfig::default())
    }
}

impl Default for Config {
    /// [`FileConfig::default`], resolved.
    fn default() -> Self {
        Config::resolve(FileConfig::default(), &Overrides::default()).expect("the defaults are valid")
    }
}

impl Config {
    /// Resolves defaults < file (if given) < environment < flags.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let text = match file {
            Some(path) => {
                let text = FileConfig::read(path)?;
                // The file alone first: its mistakes are reported with their line.
                FileConfig::parse(path, &text)?;
                text
            }
            None => String::new(),
        };
        Self::resolve(env::overlay(&text)?, overrides)
    }

    /// Lays the flags over the tree, checks it and resolves it.
    pub fn resolve(tree: FileConfig, overrides: &Overrides) -> Result<Self, ConfigError> {
        validate::resolve(tree, overrides)
    }

    /// The base URL people and agents use: the public URL, or the bound address.
    pub fn base_url(&self, bound: SocketAddr) -> String {
        match &self.public_url {
            Some(url) => url.as_str().trim_end_matches('/').to_string(),
            None => format!("http://{bound}"),
        }
    }

    /// What the domain stores need from the configuration.
    pub fn settings(&self) -> gatehouse_core::Settings {
        gatehouse_core::Settings {
            liveness_window: self.liveness_window,
            approval_ttl: self.approval_ttl,
            policy_rules: self.policy.clone(),
            // Never longer than the approval itself may wait.
            run_window: self.limits.run_window.min(self.approval_ttl),
            max_executions_per_credential: self.limits.max_executions_per_credential,
            oauth: gatehouse_core::oauth::Lifetimes {
                access: self.oauth.access_token_ttl,
                refresh: self.oauth.refresh_token_ttl,
                registration: gatehouse_core::oauth::Registration {
                    unused_ttl: self.oauth.unused_registration_ttl,
                    per_address: self.oauth.max_unused_registrations_per_address,
                },
            },
            per_user: gatehouse_core::PerUser {
                credentials: self.limits.max_credentials_per_user,
                browser_sessions: self.limits.max_browser_sessions_per_user,
                oauth_clients: self.limits.max_oauth_clients_per_user,
                grants: self.limits.max_grants_per_user,
            },
        }
    }

    /// Whether the site is served over HTTPS (cookies get `__Host-` and `Secure`).
    pub fn https(&self) -> bool {
        self.public_url.as_ref().is_some_and(|u| u.scheme() == "https")
    }
}
