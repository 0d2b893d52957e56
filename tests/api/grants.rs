//! Scoped grants ("allow this tool for this agent") and the words a person
//! gives with a decision (a decline's reason reaches the agent).

use std::time::Duration;

use reqwest::Method;
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::helpers::*;

/// The fixture's unannotated tool: waits for a person by default and
/// ignores its arguments.
const TOOL: &str = "ev__test_simple_text";

/// An app fronting the "everything" fixture, with admin "ada" and plain
/// users "carol" and "bob" signed in: (app, ada, carol, bob).
async fn app() -> (TestApp, String, String, String) {
    let app = spawn_app_fronting(everything_stdio(), |_| {}).await;
    app.wait_for_upstream_tool(TOOL).await;
    let (ada, bob) = app.ada_and_bob().await;
    app.add_user("carol", false).await;
    let carol = app.sign_in("carol").await;
    (app, ada, carol, bob)
}

/// `POST /api/executions/{eid}/resume` with `body`, as `cookie`, from this site.
async fn resume_with(app: &TestApp, cookie: &str, eid: &str, body: Value) -> reqwest::Response {
    app.same_origin(Method::POST, &format!("/api/executions/{eid}/resume"))
        .header("cookie", cookie)
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// Approves `eid` as `cookie` with a grant of `scope` (and `arguments`); the grant's id.
async fn grant(app: &TestApp, cookie: &str, eid: &str, scope: &str, arguments: Value) -> String {
    let r =
        resume_with(app, cookie, eid, json!({"action": "accept", "grant": {"scope": scope, "arguments": arguments}}))
            .await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["state"], "approved");
    body["grant"]["id"].as_str().unwrap().to_string()
}

/// The grants `cookie` may see.
async fn grants_of(app: &TestApp, cookie: &str) -> Vec<Value> {
    let r = app.get_as(cookie, "/api/grants").await;
    assert_eq!(r.status(), 200);
    r.json::<Value>().await.unwrap()["grants"].as_array().unwrap().clone()
}

async fn revoke(app: &TestApp, cookie: &str, id: &str) -> reqwest::Response {
    app.same_origin(Method::DELETE, &format!("/api/grants/{id}")).header("cookie", cookie).send().await.unwrap()
}

#[tokio::test]
async fn a_grant_lets_the_agents_next_calls_through_audited_until_revoked() {
    let (app, _ada, carol, bob) = app().await;
    let token = app.issue_owned("claude", "carol");
    let sid = app.open_session(&token).await;

    let first = app.tool_call(&token, &sid, TOOL, json!({})).await;
    assert!(paused(&first));
    let eid = execution_id(&first);
    let id = grant(&app, &carol, &eid, "8h", json!({})).await;
    assert!(id.starts_with("grant_"));
    let resumed = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    assert!(!paused(&resumed), "the call the grant was made from runs as approved");
    let approved = app.core.approvals.audit().timeline(&eid).unwrap();
    assert!(approved[1].detail.as_deref().unwrap().contains(&format!("grant:{id}")), "{approved:?}");

    // The next identical call runs at once, audited (when it ends) as let through by the grant.
    assert!(!paused(&app.tool_call(&token, &sid, TOOL, json!({})).await));
    let scope = gatehouse_core::audit::HistoryScope::Owner("carol".into());
    let newest = app.core.approvals.audit().search(&Default::default(), &scope, 1).unwrap().remove(0);
    assert_eq!(
        (newest.state.as_str(), newest.actor.as_deref(), newest.tool.as_str(), newest.upstream.as_deref()),
        ("completed", Some(format!("grant:{id}").as_str()), TOOL, Some("everything"))
    );

    // It covers the agent: another credential of claude owned by carol, in
    // another session, runs too; claude owned by someone else does not.
    let twin = app.issue_owned("claude", "carol");
    let twin_sid = app.open_session(&twin).await;
    assert!(!paused(&app.tool_call(&twin, &twin_sid, TOOL, json!({})).await));
    let other = app.issue_owned("claude", "bob");
    let other_sid = app.open_session(&other).await;
    assert!(paused(&app.tool_call(&other, &other_sid, TOOL, json!({})).await), "another owner's claude");
    let claudette = app.issue_owned("claudette", "carol");
    let claudette_sid = app.open_session(&claudette).await;
    assert!(paused(&app.tool_call(&claudette, &claudette_sid, TOOL, json!({})).await), "another agent");

    // Listed with its uses (counted in memory, written in batches).
    let listed = grants_of(&app, &carol).await;
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0]["id"].as_str(), listed[0]["uses"].as_u64()), (Some(id.as_str()), Some(2)));
    assert!(listed[0]["lastUsedMs"].is_i64());
    assert_eq!((listed[0]["tool"].as_str(), listed[0]["scope"].as_str()), (Some(TOOL), Some("8h")));
    assert!(grants_of(&app, &bob).await.is_empty(), "bob does not see carol's grants");

    // Only the owner (or an admin) revokes; then the next call waits again.
    assert_eq!(revoke(&app, &bob, &id).await.status(), 403);
    assert_eq!(revoke(&app, &carol, &id).await.status(), 200);
    assert_eq!(revoke(&app, &carol, &id).await.status(), 404);
    assert!(paused(&app.tool_call(&token, &sid, TOOL, json!({})).await), "revoked: it waits again");
    let changes = app.core.changes.recent("grant", 10).unwrap();
    let actions: Vec<(&str, &str)> = changes.iter().map(|c| (c.action.as_str(), c.actor.as_str())).collect();
    assert_eq!(actions, [("revoke", "user:carol#3"), ("grant", "user:carol#3")]);
    assert!(grants_of(&app, &carol).await.is_empty());
}

