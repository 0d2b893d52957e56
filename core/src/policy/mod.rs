//! Policy: for each tool call, `allow`, `require_approval` or `block`.
//!
//! Defaults come from the tool's annotations (`readOnlyHint: true` → allow;
//! `destructiveHint` true or absent → require approval, the spec's default).
//! Rules from the config file and the database override the default; among
//! matching rules the most restrictive wins ([`decide`]). A rule may be
//! scoped to agents, owners or upstreams and carry a condition
//! ([`condition`]).

use std::collections::BTreeSet;
use std::sync::Arc;

pub mod condition;
pub mod decide;
pub mod evaluations;
pub mod rate;
pub mod replay;

pub use condition::{Condition, ConditionError};
pub use decide::{CallDetail, Facts, Hints, RuleSet, ShadowHit, Verdict, Who, decide_with, gate_as, gate_for};
pub use rate::{Limit, Limited, Per, Rate};

use crate::args;
use crate::clock::Clock;
use crate::db::{Db, Versioned};
use crate::error::{CoreError, Result};

pub use gatehouse_model::{Action, Basis, Member, Profile, Rule, Source, Target, ToolGate, ToolInfo};

use gatehouse_model::RuleError;
pub use gatehouse_model::rule::matches;

/// The tool rules whose pattern matches none of `tools` (the exposed
/// names): a rule written with an upstream's own, unprefixed tool name, or
/// for a tool that is gone, does nothing, and its author should be told.
/// `resource:` and `prompt:` rules are not tool rules and are never listed.
pub fn unmatched<'a, 't>(rules: &'a [Rule], tools: impl IntoIterator<Item = &'t str>) -> Vec<&'a Rule> {
    let tools: Vec<&str> = tools.into_iter().collect();
    rules
        .iter()
        .filter(|rule| rule.pattern.is_tools())
        .filter(|rule| !tools.iter().any(|tool| rule.pattern.matches_tool(tool)))
        .collect()
}

/// The bare agent names of tool rules (no `owner/` and no `owners` scope)
/// that name agents of more than one owner among `agents` (`(name, owner,
/// minted by an admin)` of the live credentials): each such rule, the name,
/// and those owners. A bare name names only agents an admin minted, which may
/// still be several people's: the start-up log says so.
pub fn shared_bare_names<'r>(
    rules: &'r [Rule],
    agents: &[(String, Option<String>, bool)],
) -> Vec<(&'r Rule, &'r str, Vec<String>)> {
    let mut found = Vec::new();
    for rule in rules.iter().filter(|r| r.owners.is_empty()) {
        for entry in rule.agents.iter().filter(|a| !a.contains('/')) {
            let mut owners: Vec<String> = agents
                .iter()
                .filter(|(name, _, by_admin)| *by_admin && matches(entry, name))
                .map(|(_, owner, _)| owner.clone().unwrap_or_else(|| "(no owner)".into()))
                .collect();
            owners.sort();
            owners.dedup();
            if owners.len() > 1 {
                found.push((rule, entry.as_str(), owners));
            }
        }
    }
    found
}

/// Checks a pattern's shape: `*`, exact, or `prefix*` (one trailing star).
pub fn validate_pattern(pattern: &str) -> Result<()> {
    Ok(gatehouse_model::rule::check_pattern("pattern", pattern)?)
}

/// The most patterns one scope (`agents`, `owners`, `upstreams`) may list.
pub const MAX_SCOPE_PATTERNS: usize = 50;

/// Checks a rule before it is saved, or loaded from the config file: what
/// its types cannot say (its name, scopes, what applies to its kind of
/// target) and its condition (compiled). The error names the field (the
/// first of [`rule_problems`]).
pub fn validate_rule(rule: &Rule) -> Result<()> {
    match rule_problems(rule).into_iter().next() {
        Some(problem) => Err(problem.into()),
        None => Ok(()),
    }
}

/// Every check [`validate_rule`] makes that the rule fails, at most one per
/// field, in the order of the rule's fields: a form marks each bad field at once.
pub fn rule_problems(rule: &Rule) -> Vec<RuleError> {
    let mut problems = Vec::new();
    let mut refuse = |field: &'static str, reason: String| {
        if !problems.iter().any(|p: &RuleError| p.field == field) {
            problems.push(RuleError { field, reason });
        }
    };
    if rule.name.trim().is_empty() || rule.name.chars().count() > 100 || rule.name.chars().any(char::is_control) {
        refuse("name", "a rule's name is 1 to 100 characters".into());
    }
    let subject = !rule.pattern.is_tools();
    if subject && (rule.is_conditional() || !rule.upstreams.is_empty() || rule.shadow) {
        refuse("pattern", "agents, owners, upstreams, when and shadow apply to tool rules only".into());
    }
    for (field, patterns) in [("agents", &rule.agents), ("owners", &rule.owners), ("upstreams", &rule.upstreams)] {
        if patterns.len() > MAX_SCOPE_PATTERNS {
            refuse(field, format!("at most {MAX_SCOPE_PATTERNS} patterns"));
        }
        for pattern in patterns {
            // An agent is named with its owner: `alice/billing-bot`.
            let parts: Vec<&str> = if field == "agents" { pattern.splitn(2, '/').collect() } else { vec![pattern] };
            if parts.iter().any(|p| validate_pattern(p).is_err() || p.contains('/')) {
                let form = if field == "agents" { "owner/agent, each side " } else { "" };
                refuse(field, format!("{pattern:?}: write {form}`*`, an exact name, or `prefix*`"));
            }
        }
    }
    if let Some(when) = &rule.when
        && let Err(e) = Condition::compile(when)
    {
        refuse("when", e.to_string());
    }
    if subject && rule.rate.is_some() {
        refuse("rate", "a rate applies to tool rules only".into());
    }
    problems
}

