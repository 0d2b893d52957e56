//! Tasks (SEP-2663): a client that declares `io.modelcontextprotocol/tasks`
//! gets a task for a gated call at once, polls `tasks/get` while a person
//! decides on the approval page, and then finds the real result (or
//! Gatehouse's answer) there, after a restart too; only its own credential
//! sees the task.

use std::time::Duration;

use rmcp::model::{
    CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig, ErrorCode, GetTaskParams, GetTaskResult,
    Implementation, InputResponses, ProtocolVersion, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};

use crate::helpers::*;

const SET_RULE: &str = "gatehouse_policy_set";
const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A 2025-11-25 client that declares tasks (at initialize).
fn tasks_client() -> ClientConfig {
    ClientConfig::new(ClientCapabilities::builder().enable_tasks().build(), Implementation::new("tasks-client", "1.0"))
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
}

/// Ada (admin) signed in, and claude's token (owned by ada): (cookie, token).
async fn setup(app: &TestApp) -> (String, String) {
    app.add_user("ada", true).await;
    (app.sign_in("ada").await, app.issue_owned("claude", "ada"))
}

/// Calls `gatehouse_policy_set` for `pattern`; the task it becomes (its id).
async fn task_for(client: &RunningService<RoleClient, ClientConfig>, pattern: &str) -> String {
    let response =
        client.call_tool_once(tool_params(SET_RULE, json!({"pattern": pattern, "action": "allow"}))).await.unwrap();
    let CallToolResponse::Task(created) = response else { panic!("not a task: {response:?}") };
    assert_eq!(created.task.status, TaskStatus::InputRequired);
    assert!(created.task.poll_interval_ms.is_some_and(|ms| ms > 0));
    assert!(created.task.ttl_ms.is_some_and(|ms| ms > 0));
    assert!(created.task.status_message.as_deref().unwrap_or_default().contains("/resume/exec_"));
    created.task.task_id
}

async fn get(client: &RunningService<RoleClient, ClientConfig>, id: &str) -> GetTaskResult {
    client.get_task(GetTaskParams::new(id)).await.unwrap()
}

