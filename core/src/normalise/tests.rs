//! Unit tests of [`super`].

use super::*;

const API: &str = "https://api.example.com/v1/";

fn under(value: &str, prefix: &str) -> bool {
    check_under(value, prefix).is_ok()
}

#[test]
fn a_url_prefix_covers_only_what_a_url_parser_keeps_under_it() {
    for inside in [
        "https://api.example.com/v1/",
        "https://api.example.com/v1/items",
        "https://api.example.com/v1/items?q=1",
        "https://api.example.com/v1/a/b#frag",
        "https://api.example.com/v1/a..b/...",
        "https://api.example.com/v1/file.txt?x=a.b",
    ] {
        assert_eq!(check_under(inside, API), Ok(()), "{inside}");
    }
    for outside in [
        // The four: a URL parser resolves each to https://api.example.com/?x.
        "https://api.example.com/v1/..?x",
        "https://api.example.com/v1/..#f",
        "https://api.example.com/v1/%2e%2e?x",
        "https://api.example.com/v1/.%2E#",
        // Other spellings of a way out.
        "https://api.example.com/v1/../admin",
        "https://api.example.com/v1/./items",
        "https://api.example.com/v1/.",
        "https://api.example.com/v1/%2E%2e/admin",
        "https://api.example.com/v1/%2e./admin",
        "https://api.example.com/v1/%252e%252e/admin",
        "https://api.example.com/v1/a%2fb",
        "https://api.example.com/v1/a%2F..%2Fadmin",
        "https://api.example.com/v1/a%5Cb",
        "https://api.example.com/v1/a%252fb",
        "https://api.example.com/v1/..\\admin",
        "https://api.example.com/v1/\\..\\admin",
        "https://api.example.com/v1/.\t./admin",
        "https://api.example.com/v1/..\n/admin",
        "https://api.example.com/v1/a%00b",
        "https://api.example.com/v1/.. ",
        "https://api.example.com/v1/..;/admin",
        // Unicode compatibility forms of `.` and `/` (NFKC), also encoded.
        "https://api.example.com/v1/‥/admin",
        "https://api.example.com/v1/．．/admin",
        "https://api.example.com/v1/..／admin",
        "https://api.example.com/v1/%EF%BC%8E%EF%BC%8E/admin",
        "https://api.example.com/v1/﹒﹒/admin",
        // Elsewhere.
        "https://api.example.com/v2/items",
        "https://api.example.com/",
        "http://api.example.com/v1/items",
    ] {
        assert!(!under(outside, API), "{outside:?} passed");
    }
}

#[test]
fn a_url_prefix_holds_its_host_port_and_path_at_a_boundary() {
    let host = "https://api.example.com";
    assert!(under("https://api.example.com/anything", host));
    assert!(under("https://api.example.com", host));
    for outside in [
        "https://api.example.com.evil.example/",
        "https://api.example.com@evil.example/",
        "https://api.example.com:8443/",
        "https://api.example.com:443@evil.example/",
    ] {
        assert!(!under(outside, host), "{outside:?} passed");
    }
    let v1 = "https://api.example.com/v1";
    for inside in ["https://api.example.com/v1", "https://api.example.com/v1/x", "https://api.example.com/v1?q=1"] {
        assert!(under(inside, v1), "{inside}");
    }
    assert_eq!(check_under("https://api.example.com/v1-admin", v1), Err(PrefixError::OutsideUrl));
    let search = "https://api.example.com/search?q=";
    assert!(under("https://api.example.com/search?q=cats", search));
    assert!(!under("https://api.example.com/search/more?q=cats", search));
}

#[test]
fn a_path_prefix_covers_what_is_under_it_and_no_way_out() {
    let tmp = "/tmp/";
    for inside in ["/tmp/a", "/tmp/a/b.txt", "/tmp/...", "/tmp/a..b", "/tmp//a", "/tmp/.hidden"] {
        assert_eq!(check_under(inside, tmp), Ok(()), "{inside}");
    }
    for outside in [
        "/etc/passwd",
        "/tmp/../etc/passwd",
        "/tmp/a/../../etc",
        "/tmp/..",
        "/tmp/.",
        "/tmp/./a",
        "/tmp/%2e%2e/etc",
        "/tmp/%2E%2e%2Fetc",
        "/tmp/%252e%252e/etc",
        "/tmp/a%2fb",
        "/tmp/..\\windows",
        "/tmp/a\0",
        "/tmp/a\nb",
        "/tmp/..?x",
        "/tmp/..#x",
        "/tmp/‥/etc",
        "/tmp/．．/etc",
        "/tmp/a／..／..／etc",
        "/tmpfoo",
    ] {
        assert!(!under(outside, tmp), "{outside:?} passed");
    }
    // Without a trailing slash, the prefix names a segment.
    assert!(under("/tmp/a", "/tmp/a") && under("/tmp/a/b", "/tmp/a"));
    assert_eq!(check_under("/tmp/ab", "/tmp/a"), Err(PrefixError::OutsidePath));
    // An ambiguous prefix covers nothing.
    assert!(matches!(check_under("/tmp/../x", "/tmp/../"), Err(PrefixError::Prefix(Unsafe::DotSegment))));
}

