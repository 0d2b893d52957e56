//! Policy: for each tool call, `allow`, `require_approval` or `block`.
//!
//! Defaults come from the tool's annotations (`readOnlyHint: true` → allow;
//! `destructiveHint` true or absent → require approval, the spec's default).
//! Rules `{pattern, action}` from the config file and from SQLite override the
//! default; among matching rules the most restrictive wins.

use std::sync::Arc;

use crate::args;
use crate::clock::Clock;
use crate::db::{Db, Versioned};
use crate::error::{CoreError, Result};

pub use gatehouse_model::{Action, Basis, Rule, ToolGate, ToolInfo};

/// An action from its wire name, or why not.
pub fn parse_action(s: &str) -> Result<Action> {
    Action::parse(s).ok_or_else(|| CoreError::Invalid {
        field: "action",
        reason: format!("{s:?} is not one of allow, require_approval, block"),
    })
}

/// Whether `pattern` matches the exposed tool name.
pub fn matches(pattern: &str, tool: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => tool.starts_with(prefix),
        None => pattern == tool,
    }
}

/// The tool rules whose pattern matches none of `tools` (the exposed
/// names): a rule written with an upstream's own, unprefixed tool name, or
/// for a tool that is gone, does nothing, and its author should be told.
/// `resource:` and `prompt:` rules are not tool rules and are never listed.
pub fn unmatched<'a, 't>(rules: &'a [Rule], tools: impl IntoIterator<Item = &'t str>) -> Vec<&'a Rule> {
    let tools: Vec<&str> = tools.into_iter().collect();
    rules
        .iter()
        .filter(|rule| !rule.pattern.starts_with("resource:") && !rule.pattern.starts_with("prompt:"))
        .filter(|rule| !tools.iter().any(|tool| matches(&rule.pattern, tool)))
        .collect()
}

/// Checks a pattern's shape: `*`, exact, or `prefix*` (one trailing star).
pub fn validate_pattern(pattern: &str) -> Result<()> {
    let body = pattern.strip_suffix('*').unwrap_or(pattern);
    if pattern.is_empty() || pattern.len() > 200 || body.contains('*') || pattern.chars().any(char::is_control) {
        return Err(CoreError::Invalid {
            field: "pattern",
            reason: "use `*`, an exact tool name, or `prefix*`".into(),
        });
    }
    Ok(())
}

/// What the tool itself says, and whether it changes the gate.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hints {
    /// `readOnlyHint`
    pub read_only: Option<bool>,
    /// `destructiveHint`
    pub destructive: Option<bool>,
    /// It changes the gate for everyone (Gatehouse's own rule tools): never
    /// allowed without a person, whatever the rules say.
    pub changes_gate: bool,
}

/// The verdict for one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// What happens.
    pub action: Action,
    /// Whether a matching rule insists on a human decision.
    pub human_only: bool,
    /// Which rule decided (`None`: the annotation default).
    pub rule: Option<String>,
    /// Why, as the console says it.
    pub basis: Basis,
    /// How long a call held for approval may stay pending, when a matching
    /// rule says (the shortest such rule's `approval_ttl`).
    pub approval_ttl: Option<std::time::Duration>,
}

/// Rules from the config file (fixed) and SQLite (changeable).
#[derive(Clone)]
pub struct PolicyStore {
    db: Db,
    clock: Arc<dyn Clock>,
    config_rules: Arc<Vec<Rule>>,
    // Every call consults the rules; they change only through this store
    // (on any replica), so a copy is kept until they change.
    cache: Arc<Versioned<Vec<Rule>>>,
}

impl PolicyStore {
    /// A store with the config file's rules.
    pub fn new(db: Db, clock: Arc<dyn Clock>, config_rules: Vec<Rule>) -> Self {
        let config_rules = config_rules.into_iter().map(|r| Rule { source: "config".into(), ..r }).collect();
        Self { db, clock, config_rules: Arc::new(config_rules), cache: Arc::default() }
    }

    /// Every rule: config first, then the database's.
    pub fn rules(&self) -> Result<Arc<Vec<Rule>>> {
        self.cache.get(&self.db, || self.load())
    }

    fn invalidate(&self) {
        self.cache.invalidate();
    }

