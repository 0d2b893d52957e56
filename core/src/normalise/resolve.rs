//! Values resolved the way their receiver resolves them: what a rule's
//! condition compares (`path_under`, `url_under`, `url_host` in
//! [`crate::policy::condition`]).
//!
//! A grant prefix ([`super::check_under`]) refuses every dot segment, since
//! the value it lets through goes upstream as written. A condition decides
//! both ways (a rule may block what is under a prefix), so refusing would
//! not do: it resolves what every receiver resolves alike — `.` and `..`
//! segments written plainly, repeated slashes, for a URL what WHATWG parsing
//! does — and refuses ([`Unresolvable`]) what receivers read differently:
//! control characters (a NUL cuts a path short), backslashes, encoded
//! separators, dot segments spelled with escapes, `;` or spaces (`%2e%2e`,
//! `..;`), and Unicode compatibility forms of `.` or `/`. A refusal is an
//! evaluation error, which the decision procedure counts as the rule's
//! strictest match.
//!
//! `..` is resolved lexically (`/a/b/..` is `/a`), as servers that resolve
//! a path before they check it do; through a symbolic link the file system
//! would go elsewhere, which no check on the text can know.

use std::borrow::Cow;

use url::Url;

use super::{DECODE_ROUNDS, Unsafe, check_chars, collapse_slashes, percent_decode, percent_normalise, segment_under};

/// Why a value cannot be resolved one way only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unresolvable {
    /// It holds something receivers read differently.
    #[error("{0}")]
    Unsafe(#[from] Unsafe),
    /// Not an absolute path (`path_under` compares absolute paths only: a
    /// relative one depends on the receiver's working directory).
    #[error("it is not an absolute path")]
    Relative,
    /// Not an absolute URL, as WHATWG parsing reads it.
    #[error("it is not an absolute URL")]
    NotUrl,
    /// A URL without a host (`mailto:`, `data:`, `file:///`).
    #[error("it names no host")]
    NoHost,
}

/// Which side of a comparison could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnderError {
    /// The value compared.
    #[error("the value cannot be resolved safely: {0}")]
    Value(Unresolvable),
    /// The prefix it is compared with.
    #[error("the prefix cannot be resolved safely: {0}")]
    Prefix(Unresolvable),
}

/// An absolute POSIX path as its receiver resolves it: repeated slashes
/// made one, `.` and `..` segments resolved (never above `/`). A trailing
/// slash is kept. Refused: a relative path, and anything in
/// [`Unresolvable`]'s module doc.
pub fn resolve_path(path: &str) -> Result<String, Unresolvable> {
    check_resolvable(path, path.len())?;
    if !path.starts_with('/') {
        return Err(Unresolvable::Relative);
    }
    // Most paths have nothing to resolve: one copy, not three.
    if !path.contains("//") && !path.split('/').any(|s| matches!(s, "." | "..")) {
        return Ok(path.to_string());
    }
    Ok(super::remove_dot_segments(&collapse_slashes(path)))
}

/// Whether path `value` is `prefix` or below it, both resolved
/// ([`resolve_path`]) and compared segment by segment: `/tmp/a` and
/// `/tmp/a/` each cover `/tmp/a`, `/tmp/a/` and `/tmp/a/b`, not `/tmp/ab`.
pub fn path_under(value: &str, prefix: &str) -> Result<bool, UnderError> {
    let prefix = resolve_path(prefix).map_err(UnderError::Prefix)?;
    let value = resolve_path(value).map_err(UnderError::Value)?;
    Ok(segment_under(without_trailing_slash(&value), without_trailing_slash(&prefix)))
}

/// `url` parsed as a WHATWG URL parser (a browser, Node's `URL`, Rust's
/// `url`) parses it, once it is known to hold nothing that other parsers
/// read differently ([`Unresolvable`]).
pub fn resolve_url(url: &str) -> Result<Url, Unresolvable> {
    let path_end = url.find(['?', '#']).unwrap_or(url.len());
    check_resolvable(url, path_end)?;
    Url::parse(url).map_err(|_| Unresolvable::NotUrl)
}

