//! The MCP server handler: one instance per session (or per stateless
//! 2026-07-28 request), serving Gatehouse's tools to the authenticated agent.

// `logging/setLevel` is deprecated by SEP-2577 but still part of 2025-11-25,
// which clients (and the conformance suite) use.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};

use gatehouse_core::approvals::ApprovalStore;
use gatehouse_core::credentials::Credential;
use gatehouse_core::live::{LiveHub, McpSessionInfo};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, GetPromptRequestParams, GetPromptResponse, Implementation,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    SetLevelRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{RoleServer, ServerHandler};

use super::native::Mode;
use super::tools::{self, Caller};
use super::{McpState, gate};

/// Removes a session from the live registry when its handler goes away
/// (DELETE, idle timeout, shutdown), whichever comes first.
struct SessionGuard {
    live: LiveHub,
    approvals: ApprovalStore,
    session_id: Mutex<Option<String>>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if let Some(sid) = self.session_id.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let cancelled = self.approvals.forget_session(&sid);
            tracing::info!(session = %sid, cancelled, "MCP session closed");
            self.live.session_closed(&sid);
        }
    }
}

/// Gatehouse's MCP server for one session.
#[derive(Clone)]
pub struct GatehouseMcp {
    state: McpState,
    guard: Arc<SessionGuard>,
    log_level: Arc<Mutex<LoggingLevel>>,
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

impl GatehouseMcp {
    /// A handler for a new session.
    pub fn new(state: McpState) -> Self {
        let guard = Arc::new(SessionGuard {
            live: state.core.live.clone(),
            approvals: state.core.approvals.clone(),
            session_id: Mutex::new(None),
        });
        Self { state, guard, log_level: Arc::new(Mutex::new(LoggingLevel::Info)) }
    }
}

impl ServerHandler for GatehouseMcp {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder().enable_tools().enable_logging().build();
        if self.state.upstreams.any() {
            // Prompts and resources come only from upstreams.
            capabilities.prompts = Some(Default::default());
            capabilities.resources = Some(Default::default());
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
                (info.client_info.name.clone(), info.client_info.version.clone(), info.protocol_version.to_string())
            }
            None => (String::new(), String::new(), String::new()),
        };
        *self.guard.session_id.lock().unwrap_or_else(|p| p.into_inner()) = Some(sid.to_string());
        tracing::info!(session = %sid, agent = %credential.agent, client = %client_name, %protocol_version, "MCP session opened");
        self.state.core.live.session_opened(McpSessionInfo {
            session_id: sid.to_string(),
            credential_id: credential.id.clone(),
            agent: credential.agent.clone(),
            thread: credential.thread.clone(),
            owner: credential.owner.clone(),
            client_name,
            client_version,
            protocol_version,
            opened_at_ms: self.state.core.clock.now_ms(),
        });
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self.log_level.lock().unwrap_or_else(|p| p.into_inner()) = request.level;
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(self.state.upstreams.prompts()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        Ok(self.state.upstreams.get_prompt(&request.name, request.arguments).await?.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(self.state.upstreams.resources()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(self.state.upstreams.resource_templates()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Ok(self.state.upstreams.read_resource(&request.uri).await?.into())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(gate::list(&self.state)))
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
        let caller = Caller { credential: credential.clone(), session_id: session.map(String::from) };
        let call = gate::Call {
            name: &request.name,
            arguments: request.arguments.clone().map(serde_json::Value::Object).unwrap_or(serde_json::Value::Null),
            request_state: request.request_state.as_deref(),
            mode: Mode::of(request_parts(&context.extensions)),
        };
        let result = gate::call(&self.state, &caller, call, &context).await;
        if let Err(e) = &result {
            tracing::warn!(tool = %request.name, agent = %caller.credential.agent, error = %e.message, "tools/call refused");
        }
        result
    }
}
