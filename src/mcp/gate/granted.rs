//! Calls a person allowed in advance: a grant ([`gatehouse_core::grants`])
//! for this agent and tool lets a gated call run without a pause, audited
//! when it ends ([`super::record`]) with `grant:<id>` as what let it through.

use serde_json::Value;

use crate::mcp::McpState;
use crate::mcp::tools::Caller;

/// The grant that lets this call through, as the audit's actor
/// (`grant:<id>`); `None`: it waits
/// for a person as usual. The caller has checked that no rule makes the
/// call `human_only` (a grant never covers one, whenever it was made).
pub async fn lookup(state: &McpState, caller: &Caller, tool: &str, arguments: &Value) -> Option<String> {
    let grants = &state.core.grants;
    let credential = &caller.credential;
    if state.core.db.backend() == gatehouse_core::db::Backend::Postgres {
        // A grant made or revoked on another replica counts at once.
        match state.core.run(|core| core.grants.sync()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not re-read the grants; using the ones known here"),
            Err(e) => tracing::warn!(error = %e, "grant re-read did not finish"),
        }
    }
    let matched = grants.find(&credential.agent, credential.owner_id, tool, caller.session_id.as_deref(), arguments)?;
    let actor = gatehouse_core::model::Actor::Grant(matched.id.to_string()).to_string();
    if matched.flush_needed {
        // Use counts reach the database in batches, off the async threads.
        let core = state.core.clone();
        state.tasks.spawn(async move {
            match core.run(|core| core.grants.flush_uses()).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "could not write grant use counts"),
                Err(e) => tracing::error!(error = %e, "could not write grant use counts"),
            }
        });
    }
    tracing::info!(tool, agent = %credential.agent, grant = %matched.id, "call allowed by a grant");
    Some(actor)
}
