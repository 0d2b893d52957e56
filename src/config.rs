//! Configuration: defaults, then `gatehouse.toml`, then `GATEHOUSE_*`
//! environment variables, then command-line flags. Unknown keys and bad values
//! are start-up errors that name the key (and the file line).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use crate::telemetry::LogFormat;

/// A configuration problem, worded for the person who wrote the config.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid (TOML's message names the line and key).
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// TOML's message, with line and column.
        message: String,
    },
    /// An environment variable or flag has a bad value.
    #[error("{key}: {message}")]
    Value {
        /// The variable or key.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// The keys of `gatehouse.toml`, all optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `listen = "127.0.0.1:8080"`
    pub listen: Option<SocketAddr>,
    /// `data_dir = "./.gatehouse"`
    pub data_dir: Option<PathBuf>,
    /// `public_url = "https://gate.example.com"`
    pub public_url: Option<Url>,
    /// `[database] url = "postgres://…"`: PostgreSQL shared by replicas.
    pub database: Option<DatabaseFileConfig>,
    /// `liveness_window = "24h"`
    #[serde(default, with = "humantime_opt")]
    pub liveness_window: Option<Duration>,
    /// `approval_ttl = "10m"`
    #[serde(default, with = "humantime_opt")]
    pub approval_ttl: Option<Duration>,
    /// `max_body_bytes = 4194304`
    pub max_body_bytes: Option<usize>,
    /// `log_format = "human" | "json"`
    pub log_format: Option<LogFormat>,
    /// Extra `Host` names (or `host:port`) to accept besides loopback and the public URL.
    pub allowed_hosts: Option<Vec<String>>,
    /// Extra browser origins `/mcp` accepts (e.g. `"http://localhost:6274"`).
    pub allowed_origins: Option<Vec<String>>,
    /// `trusted_proxies = ["10.0.0.0/8"]`: reverse proxies (CIDR blocks or
    /// addresses) whose `X-Forwarded-For` names the client's address.
    pub trusted_proxies: Option<Vec<String>>,
    /// `[[policy]] pattern = "files__read_*"  action = "allow"`
    pub policy: Option<Vec<PolicyRule>>,
    /// `allow_model_decisions = true` lets `elicitation_mode=model` sessions decide their own calls.
    pub allow_model_decisions: Option<bool>,
    /// `native_url = "elicit" | "error"`: how native mode asks URL-capable 2025-11-25 clients.
    pub native_url: Option<NativeUrl>,
    /// `[[upstream]]` MCP servers to front.
    pub upstream: Option<Vec<UpstreamConfig>>,
    /// `list_page_size = 100`: items per page of tools/prompts/resources lists.
    pub list_page_size: Option<usize>,
    /// `trust_client_forms = true` lets a form elicitation answered by the
    /// client decide a call (audited as the agent, never for `human_only`).
    pub trust_client_forms: Option<bool>,
    /// `run_window = "5m"`: an approved call must start within this long.
    #[serde(default, with = "humantime_opt")]
    pub run_window: Option<Duration>,
    /// `max_executions_per_credential = 20`: calls one credential may have waiting or running.
    pub max_executions_per_credential: Option<usize>,
    /// `max_gated_arguments_bytes = 65536`: largest arguments of a call that waits for approval.
    pub max_gated_arguments_bytes: Option<usize>,
    /// `max_sessions_per_credential = 16`: MCP sessions one credential may hold open.
    pub max_sessions_per_credential: Option<usize>,
    /// `max_sessions = 1024`: MCP sessions open in all.
    pub max_sessions: Option<usize>,
    /// `max_connections = 1024`: TCP connections served at once.
    pub max_connections: Option<usize>,
    /// `header_read_timeout = "10s"`: time a client has to send its request headers.
    #[serde(default, with = "humantime_opt")]
    pub header_read_timeout: Option<Duration>,
    /// `idle_timeout = "60s"`: a connection with no request in progress for this long is closed.
    #[serde(default, with = "humantime_opt")]
    pub idle_timeout: Option<Duration>,
    /// `max_requests_per_credential = 32`: `/mcp` requests one credential may have in progress.
    pub max_requests_per_credential: Option<usize>,
    /// `reserved_connections = 64`: connections `/mcp` requests never take, kept for people and probes.
    pub reserved_connections: Option<usize>,
    /// `max_credentials_per_user = 100`: live agent credentials one user may own.
    pub max_credentials_per_user: Option<usize>,
    /// `max_browser_sessions_per_user = 50`: a sign-in past it ends the user's oldest session.
    pub max_browser_sessions_per_user: Option<usize>,
    /// `max_oauth_clients_per_user = 50`: OAuth clients signed in as one user's agents.
    pub max_oauth_clients_per_user: Option<usize>,
    /// `max_grants_per_user = 500`: live grants for one user's agents.
    pub max_grants_per_user: Option<usize>,
    /// `audit_retention = "90d"`: audit entries older than this are deleted.
    #[serde(default, with = "humantime_opt")]
    pub audit_retention: Option<Duration>,
    /// `metrics_listen = "127.0.0.1:9464"`: serve `/metrics` without
    /// authentication on this separate address.
    pub metrics_listen: Option<SocketAddr>,
    /// `[[notify]]` targets told when an execution opens and settles.
    pub notify: Option<Vec<crate::notify::NotifyConfig>>,
    /// `[oauth]`: Gatehouse as the authorization server of MCP clients.
    pub oauth: Option<OAuthFileConfig>,
}

