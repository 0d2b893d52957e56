//! The exposed tools as the console shows them: Gatehouse's own and every
//! upstream's, with what their servers say of them.

use gatehouse_core::model::ToolInfo;
use rmcp::model::Tool;
use serde_json::Value;

use super::McpState;

/// One tool as the console shows it.
fn info(tool: &Tool, upstream: Option<&str>) -> ToolInfo {
    let a = tool.annotations.as_ref();
    ToolInfo {
        name: tool.name.to_string(),
        upstream: upstream.map(str::to_string),
        title: tool.title.clone(),
        description: tool.description.as_ref().map(|d| d.to_string()),
        input_schema: Value::Object(tool.input_schema.as_ref().clone()),
        read_only: a.and_then(|a| a.read_only_hint),
        destructive: a.and_then(|a| a.destructive_hint),
        idempotent: a.and_then(|a| a.idempotent_hint),
        open_world: a.and_then(|a| a.open_world_hint),
        changes_gate: super::tools::changes_gate(&tool.name),
    }
}

impl gatehouse_app::server_fns::ToolCatalog for McpState {
    fn exposed_tools(&self) -> Vec<ToolInfo> {
        let own = super::tools::all().iter().map(|t| info(t, None));
        let upstream = self.upstreams.tools().into_iter().map(|t| info(&t.tool, Some(&t.upstream)));
        own.chain(upstream).collect()
    }

    fn lists_changed(&self) {
        self.upstreams.announce_lists_changed();
    }
}
