//! An upstream's tasks (SEP-2663) through Gatehouse: a 2026-07-28 agent that
//! declares `io.modelcontextprotocol/tasks` gets the upstream's task under
//! Gatehouse's own sealed id, polls, answers and cancels it through
//! Gatehouse; only its own credential can; an agent without the extension
//! gets a plain result.

use std::time::Duration;

use gatehouse::mcp::upstream::tasks::PREFIX;
use serde_json::{Value, json};

use crate::helpers::*;
use crate::upstream_modern::fronting_modern;

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A client that takes tasks and answers elicitations.
fn tasks_caps() -> Value {
    json!({"elicitation": {"form": {}}, "extensions": {TASKS: {}}})
}

/// Gatehouse fronting the modern fixture, its task tools allowed.
async fn app() -> TestApp {
    fronting_modern(false, |c| {
        for tool in ["greet", "slow_compute", "failing_job", "protocol_error_job", "confirm_delete"] {
            c.policy_rules.push(allow_rule(tool));
        }
    })
    .await
}

/// A sessionless 2026-07-28 `tools/call` of `name` with `params` from a
/// client declaring `caps`; its `result` (or `error`).
async fn call(app: &TestApp, token: &str, caps: Value, name: &str, params: Value) -> Value {
    let response = app.modern_tool_call(token, "browser", caps, name, params).send().await.unwrap();
    let reply = jsonrpc_messages(response).await.into_iter().find(|m| m["id"] == 1).expect("a reply");
    reply.get("result").cloned().unwrap_or_else(|| reply["error"].clone())
}

/// A task created by a call of `name` with `arguments`: its (Gatehouse) id.
async fn created(app: &TestApp, token: &str, name: &str, arguments: Value) -> String {
    let created = call(app, token, tasks_caps(), name, json!({"arguments": arguments})).await;
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap_or_else(|| panic!("no taskId: {created}")).to_string();
    assert!(id.starts_with(PREFIX), "the agent gets Gatehouse's id, not the upstream's: {id}");
    id
}

/// A `tasks/*` request from a client that declares tasks.
async fn task_request(app: &TestApp, token: &str, method: &str, task_id: &str, params: Value) -> Value {
    app.task_request(token, tasks_caps(), method, task_id, params).await
}

async fn get(app: &TestApp, token: &str, task_id: &str) -> Value {
    let got = task_request(app, token, "tasks/get", task_id, json!({})).await;
    assert_eq!(got["taskId"], task_id, "tasks/get names the agent's id: {got}");
    got
}

