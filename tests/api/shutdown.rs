//! Shutdown drains the server's background tasks: `Application::run` ends
//! only once every task it tracked has finished.

use std::sync::Arc;
use std::time::Duration;

use gatehouse::config::Config;
use gatehouse::mcp::upstream::supervision::Health;
use gatehouse::startup::Application;
use gatehouse_core::{Core, Db, ManualClock};
use tokio_util::sync::CancellationToken;

use crate::upstreams::files_upstream;

/// Whether process `pid` still runs (a zombie, exited but not yet reaped, does not).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name: `pid (comm) S ...`.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

#[tokio::test]
async fn shutdown_waits_for_every_background_task() {
    let dir = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.data_dir = dir.path().to_path_buf();
    config.upstream = vec![files_upstream(&std::fs::canonicalize(root.path()).unwrap())];
    let clock = Arc::new(ManualClock::new(gatehouse_core::Clock::now_ms(&gatehouse_core::SystemClock)));
    let core = Core::new(Db::open(dir.path()).unwrap(), clock, config.settings()).unwrap();
    let shutdown = CancellationToken::new();
    let app = Application::build_with_core(&config, core, shutdown.clone()).await.unwrap();
    let tasks = app.state().mcp.tasks.clone();
    let upstreams = app.state().mcp.upstreams.clone();
    let run = tokio::spawn(app.run());

    // A stdio upstream up: its supervisor and its stderr reader are running.
    let mut pid = None;
    for _ in 0..400 {
        pid = upstreams.status().into_iter().find(|s| s.health == Health::Up).and_then(|s| s.pid);
        if pid.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = pid.expect("the upstream came up");
    assert!(running(pid));
    // The supervisor, the stderr reader, the session sweeper and housekeeping at least.
    assert!(tasks.len() >= 4, "{} tasks tracked", tasks.len());

    shutdown.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(30), run).await;
    ended.expect("run ends after shutdown").expect("run did not panic").expect("run ends without an error");
    assert!(tasks.is_closed(), "run closes the tracker");
    assert!(tasks.is_empty(), "{} tasks still running after run ended", tasks.len());
    // The stderr reader ends once the child has closed its stderr; the child
    // then finishes exiting on its own, which on a loaded machine can take a
    // moment (CI saw it still running right after `run` ended).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while running(pid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!running(pid), "the upstream's process {pid} outlived the server by 10 s");
}
