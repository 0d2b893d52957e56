//! Host and Origin checks (DNS-rebinding and CSRF protection) and the headers
//! that keep pages out of frames, their scripts our own and their content out
//! of caches.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use url::Url;

/// Which `Host` and `Origin` values are accepted (shared, not copied: the
/// middleware clones it for every request).
#[derive(Debug, Clone)]
pub struct AllowList {
    hosts: Arc<[String]>,
    mcp_origins: Arc<[String]>,
    public_origin: Option<Arc<str>>,
}

const LOOPBACK: [&str; 4] = ["localhost", "127.0.0.1", "::1", "[::1]"];

/// The host name of `host[:port]` (IPv6 in brackets), as written: callers
/// compare it case-insensitively, so nothing is allocated per request.
fn host_name(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|c| c.is_ascii_digit()) => h,
        _ => authority,
    }
}

impl AllowList {
    /// Loopback names, the public URL's host, and the configured extras.
    pub fn new(public_url: Option<&Url>, extra_hosts: &[String], extra_origins: &[String]) -> Self {
        let mut hosts: Vec<String> = LOOPBACK.iter().map(|s| s.to_string()).collect();
        if let Some(host) = public_url.and_then(|u| u.host_str()) {
            hosts.push(host.trim_matches(['[', ']']).to_ascii_lowercase());
        }
        hosts.extend(extra_hosts.iter().map(|h| h.to_ascii_lowercase()));
        let public_origin = public_url.map(|u| u.origin().ascii_serialization());
        let mut mcp_origins: Vec<String> =
            ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"].iter().map(|s| s.to_string()).collect();
        mcp_origins.extend(public_origin.clone());
        mcp_origins.extend(extra_origins.iter().cloned());
        Self { hosts: hosts.into(), mcp_origins: mcp_origins.into(), public_origin: public_origin.map(Into::into) }
    }

    /// The host list in the form rmcp's Streamable HTTP service takes.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The origin list in the form rmcp's Streamable HTTP service takes.
    pub fn mcp_origins(&self) -> &[String] {
        &self.mcp_origins
    }

    /// Whether a `Host` header value names us.
    pub fn host_allowed(&self, host: &str) -> bool {
        // The list is lower-cased when it is built.
        let full = host.trim();
        let name = host_name(full);
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(name) || h.eq_ignore_ascii_case(full))
    }

    /// Whether an `Origin` may call `/mcp`: loopback on any port, the public
    /// URL, or a configured extra.
    pub fn mcp_origin_allowed(&self, origin: &str) -> bool {
        let Ok(url) = Url::parse(origin) else { return false };
        let serialized = url.origin().ascii_serialization();
        if url.scheme() == "http" && url.host_str().is_some_and(|h| LOOPBACK.contains(&h)) {
            return true;
        }
        self.mcp_origins.iter().any(|o| *o == serialized || *o == origin)
    }

    /// Whether an `Origin` is this site itself (for state-changing requests).
    pub fn same_origin(&self, origin: &str, host: Option<&str>) -> bool {
        if self.public_origin.as_deref() == Some(origin) {
            return true;
        }
        let Some(host) = host else { return false };
        origin == format!("http://{host}") || origin == format!("https://{host}")
    }
}

