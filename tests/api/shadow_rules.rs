//! Shadow rules: a rule saved in shadow mode decides nothing; every call it
//! would have changed is audited as `shadow:<rule>` with what it would have
//! done; the policies page counts them since the rule was saved and
//! promotes it to enforcing in one step (in the change log).

use gatehouse_core::audit::HistoryScope;
use gatehouse_core::model::HistoryFilter;
use serde_json::json;

use crate::helpers::*;

const AUDIT: &str = "gatehouse_audit_recent";

#[tokio::test]
async fn a_shadow_rule_records_what_it_would_have_done_and_is_promoted_in_one_step() {
    let app = spawn_app().await;
    app.add_user("root", true).await;
    app.add_user("ada", false).await;
    let (root, ada) = (app.sign_in("root").await, app.sign_in("ada").await);
    let form = [
        ("draft[name]", "no long audits"),
        ("draft[pattern]", AUDIT),
        ("draft[action]", "block"),
        ("draft[when]", "has(args.limit) && args.limit > 50"),
        ("draft[shadow]", "on"),
    ];
    assert_eq!(app.post_fn(&root, "policy_save", &form).await.status(), 200);

    let token = app.issue("cursor", None);
    let sid = app.open_session(&token).await;
    let long = app.tool_call(&token, &sid, AUDIT, json!({"limit": 100})).await;
    assert_ne!(long["result"]["isError"], true, "a shadow rule blocks nothing: {long}");
    app.tool_call(&token, &sid, AUDIT, json!({"limit": 5})).await;

    let filter = HistoryFilter { decider: "shadow:no long audits".into(), ..Default::default() };
    let hits = app.core.approvals.audit().search(&filter, &HistoryScope::All, 10).unwrap();
    assert_eq!(hits.len(), 1, "only the call it would have changed: {hits:?}");
    assert_eq!(hits[0].state.as_str(), "shadow");
    assert_eq!(hits[0].detail.as_deref(), Some("would have: blocked (it was: runs at once)"));

    let page = app.get_as(&root, "/policies").await.text().await.unwrap();
    assert!(page.contains(r#"data-shadow-count="1""#), "the page counts it");
    assert!(page.contains("Would have changed 1 call since it was saved."));
    assert_eq!(app.post_fn(&ada, "policy_promote", &[("name", "no long audits")]).await.status(), 403);
    assert_eq!(app.post_fn(&root, "policy_promote", &[("name", "nope")]).await.status(), 400);
    assert_eq!(app.post_fn(&root, "policy_promote", &[("name", "no long audits")]).await.status(), 200);

    let now_blocked = app.tool_call(&token, &sid, AUDIT, json!({"limit": 100})).await;
    assert_eq!(now_blocked["result"]["isError"], true, "enforcing now: {now_blocked}");
    let change = &app.core.changes.recent("policy", 1).unwrap()[0];
    assert_eq!((change.action.as_str(), change.actor.as_str()), ("promote", "user:root#1"));
    assert!(!app.core.policy.rules().unwrap().iter().any(|r| r.shadow));
}
