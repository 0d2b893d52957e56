//! The URI and PKCE rules of the authorization server: which redirect URIs a
//! client may register (RFC 8252 for native apps), how a presented one is
//! matched, and what a PKCE challenge and verifier look like (RFC 7636).

use oauth2::{PkceCodeChallenge, PkceCodeVerifier};
use url::{Host, Url};

/// Schemes that would run or read something in the browser instead of
/// handing the code to an app.
const FORBIDDEN_SCHEMES: &[&str] = &["javascript", "data", "file", "vbscript", "about", "blob", "ftp", "ws", "wss"];

/// Whether `uri` may be registered as a redirect URI: `https://`, plain
/// `http://` only to a loopback address (the native-app callback), or a
/// private-use scheme such as `cursor://…`; never with a fragment.
pub fn check_redirect_uri(uri: &str) -> Result<(), String> {
    if uri.len() > 2000 || uri.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("must be at most 2000 characters without spaces or control characters".into());
    }
    let url = Url::parse(uri).map_err(|e| format!("{uri:?} is not an absolute URI ({e})"))?;
    if url.fragment().is_some() {
        return Err(format!("{uri:?} has a fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{uri:?} carries credentials"));
    }
    match url.scheme() {
        "https" if url.host().is_some() => Ok(()),
        "http" if is_loopback(&url) => Ok(()),
        "http" => Err(format!("{uri:?}: plain http is allowed only to 127.0.0.1, [::1] or localhost")),
        scheme if FORBIDDEN_SCHEMES.contains(&scheme) => Err(format!("{uri:?}: the {scheme}: scheme is not allowed")),
        "https" => Err(format!("{uri:?} has no host")),
        _ => Ok(()),
    }
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        Some(Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// Whether `presented` is one of a client's registered redirect URIs: the
/// same string, or — for loopback `http://` ones — the same but for the port,
/// which a native app picks when it starts listening (RFC 8252 §7.3).
pub fn redirect_matches(registered: &[String], presented: &str) -> bool {
    registered.iter().any(|r| r == presented || same_but_port(r, presented))
}

fn same_but_port(registered: &str, presented: &str) -> bool {
    let (Ok(r), Ok(p)) = (Url::parse(registered), Url::parse(presented)) else { return false };
    r.scheme() == "http"
        && p.scheme() == "http"
        && is_loopback(&r)
        && r.host() == p.host()
        && r.path() == p.path()
        && r.query() == p.query()
        && p.fragment().is_none()
        && p.username().is_empty()
        && p.password().is_none()
}

/// A PKCE value (challenge or verifier): 43 to 128 characters of
/// `[A-Za-z0-9-._~]` (RFC 7636 §4.1–4.2).
pub fn is_pkce_value(value: &str) -> bool {
    (43..=128).contains(&value.len())
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// Whether `verifier` is the one `challenge` was made from with S256.
pub fn pkce_s256_matches(challenge: &str, verifier: &str) -> bool {
    is_pkce_value(verifier)
        && PkceCodeChallenge::from_code_verifier_sha256(&PkceCodeVerifier::new(verifier.to_string())).as_str()
            == challenge
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_uris_a_client_may_register() {
        for ok in [
            "https://app.example/cb",
            "http://127.0.0.1:33418/",
            "http://localhost:5173/oauth/callback",
            "http://[::1]/cb",
            "cursor://anysphere.cursor-retrieval/oauth/callback",
            "com.example.app:/oauth2redirect",
        ] {
            assert_eq!(check_redirect_uri(ok), Ok(()), "{ok}");
        }
        for bad in [
            "http://evil.example/cb",
            "http://127.0.0.1.evil.example/cb",
            "https://app.example/cb#frag",
            "javascript:alert(1)",
            "data:text/html,x",
            "file:///etc/passwd",
            "/relative",
            "https://user:pw@app.example/cb",
            "https://app.example/a b",
        ] {
            assert!(check_redirect_uri(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn loopback_redirects_match_on_any_port_and_nothing_else_does() {
        let registered = vec!["http://127.0.0.1:3000/callback".to_string(), "https://app.example/cb".to_string()];
        assert!(redirect_matches(&registered, "http://127.0.0.1:3000/callback"));
        assert!(redirect_matches(&registered, "http://127.0.0.1:61234/callback"));
        assert!(redirect_matches(&registered, "https://app.example/cb"));
        for bad in [
            "http://127.0.0.1:3000/other",
            "http://localhost:3000/callback",
            "http://127.0.0.1:3000/callback?x=1",
            "https://app.example/cb/",
            "https://app.example:444/cb",
            "https://app.example/cb?x=1",
            "http://127.0.0.1:3000/callback#f",
        ] {
            assert!(!redirect_matches(&registered, bad), "{bad}");
        }
    }

    #[test]
    fn pkce_s256_is_checked_against_rfc_7636_appendix_b() {
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        let challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
        assert!(pkce_s256_matches(challenge, verifier));
        assert!(!pkce_s256_matches(challenge, "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXj"));
        assert!(!pkce_s256_matches(challenge, "short"));
        assert!(is_pkce_value(challenge));
        assert!(!is_pkce_value("has space in it and is long enough to pass the length check"));
    }
}
