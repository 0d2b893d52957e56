//! Browser mode (the default, for every client): a paused call answers at
//! once with the approval URL; the agent calls `resume` to wait for the
//! decision and get the real result.

use gatehouse_core::approvals::Execution;
use gatehouse_core::clock::rfc3339;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

use crate::mcp::McpState;
use crate::tool_error::Shape;

/// The approval page of an execution.
pub fn approval_url(state: &McpState, execution: &Execution) -> String {
    format!(
        "{}{}",
        state.base_url,
        gatehouse_core::model::routes::resume(&execution.id, execution.session_id.as_deref())
    )
}

/// The browser-mode answer to a paused call (not an error: the call is fine,
/// it waits), in `shape`: for a tool with an `outputSchema` it is marked
/// `isError` (with the pause in `_meta`), and the text says why.
pub fn pending_result(state: &McpState, execution: &Execution, shape: Shape) -> CallToolResult {
    let url = approval_url(state, execution);
    let mut result = CallToolResult::structured(json!({
        "status": "user_approval_required",
        "executionId": execution.id,
        "approvalUrl": url,
        "expiresAt": rfc3339(execution.expires_at_ms),
    }));
    result.content = vec![ContentBlock::text(format!(
        "The call to {} needs a person's approval. Ask the user to open {url} to approve or decline it, \
         then call the `resume` tool with {{\"executionId\": \"{}\"}} to wait for the decision and get the result. \
         It expires at {}.",
        execution.tool,
        execution.id,
        rfc3339(execution.expires_at_ms)
    ))];
    if shape == Shape::OutputSchema {
        result.content.push(ContentBlock::text(
            "The call has not failed: it waits for the decision. This answer is marked as an error only because \
             the tool declares an output schema that a pause does not fit.",
        ));
    }
    shape.fit(result)
}
