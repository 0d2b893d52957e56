//! `[[notify]]`: messages when an execution opens and settles, signed,
//! retried, filtered, in each format, and never in the gate's way.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use gatehouse::config::Config;
use gatehouse::notify::{Format, NotifyConfig, Target};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::sync::{Semaphore, mpsc};

use crate::helpers::*;

pub(crate) const SECRET: &str = "a-signing-key-for-tests";
const SET_RULE: &str = "gatehouse_policy_set";

/// What a receiver does with each request.
#[derive(Clone, Copy)]
pub(crate) enum Behaviour {
    Accept,
    /// Answer 500 to the first `n` requests.
    FailFirst(usize),
    /// Hold every request until the test releases it.
    Hang,
}

pub(crate) struct Request {
    pub(crate) headers: HeaderMap,
    pub(crate) body: String,
}

struct Inner {
    behaviour: Behaviour,
    seen: AtomicUsize,
    tx: mpsc::UnboundedSender<Request>,
    release: Semaphore,
}

/// A local HTTP receiver on port 0 that records every request.
pub(crate) struct Receiver {
    pub(crate) url: String,
    pub(crate) rx: mpsc::UnboundedReceiver<Request>,
    inner: Arc<Inner>,
}

impl Receiver {
    pub(crate) async fn start(behaviour: Behaviour) -> Receiver {
        let (tx, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner { behaviour, seen: AtomicUsize::new(0), tx, release: Semaphore::new(0) });
        let app = axum::Router::new().route("/hook", axum::routing::post(record)).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook?token=query-secret", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { url, rx, inner }
    }

    /// The next request (a bound only so a broken build fails instead of hanging).
    pub(crate) async fn next(&mut self) -> Request {
        tokio::time::timeout(Duration::from_secs(60), self.rx.recv())
            .await
            .expect("a notification within a minute")
            .expect("the receiver is running")
    }

    /// The next request's JSON body.
    pub(crate) async fn next_json(&mut self) -> (HeaderMap, Value) {
        let r = self.next().await;
        (r.headers, serde_json::from_str(&r.body).unwrap())
    }

    pub(crate) fn target(&self, name: &str, format: Format, secret: Option<&str>) -> Target {
        targets(vec![NotifyConfig {
            url: self.url.clone(),
            format,
            secret: secret.map(Into::into),
            agents: vec![],
            tools: vec![],
            name: Some(name.into()),
            timeout: Some("120s".into()),
            enabled: true,
        }])
        .remove(0)
    }
}

async fn record(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: String) -> StatusCode {
    let n = inner.seen.fetch_add(1, Ordering::SeqCst);
    let _ = inner.tx.send(Request { headers, body });
    match inner.behaviour {
        Behaviour::Accept => StatusCode::NO_CONTENT,
        Behaviour::FailFirst(k) if n < k => StatusCode::INTERNAL_SERVER_ERROR,
        Behaviour::FailFirst(_) => StatusCode::OK,
        Behaviour::Hang => {
            let _ = inner.release.acquire().await.map(|p| p.forget());
            StatusCode::OK
        }
    }
}

fn targets(tables: Vec<NotifyConfig>) -> Vec<Target> {
    gatehouse::notify::config::resolve(tables).unwrap()
}

/// Checks `Gatehouse-Signature: t=<unix>,v1=<hex>` as a receiver would:
/// HMAC-SHA256 over `<t>.<body>`, and a timestamp at most 5 minutes old.
pub(crate) fn verify(headers: &HeaderMap, body: &str) {
    let header = headers["gatehouse-signature"].to_str().unwrap();
    let (t, v1) = header.split_once(',').unwrap();
    let t: i64 = t.strip_prefix("t=").unwrap().parse().unwrap();
    let v1 = hex::decode(v1.strip_prefix("v1=").unwrap()).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{t}.{body}").as_bytes());
    mac.verify_slice(&v1).expect("the signature matches the body");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    assert!((now - t).abs() < 300, "fresh timestamp");
}

