//! Every call on the record: calls that run at once (by a rule, the tool's
//! annotations or a grant) and calls refused at once are audited like paused
//! ones — one entry per call, with what decided, how long it ran and how it
//! ended — and the history tells them apart from the calls that waited.

use gatehouse_core::audit::HistoryScope;
use gatehouse_core::model::{AuditEntry, HistoryFilter};
use gatehouse_core::policy::{Action, Rule};
use serde_json::json;

use crate::helpers::*;

fn history(app: &TestApp, kind: &str) -> Vec<AuditEntry> {
    let filter = HistoryFilter { kind: kind.into(), ..Default::default() };
    app.core.approvals.audit().search(&filter, &HistoryScope::All, 100).unwrap()
}

fn find<'a>(entries: &'a [AuditEntry], tool: &str) -> Vec<&'a AuditEntry> {
    entries.iter().filter(|e| e.tool == tool).collect()
}

#[tokio::test]
async fn calls_that_run_or_are_refused_at_once_are_audited_one_entry_each() {
    let app = spawn_app_fronting(everything_stdio(), |c| {
        c.policy_rules = vec![
            allow_rule("ev__test_*"),
            Rule {
                source: gatehouse_core::policy::Source::Config,
                ..Rule::new("ev__test_image_content".parse().unwrap(), Action::Block)
            },
        ]
    })
    .await;
    app.wait_for_upstream_tool("ev__test_simple_text").await;
    let token = app.issue("cursor", None);
    let client = app.connect((), &token).await;
    let ok = client.call_tool(tool_params("ev__test_simple_text", json!({}))).await.unwrap();
    assert_ne!(ok.is_error, Some(true));
    let failed = client.call_tool(tool_params("ev__test_error_handling", json!({}))).await.unwrap();
    assert_eq!(failed.is_error, Some(true), "the fixture's tool answers isError");
    let blocked = client.call_tool(tool_params("ev__test_image_content", json!({}))).await.unwrap();
    assert_eq!(blocked.is_error, Some(true));
    client.call_tool(tool_params("gatehouse_status", json!({}))).await.unwrap();
    // A gated call, for the other side of the filter.
    let paused_call = client.call_tool(tool_params("ev__probe_mutable", json!({}))).await.unwrap();
    let status = &paused_call.structured_content.as_ref().expect("a pause")["status"];
    assert_eq!(status, "user_approval_required", "{paused_call:?}");
    client.cancel().await.unwrap();

    let at_once = history(&app, "at_once");
    let simple = find(&at_once, "ev__test_simple_text");
    assert_eq!(simple.len(), 1, "one entry per call: {at_once:?}");
    let simple = simple[0];
    assert_eq!(simple.state.as_str(), "completed");
    assert_eq!(simple.actor.as_deref(), Some("rule:ev__test_*"));
    assert_eq!(simple.upstream.as_deref(), Some("everything"));
    assert_eq!(simple.agent, "cursor");
    assert_eq!(simple.arguments_digest, gatehouse_core::approvals::digest(&json!({})));
    let detail = simple.detail.as_deref().unwrap();
    assert!(detail.starts_with("ran at once · ") && detail.ends_with(" ms · ok"), "{detail}");

    let failed = find(&at_once, "ev__test_error_handling");
    // Says what failed and where, in words: the upstream's own error text.
    let said = failed[0].detail.as_deref().unwrap();
    assert_eq!(failed[0].state.as_str(), "failed");
    assert!(said.contains(" ms · upstream everything answered with an error: ") && !said.contains("isError"), "{said}");
    assert!(!said.ends_with("(no error text)"), "the upstream's text is kept: {said}");
    let blocked = find(&at_once, "ev__test_image_content");
    assert_eq!(blocked[0].state.as_str(), "blocked");
    assert_eq!(blocked[0].actor.as_deref(), Some("rule:ev__test_image_content"));
    let status = find(&at_once, "gatehouse_status");
    assert_eq!(status[0].actor.as_deref(), Some("annotation:readOnlyHint"), "the annotation decided");
    assert_eq!(status[0].upstream, None);
    assert!(find(&at_once, "ev__probe_mutable").is_empty(), "the paused call is not an at-once call");

    let gated = history(&app, "gated");
    assert!(!find(&gated, "ev__probe_mutable").is_empty());
    assert!(gated.iter().all(|e| e.execution_id.as_str().starts_with("exec_")));
    assert!(at_once.iter().all(|e| e.execution_id.as_str().starts_with("call_")));

    // The history's filter, over the API and on the page.
    let root = {
        app.add_user("root", true).await;
        app.sign_in("root").await
    };
    let r = app.get_as(&root, "/api/history?kind=at_once").await;
    assert_eq!(r.status(), 200);
    let page = app.get_as(&root, "/history?kind=at_once").await.text().await.unwrap();
    assert!(page.contains(r#"<option value="at_once" selected"#), "the form shows the filter");
    assert!(page.contains("ran at once"), "the entries say so");
    let r = app.get_as(&root, "/api/history?kind=sometimes").await;
    assert_eq!(r.status(), 400, "an unknown kind is refused");
}

#[tokio::test]
async fn a_call_the_agent_cancels_is_recorded_as_it_ended() {
    use rmcp::model::{CallToolRequest, ClientRequest};
    use rmcp::service::PeerRequestOptions;
    let app = spawn_app_fronting(everything_stdio(), |c| c.policy_rules = vec![allow_rule("ev__*")]).await;
    app.wait_for_upstream_tool("ev__probe_wait").await;
    let client = app.connect((), &app.issue("cursor", None)).await;
    let wait = tool_params("ev__probe_wait", json!({"ms": 30_000}));
    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(wait)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    handle.cancel(Some("changed my mind".into())).await.unwrap();
    wait_until("the call is recorded", || history(&app, "at_once").iter().any(|e| e.tool == "ev__probe_wait")).await;
    let entry = history(&app, "at_once").into_iter().find(|e| e.tool == "ev__probe_wait").unwrap();
    assert_eq!(entry.state.as_str(), "cancelled", "{entry:?}");
    assert!(entry.detail.as_deref().unwrap().ends_with("cancelled by the agent"), "{entry:?}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_approved_call_that_fails_says_where_and_why_on_its_record() {
    let app = spawn_app_fronting(everything_stdio(), |_| {}).await;
    app.wait_for_upstream_tool("ev__test_error_handling").await;
    let (ada, bob) = app.ada_and_bob().await;
    let token = app.issue_owned("claude", "ada");
    let sid = app.open_session(&token).await;
    // Unannotated: it waits for a person.
    let paused_call = app.tool_call(&token, &sid, "ev__test_error_handling", json!({})).await;
    let eid = execution_id(&paused_call).to_string();
    let r = app
        .same_origin(reqwest::Method::POST, &format!("/api/executions/{eid}/resume"))
        .header("cookie", &ada)
        .json(&json!({"action": "accept"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let ran = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(ran["result"]["isError"], true, "{ran}");
    let text = ran["result"]["content"][0]["text"].as_str().unwrap().to_string();

    let timeline = app.core.approvals.audit().timeline(&eid.clone().into()).unwrap();
    let last = timeline.last().unwrap();
    assert_eq!(last.state.as_str(), "failed");
    let expected = format!("upstream everything answered with an error: {}", text.trim());
    assert_eq!(last.detail.as_deref(), Some(expected.as_str()), "the person reads the upstream's own words");

    // The call's page says it under its state, and the home page lists it
    // among the calls that failed lately, for its owner only.
    let said = "upstream everything answered with an error: ";
    let page = app.get_as(&ada, &format!("/resume/{eid}")).await.text().await.unwrap();
    let at = page.find(r#"data-testid="failure""#).expect("the call's page says why it failed");
    assert!(page[at..].contains(said), "{page}");
    let home = app.get_as(&ada, "/").await.text().await.unwrap();
    assert!(home.contains("Failed lately") && home.contains(said), "{home}");
    assert!(home.contains(&format!("/resume/{eid}")), "it links to the call");
    let others = app.get_as(&bob, "/").await.text().await.unwrap();
    assert!(!others.contains("Failed lately"), "bob may not see ada's calls");
}
