//! What the HTTP side of the authorization server knows ([`OAuthServer`]:
//! issuer, resource, the challenge of a 401) and where its endpoints are
//! ([`paths`]). Held by the MCP state; knows no handler.

use axum::http::header;
use gatehouse_core::oauth::OAuthError;
use url::Url;

use super::client_metadata;
use crate::config::OAuthConfig;

/// Where the endpoints are.
pub mod paths {
    /// RFC 9728 metadata of `/mcp` (path-suffixed form).
    pub const RESOURCE_METADATA_MCP: &str = "/.well-known/oauth-protected-resource/mcp";
    /// RFC 9728 metadata, root form.
    pub const RESOURCE_METADATA: &str = "/.well-known/oauth-protected-resource";
    /// RFC 8414 metadata.
    pub const SERVER_METADATA: &str = "/.well-known/oauth-authorization-server";
    /// The authorization endpoint (the consent page).
    pub const AUTHORIZE: &str = "/oauth/authorize";
    /// The token endpoint.
    pub const TOKEN: &str = "/oauth/token";
    /// Dynamic client registration.
    pub const REGISTER: &str = "/oauth/register";
    /// Token revocation.
    pub const REVOKE: &str = "/oauth/revoke";
    /// Endpoints clients call from anywhere (browser-based ones too): they
    /// read no cookie, so a cross-site request carries no ambient authority.
    pub const CROSS_ORIGIN: [&str; 3] = [TOKEN, REGISTER, REVOKE];
}

/// What the HTTP side of the authorization server knows.
#[derive(Debug, Clone)]
pub struct OAuthServer {
    /// Whether it is served at all.
    pub enabled: bool,
    /// The issuer identifier: this Gatehouse's base URL.
    pub issuer: String,
    /// The canonical URI of the protected resource: `<base>/mcp`.
    pub resource: String,
    /// Fetches client metadata documents.
    pub documents: client_metadata::Fetcher,
    /// Whether the base URL is configured (`public_url`); if not, it is the
    /// one each request used (see [`OAuthServer::seen_from`]).
    pub fixed: bool,
}

impl OAuthServer {
    /// The authorization server of the Gatehouse at `base_url`.
    pub fn new(base_url: &str, config: &OAuthConfig) -> Self {
        let base = base_url.trim_end_matches('/');
        Self {
            enabled: config.enabled,
            issuer: base.to_string(),
            resource: format!("{base}/mcp"),
            documents: client_metadata::Fetcher::new(config.allow_private_client_metadata),
            fixed: false,
        }
    }

    /// The same, with the base URL configured (`public_url`) rather than
    /// the bound address.
    pub fn fixed(mut self, fixed: bool) -> Self {
        self.fixed = fixed;
        self
    }

    /// This server as a request to `host` sees it. Without a configured
    /// `public_url` the base URL is the one the client used (its `Host`,
    /// already allow-listed): a client that connects to `localhost` gets
    /// metadata, an issuer and tokens for `localhost`, as it checks they are.
    pub fn seen_from(&self, host: Option<&str>) -> OAuthServer {
        let usable = |h: &&str| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic() && !b"/?#@\\".contains(&b));
        match host.filter(usable) {
            Some(host) if !self.fixed => {
                OAuthServer { issuer: format!("http://{host}"), resource: format!("http://{host}/mcp"), ..self.clone() }
            }
            _ => self.clone(),
        }
    }

    /// [`OAuthServer::seen_from`] the `Host` of `headers`.
    pub fn seen_by(&self, headers: &axum::http::HeaderMap) -> OAuthServer {
        self.seen_from(headers.get(header::HOST).and_then(|h| h.to_str().ok()))
    }

    /// The URL of `path` on this Gatehouse.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.issuer)
    }

    /// The `WWW-Authenticate` challenge of a 401 from `/mcp`.
    pub fn challenge(&self, error: Option<&str>) -> String {
        let metadata = self.url(paths::RESOURCE_METADATA_MCP);
        match (self.enabled, error) {
            (true, Some(e)) => format!(r#"Bearer realm="gatehouse", error="{e}", resource_metadata="{metadata}""#),
            (true, None) => format!(r#"Bearer realm="gatehouse", resource_metadata="{metadata}""#),
            (false, Some(e)) => format!(r#"Bearer realm="gatehouse", error="{e}""#),
            (false, None) => r#"Bearer realm="gatehouse""#.to_string(),
        }
    }

    /// The resource a request names (RFC 8707), as the canonical
    /// `<base>/mcp`: absent means this one; this Gatehouse's `/mcp` (or its
    /// base URL), with or without a trailing slash, is accepted; anything
    /// else is another server's and refused with `invalid_target`.
    pub fn resource_param(&self, presented: Option<&str>) -> Result<String, OAuthError> {
        let Some(presented) = presented.filter(|p| !p.is_empty()) else { return Ok(self.resource.clone()) };
        let refuse = || {
            OAuthError::InvalidTarget(format!("resource {presented:?} is not this Gatehouse; use {:?}", self.resource))
        };
        let (Ok(given), Ok(ours)) = (Url::parse(presented), Url::parse(&self.issuer)) else { return Err(refuse()) };
        let path = given.path().trim_end_matches('/');
        let same = given.origin() == ours.origin()
            && given.query().is_none()
            && given.fragment().is_none()
            && (path.is_empty() || path == "/mcp");
        if same { Ok(self.resource.clone()) } else { Err(refuse()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resource_must_be_this_gatehouse() {
        let server = OAuthServer::new("http://127.0.0.1:8080", &OAuthConfig::default());
        for ok in [
            None,
            Some(""),
            Some("http://127.0.0.1:8080/mcp"),
            Some("http://127.0.0.1:8080/mcp/"),
            Some("http://127.0.0.1:8080"),
        ] {
            assert_eq!(server.resource_param(ok).unwrap(), "http://127.0.0.1:8080/mcp", "{ok:?}");
        }
        for bad in [
            "http://127.0.0.1:8081/mcp",
            "https://127.0.0.1:8080/mcp",
            "http://127.0.0.1:8080/other",
            "http://evil.example/mcp",
            "http://127.0.0.1:8080/mcp?x=1",
            "not a url",
        ] {
            assert_eq!(server.resource_param(Some(bad)).unwrap_err().code(), "invalid_target", "{bad}");
        }
    }
}
