//! The decision procedure: which rules match a call, and what the strictest
//! of them (or the tool's annotations, when none does) says. One procedure
//! for the gate, `tools/list`, the console's view of a tool and a rule's
//! preview.
//!
//! A rule matches when its pattern matches the tool, each scope it states
//! (`agents`, `owners`, `upstreams`) matches the caller, and its `when`
//! holds. A condition that cannot be evaluated counts as a match that
//! blocks: an error is never a way through.

use std::ops::Deref;

use serde_json::Value;

use super::condition::{Bindings, CallView, Condition, MAX_ARGUMENTS_BYTES};
use super::matches;
use super::rate::{Limit, Per};
use gatehouse_model::{Action, Actor, Basis, Member, Profile, Rule, ToolGate, ToolInfo};

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

/// Who is calling.
#[derive(Debug, Clone, Copy)]
pub struct Who<'a> {
    /// The agent's name.
    pub agent: &'a str,
    /// Its owner's user name.
    pub owner: Option<&'a str>,
    /// Its thread.
    pub thread: Option<&'a str>,
    /// Whether an admin minted its credential (see [`names_agent`]).
    pub by_admin: bool,
}

impl<'a> Who<'a> {
    /// The caller as a profile matches it.
    pub fn member(&self) -> Member<'a> {
        Member { agent: self.agent, owner: self.owner }
    }
}

/// The call itself, when there is one (not for a listing).
#[derive(Debug, Clone, Copy)]
pub struct CallDetail<'a> {
    /// Its arguments.
    pub arguments: &'a Value,
    /// The tool's annotations as sent.
    pub annotations: &'a Value,
    /// When it is decided (Unix ms).
    pub now_ms: i64,
}

/// What rules are matched against.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The exposed tool name.
    pub tool: &'a str,
    /// Its upstream (none: Gatehouse's own).
    pub upstream: Option<&'a str>,
    /// What the tool says of itself.
    pub hints: Hints,
    /// Who calls; none for the console's view of a tool, where only rules
    /// for every agent apply.
    pub who: Option<Who<'a>>,
    /// The call; none for a listing, where rules with a condition do not
    /// apply (the call is checked when it is made).
    pub call: Option<CallDetail<'a>>,
}

impl<'a> Facts<'a> {
    /// A tool as anyone sees it, with no call: the console's view.
    pub fn tool(tool: &'a str, upstream: Option<&'a str>, hints: Hints) -> Self {
        Facts { tool, upstream, hints, who: None, call: None }
    }
}

/// The verdict for one call (or one tool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// What happens.
    pub action: Action,
    /// Whether a matching rule insists on a human decision.
    pub human_only: bool,
    /// Which rule decided, by name (`None`: the annotation default).
    pub rule: Option<String>,
    /// Why, as the console says it.
    pub basis: Basis,
    /// How long a call held for approval may stay pending, when a matching
    /// rule says (the shortest such rule's `approval_ttl`).
    pub approval_ttl: Option<std::time::Duration>,
    /// Why the deciding rule's condition could not be evaluated, if that is
    /// why it matched (it then blocks).
    pub condition_error: Option<String>,
    /// The rate limits of the matching rules the call counts against
    /// (only for a call, with a caller).
    pub limits: Vec<Limit>,
    /// The shadow rules that would have changed what happens.
    pub shadow: Vec<ShadowHit>,
    /// Whose arguments the record keeps, when a matching rule says
    /// (`keep_arguments`; of several, the one that keeps less).
    pub keep_arguments: Option<gatehouse_model::Keep>,
}

impl Verdict {
    /// The verdict on what `profile` does not show an agent it names: not
    /// there for it (blocked, naming the profile).
    pub fn outside(profile: &Profile) -> Verdict {
        Verdict {
            action: Action::Block,
            human_only: false,
            rule: None,
            basis: Basis::Profile(profile.name.clone()),
            approval_ttl: None,
            condition_error: None,
            limits: Vec::new(),
            shadow: Vec::new(),
            keep_arguments: None,
        }
    }
}

/// Rules with their conditions compiled: what the gate holds.
#[derive(Debug, Default)]
pub struct RuleSet {
    rules: Vec<Rule>,
    // By index; `Err` is a stored condition that no longer compiles (it
    // matches every call it could, and blocks: fail closed).
    conditions: Vec<Option<Result<Condition, String>>>,
    /// Upstreams whose tool annotations an admin trusts: only theirs (and
    /// Gatehouse's own tools') decide anything when no rule does.
    trusted: std::collections::BTreeSet<String>,
    /// Tool profiles: config first, then the database's.
    profiles: Vec<Profile>,
}

