//! Two replicas on one PostgreSQL, in one process: each a whole server with
//! its own port, sessions and approval store. These run when the suite runs
//! on PostgreSQL (`GATEHOUSE_TEST_DATABASE_URL`); on SQLite there is one
//! process and nothing to share, so they return at once.

use serde_json::{Value, json};

use crate::helpers::*;

const SET_RULE: &str = "gatehouse_policy_set";

/// Replica A, and B on A's database; `None` on SQLite.
async fn two_replicas() -> Option<(TestApp, TestApp)> {
    let a = spawn_app().await;
    let url = a.core.db.postgres_url()?.to_string();
    let b = spawn_app_with(|c| c.database.url = Some(url)).await;
    Some((a, b))
}

#[tokio::test]
async fn a_2026_07_28_call_paused_on_one_replica_is_decided_and_retried_on_the_other() {
    let Some((a, b)) = two_replicas().await else { return };
    a.add_user("ada", true).await;
    let token = a.issue_owned("py-agent", "ada");
    let args = json!({"pattern": "across_replicas", "action": "allow"});
    let first = a.native_url_call(&token, SET_RULE, &args, None).await;
    assert_eq!(first["resultType"], "input_required", "{first}");
    let state = first["requestState"].as_str().unwrap().to_string();
    let url = first["inputRequests"]["approval"]["params"]["url"].as_str().unwrap();
    let eid = url.split("/resume/").nth(1).unwrap().split('?').next().unwrap().to_string();

    // Another user may not decide it on B either (B checks before it asks A).
    b.add_user("bob", false).await;
    let bob = b.sign_in("bob").await;
    assert_eq!(b.decide(&bob, &eid, "accept").await.status(), 403);

    // B shows A's pause to its owner and takes her decision.
    assert_eq!(b.core.approvals.get(&eid.as_str().into()).expect("B sees A's pause").1.state.as_str(), "pending");
    let ada = b.sign_in("ada").await;
    assert_eq!(b.decide(&ada, &eid, "accept").await.status(), 200);
    assert_eq!(a.decide(&a.sign_in("ada").await, &eid, "decline").await.status(), 409, "first decision wins");

    // The retry lands on B (a session-less request goes anywhere): B opens
    // the request state A sealed, takes the execution over and runs it once.
    let done = b.native_url_call(&token, SET_RULE, &args, Some(&state)).await;
    assert_eq!(done["isError"], false, "{done}");
    assert_eq!(done["structuredContent"]["pattern"], "across_replicas");
    assert!(a.core.policy.rules().unwrap().iter().any(|r| r.pattern == "across_replicas"), "A sees the rule at once");
    // The same retry on A (a client repeating itself) does not run it again.
    a.native_url_call(&token, SET_RULE, &args, Some(&state)).await;
    let ran = a.core.approvals.audit().timeline(&eid.as_str().into()).unwrap();
    assert_eq!(ran.iter().filter(|e| e.state.as_str() == "completed").count(), 1, "{ran:?}");
    assert!(a.core.approvals.is_empty() && b.core.approvals.is_empty(), "no entry is left on either replica");
}

