//! Values compared the way their receiver will read them (DESIGN §12: "a
//! constraint holds on the value as its receiver will read it").
//!
//! - **Grant prefixes.** [`check_under`] (and [`arg_matches`], what the gate
//!   uses) says whether a string argument is under a granted prefix: it must
//!   start with the prefix as written, carry nothing a parser or a file
//!   system could resolve differently (dot segments — also before `?` or `#`,
//!   percent-encoded or double-encoded —, encoded separators, backslashes,
//!   control characters, Unicode compatibility forms of `.`, `/` and the
//!   like), and, parsed the way the upstream will parse it (WHATWG URL for a
//!   URL prefix, POSIX path rules for an absolute path prefix), still be under
//!   the prefix at a segment boundary. Nothing is rewritten: the value the
//!   upstream receives is the one checked, which is why anything ambiguous is
//!   refused rather than resolved.
//! - **Resource URIs.** [`resource_uri`] gives a `resources/read` (or
//!   subscribe) URI its one normal spelling (RFC 3986 §6.2.2: scheme and host
//!   in lower case, unreserved characters percent-decoded, hex digits in upper
//!   case, repeated slashes collapsed, dot segments removed per §5.2.4), so
//!   `resource:` rules match it and routing uses it however the agent spelled
//!   it; a URI that cannot be normalised safely (encoded `/` or `\`, an
//!   encoded dot segment, a backslash, a control character, a compatibility
//!   form, a malformed escape, no scheme) is refused.
//! - **Conditions.** [`path_under`], [`url_under`] and [`url_host`] resolve
//!   a value as its receiver does (dot segments, repeated slashes, WHATWG
//!   parsing) and refuse what receivers read differently ([`Unresolvable`]);
//!   a rule's `when` calls them (`resolve.rs`).

use gatehouse_model::ArgMatch;
use unicode_normalization::UnicodeNormalization;
use url::Url;

mod resolve;

pub use resolve::{UnderError, Unresolvable, path_under, resolve_path, resolve_url, url_host, url_under};

/// Longest resource URI [`resource_uri`] accepts, in bytes.
pub const MAX_URI_BYTES: usize = 8192;

/// How many rounds of percent-decoding a grant value is looked through (so
/// `%252e%252e` is seen as the `..` a double-decoding upstream would read).
const DECODE_ROUNDS: usize = 3;

/// Something in a value that a parser, a file system or a normalising
/// upstream could read differently from the way it is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsafe {
    /// A control character (also percent-encoded): a NUL cuts a path short,
    /// a tab or newline is dropped by URL parsers.
    #[error("it holds a control character")]
    Control,
    /// A backslash (also percent-encoded): a separator for WHATWG URLs of
    /// special schemes and for Windows paths.
    #[error("it holds a backslash")]
    Backslash,
    /// A percent-encoded `/` or `\` (also double-encoded), or an encoded
    /// `%` that hides one.
    #[error("it holds a percent-encoded separator")]
    EncodedSeparator,
    /// A `.` or `..` segment, plain or percent-encoded, anywhere in the value.
    #[error("it holds a `.` or `..` segment")]
    DotSegment,
    /// A `%` not followed by two hex digits (resource URIs only).
    #[error("it holds a malformed percent escape")]
    BadEscape,
    /// A character that Unicode compatibility normalisation (NFKC) turns into
    /// `.`, `/`, `\` or another separator (`‥`, `．`, `／`, …).
    #[error("it holds {0:?}, which Unicode compatibility normalisation turns into a separator or a dot")]
    Compatibility(char),
}

/// Why a value is not covered by a granted prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// The prefix itself is ambiguous, so it covers nothing.
    #[error("the prefix cannot be checked safely: {0}")]
    Prefix(Unsafe),
    /// The value is ambiguous.
    #[error("the value cannot be checked safely: {0}")]
    Value(Unsafe),
    /// The value does not start with the prefix as written.
    #[error("the value does not start with the prefix")]
    NotPrefixed,
    /// Parsed as a URL (WHATWG), the value is not under the prefix's scheme,
    /// host, port and path.
    #[error("parsed as a URL, the value is not under the prefix")]
    OutsideUrl,
    /// Parsed as a path (POSIX), the value is not under the prefix.
    #[error("parsed as a path, the value is not under the prefix")]
    OutsidePath,
}