impl RuleSet {
    /// Compiles each rule's condition.
    pub fn new(rules: Vec<Rule>) -> Self {
        let conditions = rules
            .iter()
            .map(|rule| rule.when.as_deref().map(|when| Condition::compile(when).map_err(|e| e.to_string())))
            .collect();
        RuleSet { rules, conditions, trusted: Default::default(), profiles: Vec::new() }
    }

    /// Other rules under the same trust and profiles (a rule being tried).
    pub fn with_rules(&self, rules: Vec<Rule>) -> Self {
        RuleSet::new(rules).trusting(self.trusted.clone()).with_profiles(self.profiles.clone())
    }

    /// The same rules, with these tool profiles.
    pub fn with_profiles(self, profiles: Vec<Profile>) -> Self {
        RuleSet { profiles, ..self }
    }

    /// The tool profiles, in order.
    pub fn profiles(&self) -> &[Profile] {
        &self.profiles
    }

    /// The profiles that name `who`.
    pub fn profiles_of<'s>(&'s self, who: Member<'s>) -> impl Iterator<Item = &'s Profile> + 's {
        self.profiles.iter().filter(move |p| p.names(who))
    }

    /// The first profile that names `who` and does not show what `shows`
    /// asks of it: with several, each narrows (see [`gatehouse_model::profile`]).
    pub fn hidden_by(&self, who: Member<'_>, shows: impl Fn(&Profile) -> bool) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.names(who) && !shows(p))
    }

    /// The same rules, trusting the annotations of `upstreams`.
    pub fn trusting(self, upstreams: std::collections::BTreeSet<String>) -> Self {
        RuleSet { trusted: upstreams, ..self }
    }

    /// Whether a tool's annotations count: Gatehouse's own (no upstream),
    /// or a trusted upstream's. An upstream is a server Gatehouse does not
    /// control: what it says of its tools is a hint, not a fact (the MCP
    /// specification's own rule), until an admin says otherwise.
    pub fn trusts(&self, upstream: Option<&str>) -> bool {
        upstream.is_none_or(|u| self.trusted.contains(u))
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

impl Deref for RuleSet {
    type Target = [Rule];

    fn deref(&self) -> &[Rule] {
        &self.rules
    }
}

enum Match {
    No,
    Yes,
    /// The condition could not be evaluated.
    Failed(String),
}

fn any(patterns: &[String], value: Option<&str>) -> bool {
    value.is_some_and(|value| patterns.iter().any(|p| matches(p, value)))
}

/// Whether a rule's `agents` scope names the caller. An entry is
/// `owner/agent` (a pattern on either side; an agent with no owner has the
/// owner `""`, so `*/ci` names it), or a bare agent name. A plain user must
/// not be able to claim an `allow` rule by naming an agent so: in one, a
/// bare name names only agents of the owners the rule's `owners` scope names
/// (checked beside it), or, with no `owners`, agents an admin minted
/// ([`Who::by_admin`]). In a stricter rule (`require_approval`, `block`) a
/// bare name names every agent of that name: matching more only asks more.
pub fn names_agent(rule: &Rule, who: Option<Who<'_>>) -> bool {
    let Some(who) = who else { return false };
    let claimable = rule.action == gatehouse_model::Action::Allow && rule.owners.is_empty();
    rule.agents.iter().any(|entry| match entry.split_once('/') {
        Some((owner, agent)) => matches(agent, who.agent) && matches(owner, who.owner.unwrap_or_default()),
        None => matches(entry, who.agent) && (!claimable || who.by_admin),
    })
}

/// Whether the rule's pattern and scopes take in the call (its condition aside).
pub fn in_scope(rule: &Rule, facts: &Facts<'_>) -> bool {
    rule.pattern.matches_tool(facts.tool)
        && (rule.upstreams.is_empty() || any(&rule.upstreams, facts.upstream))
        && (rule.agents.is_empty() || names_agent(rule, facts.who))
        && (rule.owners.is_empty() || any(&rule.owners, facts.who.and_then(|w| w.owner)))
}

/// Whether the rule matches; `bindings` holds the call's values for its
/// conditions, made by the first one evaluated.
fn applies(
    rule: &Rule,
    condition: Option<&Result<Condition, String>>,
    facts: &Facts<'_>,
    bindings: &mut Option<Bindings>,
) -> Match {
    if !in_scope(rule, facts) {
        return Match::No;
    }
    let Some(condition) = condition else {
        return Match::Yes;
    };
    let Some(call) = facts.call else {
        return Match::No;
    };
    let condition = match condition {
        Ok(condition) => condition,
        Err(why) => return Match::Failed(why.clone()),
    };
    let who = facts.who.unwrap_or(Who { agent: "", owner: None, thread: None, by_admin: false });
    let view = CallView {
        tool: facts.tool,
        upstream: facts.upstream,
        agent: who.agent,
        owner: who.owner,
        thread: who.thread,
        arguments: call.arguments,
        annotations: call.annotations,
        now_ms: call.now_ms,
    };
    match condition.eval_with(bindings.get_or_insert_with(|| Bindings::new(&view))) {
        Ok(true) => Match::Yes,
        Ok(false) => Match::No,
        Err(why) => Match::Failed(why),
    }
}

/// What a shadow rule would have done to a call, where that differs from
/// what was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowHit {
    /// The shadow rule's name.
    pub rule: String,
    /// What the call would have met with the rule enforced.
    pub would: Action,
}

