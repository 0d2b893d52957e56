//! A notification target: where messages about executions go. One
//! definition for a `[[notify]]` table in the config file and for a target
//! an admin added on the console (kept in the database as JSON); the server
//! turns either into the target it delivers to, in one way.
//!
//! The URL and the secret are write-only once stored: a URL's path or
//! query may hold a token (a Slack webhook's URL is its secret), so pages
//! show its scheme, host and port, and an edit that leaves either blank
//! keeps the stored value, only while the URL's origin stays the same.

use serde::{Deserialize, Serialize};

use crate::upstream::{SpecError, check_url, origin_of};

/// Longest target name.
pub const MAX_NOTIFY_NAME: usize = 64;
/// Most agent or tool patterns one target lists.
pub const MAX_NOTIFY_PATTERNS: usize = 50;
/// Shortest `json` secret: a signing key should not be guessable.
pub const MIN_SIGNING_SECRET: usize = 16;
/// Longest secret.
pub const MAX_NOTIFY_SECRET: usize = 1024;

/// One notification target as written in `gatehouse.toml` and as stored.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifySpec {
    /// Where to POST (http or https).
    pub url: String,
    /// `json` (signed), `slack` (incoming webhook) or `ntfy`.
    #[serde(default)]
    pub format: NotifyFormat,
    /// `json`: the HMAC-SHA256 signing key; `ntfy`: an access token
    /// (`Authorization: Bearer`). Not used by `slack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Only executions of agents matching one of these (`*`, exact, `prefix*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<String>,
    /// Only executions of tools matching one of these (`*`, exact, `prefix*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// The name on the console and in metrics (in the file, default: the
    /// URL's host; a stored target always has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Longest wait for one delivery attempt (`"5s"`; default 10 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// `false`: kept, sent nothing.
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

fn is_yes(b: &bool) -> bool {
    *b
}

// The URL may carry a token and the secret is a key: neither belongs in a
// debug print or a log line.
impl std::fmt::Debug for NotifySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifySpec")
            .field("name", &self.name)
            .field("url", &origin_of(&self.url))
            .field("format", &self.format)
            .field("secret", &self.secret.as_ref().map(|_| "…"))
            .field("agents", &self.agents)
            .field("tools", &self.tools)
            .field("timeout", &self.timeout)
            .field("enabled", &self.enabled)
            .finish()
    }
}

/// The shape of a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyFormat {
    /// A JSON object, signed with `secret` (`Gatehouse-Signature`).
    #[default]
    Json,
    /// A Slack incoming-webhook body `{"text": …}`.
    Slack,
    /// Plain text with ntfy's `Title`, `Click`, `Tags` and `Priority` headers.
    Ntfy,
}

impl NotifyFormat {
    /// Its config name.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyFormat::Json => "json",
            NotifyFormat::Slack => "slack",
            NotifyFormat::Ntfy => "ntfy",
        }
    }

    /// The format of its config name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "json" => Some(NotifyFormat::Json),
            "slack" => Some(NotifyFormat::Slack),
            "ntfy" => Some(NotifyFormat::Ntfy),
            _ => None,
        }
    }

    /// Whether it takes a secret (a signing key, an access token).
    pub fn takes_secret(self) -> bool {
        !matches!(self, NotifyFormat::Slack)
    }
}

