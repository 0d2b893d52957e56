//! Configuration that reloads without a restart: the rules, profiles and
//! trusted upstreams of the file hold on the next call after SIGHUP (or
//! after the file changes), connected agents keep their sessions and are
//! told their lists changed; a file that does not load changes nothing;
//! every reload is in the change log.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gatehouse::reload::{Cause, Reloaded, Reloader};
use serde_json::{Value, json};

use crate::helpers::*;

const ACCEPT_BOTH: &str = "application/json, text/event-stream";

/// Writable by its owner only, as a config file that reloads must be.
fn owner_only(file: &std::path::Path) {
    std::fs::set_permissions(file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
}

/// An empty config file in `app`'s data folder, writable by its owner
/// only, and a reloader of `app` from it.
pub fn empty_file(app: &TestApp) -> (std::path::PathBuf, Reloader) {
    let file = app.dir.path().join("gatehouse.toml");
    std::fs::write(&file, "").unwrap();
    owner_only(&file);
    let reloader = Reloader::new(file.clone(), Default::default(), &app.state);
    (file, reloader)
}

#[tokio::test]
async fn a_reload_applies_the_files_rules_and_a_broken_file_changes_nothing() {
    let app = spawn_app().await;
    let (file, reloader) = empty_file(&app);
    let names = |core: &gatehouse_core::Core| -> Vec<String> {
        core.policy.rules().unwrap().rules().iter().map(|r| r.name.clone()).collect()
    };
    assert!(names(&app.core).is_empty());

    std::fs::write(&file, "[[policy]]\npattern = \"gatehouse_status\"\naction = \"block\"\n").unwrap();
    assert_eq!(
        reloader.reload(Cause::FileChanged).await,
        Reloaded::Applied {
            applied: true,
            upstreams: Default::default(),
            notify: false,
            live: vec![],
            at_restart: vec![]
        }
    );
    assert_eq!(names(&app.core), ["gatehouse_status"]);
    // The next call meets it, in a session opened before the reload.
    let token = app.issue("cursor", None);
    let sid = app.open_session(&token).await;
    let refused = app.tool_call(&token, &sid, "gatehouse_status", json!({})).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");

    // A broken file: refused whole, the running rules kept, and said so.
    std::fs::write(&file, "[[policy]]\npattern = \"a*b\"\naction = \"allow\"\nlisten_prot = 1\n").unwrap();
    let Reloaded::Refused(why) = reloader.reload(Cause::Signal).await else { panic!("a broken file is refused") };
    assert!(why.contains("listen_prot"), "{why}");
    assert_eq!(names(&app.core), ["gatehouse_status"]);
    // A file others than its owner may write is not reloaded: whoever
    // writes it would change the gate (an agent's user in the same group).
    std::fs::write(&file, "").unwrap();
    let open_to_the_group = std::os::unix::fs::PermissionsExt::from_mode(0o664);
    std::fs::set_permissions(&file, open_to_the_group).unwrap();
    let Reloaded::Refused(why) = reloader.reload(Cause::FileChanged).await else { panic!("refused") };
    assert!(why.contains("writable by its group or by everyone"), "{why}");
    assert_eq!(names(&app.core), ["gatehouse_status"], "the rule the file no longer has still holds");
    owner_only(&file);
    // A key only a restart applies is named, not silently ignored.
    std::fs::write(&file, "session_idle_timeout = \"5m\"\n").unwrap();
    let outcome = reloader.reload(Cause::Signal).await;
    let at_restart = vec!["session_idle_timeout".to_string()];
    assert_eq!(
        outcome,
        Reloaded::Applied { applied: true, upstreams: Default::default(), notify: false, live: vec![], at_restart }
    );
    assert!(names(&app.core).is_empty(), "the rule left the file, so it left the gate");

    let this_file = file.display().to_string();
    let changes: Vec<_> =
        app.core.changes.recent("config", 20).unwrap().into_iter().filter(|c| c.target == this_file).collect();
    let actions: Vec<&str> = changes.iter().map(|c| c.action.as_str()).collect();
    assert_eq!(actions, ["reload", "reload refused", "reload refused", "reload"], "newest first: {changes:?}");
    assert!(changes[0].detail.as_deref().unwrap().contains("at the next restart: session_idle_timeout"));
    assert!(changes[1].detail.as_deref().unwrap().contains("chmod go-w"));
    assert!(changes[2].detail.as_deref().unwrap().contains("listen_prot"));
    // Nor is one in a folder others may write (they could replace it), nor
    // one another user owns (they could write it).
    let shared = app.dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o775)).unwrap();
    let elsewhere = shared.join("gatehouse.toml");
    std::fs::write(&elsewhere, "").unwrap();
    owner_only(&elsewhere);
    let other = Reloader::new(elsewhere.clone(), Default::default(), &app.state);
    let Reloaded::Refused(why) = other.reload(Cause::Signal).await else { panic!("refused") };
    assert!(why.contains("its folder") && why.contains("chmod go-w the folder"), "{why}");
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    assert!(matches!(other.reload(Cause::Signal).await, Reloaded::Applied { .. }));
    // Only root may give a file away: where the tests run as root, give it to "nobody".
    if std::os::unix::fs::chown(&elsewhere, Some(65534), None).is_ok() {
        let Reloaded::Refused(why) = other.reload(Cause::Signal).await else { panic!("refused") };
        assert!(why.contains("belongs to user 65534"), "{why}");
    }
}

