//! The configuration tree: `gatehouse.toml` as written, one field per key.
//!
//! Every key is optional: `#[serde(default)]` takes the missing ones from
//! [`FileConfig::default`], the one place each top-level default is written
//! (`[oauth]`'s are in [`OAuthConfig::default`], `[[upstream]]`'s in
//! [`super::upstream_defaults`]). Unknown keys are errors.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use super::{ConfigError, UpstreamConfig};
use crate::notify::NotifyConfig;
use crate::telemetry::LogFormat;

/// The keys of `gatehouse.toml` (and of the `GATEHOUSE_*` variables, which
/// [`super::env`] lays over it).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    /// `listen = "127.0.0.1:8080"`: port 0 picks a free one.
    pub listen: SocketAddr,
    /// `data_dir = "./.gatehouse"`: holds the database and the request-state key.
    pub data_dir: PathBuf,
    /// `tls_cert = "/etc/gatehouse/cert.pem"`: serve HTTPS (HTTP/2 by ALPN,
    /// or HTTP/1.1) with this PEM certificate chain; needs `tls_key`. Both
    /// files are read again when they change.
    pub tls_cert: Option<PathBuf>,
    /// `tls_key = "/etc/gatehouse/key.pem"`: the certificate's PEM private key.
    pub tls_key: Option<PathBuf>,
    /// `public_url = "https://gate.example.com"`: the URL people and agents
    /// reach Gatehouse at, if not the listen address.
    pub public_url: Option<Url>,
    /// `[database] url = "postgres://…"`: PostgreSQL shared by replicas.
    pub database: DatabaseTable,
    /// `liveness_window = "24h"`: a credential lapses after this long without a sign of life.
    #[serde(deserialize_with = "duration")]
    pub liveness_window: Duration,
    /// `approval_ttl = "10m"`: pending approvals expire after this long (at most 7 days).
    #[serde(deserialize_with = "duration")]
    pub approval_ttl: Duration,
    /// `max_body_bytes = 4194304`: largest accepted request body.
    pub max_body_bytes: usize,
    /// `log_format = "human" | "json"`
    pub log_format: LogFormat,
    /// Extra `Host` names (or `host:port`) to accept besides loopback and the public URL.
    pub allowed_hosts: Vec<String>,
    /// Extra browser origins `/mcp` accepts (e.g. `"http://localhost:6274"`).
    pub allowed_origins: Vec<String>,
    /// `trusted_proxies = ["10.0.0.0/8"]`: reverse proxies (CIDR blocks or
    /// addresses) whose `X-Forwarded-For` names the client's address.
    pub trusted_proxies: Vec<String>,
    /// `[[policy]] pattern = "files__read_*"  action = "allow"`
    pub policy: Vec<gatehouse_core::policy::Rule>,
    /// `[[profile]] name = "docs only"  owners = ["bob"]  tools = ["docs__*"]`:
    /// which tools the agents it names see at all.
    pub profile: Vec<gatehouse_core::model::Profile>,
    /// `allow_model_decisions = true` lets `elicitation_mode=model` sessions decide their own calls.
    pub allow_model_decisions: bool,
    /// `native_url = "elicit" | "error"`: how native mode asks URL-capable 2025-11-25 clients.
    pub native_url: NativeUrl,
    /// `[[upstream]]` MCP servers to front.
    pub upstream: Vec<UpstreamConfig>,
    /// `[stdio_commands.everything] command = "node"  args = ["server.mjs"]`:
    /// the whole commands an admin may start as a stdio upstream from the
    /// console, each picked by its key (nothing else runs on the host).
    pub stdio_commands: std::collections::BTreeMap<String, super::StdioCommand>,
    /// `list_page_size = 100`: items per page of tools/prompts/resources lists.
    pub list_page_size: usize,
    /// `trust_client_forms = true` lets a form elicitation answered by the
    /// client decide a call (audited as the agent, never for `human_only`).
    pub trust_client_forms: bool,
    /// `run_window = "5m"`: an approved call must start within this long.
    #[serde(deserialize_with = "duration")]
    pub run_window: Duration,
    /// `max_executions_per_credential = 20`: calls one credential may have waiting or running.
    pub max_executions_per_credential: usize,
    /// `max_gated_arguments_bytes = 65536`: largest arguments of a call that waits for approval.
    pub max_gated_arguments_bytes: usize,
    /// `keep_arguments = "gated" | "all" | "none"`: whose calls' arguments
    /// the record keeps (those that waited for a person, every call's, or
    /// none); a `[[policy]]` rule or an `[[upstream]]` may say otherwise.
    pub keep_arguments: gatehouse_core::model::Keep,
    /// `keep_arguments_max_bytes = 4096`: past this, a call's kept
    /// arguments are their first bytes (and the entry's digest), said so.
    pub keep_arguments_max_bytes: usize,
    /// `keep_arguments_for = "30d"`: kept arguments are forgotten after
    /// this long (the entries stay until `audit_retention`).
    #[serde(deserialize_with = "duration")]
    pub keep_arguments_for: Duration,
    /// `redact_arguments = ["password", "token", …]`: argument names (at
    /// any depth, any case) whose values are kept as "•••".
    pub redact_arguments: Vec<String>,
    /// `max_sessions_per_credential = 16`: MCP sessions one credential may hold open.
    pub max_sessions_per_credential: usize,
    /// `max_sessions = 1024`: MCP sessions open in all.
    pub max_sessions: usize,
    /// `session_idle_timeout = "5m"`: an MCP session with no request in
    /// progress and no stream open for this long is closed.
    #[serde(deserialize_with = "duration")]
    pub session_idle_timeout: Duration,
    /// `max_connections = 1024`: TCP connections served at once.
    pub max_connections: usize,
    /// `header_read_timeout = "10s"`: time a client has to send its request headers.
    #[serde(deserialize_with = "duration")]
    pub header_read_timeout: Duration,
    /// `idle_timeout = "60s"`: a connection with no request in progress for this long is closed.
    #[serde(deserialize_with = "duration")]
    pub idle_timeout: Duration,
    /// `max_requests_per_credential = 32`: `/mcp` requests one credential may have in progress.
    pub max_requests_per_credential: usize,
    /// `reserved_connections = 64`: connections `/mcp` requests never take, kept for people and probes.
    pub reserved_connections: usize,
    /// `max_credentials_per_user = 100`: live agent credentials one user may own.
    pub max_credentials_per_user: usize,
    /// `max_browser_sessions_per_user = 50`: a sign-in past it ends the user's oldest session.
    pub max_browser_sessions_per_user: usize,
    /// `max_oauth_clients_per_user = 50`: OAuth clients signed in as one user's agents.
    pub max_oauth_clients_per_user: usize,
    /// `max_grants_per_user = 500`: live grants for one user's agents.
    pub max_grants_per_user: usize,
    /// `suggest_grants_after = 3`: approvals of an agent's calls to a tool,
    /// with arguments of one shape, before the next such call's page offers
    /// a grant covering them; `0` offers none.
    pub suggest_grants_after: u32,
    /// `suggest_grants_window = "7d"`: how far back those approvals count.
    #[serde(deserialize_with = "duration")]
    pub suggest_grants_window: Duration,
    /// `audit_retention = "90d"`: audit entries older than this are deleted.
    #[serde(deserialize_with = "duration")]
    pub audit_retention: Duration,
    /// `audit_max_entries = 5000000`: past this many entries the oldest are
    /// deleted (each entry is at most about 3 KB plus the arguments it keeps, most near 400 bytes): calls
    /// that ran or were refused at once first, people's decisions last.
    pub audit_max_entries: u64,
    /// `metrics_listen = "127.0.0.1:9464"`: serve `/metrics` without
    /// authentication on this separate address.
    pub metrics_listen: Option<SocketAddr>,
    /// `[[notify]]` targets told when an execution opens and settles.
    pub notify: Vec<NotifyConfig>,
    /// `[oauth]`: Gatehouse as the authorization server of MCP clients.
    pub oauth: OAuthConfig,
}

