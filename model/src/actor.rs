//! Who did what: the one way an actor is written into the record (audit
//! entries, the change log, grants) and read back from it. A person is
//! named by user id as well as name, so a later user who takes a removed
//! user's name is never taken for them.

use std::fmt;
use std::str::FromStr;

use crate::ids::UserId;

/// Who moved a call, changed the gate or made a grant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Actor {
    /// A person: their user id (none on entries written before ids were
    /// recorded) and their name when they acted.
    Person {
        /// The user's id.
        id: Option<UserId>,
        /// Their name.
        name: String,
    },
    /// An agent, by name (empty: the calling agent, unnamed), and how it
    /// acted if not on its own.
    Agent {
        /// Its name.
        name: String,
        /// A client's form, or a person's approval.
        via: Option<Via>,
    },
    /// A policy rule, by name.
    Rule(String),
    /// A shadow rule (it decided nothing; the entry says what it would have).
    Shadow(String),
    /// A tool profile, by name: the tool is not one its agent may see, or
    /// its rate was spent.
    Profile(String),
    /// A grant, by id.
    Grant(String),
    /// A paused call's approval, by execution id (the run it let through).
    Execution(String),
    /// The tool's own annotations (no rule named it).
    Annotation(Hint),
    /// An admin API token, by id.
    ApiToken(String),
    /// Gatehouse's own rule for its gate-changing tools: an admin decides.
    ChangesGate,
    /// Gatehouse itself: an expiry, a revocation, a shutdown.
    System,
    /// Anything else found in the record, kept as written.
    Other(String),
}

/// How an agent acted when not on its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Via {
    /// A form its client answered (`trust_client_forms`).
    Client,
    /// A person approved it (by name, if known).
    Approval(Option<String>),
}

/// Which annotation decided a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hint {
    /// `readOnlyHint: true`: ran at once.
    ReadOnly,
    /// Not read-only (or silent): asked.
    NotReadOnly,
    /// Its upstream's annotations are not trusted: asked.
    Untrusted,
}

impl Actor {
    /// A person, by id and name.
    pub fn person(id: UserId, name: &str) -> Actor {
        Actor::Person { id: Some(id), name: name.to_string() }
    }

    /// An agent acting on its own.
    pub fn agent(name: &str) -> Actor {
        Actor::Agent { name: name.to_string(), via: None }
    }

    /// The person's name, if a person.
    pub fn person_name(&self) -> Option<&str> {
        match self {
            Actor::Person { name, .. } => Some(name),
            _ => None,
        }
    }

    /// In words, as every page says it ("ada", "the agent cursor", "rule
    /// prod-writes"); `grants` gives a grant's words by id when known.
    pub fn words(&self, grants: &[(String, String)]) -> String {
        match self {
            Actor::Person { name, .. } => name.clone(),
            Actor::Agent { name, via } => {
                let agent = if name.is_empty() { "the agent".to_string() } else { format!("the agent {name}") };
                match via {
                    None => agent,
                    Some(Via::Client) => format!("{agent}, by its client's form"),
                    Some(Via::Approval(Some(by))) => format!("{agent}, approved by {by}"),
                    Some(Via::Approval(None)) => format!("{agent}, approved"),
                }
            }
            Actor::Rule(rule) => format!("rule {rule}"),
            Actor::Shadow(rule) => format!("shadow rule {rule}"),
            Actor::Profile(name) => format!("profile {name}"),
            Actor::Execution(id) => format!("the approval of {id}"),
            Actor::Grant(id) => grants
                .iter()
                .find(|(g, _)| g == id)
                .map(|(_, words)| words.clone())
                .unwrap_or_else(|| "a grant".to_string()),
            Actor::Annotation(Hint::ReadOnly) => "the tool says it is read-only".into(),
            Actor::Annotation(Hint::NotReadOnly) => "the tool does not say it is read-only".into(),
            Actor::Annotation(Hint::Untrusted) => "its upstream's annotations are not trusted".into(),
            Actor::ApiToken(id) => format!("API token {id}"),
            Actor::ChangesGate => "it changes the gate: an admin decides".into(),
            Actor::System => "Gatehouse".into(),
            Actor::Other(text) => text.clone(),
        }
    }
}

impl fmt::Display for Actor {
    /// The written form: `user:ada#7`, `agent:cursor`, `agent:cursor via
    /// client`, `agent:cursor (approved by ada)`, `rule:<name>`,
    /// `shadow:<name>`, `grant:<id>`, `execution:<id>`,
    /// `annotation:readOnlyHint`, `api_token:<id>`, `system`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Actor::Person { id: Some(id), name } => write!(f, "user:{name}#{id}"),
            Actor::Person { id: None, name } => write!(f, "user:{name}"),
            Actor::Agent { name, via } => {
                if name.is_empty() {
                    f.write_str("agent")?;
                } else {
                    write!(f, "agent:{name}")?;
                }
                match via {
                    None => Ok(()),
                    Some(Via::Client) => f.write_str(" via client"),
                    Some(Via::Approval(Some(by))) => write!(f, " (approved by {by})"),
                    Some(Via::Approval(None)) => f.write_str(" (approved)"),
                }
            }
            Actor::Rule(name) => write!(f, "rule:{name}"),
            Actor::Shadow(name) => write!(f, "shadow:{name}"),
            Actor::Profile(name) => write!(f, "profile:{name}"),
            Actor::Grant(id) => write!(f, "grant:{id}"),
            Actor::Execution(id) => write!(f, "execution:{id}"),
            Actor::Annotation(Hint::ReadOnly) => f.write_str("annotation:readOnlyHint"),
            Actor::Annotation(Hint::NotReadOnly) => f.write_str("annotation:destructiveHint"),
            Actor::Annotation(Hint::Untrusted) => f.write_str("annotation:untrusted"),
            Actor::ApiToken(id) => write!(f, "api_token:{id}"),
            Actor::ChangesGate => f.write_str("gatehouse:changes-gate"),
            Actor::System => f.write_str("system"),
            Actor::Other(text) => f.write_str(text),
        }
    }
}

