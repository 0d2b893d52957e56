//! Gatehouse's own tools (the built-in `gatehouse` toolset). Read-only ones
//! are annotated `readOnlyHint`; the ones that change the gateway are
//! `destructiveHint` and therefore gated by default.

use std::sync::Arc;

use gatehouse_core::audit::HistoryScope;
use gatehouse_core::changes::Change;
use gatehouse_core::clock::rfc3339;
use gatehouse_core::credentials::Credential;
use gatehouse_core::model::HistoryFilter;
use gatehouse_core::model::{Actor, Via};
use gatehouse_core::policy::{Hints, Rule, Who};
use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::McpState;
use crate::tool_error::{ToolErrorCode, error_result};

/// `gatehouse_status`
pub const STATUS: &str = "gatehouse_status";
/// `gatehouse_policies_list`
pub const POLICIES_LIST: &str = "gatehouse_policies_list";
/// `gatehouse_audit_recent`
pub const AUDIT_RECENT: &str = "gatehouse_audit_recent";
/// `gatehouse_policy_set`
pub const POLICY_SET: &str = "gatehouse_policy_set";
/// `gatehouse_policy_remove`
pub const POLICY_REMOVE: &str = "gatehouse_policy_remove";
/// `resume`: waits for a paused call's decision and returns its result.
pub const RESUME: &str = gatehouse_core::model::tools::RESUME;

/// Who is calling.
#[derive(Clone)]
pub struct Caller {
    /// The authenticated credential.
    pub credential: Credential,
    /// The MCP session, if the protocol has one.
    pub session_id: Option<String>,
    /// The agent request being served, for what an upstream sends back.
    pub origin: crate::mcp::upstream::mcp_session::Origin,
}

/// Arguments of `gatehouse_policy_remove`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyRemoveArgs {
    /// The rule's name.
    #[serde(default)]
    pub name: Option<String>,
    /// The rule's pattern: names a rule saved without a name.
    #[serde(default)]
    pub pattern: Option<String>,
}

/// Arguments of `gatehouse_audit_recent`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditRecentArgs {
    /// How many calls (1–200, default 20).
    pub limit: Option<u32>,
}

/// Arguments of `resume`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResumeArgs {
    /// The `executionId` from the paused call's result.
    #[schemars(with = "String")]
    pub execution_id: gatehouse_core::approvals::ExecutionId,
    /// Model mode only (when the session and the config allow it): decide the call yourself.
    pub action: Option<ResumeAction>,
}

/// A model-mode decision.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResumeAction {
    /// Run it.
    Accept,
    /// Do not run it.
    Decline,
}

fn schema<T: JsonSchema>() -> Arc<JsonObject> {
    let value = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_else(|_| json!({"type": "object"}));
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

fn empty_schema() -> Arc<JsonObject> {
    Arc::new(
        json!({ "type": "object", "properties": {}, "additionalProperties": false })
            .as_object()
            .cloned()
            .unwrap_or_default(),
    )
}

fn read_only() -> ToolAnnotations {
    ToolAnnotations::new().read_only(true).destructive(false).idempotent(true).open_world(false)
}

fn changing() -> ToolAnnotations {
    ToolAnnotations::new().read_only(false).destructive(true).idempotent(true).open_world(false)
}

/// Every built-in tool, as listed to clients (built once: schema generation is not free).
pub fn all() -> &'static [Tool] {
    static TOOLS: std::sync::LazyLock<Vec<Tool>> = std::sync::LazyLock::new(build);
    &TOOLS
}

fn build() -> Vec<Tool> {
    vec![
        Tool::new(
            STATUS,
            "Report Gatehouse's version, which agent and thread this credential belongs to, \
             its last sign of life and when it lapses without another.",
            empty_schema(),
        )
        .with_title("Gatehouse status")
        .annotate(read_only()),
        Tool::new(POLICIES_LIST, "List the policy rules that decide whether a tool call runs, waits for a person, or is blocked.", empty_schema())
            .with_title("List policy rules")
            .annotate(read_only()),
        Tool::new(AUDIT_RECENT, "Read your most recent calls, one row each: where it stands (`latest`) and every step it took (`steps`: paused, decided by whom and when, ran, its outcome).", schema::<AuditRecentArgs>())
            .with_title("Recent calls")
            .annotate(read_only()),
        Tool::new(POLICY_SET, "Add or replace the policy rule for a tool-name pattern (`*`, exact, or `prefix*`).", schema::<Rule>())
            .with_title("Set a policy rule")
            .annotate(changing()),
        Tool::new(POLICY_REMOVE, "Remove the policy rule for a pattern.", schema::<PolicyRemoveArgs>())
            .with_title("Remove a policy rule")
            .annotate(changing()),
        Tool::new(
            RESUME,
            "Wait for a person's decision on a paused call (by its executionId) and return the call's result \
             once approved. Returns the same pending status if no decision arrives within about 45 seconds: call it again.",
            schema::<ResumeArgs>(),
        )
        .with_title("Resume a paused call")
        .annotate(read_only()),
    ]
}

