//! The gate holds against the agent it guards (issue #9): an attacker holding
//! one ordinary agent token cannot get a call approved without a person,
//! cannot use another credential's session or execution, cannot run something
//! other than what was approved, and cannot exhaust the server. Each test
//! fails if its defence is removed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gatehouse::config::UpstreamConfig;
use rmcp::model::{
    CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    Implementation, ProtocolVersion,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Value, json};

use crate::helpers::*;

// ---------------------------------------------------------------------------
// Helpers

/// An app fronting the "everything" fixture as a shared stdio upstream under
/// `ev__`: its unannotated tools (`ev__test_simple_text`, `ev__probe_mutable`) wait for a
/// person by default, and none of them changes the gate.
async fn fronting(configure: impl FnOnce(&mut gatehouse::config::Config)) -> TestApp {
    spawn_app_fronting(everything_stdio(), configure).await
}

/// A client that declares form elicitation only and approves every form it is shown.
#[derive(Clone, Default)]
struct FormApprover {
    asked: Arc<AtomicUsize>,
}

impl ClientHandler for FormApprover {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.elicitation = Some(serde_json::from_value(json!({"form": {}})).unwrap());
        ClientConfig::new(caps, Implementation::new("form-approver", "1.0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": true})))
    }
}

async fn form_client(app: &TestApp, token: &str) -> (FormApprover, RunningService<RoleClient, FormApprover>) {
    let approver = FormApprover::default();
    let service = app.connect_at("/mcp?elicitation_mode=native", approver.clone(), token).await;
    (approver, service)
}

async fn call_tool(service: &RunningService<RoleClient, FormApprover>, name: &str, args: Value) -> CallToolResult {
    service.call_tool(tool_params(name, args)).await.expect("the call answers")
}

fn structured(result: &CallToolResult) -> Value {
    result.structured_content.clone().unwrap_or(Value::Null)
}

// ---------------------------------------------------------------------------
// 1. Only a person decides.

