//! Relays under load (issue #15): several agents at once, each through its
//! own MCP session, make tool calls whose upstream asks back (sampling, form
//! elicitation, roots) or reports while it works (progress, log messages).
//! Every relayed request must be answered, by the agent whose call caused it
//! (each agent's answers name it, and the upstream's results carry them back),
//! and no call may hang. Not a benchmark: the only time bound is a generous
//! per-call "never hangs".

#![allow(deprecated)] // sampling, roots and logging are 2025-11-25 features

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolResult, ClientCapabilities, ClientConfig, ClientRequest, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
    FormElicitationCapability, Implementation, ListRootsResult, LoggingMessageNotificationParam, NumberOrString,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, Root, RootsCapabilities, SamplingCapability,
    SamplingMessage, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Value, json};

use crate::helpers::*;

/// Agents at once, each with its own session.
const AGENTS: usize = 8;
/// Rounds per agent; each relays three requests (sampling, elicitation,
/// roots) and runs a progress and a logging call, all five at once.
const ROUNDS: usize = 45;
/// A call slower than this fails the test: it would otherwise have hung.
const NEVER_HANGS: Duration = Duration::from_secs(10);

/// An agent's client: answers sampling, form elicitation and roots with
/// answers that name it (and echo what it was asked), and records the
/// progress updates and log messages it hears.
#[derive(Clone)]
struct Agent {
    name: String,
    /// Whether it declares sampling.
    sampling: bool,
    /// Requests it was asked (sampling, elicitation, roots).
    asked: Arc<AtomicUsize>,
    /// Progress updates heard, per progress token.
    progress: Arc<Mutex<HashMap<ProgressToken, usize>>>,
    /// Log messages heard.
    logs: Arc<Mutex<Vec<String>>>,
}

impl Agent {
    fn new(name: &str) -> Self {
        Agent {
            name: name.to_string(),
            sampling: true,
            asked: Arc::default(),
            progress: Arc::default(),
            logs: Arc::default(),
        }
    }

    fn progress_heard(&self, token: &ProgressToken) -> usize {
        self.progress.lock().unwrap().get(token).copied().unwrap_or(0)
    }
}

impl ClientHandler for Agent {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.roots = Some(RootsCapabilities::default());
        let mut elicitation = ElicitationCapability::default();
        elicitation.form = Some(FormElicitationCapability::default());
        caps.elicitation = Some(elicitation);
        if self.sampling {
            caps.sampling = Some(SamplingCapability::default());
        }
        ClientConfig::new(caps, Implementation::new("relay-stress-agent", "1.0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, rmcp::ErrorData> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        let messages = serde_json::to_value(&params.messages).unwrap_or_default();
        let prompt = messages[0]["content"]["text"].as_str().unwrap_or_default().to_string();
        let reply = SamplingMessage::assistant_text(format!("{} answers {prompt}", self.name));
        Ok(CreateMessageResult::new(reply, "stress-model".into()))
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        let message = match params {
            ElicitRequestParams::FormElicitationParams { message, .. } => message,
            _ => return Ok(ElicitResult::new(ElicitationAction::Decline)),
        };
        let content = json!({"username": self.name, "email": format!("{message}@agents.test")});
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(content))
    }

    async fn list_roots(&self, _ctx: RequestContext<RoleClient>) -> Result<ListRootsResult, rmcp::ErrorData> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        Ok(ListRootsResult::new(vec![Root::new(format!("file:///agent/{}", self.name))]))
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _ctx: NotificationContext<RoleClient>) {
        *self.progress.lock().unwrap().entry(params.progress_token).or_default() += 1;
    }

    async fn on_logging_message(&self, params: LoggingMessageNotificationParam, _ctx: NotificationContext<RoleClient>) {
        self.logs.lock().unwrap().push(params.data.as_str().unwrap_or_default().to_string());
    }
}

type Session = RunningService<RoleClient, Agent>;

async fn connect(app: &TestApp, agent: &Agent) -> Session {
    app.connect(agent.clone(), &app.issue(&agent.name, None)).await
}

/// One call's outcome: its result (or why there is none), how long it
/// took, and the progress token rmcp gave it.
struct Outcome {
    result: Result<CallToolResult, String>,
    took: Duration,
    progress: ProgressToken,
}

