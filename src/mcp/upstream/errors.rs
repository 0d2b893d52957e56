//! Error text from upstreams as Gatehouse shows it: one line with its
//! causes, never a secret an upstream's URL carries, and names from an
//! upstream quoted short and few at a time.

/// An error and its causes, on one line (a cause already quoted by the
/// message before it is not repeated).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !text.contains(&part) {
            text = format!("{text}: {part}");
        }
        source = cause.source();
    }
    text
}

/// `text` with every URL's credentials (`user:pass@`), query and fragment
/// removed, so an upstream's error never shows a secret its URL carries.
pub fn sanitize(text: &str) -> String {
    let ends_url = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let scheme = rest[..at].bytes().rev().take_while(|b| b.is_ascii_alphanumeric() || b"+-.".contains(b)).count();
        out.push_str(&rest[..at + 3]);
        rest = &rest[at + 3..];
        if scheme == 0 {
            continue;
        }
        let (url, after) = rest.split_at(rest.find(ends_url).unwrap_or(rest.len()));
        let (authority, path) = url.split_at(url.find(['/', '?', '#']).unwrap_or(url.len()));
        out.push_str(authority.rsplit_once('@').map_or(authority, |(_, host)| host));
        match path.find(['?', '#']) {
            Some(query) => {
                out.push_str(&path[..query]);
                // Punctuation closing the text around the URL stays: "(http://h/p?k=v)".
                let cut = &path[query..];
                out.push_str(&cut[cut.trim_end_matches([')', ']', '}', '.', ',', ';', ':']).len()..]);
            }
            None => out.push_str(path),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// How many refused names or name collisions one message quotes.
const QUOTED_NAMES: usize = 3;

/// The first few of `items` joined by `separator`, and how many more there are.
pub(super) fn summary(items: &[String], separator: &str) -> String {
    let mut text = items.iter().take(QUOTED_NAMES).map(String::as_str).collect::<Vec<_>>().join(separator);
    if items.len() > QUOTED_NAMES {
        text.push_str(&format!(" (and {} more)", items.len() - QUOTED_NAMES));
    }
    text
}

/// An upstream's failure as a person reads it: what failed and where, not
/// the Rust types of the transport it failed in. `at` is where the upstream
/// is (`127.0.0.1:8931`, or its command); `stderr` its last stderr line,
/// for a stdio upstream.
pub(crate) fn in_words(text: &str, at: &str, stderr: Option<&str>) -> String {
    let lower = text.to_lowercase();
    let said = if lower.contains("connection refused") {
        format!("connection refused at {at}")
    } else if lower.contains("timed out") || lower.contains("deadline has elapsed") {
        format!("no answer from {at} in time")
    } else if lower.contains("dns error") || lower.contains("failed to lookup address") {
        format!("cannot find the host of {at}")
    } else if lower.contains("error sending request") {
        // reqwest's own message hides its cause (refused, reset, TLS, DNS).
        format!("cannot reach {at}: the connection failed")
    } else if lower.contains("certificate") {
        format!("the TLS certificate of {at} is not trusted: {}", plain(text))
    } else {
        plain(text)
    };
    match stderr {
        Some(line) if !line.is_empty() => format!("{said}; its last stderr line: {line}"),
        _ => said,
    }
}

/// `text` without bracketed Rust type paths (`[a::b::C<D>]`), `(os error
/// N)` suffixes and the blank runs they leave.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        // The bracket's own end, nested brackets and generics included.
        let mut depth = 0usize;
        let close = rest[open..].char_indices().find_map(|(i, c)| {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(open + i);
                    }
                }
                _ => {}
            }
            None
        });
        let Some(close) = close else { break };
        let inside = &rest[open + 1..close];
        out.push_str(&rest[..open]);
        if !inside.contains("::") {
            out.push_str(&rest[open..=close]);
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    while let Some(at) = out.find(" (os error ") {
        let end = out[at..].find(')').map_or(out.len(), |e| at + e + 1);
        out.replace_range(at..end, "");
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A name from an upstream as it may be quoted: escaped and cut short.
pub(super) fn quoted(name: &str) -> String {
    let cut: String = name.chars().take(64).collect();
    if cut.len() < name.len() { format!("{cut:?}…") } else { format!("{cut:?}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_read_as_words() {
        let rmcp = "Send message error Transport [gatehouse::mcp::upstream::relay::InOrder<rmcp::transport::worker::WorkerTransport<rmcp::transport::streamable_http_client::StreamableHttpClientWorker<reqwest::Client>>>] error: Client error: error sending request for url (http://127.0.0.1:1/mcp): tcp connect error: Connection refused (os error 111)";
        assert_eq!(in_words(rmcp, "127.0.0.1:1", None), "connection refused at 127.0.0.1:1");
        let hidden = "http://127.0.0.1:9/mcp: initialize failed: Send message error Transport error: Client error: error sending request for url (http://127.0.0.1:9/mcp), when send discover request";
        assert_eq!(in_words(hidden, "127.0.0.1:9", None), "cannot reach 127.0.0.1:9: the connection failed");
        assert_eq!(plain("Transport [a::B<c::D>] closed (os error 32) [kept]"), "Transport closed [kept]");
        assert_eq!(in_words("ended: Closed", "server.js", Some("boom")), "ended: Closed; its last stderr line: boom");
    }

    #[test]
    fn sanitize_removes_url_credentials_queries_and_fragments() {
        assert_eq!(
            sanitize("error sending request for url (http://user:secret@127.0.0.1:1/mcp?key=secret)"),
            "error sending request for url (http://127.0.0.1:1/mcp)"
        );
        assert_eq!(sanitize("https://tok@h.example/a/b#frag and more"), "https://h.example/a/b and more");
        assert_eq!(sanitize("http://a:b@h?x=1"), "http://h");
        assert_eq!(sanitize("\"https://u:p@x:8443/p?q=s\": refused"), "\"https://x:8443/p\": refused");
        assert_eq!(sanitize("two: http://a@h/x?1 https://b@k/y?2."), "two: http://h/x https://k/y.");
        let plain = "connection refused (os error 111); no URL here: a@b ?q";
        assert_eq!(sanitize(plain), plain);
        assert_eq!(sanitize("weird ://x@y?z"), "weird ://x@y?z");
    }

    #[test]
    fn error_chains_do_not_repeat_a_quoted_cause() {
        let inner = std::io::Error::other("refused");
        let outer = crate::mcp::upstream::link::LinkError::Spawn { command: "x".into(), source: inner };
        assert_eq!(error_chain(&outer), "cannot start \"x\": refused");
    }
}