impl Default for FileConfig {
    /// The default of every top-level key (and of the gate limits): written
    /// here only, or, for what the core's stores also use, taken from the
    /// core's own defaults.
    fn default() -> Self {
        let core = gatehouse_core::Settings::default();
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            tls_cert: None,
            tls_key: None,
            data_dir: PathBuf::from(".gatehouse"),
            public_url: None,
            database: DatabaseTable::default(),
            liveness_window: core.liveness_window,
            approval_ttl: core.approval_ttl,
            max_body_bytes: 4 * 1024 * 1024,
            log_format: LogFormat::Human,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            trusted_proxies: Vec::new(),
            policy: Vec::new(),
            profile: Vec::new(),
            allow_model_decisions: false,
            native_url: NativeUrl::Elicit,
            upstream: Vec::new(),
            stdio_commands: Default::default(),
            list_page_size: 100,
            trust_client_forms: false,
            run_window: core.run_window,
            max_executions_per_credential: core.max_executions_per_credential,
            max_gated_arguments_bytes: 64 * 1024,
            keep_arguments: gatehouse_core::model::Keep::Gated,
            keep_arguments_max_bytes: 4096,
            keep_arguments_for: Duration::from_secs(30 * 24 * 3600),
            redact_arguments: ["password", "passphrase", "secret", "token", "api_key", "apikey", "authorization"]
                .map(String::from)
                .to_vec(),
            max_sessions_per_credential: 16,
            max_sessions: 1024,
            // Well under `approval_ttl`: a pause the client waits on keeps its
            // session busy or belongs to the credential, so nothing waits on
            // an idle session.
            session_idle_timeout: Duration::from_secs(5 * 60),
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_requests_per_credential: 32,
            reserved_connections: 64,
            max_credentials_per_user: core.per_user.credentials,
            max_browser_sessions_per_user: core.per_user.browser_sessions,
            max_oauth_clients_per_user: core.per_user.oauth_clients,
            max_grants_per_user: core.per_user.grants,
            suggest_grants_after: core.suggest.after,
            suggest_grants_window: core.suggest.window,
            audit_retention: Duration::from_secs(90 * 24 * 3600),
            audit_max_entries: 5_000_000,
            metrics_listen: None,
            notify: Vec::new(),
            oauth: OAuthConfig::default(),
        }
    }
}