    fn load(&self) -> Result<Vec<Rule>> {
        let mut db_rules =
            self.db.conn()?.query("SELECT pattern, action, human_only FROM policy_rules", args![], |r| {
                Ok((r.get::<String>(0)?, r.get::<String>(1)?, r.get::<bool>(2)?))
            })?;
        // Byte order, as SQLite's `ORDER BY` gave it: a PostgreSQL collation
        // could order differently, and which of equally strict rules is
        // named as the reason depends on the order.
        db_rules.sort_by(|a, b| a.0.cmp(&b.0));
        let mut all: Vec<Rule> = self.config_rules.as_ref().clone();
        for (pattern, action, human_only) in db_rules {
            all.push(Rule {
                pattern,
                action: parse_action(&action)?,
                human_only,
                source: "database".into(),
                approval_ttl_secs: None,
            });
        }
        Ok(all)
    }

    /// Adds or replaces the database rule for `pattern`.
    pub fn set(&self, pattern: &str, action: Action, human_only: bool) -> Result<()> {
        validate_pattern(pattern)?;
        self.db.conn()?.transaction(|tx| {
            tx.execute(
                "INSERT INTO policy_rules (pattern, action, human_only, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(pattern) DO UPDATE SET action = excluded.action, human_only = excluded.human_only, updated_at = excluded.updated_at",
                args![pattern, action.as_str(), human_only, self.clock.now_ms()],
            )?;
            Db::bump_config(tx)
        })?;
        self.invalidate();
        Ok(())
    }

    /// Removes the database rule for `pattern`; `false` if there was none.
    pub fn remove(&self, pattern: &str) -> Result<bool> {
        let removed = self.db.conn()?.transaction(|tx| {
            let n = tx.execute("DELETE FROM policy_rules WHERE pattern = ?1", args![pattern])?;
            Db::bump_config(tx)?;
            Ok(n > 0)
        })?;
        self.invalidate();
        Ok(removed)
    }

    /// [`PolicyStore::rules`] for async code (the gate, lists), where it
    /// costs least ([`Db::quick`]): at once on SQLite, where the copy is this
    /// process's own and no query runs unless it was dropped; in the stores'
    /// lane on PostgreSQL, where every read checks the shared version.
    pub async fn current(&self) -> Result<Arc<Vec<Rule>>> {
        let store = self.clone();
        self.db.quick(move || store.rules()).await?
    }

    /// Decides for one exposed tool name.
    pub async fn decide(&self, tool: &str, hints: Hints) -> Result<Verdict> {
        Ok(decide_with(&self.current().await?, tool, hints))
    }
}

/// What a request other than `tools/call` touches, as rules name it.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    /// A resource URI (`resources/read`, `resources/subscribe`, a template completion).
    Resource(&'a str),
    /// An exposed prompt name (`prompts/get`, a prompt argument completion).
    Prompt(&'a str),
}

impl Subject<'_> {
    /// The rule prefix of its kind.
    pub fn prefix(&self) -> &'static str {
        match self {
            Subject::Resource(_) => "resource:",
            Subject::Prompt(_) => "prompt:",
        }
    }

    /// The name rules match: `resource:<uri>` or `prompt:<name>`.
    pub fn name(&self) -> String {
        match self {
            Subject::Resource(uri) => format!("resource:{uri}"),
            Subject::Prompt(name) => format!("prompt:{name}"),
        }
    }
}

/// The verdict for a resource or prompt: only rules written for its kind
/// (`resource:<uri pattern>`, `prompt:<name pattern>`) apply, so a tool rule
/// such as `*` never hides resources; without one, it is allowed. Nothing
/// but a tool call can wait for a person, so `require_approval` refuses too.
pub fn subject_verdict(rules: &[Rule], subject: &Subject<'_>) -> Verdict {
    let name = subject.name();
    let matching: Vec<&Rule> = rules
        .iter()
        .filter(|r| r.pattern.starts_with(subject.prefix()) && subject_matches(&r.pattern, &name))
        .collect();
    match matching.iter().max_by_key(|r| r.action) {
        Some(strictest) => Verdict {
            action: strictest.action,
            human_only: matching.iter().any(|r| r.human_only),
            rule: Some(strictest.pattern.clone()),
            basis: Basis::Rule(strictest.pattern.clone()),
            approval_ttl: None,
        },
        None => Verdict {
            action: Action::Allow,
            human_only: false,
            rule: None,
            basis: Basis::NotDestructive,
            approval_ttl: None,
        },
    }
}

