//! Pauses that outlive their MCP session and a restart of Gatehouse, expiry
//! that tells the agent how to ask again, and a rule's own approval TTL.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

const SET_RULE: &str = "gatehouse_policy_set";

/// Ada (admin) signed in, and claude's credential (owned by ada) with a
/// session; claude's `gatehouse_policy_set` of `pattern` paused: (cookie, token, eid).
async fn paused(app: &TestApp, pattern: &str) -> (String, String, gatehouse_core::approvals::ExecutionId) {
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    let token = app.issue_owned("claude", "ada");
    let sid = app.open_session(&token).await;
    let reply = app.tool_call(&token, &sid, SET_RULE, json!({"pattern": pattern, "action": "allow"})).await;
    assert_eq!(reply["result"]["structuredContent"]["status"], "user_approval_required", "{reply}");
    (ada, token, execution_id(&reply))
}

fn text_of(result: &Value) -> String {
    result["content"].as_array().unwrap().iter().filter_map(|c| c["text"].as_str()).collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn a_pending_call_survives_a_restart_and_a_new_session_resumes_it_once_approved() {
    let app = spawn_app().await;
    let (_, token, eid) = paused(&app, "durable_*").await;
    let app = app.restart(Duration::from_secs(5), |_| {}).await;

    // Still pending, with its arguments, on the API and on the pages.
    let ada = app.sign_in("ada").await;
    let detail: Value = app.get_as(&ada, &format!("/api/executions/{eid}")).await.json().await.unwrap();
    assert_eq!(
        (detail["state"].as_str(), detail["arguments"]["pattern"].as_str()),
        (Some("pending"), Some("durable_*"))
    );
    let inbox = app.get_as(&ada, "/approvals").await.text().await.unwrap();
    assert!(inbox.contains(eid.as_str()), "the inbox lists it after the restart");
    let page = app.get_as(&ada, &format!("/resume/{eid}")).await.text().await.unwrap();
    assert!(page.contains("durable_*") && page.contains(">Approve<"), "{page}");

    // Approved in the browser; the agent's new session resumes it and gets the real result.
    let decided = app.decide(&ada, &eid, "accept").await;
    assert_eq!(decided.status(), 200);
    let sid = app.open_session(&token).await;
    let resumed = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(resumed["result"]["isError"], false, "{resumed}");
    assert_eq!(resumed["result"]["structuredContent"]["pattern"], "durable_*");
    assert_eq!(app.core.policy.rules().unwrap()[0].pattern, "durable_*", "the approved call ran once");
    assert!(app.core.approvals.is_empty());
    app.core.approvals.flush().await;
    let rows: i64 =
        app.core.db.conn().unwrap().query_one("SELECT COUNT(*) FROM pending_executions", &[], |r| r.get(0)).unwrap();
    assert_eq!(rows, 0, "once settled its arguments are gone; the audit log keeps the digest");
}

#[tokio::test]
async fn a_2026_07_28_retry_after_a_restart_continues_its_call() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let token = app.issue_owned("py-agent", "ada");
    let args = json!({"pattern": "modern_durable", "action": "allow"});
    let first = app.native_url_call(&token, SET_RULE, &args, None).await;
    assert_eq!(first["resultType"], "input_required", "{first}");
    let state = first["requestState"].as_str().unwrap().to_string();
    let url = first["inputRequests"]["approval"]["params"]["url"].as_str().unwrap();
    let eid = url.split("/resume/").nth(1).unwrap().split('?').next().unwrap().to_string();

    let app = app.restart(Duration::from_secs(5), |_| {}).await;
    let ada = app.sign_in("ada").await;
    assert_eq!(app.decide(&ada, &eid, "accept").await.status(), 200);
    let done = app.native_url_call(&token, SET_RULE, &args, Some(&state)).await;
    assert_eq!(done["isError"], false, "{done}");
    assert_eq!(done["structuredContent"]["pattern"], "modern_durable");
}

#[tokio::test]
async fn ending_the_session_leaves_its_announced_pauses_pending() {
    let app = spawn_app().await;
    let (ada, token, eid) = paused(&app, "q").await;
    let sid = app.open_session(&token).await;
    app.wait_for_sessions(|n| n == 2).await;
    let ended = app.end_session(&token, &sid).await;
    assert!(ended.status().is_success());
    app.wait_for_sessions(|n| n == 1).await;
    assert_eq!(app.core.approvals.get(&eid).unwrap().1.state.as_str(), "pending", "it belongs to the credential");
    // The pause is still bounded: a person (or its TTL) settles it, and then nothing is left.
    assert_eq!(app.decide(&ada, &eid, "decline").await.status(), 200);
    assert_eq!(app.core.approvals.len(), 0);
    let metrics = app.metrics().await;
    assert!(metrics.contains("gatehouse_approval_store_entries 0"), "{metrics}");
}