/// A gated call of `agent` (owned by ada) with a secret-looking argument; its execution id.
pub(crate) async fn gated_call(app: &TestApp, agent: &str, pattern: &str) -> gatehouse_core::approvals::ExecutionId {
    let token = app.issue_owned(agent, "ada");
    let sid = app.open_session(&token).await;
    let reply = app.tool_call(&token, &sid, SET_RULE, json!({"pattern": pattern, "action": "allow"})).await;
    assert_eq!(reply["result"]["structuredContent"]["status"], "user_approval_required");
    execution_id(&reply)
}

#[tokio::test]
async fn open_and_settle_messages_are_signed_linked_and_carry_no_arguments() {
    let mut receiver = Receiver::start(Behaviour::Accept).await;
    let target = receiver.target("hook", Format::Json, Some(SECRET));
    let app = spawn_app_with(|c: &mut Config| c.notify_targets = vec![target]).await;
    let (ada, _) = app.ada_and_bob().await;
    let eid = gated_call(&app, "claude", "topsecret_value_*").await;

    let opened = receiver.next().await;
    verify(&opened.headers, &opened.body);
    assert!(!opened.body.contains("topsecret"), "no arguments in a message: {}", opened.body);
    assert_eq!(opened.headers["gatehouse-event"], "execution.pending");
    let v: Value = serde_json::from_str(&opened.body).unwrap();
    assert_eq!(v["event"], "execution.pending");
    assert_eq!(v["executionId"], eid.as_str());
    assert_eq!(v["state"], "pending");
    assert_eq!(v["tool"], SET_RULE);
    assert_eq!(v["agent"], "claude");
    assert_eq!(v["owner"], "ada");
    assert_eq!(v["link"], format!("{}/resume/{eid}", app.address));
    assert!(v["expiresAt"].as_str().unwrap().ends_with('Z'));
    assert!(v.get("arguments").is_none() && v.get("argumentsDigest").is_none());

    assert_eq!(app.decide(&ada, &eid, "decline").await.status(), 200);
    let settled = receiver.next().await;
    verify(&settled.headers, &settled.body);
    assert!(!settled.body.contains("topsecret"));
    let v: Value = serde_json::from_str(&settled.body).unwrap();
    assert_eq!(v["event"], "execution.declined");
    assert_eq!(v["state"], "declined");
    assert_eq!(v["by"], "user:ada#1");
    assert_eq!(v["link"], format!("{}/resume/{eid}", app.address));
    assert_ne!(
        opened.headers["gatehouse-delivery"], settled.headers["gatehouse-delivery"],
        "each message has its own delivery id"
    );

    let metrics = app.metrics().await;
    assert!(metrics.contains("gatehouse_notify_messages_total{target=\"hook\",outcome=\"delivered\"} 2"), "{metrics}");
    assert!(metrics.contains("gatehouse_notify_messages_total{target=\"hook\",outcome=\"dropped\"} 0"));
}

#[tokio::test]
async fn a_receiver_that_fails_twice_gets_the_message_on_the_third_try() {
    let mut receiver = Receiver::start(Behaviour::FailFirst(2)).await;
    let target = receiver.target("flaky", Format::Json, Some(SECRET));
    let app = spawn_app_with(|c: &mut Config| c.notify_targets = vec![target]).await;
    app.add_user("ada", false).await;
    let eid = gated_call(&app, "claude", "x*").await;

    let attempts = [receiver.next().await, receiver.next().await, receiver.next().await];
    for a in &attempts {
        verify(&a.headers, &a.body);
        assert_eq!(serde_json::from_str::<Value>(&a.body).unwrap()["executionId"], eid.as_str());
        assert_eq!(a.headers["gatehouse-delivery"], attempts[0].headers["gatehouse-delivery"], "one delivery, retried");
    }
    // The third answer was a success: the counters say so once it is recorded.
    let delivered = "gatehouse_notify_messages_total{target=\"flaky\",outcome=\"delivered\"} 1";
    let mut metrics = app.metrics().await;
    for _ in 0..100 {
        if metrics.contains(delivered) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        metrics = app.metrics().await;
    }
    assert!(metrics.contains(delivered), "{metrics}");
    assert!(metrics.contains("gatehouse_notify_messages_total{target=\"flaky\",outcome=\"failed\"} 0"));
}

