//! The home page: what needs a person now, what happened lately, and what
//! is left to set up.

#[cfg(feature = "ssr")]
use super::context as ctx;
use gatehouse_model::{Activity, AuditEntry, CredentialView, McpSessionInfo, UpstreamInfo};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// The first-run steps, each done or not (the checklist goes once all are).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Setup {
    /// A credential was minted (any, even one since lapsed).
    pub credential: bool,
    /// An agent connected with one: a session is open or one signed of life.
    pub connected: bool,
    /// An upstream MCP server is configured.
    pub upstream: bool,
    /// A rule exists (config or console).
    pub rule: bool,
}

impl Setup {
    /// Every step done.
    pub fn done(&self) -> bool {
        self.credential && self.connected && self.upstream && self.rule
    }
}

/// What the home page shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Overview {
    /// The signed-in user's name.
    pub username: String,
    /// Whether they are an admin (sees every agent).
    pub is_admin: bool,
    /// Server time when this was read (Unix ms), so relative times render the
    /// same on the server and after hydration.
    pub now_ms: i64,
    /// Calls waiting for the viewer now.
    pub pending: usize,
    /// When the longest-waiting of them paused (Unix ms).
    pub oldest_pending_ms: Option<i64>,
    /// The audit log's last days, as the viewer may see it.
    pub activity: Activity,
    /// Every configured upstream and its health.
    pub upstreams: Vec<UpstreamInfo>,
    /// Upstream tools held back for an admin's review.
    pub held: usize,
    /// Connected MCP sessions.
    pub sessions: Vec<McpSessionInfo>,
    /// Credentials, newest first (a session's last sign of life is its
    /// credential's).
    pub credentials: Vec<CredentialView>,
    /// The first-run steps.
    pub setup: Setup,
    /// The latest calls that failed within the activity's window, newest
    /// first (at most [`FAILURES_SHOWN`]), each saying where and why.
    pub failures: Vec<AuditEntry>,
}

/// How many failed calls the home page lists.
pub const FAILURES_SHOWN: usize = 5;

/// The signed-in user's home: admins see everyone's, others their own
/// agents' (sessions, credentials, pending calls and activity alike).
#[server(prefix = "/api/fn", endpoint = "overview")]
pub async fn get_overview() -> Result<Overview, ServerFnError> {
    let (user, core) = ctx::context()?;
    let inbox = core.approvals.inbox(&user).await;
    let catalog = ctx::tool_catalog()?;
    let held = catalog.held_tools().len();
    let upstreams: Vec<UpstreamInfo> =
        core.live.upstreams().into_iter().map(|u| UpstreamInfo { last_error: None, ..u }).collect();
    let visible = {
        let user = user.clone();
        move |owner_id: &Option<gatehouse_model::UserId>| gatehouse_core::approvals::may_decide(&user, *owner_id)
    };
    let sessions: Vec<McpSessionInfo> = core.live.sessions().into_iter().filter(|s| visible(&s.owner_id)).collect();
    let (activity, credentials, rule, failures) = ctx::blocking(move |user, core| {
        let scope = gatehouse_core::audit::HistoryScope::of(&user);
        let activity = core.approvals.audit().activity(&scope)?;
        let failed = gatehouse_model::HistoryFilter {
            outcome: gatehouse_model::State::Failed.as_str().into(),
            ..Default::default()
        };
        let since = activity.days.first().map_or(0, |d| d.day_ms);
        let failures: Vec<AuditEntry> = core
            .approvals
            .audit()
            .search(&failed, &scope, FAILURES_SHOWN)?
            .into_iter()
            .filter(|e| e.at_ms >= since)
            .collect();
        let credentials: Vec<CredentialView> =
            core.credentials.list()?.into_iter().filter(|c| visible(&c.owner_id)).collect();
        let rule = !core.policy.rules()?.rules().is_empty();
        Ok((activity, credentials, rule, failures))
    })
    .await?;
    let setup = Setup {
        credential: !credentials.is_empty(),
        connected: !sessions.is_empty() || credentials.iter().any(|c| c.last_seen_ms > c.created_ms),
        upstream: !upstreams.is_empty(),
        rule,
    };
    Ok(Overview {
        username: user.username,
        is_admin: user.is_admin,
        now_ms: core.clock.now_ms(),
        pending: inbox.total,
        oldest_pending_ms: inbox.pending.iter().filter_map(|e| e.created_at_ms).min(),
        activity,
        upstreams,
        held,
        sessions,
        credentials,
        setup,
        failures,
    })
}
