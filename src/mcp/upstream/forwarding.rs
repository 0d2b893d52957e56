//! Forwarding an agent's request to the upstream that offers what it names
//! (on the agent's own upstream session or the shared connection), within
//! the upstream's `call_timeout`, and mapping what comes back: the upstream's
//! JSON-RPC errors pass through, transport failures become tool errors.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest, CompleteRequestParams,
    CompleteResult, ErrorData, GetPromptRequest, GetPromptRequestParams, GetPromptResponse, InputRequiredResult,
    LoggingLevel, ReadResourceRequest, ReadResourceRequestParams, ReadResourceResponse, Reference, RequestMetaObject,
    ServerResult, SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, PeerRequestOptions};

use super::Upstreams;
use super::errors::sanitize;
use super::input_required::{self, Continuation, Round};
use super::link::{Link, supports_logging};
use super::mcp_session::{Downstream, Origin};
use super::merged::UpstreamTool;
use super::registry::relayable_per_request;
use super::relay;
use crate::tool_error::{Shape, ToolErrorCode, error_result};

/// The answer to a call its agent cancelled (which nobody reads).
fn cancelled() -> CallToolResult {
    error_result(ToolErrorCode::Cancelled, "cancelled by the agent", serde_json::Value::Null)
}

/// The error `what` gets when the upstream could not be reached or failed.
fn upstream_error(what: &str, e: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(sanitize(&format!("upstream {what} failed: {e}")), None)
}

/// The error `what` gets when the upstream has not answered within `call_timeout`.
fn timed_out(what: &str, timeout: Duration) -> ErrorData {
    ErrorData::internal_error(
        format!("upstream {what} failed: no answer within call_timeout ({})", humantime::format_duration(timeout)),
        None,
    )
}

/// `request` on `link`, or an error once its `call_timeout` passes
/// (dropping an rmcp request future cancels it at the upstream).
async fn within<T>(
    link: &Link,
    what: &str,
    request: impl Future<Output = Result<T, rmcp::service::ServiceError>>,
) -> Result<T, ErrorData> {
    let timeout = link.call_timeout;
    match tokio::time::timeout(timeout, request).await {
        Ok(answer) => answer.map_err(|e| pass_error(what, e)),
        Err(_) => {
            let upstream = link.relay.upstream();
            tracing::warn!(upstream, what, timeout = %humantime::format_duration(timeout), "upstream request timed out");
            Err(timed_out(what, timeout))
        }
    }
}

/// An upstream's JSON-RPC error passes through as it is; anything else is ours.
fn pass_error(what: &str, e: rmcp::service::ServiceError) -> ErrorData {
    match e {
        rmcp::service::ServiceError::McpError(e) => e,
        e => upstream_error(what, e),
    }
}

/// What Gatehouse sends with a request to `link`'s upstream for the agent
/// request `origin`. A 2026-07-28 upstream gets, in `_meta`, what that agent
/// can answer (only what Gatehouse relays or carries back: sampling,
/// elicitation, roots, tasks; never other extensions), so its capability
/// checks (-32021) see the real agent, and the agent's log level, instead of
/// the connection's defaults (which declare everything, for a 2025-11-25
/// upstream's sake: there the relay refuses what the agent cannot answer).
fn request_options(link: &Link, origin: &Origin) -> PeerRequestOptions {
    if !super::link::is_modern(&link.peer) {
        return PeerRequestOptions::no_options();
    }
    let mut meta = RequestMetaObject::new();
    meta.set_client_capabilities(relayable_per_request(&origin.capabilities));
    if let Some(level) = origin.log_level.or_else(|| origin.downstream.level()) {
        meta.set_log_level(level);
    }
    PeerRequestOptions::no_options().with_meta(meta)
}

/// Sends `request` (`what`) on `link` for `origin` and waits for the answer
/// within `call_timeout`, or the agent's cancellation (passed on).
pub(super) async fn send(
    link: &Link,
    what: &str,
    request: ClientRequest,
    origin: &Origin,
) -> Result<ServerResult, ErrorData> {
    let handle = link
        .peer
        .send_request_with_option(request, request_options(link, origin))
        .await
        .map_err(|e| upstream_error(what, link.why(&e)))?;
    match relay::await_or_cancel(handle, &origin.ct, "cancelled by the agent", Some(link.call_timeout)).await {
        Ok(answer) => Ok(answer),
        Err(rmcp::service::ServiceError::Timeout { timeout }) => Err(timed_out(what, timeout)),
        Err(rmcp::service::ServiceError::McpError(e)) => Err(e),
        Err(e) => Err(upstream_error(what, link.why(&e))),
    }
}

