//! Load and soak run (issue #16) against a running server: `agents` agents at
//! once, each with its own credential and MCP session, each looping over a
//! mix of calls for `minutes`, while a "person" decides the gated ones over
//! the browser API. From outside the server it samples, at the start, every
//! minute and at the end: resident memory (`/proc/PID/status` VmRSS), open
//! file descriptors (`/proc/PID/fd`), and the approval store's entries and
//! pending count (`/metrics`, as the signed-in admin).
//!
//! The mix, per agent, in steps of 20: one gated call approved by the person
//! (the agent's `resume` returns the tool's result), one declined (`resume`
//! answers `execution_declined`), one left to expire (started only when the
//! agent's previous one has ended; its `resume` runs beside the agent's other
//! calls and answers `execution_expired`), and allowed calls for the rest.
//! The server's policy must gate `APPROVED_TOOL` (with a TTL long enough to
//! decide) and `EXPIRING_TOOL` (with a TTL of a few seconds), and allow
//! `ALLOWED_TOOL`: `scripts/soak.sh` writes that config.
//!
//! `soak URL PID TOKENS_FILE USER PASSWORD MINUTES` (`TOKENS_FILE`: one agent
//! token a line, as many agents as lines). Prints a row per minute, then a
//! Markdown summary; exits 1 if any call had an unexpected answer, the
//! approval store still holds entries at the end, or (runs of 2 minutes or
//! more) resident memory grew from the first minute's sample to the last one
//! under load by more than [`GROWTH_FRACTION`] (at least [`GROWTH_MIN_MIB`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{Mutex, mpsc};

mod support;
use support::histogram::{Histogram, bucket_ms, minus, quantile};
use support::{ACCEPT, BoxError, messages, post, rss_mib};

/// Allowed at once (read-only built-in).
const ALLOWED_TOOL: &str = "gatehouse_status";
/// Gated, decided by the person.
const APPROVED_TOOL: &str = "gatehouse_policies_list";
/// Gated with a short TTL, never decided.
const EXPIRING_TOOL: &str = "gatehouse_audit_recent";
/// People deciding at once.
const PERSONS: usize = 4;
/// Unexpected answers kept for the report.
const KEPT_ERRORS: usize = 20;
/// Resident memory may grow this much from the first minute's sample to the
/// last one under load (warm caches, allocator noise) before the run fails:
/// this fraction of the first minute's, and at least [`GROWTH_MIN_MIB`].
const GROWTH_FRACTION: f64 = 0.25;
/// See [`GROWTH_FRACTION`].
const GROWTH_MIN_MIB: f64 = 16.0;

/// What the run counts and measures.
#[derive(Default)]
struct Kind {
    done: AtomicU64,
}

struct Stats {
    allowed: Kind,
    approved: Kind,
    declined: Kind,
    expired: Kind,
    /// `resume` answered "still pending" and was called again.
    resumed_again: AtomicU64,
    errors: AtomicU64,
    kept: std::sync::Mutex<Vec<String>>,
    /// An allowed call.
    allowed_latency: Histogram,
    /// A gated call's own answer (the pause).
    pause_latency: Histogram,
    /// Gated call sent → the approved result back from `resume`.
    approved_round_trip: Histogram,
    /// The person's decision `POST`.
    decision_latency: Histogram,
}

impl Stats {
    fn new() -> Self {
        Self {
            allowed: Kind::default(),
            approved: Kind::default(),
            declined: Kind::default(),
            expired: Kind::default(),
            resumed_again: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            kept: std::sync::Mutex::new(Vec::new()),
            allowed_latency: Histogram::new(),
            pause_latency: Histogram::new(),
            approved_round_trip: Histogram::new(),
            decision_latency: Histogram::new(),
        }
    }

    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < KEPT_ERRORS {
            eprintln!("unexpected: {what}");
            kept.push(what);
        }
    }

    fn total(&self) -> u64 {
        [&self.allowed, &self.approved, &self.declined, &self.expired]
            .iter()
            .map(|k| k.done.load(Ordering::Relaxed))
            .sum()
    }
}

