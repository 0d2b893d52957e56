//! The Streamable HTTP transport: rmcp's client over a reqwest client of
//! Gatehouse's making, with the bounds that keep a misbehaving upstream from
//! exhausting the gateway: a largest response, a connect timeout, no
//! redirects, and only the configured headers; and requests held until the
//! session's stream for the upstream's own messages is open ([`Standalone`]).
//! It knows nothing of the relay or the connection built on it (`link.rs`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::Sse;

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

/// The transport to the upstream at `url`, with `config`'s headers and
/// bounds; its requests wait for their session's standalone stream.
pub(super) fn transport(
    config: &UpstreamConfig,
    url: &str,
) -> Result<StreamableHttpClientTransport<Client>, HttpSetupError> {
    // Only the configured headers go upstream; a client's token never does.
    let mut headers = HashMap::new();
    for (name, value) in &config.headers {
        let bad = || HttpSetupError::Header(name.clone());
        headers.insert(
            ::http::HeaderName::try_from(name.as_str()).map_err(|_| bad())?,
            ::http::HeaderValue::try_from(value.as_str()).map_err(|_| bad())?,
        );
    }
    let client =
        Client { inner: http_client(config)?, standalone: Standalone::default(), wait: config.connect_timeout };
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

/// Whether a session's standalone stream (the GET that carries what the
/// upstream sends outside any request's response) has been answered.
///
/// rmcp's client opens it in the background once `initialized` is sent, and
/// an upstream drops what it sends there before the GET arrives (the
/// TypeScript SDK stores it for a resumption that a first GET never asks
/// for): a call sent at once could lose the upstream's
/// `sampling/createMessage` or `elicitation/create` for good, and hang
/// until the upstream gave up (issue 40). So a request waits (up to
/// `connect_timeout`) until its session's stream has been answered; a new
/// session (after the upstream forgot the old one) waits for its own.
#[derive(Clone, Default)]
pub(crate) struct Standalone {
    state: Arc<StandaloneState>,
}

#[derive(Default)]
struct StandaloneState {
    /// The session whose stream is awaited (rmcp opens one per session id).
    session: std::sync::Mutex<Option<Arc<str>>>,
    /// Its first GET has been answered (a stream, a 405, or an error).
    answered: AtomicBool,
    wake: tokio::sync::Notify,
}

impl Standalone {
    /// A message of `session` goes out: a new session's stream is awaited.
    fn session(&self, session: &Arc<str>) {
        let mut current = self.state.session.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.as_deref() != Some(session.as_ref()) {
            *current = Some(session.clone());
            self.state.answered.store(false, Ordering::Release);
        }
    }

    fn answered(&self) {
        self.state.answered.store(true, Ordering::Release);
        self.state.wake.notify_waiters();
    }

    /// Waits until the current session's standalone stream is open (or
    /// refused), at most `bound`. Whether it is.
    async fn opened(&self, bound: Duration) -> bool {
        let wake = self.state.wake.notified();
        tokio::pin!(wake);
        // Registered before the flag is read, so no answer is missed.
        wake.as_mut().enable();
        if self.state.answered.load(Ordering::Acquire) {
            return true;
        }
        tokio::time::timeout(bound, wake).await.is_ok()
    }
}

/// Tells [`Standalone`] a session's first GET is answered when it is, or
/// when it is dropped unanswered (nothing then waits for it in vain).
struct Answering(Option<Standalone>);

impl Drop for Answering {
    fn drop(&mut self) {
        if let Some(standalone) = self.0.take() {
            standalone.answered();
        }
    }
}

/// The upstream HTTP client: reqwest's, with [`Standalone`] told when a
/// session's first GET is answered, and requests held until it is. Every
/// call goes to reqwest's own code, so its body and event-size limits hold.
#[derive(Clone)]
pub(crate) struct Client {
    inner: upstream_http::Client,
    standalone: Standalone,
    /// How long a request waits for the session's stream.
    wait: Duration,
}

impl Client {
    /// `get`, telling [`Standalone`] once it is answered if it is a session's first GET.
    async fn told<T>(&self, first: bool, get: impl Future<Output = T>) -> T {
        let _answering = Answering(first.then(|| self.standalone.clone()));
        get.await
    }

    /// Before a message of `session` goes out: a request waits for the
    /// session's standalone stream (answers and notifications never do:
    /// `initialized` comes before the stream is opened).
    async fn before_post(&self, session: Option<&Arc<str>>, message: &ClientJsonRpcMessage) {
        let Some(session) = session else { return };
        self.standalone.session(session);
        if matches!(message, ClientJsonRpcMessage::Request(_)) && !self.standalone.opened(self.wait).await {
            tracing::warn!(
                "the upstream did not answer its session's stream within connect_timeout; what it sends \
                 outside a response before it does may be lost"
            );
            // Waited once for this session: the next requests go at once.
            self.standalone.answered();
        }
    }
}

impl StreamableHttpClient for Client {
    type Error = upstream_http::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.before_post(session_id.as_ref(), &message).await;
        self.inner.post_message(uri, message, session_id, auth_header, custom_headers).await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.before_post(session_id.as_ref(), &message).await;
        self.inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.before_post(session_id.as_ref(), &message).await;
        self.inner
            .post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits)
            .await
    }

    fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<(), StreamableHttpError<Self::Error>>> + Send + '_ {
        self.inner.delete_session(uri, session_id, auth_header, custom_headers)
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>>> + Send + '_
    {
        let first = session_id.is_some() && last_event_id.is_none();
        self.told(first, self.inner.get_stream(uri, session_id, last_event_id, auth_header, custom_headers))
    }

    fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>>> + Send + '_
    {
        // A resumption carries the id it resumes after; the session's first
        // GET carries none.
        let first = session_id.is_some() && last_event_id.is_none();
        self.told(
            first,
            self.inner.get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            ),
        )
    }
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
            error.downcast_ref::<StreamableHttpError<<Client as StreamableHttpClient>::Error>>()
        {
            return Some(*max_size);
        }
        next = error.source();
    }
    None
}
