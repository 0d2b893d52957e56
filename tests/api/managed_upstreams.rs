//! Upstreams run from the browser: an admin adds one by URL with a secret
//! header and an agent (a real rmcp client) calls its tool; who may (not a
//! plain user, not another site, not an agent's token); the secret is never
//! read back (the list, the page, the change log); the config file's names
//! and `stdio_commands` bound what may be added; disable, enable, restart
//! and remove.

use std::time::Duration;

use gatehouse::config::StdioCommand;
use serde_json::Value;

use crate::helpers::*;

const SECRET: &str = "s3cret-header-value";

fn http_form<'a>(name: &'a str, url: &'a str, secret_headers: &'a str, headers: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("draft[name]", name),
        ("draft[kind]", "http"),
        ("draft[url]", url),
        ("draft[headers]", headers),
        ("draft[secret_headers]", secret_headers),
    ]
}

/// The form that adds stdio upstream `name` running command key `command`, with `more` fields.
fn stdio_form(
    name: &'static str,
    command: &'static str,
    more: &[(&'static str, &'static str)],
) -> Vec<(&'static str, &'static str)> {
    let mut form =
        vec![("draft[name]", name), ("draft[kind]", "stdio"), ("draft[command]", command), ("draft[adding]", "1")];
    form.extend_from_slice(more);
    form
}

/// What the upstream saw of the agent's call: its request headers (`None`
/// while it is not there, restarting).
async fn seen_headers(service: &rmcp::service::RunningService<rmcp::RoleClient, crate::proxy::Agent>) -> Option<Value> {
    let result = service.call_tool(tool_params("web__probe_whoami", Value::Null)).await.ok()?;
    let text = &result.content.first()?.as_text()?.text;
    Some(serde_json::from_str::<Value>(text).ok()?["headers"].clone())
}

/// Polls `check` every 25 ms for up to 10 s.
async fn until(app: &TestApp, what: &str, check: impl Fn() -> bool) {
    for _ in 0..400 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{what}: {:?}", app.upstreams.status());
}