/// Where a request that may take input rounds goes: on `link`, for the
/// agent request `origin`; `what` is its method, for errors and logs.
struct InputRounds<'a> {
    link: &'a Link,
    origin: &'a Origin,
    what: &'a str,
}

impl Upstreams {
    /// Calls `tool` at its upstream for the agent request `origin`: progress
    /// and server→client requests flow back to that request, its cancellation
    /// flows on. A call in flight when the upstream dies gets an error result
    /// (in `shape`, the request's); the upstream's own result and JSON-RPC
    /// error are passed through as they are. `answers` continues an earlier
    /// round the upstream answered with `input_required`.
    ///
    /// When the upstream asks for input: a 2026-07-28 agent gets the
    /// upstream's `input_required` (its `requestState` still the upstream's:
    /// the caller seals it, [`super::input_required`]); a 2025-11-25 agent is
    /// asked each input request as a server→client request and the call is
    /// retried with the answers, up to [`input_required::MAX_ROUNDS`] rounds.
    ///
    /// An upstream's task comes back only for an agent that declared tasks,
    /// still under the upstream's id: the caller gives the agent Gatehouse's
    /// ([`input_required::seal_call_answer`], [`super::tasks`]).
    pub async fn call(
        &self,
        tool: &UpstreamTool,
        arguments: &serde_json::Value,
        origin: &Origin,
        shape: Shape,
        mut answers: Continuation,
    ) -> Result<CallToolResponse, ErrorData> {
        let failed = |message: String| {
            let message = sanitize(&message);
            self.inner.calls_failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(upstream = %tool.upstream, tool = %tool.name, message = ?message, "upstream call failed");
            CallToolResponse::Complete(shape.fit(error_result(
                ToolErrorCode::UpstreamFailed,
                format!("upstream {} could not run {}: {message}", tool.upstream, tool.name),
                serde_json::json!({"upstream": tool.upstream, "message": message}),
            )))
        };
        let cancelled_call = || CallToolResponse::Complete(shape.fit(cancelled()));
        let link = tokio::select! {
            link = self.link(&tool.upstream, &origin.downstream) => match link {
                Ok(link) => link,
                Err(e) => return Ok(failed(e)),
            },
            _ = origin.ct.cancelled() => return Ok(cancelled_call()),
        };
        let mut rounds = input_required::Rounds::default();
        loop {
            let mut params = CallToolRequestParams::new(tool.name.clone());
            if let Some(args) = arguments.as_object() {
                params = params.with_arguments(args.clone());
            }
            params.input_responses = answers.input_responses.take();
            params.request_state = answers.request_state.take();
            let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
            let in_flight = link.relay.track(origin);
            in_flight.mark(&mut request);
            let handle = match link.peer.send_request_with_option(request, request_options(&link, origin)).await {
                Ok(handle) => handle,
                Err(e) => return Ok(failed(link.why(&e))),
            };
            let asked =
                match relay::await_or_cancel(handle, &origin.ct, "cancelled by the agent", Some(link.call_timeout))
                    .await
                {
                    // `resultType` is added where agents are answered (results.rs).
                    Ok(ServerResult::CallToolResult(result)) => return Ok(CallToolResponse::Complete(result)),
                    Ok(ServerResult::InputRequiredResult(asked)) => asked,
                    // Only for an agent that takes tasks: the caller gives it Gatehouse's id.
                    Ok(ServerResult::CreateTaskResult(created)) if origin.capabilities.supports_tasks() => {
                        return Ok(match super::task_ids::checked(created) {
                            Ok(created) => CallToolResponse::Task(created),
                            Err(why) => failed(why),
                        });
                    }
                    Ok(_) => return Ok(failed("the upstream answered tools/call with something else".into())),
                    Err(rmcp::service::ServiceError::McpError(e)) => return Err(e),
                    Err(rmcp::service::ServiceError::Cancelled { .. }) => return Ok(cancelled_call()),
                    Err(rmcp::service::ServiceError::Timeout { timeout }) => {
                        return Ok(failed(format!(
                            "no answer within call_timeout ({}); cancelled at the upstream",
                            humantime::format_duration(timeout)
                        )));
                    }
                    Err(e) => return Ok(failed(link.why(&e))),
                };
            drop(in_flight);
            match self.input_round(&link, origin, asked, &mut rounds).await {
                Ok(Round::ToAgent(asked)) => return Ok(CallToolResponse::InputRequired(asked)),
                Ok(Round::Answered(next)) => answers = next,
                Err(why) => return Ok(failed(why)),
            }
        }
    }

