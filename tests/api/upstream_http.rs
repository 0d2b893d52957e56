//! Streamable HTTP upstreams that misbehave or leak: a redirect is not
//! followed, an oversized response is refused and the upstream stays
//! usable, and an upstream URL's credentials and query never show in its
//! last error.

use std::sync::Arc;
use std::time::Duration;

use gatehouse::config::UpstreamConfig;
use serde_json::Value;

use crate::helpers::*;
use crate::proxy::{call, connect};

/// A local HTTP server answering with `router`; its base URL.
async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{address}")
}

/// Polls (every 50 ms, up to 30 s) until upstream `name` has a last error.
async fn last_error(app: &TestApp, name: &str) -> String {
    for _ in 0..600 {
        if let Some(error) = app.upstreams.status().into_iter().find(|s| s.name == name).and_then(|s| s.last_error) {
            return error;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("upstream {name} never failed: {:?}", app.upstreams.status());
}

#[tokio::test]
async fn an_http_upstreams_redirect_is_not_followed() {
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let target = serve(axum::Router::new().fallback({
        let hits = hits.clone();
        move || {
            hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { http::StatusCode::INTERNAL_SERVER_ERROR }
        }
    }))
    .await;
    let location = format!("{target}/mcp");
    let moved = serve(axum::Router::new().fallback(move || {
        let location = location.clone();
        async move { (http::StatusCode::TEMPORARY_REDIRECT, [(http::header::LOCATION, location)]) }
    }))
    .await;
    let upstream = UpstreamConfig { url: Some(format!("{moved}/mcp").parse().unwrap()), ..upstream_named("moved") };
    let app = spawn_app_with(move |c| c.upstream = vec![upstream]).await;
    let error = last_error(&app, "moved").await;
    assert!(error.contains("307"), "{error}");
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0, "the redirect's target was never contacted");
}

/// A minimal Streamable HTTP MCP server (JSON responses, no sessions) with
/// two read-only tools: `small` and `huge` (a 2 MiB result).
async fn answer(axum::Json(request): axum::Json<Value>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let id = request["id"].clone();
    let result = match request["method"].as_str().unwrap_or_default() {
        _ if id.is_null() => return http::StatusCode::ACCEPTED.into_response(),
        "initialize" => serde_json::json!({
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "big", "version": "1.0"}
        }),
        "tools/list" => {
            let tool = |name: &str| serde_json::json!({"name": name, "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}});
            serde_json::json!({"tools": [tool("small"), tool("huge")]})
        }
        "tools/call" => {
            let size = if request["params"]["name"] == "huge" { 2 * 1024 * 1024 } else { 5 };
            serde_json::json!({"content": [{"type": "text", "text": "a".repeat(size)}]})
        }
        _ => serde_json::json!({}),
    };
    axum::Json(serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

#[tokio::test]
async fn an_oversized_http_response_is_refused_and_the_upstream_stays_usable() {
    let base = serve(
        axum::Router::new()
            .route("/mcp", axum::routing::post(answer).get(|| async { http::StatusCode::METHOD_NOT_ALLOWED })),
    )
    .await;
    let upstream = UpstreamConfig {
        url: Some(format!("{base}/mcp").parse().unwrap()),
        max_response_bytes: 1024 * 1024,
        // Its two tools call themselves read-only: trusted, they run at once.
        trust_annotations: true,
        ..upstream_named("big")
    };
    let app = spawn_app_with(move |c| c.upstream = vec![upstream]).await;
    app.wait_for_upstream_tool("big__huge").await;
    let (_, service) = connect(&app, &app.issue("alpha", None)).await;
    let refused = service.call_tool(tool_params("big__huge", serde_json::json!({}))).await.expect("an answer");
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let message = refused.content[0].as_text().unwrap().text.clone();
    assert!(message.contains("larger than max_response_bytes (1048576 bytes)"), "{message}");
    assert_eq!(call(&service, "big__small", Value::Null).await, "aaaaa");
}

#[tokio::test]
async fn an_upstream_urls_credentials_and_query_never_show_in_its_last_error() {
    let upstream = UpstreamConfig {
        url: Some("http://user:secret@127.0.0.1:1/mcp?key=secret".parse().unwrap()),
        ..upstream_named("private")
    };
    let app = spawn_app_with(move |c| c.upstream = vec![upstream]).await;
    let error = last_error(&app, "private").await;
    assert!(error.contains("http://127.0.0.1:1/mcp"), "the error still says where: {error}");
    assert!(!error.contains("secret") && !error.contains("user:"), "{error}");
    let live = app.core.live.upstreams().into_iter().find(|u| u.name == "private").unwrap();
    let shown = live.last_error.expect("published");
    assert!(shown.contains("127.0.0.1:1/mcp") && !shown.contains("secret"), "{shown}");
}

/// An upstream that cannot be reached, and one that exits at once, fail in
/// words a person reads: where, and what it said, never Rust type names.
#[tokio::test]
async fn an_upstreams_failure_reads_as_words() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let unreachable = UpstreamConfig {
        url: Some(format!("http://127.0.0.1:{closed}/mcp").parse().unwrap()),
        ..upstream_named("away")
    };
    let crashing = UpstreamConfig {
        command: Some("sh".into()),
        args: vec!["-c".into(), "echo boom-on-stderr >&2; exit 3".into()],
        ..upstream_named("crashing")
    };
    let app = spawn_app_with(move |c| c.upstream = vec![unreachable, crashing]).await;
    let away = last_error(&app, "away").await;
    assert!(
        away.starts_with(&format!("connection refused at http://127.0.0.1:{closed}/mcp"))
            || away.starts_with(&format!("cannot reach http://127.0.0.1:{closed}/mcp")),
        "{away}"
    );
    let crashed = last_error(&app, "crashing").await;
    assert!(crashed.contains("boom-on-stderr"), "its last stderr line: {crashed}");
    for error in [&away, &crashed] {
        assert!(!error.contains("::") && !error.contains("os error"), "no Rust types or errno: {error}");
    }
}