#[tokio::test]
async fn a_client_form_answer_never_decides_unless_trusted_and_never_as_a_person() {
    // Off by default: the form-only client gets the browser answer.
    let app = fronting(|_| {}).await;
    app.add_user("ada", true).await;
    let token = app.issue_owned("form-agent", "ada");
    let (approver, client) = form_client(&app, &token).await;
    let paused = call_tool(&client, "ev__test_simple_text", json!({})).await;
    assert_eq!(structured(&paused)["status"], "user_approval_required", "{paused:?}");
    assert_eq!(approver.asked.load(Ordering::SeqCst), 0, "no form was shown");
    let eid = structured(&paused)["executionId"].as_str().unwrap().to_string();
    assert_eq!(app.core.approvals.get(&eid.as_str().into()).unwrap().1.state.as_str(), "pending");
    client.cancel().await.unwrap();

    // Trusted: the client's answer decides an ordinary gated call, audited as the agent.
    let app = fronting(|c| c.trust_client_forms = true).await;
    app.add_user("ada", true).await;
    let token = app.issue_owned("form-agent", "ada");
    let (approver, client) = form_client(&app, &token).await;
    let ran = call_tool(&client, "ev__test_simple_text", json!({})).await;
    assert_ne!(ran.is_error, Some(true), "{ran:?}");
    assert!(ran.content[0].as_text().unwrap().text.contains("simple text"), "{ran:?}");
    assert_eq!(approver.asked.load(Ordering::SeqCst), 1);
    let approved = app
        .core
        .approvals
        .audit()
        .search(&Default::default(), &gatehouse_core::audit::HistoryScope::Owner("ada".into()), 10)
        .unwrap();
    let decision = approved.iter().find(|e| e.state.as_str() == "approved").expect("an approval");
    assert_eq!(decision.actor.as_deref(), Some("agent:form-agent via client"), "never recorded as a person");

    // ...but never a call a rule (or the gate itself) reserves for a person.
    let paused = call_tool(&client, "gatehouse_policy_set", json!({"pattern": "*", "action": "allow"})).await;
    assert_eq!(structured(&paused)["status"], "user_approval_required", "{paused:?}");
    assert_eq!(approver.asked.load(Ordering::SeqCst), 1, "no form for a human_only call");
    assert!(app.core.policy.rules().unwrap().is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn model_decisions_need_the_switch_and_never_reach_gate_changing_tools() {
    let app = fronting(|c| c.allow_model_decisions = true).await;
    app.add_user("ada", true).await;
    let token = app.issue_owned("self-decider", "ada");
    let model = |name: &str, args: Value| {
        app.modern_tool_call(&token, "model", json!({}), name, json!({"arguments": args})).send()
    };
    let result = |r: reqwest::Response| async move { jsonrpc_messages(r).await.remove(0)["result"].clone() };

    // An ordinary gated call: the model may decide it (audited as the agent).
    let paused = result(model("ev__test_simple_text", json!({})).await.unwrap()).await;
    let eid = paused["structuredContent"]["executionId"].as_str().unwrap().to_string();
    let done = result(model("resume", json!({"executionId": eid, "action": "accept"})).await.unwrap()).await;
    assert_ne!(done["isError"], true, "{done}");
    assert!(done["content"][0]["text"].as_str().unwrap().contains("simple text"), "{done}");
    assert_eq!(
        app.core.approvals.audit().decided_by(&eid.as_str().into()).unwrap().as_deref(),
        Some("agent:self-decider")
    );

    // A tool that changes the gate for everyone: human_only, whatever the rules say.
    app.core
        .policy
        .set(gatehouse_core::policy::Rule::new(
            "gatehouse_policy_*".parse().unwrap(),
            gatehouse_core::policy::Action::Allow,
        ))
        .unwrap();
    let paused = result(model("gatehouse_policy_set", json!({"pattern": "*", "action": "allow"})).await.unwrap()).await;
    assert_eq!(paused["structuredContent"]["status"], "user_approval_required", "an allow rule does not open it");
    let eid = paused["structuredContent"]["executionId"].as_str().unwrap().to_string();
    let refused = result(model("resume", json!({"executionId": eid, "action": "accept"})).await.unwrap()).await;
    assert_eq!(refused["structuredContent"]["error"], "human_only", "{refused}");
    assert_eq!(app.core.approvals.get(&eid.as_str().into()).unwrap().1.state.as_str(), "pending");
}

#[tokio::test]
async fn only_an_admin_approves_a_gate_changing_call_and_the_owner_is_told_so() {
    let app = spawn_app().await;
    let (ada, bob) = app.ada_and_bob().await;
    let token = app.issue_owned("bobs-agent", "bob");
    let sid = app.open_session(&token).await;
    let paused = app.tool_call(&token, &sid, "gatehouse_policy_set", json!({"pattern": "*", "action": "allow"})).await;
    let eid = execution_id(&paused);

    // Bob owns the agent: he sees the call, marked admin-only, but cannot approve it.
    let detail: Value = app.get_as(&bob, &format!("/api/executions/{eid}")).await.json().await.unwrap();
    assert_eq!(detail["adminOnly"], true, "{detail}");
    let refused = app.decide(&bob, &eid, "accept").await;
    assert_eq!(refused.status(), 403);
    assert_eq!(refused.json::<Value>().await.unwrap()["error"], "admin_required");
    assert_eq!(app.core.approvals.get(&eid).unwrap().1.state.as_str(), "pending");

    assert_eq!(app.decide(&ada, &eid, "accept").await.status(), 200, "an admin may");
    let ran = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(ran["result"]["isError"], false, "{ran}");
}

// ---------------------------------------------------------------------------
// 2. A session and an execution belong to exactly one credential.

#[tokio::test]
async fn a_session_id_is_bound_at_initialize_and_refused_to_any_other_credential() {
    let app = spawn_app().await;
    let owner = app.issue("claude", None);
    let thief = app.issue("claude", None);
    // Initialize only: the id is bound before `notifications/initialized`.
    let response = app.mcp(&owner).json(&initialize_request("2025-11-25")).send().await.unwrap();
    let sid = response.headers()["mcp-session-id"].to_str().unwrap().to_string();
    drop(response);

    let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    let stolen = app.in_session(&thief, &sid).json(&initialized).send().await.unwrap();
    assert_eq!(stolen.status(), 404, "before initialized");
    let get = app
        .client
        .get(format!("{}/mcp", app.address))
        .bearer_auth(&thief)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 404, "GET");
    assert_eq!(app.end_session(&thief, &sid).await.status(), 404, "DELETE");
    let made_up = app
        .in_session(&owner, "not-a-session")
        .json(&json!({"jsonrpc":"2.0","id":2,"method":"ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(made_up.status(), 404, "an unbound id");

    // The owner's session still works after all that.
    let ack = app.in_session(&owner, &sid).json(&initialized).send().await.unwrap();
    assert_eq!(ack.status(), 202);
    let (status, _, pong) = app.call(&owner, &sid, json!({"jsonrpc":"2.0","id":3,"method":"ping"})).await;
    assert_eq!((status.as_u16(), pong[0]["result"].clone()), (200, json!({})));
}

#[tokio::test]
async fn only_the_opening_credential_or_its_thread_successor_resumes() {
    let app = spawn_app().await;
    let (ada, _) = app.ada_and_bob().await;
    let (_, first) = app.issue_credential("claude", Some("ada"), Some("thread-1"));
    let sid = app.open_session(&first).await;
    let paused = app.tool_call(&first, &sid, "gatehouse_policy_set", json!({"pattern": "r*", "action": "allow"})).await;
    let eid = execution_id(&paused);

    // Same agent name and owner, but another credential: someone else.
    let namesake = app.issue_owned("claude", "ada");
    let namesake_sid = app.open_session(&namesake).await;
    let refused = app.tool_call(&namesake, &namesake_sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(refused["result"]["structuredContent"]["error"], "execution_forbidden", "{refused}");

    // Re-issued for the same thread (the orchestrator's next turn): it continues.
    assert_eq!(app.decide(&ada, &eid, "accept").await.status(), 200);
    let (_, successor) = app.issue_credential("claude", Some("ada"), Some("thread-1"));
    let successor_sid = app.open_session(&successor).await;
    let resumed = app.tool_call(&successor, &successor_sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(resumed["result"]["isError"], false, "{resumed}");
    assert_eq!(resumed["result"]["structuredContent"]["pattern"], "r*");

    // Once settled, the namesake cannot even learn how it ended.
    let after = app.tool_call(&namesake, &namesake_sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(after["result"]["structuredContent"]["error"], "execution_not_found", "{after}");
}

#[tokio::test]
async fn owner_less_credentials_never_read_each_others_audit_entries() {
    let app = spawn_app().await;
    let a = app.issue("same-name", None);
    let b = app.issue("same-name", None);
    let sid_a = app.open_session(&a).await;
    app.tool_call(&a, &sid_a, "gatehouse_policy_set", json!({"pattern": "secret_*", "action": "allow"})).await;
    let sid_b = app.open_session(&b).await;
    let seen = app.tool_call(&b, &sid_b, "gatehouse_audit_recent", json!({"limit": 50})).await;
    assert_eq!(seen["result"]["structuredContent"]["calls"], json!([]), "{seen}");
    let own = app.tool_call(&a, &sid_a, "gatehouse_audit_recent", json!({"limit": 50})).await;
    assert_eq!(own["result"]["structuredContent"]["calls"].as_array().unwrap().len(), 1, "{own}");
}

/// `gatehouse_audit_recent` as `token` in session `sid`: every step of
/// every call it lists.
async fn audit_recent(app: &TestApp, token: &str, sid: &str) -> Vec<Value> {
    let seen = app.tool_call(token, sid, "gatehouse_audit_recent", json!({"limit": 50})).await;
    assert_eq!(seen["result"]["isError"], false, "{seen}");
    let calls = seen["result"]["structuredContent"]["calls"].as_array().unwrap();
    calls.iter().flat_map(|c| c["steps"].as_array().unwrap().clone()).collect()
}

#[tokio::test]
async fn an_owned_credential_reads_its_own_agents_entries_not_its_owners_whole_history() {
    let app = spawn_app().await;
    let (ada, _) = app.ada_and_bob().await;
    // Another of ada's agents has a call declined.
    let (other_id, other) = app.issue_credential("ada's other agent", Some("ada"), None);
    let other_sid = app.open_session(&other).await;
    let paused =
        app.tool_call(&other, &other_sid, "gatehouse_policy_set", json!({"pattern": "s_*", "action": "allow"})).await;
    assert_eq!(app.decide(&ada, &execution_id(&paused), "decline").await.status(), 200);
    // This agent (an OAuth client's credential is owned the same way) calls,
    // then is re-issued for its thread.
    let (first_id, first) = app.issue_credential("laptop", Some("ada"), Some("t-1"));
    let sid = app.open_session(&first).await;
    let mine = app.tool_call(&first, &sid, "gatehouse_policy_set", json!({"pattern": "m_*", "action": "allow"})).await;
    let mine = execution_id(&mine);
    let (successor_id, successor) = app.issue_credential("laptop", Some("ada"), Some("t-1"));
    let successor_sid = app.open_session(&successor).await;
    app.tool_call(&successor, &successor_sid, "gatehouse_policy_set", json!({"pattern": "n_*", "action": "allow"}))
        .await;

    let entries = audit_recent(&app, &successor, &successor_sid).await;
    assert!(entries.len() >= 2, "its own call and its thread predecessor's: {entries:?}");
    for entry in &entries {
        assert!(entry["credentialId"] == first_id || entry["credentialId"] == successor_id, "{entry}");
    }
    assert!(entries.iter().any(|e| e["executionId"] == mine.as_str()));
    assert!(entries.iter().any(|e| e["credentialId"] == successor_id));
    // The other agent reads its own decline, and nothing of this one.
    let others = audit_recent(&app, &other, &other_sid).await;
    assert!(!others.is_empty());
    assert!(others.iter().all(|e| e["credentialId"] == other_id.as_str()), "{others:?}");
}

#[tokio::test]
async fn revoking_a_credential_settles_its_pending_calls_and_closes_its_sessions() {
    let app = spawn_app().await;
    app.ada_and_bob().await;
    let (id, token) = app.issue_credential("doomed", Some("ada"), None);
    let sid = app.open_session(&token).await;
    app.wait_for_sessions(|n| n == 1).await;
    let paused = app.tool_call(&token, &sid, "gatehouse_policy_set", json!({"pattern": "d", "action": "allow"})).await;
    let eid = execution_id(&paused);

    let admin = app.sign_in("ada").await;
    let revoked = app
        .same_origin(reqwest::Method::DELETE, &format!("/api/credentials/{id}"))
        .header("cookie", &admin)
        .send()
        .await
        .unwrap();
    assert!(revoked.status().is_success(), "{}", revoked.status());
    wait_until("the execution settles as revoked", || app.core.approvals.get(&eid).is_none()).await;
    assert_eq!(app.core.approvals.audit().latest(&eid).unwrap().unwrap().state.as_str(), "revoked");
    app.wait_for_sessions(|n| n == 0).await;

    // A revocation from another process (the CLI) is noticed too.
    let other = app.issue_owned("doomed-too", "ada");
    let sid = app.open_session(&other).await;
    let paused = app.tool_call(&other, &sid, "gatehouse_policy_set", json!({"pattern": "e", "action": "allow"})).await;
    let eid = execution_id(&paused);
    let cli = app.cli(&["token", "revoke", "--all"]);
    assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));
    wait_until("the CLI's revocation is swept", || app.core.approvals.get(&eid).is_none()).await;
    assert_eq!(app.core.approvals.audit().latest(&eid).unwrap().unwrap().state.as_str(), "revoked");
}

// ---------------------------------------------------------------------------
// 3. What was approved is what runs.

#[tokio::test]
async fn a_tool_whose_definition_changed_after_approval_does_not_run() {
    // Without pinning (which would hold the changed tool back altogether,
    // `pinning::an_approved_call_does_not_run_once_its_tool_is_held_back`):
    // the execution's own digest still refuses the run.
    let app = spawn_app_fronting(UpstreamConfig { pin_tools: false, ..everything_stdio() }, |_| {}).await;
    let (ada, _) = app.ada_and_bob().await;
    let token = app.issue_owned("claude", "ada");
    let sid = app.open_session(&token).await;
    let paused = app.tool_call(&token, &sid, "ev__probe_mutable", json!({})).await;
    let eid = execution_id(&paused);
    let execution = app.core.approvals.get(&eid).unwrap().0;
    assert_eq!(execution.upstream.as_deref(), Some("everything"));
    assert_eq!(execution.upstream_tool.as_deref(), Some("probe_mutable"));
    assert_eq!(app.decide(&ada, &eid, "accept").await.status(), 200);

    // The upstream redefines the tool between the approval and the run.
    let before = app.upstreams.find("ev__probe_mutable").unwrap().tool.description.clone();
    app.tool_call(&token, &sid, "ev__probe_redefine", json!({})).await;
    wait_until("the catalogue refreshes", || {
        app.upstreams.find("ev__probe_mutable").is_some_and(|t| t.tool.description != before)
    })
    .await;
    let refused = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert_eq!(refused["result"]["structuredContent"]["error"], "tool_changed", "{refused}");
    assert_eq!(app.core.approvals.audit().latest(&eid).unwrap().unwrap().state.as_str(), "failed");

    // Asked anew, the new definition runs once approved.
    let paused = app.tool_call(&token, &sid, "ev__probe_mutable", json!({})).await;
    let eid = execution_id(&paused);
    app.decide(&ada, &eid, "accept").await;
    let ran = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    assert_ne!(ran["result"]["isError"], true, "{ran}");
    assert!(ran["result"]["content"][0]["text"].as_str().unwrap().contains("version 2"), "{ran}");
}

#[tokio::test]
async fn an_approval_not_used_within_the_run_window_expires() {
    let app = spawn_app_with(|c| c.run_window = Duration::from_millis(300)).await;
    let (ada, _) = app.ada_and_bob().await;
    let token = app.issue_owned("slow", "ada");
    let sid = app.open_session(&token).await;
    let paused =
        app.tool_call(&token, &sid, "gatehouse_policy_set", json!({"pattern": "late", "action": "allow"})).await;
    let eid = execution_id(&paused);
    assert_eq!(app.decide(&ada, &eid, "accept").await.status(), 200);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let resumed = app.tool_call(&token, &sid, "resume", json!({"executionId": eid})).await;
    assert_eq!(resumed["result"]["structuredContent"]["error"], "execution_expired", "{resumed}");
    assert!(app.core.policy.rules().unwrap().is_empty(), "it never ran");
    assert_eq!(app.core.approvals.len(), 0);
}

// ---------------------------------------------------------------------------
// 4. Every resource is bounded.

#[tokio::test]
async fn live_executions_and_gated_arguments_are_bounded_per_credential() {
    let app = spawn_app_with(|c| {
        c.max_executions_per_credential = 2;
        c.max_gated_arguments_bytes = 1024;
    })
    .await;
    let token = app.issue("greedy", None);
    let sid = app.open_session(&token).await;
    for i in 0..2 {
        let r = app
            .tool_call(&token, &sid, "gatehouse_policy_set", json!({"pattern": format!("p{i}"), "action": "allow"}))
            .await;
        assert_eq!(r["result"]["structuredContent"]["status"], "user_approval_required");
    }
    let third = app.tool_call(&token, &sid, "gatehouse_policy_set", json!({"pattern": "p3", "action": "allow"})).await;
    assert_eq!(third["result"]["isError"], true);
    assert_eq!(third["result"]["structuredContent"]["limit"], "max_executions_per_credential", "{third}");
    assert_eq!(app.core.approvals.len(), 2);

    // Another credential is not affected.
    let other = app.issue("other", None);
    let other_sid = app.open_session(&other).await;
    let big = "x".repeat(2048);
    let r = app.tool_call(&other, &other_sid, "gatehouse_policy_set", json!({"pattern": big, "action": "allow"})).await;
    assert_eq!(r["result"]["structuredContent"]["limit"], "max_gated_arguments_bytes", "{r}");
    let r =
        app.tool_call(&other, &other_sid, "gatehouse_policy_set", json!({"pattern": "ok", "action": "allow"})).await;
    assert_eq!(r["result"]["structuredContent"]["status"], "user_approval_required");
}

#[tokio::test]
async fn sessions_are_bounded_per_credential_and_in_all_and_client_info_is_cut() {
    let app = spawn_app_with(|c| {
        c.max_sessions_per_credential = 2;
        c.max_sessions = 3;
    })
    .await;
    let a = app.issue("a", None);
    let b = app.issue("b", None);
    // Each session in use (its GET stream open): none is taken to make room
    // (`session_caps` shows an idle one is).
    let first = app.open_session(&a).await;
    let second = app.open_session(&a).await;
    let _streams = (app.open_stream(&a, &first).await, app.open_stream(&a, &second).await);
    let refused = app.mcp(&a).json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("max_sessions_per_credential"), "{body}");

    let b_sid = app.open_session(&b).await;
    let _b_stream = app.open_stream(&b, &b_sid).await;
    let refused = app.mcp(&b).json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("(max_sessions)"), "{body}");

    // Ending a session frees its place.
    assert!(app.end_session(&a, &first).await.status().is_success());
    let mut init = initialize_request("2025-11-25");
    init["params"]["clientInfo"]["name"] = json!("n".repeat(10_000));
    let response = app.mcp(&b).json(&init).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let sid = response.headers()["mcp-session-id"].to_str().unwrap().to_string();
    drop(response);
    app.call(&b, &sid, json!({"jsonrpc":"2.0","method":"notifications/initialized"})).await;
    wait_until("the session is listed", || app.core.live.sessions().iter().any(|s| s.session_id == sid)).await;
    let listed = app.core.live.sessions().into_iter().find(|s| s.session_id == sid).unwrap();
    assert_eq!(listed.client_name.chars().count(), 128);
}
