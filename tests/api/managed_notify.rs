//! Notification targets run from the browser: an admin adds one and it
//! hears the next paused call, signed; who may (not a plain user, not
//! another site, not an agent's token); the URL's path and the secret are
//! never read back (the list, the page, the change log); an edit that
//! leaves them blank keeps them; send a test, disable, remove; the config
//! file's targets are its own.

use std::time::Duration;

use gatehouse::notify::Format;
use serde_json::Value;

use crate::helpers::*;
use crate::notify::{Behaviour, Receiver, SECRET, gated_call, verify};

fn target_form<'a>(name: &'a str, format: &'a str, url: &'a str, secret: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![("draft[name]", name), ("draft[format]", format), ("draft[url]", url), ("draft[secret]", secret)]
}

/// Waits (up to 10 s) until the running targets satisfy `check`.
async fn until(app: &TestApp, what: &str, check: impl Fn(&[gatehouse_app::server_fns::NotifyTargetInfo]) -> bool) {
    for _ in 0..400 {
        if check(&app.state.notify.notify_targets()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{what}: {:?}", app.state.notify.notify_targets());
}

#[tokio::test]
async fn an_admin_adds_a_target_that_hears_the_next_call_signed_and_its_url_and_secret_are_never_shown() {
    let mut receiver = Receiver::start(Behaviour::Accept).await;
    let app = spawn_app().await;
    let (ada, bob) = app.ada_and_bob().await;
    let mut form = target_form("ops", "json", &receiver.url, SECRET);
    form.push(("draft[adding]", "1"));

    // A plain user may not add one; nor a page of another site with the
    // admin's cookie; nor an agent with its token.
    assert_eq!(app.post_fn(&bob, "notify_save", &form).await.status(), 403);
    let cross = app
        .client
        .post(app.url("/api/fn/notify_save"))
        .header("cookie", &ada)
        .header("origin", "https://evil.example")
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), 403, "a cross-site post");
    let token = app.issue_owned("claude", "ada");
    let as_agent = app.same_origin(reqwest::Method::POST, "/api/fn/notify_save").bearer_auth(&token).form(&form);
    assert_eq!(as_agent.send().await.unwrap().status(), 401, "an agent's token is no browser session");
    assert!(app.core.notify.all().unwrap().is_empty());

    // The admin adds it: the next paused call is announced to it, signed.
    let added = app.post_fn(&ada, "notify_save", &form).await;
    assert_eq!(added.status(), 200, "{}", added.text().await.unwrap());
    until(&app, "the target runs", |t| t.iter().any(|t| t.name == "ops" && !t.from_file)).await;
    let eid = gated_call(&app, "claude", "files_*").await;
    let request = receiver.next().await;
    verify(&request.headers, &request.body);
    let body: Value = serde_json::from_str(&request.body).unwrap();
    assert_eq!(body["executionId"], eid.as_str());

    // Its URL's path and query and its secret are never read back.
    let host = receiver.url.split('/').nth(2).unwrap();
    let listed = app.post_fn(&ada, "notify_targets", &[]).await.text().await.unwrap();
    assert!(listed.contains(&format!("http://{host}/…")) && listed.contains("\"secret_set\":true"), "{listed}");
    let page = app.get_as(&ada, "/upstreams?target=ops").await.text().await.unwrap();
    assert!(page.contains("Edit ops") && page.contains("Send a test"), "the edit form and the actions");
    for text in [&listed, &page] {
        assert!(!text.contains(SECRET) && !text.contains("query-secret") && !text.contains("/hook"), "{text}");
    }
    let changes = app.core.changes.recent("notify", 10).unwrap();
    assert!(changes.iter().any(|c| c.target == "ops" && c.action == "add" && c.actor == "user:ada#1"), "{changes:?}");
    let logged = format!("{changes:?}");
    assert!(!logged.contains(SECRET) && !logged.contains("query-secret") && !logged.contains("/hook"), "{logged}");
    let as_bob = app.post_fn(&bob, "notify_targets", &[]).await.text().await.unwrap();
    assert!(!as_bob.contains("ops"), "a plain user sees no targets: {as_bob}");
    assert_eq!(app.post_fn(&bob, "notify_action", &[("name", "ops"), ("action", "test")]).await.status(), 403);
    // Nor may a page of another site remove it (or send a test) with the admin's cookie.
    for action in ["remove", "test", "disable"] {
        let cross = app
            .client
            .post(app.url("/api/fn/notify_action"))
            .header("cookie", &ada)
            .header("origin", "https://evil.example")
            .form(&[("name", "ops"), ("action", action)])
            .send()
            .await
            .unwrap();
        assert_eq!(cross.status(), 403, "a cross-site {action}");
    }
    assert!(app.core.notify.get("ops").unwrap().is_some_and(|t| t.enabled));
    let quiet = app.core.changes.recent("notify", 10).unwrap();
    assert_eq!(quiet.len(), 1, "only the add: {quiet:?}");

    // Send a test: the receiver gets a signed test message, and the admin hears it arrived.
    let tested = app.post_fn(&ada, "notify_action", &[("name", "ops"), ("action", "test")]).await;
    assert_eq!(tested.status(), 200);
    assert!(tested.text().await.unwrap().contains("accepted it"));
    let request = receiver.next().await;
    verify(&request.headers, &request.body);
    assert_eq!(serde_json::from_str::<Value>(&request.body).unwrap()["event"], "test");

    // An edit that leaves the URL and secret blank keeps both.
    let mut edit = target_form("ops", "json", "", "");
    edit.push(("draft[tools]", "files__*, search__*"));
    let edited = app.post_fn(&ada, "notify_save", &edit).await;
    assert_eq!(edited.status(), 200, "{}", edited.text().await.unwrap());
    until(&app, "the edit runs", |t| t.iter().any(|t| t.tools == ["files__*", "search__*"])).await;
    let stored = app.core.notify.get("ops").unwrap().unwrap();
    assert_eq!((stored.url.as_str(), stored.secret.as_deref()), (receiver.url.as_str(), Some(SECRET)));
    // Pointed at another host, it must be given the secret again.
    let moved = app.post_fn(&ada, "notify_save", &target_form("ops", "json", "https://collector.example/in", "")).await;
    assert_eq!(moved.status(), 400);
    assert!(moved.text().await.unwrap().contains("invalid secret: Give the secret again"));

    // Disabled, it hears nothing; removed, it is gone.
    let act = |action: &'static str| {
        let (app, ada) = (&app, ada.clone());
        async move { app.post_fn(&ada, "notify_action", &[("name", "ops"), ("action", action)]).await.status() }
    };
    assert_eq!(act("disable").await, 200);
    until(&app, "disabled", |t| t.iter().any(|t| t.name == "ops" && !t.enabled)).await;
    let _ = gated_call(&app, "claude", "files_two_*").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(receiver.rx.try_recv().is_err(), "a disabled target hears nothing");
    assert_eq!(act("remove").await, 200);
    until(&app, "removed", |t| t.is_empty()).await;
    let actions: Vec<String> = app.core.changes.recent("notify", 10).unwrap().into_iter().map(|c| c.action).collect();
    assert_eq!(actions, ["remove", "disable", "edit", "add"], "every change in the change log, newest first");
}

