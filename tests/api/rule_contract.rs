//! One rule contract: the config file, the policy tool and the console read
//! the same rule the same way, and a rule that does not parse is refused
//! wherever it is written, never half-applied.

use std::path::Path;

use gatehouse::config::{Config, FileConfig, Overrides};
use gatehouse_core::policy::{Action, Per, Rule, Source};
use serde_json::{Value, json};

use crate::helpers::*;

const SET_RULE: &str = "gatehouse_policy_set";

/// The config file's rules, or the error a start would print.
fn from_toml(text: &str) -> Result<Vec<Rule>, String> {
    let tree = FileConfig::parse(Path::new("gatehouse.toml"), text).map_err(|e| e.to_string())?;
    Config::resolve(tree, &Overrides::default()).map(|c| c.policy_rules).map_err(|e| e.to_string())
}

/// Claude (an agent of admin ada) asks for `arguments` to be saved; ada
/// approves; the answer of the run.
async fn through_the_tool(app: &TestApp, ada: &str, arguments: Value) -> Value {
    let token = app.issue_owned("claude", "ada");
    let sid = app.open_session(&token).await;
    let paused = app.tool_call(&token, &sid, SET_RULE, arguments).await;
    let eid = execution_id(&paused);
    assert_eq!(app.decide(ada, &eid, "accept").await.status(), 200);
    app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await
}

#[tokio::test]
async fn one_rule_reads_the_same_from_the_config_file_the_policy_tool_and_the_console() {
    let toml = r#"
[[policy]]
name = "pushes"
pattern = "git__*"
action = "require_approval"
human_only = true
agents = ["ada/cursor", "*/ci"]
upstreams = ["git"]
when = 'args.branch == "main"'
rate = "10/min"
rate_per = "owner"
"#;
    let from_config = from_toml(toml).unwrap().remove(0);
    assert_eq!(from_config.source, Source::Config);
    assert_eq!((from_config.rate.unwrap().count, from_config.rate_per), (10, Per::Owner));

    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    // The policy tool: the same fields in JSON (its older camelCase names too).
    let answer = through_the_tool(
        &app,
        &ada,
        json!({
            "name": "pushes", "pattern": "git__*", "action": "require_approval", "humanOnly": true,
            "agents": ["ada/cursor", "*/ci"], "upstreams": ["git"], "when": "args.branch == \"main\"",
            "rate": "10/min", "rate_per": "owner",
        }),
    )
    .await;
    let result = &answer["result"];
    assert_eq!(result["isError"], false, "{answer}");
    // It answers with the contract itself: what it was given, as saved.
    let answered: Rule = serde_json::from_value(result["structuredContent"].clone()).unwrap();
    let from_tool = app.core.policy.rules().unwrap().iter().find(|r| r.name == "pushes").cloned().unwrap();
    assert_eq!(answered, from_tool);

    // The console's editor: the same rule as its form holds it.
    let form = [
        ("draft[name]", "pushes-console"),
        ("draft[pattern]", " git__* "),
        ("draft[action]", "require_approval"),
        ("draft[human_only]", "on"),
        ("draft[agents]", "ada/cursor, */ci"),
        ("draft[upstreams]", "git"),
        ("draft[when]", r#"args.branch == "main""#),
        ("draft[rate]", "10 / min"),
        ("draft[rate_per]", "owner"),
    ];
    let r = app.post_fn(&ada, "policy_save", &form).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let from_console = app.core.policy.rules().unwrap().iter().find(|r| r.name == "pushes-console").cloned().unwrap();

    let same = |r: &Rule| Rule { name: "pushes".into(), source: Source::Database, ..r.clone() };
    assert_eq!(same(&from_config), same(&from_tool), "config file and policy tool");
    assert_eq!(same(&from_console), same(&from_tool), "console and policy tool");
}

#[tokio::test]
async fn a_rule_that_does_not_parse_is_refused_wherever_it_is_written() {
    // The config file: the start is refused, naming the rule's key.
    for (line, says) in [
        ("rate = \"10/fortnight\"", "rate"),
        ("rate_per = \"team\"", "rate_per"),
        ("action = \"deny\"", "action"),
        ("humna_only = true", "humna_only"),
        ("pattern = \"a*b\"", "pattern"),
    ] {
        let mut toml = String::from("[[policy]]\n");
        if !line.starts_with("action") {
            toml.push_str("action = \"block\"\n");
        }
        if !line.starts_with("pattern") {
            toml.push_str("pattern = \"git__*\"\n");
        }
        toml.push_str(line);
        let err = from_toml(&toml).unwrap_err();
        assert!(err.contains(says), "{line}: {err}");
    }

    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    // The policy tool: refused at once, before anyone is asked.
    let token = app.issue_owned("claude", "ada");
    let sid = app.open_session(&token).await;
    for bad in [
        json!({"pattern": "git__*", "action": "allow", "rate": "10/fortnight"}),
        json!({"pattern": "git__*", "action": "allow", "rate_per": "team"}),
        json!({"pattern": "git__*", "action": "allow", "when": "args.x =="}),
        json!({"pattern": "git__*", "action": "allow", "source": "config"}),
        json!({"pattern": "git__*", "action": "allow", "approval_ttl": "5m"}),
    ] {
        let reply = app.tool_call(&token, &sid, SET_RULE, bad.clone()).await;
        assert_eq!(reply["result"]["isError"], true, "{bad}: {reply}");
        assert_ne!(reply["result"]["structuredContent"]["status"], "user_approval_required", "{bad}: nobody is asked");
    }
    assert!(app.core.approvals.pending().is_empty(), "no call waits");
    // The console: 400, naming the field.
    let r = app
        .post_fn(
            &ada,
            "policy_save",
            &[("draft[pattern]", "git__*"), ("draft[action]", "allow"), ("draft[rate]", "ten")],
        )
        .await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("invalid rate"));
    assert!(app.core.policy.rules().unwrap().is_empty(), "nothing was saved");

    // A saved row that no longer reads (written by hand, or by another
    // version) blocks what it names, and the policies page shows it.
    app.core
        .db
        .conn()
        .unwrap()
        .execute(
            "INSERT INTO policy_rules (name, pattern, action, human_only, agents, owners, upstreams, when_expr, updated_at, rate, rate_per, shadow)
             VALUES ('odd', 'gatehouse_status', 'allow', 0, '[]', '[]', '[]', NULL, 0, '10/fortnight', NULL, 0)",
            &[],
        )
        .unwrap();
    // Read at the next start (on PostgreSQL, at once on every replica).
    let app = app.restart(std::time::Duration::ZERO, |_| {}).await;
    let sid = app.open_session(&token).await;
    let rules = app.core.policy.rules().unwrap();
    let odd = rules.iter().find(|r| r.name == "odd").unwrap();
    assert_eq!((odd.action, odd.rate), (Action::Block, None), "fails closed, never half-applied");
    let reply = app.tool_call(&token, &sid, "gatehouse_status", json!({})).await;
    assert_eq!(reply["result"]["isError"], true, "{reply}");
}
