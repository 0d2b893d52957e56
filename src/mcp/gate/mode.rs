//! The way a session hears about a pause, chosen with
//! `/mcp?elicitation_mode=browser|native|model` (default `browser`).

/// How paused calls are announced to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Return the approval URL; the agent calls `resume` (works everywhere).
    Browser,
    /// Use the client's elicitation support.
    Native,
    /// The agent itself may decide through `resume {executionId, action}`
    /// (`elicitation_mode=model`).
    AgentDecides,
}

impl Mode {
    /// The mode named in the request URL's query (`elicitation_mode=`).
    pub fn of(parts: Option<&http::request::Parts>) -> Mode {
        let query = parts.and_then(|p| p.uri.query()).unwrap_or("");
        let value = url::form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == "elicitation_mode")
            .map(|(_, v)| v.into_owned());
        match value.as_deref() {
            Some("native") => Mode::Native,
            Some("model") => Mode::AgentDecides,
            _ => Mode::Browser,
        }
    }
}
