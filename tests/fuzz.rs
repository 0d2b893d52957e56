//! Fuzzing the real router: generated and mutated JSON-RPC messages, headers
//! and bodies sent to `/mcp` (and a few other routes) of a real Gatehouse
//! (fresh database, built-in toolset). Whatever arrives, nothing panics,
//! nothing answers 5xx, and the server still answers `ping` afterwards.
//!
//! `GATEHOUSE_FUZZ_CASES` sets how many requests (default 3,000 in the test
//! suite; BENCHMARKS.md records a run of 1,000,000).

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use gatehouse::router::app;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use serde_json::{Value, json};
use tower::ServiceExt;

// The integration tests' `spawn_app` (only part of it is used here).
#[allow(dead_code, unused_imports)]
#[path = "api/helpers/mod.rs"]
mod helpers;

const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/roots/list_changed",
];

const TOOLS: &[&str] = &[
    "gatehouse_status",
    "gatehouse_policies_list",
    "gatehouse_audit_recent",
    "gatehouse_policy_set",
    "gatehouse_policy_remove",
    "resume",
    "nope",
];

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::String),
        Just(json!("\u{202e}\u{200b}\u{0000}")),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z_]{1,12}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Params shaped like what each method expects, often wrong in some way.
fn params() -> impl Strategy<Value = Value> {
    prop_oneof![
        json_value(),
        (prop::sample::select(TOOLS), json_value()).prop_map(|(name, arguments)| json!({"name": name, "arguments": arguments})),
        (".{0,30}", json_value()).prop_map(|(uri, meta)| json!({"uri": uri, "_meta": meta})),
        (prop::sample::select(&["2025-06-18", "2025-11-25", "2026-07-28", "1999-01-01", ""][..]), json_value())
            .prop_map(|(v, caps)| json!({"protocolVersion": v, "capabilities": caps, "clientInfo": {"name": "fuzz", "version": "0"}})),
        json_value().prop_map(|cursor| json!({"cursor": cursor})),
        (".{0,20}", json_value()).prop_map(|(state, args)| json!({"name": "gatehouse_status", "arguments": args, "requestState": state})),
    ]
}

fn message() -> impl Strategy<Value = Value> {
    let id = prop_oneof![
        Just(None),
        any::<i32>().prop_map(|n| Some(json!(n))),
        ".{0,10}".prop_map(|s| Some(json!(s))),
        Just(Some(Value::Null)),
        json_value().prop_map(Some),
    ];
    let method = prop_oneof![8 => prop::sample::select(METHODS).prop_map(String::from), 2 => ".{0,20}"];
    let version = prop_oneof![8 => Just("2.0"), 1 => Just("1.0"), 1 => Just("")];
    (id, method, prop::option::of(params()), version).prop_map(|(id, method, params, version)| {
        let mut m = json!({"jsonrpc": version, "method": method});
        if let Some(id) = id {
            m["id"] = id;
        }
        if let Some(params) = params {
            m["params"] = params;
        }
        m
    })
}

/// A body: a message, a message with its bytes damaged, or noise.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => message().prop_map(|m| m.to_string().into_bytes()),
        2 => (message(), any::<prop::sample::Index>(), any::<u8>(), 0usize..3).prop_map(|(m, at, byte, how)| {
            let mut bytes = m.to_string().into_bytes();
            let i = at.index(bytes.len().max(1)).min(bytes.len().saturating_sub(1));
            match how {
                0 if !bytes.is_empty() => bytes[i] = byte,
                1 => bytes.truncate(i),
                _ => bytes.insert(i, byte),
            }
            bytes
        }),
        1 => prop::collection::vec(any::<u8>(), 0..200),
        1 => prop::collection::vec(message(), 0..4).prop_map(|ms| Value::Array(ms).to_string().into_bytes()),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    method: Method,
    path: &'static str,
    auth: u8,
    session: u8,
    version: Option<&'static str>,
    content_type: Option<&'static str>,
    accept: Option<&'static str>,
    body: Vec<u8>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![8 => Just(Method::POST), 1 => Just(Method::GET), 1 => Just(Method::DELETE)],
        prop_oneof![
            12 => Just("/mcp"),
            1 => Just("/mcp?elicitation_mode=native"),
            1 => Just("/mcp?elicitation_mode=model"),
            1 => Just("/api/executions/exec_x/resume"),
            1 => Just("/api/credentials"),
        ],
        prop_oneof![17 => Just(0u8), 1 => Just(1), 1 => Just(2), 1 => Just(3)],
        prop_oneof![14 => Just(0u8), 1 => Just(1), 1 => Just(2), 4 => Just(3)],
        prop_oneof![
            17 => Just(Some("2025-11-25")),
            1 => Just(Some("2026-07-28")),
            1 => Just(Some("bogus")),
            1 => Just(None),
        ],
        prop_oneof![
            17 => Just(Some("application/json")),
            1 => Just(Some("text/plain")),
            1 => Just(Some("application/json; charset=utf-8")),
            1 => Just(None),
        ],
        prop_oneof![
            17 => Just(Some("application/json, text/event-stream")),
            1 => Just(Some("text/event-stream")),
            1 => Just(Some("*/*")),
            1 => Just(None),
        ],
        body(),
    )
        .prop_map(|(method, path, auth, session, version, content_type, accept, body)| Case {
            method,
            path,
            auth,
            session,
            version,
            content_type,
            accept,
            body,
        })
}