#[tokio::test]
async fn a_reload_starts_restarts_and_stops_upstreams_as_their_entries_changed() {
    let app = spawn_app().await;
    let (file, reloader) = empty_file(&app);
    let entry = |extra: &str| {
        format!(
            "[[upstream]]\nname = \"everything\"\nprefix = \"ev__\"\ncommand = {:?}\nargs = [{:?}, \"--stdio\"]\n{extra}",
            repo_path(NODE),
            repo_path("end2end/fixtures/everything_server.mjs"),
        )
    };
    let upstreams = |outcome: Reloaded| match outcome {
        Reloaded::Applied { upstreams, .. } => upstreams,
        Reloaded::Refused(why) => panic!("refused: {why}"),
    };
    // An agent connected before any upstream.
    let token = app.issue("cursor", None);
    let agent = app.connect((), &token).await;

    std::fs::write(&file, entry("")).unwrap();
    assert_eq!(upstreams(reloader.reload(Cause::FileChanged).await).added, ["everything"]);
    app.wait_for_upstream_tool("ev__test_simple_text").await;
    let listed = agent.list_all_tools().await.unwrap();
    assert!(listed.iter().any(|t| t.name == "ev__test_simple_text"), "listed to the agent connected before");

    std::fs::write(&file, entry("call_timeout = \"20s\"\n")).unwrap();
    assert_eq!(upstreams(reloader.reload(Cause::FileChanged).await).restarted, ["everything"]);
    app.wait_for_upstream_tool("ev__test_simple_text").await;

    std::fs::write(&file, "").unwrap();
    assert_eq!(upstreams(reloader.reload(Cause::FileChanged).await).removed, ["everything"]);
    assert!(app.upstreams.status().is_empty(), "stopped and forgotten");
    let listed = agent.list_all_tools().await.unwrap();
    assert!(listed.iter().all(|t| !t.name.starts_with("ev__")), "its tools left the agent's list");
    let changes = app.core.changes.recent("config", 10).unwrap();
    let said: Vec<&str> = changes.iter().filter_map(|c| c.detail.as_deref()).collect();
    assert!(said[0].contains("upstreams removed: everything"), "{said:?}");
    assert!(said[1].contains("upstreams restarted: everything"), "{said:?}");
    assert!(said[2].contains("upstreams added: everything"), "{said:?}");
}

