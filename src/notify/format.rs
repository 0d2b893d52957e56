//! What a message says and how each format shapes it. A message never
//! carries the call's arguments (they may hold secrets): only who, what,
//! the state, the approval link and the times.

use gatehouse_core::model::State;
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
    pub execution_id: String,
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
    /// One line for people (Slack, ntfy).
    fn headline(&self) -> String {
        let owner = self.owner.as_deref().map(|o| format!(" (owner {o})")).unwrap_or_default();
        match self.state {
            State::Pending => format!("{}{owner} wants to run {} — approve or decline", self.agent, self.tool),
            state => {
                let by = self.by.as_deref().map(|b| format!(" by {b}")).unwrap_or_default();
                format!("{} of {}{owner}: {}{by}", self.tool, self.agent, state.as_str())
            }
        }
    }

    fn title(&self) -> String {
        match self.state {
            State::Pending => format!("Approve {}?", self.tool),
            state => format!("{} {}", self.tool, state.as_str()),
        }
    }
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
            body: serde_json::json!({ "text": format!("{} <{}|Open>", notice.headline(), notice.link) }).to_string(),
            headers: Vec::new(),
        },
        Format::Ntfy => {
            let (priority, tags) = match notice.state {
                State::Pending => ("high", "warning"),
                State::Approved | State::Running | State::Completed => ("default", "white_check_mark"),
                _ => ("default", "x"),
            };
            let mut headers = vec![
                // ntfy reads non-ASCII titles only RFC 2047-encoded: keep it ASCII.
                ("Title", notice.title().replace(|c: char| !c.is_ascii() || c.is_ascii_control(), "?")),
                ("Click", notice.link.clone()),
                ("Tags", tags.to_string()),
                ("Priority", priority.to_string()),
            ];
            if let Some(token) = &target.secret {
                headers.push(("Authorization", format!("Bearer {token}")));
            }
            Outgoing { content_type: "text/plain; charset=utf-8", body: notice.headline(), headers }
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
        }
    }

    #[test]
    fn the_signature_is_the_documented_hmac() {
        // Known answer: HMAC-SHA256("key", "1.{}") computed independently (python3 -c hmac…).
        assert_eq!(sign("key", 1, "{}"), "t=1,v1=1ba6b8171186efc613e8bcc0cbdab2748f24984d7c5a84faa2637afa0e40d224");
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
