//! Suggested grants: once a person has approved the same agent's calls to
//! the same tool with arguments of the same shape [`Suggest::after`] times
//! in [`Suggest::window`] (config keys `suggest_grants_after` and
//! `suggest_grants_window`), the call's page offers the narrowest grant that
//! covers each of them and the call at hand. Accepting it goes through
//! [`super::approve_and_grant`], like any grant; turning it down is
//! remembered for that person, agent and tool.
//!
//! The approved calls are known by the arguments the record kept
//! (`keep_arguments`; by default, every call that waited for a person), so
//! nothing is offered where nothing was kept. A value kept redacted or cut
//! short constrains nothing it cannot vouch for.

use gatehouse_model::{
    GrantSuggestion, KeptArguments, SUGGEST_AFTER, SUGGEST_FROM_AT_MOST, SUGGEST_WINDOW_MS, UserId, form_field_name,
};

use std::time::Duration;

use super::*;

/// When the call page offers a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suggest {
    /// `suggest_grants_after = 3`: approvals alike before an offer; `0`
    /// offers nothing.
    pub after: u32,
    /// `suggest_grants_window = "7d"`: how far back those approvals count.
    pub window: Duration,
}

impl Default for Suggest {
    fn default() -> Self {
        Self { after: SUGGEST_AFTER, window: Duration::from_millis(SUGGEST_WINDOW_MS.unsigned_abs()) }
    }
}

/// How long a suggested grant lasts: long enough to spare a working day's
/// questions, short enough to be gone by tomorrow.
pub const SUGGESTED_SCOPE: GrantScope = GrantScope::EightHours;

/// The same agent, known by its owner's id (`0`: an owner-less agent) and
/// its name within that owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentOf {
    /// The owner's user id, `None` for an owner-less agent.
    pub owner_id: Option<UserId>,
    /// The agent's name.
    pub agent: String,
}

impl AgentOf {
    fn owner_key(&self) -> i64 {
        self.owner_id.map_or(0, |id| id.get())
    }
}

/// The JSON type of a value, for a shape.
fn kind(value: &Value) -> u8 {
    match value {
        Value::Null => 0,
        Value::Bool(_) => 1,
        Value::Number(_) => 2,
        Value::String(_) => 3,
        Value::Array(_) => 4,
        Value::Object(_) => 5,
    }
}

/// Whether two calls' arguments have the same shape: the same top-level
/// names, each of the same JSON type.
fn same_shape(a: &Value, b: &Value) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            a.len() == b.len() && a.iter().all(|(name, v)| b.get(name).is_some_and(|w| kind(v) == kind(w)))
        }
        (None, None) => kind(a) == kind(b),
        _ => false,
    }
}

/// The longest prefix of every value that ends at a `/`, if it says more
/// than a scheme or the root (`/tmp/build/`, `https://host/api/`).
fn common_directory(values: &[&str]) -> Option<String> {
    let first = values.first()?;
    let mut len = first.len();
    for v in &values[1..] {
        len = len.min(first.bytes().zip(v.bytes()).take_while(|(a, b)| a == b).count());
    }
    let cut = first[..len].rfind('/')? + 1;
    let prefix = &first[..cut];
    let said = prefix.trim_end_matches('/');
    (!said.is_empty() && !said.ends_with(':')).then(|| prefix.to_string())
}

/// The narrowest constraints that cover `current` and each of `approved`
/// (all of `current`'s shape): per top-level string argument, its value if
/// every call had the same, else the deepest directory they share if each
/// is under it as the gate reads it ([`normalise::check_under`]), else none.
/// `None` when the call takes arguments and none could be constrained: a
/// grant for any arguments is a person's own choice, never an offer.
pub fn narrowest(current: &Value, approved: &[&Value]) -> Option<BTreeMap<String, ArgMatch>> {
    let mut constraints = BTreeMap::new();
    let Some(args) = current.as_object() else { return Some(constraints) };
    for (name, value) in args {
        let Some(now) = value.as_str().filter(|_| form_field_name(name)) else { continue };
        let mut values: Vec<&str> = approved.iter().filter_map(|a| a.get(name).and_then(Value::as_str)).collect();
        if values.len() != approved.len() || values.contains(&gatehouse_model::kept::REDACTED) {
            continue;
        }
        values.push(now);
        if values.iter().all(|v| *v == now) {
            constraints.insert(name.clone(), ArgMatch::Exact(now.to_string()));
        } else if let Some(prefix) = common_directory(&values)
            && values.iter().all(|v| normalise::check_under(v, &prefix).is_ok())
        {
            constraints.insert(name.clone(), ArgMatch::Prefix(prefix));
        }
    }
    (args.is_empty() || !constraints.is_empty()).then_some(constraints)
}

