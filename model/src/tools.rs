//! Tools as the console shows them: what each exposed tool is, and what
//! the gate does with it and why.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the gate does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// `*`, an exact tool name, or `prefix*`.
    pub pattern: String,
    /// What a match does.
    pub action: Action,
    /// Never accept a decision from the model itself for calls it matches.
    #[serde(default)]
    pub human_only: bool,
    /// `config` or `database`.
    #[serde(default = "database")]
    pub source: String,
}

fn database() -> String {
    "database".into()
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
    /// A policy rule (its pattern); among matching rules the strictest wins.
    Rule(String),
    /// It changes the gate for everyone: no rule lets it run without a person.
    ChangesGate,
    /// No rule; the tool says it only reads (`readOnlyHint`).
    ReadOnly,
    /// No rule; the tool says it changes nothing that matters (`destructiveHint: false`).
    NotDestructive,
    /// No rule; the tool says it may destroy (`destructiveHint: true`), or says nothing (the spec's default).
    MayDestroy,
}

impl Basis {
    /// How a person reads it.
    pub fn describe(&self) -> String {
        match self {
            Basis::Rule(pattern) => format!("rule {pattern}"),
            Basis::ChangesGate => "changes the gate: always asks an admin".into(),
            Basis::ReadOnly => "annotation: read-only".into(),
            Basis::NotDestructive => "annotation: not destructive".into(),
            Basis::MayDestroy => "annotation or its absence: may destroy".into(),
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