/// The `[database]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseFileConfig {
    /// `url = "postgres://gatehouse@db.internal/gatehouse"`; without it, SQLite in the data dir.
    pub url: Option<String>,
}

/// The `[oauth]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthFileConfig {
    /// `enabled = false` turns the OAuth endpoints off (bearer tokens only).
    pub enabled: Option<bool>,
    /// `access_token_ttl = "15m"`
    #[serde(default, with = "humantime_opt")]
    pub access_token_ttl: Option<Duration>,
    /// `refresh_token_ttl = "30d"` (never past the credential's liveness).
    #[serde(default, with = "humantime_opt")]
    pub refresh_token_ttl: Option<Duration>,
    /// `allow_private_client_metadata = true` lets client metadata documents
    /// come over plain `http://` and from loopback or private addresses
    /// (tests, a LAN); off, only public `https://` URLs are fetched.
    pub allow_private_client_metadata: Option<bool>,
    /// `unused_registration_ttl = "10m"`: a registered client not used for a
    /// sign-in within this long is forgotten.
    #[serde(default, with = "humantime_opt")]
    pub unused_registration_ttl: Option<Duration>,
    /// `max_unused_registrations_per_address = 20`: registered clients not
    /// yet used that one address (an IPv6 /64) may hold.
    pub max_unused_registrations_per_address: Option<usize>,
}

/// OAuth settings as resolved.
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// Whether the authorization server and its discovery are served.
    pub enabled: bool,
    /// Lifetime of an access token.
    pub access_token_ttl: Duration,
    /// Lifetime of a refresh token (each use rotates it).
    pub refresh_token_ttl: Duration,
    /// Whether client metadata documents may be fetched from `http://` and
    /// private addresses.
    pub allow_private_client_metadata: bool,
    /// A registered client not used for a sign-in within this long is forgotten.
    pub unused_registration_ttl: Duration,
    /// Registered clients not yet used that one address may hold.
    pub max_unused_registrations_per_address: usize,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            access_token_ttl: Duration::from_secs(15 * 60),
            refresh_token_ttl: Duration::from_secs(30 * 24 * 3600),
            allow_private_client_metadata: false,
            unused_registration_ttl: Duration::from_secs(10 * 60),
            max_unused_registrations_per_address: 20,
        }
    }
}

/// One `[[upstream]]` table: a stdio child process (`command`) or a
/// Streamable HTTP server (`url`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Unique name; the default tool prefix is `<name>__`.
    pub name: String,
    /// Program to run (stdio).
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment variables for it.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Its working directory.
    pub cwd: Option<PathBuf>,
    /// Streamable HTTP endpoint (instead of `command`).
    pub url: Option<Url>,
    /// Extra HTTP headers sent to it (never the client's token).
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// PEM file of certificates to trust for an `https` URL, besides the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Prefix of its exposed tool names (default `<name>__`; may be `""`).
    pub prefix: Option<String>,
    /// Set `false` to keep it configured but not started.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Pin each tool's first definition seen and hold back a tool whose
    /// definition later changes until an admin accepts the change on `/tools`.
    /// Set `false` for a development upstream whose tools change on purpose.
    #[serde(default = "yes")]
    pub pin_tools: bool,
    /// Names of Gatehouse's own environment variables a stdio child also gets
    /// (besides [`crate::mcp::upstream::link::INHERITED_ENV`] and `env`).
    #[serde(default)]
    pub inherit_env: Vec<String>,
    /// Longest line (one JSON-RPC message) a stdio child may write; a longer
    /// one fails the connection, which is then restarted.
    #[serde(default = "upstream_defaults::max_line_bytes")]
    pub max_line_bytes: usize,
    /// Largest JSON response body or SSE event accepted from an HTTP upstream.
    #[serde(default = "upstream_defaults::max_response_bytes")]
    pub max_response_bytes: usize,
    /// How much of a stdio child's stderr is kept (its latest bytes).
    #[serde(default = "upstream_defaults::stderr_tail_bytes")]
    pub stderr_tail_bytes: usize,
    /// Most pages followed when listing its tools, prompts or resources.
    #[serde(default = "upstream_defaults::max_list_pages")]
    pub max_list_pages: usize,
    /// Most items taken from one listing (tools, prompts, resources, templates each).
    #[serde(default = "upstream_defaults::max_list_items")]
    pub max_list_items: usize,
    /// Longest wait to start it (spawn or HTTP connect) and complete `initialize`.
    #[serde(default = "upstream_defaults::connect_timeout", with = "humantime_req")]
    pub connect_timeout: Duration,
    /// Longest wait for its whole catalogue (every page of every list).
    #[serde(default = "upstream_defaults::list_timeout", with = "humantime_req")]
    pub list_timeout: Duration,
    /// Longest wait for one forwarded request (a tool call, prompt, read,
    /// completion); then it is cancelled upstream and the agent gets an error.
    #[serde(default = "upstream_defaults::call_timeout", with = "humantime_req")]
    pub call_timeout: Duration,
}