/// The offer for a call of `agent` to `tool` with `arguments`, from the
/// `approved` calls' kept arguments: those of its shape, kept whole, if
/// there are `after` of them (at least one).
pub fn offer(arguments: &Value, approved: &[KeptArguments], after: u32) -> Option<GrantSuggestion> {
    let like: Vec<&Value> =
        approved.iter().filter_map(KeptArguments::whole).filter(|a| same_shape(a, arguments)).collect();
    let approvals = u32::try_from(like.len()).unwrap_or(u32::MAX);
    if after == 0 || approvals < after {
        return None;
    }
    let held = narrowest(arguments, &like)?;
    let free = arguments
        .as_object()
        .map(|all| all.keys().filter(|name| !held.contains_key(*name)).cloned().collect())
        .unwrap_or_default();
    Some(GrantSuggestion { approvals, scope: SUGGESTED_SCOPE, arguments: held, free })
}

impl GrantStore {
    /// The grant to offer `user` on the pending call `view`, if one fits:
    /// `user` could make it (may decide, not a person-only call, an admin
    /// for an admin-only one), has not turned it down for this agent and
    /// tool, and approved enough like it ([`offer`]). Reads the database.
    pub fn suggestion_for(
        &self,
        audit: &crate::audit::AuditLog,
        user: &User,
        view: &gatehouse_model::ExecutionView,
    ) -> Result<Option<GrantSuggestion>, CoreError> {
        let Some(arguments) = view.arguments.as_ref() else { return Ok(None) };
        let could_grant = self.suggest.after > 0
            && view.state == gatehouse_model::State::Pending
            && crate::approvals::may_decide(user, view.owner_id)
            && !view.human_only
            && (!view.admin_only || user.is_admin);
        if !could_grant {
            return Ok(None);
        }
        let Some(agent) = Self::agent_of(view) else { return Ok(None) };
        if self.declined(user, &agent, &view.tool)? {
            return Ok(None);
        }
        let window = i64::try_from(self.suggest.window.as_millis()).unwrap_or(i64::MAX);
        let since = self.clock.now_ms().saturating_sub(window);
        let approved =
            audit.approved_arguments(agent.owner_id, &agent.agent, &view.tool, since, SUGGEST_FROM_AT_MOST)?;
        Ok(offer(arguments, &approved, self.suggest.after))
    }

    /// Remembers that `user` turned down the offer for `view`'s agent and
    /// tool: it is not made to them again.
    pub fn decline_suggestion(&self, user: &User, view: &gatehouse_model::ExecutionView) -> Result<(), CoreError> {
        let Some(agent) = Self::agent_of(view) else { return Ok(()) };
        self.db.conn()?.execute(
            "INSERT INTO declined_suggestions (user_id, owner_id, agent, tool, declined_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (user_id, owner_id, agent, tool) DO UPDATE SET declined_at = excluded.declined_at",
            crate::args![user.id.get(), agent.owner_key(), agent.agent, view.tool, self.clock.now_ms()],
        )?;
        Ok(())
    }

    fn declined(&self, user: &User, agent: &AgentOf, tool: &str) -> Result<bool, CoreError> {
        let found: Option<i64> = self.db.conn()?.query_opt(
            "SELECT declined_at FROM declined_suggestions WHERE user_id = ?1 AND owner_id = ?2 AND agent = ?3 AND tool = ?4",
            crate::args![user.id.get(), agent.owner_key(), agent.agent, tool],
            |r| r.get(0),
        )?;
        Ok(found.is_some())
    }

