//! A rule tried on the record while it is written: the calls of the last
//! days that the viewer may see, each decided by the gate's own procedure
//! with the rule and without it; what it would change is counted and
//! listed, and what cannot be tried (a condition, no kept arguments) is
//! counted apart. A plain user's replay never reaches another user's calls.

use serde_json::{Value, json};

use crate::helpers::*;

async fn replay(app: &TestApp, cookie: &str, draft: &[(&str, &str)]) -> Value {
    let r = app.post_fn(cookie, "policy_replay", draft).await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// Admin "root", plain users "ada" (signed in, with agent "cursor" in an
/// open MCP session) and "bob": (root's cookie, ada's, cursor's token, its
/// session id).
async fn people(app: &TestApp) -> (String, String, String, String) {
    app.add_user("root", true).await;
    app.add_user("ada", false).await;
    app.add_user("bob", false).await;
    let (root, ada) = (app.sign_in("root").await, app.sign_in("ada").await);
    let adas = app.issue_owned("cursor", "ada");
    let sid = app.open_session(&adas).await;
    (root, ada, adas, sid)
}

#[tokio::test]
async fn a_rule_is_tried_on_the_calls_the_viewer_may_see() {
    let app = spawn_app().await;
    let (root, ada, adas, sid) = people(&app).await;
    for _ in 0..2 {
        app.tool_call(&adas, &sid, "gatehouse_status", json!({})).await;
    }
    let waited = app.tool_call(&adas, &sid, "gatehouse_policy_set", json!({"pattern": "x", "action": "allow"})).await;
    assert!(paused(&waited));
    let bobs = app.issue_owned("cursor", "bob");
    let bob_sid = app.open_session(&bobs).await;
    app.tool_call(&bobs, &bob_sid, "gatehouse_status", json!({})).await;

    let block = [("draft[pattern]", "gatehouse_status"), ("draft[action]", "block")];
    let everyone = replay(&app, &root, &block).await;
    assert_eq!(everyone["days"], 7);
    assert_eq!(everyone["changes"], json!([["allow", "block", 3]]), "{everyone}");
    let own = replay(&app, &ada, &block).await;
    assert_eq!(own["changes"], json!([["allow", "block", 2]]), "only ada's agents' calls: {own}");
    let listed = own["changed"].as_array().unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|c| c["owner"] == "ada" && c["did"] == "allow" && c["would"] == "block"), "{own}");

    // A condition needs the arguments: the record kept those of the call
    // that waited for a person (`keep_arguments = "gated"`, the default),
    // not those of the calls that ran at once, which are counted apart.
    let conditional = replay(
        &app,
        &ada,
        &[("draft[pattern]", "gatehouse_*"), ("draft[action]", "block"), ("draft[when]", "args.pattern == 'x'")],
    )
    .await;
    assert_eq!(conditional["untried"], 2, "{conditional}");
    assert_eq!(conditional["changes"], json!([["require_approval", "block", 1]]), "{conditional}");
    let other = replay(
        &app,
        &ada,
        &[("draft[pattern]", "gatehouse_*"), ("draft[action]", "block"), ("draft[when]", "args.pattern == 'y'")],
    )
    .await;
    assert_eq!((other["changes"].clone(), other["same"].clone()), (json!([]), json!(1)), "{other}");
    // An allow rule cannot let a gate-changing call through: nothing changes.
    let allow = replay(&app, &ada, &[("draft[pattern]", "gatehouse_policy_*"), ("draft[action]", "allow")]).await;
    assert_eq!((allow["changes"].clone(), allow["same"].clone()), (json!([]), json!(1)), "{allow}");
    // Scoped to another owner's agents, ada's calls are not reached.
    let scoped =
        replay(&app, &ada, &[("draft[pattern]", "*"), ("draft[action]", "block"), ("draft[owners]", "bob")]).await;
    assert_eq!((scoped["changes"].clone(), scoped["same"].clone()), (json!([]), json!(0)), "{scoped}");
    // A resource rule is not tried on tool calls; a broken draft is refused as Save would.
    assert_eq!(
        replay(&app, &ada, &[("draft[pattern]", "resource:file:///*"), ("draft[action]", "block")]).await,
        Value::Null
    );
    let bad = app.post_fn(&ada, "policy_replay", &[("draft[pattern]", "a*b"), ("draft[action]", "block")]).await;
    assert_eq!(bad.status(), 400);
}

/// Each rule's row on the policies page counts the calls it decided in the
/// last 7 days — let through, paused (its pending entry names it) or
/// blocked — each once, and a plain user counts only their own agents'.
#[tokio::test]
async fn each_rule_counts_the_calls_it_decided_among_those_the_viewer_may_see() {
    use gatehouse_core::policy::{Action, Rule, Source};
    let config = |pattern: &str, action| Rule { source: Source::Config, ..Rule::new(pattern.parse().unwrap(), action) };
    let app = spawn_app_with(|c| {
        c.policy_rules = vec![
            Rule { name: "look".into(), ..config("gatehouse_status", Action::Allow) },
            Rule { name: "ask".into(), ..config("gatehouse_audit_recent", Action::RequireApproval) },
            Rule { name: "stop".into(), ..config("gatehouse_policies_list", Action::Block) },
            Rule { name: "idle".into(), ..config("nothing_*", Action::Block) },
        ]
    })
    .await;
    let (root, ada, adas, sid) = people(&app).await;
    for _ in 0..3 {
        app.tool_call(&adas, &sid, "gatehouse_status", json!({})).await;
    }
    let asked = app.tool_call(&adas, &sid, "gatehouse_audit_recent", json!({})).await;
    assert!(paused(&asked), "{asked}");
    app.decide(&ada, execution_id(&asked).as_str(), "approve").await;
    app.tool_call(&adas, &sid, "gatehouse_policies_list", json!({})).await;
    let bobs = app.issue_owned("cursor", "bob");
    let bob_sid = app.open_session(&bobs).await;
    app.tool_call(&bobs, &bob_sid, "gatehouse_status", json!({})).await;

    let counts = |view: &Value| -> Vec<(String, i64)> {
        let mut counts: Vec<(String, i64)> = serde_json::from_value(view["decided"].clone()).unwrap();
        counts.sort();
        counts
    };
    let everyone: Value = app.post_fn(&root, "policies", &[]).await.json().await.unwrap();
    assert_eq!(counts(&everyone), [("ask".into(), 1), ("look".into(), 4), ("stop".into(), 1)], "{everyone}");
    let own: Value = app.post_fn(&ada, "policies", &[]).await.json().await.unwrap();
    assert_eq!(counts(&own), [("ask".into(), 1), ("look".into(), 3), ("stop".into(), 1)], "only ada's agents' calls");

    // The page says it on each rule's row, with the calls a click away.
    let html = app.get_as(&ada, "/policies").await.text().await.unwrap();
    assert!(html.contains("Decided 3 calls in 7 days."), "{html}");
    assert!(html.contains("Decided no call in 7 days."));
    assert!(html.contains("/history?decider=rule%3Aask"));
}