/// Rules from the config file (fixed) and the database (changeable).
#[derive(Clone)]
pub struct PolicyStore {
    db: Db,
    clock: Arc<dyn Clock>,
    /// What the config file says; replaced whole when it is reloaded
    /// ([`PolicyStore::replace_config`]), never held across I/O.
    file: Arc<std::sync::RwLock<Arc<FromFile>>>,
    // Every call consults the rules; they change only through this store
    // (on any replica), so a copy is kept, compiled, until they change.
    cache: Arc<Versioned<RuleSet>>,
}

/// The rules, trusted upstreams and profiles of the config file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FromFile {
    /// Its `[[policy]]` rules, in order.
    pub rules: Vec<Rule>,
    /// Upstreams whose annotations it trusts (`trust_annotations`).
    pub trusted: BTreeSet<String>,
    /// Its `[[profile]]`s.
    pub profiles: Vec<Profile>,
}

impl FromFile {
    /// The file's parts, marked as the file's and normalised.
    pub fn new(rules: Vec<Rule>, trusted: impl IntoIterator<Item = String>, profiles: Vec<Profile>) -> Self {
        FromFile {
            rules: rules.into_iter().map(|r| Rule { source: Source::Config, ..r }.normalised()).collect(),
            trusted: trusted.into_iter().collect(),
            profiles: profiles.into_iter().map(|p| Profile { source: Source::Config, ..p }.normalised()).collect(),
        }
    }
}

/// A `policy_rules` row as stored.
struct Row {
    name: String,
    pattern: String,
    action: String,
    human_only: bool,
    agents: String,
    owners: String,
    upstreams: String,
    when: Option<String>,
    rate: Option<String>,
    rate_per: Option<String>,
    shadow: bool,
    keep_arguments: Option<String>,
}

impl Row {
    /// The rule it holds. Every row was checked when it was saved; one that
    /// no longer reads (written by hand, or by a newer version) fails
    /// closed: it blocks what its pattern names (every tool, if that is
    /// unreadable too), keeps its name so the policies page shows it to be
    /// replaced or removed, and says why in the log. Never half-applied.
    fn rule(self) -> Rule {
        let list = |text: &str| serde_json::from_str::<Vec<String>>(text);
        let parsed = (|| -> std::result::Result<Rule, String> {
            let rate =
                self.rate.as_deref().map(str::parse::<gatehouse_model::Rate>).transpose().map_err(|e| e.to_string())?;
            let rate_per =
                self.rate_per.as_deref().unwrap_or_default().parse().map_err(|e: RuleError| e.to_string())?;
            Ok(Rule {
                name: self.name.clone(),
                human_only: self.human_only,
                agents: list(&self.agents).map_err(|e| format!("agents: {e}"))?,
                owners: list(&self.owners).map_err(|e| format!("owners: {e}"))?,
                upstreams: list(&self.upstreams).map_err(|e| format!("upstreams: {e}"))?,
                when: self.when.clone(),
                rate,
                rate_per,
                shadow: self.shadow,
                keep_arguments: self.keep_arguments.as_deref().map(str::parse).transpose()?,
                ..Rule::new(
                    Target::parse(&self.pattern).map_err(|e| e.to_string())?,
                    self.action.parse().map_err(|e: RuleError| e.to_string())?,
                )
            })
        })();
        parsed.unwrap_or_else(|why| {
            tracing::error!(rule = %self.name, why, "a saved policy rule does not read: it blocks what it names until it is replaced");
            let pattern = Target::parse(&self.pattern).unwrap_or_else(|_| Target::parse("*").expect("`*` is a pattern"));
            Rule { name: self.name, human_only: true, ..Rule::new(pattern, Action::Block) }
        })
    }
}

/// Whether an upstream's tool annotations are trusted, and who said so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// The config file's `trust_annotations` (default: untrusted).
    Config(bool),
    /// An admin, in the console (over the config file).
    Admin(bool),
}

impl Trust {
    /// Whether the hints count.
    pub fn trusted(self) -> bool {
        matches!(self, Trust::Config(true) | Trust::Admin(true))
    }
}

impl PolicyStore {
    /// A store with the config file's rules.
    pub fn new(db: Db, clock: Arc<dyn Clock>, config_rules: Vec<Rule>) -> Self {
        let file = FromFile::new(config_rules, [], Vec::new());
        Self { db, clock, file: Arc::new(std::sync::RwLock::new(Arc::new(file))), cache: Arc::default() }
    }