/// A rule that matches a call: the rule, the action it takes, and why its
/// condition failed (then the action is `block`).
type Matched<'r> = (&'r Rule, Action, Option<String>);

/// The decision procedure (pure; unit-tested). Shadow rules decide
/// nothing: each one that matches and would have changed the action is
/// listed in [`Verdict::shadow`].
pub fn decide_with(rules: &RuleSet, facts: &Facts<'_>) -> Verdict {
    // A tool the caller's profile does not show is not there for it: no
    // rule, grant or person can let it through.
    if let Some(who) = facts.who
        && let Some(profile) = rules.hidden_by(who.member(), |p| p.shows_tool(facts.tool, facts.upstream))
    {
        return Verdict::outside(profile);
    }
    let mut matching: Vec<Matched<'_>> = Vec::new();
    let mut shadows: Vec<Matched<'_>> = Vec::new();
    let mut bindings = None;
    for (rule, condition) in rules.rules.iter().zip(&rules.conditions) {
        let to = if rule.shadow { &mut shadows } else { &mut matching };
        match applies(rule, condition.as_ref(), facts, &mut bindings) {
            Match::No => {}
            Match::Yes => to.push((rule, rule.action, None)),
            Match::Failed(why) => to.push((rule, Action::Block, Some(why))),
        }
    }
    let trusted = rules.trusts(facts.upstream);
    let mut verdict = verdict_of(&matching, facts, trusted);
    if let (Some(who), Some(_)) = (facts.who, facts.call) {
        let profiles = rules.profiles_of(who.member());
        let rated = profiles.filter_map(|p| Some((Actor::Profile(p.name.clone()), p.rate?, p.rate_per)));
        verdict.limits.extend(rated.map(|(by, rate, per)| limit(by, rate, per, who, facts)));
    }
    for shadow in shadows {
        let mut with = matching.clone();
        with.push(shadow.clone());
        let would = verdict_of(&with, facts, trusted).action;
        if would != verdict.action {
            verdict.shadow.push(ShadowHit { rule: shadow.0.name.clone(), would });
        }
    }
    verdict
}

/// What evaluating this call's conditions may cost, in the units of
/// [`super::condition::COST_BUDGET`]: the estimates of the conditions of the
/// rules whose pattern and scopes take in the call, scaled by the size of
/// its arguments (an estimate is for the largest, and grows no faster than
/// them). The gate runs a costly decision off the async threads.
pub fn condition_cost(rules: &RuleSet, facts: &Facts<'_>) -> u64 {
    let Some(call) = facts.call else { return 0 };
    let estimates: u64 = (rules.rules.iter().zip(&rules.conditions))
        .filter(|(rule, _)| in_scope(rule, facts))
        .filter_map(|(_, condition)| condition.as_ref()?.as_ref().ok())
        .map(Condition::cost)
        .fold(0, u64::saturating_add);
    let largest = MAX_ARGUMENTS_BYTES as u64;
    let bytes = (super::condition::arguments_bytes(call.arguments) as u64).min(largest);
    estimates.saturating_mul(bytes) / largest
}