fn refuse(status: StatusCode, error: &str, message: String) -> Response {
    // `message` quotes what the client sent with `{:?}`, so it is escaped.
    tracing::warn!(status = status.as_u16(), error, message = ?message, "request refused");
    (status, axum::Json(json!({ "error": error, "message": message }))).into_response()
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Why `request` is refused, if it is: a `Host` that is not ours (DNS
/// rebinding), a cross-origin browser call to `/mcp`, or a cross-site
/// state-changing call elsewhere.
fn refusal(allow: &AllowList, request: &Request) -> Option<Response> {
    let headers = request.headers();
    let host = header_str(headers, header::HOST).or_else(|| request.uri().authority().map(|a| a.as_str()));
    match host {
        Some(h) if allow.host_allowed(h) => {}
        Some(h) => return Some(refuse(StatusCode::FORBIDDEN, "forbidden_host", format!("Host {h:?} is not allowed"))),
        None => return Some(refuse(StatusCode::FORBIDDEN, "forbidden_host", "missing Host header".into())),
    }
    let origin = header_str(headers, header::ORIGIN);
    if is_mcp(request.uri().path()) {
        if let Some(o) = origin
            && !allow.mcp_origin_allowed(o)
        {
            return Some(refuse(StatusCode::FORBIDDEN, "forbidden_origin", format!("Origin {o:?} is not allowed")));
        }
    } else if !matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        && !crate::oauth::server::paths::CROSS_ORIGIN.contains(&request.uri().path())
    {
        // Browsers send Origin on every cross-site POST, so a present Origin
        // must be ours. Without one, only a cookie can carry ambient
        // authority: a bearer header cannot be attached cross-site without CORS.
        let bearer = headers.contains_key(header::AUTHORIZATION);
        let cookie = headers.contains_key(header::COOKIE);
        let same_site_fetch =
            header_str(headers, header::HeaderName::from_static("sec-fetch-site")) == Some("same-origin");
        let ok = match origin {
            Some(o) => allow.same_origin(o, host),
            None => bearer || !cookie || same_site_fetch,
        };
        if !ok {
            return Some(refuse(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                format!("cross-origin {} refused (Origin {:?})", request.method(), origin.unwrap_or("missing")),
            ));
        }
    }
    None
}

/// What [`GuardLayer`] needs to know about how the site is served.
#[derive(Debug, Clone, Copy)]
pub struct HeaderPolicy {
    /// Served over HTTPS: browsers are told to keep it that way (HSTS).
    pub https: bool,
}

/// The Content Security Policy of a response whose inline scripts carry `nonce`:
/// everything from this site only; the hydration script (and a light
/// page's script and inline stylesheet) by its nonce; wasm
/// compiled by the browser (`'wasm-unsafe-eval'`); live streams and server
/// functions to this site; no plugins, frames, foreign forms or base URLs.
pub fn content_security_policy(nonce: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; style-src 'self' 'nonce-{nonce}'; \
         img-src 'self' data:; connect-src 'self'; object-src 'none'; frame-ancestors 'none'; \
         base-uri 'self'; form-action 'self'"
    )
}

/// The Content Security Policy of `/mcp` answers (JSON and event streams,
/// never a page): nothing may run or load.
const MCP_CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'none'; object-src 'none'; \
     frame-ancestors 'none'; base-uri 'self'; form-action 'self'";

/// Whether `path` is the MCP endpoint.
fn is_mcp(path: &str) -> bool {
    path == "/mcp" || path.starts_with("/mcp/")
}

/// The front door of every response as one tower layer: the Host and
/// Origin checks ([`refusal`]), then the headers that keep every response
/// (refusals included) out of frames and sniffing, its scripts to our own and
/// its content out of caches. A fresh CSP nonce goes into the request for
/// the page renderer (the shell hands it to Leptos's hydration scripts) and
/// into the CSP. Responses that set their own `Cache-Control` (static assets)
/// keep it; everything else, signed-in pages and token-bearing JSON above
/// all, is `no-store`.
///
/// One hand-written layer rather than two `from_fn` ones: each of those
/// clones the boxed inner route and boxes a future on every request, the
/// gate's hottest path (BENCHMARKS.md, "The gate's own path").
#[derive(Debug, Clone)]
pub struct GuardLayer {
    allow: Option<AllowList>,
    policy: HeaderPolicy,
}

impl GuardLayer {
    /// Checks Host and Origin against `allow`, then sets the headers.
    pub fn new(allow: AllowList, policy: HeaderPolicy) -> Self {
        Self { allow: Some(allow), policy }
    }

    /// Sets the headers only: for the `metrics_listen` address, which
    /// scrapers reach by whatever name their network gives it.
    pub fn headers_only(policy: HeaderPolicy) -> Self {
        Self { allow: None, policy }
    }
}

impl<S> tower::Layer<S> for GuardLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Guard<S> {
        Guard { inner, allow: self.allow.clone(), policy: self.policy }
    }
}

/// The service [`GuardLayer`] puts in front of `S`.
#[derive(Debug, Clone)]
pub struct Guard<S> {
    inner: S,
    allow: Option<AllowList>,
    policy: HeaderPolicy,
}

impl<S> tower::Service<Request> for Guard<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = GuardFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        // `/mcp` never renders a page: a fixed policy that allows no script,
        // and no nonce to draw and format on the gate's hottest path.
        let csp = if is_mcp(request.uri().path()) {
            Some(HeaderValue::from_static(MCP_CONTENT_SECURITY_POLICY))
        } else {
            let nonce = leptos::nonce::Nonce::new();
            let csp = HeaderValue::from_str(&content_security_policy(&nonce)).ok();
            request.extensions_mut().insert(nonce);
            csp
        };
        let state = match self.allow.as_ref().and_then(|allow| refusal(allow, &request)) {
            Some(refused) => Stage::Refused { response: Some(refused) },
            None => Stage::Inner { future: self.inner.call(request) },
        };
        GuardFuture { stage: state, csp, https: self.policy.https }
    }
}

pin_project_lite::pin_project! {
    /// The response of a [`Guard`]: a refusal or the inner service's answer,
    /// with the security headers set on it.
    pub struct GuardFuture<F> {
        #[pin]
        stage: Stage<F>,
        csp: Option<HeaderValue>,
        https: bool,
    }
}

pin_project_lite::pin_project! {
    #[project = StageProj]
    enum Stage<F> {
        Refused { response: Option<Response> },
        Inner { #[pin] future: F },
    }
}

impl<F> Future for GuardFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = match this.stage.project() {
            StageProj::Refused { response } => response.take().expect("a guard future is polled after it completed"),
            StageProj::Inner { future } => match ready!(future.poll(cx)) {
                Ok(response) => response,
                Err(never) => match never {},
            },
        };
        set_headers(response.headers_mut(), this.csp.take(), *this.https);
        Poll::Ready(Ok(response))
    }
}

