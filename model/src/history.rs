//! The history: audit entries as people read them, the filters that narrow
//! them (carried in the query string, so a view can be shared as a link),
//! and one page of results.

use serde::{Deserialize, Serialize};

use crate::{CredentialId, ExecutionId, State};

/// One audit entry: an execution entered `state`, caused by `actor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Position in the log (newest is highest): the pagination cursor.
    pub id: i64,
    /// The execution.
    pub execution_id: ExecutionId,
    /// When, Unix ms.
    pub at_ms: i64,
    /// When, RFC 3339.
    pub at: String,
    /// The state entered (an execution a restart left open reads as
    /// `cancelled`, with the detail saying so).
    pub state: State,
    /// Exposed tool name.
    pub tool: String,
    /// The upstream server it went to (none for Gatehouse's own tools).
    pub upstream: Option<String>,
    /// SHA-256 of the canonical arguments (never the arguments).
    pub arguments_digest: String,
    /// Agent name.
    pub agent: String,
    /// Owning user.
    pub owner: Option<String>,
    /// Owning user's id, as the execution's first entry kept it (`None`:
    /// owner-less, or the owner was removed): what access compares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<crate::UserId>,
    /// The credential that made the call.
    pub credential_id: Option<CredentialId>,
    /// That credential's thread.
    pub thread: Option<String>,
    /// Who caused it: `user:ada`, `agent:…`, `system`, `model`, …
    pub actor: Option<String>,
    /// Extra words (error text, reason).
    pub detail: Option<String>,
    /// The call's arguments, on its first entry when the record keeps them
    /// (`keep_arguments`): bounded and redacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<crate::kept::KeptArguments>,
}

/// What narrows the history. Every field is optional; empty strings count as
/// absent (that is what an untouched form field sends).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HistoryFilter {
    /// Exact agent name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub agent: String,
    /// Exact tool name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub tool: String,
    /// Exact upstream name (`gatehouse` for Gatehouse's own tools).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub upstream: String,
    /// `gated` (calls that waited for a person) or `at_once` (calls that
    /// ran, or were refused, without a pause).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// A state name (`approved`, `declined`, `completed`, …).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub outcome: String,
    /// Who caused the entry, as the log has it (`user:ada`, `system`) or a
    /// user name alone (`ada`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub decider: String,
    /// First day included, `YYYY-MM-DD` (UTC).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub from: String,
    /// Last day included, `YYYY-MM-DD` (UTC).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub to: String,
    /// Entries older than this id only (the next page's cursor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<i64>,
}

impl HistoryFilter {
    /// Whether any filter (not counting the page cursor) is set.
    pub fn is_narrowed(&self) -> bool {
        self != &HistoryFilter { before: self.before, ..HistoryFilter::default() }
    }

    /// The outcome as a state, if it names one.
    pub fn outcome_state(&self) -> Option<State> {
        State::parse(&self.outcome)
    }

    /// The same filter on another page.
    pub fn at_page(&self, before: Option<i64>) -> HistoryFilter {
        HistoryFilter { before, ..self.clone() }
    }

    /// From a query string (with or without its `?`).
    pub fn from_query(query: &str) -> Result<HistoryFilter, String> {
        serde_urlencoded::from_str(query.trim_start_matches('?')).map_err(|e| e.to_string())
    }

    /// As a query string (`agent=a&tool=b`), empty when nothing is set.
    pub fn to_query(&self) -> String {
        serde_urlencoded::to_string(self).unwrap_or_default()
    }
}

/// Entries on one page of the history (the page and the JSON API alike).
pub const HISTORY_PAGE_SIZE: usize = 50;

/// One page of history, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryPage {
    /// Server time when read (Unix ms), for relative times.
    pub now_ms: i64,
    /// The entries, newest first.
    pub entries: Vec<AuditEntry>,
    /// The cursor of the next (older) page, if there is one.
    pub next_before: Option<i64>,
}

/// One call as the history page shows it: where it stands now, and, for a
/// call that waited for a person, every step it took (oldest first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallRow {
    /// Its latest entry: its state now, who moved it there, when.
    pub latest: AuditEntry,
    /// Every entry of the call, oldest first (one, for a call that ran or
    /// was refused at once).
    pub steps: Vec<AuditEntry>,
}

impl CallRow {
    /// Who decided the call: whoever took it out of pending (a person, a
    /// client's form, the clock), or, for a call decided at once, the rule,
    /// annotation or grant that did; `None` while it waits.
    pub fn decider(&self) -> Option<&str> {
        self.steps.iter().find(|s| s.state != State::Pending).and_then(|s| s.actor.as_deref())
    }
}

/// One page of the history, a row per call, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallsPage {
    /// Server time when read (Unix ms), for relative times.
    pub now_ms: i64,
    /// The calls, newest first (by their latest entry that the filters match).
    pub calls: Vec<CallRow>,
    /// The cursor of the next (older) page, if there is one.
    pub next_before: Option<i64>,
    /// What each grant named in this page's deciders allows, by grant id
    /// ("read_file for 8 hours, made by alice"), so a row reads as words.
    pub grants: Vec<(String, String)>,
}

/// What the history's filters suggest: the names that exist, as the viewer
/// sees them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryPickers {
    /// Agent names the viewer may see.
    pub agents: Vec<String>,
    /// Tool names exposed now.
    pub tools: Vec<String>,
    /// Upstream names.
    pub upstreams: Vec<String>,
}

/// How an export is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExportFormat {
    /// One JSON object per line.
    Jsonl,
    /// Comma-separated values with a header row.
    Csv,
}

impl ExportFormat {
    /// The file extension and the `format` parameter.
    pub fn as_str(self) -> &'static str {
        match self {
            ExportFormat::Jsonl => "jsonl",
            ExportFormat::Csv => "csv",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_round_trips_through_its_query_string() {
        let f = HistoryFilter {
            agent: "claude code".into(),
            outcome: "declined".into(),
            before: Some(42),
            ..Default::default()
        };
        let q = f.to_query();
        assert_eq!(q, "agent=claude+code&outcome=declined&before=42");
        assert_eq!(serde_urlencoded::from_str::<HistoryFilter>(&q).unwrap(), f);
        assert!(f.is_narrowed());
        assert!(!HistoryFilter { before: Some(1), ..Default::default() }.is_narrowed());
        assert_eq!(HistoryFilter::default().to_query(), "");
        // An untouched form sends empty fields: they mean "any".
        let empty: HistoryFilter = serde_urlencoded::from_str("agent=&tool=&from=").unwrap();
        assert_eq!(empty, HistoryFilter::default());
    }
}

/// One change to the gate's configuration: who changed what, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeEntry {
    /// Position in the log.
    pub id: i64,
    /// When, Unix ms.
    pub at_ms: i64,
    /// When, RFC 3339.
    pub at: String,
    /// Who: `user:ada`, `agent:claude (approved by user:root)`, `cli`.
    pub actor: String,
    /// What kind of thing: `policy`, `tool`, `user`.
    pub subject: String,
    /// Which one (a pattern, a tool, a user name).
    pub target: String,
    /// What happened (`set`, `remove`, `accept`, …).
    pub action: String,
    /// The new value or a reason.
    pub detail: Option<String>,
}
