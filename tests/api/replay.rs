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

#[tokio::test]
async fn a_rule_is_tried_on_the_calls_the_viewer_may_see() {
    let app = spawn_app().await;
    app.add_user("root", true).await;
    app.add_user("ada", false).await;
    app.add_user("bob", false).await;
    let (root, ada) = (app.sign_in("root").await, app.sign_in("ada").await);
    let adas = app.issue_owned("cursor", "ada");
    let sid = app.open_session(&adas).await;
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

    // A condition needs the arguments, which are not kept: counted apart.
    let conditional = replay(
        &app,
        &ada,
        &[("draft[pattern]", "gatehouse_*"), ("draft[action]", "block"), ("draft[when]", "args.x == 1")],
    )
    .await;
    assert_eq!(conditional["untried"], 3, "{conditional}");
    assert_eq!(conditional["changes"], json!([]));
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
