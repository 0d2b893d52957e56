//! The exposed tools as the console shows them: Gatehouse's own and every
//! upstream's, with what their servers say of them; the upstream tools held
//! back because their definitions changed (or they are new at an upstream
//! whose tools are pinned), and an admin's decision on them.

use gatehouse_core::changes::Change;
use gatehouse_core::model::{ToolChange, ToolInfo};
use rmcp::model::Tool;
use serde_json::Value;

use super::McpState;
use super::upstream::catalogue::ReviewError;

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

    fn held_tools(&self) -> Vec<ToolChange> {
        self.upstreams
            .held()
            .into_iter()
            .map(|h| {
                let pin = self.core.pins.get(&h.upstream, &h.name).ok().flatten();
                let rejected = pin
                    .as_ref()
                    .and_then(|p| p.rejected.clone())
                    .filter(|(digest, _, _)| *digest == h.digest)
                    .map(|(_, by, at)| (by, at));
                ToolChange {
                    name: h.tool.name.to_string(),
                    upstream: h.upstream,
                    tool: h.name,
                    pinned: pin.and_then(|p| p.view),
                    is_new: h.is_new,
                    offered: h.definition,
                    offered_digest: h.digest,
                    rejected,
                }
            })
            .collect()
    }

    fn review_change(
        &self,
        upstream: &str,
        tool: &str,
        digest: &str,
        accept: bool,
        actor: &str,
    ) -> Result<(), (u16, String)> {
        let held = self.upstreams.review(upstream, tool, digest, accept, actor).map_err(|e| {
            let status = match e {
                ReviewError::NotHeld(_) => 404,
                ReviewError::Stale(_) => 409,
                ReviewError::Store(_) => 500,
            };
            (status, e.to_string())
        })?;
        let action = if accept { "accept" } else { "reject" };
        let detail = format!("{upstream}/{tool} definition {digest}");
        let change = Change { actor, subject: "tool", target: &held.tool.name, action, detail: Some(&detail) };
        self.core.changes.record(change).map_err(|e| {
            tracing::error!(error = %e, "recording a tool review in the change log failed");
            (500, e.to_string())
        })
    }
}
