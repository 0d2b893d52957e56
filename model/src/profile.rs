//! A tool profile: which tools, prompts and resources some agents see at
//! all. One definition, read from the config file's `[[profile]]` (TOML), by
//! the console's editor and from the store (JSON), like a [`crate::Rule`].
//!
//! A profile narrows: an agent it names sees only what it lists, and every
//! other tool is absent from its `tools/list` and refused on call, naming
//! the profile. An agent no profile names sees what it saw before. With
//! several profiles naming an agent, it sees only what every one of them
//! lets through (each narrows further, as the strictest rule wins), so no
//! profile can widen what another one allows.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rule::{Per, Rate, RuleError, Source, check_pattern, matches};

/// The most patterns one of a profile's lists may hold.
pub const MAX_PROFILE_PATTERNS: usize = 100;

/// One profile: whom it names, and what they may see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Its name: what the console, a refusal and the audit log call it.
    pub name: String,
    /// The agents it names, `owner/agent` (a pattern on each side; an agent
    /// with no owner has the owner `""`), or a bare agent name (every agent
    /// of that name: a profile only narrows, so naming more only hides more).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<String>,
    /// Every agent of these owners (user names, patterns).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<String>,
    /// The tools they may see, by exposed name (`*`, an exact name,
    /// `prefix*`: an upstream's tools are `<its prefix>*`). Gatehouse's
    /// `resume` is always there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Every tool of these upstreams (names, patterns).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<String>,
    /// The prompts they may see, by exposed name (patterns).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<String>,
    /// The resources they may read, by URI (patterns; a template is listed
    /// when a pattern takes in its text).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// At most this many tool calls (`"100/hour"`) by the agents it names,
    /// counted per `rate_per` across replicas, on top of any rule's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// Whom the rate counts: `agent` (the default), `owner` or `tool`.
    #[serde(default)]
    pub rate_per: Per,
    /// Where it is kept: the config file (read-only) or the database.
    #[serde(default)]
    #[schemars(skip)]
    pub source: Source,
}

/// Who asks, as a profile matches them.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// The agent's name.
    pub agent: &'a str,
    /// Its owner's user name.
    pub owner: Option<&'a str>,
}

impl Profile {
    /// An empty profile named `name`: it names nobody and lets nothing through.
    pub fn new(name: &str) -> Self {
        Profile {
            name: name.to_string(),
            agents: Vec::new(),
            owners: Vec::new(),
            tools: Vec::new(),
            upstreams: Vec::new(),
            prompts: Vec::new(),
            resources: Vec::new(),
            rate: None,
            rate_per: Per::Agent,
            source: Source::Database,
        }
    }

    /// Trimmed, empty patterns dropped.
    pub fn normalised(mut self) -> Self {
        self.name = self.name.trim().to_string();
        for list in self.lists_mut() {
            *list = list.iter().map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect();
        }
        self
    }

    fn lists_mut(&mut self) -> [&mut Vec<String>; 6] {
        [
            &mut self.agents,
            &mut self.owners,
            &mut self.tools,
            &mut self.upstreams,
            &mut self.prompts,
            &mut self.resources,
        ]
    }