fn yes() -> bool {
    true
}

/// Defaults of the `[[upstream]]` limits.
pub mod upstream_defaults {
    use std::time::Duration;

    /// `max_line_bytes`: 4 MiB.
    pub fn max_line_bytes() -> usize {
        4 * 1024 * 1024
    }
    /// `max_response_bytes`: 16 MiB.
    pub fn max_response_bytes() -> usize {
        16 * 1024 * 1024
    }
    /// `stderr_tail_bytes`: 16 KiB.
    pub fn stderr_tail_bytes() -> usize {
        16 * 1024
    }
    /// `max_list_pages`: 100.
    pub fn max_list_pages() -> usize {
        100
    }
    /// `max_list_items`: 10 000.
    pub fn max_list_items() -> usize {
        10_000
    }
    /// `connect_timeout`: 30 s.
    pub fn connect_timeout() -> Duration {
        Duration::from_secs(30)
    }
    /// `list_timeout`: 30 s.
    pub fn list_timeout() -> Duration {
        Duration::from_secs(30)
    }
    /// `call_timeout`: 5 min.
    pub fn call_timeout() -> Duration {
        Duration::from_secs(300)
    }
}

impl Default for UpstreamConfig {
    /// An enabled upstream with no name, transport or extras, and the default limits.
    fn default() -> Self {
        UpstreamConfig {
            name: String::new(),
            command: None,
            args: Vec::new(),
            env: Default::default(),
            cwd: None,
            url: None,
            headers: Default::default(),
            ca_file: None,
            prefix: None,
            enabled: true,
            pin_tools: true,
            inherit_env: Vec::new(),
            max_line_bytes: upstream_defaults::max_line_bytes(),
            max_response_bytes: upstream_defaults::max_response_bytes(),
            stderr_tail_bytes: upstream_defaults::stderr_tail_bytes(),
            max_list_pages: upstream_defaults::max_list_pages(),
            max_list_items: upstream_defaults::max_list_items(),
            connect_timeout: upstream_defaults::connect_timeout(),
            list_timeout: upstream_defaults::list_timeout(),
            call_timeout: upstream_defaults::call_timeout(),
        }
    }
}

impl UpstreamConfig {
    /// The prefix its tools are exposed under.
    pub fn prefix(&self) -> String {
        self.prefix.clone().unwrap_or_else(|| format!("{}__", self.name))
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

/// One `[[policy]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRule {
    /// `*`, an exact tool name, or `prefix*`.
    pub pattern: String,
    /// `allow | require_approval | block`.
    pub action: String,
    /// Never accept a decision from the model itself.
    #[serde(default)]
    pub human_only: bool,
    /// `approval_ttl = "30m"`: how long a call this rule holds for approval
    /// may wait, instead of the global `approval_ttl` (at most 7 days).
    #[serde(default, with = "humantime_opt")]
    pub approval_ttl: Option<Duration>,
}

mod humantime_opt {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else { return Ok(None) };
        super::parse_duration(&text).map(Some).map_err(serde::de::Error::custom)
    }
}

mod humantime_req {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        super::parse_duration(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. \"90s\", \"10m\", \"24h\")"))?;
    if d.is_zero() {
        return Err("must be longer than zero".into());
    }
    Ok(d)
}

/// The `[[upstream]]` limits and `inherit_env` make sense.
fn check_upstream_limits(u: &UpstreamConfig) -> Result<(), String> {
    for (key, value, least) in [
        ("max_line_bytes", u.max_line_bytes, 1024),
        ("max_response_bytes", u.max_response_bytes, 1024),
        ("max_list_pages", u.max_list_pages, 1),
        ("max_list_items", u.max_list_items, 1),
    ] {
        if value < least {
            return Err(format!("{key} must be at least {least}"));
        }
    }
    if let Some(name) = u.inherit_env.iter().find(|n| n.is_empty() || n.contains(['=', '\0'])) {
        return Err(format!("inherit_env: {name:?} is not a variable name"));
    }
    Ok(())
}

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
    fn default() -> Self {
        Self {
            trust_client_forms: false,
            run_window: Duration::from_secs(300),
            max_executions_per_credential: 20,
            max_gated_arguments_bytes: 64 * 1024,
            max_sessions_per_credential: 16,
            max_sessions: 1024,
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_requests_per_credential: 32,
            reserved_connections: 64,
            max_credentials_per_user: 100,
            max_browser_sessions_per_user: 50,
            max_oauth_clients_per_user: 50,
            max_grants_per_user: 500,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from(".gatehouse"),
            public_url: None,
            database_url: None,
            liveness_window: Duration::from_secs(24 * 3600),
            approval_ttl: Duration::from_secs(600),
            max_body_bytes: 4 * 1024 * 1024,
            log_format: LogFormat::Human,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            trusted_proxies: Vec::new(),
            policy: Vec::new(),
            allow_model_decisions: false,
            native_url: NativeUrl::Elicit,
            upstreams: Vec::new(),
            list_page_size: 100,
            limits: Limits::default(),
            audit_retention: Duration::from_secs(90 * 24 * 3600),
            metrics_listen: None,
            notify: Vec::new(),
            oauth: OAuthConfig::default(),
        }
    }
}

