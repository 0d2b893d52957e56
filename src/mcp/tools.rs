//! Gatehouse's own tools (the built-in `gatehouse` toolset).

use std::sync::Arc;

use gatehouse_core::clock::rfc3339;
use gatehouse_core::credentials::Credential;
use rmcp::model::{CallToolResult, JsonObject, Tool, ToolAnnotations};
use serde_json::json;

use super::McpState;

/// `gatehouse_status`
pub const STATUS: &str = "gatehouse_status";

fn object_schema(value: serde_json::Value) -> Arc<JsonObject> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

/// The built-in tools as listed to clients.
pub fn list() -> Vec<Tool> {
    vec![
        Tool::new(
            STATUS,
            "Report Gatehouse's version, which agent and thread this credential belongs to, \
             its last sign of life and when it lapses without another.",
            object_schema(json!({ "type": "object", "properties": {}, "additionalProperties": false })),
        )
        .with_title("Gatehouse status")
        .with_raw_output_schema(object_schema(json!({
            "type": "object",
            "properties": {
                "version": { "type": "string" },
                "agent": { "type": "string" },
                "thread": { "type": ["string", "null"] },
                "owner": { "type": ["string", "null"] },
                "credentialId": { "type": "string" },
                "sessionId": { "type": ["string", "null"] },
                "lastSignOfLife": { "type": "string", "format": "date-time" },
                "lapsesAt": { "type": "string", "format": "date-time" },
                "livenessWindowSeconds": { "type": "integer" }
            },
            "required": ["version", "agent", "credentialId", "lastSignOfLife", "lapsesAt", "livenessWindowSeconds"]
        })))
        .annotate(ToolAnnotations::new().read_only(true).destructive(false).idempotent(true).open_world(false)),
    ]
}

/// Runs `gatehouse_status` for the calling credential.
pub fn status(state: &McpState, credential: &Credential, session_id: Option<&str>) -> CallToolResult {
    let window = state.core.credentials.liveness_window();
    let value = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "agent": credential.agent,
        "thread": credential.thread,
        "owner": credential.owner,
        "credentialId": credential.id,
        "sessionId": session_id,
        "lastSignOfLife": rfc3339(credential.last_seen_ms),
        "lapsesAt": rfc3339(credential.last_seen_ms + window.as_millis() as i64),
        "livenessWindowSeconds": window.as_secs(),
    });
    CallToolResult::structured(value)
}
