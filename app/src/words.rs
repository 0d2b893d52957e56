//! One vocabulary for who did what, used by every page (and the README):
//! a person by name, an agent as "the agent", a rule, annotation or grant by
//! what it is.

use gatehouse_model::{Actor, State};

/// Who an audit or change entry names, in words ([`Actor::words`]):
/// "alice", "the agent cursor", "rule prod-writes", "the tool says it is
/// read-only", "a grant". `grants` gives a grant's words by id when known.
pub fn actor(actor: &str, grants: &[(String, String)]) -> String {
    actor.parse::<Actor>().map(|a| a.words(grants)).unwrap_or_else(|never| match never {})
}

/// `n` of `noun`, in words: "1 session", "3 sessions".
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// What a person (or the clock, or the agent) did to take a call out of
/// pending, read off the state it is in now: a call that ran was approved.
pub fn decision(state: State) -> Option<&'static str> {
    match state {
        State::Approved | State::Running | State::Completed | State::Failed => Some("approved"),
        State::Declined => Some("declined"),
        State::Expired => Some("left to expire"),
        State::Cancelled | State::Revoked => Some("cancelled"),
        _ => None,
    }
}

/// The line above a call's tool name, as its state has it.
pub fn wants(state: State) -> &'static str {
    match state {
        State::Pending => "wants to run",
        State::Approved => "may now run",
        State::Running => "is running",
        State::Completed | State::Failed => "ran",
        _ => "asked to run",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actors_read_as_words() {
        assert_eq!(actor("user:alice#4", &[]), "alice");
        assert_eq!(actor("agent:cursor", &[]), "the agent cursor");
        assert_eq!(actor("rule:prod", &[]), "rule prod");
        assert_eq!(actor("grant:g1", &[("g1".into(), "read for 8 hours".into())]), "read for 8 hours");
        assert_eq!(actor("grant:g2", &[]), "a grant");
        assert_eq!(decision(State::Completed), Some("approved"));
        assert_eq!(wants(State::Declined), "asked to run");
    }
}
