//! Benchmark reference: a server built only from rmcp, with a tool equivalent
//! to `gatehouse_status` (no auth, no database). Same rmcp version, same
//! Streamable HTTP settings, TCP_NODELAY on.
//!
//! `cargo run --release --example bench_rmcp_reference -- 127.0.0.1:0`

use axum::serve::ListenerExt;
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{CallToolResult, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Empty {}

#[derive(Clone)]
struct Reference {
    #[allow(dead_code)] // read by the #[tool_handler] expansion
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Reference {
    #[tool(description = "Report version, agent and liveness (fixed values)", annotations(read_only_hint = true))]
    fn gatehouse_status(&self, Parameters(Empty {}): Parameters<Empty>) -> CallToolResult {
        CallToolResult::structured(serde_json::json!({
            "version": "0.1.0", "agent": "bench", "thread": null, "owner": null,
            "credentialId": "cred_00000000000000000000000000000000", "sessionId": null,
            "lastSignOfLife": "2026-11-29T10:00:00Z", "lapsesAt": "2026-11-30T10:00:00Z",
            "livenessWindowSeconds": 86400
        }))
    }
}

#[tool_handler]
impl ServerHandler for Reference {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".into());
    let service = StreamableHttpService::new(
        || Ok(Reference { tool_router: Reference::tool_router() }),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let router = axum::Router::new().nest_service("/mcp", service);
    axum::serve(
        listener.tap_io(|t| {
            let _ = t.set_nodelay(true);
        }),
        router,
    )
    .await?;
    Ok(())
}