#[test]
fn a_text_prefix_is_a_plain_start_without_ways_out() {
    assert!(under("SELECT * FROM logs", "SELECT "));
    assert!(!under("DROP TABLE logs", "SELECT "));
    assert!(under("src/main.rs", "src/"));
    assert!(!under("src/../secrets", "src/"));
    assert!(!under("src/%2e%2e/secrets", "src/"));
}

#[test]
fn exact_compares_as_written_and_prefix_as_read() {
    assert!(arg_matches(&ArgMatch::Exact("a".into()), "a"));
    assert!(!arg_matches(&ArgMatch::Exact("a".into()), "ab"));
    assert!(arg_matches(&ArgMatch::Prefix(API.into()), "https://api.example.com/v1/items"));
    assert!(!arg_matches(&ArgMatch::Prefix(API.into()), "https://api.example.com/v1/..?x"));
}

#[test]
fn resource_uris_get_one_spelling() {
    for (written, normal) in [
        ("file:///srv/../etc/passwd", "file:///etc/passwd"),
        ("file:///./etc/passwd", "file:///etc/passwd"),
        ("file:////etc/passwd", "file:///etc/passwd"),
        ("file:///etc//passwd", "file:///etc/passwd"),
        ("file:///../../etc/passwd", "file:///etc/passwd"),
        ("file:///srv//../etc/passwd", "file:///etc/passwd"),
        ("FILE:///etc/passwd", "file:///etc/passwd"),
        ("file://localhost/etc/passwd", "file:///etc/passwd"),
        ("file:///%65tc/passwd", "file:///etc/passwd"),
        ("HTTPS://User@Example.COM:8080/A/%7euser/%41b%3f", "https://User@example.com:8080/A/~user/Ab%3F"),
        ("file:///a/b/..", "file:///a/"),
        ("file:///a/.", "file:///a/"),
        ("file:///a/..", "file:///"),
        ("test://static-text", "test://static-text"),
        ("test://template/abc/data", "test://template/abc/data"),
        ("test://x/a?b=..&c=1.2#sec.2", "test://x/a?b=..&c=1.2#sec.2"),
        ("urn:isbn:0451450523", "urn:isbn:0451450523"),
        ("test:a/../b", "test:b"),
        ("file:///a%20b.txt", "file:///a%20b.txt"),
    ] {
        assert_eq!(resource_uri(written).as_deref(), Ok(normal), "{written}");
    }
}

#[test]
fn resource_uris_that_cannot_be_normalised_safely_are_refused() {
    for (uri, why) in [
        ("file:///srv/%2e%2e/etc/passwd", Unsafe::DotSegment),
        ("file:///srv/.%2E/etc/passwd", Unsafe::DotSegment),
        ("file:///srv/%2E/etc/passwd", Unsafe::DotSegment),
        ("file:///etc%2fpasswd", Unsafe::EncodedSeparator),
        ("file:///etc%2Fpasswd", Unsafe::EncodedSeparator),
        ("file:///srv/..%5c..%5cetc", Unsafe::EncodedSeparator),
        ("file:///srv/%252e%252e/etc", Unsafe::DotSegment),
        ("file:///srv/a%252fb", Unsafe::EncodedSeparator),
        ("file:///srv\\..\\etc\\passwd", Unsafe::Backslash),
        ("file:///etc/pass\nwd", Unsafe::Control),
        ("file:///etc/passwd%00.txt", Unsafe::Control),
        ("file:///srv/‥/etc/passwd", Unsafe::Compatibility('‥')),
        ("file:///srv/．．/etc/passwd", Unsafe::Compatibility('．')),
        ("file:///srv/..／etc/passwd", Unsafe::Compatibility('／')),
        ("file:///a/%zz", Unsafe::BadEscape),
        ("file:///a/%4", Unsafe::BadEscape),
        // An upstream may read the query or fragment as part of the path.
        ("file:///srv/x?/../../etc/passwd", Unsafe::DotSegment),
        ("file:///x#/../etc/passwd", Unsafe::DotSegment),
        ("file:///x?%2F..%2Fetc%2Fpasswd", Unsafe::EncodedSeparator),
    ] {
        assert_eq!(resource_uri(uri), Err(UriError::Unsafe(why)), "{uri}");
    }
    for uri in ["/etc/passwd", "etc/passwd", "1file:///x", ":x", "a/b:c"] {
        assert_eq!(resource_uri(uri), Err(UriError::NoScheme), "{uri}");
    }
    assert_eq!(resource_uri(&format!("file:///{}", "a".repeat(MAX_URI_BYTES))), Err(UriError::TooLong));
    for uri in ["file://etc/passwd", "file://../etc/passwd", "FILE://Example.com/etc/passwd"] {
        assert_eq!(resource_uri(uri), Err(UriError::FileHost), "{uri}");
    }
}

#[test]
fn dot_segment_removal_follows_rfc_3986() {
    // RFC 3986 §5.2.4's own examples, and the edges.
    assert_eq!(remove_dot_segments("/a/b/c/./../../g"), "/a/g");
    assert_eq!(remove_dot_segments("mid/content=5/../6"), "mid/6");
    assert_eq!(remove_dot_segments("/"), "/");
    assert_eq!(remove_dot_segments(""), "");
    assert_eq!(remove_dot_segments("/a/"), "/a/");
    assert_eq!(remove_dot_segments("/.."), "/");
}
