//! The console's server functions as an attacker would call them: from
//! another site, as a plain user reaching for admin actions, or for another
//! user's agents.

use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn console_actions_are_refused_from_another_site() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    for (name, form) in [
        ("mint", vec![("agent", "evil"), ("thread", ""), ("owner", "")]),
        ("revoke", vec![("scope", "agent"), ("target", "claude"), ("owner", "ada")]),
        ("policy_save", vec![("draft[pattern]", "*"), ("draft[action]", "allow")]),
        ("policy_remove", vec![("pattern", "*")]),
    ] {
        let r = app
            .client
            .post(app.url(&format!("/api/fn/{name}")))
            .header("origin", "https://evil.example")
            .header("cookie", &ada)
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{name}");
        assert_eq!(r.json::<Value>().await.unwrap()["error"], "forbidden_origin", "{name}");
    }
    assert!(app.core.credentials.list().unwrap().is_empty(), "nothing was minted");
    assert!(app.core.policy.rules().unwrap().is_empty(), "no rule was saved");
}

#[tokio::test]
async fn a_plain_user_mints_only_for_themselves_and_changes_no_rule() {
    let app = spawn_app().await;
    let (_ada, bob) = app.ada_and_bob().await;
    let r = app.post_fn(&bob, "mint", &[("agent", "bobs"), ("thread", ""), ("owner", "ada")]).await;
    assert_eq!(r.status(), 403, "bob cannot mint an agent ada would own");
    let r = app.post_fn(&bob, "policy_save", &[("draft[pattern]", "*"), ("draft[action]", "allow")]).await;
    assert_eq!(r.status(), 403);
    let r = app.post_fn(&bob, "policy_remove", &[("pattern", "*")]).await;
    assert_eq!(r.status(), 403);
    assert!(app.core.credentials.list().unwrap().is_empty());

    // His own mint works, and its token is shown once, to him only.
    let r = app.post_fn(&bob, "mint", &[("agent", "bobs"), ("thread", "t1"), ("owner", "")]).await;
    assert!(r.status().is_success() || r.status().is_redirection(), "{}", r.status());
    let minted = app.core.credentials.list().unwrap();
    assert_eq!(minted.len(), 1);
    assert_eq!(minted[0].owner.as_deref(), Some("bob"));
    let id = minted[0].id.clone();
    let ada = app.sign_in("ada").await;
    let theirs: Value = app.post_fn(&ada, "minted", &[("id", &id)]).await.json().await.unwrap();
    assert!(theirs.is_null(), "another user never sees the token");
    let once: Value = app.post_fn(&bob, "minted", &[("id", &id)]).await.json().await.unwrap();
    let token = once["token"].as_str().expect("the token, once").to_string();
    let twice: Value = app.post_fn(&bob, "minted", &[("id", &id)]).await.json().await.unwrap();
    assert!(twice.is_null(), "only once");
    assert_eq!(app.mcp(&token).json(&initialize_request("2025-11-25")).send().await.unwrap().status(), 200);
}