#[tokio::test]
async fn the_files_targets_are_its_own_and_every_bad_field_is_said_beside_it() {
    let mut receiver = Receiver::start(Behaviour::Accept).await;
    let file_target = receiver.target("ops-file", Format::Json, Some(SECRET));
    let app = spawn_app_with(move |c| c.notify_targets = vec![file_target]).await;
    let (ada, _) = app.ada_and_bob().await;
    let save = |fields: Vec<(&'static str, &'static str)>| {
        let (app, ada) = (&app, ada.clone());
        async move {
            let mut fields = fields;
            fields.push(("draft[adding]", "1"));
            let r = app.post_fn(&ada, "notify_save", &fields).await;
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (status, body) = save(target_form("ops-file", "slack", "https://hooks.slack.com/services/T/B/x", "")).await;
    assert_eq!(status, 400);
    assert!(body.contains("invalid name: gatehouse.toml already has a notification target named ops-file"), "{body}");
    let (status, body) = save(target_form("hook", "json", "https://hooks.example/in", "")).await;
    assert_eq!(status, 400);
    assert!(body.contains("invalid secret: Give a signing key"), "a JSON target added here is signed: {body}");
    let mut bad = target_form("a b", "ntfy", "ftp://x", "");
    bad.push(("draft[timeout]", "soon"));
    bad.push(("draft[tools]", "a*b"));
    let (status, body) = save(bad).await;
    assert_eq!(status, 400);
    for field in ["name", "url", "tools", "timeout"] {
        assert_eq!(body.matches(&format!("invalid {field}:")).count(), 1, "{field}, once: {body}");
    }
    let (status, body) =
        save(target_form("slack", "slack", "https://hooks.slack.com/services/T/B/x", "0123456789abcdef")).await;
    assert_eq!(status, 400);
    assert!(body.contains("invalid secret: A Slack webhook takes no secret"), "{body}");
    assert!(app.core.notify.all().unwrap().is_empty(), "nothing refused was stored");

    // The file's target takes a test, not a switch.
    let act = |action: &'static str| {
        let (app, ada) = (&app, ada.clone());
        async move {
            let r = app.post_fn(&ada, "notify_action", &[("name", "ops-file"), ("action", action)]).await;
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    assert_eq!(act("test").await.0, 200);
    assert_eq!(receiver.next_json().await.1["event"], "test");
    let (status, body) = act("disable").await;
    assert_eq!(status, 400);
    assert!(body.contains("ops-file is in gatehouse.toml"), "{body}");
    assert_eq!(act("remove").await.0, 400);

    // A stored target the file took the name of does not run: it is said,
    // and Remove takes it away while the file's runs on.
    let shadowed = serde_json::json!({"name": "ops-file", "url": "https://ntfy.example/t", "format": "ntfy"});
    app.core.notify.put(serde_json::from_value(shadowed).unwrap(), true).unwrap();
    let listed: Value = app.post_fn(&ada, "notify_targets", &[]).await.json().await.unwrap();
    assert_eq!(listed["idle"], serde_json::json!(["ops-file"]), "{listed}");
    assert_eq!(act("remove").await.0, 200);
    assert!(app.core.notify.all().unwrap().is_empty());
    assert_eq!(app.state.notify.notify_targets().len(), 1, "the file's runs on");
    // A test of a target nobody configured is refused plainly.
    let r = app.post_fn(&ada, "notify_action", &[("name", "nobody"), ("action", "test")]).await;
    assert_eq!(r.status(), 400);
}
