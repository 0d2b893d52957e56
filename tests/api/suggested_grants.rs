//! Suggested grants: after people approved an agent's calls like this one
//! three times in 7 days, the call's page offers the narrowest grant that
//! covers them; accepting it is the grant form's own step, and turning it
//! down is remembered for that person. With a scripted week, the questions
//! asked with and without accepting the offers.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::*;

/// The fixture's unannotated tool: waits for a person by default and
/// ignores its arguments.
const TOOL: &str = "ev__test_simple_text";

/// An app fronting the "everything" fixture, with admin "ada" and plain
/// users "carol" and "bob" signed in: (app, ada, carol, bob).
async fn app() -> (TestApp, String, String, String) {
    // The scripted week moves the clock on by days: the agent's credential
    // must outlive them (its signs of life are written lazily).
    let app = spawn_app_fronting(everything_stdio(), |c| c.liveness_window = Duration::from_secs(30 * 86_400)).await;
    app.wait_for_upstream_tool(TOOL).await;
    let (ada, bob) = app.ada_and_bob().await;
    app.add_user("carol", false).await;
    let carol = app.sign_in("carol").await;
    (app, ada, carol, bob)
}

/// Calls the tool with `path`; the paused call's id, or `None` if it ran.
async fn call(app: &TestApp, token: &str, sid: &str, path: &str) -> Option<String> {
    let reply = app.tool_call(token, sid, TOOL, json!({"path": path})).await;
    paused(&reply).then(|| execution_id(&reply).to_string())
}

