//! A real stdio upstream (`@modelcontextprotocol/server-filesystem` under the
//! tools folder's node) behind the gate.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gatehouse::config::UpstreamConfig;
use serde_json::{Value, json};

use crate::helpers::*;

fn tools_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools")
}

fn files_upstream(root: &Path) -> UpstreamConfig {
    let tools = tools_dir();
    UpstreamConfig {
        command: Some(tools.join("node_modules/.bin/node").display().to_string()),
        args: vec![
            tools.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js").display().to_string(),
            root.display().to_string(),
        ],
        ..upstream_named("files")
    }
}

async fn spawn_with_files() -> (TestApp, tempfile::TempDir, String, String) {
    let root = tempfile::tempdir().unwrap();
    let upstream = files_upstream(&std::fs::canonicalize(root.path()).unwrap());
    let app = spawn_app_with(move |c| c.upstreams = vec![upstream]).await;
    app.add_user("ada", true).await;
    let token = app.issue_owned("claude", "ada");
    let sid = app.open_session(&token).await;
    wait_for_tool(&app, &token, &sid, "files__write_file").await;
    (app, root, token, sid)
}

async fn list(app: &TestApp, token: &str, sid: &str) -> Vec<Value> {
    let (_, _, messages) = app.call(token, sid, json!({"jsonrpc":"2.0","id":2,"method":"tools/list"})).await;
    messages[0]["result"]["tools"].as_array().cloned().unwrap_or_default()
}

async fn wait_for_tool(app: &TestApp, token: &str, sid: &str, name: &str) {
    for _ in 0..300 {
        if list(app, token, sid).await.iter().any(|t| t["name"] == name) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("upstream tool {name} never appeared: {:?}", app.core.credentials.list().ok().map(|_| ()));
}

async fn call(app: &TestApp, token: &str, sid: &str, name: &str, args: Value) -> Value {
    let (_, _, messages) = app
        .call(
            token,
            sid,
            json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name": name, "arguments": args}}),
        )
        .await;
    messages.into_iter().find(|m| m["id"] == 9).expect("a reply")["result"].clone()
}

#[tokio::test]
async fn upstream_tools_are_listed_under_their_prefix_and_read_tools_run_at_once() {
    let (app, root, token, sid) = spawn_with_files().await;
    let tools = list(&app, &token, &sid).await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"files__read_text_file") || names.contains(&"files__read_file"), "{names:?}");
    assert!(names.contains(&"gatehouse_status"));
    std::fs::write(root.path().join("hello.txt"), "hi there").unwrap();
    let read =
        call(&app, &token, &sid, "files__list_directory", json!({"path": std::fs::canonicalize(root.path()).unwrap()}))
            .await;
    assert_ne!(read["isError"], true, "{read}");
    assert!(read.to_string().contains("hello.txt"), "{read}");
}