/// One agent's MCP session.
struct Mcp {
    client: reqwest::Client,
    url: String,
    token: String,
    sid: String,
    next_id: AtomicU64,
}

impl Mcp {
    async fn open(client: &reqwest::Client, base: &str, token: &str) -> Result<Self, BoxError> {
        let url = format!("{base}/mcp");
        let init = client
            .post(&url)
            .bearer_auth(token)
            .header("accept", ACCEPT)
            .json(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"soak","version":"1"}}}))
            .send()
            .await?;
        if !init.status().is_success() {
            return Err(format!("initialize: HTTP {}", init.status()).into());
        }
        let sid = init.headers().get("mcp-session-id").ok_or("no mcp-session-id")?.to_str()?.to_string();
        let mcp = Mcp { client: client.clone(), url, token: token.to_string(), sid, next_id: AtomicU64::new(1) };
        let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
        post(&mcp.client, &mcp.url, &mcp.token, &mcp.sid, &initialized).await?;
        Ok(mcp)
    }

    /// A `tools/call`'s result (the JSON-RPC `result`), or why not.
    async fn call(&self, tool: &str, arguments: Value) -> Result<Value, BoxError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}});
        let r = post(&self.client, &self.url, &self.token, &self.sid, &request).await?;
        let reply = messages(r).await?.into_iter().find(|m| m["id"] == id).ok_or("no reply with the request's id")?;
        match reply.get("result") {
            Some(result) => Ok(result.clone()),
            None => Err(format!("{tool}: {reply}").into()),
        }
    }

    /// A gated call: its execution id.
    async fn pause(&self, tool: &str) -> Result<String, BoxError> {
        let result = self.call(tool, json!({})).await?;
        let s = &result["structuredContent"];
        match (s["status"].as_str(), s["executionId"].as_str()) {
            (Some("user_approval_required"), Some(eid)) => Ok(eid.to_string()),
            _ => Err(format!("{tool} did not pause: {result}").into()),
        }
    }

    /// `resume` until the call is no longer pending: its result.
    async fn resume(&self, eid: &str, stats: &Stats) -> Result<Value, BoxError> {
        loop {
            let result = self.call("resume", json!({"executionId": eid})).await?;
            if result["structuredContent"]["status"] == "user_approval_required" {
                stats.resumed_again.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            return Ok(result);
        }
    }

    async fn close(&self) {
        let _ = self.client.delete(&self.url).bearer_auth(&self.token).header("mcp-session-id", &self.sid).send().await;
    }
}

/// The error code of an error result, if it is one.
fn error_code(result: &Value) -> Option<&str> {
    (result["isError"] == true).then(|| result["structuredContent"]["error"].as_str().unwrap_or("(no code)"))
}

/// What the person is asked to do.
struct Decision {
    eid: String,
    accept: bool,
}

/// A signed-in person deciding over the browser API.
struct Person {
    client: reqwest::Client,
    base: String,
    cookie: String,
}

impl Person {
    async fn sign_in(client: &reqwest::Client, base: &str, user: &str, password: &str) -> Result<Self, BoxError> {
        let cookie = support::sign_in(client, base, user, password).await?;
        Ok(Self { client: client.clone(), base: base.to_string(), cookie })
    }

    async fn decide(&self, d: &Decision) -> Result<(), BoxError> {
        let action = if d.accept { "accept" } else { "decline" };
        let r = self
            .client
            .post(format!("{}/api/executions/{}/resume", self.base, d.eid))
            .header("origin", &self.base)
            .header("cookie", &self.cookie)
            .json(&json!({"action": action, "reason": if d.accept { None } else { Some("soak: declined") }}))
            .send()
            .await?;
        if r.status() != 200 {
            return Err(format!("decision {action} on {}: HTTP {}", d.eid, r.status()).into());
        }
        Ok(())
    }

    /// The admin's `/metrics`.
    async fn metrics(&self) -> Result<String, BoxError> {
        let r = self.client.get(format!("{}/metrics", self.base)).header("cookie", &self.cookie).send().await?;
        if !r.status().is_success() {
            return Err(format!("/metrics: HTTP {}", r.status()).into());
        }
        Ok(r.text().await?)
    }
}