/// Whether rule `pattern` matches subject `name` (`resource:<uri>` with the
/// URI already in its normal spelling, or `prompt:<name>`): as written, or,
/// for a `resource:` rule written in another spelling (`FILE:///etc/./*`),
/// as the normal spelling of its URI (`crate::normalise::resource_uri`).
/// A rule matching more can only make the verdict stricter: the strictest
/// matching rule wins and the default is allow.
fn subject_matches(pattern: &str, name: &str) -> bool {
    if matches(pattern, name) {
        return true;
    }
    let Some(body) = pattern.strip_prefix("resource:") else {
        return false;
    };
    let (uri, star) = match body.strip_suffix('*') {
        Some(uri) => (uri, "*"),
        None => (body, ""),
    };
    match crate::normalise::resource_uri(uri) {
        Ok(normal) if normal != uri => matches(&format!("resource:{normal}{star}"), name),
        _ => false,
    }
}

/// What the gate does with `tool` under `rules`, and why: what the console
/// shows, by the same procedure the gate uses.
pub fn gate_for(rules: &[Rule], tool: ToolInfo) -> ToolGate {
    let hints = Hints { read_only: tool.read_only, destructive: tool.destructive, changes_gate: tool.changes_gate };
    let verdict = decide_with(rules, &tool.name, hints);
    ToolGate { tool, action: verdict.action, human_only: verdict.human_only, basis: verdict.basis }
}