/// Whether a built-in tool changes what the gate does for everyone: such a
/// call always waits for a person, only an admin may approve it, and no
/// agent-side answer (model mode, a client form) ever counts.
pub fn changes_gate(name: &str) -> bool {
    matches!(name, POLICY_SET | POLICY_REMOVE)
}

/// One built-in tool by name.
pub fn find(name: &str) -> Option<&'static Tool> {
    all().iter().find(|t| t.name == name)
}

/// The annotation hints policy reads.
pub fn hints(tool: &Tool) -> Hints {
    let a = tool.annotations.as_ref();
    Hints {
        read_only: a.and_then(|a| a.read_only_hint),
        destructive: a.and_then(|a| a.destructive_hint),
        changes_gate: changes_gate(&tool.name),
    }
}

/// A rule as the policy tools answer it: the rule contract itself.
pub fn rule_json(rule: &Rule) -> Value {
    serde_json::to_value(rule).unwrap_or_else(|_| json!({ "name": rule.name }))
}

/// The tool's annotations as sent, for rule conditions (`annotations.readOnlyHint`).
pub fn annotations(tool: &Tool) -> Value {
    tool.annotations.as_ref().and_then(|a| serde_json::to_value(a).ok()).unwrap_or_else(|| json!({}))
}

/// Who is calling, as rules scope it.
pub fn who(credential: &Credential) -> Who<'_> {
    Who {
        agent: &credential.agent,
        owner: credential.owner.as_deref(),
        thread: credential.thread.as_deref(),
        by_admin: credential.by_admin,
    }
}

fn parse<T: serde::de::DeserializeOwned>(arguments: &Value) -> Result<T, CallToolResult> {
    let value = if arguments.is_null() { json!({}) } else { arguments.clone() };
    serde_json::from_value(value).map_err(|e| {
        error_result(
            ToolErrorCode::InvalidArguments,
            format!("invalid arguments: {e}"),
            json!({"message": e.to_string()}),
        )
    })
}

/// Whether a gated built-in call's arguments would be taken when it runs:
/// checked before a person is asked, so nobody approves a rule that could
/// never be saved. `Err` is the answer to give at once.
pub fn check_arguments(name: &str, arguments: &Value) -> Result<(), CallToolResult> {
    let refused = |e: gatehouse_core::error::CoreError| {
        error_result(
            ToolErrorCode::InvalidArguments,
            format!("invalid arguments: {e}"),
            json!({"message": e.to_string()}),
        )
    };
    match name {
        POLICY_SET => {
            gatehouse_core::policy::PolicyStore::check(parse::<Rule>(arguments)?).map_err(refused)?;
        }
        POLICY_REMOVE => {
            parse::<PolicyRemoveArgs>(arguments)?;
        }
        _ => {}
    }
    Ok(())
}

/// Runs a built-in tool (not `resume`) for `caller`: `gatehouse_status`
/// at once (it reads no store), the others in the stores' lane. `approved`:
/// the paused call this run was approved as, whose decider the change log
/// names.
pub async fn run(
    state: &McpState,
    caller: &Caller,
    name: &str,
    arguments: &Value,
    approved: Option<&str>,
) -> CallToolResult {
    if name == STATUS {
        return status(state, &caller.credential, caller.session_id.as_deref());
    }
    let (on, by, tool, args) = (state.clone(), caller.clone(), name.to_string(), arguments.clone());
    let approved = approved.map(gatehouse_core::approvals::ExecutionId::from);
    state.core.run(move |_| run_with_stores(&on, &by, &tool, &args, approved.as_ref())).await.unwrap_or_else(|e| {
        tracing::error!(tool = name, error = %e, "built-in tool failed");
        error_result(ToolErrorCode::ToolFailed, format!("{name} failed: {e}"), json!({"message": e.to_string()}))
    })
}

