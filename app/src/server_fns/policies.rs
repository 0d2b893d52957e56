//! The policies page: every rule (the config file's read-only, the
//! database's changeable by admins), who changed them, and what a rule
//! being edited would do to each tool it matches.

#[cfg(feature = "ssr")]
use gatehouse_model::Source;
use gatehouse_model::{Action, Basis, ChangeEntry, Rule, ToolGate};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use super::context as ctx;

/// What the policies page shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PoliciesView {
    /// Server time when read (Unix ms).
    pub now_ms: i64,
    /// Whether the viewer may change rules.
    pub is_admin: bool,
    /// Every rule: the config file's first, then the database's.
    pub rules: Vec<Rule>,
    /// The latest rule changes, newest first.
    pub changes: Vec<ChangeEntry>,
    /// Patterns of the rules that match no exposed tool right now (for
    /// example an upstream's own tool name, without its prefix).
    pub unmatched: Vec<String>,
    /// Each shadow rule (by name): how many calls it would have changed
    /// since it was saved (a config rule: since the log began).
    pub shadow_counts: Vec<(String, i64)>,
    /// Each rule (by name) that decided calls in the last [`REPLAY_DAYS`]
    /// days: how many (let through, paused, blocked or held to its rate),
    /// among the calls the viewer may see.
    pub decided: Vec<(String, i64)>,
}

/// One tool a rule being edited matches: what the gate does now, and would do.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RulePreview {
    /// The tool and what the gate does with it now.
    pub now: ToolGate,
    /// What the gate would do with the rule saved.
    pub then: Action,
    /// Whether only a person could decide then.
    pub then_human_only: bool,
    /// Why, then.
    pub then_basis: Basis,
    /// The rule is a shadow rule: it decides nothing; `then` is what it
    /// would do (each call where that differs is recorded).
    pub shadow: bool,
    /// What the gate does with the rule saved but not applying (a shadow
    /// rule's real effect: a rule of its name it replaces is gone).
    pub stays: Action,
    /// For a rule that applies to some calls only (agents, owners, a
    /// condition): which, in words, and what the gate does to the others.
    pub only: Option<Only>,
}

/// The calls a scoped or conditional rule applies to, and the others' gate.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Only {
    /// Which calls, in words ("when args.limit > 50", "for agents alice/cursor").
    pub when: String,
    /// What the gate does to the calls it does not apply to.
    pub otherwise: Action,
    /// Why.
    pub otherwise_basis: Basis,
}

/// Rules and their recent changes.
#[server(prefix = "/api/fn", endpoint = "policies")]
pub async fn list_policies() -> Result<PoliciesView, ServerFnError> {
    let catalog = ctx::tool_catalog()?;
    ctx::blocking(move |user, core| {
        let rules = core.policy.rules()?.rules().to_vec();
        let tools = catalog.exposed_tools();
        let unmatched = gatehouse_core::policy::unmatched(&rules, tools.iter().map(|t| t.name.as_str()))
            .into_iter()
            .map(|rule| rule.pattern.to_string())
            .collect();
        let mut shadow_counts = Vec::new();
        for rule in rules.iter().filter(|r| r.shadow) {
            let since =
                if rule.source == Source::Database { core.policy.saved_at(&rule.name)?.unwrap_or(0) } else { 0 };
            let count = core
                .approvals
                .audit()
                .count_by_actor_since(&gatehouse_model::Actor::Shadow(rule.name.clone()).to_string(), since)?;
            shadow_counts.push((rule.name.clone(), count));
        }
        let since = core.clock.now_ms() - i64::from(REPLAY_DAYS) * 86_400_000;
        let decided =
            core.approvals.audit().decided_by_rules_since(since, &gatehouse_core::audit::HistoryScope::of(&user))?;
        Ok(PoliciesView {
            now_ms: core.clock.now_ms(),
            is_admin: user.is_admin,
            rules,
            changes: core.changes.recent("policy", 20)?,
            unmatched,
            shadow_counts,
            decided,
        })
    })
    .await
}

