//! Scoped grants: "allow this tool for this agent" for a while, made on a
//! call's page beside Approve and Decline, and what the console lists.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{ExecutionId, GrantId};

/// How long a grant lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GrantScope {
    /// Until the MCP session the call was made in ends.
    #[serde(rename = "session")]
    Session,
    /// One hour.
    #[serde(rename = "1h")]
    OneHour,
    /// Eight hours.
    #[serde(rename = "8h")]
    EightHours,
    /// A day.
    #[serde(rename = "24h")]
    Day,
    /// Until someone revokes it.
    #[serde(rename = "forever")]
    UntilRevoked,
}

impl GrantScope {
    /// Every scope, in the order the page offers them.
    pub const ALL: [GrantScope; 5] =
        [GrantScope::Session, GrantScope::OneHour, GrantScope::EightHours, GrantScope::Day, GrantScope::UntilRevoked];

    /// The wire name (`session`, `1h`, `8h`, `24h`, `forever`).
    pub fn as_str(self) -> &'static str {
        match self {
            GrantScope::Session => "session",
            GrantScope::OneHour => "1h",
            GrantScope::EightHours => "8h",
            GrantScope::Day => "24h",
            GrantScope::UntilRevoked => "forever",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|scope| scope.as_str() == s)
    }

    /// How long it lasts in milliseconds (`None`: until revoked or the session ends).
    pub fn duration_ms(self) -> Option<i64> {
        const HOUR: i64 = 3600 * 1000;
        match self {
            GrantScope::OneHour => Some(HOUR),
            GrantScope::EightHours => Some(8 * HOUR),
            GrantScope::Day => Some(24 * HOUR),
            GrantScope::Session | GrantScope::UntilRevoked => None,
        }
    }

    /// How the page says it.
    pub fn label(self) -> &'static str {
        match self {
            GrantScope::Session => "for this MCP session",
            GrantScope::OneHour => "for 1 hour",
            GrantScope::EightHours => "for 8 hours",
            GrantScope::Day => "for 24 hours",
            GrantScope::UntilRevoked => "until revoked",
        }
    }
}

/// What one named top-level string argument must be for a grant to cover a
/// call: `{"exact": "…"}` or `{"prefix": "…"}`. An exact value compares as
/// written; a prefix means "under here" as the upstream will read the value
/// (`gatehouse_core::normalise::check_under`: URL and path parsing, nothing
/// ambiguous such as dot segments, encoded separators or compatibility
/// forms): `/tmp/` covers `/tmp/a`, not `/tmp/../etc/passwd`. The check
/// lives in core, which the gate and the grant form both use.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgMatch {
    /// Exactly this value.
    Exact(String),
    /// Any value starting with this that is still under it once parsed.
    Prefix(String),
}

impl ArgMatch {
    /// How the page says it, for the argument `name`.
    pub fn describe(&self, name: &str) -> String {
        match self {
            ArgMatch::Exact(v) => format!("{name} is exactly {v:?}"),
            ArgMatch::Prefix(p) => format!("{name} starts with {p:?}"),
        }
    }
}

/// What a person asks for when they grant (the JSON API's `grant` field).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GrantRequest {
    /// How long it lasts.
    pub scope: GrantScope,
    /// Constraints on named top-level string arguments (none: any arguments).
    #[serde(default)]
    pub arguments: BTreeMap<String, ArgMatch>,
}

/// A grant the call's page offers after a person approved calls like this
/// one several times (`suggest_grants_after` in `suggest_grants_window`;
/// by default [`SUGGEST_AFTER`] in [`SUGGEST_WINDOW_MS`]): the
/// narrowest constraints that cover each of them and this call. Accepting
/// it is the grant form's own step (approve and allow), pre-filled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantSuggestion {
    /// How many like it a person approved in the window.
    pub approvals: u32,
    /// How long the offered grant lasts.
    pub scope: GrantScope,
    /// What it would allow: each an exact value or a prefix every approved
    /// call and this one satisfy.
    pub arguments: BTreeMap<String, ArgMatch>,
    /// The call's other top-level arguments, which the grant leaves free
    /// (any value): the page says so beside the constraints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub free: Vec<String>,
}

/// Whether argument `name` can travel as a grant form's field
/// (`exact[NAME]`, `prefix[NAME]`): the names the call page offers to
/// constrain, and so the only ones a suggested grant holds.
pub fn form_field_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Approvals like a call's in the window before the page offers a grant
/// (`suggest_grants_after`'s default).
pub const SUGGEST_AFTER: u32 = 3;
/// The window those approvals are counted in: 7 days
/// (`suggest_grants_window`'s default).
pub const SUGGEST_WINDOW_MS: i64 = 7 * 24 * 3600 * 1000;
/// The most recent approvals an offer is drawn from: a tool approved
/// thousands of times a week costs one bounded read.
pub const SUGGEST_FROM_AT_MOST: u32 = 200;

/// One grant as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantView {
    /// `grant_<uuid>`.
    pub id: GrantId,
    /// The agent name it covers (every credential of this agent and owner).
    pub agent: String,
    /// The agent's owner (`None`: owner-less credentials, which admins manage).
    pub owner: Option<String>,
    /// The owner's id: what access and matching compare.
    #[serde(default)]
    pub owner_id: Option<crate::UserId>,
    /// The exposed tool name it covers, exactly.
    pub tool: String,
    /// Constraints on named top-level string arguments.
    pub arguments: BTreeMap<String, ArgMatch>,
    /// How long it lasts.
    pub scope: GrantScope,
    /// The MCP session it is bound to (session scope only).
    pub session_id: Option<String>,
    /// Who made it (`user:ada`).
    pub created_by: String,
    /// The call it was made from.
    pub execution_id: ExecutionId,
    /// When it was made (Unix ms).
    pub created_at_ms: i64,
    /// When it ends on its own (Unix ms; `None`: until revoked or the session ends).
    pub expires_at_ms: Option<i64>,
    /// Calls it let through.
    pub uses: u64,
    /// When it last let a call through (Unix ms).
    pub last_used_ms: Option<i64>,
}

/// What the grants page shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantsView {
    /// Server time when read (Unix ms).
    pub now_ms: i64,
    /// Whether the viewer is an admin (sees everyone's).
    pub is_admin: bool,
    /// Live grants the viewer may see, newest first.
    pub grants: Vec<GrantView>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_shapes() {
        for s in GrantScope::ALL {
            assert_eq!(GrantScope::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        let req: GrantRequest =
            serde_json::from_value(serde_json::json!({"scope": "8h", "arguments": {"path": {"prefix": "/tmp/"}}}))
                .unwrap();
        assert_eq!(req.scope, GrantScope::EightHours);
        assert_eq!(req.arguments["path"], ArgMatch::Prefix("/tmp/".into()));
        assert_eq!(serde_json::to_value(ArgMatch::Exact("a".into())).unwrap(), serde_json::json!({"exact": "a"}));
    }
}
