//! Rules on who, where and with which arguments: a rule scoped to agents,
//! owners or upstreams, or with a CEL condition (`when`), decides each call
//! by what it is — with a real rmcp client, through the policy tools, the
//! console's form and the config file — and a condition that cannot be
//! evaluated blocks, never lets a call through.

use gatehouse_core::policy::{Action, Rule};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::helpers::*;

const AUDIT: &str = "gatehouse_audit_recent";

fn config(rule: Rule) -> Rule {
    Rule { source: gatehouse_core::policy::Source::Config, ..rule }
}

async fn call(client: &rmcp::service::RunningService<rmcp::RoleClient, ()>, name: &str, args: Value) -> CallToolResult {
    client.call_tool(tool_params(name, args)).await.expect("a tool result")
}

fn text(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn a_condition_on_the_arguments_decides_each_call() {
    let app = spawn_app_with(|c| {
        c.policy_rules = vec![config(Rule {
            name: "no long audits".into(),
            when: Some("args.limit > 50".into()),
            ..Rule::new(AUDIT.parse().unwrap(), Action::Block)
        })]
    })
    .await;
    let token = app.issue("cursor", None);
    let client = app.connect((), &token).await;

    let short = call(&client, AUDIT, json!({"limit": 10})).await;
    assert_ne!(short.is_error, Some(true), "the condition is false: the read-only default runs it: {short:?}");
    let long = call(&client, AUDIT, json!({"limit": 100})).await;
    assert_eq!(long.is_error, Some(true));
    assert!(text(&long).contains(r#"blocked by policy rule "no long audits""#), "{}", text(&long));

    // The tool stays listed: a condition is decided when the call is made.
    let listed = client.list_all_tools().await.unwrap();
    assert!(listed.iter().any(|t| t.name == AUDIT));

    // Arguments the condition cannot read block (fail closed), and say why.
    for broken in [json!({"limit": "lots"}), json!({})] {
        let refused = call(&client, AUDIT, broken.clone()).await;
        assert_eq!(refused.is_error, Some(true), "{broken}");
        assert!(text(&refused).contains("could not be evaluated"), "{}", text(&refused));
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn scoped_rules_hold_for_the_agents_and_owners_they_name_only() {
    let app = spawn_app_with(|c| {
        c.policy_rules = vec![
            config(Rule {
                name: "cursor reads no audit".into(),
                agents: vec!["cur*".into()],
                ..Rule::new(AUDIT.parse().unwrap(), Action::Block)
            }),
            config(Rule {
                name: "bob's agents ask".into(),
                owners: vec!["bob".into()],
                ..Rule::new("gatehouse_status".parse().unwrap(), Action::Block)
            }),
        ]
    })
    .await;
    app.add_user("ada", false).await;
    app.add_user("bob", false).await;
    let cursor = app.connect((), &app.issue_owned("cursor", "ada")).await;
    let claude = app.connect((), &app.issue_owned("claude", "ada")).await;
    let bobs = app.connect((), &app.issue_owned("claude", "bob")).await;

    let names = |tools: Vec<rmcp::model::Tool>| tools.into_iter().map(|t| t.name.to_string()).collect::<Vec<_>>();
    let cursor_sees = names(cursor.list_all_tools().await.unwrap());
    let claude_sees = names(claude.list_all_tools().await.unwrap());
    let bob_sees = names(bobs.list_all_tools().await.unwrap());
    assert!(!cursor_sees.contains(&AUDIT.to_string()), "blocked for cursor: not listed to it");
    assert!(claude_sees.contains(&AUDIT.to_string()) && claude_sees.contains(&"gatehouse_status".to_string()));
    assert!(!bob_sees.contains(&"gatehouse_status".to_string()) && bob_sees.contains(&AUDIT.to_string()));

    let refused = call(&cursor, AUDIT, json!({"limit": 1})).await;
    assert!(text(&refused).contains(r#"rule "cursor reads no audit""#), "{}", text(&refused));
    assert_ne!(call(&claude, AUDIT, json!({"limit": 1})).await.is_error, Some(true));
    assert_eq!(call(&bobs, "gatehouse_status", json!({})).await.is_error, Some(true));
    assert_ne!(call(&claude, "gatehouse_status", json!({})).await.is_error, Some(true), "ada's agent is not bob's");
    for client in [cursor, claude, bobs] {
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn an_upstream_scope_matches_that_upstreams_tools_only() {
    let app = spawn_app_fronting(everything_stdio(), |c| {
        c.policy_rules = vec![
            allow_rule("ev__test_*"),
            config(Rule {
                name: "everything's text with x".into(),
                upstreams: vec!["every*".into()],
                when: Some(r#""x" in args"#.into()),
                ..Rule::new("*".parse().unwrap(), Action::Block)
            }),
        ]
    })
    .await;
    app.wait_for_upstream_tool("ev__test_simple_text").await;
    let client = app.connect((), &app.issue("cursor", None)).await;
    assert_ne!(call(&client, "ev__test_simple_text", json!({})).await.is_error, Some(true));
    let refused = call(&client, "ev__test_simple_text", json!({"x": 1})).await;
    assert!(text(&refused).contains("everything's text with x"), "{}", text(&refused));
    // Gatehouse's own tools have no upstream: the scope leaves them out.
    assert_ne!(call(&client, "gatehouse_status", json!({})).await.is_error, Some(true));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_policy_tool_saves_a_conditional_rule_once_an_admin_approves() {
    let app = spawn_app().await;
    app.add_user("root", true).await;
    let root = app.sign_in("root").await;
    let token = app.issue("cursor", None);
    let sid = app.open_session(&token).await;
    let rule = json!({
        "name": "small audits only", "pattern": AUDIT, "action": "block",
        "agents": ["cursor"], "when": "args.limit > 5",
    });
    let eid = execution_id(&app.tool_call(&token, &sid, "gatehouse_policy_set", rule).await);
    assert_eq!(app.decide(&root, &eid, "accept").await.status(), 200);
    let saved = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    let saved = &saved["result"]["structuredContent"];
    assert_eq!(saved["name"], "small audits only", "{saved}");
    assert_eq!(saved["when"], "args.limit > 5");
    assert_eq!(saved["agents"], json!(["cursor"]));

    let big = app.tool_call(&token, &sid, AUDIT, json!({"limit": 6})).await;
    assert_eq!(big["result"]["isError"], true, "{big}");
    let small = app.tool_call(&token, &sid, AUDIT, json!({"limit": 5})).await;
    assert_ne!(small["result"]["isError"], true, "{small}");

    // A condition that does not compile is refused at once (nobody is
    // asked to approve a rule that could not be saved), saying where.
    let bad = json!({"pattern": AUDIT, "action": "block", "when": "args.limit >"});
    let refused = app.tool_call(&token, &sid, "gatehouse_policy_set", bad).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(app.core.approvals.pending().is_empty(), "no call waits");
    let message = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert!(message.contains("invalid when: line 1, column"), "{message}");
}

#[tokio::test]
async fn the_console_refuses_a_broken_condition_next_to_its_field_and_saves_a_good_one() {
    let app = spawn_app().await;
    app.add_user("root", true).await;
    app.add_user("ada", false).await;
    let root = app.sign_in("root").await;
    let ada = app.sign_in("ada").await;
    let form = |when: &'static str| {
        vec![
            ("draft[name]", "no pushes to main"),
            ("draft[pattern]", "git__push"),
            ("draft[action]", "block"),
            ("draft[agents]", "cursor, claude-*"),
            ("draft[when]", when),
        ]
    };

    let r = app.post_fn(&root, "policy_save", &form("args.branch == ")).await;
    assert_eq!(r.status(), 400);
    let body = r.text().await.unwrap();
    assert!(body.contains("invalid when: line 1, column"), "{body}");
    let r = app.post_fn(&root, "policy_save", &form("argz.branch == 'main'")).await;
    let body = r.text().await.unwrap();
    assert!(body.contains("unknown name") && body.contains("argz"), "{body}");
    let r = app.post_fn(&root, "policy_preview", &form("args.branch == ")).await;
    assert_eq!(r.status(), 400, "the preview checks it as it is typed");
    // Every bad field is named at once, one line each, so the page marks
    // each beside its field; nothing is saved.
    let mut two_bad = form("args.branch == ");
    two_bad.push(("draft[rate]", "often"));
    two_bad.push(("draft[owners]", "a/b"));
    let r = app.post_fn(&root, "policy_save", &two_bad).await;
    assert_eq!(r.status(), 400);
    let body = r.text().await.unwrap();
    for field in ["when", "rate", "owners"] {
        assert_eq!(body.matches(&format!("invalid {field}: ")).count(), 1, "{field} once: {body}");
    }
    assert!(app.core.policy.rules().unwrap().iter().all(|r| r.name != "no pushes to main"));
    assert_eq!(app.post_fn(&ada, "policy_save", &form(r#"args.branch == "main""#)).await.status(), 403);

    let r = app.post_fn(&root, "policy_save", &form(r#"args.branch == "main""#)).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let rules = app.core.policy.rules().unwrap();
    let saved = rules.iter().find(|r| r.name == "no pushes to main").expect("saved");
    assert_eq!(saved.agents, ["cursor", "claude-*"]);
    assert_eq!(saved.when.as_deref(), Some(r#"args.branch == "main""#));
    let page = app.get_as(&root, "/policies").await.text().await.unwrap();
    assert!(
        page.contains(r#"data-name="no pushes to main""#) && page.contains("agents: cursor, claude-*"),
        "listed with its scope"
    );
    let changes = app.core.changes.recent("policy", 5).unwrap();
    assert!(changes[0].detail.as_deref().unwrap().contains(r#"when args.branch == "main""#), "{:?}", changes[0]);

    assert_eq!(app.post_fn(&root, "policy_remove", &[("name", "no pushes to main")]).await.status(), 200);
    assert!(app.core.policy.rules().unwrap().iter().all(|r| r.name != "no pushes to main"));
}
