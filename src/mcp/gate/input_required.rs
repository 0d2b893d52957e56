//! Native mode on 2026-07-28: an input-required result with a URL input
//! request (the approval page) and an integrity-protected `requestState`;
//! each retry carrying it is held up to [`RETRY_HOLD`], then runs or answers
//! "still pending" again.

use std::time::Duration;

use gatehouse_core::approvals::{Execution, ExecutionId, Waited};
use rmcp::RoleServer;
use rmcp::model::{
    CallToolResponse, ErrorData, InputRequest, InputRequests, InputRequiredResult, RequestStateCodec, SealOptions,
};
use rmcp::service::RequestContext;
use serde_json::json;

use super::browser::approval_url;
use super::outcome::{finish_decided_response, settled_result};
use crate::mcp::McpState;
use crate::mcp::tools::Caller;
use crate::tool_error::{Shape, ToolErrorCode, error_result, invalid_request_state};

/// How long one retried 2026-07-28 call is held before answering "still
/// pending" (the Python SDK retries an input-required answer a bounded number
/// of times, so each round should last).
pub const RETRY_HOLD: Duration = Duration::from_secs(50);
/// Loads the data dir's request-state key, creating it on first start.
pub fn load_codec(data_dir: &std::path::Path, db: &gatehouse_core::Db) -> anyhow::Result<RequestStateCodec> {
    let key = match db.backend() {
        // Replicas on one PostgreSQL must open each other's sealed states (a
        // session-less retry lands on any of them): the key is shared there.
        gatehouse_core::db::Backend::Postgres => gatehouse_core::secret::shared_key(db, "request_state", 32)?,
        gatehouse_core::db::Backend::Sqlite => {
            let path = data_dir.join("request-state.key");
            match std::fs::read(&path) {
                Ok(key) if key.len() >= 32 => key,
                _ => {
                    let key = gatehouse_core::secret::random_bytes(32);
                    write_private(&path, &key)?;
                    key
                }
            }
        }
    };
    RequestStateCodec::try_new(key).map_err(|e| anyhow::anyhow!("request-state key: {e}"))
}

fn write_private(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(data)
}

/// What the request state is bound to besides its payload: who may retry
/// ([`Credential::principal`](gatehouse_core::credentials::Credential::principal)) and the exact arguments.
fn binding(credential: &gatehouse_core::credentials::Credential, digest: &str) -> Vec<u8> {
    format!("{}|{digest}", credential.principal()).into_bytes()
}

/// The approval page as a URL elicitation (tasks show the same).
pub(super) fn url_request(state: &McpState, execution: &Execution) -> InputRequests {
    let request: InputRequest = serde_json::from_value(json!({
        "method": "elicitation/create",
        "params": {
            "mode": "url",
            "message": format!("Approve {} for agent {} in Gatehouse", execution.tool, execution.agent),
            "url": approval_url(state, execution),
            "elicitationId": execution.id,
        }
    }))
    .expect("a URL elicitation request is a valid input request");
    InputRequests::from([("approval".to_string(), request)])
}

/// The first answer to a paused 2026-07-28 call: a URL input request for
/// the approval page and the sealed `requestState` the client echoes.
pub fn input_required(state: &McpState, caller: &Caller, execution: &Execution) -> CallToolResponse {
    let ttl = Duration::from_millis((execution.expires_at_ms - state.core.clock.now_ms()).max(1_000) as u64);
    let sealed = state.codec.seal_with(
        execution.id.as_bytes(),
        &SealOptions::new().associated_data(&binding(&caller.credential, &execution.arguments_digest)).ttl(ttl),
    );
    CallToolResponse::InputRequired(InputRequiredResult::new(Some(url_request(state, execution)), Some(sealed)))
}

/// A 2026-07-28 retry carrying the `requestState` of an earlier answer: verify
/// it, hold the call up to [`RETRY_HOLD`], then run it or answer again;
/// Gatehouse's own answers in `shape` (the called tool's).
pub async fn retry(
    state: &McpState,
    caller: &Caller,
    request_state: &str,
    arguments: &serde_json::Value,
    shape: Shape,
    ctx: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, ErrorData> {
    let digest = gatehouse_core::approvals::digest(arguments);
    let opened = state.codec.open_with(request_state, &binding(&caller.credential, &digest));
    let id = match opened.map(|bytes| ExecutionId::from(String::from_utf8(bytes).unwrap_or_default())) {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!(agent = %caller.credential.agent, error = %e, "refused a requestState");
            return Err(invalid_request_state(format!(
                "the requestState was refused ({e}); make the call again without it"
            )));
        }
    };
    let store = &state.core.approvals;
    match store.get(&id) {
        // Decided before this retry arrived (declined, expired, cancelled), or
        // replayed after it ran: the audit log answers; nothing runs again.
        None => return Ok(CallToolResponse::Complete(settled_result(state, caller, &id, shape).await)),
        Some((execution, _)) if !execution.belongs_to(&caller.credential) => {
            tracing::warn!(execution = %id, credential = %caller.credential.id, "requestState retry from another credential refused");
            return Ok(CallToolResponse::Complete(shape.fit(error_result(
                ToolErrorCode::ExecutionForbidden,
                "this execution belongs to another credential",
                json!({"executionId": id}),
            ))));
        }
        Some(_) => {}
    }
    // Run where the agent is: on a cluster, take it over from its owner.
    store.take_over(&id).await;
    Ok(match super::resume::wait(state, &id, RETRY_HOLD, ctx).await {
        Waited::StillPending => {
            CallToolResponse::InputRequired(InputRequiredResult::from_request_state(request_state.to_string()))
        }
        Waited::Cancelled => CallToolResponse::Complete(shape.fit(error_result(
            ToolErrorCode::ExecutionCancelled,
            "cancelled by the client",
            json!({"executionId": id}),
        ))),
        Waited::Moved(_) | Waited::NotLive => finish_decided_response(state, caller, &id, shape).await,
    })
}
