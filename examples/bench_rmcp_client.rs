//! Benchmark probe: how long one `tools/call` takes through rmcp's Streamable
//! HTTP client (the client Gatehouse uses for upstreams), calls made one after
//! another over one session. Run against the rmcp reference server, it isolates
//! the client's share of the upstream hop that `scripts/bench-upstream.sh` measures.
//!
//! `cargo run --release --example bench_rmcp_client -- http://127.0.0.1:PORT/mcp TOOL SECONDS [TOKEN]`

use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args.next().ok_or_else(|| anyhow::anyhow!("usage: URL TOOL SECONDS [TOKEN]"))?;
    let tool = args.next().unwrap_or_else(|| "gatehouse_status".into());
    let seconds: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(5);
    let mut config = StreamableHttpClientTransportConfig::with_uri(url);
    if let Some(token) = args.next() {
        config = config.auth_header(token);
    }
    gatehouse::tls::install_crypto_provider();
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await?;
    let mut samples = Vec::new();
    let end = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < end {
        let started = Instant::now();
        let result = client.call_tool(CallToolRequestParams::new(tool.clone())).await?;
        samples.push(started.elapsed());
        anyhow::ensure!(result.is_error != Some(true), "{tool} failed: {result:?}");
    }
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1000.0;
    println!("RESULT calls={} p50_ms={:.3} p99_ms={:.3}", samples.len(), at(0.5), at(0.99));
    client.cancel().await?;
    Ok(())
}
