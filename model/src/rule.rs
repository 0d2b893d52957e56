//! A policy rule: the one definition every surface reads and writes: the
//! config file's `[[policy]]` (TOML), the policy tools' arguments (JSON,
//! described to agents by its schema), the console's editor and the store.
//! Each field is typed, so a rule that does not parse is refused where it
//! is read, never half-applied.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::tools::Action;

/// Why a rule (or one of its fields) does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct RuleError {
    /// The field, as it is written (`rate`, `pattern`, …).
    pub field: &'static str,
    /// What is wrong, in words; never more than a short sentence.
    pub reason: String,
}

impl RuleError {
    fn new(field: &'static str, reason: impl Into<String>) -> Self {
        RuleError { field, reason: reason.into() }
    }
}

/// One rule: which calls it matches (its target, optionally narrowed to
/// some agents, owners or upstreams and by a condition on the call) and
/// what a match does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Its name: what the console, the audit log and a refusal call it.
    /// Unique among the database's rules; a rule saved without one is
    /// named by its pattern.
    #[serde(default)]
    pub name: String,
    /// Which tools (`*`, an exact name, `prefix*`), or resources
    /// (`resource:<uri pattern>`) or prompts (`prompt:<name pattern>`).
    pub pattern: Target,
    /// What a matching call does.
    pub action: Action,
    /// Never accept a decision from the model itself for calls it matches.
    #[serde(default, alias = "humanOnly")]
    pub human_only: bool,
    /// Where it is kept: the config file (read-only) or the database.
    /// Set by whoever loads it; the policy tool and console save to the database.
    #[serde(default)]
    #[schemars(skip)]
    pub source: Source,
    /// How long a call it holds for approval may wait (`"30m"`), instead of
    /// the global `approval_ttl`; config-file rules only.
    #[serde(default, with = "duration_text", skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub approval_ttl: Option<Duration>,
    /// Only calls by these agents, `owner/agent` (patterns on each side); a
    /// bare name: agents of `owners`, or minted by an admin. Empty: every agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<String>,
    /// Only calls by agents of these owners (user names, patterns); empty: every owner.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<String>,
    /// Only tools of these upstreams (names, patterns); empty: every tool,
    /// Gatehouse's own included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<String>,
    /// A condition on the call in CEL over tool, upstream, agent, owner,
    /// thread, args, annotations and now (`args.branch == "main"`); none: every call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// At most this many of the calls it matches (`"10/min"`; units s, min,
    /// hour, day), counted per `rate_per`, across replicas; none: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// Whom the rate counts: `agent` (the default), `owner` or `tool`.
    #[serde(default, alias = "ratePer")]
    pub rate_per: Per,
    /// Shadow mode: it decides nothing; each call it would have changed is
    /// recorded as `shadow:<name>` with what it would have done.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
    /// Whose arguments the record keeps for the calls this rule decides
    /// (`gated`, `all` or `none`), over the global `keep_arguments`.
    #[serde(default, alias = "keepArguments", skip_serializing_if = "Option::is_none")]
    pub keep_arguments: Option<crate::kept::Keep>,
}

impl Rule {
    /// A rule for every call to `pattern`'s targets, named by it.
    pub fn new(pattern: Target, action: Action) -> Self {
        Rule {
            name: pattern.as_str().to_string(),
            pattern,
            action,
            human_only: false,
            source: Source::Database,
            approval_ttl: None,
            agents: Vec::new(),
            owners: Vec::new(),
            upstreams: Vec::new(),
            when: None,
            rate: None,
            rate_per: Per::Agent,
            shadow: false,
            keep_arguments: None,
        }
    }

    /// Whether it applies to only some calls of the tools it matches (a
    /// scope or a condition), so what it does depends on the call.
    pub fn is_conditional(&self) -> bool {
        !self.agents.is_empty() || !self.owners.is_empty() || self.when.is_some()
    }

    /// A rule as it is saved: trimmed, named by its pattern when unnamed,
    /// empty scope patterns and an empty condition dropped.
    pub fn normalised(mut self) -> Self {
        self.name = self.name.trim().to_string();
        if self.name.is_empty() {
            self.name = self.pattern.as_str().to_string();
        }
        for list in [&mut self.agents, &mut self.owners, &mut self.upstreams] {
            *list = list.iter().map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect();
        }
        self.when = self.when.map(|w| w.trim().to_string()).filter(|w| !w.is_empty());
        self
    }
}