fn number(v: &str) -> Result<usize, String> {
    v.parse().map_err(|x: std::num::ParseIntError| x.to_string())
}

fn boolean(v: &str) -> Result<bool, String> {
    match v {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        other => Err(format!("{other:?} is not true or false")),
    }
}

fn env_value<T>(key: &str, parse: impl FnOnce(&str) -> Result<T, String>) -> Result<Option<T>, ConfigError> {
    match std::env::var(key) {
        Ok(v) if !v.is_empty() => {
            parse(&v).map(Some).map_err(|message| ConfigError::Value { key: key.into(), message })
        }
        _ => Ok(None),
    }
}

fn list(v: &str) -> Result<Vec<String>, String> {
    Ok(v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect())
}

impl FileConfig {
    /// Parses a config file's text.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text)
            .map_err(|e| ConfigError::File { path: path.into(), message: e.to_string().trim_end().to_string() })
    }

    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Self::parse(path, &text)
    }

    /// Lays `GATEHOUSE_*` variables over the file's values.
    pub fn apply_env(mut self) -> Result<Self, ConfigError> {
        let e = |s: String| s;
        if let Some(v) =
            env_value("GATEHOUSE_LISTEN", |v| v.parse().map_err(|x: std::net::AddrParseError| e(x.to_string())))?
        {
            self.listen = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_DATA_DIR", |v| Ok(PathBuf::from(v)))? {
            self.data_dir = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_PUBLIC_URL", |v| Url::parse(v).map_err(|x| x.to_string()))? {
            self.public_url = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_DATABASE_URL", |v| Ok(v.to_string()))? {
            self.database.get_or_insert_with(Default::default).url = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_LIVENESS_WINDOW", parse_duration)? {
            self.liveness_window = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_APPROVAL_TTL", parse_duration)? {
            self.approval_ttl = Some(v);
        }
        if let Some(v) =
            env_value("GATEHOUSE_MAX_BODY_BYTES", |v| v.parse().map_err(|x: std::num::ParseIntError| x.to_string()))?
        {
            self.max_body_bytes = Some(v);
        }
        if let Some(v) =
            env_value("GATEHOUSE_LIST_PAGE_SIZE", |v| v.parse().map_err(|x: std::num::ParseIntError| x.to_string()))?
        {
            self.list_page_size = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_LOG_FORMAT", |v| match v {
            "human" => Ok(LogFormat::Human),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("unknown log format {other:?} (human or json)")),
        })? {
            self.log_format = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_ALLOW_MODEL_DECISIONS", |v| match v {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            other => Err(format!("{other:?} is not true or false")),
        })? {
            self.allow_model_decisions = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_NATIVE_URL", |v| match v {
            "elicit" => Ok(NativeUrl::Elicit),
            "error" => Ok(NativeUrl::Error),
            other => Err(format!("{other:?} is not elicit or error")),
        })? {
            self.native_url = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_ALLOWED_HOSTS", list)? {
            self.allowed_hosts = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_TRUST_CLIENT_FORMS", boolean)? {
            self.trust_client_forms = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_RUN_WINDOW", parse_duration)? {
            self.run_window = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_HEADER_READ_TIMEOUT", parse_duration)? {
            self.header_read_timeout = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_IDLE_TIMEOUT", parse_duration)? {
            self.idle_timeout = Some(v);
        }
        for (key, slot) in [
            ("GATEHOUSE_MAX_EXECUTIONS_PER_CREDENTIAL", &mut self.max_executions_per_credential),
            ("GATEHOUSE_MAX_GATED_ARGUMENTS_BYTES", &mut self.max_gated_arguments_bytes),
            ("GATEHOUSE_MAX_SESSIONS_PER_CREDENTIAL", &mut self.max_sessions_per_credential),
            ("GATEHOUSE_MAX_SESSIONS", &mut self.max_sessions),
            ("GATEHOUSE_MAX_CONNECTIONS", &mut self.max_connections),
            ("GATEHOUSE_MAX_REQUESTS_PER_CREDENTIAL", &mut self.max_requests_per_credential),
            ("GATEHOUSE_RESERVED_CONNECTIONS", &mut self.reserved_connections),
            ("GATEHOUSE_MAX_CREDENTIALS_PER_USER", &mut self.max_credentials_per_user),
            ("GATEHOUSE_MAX_BROWSER_SESSIONS_PER_USER", &mut self.max_browser_sessions_per_user),
            ("GATEHOUSE_MAX_OAUTH_CLIENTS_PER_USER", &mut self.max_oauth_clients_per_user),
            ("GATEHOUSE_MAX_GRANTS_PER_USER", &mut self.max_grants_per_user),
        ] {
            if let Some(v) = env_value(key, number)? {
                *slot = Some(v);
            }
        }
        if let Some(v) = env_value("GATEHOUSE_ALLOWED_ORIGINS", list)? {
            self.allowed_origins = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_TRUSTED_PROXIES", list)? {
            self.trusted_proxies = Some(v);
        }
        if let Some(v) = env_value("GATEHOUSE_AUDIT_RETENTION", parse_duration)? {
            self.audit_retention = Some(v);
        }
        if let Some(v) =
            env_value("GATEHOUSE_METRICS_LISTEN", |v| v.parse().map_err(|x: std::net::AddrParseError| x.to_string()))?
        {
            self.metrics_listen = Some(v);
        }
        Ok(self)
    }
}