/// Polls `id` until it is terminal; every status seen, and the last answer.
async fn poll_to_the_end(
    client: &RunningService<RoleClient, ClientConfig>,
    id: &str,
) -> (Vec<TaskStatus>, GetTaskResult) {
    let mut seen = Vec::new();
    for _ in 0..600 {
        let got = get(client, id).await;
        seen.push(got.task.status());
        if got.task.status().is_terminal() {
            return (seen, got);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} never finished: {seen:?}");
}

fn result_of(got: &GetTaskResult) -> Value {
    match &got.task.payload {
        TaskPayload::Completed { result } => Value::Object(result.clone()),
        other => panic!("not completed: {other:?}"),
    }
}

fn error_code(error: rmcp::service::ServiceError) -> (ErrorCode, String) {
    match error {
        rmcp::service::ServiceError::McpError(e) => (e.code, e.message.to_string()),
        other => panic!("not a JSON-RPC error: {other:?}"),
    }
}

#[tokio::test]
async fn a_gated_call_becomes_a_task_that_shows_the_approval_page_then_runs_once_approved() {
    let app = spawn_app().await;
    let (ada, token) = setup(&app).await;
    let client = app.connect(tasks_client(), &token).await;
    let id = task_for(&client, "task_*").await;

    // Waiting: one URL elicitation to the approval page.
    let waiting = get(&client, &id).await;
    let TaskPayload::InputRequired { input_requests } = &waiting.task.payload else {
        panic!("not waiting: {waiting:?}")
    };
    let request = serde_json::to_value(&input_requests["approval"]).unwrap();
    assert_eq!(
        (request["method"].as_str(), request["params"]["mode"].as_str()),
        (Some("elicitation/create"), Some("url"))
    );
    let url = request["params"]["url"].as_str().unwrap();
    assert!(url.starts_with(&format!("{}/resume/{id}", app.address)), "{url}");
    assert!(app.core.policy.rules().unwrap().is_empty(), "nothing ran yet");
    // The client has nothing to answer for it (a person decides on the page): acknowledged, still waiting.
    let opened = InputResponses::from([("approval".to_string(), json!({"action": "accept"}))]);
    client.update_task(UpdateTaskParams::new(&id, opened)).await.unwrap();
    assert_eq!(get(&client, &id).await.task.status(), TaskStatus::InputRequired);

    assert_eq!(app.decide(&ada, &id, "accept").await.status(), 200);
    let (seen, done) = poll_to_the_end(&client, &id).await;
    assert_eq!(seen.first(), Some(&TaskStatus::Working), "the poll that finds it approved starts it: {seen:?}");
    assert_eq!(done.task.status(), TaskStatus::Completed);
    let result = result_of(&done);
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["pattern"], "task_*");
    assert_eq!(app.core.policy.rules().unwrap()[0].pattern, "task_*", "the approved call ran");
    assert_eq!(app.core.approvals.audit().latest(&id.as_str().into()).unwrap().unwrap().state.as_str(), "completed");

    // Kept for the next poll, and run once only.
    assert_eq!(result_of(&get(&client, &id).await), result);
    assert_eq!(app.core.policy.rules().unwrap().len(), 1);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_declined_task_completes_with_gatehouses_error_answer() {
    let app = spawn_app().await;
    let (ada, token) = setup(&app).await;
    let client = app.connect(tasks_client(), &token).await;
    let id = task_for(&client, "declined_*").await;
    assert_eq!(app.decide(&ada, &id, "decline").await.status(), 200);
    let (_, done) = poll_to_the_end(&client, &id).await;
    assert_eq!(done.task.status(), TaskStatus::Completed);
    let result = result_of(&done);
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["structuredContent"]["error"], "execution_declined", "{result}");
    assert!(app.core.policy.rules().unwrap().is_empty(), "nothing ran");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn another_credentials_task_is_not_found_exactly_like_an_unknown_one() {
    let app = spawn_app().await;
    let (ada, token) = setup(&app).await;
    let client = app.connect(tasks_client(), &token).await;
    let id = task_for(&client, "mine_*").await;
    // Same agent name and owner, another credential.
    let other = app.connect(tasks_client(), &app.issue_owned("claude", "ada")).await;

    let foreign = error_code(other.get_task(GetTaskParams::new(&id)).await.unwrap_err());
    let unknown = error_code(other.get_task(GetTaskParams::new("exec_0000")).await.unwrap_err());
    assert_eq!(foreign.0, ErrorCode::INVALID_PARAMS);
    assert_eq!(foreign, unknown, "a task's existence is not told");
    let cancel = error_code(other.cancel_task(CancelTaskParams::new(&id)).await.unwrap_err());
    assert_eq!(cancel, unknown);
    assert_eq!(
        app.core.approvals.get(&id.as_str().into()).unwrap().1.state.as_str(),
        "pending",
        "the other's cancel did nothing"
    );

    // Still not theirs once it has a result.
    assert_eq!(app.decide(&ada, &id, "accept").await.status(), 200);
    poll_to_the_end(&client, &id).await;
    assert_eq!(error_code(other.get_task(GetTaskParams::new(&id)).await.unwrap_err()), unknown);
    client.cancel().await.unwrap();
    other.cancel().await.unwrap();
}

#[tokio::test]
async fn cancelling_a_task_settles_its_call_as_cancelled() {
    let app = spawn_app().await;
    let (ada, token) = setup(&app).await;
    let client = app.connect(tasks_client(), &token).await;
    let id = task_for(&client, "cancelled_*").await;
    client.cancel_task(CancelTaskParams::new(&id)).await.unwrap();
    let last = app.core.approvals.audit().latest(&id.as_str().into()).unwrap().unwrap();
    assert_eq!(last.state.as_str(), "cancelled");
    assert!(last.detail.unwrap().contains("tasks/cancel"));
    assert_eq!(get(&client, &id).await.task.status(), TaskStatus::Cancelled);
    // Idempotent; and a person can no longer approve it.
    client.cancel_task(CancelTaskParams::new(&id)).await.unwrap();
    assert!(app.decide(&ada, &id, "accept").await.status().is_client_error());
    assert!(app.core.policy.rules().unwrap().is_empty());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_client_without_the_extension_keeps_todays_answer_and_may_not_poll() {
    let app = spawn_app().await;
    let (_, token) = setup(&app).await;
    let plain = ClientConfig::new(ClientCapabilities::default(), Implementation::new("plain", "1.0"))
        .with_protocol_version(ProtocolVersion::V_2025_11_25);
    let client = app.connect(plain, &token).await;
    let response =
        client.call_tool_once(tool_params(SET_RULE, json!({"pattern": "plain", "action": "allow"}))).await.unwrap();
    let CallToolResponse::Complete(result) = response else { panic!("not today's answer: {response:?}") };
    let paused = result.structured_content.unwrap();
    assert_eq!(paused["status"], "user_approval_required");
    let eid = paused["executionId"].as_str().unwrap();
    let refused = error_code(client.get_task(GetTaskParams::new(eid)).await.unwrap_err());
    assert_eq!(refused.0, ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY);
    client.cancel().await.unwrap();
}

/// A `tasks/*` request from a 2026-07-28 client that declares tasks.
async fn modern_task_request(app: &TestApp, token: &str, method: &str, task_id: &str) -> Value {
    app.task_request(token, json!({"extensions": {TASKS: {}}}), method, task_id, json!({})).await
}

/// Polls a 2026-07-28 task until it is terminal; the last answer.
async fn modern_poll_to_the_end(app: &TestApp, token: &str, task_id: &str) -> Value {
    for _ in 0..600 {
        let got = modern_task_request(app, token, "tasks/get", task_id).await;
        if ["completed", "failed", "cancelled"].contains(&got["status"].as_str().unwrap_or_default()) {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {task_id} never finished");
}

#[tokio::test]
async fn a_2026_07_28_task_waits_through_a_restart_and_its_result_survives_another() {
    let app = spawn_app().await;
    let (_, token) = setup(&app).await;
    let capabilities = json!({"extensions": {TASKS: {}}});
    let args = json!({"arguments": {"pattern": "restarted_*", "action": "allow"}});
    let response = app.modern_tool_call(&token, "browser", capabilities, SET_RULE, args).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let created =
        jsonrpc_messages(response).await.into_iter().find(|m| m["id"] == 1).expect("a reply")["result"].clone();
    assert_eq!((created["resultType"].as_str(), created["status"].as_str()), (Some("task"), Some("input_required")));
    for field in ["createdAt", "lastUpdatedAt"] {
        assert!(created[field].as_str().is_some_and(|t| t.contains('T')), "{created}");
    }
    assert!(created["pollIntervalMs"].as_u64().is_some_and(|ms| ms > 0), "{created}");
    for absent in ["result", "inputRequests", "requestState", "task"] {
        assert!(created.get(absent).is_none(), "{absent} in {created}");
    }
    let id = created["taskId"].as_str().unwrap().to_string();

    // The pause is durable: after a restart the task still waits.
    let app = app.restart(Duration::from_secs(5), |_| {}).await;
    let waiting = modern_task_request(&app, &token, "tasks/get", &id).await;
    assert_eq!(
        (waiting["resultType"].as_str(), waiting["status"].as_str()),
        (Some("complete"), Some("input_required"))
    );
    assert_eq!(waiting["inputRequests"]["approval"]["params"]["mode"], "url", "{waiting}");
    assert!(waiting.get("requestState").is_none());

    let ada = app.sign_in("ada").await;
    assert_eq!(app.decide(&ada, &id, "accept").await.status(), 200);
    let done = modern_poll_to_the_end(&app, &token, &id).await;
    assert_eq!((done["status"].as_str(), done["result"]["isError"].as_bool()), (Some("completed"), Some(false)));
    assert_eq!(done["result"]["structuredContent"]["pattern"], "restarted_*", "{done}");
    assert_eq!(done["result"]["resultType"], "complete", "an inlined result is a complete one: {done}");

    // The result is in the database: a poll after another restart finds it.
    let app = app.restart(Duration::from_secs(5), |_| {}).await;
    let again = modern_task_request(&app, &token, "tasks/get", &id).await;
    assert_eq!((again["status"].as_str(), &again["result"]), (Some("completed"), &done["result"]));
    assert_eq!(app.core.policy.rules().unwrap().len(), 1, "it ran once");

    // Cancelling a finished task is acknowledged and changes nothing; unknown ids are not found.
    let ack = modern_task_request(&app, &token, "tasks/cancel", &id).await;
    assert_eq!(ack, json!({"resultType": "complete"}));
    let unknown = modern_task_request(&app, &token, "tasks/get", "exec_nope").await;
    assert_eq!(unknown["code"], -32602, "{unknown}");
}