impl FileConfig {
    /// `/mcp` requests in progress at once across all credentials: what
    /// `max_connections` leaves after `reserved_connections`, which counts
    /// for at most half of them (so a small `max_connections` still serves
    /// agents).
    pub fn mcp_requests(&self) -> usize {
        let reserved = self.reserved_connections.min(self.max_connections / 2);
        (self.max_connections - reserved).max(1)
    }

    /// Parses a config file's text. TOML's message names the line and key;
    /// this is why the file is read here and not by the environment overlay
    /// (whose merged values carry no line numbers).
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text)
            .map_err(|e| ConfigError::File { path: path.into(), message: e.to_string().trim_end().to_string() })
    }

    /// Reads a config file's text.
    pub fn read(path: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })
    }

    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::parse(path, &Self::read(path)?)
    }
}

/// The `[database]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseTable {
    /// `url = "postgres://gatehouse@db.internal/gatehouse"`; without it, SQLite in the data dir.
    pub url: Option<String>,
}

/// The `[oauth]` table: Gatehouse as the authorization server of MCP clients.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OAuthConfig {
    /// `enabled = false` turns the OAuth endpoints and their discovery off (bearer tokens only).
    pub enabled: bool,
    /// `access_token_ttl = "15m"`: lifetime of an access token.
    #[serde(deserialize_with = "duration")]
    pub access_token_ttl: Duration,
    /// `refresh_token_ttl = "30d"`: lifetime of a refresh token (each use
    /// rotates it; never past the credential's liveness).
    #[serde(deserialize_with = "duration")]
    pub refresh_token_ttl: Duration,
    /// `allow_private_client_metadata = true` lets client metadata documents
    /// come over plain `http://` and from loopback or private addresses
    /// (tests, a LAN); off, only public `https://` URLs are fetched.
    pub allow_private_client_metadata: bool,
    /// `unused_registration_ttl = "10m"`: a registered client nobody has
    /// started to use (shown on a consent page) within this long is forgotten.
    #[serde(deserialize_with = "duration")]
    pub unused_registration_ttl: Duration,
    /// `max_unused_registrations_per_address = 20`: registered clients not
    /// yet used that one address (an IPv6 /64) may hold; at the bound its
    /// oldest one (older than three minutes) makes room for the next.
    pub max_unused_registrations_per_address: usize,
}

impl Default for OAuthConfig {
    /// The default of every `[oauth]` key: written here, or taken from the
    /// core's own defaults for what its stores use.
    fn default() -> Self {
        let core = gatehouse_core::Settings::default().oauth;
        Self {
            enabled: true,
            access_token_ttl: core.access,
            refresh_token_ttl: core.refresh,
            allow_private_client_metadata: false,
            unused_registration_ttl: core.registration.unused_ttl,
            max_unused_registrations_per_address: core.registration.per_address,
        }
    }
}

/// How native mode asks a 2025-11-25 client that declares URL elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NativeUrl {
    /// `elicitation/create {mode: "url"}` while the call is held.
    #[default]
    Elicit,
    /// The `-32042` URL-elicitation-required error; the client's retry continues the same execution.
    Error,
}

/// A duration written as humantime text (`"90s"`, `"10m"`, `"24h"`), longer than zero.
pub(super) fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    parse_duration(&String::deserialize(d)?).map_err(serde::de::Error::custom)
}

/// Parses a humantime duration; the message says how to write one.
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. \"90s\", \"10m\", \"24h\")"))?;
    if d.is_zero() {
        return Err("must be longer than zero".into());
    }
    Ok(d)
}