/// A rule as the editor's form holds it, the one argument of the preview
/// and of Save (`draft[pattern]`, … in a form): scopes as comma-separated
/// patterns, checkboxes as `on`, everything as typed. [`RuleDraft::rule`]
/// reads it into the one [`Rule`] contract.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RuleDraft {
    /// Its name (default: the pattern).
    #[serde(default)]
    pub name: Option<String>,
    /// The tool-name pattern.
    pub pattern: String,
    /// `allow`, `require_approval` or `block`.
    pub action: String,
    /// A checkbox: present (and not `false`) means on.
    #[serde(default)]
    pub human_only: Option<String>,
    /// Agents, comma-separated patterns.
    #[serde(default)]
    pub agents: Option<String>,
    /// Owners, comma-separated patterns.
    #[serde(default)]
    pub owners: Option<String>,
    /// Upstreams, comma-separated patterns.
    #[serde(default)]
    pub upstreams: Option<String>,
    /// The condition, in CEL.
    #[serde(default)]
    pub when: Option<String>,
    /// The rate limit (`10/min`).
    #[serde(default)]
    pub rate: Option<String>,
    /// Whom it counts (`agent`, `owner`, `tool`).
    #[serde(default)]
    pub rate_per: Option<String>,
    /// A checkbox: shadow mode.
    #[serde(default)]
    pub shadow: Option<String>,
    /// Whose arguments the record keeps (`gated`, `all`, `none`; empty:
    /// as configured).
    #[serde(default)]
    pub keep_arguments: Option<String>,
}

#[cfg(feature = "ssr")]
impl RuleDraft {
    /// The rule it describes, normalised and checked as Save would; each
    /// field is read by the contract's own parser, so a refusal names it.
    fn rule(self) -> Result<Rule, RuleProblems> {
        use gatehouse_model::{RuleError, Target};
        let list = super::comma_list;
        let on = |v: Option<String>| v.is_some_and(|v| !v.is_empty() && v != "false");
        let text = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
        // Each field read on its own, so every bad one is named at once; a
        // field that does not read stands in as its default for the checks.
        let mut problems: Vec<RuleError> = Vec::new();
        fn read<T>(problems: &mut Vec<RuleError>, parsed: Result<T, RuleError>, default: T) -> T {
            parsed.unwrap_or_else(|e| {
                problems.push(e);
                default
            })
        }
        let target = read(&mut problems, Target::parse(&self.pattern).map(Some), None);
        let action = read(&mut problems, self.action.parse().map(Some), None);
        let rate = read(&mut problems, text(self.rate).map(|r| r.parse()).transpose(), None);
        let rate_per = read(&mut problems, text(self.rate_per).unwrap_or_default().parse(), Default::default());
        let keep_arguments = read(
            &mut problems,
            text(self.keep_arguments)
                .map(|k| k.parse())
                .transpose()
                .map_err(|reason| RuleError { field: "keep_arguments", reason }),
            None,
        );
        let rule = Rule {
            name: self.name.unwrap_or_default(),
            human_only: on(self.human_only),
            agents: list(self.agents),
            owners: list(self.owners),
            upstreams: list(self.upstreams),
            when: self.when,
            rate,
            rate_per,
            shadow: on(self.shadow),
            keep_arguments,
            ..Rule::new(
                target.clone().unwrap_or_else(|| Target::parse("*").expect("`*` is a pattern")),
                action.unwrap_or(gatehouse_model::Action::RequireApproval),
            )
        }
        .normalised();
        for problem in gatehouse_core::policy::rule_problems(&rule) {
            // A name that stands in for an unreadable pattern says nothing new.
            let stand_in = problem.field == "pattern" && target.is_none();
            if !stand_in && !problems.iter().any(|p| p.field == problem.field) {
                problems.push(problem);
            }
        }
        if problems.is_empty() { Ok(rule) } else { Err(RuleProblems(problems)) }
    }
}

/// Every field of a draft that does not make a rule, each with why. Said
/// one line per field (`invalid <field>: <why>`), which the editor splits
/// to mark each field ([`crate::outcome::field_error`]).
#[cfg(feature = "ssr")]
#[derive(Debug)]
pub struct RuleProblems(Vec<gatehouse_model::RuleError>);

#[cfg(feature = "ssr")]
impl From<RuleProblems> for gatehouse_core::approvals::AccessError {
    fn from(problems: RuleProblems) -> Self {
        let lines: Vec<String> =
            problems.0.into_iter().map(|p| gatehouse_core::error::CoreError::from(p).to_string()).collect();
        gatehouse_core::approvals::AccessError::Invalid(lines.join("\n"))
    }
}