    /// `prompts/get` for an exposed prompt name, for the agent request
    /// `origin` (`answers`: see [`Upstreams::call`]).
    pub async fn get_prompt(
        &self,
        exposed: &str,
        arguments: Option<rmcp::model::JsonObject>,
        origin: &Origin,
        answers: Continuation,
    ) -> Result<GetPromptResponse, ErrorData> {
        let (upstream, name) = self
            .prompt_owner(exposed)
            .ok_or_else(|| ErrorData::invalid_params(format!("Unknown prompt: {exposed}"), None))?;
        let link = self.link(&upstream, &origin.downstream).await.map_err(|e| upstream_error("prompts/get", e))?;
        let request = |answers: &mut Continuation| {
            let mut params = GetPromptRequestParams::new(name.clone());
            if let Some(arguments) = arguments.clone() {
                params = params.with_arguments(arguments);
            }
            params.input_responses = answers.input_responses.take();
            params.request_state = answers.request_state.take();
            ClientRequest::GetPromptRequest(GetPromptRequest::new(params))
        };
        let complete = |answer: ServerResult| match answer {
            ServerResult::GetPromptResult(result) => Some(GetPromptResponse::Complete(result)),
            _ => None,
        };
        let rounds = InputRounds { link: &link, origin, what: "prompts/get" };
        self.with_input_rounds(rounds, answers, request, complete, GetPromptResponse::InputRequired).await
    }

