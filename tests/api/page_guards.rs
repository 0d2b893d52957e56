//! The page cannot be turned against its reader: a nonce-based Content
//! Security Policy, security headers on every response (refusals included),
//! no caching of signed-in content, HSTS over HTTPS, redirects that stay on
//! this site, hidden characters shown in every name, upstream errors for
//! admins only, and logs that never echo what was typed as a username.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::helpers::*;

fn header<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers().get(name).map(|v| v.to_str().unwrap()).unwrap_or_else(|| panic!("no {name} header"))
}

fn assert_security_headers(r: &reqwest::Response) {
    assert_eq!(header(r, "x-frame-options"), "DENY", "{}", r.url());
    assert_eq!(header(r, "x-content-type-options"), "nosniff");
    assert_eq!(header(r, "referrer-policy"), "same-origin");
    let csp = header(r, "content-security-policy");
    for directive in ["default-src 'self'", "frame-ancestors 'none'", "base-uri 'self'", "form-action 'self'"] {
        assert!(csp.contains(directive), "{directive} missing from {csp}");
    }
}

#[tokio::test]
async fn pages_allow_only_their_own_scripts_by_a_fresh_nonce() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    let mut nonces = Vec::new();
    for path in ["/", "/", "/approvals", "/sign-in"] {
        let r = app.get_as(&ada, path).await;
        assert_eq!(r.status(), 200, "{path}");
        let csp = header(&r, "content-security-policy").to_string();
        for directive in [
            "default-src 'self'",
            "'wasm-unsafe-eval'",
            "style-src 'self'",
            "img-src 'self' data:",
            "connect-src 'self'",
            "object-src 'none'",
        ] {
            assert!(csp.contains(directive), "{directive} missing from {csp}");
        }
        let script_src = csp.split(';').find(|d| d.trim().starts_with("script-src")).unwrap();
        assert!(!script_src.contains("'unsafe-inline'"), "{script_src}");
        let nonce = script_src.split("'nonce-").nth(1).unwrap().split('\'').next().unwrap().to_string();
        assert!(nonce.len() >= 16, "{nonce}");
        let html = r.text().await.unwrap();
        let scripts = html.matches("<script").count();
        assert!(scripts >= 1, "{path} has the hydration script");
        assert_eq!(
            html.matches(&format!("<script type=\"module\" nonce=\"{nonce}\"")).count()
                + html.matches(&format!("<script nonce=\"{nonce}\"")).count(),
            scripts,
            "every script on {path} carries this response's nonce"
        );
        // The light page (approvals) carries its stylesheet inline, by the
        // same nonce; the others link it.
        let inline_styles = html.matches("<style").count();
        if path == "/approvals" {
            assert_eq!(html.matches(&format!("<style nonce=\"{nonce}\"")).count(), 1, "{path}");
            assert_eq!(inline_styles, 1, "{path}");
            let style_src = csp.split(';').find(|d| d.trim().starts_with("style-src")).unwrap();
            assert!(style_src.contains(&format!("'nonce-{nonce}'")) && !style_src.contains("unsafe"), "{style_src}");
        } else {
            assert_eq!(inline_styles, 0, "{path} links its stylesheet");
        }
        nonces.push(nonce);
    }
    nonces.sort();
    nonces.dedup();
    assert_eq!(nonces.len(), 4, "a fresh nonce per response");
}

