//! The history: the audit log as people read it (JSON pages, exports, the
//! page and each execution's timeline), scoped to the reader.

use gatehouse_core::audit::Entry;
use serde_json::{Value, json};

use crate::helpers::*;

/// Writes an audit entry as the gate would.
fn record(app: &TestApp, eid: &str, state: &str, tool: &str, agent: &str, owner: Option<&str>, actor: &str) {
    app.core.approvals.audit().record(Entry {
        execution_id: eid,
        state: gatehouse_core::approvals::State::parse(state).expect("a state"),
        tool,
        upstream: (tool != "gatehouse_policy_set").then_some("fs"),
        arguments_digest: "digest",
        agent,
        owner,
        // As the credential minted for the owner carries it.
        owner_id: owner.and_then(|name| {
            let mut conn = app.core.db.conn().unwrap();
            conn.query_opt("SELECT id FROM users WHERE username = ?1", gatehouse_core::args![name], |r| r.get::<i64>(0))
                .unwrap()
                .map(Into::into)
        }),
        credential_id: Some("cred"),
        thread: None,
        actor: Some(actor),
        detail: None,
        arguments: None,
    });
}

#[tokio::test]
async fn history_is_scoped_filtered_and_paged_newest_first() {
    let app = spawn_app().await;
    app.add_user("root", true).await;
    app.add_user("ada", false).await;
    let (root, ada) = (app.sign_in("root").await, app.sign_in("ada").await);
    for i in 0..60 {
        record(&app, &format!("exec_a{i:02}"), "pending", "fs_write", "ada-bot", Some("ada"), "agent");
    }
    record(&app, "exec_b", "declined", "gatehouse_policy_set", "bob-bot", Some("bob"), "user:root");

    assert_eq!(app.client.get(format!("{}/api/history", app.address)).send().await.unwrap().status(), 401);

    // A plain user reads their own agents' calls only, fifty a page.
    let page: Value = app.get_as(&ada, "/api/history").await.json().await.unwrap();
    let calls = page["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 50);
    assert_eq!(calls[0]["latest"]["executionId"], "exec_a59", "newest first");
    assert!(calls.iter().all(|c| c["latest"]["owner"] == "ada"));
    let next = page["nextBefore"].as_i64().expect("an older page");
    let older: Value = app.get_as(&ada, &format!("/api/history?before={next}")).await.json().await.unwrap();
    assert_eq!(older["calls"].as_array().unwrap().len(), 10);
    assert_eq!(older["calls"][9]["latest"]["executionId"], "exec_a00");
    assert!(older["nextBefore"].is_null(), "the last page says so");
    let theirs: Value = app.get_as(&ada, "/api/history?agent=bob-bot").await.json().await.unwrap();
    assert_eq!(theirs["calls"], json!([]), "another user's agent is not in a user's history");

    // An admin reads everyone's, and every filter narrows.
    let declined: Value = app.get_as(&root, "/api/history?outcome=declined&decider=root").await.json().await.unwrap();
    assert_eq!(declined["calls"].as_array().unwrap().len(), 1);
    assert_eq!(declined["calls"][0]["latest"]["agent"], "bob-bot");
    assert_eq!(declined["calls"][0]["latest"]["state"], "declined");
    let own_tools: Value = app.get_as(&root, "/api/history?upstream=gatehouse").await.json().await.unwrap();
    assert_eq!(own_tools["calls"].as_array().unwrap().len(), 1, "built-in tools have no upstream");

    // A paused call is one row, its steps folded in, at its latest step.
    record(&app, "exec_a03", "approved", "fs_write", "ada-bot", Some("ada"), "user:ada");
    record(&app, "exec_a03", "completed", "fs_write", "ada-bot", Some("ada"), "agent");
    let page: Value = app.get_as(&ada, "/api/history").await.json().await.unwrap();
    let calls = page["calls"].as_array().unwrap();
    assert_eq!(calls[0]["latest"]["executionId"], "exec_a03", "moved up by its latest step");
    let steps: Vec<&str> = calls[0]["steps"].as_array().unwrap().iter().map(|s| s["state"].as_str().unwrap()).collect();
    assert_eq!(steps, ["pending", "approved", "completed"]);
    assert_eq!(calls.iter().filter(|c| c["latest"]["executionId"] == "exec_a03").count(), 1, "once");

    // A filter that means nothing is a JSON 400, not an empty page.
    for bad in ["outcome=maybe", "before=soon", "from=yesterday"] {
        let r = app.get_as(&root, &format!("/api/history?{bad}")).await;
        assert_eq!(r.status(), 400, "{bad}");
        assert_eq!(r.json::<Value>().await.unwrap()["error"], "bad_request", "{bad}");
    }
}

#[tokio::test]
async fn exports_hold_the_whole_filtered_view_and_defuse_spreadsheet_formulas() {
    let app = spawn_app().await;
    app.add_user("ada", false).await;
    let ada = app.sign_in("ada").await;
    for i in 0..1_234 {
        record(&app, &format!("exec_{i}"), "completed", "fs_read", "ada-bot", Some("ada"), "agent");
    }
    record(&app, "exec_evil", "declined", "=HYPERLINK(\"http://evil\")", "ada-bot", Some("ada"), "user:ada");
    record(&app, "exec_other", "declined", "fs_read", "bob-bot", Some("bob"), "user:bob");

    let r = app.get_as(&ada, "/api/history/export.jsonl?tool=fs_read").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/jsonl; charset=utf-8");
    assert!(r.headers()["content-disposition"].to_str().unwrap().contains("gatehouse-history.jsonl"));
    let body = r.text().await.unwrap();
    let lines: Vec<Value> = body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1_234, "every page of the filtered view, not just the first");
    assert!(lines.iter().all(|l| l["owner"] == "ada" && l["tool"] == "fs_read"));

    let csv = app.get_as(&ada, "/api/history/export.csv?outcome=declined").await;
    assert_eq!(csv.headers()["content-type"], "text/csv; charset=utf-8");
    let csv = csv.text().await.unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert!(rows[0].starts_with("id,at,execution_id,state,tool,upstream,agent"), "{}", rows[0]);
    assert_eq!(rows.len(), 2, "the header and ada's one declined call: {csv}");
    assert!(rows[1].contains(r#""'=HYPERLINK(""http://evil"")""#), "a formula is written as text: {}", rows[1]);

    let r = app.get_as(&ada, "/api/history/export.csv?outcome=maybe").await;
    assert_eq!(r.status(), 400, "a bad filter fails before the download starts");
}

#[tokio::test]
async fn the_history_page_and_an_executions_timeline_render_on_the_server() {
    let app = spawn_app().await;
    app.add_user("ada", false).await;
    app.add_user("bob", false).await;
    let (ada, bob) = (app.sign_in("ada").await, app.sign_in("bob").await);
    let token = app.issue_owned("ada-bot", "ada");
    let sid = app.open_session(&token).await;
    let paused =
        app.tool_call(&token, &sid, "gatehouse_policy_set", json!({"pattern": "x_*", "action": "allow"})).await;
    let eid = execution_id(&paused);
    assert_eq!(app.decide(&ada, &eid, "decline").await.status(), 403, "an admin-only call");
    app.add_user("root", true).await;
    let root = app.sign_in("root").await;
    assert_eq!(app.decide(&root, &eid, "decline").await.status(), 200);

    let page = app.get_as(&ada, "/history?outcome=declined").await.text().await.unwrap();
    assert!(page.contains(&format!(r#"data-execution-id="{eid}""#)), "the declined call is listed");
    assert!(page.contains(&format!(r#"href="/resume/{eid}""#)), "and links to its page");
    assert!(page.contains(r#"<option value="declined" selected"#), "the form shows the filter");
    assert!(page.contains("/api/history/export.csv?outcome=declined"), "exports keep the filter");
    // One row per call: its latest state, who decided, its steps folded in.
    let all = app.get_as(&root, "/history").await.text().await.unwrap();
    assert_eq!(all.matches(&format!(r#"<tr data-execution-id="{eid}""#)).count(), 1, "one row for the call");
    let row = &all[all.find(&format!(r#"<tr data-execution-id="{eid}""#)).unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains(r#"data-state="declined""#), "{row}");
    assert!(row.contains("2 steps"), "the steps are folded into the row: {row}");
    let by = &row[row.find(r#"data-label="Decided by""#).unwrap()..];
    assert!(by[..by.find("</td>").unwrap()].contains("root"), "the decider by name, not user:root: {row}");
    assert!(!row.contains("user:root"), "{row}");
    // The filters suggest only the agents the viewer may see.
    let app_ref = &app;
    let pickers = |cookie: String| async move {
        app_ref.post_fn(&cookie, "history_pickers", &[]).await.json::<serde_json::Value>().await.unwrap()
    };
    assert!(pickers(ada.clone()).await["agents"].as_array().unwrap().contains(&json!("ada-bot")));
    assert!(
        !pickers(bob.clone()).await["agents"].as_array().unwrap().contains(&json!("ada-bot")),
        "not another user's"
    );
    let other = app.get_as(&bob, "/history").await.text().await.unwrap();
    assert!(!other.contains(eid.as_str()), "another user's history does not list it");
    assert!(other.contains("No call yet"), "an empty history says what will appear");

    let timeline = app.get_as(&ada, &format!("/resume/{eid}")).await.text().await.unwrap();
    let section = &timeline[timeline.find(r#"aria-label="Timeline""#).expect("a timeline")..];
    let pending = section.find(r#"data-state="pending""#).expect("pending step");
    let declined = section.find(r#"data-state="declined""#).expect("declined step");
    assert!(pending < declined, "oldest first");
    assert!(section[declined..].contains("root"), "the decline names who made it");
    let r = app
        .client
        .post(format!("{}/api/fn/timeline", app.address))
        .header("cookie", &bob)
        .header("origin", &app.address)
        .form(&[("id", eid.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "another user cannot read its timeline");
}