/// The verdict of the enforced rules that match; with none, the tool's
/// annotations, if `trusted` ([`RuleSet::trusts`]).
fn verdict_of(matching: &[Matched<'_>], facts: &Facts<'_>, trusted: bool) -> Verdict {
    let limits = limits(matching, facts);
    let hints = facts.hints;
    let human_only = matching.iter().any(|(r, ..)| r.human_only) || hints.changes_gate;
    // The strictest TTL wins, as the strictest action does.
    let approval_ttl = matching.iter().filter_map(|(r, ..)| r.approval_ttl).min();
    let keep_arguments = matching.iter().filter_map(|(r, ..)| r.keep_arguments).min();
    // The last of equally strict rules names the reason (as it always has).
    let strictest = matching.iter().max_by_key(|(_, action, _)| *action);
    let verdict = if let Some((rule, action, failed)) = strictest {
        Verdict {
            action: *action,
            human_only,
            rule: Some(rule.name.clone()),
            basis: Basis::Rule(rule.name.clone()),
            approval_ttl,
            condition_error: failed.clone(),
            limits,
            shadow: Vec::new(),
            keep_arguments,
        }
    } else {
        // Only a trusted read-only hint runs a call at once: "not
        // destructive" alone still writes, fetches or leaks.
        let says_safe = hints.read_only == Some(true) || hints.destructive == Some(false);
        let (action, basis) = if hints.read_only == Some(true) && trusted {
            (Action::Allow, Basis::ReadOnly)
        } else if says_safe && !trusted {
            (Action::RequireApproval, Basis::UntrustedHints)
        } else {
            (Action::RequireApproval, Basis::MayDestroy)
        };
        Verdict {
            action,
            human_only,
            rule: None,
            basis,
            approval_ttl,
            condition_error: None,
            limits,
            shadow: Vec::new(),
            keep_arguments,
        }
    };
    // No rule lets an agent change the gate for everyone without a person
    // (a rule may still block it).
    if hints.changes_gate && verdict.action == Action::Allow {
        return Verdict { action: Action::RequireApproval, basis: Basis::ChangesGate, ..verdict };
    }
    verdict
}

/// The rate limits of the rules that match a call.
fn limits(matching: &[Matched<'_>], facts: &Facts<'_>) -> Vec<Limit> {
    let (Some(who), Some(_)) = (facts.who, facts.call) else { return Vec::new() };
    matching
        .iter()
        .filter_map(|(rule, ..)| Some(limit(Actor::Rule(rule.name.clone()), rule.rate?, rule.rate_per, who, facts)))
        .collect()
}

/// One rate a call counts against: `by`'s, counted per `per`.
fn limit(by: Actor, rate: super::rate::Rate, per: Per, who: Who<'_>, facts: &Facts<'_>) -> Limit {
    let subject = match per {
        Per::Owner if who.owner.is_some() => format!("owner:{}", who.owner.unwrap_or_default()),
        // An agent's name is unique per owner: both name it.
        Per::Agent | Per::Owner => format!("agent:{}/{}", who.owner.unwrap_or_default(), who.agent),
        Per::Tool => format!("tool:{}", facts.tool),
    };
    Limit { by, rate, subject }
}

/// What the gate does with `tool` for any agent and any call, and why:
/// what the console shows, by the same procedure the gate uses. Rules
/// scoped to some agents or owners, or with a condition, are not in it.
pub fn gate_for(rules: &RuleSet, tool: ToolInfo) -> ToolGate {
    gate_as(rules, tool, None)
}

/// What the gate does with `tool` for `who` (none: any agent, as
/// [`gate_for`]) before any call: its profiles and the rules scoped to it
/// count, conditions do not (they are decided when the call is made). What
/// `tools/list` hides from that agent is `block` here.
pub fn gate_as(rules: &RuleSet, tool: ToolInfo, who: Option<Who<'_>>) -> ToolGate {
    let hints = Hints { read_only: tool.read_only, destructive: tool.destructive, changes_gate: tool.changes_gate };
    let facts = Facts { who, ..Facts::tool(&tool.name, tool.upstream.as_deref(), hints) };
    let verdict = decide_with(rules, &facts);
    ToolGate { tool, action: verdict.action, human_only: verdict.human_only, basis: verdict.basis }
}
