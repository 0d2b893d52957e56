//! Configuration: defaults, then `gatehouse.toml`, then `GATEHOUSE_*`
//! environment variables, then command-line flags. Unknown keys and bad values
//! are start-up errors that name the key (and the file line).
//!
//! One tree, [`FileConfig`] (`tree.rs`), holds every key and its default;
//! `env.rs` lays the environment over the file with figment; `validate.rs`
//! lays the flags over that, checks it and resolves it into [`Config`], what
//! the server runs with: the checked tree itself, read through `Deref`, with
//! what its tables resolve to (and from which [`Config::settings`] derives
//! the core's). Defaults the core also needs are the core's
//! ([`gatehouse_core::Settings::default`]), taken by the tree's. `upstreams.rs` holds the `[[upstream]]` tables and their checks;
//! `[[notify]]` is [`crate::notify::config`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use url::Url;

use crate::telemetry::LogFormat;

mod env;
pub mod error;
pub mod live;
#[cfg(test)]
mod tests;
mod tree;
mod upstreams;
mod validate;

pub use error::ConfigError;
pub use tree::{DatabaseTable, FileConfig, NativeUrl, OAuthConfig};
pub use upstreams::{StdioCommand, UpstreamConfig, upstream_defaults};

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

/// The configuration the server runs with: the tree ([`FileConfig`], every
/// key read through `Deref`: `config.approval_ttl`), checked by
/// [`Config::resolve`], and what its tables resolve to. A key is declared
/// and defaulted once, in the tree; nothing here copies one.
#[derive(Debug, Clone)]
pub struct Config {
    tree: FileConfig,
    /// `trusted_proxies`, as networks.
    pub proxy_networks: Vec<ipnet::IpNet>,
    /// `[[policy]]`, as the core's rules.
    pub policy_rules: Vec<gatehouse_core::policy::Rule>,
    /// `[[profile]]`, checked.
    pub profiles: Vec<gatehouse_core::model::Profile>,
    /// `[[notify]]`, as delivery targets.
    pub notify_targets: Vec<crate::notify::Target>,
}

/// The resolved configuration reads as the tree it was resolved from.
impl std::ops::Deref for Config {
    type Target = FileConfig;

    fn deref(&self) -> &FileConfig {
        &self.tree
    }
}

/// Tests set keys on a resolved configuration (the harness points it at a
/// data directory and a test database); a running server never changes its
/// own.
impl std::ops::DerefMut for Config {
    fn deref_mut(&mut self) -> &mut FileConfig {
        &mut self.tree
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
        match file {
            Some(path) => Self::from_text(path, &FileConfig::read(path)?, overrides),
            None => Self::resolve(env::overlay("")?, overrides),
        }
    }

    /// [`Config::load`] of file `path` whose text was read already (a reload).
    pub fn from_text(path: &Path, text: &str, overrides: &Overrides) -> Result<Self, ConfigError> {
        // The file alone first: its mistakes are reported with their line.
        FileConfig::parse(path, text)?;
        Self::resolve(env::overlay(text)?, overrides)
    }

    /// Lays the flags over the tree, checks it and resolves it.
    pub fn resolve(tree: FileConfig, overrides: &Overrides) -> Result<Self, ConfigError> {
        validate::resolve(tree, overrides)
    }

    /// The base URL people and agents use: the public URL, or the bound address.
    pub fn base_url(&self, bound: SocketAddr) -> String {
        match &self.public_url {
            Some(url) => url.as_str().trim_end_matches('/').to_string(),
            None if self.tls().is_some() => format!("https://{bound}"),
            None => format!("http://{bound}"),
        }
    }

    /// The certificate and key files, when Gatehouse serves HTTPS itself.
    pub fn tls(&self) -> Option<crate::https::TlsFiles> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(crate::https::TlsFiles { cert: cert.clone(), key: key.clone() }),
            _ => None,
        }
    }

    /// PostgreSQL shared by several replicas (`[database] url`, empty as
    /// absent); `None`: SQLite in `data_dir`.
    pub fn database_url(&self) -> Option<&str> {
        self.database.url.as_deref().filter(|url| !url.is_empty())
    }

    /// What the domain stores need from the configuration.
    pub fn settings(&self) -> gatehouse_core::Settings {
        gatehouse_core::Settings {
            liveness_window: self.liveness_window,
            approval_ttl: self.approval_ttl,
            policy_rules: self.policy_rules.clone(),
            profiles: self.profiles.clone(),
            trusted_upstreams: self.upstream.iter().filter(|u| u.trust_annotations).map(|u| u.name.clone()).collect(),
            // Never longer than the approval itself may wait.
            run_window: self.run_window.min(self.approval_ttl),
            max_executions_per_credential: self.max_executions_per_credential,
            oauth: gatehouse_core::oauth::Lifetimes {
                access: self.oauth.access_token_ttl,
                refresh: self.oauth.refresh_token_ttl,
                registration: gatehouse_core::oauth::Registration {
                    unused_ttl: self.oauth.unused_registration_ttl,
                    per_address: self.oauth.max_unused_registrations_per_address,
                },
            },
            per_user: gatehouse_core::PerUser {
                credentials: self.max_credentials_per_user,
                browser_sessions: self.max_browser_sessions_per_user,
                oauth_clients: self.max_oauth_clients_per_user,
                grants: self.max_grants_per_user,
            },
            suggest: gatehouse_core::grants::suggest::Suggest {
                after: self.suggest_grants_after,
                window: self.suggest_grants_window,
            },
        }
    }

    /// Whether the site is served over HTTPS (cookies get `__Host-` and
    /// `Secure`, responses HSTS): the public URL's scheme, else whether
    /// Gatehouse serves TLS itself.
    pub fn https(&self) -> bool {
        match &self.public_url {
            Some(url) => url.scheme() == "https",
            None => self.tls().is_some(),
        }
    }
}