impl Config {
    /// Resolves defaults < file (if given) < environment < flags.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let file = match file {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        Self::resolve(file.apply_env()?, overrides)
    }

    /// Combines parsed file values with flags over the defaults.
    pub fn resolve(file: FileConfig, overrides: &Overrides) -> Result<Self, ConfigError> {
        let d = Config::default();
        let config = Config {
            listen: overrides.listen.or(file.listen).unwrap_or(d.listen),
            data_dir: overrides.data_dir.clone().or(file.data_dir).unwrap_or(d.data_dir),
            public_url: overrides.public_url.clone().or(file.public_url),
            database_url: overrides
                .database_url
                .clone()
                .or(file.database.and_then(|d| d.url))
                .filter(|u| !u.is_empty()),
            liveness_window: file.liveness_window.unwrap_or(d.liveness_window),
            approval_ttl: file.approval_ttl.unwrap_or(d.approval_ttl),
            max_body_bytes: file.max_body_bytes.unwrap_or(d.max_body_bytes),
            log_format: overrides.log_format.or(file.log_format).unwrap_or(d.log_format),
            allowed_hosts: file.allowed_hosts.unwrap_or_default(),
            allowed_origins: file.allowed_origins.unwrap_or_default(),
            trusted_proxies: file
                .trusted_proxies
                .unwrap_or_default()
                .iter()
                .enumerate()
                .map(|(i, text)| {
                    crate::addresses::parse_network(text)
                        .map_err(|message| ConfigError::Value { key: format!("trusted_proxies[{i}]"), message })
                })
                .collect::<Result<Vec<_>, _>>()?,
            policy: Vec::new(),
            allow_model_decisions: file.allow_model_decisions.unwrap_or(false),
            native_url: file.native_url.unwrap_or_default(),
            upstreams: file.upstream.clone().unwrap_or_default(),
            list_page_size: file.list_page_size.unwrap_or(d.list_page_size),
            limits: Limits {
                trust_client_forms: file.trust_client_forms.unwrap_or(d.limits.trust_client_forms),
                run_window: file.run_window.unwrap_or(d.limits.run_window),
                max_executions_per_credential: file
                    .max_executions_per_credential
                    .unwrap_or(d.limits.max_executions_per_credential),
                max_gated_arguments_bytes: file.max_gated_arguments_bytes.unwrap_or(d.limits.max_gated_arguments_bytes),
                max_sessions_per_credential: file
                    .max_sessions_per_credential
                    .unwrap_or(d.limits.max_sessions_per_credential),
                max_sessions: file.max_sessions.unwrap_or(d.limits.max_sessions),
                max_connections: file.max_connections.unwrap_or(d.limits.max_connections),
                header_read_timeout: file.header_read_timeout.unwrap_or(d.limits.header_read_timeout),
                idle_timeout: file.idle_timeout.unwrap_or(d.limits.idle_timeout),
                max_requests_per_credential: file
                    .max_requests_per_credential
                    .unwrap_or(d.limits.max_requests_per_credential),
                reserved_connections: file.reserved_connections.unwrap_or(d.limits.reserved_connections),
                max_credentials_per_user: file.max_credentials_per_user.unwrap_or(d.limits.max_credentials_per_user),
                max_browser_sessions_per_user: file
                    .max_browser_sessions_per_user
                    .unwrap_or(d.limits.max_browser_sessions_per_user),
                max_oauth_clients_per_user: file
                    .max_oauth_clients_per_user
                    .unwrap_or(d.limits.max_oauth_clients_per_user),
                max_grants_per_user: file.max_grants_per_user.unwrap_or(d.limits.max_grants_per_user),
            },
            audit_retention: file.audit_retention.unwrap_or(d.audit_retention),
            metrics_listen: overrides.metrics_listen.or(file.metrics_listen),
            notify: crate::notify::config::resolve(file.notify.clone().unwrap_or_default())?,
            oauth: {
                let o = file.oauth.clone().unwrap_or_default();
                let d = OAuthConfig::default();
                OAuthConfig {
                    enabled: o.enabled.unwrap_or(d.enabled),
                    access_token_ttl: o.access_token_ttl.unwrap_or(d.access_token_ttl),
                    refresh_token_ttl: o.refresh_token_ttl.unwrap_or(d.refresh_token_ttl),
                    allow_private_client_metadata: o
                        .allow_private_client_metadata
                        .unwrap_or(d.allow_private_client_metadata),
                    unused_registration_ttl: o.unused_registration_ttl.unwrap_or(d.unused_registration_ttl),
                    max_unused_registrations_per_address: o
                        .max_unused_registrations_per_address
                        .unwrap_or(d.max_unused_registrations_per_address),
                }
            },
        };
        if config.list_page_size == 0 {
            return Err(ConfigError::Value { key: "list_page_size".into(), message: "must be at least 1".into() });
        }
        let l = &config.limits;
        for (key, value) in [
            ("max_executions_per_credential", l.max_executions_per_credential),
            ("max_gated_arguments_bytes", l.max_gated_arguments_bytes),
            ("max_sessions_per_credential", l.max_sessions_per_credential),
            ("max_sessions", l.max_sessions),
            ("max_connections", l.max_connections),
            ("max_requests_per_credential", l.max_requests_per_credential),
            ("max_credentials_per_user", l.max_credentials_per_user),
            ("max_browser_sessions_per_user", l.max_browser_sessions_per_user),
            ("max_oauth_clients_per_user", l.max_oauth_clients_per_user),
            ("max_grants_per_user", l.max_grants_per_user),
        ] {
            if value == 0 {
                return Err(ConfigError::Value { key: key.into(), message: "must be at least 1".into() });
            }
        }
        if config.oauth.max_unused_registrations_per_address == 0 {
            return Err(ConfigError::Value {
                key: "oauth.max_unused_registrations_per_address".into(),
                message: "must be at least 1".into(),
            });
        }
        for (key, value) in [
            ("header_read_timeout", l.header_read_timeout),
            ("idle_timeout", l.idle_timeout),
            ("oauth.unused_registration_ttl", config.oauth.unused_registration_ttl),
        ] {
            if value.is_zero() {
                return Err(ConfigError::Value { key: key.into(), message: "must be longer than 0s".into() });
            }
        }
        let mut names = std::collections::HashSet::new();
        for (i, u) in config.upstreams.iter().enumerate() {
            let key = format!("upstream[{i}]");
            let bad = |message: &str| ConfigError::Value { key: key.clone(), message: message.into() };
            if u.name.is_empty() || !u.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return Err(bad("name must be letters, digits, '-' or '_'"));
            }
            if !names.insert(u.name.clone()) {
                return Err(bad("name is used twice"));
            }
            if u.command.is_some() == u.url.is_some() {
                return Err(bad("set exactly one of command (stdio) or url (Streamable HTTP)"));
            }
            if let Some(url) = &u.url
                && !matches!(url.scheme(), "http" | "https")
            {
                return Err(bad("url must be http or https"));
            }
            if u.ca_file.is_some() && u.url.as_ref().is_none_or(|url| url.scheme() != "https") {
                return Err(bad("ca_file needs an https url"));
            }
            check_upstream_limits(u).map_err(|message| ConfigError::Value { key: key.clone(), message })?;
        }
        let mut config = config;
        let max_ttl = gatehouse_core::approvals::MAX_APPROVAL_TTL;
        let too_long = |key: String| ConfigError::Value {
            key,
            message: format!("must be at most {}", humantime::format_duration(max_ttl)),
        };
        if config.approval_ttl > max_ttl {
            return Err(too_long("approval_ttl".into()));
        }
        for (i, rule) in file.policy.unwrap_or_default().into_iter().enumerate() {
            let key = format!("policy[{i}]");
            if rule.approval_ttl.is_some_and(|ttl| ttl > max_ttl) {
                return Err(too_long(format!("{key}.approval_ttl")));
            }
            let action = gatehouse_core::policy::parse_action(&rule.action)
                .map_err(|e| ConfigError::Value { key: format!("{key}.action"), message: e.to_string() })?;
            gatehouse_core::policy::validate_pattern(&rule.pattern)
                .map_err(|e| ConfigError::Value { key: format!("{key}.pattern"), message: e.to_string() })?;
            config.policy.push(gatehouse_core::policy::Rule {
                pattern: rule.pattern,
                action,
                human_only: rule.human_only,
                source: "config".into(),
                // Whole seconds (a sub-second TTL is not a useful approval window).
                approval_ttl_secs: rule.approval_ttl.map(|ttl| ttl.as_secs().max(1)),
            });
        }
        if let Some(url) = &config.public_url
            && (!matches!(url.scheme(), "http" | "https") || url.host_str().is_none())
        {
            return Err(ConfigError::Value {
                key: "public_url".into(),
                message: "must be an http(s) URL with a host".into(),
            });
        }
        if config.max_body_bytes < 1024 {
            return Err(ConfigError::Value { key: "max_body_bytes".into(), message: "must be at least 1024".into() });
        }
        Ok(config)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_tables_are_read_and_checked_with_the_rest() {
        let path = Path::new("gatehouse.toml");
        let text = "[[notify]]\nurl = \"https://hooks.example/x\"\nformat = \"ntfy\"\ntools = [\"files__*\"]\n";
        let config = Config::resolve(FileConfig::parse(path, text).unwrap(), &Overrides::default()).unwrap();
        assert_eq!(config.notify.len(), 1);
        assert_eq!(config.notify[0].format, crate::notify::Format::Ntfy);
        let bad = "[[notify]]\nurl = \"https://hooks.example/x\"\nagents = [\"*a*\"]\n";
        let e = Config::resolve(FileConfig::parse(path, bad).unwrap(), &Overrides::default()).unwrap_err();
        assert!(e.to_string().starts_with("notify[0].agents"), "{e}");
        let unknown = FileConfig::parse(path, "[[notify]]\nurl = \"https://h.example\"\nsecrets = \"x\"\n");
        assert!(unknown.unwrap_err().to_string().contains("secrets"));
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key_and_line() {
        let err = FileConfig::parse(Path::new("g.toml"), "listen = \"127.0.0.1:9\"\nlisten_port = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2") && err.contains("listen_port"), "{err}");
        let err = FileConfig::parse(Path::new("g.toml"), "\napproval_ttl = \"soon\"\n").unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("approval_ttl"), "{err}");
    }

    #[test]
    fn flags_win_over_file_values_and_defaults_fill_the_rest() {
        let file =
            FileConfig::parse(Path::new("g.toml"), "listen = \"127.0.0.1:9000\"\nliveness_window = \"2h\"\n").unwrap();
        let overrides = Overrides { listen: Some("127.0.0.1:0".parse().unwrap()), ..Default::default() };
        let config = Config::resolve(file, &overrides).unwrap();
        assert_eq!(config.listen.port(), 0);
        assert_eq!(config.liveness_window, Duration::from_secs(7200));
        assert_eq!(config.approval_ttl, Duration::from_secs(600));
    }

    #[test]
    fn policy_rules_are_checked() {
        let file =
            FileConfig::parse(Path::new("g.toml"), "[[policy]]\npattern = \"files__*\"\naction = \"allow\"\n").unwrap();
        assert_eq!(Config::resolve(file, &Overrides::default()).unwrap().policy.len(), 1);
        let file = FileConfig::parse(Path::new("g.toml"), "[[policy]]\npattern = \"x\"\naction = \"maybe\"\n").unwrap();
        assert!(Config::resolve(file, &Overrides::default()).unwrap_err().to_string().contains("policy[0].action"));
    }

    #[test]
    fn upstream_tls_and_paging_settings_are_checked() {
        let resolve = |toml: &str| {
            Config::resolve(FileConfig::parse(Path::new("g.toml"), toml).unwrap(), &Overrides::default())
                .map_err(|e| e.to_string())
        };
        let ok = resolve("[[upstream]]\nname = \"a\"\nurl = \"https://x/mcp\"\nca_file = \"/ca.pem\"\n").unwrap();
        assert_eq!(ok.upstreams[0].ca_file.as_deref(), Some(Path::new("/ca.pem")));
        let plain = resolve("[[upstream]]\nname = \"a\"\nurl = \"http://x/mcp\"\nca_file = \"/ca.pem\"\n");
        assert!(plain.unwrap_err().contains("ca_file needs an https url"));
        let ws = resolve("[[upstream]]\nname = \"a\"\nurl = \"ws://x/mcp\"\n");
        assert!(ws.unwrap_err().contains("http or https"));
        assert!(resolve("list_page_size = 0\n").unwrap_err().contains("list_page_size"));
        assert!(resolve("max_sessions = 0\n").unwrap_err().contains("max_sessions"));
        let limits = resolve("run_window = \"1m\"\ntrust_client_forms = true\nmax_connections = 3\n").unwrap().limits;
        assert_eq!(
            (limits.run_window, limits.trust_client_forms, limits.max_connections),
            (Duration::from_secs(60), true, 3)
        );
        let per_rule =
            resolve("[[policy]]\npattern = \"x\"\naction = \"require_approval\"\napproval_ttl = \"30m\"\n").unwrap();
        assert_eq!(per_rule.policy[0].approval_ttl_secs, Some(1800));
        let err = resolve("[[policy]]\npattern = \"x\"\naction = \"require_approval\"\napproval_ttl = \"30d\"\n")
            .unwrap_err();
        assert!(err.to_string().contains("policy[0].approval_ttl"), "{err}");
        assert!(resolve("approval_ttl = \"8d\"\n").unwrap_err().to_string().contains("approval_ttl"));
        let clamped = resolve("approval_ttl = \"2m\"\nrun_window = \"9m\"\n").unwrap().settings();
        assert_eq!(clamped.run_window, Duration::from_secs(120), "never longer than the approval TTL");
        assert_eq!(resolve("list_page_size = 7\n").unwrap().list_page_size, 7);
    }

    #[test]
    fn upstream_limits_have_defaults_and_are_checked() {
        let resolve = |toml: &str| {
            Config::resolve(FileConfig::parse(Path::new("g.toml"), toml).unwrap(), &Overrides::default())
                .map_err(|e| e.to_string())
        };
        let plain = resolve("[[upstream]]\nname = \"a\"\ncommand = \"x\"\n").unwrap();
        let defaults = UpstreamConfig { name: "a".into(), command: Some("x".into()), ..UpstreamConfig::default() };
        assert_eq!(plain.upstreams[0], defaults);
        let set = resolve(
            "[[upstream]]\nname = \"a\"\ncommand = \"x\"\ncall_timeout = \"2s\"\nmax_list_pages = 3\ninherit_env = [\"HTTPS_PROXY\"]\n",
        )
        .unwrap();
        assert_eq!(set.upstreams[0].call_timeout, Duration::from_secs(2));
        assert_eq!(set.upstreams[0].max_list_pages, 3);
        assert!(plain.upstreams[0].pin_tools, "pinning is on unless turned off");
        let unpinned = resolve("[[upstream]]\nname = \"a\"\ncommand = \"x\"\npin_tools = false\n").unwrap();
        assert!(!unpinned.upstreams[0].pin_tools);
        let zero = resolve("[[upstream]]\nname = \"a\"\ncommand = \"x\"\nmax_list_pages = 0\n");
        assert!(zero.unwrap_err().contains("max_list_pages must be at least 1"));
        let bad = FileConfig::parse(Path::new("g.toml"), "[[upstream]]\nname = \"a\"\nlist_timeout = \"soon\"\n");
        assert!(bad.unwrap_err().to_string().contains("list_timeout"));
        let env = resolve("[[upstream]]\nname = \"a\"\ncommand = \"x\"\ninherit_env = [\"A=B\"]\n");
        assert!(env.unwrap_err().contains("inherit_env"));
    }

    #[test]
    fn audit_retention_and_metrics_listener() {
        let resolve = |toml: &str| {
            Config::resolve(FileConfig::parse(Path::new("g.toml"), toml).unwrap(), &Overrides::default()).unwrap()
        };
        let d = resolve("");
        assert_eq!(d.audit_retention, Duration::from_secs(90 * 24 * 3600));
        assert_eq!(d.metrics_listen, None);
        let c = resolve("audit_retention = \"30d\"\nmetrics_listen = \"127.0.0.1:9464\"\n");
        assert_eq!(c.audit_retention, Duration::from_secs(30 * 24 * 3600));
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));
        let err = FileConfig::parse(Path::new("g.toml"), "audit_retention = \"0s\"\n").unwrap_err().to_string();
        assert!(err.contains("audit_retention"), "{err}");
        let flag = Overrides { metrics_listen: Some("127.0.0.1:1".parse().unwrap()), ..Default::default() };
        let file = FileConfig::parse(Path::new("g.toml"), "metrics_listen = \"127.0.0.1:2\"\n").unwrap();
        assert_eq!(Config::resolve(file, &flag).unwrap().metrics_listen.unwrap().port(), 1);
    }

    #[test]
    fn trusted_proxies_registration_and_per_user_bounds() {
        let resolve =
            |toml: &str| Config::resolve(FileConfig::parse(Path::new("g.toml"), toml).unwrap(), &Overrides::default());
        let d = resolve("").unwrap();
        assert!(d.trusted_proxies.is_empty());
        assert_eq!(d.oauth.unused_registration_ttl, Duration::from_secs(600));
        assert_eq!(d.oauth.max_unused_registrations_per_address, 20);
        let per_user = d.settings().per_user;
        assert_eq!(
            (per_user.credentials, per_user.browser_sessions, per_user.oauth_clients, per_user.grants),
            (100, 50, 50, 500)
        );
        let c = resolve(
            "trusted_proxies = [\"10.0.0.0/8\", \"::1\"]\nmax_grants_per_user = 7\n\
             [oauth]\nunused_registration_ttl = \"2m\"\nmax_unused_registrations_per_address = 3\n",
        )
        .unwrap();
        assert_eq!(c.trusted_proxies.len(), 2);
        assert_eq!(c.settings().per_user.grants, 7);
        assert_eq!(c.settings().oauth.registration.per_address, 3);
        assert_eq!(c.settings().oauth.registration.unused_ttl, Duration::from_secs(120));
        let err = resolve("trusted_proxies = [\"proxy.internal\"]\n").unwrap_err().to_string();
        assert!(err.contains("trusted_proxies[0]"), "{err}");
        let err = resolve("max_credentials_per_user = 0\n").unwrap_err().to_string();
        assert!(err.contains("max_credentials_per_user"), "{err}");
    }

    #[test]
    fn public_url_must_be_http() {
        let file = FileConfig::parse(Path::new("g.toml"), "public_url = \"ftp://x\"\n").unwrap();
        assert!(Config::resolve(file, &Overrides::default()).unwrap_err().to_string().contains("public_url"));
    }
}