/// Whether URL `value` is under URL `prefix`, both parsed ([`resolve_url`]):
/// the same scheme, host (in lower case) and port (the scheme's default
/// filled in), and a path that is the prefix's path or below it, segment
/// by segment as for [`path_under`], with repeated slashes made one and
/// escapes of unreserved characters decoded (`/%61dmin` is `/admin`). User
/// names and passwords are not compared: they do not change where the
/// request goes. A prefix with a query or a fragment covers the same path
/// with a URL that starts with it.
pub fn url_under(value: &str, prefix: &str) -> Result<bool, UnderError> {
    let base = resolve_url(prefix).map_err(UnderError::Prefix)?;
    if base.cannot_be_a_base() {
        return Err(UnderError::Prefix(Unresolvable::NotUrl));
    }
    let url = resolve_url(value).map_err(UnderError::Value)?;
    let host = |u: &Url| u.host_str().map(str::to_ascii_lowercase);
    if url.scheme() != base.scheme()
        || host(&url) != host(&base)
        || url.port_or_known_default() != base.port_or_known_default()
    {
        return Ok(false);
    }
    let path = |u: &Url| percent_normalise(&collapse_slashes(u.path()));
    let base_path = path(&base).map_err(|e| UnderError::Prefix(e.into()))?;
    let value_path = path(&url).map_err(|e| UnderError::Value(e.into()))?;
    if base.query().is_some() || base.fragment().is_some() {
        return Ok(value_path == base_path && url.as_str().starts_with(base.as_str()));
    }
    Ok(segment_under(without_trailing_slash(&value_path), without_trailing_slash(&base_path)))
}

/// The host of URL `url` as its receiver parses it ([`resolve_url`]), in
/// lower case: `https://API.Example.com.:443@evil.example/` is
/// `evil.example`; an IPv6 host is in brackets.
pub fn url_host(url: &str) -> Result<String, Unresolvable> {
    let url = resolve_url(url)?;
    url.host_str().filter(|h| !h.is_empty()).map(str::to_ascii_lowercase).ok_or(Unresolvable::NoHost)
}

/// `path` without its trailing `/`, unless it is the root.
fn without_trailing_slash(path: &str) -> &str {
    match path.strip_suffix('/') {
        Some(trimmed) if !trimmed.is_empty() => trimmed,
        _ => path,
    }
}

/// Refuses what receivers read differently: as written and after each of
/// up to three rounds of percent-decoding, a control character, a
/// backslash, a compatibility form of a separator, a newly decoded `/`, or
/// a dot segment other than one written plainly as a `/`-separated
/// segment before `path_end` (`%2e%2e`, `..;`, `.. `, `..?` in a path).
fn check_resolvable(text: &str, path_end: usize) -> Result<(), Unsafe> {
    let plain = text[..path_end].split('/').filter(|s| matches!(*s, "." | "..")).count();
    // Plain ASCII with nothing to decode (most values): only the dot
    // segments to count, in one pass less.
    if !text.bytes().any(|b| !b.is_ascii() || b.is_ascii_control() || b == b'%' || b == b'\\') {
        return if dot_like_segments(text) > plain { Err(Unsafe::DotSegment) } else { Ok(()) };
    }
    let slashes = text.matches('/').count();
    let mut layer = Cow::Borrowed(text);
    for round in 0..=DECODE_ROUNDS {
        check_chars(&layer)?;
        if round > 0 && layer.matches('/').count() > slashes {
            return Err(Unsafe::EncodedSeparator);
        }
        // Decoding never removes a plain dot segment, so any more than
        // those written plainly are spelled another way.
        if dot_like_segments(&layer) > plain {
            return Err(Unsafe::DotSegment);
        }
        if !layer.contains('%') {
            break;
        }
        let next = percent_decode(&layer);
        if next == *layer {
            break;
        }
        layer = Cow::Owned(next);
    }
    Ok(())
}

