//! What the benchmark examples share: reading MCP replies, signing in as a
//! person, a process's resident memory, percentiles. Included by each
//! example with `mod support;` (cargo does not build this folder on its own).

// Each example uses part of it.
#![allow(dead_code)]

pub mod histogram;

use serde_json::{Value, json};

/// The `Accept` header a Streamable HTTP client sends.
pub const ACCEPT: &str = "application/json, text/event-stream";

/// Errors the examples pass up.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The JSON-RPC messages of a reply (an SSE stream or one JSON body); an
/// HTTP error status is an error.
pub async fn messages(response: reqwest::Response) -> Result<Vec<Value>, BoxError> {
    let status = response.status();
    let text = response.text().await?;
    if !status.is_success() {
        return Err(format!("HTTP {status}: {}", text.chars().take(200).collect::<String>()).into());
    }
    if text.trim_start().starts_with('{') {
        return Ok(vec![serde_json::from_str(&text)?]);
    }
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| d.starts_with('{'))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect())
}

/// POSTs `body` (a JSON-RPC message) on the MCP session `sid` at `url`, as
/// a Streamable HTTP client does.
pub async fn post(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    sid: &str,
    body: &Value,
) -> Result<reqwest::Response, BoxError> {
    Ok(client
        .post(url)
        .bearer_auth(token)
        .header("accept", ACCEPT)
        .header("mcp-session-id", sid)
        .header("mcp-protocol-version", "2025-11-25")
        .json(body)
        .send()
        .await?)
}

/// A browser session's cookie (`name=value`) for `user` at `base`.
pub async fn sign_in(client: &reqwest::Client, base: &str, user: &str, password: &str) -> Result<String, BoxError> {
    let r = client
        .post(format!("{base}/api/auth/sign-in"))
        .header("origin", base)
        .json(&json!({"username": user, "password": password}))
        .send()
        .await?;
    if !r.status().is_success() {
        return Err(format!("sign-in: HTTP {}", r.status()).into());
    }
    let cookie = r.headers().get("set-cookie").ok_or("sign-in set no cookie")?.to_str()?;
    Ok(cookie.split(';').next().unwrap_or_default().to_string())
}

/// Resident memory of process `pid` in MiB (`None`: it is gone).
pub fn rss_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "VmRSS:")
}

/// The anonymous part of a process's resident memory (heap and stacks,
/// without the executable's own pages), in MiB, from `/proc`.
pub fn anon_mib(pid: u32) -> Option<f64> {
    status_mib(pid, "RssAnon:")
}

fn status_mib(pid: u32, field: &str) -> Option<f64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
}

/// The `p` quantile (0–1) of sorted, non-empty samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}
