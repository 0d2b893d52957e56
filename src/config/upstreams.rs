//! `[[upstream]]` tables: the MCP servers Gatehouse fronts, their defaults
//! (written once, in [`upstream_defaults`]) and the checks on them.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use super::ConfigError;

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
    pub env: BTreeMap<String, String>,
    /// Its working directory.
    pub cwd: Option<PathBuf>,
    /// Streamable HTTP endpoint (instead of `command`).
    pub url: Option<Url>,
    /// Extra HTTP headers sent to it (never the client's token).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
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
    /// Let this upstream's tool annotations decide: a tool it calls
    /// read-only (`readOnlyHint`) runs at once when no rule says otherwise.
    /// Off by default: an upstream is a server Gatehouse does not control,
    /// and what it says of its tools is a hint. An admin may change it on
    /// the upstreams page.
    #[serde(default)]
    pub trust_annotations: bool,
    /// Whose calls' arguments the record keeps for this upstream's tools
    /// (`gated`, `all` or `none`), over the global `keep_arguments`.
    #[serde(default)]
    pub keep_arguments: Option<gatehouse_core::model::Keep>,
    /// Names of Gatehouse's own environment variables a stdio child also gets
    /// (besides [`crate::mcp::upstream::stdio::INHERITED_ENV`] and `env`).
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
    #[serde(default = "upstream_defaults::connect_timeout", deserialize_with = "super::tree::duration")]
    pub connect_timeout: Duration,
    /// Longest wait for its whole catalogue (every page of every list).
    #[serde(default = "upstream_defaults::list_timeout", deserialize_with = "super::tree::duration")]
    pub list_timeout: Duration,
    /// Longest wait for one forwarded request (a tool call, prompt, read,
    /// completion); then it is cancelled upstream and the agent gets an error.
    #[serde(default = "upstream_defaults::call_timeout", deserialize_with = "super::tree::duration")]
    pub call_timeout: Duration,
    /// How often an admin restarted it from the console (the database's
    /// count, never the file's): a new count restarts it, as a changed entry does.
    #[serde(skip)]
    pub restarts: i64,
}

/// One `[stdio_commands.KEY]` table: a whole command an admin may start as
/// a stdio upstream from the console, by its key.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StdioCommand {
    /// Program to run.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment variables for it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Its working directory.
    pub cwd: Option<PathBuf>,
}

impl StdioCommand {
    /// The command line as the console shows it (the environment's names only).
    pub fn shown(&self) -> String {
        let mut line = std::iter::once(self.command.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        if !self.env.is_empty() {
            line.push_str(&format!(" (with {})", self.env.keys().cloned().collect::<Vec<_>>().join(", ")));
        }
        line
    }
}

/// Checks the `[stdio_commands]` tables.
pub(super) fn check_commands(commands: &BTreeMap<String, StdioCommand>) -> Result<(), ConfigError> {
    for (key, command) in commands {
        let bad = |message: &str| ConfigError::Value { key: format!("stdio_commands.{key}"), message: message.into() };
        if !gatehouse_core::model::valid_upstream_name(key) {
            return Err(bad("the key must be letters, digits, '-' or '_'"));
        }
        if command.command.trim().is_empty() {
            return Err(bad("command must name a program"));
        }
    }
    Ok(())
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
            trust_annotations: false,
            keep_arguments: None,
            inherit_env: Vec::new(),
            max_line_bytes: upstream_defaults::max_line_bytes(),
            max_response_bytes: upstream_defaults::max_response_bytes(),
            stderr_tail_bytes: upstream_defaults::stderr_tail_bytes(),
            max_list_pages: upstream_defaults::max_list_pages(),
            max_list_items: upstream_defaults::max_list_items(),
            connect_timeout: upstream_defaults::connect_timeout(),
            list_timeout: upstream_defaults::list_timeout(),
            call_timeout: upstream_defaults::call_timeout(),
            restarts: 0,
        }
    }
}

impl UpstreamConfig {
    /// The prefix its tools are exposed under.
    pub fn prefix(&self) -> String {
        self.prefix.clone().unwrap_or_else(|| format!("{}__", self.name))
    }
}

/// Checks every `[[upstream]]` table; errors name the table (`upstream[i]`).
pub(super) fn check(upstreams: &[UpstreamConfig]) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    for (i, u) in upstreams.iter().enumerate() {
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
        check_limits(u).map_err(|message| ConfigError::Value { key: key.clone(), message })?;
    }
    Ok(())
}

/// The `[[upstream]]` limits and `inherit_env` make sense.
fn check_limits(u: &UpstreamConfig) -> Result<(), String> {
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