impl Outcome {
    /// The result's text, or why there is none.
    fn text(&self) -> Result<String, String> {
        let result = self.result.as_ref().map_err(Clone::clone)?;
        let text = result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default();
        match result.is_error {
            Some(true) => Err(format!("error result: {text}")),
            _ => Ok(text),
        }
    }
}

/// Calls `name` with `args`, failing (not waiting) after [`NEVER_HANGS`].
async fn timed_call(service: &Session, name: &str, args: Value) -> Outcome {
    let start = Instant::now();
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(tool_params(name, args)));
    let handle = match service.peer().send_request_with_option(request, PeerRequestOptions::no_options()).await {
        Ok(handle) => handle,
        Err(e) => {
            return Outcome {
                result: Err(format!("not sent: {e}")),
                took: start.elapsed(),
                progress: ProgressToken(NumberOrString::Number(-1)),
            };
        }
    };
    let progress = handle.progress_token.clone();
    let result = match tokio::time::timeout(NEVER_HANGS, handle.await_response()).await {
        Err(_) => Err(format!("no answer within {NEVER_HANGS:?}")),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(ServerResult::CallToolResult(result))) => Ok(result),
        Ok(Ok(other)) => Err(format!("not a tool result: {other:?}")),
    };
    Outcome { result, took: start.elapsed(), progress }
}

/// What one agent's run produced.
#[derive(Default)]
struct Report {
    /// Relayed requests answered and carried back in the upstream's result.
    round_trips: usize,
    slowest: Duration,
    failures: Vec<String>,
    /// Progress tokens of the progress calls (each must hear three updates).
    progress_calls: Vec<ProgressToken>,
}

impl Report {
    fn check(&mut self, what: &str, outcome: &Outcome, expected: &[String]) {
        self.slowest = self.slowest.max(outcome.took);
        match outcome.text() {
            Ok(text) if expected.iter().all(|e| text.contains(e.as_str())) => {}
            Ok(text) => self.failures.push(format!("{what}: expected {expected:?} in {text:?}")),
            Err(e) => self.failures.push(format!("{what}: {e}")),
        }
    }
}

/// One agent's rounds: the five calls of a round at once.
async fn run_agent(agent: Agent, service: Session) -> (Agent, Session, Report) {
    let mut report = Report::default();
    let name = &agent.name;
    for round in 0..ROUNDS {
        let tag = format!("{name}/{round}");
        let (sampled, elicited, roots, progress, logged) = tokio::join!(
            timed_call(&service, "ev__test_sampling", json!({"prompt": tag})),
            timed_call(&service, "ev__test_elicitation", json!({"message": tag})),
            timed_call(&service, "ev__probe_roots", Value::Null),
            timed_call(&service, "ev__test_tool_with_progress", Value::Null),
            timed_call(&service, "ev__test_tool_with_logging", Value::Null),
        );
        report.check(&format!("{tag} sampling"), &sampled, &[format!("LLM response: {name} answers {tag}")]);
        report.check(
            &format!("{tag} elicitation"),
            &elicited,
            &["action=accept".into(), format!("\"username\":\"{name}\""), format!("\"email\":\"{tag}@agents.test\"")],
        );
        report.check(&format!("{tag} roots"), &roots, &[format!("\"file:///agent/{name}\"")]);
        report.check(&format!("{tag} progress"), &progress, &["Tool with progress executed successfully".into()]);
        report.check(&format!("{tag} logging"), &logged, &["Tool with logging executed successfully".into()]);
        report.round_trips += [&sampled, &elicited, &roots].iter().filter(|o| o.text().is_ok()).count();
        report.progress_calls.push(progress.progress);
    }
    (agent, service, report)
}