    /// `resources/read` of `uri` (normalised), at the upstream that serves
    /// it, for the agent request `origin` (`answers`: see [`Upstreams::call`]).
    pub async fn read_resource(
        &self,
        uri: &str,
        origin: &Origin,
        answers: Continuation,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let (upstream, spelling) = self
            .resource_route(uri)
            .ok_or_else(|| ErrorData::resource_not_found(format!("Resource not found: {uri}"), None))?;
        let link = self.link(&upstream, &origin.downstream).await.map_err(|e| upstream_error("resources/read", e))?;
        let request = |answers: &mut Continuation| {
            let mut params = ReadResourceRequestParams::new(spelling.clone());
            params.input_responses = answers.input_responses.take();
            params.request_state = answers.request_state.take();
            ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params))
        };
        let complete = |answer: ServerResult| match answer {
            ServerResult::ReadResourceResult(result) => Some(ReadResourceResponse::Complete(result)),
            _ => None,
        };
        let rounds = InputRounds { link: &link, origin, what: "resources/read" };
        self.with_input_rounds(rounds, answers, request, complete, ReadResourceResponse::InputRequired).await
    }

    /// Sends the request `request` makes of `answers` and, while the upstream
    /// answers with `input_required`, runs an input round: a 2026-07-28
    /// agent gets the upstream's question (`to_agent`), a 2025-11-25 agent's
    /// answers go back in the next request, up to
    /// [`input_required::MAX_ROUNDS`]. `complete` takes the upstream's final
    /// answer (`None`: not the kind of answer `what` has). Any failure is
    /// `what`'s error; `tools/call`, whose failures are tool results, has a
    /// loop of its own ([`Upstreams::call`]).
    async fn with_input_rounds<R>(
        &self,
        rounds: InputRounds<'_>,
        mut answers: Continuation,
        request: impl Fn(&mut Continuation) -> ClientRequest,
        complete: impl Fn(ServerResult) -> Option<R>,
        to_agent: impl FnOnce(InputRequiredResult) -> R,
    ) -> Result<R, ErrorData> {
        let InputRounds { link, origin, what } = rounds;
        let mut so_far = input_required::Rounds::default();
        loop {
            let asked = match send(link, what, request(&mut answers), origin).await? {
                ServerResult::InputRequiredResult(asked) => asked,
                answer => {
                    return complete(answer)
                        .ok_or_else(|| upstream_error(what, "the upstream answered with something else"));
                }
            };
            match self.input_round(link, origin, asked, &mut so_far).await {
                Ok(Round::ToAgent(asked)) => return Ok(to_agent(asked)),
                Ok(Round::Answered(next)) => answers = next,
                Err(why) => return Err(upstream_error(what, why)),
            }
        }
    }

    /// `completion/complete` for a prompt argument or a resource template.
    pub async fn complete(
        &self,
        mut params: CompleteRequestParams,
        downstream: &Arc<Downstream>,
    ) -> Result<CompleteResult, ErrorData> {
        let upstream = match &mut params.r#ref {
            Reference::Prompt(prompt) => {
                let (upstream, name) = self
                    .prompt_owner(&prompt.name)
                    .ok_or_else(|| ErrorData::invalid_params(format!("Unknown prompt: {}", prompt.name), None))?;
                prompt.name = name;
                upstream
            }
            Reference::Resource(resource) => self
                .resource_owner(&resource.uri)
                .ok_or_else(|| ErrorData::invalid_params(format!("Unknown resource: {}", resource.uri), None))?,
            _ => return Err(ErrorData::invalid_params("unknown completion reference", None)),
        };
        let link = self.link(&upstream, downstream).await.map_err(|e| upstream_error("completion/complete", e))?;
        if link.peer.peer_info().is_none_or(|i| i.capabilities.completions.is_none()) {
            // Nothing to suggest: an empty completion rather than an error.
            return Ok(CompleteResult::default());
        }
        within(&link, "completion/complete", link.peer.complete(params)).await
    }

    /// `resources/subscribe`: remembered for the agent, passed to the upstream
    /// that serves `uri` (on the agent's own session, or the shared one).
    pub async fn subscribe(&self, uri: &str, downstream: &Arc<Downstream>) -> Result<(), ErrorData> {
        if !downstream.stateful() {
            // Updates are sent to a session; a stateless request has none.
            return Err(ErrorData::invalid_request("resources/subscribe needs an MCP session", None));
        }
        let (upstream, spelling) = self
            .resource_route(uri)
            .ok_or_else(|| ErrorData::resource_not_found(format!("Resource not found: {uri}"), None))?;
        let link = self.link(&upstream, downstream).await.map_err(|e| upstream_error("resources/subscribe", e))?;
        let _serial = self.inner.subscribing.lock().await;
        downstream.subscribe(uri);
        let subscribed = if link.shared() && super::link::is_modern(&link.peer) {
            // 2026-07-28 has no resources/subscribe: Gatehouse's listen carries it.
            self.watch_resource(&upstream, &link, &spelling).await.map_err(ErrorData::from)
        } else {
            within(&link, "resources/subscribe", link.peer.subscribe(SubscribeRequestParams::new(spelling))).await
        };
        if subscribed.is_err() {
            downstream.unsubscribe(uri);
        }
        subscribed
    }

    /// `resources/unsubscribe`; a shared connection stays subscribed while
    /// another agent still is.
    pub async fn unsubscribe(&self, uri: &str, downstream: &Arc<Downstream>) -> Result<(), ErrorData> {
        let Some((upstream, spelling)) = self.resource_route(uri) else {
            downstream.unsubscribe(uri);
            return Ok(());
        };
        let link = self.link(&upstream, downstream).await.map_err(|e| upstream_error("resources/unsubscribe", e))?;
        let _serial = self.inner.subscribing.lock().await;
        downstream.unsubscribe(uri);
        if link.shared() && super::link::is_modern(&link.peer) {
            self.rewatch(&link);
            return Ok(());
        }
        if link.shared() && (self.downstreams().iter().any(|d| d.subscribed(uri)) || self.inner.listeners.wants(uri)) {
            return Ok(());
        }
        within(&link, "resources/unsubscribe", link.peer.unsubscribe(UnsubscribeRequestParams::new(spelling))).await
    }

    /// `logging/setLevel`: kept for the agent (messages from shared
    /// connections are filtered by it) and passed to its own upstream sessions.
    pub async fn set_level(&self, level: LoggingLevel, downstream: &Arc<Downstream>) {
        downstream.set_level(level);
        for cell in self.link_cells(downstream) {
            let link = cell.lock().await.clone();
            if let Some(link) = link
                && supports_logging(&link.peer)
            {
                let _ = within(&link, "logging/setLevel", link.peer.set_level(SetLevelRequestParams::new(level))).await;
            }
        }
    }

    /// The agent's roots changed: its own upstream sessions hear it (and ask
    /// again). A shared connection does not: whose roots would it ask for?
    pub async fn roots_changed(&self, downstream: &Arc<Downstream>) {
        for cell in self.link_cells(downstream) {
            let link = cell.lock().await.clone();
            if let Some(link) = link {
                let _ = tokio::time::timeout(link.call_timeout, link.peer.notify_roots_list_changed()).await;
            }
        }
    }

    /// Subscribes `peer` (a new connection to upstream `name`) to those of
    /// `uris` that `name` serves, each within `timeout`.
    pub(super) async fn resubscribe(&self, name: &str, peer: &Peer<RoleClient>, uris: Vec<String>, timeout: Duration) {
        for uri in uris {
            if let Some((owner, spelling)) = self.resource_route(&uri)
                && owner == name
            {
                let _ = tokio::time::timeout(timeout, peer.subscribe(SubscribeRequestParams::new(spelling))).await;
            }
        }
    }
}