/// Where a rule is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The config file's `[[policy]]`: changed by editing the file.
    Config,
    /// The database: changed on the console or by the policy tools.
    #[default]
    Database,
}

impl Source {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Config => "config",
            Source::Database => "database",
        }
    }
}

/// Whether a name pattern (`*`, an exact name, `prefix*`) matches `name`.
pub fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Checks a name pattern: `*`, an exact name, or `prefix*`, at most 200
/// characters, nothing hidden.
pub fn check_pattern(field: &'static str, pattern: &str) -> Result<(), RuleError> {
    let body = pattern.strip_suffix('*').unwrap_or(pattern);
    if pattern.is_empty() || pattern.len() > 200 || body.contains('*') || pattern.chars().any(char::is_control) {
        return Err(RuleError::new(field, "use `*`, an exact tool name, or `prefix*`"));
    }
    Ok(())
}

/// What a rule matches: tools by a name pattern, or resources or prompts
/// (`resource:<uri pattern>`, `prompt:<name pattern>`). Written and read as
/// its text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "String", into = "String")]
#[schemars(with = "String")]
pub struct Target {
    text: String,
}

/// The kind of thing a [`Target`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// Tools, by their exposed names.
    Tools,
    /// Resources, by URI (`resource:`).
    Resources,
    /// Prompts, by name (`prompt:`).
    Prompts,
}

impl Target {
    /// A target from its text, trimmed and checked.
    pub fn parse(text: &str) -> Result<Target, RuleError> {
        let text = text.trim();
        check_pattern("pattern", text)?;
        Ok(Target { text: text.to_string() })
    }

    /// Its text, as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// What kind of thing it names.
    pub fn kind(&self) -> TargetKind {
        if self.text.starts_with("resource:") {
            TargetKind::Resources
        } else if self.text.starts_with("prompt:") {
            TargetKind::Prompts
        } else {
            TargetKind::Tools
        }
    }

    /// Whether it names tools (not resources or prompts).
    pub fn is_tools(&self) -> bool {
        self.kind() == TargetKind::Tools
    }

    /// Whether it matches the exposed tool `name` (a tool target only).
    pub fn matches_tool(&self, name: &str) -> bool {
        self.is_tools() && matches(&self.text, name)
    }
}

impl FromStr for Target {
    type Err = RuleError;
    fn from_str(text: &str) -> Result<Self, RuleError> {
        Target::parse(text)
    }
}

impl TryFrom<String> for Target {
    type Error = RuleError;
    fn try_from(text: String) -> Result<Self, RuleError> {
        Target::parse(&text)
    }
}

impl From<Target> for String {
    fn from(t: Target) -> String {
        t.text
    }
}

impl PartialEq<&str> for Target {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A number of calls per window: `10/min`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "String", into = "String")]
#[schemars(with = "String")]
pub struct Rate {
    /// Calls let through per window (at least 1).
    pub count: u32,
    /// The window, seconds: 1, 60, 3600 or 86400.
    pub window_secs: u64,
}

impl FromStr for Rate {
    type Err = RuleError;

    /// `10/min`, `5/s`, `100/hour`, `1000/day` (also `sec`, `second`, `m`, `minute`, `h`, `d`).
    fn from_str(text: &str) -> Result<Rate, RuleError> {
        let invalid = || {
            RuleError::new(
                "rate",
                format!("{text:?}: write calls per unit, e.g. \"10/min\" (units: s, min, hour, day)"),
            )
        };
        let (count, unit) = text.trim().split_once('/').ok_or_else(invalid)?;
        let count: u32 = count.trim().parse().map_err(|_| invalid())?;
        let window_secs = match unit.trim() {
            "s" | "sec" | "second" => 1,
            "m" | "min" | "minute" => 60,
            "h" | "hour" => 3600,
            "d" | "day" => 86_400,
            _ => return Err(invalid()),
        };
        if count == 0 {
            return Err(RuleError::new("rate", "at least 1 call (to refuse every call, block)"));
        }
        Ok(Rate { count, window_secs })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.window_secs {
            1 => "s",
            60 => "min",
            3600 => "hour",
            _ => "day",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

impl TryFrom<String> for Rate {
    type Error = RuleError;
    fn try_from(text: String) -> Result<Self, RuleError> {
        text.parse()
    }
}

impl From<Rate> for String {
    fn from(r: Rate) -> String {
        r.to_string()
    }
}

/// Whom a rule's rate counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Per {
    /// Each agent (by owner and name), over all its credentials and sessions.
    #[default]
    Agent,
    /// Each owner, over all their agents.
    Owner,
    /// Each tool, over every agent.
    Tool,
}

impl Per {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Per::Agent => "agent",
            Per::Owner => "owner",
            Per::Tool => "tool",
        }
    }
}

