//! The MCP server handler: one instance per session (or per stateless
//! 2026-07-28 request), serving Gatehouse's tools to the authenticated agent.

// `logging/setLevel` is deprecated by SEP-2577 but still part of 2025-11-25,
// which clients (and the conformance suite) use.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};

use gatehouse_core::approvals::ApprovalStore;
use gatehouse_core::credentials::Credential;
use gatehouse_core::grants::GrantStore;
use gatehouse_core::live::{LiveHub, McpSessionInfo};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams, CompleteResult, ErrorData,
    GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig, SetLevelRequestParams,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{RoleServer, ServerHandler};

use super::gate::Mode;
use super::mcp_sessions::McpSessionBindings;
use super::results::Served;
use super::tools::{self, Caller};
use super::{McpState, gate, paging, subjects};
use crate::mcp::upstream::input_required as upstream_input;
use crate::mcp::upstream::listeners::{ListenPermit, MAX_LISTEN_RESOURCES};
use crate::mcp::upstream::listing::Listed;
use crate::mcp::upstream::mcp_session::{Downstream, Origin};
use crate::mcp::upstream::tasks::{self as upstream_tasks, Owner as TaskOwner};
use gatehouse_core::policy::Subject;
use rmcp::model::Reference;

/// Removes a session from the live registry when its handler goes away
/// (DELETE, idle timeout, shutdown), whichever comes first.
struct SessionGuard {
    live: LiveHub,
    approvals: ApprovalStore,
    grants: GrantStore,
    bindings: Arc<McpSessionBindings>,
    session_id: Mutex<Option<String>>,
}

impl SessionGuard {
    fn learn(&self, sid: &str) {
        let mut known = self.session_id.lock().unwrap_or_else(|p| p.into_inner());
        if known.is_none() {
            *known = Some(sid.to_string());
        }
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if let Some(sid) = self.session_id.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let cancelled = self.approvals.forget_session(&sid);
            // Grants made "for this MCP session" end with it.
            let grants_ended = self.grants.end_session(&sid);
            tracing::info!(session = %sid, cancelled, grants_ended, "MCP session closed");
            self.live.session_closed(&sid);
            self.bindings.unbind(&sid);
        }
    }
}

/// Longest `clientInfo` string kept (they are shown on pages and logged).
const CLIENT_INFO_MAX: usize = 128;

fn clip(text: &str) -> String {
    text.chars().take(CLIENT_INFO_MAX).collect()
}

/// Gatehouse's MCP server for one session.
#[derive(Clone)]
pub struct GatehouseMcp {
    state: McpState,
    guard: Arc<SessionGuard>,
    /// This session as upstreams see it (its peer, log level, subscriptions,
    /// its own upstream sessions).
    downstream: Arc<Downstream>,
}

fn request_parts(extensions: &rmcp::model::Extensions) -> Option<&http::request::Parts> {
    extensions.get::<http::request::Parts>()
}

fn caller(extensions: &rmcp::model::Extensions) -> Result<(&Credential, Option<&str>), ErrorData> {
    let parts = request_parts(extensions).ok_or_else(|| ErrorData::internal_error("no HTTP request context", None))?;
    let credential = parts
        .extensions
        .get::<Credential>()
        .ok_or_else(|| ErrorData::internal_error("request was not authenticated", None))?;
    let session = parts.headers.get("mcp-session-id").and_then(|v| v.to_str().ok());
    Ok((credential, session))
}

/// Whether `context` is a request on 2026-07-28 or later.
fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context.protocol_version().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// Runs an upstream request for the agent's request `context` until it ends
/// or the agent cancels (dropping it tells rmcp's client to cancel upstream).
async fn unless_cancelled<T>(
    context: &RequestContext<RoleServer>,
    work: impl Future<Output = Result<T, ErrorData>>,
) -> Result<T, ErrorData> {
    tokio::select! {
        result = work => result,
        _ = context.ct.cancelled() => Err(ErrorData::internal_error("cancelled by the client", None)),
    }
}

