//! Rate limits that cannot be walked around: a rule's `rate` holds across an
//! agent's sessions and credentials (and, on PostgreSQL, across replicas);
//! a call over it gets an `isError` result naming the rule with
//! `retryAfter`, and is audited `limited`.

use gatehouse_core::audit::HistoryScope;
use gatehouse_core::model::HistoryFilter;
use gatehouse_core::policy::{Action, Rule};
use serde_json::{Value, json};

use crate::helpers::*;

const STATUS: &str = "gatehouse_status";

/// Two calls of `gatehouse_status` a day per agent. A day, so a test never
/// straddles two windows.
fn two_a_day(per: &str) -> Rule {
    Rule {
        name: "two statuses".into(),
        source: gatehouse_core::policy::Source::Config,
        rate: Some("2/day".parse().unwrap()),
        rate_per: per.parse().unwrap(),
        ..Rule::new(STATUS.parse().unwrap(), Action::Allow)
    }
}

async fn status(app: &TestApp, token: &str) -> Value {
    let sid = app.open_session(token).await;
    app.tool_call(token, &sid, STATUS, json!({})).await["result"].clone()
}

fn limited(result: &Value) -> bool {
    result["isError"] == true && result["structuredContent"]["error"] == "rate_limited"
}

#[tokio::test]
async fn a_rate_holds_across_an_agents_credentials_and_sessions() {
    let app = spawn_app_with(|c| c.policy_rules = vec![two_a_day("agent")]).await;
    app.add_user("ada", false).await;
    // Two credentials of one agent, each in its own session.
    let (first, second) = (app.issue_owned("cursor", "ada"), app.issue_owned("cursor", "ada"));
    assert!(!limited(&status(&app, &first).await));
    assert!(!limited(&status(&app, &second).await));
    let over = status(&app, &first).await;
    assert!(limited(&over), "the third call of the day: {over}");
    assert_eq!(over["structuredContent"]["rule"], "two statuses");
    let retry = over["structuredContent"]["retryAfter"].as_u64().unwrap();
    assert!(retry > 0 && retry <= 86_400, "{retry}");
    assert!(over["content"][0]["text"].as_str().unwrap().contains(r#"rate limit of policy rule "two statuses""#));
    // Another agent counts on its own.
    assert!(!limited(&status(&app, &app.issue_owned("claude", "ada")).await));

    let filter = HistoryFilter { outcome: "limited".into(), ..Default::default() };
    let entries = app.core.approvals.audit().search(&filter, &HistoryScope::All, 10).unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!((entries[0].agent.as_str(), entries[0].actor.as_deref()), ("cursor", Some("rule:two statuses")));
}

#[tokio::test]
async fn a_rate_per_owner_counts_all_their_agents_and_per_tool_everyone() {
    let app = spawn_app_with(|c| c.policy_rules = vec![two_a_day("owner")]).await;
    app.add_user("ada", false).await;
    app.add_user("bob", false).await;
    assert!(!limited(&status(&app, &app.issue_owned("cursor", "ada")).await));
    assert!(!limited(&status(&app, &app.issue_owned("claude", "ada")).await));
    assert!(limited(&status(&app, &app.issue_owned("codex", "ada")).await), "ada's third agent");
    assert!(!limited(&status(&app, &app.issue_owned("cursor", "bob")).await), "bob counts on his own");

    let app = spawn_app_with(|c| c.policy_rules = vec![two_a_day("tool")]).await;
    assert!(!limited(&status(&app, &app.issue("a", None)).await));
    assert!(!limited(&status(&app, &app.issue("b", None)).await));
    assert!(limited(&status(&app, &app.issue("c", None)).await), "the tool's third call, whoever makes it");
}

#[tokio::test]
async fn a_rate_holds_across_replicas() {
    let a = spawn_app_with(|c| c.policy_rules = vec![two_a_day("agent")]).await;
    let Some(url) = a.core.db.postgres_url().map(str::to_string) else { return };
    let b = spawn_app_with(|c| {
        c.database.url = Some(url);
        c.policy_rules = vec![two_a_day("agent")];
    })
    .await;
    let token = a.issue("cursor", None);
    assert!(!limited(&status(&a, &token).await));
    assert!(!limited(&status(&b, &token).await));
    assert!(limited(&status(&a, &token).await), "A counts B's call");
    assert!(limited(&status(&b, &token).await), "and B A's");
}

#[tokio::test]
async fn a_broken_rate_is_refused_when_the_rule_is_saved() {
    let app = spawn_app().await;
    app.add_user("root", true).await;
    let root = app.sign_in("root").await;
    let form = |rate: &'static str, per: &'static str| {
        vec![("draft[pattern]", STATUS), ("draft[action]", "allow"), ("draft[rate]", rate), ("draft[rate_per]", per)]
    };
    let r = app.post_fn(&root, "policy_save", &form("10/fortnight", "")).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("invalid rate"));
    let r = app.post_fn(&root, "policy_save", &form("10/min", "session")).await;
    assert!(r.text().await.unwrap().contains("invalid rate_per"));
    assert_eq!(app.post_fn(&root, "policy_save", &form("10/min", "owner")).await.status(), 200);
    let rules = app.core.policy.rules().unwrap();
    let saved = rules.iter().find(|r| r.pattern == STATUS).unwrap();
    assert_eq!((saved.rate.map(|r| r.to_string()), saved.rate_per.as_str()), (Some("10/min".into()), "owner"));
}