/// Approves `eid` as `cookie` through the JSON API.
async fn approve(app: &TestApp, cookie: &str, eid: &str) {
    let r = app
        .same_origin(Method::POST, &format!("/api/executions/{eid}/resume"))
        .header("cookie", cookie)
        .json(&json!({"action": "accept"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

/// The call `eid` as `cookie` reads it: (status, body).
async fn view(app: &TestApp, cookie: &str, eid: &str) -> (u16, Value) {
    let r = app.get_as(cookie, &format!("/api/executions/{eid}")).await;
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Accepts the offer on `eid` as the call page's form posts it.
async fn accept(app: &TestApp, cookie: &str, eid: &str, offer: &Value) {
    let mut form: Vec<(String, String)> =
        vec![("id".into(), eid.into()), ("scope".into(), offer["scope"].as_str().unwrap().into())];
    for (name, want) in offer["arguments"].as_object().unwrap() {
        match (want.get("exact"), want.get("prefix")) {
            (Some(_), _) => form.push((format!("exact[{name}]"), "on".into())),
            (_, Some(p)) => form.push((format!("prefix[{name}]"), p.as_str().unwrap().into())),
            _ => panic!("not a constraint: {want}"),
        }
    }
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = app.post_fn(cookie, "grant", &form).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

#[tokio::test]
async fn three_approvals_alike_offer_the_narrowest_grant_and_accepting_it_spares_the_next_questions() {
    let (app, ada, carol, bob) = app().await;
    let token = app.issue_owned("claude", "carol");
    let sid = app.open_session(&token).await;
    for path in ["/tmp/build/a.o", "/tmp/build/lib/b.o"] {
        let eid = call(&app, &token, &sid, path).await.expect("it pauses");
        approve(&app, &carol, &eid).await;
    }
    // Two approvals: nothing offered yet.
    let third = call(&app, &token, &sid, "/tmp/build/c.o").await.unwrap();
    assert_eq!(view(&app, &carol, &third).await.1.get("suggestion"), None);
    approve(&app, &carol, &third).await;
    // Another agent's approvals, and calls of another shape, do not count.
    let other = app.issue_owned("cursor", "carol");
    let other_sid = app.open_session(&other).await;
    let elsewhere = call(&app, &other, &other_sid, "/tmp/build/d.o").await.unwrap();
    assert_eq!(view(&app, &carol, &elsewhere).await.1.get("suggestion"), None);
    let shaped = app.tool_call(&token, &sid, TOOL, json!({"path": "/tmp/build/e.o", "force": true})).await;
    assert_eq!(view(&app, &carol, &execution_id(&shaped)).await.1.get("suggestion"), None);

    let fourth = call(&app, &token, &sid, "/tmp/build/d.o").await.unwrap();
    let (status, seen) = view(&app, &carol, &fourth).await;
    assert_eq!(status, 200);
    let offer = &seen["suggestion"];
    assert_eq!(offer["approvals"], 3, "{seen}");
    assert_eq!(offer["scope"], "8h");
    assert_eq!(offer["arguments"], json!({"path": {"prefix": "/tmp/build/"}}));
    // Offered to who may make the grant: the owner and an admin, not another user.
    assert_eq!(view(&app, &ada, &fourth).await.1["suggestion"], *offer);
    let (status, body) = view(&app, &bob, &fourth).await;
    assert_eq!(status, 403);
    assert_eq!(body.get("suggestion"), None);

    accept(&app, &carol, &fourth, offer).await;
    assert_eq!(view(&app, &carol, &fourth).await.1["state"], "approved");
    assert_eq!(call(&app, &token, &sid, "/tmp/build/sub/f.o").await, None, "under the prefix: runs at once");
    assert!(call(&app, &token, &sid, "/tmp/other").await.is_some(), "outside it: still asks");
    assert!(call(&app, &token, &sid, "/tmp/build/../../etc/passwd").await.is_some(), "climbing out: still asks");
    // A settled call offers nothing.
    assert_eq!(view(&app, &carol, &fourth).await.1.get("suggestion"), None);
}

#[tokio::test]
async fn a_turned_down_offer_is_not_made_again_to_that_person() {
    let (app, ada, carol, bob) = app().await;
    let token = app.issue_owned("claude", "carol");
    let sid = app.open_session(&token).await;
    for n in 0..3 {
        let eid = call(&app, &token, &sid, &format!("/srv/data/{n}.csv")).await.unwrap();
        approve(&app, &carol, &eid).await;
    }
    let next = call(&app, &token, &sid, "/srv/data/3.csv").await.unwrap();
    assert!(view(&app, &carol, &next).await.1["suggestion"].is_object());

    // Someone who may not decide the call cannot turn the offer down for its owner.
    let r = app.post_fn(&bob, "decline-suggestion", &[("id", &next)]).await;
    assert_eq!(r.status(), 403, "{}", r.text().await.unwrap());
    assert!(view(&app, &carol, &next).await.1["suggestion"].is_object());

    let r = app.post_fn(&carol, "decline-suggestion", &[("id", &next)]).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(view(&app, &carol, &next).await.1.get("suggestion"), None);
    approve(&app, &carol, &next).await;
    // Remembered for the next calls too, and for carol only.
    let later = call(&app, &token, &sid, "/srv/data/4.csv").await.unwrap();
    assert_eq!(view(&app, &carol, &later).await.1.get("suggestion"), None);
    assert!(view(&app, &ada, &later).await.1["suggestion"].is_object());
    assert_eq!(view(&app, &carol, &later).await.1["state"], "pending", "turning the offer down decides nothing");
}

/// One scripted week of an agent's work: seven days 16 hours apart (past
/// the last day's 8-hour grant), six calls a day into that day's build
/// directory, each one asked about approved and then run. Returns the
/// questions asked.
async fn scripted_week(accept_offers: bool) -> usize {
    let (app, _ada, carol, _bob) = app().await;
    let token = app.issue_owned("claude", "carol");
    let sid = app.open_session(&token).await;
    let mut asked = 0;
    for day in 0..7 {
        for n in 0..6 {
            let Some(eid) = call(&app, &token, &sid, &format!("/home/carol/build/day{day}/obj{n}.o")).await else {
                continue;
            };
            asked += 1;
            let offer = view(&app, &carol, &eid).await.1.get("suggestion").cloned();
            match offer {
                Some(offer) if accept_offers => accept(&app, &carol, &eid, &offer).await,
                _ => approve(&app, &carol, &eid).await,
            }
            // The agent runs what was approved.
            let ran = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
            assert_eq!(ran["result"]["isError"], Value::Null, "{ran}");
        }
        app.clock.advance(Duration::from_secs(16 * 3600));
    }
    asked
}

#[tokio::test]
async fn a_scripted_week_asks_fewer_questions_when_the_offers_are_accepted() {
    let without = scripted_week(false).await;
    let with = scripted_week(true).await;
    println!("scripted week, 42 calls: {without} questions without accepting the offers, {with} with");
    assert_eq!(without, 42, "without a grant, every call asks");
    // Day one asks three times before the offer and once with it; each
    // later day asks once (yesterday's grant has ended) and is offered again.
    assert_eq!(with, 4 + 6);
}

/// Turns down the offer on `eid` as `cookie` through the JSON API.
async fn decline_offer(app: &TestApp, cookie: &str, eid: &str) -> reqwest::Response {
    app.same_origin(Method::POST, &format!("/api/executions/{eid}/suggestion/decline"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_json_api_turns_an_offer_down_for_who_may_see_the_call_and_same_site_only() {
    let (app, _ada, carol, bob) = app().await;
    let token = app.issue_owned("claude", "carol");
    let sid = app.open_session(&token).await;
    for n in 0..3 {
        let eid = call(&app, &token, &sid, &format!("/srv/logs/{n}.log")).await.unwrap();
        approve(&app, &carol, &eid).await;
    }
    let next = call(&app, &token, &sid, "/srv/logs/3.log").await.unwrap();
    assert!(view(&app, &carol, &next).await.1["suggestion"].is_object());

    assert_eq!(decline_offer(&app, &bob, &next).await.status(), 403, "another user");
    let r = app
        .client
        .post(format!("{}/api/executions/{next}/suggestion/decline", app.address))
        .header("cookie", &carol)
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a page of another site in carol's browser");
    assert!(view(&app, &carol, &next).await.1["suggestion"].is_object(), "neither turned it down");

    assert_eq!(decline_offer(&app, &carol, &next).await.status(), 204);
    assert_eq!(view(&app, &carol, &next).await.1.get("suggestion"), None);
    assert_eq!(decline_offer(&app, &carol, "exec_missing").await.status(), 404);
}

#[tokio::test]
async fn no_offer_for_a_call_only_a_person_may_decide_nor_when_offers_are_off() {
    let (app, _ada, carol, _bob) = app().await;
    let token = app.issue_owned("claude", "carol");
    let sid = app.open_session(&token).await;
    let rule = gatehouse_core::policy::Rule {
        human_only: true,
        ..gatehouse_core::policy::Rule::new(TOOL.parse().unwrap(), gatehouse_core::policy::Action::RequireApproval)
    };
    let saved = app.core.policy.set(rule).unwrap();
    for n in 0..3 {
        let eid = call(&app, &token, &sid, &format!("/srv/db/{n}.sql")).await.unwrap();
        approve(&app, &carol, &eid).await;
    }
    let next = call(&app, &token, &sid, "/srv/db/3.sql").await.unwrap();
    let (status, seen) = view(&app, &carol, &next).await;
    assert_eq!((status, seen["humanOnly"].clone()), (200, Value::Bool(true)), "{seen}");
    assert_eq!(seen.get("suggestion"), None, "a person decides every call: no grant is offered");
    // Without the rule, the same history offers one: the check above is the rule's doing.
    assert!(app.core.policy.remove(saved.name.as_str()).unwrap());
    let later = call(&app, &token, &sid, "/srv/db/4.sql").await.unwrap();
    assert!(view(&app, &carol, &later).await.1["suggestion"].is_object());

    // suggest_grants_after = 0: never offered.
    let off = spawn_app_fronting(everything_stdio(), |c| c.suggest_grants_after = 0).await;
    off.wait_for_upstream_tool(TOOL).await;
    off.add_user("carol", false).await;
    let carol = off.sign_in("carol").await;
    let token = off.issue_owned("claude", "carol");
    let sid = off.open_session(&token).await;
    for n in 0..4 {
        let eid = call(&off, &token, &sid, &format!("/srv/db/{n}.sql")).await.unwrap();
        assert_eq!(view(&off, &carol, &eid).await.1.get("suggestion"), None);
        approve(&off, &carol, &eid).await;
    }
}