#[tokio::test]
async fn an_admin_adds_an_upstream_by_url_and_an_agent_calls_it_with_the_secret_header_never_shown() {
    let fixture = Fixture::start(0).await;
    let app = spawn_app_with(|c| c.policy_rules = vec![allow_rule("web__probe_*")]).await;
    app.add_user("ada", true).await;
    app.add_user("bob", false).await;
    let (ada, bob) = (app.sign_in("ada").await, app.sign_in("bob").await);
    let secret_line = format!("X-Upstream-Key: {SECRET}");
    let mut form = http_form("web", &fixture.url, &secret_line, "X-Team: blue");
    form.push(("draft[adding]", "1"));

    // A plain user may not add one; nor a page of another site with the
    // admin's cookie; nor an agent with its token.
    assert_eq!(app.post_fn(&bob, "upstream_save", &form).await.status(), 403);
    let cross = app
        .client
        .post(app.url("/api/fn/upstream_save"))
        .header("cookie", &ada)
        .header("origin", "https://evil.example")
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), 403, "a cross-site post");
    let token = app.issue_owned("claude", "ada");
    let as_agent = app.same_origin(reqwest::Method::POST, "/api/fn/upstream_save").bearer_auth(&token).form(&form);
    assert_eq!(as_agent.send().await.unwrap().status(), 401, "an agent's token is no browser session");
    assert!(app.core.upstreams.stored().unwrap().specs.is_empty());

    // The admin adds it: it starts, and the agent's call carries both headers.
    let added = app.post_fn(&ada, "upstream_save", &form).await;
    assert_eq!(added.status(), 200, "{}", added.text().await.unwrap());
    app.wait_for_upstream_tool("web__probe_whoami").await;
    let (_, service) = crate::proxy::connect(&app, &token).await;
    let headers = seen_headers(&service).await.expect("the tool answers");
    assert_eq!(headers["x-upstream-key"], SECRET, "{headers}");
    assert_eq!(headers["x-team"], "blue", "{headers}");
    assert!(headers.get("authorization").is_none(), "the agent's token never goes upstream: {headers}");

    // The secret is never read back: not in the list, the page or the change log.
    let listed = app.post_fn(&ada, "managed_upstreams", &[]).await.text().await.unwrap();
    assert!(listed.contains("X-Upstream-Key") && !listed.contains(SECRET), "{listed}");
    let page = app.get_as(&ada, "/upstreams?upstream=web").await.text().await.unwrap();
    assert!(page.contains("Edit web") && page.contains("X-Upstream-Key:"), "the edit form lists its name");
    assert!(!page.contains(SECRET), "the page never carries the secret");
    let changes = app.core.changes.recent("upstream", 10).unwrap();
    assert!(changes.iter().any(|c| c.target == "web" && c.action == "add" && c.actor == "user:ada#1"), "{changes:?}");
    assert!(!format!("{changes:?}").contains(SECRET), "{changes:?}");
    assert_eq!(app.post_fn(&bob, "managed_upstreams", &[]).await.text().await.unwrap().matches("web").count(), 0);

    // An edit that leaves the secret's value blank keeps it; the upstream
    // restarts with the new plain header, and the agent's session stays.
    let edited =
        app.post_fn(&ada, "upstream_save", &http_form("web", &fixture.url, "X-Upstream-Key:", "X-Team: green")).await;
    assert_eq!(edited.status(), 200, "{}", edited.text().await.unwrap());
    let mut headers = Value::Null;
    for _ in 0..200 {
        headers = seen_headers(&service).await.unwrap_or_default();
        if headers["x-team"] == "green" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(headers["x-team"], "green", "{headers}");
    assert_eq!(headers["x-upstream-key"], SECRET, "kept: {headers}");

    // Adding the same name again is refused beside the name field.
    let twice = app.post_fn(&ada, "upstream_save", &form).await;
    assert_eq!(twice.status(), 400);
    assert!(twice.text().await.unwrap().contains("invalid name: an upstream named web is already here"));
    // Two bad fields: both said, each once.
    let both = app.post_fn(&ada, "upstream_save", &http_form("a b", "ftp://x", "", "")).await;
    assert_eq!(both.status(), 400);
    let said = both.text().await.unwrap();
    assert_eq!((said.matches("invalid name:").count(), said.matches("invalid url:").count()), (1, 1), "{said}");
}