#[tokio::test]
async fn a_hanging_receiver_does_not_hold_the_gate() {
    let mut receiver = Receiver::start(Behaviour::Hang).await;
    let target = receiver.target("stuck", Format::Json, Some(SECRET));
    let app = spawn_app_with(|c: &mut Config| c.notify_targets = vec![target]).await;
    let (ada, _) = app.ada_and_bob().await;
    let first = gated_call(&app, "claude", "a*").await;
    // The receiver now holds the first message's request and does not answer.
    let (_, v) = receiver.next_json().await;
    assert_eq!(v["executionId"], first.as_str());
    assert_eq!(receiver.inner.release.available_permits(), 0, "still held");

    // While it is held: another gated call pauses and answers, and a decision lands.
    let second = gated_call(&app, "cursor", "b*").await;
    assert_eq!(app.decide(&ada, &first, "decline").await.status(), 200);
    assert_eq!(app.decide(&ada, &second, "accept").await.status(), 200);
    assert_eq!(receiver.inner.seen.load(Ordering::SeqCst), 1, "the first request is still the only one, unanswered");

    // Released, the queued messages follow in order.
    receiver.inner.release.add_permits(100);
    let mut events = Vec::new();
    for _ in 0..3 {
        let (_, v) = receiver.next_json().await;
        events.push((v["executionId"].as_str().unwrap().to_string(), v["state"].as_str().unwrap().to_string()));
    }
    // In the order they happened (the audit log's).
    assert_eq!(
        events,
        [
            (second.to_string(), "pending".into()),
            (first.to_string(), "declined".into()),
            (second.to_string(), "approved".into())
        ]
    );
}

#[tokio::test]
async fn filters_pick_the_agents_and_tools_a_target_hears_about() {
    let mut claude_only = Receiver::start(Behaviour::Accept).await;
    let mut cursor_only = Receiver::start(Behaviour::Accept).await;
    let table = |r: &Receiver, name: &str, agents: &[&str], tools: &[&str]| NotifyConfig {
        url: r.url.clone(),
        format: Format::Json,
        secret: Some(SECRET.into()),
        agents: agents.iter().map(|s| s.to_string()).collect(),
        tools: tools.iter().map(|s| s.to_string()).collect(),
        name: Some(name.into()),
        timeout: None,
        enabled: true,
    };
    let configured = targets(vec![
        table(&claude_only, "claude", &["claude"], &["gatehouse_policy_*"]),
        table(&cursor_only, "cursor", &["cursor*"], &["*"]),
    ]);
    let app = spawn_app_with(|c: &mut Config| c.notify_targets = configured).await;
    app.add_user("ada", false).await;
    let from_claude = gated_call(&app, "claude", "a*").await;
    let from_cursor = gated_call(&app, "cursor-ide", "b*").await;

    let (_, v) = claude_only.next_json().await;
    assert_eq!(v["executionId"], from_claude.as_str());
    // Both were routed in order by one watcher: the first the cursor target
    // hears of is cursor's, so claude's call never went to it.
    let (_, v) = cursor_only.next_json().await;
    assert_eq!(v["executionId"], from_cursor.as_str());
    assert_eq!(v["agent"], "cursor-ide");
}

