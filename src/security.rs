//! Host and Origin checks (DNS-rebinding and CSRF protection) and the headers
//! that keep pages out of frames, their scripts our own and their content out
//! of caches.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
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

/// Splits `host[:port]` (IPv6 in brackets) into the host name, lower-cased.
fn host_name(authority: &str) -> String {
    let authority = authority.trim().to_ascii_lowercase();
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default().to_string();
    }
    authority.rsplit_once(':').map_or(authority.clone(), |(h, p)| {
        if p.chars().all(|c| c.is_ascii_digit()) { h.to_string() } else { authority.clone() }
    })
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
        let name = host_name(host);
        let full = host.trim().to_ascii_lowercase();
        self.hosts.iter().any(|h| *h == name || *h == full)
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

/// Refuses requests whose `Host` is not ours (DNS rebinding), cross-origin
/// browser calls to `/mcp`, and cross-site state-changing calls elsewhere.
pub async fn check_host_and_origin(State(allow): State<AllowList>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = header_str(headers, header::HOST).or_else(|| request.uri().authority().map(|a| a.as_str()));
    match host {
        Some(h) if allow.host_allowed(h) => {}
        Some(h) => return refuse(StatusCode::FORBIDDEN, "forbidden_host", format!("Host {h:?} is not allowed")),
        None => return refuse(StatusCode::FORBIDDEN, "forbidden_host", "missing Host header".into()),
    }
    let origin = header_str(headers, header::ORIGIN);
    if is_mcp(request.uri().path()) {
        if let Some(o) = origin
            && !allow.mcp_origin_allowed(o)
        {
            return refuse(StatusCode::FORBIDDEN, "forbidden_origin", format!("Origin {o:?} is not allowed"));
        }
    } else if !matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        && !crate::oauth::paths::CROSS_ORIGIN.contains(&request.uri().path())
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
            return refuse(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                format!("cross-origin {} refused (Origin {:?})", request.method(), origin.unwrap_or("missing")),
            );
        }
    }
    next.run(request).await
}

/// What [`security_headers`] needs to know about how the site is served.
#[derive(Debug, Clone, Copy)]
pub struct HeaderPolicy {
    /// Served over HTTPS: browsers are told to keep it that way (HSTS).
    pub https: bool,
}

/// The Content Security Policy of a response whose inline scripts carry `nonce`:
/// everything from this site only; the hydration script by its nonce; wasm
/// compiled by the browser (`'wasm-unsafe-eval'`); live streams and server
/// functions to this site; no plugins, frames, foreign forms or base URLs.
pub fn content_security_policy(nonce: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; style-src 'self'; \
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

/// Sets the headers that keep every response (refusals included) out of
/// frames and sniffing, its scripts to our own, and its content out of
/// caches: a fresh CSP nonce goes into the request for the page renderer
/// (the shell hands it to Leptos's hydration scripts) and into the CSP.
/// Responses that set their own `Cache-Control` (static assets) keep it;
/// everything else, signed-in pages and token-bearing JSON above all, is
/// `no-store`.
pub async fn security_headers(State(policy): State<HeaderPolicy>, mut request: Request, next: Next) -> Response {
    // `/mcp` never renders a page: a fixed policy that allows no script, and
    // no nonce to draw and format on the gate's hottest path.
    let csp = if is_mcp(request.uri().path()) {
        Ok(HeaderValue::from_static(MCP_CONTENT_SECURITY_POLICY))
    } else {
        let nonce = leptos::nonce::Nonce::new();
        let csp = HeaderValue::from_str(&content_security_policy(&nonce));
        request.extensions_mut().insert(nonce);
        csp
    };
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // A page that widened its own policy (the OAuth consent page, whose
    // form redirects to the client) keeps it; it is built from the same nonce.
    if let Ok(csp) = csp
        && !h.contains_key(header::CONTENT_SECURITY_POLICY)
    {
        h.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if policy.https {
        h.insert(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static("max-age=31536000"));
    }
    response
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
}
