//! The console's server functions as an attacker would call them: from
//! another site, as a plain user reaching for admin actions, or for another
//! user's agents.

use serde_json::Value;

use crate::helpers::*;

#[tokio::test]
async fn console_actions_are_refused_from_another_site() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    for (name, form) in [
        ("mint", vec![("agent", "evil"), ("thread", ""), ("owner", "")]),
        ("revoke", vec![("scope", "agent"), ("target", "claude"), ("owner", "ada")]),
        ("policy_save", vec![("pattern", "*"), ("action", "allow")]),
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
    let r = app.post_fn(&bob, "policy_save", &[("pattern", "*"), ("action", "allow")]).await;
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