impl GatehouseMcp {
    /// A handler for a new session.
    pub fn new(state: McpState) -> Self {
        let guard = Arc::new(SessionGuard {
            live: state.core.live.clone(),
            approvals: state.core.approvals.clone(),
            grants: state.core.grants.clone(),
            bindings: state.mcp_sessions.clone(),
            session_id: Mutex::new(None),
        });
        Self { state, guard, downstream: Downstream::new() }
    }

    /// Binds this session's peer and id (known from its first request).
    fn bind(&self, context: &RequestContext<RoleServer>) -> &Arc<Downstream> {
        let session = request_parts(&context.extensions)
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok());
        if let Some(sid) = session {
            self.guard.learn(sid);
        }
        self.downstream.bind(&context.peer, session);
        if is_modern(context) {
            // Its own downstream: a 2026-07-28 request is a handler of its own.
            self.downstream.log_per_request(context.meta.log_level());
        }
        &self.downstream
    }
}

impl ServerHandler for GatehouseMcp {
    fn get_info(&self) -> ServerConfig {
        // Tools come and go with policy rules (a block hides one) and upstreams.
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_logging()
            .enable_tasks()
            .build();
        if self.state.upstreams.any() {
            // Prompts, resources and completions come only from upstreams,
            // whose lists change as they come and go.
            capabilities = ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_completions()
                .enable_tasks()
                .build();
        }
        ServerConfig::new(capabilities)
            .with_server_info(
                Implementation::new("gatehouse", env!("CARGO_PKG_VERSION"))
                    .with_title("Gatehouse")
                    .with_description("An MCP gateway that asks a human before agents act"),
            )
            .with_instructions(
                "Gatehouse fronts tools that may need a person's approval. Call gatehouse_status to see \
                 which agent and credential you are.",
            )
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let Some(parts) = request_parts(&context.extensions) else { return };
        let (Some(credential), Some(sid)) =
            (parts.extensions.get::<Credential>(), parts.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()))
        else {
            return;
        };
        let (client_name, client_version, protocol_version) = match context.peer.peer_info() {
            Some(info) => {
                (clip(&info.client_info.name), clip(&info.client_info.version), info.protocol_version.to_string())
            }
            None => (String::new(), String::new(), String::new()),
        };
        self.guard.learn(sid);
        self.downstream.bind(&context.peer, Some(sid));
        // Only sessions hear list changes and resource updates: a stateless
        // request (a handler of its own each time) is not registered.
        self.state.upstreams.register(&self.downstream);
        tracing::info!(session = %sid, agent = ?credential.agent, client = ?client_name, %protocol_version, "MCP session opened");
        self.state.core.live.session_opened(McpSessionInfo {
            session_id: sid.to_string(),
            credential_id: credential.id.clone(),
            agent: credential.agent.clone(),
            thread: credential.thread.clone(),
            owner: credential.owner.clone(),
            owner_id: credential.owner_id,
            client_name,
            client_version,
            protocol_version,
            opened_at_ms: self.state.core.clock.now_ms(),
        });
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        self.state.upstreams.roots_changed(&self.downstream).await;
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let downstream = self.bind(&context);
        self.state.upstreams.set_level(request.level, downstream).await;
        Ok(())
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let lens = subjects::Lens::of(&self.state, caller(&context.extensions).ok().map(|(c, _)| c)).await;
        let mut prompts = self.state.upstreams.prompts();
        prompts.retain(|p| lens.shows(Subject::Prompt(&p.name)));
        let (items, next) = paging::page(prompts, request.as_ref(), self.state.config.load().list_page_size)?;
        let mut result = ListPromptsResult::with_all_items(items);
        result.next_cursor = next;
        result.ttl_ms = Some(self.state.upstreams.list_ttl(Listed::Prompts));
        Ok(result.served())
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let (credential, _) = caller(&context.extensions)?;
        let arguments = request.arguments.clone().map(serde_json::Value::Object).unwrap_or_default();
        subjects::check(&self.state, credential, "prompts/get", Subject::Prompt(&request.name), &arguments).await?;
        let origin = Origin::of(self.bind(&context), &context);
        unless_cancelled(&context, upstream_input::get_prompt(&self.state, credential, request, &origin))
            .await
            .map(Served::served)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let lens = subjects::Lens::of(&self.state, caller(&context.extensions).ok().map(|(c, _)| c)).await;
        let mut resources = self.state.upstreams.resources();
        resources.retain(|r| lens.shows(Subject::Resource(&r.uri)));
        let (items, next) = paging::page(resources, request.as_ref(), self.state.config.load().list_page_size)?;
        let mut result = ListResourcesResult::with_all_items(items);
        result.next_cursor = next;
        result.ttl_ms = Some(self.state.upstreams.list_ttl(Listed::Resources));
        Ok(result.served())
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let lens = subjects::Lens::of(&self.state, caller(&context.extensions).ok().map(|(c, _)| c)).await;
        let mut templates = self.state.upstreams.resource_templates();
        templates.retain(|t| lens.shows(Subject::Resource(&t.uri_template)));
        let (items, next) = paging::page(templates, request.as_ref(), self.state.config.load().list_page_size)?;
        let mut result = ListResourceTemplatesResult::with_all_items(items);
        result.next_cursor = next;
        result.ttl_ms = Some(self.state.upstreams.list_ttl(Listed::Templates));
        Ok(result.served())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let (credential, _) = caller(&context.extensions)?;
        let uri = subjects::resource_uri("resources/read", &request.uri, credential)?;
        subjects::check(&self.state, credential, "resources/read", Subject::Resource(&uri), &serde_json::Value::Null)
            .await?;
        let origin = Origin::of(self.bind(&context), &context);
        unless_cancelled(&context, upstream_input::read_resource(&self.state, credential, &uri, request, &origin))
            .await
            .map(Served::served)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (credential, _) = caller(&context.extensions)?;
        let uri = subjects::resource_uri("resources/subscribe", &request.uri, credential)?;
        let subject = Subject::Resource(&uri);
        subjects::check(&self.state, credential, "resources/subscribe", subject, &serde_json::Value::Null).await?;
        let downstream = self.bind(&context);
        unless_cancelled(&context, self.state.upstreams.subscribe(&uri, downstream)).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (credential, _) = caller(&context.extensions)?;
        let uri = subjects::resource_uri("resources/unsubscribe", &request.uri, credential)?;
        let downstream = self.bind(&context);
        unless_cancelled(&context, self.state.upstreams.unsubscribe(&uri, downstream)).await
    }

    /// What a `subscriptions/listen` (2026-07-28) may hear: what it asked
    /// for of what Gatehouse offers (rmcp intersects), less the resources no
    /// upstream serves or a rule refuses (left out of the acknowledgement;
    /// [`Self::listen`] checks and audits the rest as `resources/subscribe`).
    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let mut accepted = requested.supported_by(&self.get_info().capabilities);
        if let Some(uris) = &mut accepted.resource_subscriptions
            && uris.len() <= MAX_LISTEN_RESOURCES
        {
            // Too many are left as asked, for `listen` to refuse plainly.
            // rmcp asks this synchronously: the rules are read once, here
            // (unreadable, none is accepted: fail closed).
            let rules = self.state.core.policy.rules();
            uris.retain(|uri| {
                gatehouse_core::normalise::resource_uri(uri).is_ok_and(|normal| {
                    self.state.upstreams.serves_resource(&normal)
                        && rules.as_ref().is_ok_and(|rules| subjects::allows(rules, Subject::Resource(&normal)))
                })
            });
        }
        Some(accepted)
    }

    /// One listen stream: registered with the upstreams (list changes,
    /// policy and pin changes, its resources' updates reach it) until the
    /// agent closes it or Gatehouse shuts down. Counted per credential from
    /// authentication on (`auth`), so the limit is refused before this.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let request = context.request_context();
        let (credential, _) = caller(&request.extensions)?;
        let permit = request_parts(&request.extensions)
            .and_then(|p| p.extensions.get::<Arc<ListenPermit>>())
            .cloned()
            .ok_or_else(|| {
                ErrorData::internal_error("subscriptions/listen was not counted (no Mcp-Method header)", None)
            })?;
        let asked = context.accepted().resource_subscriptions.clone().unwrap_or_default();
        if asked.len() > MAX_LISTEN_RESOURCES {
            return Err(ErrorData::invalid_params(
                format!("subscriptions/listen takes at most {MAX_LISTEN_RESOURCES} resource subscriptions"),
                None,
            ));
        }
        // As resources/subscribe: the normal spelling, decided and audited.
        let mut resources = Vec::with_capacity(asked.len());
        for spelled in asked {
            let uri = subjects::resource_uri("resources/subscribe", &spelled, credential)?;
            subjects::check(
                &self.state,
                credential,
                "resources/subscribe",
                Subject::Resource(&uri),
                &serde_json::Value::Null,
            )
            .await?;
            resources.push((uri, spelled));
        }
        let listening = self.state.upstreams.listen(&permit, context.sink().clone(), resources);
        let _listening = unless_cancelled(request, listening).await?;
        tokio::select! {
            _ = context.cancelled() => {}
            _ = self.state.shutdown.cancelled() => {}
            // Its credential was revoked: the stream ends (with its final result).
            _ = permit.revoked() => {}
        }
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let (credential, _) = caller(&context.extensions)?;
        let subject = match &request.r#ref {
            Reference::Prompt(prompt) => Subject::Prompt(&prompt.name),
            Reference::Resource(resource) => Subject::Resource(&resource.uri),
            _ => return Err(ErrorData::invalid_params("unknown completion reference", None)),
        };
        let argument = serde_json::to_value(&request.argument).unwrap_or_default();
        subjects::check(&self.state, credential, "completion/complete", subject, &argument).await?;
        let downstream = self.bind(&context);
        Ok(unless_cancelled(&context, self.state.upstreams.complete(request, downstream)).await?.served())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let credential = caller(&context.extensions).ok().map(|(credential, _)| credential);
        let listed = gate::list(&self.state, credential).await;
        let (items, next) = paging::page(listed, request.as_ref(), self.state.config.load().list_page_size)?;
        let mut result = ListToolsResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result.served())
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        tools::find(name).cloned().or_else(|| self.state.upstreams.find(name).map(|u| u.tool))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (credential, session) = caller(&context.extensions)?;
        let origin = Origin::of(self.bind(&context), &context);
        let caller = Caller { credential: credential.clone(), session_id: session.map(String::from), origin };
        let call = gate::Call {
            name: &request.name,
            arguments: request.arguments.clone().map(serde_json::Value::Object).unwrap_or(serde_json::Value::Null),
            request_state: request.request_state.as_deref(),
            input_responses: request.input_responses.clone(),
            mode: Mode::of(request_parts(&context.extensions)),
        };
        let result = gate::call(&self.state, &caller, call, &context).await.map(Served::served);
        if let Err(e) = &result {
            tracing::warn!(tool = ?request.name, agent = ?caller.credential.agent, error = ?e.message, "tools/call refused");
        }
        result
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let (caller, id) = (self.task_caller(&context)?, &request.task_id);
        match upstream_tasks::owner(id) {
            TaskOwner::Gate => gate::task::get(&self.state, &caller, id).await,
            TaskOwner::Upstream => upstream_tasks::get(&self.state, &caller, id).await,
        }
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (caller, id, responses) = (self.task_caller(&context)?, &request.task_id, &request.input_responses);
        match upstream_tasks::owner(id) {
            TaskOwner::Gate => gate::task::update(&self.state, &caller, id, responses).await,
            TaskOwner::Upstream => upstream_tasks::update(&self.state, &caller, id, responses).await,
        }
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (caller, id) = (self.task_caller(&context)?, &request.task_id);
        match upstream_tasks::owner(id) {
            TaskOwner::Gate => gate::task::cancel(&self.state, &caller, id).await,
            TaskOwner::Upstream => upstream_tasks::cancel(&self.state, &caller, id).await,
        }
    }
}

impl GatehouseMcp {
    /// The caller of a `tasks/*` request (rmcp has checked that the client
    /// declared tasks).
    fn task_caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        let (credential, session) = caller(&context.extensions)?;
        let origin = Origin::of(self.bind(context), context);
        Ok(Caller { credential: credential.clone(), session_id: session.map(String::from), origin })
    }
}