/// The exposed tools the rule being edited matches, and what the gate would
/// do with each if it were saved. For a rule with a scope or a condition,
/// "then" is what it does to the calls it matches.
#[server(prefix = "/api/fn", endpoint = "policy_preview")]
pub async fn preview_rule(draft: RuleDraft) -> Result<Vec<RulePreview>, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::policy::{RuleSet, gate_for, matches};
    let catalog = ctx::tool_catalog()?;
    ctx::blocking(move |_user, core| {
        let rule = draft.rule()?;
        let now = core.policy.rules()?;
        // Saving replaces the database's rule of that name, if there is one.
        let mut then: Vec<Rule> =
            now.iter().filter(|r| !(r.name == rule.name && r.source == Source::Database)).cloned().collect();
        // The calls it does not apply to (and every call, for a shadow rule,
        // which decides nothing) meet the other rules alone.
        let others = RuleSet::new(then.clone());
        // As it acts on the calls it matches: its agents, owners and
        // condition met (the tool's upstream is known, so that scope stays).
        // A shadow rule's preview shows what it would do once enforced.
        then.push(Rule {
            agents: Vec::new(),
            owners: Vec::new(),
            when: None,
            rate: None,
            shadow: false,
            ..rule.clone()
        });
        let when = scope_words(&rule);
        let then = RuleSet::new(then);
        let previews = catalog
            .exposed_tools()
            .into_iter()
            .filter(|t| rule.pattern.matches_tool(&t.name))
            .filter(|t| {
                rule.upstreams.is_empty()
                    || t.upstream.as_deref().is_some_and(|u| rule.upstreams.iter().any(|p| matches(p, u)))
            })
            .map(|tool| {
                let after = gate_for(&then, tool.clone());
                let stays = gate_for(&others, tool.clone());
                let only = when.clone().map(|when| Only {
                    when,
                    otherwise: stays.action,
                    otherwise_basis: stays.basis.clone(),
                });
                RulePreview {
                    now: gate_for(&now, tool),
                    stays: stays.action,
                    then: after.action,
                    then_human_only: after.human_only,
                    then_basis: after.basis,
                    shadow: rule.shadow,
                    only,
                }
            })
            .collect();
        Ok::<_, AccessError>(previews)
    })
    .await
}

/// How many days back a rule being written is tried on the record.
pub const REPLAY_DAYS: u32 = 7;
/// The most calls it is tried on (the latest ones the viewer may see).
pub const REPLAY_CALLS: usize = 2_000;
/// The most changed calls listed (all are counted).
pub const REPLAY_LISTED: usize = 20;

/// What a rule being written would have done to the calls of the last
/// [`REPLAY_DAYS`] days that the viewer may see, against the rules as they
/// stand: computed by the gate's own decision procedure over the record.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Replay {
    /// Server time when read (Unix ms).
    pub now_ms: i64,
    /// How many days back.
    pub days: u32,
    /// How many calls were read (at most [`REPLAY_CALLS`]).
    pub read: usize,
    /// How many the rule reaches whose outcome it leaves as the rules have it.
    pub same: usize,
    /// For each change, what the gate did and would do, and how many calls.
    pub changes: Vec<(Action, Action, usize)>,
    /// The changed calls, newest first (at most [`REPLAY_LISTED`]).
    pub changed: Vec<ReplayedCall>,
    /// Calls it reaches that cannot be tried: it has a condition and
    /// arguments are not kept, or the tool is gone.
    pub untried: usize,
}

/// One past call a rule being written would treat otherwise.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReplayedCall {
    /// The call's execution id.
    pub execution_id: String,
    /// The tool.
    pub tool: String,
    /// The agent, and its owner.
    pub agent: String,
    /// Its owner.
    pub owner: Option<String>,
    /// When (Unix ms).
    pub at_ms: i64,
    /// What the gate did.
    pub did: Action,
    /// What it would do with the rule saved.
    pub would: Action,
}