#[tokio::test]
async fn test_lists_what_an_upstream_offers_without_saving_and_says_why_it_failed() {
    let fixture = Fixture::start(0).await;
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    app.add_user("bob", false).await;
    let (ada, bob) = (app.sign_in("ada").await, app.sign_in("bob").await);
    fn with(url: &str) -> Vec<(&str, &str)> {
        let mut form = http_form("web", url, "X-Key: k", "");
        form.extend([("draft[adding]", "1"), ("draft[test]", "1")]);
        form
    }

    // Only an admin may make Gatehouse connect somewhere.
    assert_eq!(app.post_fn(&bob, "upstream_save", &with(&fixture.url)).await.status(), 403);

    // It answers: its tools as agents would see them; nothing stored or
    // started; the change log says who tested what (never a secret).
    let tested = app.post_fn(&ada, "upstream_save", &with(&fixture.url)).await;
    let status = tested.status();
    let said = tested.text().await.unwrap();
    assert_eq!(status, 200, "{said}");
    assert!(said.contains("Test passed: web answered") && said.contains("30 tools (web__test_simple_text"), "{said}");
    assert!(said.contains("Nothing was saved."), "{said}");
    assert!(app.core.upstreams.stored().unwrap().specs.is_empty());
    assert!(app.upstreams.status().iter().all(|s| s.name != "web"), "nothing runs");
    let changes = app.core.changes.recent("upstream", 10).unwrap();
    assert!(changes.iter().all(|c| c.action == "test" && c.actor == "user:ada#1"), "{changes:?}");
    assert_eq!(changes.len(), 1, "bob's refused test is not one: {changes:?}");
    assert!(!format!("{changes:?}").contains("X-Key: k"), "{changes:?}");

    // Nothing listens there: said in words, with the status of a bad gateway.
    let refused = app.post_fn(&ada, "upstream_save", &with("http://127.0.0.1:1/mcp?key=hidden")).await;
    assert_eq!(refused.status(), 502);
    let said = refused.text().await.unwrap();
    assert!(said.contains("The test did not reach web: cannot reach http://127.0.0.1:1/mcp"), "{said}");
    assert!(!said.contains("hidden"), "a URL's query is never said: {said}");
    // A bad field is refused beside it before anything connects.
    let bad = app.post_fn(&ada, "upstream_save", &with("ftp://x")).await;
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await.unwrap().contains("invalid url:"));
    // Then the same form saves (Test and Add are one form).
    let mut form = http_form("web", &fixture.url, "X-Key: k", "");
    form.push(("draft[adding]", "1"));
    let saved = app.post_fn(&ada, "upstream_save", &form).await;
    assert_eq!(saved.status(), 200);
    app.wait_for_upstream_tool("web__probe_whoami").await;
}

