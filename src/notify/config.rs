//! `[[notify]]` tables: where messages about executions go, in which shape,
//! and for which agents and tools. Checked at start-up like every other key.

use std::time::Duration;

use serde::Deserialize;
use url::Url;

use crate::config::error::ConfigError;

/// One `[[notify]]` table as written in `gatehouse.toml`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// Where to POST (http or https).
    pub url: Url,
    /// `json` (signed), `slack` (incoming webhook) or `ntfy`.
    #[serde(default)]
    pub format: Format,
    /// `json`: the HMAC-SHA256 signing key; `ntfy`: an access token
    /// (`Authorization: Bearer`). Not used by `slack`.
    pub secret: Option<String>,
    /// Only executions of agents matching one of these (`*`, exact, `prefix*`).
    #[serde(default)]
    pub agents: Vec<String>,
    /// Only executions of tools matching one of these (`*`, exact, `prefix*`).
    #[serde(default)]
    pub tools: Vec<String>,
    /// The name on the console and in metrics (default: the URL's host).
    pub name: Option<String>,
    /// Longest wait for one delivery attempt (default 10 s).
    #[serde(default, with = "humantime_opt")]
    pub timeout: Option<Duration>,
}

/// The shape of a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// A JSON object, signed with `secret` (`Gatehouse-Signature`).
    #[default]
    Json,
    /// A Slack incoming-webhook body `{"text": …}`.
    Slack,
    /// Plain text with ntfy's `Title`, `Click`, `Tags` and `Priority` headers.
    Ntfy,
}

impl Format {
    /// Its config name.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Slack => "slack",
            Format::Ntfy => "ntfy",
        }
    }
}

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

/// Shortest `json` secret: a signing key should not be guessable.
const MIN_SECRET_LEN: usize = 16;

/// Checks every `[[notify]]` table; errors name the table and key.
pub fn resolve(tables: Vec<NotifyConfig>) -> Result<Vec<Target>, ConfigError> {
    let mut targets: Vec<Target> = Vec::with_capacity(tables.len());
    for (i, t) in tables.into_iter().enumerate() {
        let bad = |key: &str, message: String| ConfigError::Value { key: format!("notify[{i}].{key}"), message };
        if !matches!(t.url.scheme(), "http" | "https") || t.url.host_str().is_none() {
            return Err(bad("url", "must be an http(s) URL with a host".into()));
        }
        if !t.url.username().is_empty() || t.url.password().is_some() {
            return Err(bad("url", "must not carry a user name or password (use `secret`)".into()));
        }
        match (t.format, &t.secret) {
            (_, Some(s)) if s.trim().is_empty() => return Err(bad("secret", "must not be empty".into())),
            (Format::Json, Some(s)) if s.len() < MIN_SECRET_LEN => {
                return Err(bad("secret", format!("must be at least {MIN_SECRET_LEN} characters")));
            }
            (Format::Slack, Some(_)) => {
                return Err(bad("secret", "slack webhooks take no secret (the URL is the secret)".into()));
            }
            _ => {}
        }
        for (key, patterns) in [("agents", &t.agents), ("tools", &t.tools)] {
            for p in patterns {
                gatehouse_core::policy::validate_pattern(p)
                    .map_err(|_| bad(key, format!("{p:?}: use `*`, an exact name, or `prefix*`")))?;
            }
        }
        let name = t.name.clone().unwrap_or_else(|| t.url.host_str().unwrap_or_default().to_string());
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
            return Err(bad("name", "must be letters, digits, '-', '_' or '.'".into()));
        }
        if targets.iter().any(|other| other.name == name) {
            return Err(bad("name", format!("{name:?} is used twice (give each target its own `name`)")));
        }
        targets.push(Target {
            name,
            url: t.url,
            format: t.format,
            secret: t.secret,
            agents: t.agents,
            tools: t.tools,
            timeout: t.timeout.unwrap_or(DEFAULT_TIMEOUT),
        });
    }
    Ok(targets)
}

mod humantime_opt {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else { return Ok(None) };
        let d = humantime::parse_duration(&text)
            .map_err(|e| serde::de::Error::custom(format!("{e} (write e.g. \"5s\")")))?;
        if d.is_zero() {
            return Err(serde::de::Error::custom("must be longer than zero"));
        }
        Ok(Some(d))
    }
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