/// The decision procedure over a rule list (pure; unit-tested).
pub fn decide_with(rules: &[Rule], tool: &str, hints: Hints) -> Verdict {
    let matching: Vec<&Rule> = rules.iter().filter(|r| matches(&r.pattern, tool)).collect();
    let human_only = matching.iter().any(|r| r.human_only) || hints.changes_gate;
    // The strictest TTL wins, as the strictest action does.
    let approval_ttl = matching.iter().filter_map(|r| r.approval_ttl_secs).min().map(std::time::Duration::from_secs);
    let verdict = if let Some(strictest) = matching.iter().max_by_key(|r| r.action) {
        let rule = Some(strictest.pattern.clone());
        Verdict {
            action: strictest.action,
            human_only,
            rule,
            basis: Basis::Rule(strictest.pattern.clone()),
            approval_ttl,
        }
    } else {
        let (action, basis) = if hints.read_only == Some(true) {
            (Action::Allow, Basis::ReadOnly)
        } else if hints.destructive.unwrap_or(true) {
            (Action::RequireApproval, Basis::MayDestroy)
        } else {
            (Action::Allow, Basis::NotDestructive)
        };
        Verdict { action, human_only, rule: None, basis, approval_ttl }
    };
    // No rule lets an agent change the gate for everyone without a person
    // (a rule may still block it).
    if hints.changes_gate && verdict.action == Action::Allow {
        return Verdict { action: Action::RequireApproval, basis: Basis::ChangesGate, ..verdict };
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_that_match_no_exposed_tool_are_found() {
        let rule = |pattern: &str| Rule {
            pattern: pattern.into(),
            action: Action::Allow,
            human_only: false,
            source: "config".into(),
            approval_ttl_secs: None,
        };
        let rules = [
            rule("fs__read_file"),
            rule("read_file"),
            rule("fs__*"),
            rule("git__*"),
            rule("*"),
            rule("resource:file:///etc/*"),
            rule("prompt:secret_*"),
        ];
        let tools = ["gatehouse_status", "fs__read_file", "fs__write_file"];
        let unmatched: Vec<&str> = unmatched(&rules, tools).iter().map(|r| r.pattern.as_str()).collect();
        assert_eq!(unmatched, ["read_file", "git__*"]);
        assert_eq!(super::unmatched(&rules, []).len(), 5, "with no tool, no tool rule matches");
    }

    fn rule(pattern: &str, action: Action) -> Rule {
        Rule { pattern: pattern.into(), action, human_only: false, source: "test".into(), approval_ttl_secs: None }
    }

    #[test]
    fn the_shortest_matching_approval_ttl_is_carried_out() {
        let with_ttl =
            |pattern: &str, secs| Rule { approval_ttl_secs: Some(secs), ..rule(pattern, Action::RequireApproval) };
        let rules = [with_ttl("files__*", 1800), with_ttl("files__write", 120), rule("*", Action::RequireApproval)];
        let ttl = |tool| decide_with(&rules, tool, Hints::default()).approval_ttl;
        assert_eq!(ttl("files__write"), Some(std::time::Duration::from_secs(120)));
        assert_eq!(ttl("files__read"), Some(std::time::Duration::from_secs(1800)));
        assert_eq!(ttl("other"), None, "the global TTL applies");
    }

    #[test]
    fn annotations_give_the_default() {
        let ro = Hints { read_only: Some(true), ..Default::default() };
        assert_eq!(decide_with(&[], "t", ro).action, Action::Allow);
        assert_eq!(decide_with(&[], "t", Hints::default()).action, Action::RequireApproval, "destructive by default");
        let safe = Hints { read_only: Some(false), destructive: Some(false), ..Default::default() };
        assert_eq!(decide_with(&[], "t", safe).action, Action::Allow);
    }

    #[test]
    fn most_restrictive_matching_rule_wins_and_allow_overrides_defaults() {
        let rules = [rule("files__*", Action::Allow), rule("files__write_*", Action::Block), rule("*", Action::Allow)];
        assert_eq!(decide_with(&rules, "files__write_file", Hints::default()).action, Action::Block);
        assert_eq!(decide_with(&rules, "files__read_file", Hints::default()).action, Action::Allow);
        assert_eq!(decide_with(&rules[2..], "anything", Hints::default()).action, Action::Allow);
    }

    #[test]
    fn resource_and_prompt_rules_apply_only_to_their_kind() {
        let rules = [
            rule("*", Action::Block),
            rule("resource:file:///etc/*", Action::Block),
            rule("prompt:secret_*", Action::RequireApproval),
        ];
        let etc = Subject::Resource("file:///etc/passwd");
        assert_eq!(subject_verdict(&rules, &etc).action, Action::Block);
        assert_eq!(subject_verdict(&rules, &Subject::Resource("file:///srv/a")).action, Action::Allow);
        assert_eq!(subject_verdict(&rules, &Subject::Prompt("secret_plan")).action, Action::RequireApproval);
        assert_eq!(subject_verdict(&rules, &Subject::Prompt("hello")).action, Action::Allow, "`*` is a tool rule");
        assert_eq!(decide_with(&rules[1..], "resource_tool", Hints::default()).action, Action::RequireApproval);
    }

    #[test]
    fn a_resource_rule_in_another_spelling_matches_the_normal_uri() {
        // Subjects arrive normalised (`normalise::resource_uri`); rules may not be.
        for pattern in ["resource:FILE:///etc/*", "resource:file:///srv/../etc/*", "resource:file:////etc/passwd"] {
            let rules = [rule(pattern, Action::Block)];
            let verdict = subject_verdict(&rules, &Subject::Resource("file:///etc/passwd"));
            assert_eq!(verdict.action, Action::Block, "{pattern}");
        }
        let rules = [rule("resource:FILE:///etc/*", Action::Block)];
        assert_eq!(subject_verdict(&rules, &Subject::Resource("file:///srv/a")).action, Action::Allow);
        assert_eq!(
            subject_verdict(&[rule("resource:*", Action::Block)], &Subject::Resource("x:y")).action,
            Action::Block
        );
    }

    #[test]
    fn patterns() {
        assert!(matches("*", "x"));
        assert!(matches("a__*", "a__b"));
        assert!(!matches("a__*", "b__a"));
        assert!(matches("exact", "exact"));
        assert!(!matches("exact", "exactly"));
        assert!(validate_pattern("a*b*").is_err());
        assert!(validate_pattern("").is_err());
        assert!(validate_pattern("files__*").is_ok());
    }

    #[test]
    fn a_tool_that_changes_the_gate_always_asks_a_person_but_can_be_blocked() {
        let gate = Hints { changes_gate: true, read_only: Some(true), ..Default::default() };
        let v = decide_with(&[rule("*", Action::Allow)], "gatehouse_policy_set", gate);
        assert_eq!((v.action, v.human_only, v.basis), (Action::RequireApproval, true, Basis::ChangesGate));
        let v = decide_with(&[rule("gatehouse_*", Action::Block)], "gatehouse_policy_set", gate);
        assert_eq!((v.action, v.basis), (Action::Block, Basis::Rule("gatehouse_*".into())));
        let v = decide_with(&[], "fs_write", Hints::default());
        assert_eq!((v.action, v.basis), (Action::RequireApproval, Basis::MayDestroy));
    }
}