impl FromStr for Per {
    type Err = RuleError;

    /// `agent`, `owner` or `tool` (empty: agent).
    fn from_str(text: &str) -> Result<Per, RuleError> {
        match text.trim() {
            "" | "agent" => Ok(Per::Agent),
            "owner" => Ok(Per::Owner),
            "tool" => Ok(Per::Tool),
            other => Err(RuleError::new("rate_per", format!("{other:?} is not agent, owner or tool"))),
        }
    }
}

impl FromStr for Action {
    type Err = RuleError;

    /// `allow`, `require_approval` or `block`.
    fn from_str(text: &str) -> Result<Action, RuleError> {
        Action::parse(text.trim())
            .ok_or_else(|| RuleError::new("action", format!("{text:?} is not one of allow, require_approval, block")))
    }
}

/// A duration written as text (`"90s"`, `"30m"`, `"24h"`), longer than zero.
mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else { return Ok(None) };
        let d = humantime::parse_duration(&text)
            .map_err(|e| serde::de::Error::custom(format!("{e} (write e.g. \"90s\", \"10m\", \"24h\")")))?;
        if d.is_zero() {
            return Err(serde::de::Error::custom("must be longer than zero"));
        }
        // Whole seconds: a sub-second approval window is not a useful one.
        Ok(Some(Duration::from_secs(d.as_secs().max(1))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_and_write_one_way() {
        for (text, written) in [("10/min", "10/min"), ("5/s", "5/s"), (" 3 / hour ", "3/hour"), ("7/d", "7/day")] {
            let rate: Rate = text.parse().unwrap();
            assert_eq!(rate.to_string(), written);
            assert_eq!(written.parse::<Rate>().unwrap(), rate);
        }
        for bad in ["10", "0/min", "10/week", "x/min", ""] {
            assert_eq!(bad.parse::<Rate>().unwrap_err().field, "rate", "{bad}");
        }
    }

    #[test]
    fn a_rule_that_does_not_parse_is_refused_whole() {
        let json = |v: serde_json::Value| serde_json::from_value::<Rule>(v);
        let ok =
            json(serde_json::json!({"pattern": "git__*", "action": "block", "rate": "2/min", "rate_per": "owner"}))
                .unwrap();
        assert_eq!((ok.rate, ok.rate_per), (Some(Rate { count: 2, window_secs: 60 }), Per::Owner));
        for bad in [
            serde_json::json!({"pattern": "git__*", "action": "block", "rate": "2 per minute"}),
            serde_json::json!({"pattern": "git__*", "action": "block", "rate_per": "team"}),
            serde_json::json!({"pattern": "git__*", "action": "deny"}),
            serde_json::json!({"pattern": "a*b", "action": "block"}),
            serde_json::json!({"pattern": "git__*", "action": "block", "humna_only": true}),
        ] {
            assert!(json(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn targets_know_their_kind() {
        assert_eq!(Target::parse("resource:file:///etc/*").unwrap().kind(), TargetKind::Resources);
        assert_eq!(Target::parse("prompt:x").unwrap().kind(), TargetKind::Prompts);
        let tools = Target::parse(" git__* ").unwrap();
        assert_eq!((tools.as_str(), tools.matches_tool("git__push")), ("git__*", true));
        assert!(!Target::parse("resource:*").unwrap().matches_tool("resource:x"));
    }
}