/// Why a resource URI was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    /// Not an absolute URI: no `scheme:` in front.
    #[error("it is not an absolute URI (no scheme)")]
    NoScheme,
    /// Longer than [`MAX_URI_BYTES`].
    #[error("it is longer than {} bytes", MAX_URI_BYTES)]
    TooLong,
    /// A `file` URI naming a host other than `localhost` (`file://etc/passwd`
    /// is a relative path to an upstream that cuts `file://` off).
    #[error("a file URI may name no host but localhost")]
    FileHost,
    /// It holds something that cannot be normalised safely.
    #[error("{0}")]
    Unsafe(#[from] Unsafe),
}

/// Whether a grant's constraint `want` holds for the string argument
/// `value`: an exact value compares as written; a prefix as [`check_under`]
/// says. What the gate calls for every grant lookup.
pub fn arg_matches(want: &ArgMatch, value: &str) -> bool {
    match want {
        ArgMatch::Exact(exact) => value == exact,
        ArgMatch::Prefix(prefix) => check_under(value, prefix).is_ok(),
    }
}

/// Whether `value` is under `prefix`, as its receiver will read it (see the
/// module documentation), or why not. Both must be free of anything
/// ambiguous ([`Unsafe`]); `value` must start with `prefix` as written; and
/// then, by the kind of prefix:
/// - an absolute URL with a path (`https://api.example.com/v1/`): `value`
///   parsed as a WHATWG URL has the same scheme, host, port and user, and a
///   path under the prefix's path at a segment boundary (a prefix with a
///   query or fragment: the same path);
/// - an absolute path (`/tmp/`): with repeated slashes collapsed, `value`
///   is the prefix or below it at a `/`;
/// - anything else (plain text): starting with it is enough.
pub fn check_under(value: &str, prefix: &str) -> Result<(), PrefixError> {
    check_text(prefix).map_err(PrefixError::Prefix)?;
    check_text(value).map_err(PrefixError::Value)?;
    if !value.starts_with(prefix) {
        return Err(PrefixError::NotPrefixed);
    }
    if let Some(base) = Url::parse(prefix).ok().filter(|u| !u.cannot_be_a_base()) {
        let parsed = Url::parse(value).map_err(|_| PrefixError::OutsideUrl)?;
        return if url_is_under(&parsed, &base) { Ok(()) } else { Err(PrefixError::OutsideUrl) };
    }
    if prefix.starts_with('/') {
        return if segment_under(&collapse_slashes(value), &collapse_slashes(prefix)) {
            Ok(())
        } else {
            Err(PrefixError::OutsidePath)
        };
    }
    Ok(())
}

/// Checks a grant value (or prefix) for anything ambiguous: as written and
/// after each of up to three rounds of percent-decoding, it may hold no
/// control character, backslash, compatibility form of a separator, newly
/// decoded `/`, nor any `.` or `..` segment (segments end at `/`, `?` and
/// `#`; one is read up to its first `;` and trimmed of spaces).
pub fn check_text(text: &str) -> Result<(), Unsafe> {
    let mut layer = text.to_string();
    let slashes = text.matches('/').count();
    for round in 0..=DECODE_ROUNDS {
        check_chars(&layer)?;
        if round > 0 && layer.matches('/').count() > slashes {
            return Err(Unsafe::EncodedSeparator);
        }
        if has_dot_segment(&layer) {
            return Err(Unsafe::DotSegment);
        }
        let next = percent_decode(&layer);
        if next == layer {
            break;
        }
        layer = next;
    }
    Ok(())
}