/// Deciding several calls at once from the inbox follows each call's own
/// rules: a plain user decides their own agents' calls, never an admin-only
/// one nor another user's, and what was refused says so.
#[tokio::test]
async fn deciding_many_at_once_keeps_each_calls_rules() {
    let app = spawn_app().await;
    app.add_user("root", true).await;
    app.add_user("ada", false).await;
    app.add_user("bob", false).await;
    let (ada, bob) = (app.sign_in("ada").await, app.sign_in("bob").await);
    let token = app.issue_owned("ada-bot", "ada");
    let sid = app.open_session(&token).await;
    // Two of ada's calls that wait.
    let mine: Vec<_> = paused_calls(&app, &token, &sid, "gatehouse_audit_recent", 2).await;
    // And one only an admin decides.
    let admin_only = execution_id(
        &app.tool_call(&token, &sid, "gatehouse_policy_set", serde_json::json!({"pattern": "z_*", "action": "allow"}))
            .await,
    );
    let many = |cookie: &str, ids: &[&str]| {
        let mut form: Vec<(&str, &str)> = ids.iter().map(|id| ("ids[]", *id)).collect();
        form.push(("action", "decline"));
        form.push(("reason", "not today"));
        app.same_origin(reqwest::Method::POST, "/api/fn/decide_many").header("cookie", cookie).form(&form).send()
    };
    // Bob's try on ada's calls: nothing decided.
    let r: Value = many(&bob, &[mine[0].as_str()]).await.unwrap().json().await.unwrap();
    assert_eq!(r["decided"], 0, "{r}");
    assert_eq!(r["refused"].as_array().unwrap().len(), 1, "{r}");
    // Ada's: her two, not the admin-only one.
    let r: Value =
        many(&ada, &[mine[0].as_str(), mine[1].as_str(), admin_only.as_str()]).await.unwrap().json().await.unwrap();
    assert_eq!(r["decided"], 2, "{r}");
    let refused = r["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{r}");
    assert_eq!(refused[0][0], admin_only.as_str());
    for id in &mine {
        let latest = app.core.approvals.audit().latest(&id.as_str().into()).unwrap().unwrap();
        assert_eq!(latest.state, gatehouse_core::approvals::State::Declined);
        assert_eq!(latest.actor.as_deref(), Some("user:ada#2"));
        assert!(latest.detail.unwrap_or_default().contains("not today"), "one reason for all");
    }
    // Nothing selected, or an unknown action: a 400 with a sentence.
    let r = app
        .same_origin(reqwest::Method::POST, "/api/fn/decide_many")
        .header("cookie", &ada)
        .form(&[("action", "decline")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("Select the calls"));
    // A malformed form (a repeated key where a list is indexed): 400 with a sentence, not 500.
    let r = app
        .same_origin(reqwest::Method::POST, "/api/fn/decide_many")
        .header("cookie", &ada)
        .form(&[("ids", "exec_a"), ("ids", "exec_b"), ("action", "decline")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("could not be read"));
}

/// Approving several at once is two steps: the first names how many calls
/// and which tools and decides nothing; the second, carrying the token that
/// names exactly those calls, approves them.
#[tokio::test]
async fn approving_many_at_once_asks_first_and_decides_only_what_was_confirmed() {
    let app = spawn_app().await;
    app.add_user("ada", false).await;
    let ada = app.sign_in("ada").await;
    let token = app.issue_owned("ada-bot", "ada");
    let sid = app.open_session(&token).await;
    let ids = paused_calls(&app, &token, &sid, "gatehouse_audit_recent", 3).await;
    let post = |form: Vec<(&str, String)>| {
        app.same_origin(reqwest::Method::POST, "/api/fn/decide_many").header("cookie", &ada).form(&form).send()
    };
    let form = |ids: &[String], confirm: Option<&str>| {
        let mut form: Vec<(&str, String)> = ids.iter().map(|id| ("ids[]", id.clone())).collect();
        form.push(("action", "accept".into()));
        if let Some(token) = confirm {
            form.push(("confirm", token.into()));
        }
        form
    };
    let asked: Value = post(form(&ids[..2], None)).await.unwrap().json().await.unwrap();
    assert_eq!(asked["decided"], 0, "{asked}");
    let confirm = &asked["to_confirm"];
    assert_eq!(confirm["ids"].as_array().unwrap().len(), 2, "{asked}");
    assert_eq!(confirm["tools"], json!([["gatehouse_audit_recent", 2]]), "{asked}");
    let token = confirm["token"].as_str().unwrap().to_string();
    for id in &ids {
        assert_eq!(
            app.core.approvals.get(&id.as_str().into()).unwrap().1.state.as_str(),
            "pending",
            "nothing decided yet"
        );
    }
    // The token names those two: with a third added it only asks again.
    let again: Value = post(form(&ids, Some(&token))).await.unwrap().json().await.unwrap();
    assert_eq!((again["decided"].as_u64(), again["to_confirm"]["ids"].as_array().map(Vec::len)), (Some(0), Some(3)));
    let done: Value = post(form(&[ids[1].clone(), ids[0].clone()], Some(&token))).await.unwrap().json().await.unwrap();
    assert_eq!(done["decided"], 2, "{done}");
    assert_eq!(app.core.approvals.get(&ids[2].as_str().into()).unwrap().1.state.as_str(), "pending");
}

/// Without JavaScript too: a plain form that asks to approve several is sent
/// to the approvals page, which draws the same confirmation (how many, which
/// tools, the reason) from its address; its form approves exactly those,
/// and comes back to the list.
#[tokio::test]
async fn approving_many_without_javascript_confirms_on_a_page_the_server_draws() {
    let app = spawn_app().await;
    app.add_user("ada", false).await;
    let ada = app.sign_in("ada").await;
    let token = app.issue_owned("ada-bot", "ada");
    let sid = app.open_session(&token).await;
    let ids = paused_calls(&app, &token, &sid, "gatehouse_audit_recent", 2).await;
    let plain = |form: Vec<(&'static str, String)>| {
        app.same_origin(reqwest::Method::POST, "/api/fn/decide_many")
            .header("cookie", &ada)
            .header("accept", "text/html")
            .header("referer", app.url("/approvals"))
            .form(&form)
            .send()
    };
    let mut form: Vec<(&str, String)> = ids.iter().map(|id| ("ids[]", id.clone())).collect();
    form.extend([("action", "accept".to_string()), ("reason", "fine & dandy".to_string())]);
    let asked = plain(form.clone()).await.unwrap();
    assert_eq!(asked.status(), 302);
    let location = asked.headers()["location"].to_str().unwrap().to_string();
    assert!(location.starts_with("/approvals?approve="), "{location}");
    for id in &ids {
        assert_eq!(app.core.approvals.get(&id.as_str().into()).unwrap().1.state.as_str(), "pending");
    }
    let page = app.get_as(&ada, &location).await.text().await.unwrap();
    assert!(page.contains("Approve 2 calls?") && page.contains("gatehouse_audit_recent (×2)"), "{page}");
    // The page's form carries the token that names exactly these calls, and the reason.
    let confirm = page.split("name=\"confirm\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    assert!(page.contains("value=\"fine &amp; dandy\""), "the reason is carried");
    form.push(("confirm", confirm));
    let done = plain(form).await.unwrap();
    assert_eq!(done.status(), 302);
    assert_eq!(done.headers()["location"], "/approvals", "back to the list");
    for id in &ids {
        let state = app.core.approvals.get(&id.as_str().into()).unwrap().1.state;
        assert!(["approved", "running", "completed"].contains(&state.as_str()), "{state:?}");
    }
    // An address naming calls bob may not see draws no confirmation for them.
    app.add_user("bob", false).await;
    let bob = app.sign_in("bob").await;
    let page = app.get_as(&bob, &location).await.text().await.unwrap();
    assert!(!page.contains("gatehouse_audit_recent"), "no tool of another's call is named");
}

/// `n` calls of `tool` that pause (a rule makes it ask), their execution ids.
async fn paused_calls(app: &TestApp, token: &str, sid: &str, tool: &str, n: usize) -> Vec<String> {
    app.core
        .policy
        .set(gatehouse_core::policy::Rule::new(tool.parse().unwrap(), gatehouse_core::policy::Action::RequireApproval))
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(execution_id(&app.tool_call(token, sid, tool, serde_json::json!({})).await).to_string());
    }
    ids
}