    /// The same store, with the config file's tool profiles (checked).
    pub fn with_profiles(self, profiles: Vec<Profile>) -> Self {
        let profiles = FromFile::new(Vec::new(), [], profiles).profiles;
        self.replace_config(FromFile { profiles, ..(*self.file()).clone() });
        self
    }

    /// The same store, trusting the tool annotations of `upstreams` (the
    /// config file's `trust_annotations`) unless an admin says otherwise.
    pub fn trusting(self, upstreams: Vec<String>) -> Self {
        self.replace_config(FromFile { trusted: upstreams.into_iter().collect(), ..(*self.file()).clone() });
        self
    }

    /// What the config file says now.
    pub fn file(&self) -> Arc<FromFile> {
        self.file.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces what the config file says (it was reloaded): every replica
    /// reads its own file, so only this process's copy is dropped. Whether
    /// anything changed.
    pub fn replace_config(&self, file: FromFile) -> bool {
        let changed = *self.file() != file;
        *self.file.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(file);
        self.invalidate();
        changed
    }

    /// Every rule: config first, then the database's; and the upstreams
    /// whose annotations are trusted.
    pub fn rules(&self) -> Result<Arc<RuleSet>> {
        self.cache.get(&self.db, || {
            let rules = self.load()?;
            let trusted = self.trust_overrides()?.into_iter().fold(
                self.file().trusted.clone(),
                |mut set, (upstream, trusted)| {
                    if trusted {
                        set.insert(upstream);
                    } else {
                        set.remove(&upstream);
                    }
                    set
                },
            );
            Ok(RuleSet::new(rules).trusting(trusted).with_profiles(self.load_profiles()?))
        })
    }

    /// The config file's profiles, then the database's (by name). A stored
    /// profile that no longer reads fails closed: it hides every tool,
    /// prompt and resource from every agent until it is replaced or
    /// removed, keeps its name (the refusal names it), and says why in the
    /// log. It was checked when saved, so only a hand edit or another
    /// version's row does this.
    fn load_profiles(&self) -> Result<Vec<Profile>> {
        let rows: Vec<(String, String)> =
            self.db.conn()?.query("SELECT name, spec FROM tool_profiles", args![], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let mut stored: Vec<Profile> = rows
            .into_iter()
            .map(|(name, spec)| {
                serde_json::from_str::<Profile>(&spec)
                    .map_err(|e| e.to_string())
                    .and_then(|p| p.check().map(|()| p).map_err(|e| e.to_string()))
                    .map(|p| Profile { name: name.clone(), source: Source::Database, ..p })
                    .unwrap_or_else(|why| {
                        tracing::error!(profile = %name, why, "a saved tool profile does not read: it hides every tool from every agent until it is replaced");
                        Profile { agents: vec!["*".into(), "*/*".into()], ..Profile::new(&name) }
                    })
            })
            .collect();
        stored.sort_by(|a, b| a.name.cmp(&b.name));
        let mut all = self.file().profiles.clone();
        all.extend(stored);
        Ok(all)
    }

    /// A profile as [`PolicyStore::set_profile`] would save it, or why not.
    pub fn check_profile(profile: Profile) -> Result<Profile> {
        if profile.source != Source::Database {
            return Err(CoreError::Invalid {
                field: "source",
                reason: "profiles from the config file are changed there".into(),
            });
        }
        let profile = profile.normalised();
        profile.check()?;
        Ok(profile)
    }

    /// Adds the database profile `profile.name`, or replaces it (a config
    /// file profile of that name is refused: it is changed there). Returns
    /// it as saved.
    pub fn set_profile(&self, profile: Profile) -> Result<Profile> {
        let profile = Self::check_profile(profile)?;
        if self.file().profiles.iter().any(|p| p.name == profile.name) {
            return Err(CoreError::Invalid {
                field: "name",
                reason: format!("the config file has a profile named {:?}; change it there", profile.name),
            });
        }
        let spec = serde_json::to_string(&profile)
            .map_err(|e| CoreError::Invalid { field: "profile", reason: e.to_string() })?;
        self.db.conn()?.transaction(|tx| {
            tx.execute(
                "INSERT INTO tool_profiles (name, spec, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, updated_at = excluded.updated_at",
                args![profile.name.as_str(), spec, self.clock.now_ms()],
            )?;
            Db::bump_config(tx)
        })?;
        self.invalidate();
        Ok(profile)
    }

    /// Removes the database profile `name`; `false` if there was none.
    pub fn remove_profile(&self, name: &str) -> Result<bool> {
        let removed = self.db.conn()?.transaction(|tx| {
            let n = tx.execute("DELETE FROM tool_profiles WHERE name = ?1", args![name.trim()])?;
            Db::bump_config(tx)?;
            Ok(n > 0)
        })?;
        self.invalidate();
        Ok(removed)
    }

    /// An admin's word on each upstream's annotations, where they gave one.
    fn trust_overrides(&self) -> Result<Vec<(String, bool)>> {
        self.db
            .conn()?
            .query("SELECT upstream, trusted FROM upstream_trust", args![], |r| Ok((r.get(0)?, r.get::<i64>(1)? != 0)))
    }

    /// Whether `upstream`'s tool annotations decide anything, and who said so.
    pub fn trust(&self, upstream: &str) -> Result<Trust> {
        let admin = self.trust_overrides()?.into_iter().find(|(u, _)| u == upstream).map(|(_, t)| t);
        Ok(match admin {
            Some(trusted) => Trust::Admin(trusted),
            None => Trust::Config(self.file().trusted.contains(upstream)),
        })
    }

    /// Trusts (or stops trusting) `upstream`'s tool annotations, over the
    /// config file; the caller records who did it in the change log.
    pub fn set_trust(&self, upstream: &str, trusted: bool) -> Result<()> {
        if upstream.trim().is_empty() || upstream.chars().count() > 100 {
            return Err(CoreError::Invalid {
                field: "upstream",
                reason: "an upstream's name, 1 to 100 characters".into(),
            });
        }
        self.db.conn()?.transaction(|tx| {
            tx.execute(
                "INSERT INTO upstream_trust (upstream, trusted, changed_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (upstream) DO UPDATE SET trusted = excluded.trusted, changed_at = excluded.changed_at",
                args![upstream, i64::from(trusted), self.clock.now_ms()],
            )?;
            Db::bump_config(tx)
        })?;
        self.invalidate();
        Ok(())
    }

    /// Forgets an admin's word on `upstream`'s annotations (the upstream was
    /// removed: a later one of that name is another server and starts
    /// untrusted); whether there was one.
    pub fn clear_trust(&self, upstream: &str) -> Result<bool> {
        let cleared = self.db.conn()?.transaction(|tx| {
            let n = tx.execute("DELETE FROM upstream_trust WHERE upstream = ?1", args![upstream])?;
            Db::bump_config(tx)?;
            Ok(n > 0)
        })?;
        self.invalidate();
        Ok(cleared)
    }

    fn invalidate(&self) {
        self.cache.invalidate();
    }

    /// The config file's rules, then the database's ([`Row::rule`]).
    fn load(&self) -> Result<Vec<Rule>> {
        let rows = self.db.conn()?.query(
            "SELECT name, pattern, action, human_only, agents, owners, upstreams, when_expr, rate, rate_per, shadow, keep_arguments FROM policy_rules",
            args![],
            |r| {
                Ok(Row {
                    name: r.get(0)?,
                    pattern: r.get(1)?,
                    action: r.get(2)?,
                    human_only: r.get(3)?,
                    agents: r.get(4)?,
                    owners: r.get(5)?,
                    upstreams: r.get(6)?,
                    when: r.get(7)?,
                    rate: r.get(8)?,
                    rate_per: r.get(9)?,
                    shadow: r.get(10)?,
                    keep_arguments: r.get(11)?,
                })
            },
        )?;
        let mut db_rules: Vec<Rule> = rows.into_iter().map(Row::rule).collect();
        // Byte order, as SQLite's `ORDER BY` gave it: a PostgreSQL collation
        // could order differently, and which of equally strict rules is
        // named as the reason depends on the order.
        db_rules.sort_by(|a, b| a.name.cmp(&b.name));
        let mut all: Vec<Rule> = self.file().rules.clone();
        all.extend(db_rules);
        Ok(all)
    }

    /// A rule as [`PolicyStore::set`] would save it, or why it would not:
    /// normalised and checked ([`validate_rule`]), and one the database
    /// holds (no `source = config`, no rule-level `approval_ttl`). The gate
    /// checks a `gatehouse_policy_set` with it before asking anyone.
    pub fn check(rule: Rule) -> Result<Rule> {
        if rule.source != Source::Database {
            return Err(CoreError::Invalid {
                field: "source",
                reason: "rules from the config file are changed there".into(),
            });
        }
        if rule.approval_ttl.is_some() {
            return Err(CoreError::Invalid {
                field: "approval_ttl",
                reason: "a rule's own approval_ttl is for config-file rules; saved rules use the global one".into(),
            });
        }
        let rule = rule.normalised();
        validate_rule(&rule)?;
        Ok(rule)
    }

    /// Adds the database rule `rule.name` (its pattern if unnamed), or
    /// replaces it; checked first ([`validate_rule`]). Returns it as saved.
    pub fn set(&self, rule: Rule) -> Result<Rule> {
        let rule = Self::check(rule)?;
        let json = |list: &Vec<String>| serde_json::to_string(list).unwrap_or_else(|_| "[]".into());
        self.db.conn()?.transaction(|tx| {
            tx.execute(
                "INSERT INTO policy_rules (name, pattern, action, human_only, agents, owners, upstreams, when_expr, updated_at, rate, rate_per, shadow, keep_arguments)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
                 ON CONFLICT(name) DO UPDATE SET pattern = excluded.pattern, action = excluded.action,
                   human_only = excluded.human_only, agents = excluded.agents, owners = excluded.owners,
                   upstreams = excluded.upstreams, when_expr = excluded.when_expr, updated_at = excluded.updated_at,
                   rate = excluded.rate, rate_per = excluded.rate_per, shadow = excluded.shadow,
                   keep_arguments = excluded.keep_arguments",
                args![
                    rule.name.as_str(),
                    rule.pattern.as_str(),
                    rule.action.as_str(),
                    rule.human_only,
                    json(&rule.agents),
                    json(&rule.owners),
                    json(&rule.upstreams),
                    rule.when.clone(),
                    self.clock.now_ms(),
                    rule.rate.map(|r| r.to_string()),
                    rule.rate.map(|_| rule.rate_per.as_str()),
                    rule.shadow,
                    rule.keep_arguments.map(|k| k.as_str())
                ],
            )?;
            Db::bump_config(tx)
        })?;
        self.invalidate();
        Ok(rule)
    }

    /// When the database rule `name` was last saved (Unix ms), if it exists.
    pub fn saved_at(&self, name: &str) -> Result<Option<i64>> {
        self.db.conn()?.query_opt("SELECT updated_at FROM policy_rules WHERE name = ?1", args![name], |r| r.get(0))
    }

    /// Removes the database rule named `name`; `false` if there was none.
    pub fn remove(&self, name: &str) -> Result<bool> {
        let removed = self.db.conn()?.transaction(|tx| {
            let n = tx.execute("DELETE FROM policy_rules WHERE name = ?1", args![name.trim()])?;
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
    pub async fn current(&self) -> Result<Arc<RuleSet>> {
        let store = self.clone();
        self.db.quick(move || store.rules()).await?
    }

    /// Counts a call against the rate limits its verdict carries; the
    /// first one it is over, if any. A database error is an error: the
    /// caller refuses the call (fail closed).
    pub async fn take_rates(&self, limits: Vec<Limit>) -> Result<Option<Limited>> {
        let (db, now_ms) = (self.db.clone(), self.clock.now_ms());
        self.db.run(move || rate::take(&db, now_ms, &limits)).await?
    }

    /// Decides for one call (or tool): where it asks when its conditions
    /// are cheap, off the async threads when they may not be
    /// ([`evaluations`]).
    pub async fn decide(&self, facts: &Facts<'_>) -> Result<Verdict> {
        let rules = self.current().await?;
        if decide::condition_cost(&rules, facts) <= evaluations::INLINE_COST {
            return Ok(decide_with(&rules, facts));
        }
        let owned = evaluations::OwnedFacts::of(facts);
        evaluations::run(move || decide_with(&rules, &owned.facts())).await
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
        .filter(|r| r.pattern.as_str().starts_with(subject.prefix()) && subject_matches(r.pattern.as_str(), &name))
        .collect();
    let keep_arguments = matching.iter().filter_map(|r| r.keep_arguments).min();
    match matching.iter().max_by_key(|r| r.action) {
        Some(strictest) => Verdict {
            action: strictest.action,
            human_only: matching.iter().any(|r| r.human_only),
            rule: Some(strictest.name.clone()),
            basis: Basis::Rule(strictest.name.clone()),
            approval_ttl: None,
            condition_error: None,
            limits: Vec::new(),
            shadow: Vec::new(),
            keep_arguments,
        },
        None => Verdict {
            action: Action::Allow,
            human_only: false,
            rule: None,
            basis: Basis::NotDestructive,
            approval_ttl: None,
            condition_error: None,
            limits: Vec::new(),
            shadow: Vec::new(),
            keep_arguments,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_that_match_no_exposed_tool_are_found() {
        let rule = |pattern: &str| Rule::new(pattern.parse().unwrap(), Action::Allow);
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
        Rule::new(pattern.parse().unwrap(), action)
    }

    /// The rules, trusting the annotations of the upstream `git` (the calls' below).
    fn set(rules: &[Rule]) -> RuleSet {
        RuleSet::new(rules.to_vec()).trusting(["git".to_string()].into())
    }

    fn tool(name: &str, hints: Hints) -> Facts<'_> {
        Facts::tool(name, None, hints)
    }

    #[test]
    fn the_shortest_matching_approval_ttl_is_carried_out() {
        let with_ttl = |pattern: &str, secs| Rule {
            approval_ttl: Some(std::time::Duration::from_secs(secs)),
            ..rule(pattern, Action::RequireApproval)
        };
        let rules = [with_ttl("files__*", 1800), with_ttl("files__write", 120), rule("*", Action::RequireApproval)];
        let ttl = |name| decide_with(&set(&rules), &tool(name, Hints::default())).approval_ttl;
        assert_eq!(ttl("files__write"), Some(std::time::Duration::from_secs(120)));
        assert_eq!(ttl("files__read"), Some(std::time::Duration::from_secs(1800)));
        assert_eq!(ttl("other"), None, "the global TTL applies");
    }

    #[test]
    fn annotations_give_the_default() {
        let ro = Hints { read_only: Some(true), ..Default::default() };
        assert_eq!(decide_with(&set(&[]), &tool("t", ro)).action, Action::Allow);
        assert_eq!(
            decide_with(&set(&[]), &tool("t", Hints::default())).action,
            Action::RequireApproval,
            "destructive by default"
        );
        let not_destructive = Hints { read_only: Some(false), destructive: Some(false), ..Default::default() };
        let v = decide_with(&set(&[]), &tool("t", not_destructive));
        assert_eq!((v.action, v.basis), (Action::RequireApproval, Basis::MayDestroy), "not destructive still writes");
    }

    #[test]
    fn an_upstreams_annotations_decide_nothing_until_it_is_trusted() {
        let ro = Hints { read_only: Some(true), ..Default::default() };
        let of = |upstream| Facts::tool("get-env", Some(upstream), ro);
        let v = decide_with(&set(&[]), &of("everything"));
        assert_eq!((v.action, v.basis), (Action::RequireApproval, Basis::UntrustedHints));
        let trusted = RuleSet::new(Vec::new()).trusting(["everything".to_string()].into());
        assert_eq!(decide_with(&trusted, &of("everything")).action, Action::Allow);
        // A rule still decides, trusted or not.
        assert_eq!(decide_with(&set(&[rule("get-env", Action::Allow)]), &of("everything")).action, Action::Allow);
        assert_eq!(
            decide_with(&trusted, &Facts::tool("fetch", Some("everything"), Hints::default())).action,
            Action::RequireApproval
        );
    }

    #[test]
    fn most_restrictive_matching_rule_wins_and_allow_overrides_defaults() {
        let rules = [rule("files__*", Action::Allow), rule("files__write_*", Action::Block), rule("*", Action::Allow)];
        assert_eq!(decide_with(&set(&rules), &tool("files__write_file", Hints::default())).action, Action::Block);
        assert_eq!(decide_with(&set(&rules), &tool("files__read_file", Hints::default())).action, Action::Allow);
        assert_eq!(decide_with(&set(&rules[2..]), &tool("anything", Hints::default())).action, Action::Allow);
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
        assert_eq!(
            decide_with(&set(&rules[1..]), &tool("resource_tool", Hints::default())).action,
            Action::RequireApproval
        );
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
        let v = decide_with(&set(&[rule("*", Action::Allow)]), &tool("gatehouse_policy_set", gate));
        assert_eq!((v.action, v.human_only, v.basis), (Action::RequireApproval, true, Basis::ChangesGate));
        let v = decide_with(&set(&[rule("gatehouse_*", Action::Block)]), &tool("gatehouse_policy_set", gate));
        assert_eq!((v.action, v.basis), (Action::Block, Basis::Rule("gatehouse_*".into())));
        let v = decide_with(&set(&[]), &tool("fs_write", Hints::default()));
        assert_eq!((v.action, v.basis), (Action::RequireApproval, Basis::MayDestroy));
    }

    fn call<'a>(name: &'a str, who: Who<'a>, arguments: &'a serde_json::Value) -> Facts<'a> {
        static ANNOTATIONS: std::sync::LazyLock<serde_json::Value> = std::sync::LazyLock::new(|| serde_json::json!({}));
        Facts {
            tool: name,
            upstream: Some("git"),
            hints: Hints { read_only: Some(true), destructive: Some(false), changes_gate: false },
            who: Some(who),
            call: Some(CallDetail { arguments, annotations: &ANNOTATIONS, now_ms: 0 }),
        }
    }

    const CURSOR: Who<'static> = Who { agent: "cursor", owner: Some("alice"), thread: None, by_admin: false };

    #[test]
    fn a_condition_narrows_a_rule_to_the_calls_it_names() {
        let push_main = Rule {
            name: "no push to main".into(),
            when: Some(r#"args.branch == "main""#.into()),
            ..rule("git__push", Action::Block)
        };
        let rules = set(&[push_main]);
        let main = serde_json::json!({"branch": "main"});
        let dev = serde_json::json!({"branch": "dev"});
        let v = decide_with(&rules, &call("git__push", CURSOR, &main));
        assert_eq!((v.action, v.basis), (Action::Block, Basis::Rule("no push to main".into())));
        assert_eq!(
            decide_with(&rules, &call("git__push", CURSOR, &dev)).action,
            Action::Allow,
            "the annotation default"
        );
        // A listing has no call: the conditional block does not hide the tool.
        assert_eq!(
            decide_with(&rules, &Facts { call: None, ..call("git__push", CURSOR, &main) }).action,
            Action::Allow
        );
    }

    #[test]
    fn a_condition_that_cannot_be_evaluated_blocks_and_never_allows() {
        let pay_small = Rule {
            name: "small payments".into(),
            when: Some("args.amount < 100".into()),
            ..rule("pay", Action::Allow)
        };
        let rules = set(&[pay_small, rule("pay", Action::RequireApproval)]);
        let small = serde_json::json!({"amount": 20});
        let large = serde_json::json!({"amount": 500});
        let absent = serde_json::json!({});
        let text = serde_json::json!({"amount": "20"});
        // The strictest matching rule wins: the allow rule does not beat the pause.
        assert_eq!(decide_with(&rules, &call("pay", CURSOR, &small)).action, Action::RequireApproval);
        assert_eq!(decide_with(&rules, &call("pay", CURSOR, &large)).action, Action::RequireApproval);
        for broken in [&absent, &text] {
            let v = decide_with(&rules, &call("pay", CURSOR, broken));
            assert_eq!(v.action, Action::Block, "{broken}");
            assert_eq!(v.rule.as_deref(), Some("small payments"));
            assert!(v.condition_error.is_some());
        }
        // A stored condition that no longer compiles blocks the calls it could match.
        let stale = Rule { when: Some("args.".into()), ..rule("pay", Action::Allow) };
        assert_eq!(decide_with(&set(&[stale]), &call("pay", CURSOR, &small)).action, Action::Block);
    }

    #[test]
    fn scopes_name_agents_owners_and_upstreams() {
        let scoped = |agents: &[&str], owners: &[&str], upstreams: &[&str]| Rule {
            agents: agents.iter().map(|s| s.to_string()).collect(),
            owners: owners.iter().map(|s| s.to_string()).collect(),
            upstreams: upstreams.iter().map(|s| s.to_string()).collect(),
            ..rule("*", Action::Block)
        };
        let args = serde_json::json!({});
        let bob = Who { agent: "claude", owner: Some("bob"), thread: None, by_admin: false };
        let action = |r: Rule, who| decide_with(&set(&[r]), &call("git__push", who, &args)).action;
        assert_eq!(action(scoped(&["alice/cur*"], &[], &[]), CURSOR), Action::Block);
        assert_eq!(action(scoped(&["*/cur*"], &[], &[]), CURSOR), Action::Block);
        assert_eq!(action(scoped(&["bob/cur*"], &[], &[]), CURSOR), Action::Allow, "another owner's cursor");
        assert_eq!(action(scoped(&["alice/cur*"], &[], &[]), bob), Action::Allow);
        // In a block rule a bare name names every agent of that name.
        assert_eq!(action(scoped(&["cur*"], &[], &[]), CURSOR), Action::Block);
        assert_eq!(action(scoped(&["cur*"], &["bob"], &[]), CURSOR), Action::Allow, "the owners scope still holds");
        // In an allow rule a bare name is no one's to claim: only an admin's
        // agents, or the named owners'.
        let allowed = |agents: &[&str], owners: &[&str], who: Who<'static>| {
            let rule = Rule { action: Action::Allow, ..scoped(agents, owners, &[]) };
            let asks = Facts { hints: Hints::default(), ..call("git__push", who, &args) };
            decide_with(&set(&[rule]), &asks).action
        };
        assert_eq!(allowed(&["cur*"], &[], CURSOR), Action::RequireApproval, "alice named her agent so");
        assert_eq!(allowed(&["cur*"], &[], Who { by_admin: true, ..CURSOR }), Action::Allow, "an admin minted it");
        assert_eq!(allowed(&["cur*"], &["alice"], CURSOR), Action::Allow);
        assert_eq!(allowed(&["alice/cur*"], &[], CURSOR), Action::Allow);
        assert_eq!(action(scoped(&[], &["bob"], &[]), bob), Action::Block);
        assert_eq!(action(scoped(&[], &["bob"], &[]), CURSOR), Action::Allow);
        assert_eq!(action(scoped(&[], &[], &["git"]), CURSOR), Action::Block);
        assert_eq!(action(scoped(&[], &[], &["fs"]), CURSOR), Action::Allow);
        // Every stated scope must match.
        assert_eq!(action(scoped(&["cursor"], &["bob"], &[]), CURSOR), Action::Allow);
        // An agent with no owner is not any owner's.
        let ownerless = Who { agent: "ci", owner: None, thread: None, by_admin: true };
        assert_eq!(action(scoped(&[], &["*"], &[]), ownerless), Action::Allow);
        assert_eq!(action(scoped(&["*/ci"], &[], &[]), ownerless), Action::Block);
        assert_eq!(allowed(&["ci"], &[], ownerless), Action::Allow, "minted by an admin");
        // The console's view (no caller) leaves scoped rules out.
        assert_eq!(
            decide_with(&set(&[scoped(&["*"], &[], &[])]), &tool("git__push", Hints::default())).action,
            Action::RequireApproval
        );
    }

    #[test]
    fn the_gate_changing_floor_and_human_only_hold_on_conditional_rules() {
        let args = serde_json::json!({"pattern": "*"});
        let allow_all =
            Rule { when: Some("true".into()), agents: vec!["*/*".into()], ..rule("gatehouse_*", Action::Allow) };
        let facts = Facts {
            hints: Hints { changes_gate: true, ..Default::default() },
            ..call("gatehouse_policy_set", CURSOR, &args)
        };
        let v = decide_with(&set(&[allow_all]), &facts);
        assert_eq!((v.action, v.human_only, v.basis), (Action::RequireApproval, true, Basis::ChangesGate));
        let human =
            Rule { human_only: true, when: Some("args.size() > 0".into()), ..rule("git__*", Action::RequireApproval) };
        assert!(decide_with(&set(&[human]), &call("git__push", CURSOR, &args)).human_only);
    }

    #[test]
    fn rules_are_checked_before_they_are_saved() {
        let field = |r: Rule| match validate_rule(&r.normalised()) {
            Err(CoreError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(Rule { when: Some("args.x ==".into()), ..rule("t", Action::Block) }), "when");
        assert_eq!(field(Rule { agents: vec!["a*b*".into()], ..rule("t", Action::Block) }), "agents");
        assert_eq!(field(Rule { agents: vec!["a/b/c".into()], ..rule("t", Action::Block) }), "agents");
        assert_eq!(field(Rule { owners: vec!["a/b".into()], ..rule("t", Action::Block) }), "owners");
        assert!(
            validate_rule(&Rule { agents: vec!["alice/bill*".into(), "*/ci".into()], ..rule("t", Action::Block) })
                .is_ok()
        );
        assert_eq!(field(Rule { when: Some("true".into()), ..rule("resource:file:///*", Action::Block) }), "pattern");
        assert_eq!(field(Rule { name: "x\u{7}y".into(), ..rule("t", Action::Block) }), "name");
        let named = Rule { name: " ".into(), when: Some("  ".into()), ..rule(" git__* ", Action::Block) }.normalised();
        assert_eq!((named.name.as_str(), named.pattern.as_str(), named.when), ("git__*", "git__*", None));
    }

    #[test]
    fn a_shadow_rule_decides_nothing_and_says_what_it_would_have_done() {
        let args = serde_json::json!({"branch": "main"});
        let shadow = Rule {
            name: "try: no pushes to main".into(),
            shadow: true,
            when: Some(r#"args.branch == "main""#.into()),
            ..rule("git__*", Action::Block)
        };
        let v = decide_with(&set(std::slice::from_ref(&shadow)), &call("git__push", CURSOR, &args));
        assert_eq!(v.action, Action::Allow, "the annotations decide, as without it");
        assert_eq!(v.shadow, [ShadowHit { rule: "try: no pushes to main".into(), would: Action::Block }]);
        // One that would change nothing is not a hit.
        let dev = serde_json::json!({"branch": "dev"});
        assert!(decide_with(&set(std::slice::from_ref(&shadow)), &call("git__push", CURSOR, &dev)).shadow.is_empty());
        let already = decide_with(&set(&[shadow, rule("git__*", Action::Block)]), &call("git__push", CURSOR, &args));
        assert_eq!((already.action, already.shadow.len()), (Action::Block, 0));
        // A shadow allow beside an enforced pause: it would have let the call run.
        let ask = rule("git__*", Action::RequireApproval);
        let lenient = Rule { shadow: true, name: "lenient".into(), ..rule("git__push", Action::Allow) };
        let v = decide_with(&set(&[ask, lenient]), &call("git__push", CURSOR, &args));
        assert_eq!(v.action, Action::RequireApproval);
        assert!(v.shadow.is_empty(), "the strictest wins: an allow rule would not have changed it");
    }

    #[test]
    fn a_profile_hides_what_it_does_not_list_from_the_agents_it_names() {
        use gatehouse_model::Profile;
        let profile = Profile {
            agents: vec!["ada/cursor".into()],
            tools: vec!["git__status".into()],
            rate: Some("5/min".parse().unwrap()),
            ..Profile::new("read git")
        };
        let rules =
            RuleSet::new(vec![Rule::new("git__*".parse().unwrap(), Action::Allow)]).with_profiles(vec![profile]);
        let cursor = Who { agent: "cursor", owner: Some("ada"), thread: None, by_admin: false };
        let claude = Who { agent: "claude", ..cursor };
        let facts = |tool, who| Facts { who: Some(who), ..Facts::tool(tool, Some("git"), Hints::default()) };
        let v = decide_with(&rules, &facts("git__push", cursor));
        assert_eq!((v.action, v.basis), (Action::Block, Basis::Profile("read git".into())));
        assert_eq!(decide_with(&rules, &facts("git__push", claude)).action, Action::Allow, "not named");
        assert_eq!(decide_with(&rules, &facts("git__status", cursor)).action, Action::Allow);
        assert_eq!(
            decide_with(&rules, &facts("resume", cursor)).action,
            Action::Block,
            "an upstream's resume is no exception"
        );
        let no_upstream = Facts { who: Some(cursor), ..Facts::tool("resume", None, Hints::default()) };
        assert_ne!(decide_with(&rules, &no_upstream).basis, Basis::Profile("read git".into()), "Gatehouse's resume is");
        // The console's view of a tool (no agent) is not any agent's.
        assert_eq!(decide_with(&rules, &Facts::tool("git__push", Some("git"), Hints::default())).action, Action::Allow);
        // A call counts against the profile's rate, apart from any rule's.
        let args = serde_json::json!({});
        let call = CallDetail { arguments: &args, annotations: &args, now_ms: 0 };
        let v = decide_with(&rules, &Facts { call: Some(call), ..facts("git__status", cursor) });
        assert_eq!(v.limits.iter().map(|l| l.by.to_string()).collect::<Vec<_>>(), ["profile:read git"]);
    }
}