struct Target {
    router: Router,
    token: String,
    other_token: String,
    session: String,
    runtime: tokio::runtime::Runtime,
    _app: helpers::TestApp,
}

impl Target {
    /// A fresh server (its requests go straight to its router, not over a
    /// socket), two agents' tokens, and the first one's session.
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        // Conditional rules on the tools fuzzed, so every call's arguments
        // go through a condition too (any failure must block, never panic).
        let test_app = runtime.block_on(helpers::spawn_app_with(|c| c.policy_rules = fuzzed_rules()));
        let router = app(test_app.state.clone());
        let token = test_app.issue("fuzz", None);
        let other_token = test_app.issue("other", None);
        let mut target = Self { router, token, other_token, session: String::new(), runtime, _app: test_app };
        let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"fuzz","version":"0"}}});
        let response =
            target.send(Method::POST, "/mcp", Some(&target.token.clone()), None, init.to_string().into_bytes());
        target.session = response.1.expect("initialize gives a session");
        let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"}).to_string().into_bytes();
        let token = target.token.clone();
        let session = target.session.clone();
        target.send(Method::POST, "/mcp", Some(&token), Some(&session), initialized);
        target
    }

    /// Sends one request; returns its status and any session id it issued.
    fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        session: Option<&str>,
        body: Vec<u8>,
    ) -> (StatusCode, Option<String>) {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        self.run(request.body(Body::from(body)).unwrap())
    }

    fn run(&self, request: Request<Body>) -> (StatusCode, Option<String>) {
        let router = self.router.clone();
        let stream = request.method() == Method::GET;
        self.runtime.block_on(async move {
            let response = router.oneshot(request).await.unwrap();
            let status = response.status();
            let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(String::from);
            if stream && status.is_success() {
                // A standalone stream never ends: it opened, that is all.
                return (status, session);
            }
            // Read what the server says (bounded, in case it holds a call).
            let mut body = response.into_body();
            let _ = tokio::time::timeout(Duration::from_millis(200), async {
                while let Some(Ok(_)) = body.frame().await {}
            })
            .await;
            (status, session)
        })
    }

    fn fire(&self, case: &Case) -> StatusCode {
        let mut request = Request::builder().method(case.method.clone()).uri(case.path).header("host", "127.0.0.1");
        match case.auth {
            0 => request = request.header("authorization", format!("Bearer {}", self.token)),
            1 => request = request.header("authorization", format!("Bearer {}", self.other_token)),
            2 => request = request.header("authorization", "Bearer not-a-token"),
            _ => {}
        }
        match case.session {
            // Ending the fuzzing session would only make the rest answer 404.
            0 if case.method == Method::DELETE => request = request.header("mcp-session-id", "made-up"),
            0 => request = request.header("mcp-session-id", self.session.as_str()),
            1 => request = request.header("mcp-session-id", "made-up"),
            2 => request = request.header("mcp-session-id", "\u{7f}bad"),
            _ => {}
        }
        if let Some(v) = case.version {
            request = request.header("mcp-protocol-version", v);
        }
        if let Some(v) = case.content_type {
            request = request.header("content-type", v);
        }
        if let Some(v) = case.accept {
            request = request.header("accept", v);
        }
        let request = match request.body(Body::from(case.body.clone())) {
            Ok(r) => r,
            Err(_) => return StatusCode::BAD_REQUEST,
        };
        self.run(request).0
    }
}

