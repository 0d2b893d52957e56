//! Benchmark ceiling: bare axum answering every POST /mcp with a fixed
//! JSON-RPC result of the same shape as `gatehouse_status`'s. Nothing is parsed.
//!
//! `cargo run --release --example bench_axum_ceiling -- 127.0.0.1:0`

use axum::routing::post;
use axum::serve::ListenerExt;

const REPLY: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"{}"}],"structuredContent":{"version":"0.1.0","agent":"bench","livenessWindowSeconds":86400},"isError":false}}"#;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".into());
    let router = axum::Router::new()
        .route("/mcp", post(|| async { ([("content-type", "application/json"), ("mcp-session-id", "fixed")], REPLY) }));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener.tap_io(|t| {
            let _ = t.set_nodelay(true);
        }),
        router,
    )
    .await?;
    Ok(())
}