#[tokio::test]
async fn each_replica_shows_the_others_sessions_and_upstream_health() {
    let a = spawn_app_fronting(everything_stdio(), |_| {}).await;
    let Some(url) = a.core.db.postgres_url().map(str::to_string) else { return };
    let b = spawn_app_with(|c| c.database.url = Some(url)).await;
    a.add_user("ada", true).await;
    let token = a.issue_owned("claude", "ada");
    let sid = a.open_session(&token).await;
    // B hears of A's session and upstreams over NOTIFY (A answers B's hello).
    for _ in 0..100 {
        if b.core.live.sessions().iter().any(|s| s.session_id == sid) && !b.core.live.upstreams_elsewhere().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(b.core.live.sessions().iter().any(|s| s.session_id == sid), "A's session is listed on B");
    let ada = b.sign_in("ada").await;
    let page = b.get_as(&ada, "/upstreams").await.text().await.unwrap();
    assert!(page.contains("On the other replicas"), "{page}");
    assert!(page.contains(a.core.approvals.cluster().unwrap().replica()), "names the replica");
    assert!(page.contains("everything") && page.contains(">up<"), "with A's upstream and its health");
    // B itself fronts nothing: its own table says so.
    assert!(page.contains("No upstream yet. Add one below"), "an admin is offered the form");
}

#[tokio::test]
async fn a_token_minted_on_one_replica_is_shown_once_on_the_other() {
    let Some((a, b)) = two_replicas().await else { return };
    a.add_user("ada", false).await;
    let ada = a.sign_in("ada").await;
    let r = a.post_fn(&ada, "mint", &[("agent", "claude"), ("thread", ""), ("owner", "")]).await;
    assert!(r.status().is_success() || r.status().is_redirection(), "{}", r.status());
    let minted = a.core.credentials.list().unwrap();
    assert_eq!(minted.len(), 1);
    let id = minted[0].id.clone();

    // The redirect to the page that shows the token lands on B (the browser
    // session is in the shared database, so the same cookie works there).
    let shown: Value = b.post_fn(&ada, "minted", &[("id", &id)]).await.json().await.unwrap();
    let token = shown["token"].as_str().unwrap_or_else(|| panic!("B shows the token A minted: {shown}")).to_string();
    assert_eq!(shown["id"], id.as_str());
    // Shown once: neither replica shows it again.
    let again: Value = a.post_fn(&ada, "minted", &[("id", &id)]).await.json().await.unwrap();
    assert!(again.is_null(), "not again on A: {again}");
    let again: Value = b.post_fn(&ada, "minted", &[("id", &id)]).await.json().await.unwrap();
    assert!(again.is_null(), "not again on B: {again}");
    // And it is the token of the credential A minted.
    assert_eq!(a.mcp(&token).json(&initialize_request("2025-11-25")).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn failed_sign_ins_on_both_replicas_count_together() {
    let Some((a, b)) = two_replicas().await else { return };
    a.add_user("ada", false).await;
    // Five failures, spread over the replicas: as many as one replica allows.
    for n in 0..5 {
        let replica = if n % 2 == 0 { &a } else { &b };
        assert_eq!(replica.sign_in_with("ada", "wrong password").await.status(), 401, "failure {n}");
    }
    // Locked on both, even with the right password.
    for (name, replica) in [("A", &a), ("B", &b)] {
        let r = replica.sign_in_with("ada", PASSWORD).await;
        assert_eq!(r.status(), 429, "locked on {name}");
        let wait: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
        assert!(wait >= 1, "{name}: {wait}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "too_many_attempts");
        assert!(body["message"].as_str().unwrap().contains("username"), "{body}");
    }

    // After the lockout, a success on B resets the count A sees too.
    for replica in [&a, &b] {
        replica.clock.advance(gatehouse::throttle::FIRST_LOCKOUT);
    }
    assert_eq!(b.sign_in_with("ada", PASSWORD).await.status(), 200);
    for _ in 0..4 {
        assert_eq!(a.sign_in_with("ada", "wrong password").await.status(), 401);
    }
    assert_eq!(a.sign_in_with("ada", PASSWORD).await.status(), 200, "four failures after B's success do not lock");
}

/// A name is not an identity: alice is removed on B while her agent's call
/// waits on A. A settles it (her credential is revoked everywhere), and a
/// user added later under her name, signed in on either replica, can
/// neither see nor decide it: access compares user ids, and PostgreSQL
/// never gives an id twice. (The unit tests of `may_decide`'s callers hold
/// a call still pending against a namesake.)
#[tokio::test]
async fn a_user_added_under_a_removed_users_name_sees_none_of_her_calls_on_either_replica() {
    const TOOL: &str = "ev__test_simple_text";
    let a = spawn_app_fronting(everything_stdio(), |_| {}).await;
    let Some(url) = a.core.db.postgres_url().map(str::to_string) else { return };
    let b = spawn_app_with(|c| c.database.url = Some(url)).await;
    a.wait_for_upstream_tool(TOOL).await;
    a.add_user("root", true).await;
    a.add_user("alice", false).await;
    let token = a.issue_owned("claude", "alice");
    let sid = a.open_session(&token).await;
    let call = a.tool_call(&token, &sid, TOOL, json!({})).await;
    assert!(paused(&call), "{call}");
    let eid = execution_id(&call);

    let root = b.sign_in("root").await;
    let removed = b.post_fn(&root, "user-remove", &[("username", "alice")]).await;
    assert_eq!(removed.status(), 200, "{}", removed.text().await.unwrap());
    for _ in 0..100 {
        if a.core.approvals.get(&eid).is_none() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let last = a.core.approvals.audit().latest(&eid).unwrap().unwrap();
    assert_eq!(last.state.as_str(), "revoked", "A settles the call B's removal revoked: {last:?}");

    b.add_user("alice", false).await;
    for app in [&a, &b] {
        let namesake = app.sign_in("alice").await;
        let seen = app.get_as(&namesake, &format!("/api/executions/{eid}")).await;
        assert_eq!(seen.status(), 403, "seen by a namesake: {}", seen.text().await.unwrap());
        assert_eq!(app.decide(&namesake, eid.as_str(), "accept").await.status(), 403, "decided by a namesake");
        let history: Value = app.get_as(&namesake, "/api/history").await.json().await.unwrap();
        assert!(!history.to_string().contains(eid.as_str()), "in a namesake's history: {history}");
    }
    // An admin reads it (the checks above can fail).
    assert_eq!(a.get_as(&a.sign_in("root").await, &format!("/api/executions/{eid}")).await.status(), 200);
}

/// An upstream an admin adds on one replica starts on the other within
/// the poll (each replica runs its own connection), a restart asked on
/// either reaches both, and its removal stops it on both.
#[tokio::test]
async fn an_upstream_added_on_one_replica_runs_on_both_and_leaves_both() {
    const TOOL: &str = "web__test_simple_text";
    let fixture = Fixture::start(0).await;
    let a = spawn_app().await;
    let Some(url) = a.core.db.postgres_url().map(str::to_string) else { return };
    let b = spawn_app_with(|c| c.database.url = Some(url)).await;
    a.add_user("root", true).await;
    let root = b.sign_in("root").await;
    let form =
        [("draft[name]", "web"), ("draft[kind]", "http"), ("draft[url]", fixture.url.as_str()), ("draft[adding]", "1")];
    let added = b.post_fn(&root, "upstream_save", &form).await;
    assert_eq!(added.status(), 200, "{}", added.text().await.unwrap());
    b.wait_for_upstream_tool(TOOL).await;
    a.wait_for_upstream_tool(TOOL).await;

    let restarts =
        |app: &TestApp| app.state.mcp.config.load().upstream.iter().find(|u| u.name == "web").map(|u| u.restarts);
    assert_eq!(b.post_fn(&root, "upstream_action", &[("name", "web"), ("action", "restart")]).await.status(), 200);
    for _ in 0..100 {
        if restarts(&a) == Some(1) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!((restarts(&a), restarts(&b)), (Some(1), Some(1)), "the restart reached both");
    a.wait_for_upstream_tool(TOOL).await;

    let root_a = a.sign_in("root").await;
    assert_eq!(a.post_fn(&root_a, "upstream_action", &[("name", "web"), ("action", "remove")]).await.status(), 200);
    for _ in 0..100 {
        if [&a, &b].iter().all(|app| app.upstreams.status().is_empty()) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(a.upstreams.status().is_empty() && b.upstreams.status().is_empty(), "removed on both");
}

/// A notification target an admin adds on one replica runs on both, and
/// a call paused on the other is announced once (the claims), not twice;
/// disabled on either, it is disabled on both.
#[tokio::test]
async fn a_notification_target_added_on_one_replica_announces_the_others_call_once() {
    use crate::notify::{Behaviour, Receiver, SECRET, gated_call, verify};
    let Some((a, b)) = two_replicas().await else { return };
    let mut receiver = Receiver::start(Behaviour::Accept).await;
    let (_, _) = a.ada_and_bob().await;
    let ada = b.sign_in("ada").await;
    let form = [
        ("draft[name]", "ops"),
        ("draft[format]", "json"),
        ("draft[url]", receiver.url.as_str()),
        ("draft[secret]", SECRET),
        ("draft[adding]", "1"),
    ];
    let added = b.post_fn(&ada, "notify_save", &form).await;
    assert_eq!(added.status(), 200, "{}", added.text().await.unwrap());
    let runs = |app: &TestApp, enabled: bool| {
        app.state.notify.notify_targets().iter().any(|t| t.name == "ops" && t.enabled == enabled)
    };
    for _ in 0..200 {
        if runs(&a, true) && runs(&b, true) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(runs(&a, true) && runs(&b, true), "runs on both");

    let eid = gated_call(&a, "claude", "files_*").await;
    let request = receiver.next().await;
    verify(&request.headers, &request.body);
    assert_eq!(serde_json::from_str::<Value>(&request.body).unwrap()["executionId"], eid.as_str());
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert!(receiver.rx.try_recv().is_err(), "announced once, by one replica");

    assert_eq!(b.post_fn(&ada, "notify_action", &[("name", "ops"), ("action", "disable")]).await.status(), 200);
    for _ in 0..200 {
        if runs(&a, false) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(runs(&a, false), "disabled on the other replica too");
}