/// The value of the metric line starting with `name `.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// One agent's loop until `stop`.
async fn agent(mcp: Arc<Mcp>, stats: Arc<Stats>, decide: mpsc::Sender<Decision>, stop: Arc<AtomicBool>) {
    let expiring = Arc::new(AtomicBool::new(false));
    let mut expiries = Vec::new();
    let mut step: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        step += 1;
        let slot = step % 20;
        let outcome: Result<(), BoxError> = async {
            if slot == 5 && !expiring.swap(true, Ordering::AcqRel) {
                let started = Instant::now();
                let eid = match mcp.pause(EXPIRING_TOOL).await {
                    Ok(eid) => eid,
                    Err(e) => {
                        expiring.store(false, Ordering::Release);
                        return Err(e);
                    }
                };
                stats.pause_latency.record(started.elapsed());
                let (mcp, stats, expiring) = (mcp.clone(), stats.clone(), expiring.clone());
                expiries.push(tokio::spawn(async move {
                    match mcp.resume(&eid, &stats).await {
                        Ok(r) if error_code(&r) == Some("execution_expired") => {
                            stats.expired.done.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) => stats.error(format!("{EXPIRING_TOOL} {eid}: expected execution_expired, got {r}")),
                        Err(e) => stats.error(format!("{EXPIRING_TOOL} resume {eid}: {e}")),
                    }
                    expiring.store(false, Ordering::Release);
                }));
                expiries.retain(|t| !t.is_finished());
            } else if slot == 10 || slot == 15 {
                let accept = slot == 10;
                let started = Instant::now();
                let eid = mcp.pause(APPROVED_TOOL).await?;
                stats.pause_latency.record(started.elapsed());
                decide.send(Decision { eid: eid.clone(), accept }).await.map_err(|_| "the person is gone")?;
                let result = mcp.resume(&eid, &stats).await?;
                match (accept, error_code(&result)) {
                    (true, None) => {
                        stats.approved_round_trip.record(started.elapsed());
                        stats.approved.done.fetch_add(1, Ordering::Relaxed);
                    }
                    (false, Some("execution_declined")) => {
                        stats.declined.done.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => return Err(format!("{eid} (accept: {accept}): unexpected result {result}").into()),
                }
            } else {
                let started = Instant::now();
                let result = mcp.call(ALLOWED_TOOL, json!({})).await?;
                if result["isError"] == true || result["structuredContent"]["status"] == "user_approval_required" {
                    return Err(format!("{ALLOWED_TOOL}: {result}").into());
                }
                stats.allowed_latency.record(started.elapsed());
                stats.allowed.done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }
        .await;
        if let Err(e) = outcome {
            stats.error(e.to_string());
            // An error storm would only measure itself.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for t in expiries {
        let _ = t.await;
    }
    mcp.close().await;
}

/// What is sampled from outside the server.
struct Sample {
    at: Duration,
    rss_mib: f64,
    fds: usize,
    entries: f64,
    pending: f64,
    sessions: f64,
    calls: u64,
    allowed: Vec<u64>,
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

async fn sample(pid: u32, person: &Person, stats: &Stats, since: Instant) -> Sample {
    let text = person.metrics().await.unwrap_or_else(|e| {
        stats.error(format!("metrics: {e}"));
        String::new()
    });
    let m = |name| metric(&text, name).unwrap_or(f64::NAN);
    Sample {
        at: since.elapsed(),
        rss_mib: rss_mib(pid).unwrap_or(f64::NAN),
        fds: fds(pid),
        entries: m("gatehouse_approval_store_entries"),
        pending: m("gatehouse_approvals_pending"),
        sessions: m("gatehouse_mcp_sessions"),
        calls: stats.total(),
        allowed: stats.allowed_latency.snapshot(),
    }
}

fn row(label: &str, s: &Sample, previous: Option<&Sample>) -> String {
    let (rate, p50, p99) = match previous {
        Some(p) => {
            let window = minus(&s.allowed, &p.allowed);
            let secs = (s.at - p.at).as_secs_f64().max(1e-9);
            (
                format!("{:.0}", (s.calls - p.calls) as f64 / secs),
                format!("{:.2}", quantile(&window, 0.5)),
                format!("{:.2}", quantile(&window, 0.99)),
            )
        }
        None => ("—".into(), "—".into(), "—".into()),
    };
    format!(
        "| {label} | {rate} | {p50} | {p99} | {:.1} | {} | {} | {} | {} |",
        s.rss_mib, s.fds, s.entries, s.pending, s.sessions
    )
}

const HEADER: &str = "| when | calls/s | allowed p50 ms | allowed p99 ms | RSS MiB | open fds | store entries | pending | MCP sessions |\n|---|---|---|---|---|---|---|---|---|";

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [base, pid, tokens, user, password, minutes] = args.as_slice() else {
        return Err("usage: soak URL PID TOKENS_FILE USER PASSWORD MINUTES".into());
    };
    let pid: u32 = pid.parse()?;
    let minutes: f64 = minutes.parse()?;
    if minutes.is_nan() || minutes <= 0.0 {
        return Err("MINUTES must be more than 0".into());
    }
    let tokens: Vec<String> =
        std::fs::read_to_string(tokens)?.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
    if tokens.is_empty() {
        return Err("no tokens".into());
    }

    // The sampler's own client: its one connection is all that is left at the end.
    let sampler = Person::sign_in(&reqwest::Client::new(), base, user, password).await?;
    let load = reqwest::Client::builder().pool_max_idle_per_host(256).tcp_nodelay(true).build()?;
    let stats = Arc::new(Stats::new());
    let stop = Arc::new(AtomicBool::new(false));

    let idle = sample(pid, &sampler, &stats, Instant::now()).await;
    println!("{HEADER}");
    println!("{}", row("before (idle)", &idle, None));

    // The people deciding.
    let (decide, decisions) = mpsc::channel::<Decision>(1024);
    let decisions = Arc::new(Mutex::new(decisions));
    let mut persons = Vec::new();
    for _ in 0..PERSONS {
        let person = Person::sign_in(&load, base, user, password).await?;
        let (decisions, stats) = (decisions.clone(), stats.clone());
        persons.push(tokio::spawn(async move {
            loop {
                let Some(d) = decisions.lock().await.recv().await else { break };
                let started = Instant::now();
                match person.decide(&d).await {
                    Ok(()) => stats.decision_latency.record(started.elapsed()),
                    Err(e) => stats.error(e.to_string()),
                }
            }
        }));
    }

    let mut sessions = Vec::new();
    for token in &tokens {
        sessions.push(Arc::new(Mcp::open(&load, base, token).await?));
    }
    let start = Instant::now();
    let mut agents = Vec::new();
    for mcp in sessions {
        agents.push(tokio::spawn(agent(mcp, stats.clone(), decide.clone(), stop.clone())));
    }
    drop(decide);

    let first = sample(pid, &sampler, &stats, start).await;
    println!("{}", row("start (load on)", &first, None));
    let mut samples = vec![first];
    let end = start + Duration::from_secs_f64(minutes * 60.0);
    let mut minute = 1;
    while Instant::now() < end {
        let next = (start + Duration::from_secs(60 * minute)).min(end);
        tokio::time::sleep_until(next.into()).await;
        let s = sample(pid, &sampler, &stats, start).await;
        println!("{}", row(&format!("{:.1} min", s.at.as_secs_f64() / 60.0), &s, samples.last()));
        samples.push(s);
        minute += 1;
    }
    let loaded = start.elapsed();
    let under_load = samples.last().map(|s| s.rss_mib).unwrap_or(f64::NAN);

    // Stop: the agents finish their current step (an expiring call's resume
    // ends within its TTL), end their sessions; the people then stop.
    stop.store(true, Ordering::Relaxed);
    for a in agents {
        a.await?;
    }
    for p in persons {
        p.await?;
    }
    drop(load);
    // Settled entries leave the store at once; give the server a moment.
    let mut last = sample(pid, &sampler, &stats, start).await;
    for _ in 0..50 {
        if last.entries == 0.0 && last.sessions == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        last = sample(pid, &sampler, &stats, start).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    last = sample(pid, &sampler, &stats, start).await;
    println!("{}", row("end (load off)", &last, None));

    // The summary for BENCHMARKS.md.
    let secs = loaded.as_secs_f64();
    let kinds = [
        ("allowed (`gatehouse_status`)", &stats.allowed, Some(&stats.allowed_latency)),
        ("gated, approved (call → `resume` result)", &stats.approved, Some(&stats.approved_round_trip)),
        ("gated, declined", &stats.declined, None),
        ("gated, expired (2 s TTL)", &stats.expired, None),
    ];
    let errors = stats.errors.load(Ordering::Relaxed);
    println!(
        "\n{} agents, {:.1} min, {} calls in all ({:.0}/s); unexpected answers: {errors}; `resume` asked again: {}\n",
        tokens.len(),
        secs / 60.0,
        stats.total(),
        stats.total() as f64 / secs,
        stats.resumed_again.load(Ordering::Relaxed)
    );
    println!("| kind | calls | calls/s | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|");
    for (label, kind, histogram) in kinds {
        let n = kind.done.load(Ordering::Relaxed);
        let latency = match histogram {
            Some(h) => {
                let c = h.snapshot();
                let max = c.iter().rposition(|&x| x > 0).map(bucket_ms).unwrap_or(0.0);
                format!("{:.2} | {:.2} | {max:.2}", quantile(&c, 0.5), quantile(&c, 0.99))
            }
            None => "— | — | —".into(),
        };
        println!("| {label} | {n} | {:.1} | {latency} |", n as f64 / secs);
    }
    for (label, h) in
        [("a gated call's pause answer", &stats.pause_latency), ("the person's decision POST", &stats.decision_latency)]
    {
        let c = h.snapshot();
        let max = c.iter().rposition(|&x| x > 0).map(bucket_ms).unwrap_or(0.0);
        println!(
            "| ({label}) | {} | — | {:.2} | {:.2} | {max:.2} |",
            c.iter().sum::<u64>(),
            quantile(&c, 0.5),
            quantile(&c, 0.99)
        );
    }
    let rss_first_minute = samples.get(1).map(|s| s.rss_mib).unwrap_or(f64::NAN);
    let growth = under_load - rss_first_minute;
    let allowed_growth = (rss_first_minute * GROWTH_FRACTION).max(GROWTH_MIN_MIB);
    println!(
        "\nResident memory: {:.1} MiB idle before, {:.1} MiB after the first minute, {:.1} MiB at the last sample under load, {:.1} MiB after (load off). \
         Open fds: {} idle before, {} after. Approval store at the end: {} entries, {} pending; MCP sessions {}.",
        idle.rss_mib,
        rss_first_minute,
        under_load,
        last.rss_mib,
        idle.fds,
        last.fds,
        last.entries,
        last.pending,
        last.sessions
    );
    if samples.len() > 2 {
        println!(
            "Growth from the first minute to the end under load: {growth:+.1} MiB (the run fails above {allowed_growth:.1})."
        );
    }
    let metrics = sampler.metrics().await.unwrap_or_default();
    let decided: Vec<String> = ["accept", "decline", "expire", "cancel"]
        .iter()
        .map(|d| {
            let v = metric(&metrics, &format!("gatehouse_approval_decisions_total{{decision=\"{d}\"}}"));
            format!("{d} {}", v.map(|v| v.to_string()).unwrap_or_else(|| "?".into()))
        })
        .collect();
    println!("Server's decision counters: {}.", decided.join(", "));

    let mut failed = Vec::new();
    if errors > 0 {
        failed.push(format!("{errors} unexpected answers"));
    }
    if samples.len() > 2 && (growth.is_nan() || growth > allowed_growth) {
        failed.push(format!(
            "resident memory grew {growth:.1} MiB from the first minute to the end under load (more than {allowed_growth:.1})"
        ));
    }
    if last.entries != 0.0 {
        failed.push(format!("{} entries left in the approval store", last.entries));
    }
    if failed.is_empty() {
        println!("\nPASS");
        Ok(())
    } else {
        for e in stats.kept.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            println!("  unexpected: {e}");
        }
        println!("\nFAIL: {}", failed.join("; "));
        std::process::exit(1);
    }
}