fn set_headers(h: &mut HeaderMap, csp: Option<HeaderValue>, https: bool) {
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // A page that widened its own policy (the OAuth consent page, whose
    // form redirects to the client) keeps it; it is built from the same nonce.
    if let Some(csp) = csp
        && !h.contains_key(header::CONTENT_SECURITY_POLICY)
    {
        h.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if https {
        h.insert(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static("max-age=31536000"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_loopback_public_and_extras() {
        let public = Url::parse("https://gate.example.com").unwrap();
        let allow = AllowList::new(Some(&public), &["box.lan".into()], &[]);
        for ok in ["localhost:8080", "127.0.0.1", "[::1]:9", "gate.example.com", "GATE.example.com:443", "box.lan:1"] {
            assert!(allow.host_allowed(ok), "{ok}");
        }
        for bad in ["evil.com", "127.0.0.1.evil.com", "localhost.evil:80", ""] {
            assert!(!allow.host_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn mcp_origins_and_same_origin() {
        let public = Url::parse("https://gate.example.com/").unwrap();
        let allow = AllowList::new(Some(&public), &[], &["https://ide.example".into()]);
        assert!(allow.mcp_origin_allowed("http://localhost:6274"));
        assert!(allow.mcp_origin_allowed("https://gate.example.com"));
        assert!(allow.mcp_origin_allowed("https://ide.example"));
        assert!(!allow.mcp_origin_allowed("https://evil.example"));
        assert!(!allow.mcp_origin_allowed("null"));
        assert!(allow.same_origin("http://127.0.0.1:8080", Some("127.0.0.1:8080")));
        assert!(!allow.same_origin("http://127.0.0.1:3000", Some("127.0.0.1:8080")));
        assert!(allow.same_origin("https://gate.example.com", Some("10.0.0.1")));
    }

    /// A refusal never reaches the service behind the guard, and every answer,
    /// a refusal or the service's own, leaves with the security headers.
    #[tokio::test]
    async fn the_guard_refuses_before_the_service_and_heads_every_answer() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tower::{Layer, ServiceExt};

        let reached = Arc::new(AtomicUsize::new(0));
        let inner = {
            let reached = reached.clone();
            tower::service_fn(move |request: Request| {
                reached.fetch_add(1, Ordering::SeqCst);
                // The page renderer finds its nonce in the request.
                let has_nonce = request.extensions().get::<leptos::nonce::Nonce>().is_some();
                async move {
                    Ok::<_, Infallible>((StatusCode::OK, if has_nonce { "nonce" } else { "none" }).into_response())
                }
            })
        };
        let guard = GuardLayer::new(AllowList::new(None, &[], &[]), HeaderPolicy { https: true }).layer(inner);
        let send = |request: Request| guard.clone().oneshot(request);
        let get = |path: &str, host: &str| {
            Request::get(path).header(header::HOST, host).body(axum::body::Body::empty()).unwrap()
        };

        let refused = send(get("/", "evil.example")).await.unwrap();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert_eq!(reached.load(Ordering::SeqCst), 0, "a foreign Host must not reach the service");
        let cross_site = Request::post("/api/credentials")
            .header(header::HOST, "localhost:8080")
            .header(header::ORIGIN, "https://evil.example")
            .header(header::COOKIE, "gh_session=x")
            .body(axum::body::Body::empty())
            .unwrap();
        assert_eq!(send(cross_site).await.unwrap().status(), StatusCode::FORBIDDEN);
        assert_eq!(reached.load(Ordering::SeqCst), 0, "a cross-site POST must not reach the service");

        let page = send(get("/", "LOCALHOST:8080")).await.unwrap();
        assert_eq!(page.status(), StatusCode::OK);
        assert_eq!(reached.load(Ordering::SeqCst), 1);
        let mcp = send(get("/mcp", "127.0.0.1")).await.unwrap();
        for (response, script_src) in [(&refused, "'nonce-"), (&page, "'nonce-"), (&mcp, "script-src 'none'")] {
            let h = response.headers();
            assert_eq!(h[header::X_FRAME_OPTIONS], "DENY");
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            assert_eq!(h[header::CACHE_CONTROL], "no-store");
            assert!(h.contains_key(header::STRICT_TRANSPORT_SECURITY));
            let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
            assert!(csp.contains(script_src) && csp.contains("frame-ancestors 'none'"), "{csp}");
        }
        let body = axum::body::to_bytes(page.into_body(), 64).await.unwrap();
        assert_eq!(&body[..], b"nonce");
        let body = axum::body::to_bytes(mcp.into_body(), 64).await.unwrap();
        assert_eq!(&body[..], b"none", "/mcp draws no nonce");

        // Without an allow list (the metrics address), any Host is served.
        let open = GuardLayer::headers_only(HeaderPolicy { https: false })
            .layer(tower::service_fn(|_: Request| async { Ok::<_, Infallible>(StatusCode::OK.into_response()) }));
        let r = open.oneshot(get("/metrics", "prometheus.internal")).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[header::X_FRAME_OPTIONS], "DENY");
        assert!(!r.headers().contains_key(header::STRICT_TRANSPORT_SECURITY));
    }
}