#[tokio::test]
async fn slack_and_ntfy_get_their_own_shapes() {
    let mut slack = Receiver::start(Behaviour::Accept).await;
    let mut ntfy = Receiver::start(Behaviour::Accept).await;
    let configured = vec![
        slack.target("slack", Format::Slack, None),
        ntfy.target("ntfy", Format::Ntfy, Some("tk_ntfy_access_token")),
    ];
    let app = spawn_app_with(|c: &mut Config| c.notify_targets = configured).await;
    app.add_user("ada", false).await;
    let eid = gated_call(&app, "claude", "topsecret_*").await;
    let link = format!("{}/resume/{eid}", app.address);

    let (headers, v) = slack.next_json().await;
    assert_eq!(headers["content-type"], "application/json");
    assert!(headers.get("gatehouse-signature").is_none());
    let text = v["text"].as_str().unwrap();
    assert!(text.contains(&format!("<{link}|Open>")), "{text}");
    assert!(text.contains("claude") && text.contains(SET_RULE) && !text.contains("topsecret"), "{text}");
    assert_eq!(v.as_object().unwrap().len(), 1, "an incoming-webhook body is just text");

    let r = ntfy.next().await;
    assert!(r.headers["content-type"].to_str().unwrap().starts_with("text/plain"));
    assert_eq!(r.headers["title"], format!("Approve {SET_RULE}?"));
    assert_eq!(r.headers["click"], link.as_str());
    assert_eq!(r.headers["priority"], "high");
    assert_eq!(r.headers["tags"], "warning");
    assert_eq!(r.headers["authorization"], "Bearer tk_ntfy_access_token");
    assert!(r.body.contains("claude") && r.body.contains(SET_RULE) && !r.body.contains("topsecret"), "{}", r.body);
}

#[tokio::test]
async fn a_phishing_agent_name_is_only_text_in_every_format() {
    // What an OAuth client may call itself to phish whoever approves.
    const PHISH: &str = "<!channel> Security check \u{2014} <https://evil.example/resume|Approve here> @here";
    let mut hook = Receiver::start(Behaviour::Accept).await;
    let mut slack = Receiver::start(Behaviour::Accept).await;
    let mut ntfy = Receiver::start(Behaviour::Accept).await;
    let configured = vec![
        hook.target("hook", Format::Json, Some(SECRET)),
        slack.target("slack", Format::Slack, None),
        ntfy.target("ntfy", Format::Ntfy, None),
    ];
    let app = spawn_app_with(|c: &mut Config| c.notify_targets = configured).await;
    app.add_user("ada", false).await;
    let eid = gated_call(&app, PHISH, "x_*").await;
    let link = format!("{}/resume/{eid}", app.address);

    let (_, v) = slack.next_json().await;
    let text = v["text"].as_str().unwrap();
    for bad in ["<!channel>", "<!", "<https://evil.example", "https://evil.example", "evil.example", "@here"] {
        assert!(!text.contains(bad), "{bad:?} in {text:?}");
    }
    assert_eq!(text.matches('<').count(), 1, "one link: {text}");
    assert!(text.contains(&format!("<{link}|Open>")), "and it is Gatehouse's: {text}");
    assert!(text.contains("Security check"), "the name is shown, as text: {text}");

    let r = ntfy.next().await;
    for bad in ["<!channel>", "https://evil.example", "evil.example", "@here"] {
        assert!(!r.body.contains(bad), "{bad:?} in {:?}", r.body);
    }
    assert!(!r.body.contains("://"), "no link in the body: {}", r.body);
    for (name, value) in &r.headers {
        assert!(value.as_bytes().iter().all(|b| (0x20..0x7f).contains(b)), "{name}: {value:?}");
        let value = value.to_str().unwrap();
        assert!(!value.contains("evil"), "{name}: {value}");
    }
    assert_eq!(r.headers["click"], link.as_str(), "the one link is Gatehouse's");

    // Machines get the name as data, and the same link.
    let (headers, v) = hook.next_json().await;
    assert!(headers.contains_key("gatehouse-signature"));
    assert_eq!((v["agent"].as_str(), v["link"].as_str()), (Some(PHISH), Some(link.as_str())));
}

