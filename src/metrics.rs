//! `/metrics`: all Prometheus output in one place, for an admin on the main
//! address or unauthenticated on its own `metrics_listen` address.

use std::sync::atomic::Ordering;

use axum::Router;
use axum::routing::get;

use crate::auth;
use crate::security;
use crate::state::AppState;

/// `GET /metrics` on the main address: for an admin (API token or browser
/// session) only, since it names upstreams and counts what agents do.
pub async fn admin_metrics(axum::extract::State(state): axum::extract::State<AppState>, _admin: auth::Admin) -> String {
    render(&state)
}

/// `/metrics` alone, without authentication, for the `metrics_listen` address.
pub fn metrics_router(state: AppState) -> Router {
    let policy = security::HeaderPolicy { https: state.https };
    Router::new()
        .route(
            "/metrics",
            get(|axum::extract::State(state): axum::extract::State<AppState>| async move { render(&state) }),
        )
        .with_state(state)
        .layer(security::GuardLayer::headers_only(policy))
}

/// The Prometheus text of `/metrics`.
pub fn render(state: &AppState) -> String {
    use std::fmt::Write;
    let auth = &state.mcp.metrics;
    let approvals = &state.mcp.core.approvals;
    let m = approvals.metrics();
    let mut out = String::new();
    let _ = write!(
        out,
        "# HELP gatehouse_credentials_rejected_total MCP requests refused for their credential.\n\
         # TYPE gatehouse_credentials_rejected_total counter\n\
         gatehouse_credentials_rejected_total{{reason=\"missing_bearer_token\"}} {}\n\
         gatehouse_credentials_rejected_total{{reason=\"unknown_or_expired_token\"}} {}\n\
         # HELP gatehouse_mcp_sessions Connected MCP sessions.\n\
         # TYPE gatehouse_mcp_sessions gauge\n\
         gatehouse_mcp_sessions {}\n\
         # HELP gatehouse_approvals_pending Executions waiting for a decision.\n\
         # TYPE gatehouse_approvals_pending gauge\n\
         gatehouse_approvals_pending {}\n\
         # HELP gatehouse_approval_store_entries Live entries in the approval store (pending, approved, running).\n\
         # TYPE gatehouse_approval_store_entries gauge\n\
         gatehouse_approval_store_entries {}\n\
         # HELP gatehouse_audit_entries Entries in the audit log at the last housekeeping sweep (bound: audit_max_entries).\n\
         # TYPE gatehouse_audit_entries gauge\n\
         gatehouse_audit_entries {}\n\
         # HELP gatehouse_approval_decisions_total Decisions on paused executions.\n\
         # TYPE gatehouse_approval_decisions_total counter\n",
        auth.missing.load(Ordering::Relaxed),
        auth.unknown.load(Ordering::Relaxed),
        state.mcp.core.live.sessions().len(),
        approvals.pending().len(),
        approvals.len(),
        m.audit_entries.load(Ordering::Relaxed),
    );
    for (name, counter) in
        [("accept", &m.accepted), ("decline", &m.declined), ("cancel", &m.cancelled), ("expire", &m.expired)]
    {
        let _ = writeln!(
            out,
            "gatehouse_approval_decisions_total{{decision=\"{name}\"}} {}",
            counter.load(Ordering::Relaxed)
        );
    }
    let closed = state.mcp.mcp_sessions.metrics();
    out.push_str(
        "# HELP gatehouse_mcp_sessions_closed_total MCP sessions Gatehouse closed on its own: the least recently \
         used session not in use of a credential opening one more at its cap (evicted), or a session with no \
         request or stream for session_idle_timeout (idle).\n\
         # TYPE gatehouse_mcp_sessions_closed_total counter\n",
    );
    for (reason, counter) in [("evicted", &closed.evicted), ("idle", &closed.idle)] {
        let _ = writeln!(
            out,
            "gatehouse_mcp_sessions_closed_total{{reason=\"{reason}\"}} {}",
            counter.load(Ordering::Relaxed)
        );
    }
    out.push_str("# HELP gatehouse_approval_wait_seconds Time from pause to decision.\n# TYPE gatehouse_approval_wait_seconds histogram\n");
    let mut cumulative = 0;
    for (i, bound) in gatehouse_core::approvals::WAIT_BUCKETS.iter().enumerate() {
        cumulative += m.wait_buckets[i].load(Ordering::Relaxed);
        let _ = writeln!(out, "gatehouse_approval_wait_seconds_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    cumulative += m.wait_buckets[gatehouse_core::approvals::WAIT_BUCKETS.len()].load(Ordering::Relaxed);
    let _ = writeln!(out, "gatehouse_approval_wait_seconds_bucket{{le=\"+Inf\"}} {cumulative}");
    let _ =
        writeln!(out, "gatehouse_approval_wait_seconds_sum {}", m.wait_sum_ms.load(Ordering::Relaxed) as f64 / 1000.0);
    let _ = writeln!(out, "gatehouse_approval_wait_seconds_count {cumulative}");
    out.push_str("# HELP gatehouse_upstream_up Whether an upstream MCP server is connected (1) or not (0).\n# TYPE gatehouse_upstream_up gauge\n");
    let upstreams = state.mcp.upstreams.status();
    for u in &upstreams {
        let _ = writeln!(
            out,
            "gatehouse_upstream_up{{upstream=\"{}\",health=\"{}\"}} {}",
            u.name,
            u.health.as_str(),
            u8::from(u.health == crate::mcp::upstream::supervision::Health::Up)
        );
    }
    out.push_str("# HELP gatehouse_upstream_tools Tools an upstream exposes.\n# TYPE gatehouse_upstream_tools gauge\n");
    for u in &upstreams {
        let _ = writeln!(out, "gatehouse_upstream_tools{{upstream=\"{}\"}} {}", u.name, u.tools);
    }
    out.push_str("# HELP gatehouse_upstream_restarts_total Times an upstream was (re)started after ending.\n# TYPE gatehouse_upstream_restarts_total counter\n");
    for u in &upstreams {
        let _ = writeln!(out, "gatehouse_upstream_restarts_total{{upstream=\"{}\"}} {}", u.name, u.restarts);
    }
    out.push_str("# HELP gatehouse_upstream_protocol The protocol revision an upstream's connection negotiated.\n# TYPE gatehouse_upstream_protocol gauge\n");
    for u in &upstreams {
        if let Some(version) = &u.protocol {
            let _ = writeln!(out, "gatehouse_upstream_protocol{{upstream=\"{}\",version=\"{version}\"}} 1", u.name);
        }
    }
    state.notify.render_metrics(&mut out);
    out
}
