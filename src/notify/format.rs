//! What a message says and how each format shapes it. A message never
//! carries the call's arguments (they may hold secrets): only who, what,
//! the state, the approval link and the times.
//!
//! Names in a message come from outside (an agent's name is an OAuth
//! client's to choose): in what people read (Slack, ntfy) they are text
//! and nothing else — no mention, no link, no line of their own ([`plain`],
//! [`slack_text`], [`header_text`]) — so the one link in a message is
//! Gatehouse's own approval page, built from `public_url`.

use base64::Engine;
use gatehouse_core::model::{ExecutionId, State};
use hmac::{Hmac, KeyInit, Mac};
use serde::Serialize;
use sha2::Sha256;

use super::config::{Format, Target};

/// One thing that happened to an execution, as every target hears of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Notice {
    /// `execution.pending`, `execution.approved`, `execution.declined`, …
    pub event: String,
    /// `exec_…`
    pub execution_id: ExecutionId,
    /// Its state now.
    pub state: State,
    /// Exposed tool name.
    pub tool: String,
    /// Upstream server, if any.
    pub upstream: Option<String>,
    /// Agent name.
    pub agent: String,
    /// The agent's owner.
    pub owner: Option<String>,
    /// Who moved it (`user:ada`, `system`, `agent`), once it left pending.
    pub by: Option<String>,
    /// The approval page.
    pub link: String,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// RFC 3339 expiry of the pending call.
    pub expires_at: String,
    /// RFC 3339 time of this event.
    pub occurred_at: String,
}

impl Notice {
    /// One line for people (Slack, ntfy), every name passed through `name`.
    fn headline(&self, name: impl Fn(&str) -> String) -> String {
        let owner = self.owner.as_deref().map(|o| format!(" (owner {})", name(o))).unwrap_or_default();
        let (agent, tool) = (name(&self.agent), name(&self.tool));
        match self.state {
            State::Pending => format!("{agent}{owner} wants to run {tool} — approve or decline"),
            state => {
                let by = self.by.as_deref().map(|b| format!(" by {}", name(b))).unwrap_or_default();
                format!("{tool} of {agent}{owner}: {}{by}", state.as_str())
            }
        }
    }

    fn title(&self) -> String {
        let tool = plain(&self.tool);
        match self.state {
            State::Pending => format!("Approve {tool}?"),
            state => format!("{tool} {}", state.as_str()),
        }
    }
}

/// Word joiner (U+2060): invisible, and no chat or push client reads a
/// mention or a link across it.
const JOINER: char = '\u{2060}';

/// Invisible characters a name may hide things with (zero-width spaces and
/// joiners, direction marks and overrides, the byte order mark): dropped,
/// so that what is left is what a reader sees.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}' | '\u{00AD}')
}

