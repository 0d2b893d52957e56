//! The one way a tool call answers without the tool's own result: an
//! `isError` result whose `structuredContent.error` is a wire code from
//! [`ToolErrorCode`], with a message for the model and machine-readable
//! details. Used by the gate and by upstream forwarding alike.
//!
//! For a tool that declares an `outputSchema`, [`Shape::OutputSchema`] moves
//! those details (and a pause's) from `structuredContent` to `_meta`
//! ([`META_KEY`]): clients validate a tool's `structuredContent` against its
//! output schema, and Gatehouse's own answers are not the tool's structure.

use rmcp::model::{CallToolResult, ContentBlock, ErrorData, Tool};
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
    /// A rule's rate limit is reached (`retryAfter` seconds in the details).
    RateLimited,
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

/// The answer for a task that is unknown or another credential's: the same
/// in both cases, so a task's existence is not told (Gatehouse's own tasks
/// and an upstream's alike).
pub fn task_not_found() -> ErrorData {
    ErrorData::invalid_params("task not found", None)
}

/// A `requestState` that fails its integrity check, is another
/// credential's, belongs to another call or has expired: refused as a
/// JSON-RPC error (invalid params), not as a tool result, since the spec has
/// a server reject such a state outright (SEP-2322) and a client must not
/// mistake the refusal for the tool's answer. Gatehouse's own pauses and the
/// upstream states it wraps are refused alike.
pub fn invalid_request_state(message: impl Into<String>) -> ErrorData {
    ErrorData::invalid_params(
        message.into(),
        Some(serde_json::json!({"error": ToolErrorCode::InvalidRequestState, "recovery": "re_execute"})),
    )
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

/// The `_meta` key under which a result for a tool with an `outputSchema`
/// carries what Gatehouse would otherwise put in `structuredContent`: a
/// pause's `{status, executionId, approvalUrl, expiresAt}`, an error's
/// `{error, ...details}`.
pub const META_KEY: &str = "gatehouse/details";

/// How Gatehouse's own answers to a request (a pause, an error) are shaped,
/// by what the called tool declares. The tool's own result, once it runs,
/// is never reshaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The called tool declares no `outputSchema` (and `resume`, which
    /// declares none): the details in `structuredContent`, as always.
    Structured,
    /// The called tool declares an `outputSchema`: clients check every
    /// `structuredContent` that is not an error against it (the TypeScript
    /// SDK v1 even an error's), so the answer is `isError: true`, carries no
    /// `structuredContent`, and has the details in `_meta` under [`META_KEY`]
    /// (the text says the same for the model).
    OutputSchema,
}

impl Shape {
    /// The shape of Gatehouse's answers to a call of `tool`.
    pub fn of(tool: &Tool) -> Shape {
        if tool.output_schema.is_some() { Shape::OutputSchema } else { Shape::Structured }
    }

    /// `result` (one Gatehouse made, never a tool's own) in this shape.
    pub fn fit(self, mut result: CallToolResult) -> CallToolResult {
        if self == Shape::Structured {
            return result;
        }
        if let Some(details) = result.structured_content.take() {
            let mut meta = result.meta.take().unwrap_or_default();
            meta.0.insert(META_KEY.to_string(), details);
            result.meta = Some(meta);
        }
        result.is_error = Some(true);
        result
    }
}

/// The details Gatehouse put in a result of either [`Shape`]: its
/// `structuredContent`, or `_meta[META_KEY]`.
pub fn details(result: &CallToolResult) -> Option<&Value> {
    result.structured_content.as_ref().or_else(|| result.meta.as_ref().and_then(|m| m.0.get(META_KEY)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn for_a_tool_with_an_output_schema_the_details_move_to_meta_and_it_is_an_error() {
        let pause = CallToolResult::structured(
            serde_json::json!({"status": "user_approval_required", "executionId": "exec_1"}),
        );
        let fitted = Shape::OutputSchema.fit(pause.clone());
        assert_eq!(fitted.is_error, Some(true));
        assert!(fitted.structured_content.is_none());
        assert_eq!(fitted.content, pause.content);
        assert_eq!(details(&fitted).unwrap()["executionId"], "exec_1");
        let wire = serde_json::to_value(&fitted).unwrap();
        assert_eq!(wire["_meta"][META_KEY]["status"], "user_approval_required");
        assert!(wire.get("structuredContent").is_none());
        assert_eq!(Shape::Structured.fit(pause.clone()), pause);
    }

    #[test]
    fn the_code_is_on_the_wire_in_snake_case_beside_the_details() {
        let r = error_result(ToolErrorCode::ExecutionForbidden, "no", serde_json::json!({"executionId": "exec_1"}));
        assert_eq!(r.is_error, Some(true));
        let s = r.structured_content.unwrap();
        assert_eq!(s["error"], "execution_forbidden");
        assert_eq!(s["executionId"], "exec_1");
    }
}