#[tokio::test]
async fn a_gated_write_writes_once_approved_and_not_when_declined() {
    let (app, root, token, sid) = spawn_with_files().await;
    let dir = std::fs::canonicalize(root.path()).unwrap();
    for (decision, file) in [("accept", "approved.txt"), ("decline", "declined.txt")] {
        let path = dir.join(file);
        let paused =
            call(&app, &token, &sid, "files__write_file", json!({"path": path, "content": "from the agent"})).await;
        let s = &paused["structuredContent"];
        assert_eq!(s["status"], "user_approval_required", "{paused}");
        let eid = s["executionId"].as_str().unwrap().to_string();
        let view = app.core.approvals.get(&eid).unwrap().0;
        assert_eq!(view.upstream.as_deref(), Some("files"));
        let actor = "user:ada";
        let d = if decision == "accept" {
            gatehouse_core::approvals::Decision::Accept
        } else {
            gatehouse_core::approvals::Decision::Decline
        };
        app.core.approvals.decide(&eid, d, actor).unwrap();
        let resumed = call(&app, &token, &sid, "resume", json!({"executionId": eid})).await;
        if decision == "accept" {
            assert_ne!(resumed["isError"], true, "{resumed}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "from the agent");
        } else {
            assert_eq!(resumed["isError"], true);
            assert!(!path.exists(), "declining leaves the folder untouched");
        }
    }
    let entries: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
}

#[tokio::test]
async fn a_killed_upstream_comes_back_and_the_next_call_works() {
    let (app, root, token, sid) = spawn_with_files().await;
    let dir = std::fs::canonicalize(root.path()).unwrap();
    let pid = app_status(&app).pid.expect("a running child");
    std::process::Command::new("kill").arg("-9").arg(pid.to_string()).status().unwrap();
    // While it is down the call fails cleanly (or, if it already restarted, works).
    let during = call(&app, &token, &sid, "files__list_directory", json!({"path": dir})).await;
    assert!(during.is_object(), "{during}");
    for _ in 0..200 {
        let s = app_status(&app);
        if s.health == gatehouse::upstream::Health::Up && s.pid.is_some_and(|p| p != pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = app_status(&app);
    assert!(s.restarts >= 1 && s.pid != Some(pid), "restarted: {s:?}");
    std::fs::write(dir.join("still-here.txt"), "x").unwrap();
    let after = call(&app, &token, &sid, "files__list_directory", json!({"path": dir})).await;
    assert_ne!(after["isError"], true, "{after}");
    assert!(after.to_string().contains("still-here.txt"), "{after}");
}

/// The Python-SDK fixture (`end2end/fixtures/slow_server.py`) as a stdio upstream.
fn slow_upstream() -> UpstreamConfig {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    UpstreamConfig {
        command: Some(root.join("tools/.venv/bin/python").display().to_string()),
        args: vec![root.join("end2end/fixtures/slow_server.py").display().to_string()],
        ..upstream_named("slow")
    }
}

fn app_status(app: &TestApp) -> gatehouse::upstream::Status {
    app.upstreams.status().into_iter().find(|s| s.name == "files").unwrap()
}

#[tokio::test]
async fn a_call_in_flight_when_the_upstream_dies_gets_an_error_result() {
    let slow = slow_upstream();
    let app = spawn_app_with(move |c| {
        c.upstreams = vec![slow];
        c.policy = vec![allow_rule("slow__*")];
    })
    .await;
    let token = app.issue("agent", None);
    let sid = app.open_session(&token).await;
    wait_for_tool(&app, &token, &sid, "slow__sleep").await;
    let pid = app.upstreams.status()[0].pid.expect("running");

    let in_flight = {
        let req = app
            .mcp(&token)
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&json!({"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"slow__sleep","arguments":{"seconds": 30}}}));
        tokio::spawn(async move { jsonrpc_messages(req.send().await.unwrap()).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    std::process::Command::new("kill").arg("-9").arg(pid.to_string()).status().unwrap();
    let messages = tokio::time::timeout(Duration::from_secs(10), in_flight).await.expect("the call ended").unwrap();
    let result = &messages.iter().find(|m| m["id"] == 31).expect("a reply")["result"];
    assert_eq!(result["isError"], true, "{messages:?}");
    assert_eq!(result["structuredContent"]["error"], "upstream_failed");

    for _ in 0..200 {
        let s = &app.upstreams.status()[0];
        if s.health == gatehouse::upstream::Health::Up && s.pid != Some(pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let next = call(&app, &token, &sid, "slow__sleep", json!({"seconds": 0.05})).await;
    assert_ne!(next["isError"], true, "{next}");
    assert!(next.to_string().contains("slept"), "{next}");
}

#[tokio::test]
async fn upstream_prompts_and_resources_are_listed_and_served() {
    let slow = slow_upstream();
    let app = spawn_app_with(move |c| c.upstreams = vec![slow]).await;
    let token = app.issue("agent", None);
    let sid = app.open_session(&token).await;
    wait_for_tool(&app, &token, &sid, "slow__sleep").await;

    let rpc = |id: u64, method: &str, params: Value| json!({"jsonrpc":"2.0","id":id,"method":method,"params":params});
    let (_, _, m) = app.call(&token, &sid, rpc(3, "prompts/list", json!({}))).await;
    let prompts = m[0]["result"]["prompts"].as_array().unwrap().clone();
    assert!(prompts.iter().any(|p| p["name"] == "slow__greet"), "{m:?}");
    let (_, _, m) = app
        .call(&token, &sid, rpc(4, "prompts/get", json!({"name": "slow__greet", "arguments": {"name": "Ada"}})))
        .await;
    assert!(m[0]["result"].to_string().contains("Please greet Ada warmly."), "{m:?}");
    let (_, _, m) = app.call(&token, &sid, rpc(5, "prompts/get", json!({"name": "slow__nope"}))).await;
    assert_eq!(m[0]["error"]["code"], -32602, "{m:?}");

    let (_, _, m) = app.call(&token, &sid, rpc(6, "resources/list", json!({}))).await;
    assert!(m[0]["result"]["resources"].as_array().unwrap().iter().any(|r| r["uri"] == "slow://motto"), "{m:?}");
    let (_, _, m) = app.call(&token, &sid, rpc(7, "resources/read", json!({"uri": "slow://motto"}))).await;
    assert_eq!(m[0]["result"]["contents"][0]["text"], "slow and steady", "{m:?}");
    let (_, _, m) = app.call(&token, &sid, rpc(8, "resources/read", json!({"uri": "slow://missing"}))).await;
    assert!(m[0]["error"].is_object(), "{m:?}");
}