    /// The agent that made `view`'s call, by its owner's id as the call
    /// carries it (`None` if the call has an owner who was removed: it is
    /// no one's, and owner-less agents are someone else).
    fn agent_of(view: &gatehouse_model::ExecutionView) -> Option<AgentOf> {
        if view.owner.is_some() && view.owner_id.is_none() {
            return None;
        }
        Some(AgentOf { owner_id: view.owner_id, agent: view.agent.clone() })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn whole(v: Value) -> KeptArguments {
        KeptArguments::Whole { arguments: v, redacted: vec![] }
    }

    #[test]
    fn three_approvals_under_one_directory_offer_that_directory() {
        let approved: Vec<_> =
            ["/tmp/build/a.o", "/tmp/build/sub/b.o", "/tmp/build/c.o"].map(|p| whole(json!({"path": p}))).into();
        let offer = offer(&json!({"path": "/tmp/build/d.o"}), &approved, 3).expect("an offer");
        assert_eq!(offer.approvals, 3);
        assert_eq!(offer.scope, GrantScope::EightHours);
        assert_eq!(offer.arguments["path"], ArgMatch::Prefix("/tmp/build/".into()));
    }

    #[test]
    fn two_are_not_enough_and_another_shape_does_not_count() {
        let two: Vec<_> = ["/tmp/a", "/tmp/b"].map(|p| whole(json!({"path": p}))).into();
        assert_eq!(offer(&json!({"path": "/tmp/c"}), &two, 3), None);
        let mut three = two.clone();
        three.push(whole(json!({"path": "/tmp/d", "force": true})));
        assert_eq!(offer(&json!({"path": "/tmp/c"}), &three, 3), None, "a call with another argument is not alike");
        three.push(whole(json!({"path": 7})));
        assert_eq!(offer(&json!({"path": "/tmp/c"}), &three, 3), None, "nor one whose argument has another type");
    }

    #[test]
    fn the_same_value_each_time_is_offered_exactly() {
        let approved: Vec<_> = (0..4).map(|_| whole(json!({"repo": "gatehouse", "n": 1}))).collect();
        let offer = offer(&json!({"repo": "gatehouse", "n": 2}), &approved, 3).unwrap();
        assert_eq!(offer.approvals, 4);
        assert_eq!(offer.arguments.len(), 1, "numbers are not constrained: {:?}", offer.arguments);
        assert_eq!(offer.arguments["repo"], ArgMatch::Exact("gatehouse".into()));
        assert_eq!(offer.free, ["n"], "and the offer says the number is left free");
    }

    #[test]
    fn nothing_in_common_offers_nothing_rather_than_any_arguments() {
        let approved: Vec<_> = ["/etc/a", "/home/b", "/var/c"].map(|p| whole(json!({"path": p}))).into();
        assert_eq!(offer(&json!({"path": "/tmp/d"}), &approved, 3), None);
        // Only the root in common: not a constraint worth offering.
        assert_eq!(common_directory(&["/etc/a", "/tmp/b"]), None);
        assert_eq!(common_directory(&["https://a.example/x", "https://b.example/y"]), None);
        assert_eq!(
            common_directory(&["https://a.example/x/1", "https://a.example/x/2"]),
            Some("https://a.example/x/".into())
        );
    }

    #[test]
    fn a_path_that_climbs_out_is_not_covered_by_its_string_prefix() {
        let approved: Vec<_> =
            ["/tmp/build/a", "/tmp/build/b", "/tmp/build/../../etc/passwd"].map(|p| whole(json!({"path": p}))).into();
        // The shared string prefix is /tmp/build/, but one value is not under it.
        assert_eq!(offer(&json!({"path": "/tmp/build/c"}), &approved, 3), None);
    }

    #[test]
    fn redacted_or_cut_arguments_vouch_for_nothing() {
        let mut approved: Vec<_> = ["/tmp/a", "/tmp/b", "/tmp/c"]
            .map(|p| KeptArguments::Whole {
                arguments: json!({"path": p, "token": "•••"}),
                redacted: vec!["token".into()],
            })
            .into();
        let offered = offer(&json!({"path": "/tmp/d", "token": "s3cret"}), &approved, 3).unwrap();
        assert_eq!(offered.arguments.keys().collect::<Vec<_>>(), ["path"], "the redacted value is not offered");
        assert_eq!(offered.free, ["token"]);
        approved.truncate(2);
        approved.push(KeptArguments::Cut { size: 9000, first: "{\"path\":\"/tmp/c\"".into(), redacted: vec![] });
        assert_eq!(offer(&json!({"path": "/tmp/d", "token": "x"}), &approved, 3), None, "a cut call does not count");
    }

    #[test]
    fn a_call_without_arguments_is_offered_as_it_is() {
        let approved: Vec<_> = (0..3).map(|_| whole(json!({}))).collect();
        assert_eq!(offer(&json!({}), &approved, 3).unwrap().arguments, BTreeMap::new());
    }
}
