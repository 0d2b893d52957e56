//! Tool profiles: an agent a profile names sees only the tools, prompts and
//! resources it lists. The rest is absent from its lists and refused on
//! call (naming the profile, on the record), by the gate's one decision
//! procedure, whoever asks and however. Several profiles narrow; a profile's
//! rate counts; admins alone change them; a change on one replica holds on
//! the other at once.

use gatehouse_core::audit::HistoryScope;
use gatehouse_core::model::{HistoryFilter, Profile, Source};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::helpers::*;

type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

async fn call(client: &Client, name: &str, args: Value) -> CallToolResult {
    client.call_tool(tool_params(name, args)).await.expect("a tool result")
}

fn text(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join("\n")
}

async fn tool_names(client: &Client) -> Vec<String> {
    let mut names: Vec<String> =
        client.list_all_tools().await.unwrap().into_iter().map(|t| t.name.to_string()).collect();
    names.sort();
    names
}

fn config(profile: Profile) -> Profile {
    Profile { source: Source::Config, ..profile }
}

fn docs_only() -> Profile {
    config(Profile {
        owners: vec!["ada".into()],
        tools: vec!["ev__test_simple_text".into(), "gatehouse_status".into()],
        prompts: vec!["ev__test_simple_prompt".into()],
        resources: vec!["test://static-text".into()],
        ..Profile::new("docs only")
    })
}