impl FromStr for Actor {
    type Err = std::convert::Infallible;

    /// Reads what [`Display`](fmt::Display) writes (and the forms written
    /// before: `user:ada` without an id, `system:expiry`); anything else is
    /// [`Actor::Other`].
    fn from_str(text: &str) -> Result<Actor, Self::Err> {
        Ok(Actor::read(text))
    }
}

impl Actor {
    fn read(text: &str) -> Actor {
        if let Some(person) = text.strip_prefix("user:") {
            // A username has no '#', so the last one starts the id.
            return match person.rsplit_once('#').and_then(|(name, id)| Some((name, id.parse::<i64>().ok()?))) {
                Some((name, id)) => Actor::Person { id: Some(UserId::from(id)), name: name.to_string() },
                None => Actor::Person { id: None, name: person.to_string() },
            };
        }
        if text == "agent" {
            return Actor::Agent { name: String::new(), via: None };
        }
        if let Some(agent) = text.strip_prefix("agent:") {
            if let Some(name) = agent.strip_suffix(" via client") {
                return Actor::Agent { name: name.to_string(), via: Some(Via::Client) };
            }
            if let Some(name) = agent.strip_suffix(" (approved)") {
                return Actor::Agent { name: name.to_string(), via: Some(Via::Approval(None)) };
            }
            if let Some((name, by)) = agent.strip_suffix(')').and_then(|a| a.split_once(" (approved by ")) {
                return Actor::Agent { name: name.to_string(), via: Some(Via::Approval(Some(by.to_string()))) };
            }
            return Actor::agent(agent);
        }
        type Make = fn(String) -> Actor;
        let tagged: [(&str, Make); 6] = [
            ("rule:", Actor::Rule),
            ("shadow:", Actor::Shadow),
            ("profile:", Actor::Profile),
            ("grant:", Actor::Grant),
            ("execution:", Actor::Execution),
            ("api_token:", Actor::ApiToken),
        ];
        for (prefix, make) in tagged {
            if let Some(rest) = text.strip_prefix(prefix) {
                return make(rest.to_string());
            }
        }
        match text {
            "annotation:readOnlyHint" => Actor::Annotation(Hint::ReadOnly),
            "annotation:destructiveHint" => Actor::Annotation(Hint::NotReadOnly),
            "annotation:untrusted" => Actor::Annotation(Hint::Untrusted),
            "system" | "system:expiry" => Actor::System,
            "gatehouse:changes-gate" => Actor::ChangesGate,
            other => Actor::Other(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_actor_reads_back_as_written() {
        let all = [
            Actor::person(UserId::from(7), "ada"),
            Actor::Person { id: None, name: "ada".into() },
            Actor::agent("cursor"),
            Actor::Agent { name: String::new(), via: None },
            Actor::Agent { name: "cursor".into(), via: Some(Via::Client) },
            Actor::Agent { name: "cursor".into(), via: Some(Via::Approval(Some("ada".into()))) },
            Actor::Agent { name: "cursor".into(), via: Some(Via::Approval(None)) },
            Actor::Rule("prod writes (main)".into()),
            Actor::Profile("docs only".into()),
            Actor::Shadow("try: x".into()),
            Actor::Grant("g1".into()),
            Actor::Execution("exec_1".into()),
            Actor::Annotation(Hint::ReadOnly),
            Actor::Annotation(Hint::NotReadOnly),
            Actor::Annotation(Hint::Untrusted),
            Actor::ApiToken("t1".into()),
            Actor::ChangesGate,
            Actor::System,
        ];
        for actor in all {
            assert_eq!(actor.to_string().parse::<Actor>().unwrap(), actor, "{actor}");
        }
        assert_eq!(Actor::person(UserId::from(7), "ada").to_string(), "user:ada#7");
        assert_eq!("system:expiry".parse::<Actor>().unwrap(), Actor::System);
    }

    #[test]
    fn actors_read_as_words() {
        let w = |s: &str| s.parse::<Actor>().unwrap().words(&[("g1".into(), "read for 8 hours".into())]);
        assert_eq!(w("user:alice#3"), "alice");
        assert_eq!(w("user:alice"), "alice");
        assert_eq!(w("agent:cursor"), "the agent cursor");
        assert_eq!(w("rule:prod"), "rule prod");
        assert_eq!(w("grant:g1"), "read for 8 hours");
        assert_eq!(w("grant:g2"), "a grant");
        assert_eq!(w("system"), "Gatehouse");
    }
}
