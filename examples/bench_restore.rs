//! Restart benchmark: how long the real binary takes from process start to
//! serving with N paused executions stored by a previous run (issue #12).
//!
//! Seeds a data directory through the same stores the server uses (N pending
//! executions of one credential, each with its audit entry and its stored
//! row), then starts the release binary over it three times and reports, for
//! each start, the time from spawn to its "listening on" line and the store's
//! own restore time from its log; then the same for an empty data directory.
//!
//! `cargo run --release --example bench_restore -- target/release/gatehouse 10000`

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gatehouse_core::approvals::NewExecution;
use gatehouse_core::credentials::IssueRequest;
use gatehouse_core::{Core, Db, Settings, SystemClock};

/// Seeds `data` with `n` pending executions; returns once they are on disk.
async fn seed(data: &std::path::Path, n: usize) {
    gatehouse_core::db::create_data_dir(data).unwrap();
    let settings = Settings {
        approval_ttl: Duration::from_secs(3600),
        max_executions_per_credential: n + 1,
        ..Settings::default()
    };
    let core = Core::new(Db::open(data).unwrap(), Arc::new(SystemClock), settings).unwrap();
    core.users.add("ada", "bench password", true).unwrap();
    let credential = core
        .credentials
        .issue(IssueRequest { agent: "bench".into(), owner: Some("ada".into()), ..Default::default() })
        .unwrap();
    for i in 0..n {
        core.approvals
            .open(NewExecution {
                tool: "gatehouse_policy_set".into(),
                upstream: None,
                upstream_tool: None,
                tool_digest: "bench".into(),
                arguments: serde_json::json!({"pattern": format!("bench_{i}"), "action": "allow"}),
                agent: "bench".into(),
                credential_id: credential.id.clone(),
                thread: None,
                owner: Some("ada".into()),
                owner_id: None,
                session_id: Some(format!("session_{}", i % 100)),
                human_only: false,
                admin_only: true,
                ttl: None,
                asked_by: None,
                kept_arguments: None,
            })
            .await
            .unwrap();
    }
    core.approvals.flush().await;
}

/// Starts `bin` over `data` and stops it once it listens: (spawn → listening,
/// the store's restore time and what it restored, from the log).
fn start_once(bin: &str, data: &std::path::Path) -> (Duration, Option<String>) {
    let started = Instant::now();
    let mut server = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap(), "--log-format", "json"])
        .env("GATEHOUSE_APPROVAL_TTL", "1h")
        .env("GATEHOUSE_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(server.stderr.take().unwrap());
    let mut restored = None;
    let mut line = String::new();
    loop {
        line.clear();
        if log.read_line(&mut line).unwrap() == 0 {
            panic!("the server ended before it listened");
        }
        if line.contains("restored the executions") {
            restored = Some(line.trim().to_string());
        }
        if line.contains("\"message\":\"listening\"") {
            break;
        }
    }
    let elapsed = started.elapsed();
    // SIGTERM: a graceful stop, as an operator's restart would be.
    let _ = Command::new("kill").arg(server.id().to_string()).status();
    let _ = server.wait();
    (elapsed, restored)
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let bin = args.next().unwrap_or_else(|| "target/release/gatehouse".into());
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);

    let empty = tempfile::tempdir().unwrap();
    gatehouse_core::db::create_data_dir(empty.path()).unwrap();
    let full = tempfile::tempdir().unwrap();
    let seeding = Instant::now();
    seed(full.path(), n).await;
    println!("seeded {n} pending executions in {:.2} s", seeding.elapsed().as_secs_f64());

    for (label, dir) in [("empty data dir", empty.path()), ("with the paused executions", full.path())] {
        for round in 1..=3 {
            let (elapsed, restored) = start_once(&bin, dir);
            println!("{label}, start {round}: process start → listening {:.0} ms", elapsed.as_secs_f64() * 1000.0);
            if let Some(line) = restored {
                let field = |name: &str| {
                    line.split(&format!("\"{name}\":"))
                        .nth(1)
                        .and_then(|rest| rest.split([',', '}']).next().map(|v| v.trim_matches('"').to_string()))
                };
                println!(
                    "  restore: {} ms for {} pending, {} expired, {} abandoned",
                    field("elapsed_ms").unwrap_or_default(),
                    field("pending").unwrap_or_default(),
                    field("expired").unwrap_or_default(),
                    field("abandoned").unwrap_or_default()
                );
            }
        }
    }
}
