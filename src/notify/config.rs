//! `[[notify]]` tables: where messages about executions go, in which shape,
//! and for which agents and tools. Checked at start-up like every other key.

use std::time::Duration;

use gatehouse_core::model::SpecError;
use url::Url;

use crate::config::error::ConfigError;

/// One `[[notify]]` table as written in `gatehouse.toml` (and a target
/// stored from the console): the model's one definition.
pub use gatehouse_core::model::NotifySpec as NotifyConfig;

/// The shape of a message.
pub use gatehouse_core::model::NotifyFormat as Format;

/// A checked `[[notify]]` target.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    /// Unique name (console, metrics, logs).
    pub name: String,
    /// Where to POST.
    pub url: Url,
    /// Message shape.
    pub format: Format,
    /// Signing key (`json`) or access token (`ntfy`).
    pub secret: Option<String>,
    /// Agent patterns (empty: every agent).
    pub agents: Vec<String>,
    /// Tool patterns (empty: every tool).
    pub tools: Vec<String>,
    /// Longest wait for one attempt.
    pub timeout: Duration,
    /// `false`: kept (and shown), sent nothing but a test.
    pub enabled: bool,
    /// From the config file (else added on the console).
    pub from_file: bool,
}

// The URL may carry a token (a Slack webhook's path, a query string) and the
// secret is a key: neither belongs in a debug print or a log line.
impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("url", &redacted_url(&self.url))
            .field("format", &self.format)
            .field("secret", &self.secret.as_ref().map(|_| "…"))
            .field("agents", &self.agents)
            .field("tools", &self.tools)
            .field("timeout", &self.timeout)
            .field("enabled", &self.enabled)
            .field("from_file", &self.from_file)
            .finish()
    }
}

impl Target {
    /// Whether an execution of `agent` calling `tool` is for this target.
    pub fn wants(&self, agent: &str, tool: &str) -> bool {
        let any = |patterns: &[String], name: &str| {
            patterns.is_empty() || patterns.iter().any(|p| gatehouse_core::policy::matches(p, name))
        };
        any(&self.agents, agent) && any(&self.tools, tool)
    }

    /// The URL as the console shows it: scheme, host and port only (a path
    /// or query may hold a token, e.g. a Slack webhook's).
    pub fn shown_url(&self) -> String {
        redacted_url(&self.url)
    }
}

/// `scheme://host[:port]/…` without user info, path or query.
pub fn redacted_url(url: &Url) -> String {
    let host = url.host_str().unwrap_or("?");
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    let rest = if url.path().len() > 1 || url.query().is_some() { "/…" } else { "" };
    format!("{}://{host}{port}{rest}", url.scheme())
}

/// The default wait for one delivery attempt.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The target a spec stands for: every field's first refusal, or the
/// target. The one way both the file's tables and the stored ones become
/// what runs.
pub fn target(spec: &NotifyConfig, from_file: bool) -> Result<Target, SpecError> {
    if let Some(problem) = spec.problems().into_iter().next() {
        return Err(problem);
    }
    let url = Url::parse(spec.url.trim())
        .map_err(|e| SpecError::new("url", format!("This is not a URL Gatehouse can reach ({e}).")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(SpecError::new("url", "The URL must be http(s) with a host."));
    }
    // The file may leave the name to the URL's host, as the HTTP client reads it.
    let name = spec.name.clone().unwrap_or_else(|| url.host_str().unwrap_or_default().to_string());
    if !gatehouse_core::model::valid_notify_name(&name) {
        return Err(SpecError::new("name", format!("{name:?} cannot name a target: give it a `name`.")));
    }
    Ok(Target {
        name,
        url,
        format: spec.format,
        secret: spec.secret.clone(),
        agents: spec.agents.clone(),
        tools: spec.tools.clone(),
        timeout: spec.timeout().unwrap_or(DEFAULT_TIMEOUT),
        enabled: spec.enabled,
        from_file,
    })
}

/// Checks every `[[notify]]` table; errors name the table and key.
pub fn resolve(tables: Vec<NotifyConfig>) -> Result<Vec<Target>, ConfigError> {
    let mut targets: Vec<Target> = Vec::with_capacity(tables.len());
    for (i, table) in tables.iter().enumerate() {
        let t = target(table, true)
            .map_err(|e| ConfigError::Value { key: format!("notify[{i}].{}", e.field), message: e.message })?;
        if targets.iter().any(|other| other.name == t.name) {
            return Err(ConfigError::Value {
                key: format!("notify[{i}].name"),
                message: format!("{:?} is used twice (give each target its own `name`)", t.name),
            });
        }
        targets.push(t);
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(toml_text: &str) -> NotifyConfig {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn a_json_target_with_filters_resolves() {
        let t = resolve(vec![table(
            "url = \"https://hooks.example.com/in?token=x\"\nsecret = \"0123456789abcdef\"\nagents = [\"claude*\"]\ntools = [\"files__*\"]",
        )])
        .unwrap();
        assert_eq!(t[0].name, "hooks.example.com");
        assert_eq!(t[0].format, Format::Json);
        assert!(t[0].wants("claude-code", "files__write"));
        assert!(!t[0].wants("cursor", "files__write"));
        assert!(!t[0].wants("claude", "gatehouse_policy_set"));
        assert_eq!(t[0].shown_url(), "https://hooks.example.com/…");
        assert!(!format!("{:?}", t[0]).contains("token=x"), "the debug print hides the query");
        assert!(!format!("{:?}", t[0]).contains("0123456789abcdef"), "and the secret");
        let international = resolve(vec![table("url = \"https://b\u{fc}cher.example/in\"")]).unwrap();
        assert_eq!(international[0].name, "xn--bcher-kva.example", "the host as the client reads it");
    }

    #[test]
    fn bad_tables_name_the_key() {
        let cases = [
            ("url = \"ftp://x.example\"", "notify[0].url"),
            ("url = \"https://u:p@x.example\"", "notify[0].url"),
            ("url = \"https://x.example\"\nsecret = \"short\"", "notify[0].secret"),
            ("url = \"https://x.example\"\nformat = \"slack\"\nsecret = \"0123456789abcdef\"", "notify[0].secret"),
            ("url = \"https://x.example\"\ntools = [\"a*b\"]", "notify[0].tools"),
            ("url = \"https://x.example\"\nname = \"a b\"", "notify[0].name"),
            ("name = \"v6\"\nurl = \"https://[::1/x\"", "notify[0].url"),
        ];
        for (text, key) in cases {
            let e = resolve(vec![table(text)]).unwrap_err().to_string();
            assert!(e.starts_with(key), "{text}: {e}");
        }
        let twice = resolve(vec![table("url = \"https://x.example/a\""), table("url = \"https://x.example/b\"")]);
        assert!(twice.unwrap_err().to_string().contains("used twice"));
        assert!(toml::from_str::<NotifyConfig>("url = \"https://x.example\"\nformat = \"xml\"").is_err());
    }
}