/// How many segments of `text` some receiver reads as `.` or `..`: split at
/// `/`, `?` and `#`, cut at the first `;`, trimmed of ASCII whitespace.
fn dot_like_segments(text: &str) -> usize {
    text.split(['/', '?', '#'])
        .filter(|segment| {
            let segment = segment.split(';').next().unwrap_or_default();
            matches!(segment.trim_matches(|c: char| c.is_ascii_whitespace()), "." | "..")
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_resolved_as_its_receiver_resolves_it() {
        for written in ["/srv/prod/db", "/srv/./prod/db", "//srv/prod/db", "/srv//prod/db", "/srv/x/../prod/db"] {
            assert_eq!(resolve_path(written).as_deref(), Ok("/srv/prod/db"), "{written}");
        }
        assert_eq!(resolve_path("/../../etc").as_deref(), Ok("/etc"), "never above the root");
        assert_eq!(resolve_path("/a/b/..").as_deref(), Ok("/a/"));
        assert_eq!(resolve_path("/a/...").as_deref(), Ok("/a/..."), "three dots are a name");
        assert_eq!(resolve_path("/a/.hidden").as_deref(), Ok("/a/.hidden"));
    }

    #[test]
    fn a_path_that_receivers_read_differently_is_refused() {
        for (path, why) in [
            ("/srv/prod\0/db", Unresolvable::Unsafe(Unsafe::Control)),
            ("/srv/%00", Unresolvable::Unsafe(Unsafe::Control)),
            ("/srv\\prod", Unresolvable::Unsafe(Unsafe::Backslash)),
            ("/srv%2fprod", Unresolvable::Unsafe(Unsafe::EncodedSeparator)),
            ("/srv%252Fprod", Unresolvable::Unsafe(Unsafe::EncodedSeparator)),
            ("/srv/%2e%2e/etc", Unresolvable::Unsafe(Unsafe::DotSegment)),
            ("/srv/.%2E/etc", Unresolvable::Unsafe(Unsafe::DotSegment)),
            ("/srv/..;/etc", Unresolvable::Unsafe(Unsafe::DotSegment)),
            ("/srv/.. /etc", Unresolvable::Unsafe(Unsafe::DotSegment)),
            ("/srv/..?/etc", Unresolvable::Unsafe(Unsafe::DotSegment)),
            ("/srv/‥/etc", Unresolvable::Unsafe(Unsafe::Compatibility('‥'))),
            ("/srv／prod", Unresolvable::Unsafe(Unsafe::Compatibility('／'))),
            ("/srv/．．/etc", Unresolvable::Unsafe(Unsafe::Compatibility('．'))),
            ("srv/prod", Unresolvable::Relative),
            ("./srv", Unresolvable::Relative),
            ("", Unresolvable::Relative),
        ] {
            assert_eq!(resolve_path(path), Err(why), "{path:?}");
        }
    }

    #[test]
    fn path_under_compares_segments_after_resolving_both() {
        let prod = "/srv/prod/";
        for inside in [
            "/srv/prod/db",
            "/srv/./prod/db",
            "//srv/prod/db",
            "/srv//prod/db",
            "/srv/x/../prod/db",
            "/srv/prod",
            "/srv/prod/",
            "/srv/prod/a/../b",
        ] {
            assert_eq!(path_under(inside, prod), Ok(true), "{inside}");
        }
        for outside in ["/srv/production", "/srv/prod/../dev/db", "/srv/prod/..", "/srv", "/etc/passwd", "/"] {
            assert_eq!(path_under(outside, prod), Ok(false), "{outside}");
        }
        // The brief's rule: `/tmp/a` covers `/tmp/a/b` and `/tmp/a`, not `/tmp/ab`.
        assert_eq!(path_under("/tmp/a/b", "/tmp/a"), Ok(true));
        assert_eq!(path_under("/tmp/a", "/tmp/a"), Ok(true));
        assert_eq!(path_under("/tmp/ab", "/tmp/a"), Ok(false));
        assert_eq!(path_under("/anything", "/"), Ok(true), "the root covers every path");
        assert_eq!(path_under("/tmp/../x", "/tmp/./../"), Ok(true), "the prefix is resolved too");
        assert_eq!(path_under("tmp/a", "/tmp/"), Err(UnderError::Value(Unresolvable::Relative)));
        assert_eq!(path_under("/tmp/a", "tmp"), Err(UnderError::Prefix(Unresolvable::Relative)));
        assert_eq!(
            path_under("/tmp/%2e%2e/etc", "/tmp/"),
            Err(UnderError::Value(Unresolvable::Unsafe(Unsafe::DotSegment)))
        );
    }

    #[test]
    fn url_under_parses_both_as_whatwg_does() {
        let api = "https://api.example.com/v1/";
        for inside in [
            "https://api.example.com/v1/items",
            "https://API.example.com/v1/items",
            "https://api.example.com:443/v1/items",
            "https://api.example.com/v1/./items",
            "https://api.example.com/v1/x/../items",
            "https://api.example.com//v1/items",
            "https://api.example.com/v1//items",
            "https://api.example.com/%76%31/items",
            "https://api.example.com/v1",
            "https://user:pw@api.example.com/v1/items",
            "https://api.example.com/v1/items?q=1#f",
        ] {
            assert_eq!(url_under(inside, api), Ok(true), "{inside}");
        }
        for outside in [
            "https://api.example.com/v1/../admin",
            "https://api.example.com/v1/..",
            "https://api.example.com/v10/items",
            "http://api.example.com/v1/items",
            "https://api.example.com:8443/v1/items",
            "https://api.example.com.evil.example/v1/items",
            "https://api.example.com@evil.example/v1/items",
            "https://evil.example/v1/items",
        ] {
            assert_eq!(url_under(outside, api), Ok(false), "{outside}");
        }
        for (unsafe_value, why) in [
            ("https://api.example.com/v1/%2e%2e/admin", Unsafe::DotSegment),
            ("https://api.example.com/v1/..%2fadmin", Unsafe::EncodedSeparator),
            ("https://api.example.com/v1\\..\\admin", Unsafe::Backslash),
            ("https://api.example.com/v1/..;/admin", Unsafe::DotSegment),
            ("https://api.example.com/v1/\t../admin", Unsafe::Control),
            ("https://api.example.com/v1/．．/admin", Unsafe::Compatibility('．')),
        ] {
            assert_eq!(
                url_under(unsafe_value, api),
                Err(UnderError::Value(Unresolvable::Unsafe(why))),
                "{unsafe_value}"
            );
        }
        assert_eq!(url_under("/v1/items", api), Err(UnderError::Value(Unresolvable::NotUrl)));
        assert_eq!(url_under("https://x/", "mailto:a@b"), Err(UnderError::Prefix(Unresolvable::NotUrl)));
        assert_eq!(url_under("https://api.example.com/anything", "https://api.example.com"), Ok(true));
    }

    #[test]
    fn url_host_is_the_host_a_receiver_connects_to() {
        assert_eq!(url_host("https://API.Example.com/x").as_deref(), Ok("api.example.com"));
        assert_eq!(url_host("https://api.example.com:443@evil.example/").as_deref(), Ok("evil.example"));
        assert_eq!(url_host("http://0x7f.1/").as_deref(), Ok("127.0.0.1"));
        assert_eq!(url_host("http://[::1]:8080/").as_deref(), Ok("[::1]"));
        assert_eq!(url_host("https://evil.example\\@good.example/"), Err(Unresolvable::Unsafe(Unsafe::Backslash)));
        assert_eq!(url_host("mailto:a@example.com"), Err(Unresolvable::NoHost));
        assert_eq!(url_host("example.com/x"), Err(Unresolvable::NotUrl));
    }
}