/// The normal spelling of a resource URI (RFC 3986 §6.2.2 and §5.2.4):
/// scheme and host in lower case (a `file` URI's `localhost` host dropped),
/// percent-encoded unreserved characters decoded and other escapes in upper
/// case, repeated slashes in the path collapsed, then dot segments removed;
/// query and fragment kept apart from their escapes. Refused
/// ([`UriError`]): no scheme, too long, a `file` URI with a host, a control character or backslash
/// anywhere, a compatibility form of a separator (also percent-encoded), a
/// malformed escape, or in the path an encoded `/` or `\` (also
/// double-encoded) or a dot segment spelled with an escape (`%2e%2e`,
/// `.%2E`).
pub fn resource_uri(uri: &str) -> Result<String, UriError> {
    if uri.len() > MAX_URI_BYTES {
        return Err(UriError::TooLong);
    }
    check_chars(uri)?;
    let colon = uri.find(':').ok_or(UriError::NoScheme)?;
    let scheme = &uri[..colon];
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return Err(UriError::NoScheme);
    }
    let scheme = scheme.to_ascii_lowercase();
    let rest = &uri[colon + 1..];
    let (rest, fragment) = match rest.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (rest, None),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match rest.strip_prefix("//") {
        Some(after) => {
            let end = after.find('/').unwrap_or(after.len());
            (Some(&after[..end]), &after[end..])
        }
        None => (None, rest),
    };

    let mut out = scheme.clone();
    out.push(':');
    if let Some(authority) = authority {
        let authority = match authority.rsplit_once('@') {
            Some((user, host)) => format!("{user}@{}", host.to_ascii_lowercase()),
            None => authority.to_ascii_lowercase(),
        };
        let mut authority = percent_normalise(&authority)?;
        if scheme == "file" && authority == "localhost" {
            authority.clear();
        }
        if scheme == "file" && !authority.is_empty() {
            return Err(UriError::FileHost);
        }
        out.push_str("//");
        out.push_str(&authority);
    }
    for segment in path.split('/') {
        check_path_segment(segment)?;
    }
    let path = collapse_slashes(&percent_normalise(path)?);
    out.push_str(&remove_dot_segments(&path));
    // An upstream that maps URIs to paths may read the query or fragment
    // as part of the path (`file:///srv/x?/../../etc/passwd`): no dot
    // segment or encoded separator there either.
    if let Some(query) = query {
        check_text(query)?;
        out.push('?');
        out.push_str(&percent_normalise(query)?);
    }
    if let Some(fragment) = fragment {
        check_text(fragment)?;
        out.push('#');
        out.push_str(&percent_normalise(fragment)?);
    }
    Ok(out)
}

/// Whether URL `value` is under URL `base`: same scheme, host, port (the
/// scheme's default filled in), user name and password; a path under the
/// base's path at a segment boundary, or, when the base has a query or a
/// fragment, the same path and a serialisation that starts with the base's.
fn url_is_under(value: &Url, base: &Url) -> bool {
    let same_origin = value.scheme() == base.scheme()
        && value.host() == base.host()
        && value.port_or_known_default() == base.port_or_known_default()
        && value.username() == base.username()
        && value.password() == base.password();
    if !same_origin {
        return false;
    }
    if base.query().is_some() || base.fragment().is_some() {
        return value.path() == base.path() && value.as_str().starts_with(base.as_str());
    }
    segment_under(value.path(), base.path())
}

/// Whether `path` is `base` or below it: `base` ends with `/`, or `path`
/// equals it or continues with `/`.
fn segment_under(path: &str, base: &str) -> bool {
    match path.strip_prefix(base) {
        Some(rest) => base.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// `path` with every run of `/` made one.
fn collapse_slashes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if c != '/' || !out.ends_with('/') {
            out.push(c);
        }
    }
    out
}

/// Refuses control characters, backslashes and non-ASCII characters whose
/// compatibility form holds a separator or a dot.
fn check_chars(text: &str) -> Result<(), Unsafe> {
    for c in text.chars() {
        if c.is_control() {
            return Err(Unsafe::Control);
        }
        if c == '\\' {
            return Err(Unsafe::Backslash);
        }
        if compatibility_separator(c) {
            return Err(Unsafe::Compatibility(c));
        }
    }
    Ok(())
}