    /// Checks what its types cannot say; the error names the field.
    pub fn check(&self) -> Result<(), RuleError> {
        if self.name.trim().is_empty() || self.name.chars().count() > 100 || self.name.chars().any(char::is_control) {
            return Err(RuleError { field: "name", reason: "a profile's name is 1 to 100 characters".into() });
        }
        if self.agents.is_empty() && self.owners.is_empty() {
            return Err(RuleError {
                field: "agents",
                reason: "name the agents (owner/agent) or the owners it is for".into(),
            });
        }
        let lists = [
            ("agents", &self.agents),
            ("owners", &self.owners),
            ("tools", &self.tools),
            ("upstreams", &self.upstreams),
            ("prompts", &self.prompts),
            ("resources", &self.resources),
        ];
        for (field, list) in lists {
            if list.len() > MAX_PROFILE_PATTERNS {
                return Err(RuleError { field, reason: format!("at most {MAX_PROFILE_PATTERNS} patterns") });
            }
            for pattern in list {
                let sides: Vec<&str> = if field == "agents" { pattern.splitn(2, '/').collect() } else { vec![pattern] };
                let bad = sides.iter().any(|side| check_pattern(field, side).is_err())
                    || (matches!(field, "agents" | "owners" | "upstreams") && sides.iter().any(|s| s.contains('/')));
                if bad {
                    let form = if field == "agents" { "owner/agent, each side " } else { "" };
                    return Err(RuleError {
                        field,
                        reason: format!("{pattern:?}: write {form}`*`, an exact name, or `prefix*`"),
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether it names the agent.
    pub fn names(&self, who: Member<'_>) -> bool {
        let owner = who.owner.unwrap_or_default();
        self.owners.iter().any(|p| who.owner.is_some_and(|o| matches(p, o)))
            || self.agents.iter().any(|entry| match entry.split_once('/') {
                Some((o, agent)) => matches(o, owner) && matches(agent, who.agent),
                None => matches(entry, who.agent),
            })
    }

    /// Whether it lets the agents it names see the tool `name` (exposed) of
    /// `upstream` (none: Gatehouse's own).
    pub fn shows_tool(&self, name: &str, upstream: Option<&str>) -> bool {
        (upstream.is_none() && name == crate::tools::RESUME)
            || self.tools.iter().any(|p| matches(p, name))
            || upstream.is_some_and(|u| self.upstreams.iter().any(|p| matches(p, u)))
    }

    /// Whether it lets them see the prompt `name` (exposed).
    pub fn shows_prompt(&self, name: &str) -> bool {
        self.prompts.iter().any(|p| matches(p, name))
    }

    /// Whether it lets them read the resource `uri` (in its normal
    /// spelling) or see the template written `uri`.
    pub fn shows_resource(&self, uri: &str) -> bool {
        self.resources.iter().any(|p| matches(p, uri))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(toml_text: &str) -> Profile {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn toml_and_json_read_the_same_profile() {
        let from_toml = profile(
            r#"name = "docs only"
               agents = ["alice/ci"]
               owners = ["bob"]
               tools = ["docs__*", "gatehouse_whoami"]
               upstreams = ["search"]
               prompts = ["docs__*"]
               resources = ["file:///docs/*"]
               rate = "100/hour"
               rate_per = "owner""#,
        );
        let json = serde_json::to_string(&from_toml).unwrap();
        let from_json: Profile = serde_json::from_str(&json).unwrap();
        assert_eq!(from_toml, from_json);
        assert_eq!(from_toml.rate.unwrap().to_string(), "100/hour");
        assert_eq!(from_toml.rate_per, Per::Owner);
        from_toml.check().unwrap();
    }

    #[test]
    fn what_does_not_parse_is_refused() {
        assert!(toml::from_str::<Profile>("name = \"x\"\nagents = [\"a\"]\nrate = \"lots\"").is_err());
        assert!(toml::from_str::<Profile>("name = \"x\"\nagents = [\"a\"]\ntool = [\"a\"]").is_err(), "unknown key");
        let nobody = Profile { tools: vec!["*".into()], ..Profile::new("everyone") };
        assert_eq!(nobody.check().unwrap_err().field, "agents");
        let bad = Profile { agents: vec!["a/b/c".into()], ..Profile::new("x") };
        assert_eq!(bad.check().unwrap_err().field, "agents");
        let bad = Profile { owners: vec!["a".into()], tools: vec!["a*b".into()], ..Profile::new("x") };
        assert_eq!(bad.check().unwrap_err().field, "tools");
        let unnamed = Profile { owners: vec!["a".into()], ..Profile::new("  ") }.normalised();
        assert_eq!(unnamed.check().unwrap_err().field, "name");
    }

    #[test]
    fn names_agents_by_owner_and_name() {
        let p = Profile {
            agents: vec!["alice/ci*".into(), "deploy".into()],
            owners: vec!["bob".into()],
            ..Profile::new("p")
        };
        let m = |agent, owner| Member { agent, owner };
        assert!(p.names(m("ci-1", Some("alice"))));
        assert!(!p.names(m("ci-1", Some("carol"))), "another owner's agent of that name");
        assert!(p.names(m("deploy", Some("carol"))), "a bare name names every agent of that name");
        assert!(p.names(m("anything", Some("bob"))));
        assert!(!p.names(m("anything", None)));
        let ownerless = Profile { agents: vec!["/ops".into()], ..Profile::new("p") };
        assert!(ownerless.names(m("ops", None)));
        assert!(!ownerless.names(m("ops", Some("alice"))));
    }

    #[test]
    fn shows_what_it_lists() {
        let p = Profile {
            tools: vec!["docs__*".into()],
            upstreams: vec!["search".into()],
            prompts: vec!["docs__summary".into()],
            resources: vec!["file:///docs/*".into()],
            ..Profile::new("p")
        };
        assert!(p.shows_tool("docs__read", Some("docs")));
        assert!(p.shows_tool("search__query", Some("search")));
        assert!(!p.shows_tool("fs__write", Some("fs")));
        assert!(!p.shows_tool("gatehouse_policy_set", None));
        assert!(p.shows_prompt("docs__summary") && !p.shows_prompt("docs__other"));
        assert!(p.shows_resource("file:///docs/a.md") && !p.shows_resource("file:///etc/passwd"));
    }
}
