//! A rule tried on the record: what the gate did to each past call, and
//! what it would do with the rules as they would stand, by the gate's own
//! [`decide_with`]. Pure: the caller reads the calls (as the person may see
//! them) and says what each tool declares of itself now.

use gatehouse_model::{Action, CallRow, State};

use super::decide::{CallDetail, Facts, Hints, RuleSet, Who, decide_with};
use crate::audit::AT_ONCE_PREFIX;

/// What the gate did to a call, as the record has it: ran at once
/// (`allow`), waited for a person (`require_approval`), or refused at once
/// (`block`). `None` for what rules did not decide: a rate's refusal, a
/// shadow rule's note, a request for a resource or prompt.
pub fn what_happened(call: &CallRow) -> Option<Action> {
    let latest = &call.latest;
    if latest.tool.starts_with("resource:") || latest.tool.starts_with("prompt:") {
        return None;
    }
    if call.steps.iter().any(|s| s.state == State::Pending) {
        return Some(Action::RequireApproval);
    }
    let at_once = latest.execution_id.as_str().starts_with(&format!("{AT_ONCE_PREFIX}_"));
    match latest.state {
        State::Blocked => Some(Action::Block),
        State::Limited | State::Shadow => None,
        _ if at_once => Some(Action::Allow),
        _ => None,
    }
}

/// One past call tried under other rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tried {
    /// The gate did `did`; without the rule it would do `without`, with it `would`.
    Decided {
        /// What the record says the gate did.
        did: Action,
        /// What the rules would do without the rule being tried (they may
        /// have changed since the call).
        without: Action,
        /// What they would do with it.
        would: Action,
    },
    /// It cannot be told: the rule has a condition and the call's arguments
    /// are not kept, or the tool is gone.
    Untried,
    /// Not a call the rules decided (see [`what_happened`]), or one the rule
    /// does not reach.
    Skipped,
}

/// Tries one past call with the rule being tried (`with`) and without it.
/// `reaches` says whether the rule being tried takes in the call (its
/// pattern and scopes); `conditional`, whether it has a condition (it then
/// needs the call's arguments: those the record kept whole, else the call
/// is untried); `hints` is what the tool declares of itself now (`None`: it
/// is gone); `by_admin`, whether an admin minted the call's credential.
/// A condition on the tool's annotations reads none (they are not kept).
pub fn try_call(
    with: &RuleSet,
    without: &RuleSet,
    call: &CallRow,
    reaches: impl Fn(&Facts<'_>) -> bool,
    conditional: bool,
    hints: Option<Hints>,
    by_admin: bool,
) -> Tried {
    let Some(did) = what_happened(call) else { return Tried::Skipped };
    let e = &call.latest;
    let who = Who { agent: &e.agent, owner: e.owner.as_deref(), thread: e.thread.as_deref(), by_admin };
    let mut facts = Facts { who: Some(who), ..Facts::tool(&e.tool, e.upstream.as_deref(), hints.unwrap_or_default()) };
    if !reaches(&facts) {
        return Tried::Skipped;
    }
    if hints.is_none() {
        return Tried::Untried;
    }
    let annotations = serde_json::json!({});
    if conditional {
        let kept = call.steps.iter().find_map(|s| Some((s.arguments.as_ref()?.whole()?, s.at_ms)));
        let Some((arguments, at_ms)) = kept else { return Tried::Untried };
        facts.call = Some(CallDetail { arguments, annotations: &annotations, now_ms: at_ms });
    }
    Tried::Decided { did, without: decide_with(without, &facts).action, would: decide_with(with, &facts).action }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_model::{AuditEntry, ExecutionId, Rule};

    fn entry(id: &str, state: State, tool: &str) -> AuditEntry {
        AuditEntry {
            id: 1,
            execution_id: ExecutionId::from(id.to_string()),
            at_ms: 0,
            at: String::new(),
            state,
            tool: tool.into(),
            upstream: Some("git".into()),
            arguments_digest: String::new(),
            agent: "cursor".into(),
            owner: Some("ada".into()),
            owner_id: None,
            credential_id: None,
            thread: None,
            actor: None,
            detail: None,
            arguments: None,
        }
    }

    fn call(steps: Vec<AuditEntry>) -> CallRow {
        CallRow { latest: steps.last().unwrap().clone(), steps }
    }

    #[test]
    fn the_record_says_what_the_gate_did() {
        let ran = call(vec![entry("call_1", State::Completed, "git__status")]);
        let waited =
            call(vec![entry("exec_1", State::Pending, "git__push"), entry("exec_1", State::Declined, "git__push")]);
        let refused = call(vec![entry("call_2", State::Blocked, "git__push")]);
        let limited = call(vec![entry("call_3", State::Limited, "git__push")]);
        let read = call(vec![entry("req_1", State::Allowed, "resource:file:///a")]);
        assert_eq!(what_happened(&ran), Some(Action::Allow));
        assert_eq!(what_happened(&waited), Some(Action::RequireApproval));
        assert_eq!(what_happened(&refused), Some(Action::Block));
        assert_eq!((what_happened(&limited), what_happened(&read)), (None, None));
    }

    #[test]
    fn a_call_is_tried_by_the_gates_own_procedure() {
        let block = RuleSet::new(vec![Rule::new("git__push".parse().unwrap(), Action::Block)]);
        let none = RuleSet::new(Vec::new());
        let ran = call(vec![entry("call_1", State::Completed, "git__push")]);
        let all = |_: &Facts<'_>| true;
        let hints = Some(Hints::default());
        let decided = Tried::Decided { did: Action::Allow, without: Action::RequireApproval, would: Action::Block };
        assert_eq!(try_call(&block, &none, &ran, all, false, hints, false), decided, "no rule: an untrusted tool asks");
        assert_eq!(
            try_call(&block, &none, &ran, all, true, hints, false),
            Tried::Untried,
            "a condition needs the arguments"
        );
        assert_eq!(try_call(&block, &none, &ran, all, false, None, false), Tried::Untried, "the tool is gone");
        assert_eq!(try_call(&block, &none, &ran, |_| false, false, hints, false), Tried::Skipped);
    }

    #[test]
    fn a_condition_reads_the_arguments_the_record_kept_whole() {
        use gatehouse_model::KeptArguments;
        let when = |rule: Rule| Rule { when: Some("args.branch == 'main'".into()), ..rule };
        let block = RuleSet::new(vec![when(Rule::new("git__push".parse().unwrap(), Action::Block))]);
        let none = RuleSet::new(Vec::new());
        let kept = |arguments: serde_json::Value, max: usize| {
            let mut e = entry("call_1", State::Completed, "git__push");
            e.arguments = Some(KeptArguments::keep(&arguments, &[], max));
            call(vec![e])
        };
        let (all, hints) = (|_: &Facts<'_>| true, Some(Hints::default()));
        let to_main =
            try_call(&block, &none, &kept(serde_json::json!({"branch": "main"}), 100), all, true, hints, false);
        assert!(matches!(to_main, Tried::Decided { would: Action::Block, .. }), "{to_main:?}");
        let elsewhere =
            try_call(&block, &none, &kept(serde_json::json!({"branch": "dev"}), 100), all, true, hints, false);
        assert!(matches!(elsewhere, Tried::Decided { would: Action::RequireApproval, .. }), "{elsewhere:?}");
        let cut = try_call(&block, &none, &kept(serde_json::json!({"branch": "main"}), 5), all, true, hints, false);
        assert_eq!(cut, Tried::Untried, "arguments kept cut are not enough");
    }
}
