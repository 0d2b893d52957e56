//! The site's and the browser API's URLs, built in one place: the server's
//! router, the MCP gate's approval links and the pages all use these.

/// The home page.
pub const HOME: &str = "/";
/// The approvals inbox.
pub const APPROVALS: &str = "/approvals";
/// The upstreams page.
pub const UPSTREAMS: &str = "/upstreams";
/// The upstreams page with the form filled to edit the stored upstream `name`.
pub fn edit_upstream(name: &str) -> String {
    format!("{UPSTREAMS}?{}#upstream-form", serde_urlencoded::to_string([("upstream", name)]).unwrap_or_default())
}
/// The upstreams page with the form filled to edit the stored notification target `name`.
pub fn edit_notify(name: &str) -> String {
    format!("{UPSTREAMS}?{}#notify-form", serde_urlencoded::to_string([("target", name)]).unwrap_or_default())
}
/// The history page (the audit log); filters go in its query string.
pub const HISTORY: &str = "/history";
/// The agents and credentials page.
pub const AGENTS: &str = "/agents";
/// The tools page: every exposed tool, what the gate does with it, and
/// changed definitions held back for review.
pub const TOOLS: &str = "/tools";

/// The tools page as agent `owner/agent` sees it (its `tools/list`).
pub fn tools_as(agent: &str) -> String {
    format!("{TOOLS}?{}", serde_urlencoded::to_string([("agent", agent)]).unwrap_or_default())
}

/// The policies page with profile `name` in the profile form.
pub fn edit_profile(name: &str) -> String {
    format!("{POLICIES}?{}#profiles", serde_urlencoded::to_string([("profile", name)]).unwrap_or_default())
}

/// The grants page: every "allow this tool for this agent" the viewer may
/// see, with its uses, revocable at once.
pub const GRANTS: &str = "/grants";
/// Live grants as JSON.
pub const API_GRANTS: &str = "/api/grants";

/// One grant (`DELETE` revokes it).
pub fn grant(grant_id: &str) -> String {
    format!("{API_GRANTS}/{grant_id}")
}

/// The users page (admins only: invite, reset, disable, remove users).
pub const USERS: &str = "/users";

/// The signed-in person's own page: password, browser sessions, agents and
/// their credentials, what notifies them.
pub const ACCOUNT: &str = "/account";

/// The users page showing the one-time link just made as `id` (the link
/// itself never goes in a URL but its own).
pub fn users_link(id: &str) -> String {
    format!("{USERS}?link={id}")
}

/// The page a one-time invite or reset link opens (no sign-in needed).
pub const SET_PASSWORD: &str = "/set-password";
/// Where the set-password form posts.
pub const API_SET_PASSWORD: &str = "/api/auth/set-password";

/// The one-time link that lets a user choose a password: `base_url` (no
/// trailing slash) plus [`SET_PASSWORD`] and the token.
pub fn password_link(base_url: &str, token: &str) -> String {
    format!("{}{SET_PASSWORD}?token={token}", base_url.trim_end_matches('/'))
}

/// The agents page showing the credential just minted as `id` (its token
/// itself never goes in a URL).
pub fn agents_minted(id: &str) -> String {
    format!("{AGENTS}?minted={id}")
}

/// The policies page.
pub const POLICIES: &str = "/policies";

/// The sign-in page.
pub const SIGN_IN: &str = "/sign-in";
/// The sign-in form's target.
pub const API_SIGN_IN: &str = "/api/auth/sign-in";
/// The sign-out form's target.
pub const API_SIGN_OUT: &str = "/api/auth/sign-out";
/// The theme form's target (the header's System / Light / Dark).
pub const API_THEME: &str = "/api/theme";
/// The first-run setup form's target.
pub const API_SETUP: &str = "/api/auth/setup";
/// Every hub change (sessions, credentials, approvals, upstreams) by name,
/// and the viewer's inbox as `inbox` events, as SSE.
pub const LIVE_EVENTS: &str = "/api/live/events";
/// The viewer's inbox ([`crate::InboxView`]) now and on every change, as SSE `inbox` events.
pub const APPROVAL_EVENTS: &str = "/api/approvals/events";

/// The resume page of an execution; `mcp_session_id` tells the page which
/// MCP session made the call (session ids are URL-safe tokens).
pub fn resume(execution_id: &str, mcp_session_id: Option<&str>) -> String {
    match mcp_session_id {
        Some(sid) => format!("/resume/{execution_id}?mcp_session_id={sid}"),
        None => format!("/resume/{execution_id}"),
    }
}

/// An execution as JSON.
pub fn execution(execution_id: &str) -> String {
    format!("/api/executions/{execution_id}")
}

/// Where a person turns down the grant an execution's view offers.
pub fn execution_decline_suggestion(execution_id: &str) -> String {
    format!("/api/executions/{execution_id}/suggestion/decline")
}

/// Where a decision on an execution is posted.
pub fn execution_resume(execution_id: &str) -> String {
    format!("/api/executions/{execution_id}/resume")
}

/// An execution's view on every change, as SSE.
pub fn execution_events(execution_id: &str) -> String {
    format!("/api/executions/{execution_id}/events")
}

/// The history page showing `filter` (a link that can be shared).
pub fn history(filter: &crate::HistoryFilter) -> String {
    with_query(HISTORY, &filter.to_query())
}

/// The audit log as JSON, one page per request (`before` pages back).
pub const API_HISTORY: &str = "/api/history";

/// The whole filtered history as a file to download.
pub fn history_export(format: crate::ExportFormat, filter: &crate::HistoryFilter) -> String {
    let filter = filter.at_page(None);
    with_query(&format!("/api/history/export.{}", format.as_str()), &filter.to_query())
}

fn with_query(path: &str, query: &str) -> String {
    if query.is_empty() { path.to_string() } else { format!("{path}?{query}") }
}

/// The OAuth authorization endpoint: the consent page (GET) and its decision (POST).
pub const OAUTH_AUTHORIZE: &str = "/oauth/authorize";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_have_their_documented_shape() {
        assert_eq!(resume("exec_1", None), "/resume/exec_1");
        assert_eq!(resume("exec_1", Some("s")), "/resume/exec_1?mcp_session_id=s");
        assert_eq!(execution("exec_1"), "/api/executions/exec_1");
        assert_eq!(execution_resume("exec_1"), "/api/executions/exec_1/resume");
        assert_eq!(execution_events("exec_1"), "/api/executions/exec_1/events");
        let f = crate::HistoryFilter { tool: "rm".into(), before: Some(9), ..Default::default() };
        assert_eq!(history(&f), "/history?tool=rm&before=9");
        assert_eq!(history(&Default::default()), "/history");
        assert_eq!(password_link("http://gh.test/", "tok"), "http://gh.test/set-password?token=tok");
        assert_eq!(users_link("link_1"), "/users?link=link_1");
        assert_eq!(history_export(crate::ExportFormat::Csv, &f), "/api/history/export.csv?tool=rm");
    }
}