/// Polls until the task's status is one of `statuses`; the answer.
async fn poll_until(app: &TestApp, token: &str, task_id: &str, statuses: &[&str]) -> Value {
    for _ in 0..400 {
        let got = get(app, token, task_id).await;
        if statuses.contains(&got["status"].as_str().unwrap_or_default()) {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {task_id} never reached {statuses:?}");
}

async fn poll_to_the_end(app: &TestApp, token: &str, task_id: &str) -> Value {
    poll_until(app, token, task_id, &["completed", "failed", "cancelled"]).await
}

fn text(result: &Value) -> String {
    result["content"].as_array().unwrap_or_else(|| panic!("no content: {result}"))[0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn an_upstreams_task_reaches_the_agent_under_gatehouses_id_and_completes_there() {
    let app = app().await;
    let token = app.issue("alpha", None);
    let args = json!({"arguments": {"seconds": 1, "label": "through"}});
    let created = call(&app, &token, tasks_caps(), "slow_compute", args).await;
    assert_eq!((created["resultType"].as_str(), created["status"].as_str()), (Some("task"), Some("working")));
    let id = created["taskId"].as_str().unwrap().to_string();
    assert!(id.starts_with(PREFIX), "{created}");
    assert!(uuid::Uuid::parse_str(&id).is_err(), "not the upstream's own id: {id}");
    // The upstream's timestamps, ttl and poll interval (the fixture's 100 ms).
    for field in ["createdAt", "lastUpdatedAt"] {
        assert!(created[field].as_str().is_some_and(|t| t.contains('T')), "{created}");
    }
    assert_eq!(created["ttlMs"], 300_000, "{created}");
    assert_eq!(created["pollIntervalMs"], 100, "{created}");
    for absent in ["result", "inputRequests", "requestState", "task"] {
        assert!(created.get(absent).is_none(), "{absent} in {created}");
    }

    // Resolvable at once, then completed with the tool's own result.
    let working = get(&app, &token, &id).await;
    assert_eq!((working["resultType"].as_str(), working["status"].as_str()), (Some("complete"), Some("working")));
    let done = poll_to_the_end(&app, &token, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(text(&done["result"]), "slow_compute through finished after 1s");
    assert!(done.get("requestState").is_none());
    // Still there for the next poll.
    assert_eq!(get(&app, &token, &id).await["result"], done["result"]);

    // A tool error completes the task with isError; a protocol error fails it.
    let failing = created_id(&app, &token, "failing_job").await;
    let done = poll_to_the_end(&app, &token, &failing).await;
    assert_eq!((done["status"].as_str(), done["result"]["isError"].as_bool()), (Some("completed"), Some(true)));
    let protocol = created_id(&app, &token, "protocol_error_job").await;
    let done = poll_to_the_end(&app, &token, &protocol).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert!(done["error"]["message"].as_str().unwrap_or_default().contains("as designed"), "{done}");
}

async fn created_id(app: &TestApp, token: &str, name: &str) -> String {
    created(app, token, name, json!({})).await
}

#[tokio::test]
async fn cancelling_an_upstreams_task_cancels_it_at_the_upstream() {
    let app = app().await;
    let token = app.issue("alpha", None);
    let id = created(&app, &token, "slow_compute", json!({"seconds": 30, "label": "cancelled"})).await;
    let ack = task_request(&app, &token, "tasks/cancel", &id, json!({})).await;
    assert_eq!(ack, json!({"resultType": "complete"}));
    let done = poll_to_the_end(&app, &token, &id).await;
    assert_eq!(done["status"], "cancelled", "{done}");
    // Idempotent on a finished task.
    assert_eq!(task_request(&app, &token, "tasks/cancel", &id, json!({})).await, json!({"resultType": "complete"}));
}

#[tokio::test]
async fn an_upstreams_task_asks_the_agent_through_tasks_get_and_takes_its_answer_through_tasks_update() {
    let app = app().await;
    let token = app.issue("alpha", None);
    let id = created(&app, &token, "confirm_delete", json!({"filename": "notes.txt"})).await;
    let waiting = poll_until(&app, &token, &id, &["input_required"]).await;
    let request = &waiting["inputRequests"]["confirm"];
    assert_eq!(request["method"], "elicitation/create", "{waiting}");
    assert!(waiting.get("requestState").is_none());

    let answer = json!({"inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}});
    let ack = task_request(&app, &token, "tasks/update", &id, answer).await;
    assert_eq!(ack, json!({"resultType": "complete"}));
    let done = poll_to_the_end(&app, &token, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(text(&done["result"]), "Deleted notes.txt");
}

#[tokio::test]
async fn an_upstream_task_after_an_input_round_is_still_gatehouses() {
    let app = app().await;
    let token = app.issue("alpha", None);
    // Round 1: the upstream asks (under Gatehouse's requestState); round 2 makes the task.
    let asked = call(&app, &token, tasks_caps(), "test_tool_with_task", json!({"arguments": {}})).await;
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    assert!(asked.get("taskId").is_none());
    let state = asked["requestState"].as_str().unwrap();
    let params = json!({
        "arguments": {}, "requestState": state,
        "inputResponses": {"user_name": {"action": "accept", "content": {"name": "Ada"}}}
    });
    let created = call(&app, &token, tasks_caps(), "test_tool_with_task", params).await;
    assert_eq!(created["resultType"], "task", "{created}");
    let id = created["taskId"].as_str().unwrap();
    assert!(id.starts_with(PREFIX), "{created}");
    let done = poll_to_the_end(&app, &token, id).await;
    assert_eq!(text(&done["result"]), "Hello, Ada! (from a task)");
}

#[tokio::test]
async fn another_credentials_or_a_tampered_task_id_is_not_found_like_an_unknown_one() {
    let app = app().await;
    let (alpha, beta) = (app.issue("alpha", None), app.issue("alpha", None));
    let id = created(&app, &alpha, "confirm_delete", json!({"filename": "secret.txt"})).await;
    poll_until(&app, &alpha, &id, &["input_required"]).await;

    let unknown = task_request(&app, &beta, "tasks/get", "exec_nope", json!({})).await;
    assert_eq!((unknown["code"].as_i64(), unknown["message"].as_str()), (Some(-32602), Some("task not found")));
    // Another credential (the same agent's) can neither see, answer nor cancel it.
    let answer = json!({"inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}});
    for (method, params) in [("tasks/get", json!({})), ("tasks/update", answer), ("tasks/cancel", json!({}))] {
        let refused = task_request(&app, &beta, method, &id, params).await;
        assert_eq!(refused, unknown, "{method}");
    }
    // Nor can an altered id reach anything.
    let mut tampered = id.clone().into_bytes();
    let at = PREFIX.len() + (tampered.len() - PREFIX.len()) / 2;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    assert_eq!(task_request(&app, &alpha, "tasks/get", &tampered, json!({})).await, unknown);
    let forged = format!("{PREFIX}{}", "x".repeat(64));
    assert_eq!(task_request(&app, &alpha, "tasks/cancel", &forged, json!({})).await, unknown);

    // Its owner's task is untouched.
    let still = get(&app, &alpha, &id).await;
    assert_eq!(still["status"], "input_required", "{still}");
    task_request(&app, &alpha, "tasks/cancel", &id, json!({})).await;
}

#[tokio::test]
async fn an_agent_without_the_extension_gets_a_plain_result() {
    let app = app().await;
    let token = app.issue("alpha", None);
    let caps = json!({"elicitation": {"form": {}}});
    let args = json!({"arguments": {"seconds": 0.2, "label": "plain"}});
    let result = call(&app, &token, caps.clone(), "slow_compute", args).await;
    assert_eq!(result["resultType"], "complete", "{result}");
    assert!(result.get("taskId").is_none(), "{result}");
    assert_eq!(text(&result), "slow_compute plain finished after 0.2s");
    // A tool that needs tasks says so (-32021), as the upstream answers.
    let refused = call(&app, &token, caps, "failing_job", json!({"arguments": {}})).await;
    assert_eq!(refused["code"], -32021, "{refused}");
}