#[tokio::test]
async fn an_expired_grant_pauses_again_and_use_counts_reach_the_database() {
    let (app, _ada, carol, _bob) = app().await;
    let token = app.issue_owned("claude", "carol");
    let sid = app.open_session(&token).await;
    let eid = execution_id(&app.tool_call(&token, &sid, TOOL, json!({})).await);
    grant(&app, &carol, &eid, "1h", json!({})).await;
    assert!(!paused(&app.tool_call(&token, &sid, TOOL, json!({})).await));

    // The use count was flushed off the request path.
    let mut written = 0;
    for _ in 0..100 {
        written = app.core.db.conn().unwrap().query_one("SELECT uses FROM grants", &[], |r| r.get::<i64>(0)).unwrap();
        if written >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(written, 1);

    // (Two steps, each a sign of life, so the credential itself stays alive.)
    app.clock.advance(Duration::from_secs(40 * 60));
    assert!(!paused(&app.tool_call(&token, &sid, TOOL, json!({})).await), "still within the hour");
    app.clock.advance(Duration::from_secs(20 * 60));
    assert!(paused(&app.tool_call(&token, &sid, TOOL, json!({})).await), "an hour later it waits again");
    assert!(grants_of(&app, &carol).await.is_empty(), "expired grants are not listed");
}

#[tokio::test]
async fn a_session_grant_covers_only_its_session_and_ends_with_it() {
    let (app, _ada, carol, _bob) = app().await;
    let token = app.issue_owned("claude", "carol");
    let sid = app.open_session(&token).await;
    let eid = execution_id(&app.tool_call(&token, &sid, TOOL, json!({})).await);
    let id = grant(&app, &carol, &eid, "session", json!({})).await;
    assert!(!paused(&app.tool_call(&token, &sid, TOOL, json!({})).await));
    let other_sid = app.open_session(&token).await;
    assert!(
        paused(&app.tool_call(&token, &other_sid, TOOL, json!({})).await),
        "another session of the same credential"
    );
    let listed = grants_of(&app, &carol).await;
    assert_eq!((listed[0]["id"].as_str(), listed[0]["sessionId"].as_str()), (Some(id.as_str()), Some(sid.as_str())));

    assert!(app.end_session(&token, &sid).await.status().is_success());
    for _ in 0..200 {
        if grants_of(&app, &carol).await.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(grants_of(&app, &carol).await.is_empty(), "the session ended, so did its grant");
    for _ in 0..100 {
        let rows: i64 =
            app.core.db.conn().unwrap().query_one("SELECT COUNT(*) FROM grants", &[], |r| r.get(0)).unwrap();
        if rows == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the session's grant is still in the database");
}

#[tokio::test]
async fn argument_constraints_narrow_a_grant_and_must_fit_the_call() {
    let (app, _ada, carol, _bob) = app().await;
    let token = app.issue_owned("claude", "carol");
    let sid = app.open_session(&token).await;
    let eid = execution_id(&app.tool_call(&token, &sid, TOOL, json!({"path": "/tmp/a", "mode": "w"})).await);

    // A constraint the call itself does not meet, or on no string argument: 400, nothing decided.
    for arguments in
        [json!({"path": {"prefix": "/etc/"}}), json!({"size": {"exact": "1"}}), json!({"path": {"prefix": ""}})]
    {
        let r = resume_with(
            &app,
            &carol,
            &eid,
            json!({"action": "accept", "grant": {"scope": "1h", "arguments": arguments}}),
        )
        .await;
        assert_eq!(r.status(), 400, "{arguments}");
    }
    assert_eq!(app.core.approvals.get(&eid).unwrap().1.state, gatehouse_core::approvals::State::Pending);

    // The form the resume page posts: path starts with /tmp/, mode exactly this call's.
    let r = app
        .post_fn(
            &carol,
            "grant",
            &[
                ("id", &eid),
                ("scope", "1h"),
                ("note", ""),
                ("exact[mode]", "on"),
                ("prefix[path]", "/tmp/"),
                ("prefix[mode]", ""),
            ],
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let listed = grants_of(&app, &carol).await;
    assert_eq!(listed[0]["arguments"], json!({"mode": {"exact": "w"}, "path": {"prefix": "/tmp/"}}));

    for (args, waits) in [
        (json!({"path": "/tmp/b", "mode": "w"}), false),
        (json!({"path": "/tmp/b", "mode": "w", "extra": 1}), false),
        (json!({"path": "/etc/passwd", "mode": "w"}), true),
        (json!({"path": "/tmp/b", "mode": "a"}), true),
        (json!({"path": "/tmp/b"}), true),
        (json!({"path": ["/tmp/b"], "mode": "w"}), true),
    ] {
        assert_eq!(paused(&app.tool_call(&token, &sid, TOOL, args.clone()).await), waits, "{args}");
    }
}

/// Whether a call of the tool with these `url` and `path` arguments pauses.
async fn pauses(app: &TestApp, token: &str, sid: &str, url: &str, path: &str) -> bool {
    paused(&app.tool_call(token, sid, TOOL, json!({"url": url, "path": path})).await)
}

#[tokio::test]
async fn a_prefix_grant_covers_only_what_the_upstream_reads_under_it() {
    let (app, _ada, carol, _bob) = app().await;
    let token = app.issue_owned("claude", "carol");
    let sid = app.open_session(&token).await;
    let api = "https://api.example.com/v1/";

    // A call that a URL parser reads outside the prefix cannot carry the grant: 400, saying why.
    let outside = json!({"url": "https://api.example.com/v1/..?x", "path": "/tmp/a"});
    let escaping = execution_id(&app.tool_call(&token, &sid, TOOL, outside).await);
    let body = json!({"action": "accept", "grant": {"scope": "1h", "arguments": {"url": {"prefix": api}}}});
    let r = resume_with(&app, &carol, &escaping, body).await;
    assert_eq!(r.status(), 400);
    let answer: Value = r.json().await.unwrap();
    assert!(answer["message"].as_str().unwrap().contains("segment"), "{answer}");

    let inside = json!({"url": "https://api.example.com/v1/items", "path": "/tmp/a"});
    let eid = execution_id(&app.tool_call(&token, &sid, TOOL, inside).await);
    grant(&app, &carol, &eid, "1h", json!({"url": {"prefix": api}, "path": {"prefix": "/tmp/"}})).await;
    let (app, token, sid) = (&app, token.as_str(), sid.as_str());
    assert!(!pauses(app, token, sid, "https://api.example.com/v1/items?page=2", "/tmp/b/c.txt").await);
    assert!(!pauses(app, token, sid, "https://api.example.com/v1/a..b", "/tmp//b").await);

    // Each of these reaches outside the prefix as the upstream reads it: the call pauses.
    for url in [
        "https://api.example.com/v1/..?x",
        "https://api.example.com/v1/..#f",
        "https://api.example.com/v1/%2e%2e?x",
        "https://api.example.com/v1/.%2E#",
        "https://api.example.com/v1/../admin",
        "https://api.example.com/v1/%252e%252e/admin",
        "https://api.example.com/v1/a%2F..%2Fadmin",
        "https://api.example.com/v1/..\\admin",
        "https://api.example.com/v1/.\t./admin",
        "https://api.example.com/v1/\u{2025}/admin",
        "https://api.example.com/v1/\u{ff0e}\u{ff0e}\u{ff0f}admin",
        "https://api.example.com/v1/..;/admin",
        "https://api.example.com/v1/%EF%BC%8E%EF%BC%8E/admin",
    ] {
        assert!(pauses(app, token, sid, url, "/tmp/b").await, "{url:?} ran without a pause");
    }
    for path in ["/tmp/../etc/passwd", "/tmp/%2e%2e/etc/passwd", "/tmp/./a", "/tmp/a\u{0}", "/tmp/\u{ff0e}\u{ff0e}/etc"]
    {
        assert!(
            pauses(app, token, sid, "https://api.example.com/v1/items", path).await,
            "{path:?} ran without a pause"
        );
    }
}

#[tokio::test]
async fn no_grant_covers_a_human_only_call_and_only_admins_reach_gate_changing_tools() {
    let (app, ada, carol, _bob) = app().await;
    let token = app.issue_owned("claude", "carol");
    let sid = app.open_session(&token).await;

    // A grant made before its tool became human_only is skipped from then on.
    let eid = execution_id(&app.tool_call(&token, &sid, TOOL, json!({})).await);
    grant(&app, &carol, &eid, "forever", json!({})).await;
    assert!(!paused(&app.tool_call(&token, &sid, TOOL, json!({})).await));
    app.core
        .policy
        .set(gatehouse_core::policy::Rule {
            human_only: true,
            ..gatehouse_core::policy::Rule::new(TOOL.parse().unwrap(), gatehouse_core::policy::Action::RequireApproval)
        })
        .unwrap();
    let eid = execution_id(&app.tool_call(&token, &sid, TOOL, json!({})).await);

    // And none is made for a human_only call: 403 with the reason, nothing decided.
    let r = resume_with(&app, &carol, &eid, json!({"action": "accept", "grant": {"scope": "1h"}})).await;
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("a person decides every call"), "{body}");
    assert_eq!(app.core.approvals.get(&eid).unwrap().1.state, gatehouse_core::approvals::State::Pending);
    let r = app.post_fn(&carol, "grant", &[("id", &eid), ("scope", "1h")]).await;
    assert_eq!(r.status(), 403, "the page's form too");

    // Gate-changing tools: a plain owner is told an admin must decide; an
    // admin is refused too, as these always wait for a person.
    let eid = execution_id(
        &app.tool_call(&token, &sid, "gatehouse_policy_set", json!({"pattern": "*", "action": "allow"})).await,
    );
    let r = resume_with(&app, &carol, &eid, json!({"action": "accept", "grant": {"scope": "1h"}})).await;
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "admin_required");
    let r = resume_with(&app, &ada, &eid, json!({"action": "accept", "grant": {"scope": "1h"}})).await;
    assert_eq!(r.status(), 403);
    assert_eq!(app.core.approvals.get(&eid).unwrap().1.state, gatehouse_core::approvals::State::Pending);
    assert_eq!(grants_of(&app, &ada).await.len(), 1, "only the first grant exists");
}

#[tokio::test]
async fn grants_are_owner_checked_and_origin_checked() {
    let (app, ada, carol, bob) = app().await;
    let token = app.issue_owned("claude", "carol");
    let sid = app.open_session(&token).await;
    let eid = execution_id(&app.tool_call(&token, &sid, TOOL, json!({})).await);

    // Bob may not grant carol's agent anything.
    let r = resume_with(&app, &bob, &eid, json!({"action": "accept", "grant": {"scope": "1h"}})).await;
    assert_eq!(r.status(), 403);
    let r = app.post_fn(&bob, "grant", &[("id", &eid), ("scope", "1h")]).await;
    assert_eq!(r.status(), 403);
    // A grant goes with accept only; an unknown scope is a bad body.
    let r = resume_with(&app, &carol, &eid, json!({"action": "decline", "grant": {"scope": "1h"}})).await;
    assert_eq!(r.status(), 400);
    let r = resume_with(&app, &carol, &eid, json!({"action": "accept", "grant": {"scope": "1y"}})).await;
    assert_eq!(r.status(), 400);

    // Another site: every grant action is refused before it is looked at.
    let evil = |method: Method, path: &str| {
        app.client.request(method, app.url(path)).header("origin", "https://evil.example").header("cookie", &carol)
    };
    let r = evil(Method::POST, &format!("/api/executions/{eid}/resume"))
        .json(&json!({"action": "accept", "grant": {"scope": "forever"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "forbidden_origin");
    let r =
        evil(Method::POST, "/api/fn/grant").form(&[("id", eid.as_str()), ("scope", "forever")]).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(grants_of(&app, &carol).await.is_empty());

    let id = grant(&app, &carol, &eid, "forever", json!({})).await;
    let r = evil(Method::DELETE, &format!("/api/grants/{id}")).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let r = evil(Method::POST, "/api/fn/revoke-grant").form(&[("id", id.as_str())]).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let r = app.post_fn(&bob, "revoke-grant", &[("id", &id)]).await;
    assert_eq!(r.status(), 403, "bob may not revoke carol's grant");
    assert_eq!(grants_of(&app, &carol).await.len(), 1, "still there");

    // An admin sees and revokes everyone's (here through the page's form).
    assert_eq!(grants_of(&app, &ada).await.len(), 1);
    assert_eq!(app.post_fn(&ada, "revoke-grant", &[("id", &id)]).await.status(), 200);
    assert!(grants_of(&app, &carol).await.is_empty());
    let change = app.core.changes.recent("grant", 1).unwrap().remove(0);
    assert_eq!((change.action.as_str(), change.actor.as_str()), ("revoke", "user:ada#1"));
}

#[tokio::test]
async fn a_decline_reason_reaches_the_agents_client_and_the_audit() {
    let app = spawn_app().await;
    let (ada, _) = app.ada_and_bob().await;
    let token = app.issue_owned("claude", "ada");
    let client = app.connect((), &token).await;
    let reason = "Use a narrower pattern, such as files__read_*";

    let paused = client
        .call_tool(tool_params("gatehouse_policy_set", json!({"pattern": "*", "action": "allow"})))
        .await
        .unwrap();
    let eid = paused.structured_content.as_ref().unwrap()["executionId"].as_str().unwrap().to_string();

    // Bad reasons are refused (and decide nothing).
    for bad in [json!("x".repeat(501)), json!("ring\u{7}bell")] {
        let r = resume_with(&app, &ada, &eid, json!({"action": "decline", "reason": bad})).await;
        assert_eq!(r.status(), 400);
    }
    let r = resume_with(&app, &ada, &eid, json!({"action": "decline", "reason": format!("  {reason}\n")})).await;
    assert_eq!(r.status(), 200);

    let result: CallToolResult = client.call_tool(tool_params("resume", json!({"executionId": eid}))).await.unwrap();
    assert_eq!(result.is_error, Some(true));
    let text = result.content[0].as_text().unwrap().text.clone();
    assert!(text.contains(reason), "{text}");
    let structured = result.structured_content.unwrap();
    assert_eq!(
        (structured["error"].as_str(), structured["reason"].as_str()),
        (Some("execution_declined"), Some(reason))
    );
    let last = app.core.approvals.audit().latest(&eid.as_str().into()).unwrap().unwrap();
    assert_eq!((last.state.as_str(), last.detail.as_deref()), ("declined", Some(reason)));

    // An approval's note is audited too (here through the page's form).
    let paused = client
        .call_tool(tool_params("gatehouse_policy_set", json!({"pattern": "files__*", "action": "allow"})))
        .await
        .unwrap();
    let eid = paused.structured_content.as_ref().unwrap()["executionId"].as_str().unwrap().to_string();
    let r = app.post_fn(&ada, "decide", &[("id", &eid), ("action", "accept"), ("reason", "fine for today")]).await;
    assert_eq!(r.status(), 200);
    let approved = app.core.approvals.audit().timeline(&eid.as_str().into()).unwrap();
    assert_eq!((approved[1].state.as_str(), approved[1].detail.as_deref()), ("approved", Some("fine for today")));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn grants_per_user_are_bounded_and_a_refused_grant_leaves_the_call_waiting() {
    let app = spawn_app_fronting(everything_stdio(), |c| c.max_grants_per_user = 1).await;
    app.wait_for_upstream_tool(TOOL).await;
    app.add_user("carol", false).await;
    let carol = app.sign_in("carol").await;
    let pause = |agent: &'static str| {
        let app = &app;
        async move {
            let token = app.issue_owned(agent, "carol");
            let sid = app.open_session(&token).await;
            let reply = app.tool_call(&token, &sid, TOOL, json!({})).await;
            assert!(paused(&reply));
            execution_id(&reply)
        }
    };
    let first = pause("claude").await;
    grant(&app, &carol, &first, "8h", json!({})).await;
    // Another agent of carol's: a second grant is one too many.
    let second = pause("codex").await;
    let r = resume_with(&app, &carol, &second, json!({"action": "accept", "grant": {"scope": "8h"}})).await;
    assert_eq!(r.status(), 429);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "limit_reached", "{body}");
    assert!(body["message"].as_str().unwrap().contains("max_grants_per_user"), "{body}");
    // The call was not approved: it still waits, and a plain approval works.
    assert_eq!(app.core.approvals.audit().latest(&second).unwrap().unwrap().state.as_str(), "pending");
    assert_eq!(resume_with(&app, &carol, &second, json!({"action": "accept"})).await.status(), 200);
    // Revoking the grant makes room.
    let id = grants_of(&app, &carol).await[0]["id"].as_str().unwrap().to_string();
    assert_eq!(revoke(&app, &carol, &id).await.status(), 200);
    let third = pause("aider").await;
    grant(&app, &carol, &third, "8h", json!({})).await;
}