#[tokio::test]
async fn a_failed_target_shows_its_error_without_the_url_or_secret() {
    // Nothing listens on this port: every attempt fails to connect.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook?token=query-secret", closed.local_addr().unwrap());
    drop(closed);
    let target = targets(vec![NotifyConfig {
        url: url.to_string(),
        format: Format::Json,
        secret: Some(SECRET.into()),
        agents: vec![],
        tools: vec![],
        name: Some("down".into()),
        timeout: None,
        enabled: true,
    }]);
    let notifier = {
        let app = spawn_app_with(|c: &mut Config| c.notify_targets = target).await;
        app.add_user("ada", false).await;
        gated_call(&app, "claude", "x*").await;
        let notifier = app.state.notify.clone();
        let failed = "gatehouse_notify_messages_total{target=\"down\",outcome=\"failed\"} 1";
        // Four attempts, 1 + 2 + 4 s apart.
        let mut metrics = app.metrics().await;
        for _ in 0..300 {
            if metrics.contains(failed) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            metrics = app.metrics().await;
        }
        assert!(metrics.contains(failed), "{metrics}");
        notifier
    };
    let (target, status) = &notifier.targets()[0];
    let last = status.last();
    let error = last.error.unwrap();
    assert!(last.failure_ms.is_some() && last.success_ms.is_none());
    assert!(!error.contains("query-secret") && !error.contains("/hook"), "{error}");
    assert!(!error.contains(SECRET));
    assert_eq!(target.shown_url(), format!("http://{}/…", url.split('/').nth(2).unwrap()));
}

#[tokio::test]
async fn the_upstreams_page_shows_targets_to_admins_only_without_url_secrets() {
    let receiver = Receiver::start(Behaviour::Accept).await;
    let target = receiver.target("ops-hook", Format::Json, Some(SECRET));
    let app = spawn_app_with(|c: &mut Config| c.notify_targets = vec![target]).await;
    let (ada, bob) = app.ada_and_bob().await;

    let page = app.get_as(&ada, "/upstreams").await.text().await.unwrap();
    assert!(page.contains("Notifications") && page.contains("ops-hook"), "{page}");
    let host = receiver.url.split('/').nth(2).unwrap();
    assert!(page.contains(&format!("http://{host}/…")));
    assert!(!page.contains("query-secret") && !page.contains(SECRET));

    let page = app.get_as(&bob, "/upstreams").await.text().await.unwrap();
    assert!(!page.contains("ops-hook"), "a plain user sees no targets");
}

/// `[[notify]]` reloads: a target added to the file hears the next call
/// without a restart; once it leaves the file it hears nothing more, and
/// the one that replaced it does. The change log says so.
#[tokio::test]
async fn a_reload_starts_a_target_added_to_the_file_and_stops_one_removed() {
    use gatehouse::reload::{Cause, Reloaded};
    let mut first = Receiver::start(Behaviour::Accept).await;
    let mut second = Receiver::start(Behaviour::Accept).await;
    let app = spawn_app().await;
    app.ada_and_bob().await;
    let (file, reloader) = crate::reload::empty_file(&app);
    let entry = |name: &str, r: &Receiver| format!("[[notify]]\nname = {name:?}\nurl = {:?}\n", r.url);
    let notify_changed = |outcome: Reloaded| match outcome {
        Reloaded::Applied { notify, .. } => notify,
        Reloaded::Refused(why) => panic!("refused: {why}"),
    };

    std::fs::write(&file, entry("first", &first)).unwrap();
    assert!(notify_changed(reloader.reload(Cause::Signal).await), "a target was added");
    let eid = gated_call(&app, "claude", "one_*").await;
    let (_, v) = first.next_json().await;
    assert_eq!(v["executionId"], eid.as_str(), "the added target hears the next call");
    assert!(!notify_changed(reloader.reload(Cause::Signal).await), "the same file restarts nothing");

    std::fs::write(&file, entry("second", &second)).unwrap();
    assert!(notify_changed(reloader.reload(Cause::FileChanged).await));
    let eid = gated_call(&app, "claude", "two_*").await;
    let (_, v) = second.next_json().await;
    assert_eq!(v["executionId"], eid.as_str(), "the new target hears it");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(first.rx.try_recv().is_err(), "the removed target hears nothing more");
    let names: Vec<String> = app.state.notify.targets().iter().map(|(t, _)| t.name.clone()).collect();
    assert_eq!(names, ["second"]);
    let changes = app.core.changes.recent("config", 10).unwrap();
    assert!(changes[0].detail.as_deref().unwrap().contains("notification targets reloaded"), "{changes:?}");
}
