//! Tools as the console shows them: what each exposed tool is, and what
//! the gate does with it and why.

/// Gatehouse's own tool that continues a paused call: every agent sees it
/// (no rule or profile hides it; it runs nothing new).
pub const RESUME: &str = "resume";

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the gate does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Runs at once.
    Allow,
    /// Waits for a person.
    RequireApproval,
    /// Hidden from `tools/list` and refused.
    Block,
}

impl Action {
    /// Every action, least restrictive first.
    pub const ALL: [Action; 3] = [Action::Allow, Action::RequireApproval, Action::Block];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::RequireApproval => "require_approval",
            Action::Block => "block",
        }
    }

    /// From a wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "allow" => Action::Allow,
            "require_approval" => Action::RequireApproval,
            "block" => Action::Block,
            _ => return None,
        })
    }

    /// How a person reads it.
    pub fn label(self) -> &'static str {
        match self {
            Action::Allow => "runs at once",
            Action::RequireApproval => "asks a person",
            Action::Block => "blocked",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One exposed tool: its name as agents see it and what its server says of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolInfo {
    /// The exposed name (`<prefix>__<name>` for upstream tools).
    pub name: String,
    /// The upstream server it comes from (none: Gatehouse's own).
    pub upstream: Option<String>,
    /// Its title, if it has one.
    pub title: Option<String>,
    /// Its description (an upstream's words: shown with hidden characters visible).
    pub description: Option<String>,
    /// Its input schema.
    pub input_schema: Value,
    /// `readOnlyHint`
    pub read_only: Option<bool>,
    /// `destructiveHint`
    pub destructive: Option<bool>,
    /// `idempotentHint`
    pub idempotent: Option<bool>,
    /// `openWorldHint`
    pub open_world: Option<bool>,
    /// It changes the gate for everyone (a person must approve; admins only).
    pub changes_gate: bool,
}

/// Why the gate does what it does with a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "rule")]
pub enum Basis {
    /// A policy rule (its name); among matching rules the strictest wins.
    Rule(String),
    /// A tool profile (its name) names the agent and does not list the
    /// tool: hidden from it and refused.
    Profile(String),
    /// It changes the gate for everyone: no rule lets it run without a person.
    ChangesGate,
    /// No rule; the tool says it only reads (`readOnlyHint`).
    ReadOnly,
    /// No rule and nothing to pause for: a resource or prompt no rule names.
    NotDestructive,
    /// No rule; the tool does not say it only reads (`destructiveHint: false`
    /// alone still writes), or says nothing (the spec's default).
    MayDestroy,
    /// No rule; the tool says it is safe, but its upstream's hints are not
    /// trusted (`trust_annotations`): it asks.
    UntrustedHints,
}

impl Basis {
    /// How a person reads it.
    pub fn describe(&self) -> String {
        match self {
            Basis::Rule(pattern) => format!("rule {pattern}"),
            Basis::Profile(name) => format!("not in profile {name}: hidden and refused"),
            Basis::ChangesGate => "changes the gate: always asks an admin".into(),
            Basis::ReadOnly => "annotation: read-only".into(),
            Basis::NotDestructive => "no rule: runs".into(),
            Basis::MayDestroy => "not read-only (by its annotations, or their absence): asks".into(),
            Basis::UntrustedHints => "its upstream's annotations are not trusted: asks".into(),
        }
    }
}

/// A tool and what the gate does with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolGate {
    /// The tool.
    pub tool: ToolInfo,
    /// What the gate does with a call.
    pub action: Action,
    /// Only a person may decide (never a model or a client form).
    pub human_only: bool,
    /// Why.
    pub basis: Basis,
}

/// A pinned definition is the whole tool as agents are shown it, the name
/// being the upstream's own: these fields first, in this order, then any
/// other field the tool has (a field added to tools later is pinned too).
pub const PINNED_FIELDS: [&str; 8] =
    ["name", "title", "description", "inputSchema", "outputSchema", "annotations", "icons", "_meta"];