#[tokio::test]
async fn a_call_that_expired_while_gatehouse_was_stopped_is_expired_and_says_how_to_ask_again() {
    let app = spawn_app_with(|c| c.approval_ttl = Duration::from_secs(60)).await;
    let (_, token, eid) = paused(&app, "late").await;
    let app = app.restart(Duration::from_secs(61), |c| c.approval_ttl = Duration::from_secs(60)).await;
    let last = app.core.approvals.audit().latest(&eid).unwrap().unwrap();
    assert_eq!(last.state.as_str(), "expired");
    assert!(last.detail.unwrap().contains("while Gatehouse was stopped"));
    assert!(app.core.approvals.is_empty());

    let sid = app.open_session(&token).await;
    let resumed = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    let result = &resumed["result"];
    assert_eq!(result["isError"], true);
    assert_eq!(result["structuredContent"]["error"], "execution_expired");
    assert_eq!(result["structuredContent"]["recovery"], "re_execute");
    assert!(text_of(result).contains("Call the tool again to request a new approval"), "{result}");
}

#[tokio::test]
async fn an_expired_call_tells_the_agent_to_call_again() {
    let app = spawn_app().await;
    let (_, token, eid) = paused(&app, "x").await;
    assert!(app.core.approvals.expire(&eid));
    let sid = app.open_session(&token).await;
    let resumed = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    let text = text_of(&resumed["result"]);
    assert!(text.contains("expired") && text.contains("Call the tool again to request a new approval"), "{text}");
}

#[tokio::test]
async fn a_rules_approval_ttl_overrides_the_global_one() {
    let rule = |c: &mut gatehouse::config::Config| {
        c.policy_rules = vec![gatehouse_core::policy::Rule {
            source: gatehouse_core::policy::Source::Config,
            approval_ttl: Some(std::time::Duration::from_secs(45)),
            ..gatehouse_core::policy::Rule::new(
                SET_RULE.parse().unwrap(),
                gatehouse_core::policy::Action::RequireApproval,
            )
        }]
    };
    let app = spawn_app_with(rule).await;
    let (_, token, eid) = paused(&app, "short").await;
    let (execution, _) = app.core.approvals.get(&eid).unwrap();
    assert_eq!(execution.expires_at_ms - execution.created_at_ms, 45_000, "the rule's TTL, not the global 10 min");
    // Another tool the rule does not match keeps the global TTL.
    let sid = app.open_session(&token).await;
    let other = app.tool_call(&token, &sid, "gatehouse_policy_remove", json!({"pattern": "short"})).await;
    let (other, _) = app.core.approvals.get(&execution_id(&other)).unwrap();
    assert_eq!(other.expires_at_ms - other.created_at_ms, 600_000);
}

#[tokio::test]
async fn the_inbox_marks_a_call_about_to_expire() {
    let app = spawn_app().await;
    let (ada, _, eid) = paused(&app, "soon").await;
    let inbox = app.get_as(&ada, "/approvals").await.text().await.unwrap();
    assert!(inbox.contains(eid.as_str()) && inbox.contains(r#"data-expiring="false""#), "{inbox}");
    // 8 min 20 s of its 10 min gone: in its last fifth.
    app.clock.advance(Duration::from_secs(500));
    let inbox = app.get_as(&ada, "/approvals").await.text().await.unwrap();
    assert!(inbox.contains(r#"data-expiring="true""#) && inbox.contains("card expiring"), "{inbox}");
}

#[tokio::test]
async fn after_a_restart_a_pause_is_still_only_its_owners_and_its_credentials() {
    let app = spawn_app().await;
    let (_, token, eid) = paused(&app, "mine").await;
    app.add_user("bob", false).await;
    let other = app.issue_owned("claude", "bob");
    let app = app.restart(Duration::from_secs(1), |_| {}).await;

    let bob = app.sign_in("bob").await;
    assert_eq!(app.get_as(&bob, &format!("/api/executions/{eid}")).await.status(), 403);
    assert_eq!(app.decide(&bob, &eid, "accept").await.status(), 403);
    let sid = app.open_session(&other).await;
    let refused = app.tool_call(&other, &sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(refused["result"]["structuredContent"]["error"], "execution_forbidden", "{refused}");
    assert_eq!(app.core.approvals.get(&eid).unwrap().1.state.as_str(), "pending");
    drop(token);
}

#[tokio::test]
async fn revoking_a_credential_settles_the_pauses_a_restart_restored() {
    let app = spawn_app().await;
    let (_, token, eid) = paused(&app, "gone").await;
    let id = app.core.credentials.list().unwrap().into_iter().find(|c| c.agent == "claude").unwrap().id;
    let app = app.restart(Duration::from_secs(1), |_| {}).await;
    // The CLI revokes in another process; the server's sweep settles the pause.
    assert!(app.core.credentials.revoke(&id).unwrap());
    for _ in 0..100 {
        if app.core.approvals.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(app.core.approvals.audit().latest(&eid).unwrap().unwrap().state.as_str(), "revoked");
    drop(token);
}