/// The rule being edited tried on the last [`REPLAY_DAYS`] days of calls the
/// viewer may see (their own agents', or everyone's for an admin): each
/// call decided by the gate's own procedure with the rule saved and
/// without it; where they differ, what the record says the gate did and
/// what it would do. None for a resource or prompt rule.
#[server(prefix = "/api/fn", endpoint = "policy_replay")]
pub async fn replay_rule(draft: RuleDraft) -> Result<Option<Replay>, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::policy::Hints;
    use gatehouse_core::policy::decide::in_scope;
    use gatehouse_core::policy::replay::{Tried, try_call};
    let catalog = ctx::tool_catalog()?;
    ctx::blocking(move |user, core| {
        let rule = draft.rule()?;
        if !rule.pattern.is_tools() {
            return Ok(None);
        }
        let now = core.policy.rules()?;
        // Saved, it replaces the database's rule of its name; tried as
        // enforced (a shadow rule's would-be effect).
        let others: Vec<Rule> =
            now.iter().filter(|r| !(r.name == rule.name && r.source == Source::Database)).cloned().collect();
        let mut with = others.clone();
        with.push(Rule { shadow: false, ..rule.clone() });
        let (without, with) = (now.with_rules(others), now.with_rules(with));
        let now_ms = core.clock.now_ms();
        let since = now_ms - i64::from(REPLAY_DAYS) * 86_400_000;
        let from = gatehouse_core::clock::rfc3339(since).chars().take(10).collect();
        let filter = gatehouse_model::HistoryFilter { from, ..Default::default() };
        let calls = core.approvals.calls_for(&user, &filter, REPLAY_CALLS)?.calls;
        let tools = catalog.exposed_tools();
        let hints_of = |name: &str| {
            tools.iter().find(|t| t.name == name).map(|t| Hints {
                read_only: t.read_only,
                destructive: t.destructive,
                changes_gate: t.changes_gate,
            })
        };
        let minted_by_admin: std::collections::HashSet<String> =
            core.credentials.list()?.into_iter().filter(|c| c.by_admin).map(|c| c.id.to_string()).collect();
        let mut replay = Replay { now_ms, days: REPLAY_DAYS, read: calls.len(), ..Default::default() };
        for call in calls.iter().filter(|c| c.latest.at_ms >= since) {
            let by_admin = call.latest.credential_id.as_ref().is_some_and(|id| minted_by_admin.contains(id.as_str()));
            let hints = hints_of(&call.latest.tool);
            let reaches = |facts: &gatehouse_core::policy::Facts<'_>| in_scope(&rule, facts);
            match try_call(&with, &without, call, reaches, rule.when.is_some(), hints, by_admin) {
                Tried::Skipped => {}
                Tried::Untried => replay.untried += 1,
                // Only what the rule changes: the rules without it may
                // already differ from the record (rules changed since).
                Tried::Decided { without, would, .. } if without == would => replay.same += 1,
                Tried::Decided { did, would, .. } => {
                    let e = &call.latest;
                    match replay.changes.iter_mut().find(|(d, w, _)| (*d, *w) == (did, would)) {
                        Some((.., n)) => *n += 1,
                        None => replay.changes.push((did, would, 1)),
                    }
                    if replay.changed.len() < REPLAY_LISTED {
                        replay.changed.push(ReplayedCall {
                            execution_id: e.execution_id.to_string(),
                            tool: e.tool.clone(),
                            agent: e.agent.clone(),
                            owner: e.owner.clone(),
                            at_ms: e.at_ms,
                            did,
                            would,
                        });
                    }
                }
            }
        }
        Ok::<_, AccessError>(Some(replay))
    })
    .await
}

/// What the editor warns of in a condition being written (a text test on a
/// path or URL: `path_under` or `url_under` says what is meant); nothing
/// for an empty one or one that does not parse (saving says why).
#[server(prefix = "/api/fn", endpoint = "policy_condition_warnings")]
pub async fn condition_warnings(when: String) -> Result<Vec<String>, ServerFnError> {
    use gatehouse_core::policy::condition::{Condition, MAX_SOURCE_CHARS};
    ctx::blocking(move |_user, _core| {
        if when.trim().is_empty() || when.chars().count() > MAX_SOURCE_CHARS {
            return Ok(Vec::new());
        }
        Ok::<_, gatehouse_core::approvals::AccessError>(Condition::warnings(&when))
    })
    .await
}

