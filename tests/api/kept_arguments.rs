//! Arguments kept by choice: `keep_arguments` (gated by default: a person
//! saw them anyway), overridden per rule and per upstream (the narrower
//! wins), bounded by `keep_arguments_max_bytes` (past it the first bytes,
//! said so), names in `redact_arguments` kept as "•••"; shown on a settled
//! call's page and its history row to those who may see the call, and to
//! no one else.

use gatehouse_core::model::Keep;
use gatehouse_core::policy::{Action, Rule, Source};
use serde_json::{Value, json};

use crate::helpers::*;

fn rule(name: &str, pattern: &str, action: Action, keep: Option<Keep>) -> Rule {
    Rule {
        name: name.into(),
        source: Source::Config,
        keep_arguments: keep,
        ..Rule::new(pattern.parse().unwrap(), action)
    }
}

/// The call of `tool` in `/api/history` as `cookie` reads it (one row per call).
async fn history_row(app: &TestApp, cookie: &str, tool: &str) -> Option<Value> {
    let page: Value = app.get_as(cookie, &format!("/api/history?tool={tool}")).await.json().await.unwrap();
    page["calls"].as_array().unwrap().first().cloned()
}

/// What the row's steps kept, if anything.
fn kept(row: &Value) -> Option<Value> {
    row["steps"].as_array().unwrap().iter().find_map(|s| s.get("arguments").cloned())
}

#[tokio::test]
async fn a_call_that_waited_keeps_its_arguments_redacted_for_those_who_may_see_it() {
    let app = spawn_app_fronting(everything_stdio(), |_| {}).await;
    app.add_user("ada", false).await;
    app.add_user("bob", false).await;
    let (ada, bob) = (app.sign_in("ada").await, app.sign_in("bob").await);
    let token = app.issue_owned("cursor", "ada");
    let sid = app.open_session(&token).await;
    let arguments = json!({"path": "/tmp/build/out", "password": "hunter22", "auth": {"Token": "t0ken"}});
    let reply = app.tool_call(&token, &sid, "ev__probe_mutable", arguments).await;
    assert!(paused(&reply), "{reply}");
    let eid = execution_id(&reply);
    assert_eq!(app.decide(&ada, eid.as_str(), "decline").await.status(), 200);
    // A call that ran at once keeps nothing by default.
    let ran = app.tool_call(&token, &sid, "ev__probe_touch", json!({"uri": "file:///at-once"})).await;
    assert_eq!(ran["result"]["content"][0]["text"], "not subscribed", "it ran at once: {ran}");

    let page = app.get_as(&ada, &routes_resume(&eid)).await.text().await.unwrap();
    assert!(page.contains("/tmp/build/out"), "the settled call's page shows its arguments");
    assert!(!page.contains("hunter22") && !page.contains("t0ken"), "redacted names are not kept");
    assert!(page.contains("•••") && page.contains("Not kept (redact_arguments): Token, password."), "{page}");
    let row = history_row(&app, &ada, "ev__probe_mutable").await.expect("the call's row");
    assert_eq!(
        kept(&row).unwrap(),
        json!({"kept": "whole", "arguments": {"path": "/tmp/build/out", "password": "•••", "auth": {"Token": "•••"}},
               "redacted": ["Token", "password"]})
    );
    let at_once = history_row(&app, &ada, "ev__probe_touch").await.expect("the call's row");
    assert_eq!(kept(&at_once), None, "keep_arguments = gated keeps only what waited for a person");

    // Another user sees neither the call nor its arguments.
    let theirs = app.get_as(&bob, &routes_resume(&eid)).await.text().await.unwrap();
    assert!(!theirs.contains("/tmp/build/out"));
    assert_eq!(history_row(&app, &bob, "ev__probe_mutable").await, None);
    let api = app.get_as(&bob, &format!("/api/executions/{eid}")).await;
    assert_eq!(api.status(), 403);
}

#[tokio::test]
async fn keep_all_is_bounded_and_a_rule_or_an_upstream_keeping_less_wins() {
    let app = spawn_app_fronting(everything_stdio(), |c| {
        c.keep_arguments = Keep::All;
        c.keep_arguments_max_bytes = 48;
        c.policy_rules = vec![
            rule("quiet", "ev__test_simple_text", Action::Allow, Some(Keep::None)),
            rule("stop", "ev__test_image_content", Action::Block, None),
        ];
    })
    .await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    let token = app.issue_owned("cursor", "ada");
    let sid = app.open_session(&token).await;
    app.tool_call(&token, &sid, "ev__test_simple_text", json!({"note": "not kept"})).await;
    app.tool_call(&token, &sid, "ev__test_image_content", json!({"why": "kept though refused"})).await;
    let long = "x".repeat(200);
    app.tool_call(&token, &sid, "ev__probe_touch", json!({"uri": long})).await;

    let quiet = history_row(&app, &ada, "ev__test_simple_text").await.unwrap();
    assert_eq!(kept(&quiet), None, "the rule's none wins over the global all");
    let refused = history_row(&app, &ada, "ev__test_image_content").await.unwrap();
    assert_eq!(refused["latest"]["state"], "blocked");
    assert_eq!(kept(&refused).unwrap()["arguments"], json!({"why": "kept though refused"}));
    let cut = kept(&history_row(&app, &ada, "ev__probe_touch").await.unwrap()).unwrap();
    assert_eq!(cut["kept"], "cut");
    assert_eq!(cut["size"], json!({"uri": long}).to_string().len());
    assert_eq!(cut["first"].as_str().unwrap().len(), 48);
    let html = app.get_as(&ada, "/history").await.text().await.unwrap();
    assert!(html.contains("Kept cut: the first 48 of"), "the history row says it was cut");

    // An upstream set to none is never kept, whatever a rule says.
    let quiet_upstream = everything_stdio();
    let app = spawn_app_fronting(
        gatehouse::config::UpstreamConfig { keep_arguments: Some(Keep::None), ..quiet_upstream },
        |c| {
            c.keep_arguments = Keep::All;
            c.policy_rules = vec![rule("loud", "ev__probe_touch", Action::Allow, Some(Keep::All))];
        },
    )
    .await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    let token = app.issue_owned("cursor", "ada");
    let sid = app.open_session(&token).await;
    app.tool_call(&token, &sid, "ev__probe_touch", json!({"uri": "file:///a"})).await;
    app.tool_call(&token, &sid, "gatehouse_status", json!({})).await;
    assert_eq!(kept(&history_row(&app, &ada, "ev__probe_touch").await.unwrap()), None);
    let own = history_row(&app, &ada, "gatehouse_status").await.unwrap();
    assert_eq!(kept(&own).unwrap()["arguments"], json!({}), "Gatehouse's own tools follow the global all");
}

fn routes_resume(eid: &gatehouse_core::approvals::ExecutionId) -> String {
    gatehouse_core::model::routes::resume(eid.as_str(), None)
}
