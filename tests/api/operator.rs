//! What the operator relies on: secrets at rest readable by the owner only,
//! `/metrics` for admins (or on its own listener), and old rows swept away
//! (expired browser sessions, audit entries past the retention).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use gatehouse_core::Db;
use serde_json::json;

use crate::helpers::*;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn metrics_on_the_main_address_need_an_admin() {
    let app = spawn_app().await;
    let (ada, bob) = app.ada_and_bob().await;
    let url = app.url("/metrics");
    let r = app.client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "unauthorized");
    assert_eq!(app.get_as(&bob, "/metrics").await.status(), 403);
    let r = app.client.get(&url).bearer_auth("not-a-token").send().await.unwrap();
    assert_eq!(r.status(), 401);

    let r = app.get_as(&ada, "/metrics").await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("gatehouse_approvals_pending 0"));
    let r = app.client.get(&url).bearer_auth(app.api_token("prometheus")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("gatehouse_credentials_rejected_total"));
}

#[tokio::test]
async fn metrics_listen_serves_metrics_without_authentication_on_its_own_address() {
    // A free port for the metrics listener (the helper reports only the main address).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let app = spawn_app_with(|c| c.metrics_listen = Some(format!("127.0.0.1:{port}").parse().unwrap())).await;
    let r = app.client.get(format!("http://127.0.0.1:{port}/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    assert!(r.text().await.unwrap().contains("gatehouse_mcp_sessions"));
    // Only /metrics lives there.
    let r = app.client.get(format!("http://127.0.0.1:{port}/api/credentials")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    // The main address still wants an admin.
    assert_eq!(app.client.get(format!("{}/metrics", app.address)).send().await.unwrap().status(), 401);
}

#[tokio::test]
async fn the_data_dir_and_its_secrets_are_owner_only() {
    let app = spawn_app().await;
    // Write something, so the WAL files exist.
    app.add_user("ada", true).await;
    let dir = app.dir.path();
    assert_eq!(mode(dir), 0o700);
    if app.core.db.postgres_url().is_some() {
        // The data and the request-state key are in PostgreSQL.
        return;
    }
    for file in ["gatehouse.db", "gatehouse.db-wal", "gatehouse.db-shm", "request-state.key"] {
        let path = dir.join(file);
        assert!(path.exists(), "{file}");
        assert_eq!(mode(&path), 0o600, "{file}");
    }
}

#[tokio::test]
async fn looser_permissions_are_tightened_on_start() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    drop(Db::open(&dir).unwrap());
    std::fs::write(dir.join("request-state.key"), [7u8; 32]).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for file in ["gatehouse.db", "request-state.key"] {
        std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let _db = Db::open(&dir).unwrap();
    assert_eq!(mode(&dir), 0o700);
    for file in ["gatehouse.db", "request-state.key"] {
        assert_eq!(mode(&dir.join(file)), 0o600, "{file}");
    }
    // A fresh data dir is created owner-only.
    let fresh = parent.path().join("a/b");
    gatehouse_core::db::create_data_dir(&fresh).unwrap();
    assert_eq!(mode(&fresh), 0o700);
}

fn audit_rows(app: &TestApp) -> i64 {
    app.core.db.conn().unwrap().query_one("SELECT COUNT(*) FROM audit_events", &[], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn expired_browser_sessions_and_old_audit_entries_are_swept() {
    let app = spawn_app().await;
    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    // A gated call leaves audit entries.
    let token = app.issue_owned("claude", "ada");
    let sid = app.open_session(&token).await;
    app.tool_call(&token, &sid, "gatehouse_policy_set", json!({"pattern":"x*","action":"allow"})).await;
    assert!(audit_rows(&app) >= 1);
    let retention = gatehouse::housekeeping::Retention::of(&gatehouse::config::Config::default());
    assert_eq!(retention.age, Duration::from_secs(90 * 24 * 3600), "90 days unless configured");
    assert_eq!(retention.entries, 5_000_000, "five million entries unless configured");

    // Nothing is old yet.
    let swept = gatehouse::housekeeping::sweep(&app.core, retention).await.unwrap();
    assert_eq!(swept, gatehouse::housekeeping::Swept::default());

    // Two weeks on the session has expired; its row goes.
    app.clock.advance(gatehouse_core::users::SESSION_LIFETIME);
    assert_eq!(app.core.users.stored_sessions().unwrap(), 1);
    let swept = gatehouse::housekeeping::sweep(&app.core, retention).await.unwrap();
    assert_eq!(swept.sessions, 1);
    assert_eq!(app.core.users.stored_sessions().unwrap(), 0);
    assert_eq!(app.get_as(&ada, "/").await.status(), 303);
    assert!(audit_rows(&app) >= 1, "audit entries are kept for the retention");

    // Past the retention the audit entries go too.
    app.clock.advance(retention.age);
    let swept = gatehouse::housekeeping::sweep(&app.core, retention).await.unwrap();
    assert!(swept.audit_events >= 1);
    assert_eq!(audit_rows(&app), 0);
}

#[tokio::test]
async fn the_sweeper_sweeps_at_start_and_ends_on_shutdown() {
    let app = spawn_app().await;
    app.core
        .db
        .conn()
        .unwrap()
        .execute(
            "INSERT INTO audit_events (execution_id, at, state, tool, arguments_digest, agent)
             VALUES ('exec_ancient', 0, 'completed', 't', 'd', 'a')",
            &[],
        )
        .unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let sweeper = tokio::spawn(gatehouse::housekeeping::run(
        app.core.clone(),
        gatehouse::housekeeping::Retention {
            age: Duration::from_secs(3600),
            entries: 1_000_000,
            arguments: Duration::from_secs(3600),
        },
        shutdown.clone(),
    ));
    for _ in 0..200 {
        if audit_rows(&app) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(audit_rows(&app), 0, "the first sweep runs at start");
    shutdown.cancel();
    sweeper.await.unwrap();
}

#[tokio::test]
async fn healthz_reports_the_store_and_readyz_is_ready_once_serving() {
    let app = spawn_app().await;
    let r = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap(), json!({"status": "ok", "store": "ok"}));
    let mut ready = None;
    for _ in 0..100 {
        let r = app.client.get(app.url("/readyz")).send().await.unwrap();
        if r.status() == 200 {
            ready = Some(r.json::<serde_json::Value>().await.unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ready, Some(json!({"status": "ready"})));
    // Neither needs a session, and neither is served to a foreign Host.
    let foreign = app.client.get(app.url("/readyz")).header("host", "evil.example").send().await.unwrap();
    assert_eq!(foreign.status(), 403);
}
