//! A real stdio upstream (`@modelcontextprotocol/server-filesystem` under the
//! tools folder's node) behind the gate.

use std::path::Path;
use std::time::Duration;

use gatehouse::config::UpstreamConfig;
use serde_json::{Value, json};

use crate::helpers::*;

pub(crate) fn files_upstream(root: &Path) -> UpstreamConfig {
    UpstreamConfig {
        command: Some(repo_path(NODE)),
        args: vec![
            repo_path("tools/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"),
            root.display().to_string(),
        ],
        ..upstream_named("files")
    }
}

async fn spawn_with_files() -> (TestApp, tempfile::TempDir, String, String) {
    let root = tempfile::tempdir().unwrap();
    let upstream = files_upstream(&std::fs::canonicalize(root.path()).unwrap());
    let app = spawn_app_with(move |c| c.upstream = vec![upstream]).await;
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
    let (_, _, messages) = app.call(token, sid, tool_call_request(9, name, args)).await;
    messages.into_iter().find(|m| m["id"] == 9).expect("a reply")["result"].clone()
}

#[tokio::test]
async fn an_upstreams_read_only_tools_ask_until_an_admin_trusts_its_annotations() {
    let (app, root, token, sid) = spawn_with_files().await;
    let tools = list(&app, &token, &sid).await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"files__read_text_file") || names.contains(&"files__read_file"), "{names:?}");
    assert!(names.contains(&"gatehouse_status"));
    std::fs::write(root.path().join("hello.txt"), "hi there").unwrap();
    let dir = std::fs::canonicalize(root.path()).unwrap();
    let paused = |v: &Value| {
        [&v["_meta"][gatehouse::tool_error::META_KEY]["status"], &v["structuredContent"]["status"]]
            .iter()
            .any(|s| **s == "user_approval_required")
    };
    // It calls itself read-only; nobody has said to believe it: it asks.
    let asked = call(&app, &token, &sid, "files__list_directory", json!({"path": dir})).await;
    assert!(paused(&asked), "{asked}");
    assert!(!asked.to_string().contains("hello.txt"), "{asked}");

    // A plain user may not change that; an admin may, and it is in the change log.
    app.add_user("bob", false).await;
    let bob = app.sign_in("bob").await;
    assert_eq!(app.post_fn(&bob, "upstream_trust", &[("upstream", "files"), ("trust", "on")]).await.status(), 403);
    let ada = app.sign_in("ada").await;
    assert_eq!(app.post_fn(&ada, "upstream_trust", &[("upstream", "files"), ("trust", "on")]).await.status(), 200);
    let changes = app.core.changes.recent("upstream", 5).unwrap();
    assert!(changes.iter().any(|c| c.target == "files" && c.actor == "user:ada#1"), "{changes:?}");
    let read = call(&app, &token, &sid, "files__list_directory", json!({"path": dir})).await;
    assert_ne!(read["isError"], true, "{read}");
    assert!(read.to_string().contains("hello.txt"), "trusted, its read-only tool runs at once: {read}");
    // Its write tools still ask: they do not say they are read-only.
    let write = call(&app, &token, &sid, "files__write_file", json!({"path": dir.join("x.txt"), "content": "x"})).await;
    assert!(paused(&write), "{write}");
}

