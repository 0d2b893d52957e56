//! The users page's server functions and the one-time link: invite → the
//! link sets a password → sign in; links work once and expire; resets;
//! disabling and removing end sessions at once and block sign-in; the last
//! admin is kept; only admins manage users; everyone changes their own
//! password (with the current one) and signs out their other sessions; the
//! Origin checks cover it all; the link is never logged.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::*;

/// A server function call as a page with JavaScript makes it, as `cookie`.
async fn call_fn(app: &TestApp, cookie: &str, endpoint: &str, form: &[(&str, &str)]) -> reqwest::Response {
    app.same_origin(Method::POST, &format!("/api/fn/{endpoint}"))
        .header("cookie", cookie)
        .form(form)
        .send()
        .await
        .unwrap()
}

/// Makes a one-time link through the page, as an admin does, and reads it off
/// the page it is shown on (once).
async fn make_link(app: &TestApp, admin: &str, endpoint: &str, form: &[(&str, &str)]) -> String {
    let r = call_fn(app, admin, endpoint, form).await;
    assert_eq!(r.status(), 200, "{endpoint}: {}", r.text().await.unwrap());
    let shown_at = r.headers()["location"].to_str().unwrap().to_string();
    assert!(shown_at.starts_with("/users?link=link_"), "{shown_at}");
    let page = app.get_as(admin, &shown_at).await.text().await.unwrap();
    let link = page
        .split(r#"data-testid="password-link">"#)
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .unwrap_or_else(|| panic!("no link on the page: {page}"))
        .replace("&amp;", "&");
    let again = app.get_as(admin, &shown_at).await.text().await.unwrap();
    assert!(!again.contains(r#"data-testid="password-link""#), "shown once");
    link
}

fn token_of(link: &str) -> &str {
    link.split("token=").nth(1).unwrap()
}

/// The set-password form, posted as a browser without JavaScript does.
async fn set_password(app: &TestApp, token: &str, password: &str) -> reqwest::Response {
    app.same_origin(Method::POST, "/api/auth/set-password")
        .form(&[("token", token), ("password", password)])
        .send()
        .await
        .unwrap()
}

/// Whether `cookie` still signs anyone in.
async fn signed_in(app: &TestApp, cookie: &str) -> bool {
    match call_fn(app, cookie, "account", &[]).await.status() {
        StatusCode::OK => true,
        StatusCode::UNAUTHORIZED => false,
        other => panic!("unexpected {other}"),
    }
}

async fn users_view(app: &TestApp, cookie: &str) -> Value {
    let r = call_fn(app, cookie, "users", &[]).await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

async fn account_view(app: &TestApp, cookie: &str) -> Value {
    let r = call_fn(app, cookie, "account", &[]).await;
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

fn user<'a>(view: &'a Value, name: &str) -> &'a Value {
    view["users"].as_array().unwrap().iter().find(|u| u["username"] == name).unwrap_or_else(|| panic!("{name}"))
}

#[tokio::test]
async fn an_invite_link_lets_the_new_user_choose_a_password_and_sign_in_once() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;

    let link = make_link(&app, &ada, "invite", &[("username", "grace"), ("admin", "on")]).await;
    assert!(link.starts_with(&format!("{}/set-password?token=", app.address)), "{link}");
    let token = token_of(&link).to_string();
    let listed = users_view(&app, &ada).await;
    assert_eq!(user(&listed, "grace")["status"], "invited");
    assert_eq!(user(&listed, "grace")["is_admin"], true);
    assert!(user(&listed, "grace")["link_expires_ms"].is_i64());
    assert_eq!(app.sign_in_with("grace", "").await.status(), 401, "no password yet");

    // The link opens without signing in and names whose password it sets.
    let page = app.client.get(&link).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("Welcome to Gatehouse") && html.contains(">grace<"), "{html}");

    // Too short a password: back to the form with the reason, the link still good.
    let r = set_password(&app, &token, "short").await;
    assert_eq!(r.status(), 303);
    assert!(r.headers()["location"].to_str().unwrap().contains("error="));
    let r = set_password(&app, &token, "grace's own password").await;
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/");
    let grace = session_cookie(&r);
    assert!(signed_in(&app, &grace).await, "signed in by the link");
    assert_eq!(app.sign_in_with("grace", "grace's own password").await.status(), 200);

    // Once only.
    let again = app
        .same_origin(Method::POST, "/api/auth/set-password")
        .json(&json!({"token": token, "password": "someone else's password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 400);
    assert!(again.text().await.unwrap().contains("no longer valid"));
    let html = app.client.get(&link).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("This link cannot be used"), "{html}");

    // Recorded, and the token itself is nowhere in the stores or the logs.
    let changes = app.core.changes.recent("user", 10).unwrap();
    assert!(changes.iter().any(|c| c.action == "invite" && c.target == "grace" && c.actor == "user:ada#1"));
    assert!(changes.iter().any(|c| c.action == "password" && c.target == "grace"));
    // (What the blocking pool logs is on other threads; the async handlers'
    // lines, the set-password route's included, are captured here.)
    let text = logs.text();
    assert!(text.contains("password set with a one-time link"), "{text}");
    assert!(!text.contains(&token), "the link is never logged");
}

#[tokio::test]
async fn an_expired_link_is_refused() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    let link = make_link(&app, &ada, "invite", &[("username", "grace")]).await;
    app.clock.advance(Duration::from_secs(24 * 3600));
    let r = app
        .same_origin(Method::POST, "/api/auth/set-password")
        .json(&json!({"token": token_of(&link), "password": "grace's own password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("expired"));
    let html = app.client.get(&link).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("has expired"), "{html}");
    assert_eq!(user(&users_view(&app, &ada).await, "grace")["link_expires_ms"], Value::Null);
    // A new link works.
    let fresh = make_link(&app, &ada, "reset-link", &[("username", "grace")]).await;
    assert_eq!(set_password(&app, token_of(&fresh), "grace's own password").await.status(), 303);
    assert_eq!(app.sign_in_with("grace", "grace's own password").await.status(), 200);
}

#[tokio::test]
async fn a_reset_link_sets_a_new_password_and_ends_the_old_sessions() {
    let app = spawn_app().await;
    let (ada, bob) = app.ada_and_bob().await;
    let link = make_link(&app, &ada, "reset-link", &[("username", "bob")]).await;
    assert!(signed_in(&app, &bob).await, "the old password and sessions work until the link is used");
    assert_eq!(app.sign_in_with("bob", PASSWORD).await.status(), 200);
    let html = app.client.get(&link).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("Choose a new password"), "{html}");
    let r = set_password(&app, token_of(&link), "bob's new password").await;
    assert_eq!(r.status(), 303);
    let fresh = session_cookie(&r);
    assert!(!signed_in(&app, &bob).await, "the sessions from before the reset ended");
    assert!(signed_in(&app, &fresh).await);
    assert_eq!(app.sign_in_with("bob", PASSWORD).await.status(), 401);
    assert_eq!(app.sign_in_with("bob", "bob's new password").await.status(), 200);
    assert!(app.core.changes.recent("user", 5).unwrap().iter().any(|c| c.action == "reset" && c.target == "bob"));
}

#[tokio::test]
async fn disabling_a_user_ends_their_sessions_at_once_and_blocks_sign_in() {
    let app = spawn_app().await;
    let (ada, bob) = app.ada_and_bob().await;
    let token = app.issue_owned("bobs-agent", "bob");
    assert_eq!(app.get_as(&bob, "/account").await.status(), 200);
    let r = call_fn(&app, &ada, "user-disabled", &[("username", "bob"), ("disabled", "true")]).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // The very next request with the old cookie is not signed in.
    let page = app.get_as(&bob, "/account").await;
    assert_eq!(page.status(), 303);
    assert!(page.headers()["location"].to_str().unwrap().starts_with("/sign-in"));
    assert!(!signed_in(&app, &bob).await);
    assert_eq!(app.client.get(app.url("/api/live/events")).header("cookie", &bob).send().await.unwrap().status(), 401);
    assert_eq!(app.sign_in_with("bob", PASSWORD).await.status(), 401);
    assert!(app.core.credentials.authenticate(&token).unwrap().is_err(), "their agents' credentials are revoked");
    assert_eq!(user(&users_view(&app, &ada).await, "bob")["status"], "disabled");
    // A disabled user gets no reset link.
    assert_eq!(call_fn(&app, &ada, "reset-link", &[("username", "bob")]).await.status(), 409);
    // Enabled again: the same password works.
    let r = call_fn(&app, &ada, "user-disabled", &[("username", "bob"), ("disabled", "false")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(app.sign_in_with("bob", PASSWORD).await.status(), 200);
    let actions: Vec<String> =
        app.core.changes.recent("user", 5).unwrap().into_iter().map(|c| format!("{} {}", c.action, c.target)).collect();
    assert_eq!(actions[..2], ["enable bob", "disable bob"]);
}

#[tokio::test]
async fn a_disabled_users_open_live_streams_say_signed_out_and_close_at_once() {
    let app = spawn_app().await;
    let (ada, bob) = app.ada_and_bob().await;
    let mut bobs = app.get_as(&bob, "/api/live/events").await;
    let mut adas = app.get_as(&ada, "/api/live/events").await;
    assert_eq!(bobs.status(), 200);
    assert!(String::from_utf8_lossy(&bobs.chunk().await.unwrap().unwrap()).contains("hello"));
    let r = call_fn(&app, &ada, "user-disabled", &[("username", "bob"), ("disabled", "true")]).await;
    assert_eq!(r.status(), 200);
    let mut seen = String::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(chunk) = bobs.chunk().await.unwrap() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(closed.is_ok(), "bob's stream closed: {seen}");
    assert!(seen.contains("event: signed_out\ndata: session ended"), "{seen}");
    // Ada's stream lives on and hears that users changed.
    let mut heard = String::new();
    while !heard.contains("users_changed") {
        let chunk = tokio::time::timeout(Duration::from_secs(5), adas.chunk()).await.unwrap().unwrap().unwrap();
        heard.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(!heard.contains("signed_out"));
}

#[tokio::test]
async fn removing_a_user_ends_their_sessions_and_revokes_their_credentials() {
    let app = spawn_app().await;
    let (ada, bob) = app.ada_and_bob().await;
    let bobs = app.issue_owned("bobs-agent", "bob");
    let adas = app.issue_owned("adas-agent", "ada");
    let r = call_fn(&app, &ada, "user-remove", &[("username", "bob")]).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert!(!signed_in(&app, &bob).await);
    assert_eq!(app.sign_in_with("bob", PASSWORD).await.status(), 401);
    assert!(app.core.credentials.authenticate(&bobs).unwrap().is_err());
    assert!(app.core.credentials.authenticate(&adas).unwrap().is_ok(), "only bob's");
    let view = users_view(&app, &ada).await;
    assert_eq!(view["users"].as_array().unwrap().len(), 1);
    assert_eq!(call_fn(&app, &ada, "user-remove", &[("username", "bob")]).await.status(), 404);
    let removed = &app.core.changes.recent("user", 1).unwrap()[0];
    assert_eq!((removed.action.as_str(), removed.detail.as_deref()), ("remove", Some("1 credential(s) revoked")));
}

#[tokio::test]
async fn the_last_admin_cannot_be_disabled_demoted_or_removed() {
    let app = spawn_app().await;
    let (ada, _) = app.ada_and_bob().await;
    for (endpoint, form) in [
        ("user-disabled", vec![("username", "ada"), ("disabled", "true")]),
        ("user-admin", vec![("username", "ada"), ("admin", "false")]),
        ("user-remove", vec![("username", "ada")]),
    ] {
        let r = call_fn(&app, &ada, endpoint, &form).await;
        assert_eq!(r.status(), 409, "{endpoint}");
        assert!(r.text().await.unwrap().contains("last admin"), "{endpoint}");
    }
    assert!(signed_in(&app, &ada).await);
    // With a second admin, the first may step down.
    assert_eq!(call_fn(&app, &ada, "user-admin", &[("username", "bob"), ("admin", "true")]).await.status(), 200);
    assert_eq!(call_fn(&app, &ada, "user-admin", &[("username", "ada"), ("admin", "false")]).await.status(), 200);
    assert_eq!(account_view(&app, &ada).await["is_admin"], false);
}

#[tokio::test]
async fn only_admins_manage_users() {
    let app = spawn_app().await;
    let (_, bob) = app.ada_and_bob().await;
    for (endpoint, form) in [
        ("invite", vec![("username", "mallory"), ("admin", "on")]),
        ("reset-link", vec![("username", "ada")]),
        ("user-disabled", vec![("username", "ada"), ("disabled", "true")]),
        ("user-admin", vec![("username", "bob"), ("admin", "true")]),
        ("user-remove", vec![("username", "ada")]),
    ] {
        assert_eq!(call_fn(&app, &bob, endpoint, &form).await.status(), 403, "{endpoint}");
        assert_eq!(call_fn(&app, "gatehouse_session=nope", endpoint, &form).await.status(), 401, "{endpoint}");
    }
    assert_eq!(app.core.users.list().unwrap().len(), 2, "nobody was added");
    assert!(app.sign_in_with("ada", PASSWORD).await.status() == 200, "ada untouched");
    // The users page is not his: it says so (403), and where his own account is.
    let page = app.get_as(&bob, "/users").await;
    assert_eq!(page.status(), 403);
    let page = page.text().await.unwrap();
    assert!(page.contains("only an admin may manage users") && page.contains(r#"href="/account""#), "{page}");
    assert!(!page.contains("Add a user") && !page.contains(r#"data-testid="password-link""#), "{page}");
    assert_eq!(account_view(&app, &bob).await["is_admin"], false);
}

#[tokio::test]
async fn changing_ones_own_password_needs_the_current_one_and_keeps_this_session() {
    let app = spawn_app().await;
    app.add_user("bob", false).await;
    let here = app.sign_in("bob").await;
    let elsewhere = app.sign_in("bob").await;
    let change = |current: &'static str, new: &'static str, confirm: &'static str| {
        app.same_origin(Method::POST, "/api/fn/password")
            .header("cookie", &here)
            .form(&[("current", current), ("new", new), ("confirm", confirm)])
            .send()
    };
    assert_eq!(change("wrong password", "bob's new password", "bob's new password").await.unwrap().status(), 403);
    assert_eq!(change(PASSWORD, "bob's new password", "bob's other password").await.unwrap().status(), 400);
    assert_eq!(change(PASSWORD, "short", "short").await.unwrap().status(), 400);
    assert!(signed_in(&app, &elsewhere).await, "nothing changed yet");
    assert_eq!(app.sign_in_with("bob", PASSWORD).await.status(), 200);
    let r = change(PASSWORD, "bob's new password", "bob's new password").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["location"], "/account?changed=password");
    assert!(signed_in(&app, &here).await, "this session stays");
    assert!(!signed_in(&app, &elsewhere).await, "the others end");
    assert_eq!(app.sign_in_with("bob", PASSWORD).await.status(), 401);
    assert_eq!(app.sign_in_with("bob", "bob's new password").await.status(), 200);
}

#[tokio::test]
async fn signing_out_other_sessions_keeps_this_one() {
    let app = spawn_app().await;
    app.add_user("bob", false).await;
    let here = app.sign_in("bob").await;
    let others = [app.sign_in("bob").await, app.sign_in("bob").await];
    assert_eq!(account_view(&app, &here).await["my_sessions"], 3);
    let r = call_fn(&app, &here, "sign-out-others", &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["location"], "/account?signed_out=2");
    assert!(signed_in(&app, &here).await);
    for other in &others {
        assert!(!signed_in(&app, other).await);
    }
    assert_eq!(account_view(&app, &here).await["my_sessions"], 1);
}

#[tokio::test]
async fn user_changes_keep_the_origin_checks() {
    let app = spawn_app().await;
    let (ada, _) = app.ada_and_bob().await;
    let cross_site = |path: &str, origin: Option<&str>| {
        let mut request = app.client.post(app.url(path)).header("cookie", &ada).form(&[("username", "mallory")]);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    for path in ["/api/fn/invite", "/api/fn/user-remove", "/api/fn/password", "/api/fn/sign-out-others"] {
        assert_eq!(cross_site(path, Some("https://evil.example")).await.unwrap().status(), 403, "{path}");
        assert_eq!(cross_site(path, None).await.unwrap().status(), 403, "{path}: a cookie without an Origin");
    }
    assert_eq!(cross_site("/api/auth/set-password", Some("https://evil.example")).await.unwrap().status(), 403);
    assert_eq!(app.core.users.list().unwrap().len(), 2);
}

#[tokio::test]
async fn a_plain_form_post_without_javascript_is_redirected_back_with_the_error() {
    let app = spawn_app().await;
    let (ada, _) = app.ada_and_bob().await;
    let r = app
        .same_origin(Method::POST, "/api/fn/user-remove")
        .header("cookie", &ada)
        .header("accept", "text/html")
        .header("referer", app.url("/users"))
        .form(&[("username", "ada")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302, "a redirect, not a bare error status");
    let to = r.headers()["location"].to_str().unwrap().to_string();
    assert!(to.contains("/users") && to.contains("__err"), "{to}");
    let page = app.get_as(&ada, to.trim_start_matches(&app.address)).await.text().await.unwrap();
    assert!(page.contains("last admin"), "the page shows why");
}

/// Captures what the server logs on this thread (the server runs on the
/// test's current-thread runtime).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn a_sign_in_past_the_session_bound_ends_the_oldest_session() {
    let app = spawn_app_with(|c| c.max_browser_sessions_per_user = 2).await;
    app.add_user("ada", true).await;
    // The test clock stands still: a second between sign-ins tells them apart.
    let first = app.sign_in("ada").await;
    app.clock.advance(std::time::Duration::from_secs(1));
    let second = app.sign_in("ada").await;
    assert!(signed_in(&app, &first).await && signed_in(&app, &second).await);
    // A third sign-in is not refused: the oldest session ends instead.
    app.clock.advance(std::time::Duration::from_secs(1));
    let third = app.sign_in("ada").await;
    assert!(!signed_in(&app, &first).await, "the oldest session ended");
    assert!(signed_in(&app, &second).await && signed_in(&app, &third).await);
}

#[tokio::test]
async fn credentials_per_user_are_bounded_with_an_error_naming_the_limit() {
    let app = spawn_app_with(|c| c.max_credentials_per_user = 2).await;
    let (ada, bob) = app.ada_and_bob().await;
    let issue = |agent: &str, thread: Option<&str>| {
        let mut body = json!({"agent": agent, "owner": "bob"});
        if let Some(thread) = thread {
            body["thread"] = json!(thread);
        }
        app.same_origin(Method::POST, "/api/credentials").header("cookie", &ada).json(&body).send()
    };
    assert_eq!(issue("one", Some("t")).await.unwrap().status(), 201);
    let r = issue("two", None).await.unwrap();
    assert_eq!(r.status(), 201);
    let two: Value = r.json().await.unwrap();
    let refused = issue("three", None).await.unwrap();
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "limit_reached", "{body}");
    assert!(body["message"].as_str().unwrap().contains("max_credentials_per_user"), "{body}");
    // Re-issuing for a thread replaces its credential: still within the bound.
    assert_eq!(issue("one", Some("t")).await.unwrap().status(), 201);
    // Minting on the console says the same, as a sentence (never a 500).
    let r = call_fn(&app, &bob, "mint", &[("agent", "four"), ("thread", ""), ("owner", "")]).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("max_credentials_per_user"));
    // Revoking one makes room.
    let revoked = app
        .same_origin(Method::DELETE, &format!("/api/credentials/{}", two["id"].as_str().unwrap()))
        .header("cookie", &ada)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    assert_eq!(issue("five", None).await.unwrap().status(), 201);
}

#[tokio::test]
async fn the_users_page_is_for_admins_and_an_account_shows_only_its_own() {
    let app = spawn_app().await;
    let (ada, bob) = app.ada_and_bob().await;
    // Bob may not read everyone; the page's data says why, with a 403.
    let r = call_fn(&app, &bob, "users", &[]).await;
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("only an admin may manage users"));
    assert_eq!(users_view(&app, &ada).await["users"].as_array().unwrap().len(), 2);

    // Each account lists its own agents' credentials, an admin's too.
    app.issue_owned("bobs-agent", "bob");
    app.issue_owned("adas-agent", "ada");
    let agents = |view: &Value| -> Vec<String> {
        view["credentials"].as_array().unwrap().iter().map(|c| c["agent"].as_str().unwrap().to_string()).collect()
    };
    let bobs = account_view(&app, &bob).await;
    assert_eq!(bobs["username"], "bob");
    assert_eq!(agents(&bobs), ["bobs-agent"]);
    assert_eq!(agents(&account_view(&app, &ada).await), ["adas-agent"]);
    // Nobody signed in: 401, nothing read.
    let r = app.same_origin(Method::POST, "/api/fn/account").send().await.unwrap();
    assert_eq!(r.status(), 401);
}