/// The fields of two definitions, to show side by side: [`PINNED_FIELDS`]
/// first, then every other field either has, sorted.
pub fn definition_fields(old: &Value, new: &Value) -> Vec<String> {
    let mut fields: Vec<String> = PINNED_FIELDS.iter().map(|f| (*f).to_string()).collect();
    let mut others: Vec<String> = [old, new]
        .iter()
        .filter_map(|d| d.as_object())
        .flat_map(|m| m.keys())
        .filter(|k| !PINNED_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    others.sort();
    others.dedup();
    fields.extend(others);
    fields
}

/// A field of a definition, an absent one and a `null` alike.
pub fn definition_field<'a>(definition: &'a Value, field: &str) -> Option<&'a Value> {
    definition.get(field).filter(|v| !v.is_null())
}

/// The definition pinned for an upstream tool: the first one seen, or the
/// last one an admin accepted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PinView {
    /// The pinned definition ([`PINNED_FIELDS`]).
    pub definition: Value,
    /// SHA-256 of its canonical JSON.
    pub digest: String,
    /// When it was pinned (Unix ms).
    pub at_ms: i64,
    /// Who pinned it: `first seen`, or the admin who accepted it (`user:ada`).
    pub by: String,
}

/// An upstream tool held back: its upstream now offers a definition other
/// than the pinned one, or offers a tool it did not offer when its tools
/// were pinned. Hidden from agents and refused (`tool_changed`) until an
/// admin accepts it, or the upstream returns to the pin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolChange {
    /// The name agents would see it under.
    pub name: String,
    /// Its upstream.
    pub upstream: String,
    /// Its own name at the upstream.
    pub tool: String,
    /// What is pinned (none for a new tool, or if pinning it failed: held all the same).
    pub pinned: Option<PinView>,
    /// Nothing is pinned for it: the upstream added it after its tools were pinned.
    #[serde(default)]
    pub is_new: bool,
    /// The definition the upstream offers now ([`PINNED_FIELDS`]).
    pub offered: Value,
    /// SHA-256 of the offered definition: what an accept or reject names,
    /// so a decision never applies to a definition the admin did not see.
    pub offered_digest: String,
    /// Who rejected this very definition, and when (Unix ms).
    pub rejected: Option<(String, i64)>,
}

/// One line of a two-sided diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "text")]
pub enum DiffLine {
    /// On both sides.
    Same(String),
    /// Only on the old side.
    Removed(String),
    /// Only on the new side.
    Added(String),
}

/// The lines of `old` and `new` as a longest-common-subsequence diff (inputs
/// past 2,000 lines a side are compared as wholly replaced, to bound the work).
pub fn line_diff(old: &str, new: &str) -> Vec<DiffLine> {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    if a.len() > 2000 || b.len() > 2000 {
        let removed = a.iter().map(|l| DiffLine::Removed(l.to_string()));
        return removed.chain(b.iter().map(|l| DiffLine::Added(l.to_string()))).collect();
    }
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push(DiffLine::Same(a[i].to_string()));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push(DiffLine::Removed(a[i].to_string()));
            i += 1;
        } else {
            out.push(DiffLine::Added(b[j].to_string()));
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definition_fields_are_the_pinned_ones_then_any_other() {
        let old = serde_json::json!({"name": "a", "title": null, "x-later": 1});
        let new = serde_json::json!({"name": "a", "_meta": {}, "b-field": 2});
        let fields = definition_fields(&old, &new);
        assert_eq!(&fields[..PINNED_FIELDS.len()], PINNED_FIELDS.map(String::from).as_slice());
        assert_eq!(&fields[PINNED_FIELDS.len()..], ["b-field".to_string(), "x-later".to_string()].as_slice());
        assert_eq!(definition_field(&old, "title"), None, "null is absent");
        assert_eq!(definition_field(&new, "title"), None);
        assert_eq!(definition_field(&old, "name"), Some(&serde_json::json!("a")));
    }

    #[test]
    fn a_line_diff_keeps_what_both_share() {
        let d = line_diff("a\nb\nc", "a\nx\nc\nd");
        assert_eq!(
            d,
            vec![
                DiffLine::Same("a".into()),
                DiffLine::Removed("b".into()),
                DiffLine::Added("x".into()),
                DiffLine::Same("c".into()),
                DiffLine::Added("d".into()),
            ]
        );
        assert_eq!(line_diff("", "z"), vec![DiffLine::Added("z".into())]);
    }
}