#[tokio::test]
async fn a_gated_write_writes_once_approved_and_not_when_declined() {
    let (app, root, token, sid) = spawn_with_files().await;
    let dir = std::fs::canonicalize(root.path()).unwrap();
    for (decision, file) in [("accept", "approved.txt"), ("decline", "declined.txt")] {
        let path = dir.join(file);
        let paused =
            call(&app, &token, &sid, "files__write_file", json!({"path": path, "content": "from the agent"})).await;
        // write_file declares an outputSchema: the pause's details are in `_meta`.
        assert!(paused.get("structuredContent").is_none(), "{paused}");
        let s = &paused["_meta"][gatehouse::tool_error::META_KEY];
        assert_eq!(s["status"], "user_approval_required", "{paused}");
        let eid = s["executionId"].as_str().unwrap().to_string();
        let view = app.core.approvals.get(&eid.as_str().into()).unwrap().0;
        assert_eq!(view.upstream.as_deref(), Some("files"));
        let actor = "user:ada";
        let d = if decision == "accept" {
            gatehouse_core::approvals::Decision::Accept
        } else {
            gatehouse_core::approvals::Decision::Decline
        };
        app.core
            .approvals
            .decide(gatehouse_core::approvals::Decide::actor(&eid.as_str().into(), d, actor))
            .await
            .unwrap();
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
    // Its read-only tools run at once.
    app.core.policy.set_trust("files", true).unwrap();
    let dir = std::fs::canonicalize(root.path()).unwrap();
    let pid = app_status(&app).pid.expect("a running child");
    std::process::Command::new("kill").arg("-9").arg(pid.to_string()).status().unwrap();
    // While it is down the call fails cleanly: an error result, or an unknown
    // tool once its tools are withdrawn (or, if it already restarted, it works).
    let request = tool_call_request(9, "files__list_directory", json!({"path": dir}));
    let (_, _, messages) = app.call(&token, &sid, request).await;
    let during = messages.into_iter().find(|m| m["id"] == 9).expect("a reply");
    assert!(during["result"].is_object() || during["error"].is_object(), "{during}");
    for _ in 0..200 {
        let s = app_status(&app);
        if s.health == gatehouse::mcp::upstream::supervision::Health::Up && s.pid.is_some_and(|p| p != pid) {
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
    UpstreamConfig {
        command: Some(repo_path(PYTHON)),
        args: vec![repo_path("end2end/fixtures/slow_server.py")],
        ..upstream_named("slow")
    }
}

fn app_status(app: &TestApp) -> gatehouse::mcp::upstream::supervision::Status {
    app.upstreams.status().into_iter().find(|s| s.name == "files").unwrap()
}

#[tokio::test]
async fn a_call_in_flight_when_the_upstream_dies_gets_an_error_result() {
    let slow = slow_upstream();
    let app = spawn_app_with(move |c| {
        c.upstream = vec![slow];
        c.policy_rules = vec![allow_rule("slow__*")];
    })
    .await;
    let token = app.issue("agent", None);
    let sid = app.open_session(&token).await;
    wait_for_tool(&app, &token, &sid, "slow__sleep").await;
    let pid = app.upstreams.status()[0].pid.expect("running");

    let in_flight = {
        let req = app.in_session(&token, &sid).json(&tool_call_request(31, "slow__sleep", json!({"seconds": 30})));
        tokio::spawn(async move { jsonrpc_messages(req.send().await.unwrap()).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    std::process::Command::new("kill").arg("-9").arg(pid.to_string()).status().unwrap();
    let messages = tokio::time::timeout(Duration::from_secs(10), in_flight).await.expect("the call ended").unwrap();
    let result = &messages.iter().find(|m| m["id"] == 31).expect("a reply")["result"];
    assert_eq!(result["isError"], true, "{messages:?}");
    // sleep declares an outputSchema: Gatehouse's own error has its details in `_meta`.
    assert_eq!(result["_meta"][gatehouse::tool_error::META_KEY]["error"], "upstream_failed", "{messages:?}");

    for _ in 0..200 {
        let s = &app.upstreams.status()[0];
        if s.health == gatehouse::mcp::upstream::supervision::Health::Up && s.pid != Some(pid) {
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
    let app = spawn_app_with(move |c| c.upstream = vec![slow]).await;
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

/// The misbehaving fixture (`end2end/fixtures/hostile_server.py`) as stdio upstream `name`.
fn hostile(name: &str, args: &[&str]) -> UpstreamConfig {
    let mut all = vec![repo_path("end2end/fixtures/hostile_server.py")];
    all.extend(args.iter().map(|a| a.to_string()));
    UpstreamConfig { command: Some(repo_path(PYTHON)), args: all, ..upstream_named(name) }
}

fn status_of(app: &TestApp, name: &str) -> gatehouse::mcp::upstream::supervision::Status {
    app.upstreams.status().into_iter().find(|s| s.name == name).expect("configured")
}

/// Polls (every 50 ms, up to 30 s) until `probe` gives something.
async fn until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    for _ in 0..600 {
        if let Some(found) = probe() {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("never: {what}");
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

/// An app fronting `upstreams` whose tools all run at once, with an agent session.
async fn fronting(upstreams: Vec<UpstreamConfig>) -> (TestApp, String, String) {
    let app = spawn_app_with(move |c| {
        c.policy_rules = upstreams.iter().map(|u| allow_rule(&format!("{}*", u.prefix()))).collect();
        c.upstream = upstreams;
    })
    .await;
    let token = app.issue("agent", None);
    let sid = app.open_session(&token).await;
    (app, token, sid)
}

#[tokio::test]
async fn colliding_and_badly_named_tools_are_not_exposed_and_built_ins_win() {
    let long = "x".repeat(129);
    let left = UpstreamConfig {
        prefix: Some(String::new()),
        ..hostile(
            "left",
            &[
                "--bare",
                "--tool",
                "shared",
                "--tool",
                "gatehouse_status",
                "--tool",
                "left_only",
                "--tool",
                "bad name",
                "--tool",
                &long,
                "--prompt",
                "shared_prompt",
                "--prompt",
                "left_prompt",
            ],
        )
    };
    let right = UpstreamConfig {
        prefix: Some(String::new()),
        ..hostile("right", &["--bare", "--tool", "shared", "--tool", "right_only", "--prompt", "shared_prompt"])
    };
    let (app, token, sid) = fronting(vec![left, right]).await;
    until("both upstreams listed", || {
        (app.upstreams.find("left_only").is_some() && app.upstreams.find("right_only").is_some()).then_some(())
    })
    .await;

    let tools = list(&app, &token, &sid).await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"left_only") && names.contains(&"right_only"), "{names:?}");
    assert!(!names.contains(&"shared"), "neither upstream may expose a name both offer: {names:?}");
    assert_eq!(names.iter().filter(|n| **n == "gatehouse_status").count(), 1, "{names:?}");
    assert!(!names.iter().any(|n| n.contains(' ') || n.len() > 128), "{names:?}");
    assert!(app.upstreams.find("shared").is_none() && app.upstreams.find("gatehouse_status").is_none());

    let status = call(&app, &token, &sid, "gatehouse_status", json!({})).await;
    assert_ne!(text_of(&status), "gatehouse_status ran", "the built-in answers, not the upstream");

    let (_, _, m) = app.call(&token, &sid, json!({"jsonrpc":"2.0","id":3,"method":"prompts/list"})).await;
    let prompts: Vec<&str> =
        m[0]["result"]["prompts"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(prompts, ["left_prompt"], "{m:?}");

    let left_error = status_of(&app, "left").last_error.unwrap_or_default();
    assert!(left_error.contains("\"shared\" is offered by upstreams left and right"), "{left_error}");
    assert!(left_error.contains("\"gatehouse_status\" of upstream left would shadow a built-in"), "{left_error}");
    assert!(left_error.contains("\"bad name\""), "{left_error}");
    let right_error = status_of(&app, "right").last_error.unwrap_or_default();
    assert!(right_error.contains("\"shared\" is offered by upstreams right and left"), "{right_error}");
    assert!(right_error.contains("prompt \"shared_prompt\""), "{right_error}");
}

#[tokio::test]
async fn a_stdio_child_gets_a_cleared_environment_plus_its_configured_env() {
    // SAFETY: set once, before the server starts; std's own environment
    // access is serialised, and no test reads this variable elsewhere.
    unsafe { std::env::set_var("GATEHOUSE_TEST_SECRET", "from-the-gateway") };
    let envy = UpstreamConfig { env: [("CONFIGURED".to_string(), "yes".to_string())].into(), ..hostile("envy", &[]) };
    let (app, token, sid) = fronting(vec![envy]).await;
    wait_for_tool(&app, &token, &sid, "envy__env").await;
    let result = call(&app, &token, &sid, "envy__env", json!({})).await;
    let env: serde_json::Map<String, Value> = serde_json::from_str(&text_of(&result)).expect("the child's environment");
    assert_eq!(env["CONFIGURED"], "yes");
    assert!(!env.contains_key("GATEHOUSE_TEST_SECRET"), "{env:?}");
    let inherited = gatehouse::mcp::upstream::stdio::INHERITED_ENV;
    let foreign: Vec<&String> = env.keys().filter(|k| *k != "CONFIGURED" && !inherited.contains(&k.as_str())).collect();
    assert!(foreign.is_empty(), "only the allowlist and env reach the child: {foreign:?}");
    if let Ok(path) = std::env::var("PATH") {
        assert_eq!(env["PATH"], path.as_str());
    }
}

#[tokio::test]
async fn a_child_writing_an_overlong_line_is_failed_and_restarted() {
    let loud = UpstreamConfig { max_line_bytes: 64 * 1024, ..hostile("loud", &[]) };
    let (app, token, sid) = fronting(vec![loud]).await;
    wait_for_tool(&app, &token, &sid, "loud__shout").await;
    let pid = status_of(&app, "loud").pid.expect("running");

    let result = call(&app, &token, &sid, "loud__shout", json!({"bytes": 100_000})).await;
    assert_eq!(result["isError"], true, "{result}");
    assert!(text_of(&result).contains("longer than max_line_bytes (65536 bytes)"), "{result}");

    until("a new child", || {
        let s = status_of(&app, "loud");
        (s.health == gatehouse::mcp::upstream::supervision::Health::Up && s.pid.is_some_and(|p| p != pid)).then_some(())
    })
    .await;
    let fine = call(&app, &token, &sid, "loud__shout", json!({"bytes": 1000})).await;
    assert_ne!(fine["isError"], true, "{fine}");
    assert_eq!(text_of(&fine).len(), 1000);
}

#[tokio::test]
async fn a_childs_stderr_is_kept_as_a_bounded_tail() {
    let noisy = UpstreamConfig { stderr_tail_bytes: 4096, ..hostile("noisy", &["--stderr-flood", "1000000"]) };
    let (app, _, _) = fronting(vec![noisy]).await;
    let tail =
        until("its last words", || status_of(&app, "noisy").stderr_tail.filter(|t| t.contains("last words"))).await;
    assert!(tail.len() <= 4096, "the tail is bounded: {} bytes", tail.len());
    assert!(tail.ends_with("last words\n"), "{tail:?}");
    // The child's exit is recorded a moment after its last words are read.
    until("its failure is recorded", || status_of(&app, "noisy").last_error).await;
}

#[tokio::test]
async fn connect_and_list_timeouts_fail_the_upstream_naming_the_limit() {
    let mute = UpstreamConfig { connect_timeout: Duration::from_secs(1), ..hostile("mute", &["--mute"]) };
    let hang = UpstreamConfig { list_timeout: Duration::from_secs(1), ..hostile("hang", &["--hang-list"]) };
    let (app, _, _) = fronting(vec![mute, hang]).await;
    let mute_error = until("mute fails", || status_of(&app, "mute").last_error).await;
    assert!(mute_error.contains("no answer to initialize within connect_timeout (1s)"), "{mute_error}");
    let hang_error = until("hang fails", || status_of(&app, "hang").last_error).await;
    assert!(hang_error.contains("no complete catalogue within list_timeout (1s)"), "{hang_error}");
    for name in ["mute", "hang"] {
        assert_ne!(status_of(&app, name).health, gatehouse::mcp::upstream::supervision::Health::Up);
    }
}

#[tokio::test]
async fn a_call_past_call_timeout_is_an_error_and_cancelled_upstream() {
    let slowpoke = UpstreamConfig { call_timeout: Duration::from_secs(1), ..hostile("slowpoke", &[]) };
    let (app, token, sid) = fronting(vec![slowpoke]).await;
    wait_for_tool(&app, &token, &sid, "slowpoke__sleep").await;

    let result = call(&app, &token, &sid, "slowpoke__sleep", json!({"seconds": 120})).await;
    assert_eq!(result["isError"], true, "{result}");
    assert!(text_of(&result).contains("no answer within call_timeout (1s)"), "{result}");
    for _ in 0..200 {
        let counts: Value =
            serde_json::from_str(&text_of(&call(&app, &token, &sid, "slowpoke__counts", json!({})).await))
                .expect("counts");
        if counts["cancelled"] == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the upstream never heard the call was cancelled");
}

#[tokio::test]
async fn endless_lists_are_cut_at_max_list_pages_and_max_list_items() {
    let pages = UpstreamConfig { max_list_pages: 3, ..hostile("pages", &["--endless", "2"]) };
    let items = UpstreamConfig { max_list_items: 20, ..hostile("items", &["--endless", "50"]) };
    let (app, _, _) = fronting(vec![pages, items]).await;
    for (name, tools, limit) in [("pages", 6, "max_list_pages (3)"), ("items", 20, "max_list_items (20)")] {
        let status = until("listed", || {
            let s = status_of(&app, name);
            (s.health == gatehouse::mcp::upstream::supervision::Health::Up).then_some(s)
        })
        .await;
        assert_eq!(status.tools, tools, "{status:?}");
        assert!(status.last_error.as_deref().unwrap_or_default().contains(limit), "{status:?}");
    }
}

#[tokio::test]
async fn a_storm_of_list_changes_is_coalesced_into_a_few_listings() {
    let (app, token, sid) = fronting(vec![hostile("stormy", &[])]).await;
    wait_for_tool(&app, &token, &sid, "stormy__storm").await;
    let stormed = call(&app, &token, &sid, "stormy__storm", json!({"count": 300})).await;
    assert_eq!(text_of(&stormed), "stormed", "{stormed}");
    // The change announced last is listed (and the tool it adds held back
    // for review: it is new at an upstream whose tools are pinned).
    until("the tool added after the storm", || app.upstreams.held_tool("stormy__calm")).await;
    let counts: Value =
        serde_json::from_str(&text_of(&call(&app, &token, &sid, "stormy__counts", json!({})).await)).expect("counts");
    let lists = counts["lists"].as_u64().unwrap();
    assert!(lists < 30, "301 list_changed notifications cost {lists} listings");
}

/// What the server logs on this thread (the server runs on the test's
/// current-thread runtime).
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_rule_that_matches_no_tool_is_logged_at_start_and_marked_on_the_policies_page() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let app = spawn_app_with(|c| {
        c.upstream = vec![everything_stdio()];
        // The upstream's own tool name (exposed as ev__test_simple_text), and
        // an upstream that does not exist: neither matches anything.
        c.policy_rules = vec![allow_rule("ev__test_*"), allow_rule("test_simple_text"), allow_rule("nothing__*")];
    })
    .await;
    app.wait_for_upstream_tool("ev__test_simple_text").await;
    let text = || String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    wait_until("the unmatched rules are logged", || text().matches("matches no exposed tool").count() >= 2).await;
    let text = text();
    assert!(text.contains("pattern=test_simple_text"), "{text}");
    assert!(text.contains("pattern=nothing__*"), "{text}");
    assert!(!text.contains("pattern=ev__test_*"), "a rule that matches is not reported: {text}");

    app.add_user("ada", true).await;
    let ada = app.sign_in("ada").await;
    let view: Value = app.post_fn(&ada, "policies", &[]).await.json().await.unwrap();
    assert_eq!(view["unmatched"], json!(["test_simple_text", "nothing__*"]), "{view}");
    let page = app.get_as(&ada, "/policies").await.text().await.unwrap();
    assert_eq!(page.matches("matches no tool right now").count(), 2, "the page marks both rules");
}
