//! Browser-facing rules: sign-in, cookies, CSRF and framing guards, page gating.

use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn pages_redirect_to_sign_in_and_carry_framing_guards() {
    let app = spawn_app().await;
    let r = app.client.get(format!("{}/?tab=x", app.address)).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/sign-in?next=%2F%3Ftab%3Dx");
    let r = app.client.get(format!("{}/sign-in", app.address)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    assert!(r.headers()["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    let html = r.text().await.unwrap();
    assert!(html.contains(r#"action="/api/auth/sign-in""#));
    assert!(html.contains("/pkg/gatehouse."), "hydration script is linked");
}

/// The bundle a page links under its content hash, stored compressed and
/// kept for a year; pages themselves compressed as the browser accepts.
#[tokio::test]
async fn the_bundle_is_hashed_precompressed_and_kept_and_pages_are_compressed() {
    let app = spawn_app().await;
    let html = app.client.get(app.url("/sign-in")).send().await.unwrap().text().await.unwrap();
    let linked = |ext: &str| {
        let at = html.find(&format!(".{ext}\"")).unwrap_or_else(|| panic!("no .{ext} linked in {html}"));
        let start = html[..at].rfind("/pkg/").unwrap();
        html[start..at + ext.len() + 1].to_string()
    };
    let (js, wasm, css) = (linked("js"), linked("wasm"), linked("css"));
    let hash = js.trim_start_matches("/pkg/gatehouse.").trim_end_matches(".js").to_string();
    assert_eq!(hash.len(), 16, "a content hash in {js}");
    assert_eq!(wasm, format!("/pkg/gatehouse.{hash}.wasm"));
    assert_eq!(css, format!("/pkg/gatehouse.{hash}.css"));

    let get = |path: String, encoding: &'static str| {
        app.client.get(app.url(&path)).header("accept-encoding", encoding).send()
    };
    let plain = get(wasm.clone(), "identity").await.unwrap();
    assert_eq!(plain.status(), 200);
    assert_eq!(plain.headers()["cache-control"], "public, max-age=31536000, immutable");
    assert!(plain.headers().get("content-encoding").is_none());
    assert_eq!(plain.headers()["content-type"], "application/wasm");
    let plain_len = plain.bytes().await.unwrap().len();
    for (accept, sent) in [("gzip, deflate, br, zstd", "br"), ("gzip", "gzip")] {
        let r = get(wasm.clone(), accept).await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-encoding"], sent, "{accept}");
        assert_eq!(r.headers()["vary"], "accept-encoding");
        assert_eq!(r.headers()["cache-control"], "public, max-age=31536000, immutable");
        let len = r.bytes().await.unwrap().len();
        assert!(len * 2 < plain_len, "{sent}: {len} of {plain_len} bytes");
    }
    // Another build's name is not this build's file.
    let stale = get(format!("/pkg/gatehouse.{}.js", "0".repeat(16)), "br").await.unwrap();
    assert_eq!(stale.status(), 404);
    // The plain name still works, revalidated.
    let r = get("/pkg/gatehouse.js".into(), "br").await.unwrap();
    assert_eq!(r.headers()["cache-control"], "no-cache");
    let etag = r.headers()["etag"].clone();
    let again = app
        .client
        .get(app.url("/pkg/gatehouse.js"))
        .header("accept-encoding", "br")
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);

    // The HTML: compressed when asked, smaller, and still private.
    let page = app.client.get(app.url("/sign-in")).header("accept-encoding", "br").send().await.unwrap();
    assert_eq!(page.headers()["content-encoding"], "br");
    assert_eq!(page.headers()["cache-control"], "no-store");
    assert!(page.bytes().await.unwrap().len() * 2 < html.len());
}

#[tokio::test]
async fn sign_in_sets_an_http_only_lax_cookie_and_sign_out_ends_it() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let bad = app.sign_in_with("ada", "nope nope").await;
    assert_eq!(bad.status(), 401);
    let r = app.sign_in_with("ada", PASSWORD).await;
    assert_eq!(r.status(), 200);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.starts_with("gatehouse_session="), "{cookie}");
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Path=/"), "{cookie}");
    let session = cookie.split(';').next().unwrap().to_string();

    let home = app.get_as(&session, "/").await;
    assert_eq!(home.status(), 200);
    let html = home.text().await.unwrap();
    assert!(html.contains("At a glance"), "home renders on the server");

    let out =
        app.same_origin(reqwest::Method::POST, "/api/auth/sign-out").header("cookie", &session).send().await.unwrap();
    assert_eq!(out.status(), 200);
    let home = app.get_as(&session, "/").await;
    assert_eq!(home.status(), 303, "the ended session no longer signs in");
}

#[tokio::test]
async fn form_sign_in_redirects_to_next_and_refuses_open_redirects() {
    let app = spawn_app().await;
    app.add_user("ada", false).await;
    let form = |password: &'static str, next: &'static str| {
        app.same_origin(reqwest::Method::POST, "/api/auth/sign-in")
            .form(&[("username", "ada"), ("password", password), ("next", next)])
            .send()
    };
    let r = form(PASSWORD, "/?x=1").await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/?x=1");
    let r = form(PASSWORD, "//evil.example/").await.unwrap();
    assert_eq!(r.headers()["location"], "/");
    let r = form("wrong password", "/").await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/sign-in?next=%2F");
    // The refusal comes back in a one-time cookie, with the name typed kept.
    let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Max-Age=60"), "{set}");
    let cookie = set.split(';').next().unwrap().to_string();
    assert_eq!(cookie, "gatehouse_sign_in=username=ada");
    let page = app.client.get(format!("{}/sign-in", app.address)).header("cookie", &cookie).send().await.unwrap();
    let page = page.text().await.unwrap();
    assert!(page.contains("That name and password did not match."), "the page says it");
    assert!(page.contains(r#"name="username""#) && page.contains(r#"value="ada""#), "and keeps the name");
    let again = app.client.get(format!("{}/sign-in", app.address)).send().await.unwrap().text().await.unwrap();
    assert!(!again.contains("did not match"), "without the cookie (cleared once read), nothing stale");
}

#[tokio::test]
async fn state_changing_requests_from_another_origin_are_refused() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let url = format!("{}/api/auth/sign-in", app.address);
    let body = json!({"username":"ada","password":PASSWORD});
    let r = app.client.post(&url).header("origin", "https://evil.example").json(&body).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "forbidden_origin");
    // Another local port is another origin, even though it is the same site.
    let r = app.client.post(&url).header("origin", "http://127.0.0.1:1").json(&body).send().await.unwrap();
    assert_eq!(r.status(), 403);
    // A cookie-borne POST without any Origin is refused too.
    let r =
        app.client.post(app.url("/api/auth/sign-out")).header("cookie", "gatehouse_session=x").send().await.unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn setup_link_creates_the_admin_once() {
    let app = spawn_app().await;
    let token = app.core.users.new_setup_token().unwrap().unwrap();
    let setup = |username: &str| {
        app.same_origin(reqwest::Method::POST, "/api/auth/setup")
            .json(&json!({"token": token, "username": username, "password": "long enough pw"}))
            .send()
    };
    let r = setup("root").await.unwrap();
    assert_eq!(r.status(), 201);
    assert!(r.headers()["set-cookie"].to_str().unwrap().contains("HttpOnly"));
    let r = setup("root2").await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(app.core.users.count().unwrap(), 1);
}

#[tokio::test]
async fn https_public_url_uses_host_prefixed_secure_cookies() {
    let app = spawn_app_with(|c| c.public_url = Some("https://gate.example.com".parse().unwrap())).await;
    app.add_user("ada", true).await;
    let r = app
        .client
        .post(format!("{}/api/auth/sign-in", app.address))
        .header("origin", "https://gate.example.com")
        .json(&json!({"username":"ada","password":PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.starts_with("__Host-gatehouse_session=") && cookie.contains("Secure"), "{cookie}");
}

#[tokio::test]
async fn live_events_need_a_session_and_stream_changes() {
    let app = spawn_app().await;
    let r = app.client.get(format!("{}/api/live/events", app.address)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    app.add_user("ada", true).await;
    let session = app.sign_in("ada").await;
    let mut stream = app.get_as(&session, "/api/live/events").await;
    assert_eq!(stream.status(), 200);
    let first = stream.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("hello"));
    let token = app.issue("agent", None);
    let _sid = app.open_session(&token).await;
    let mut seen = String::new();
    while !seen.contains("sessions_changed") {
        let chunk =
            tokio::time::timeout(std::time::Duration::from_secs(5), stream.chunk()).await.unwrap().unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
async fn unknown_paths_get_a_json_404_under_api_and_a_page_elsewhere() {
    let app = spawn_app().await;
    let r = app.client.get(format!("{}/api/nope", app.address)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "not_found");
    let r = app.client.get(format!("{}/no-such-page", app.address)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("Not found"));
}

#[tokio::test]
async fn a_call_only_an_admin_may_decide_says_so_on_the_inbox_and_the_resume_page() {
    let app = spawn_app().await;
    let (ada, bob) = app.ada_and_bob().await;
    // Bob's agent asks to change the gate for everyone: only an admin decides.
    let token = app.issue_owned("bobs-agent", "bob");
    let sid = app.open_session(&token).await;
    let reply = app.tool_call(&token, &sid, "gatehouse_policy_set", json!({"pattern":"x*","action":"allow"})).await;
    let eid = execution_id(&reply);
    let page = |cookie: &str, path: String| {
        let request = app.client.get(app.url(&path)).header("cookie", cookie.to_string());
        async move { request.send().await.unwrap().text().await.unwrap() }
    };
    let inbox = page(&bob, "/approvals".into()).await;
    assert!(inbox.contains(eid.as_str()) && inbox.contains("needs an admin"), "{inbox}");
    let resume = page(&bob, format!("/resume/{eid}")).await;
    assert!(resume.contains("only an admin can decide it"), "{resume}");
    assert!(
        resume.contains("Waiting for an admin&#x27;s decision") || resume.contains("Waiting for an admin's decision")
    );
    assert!(!resume.contains(">Approve<"), "no Approve button for a user who cannot decide");
    let admin_resume = page(&ada, format!("/resume/{eid}")).await;
    assert!(admin_resume.contains(">Approve<"), "the admin can decide");
    assert!(page(&ada, "/approvals".into()).await.contains("admin decision"));
}

#[tokio::test]
async fn the_inbox_lists_the_soonest_to_expire_without_arguments_and_coalesces_events() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    let mut stream = app.get_as(&ada, "/api/approvals/events").await;
    let mut seen = String::new();
    while !seen.contains("\n\n") {
        seen.push_str(&String::from_utf8_lossy(&stream.chunk().await.unwrap().unwrap()));
    }
    assert!(seen.starts_with("event: inbox\ndata: {"), "the inbox first: {seen}");
    assert!(seen.contains(r#""pending":[]"#), "nothing pending yet: {seen}");
    seen.clear();
    // Sixty calls pause at once (twelve credentials, five each).
    let mut first = None;
    for i in 0..12 {
        let token = app.issue_owned(&format!("agent-{i}"), "ada");
        let sid = app.open_session(&token).await;
        for j in 0..5 {
            let pattern = format!("ARGUMENT-MARKER-{i}-{j}");
            let reply = app
                .tool_call(&token, &sid, "gatehouse_policy_set", json!({"pattern": pattern, "action":"allow"}))
                .await;
            first.get_or_insert_with(|| execution_id(&reply));
        }
    }
    // Whatever arrives in the next second: far fewer messages than pauses.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, stream.chunk()).await {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let changes = seen.matches("event: inbox").count();
    assert!((1..30).contains(&changes), "60 pauses came as {changes} inbox events");
    // The last one counts all sixty and lists the fifty that expire soonest
    // (the test clock stands still: then by id), typed as the page reads them, without arguments.
    let last = seen.rsplit("event: inbox\ndata: ").next().unwrap().lines().next().unwrap();
    let last: gatehouse_core::model::InboxView = serde_json::from_str(last).unwrap();
    assert_eq!(last.total, 60, "every pause is counted in the last inbox event");
    assert_eq!(last.pending.len(), gatehouse_core::model::INBOX_LIMIT, "a long backlog is listed in part");
    let order = |e: &gatehouse_core::model::ExecutionView| (e.expires_at_ms, e.execution_id.clone());
    assert!(last.pending.windows(2).all(|w| order(&w[0]) < order(&w[1])), "soonest expiry first");
    assert!(last.pending.iter().all(|e| e.arguments.is_none()));

    // The inbox page lists them without their arguments and says how many
    // wait; each call's page shows them.
    let inbox = app.get_as(&ada, "/approvals").await.text().await.unwrap();
    assert!(last.pending.iter().all(|e| inbox.contains(e.execution_id.as_str())), "the inbox lists the calls");
    // Each call's arguments only as one short line (the call's page shows them whole).
    assert!(last.pending.iter().all(|e| e.preview.as_deref().is_some_and(|p| p.contains("ARGUMENT-MARKER"))));
    assert!(
        last.pending
            .iter()
            .all(|e| e.preview.as_deref().unwrap().chars().count() <= gatehouse_core::model::PREVIEW_CHARS + 1)
    );
    // (Each twice: in the list and in the data the page hydrates from.)
    assert_eq!(inbox.matches("ARGUMENT-MARKER-").count(), 100, "each listed call's arguments on one line");
    assert!(inbox.contains("Showing the 50 that expire soonest of 60 waiting"), "{inbox}");
    let eid = first.unwrap();
    let page = app.get_as(&ada, &format!("/resume/{eid}")).await;
    assert!(page.text().await.unwrap().contains("ARGUMENT-MARKER-0-0"), "the call's own page shows them");
}

/// The header's theme form: a cookie for a year (none for System), the page
/// drawn in it, back to a path on this site only; a theme that is not one is
/// a 400 with a sentence.
#[tokio::test]
async fn the_theme_is_kept_in_a_cookie_and_goes_back_only_to_this_site() {
    let app = spawn_app().await;
    let post = |form: &[(&str, &str)]| app.same_origin(reqwest::Method::POST, "/api/theme").form(form).send();
    let r = post(&[("theme", "dark"), ("next", "/history?agent=x")]).await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/history?agent=x");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.starts_with("gatehouse_theme=dark") && cookie.contains("Max-Age=31536000"), "{cookie}");
    let page = app.client.get(app.url("/sign-in")).header("cookie", "gatehouse_theme=dark").send().await.unwrap();
    assert!(page.text().await.unwrap().contains(r#"<html lang="en" data-theme="dark""#));
    let page = app.client.get(app.url("/sign-in")).header("cookie", "gatehouse_theme=<x>").send().await.unwrap();
    assert!(page.text().await.unwrap().contains(r#"data-theme="system""#), "an unknown value is the system's");

    let r = post(&[("theme", "dark"), ("next", "//evil.example/")]).await.unwrap();
    assert_eq!(r.headers()["location"], "/", "never another site");
    let r = post(&[("theme", "system")]).await.unwrap();
    assert!(r.headers()["set-cookie"].to_str().unwrap().contains("Max-Age=0"), "System forgets the choice");
    let r = post(&[("theme", "purple")]).await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("is not a theme"));
    // From another site: refused like every other form.
    let r = app
        .client
        .post(app.url("/api/theme"))
        .header("origin", "https://evil.example")
        .form(&[("theme", "dark")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}