/// Whether non-ASCII `c`'s NFKC form holds `.`, `/`, `\`, `%`, `?`, `#`,
/// `:`, `;`, `@` or a control character (`‥` → `..`, `／` → `/`, `﹖` → `?`).
fn compatibility_separator(c: char) -> bool {
    !c.is_ascii()
        && c.nfkc().any(|n| matches!(n, '.' | '/' | '\\' | '%' | '?' | '#' | ':' | ';' | '@') || n.is_control())
}

/// Whether `text` holds a `.` or `..` segment: split at `/`, `?`, `#`, a
/// segment cut at its first `;` (a path parameter, `..;/` on some servers)
/// and trimmed of ASCII whitespace is `.` or `..`.
fn has_dot_segment(text: &str) -> bool {
    text.split(['/', '?', '#']).any(|segment| {
        let segment = segment.split(';').next().unwrap_or_default();
        matches!(segment.trim_matches(|c: char| c.is_ascii_whitespace()), "." | "..")
    })
}

/// One round of percent-decoding: every `%XX` with two hex digits becomes
/// its byte; the rest is kept; invalid UTF-8 becomes U+FFFD.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(high), Some(low)) = (hex_at(bytes, i + 1), hex_at(bytes, i + 2))
        {
            out.push(high * 16 + low);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of the hex digit at `bytes[i]`, if there is one.
fn hex_at(bytes: &[u8], i: usize) -> Option<u8> {
    bytes.get(i).and_then(|b| char::from(*b).to_digit(16)).map(|d| d as u8)
}

/// One path segment of a resource URI, as written: no encoded `/` or `\`,
/// none hidden behind an encoded `%`, no encoded control character or
/// compatibility form, and no dot segment spelled with an escape.
fn check_path_segment(segment: &str) -> Result<(), Unsafe> {
    if !segment.contains('%') {
        return Ok(());
    }
    let once = percent_decode(segment);
    let twice = percent_decode(&once);
    for decoded in [&once, &twice] {
        if decoded.contains(['/', '\\']) {
            return Err(Unsafe::EncodedSeparator);
        }
        check_chars(decoded)?;
        if matches!(decoded.as_str(), "." | "..") {
            return Err(Unsafe::DotSegment);
        }
    }
    Ok(())
}

/// RFC 3986 §6.2.2.1–2: decodes `%XX` of unreserved characters
/// (`A-Z a-z 0-9 - . _ ~`), writes other escapes' hex digits in upper case,
/// and refuses a `%` without two hex digits.
fn percent_normalise(text: &str) -> Result<String, Unsafe> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let (Some(high), Some(low)) = (hex_at(bytes, i + 1), hex_at(bytes, i + 2)) else {
                return Err(Unsafe::BadEscape);
            };
            let byte = high * 16 + low;
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
                out.push(char::from(byte));
            } else {
                out.push_str(&format!("%{byte:02X}"));
            }
            i += 3;
        } else {
            // `i` is on a character boundary: escapes are three ASCII bytes.
            let Some(c) = text[i..].chars().next() else { break };
            out.push(c);
            i += c.len_utf8();
        }
    }
    Ok(out)
}

/// RFC 3986 §5.2.4 on a path without empty segments inside: `.` segments
/// go, a `..` segment takes the one before it (never above the root), and a
/// path that ended in one ends with `/`.
fn remove_dot_segments(path: &str) -> String {
    let (absolute, body) = match path.strip_prefix('/') {
        Some(body) => (true, body),
        None => (false, path),
    };
    let segments: Vec<&str> = body.split('/').collect();
    let last = segments.len().saturating_sub(1);
    let mut kept: Vec<&str> = Vec::with_capacity(segments.len());
    let mut trailing_slash = false;
    for (i, segment) in segments.iter().enumerate() {
        match *segment {
            "." => trailing_slash = i == last,
            ".." => {
                kept.pop();
                trailing_slash = i == last;
            }
            other => kept.push(other),
        }
    }
    let mut out = String::with_capacity(path.len());
    if absolute {
        out.push('/');
    }
    out.push_str(&kept.join("/"));
    if trailing_slash && !kept.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests;
