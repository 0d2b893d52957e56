//! Limits the browser side holds against a client that keeps trying: failed
//! sign-ins and setup guesses (per username and per address, with backoff),
//! concurrent password hashes, and live streams per browser session.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::*;

fn retry_after(r: &reqwest::Response) -> u64 {
    r.headers()["retry-after"].to_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn failed_sign_ins_lock_the_username_with_a_growing_wait_and_a_success_resets_it() {
    let app = spawn_app().await;
    app.add_user("ada", false).await;
    app.add_user("bob", false).await;
    for _ in 0..5 {
        assert_eq!(app.sign_in_with("ada", "wrong password").await.status(), 401);
    }
    // Locked: even the right password is refused, before any hashing.
    let r = app.sign_in_with("ada", PASSWORD).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let first = retry_after(&r);
    assert!(first >= 1);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "too_many_attempts");
    assert!(body["message"].as_str().unwrap().contains("username"), "{body}");
    // Another user from the same address is not affected.
    assert_eq!(app.sign_in_with("bob", PASSWORD).await.status(), 200);

    // After the wait, one more failure locks it again, for longer.
    app.clock.advance(Duration::from_secs(first));
    assert_eq!(app.sign_in_with("ada", "wrong password").await.status(), 401);
    let r = app.sign_in_with("ada", PASSWORD).await;
    assert_eq!(r.status(), 429);
    let second = retry_after(&r);
    assert!(second > first, "the wait grows: {first} s, then {second} s");

    // A success resets the username's count.
    app.clock.advance(Duration::from_secs(second));
    assert_eq!(app.sign_in_with("ada", PASSWORD).await.status(), 200);
    for _ in 0..4 {
        assert_eq!(app.sign_in_with("ada", "wrong password").await.status(), 401);
    }
    assert_eq!(app.sign_in_with("ada", PASSWORD).await.status(), 200, "four failures after a success do not lock");
}

#[tokio::test]
async fn failures_from_one_address_lock_it_whatever_the_name_or_forwarded_for_header() {
    let app = spawn_app().await;
    app.add_user("ada", false).await;
    for n in 0..20 {
        let r = app
            .same_origin(reqwest::Method::POST, "/api/auth/sign-in")
            .header("x-forwarded-for", format!("203.0.113.{n}"))
            .json(&json!({"username": format!("guess{n}"), "password": "wrong password"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }
    let r = app.sign_in_with("ada", PASSWORD).await;
    assert_eq!(r.status(), 429);
    assert!(retry_after(&r) >= 1);
    let body: Value = r.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("address"), "{body}");
    // The server keeps serving.
    assert_eq!(app.client.get(format!("{}/healthz", app.address)).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn a_locked_form_sign_in_goes_back_to_the_page_saying_how_long_to_wait() {
    let app = spawn_app().await;
    app.add_user("ada", false).await;
    let form = |password: &'static str| {
        app.same_origin(reqwest::Method::POST, "/api/auth/sign-in")
            .form(&[("username", "ada"), ("password", password), ("next", "/approvals")])
            .send()
    };
    for _ in 0..5 {
        assert_eq!(form("wrong password").await.unwrap().status(), 303);
    }
    let r = form(PASSWORD).await.unwrap();
    assert_eq!(r.status(), 303);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    assert_eq!(location, "/sign-in?next=%2Fapprovals", "the address says nothing of the refusal");
    let attempt = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(attempt.starts_with("gatehouse_sign_in=username=ada&retry_after_secs="), "{attempt}");
    let cookie = attempt.split(';').next().unwrap().to_string();
    let r = app.client.get(format!("{}{location}", app.address)).header("cookie", &cookie).send().await.unwrap();
    assert!(
        r.headers().get_all("set-cookie").iter().any(|c| c.to_str().unwrap().starts_with("gatehouse_sign_in=;")),
        "read once: the page clears it"
    );
    let page = r.text().await.unwrap();
    assert!(page.contains("Too many failed sign-ins. Try again in"), "the page says why");
}

#[tokio::test]
async fn setup_tokens_are_checked_before_hashing_guesses_are_limited_and_links_expire() {
    let app = spawn_app().await;
    let token = app.core.users.new_setup_token().unwrap().unwrap();
    let setup = |token: String| {
        app.same_origin(reqwest::Method::POST, "/api/auth/setup")
            .json(&json!({"token": token, "username": "root", "password": "long enough pw"}))
            .send()
    };
    for n in 0..20 {
        let r = setup(format!("guess-{n}")).await.unwrap();
        assert_eq!(r.status(), 400);
    }
    assert_eq!(app.core.users.hashing().peak(), 0, "no password was hashed for a wrong token");
    let r = setup(token.clone()).await.unwrap();
    assert_eq!(r.status(), 429, "the address is locked after 20 wrong tokens");
    assert!(retry_after(&r) >= 1);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "too_many_attempts");

    // A day later the (right) link has expired; a restart prints a new one.
    app.clock.advance(Duration::from_secs(24 * 3600));
    let r = setup(token).await.unwrap();
    assert_eq!(r.status(), 400);
    let message = r.json::<Value>().await.unwrap()["message"].as_str().unwrap().to_string();
    assert!(message.contains("expired") && message.contains("restart"), "{message}");
    assert_eq!(app.core.users.count().unwrap(), 0);
    let fresh = app.core.users.new_setup_token().unwrap().unwrap();
    assert_eq!(setup(fresh).await.unwrap().status(), 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_hashes_run_at_most_two_per_core_at_once() {
    let app = spawn_app().await;
    let limit = app.core.users.hashing().limit();
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(limit, 2 * cores);
    // Distinct users, so no username sees parallel attempts.
    let names: Vec<String> = (0..3 * limit).map(|n| format!("user{n}")).collect();
    for name in &names {
        app.add_user(name, false).await;
    }
    let mut sign_ins = tokio::task::JoinSet::new();
    for name in names {
        let request = app.sign_in_request(&name, PASSWORD);
        sign_ins.spawn(async move { request.send().await.unwrap().status() });
    }
    while let Some(status) = sign_ins.join_next().await {
        assert_eq!(status.unwrap(), 200);
    }
    let peak = app.core.users.hashing().peak();
    assert!((1..=limit).contains(&peak), "{peak} hashes ran at once, limit {limit}");
}

#[tokio::test]
async fn a_browser_session_holds_at_most_16_live_streams() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    let mut open = Vec::new();
    for n in 0..16 {
        let path = ["/api/live/events", "/api/approvals/events"][n % 2];
        let r = app.get_as(&ada, path).await;
        assert_eq!(r.status(), 200, "stream {n}");
        open.push(r);
    }
    let r = app.get_as(&ada, "/api/live/events").await;
    assert_eq!(r.status(), 429);
    assert!(retry_after(&r) >= 1);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "too_many_streams");
    let r = app.get_as(&ada, "/api/executions/exec_unknown/events").await;
    assert_eq!(r.status(), 429, "execution streams count too");

    // Another session of the same user has its own streams.
    let other = app.sign_in("ada").await;
    assert_eq!(app.get_as(&other, "/api/live/events").await.status(), 200);

    // A stream that ends gives its place back.
    drop(open.pop());
    let mut reopened = None;
    for _ in 0..200 {
        let r = app.get_as(&ada, "/api/live/events").await;
        if r.status() == 200 {
            reopened = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reopened.is_some(), "the closed stream's place was given back");
}