#[tokio::test]
async fn a_profile_hides_and_refuses_what_it_does_not_list() {
    let app = spawn_app_fronting(everything_stdio(), |c| {
        allow_test_tools(c);
        c.profiles = vec![docs_only()];
    })
    .await;
    app.add_user("ada", false).await;
    app.add_user("bob", false).await;
    app.wait_for_upstream_tool("ev__test_simple_text").await;
    let adas = app.connect((), &app.issue_owned("cursor", "ada")).await;
    let bobs = app.connect((), &app.issue_owned("cursor", "bob")).await;

    assert_eq!(tool_names(&adas).await, ["ev__test_simple_text", "gatehouse_status", "resume"]);
    let everything = tool_names(&bobs).await;
    assert!(everything.len() > 10 && everything.contains(&"ev__test_image_content".to_string()), "{everything:?}");

    // Called anyway (an agent reads names from anywhere): refused, named, recorded.
    let refused = call(&adas, "ev__test_image_content", json!({})).await;
    assert_eq!(refused.is_error, Some(true));
    assert!(text(&refused).contains(r#"profile "docs only""#), "{}", text(&refused));
    assert_ne!(call(&adas, "ev__test_simple_text", json!({})).await.is_error, Some(true));
    assert_ne!(call(&bobs, "ev__test_image_content", json!({})).await.is_error, Some(true), "bob has no profile");
    // Gatehouse's own tools too: a profile that leaves out the policy tool
    // leaves the agent no way to ask for a wider gate.
    let policy = call(&adas, "gatehouse_policy_set", json!({"pattern": "*", "action": "allow"})).await;
    assert!(text(&policy).contains(r#"profile "docs only""#), "{}", text(&policy));

    let filter = HistoryFilter { outcome: "blocked".into(), ..Default::default() };
    let entries = app.core.approvals.audit().search(&filter, &HistoryScope::Owner("ada".into()), 10).unwrap();
    let by: Vec<(&str, Option<&str>)> = entries.iter().map(|e| (e.tool.as_str(), e.actor.as_deref())).collect();
    assert!(by.contains(&("ev__test_image_content", Some("profile:docs only"))), "{by:?}");

    // Prompts and resources: listed only as the profile says, refused otherwise.
    let prompts: Vec<String> = adas.list_all_prompts().await.unwrap().into_iter().map(|p| p.name).collect();
    assert_eq!(prompts, ["ev__test_simple_prompt"]);
    assert!(bobs.list_all_prompts().await.unwrap().len() > 1);
    let resources: Vec<String> = adas.list_all_resources().await.unwrap().into_iter().map(|r| r.uri.clone()).collect();
    assert_eq!(resources, ["test://static-text"]);
    let refused = adas
        .get_prompt(rmcp::model::GetPromptRequestParams::new("ev__test_prompt_with_image"))
        .await
        .expect_err("outside the profile");
    assert!(refused.to_string().contains("docs only"), "{refused}");
    let refused = adas
        .read_resource(rmcp::model::ReadResourceRequestParams::new("test://static-binary"))
        .await
        .expect_err("outside the profile");
    assert!(refused.to_string().contains("docs only"), "{refused}");
    assert!(adas.read_resource(rmcp::model::ReadResourceRequestParams::new("test://static-text")).await.is_ok());
    assert!(bobs.read_resource(rmcp::model::ReadResourceRequestParams::new("test://static-binary")).await.is_ok());
    for client in [adas, bobs] {
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn several_profiles_narrow_and_a_profiles_rate_counts() {
    let app = spawn_app_with(|c| {
        c.profiles = vec![
            config(Profile {
                owners: vec!["ada".into()],
                tools: vec!["gatehouse_*".into()],
                ..Profile::new("own tools")
            }),
            config(Profile {
                agents: vec!["ada/cursor".into()],
                tools: vec!["gatehouse_status".into(), "ev__*".into()],
                rate: Some("2/day".parse().unwrap()),
                ..Profile::new("cursor")
            }),
        ];
    })
    .await;
    app.add_user("ada", false).await;
    let cursor = app.connect((), &app.issue_owned("cursor", "ada")).await;
    let claude = app.connect((), &app.issue_owned("claude", "ada")).await;
    // Only what both list: the second cannot widen the first.
    assert_eq!(tool_names(&cursor).await, ["gatehouse_status", "resume"]);
    let claude_sees = tool_names(&claude).await;
    assert!(claude_sees.len() > 2 && claude_sees.iter().all(|t| t.starts_with("gatehouse_") || t == "resume"));

    assert_ne!(call(&cursor, "gatehouse_status", json!({})).await.is_error, Some(true));
    assert_ne!(call(&cursor, "gatehouse_status", json!({})).await.is_error, Some(true));
    let over = call(&cursor, "gatehouse_status", json!({})).await;
    assert_eq!(over.is_error, Some(true));
    assert!(text(&over).contains(r#"rate limit of profile "cursor""#), "{}", text(&over));
    assert_eq!(over.structured_content.as_ref().unwrap()["profile"], "cursor");
    assert_ne!(call(&claude, "gatehouse_status", json!({})).await.is_error, Some(true), "claude is not held to it");
    for client in [cursor, claude] {
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn admins_alone_change_profiles_and_a_bad_one_is_refused_beside_its_field() {
    let app = spawn_app().await;
    app.add_user("root", true).await;
    app.add_user("ada", false).await;
    app.add_user("bob", false).await;
    let (root, ada) = (app.sign_in("root").await, app.sign_in("ada").await);
    let form = |name: &'static str, owners: &'static str, tools: &'static str, rate: &'static str| {
        vec![("draft[name]", name), ("draft[owners]", owners), ("draft[tools]", tools), ("draft[rate]", rate)]
    };
    let plain = app.post_fn(&ada, "profile_save", &form("mine", "ada", "*", "")).await;
    assert_eq!(plain.status(), 403, "a plain user cannot loosen (or set) what agents see");
    for (bad, field) in [
        (form("x", "", "*", ""), "invalid agents"),
        (form("x", "ada", "a*b", ""), "invalid tools"),
        (form("x", "ada", "*", "often"), "invalid rate"),
        (form("", "ada", "*", ""), "invalid name"),
    ] {
        let r = app.post_fn(&root, "profile_save", &bad).await;
        assert_eq!(r.status(), 400);
        let body = r.text().await.unwrap();
        assert!(body.contains(field), "{field}: {body}");
    }
    assert!(app.core.policy.rules().unwrap().profiles().is_empty(), "nothing was saved");

    let token = app.issue_owned("cursor", "ada");
    let agent = app.connect((), &token).await;
    assert!(tool_names(&agent).await.len() > 2);
    let saved = app.post_fn(&root, "profile_save", &form("ada's", "ada", "gatehouse_status", "")).await;
    assert_eq!(saved.status(), 200);
    assert_eq!(tool_names(&agent).await, ["gatehouse_status", "resume"], "at once, on the next list");

    // The agents page says it; the tools page lists what the agent sees.
    let agents: Value = app.post_fn(&ada, "agents", &[]).await.json().await.unwrap();
    assert_eq!(agents["profiles"][0], json!([["cursor", "ada"], ["ada's"]]), "{}", agents["profiles"]);
    let seen: Value = app.post_fn(&ada, "tools", &[("agent", "ada/cursor")]).await.json().await.unwrap();
    let names: Vec<&str> =
        seen["tools"].as_array().unwrap().iter().map(|t| t["tool"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["gatehouse_status", "resume"]);
    assert_eq!(seen["seen_as"]["profiles"], json!(["ada's"]));
    let bob = app.sign_in("bob").await;
    let other = app.post_fn(&bob, "tools", &[("agent", "ada/cursor")]).await;
    assert_eq!(other.status(), 403, "bob may not look through ada's agent's eyes");

    let changes = app.core.changes.recent("profile", 5).unwrap();
    assert_eq!((changes[0].actor.as_str(), changes[0].action.as_str()), ("user:root#1", "set"));
    assert_eq!(app.post_fn(&ada, "profile_remove", &[("name", "ada's")]).await.status(), 403);
    assert_eq!(app.post_fn(&root, "profile_remove", &[("name", "ada's")]).await.status(), 200);
    assert!(tool_names(&agent).await.len() > 2);
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_stored_profile_that_does_not_read_hides_everything() {
    let app = spawn_app().await;
    let token = app.issue("cursor", None);
    app.core
        .db
        .conn()
        .unwrap()
        .execute("INSERT INTO tool_profiles (name, spec, updated_at) VALUES ('odd', '{\"nme\": 1}', 0)", &[])
        .unwrap();
    let app = app.restart(std::time::Duration::ZERO, |_| {}).await;
    let agent = app.connect((), &token).await;
    assert_eq!(tool_names(&agent).await, ["resume"], "fails closed");
    let refused = call(&agent, "gatehouse_status", json!({})).await;
    assert!(text(&refused).contains(r#"profile "odd""#), "{}", text(&refused));
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_profile_saved_on_one_replica_holds_on_the_other() {
    let a = spawn_app().await;
    let Some(url) = a.core.db.postgres_url().map(str::to_string) else { return };
    let b = spawn_app_with(|c| c.database.url = Some(url)).await;
    a.add_user("ada", false).await;
    let token = a.issue_owned("cursor", "ada");
    let on_b = b.connect((), &token).await;
    assert!(tool_names(&on_b).await.len() > 2);
    let profile = Profile { owners: vec!["ada".into()], tools: vec!["gatehouse_status".into()], ..Profile::new("p") };
    a.core.policy.set_profile(profile).unwrap();
    assert_eq!(tool_names(&on_b).await, ["gatehouse_status", "resume"]);
    assert_eq!(call(&on_b, "gatehouse_audit_recent", json!({})).await.is_error, Some(true));
    a.core.policy.remove_profile("p").unwrap();
    assert!(tool_names(&on_b).await.len() > 2);
    on_b.cancel().await.unwrap();
}