/// Polls (up to [`NEVER_HANGS`]) until `done`; whether it came true.
async fn eventually(done: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < NEVER_HANGS {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_agents_relaying_at_once_each_get_every_request_of_their_own_and_no_other() {
    let fixture = Fixture::start(0).await;
    let app = spawn_app_fronting(everything(&fixture.url), allow_test_tools).await;
    let started = Instant::now();
    let mut runs = Vec::new();
    for i in 0..AGENTS {
        let agent = Agent::new(&format!("agent{i}"));
        let service = connect(&app, &agent).await;
        runs.push(tokio::spawn(run_agent(agent, service)));
    }
    let mut failures = Vec::new();
    let (mut round_trips, mut slowest) = (0, Duration::ZERO);
    let mut finished = Vec::new();
    for run in runs {
        let (agent, service, report) = run.await.expect("the agent's run did not panic");
        round_trips += report.round_trips;
        slowest = slowest.max(report.slowest);
        failures.extend(report.failures);
        // Progress and log messages arrive before each call's result, but the
        // client handles notifications in tasks of their own: allow a moment.
        let tokens = report.progress_calls;
        if !eventually(|| tokens.iter().all(|t| agent.progress_heard(t) >= 3)).await {
            let short: Vec<_> = tokens.iter().filter(|t| agent.progress_heard(t) != 3).collect();
            failures.push(format!("{}: {} progress calls heard fewer than 3 updates", agent.name, short.len()));
        }
        if tokens.iter().any(|t| agent.progress_heard(t) > 3) {
            failures.push(format!("{}: a progress call heard more than 3 updates", agent.name));
        }
        let expected_logs = 3 * ROUNDS;
        eventually(|| agent.logs.lock().unwrap().len() >= expected_logs).await;
        let logs = agent.logs.lock().unwrap().clone();
        if logs.len() != expected_logs || !logs.iter().all(|l| l.starts_with("Tool ")) {
            failures.push(format!("{}: heard {} log messages, expected {expected_logs}", agent.name, logs.len()));
        }
        // Asked exactly what its own calls caused, nothing of another's.
        let asked = agent.asked.load(Ordering::Relaxed);
        if asked != 3 * ROUNDS {
            failures.push(format!("{}: asked {asked} times, expected {}", agent.name, 3 * ROUNDS));
        }
        finished.push(service);
    }
    let wall = started.elapsed();
    eprintln!(
        "relay stress (HTTP upstream): {AGENTS} agents x {ROUNDS} rounds, {round_trips} relayed round trips \
         answered by the right agent, {} calls, wall {wall:.1?}, slowest call {slowest:.0?}",
        AGENTS * ROUNDS * 5
    );
    assert!(failures.is_empty(), "{} failures, the first: {:#?}", failures.len(), &failures[..failures.len().min(10)]);
    assert_eq!(round_trips, AGENTS * ROUNDS * 3);
    assert!(round_trips >= 1000);
}

/// A shared stdio upstream cannot say whose call a request is about when
/// several agents have calls in flight: such requests are refused at once
/// (the agent's call ends with the error), never sent to another agent and
/// never left waiting; an agent alone with its call is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_sharing_a_stdio_upstream_are_asked_only_about_their_own_calls_or_refused_at_once() {
    const STDIO_ROUNDS: usize = 10;
    let app = spawn_app_fronting(everything_stdio(), allow_test_tools).await;
    let mut agents = Vec::new();
    for i in 0..AGENTS {
        let agent = Agent::new(&format!("agent{i}"));
        let service = connect(&app, &agent).await;
        agents.push((agent, service));
    }
    let agents = Arc::new(agents);
    let mut failures = Vec::new();
    let (mut answered, mut refused, mut slowest) = (0, 0, Duration::ZERO);
    for round in 0..STDIO_ROUNDS {
        // Every agent at once: two relaying calls each.
        let mut calls = Vec::new();
        for index in 0..AGENTS {
            let agents = agents.clone();
            calls.push(tokio::spawn(async move {
                let (agent, service) = &agents[index];
                let tag = format!("{}/{round}", agent.name);
                let (roots, sampled) = tokio::join!(
                    timed_call(service, "ev__probe_roots", Value::Null),
                    timed_call(service, "ev__test_sampling", json!({"prompt": tag})),
                );
                let own = [
                    format!("\"file:///agent/{}\"", agent.name),
                    format!("LLM response: {} answers {tag}", agent.name),
                ];
                [(roots, own[0].clone()), (sampled, own[1].clone())]
            }));
        }
        for call in calls {
            for (outcome, own) in call.await.expect("no panic") {
                slowest = slowest.max(outcome.took);
                match outcome.text() {
                    Ok(text) if text.contains(&own) => answered += 1,
                    Ok(text) => failures.push(format!("expected {own:?} in {text:?}")),
                    Err(e) if e.contains("no single agent") => refused += 1,
                    Err(e) => failures.push(e),
                }
            }
        }
    }
    // Alone, each agent is asked.
    for (agent, service) in agents.iter() {
        let outcome = timed_call(service, "ev__probe_roots", Value::Null).await;
        slowest = slowest.max(outcome.took);
        match outcome.text() {
            Ok(text) if text.contains(&format!("\"file:///agent/{}\"", agent.name)) => answered += 1,
            other => failures.push(format!("{} alone: {other:?}", agent.name)),
        }
    }
    eprintln!(
        "relay stress (shared stdio upstream): {AGENTS} agents, {answered} answered by the right agent, \
         {refused} refused as ambiguous, slowest call {slowest:.0?}"
    );
    assert!(failures.is_empty(), "{} failures, the first: {:#?}", failures.len(), &failures[..failures.len().min(10)]);
    assert!(answered >= AGENTS);
}

/// An agent whose sampling answers wait until the test lets them go.
#[derive(Clone)]
struct Held {
    release: tokio::sync::watch::Receiver<bool>,
}

impl ClientHandler for Held {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.sampling = Some(SamplingCapability::default());
        ClientConfig::new(caps, Implementation::new("held-agent", "1.0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _ctx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, rmcp::ErrorData> {
        let mut release = self.release.clone();
        let _ = release.wait_for(|go| *go).await;
        Ok(CreateMessageResult::new(SamplingMessage::assistant_text("held answers"), "held-model".into()))
    }
}

/// What an agent posts back (its answers to relayed requests) never needs a
/// free slot: with every slot of its credential held by calls that wait for
/// its own answers, it can still give them, and the calls end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_slots_are_all_held_by_relayed_calls_still_answers_them() {
    const SLOTS: usize = 4;
    let app = spawn_app_fronting(everything_stdio(), |c| {
        allow_test_tools(c);
        c.max_requests_per_credential = SLOTS;
    })
    .await;
    app.wait_for_upstream_tool("ev__test_sampling").await;
    let (credential, token) = app.issue_credential("held", None, None);
    let (go, release) = tokio::sync::watch::channel(false);
    let service = app.connect(Held { release }, &token).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Every slot left is taken by a call that waits for the agent's answer.
    let free = SLOTS - app.state.mcp.slots.in_progress(&credential);
    assert!(free >= 1, "the session's own stream leaves room for calls");
    let calls: Vec<_> = (0..free)
        .map(|i| {
            let peer = service.peer().clone();
            tokio::spawn(async move {
                let params = tool_params("ev__test_sampling", json!({"prompt": format!("call {i}")}));
                tokio::time::timeout(NEVER_HANGS, peer.call_tool(params)).await
            })
        })
        .collect();
    wait_until("every slot is held", || app.state.mcp.slots.in_progress(&credential) == SLOTS).await;
    go.send(true).unwrap();
    for call in calls {
        let result = call.await.unwrap().expect("the call ended: its answer got through").expect("a result");
        assert_ne!(result.is_error, Some(true), "{result:?}");
        assert!(format!("{result:?}").contains("held answers"), "{result:?}");
    }
}

/// Issue 40 item 6: an upstream may ask on its session's standalone stream
/// (the conformance reference did before its 2026-07-27 fix), which rmcp's
/// client opens in the background after `initialize`; what the upstream
/// sends there before that GET is answered is never delivered. The fixture
/// asks there and answers each session's first GET 300 ms late: a call forwarded at once
/// lost its question every time and hung until the upstream gave up. Each
/// agent's first call opens its own upstream session, so each is the race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_asked_on_the_standalone_stream_is_not_lost_while_that_stream_opens() {
    let fixture = Fixture::start_with(0, &["--ask-on-standalone", "--hold-get-ms", "300"]).await;
    let app = spawn_app_fronting(everything(&fixture.url), allow_test_tools).await;
    for i in 0..4 {
        let agent = Agent::new(&format!("agent{i}"));
        let service = connect(&app, &agent).await;
        let tag = format!("agent{i}/standalone");
        let outcome = timed_call(&service, "ev__test_sampling", json!({"prompt": tag})).await;
        assert_eq!(outcome.text(), Ok(format!("LLM response: agent{i} answers {tag}")));
        assert_eq!(agent.asked.load(Ordering::Relaxed), 1, "the agent was asked once");
        service.cancel().await.unwrap();
    }
}