#[tokio::test]
async fn refusals_carry_the_security_headers_too() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    // A foreign Host (DNS rebinding), refused before anything else runs.
    let r = app.client.get(format!("{}/", app.address)).header("host", "evil.example").send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_security_headers(&r);
    // /mcp without a token.
    let r = app.client.post(format!("{}/mcp", app.address)).json(&json!({})).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_security_headers(&r);
    // /mcp never serves a page: its policy lets nothing run, and needs no nonce.
    let csp = header(&r, "content-security-policy");
    assert!(csp.contains("script-src 'none'") && !csp.contains("nonce"), "{csp}");
    // A cross-site POST.
    let r = app
        .client
        .post(app.url("/api/auth/sign-in"))
        .header("origin", "https://evil.example")
        .json(&json!({"username": "ada", "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_security_headers(&r);
    // An API 404 and a page 404.
    for path in ["/api/nope", "/nope"] {
        let r = app.client.get(format!("{}{path}", app.address)).send().await.unwrap();
        assert_eq!(r.status(), 404);
        assert_security_headers(&r);
    }
}

#[tokio::test]
async fn signed_in_pages_and_token_bearing_responses_are_never_stored() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    for path in ["/", "/approvals", "/upstreams", "/api/credentials"] {
        let r = app.get_as(&ada, path).await;
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(header(&r, "cache-control"), "no-store", "{path}");
    }
    let issued = app
        .same_origin(reqwest::Method::POST, "/api/credentials")
        .header("cookie", &ada)
        .json(&json!({"agent": "claude"}))
        .send()
        .await
        .unwrap();
    assert_eq!(issued.status(), 201);
    assert_eq!(header(&issued, "cache-control"), "no-store");
    let api = app.api_token("orchestrator");
    let listed = app.client.get(app.url("/api/credentials")).bearer_auth(&api).send().await.unwrap();
    assert_eq!(listed.status(), 200);
    assert_eq!(header(&listed, "cache-control"), "no-store");
    let sign_in = app.sign_in_with("ada", PASSWORD).await;
    assert_eq!(header(&sign_in, "cache-control"), "no-store");
}

#[tokio::test]
async fn hsts_is_sent_only_when_served_over_https() {
    let plain = spawn_app().await;
    let r = plain.client.get(format!("{}/sign-in", plain.address)).send().await.unwrap();
    assert!(r.headers().get("strict-transport-security").is_none());
    let https = spawn_app_with(|c| c.public_url = Some("https://gate.example.com".parse().unwrap())).await;
    let r = https.client.get(format!("{}/sign-in", https.address)).send().await.unwrap();
    assert_eq!(header(&r, "strict-transport-security"), "max-age=31536000");
    let r = https.client.get(format!("{}/", https.address)).header("host", "evil.example").send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(header(&r, "strict-transport-security"), "max-age=31536000");
}

#[tokio::test]
async fn after_sign_in_the_browser_stays_on_this_site() {
    let app = spawn_app().await;
    app.add_user("ada", false).await;
    let after = |next: &'static str| {
        app.same_origin(reqwest::Method::POST, "/api/auth/sign-in")
            .form(&[("username", "ada"), ("password", PASSWORD), ("next", next)])
            .send()
    };
    for bad in [
        "//evil.com",
        "/\\evil.com",
        "/\t/evil.com",
        "/\n/evil.com",
        "https://evil.com",
        "javascript:alert(1)",
        "/é",
        "/\\/evil.com",
    ] {
        let r = after(bad).await.unwrap();
        assert_eq!(r.status(), 303, "{bad:?}");
        assert_eq!(r.headers()["location"], "/", "{bad:?}");
    }
    for good in ["/approvals", "/resume/exec_1?mcp_session_id=abc", "/%09/evil.com"] {
        let r = after(good).await.unwrap();
        assert_eq!(r.headers()["location"], good);
    }
    // The sign-in page does not carry a foreign `next` into its form either.
    let page = app.client.get(app.url("/sign-in?next=%2F%09%2Fevil.com")).send().await.unwrap();
    let html = page.text().await.unwrap();
    assert!(html.contains(r#"name="next" value="/""#), "{html}");
}

#[tokio::test]
async fn every_name_the_pages_show_has_its_hidden_characters_made_visible() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    // An agent named to read "claude-safe" backwards, with a zero-width space
    // in its thread and an isolate in its client's name.
    let agent = "claude\u{202E}efas-";
    let (_, token) = app.issue_credential(agent, Some("ada"), Some("t\u{200B}1"));
    let mut init = initialize_request("2025-11-25");
    init["params"]["clientInfo"]["name"] = json!("cli\u{2066}ent\u{FEFF}");
    let sid = app.open_session_with(&token, init).await;
    let reply = app.tool_call(&token, &sid, "gatehouse_policy_set", json!({"pattern":"x*","action":"allow"})).await;
    let eid = execution_id(&reply);

    let home = app.get_as(&ada, "/").await.text().await.unwrap();
    for shown in ["⟨U+202E⟩", "⟨U+200B⟩", "⟨U+2066⟩", "⟨U+FEFF⟩"] {
        assert!(home.contains(shown), "home shows {shown}");
    }
    let mut pages = vec![("/".to_string(), home)];
    for path in ["/approvals".to_string(), format!("/resume/{eid}")] {
        let html = app.get_as(&ada, &path).await.text().await.unwrap();
        assert!(html.contains("⟨U+202E⟩"), "{path} shows the override in the agent's name");
        pages.push((path, html));
    }
    for (path, html) in pages {
        // The raw characters may remain only in the data serialized for
        // hydration, never in the rendered markup.
        let markup = without_scripts(&html);
        for c in ['\u{202E}', '\u{2066}', '\u{200B}', '\u{FEFF}'] {
            assert!(!markup.contains(c), "{path} renders U+{:04X} raw", c as u32);
        }
    }
}

fn without_scripts(html: &str) -> String {
    let mut out = String::new();
    let mut rest = html;
    while let Some(start) = rest.find("<script") {
        out.push_str(&rest[..start]);
        rest = rest[start..].split_once("</script>").map_or("", |(_, after)| after);
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn an_upstreams_last_error_is_shown_to_admins_only() {
    let app = spawn_app_with(|c| {
        c.upstream = vec![gatehouse::config::UpstreamConfig {
            command: Some("/nonexistent/gatehouse-secret-path/server".into()),
            ..upstream_named("broken")
        }]
    })
    .await;
    let (ada, bob) = app.ada_and_bob().await;
    let mut error = None;
    for _ in 0..200 {
        error = app.core.live.upstreams().into_iter().find_map(|u| u.last_error);
        if error.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let error = error.expect("the broken upstream reported an error");
    let needle: String = error.chars().take_while(|c| c.is_alphanumeric() || *c == ' ').collect();
    assert!(needle.len() >= 8, "{error}");
    let admin_view = app.get_as(&ada, "/upstreams").await.text().await.unwrap();
    assert!(admin_view.contains("Last error"));
    assert!(admin_view.contains(&needle), "admins see the error {needle:?}");
    let user_view = app.get_as(&bob, "/upstreams").await.text().await.unwrap();
    assert!(user_view.contains("broken"), "everyone sees the upstream and its health");
    assert!(!user_view.contains(&needle), "a non-admin never gets the error");
    assert!(!user_view.contains("Last error"));
    let via_fn = app
        .same_origin(reqwest::Method::POST, "/api/fn/upstreams")
        .header("cookie", &bob)
        .header("content-type", "application/x-www-form-urlencoded")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(via_fn.contains("broken") && !via_fn.contains(&needle), "{via_fn}");
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
async fn a_failed_sign_in_never_logs_what_was_typed_as_the_name() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let app = spawn_app().await;
    app.add_user("ada", false).await;
    // A password typed into the name field, with a terminal escape for good measure.
    let typed = "Tr0ub4dor&3-secret\u{1b}[2J\r\nfake log line";
    let r = app.sign_in_with(typed, "whatever it is").await;
    assert_eq!(r.status(), 401);
    let text = logs.text();
    assert!(text.contains("sign-in refused"), "{text}");
    assert!(text.contains(&gatehouse::throttle::username_tag(typed)), "{text}");
    assert!(!text.contains("Tr0ub4dor"), "{text}");
    assert!(!text.contains('\u{1b}') && !text.contains("\r\nfake"), "{text}");
}

#[tokio::test]
async fn a_server_function_without_a_session_answers_401_never_500() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    for name in [
        "agents",
        "mint",
        "minted",
        "revoke",
        "execution",
        "decide",
        "pending",
        "grant",
        "grants",
        "revoke-grant",
        "calls",
        "timeline",
        "notify_targets",
        "overview",
        "policies",
        "policy_preview",
        "policy_save",
        "policy_remove",
        "profiles",
        "profile_save",
        "profile_remove",
        "tools",
        "tool-review",
        "upstreams",
        "users",
        "invite",
        "reset-link",
        "held-link",
        "user-disabled",
        "user-admin",
        "user-remove",
        "password",
        "sign-out-others",
    ] {
        // Without arguments, with them, and with a session cookie that is not one.
        for (cookie, form) in [
            (None, vec![]),
            (None, vec![("pattern", "x*"), ("action", "allow"), ("id", "x"), ("username", "ada")]),
            (Some("gatehouse_session=not-a-session"), vec![]),
        ] {
            let mut request = app
                .same_origin(reqwest::Method::POST, &format!("/api/fn/{name}"))
                .header("accept", "application/json")
                .form(&form);
            if let Some(cookie) = cookie {
                request = request.header("cookie", cookie);
            }
            let r = request.send().await.unwrap();
            assert_eq!(r.status(), 401, "{name} {cookie:?} {form:?}");
            let body: serde_json::Value = r.json().await.unwrap();
            assert_eq!(body["error"], "unauthorized", "{name}: {body}");
            assert!(body["message"].as_str().is_some_and(|m| m.contains("sign in")), "{body}");
        }
        // A plain form post (no JavaScript) goes to the sign-in page.
        let r = app
            .same_origin(reqwest::Method::POST, &format!("/api/fn/{name}"))
            .header("accept", "text/html")
            .header("referer", app.url("/policies"))
            .form(&[("pattern", "x*")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 303, "{name}");
        assert_eq!(r.headers()["location"], "/sign-in", "{name}");
    }
    assert!(app.core.policy.rules().unwrap().is_empty(), "nothing ran");
    // The one public server function still answers without a session.
    let r = app
        .same_origin(reqwest::Method::POST, "/api/fn/password-link")
        .form(&[("token", "nope")])
        .send()
        .await
        .unwrap();
    assert_ne!(r.status(), 401);
    assert_ne!(r.status().as_u16(), 500);
}