/// Whether `name` may name a target.
pub fn valid_notify_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NOTIFY_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl NotifySpec {
    /// The delivery timeout, if one is given and reads.
    pub fn timeout(&self) -> Option<std::time::Duration> {
        self.timeout.as_deref().and_then(|t| humantime::parse_duration(t.trim()).ok())
    }

    /// Every field's refusal, one per field, in the form's order (the
    /// server adds: the URL parses, the name is not the file's).
    pub fn problems(&self) -> Vec<SpecError> {
        let mut found: Vec<SpecError> = Vec::new();
        type Check = fn(&NotifySpec) -> Result<(), SpecError>;
        let checks: [Check; 5] =
            [Self::check_name, Self::check_url, Self::check_secret, Self::check_patterns, Self::check_timeout];
        for check in checks {
            if let Err(e) = check(self) {
                e.add_to(&mut found);
            }
        }
        found
    }

    fn check_name(&self) -> Result<(), SpecError> {
        // A name taken from the URL's host is checked once the server has
        // read the host (`xn--` for an international one).
        let Some(name) = &self.name else { return Ok(()) };
        if !valid_notify_name(name) {
            return Err(SpecError::new(
                "name",
                format!("A name is 1 to {MAX_NOTIFY_NAME} letters, digits, '-', '_' or '.'."),
            ));
        }
        Ok(())
    }

    fn check_url(&self) -> Result<(), SpecError> {
        check_url(&self.url).map_err(|e| match e.message.as_str() {
            m if m.starts_with("Put credentials") => {
                SpecError::new("url", "Put a token in the secret, not in the URL.")
            }
            _ => e,
        })
    }

    fn check_secret(&self) -> Result<(), SpecError> {
        let Some(secret) = &self.secret else { return Ok(()) };
        if !self.format.takes_secret() {
            return Err(SpecError::new("secret", "A Slack webhook takes no secret: its URL is the secret."));
        }
        if secret.trim().is_empty() {
            return Err(SpecError::new("secret", "The secret is empty."));
        }
        if self.format == NotifyFormat::Json && secret.len() < MIN_SIGNING_SECRET {
            return Err(SpecError::new(
                "secret",
                format!("A signing key is at least {MIN_SIGNING_SECRET} characters, so it cannot be guessed."),
            ));
        }
        if secret.len() > MAX_NOTIFY_SECRET || secret.chars().any(char::is_control) {
            return Err(SpecError::new(
                "secret",
                format!("A secret is one line of at most {MAX_NOTIFY_SECRET} characters."),
            ));
        }
        Ok(())
    }

    fn check_patterns(&self) -> Result<(), SpecError> {
        for (field, patterns) in [("agents", &self.agents), ("tools", &self.tools)] {
            if patterns.len() > MAX_NOTIFY_PATTERNS {
                return Err(SpecError::new(field, format!("At most {MAX_NOTIFY_PATTERNS} patterns.")));
            }
            for p in patterns {
                if crate::rule::check_pattern(field, p).is_err() {
                    return Err(SpecError::new(
                        field,
                        format!("{p:?} is not a pattern: use *, an exact name, or a prefix and *."),
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_timeout(&self) -> Result<(), SpecError> {
        let Some(text) = &self.timeout else { return Ok(()) };
        match humantime::parse_duration(text.trim()) {
            Ok(d) if !d.is_zero() && d <= std::time::Duration::from_secs(600) => Ok(()),
            Ok(_) => Err(SpecError::new("timeout", "A timeout is longer than zero and at most 10 minutes.")),
            Err(_) => Err(SpecError::new("timeout", format!("{text:?} is not a length of time: write e.g. 5s."))),
        }
    }

    /// Fills what an edit left blank from `before` (the stored target of
    /// its name): a blank URL keeps the stored one; a blank secret keeps
    /// the stored one while the URL's origin is the same (a new host must
    /// be given the secret again) and the format takes one. The switch is
    /// the stored one (Disable is its own action).
    pub fn keep_from(&mut self, before: Option<&NotifySpec>) -> Result<(), SpecError> {
        let Some(before) = before else {
            if self.url.trim().is_empty() {
                return Err(SpecError::new("url", "Give the URL to send to."));
            }
            return Ok(());
        };
        self.enabled = before.enabled;
        if self.url.trim().is_empty() {
            self.url = before.url.clone();
        }
        if self.secret.as_deref().is_none_or(|s| s.is_empty()) && self.format.takes_secret() {
            self.secret = None;
            if let Some(kept) = &before.secret {
                if origin_of(&before.url) != origin_of(&self.url) {
                    return Err(SpecError::new("secret", "Give the secret again: the URL's host changed."));
                }
                // A signing key never goes over the wire; an ntfy token is a header: neither becomes the other.
                if before.format != self.format {
                    return Err(SpecError::new("secret", "Give the secret again: the kind changed."));
                }
                self.secret = Some(kept.clone());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(toml_text: &str) -> NotifySpec {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn a_table_reads_and_each_bad_field_is_named_once() {
        let ok = spec(
            "url = \"https://hooks.example.com/in?token=x\"\nsecret = \"0123456789abcdef\"\nagents = [\"claude*\"]\ntimeout = \"5s\"",
        );
        assert_eq!(ok.problems(), []);
        assert_eq!(ok.timeout(), Some(std::time::Duration::from_secs(5)));
        assert!(!format!("{ok:?}").contains("token=x"), "the debug print hides the query");
        assert!(!format!("{ok:?}").contains("0123456789abcdef"), "and the secret");
        let cases = [
            ("url = \"ftp://x.example\"", "url"),
            ("url = \"https://u:p@x.example\"", "url"),
            ("url = \"https://x.example\"\nsecret = \"short\"", "secret"),
            ("url = \"https://x.example\"\nformat = \"slack\"\nsecret = \"0123456789abcdef\"", "secret"),
            ("url = \"https://x.example\"\ntools = [\"a*b\"]", "tools"),
            ("url = \"https://x.example\"\nname = \"a b\"", "name"),
            ("url = \"https://x.example\"\ntimeout = \"soon\"", "timeout"),
            ("url = \"https://x.example\"\ntimeout = \"0s\"", "timeout"),
        ];
        for (text, field) in cases {
            let problems = spec(text).problems();
            assert_eq!(problems.iter().map(|p| p.field).collect::<Vec<_>>(), [field], "{text}");
        }
        assert!(toml::from_str::<NotifySpec>("url = \"https://x.example\"\nformat = \"xml\"").is_err());
        assert!(toml::from_str::<NotifySpec>("url = \"https://x.example\"\nsecrets = \"x\"").is_err());
    }

    #[test]
    fn an_edit_keeps_the_url_and_secret_only_for_the_same_origin() {
        let stored = spec(
            "name = \"ops\"\nurl = \"https://hooks.example.com/T0/B0/xyz\"\nformat = \"ntfy\"\nsecret = \"tk_1\"\nenabled = false",
        );
        let mut edit = spec("name = \"ops\"\nurl = \"\"\nformat = \"ntfy\"");
        edit.keep_from(Some(&stored)).unwrap();
        assert_eq!(
            (edit.url.as_str(), edit.secret.as_deref(), edit.enabled),
            (stored.url.as_str(), Some("tk_1"), false)
        );
        let mut moved = spec("name = \"ops\"\nurl = \"https://elsewhere.example/x\"\nformat = \"ntfy\"");
        assert_eq!(moved.keep_from(Some(&stored)).unwrap_err().field, "secret");
        let mut to_json = spec("name = \"ops\"\nurl = \"\"\nformat = \"json\"");
        assert_eq!(to_json.keep_from(Some(&stored)).unwrap_err().message, "Give the secret again: the kind changed.");
        let mut to_slack = spec("name = \"ops\"\nurl = \"\"\nformat = \"slack\"");
        to_slack.keep_from(Some(&stored)).unwrap();
        assert_eq!(to_slack.secret, None, "a Slack webhook is not given the old token");
        let mut new = spec("name = \"ops\"\nurl = \"\"");
        assert_eq!(new.keep_from(None).unwrap_err().field, "url");
    }
}