/// Which calls a rule applies to, in words, if not every call of its tools.
#[cfg(feature = "ssr")]
fn scope_words(rule: &Rule) -> Option<String> {
    let mut parts = Vec::new();
    if !rule.agents.is_empty() {
        parts.push(format!("for agents {}", rule.agents.join(", ")));
    }
    if !rule.owners.is_empty() {
        parts.push(format!("for agents of {}", rule.owners.join(", ")));
    }
    if let Some(when) = &rule.when {
        parts.push(format!("when {when}"));
    }
    (!parts.is_empty()).then(|| parts.join(" and "))
}

/// Adds or replaces the database rule of the draft's name (admins only);
/// the change log records who.
#[server(prefix = "/api/fn", endpoint = "policy_save")]
pub async fn save_rule(draft: RuleDraft) -> Result<(), ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::changes::Change;
    let catalog = ctx::tool_catalog()?;
    ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Err(AccessError::Forbidden);
        }
        let rule = core.policy.set(draft.rule()?)?;
        let detail = describe(&rule);
        let actor = user.actor().to_string();
        core.changes.record(Change {
            actor: &actor,
            subject: "policy",
            target: &rule.name,
            action: "set",
            detail: Some(&detail),
        })?;
        tracing::info!(rule = %rule.name, pattern = %rule.pattern, detail, by = %user.username, "policy rule saved");
        Ok(())
    })
    .await?;
    catalog.lists_changed();
    Ok(())
}

/// What the change log says a saved rule does.
#[cfg(feature = "ssr")]
fn describe(rule: &Rule) -> String {
    let mut parts = vec![rule.action.label().to_string()];
    if rule.name != rule.pattern.as_str() {
        parts.push(format!("tools {}", rule.pattern));
    }
    if rule.human_only {
        parts.push("human only".into());
    }
    for (label, list) in [("agents", &rule.agents), ("owners", &rule.owners), ("upstreams", &rule.upstreams)] {
        if !list.is_empty() {
            parts.push(format!("{label} {}", list.join(", ")));
        }
    }
    if let Some(when) = &rule.when {
        parts.push(format!("when {when}"));
    }
    if let Some(rate) = &rule.rate {
        parts.push(format!("at most {rate} per {}", rule.rate_per.as_str()));
    }
    if rule.shadow {
        parts.push("shadow (decides nothing)".into());
    }
    parts.join(", ")
}

/// Makes the database shadow rule `name` enforcing (admins only): one step,
/// in the change log as `promote`.
#[server(prefix = "/api/fn", endpoint = "policy_promote")]
pub async fn promote_rule(name: String) -> Result<(), ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::changes::Change;
    let catalog = ctx::tool_catalog()?;
    ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Err(AccessError::Forbidden);
        }
        let rules = core.policy.rules()?;
        let Some(rule) = rules.iter().find(|r| r.name == name && r.source == Source::Database && r.shadow) else {
            return Err(AccessError::Invalid(format!("{name:?} is not a shadow rule saved here")));
        };
        let rule = core.policy.set(Rule { shadow: false, ..rule.clone() })?;
        let actor = user.actor().to_string();
        let detail = describe(&rule);
        let change =
            Change { actor: &actor, subject: "policy", target: &rule.name, action: "promote", detail: Some(&detail) };
        core.changes.record(change)?;
        tracing::info!(rule = %rule.name, by = %user.username, "shadow rule promoted");
        Ok(())
    })
    .await?;
    catalog.lists_changed();
    Ok(())
}

/// Removes the database rule named `name` (admins only); `pattern` names a
/// rule saved without a name.
#[server(prefix = "/api/fn", endpoint = "policy_remove")]
pub async fn remove_rule(name: Option<String>, pattern: Option<String>) -> Result<bool, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::changes::Change;
    let catalog = ctx::tool_catalog()?;
    let removed = ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Err(AccessError::Forbidden);
        }
        let pattern = name.or(pattern).unwrap_or_default();
        let removed = core.policy.remove(&pattern)?;
        if removed {
            let actor = user.actor().to_string();
            core.changes.record(Change {
                actor: &actor,
                subject: "policy",
                target: &pattern,
                action: "remove",
                detail: None,
            })?;
            tracing::info!(pattern = %pattern, by = %user.username, "policy rule removed");
        }
        Ok(removed)
    })
    .await?;
    catalog.lists_changed();
    Ok(removed)
}