/// A name from outside as plain text for people: on one line (control
/// characters and line separators become spaces), invisible characters
/// dropped, and a word joiner after each `@` (no `@channel`, `@here`,
/// `@everyone` or `<@U…>` mention) and each `<` (no `<!channel>`, `<url|label>`
/// or tag for whatever renders the text next), after `:` before `//` and after a `.`
/// between letters or digits (no `https://evil.example` or `evil.example`
/// link), and between `]` and `(` (no Markdown link).
pub fn plain(name: &str) -> String {
    let chars: Vec<char> = name
        .chars()
        .filter(|c| !invisible(*c))
        .map(|c| if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') { ' ' } else { c })
        .collect();
    let mut out = String::with_capacity(name.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        out.push(c);
        let next = chars.get(i + 1).copied();
        let previous = i.checked_sub(1).map(|p| chars[p]);
        let split = match c {
            '@' | '<' => true,
            ':' => next == Some('/'),
            '.' => previous.is_some_and(char::is_alphanumeric) && next.is_some_and(char::is_alphanumeric),
            ']' => next == Some('('),
            _ => false,
        };
        if split {
            out.push(JOINER);
        }
    }
    out
}

/// A name as Slack `mrkdwn` text: [`plain`], then `&`, `<` and `>` escaped
/// (Slack's control characters: `<!channel>`, `<@U…>` and `<url|label>`
/// stay text).
pub fn slack_text(name: &str) -> String {
    plain(name).replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A header value ntfy shows as `text`: [`plain`] (so no line break can end
/// the header), as is if it is printable ASCII, else — or if it looks like
/// an encoded word itself — as RFC 2047 encoded words (`=?UTF-8?B?…?=`,
/// each at most 75 characters), which ntfy decodes.
pub fn header_text(text: &str) -> String {
    let text = plain(text);
    if text.chars().all(|c| c == ' ' || c.is_ascii_graphic()) && !text.contains("=?") {
        return text;
    }
    // 45 bytes are 60 base64 characters: with `=?UTF-8?B?` and `?=`, 72.
    let mut words = Vec::new();
    let mut chunk = String::new();
    for c in text.chars() {
        if chunk.len() + c.len_utf8() > 45 {
            words.push(std::mem::take(&mut chunk));
        }
        chunk.push(c);
    }
    if !chunk.is_empty() {
        words.push(chunk);
    }
    words
        .iter()
        .map(|w| format!("=?UTF-8?B?{}?=", base64::engine::general_purpose::STANDARD.encode(w.as_bytes())))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A request ready to send: body and extra headers.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
    /// Headers besides `Content-Type`, signed headers included. Signatures
    /// are made per attempt ([`sign`]), so a retry carries a fresh timestamp.
    pub headers: Vec<(&'static str, String)>,
}

/// The request `target` gets for `notice`.
pub fn render(target: &Target, notice: &Notice) -> Outgoing {
    match target.format {
        Format::Json => Outgoing {
            content_type: "application/json",
            body: serde_json::to_string(notice).expect("a notice serialises"),
            headers: vec![("Gatehouse-Event", notice.event.clone())],
        },
        Format::Slack => Outgoing {
            content_type: "application/json",
            // The link is Gatehouse's own (`public_url`); only it is markup.
            body: serde_json::json!({ "text": format!("{} <{}|Open>", notice.headline(slack_text), notice.link) })
                .to_string(),
            headers: Vec::new(),
        },
        Format::Ntfy => {
            let (priority, tags) = match notice.state {
                State::Pending => ("high", "warning"),
                State::Approved | State::Running | State::Completed => ("default", "white_check_mark"),
                _ => ("default", "x"),
            };
            let mut headers = vec![
                // ntfy reads non-ASCII titles only RFC 2047-encoded.
                ("Title", header_text(&notice.title())),
                ("Click", notice.link.clone()),
                ("Tags", tags.to_string()),
                ("Priority", priority.to_string()),
            ];
            if let Some(token) = &target.secret {
                headers.push(("Authorization", format!("Bearer {token}")));
            }
            // Plain text (no `Markdown` header): names are text, and the
            // only link is `Click`, Gatehouse's own.
            Outgoing { content_type: "text/plain; charset=utf-8", body: notice.headline(plain), headers }
        }
    }
}

/// What a test message says (the console's "Send a test").
pub const TEST_TEXT: &str =
    "A test from Gatehouse: this target is reached. Calls that wait for a person will be announced here.";

/// The request `target` gets for a test (`base_url`: the console, linked):
/// event `test`, the same shape and signature as a real message, no call.
pub fn render_test(target: &Target, base_url: &str) -> Outgoing {
    let link = format!("{}/upstreams", base_url.trim_end_matches('/'));
    match target.format {
        Format::Json => Outgoing {
            content_type: "application/json",
            body: serde_json::json!({ "event": "test", "message": TEST_TEXT, "link": link }).to_string(),
            headers: vec![("Gatehouse-Event", "test".to_string())],
        },
        Format::Slack => Outgoing {
            content_type: "application/json",
            body: serde_json::json!({ "text": format!("{TEST_TEXT} <{link}|Open>") }).to_string(),
            headers: Vec::new(),
        },
        Format::Ntfy => {
            let mut headers =
                vec![("Title", "Gatehouse test".to_string()), ("Click", link), ("Tags", "bell".to_string())];
            if let Some(token) = &target.secret {
                headers.push(("Authorization", format!("Bearer {token}")));
            }
            Outgoing { content_type: "text/plain; charset=utf-8", body: TEST_TEXT.to_string(), headers }
        }
    }
}

/// The `Gatehouse-Signature` header value for `body` sent at `unix` seconds:
/// `t=<unix>,v1=<hex of HMAC-SHA256(secret, "<unix>.<body>")>`.
pub fn sign(secret: &str, unix: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(format!("{unix}.").as_bytes());
    mac.update(body.as_bytes());
    format!("t={unix},v1={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::config::{DEFAULT_TIMEOUT, Target};

    fn notice(state: State) -> Notice {
        Notice {
            event: format!("execution.{}", state.as_str()),
            execution_id: "exec_1".into(),
            state,
            tool: "files__write".into(),
            upstream: Some("files".into()),
            agent: "claude".into(),
            owner: Some("ada".into()),
            by: None,
            link: "https://gate.example/resume/exec_1".into(),
            created_at: "2026-11-30T14:00:00Z".into(),
            expires_at: "2026-11-30T14:10:00Z".into(),
            occurred_at: "2026-11-30T14:00:00Z".into(),
        }
    }

    fn target(format: Format) -> Target {
        Target {
            name: "t".into(),
            url: "https://x.example/hook".parse().unwrap(),
            format,
            secret: None,
            agents: vec![],
            tools: vec![],
            timeout: DEFAULT_TIMEOUT,
            enabled: true,
            from_file: true,
        }
    }

    #[test]
    fn the_signature_is_the_documented_hmac() {
        // Known answer: HMAC-SHA256("key", "1.{}") computed independently (python3 -c hmac…).
        assert_eq!(sign("key", 1, "{}"), "t=1,v1=1ba6b8171186efc613e8bcc0cbdab2748f24984d7c5a84faa2637afa0e40d224");
    }

    /// An OAuth client's name written to phish the approvers.
    const HOSTILE: &str = "<!channel> @here @everyone <@U024BE7LH> urgent \u{2014} <https://evil.example/resume|Approve here> or [Approve](https://evil.example/a)\r\nPriority: urgent \u{202E}evil.example";

    /// What must appear in no message people read.
    const NEVER: [&str; 15] = [
        "<!channel>",
        "<!here>",
        "<@U",
        "<https://evil.example",
        "@here",
        "@everyone",
        "@channel",
        "https://evil.example",
        "evil.example",
        "](",
        "\r",
        "\n",
        "\u{202E}",
        "[Approve](",
        "<!",
    ];

    fn hostile(state: State) -> Notice {
        Notice {
            agent: HOSTILE.into(),
            owner: Some(HOSTILE.into()),
            by: (state != State::Pending).then(|| format!("user:{HOSTILE}")),
            ..notice(state)
        }
    }

    /// An RFC 2047 header value as ntfy decodes it.
    fn decoded(header: &str) -> String {
        header
            .split(' ')
            .map(|w| match w.strip_prefix("=?UTF-8?B?").and_then(|w| w.strip_suffix("?=")) {
                Some(b64) => String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b64).unwrap()).unwrap(),
                None => panic!("not an encoded word: {w:?}"),
            })
            .collect()
    }

    #[test]
    fn a_name_is_text_in_every_format_never_a_mention_or_a_link() {
        const LINK: &str = "https://gate.example/resume/exec_1";
        for state in [State::Pending, State::Declined] {
            let notice = hostile(state);

            let slack = render(&target(Format::Slack), &notice);
            let v: serde_json::Value = serde_json::from_str(&slack.body).unwrap();
            let text = v["text"].as_str().unwrap();
            for bad in NEVER {
                assert!(!text.contains(bad), "Slack: {bad:?} in {text:?}");
            }
            assert_eq!(text.matches('<').count(), 1, "one link, Gatehouse's: {text}");
            assert_eq!(text.matches("://").count(), 1, "one link, Gatehouse's: {text}");
            assert!(text.ends_with(&format!(" <{LINK}|Open>")), "{text}");
            assert!(text.contains("!channel&gt;") && text.contains("Approve here&gt;"), "shown as text: {text}");

            let ntfy = render(&target(Format::Ntfy), &notice);
            for bad in NEVER {
                assert!(!ntfy.body.contains(bad), "ntfy: {bad:?} in {:?}", ntfy.body);
            }
            assert!(!ntfy.body.contains("://"), "no link in the body: {}", ntfy.body);
            assert!(ntfy.body.contains("!channel"), "the name is shown: {}", ntfy.body);
            for (name, value) in &ntfy.headers {
                assert!(value.chars().all(|c| c == ' ' || c.is_ascii_graphic()), "{name}: {value:?}");
            }
            let links: Vec<_> = ntfy.headers.iter().filter(|(_, v)| v.contains("://")).collect();
            assert_eq!(links, vec![&("Click", LINK.to_string())], "one link, Gatehouse's");

            // Machines get the name as data, JSON-escaped, and the same link.
            let json = render(&target(Format::Json), &notice);
            let v: serde_json::Value = serde_json::from_str(&json.body).unwrap();
            assert_eq!((v["agent"].as_str(), v["link"].as_str()), (Some(HOSTILE), Some(LINK)));
        }
    }

    #[test]
    fn an_ntfy_title_is_one_header_line_in_any_script() {
        let title = |tool: &str| {
            let notice = Notice { tool: tool.into(), ..notice(State::Declined) };
            let ntfy = render(&target(Format::Ntfy), &notice);
            ntfy.headers.iter().find(|(n, _)| *n == "Title").unwrap().1.clone()
        };
        assert_eq!(title("files__write"), "files__write declined", "ASCII as is");
        let cafe = title("caf\u{e9}_\u{65e5}\u{672c}");
        assert!(cafe.starts_with("=?UTF-8?B?") && cafe.is_ascii(), "{cafe}");
        assert_eq!(decoded(&cafe), "caf\u{e9}_\u{65e5}\u{672c} declined");
        let long = "\u{1F512}".repeat(40);
        let words = title(&long);
        assert!(words.split(' ').count() > 1 && words.split(' ').all(|w| w.len() <= 75), "{words}");
        assert_eq!(decoded(&words), format!("{long} declined"));
        let injected = title("x\r\nClick: https://evil.example");
        assert!(!injected.contains('\r') && !injected.contains('\n'));
        let shown = decoded(&injected);
        assert!(!shown.contains('\n') && !shown.contains("https://evil"), "{shown}");
        // Text that looks like an encoded word is encoded, so it decodes to itself.
        let lookalike = title("=?UTF-8?B?PGh0dHBzOi8vZXZpbD4=?=");
        assert_eq!(decoded(&lookalike), "=?UTF-8?B?PGh0dHBzOi8vZXZpbD4=?= declined");
    }

    #[test]
    fn plain_text_breaks_mentions_and_links_invisibly() {
        assert_eq!(plain("claude"), "claude");
        assert_eq!(plain("files__write"), "files__write");
        assert_eq!(plain("@here"), "@\u{2060}here");
        assert_eq!(plain("https://evil.example"), "https:\u{2060}//evil.\u{2060}example");
        assert_eq!(plain("[a](b)"), "[a]\u{2060}(b)");
        assert_eq!(plain("ends. Next"), "ends. Next", "a sentence's full stop stays");
        assert_eq!(plain("a\u{200B}@\u{200B}here\nb"), "a@\u{2060}here b", "hidden characters go first");
        assert_eq!(plain("<!here>"), "<\u{2060}!here>");
        assert_eq!(slack_text("<!here> & <@U1>"), "&lt;\u{2060}!here&gt; &amp; &lt;\u{2060}@\u{2060}U1&gt;");
    }

    #[test]
    fn each_format_has_its_shape() {
        let slack = render(&target(Format::Slack), &notice(State::Pending));
        let v: serde_json::Value = serde_json::from_str(&slack.body).unwrap();
        assert!(v["text"].as_str().unwrap().contains("<https://gate.example/resume/exec_1|Open>"));
        let ntfy = render(&target(Format::Ntfy), &notice(State::Declined));
        assert!(ntfy.headers.contains(&("Click", "https://gate.example/resume/exec_1".into())));
        assert!(ntfy.headers.contains(&("Title", "files__write declined".into())));
        let json = render(&target(Format::Json), &notice(State::Pending));
        let v: serde_json::Value = serde_json::from_str(&json.body).unwrap();
        assert_eq!(v["executionId"], "exec_1");
        assert_eq!(v["state"], "pending");
        assert!(v.get("arguments").is_none());
    }
}