/// Rules whose conditions read the fuzzed arguments every way CEL allows.
fn fuzzed_rules() -> Vec<gatehouse_core::policy::Rule> {
    use gatehouse_core::policy::{Action, Rule};
    let when = |name: &str, pattern: &str, action, when: &str| Rule {
        name: name.into(),
        source: gatehouse_core::policy::Source::Config,
        when: Some(when.into()),
        agents: vec!["fuzz*".into()],
        ..Rule::new(pattern.parse().unwrap(), action)
    };
    vec![
        when("big limits", "gatehouse_audit_*", Action::Block, "has(args.limit) && args.limit > 150"),
        when(
            "strings",
            "*",
            Action::RequireApproval,
            r#"(has(args.x) && args.x.startsWith("a")) || (has(args.y) && args.y.matches("^[0-9]+$"))"#,
        ),
        when("shapes", "resume", Action::Block, "size(args) > 3 && args.exists(k, k.size() > 8)"),
        when("time", "gatehouse_status", Action::Allow, "now.getHours() >= 0 && type(args) == map"),
    ]
}

/// CEL source from tokens a rule author might write, in any order.
fn cel_source() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec![
        "args",
        "args.a",
        "args.b.c",
        ".",
        "&&",
        "||",
        "!",
        "==",
        "!=",
        "<",
        ">",
        "+",
        "-",
        "*",
        "/",
        "%",
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        ":",
        ",",
        "?",
        "1",
        "0",
        "-1",
        "1.5",
        "\"s\"",
        "'t'",
        "true",
        "null",
        "has(args.a)",
        "size(args)",
        "in",
        "args.all(k, k == 'a')",
        "args.exists(k, true)",
        "matches",
        ".startsWith('x')",
        "tool",
        "agent",
        "owner",
        "thread",
        "upstream",
        "annotations",
        "now",
        "int(",
        "string(",
        "type(",
        "9223372036854775807",
        "duration('1h')",
        "timestamp('2026-01-01T00:00:00Z')",
    ]);
    prop::collection::vec(token, 1..14).prop_map(|t| t.join(" "))
}

#[test]
fn no_condition_panics_when_compiled_or_evaluated() {
    use gatehouse_core::policy::condition::{CallView, Condition};
    let cases: u32 = std::env::var("GATEHOUSE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(3_000);
    let mut runner = TestRunner::new(ProptestConfig { cases, ..ProptestConfig::default() });
    runner
        .run(&(cel_source(), json_value()), |(source, arguments)| {
            if let Ok(condition) = Condition::compile(&source) {
                let annotations = json!({"readOnlyHint": true});
                let view = CallView {
                    tool: "t",
                    upstream: None,
                    agent: "a",
                    owner: None,
                    thread: None,
                    arguments: &arguments,
                    annotations: &annotations,
                    now_ms: 0,
                };
                // Ok or Err, never a panic.
                let _ = condition.eval(&view);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn no_input_panics_the_server_answers_5xx_or_stops_it_answering_ping() {
    let cases: u32 = std::env::var("GATEHOUSE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(3_000);
    let target = Target::new();
    let mut runner = TestRunner::new(ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() });
    let statuses = std::cell::RefCell::new(std::collections::BTreeMap::<u16, u64>::new());
    let started = std::time::Instant::now();
    let result = runner.run(&case(), |case| {
        let status = target.fire(&case);
        *statuses.borrow_mut().entry(status.as_u16()).or_default() += 1;
        if status.is_server_error() {
            return Err(TestCaseError::fail(format!("{status} for {case:?}")));
        }
        Ok(())
    });
    eprintln!("fuzz: {cases} requests in {:.1?}, statuses {:?}", started.elapsed(), statuses.borrow());
    result.unwrap();

    // Still serving: the bound session answers ping.
    let ping = json!({"jsonrpc":"2.0","id":99,"method":"ping"}).to_string().into_bytes();
    let (status, _) = target.send(Method::POST, "/mcp", Some(&target.token), Some(&target.session), ping);
    assert_eq!(status, StatusCode::OK, "ping after the fuzzing");
}
