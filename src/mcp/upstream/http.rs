//! The Streamable HTTP transport: rmcp's client over a reqwest client of
//! Gatehouse's making, with the bounds that keep a misbehaving upstream from
//! exhausting the gateway: a largest response, a connect timeout, no
//! redirects, and only the configured headers. It knows nothing of the relay
//! or the connection built on it (`link.rs`).

use std::collections::HashMap;

use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};

use crate::config::UpstreamConfig;

/// Why an HTTP upstream's transport could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpSetupError {
    /// A configured header is not a valid HTTP header.
    #[error("header {0:?} is not a valid HTTP header")]
    Header(String),
    /// The `ca_file` could not be used.
    #[error("ca_file {path}: {message}")]
    CaFile {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The HTTP client could not be built.
    #[error("HTTP client: {0}")]
    Client(String),
}

/// The transport to the upstream at `url`, with `config`'s headers and bounds.
pub(super) fn transport(
    config: &UpstreamConfig,
    url: &str,
) -> Result<StreamableHttpClientTransport<upstream_http::Client>, HttpSetupError> {
    // Only the configured headers go upstream; a client's token never does.
    let mut headers = HashMap::new();
    for (name, value) in &config.headers {
        let bad = || HttpSetupError::Header(name.clone());
        headers.insert(
            ::http::HeaderName::try_from(name.as_str()).map_err(|_| bad())?,
            ::http::HeaderValue::try_from(value.as_str()).map_err(|_| bad())?,
        );
    }
    let client = http_client(config)?;
    let transport_config = StreamableHttpClientTransportConfig::with_uri(url)
        .custom_headers(headers)
        // The shared connection carries every stateless agent's calls: rmcp's
        // default of 16 requests in flight would queue the rest.
        .max_concurrent_requests(256)
        .max_json_response_size(config.max_response_bytes)
        .max_sse_event_size(config.max_response_bytes)
        // An upstream that forgot the session (404) gets a new one.
        .reinit_on_expired_session(true);
    Ok(StreamableHttpClientTransport::with_client(client, transport_config))
}

/// The HTTP client for an upstream: rustls (ring), the system's roots plus
/// the upstream's `ca_file`; redirects are not followed (one would carry the
/// configured headers and the session to wherever the upstream points), and
/// the TCP/TLS connect is bounded by `connect_timeout`.
fn http_client(config: &UpstreamConfig) -> Result<upstream_http::Client, HttpSetupError> {
    crate::tls::install_crypto_provider();
    let mut builder = upstream_http::Client::builder()
        .redirect(upstream_http::redirect::Policy::none())
        .connect_timeout(config.connect_timeout);
    if let Some(path) = &config.ca_file {
        let ca_error = |message: String| HttpSetupError::CaFile { path: path.display().to_string(), message };
        let pem = std::fs::read(path).map_err(|e| ca_error(e.to_string()))?;
        let certs = upstream_http::Certificate::from_pem_bundle(&pem).map_err(|e| ca_error(e.to_string()))?;
        builder = builder.tls_certs_merge(certs);
    }
    builder.build().map_err(|e| HttpSetupError::Client(super::errors::error_chain(&e)))
}

/// The limit an HTTP response exceeded, if that is what `e` comes from.
pub(super) fn response_too_large(e: &(dyn std::error::Error + 'static)) -> Option<usize> {
    let mut next = Some(e);
    while let Some(error) = next {
        if let Some(StreamableHttpError::ResponseBodyTooLarge { max_size }) =
            error.downcast_ref::<StreamableHttpError<upstream_http::Error>>()
        {
            return Some(*max_size);
        }
        next = error.source();
    }
    None
}
