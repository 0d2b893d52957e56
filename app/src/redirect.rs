//! Where the browser may be sent after signing in: only a path on this site.

/// `next` if it is a path on this site, else `None`.
///
/// Browsers resolve `//host` and `/\host` to another host, and drop tabs and
/// newlines anywhere in a URL (so `/\t/evil.com` becomes `//evil.com`): only
/// a single `/` followed by visible ASCII without backslashes is accepted.
/// Percent-encoded characters stay part of the path and are fine.
pub fn safe_next(next: &str) -> Option<&str> {
    let mut chars = next.chars();
    let plain = next.chars().all(|c| c.is_ascii_graphic() && c != '\\');
    (chars.next() == Some('/') && !matches!(chars.next(), Some('/')) && plain).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_same_site_paths_pass() {
        for ok in ["/", "/approvals", "/?x=1", "/resume/exec_1?mcp_session_id=a", "/%09/evil.com", "/a//b"] {
            assert_eq!(safe_next(ok), Some(ok), "{ok:?}");
        }
        for bad in [
            "",
            "//evil.com",
            "/\\evil.com",
            "\\/evil.com",
            "/\t/evil.com",
            "/\n/evil.com",
            "/a\\b",
            "https://evil.com",
            "javascript:alert(1)",
            " /x",
            "/ x",
            "/é",
        ] {
            assert_eq!(safe_next(bad), None, "{bad:?}");
        }
    }
}