/// A built-in tool that reads or writes the stores (blocking).
fn run_with_stores(
    state: &McpState,
    caller: &Caller,
    name: &str,
    arguments: &Value,
    approved: Option<&gatehouse_core::approvals::ExecutionId>,
) -> CallToolResult {
    let result = match name {
        STATUS => Ok(status(state, &caller.credential, caller.session_id.as_deref())),
        POLICIES_LIST => state
            .core
            .policy
            .rules()
            .map(|rules| CallToolResult::structured(json!({ "rules": rules.rules() })))
            .map_err(|e| e.to_string()),
        AUDIT_RECENT => match parse::<AuditRecentArgs>(arguments) {
            Err(r) => return r,
            Ok(args) => {
                let limit = args.limit.unwrap_or(20).clamp(1, 200) as usize;
                // An agent reads its own entries (its credential's, and its
                // thread's earlier ones), never its owner's other agents'.
                let audit = state.core.approvals.audit();
                let scope = HistoryScope::Agent(caller.credential.id.clone());
                // One row per call, as the history page shows it.
                audit
                    .calls(&HistoryFilter::default(), &scope, limit)
                    .map(|calls| {
                        let calls: Vec<_> = calls.into_iter().map(|(_, call)| call).collect();
                        CallToolResult::structured(json!({ "calls": calls }))
                    })
                    .map_err(|e| e.to_string())
            }
        },
        POLICY_SET => match parse::<Rule>(arguments) {
            Err(r) => return r,
            Ok(rule) => state
                .core
                .policy
                .set(rule)
                .map(|rule| CallToolResult::structured(rule_json(&rule)))
                .map_err(|e| e.to_string()),
        },
        POLICY_REMOVE => match parse::<PolicyRemoveArgs>(arguments) {
            Err(r) => return r,
            Ok(args) => match args.name.or(args.pattern) {
                None => Err("name the rule to remove (name, or the pattern of a rule saved without one)".into()),
                Some(name) => state
                    .core
                    .policy
                    .remove(&name)
                    .map(|removed| CallToolResult::structured(json!({ "name": name, "removed": removed })))
                    .map_err(|e| e.to_string()),
            },
        },
        other => Err(format!("{other} is not a built-in tool")),
    };
    if result.is_ok() && (name == POLICY_SET || name == POLICY_REMOVE) {
        // The change log says who asked and which person approved it.
        let approver = approved
            .and_then(|id| state.core.approvals.audit().decided_by(id).ok().flatten())
            .and_then(|by| by.parse::<Actor>().ok())
            .map(|by| by.words(&[]));
        let actor =
            Actor::Agent { name: caller.credential.agent.clone(), via: Some(Via::Approval(approver)) }.to_string();
        let named = ["name", "pattern"].iter().find_map(|k| arguments.get(*k).and_then(Value::as_str));
        let pattern = named.map(str::trim).unwrap_or_default();
        let (action, detail) = if name == POLICY_SET {
            // The action as every page says it ("asks a person"), not its wire name.
            let action = arguments.get("action").and_then(Value::as_str);
            (
                "set",
                action
                    .map(|a| gatehouse_core::policy::Action::parse(a).map_or(a.to_string(), |a| a.label().to_string())),
            )
        } else {
            ("remove", None)
        };
        let change = Change { actor: &actor, subject: "policy", target: pattern, action, detail: detail.as_deref() };
        if let Err(e) = state.core.changes.record(change) {
            tracing::error!(error = %e, "change log write failed");
        }
        // A rule may hide (block) or show tools: agents re-list.
        state.upstreams.announce_lists_changed();
    }
    result.unwrap_or_else(|e| {
        tracing::error!(tool = name, error = %e, "built-in tool failed");
        error_result(ToolErrorCode::ToolFailed, format!("{name} failed: {e}"), json!({"message": e}))
    })
}

/// `gatehouse_status` for the calling credential.
pub fn status(state: &McpState, credential: &Credential, session_id: Option<&str>) -> CallToolResult {
    let window = state.core.credentials.liveness_window();
    CallToolResult::structured(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "agent": credential.agent,
        "thread": credential.thread,
        "owner": credential.owner,
        "credentialId": credential.id,
        "sessionId": session_id,
        "lastSignOfLife": rfc3339(credential.last_seen_ms),
        "lapsesAt": rfc3339(credential.last_seen_ms + window.as_millis() as i64),
        "livenessWindowSeconds": window.as_secs(),
    }))
}
