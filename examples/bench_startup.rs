//! Cold-start benchmark (issue #16): the real binary's time from spawning
//! `gatehouse --listen 127.0.0.1:0 --data-dir DIR` to `/readyz` answering 200,
//! over a data directory holding 1,000 agent credentials and 10,000 audit
//! rows, against an empty (migrated) one.
//!
//! Seeds through the server's own stores (`Core`: the credential store's
//! `issue`, the audit log's `record`), then starts the binary `runs` times
//! over each directory (after one untimed start) and reports, per start, the
//! time to its "listening on" banner and to the first 200 from `/readyz`
//! (polled in a tight loop over a raw socket once the banner names the port),
//! with min / median / max.
//!
//! `cargo run --release --example bench_startup -- target/release/gatehouse [credentials] [audit rows] [runs]`

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gatehouse_core::audit::Entry;
use gatehouse_core::credentials::IssueRequest;
use gatehouse_core::{Core, Db, Settings, SystemClock};

type BoxError = Box<dyn std::error::Error>;

/// The stores over `data` (created and migrated if new).
fn open(data: &Path) -> Result<Core, BoxError> {
    gatehouse_core::db::create_data_dir(data)?;
    // The seed gives one user every credential, past max_credentials_per_user.
    let per_user = gatehouse_core::PerUser { credentials: usize::MAX, ..Default::default() };
    Ok(Core::new(Db::open(data)?, Arc::new(SystemClock), Settings { per_user, ..Settings::default() })?)
}

/// Seeds `data` with one admin, `credentials` agent credentials (50 agents,
/// one thread each) and `rows` audit rows spread over them, in the states
/// a day of traffic leaves.
fn seed(data: &Path, credentials: usize, rows: usize) -> Result<(), BoxError> {
    let core = open(data)?;
    core.users.add("ada", "bench password", true)?;
    let mut issued = Vec::with_capacity(credentials);
    for i in 0..credentials {
        let credential = core.credentials.issue(IssueRequest {
            agent: format!("agent-{}", i % 50),
            thread: Some(format!("thread-{i}")),
            owner: Some("ada".into()),
            ..Default::default()
        })?;
        issued.push(credential.credential);
    }
    let audit = core.approvals.audit();
    let tools = ["gatehouse_status", "gatehouse_policies_list", "gatehouse_audit_recent", "gatehouse_policy_set"];
    let states = ["allowed", "pending", "approved", "running", "completed", "declined", "expired"];
    let mut execution = String::new();
    for i in 0..rows {
        let state = states[i % states.len()];
        if i % states.len() == 0 || execution.is_empty() {
            execution = gatehouse_core::secret::new_id("exec");
        }
        let credential = &issued[i % issued.len().max(1)];
        let actor = match state {
            "approved" | "declined" => "ada",
            "expired" => "gatehouse",
            _ => "agent",
        };
        audit.record(Entry {
            execution_id: &execution,
            state: gatehouse_core::approvals::State::parse(state).expect("a state"),
            tool: tools[i % tools.len()],
            upstream: None,
            arguments_digest: "sha256:bench",
            agent: &credential.agent,
            owner: credential.owner.as_deref(),
            owner_id: credential.owner_id,
            credential_id: Some(&credential.id),
            thread: credential.thread.as_deref(),
            actor: Some(actor),
            detail: None,
            arguments: None,
        });
    }
    // Queued: on disk before the server under test opens the database.
    audit.flush();
    Ok(())
}

/// One `GET /readyz` on a fresh connection: its status code, if it answered.
fn readyz(port: u16) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_nodelay(true).ok()?;
    stream
        .write_all(format!("GET /readyz HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\n\r\n").as_bytes())
        .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// Starts `bin` over `data` and stops it once `/readyz` says 200: (spawn →
/// banner, spawn → ready).
fn start_once(bin: &str, data: &Path) -> Result<(Duration, Duration), BoxError> {
    let started = Instant::now();
    let mut server = Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut banner = BufReader::new(server.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    let port: u16 = loop {
        line.clear();
        if banner.read_line(&mut line)? == 0 {
            return Err("the server ended before it listened".into());
        }
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.trim().rsplit(':').next().ok_or("no port")?.parse()?;
        }
    };
    let listening = started.elapsed();
    let ready = loop {
        if readyz(port) == Some(200) {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err("not ready after 30 s".into());
        }
    };
    // SIGTERM: a graceful stop, as an operator's restart would be.
    Command::new("kill").arg(server.id().to_string()).status()?;
    server.wait()?;
    // The rest of the banner, so the pipe never blocks a later start.
    let _ = banner.read_to_string(&mut line);
    Ok((listening, ready))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// "min / median / max" in milliseconds.
fn summary(mut times: Vec<f64>) -> String {
    times.sort_by(f64::total_cmp);
    let median = if times.len() % 2 == 1 {
        times[times.len() / 2]
    } else {
        (times[times.len() / 2 - 1] + times[times.len() / 2]) / 2.0
    };
    format!("{:.1} / {:.1} / {:.1} ms", times[0], median, times[times.len() - 1])
}

fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let bin = args.next().unwrap_or_else(|| "target/release/gatehouse".into());
    let mut number = |default: usize| -> Result<usize, BoxError> {
        Ok(match args.next() {
            Some(a) => a.parse()?,
            None => default,
        })
    };
    let (credentials, rows, runs) = (number(1000)?, number(10_000)?, number(10)?);
    if runs == 0 {
        return Err("runs must be at least 1".into());
    }

    let empty = tempfile::tempdir()?;
    drop(open(empty.path())?);
    let full = tempfile::tempdir()?;
    let seeding = Instant::now();
    seed(full.path(), credentials, rows)?;
    println!(
        "seeded {credentials} credentials and {rows} audit rows in {:.2} s ({} KiB database)",
        seeding.elapsed().as_secs_f64(),
        std::fs::metadata(full.path().join("gatehouse.db")).map(|m| m.len() / 1024).unwrap_or(0)
    );

    let mut table = Vec::new();
    for (label, dir) in [
        ("empty data dir".to_string(), empty.path()),
        (format!("{credentials} credentials, {rows} audit rows"), full.path()),
    ] {
        start_once(&bin, dir)?; // untimed: the files into the page cache
        let (mut listening, mut ready) = (Vec::new(), Vec::new());
        for round in 1..=runs {
            let (l, r) = start_once(&bin, dir)?;
            println!("{label}, start {round}: spawn → listening {:.1} ms, → /readyz 200 {:.1} ms", ms(l), ms(r));
            listening.push(ms(l));
            ready.push(ms(r));
        }
        table.push(format!("| {label} | {} | {} |", summary(listening), summary(ready)));
    }
    println!("\n| data dir | spawn → listening (min / median / max) | spawn → `/readyz` 200 (min / median / max) |");
    println!("|---|---|---|");
    for row in table {
        println!("{row}");
    }
    Ok(())
}
