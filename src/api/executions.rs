//! The browser's view of paused executions: detail, decisions, and SSE
//! streams of one execution's state and of the signed-in user's inbox.

use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::response::sse::Event;
use futures::StreamExt;
use gatehouse_core::Core;
use gatehouse_core::approvals::{Decide, Decision, ExecutionId, ExecutionView, State as ExecutionState};
use gatehouse_core::grants;
use gatehouse_core::model::GrantRequest;
use serde::Deserialize;
use serde_json::json;
use tokio_stream::wrappers::WatchStream;

use super::live::{EventStream, inbox_updates, sse};
use crate::auth::SignedIn;
use crate::error::{ApiError, ApiJson};
use crate::state::AppState;
use crate::throttle::StreamSlot;

/// `GET /api/executions/{eid}`
pub async fn get(
    State(core): State<Core>,
    SignedIn(user): SignedIn,
    Path(id): Path<ExecutionId>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(ApiJson(core.run(move |core| core.execution_for(&user, &id)).await??))
}

/// `GET /api/mcp-sessions/{sid}/executions/{eid}`: the session only locates
/// the execution; the directory resolves it from any of the agent's sessions.
pub async fn get_in_session(
    State(core): State<Core>,
    SignedIn(user): SignedIn,
    Path((_sid, id)): Path<(String, ExecutionId)>,
) -> Result<impl IntoResponse, ApiError> {
    Ok(ApiJson(core.run(move |core| core.execution_for(&user, &id)).await??))
}

/// `POST /api/executions/{eid}/suggestion/decline`: turns down the grant
/// the call's view offers (`suggestion`); it is not offered to this person
/// for that agent and tool again. 204; 403/404 as for reading the call.
pub async fn decline_suggestion(
    State(core): State<Core>,
    SignedIn(user): SignedIn,
    Path(id): Path<ExecutionId>,
) -> Result<impl IntoResponse, ApiError> {
    core.run(move |core| core.decline_suggestion(&user, &id)).await??;
    Ok(axum::http::StatusCode::NO_CONTENT)
}

/// Body of a decision.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResumeBody {
    /// `accept | decline | cancel`
    pub action: Decision,
    /// Why (a decline's reason reaches the agent) or a note on an approval:
    /// at most 500 characters, trimmed; audited.
    #[serde(default)]
    pub reason: Option<String>,
    /// With `accept`: also allow this tool for this agent from now on
    /// (`{scope, arguments?}`).
    #[serde(default)]
    pub grant: Option<GrantRequest>,
}

/// `POST /api/executions/{eid}/resume {action, reason?, grant?}`
pub async fn resume(
    State(core): State<Core>,
    SignedIn(user): SignedIn,
    Path(id): Path<ExecutionId>,
    ApiJson(body): ApiJson<ResumeBody>,
) -> Result<impl IntoResponse, ApiError> {
    let note = grants::note_from(body.reason.as_deref())?;
    let Some(request) = body.grant else {
        let approvals = &core.approvals;
        let snapshot = approvals.decide(Decide::person(&id, body.action, &user).note(note.as_deref())).await?;
        return Ok(ApiJson(json!({ "state": snapshot.state, "executionId": id })));
    };
    if body.action != Decision::Accept {
        return Err(ApiError::BadRequest("a grant goes with action \"accept\"".into()));
    }
    let core = &core;
    let grant = grants::approve_and_grant(&core.approvals, &core.grants, &user, &id, &request, note.as_deref()).await?;
    Ok(ApiJson(json!({ "state": ExecutionState::Approved, "executionId": id, "grant": grant })))
}

/// `POST /api/mcp-sessions/{sid}/executions/{eid}/resume {action}`
pub async fn resume_in_session(
    core: State<Core>,
    user: SignedIn,
    Path((_sid, id)): Path<(String, ExecutionId)>,
    body: ApiJson<ResumeBody>,
) -> Result<impl IntoResponse, ApiError> {
    resume(core, user, Path(id), body).await
}

/// `GET /api/executions/{eid}/events`: the execution's view (the JSON of
/// `GET /api/executions/{eid}`) now, then on every change until it settles;
/// beside it the viewer's inbox as `inbox` events (the navigation's count).
pub async fn events(
    State(state): State<AppState>,
    SignedIn(user): SignedIn,
    Path(id): Path<ExecutionId>,
    slot: StreamSlot,
) -> Result<EventStream, ApiError> {
    let core = state.mcp.core.clone();
    let view = {
        let (user, id) = (user.clone(), id.clone());
        core.run(move |core| core.approvals.view_for(&user, &id)).await??
    };
    let inbox = inbox_updates(&state, user.clone());
    // After the last state the stream stays open (keep-alives and inbox
    // events only), so browsers do not reconnect over and over to a
    // settled execution.
    let Some((_, rx)) = core.approvals.subscribe(&id) else {
        let event = view_event(&view);
        let views = futures::stream::once(async move { Ok(event) }).chain(futures::stream::pending());
        return Ok(sse(futures::stream::select(views, inbox), &state, slot));
    };
    // Each change is read back through the directory, so a settled execution
    // is sent as the audit log has it: what a reload of the page would show.
    let views = WatchStream::new(rx).then(move |_| {
        let (core, user, id) = (core.clone(), user.clone(), id.clone());
        async move { core.run(move |core| core.approvals.view_for(&user, &id)).await }
    });
    let views = views.filter_map(|read| async move { read.ok()?.ok().map(|view| Ok(view_event(&view))) });
    Ok(sse(futures::stream::select(views.chain(futures::stream::pending()), inbox), &state, slot))
}

fn view_event(view: &ExecutionView) -> Event {
    Event::default().data(serde_json::to_string(view).unwrap_or_default())
}