/// The real binary: a profile added to its file holds after SIGHUP for an
/// agent connected before, in the same session; a broken file is refused.
#[tokio::test]
async fn sighup_reloads_the_file_of_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gatehouse.toml");
    std::fs::write(&file, "listen = \"127.0.0.1:0\"\n").unwrap();
    owner_only(&file);
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .arg("--config")
        .arg(&file)
        .args(["--log-format", "json", "--data-dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (_stdout, _banner, address) = read_banner(&mut child);
    let out = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["token", "issue", "--agent", "reloaded", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let token = serde_json::from_slice::<Value>(&out.stdout).unwrap()["token"].as_str().unwrap().to_string();

    let client = reqwest::Client::new();
    let url = format!("http://{address}/mcp");
    let post = |body: Value, sid: Option<String>| {
        let mut request = client.post(&url).bearer_auth(&token).header("accept", ACCEPT_BOTH).json(&body);
        if let Some(sid) = sid {
            request = request.header("mcp-session-id", sid).header("mcp-protocol-version", "2025-11-25");
        }
        request.send()
    };
    let opened = post(initialize_request("2025-11-25"), None).await.unwrap();
    let sid = opened.headers()["mcp-session-id"].to_str().unwrap().to_string();
    post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), Some(sid.clone())).await.unwrap();
    let tools = |sid: String| {
        let listed = post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}), Some(sid));
        async move {
            let messages = jsonrpc_messages(listed.await.unwrap()).await;
            let mut names: Vec<String> = messages
                .iter()
                .find_map(|m| m["result"]["tools"].as_array())
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect();
            names.sort();
            names
        }
    };
    assert!(tools(sid.clone()).await.len() > 2, "every tool before");

    let profile = "[[profile]]\nname = \"status only\"\nagents = [\"reloaded\"]\ntools = [\"gatehouse_status\"]\n";
    std::fs::write(&file, format!("listen = \"127.0.0.1:0\"\n{profile}")).unwrap();
    let hangup = || {
        let sent = Command::new("kill").args(["-HUP", &child.id().to_string()]).status().unwrap();
        assert!(sent.success());
    };
    hangup();
    let started = Instant::now();
    while tools(sid.clone()).await != ["gatehouse_status", "resume"] {
        assert!(started.elapsed() < Duration::from_secs(20), "the profile never held");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A broken file: refused, and the profile still holds.
    std::fs::write(&file, format!("listen = \"127.0.0.1:0\"\n{profile}[[profile]]\nname = 3\n")).unwrap();
    hangup();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(tools(sid.clone()).await, ["gatehouse_status", "resume"]);

    // An upstream added to the file: after SIGHUP its tools are listed to
    // the agent, in the session it opened before.
    let upstream = format!(
        "[[upstream]]\nname = \"everything\"\nprefix = \"ev__\"\ncommand = {:?}\nargs = [{:?}, \"--stdio\"]\n",
        repo_path(NODE),
        repo_path("end2end/fixtures/everything_server.mjs"),
    );
    std::fs::write(&file, format!("listen = \"127.0.0.1:0\"\n{upstream}")).unwrap();
    hangup();
    let started = Instant::now();
    while !tools(sid.clone()).await.iter().any(|t| t == "ev__test_simple_text") {
        assert!(started.elapsed() < Duration::from_secs(30), "the upstream's tools never came");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    child.kill().unwrap();
    let output = child.wait_with_output().unwrap();
    let logs: Vec<Value> =
        String::from_utf8_lossy(&output.stderr).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let said = |message: &str| logs.iter().filter(|l| l["message"] == message).collect::<Vec<_>>();
    assert!(said("configuration reloaded").iter().any(|l| l["cause"] == "SIGHUP"), "{logs:?}");
    assert!(!said("configuration not reloaded: the running one is kept").is_empty(), "{logs:?}");
}

/// The keys that apply at once (`LIVE_KEYS`) hold on the next request after
/// a reload, in a session opened before it; the change log names them; the
/// listener, which waits for a restart, is named as waiting.
#[tokio::test]
async fn a_reload_applies_the_page_size_and_the_caps_to_the_next_request() {
    let app = spawn_app().await;
    let (file, reloader) = empty_file(&app);
    let token = app.issue("cursor", None);
    let sid = app.open_session(&token).await;
    let list = |cursor: Option<&str>| {
        let params = cursor.map_or(json!({}), |c| json!({"cursor": c}));
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params});
        let (app, token, sid) = (&app, &token, &sid);
        async move {
            let (_, _, messages) = app.call(token, sid, body).await;
            messages.into_iter().find(|m| m["id"] == 1).expect("an answer")
        }
    };
    let whole = list(None).await;
    assert!(whole["result"].get("nextCursor").is_none(), "one page: {whole}");
    let tools = whole["result"]["tools"].as_array().unwrap().len();
    assert!(tools > 2, "{whole}");

    std::fs::write(&file, "list_page_size = 2\nmax_sessions = 5\nlisten = \"127.0.0.1:1\"\n").unwrap();
    let Reloaded::Applied { live, at_restart, .. } = reloader.reload(Cause::Signal).await else { panic!("refused") };
    assert_eq!((live, at_restart), (vec!["list_page_size".to_string(), "max_sessions".into()], vec!["listen".into()]));
    let first = list(None).await;
    assert_eq!(first["result"]["tools"].as_array().unwrap().len(), 2, "{first}");
    let cursor = first["result"]["nextCursor"].as_str().expect("a next page").to_string();
    assert_eq!(list(Some(&cursor)).await["result"]["tools"].as_array().unwrap().len(), 2.min(tools - 2));
    assert_eq!(app.state.mcp.config.load().max_sessions, 5);
    let changes = app.core.changes.recent("config", 1).unwrap();
    let said = changes[0].detail.as_deref().unwrap();
    assert!(said.contains("applied: list_page_size, max_sessions"), "{said}");
    assert!(said.contains("at the next restart: listen"), "{said}");

    // Back to the default: one page again, and the key named as applied.
    std::fs::write(&file, "listen = \"127.0.0.1:1\"\n").unwrap();
    let Reloaded::Applied { live, .. } = reloader.reload(Cause::FileChanged).await else { panic!("refused") };
    assert_eq!(live, ["list_page_size", "max_sessions"]);
    assert!(list(None).await["result"].get("nextCursor").is_none());
}
