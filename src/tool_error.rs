//! The one way a tool call answers without the tool's own result: an
//! `isError` result whose `structuredContent.error` is a wire code from
//! [`ToolErrorCode`], with a message for the model and machine-readable
//! details. Used by the gate and by upstream forwarding alike.

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Serialize;
use serde_json::Value;

/// Why a call did not give its tool's own result (`structuredContent.error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorCode {
    /// The arguments do not fit the tool's schema.
    InvalidArguments,
    /// A built-in tool failed on our side.
    ToolFailed,
    /// The tool is gone (its upstream is down).
    ToolUnavailable,
    /// The tool's definition changed after the call was approved.
    ToolChanged,
    /// A policy rule blocks the tool.
    BlockedByPolicy,
    /// A gated call's arguments exceed `max_gated_arguments_bytes`.
    ArgumentsTooLarge,
    /// The credential holds `max_executions_per_credential` calls already.
    TooManyExecutions,
    /// The execution belongs to another credential.
    ExecutionForbidden,
    /// No such execution (or not this caller's).
    ExecutionNotFound,
    /// Nobody decided in time, or the approval was not used in its run window.
    ExecutionExpired,
    /// A person declined it.
    ExecutionDeclined,
    /// The client, its session or a person cancelled it.
    ExecutionCancelled,
    /// Its credential was revoked.
    ExecutionRevoked,
    /// It already ran; its result went to the request that ran it.
    ExecutionSettled,
    /// It is running in another request.
    ExecutionRunning,
    /// This session may not decide calls itself.
    ModelDecisionNotAllowed,
    /// A rule (or the gate) requires a person to decide.
    HumanOnly,
    /// A `requestState` was tampered with, expired, or is another's.
    InvalidRequestState,
    /// The upstream answered the forwarded call with a JSON-RPC error.
    UpstreamError,
    /// The upstream could not be reached or failed to answer.
    UpstreamFailed,
    /// The agent cancelled the forwarded call.
    Cancelled,
}

/// An `isError` result: `message` for the model, `details` (a JSON object,
/// or null) with `error: code` added for machines.
pub fn error_result(code: ToolErrorCode, message: impl Into<String>, details: Value) -> CallToolResult {
    let mut body = match details {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    body.insert("error".into(), serde_json::to_value(code).unwrap_or(Value::Null));
    let mut result = CallToolResult::structured_error(Value::Object(body));
    result.content = vec![ContentBlock::text(message.into())];
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_is_on_the_wire_in_snake_case_beside_the_details() {
        let r = error_result(ToolErrorCode::ExecutionForbidden, "no", serde_json::json!({"executionId": "exec_1"}));
        assert_eq!(r.is_error, Some(true));
        let s = r.structured_content.unwrap();
        assert_eq!(s["error"], "execution_forbidden");
        assert_eq!(s["executionId"], "exec_1");
    }
}
