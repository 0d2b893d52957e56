//! Client ID Metadata Documents: a client whose `client_id` is an HTTPS URL
//! is described by the JSON document at that URL, which Gatehouse fetches
//! when the client starts a sign-in (and caches for a few minutes).
//!
//! Fetching a URL anyone can name is a server-side request forgery risk, so:
//! only `https://` URLs with a path, resolved once and pinned, to public
//! unicast addresses only (outside every IANA special-purpose block: see
//! [`crate::addresses`]; unless `allow_private_client_metadata`, for tests
//! and LANs); no redirects; 5 s and 64 KiB at most.

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use gatehouse_core::oauth::{ClientMetadata, OAuthError};
use serde::Deserialize;
use url::Url;

/// Largest document accepted.
const MAX_BYTES: usize = 64 * 1024;
/// The whole fetch, connect to last byte.
const TIMEOUT: Duration = Duration::from_secs(5);
/// A document fetched this recently is not fetched again.
pub const FRESH_FOR_MS: i64 = 5 * 60 * 1000;

/// Whether a `client_id` is a metadata document URL (and not a registered id).
pub fn is_document_url(client_id: &str) -> bool {
    client_id.starts_with("https://") || client_id.starts_with("http://")
}

/// The fields of a metadata document Gatehouse reads.
#[derive(Debug, Deserialize)]
struct Document {
    client_id: String,
    client_name: Option<String>,
    #[serde(default)]
    redirect_uris: Vec<String>,
    token_endpoint_auth_method: Option<String>,
    grant_types: Option<Vec<String>>,
    response_types: Option<Vec<String>>,
}

/// Fetches metadata documents under the rules above.
#[derive(Debug, Clone)]
pub struct Fetcher {
    allow_private: bool,
}

impl Fetcher {
    /// A fetcher; `allow_private` also permits `http://` and private addresses.
    pub fn new(allow_private: bool) -> Self {
        Self { allow_private }
    }

    /// Fetches and checks the document at `client_id`.
    pub async fn fetch(&self, client_id: &str) -> Result<ClientMetadata, OAuthError> {
        let refuse = |why: String| OAuthError::InvalidClient(format!("client metadata document {client_id}: {why}"));
        let url = Url::parse(client_id).map_err(|e| refuse(e.to_string()))?;
        self.check_url(&url).map_err(refuse)?;
        let host = url.host_str().unwrap_or_default().to_string();
        let port = url.port_or_known_default().unwrap_or(443);
        let address = self.resolve(&host, port).await.map_err(refuse)?;
        crate::tls::install_crypto_provider();
        let mut builder = upstream_http::Client::builder()
            .redirect(upstream_http::redirect::Policy::none())
            .timeout(TIMEOUT)
            .https_only(!self.allow_private);
        // Connect to the address just checked, not whatever DNS says next.
        if url.host().is_some_and(|h| matches!(h, url::Host::Domain(_))) {
            builder = builder.resolve(&host, address);
        }
        let client = builder.build().map_err(|e| refuse(e.to_string()))?;
        let response = client
            .get(url.clone())
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| refuse(format!("fetch failed: {e}")))?;
        if !response.status().is_success() {
            return Err(refuse(format!("answered HTTP {}", response.status().as_u16())));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| refuse(format!("fetch failed: {e}")))?;
            if body.len() + chunk.len() > MAX_BYTES {
                return Err(refuse(format!("larger than {MAX_BYTES} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        let document: Document =
            serde_json::from_slice(&body).map_err(|e| refuse(format!("not a client metadata document: {e}")))?;
        if document.client_id != client_id {
            return Err(refuse(format!("its client_id is {:?}, not its own URL", document.client_id)));
        }
        let metadata = ClientMetadata::check(
            document.client_name.as_deref(),
            &document.redirect_uris,
            Some(document.token_endpoint_auth_method.as_deref().unwrap_or("none")),
            document.grant_types.as_deref(),
            document.response_types.as_deref(),
        )
        .map_err(|e| refuse(e.to_string()))?;
        Ok(metadata)
    }

    /// The URL rules of the Client ID Metadata Document draft: https, a
    /// path, no fragment, no credentials, no dot segments.
    fn check_url(&self, url: &Url) -> Result<(), String> {
        match url.scheme() {
            "https" => {}
            "http" if self.allow_private => {}
            _ => return Err("must be an https:// URL".into()),
        }
        if url.path() == "/" || url.path().is_empty() {
            return Err("must have a path".into());
        }
        if url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
            return Err("must have no fragment and no credentials".into());
        }
        // `Url` has already resolved `.`/`..`; a raw one in the input differs.
        if url.as_str().contains("/./") || url.as_str().contains("/../") {
            return Err("must have no dot segments".into());
        }
        Ok(())
    }

    async fn resolve(&self, host: &str, port: u16) -> Result<SocketAddr, String> {
        let addresses: Vec<SocketAddr> =
            tokio::net::lookup_host((host, port)).await.map_err(|e| format!("cannot resolve {host}: {e}"))?.collect();
        let first = *addresses.first().ok_or_else(|| format!("{host} has no address"))?;
        if !self.allow_private
            && let Some((private, why)) =
                addresses.iter().find_map(|a| crate::addresses::not_public(a.ip()).map(|why| (a.ip(), why)))
        {
            return Err(format!("{host} resolves to a non-public address ({private}: {why})"));
        }
        Ok(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn private_and_plain_http_documents_are_refused_unless_allowed() {
        let strict = Fetcher::new(false);
        for bad in [
            "http://127.0.0.1:1/client.json",
            "https://127.0.0.1:1/client.json",
            "https://localhost/c.json",
            "https://[64:ff9b::7f00:1]:1/c.json",
            "https://[2002:7f00:1::1]:1/c.json",
            "https://[::ffff:169.254.169.254]:1/c.json",
            "https://[fec0::1]:1/c.json",
        ] {
            let e = strict.fetch(bad).await.unwrap_err();
            assert_eq!(e.code(), "invalid_client", "{bad}: {e}");
        }
        let e = strict.fetch("https://example.com/").await.unwrap_err();
        assert!(e.to_string().contains("must have a path"), "{e}");
    }
}
