//! The exposed tools as the console shows them: Gatehouse's own and every
//! upstream's, with what their servers say of them; the upstream tools held
//! back because their definitions changed (or they are new at an upstream
//! whose tools are pinned), and an admin's decision on them.

use gatehouse_core::changes::Change;
use gatehouse_core::model::{ToolChange, ToolInfo};
use rmcp::model::Tool;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::McpState;
use super::upstream::merged::ReviewError;

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

/// How long start-up waits for the upstreams' first listings before it
/// checks the rules against the tools there are.
pub const UNMATCHED_CHECK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Logs a warning for each rule whose pattern matches no exposed tool (for
/// example one written with an upstream's own tool name, without its
/// prefix): once every enabled upstream has been listed or has failed to
/// start, or after `wait` at most. The policies page marks the same rules.
pub async fn warn_unmatched_rules(state: McpState, wait: std::time::Duration, shutdown: CancellationToken) {
    use super::upstream::supervision::Health;
    let deadline = tokio::time::Instant::now() + wait;
    while state.upstreams.status().iter().any(|s| s.health == Health::Down) && tokio::time::Instant::now() < deadline {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
            _ = shutdown.cancelled() => return,
        }
    }
    let rules = match state.core.policy.current().await {
        Ok(rules) => rules,
        Err(e) => return tracing::warn!(error = %e, "cannot read the policy rules to check them against the tools"),
    };
    let tools = gatehouse_app::server_fns::ToolCatalog::exposed_tools(&state);
    for rule in gatehouse_core::policy::unmatched(&rules, tools.iter().map(|t| t.name.as_str())) {
        tracing::warn!(
            pattern = %rule.pattern,
            action = rule.action.as_str(),
            source = rule.source.as_str(),
            "policy rule matches no exposed tool right now; upstream tools are named with their upstream's prefix \
             (e.g. files__read_file), so a rule with a bare tool name does nothing"
        );
    }
    // An upstream's annotations decide nothing until an admin trusts them.
    for status in state.upstreams.status() {
        let name = status.name.clone();
        match state.core.run(move |core| core.policy.trust(&name)).await {
            Ok(Ok(trust)) if !trust.trusted() => tracing::info!(
                upstream = %status.name,
                "the upstream's tool annotations are not trusted: its tools ask unless a rule allows them \
                 (trust_annotations = true in its [[upstream]], or the upstreams page)"
            ),
            Ok(Ok(_)) => {}
            Ok(Err(e)) | Err(e) => tracing::warn!(error = %e, "cannot read an upstream's trust"),
        }
    }
    let credentials = match state.core.run(|core| core.credentials.list()).await {
        Ok(Ok(credentials)) => credentials,
        Ok(Err(e)) | Err(e) => {
            return tracing::warn!(error = %e, "cannot read the credentials to check the rules' agent names");
        }
    };
    let agents: Vec<_> = credentials
        .into_iter()
        .filter(|c| c.status == gatehouse_core::model::CredentialStatus::Active)
        .map(|c| (c.agent, c.owner, c.by_admin))
        .collect();
    for (rule, name, owners) in gatehouse_core::policy::shared_bare_names(&rules, &agents) {
        tracing::warn!(
            rule = %rule.name,
            agent = name,
            owners = %owners.join(", "),
            "policy rule names an agent without its owner, and agents of several owners have that name; \
             write owner/agent (e.g. alice/billing-bot) to name one"
        );
    }
}