#[tokio::test]
async fn the_files_names_and_commands_bound_what_is_added_and_each_action_reaches_the_running_upstream() {
    let everything = everything_stdio();
    let app = spawn_app_with(move |c| {
        c.upstream = vec![everything.clone()];
        c.stdio_commands = [(
            "demo".to_string(),
            StdioCommand {
                command: everything.command.clone().unwrap(),
                args: everything.args.clone(),
                env: Default::default(),
                cwd: None,
            },
        )]
        .into();
    })
    .await;
    app.add_user("ada", true).await;
    app.add_user("bob", false).await;
    let (ada, bob) = (app.sign_in("ada").await, app.sign_in("bob").await);
    app.wait_for_upstream_tool("ev__test_simple_text").await;

    let save = |fields: Vec<(&'static str, &'static str)>| {
        let ada = ada.clone();
        let app = &app;
        async move {
            let r = app.post_fn(&ada, "upstream_save", &fields).await;
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    // The file's name is the file's; a program is no allowed command; a
    // stdio upstream takes no headers.
    let (status, body) = save(stdio_form("everything", "demo", &[])).await;
    assert_eq!(status, 400);
    assert!(body.contains("invalid name: gatehouse.toml already has an upstream named everything"), "{body}");
    let (status, body) = save(stdio_form("sh", "/bin/sh", &[])).await;
    assert_eq!(status, 400);
    assert!(body.contains("invalid command:"), "{body}");
    let (status, body) = save(stdio_form("demo", "demo", &[("draft[headers]", "X-A: 1")])).await;
    assert_eq!((status, body.contains("invalid headers:")), (400, true), "{body}");
    // Test runs the allowed command once, lists its tools, stores nothing;
    // a command that is not allowed is refused before anything runs.
    let (status, body) = save(stdio_form("demo", "demo", &[("draft[test]", "1")])).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Test passed: demo answered") && body.contains("demo__"), "{body}");
    let (status, body) = save(stdio_form("sh", "/bin/sh", &[("draft[test]", "1")])).await;
    assert_eq!((status, body.contains("invalid command:")), (400, true), "{body}");
    assert!(app.core.upstreams.stored().unwrap().specs.is_empty(), "a test stores nothing");
    // A prefix another upstream's tools are named under is refused: no
    // tool name, nor a rule written for the file's upstream, reaches it.
    let (status, body) = save(stdio_form("demo", "demo", &[("draft[prefix]", "ev__")])).await;
    assert_eq!(status, 400);
    assert!(body.contains("invalid prefix: The prefix \"ev__\" overlaps everything's"), "{body}");
    assert!(app.core.upstreams.stored().unwrap().specs.is_empty(), "nothing refused was stored");

    // An allowed command runs, as the file lists it.
    let (status, body) = save(stdio_form("demo", "demo", &[("draft[prefix]", "demo__")])).await;
    assert_eq!(status, 200, "{body}");
    app.wait_for_upstream_tool("demo__test_simple_text").await;
    let pid = |name: &str| app.upstreams.status().into_iter().find(|s| s.name == name).and_then(|s| s.pid);
    let act = |name: &'static str, action: &'static str| {
        let ada = ada.clone();
        let app = &app;
        async move { app.post_fn(&ada, "upstream_action", &[("name", name), ("action", action)]).await.status().as_u16() }
    };

    // A plain user may do none of it.
    for action in ["disable", "restart", "remove"] {
        assert_eq!(app.post_fn(&bob, "upstream_action", &[("name", "demo"), ("action", action)]).await.status(), 403);
    }
    // Restart: a new child, for the console's upstream and the file's alike.
    let (demo_pid, file_pid) = (pid("demo").unwrap(), pid("everything").unwrap());
    assert_eq!(act("demo", "restart").await, 200);
    assert_eq!(act("everything", "restart").await, 200);
    until(&app, "both restarted", || {
        pid("demo").is_some_and(|p| p != demo_pid) && pid("everything").is_some_and(|p| p != file_pid)
    })
    .await;
    // Disable stops it and hides its tools; Enable brings them back.
    assert_eq!(act("demo", "disable").await, 200);
    until(&app, "disabled", || app.upstreams.find("demo__test_simple_text").is_none() && pid("demo").is_none()).await;
    assert_eq!(act("demo", "enable").await, 200);
    app.wait_for_upstream_tool("demo__test_simple_text").await;
    // The file's upstream is changed in the file, not here.
    assert_eq!(act("everything", "remove").await, 400);
    assert_eq!(act("everything", "disable").await, 400);
    // Trusted, then removed: an upstream added again under its name is
    // another server, and starts untrusted.
    let trusted = app.post_fn(&ada, "upstream_trust", &[("upstream", "demo"), ("trust", "on")]).await;
    assert_eq!(trusted.status(), 200);
    assert!(app.core.policy.trust("demo").unwrap().trusted());
    assert_eq!(act("demo", "remove").await, 200);
    assert!(!app.core.policy.trust("demo").unwrap().trusted(), "its trust left with it");
    until(&app, "removed", || app.upstreams.status().iter().all(|s| s.name != "demo")).await;
    assert!(app.upstreams.find("ev__test_simple_text").is_some(), "the file's upstream runs on");
    // A stored upstream the file took the name of may go; the running file
    // upstream keeps its restart count, so it is not restarted by that.
    let shadow =
        serde_json::json!({"name": "everything", "transport": {"kind": "http", "url": "http://127.0.0.1:9/mcp"}});
    app.core.upstreams.put(serde_json::from_value(shadow).unwrap(), true).unwrap();
    let file_pid = pid("everything").unwrap();
    assert_eq!(act("everything", "remove").await, 200);
    assert!(app.core.upstreams.get("everything").unwrap().is_none());
    assert_eq!(app.core.upstreams.stored().unwrap().restarts, [("everything".to_string(), 1)]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(pid("everything"), Some(file_pid), "the file's upstream was not restarted");
    let actions: Vec<String> = app
        .core
        .changes
        .recent("upstream", 20)
        .unwrap()
        .into_iter()
        .map(|c| format!("{} {}", c.action, c.target))
        .collect();
    for done in ["add demo", "restart demo", "restart everything", "disable demo", "enable demo", "remove demo"] {
        assert!(actions.iter().any(|a| a == done), "{done} in {actions:?}");
    }
}
