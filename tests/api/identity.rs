//! Nobody inherits a grant that was not given to them: an OAuth client that
//! registers under the name of one of the person's agents starts as a new
//! agent (unless the person confirms, on a page that says what is
//! inherited), and a user added with a removed user's name inherits neither
//! their grants nor their history.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

/// The fixture's unannotated tool: waits for a person by default and
/// ignores its arguments.
const TOOL: &str = "ev__test_simple_text";

/// An app fronting the "everything" fixture.
async fn app() -> TestApp {
    let app = spawn_app_fronting(everything_stdio(), |_| {}).await;
    app.wait_for_upstream_tool(TOOL).await;
    app
}

/// Approves `eid` as `cookie` with a grant until revoked.
async fn grant_forever(app: &TestApp, cookie: &str, eid: &str) {
    let r = app
        .same_origin(Method::POST, &format!("/api/executions/{eid}/resume"))
        .header("cookie", cookie)
        .json(&json!({"action": "accept", "grant": {"scope": "forever", "arguments": {}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

/// The execution ids of the history entries `cookie` reads.
async fn history_of(app: &TestApp, cookie: &str) -> Vec<String> {
    let page: Value = app.get_as(cookie, "/api/history").await.json().await.unwrap();
    page["calls"].as_array().unwrap().iter().map(|c| c["latest"]["executionId"].as_str().unwrap().to_string()).collect()
}

/// A valid authorization request of `client_id`, plus `extra` pairs.
fn request_pairs(app: &TestApp, client_id: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let resource = app.url("/mcp");
    let mut pairs: Vec<(String, String)> = [
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", REDIRECT),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
        ("state", "xyz"),
        ("resource", resource.as_str()),
        ("scope", "mcp"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    pairs.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    pairs
}

/// Allows `client_id` as `cookie` with the consent form's `extra` fields.
async fn allow(app: &TestApp, cookie: &str, client_id: &str, extra: &[(&str, &str)]) -> reqwest::Response {
    let mut fields = vec![("decision", "approve")];
    fields.extend_from_slice(extra);
    let form = request_pairs(app, client_id, &fields);
    app.same_origin(Method::POST, "/oauth/authorize").header("cookie", cookie).form(&form).send().await.unwrap()
}

/// The access token an allowed consent leads to (the code exchanged).
async fn access_token(app: &TestApp, client_id: &str, allowed: reqwest::Response) -> String {
    assert_eq!(allowed.status(), 303);
    let location = url::Url::parse(allowed.headers()["location"].to_str().unwrap()).unwrap();
    assert!(location.as_str().starts_with(REDIRECT), "{location}");
    let code = location.query_pairs().find(|(k, _)| k == "code").expect("a code").1.into_owned();
    let resource = app.url("/mcp");
    let r = app
        .client
        .post(app.url("/oauth/token"))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", REDIRECT),
            ("client_id", client_id),
            ("code_verifier", VERIFIER),
            ("resource", resource.as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json::<Value>().await.unwrap()["access_token"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_client_named_like_an_existing_agent_starts_with_no_grants_unless_the_person_confirms() {
    let app = app().await;
    app.add_user("bob", false).await;
    let bob = app.sign_in("bob").await;
    // Bob's own "Claude Code" holds a grant until revoked.
    let own = app.issue_owned("Claude Code", "bob");
    let sid = app.open_session(&own).await;
    let first = app.tool_call(&own, &sid, TOOL, json!({})).await;
    assert!(paused(&first));
    grant_forever(&app, &bob, &execution_id(&first)).await;
    assert!(!paused(&app.tool_call(&own, &sid, TOOL, json!({})).await), "the grant covers bob's agent");

    // A client registers as "Claude Code": the page suggests a new name and
    // promises that every gated call waits.
    let client_id = register_public_client(&app, "Claude Code", REDIRECT).await;
    let query = serde_urlencoded::to_string(request_pairs(&app, &client_id, &[])).unwrap();
    let page = app.get_as(&bob, &format!("/oauth/authorize?{query}")).await;
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains(r#"value="Claude Code 2""#), "a name no agent of bob's goes by: {html}");
    assert!(html.contains("every call a rule gates waits"), "{html}");
    assert!(!html.contains("consent-inherit"), "nothing to inherit");

    // Allowed with the suggestion: its gated call waits.
    let token =
        access_token(&app, &client_id, allow(&app, &bob, &client_id, &[("agent", "Claude Code 2")]).await).await;
    let sid = app.open_session(&token).await;
    assert!(paused(&app.tool_call(&token, &sid, TOOL, json!({})).await), "a new client inherits no grant");

    // The existing agent's name without the confirmation: refused, the page
    // again with the name kept, saying what would be inherited.
    let refused = allow(&app, &bob, &client_id, &[("agent", "Claude Code")]).await;
    assert_eq!(refused.status(), 400);
    assert!(refused.headers().get("location").is_none());
    let html = refused.text().await.unwrap();
    assert!(html.contains("You already have an agent of this name"), "{html}");
    assert!(html.contains(r#"value="Claude Code""#), "the name is kept: {html}");
    assert!(html.contains(r#"name="inherit""#), "{html}");
    let inherited = html.split(r#"data-testid="consent-inherit-grants">"#).nth(1).expect("the grants inherited");
    assert!(inherited.trim_start_matches("<!>").starts_with("1<"), "one grant inherited: {html}");
    // A raw post with no name at all is not a way around it: it gets a new name.
    let unnamed = access_token(&app, &client_id, allow(&app, &bob, &client_id, &[("agent", "")]).await).await;
    let sid = app.open_session(&unnamed).await;
    assert!(paused(&app.tool_call(&unnamed, &sid, TOOL, json!({})).await));

    // Confirmed: the client acts as bob's "Claude Code", grants and all.
    let confirmed = allow(&app, &bob, &client_id, &[("agent", "Claude Code"), ("inherit", "yes")]).await;
    let token = access_token(&app, &client_id, confirmed).await;
    let sid = app.open_session(&token).await;
    assert!(!paused(&app.tool_call(&token, &sid, TOOL, json!({})).await), "inherited on purpose");
}

#[tokio::test]
async fn a_user_added_with_a_removed_users_name_inherits_neither_grants_nor_history() {
    let app = app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    app.add_user("alice", false).await;
    let alice = app.sign_in("alice").await;
    let (credential, token) = app.issue_credential("claude", Some("alice"), None);
    let sid = app.open_session(&token).await;
    let first = app.tool_call(&token, &sid, TOOL, json!({})).await;
    assert!(paused(&first));
    let granted = execution_id(&first);
    grant_forever(&app, &alice, &granted).await;
    assert!(!paused(&app.tool_call(&token, &sid, TOOL, json!({})).await), "alice's grant covers it");
    // A call still waiting when she goes (only an admin decides this one).
    let waiting =
        app.tool_call(&token, &sid, "gatehouse_policy_set", json!({"pattern": "x*", "action": "allow"})).await;
    let waiting = execution_id(&waiting);
    assert!(history_of(&app, &alice).await.contains(&granted.to_string()));

    let r = app
        .same_origin(Method::POST, "/api/fn/user-remove")
        .header("cookie", &ada)
        .form(&[("username", "alice")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // Everything of hers ended: grants, the waiting call, the credential.
    let grants: Value = app.get_as(&ada, "/api/grants").await.json().await.unwrap();
    assert_eq!(grants["grants"], json!([]), "{grants}");
    assert!(app.core.approvals.get(&waiting).is_none(), "the waiting call is settled");
    let last = app.core.approvals.audit().latest(&waiting).unwrap().unwrap();
    assert_eq!((last.state.as_str(), last.detail.as_deref()), ("revoked", Some("the owner was removed")));
    assert!(app.core.credentials.authenticate(&token).unwrap().is_err());
    assert_eq!(app.core.credentials.revoked_among(&[credential.into()]).unwrap().len(), 1);

    // A new "alice": her agent of the same name waits again...
    app.add_user("alice", false).await;
    let new_alice = app.sign_in("alice").await;
    let fresh = app.issue_owned("claude", "alice");
    let sid = app.open_session(&fresh).await;
    let call = app.tool_call(&fresh, &sid, TOOL, json!({})).await;
    assert!(paused(&call), "no grant is inherited: {call}");
    let hers = execution_id(&call);
    // ...and she reads none of the old history, on the page's API or through her agent.
    assert_eq!(history_of(&app, &new_alice).await, vec![hers.to_string()]);
    let recent = app.tool_call(&fresh, &sid, "gatehouse_audit_recent", json!({"limit": 200})).await;
    let seen: Vec<&str> = recent["result"]["structuredContent"]["calls"]
        .as_array()
        .unwrap_or_else(|| panic!("{recent}"))
        .iter()
        .map(|c| c["latest"]["executionId"].as_str().unwrap())
        .collect();
    assert!(!seen.contains(&granted.as_str()) && !seen.contains(&waiting.as_str()), "{recent}");
    assert!(seen.contains(&hers.as_str()), "{recent}");
    // An admin still reads the removed user's history under her name.
    let all = history_of(&app, &ada).await;
    assert!(all.contains(&granted.to_string()) && all.contains(&waiting.to_string()), "{all:?}");
}

#[tokio::test]
async fn a_rule_for_a_bare_agent_name_covers_no_agent_a_plain_user_names_so() {
    use gatehouse_core::policy::{Action, Rule};
    let bare = Rule { name: "billing runs".into(), agents: vec!["billing-bot".into()], ..allow_rule(TOOL) };
    let app = spawn_app_fronting(everything_stdio(), |c| c.policy_rules = vec![bare]).await;
    app.wait_for_upstream_tool(TOOL).await;
    app.add_user("mallory", false).await;
    app.add_user("root", true).await;
    let call = |token: String| {
        let app = &app;
        async move {
            let sid = app.open_session(&token).await;
            app.tool_call(&token, &sid, TOOL, json!({})).await
        }
    };
    // A plain user names his agent after the rule's: it still waits for a person.
    let mallory = app.issue_owned("billing-bot", "mallory");
    assert!(paused(&call(mallory.clone()).await), "a plain user's namesake is not covered");
    // An admin's, or the command line's (no owner), is.
    assert!(!paused(&call(app.issue_owned("billing-bot", "root")).await), "an admin minted it");
    assert!(!paused(&call(app.issue("billing-bot", None)).await), "minted with no owner");
    // Named with its owner, his agent is his to allow.
    let his = Rule {
        name: "his".into(),
        agents: vec!["mallory/billing-*".into()],
        ..Rule::new(TOOL.parse().unwrap(), Action::Allow)
    };
    app.core.policy.set(his).unwrap();
    assert!(!paused(&call(mallory).await), "owner/agent names it");
    // Another user's agent of the same name is not his.
    app.add_user("eve", false).await;
    assert!(paused(&call(app.issue_owned("billing-bot", "eve")).await));
}

#[tokio::test]
async fn a_namesake_on_a_removed_users_thread_reads_none_of_their_calls() {
    let app = app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    app.add_user("alice", false).await;
    let alice = app.sign_in("alice").await;
    let (_, token) = app.issue_credential("claude", Some("alice"), Some("t1"));
    let sid = app.open_session(&token).await;
    let eid = execution_id(&app.tool_call(&token, &sid, TOOL, json!({})).await);
    let declined = app
        .same_origin(Method::POST, &format!("/api/executions/{eid}/resume"))
        .header("cookie", &alice)
        .json(&json!({"action": "decline", "reason": "the secret plan"}))
        .send()
        .await
        .unwrap();
    assert_eq!(declined.status(), 200);
    let r = app
        .same_origin(Method::POST, "/api/fn/user-remove")
        .header("cookie", &ada)
        .form(&[("username", "alice")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());

    // A new alice, the same agent name, the same thread label.
    app.add_user("alice", false).await;
    let (_, fresh) = app.issue_credential("claude", Some("alice"), Some("t1"));
    let sid = app.open_session(&fresh).await;
    let resumed = app.tool_call(&fresh, &sid, "resume", json!({"executionId": eid.to_string()})).await;
    assert!(!resumed.to_string().contains("the secret plan"), "{resumed}");
    assert_eq!(resumed["result"]["structuredContent"]["error"], "execution_not_found", "{resumed}");
    let recent = app.tool_call(&fresh, &sid, "gatehouse_audit_recent", json!({"limit": 200})).await;
    assert!(!recent.to_string().contains(eid.as_str()), "{recent}");
    // The old calls are kept under a name no one can take.
    let old = app.core.approvals.audit().latest(&eid).unwrap().unwrap();
    assert!(old.owner.as_deref().is_some_and(|o| o.starts_with("alice (removed #")), "{old:?}");
}
