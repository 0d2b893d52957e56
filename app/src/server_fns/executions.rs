//! One execution (the resume page), decisions, and the inbox.

#[cfg(feature = "ssr")]
use super::context as ctx;
use gatehouse_model::{ExecutionId, ExecutionView, GrantId, InboxView, State};
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// What looking an execution up found.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum Lookup {
    /// Here it is.
    Found {
        /// The execution.
        execution: Box<ExecutionView>,
        /// Server time when read (Unix ms), for the countdown.
        now_ms: i64,
        /// Whether the viewer is an admin (who may decide admin-only calls).
        is_admin: bool,
    },
    /// It belongs to another user's agent (403).
    Forbidden,
    /// No such execution (404).
    NotFound,
}

/// One execution for the resume page.
#[server(prefix = "/api/fn", endpoint = "execution")]
pub async fn get_execution(id: ExecutionId) -> Result<Lookup, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    let (user, core) = ctx::context()?;
    let (now_ms, is_admin) = (core.clock.now_ms(), user.is_admin);
    let found =
        core.run(move |core| core.execution_for(&user, &id)).await.map_err(|e| ServerFnError::new(e.to_string()))?;
    Ok(match found {
        Ok(view) => Lookup::Found { execution: Box::new(view), now_ms, is_admin },
        Err(e @ AccessError::Forbidden) => {
            ctx::set_status(gatehouse_core::Status::status(&e));
            Lookup::Forbidden
        }
        Err(e @ AccessError::NotFound) => {
            ctx::set_status(gatehouse_core::Status::status(&e));
            Lookup::NotFound
        }
        Err(e) => return Err(ServerFnError::new(e.to_string())),
    })
}

/// What deciding one call came to: the state it is in now, and which call
/// it was (its tool and agent), so the page can say so.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DecidedCall {
    /// Its state after the decision.
    pub state: State,
    /// Its tool.
    pub tool: String,
    /// The agent that made it.
    pub agent: String,
}

impl DecidedCall {
    /// "Approved write_file for cursor."
    pub fn sentence(&self) -> String {
        let done = match self.state {
            State::Declined => "Declined",
            State::Approved | State::Running | State::Completed | State::Failed => "Approved",
            _ => "Decided",
        };
        if self.tool.is_empty() {
            return format!("{done}.");
        }
        format!("{done} {} for {}.", crate::reveal::visible(&self.tool), crate::reveal::visible(&self.agent))
    }
}

/// Approve (`accept`) or decline (`decline`) an execution, with an
/// optional `reason` (a decline's reaches the agent; an approval's is a
/// note; both audited). The state it left the execution in. Works as a
/// plain form post before hydration (the browser is sent back to the page).
#[server(prefix = "/api/fn", endpoint = "decide")]
pub async fn decide_execution(
    id: ExecutionId,
    action: String,
    #[server(default)] reason: Option<String>,
) -> Result<DecidedCall, ServerFnError> {
    let (user, core) = ctx::context()?;
    use gatehouse_model::Decision;
    let decision = match Decision::parse(&action) {
        Some(d @ (Decision::Accept | Decision::Decline)) => d,
        _ => return Err(ServerFnError::new(format!("unknown action {action:?}"))),
    };
    let reason = match gatehouse_model::clean_note(reason.as_deref().unwrap_or_default()) {
        Ok(reason) => reason,
        Err(e) => {
            ctx::set_status(400);
            return Err(ServerFnError::new(e.to_string()));
        }
    };
    // Which call it is, for the sentence that says it was decided (read
    // before: a decided call may leave the live store).
    let (who, key) = (user.clone(), id.clone());
    let call = core.run(move |core| core.execution_for(&who, &key)).await.ok().and_then(Result::ok);
    use gatehouse_core::approvals::Decide;
    match core.approvals.decide(Decide::person(&id, decision, &user).note(reason.as_deref())).await {
        Ok(snapshot) => Ok(DecidedCall {
            state: snapshot.state,
            tool: call.as_ref().map(|c| c.tool.clone()).unwrap_or_default(),
            agent: call.map(|c| c.agent).unwrap_or_default(),
        }),
        Err(e) => {
            ctx::set_status(gatehouse_core::Status::status(&e));
            Err(ServerFnError::new(e.to_string()))
        }
    }
}

/// The signed-in user's pending executions, soonest expiry first (at most
/// [`gatehouse_model::INBOX_LIMIT`], with how many there are).
#[server(prefix = "/api/fn", endpoint = "pending")]
pub async fn list_pending() -> Result<InboxView, ServerFnError> {
    let (user, core) = ctx::context()?;
    Ok(core.approvals.inbox(&user).await)
}

/// What deciding several calls at once came to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DecidedMany {
    /// How many were decided as asked.
    pub decided: usize,
    /// Those that could not be, each with why (no longer waiting, not the
    /// viewer's to decide, …).
    pub refused: Vec<(ExecutionId, String)>,
    /// An approval of several asked without its confirmation: nothing was
    /// decided; this is what the person is asked to confirm.
    pub to_confirm: Option<ToConfirm>,
}

/// Several calls a person asked to approve at once, named for their
/// confirmation: approving is never one tap on a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToConfirm {
    /// The calls, as selected.
    pub ids: Vec<ExecutionId>,
    /// Their tools, each with how many of the calls are to it.
    pub tools: Vec<(String, usize)>,
    /// The reason given, carried to the confirmation.
    pub reason: Option<String>,
    /// What the confirmation echoes: it names exactly these calls.
    pub token: String,
}

/// Approves (`accept`) or declines (`decline`) each of `ids`, with one
/// optional `reason` for all, each under the same rules as on its own page
/// (a call the viewer may not decide is refused, the others still are
/// decided). At most [`gatehouse_model::INBOX_LIMIT`] at a time. Declining
/// is one step; approving is two: without `confirm`, nothing is decided and
/// the answer names how many calls and which tools ([`ToConfirm`]); the
/// approval is made when the same calls come back with its token.
#[server(prefix = "/api/fn", endpoint = "decide_many")]
pub async fn decide_many(
    #[server(default)] ids: Vec<ExecutionId>,
    action: String,
    #[server(default)] reason: Option<String>,
    #[server(default)] confirm: Option<String>,
) -> Result<DecidedMany, ServerFnError> {
    let (user, core) = ctx::context()?;
    use gatehouse_model::Decision;
    let decision = match Decision::parse(&action) {
        Some(d @ (Decision::Accept | Decision::Decline)) => d,
        _ => {
            ctx::set_status(400);
            return Err(ServerFnError::new(format!("unknown action {action:?}: accept or decline")));
        }
    };
    let reason = selection(&ids, reason.as_deref())?;
    // An approval decides exactly what was confirmed.
    let ids = if decision == Decision::Accept {
        let asked = to_confirm(&core, &user, ids, reason.clone());
        if confirm.as_deref() != Some(asked.token.as_str()) {
            // A plain form (no JavaScript): the approvals page draws the
            // confirmation from its address.
            if ctx::plain_form() {
                leptos_axum::redirect(&confirm_address(&asked.ids, asked.reason.as_deref()));
            }
            return Ok(DecidedMany { to_confirm: Some(asked), ..Default::default() });
        }
        asked.ids
    } else {
        ids
    };
    use gatehouse_core::approvals::Decide;
    let mut outcome = DecidedMany::default();
    for id in ids {
        match core.approvals.decide(Decide::person(&id, decision, &user).note(reason.as_deref())).await {
            Ok(_) => outcome.decided += 1,
            Err(e) => outcome.refused.push((id, e.to_string())),
        }
    }
    // A plain form that confirmed comes back to the list, not to its confirmation.
    if ctx::plain_form() {
        leptos_axum::redirect(gatehouse_model::routes::APPROVALS);
    }
    Ok(outcome)
}

/// Checks a selection of calls to decide at once (1 to
/// [`gatehouse_model::INBOX_LIMIT`]) and its one reason; the reason, cleaned.
#[cfg(feature = "ssr")]
fn selection(ids: &[ExecutionId], reason: Option<&str>) -> Result<Option<String>, ServerFnError> {
    let refuse = |why: String| {
        ctx::set_status(400);
        ServerFnError::new(why)
    };
    if ids.is_empty() {
        return Err(refuse("Select the calls to decide first.".into()));
    }
    if ids.len() > gatehouse_model::INBOX_LIMIT {
        return Err(refuse(format!("At most {} calls at a time.", gatehouse_model::INBOX_LIMIT)));
    }
    gatehouse_model::clean_note(reason.unwrap_or_default()).map_err(|e| refuse(e.to_string()))
}

/// What approving `ids` at once asks to confirm: those of them the viewer
/// may see, their tools, and the token that names exactly these calls (in
/// any order).
#[cfg(feature = "ssr")]
fn to_confirm(
    core: &gatehouse_core::Core,
    user: &gatehouse_core::users::User,
    ids: Vec<ExecutionId>,
    reason: Option<String>,
) -> ToConfirm {
    // Only the calls the viewer may see are named (and so approvable here).
    let mut seen = Vec::new();
    let mut tools: Vec<(String, usize)> = Vec::new();
    for id in ids {
        let Ok(view) = core.approvals.view_for(user, &id) else { continue };
        match tools.iter_mut().find(|(tool, _)| *tool == view.tool) {
            Some((_, n)) => *n += 1,
            None => tools.push((view.tool, 1)),
        }
        seen.push(id);
    }
    let mut sorted: Vec<&str> = seen.iter().map(|id| id.as_str()).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let token = gatehouse_core::secret::hash(&sorted.join(","));
    ToConfirm { ids: seen, tools, reason, token }
}

/// Where a plain form is sent to confirm approving `ids` at once: the
/// approvals page, which draws the confirmation from `?approve=` (the ids)
/// and `reason`.
#[cfg(feature = "ssr")]
fn confirm_address(ids: &[ExecutionId], reason: Option<&str>) -> String {
    let ids = ids.iter().map(ExecutionId::as_str).collect::<Vec<_>>().join(",");
    let mut query = vec![("approve", ids.as_str())];
    if let Some(reason) = reason {
        query.push(("reason", reason));
    }
    format!("{}?{}", gatehouse_model::routes::APPROVALS, serde_urlencoded::to_string(&query).unwrap_or_default())
}

/// The confirmation of approving `ids` at once, as [`decide_many`] asks it:
/// the approvals page draws it from its address (`?approve=…`) after a
/// plain form asked (without JavaScript).
#[server(prefix = "/api/fn", endpoint = "confirm_many")]
pub async fn confirm_many(ids: Vec<ExecutionId>, reason: Option<String>) -> Result<ToConfirm, ServerFnError> {
    let (user, core) = ctx::context()?;
    let reason = selection(&ids, reason.as_deref())?;
    let asked = to_confirm(&core, &user, ids, reason);
    if asked.ids.is_empty() {
        ctx::set_status(404);
        return Err(ServerFnError::new("None of these calls is one you may see."));
    }
    Ok(asked)
}

/// Turns down the grant a call's page offered (`suggestion`): it is not
/// offered to this person for this agent and tool again.
#[server(prefix = "/api/fn", endpoint = "decline-suggestion")]
pub async fn decline_suggestion(id: ExecutionId) -> Result<(), ServerFnError> {
    let (user, core) = ctx::context()?;
    let done = core
        .run(move |core| core.decline_suggestion(&user, &id))
        .await
        .map_err(|e| ServerFnError::new(e.to_string()))?;
    done.map_err(|e| {
        ctx::set_status(gatehouse_core::Status::status(&e));
        ServerFnError::new(e.to_string())
    })
}

/// Approves an execution and allows its tool for its agent from now on
/// (`scope`: `session`, `1h`, `8h`, `24h`, `forever`), optionally only when
/// named string arguments are exactly this call's (`exact[NAME]`) or start
/// with a prefix (`prefix[NAME]`). Works as a plain form post before hydration.
#[server(prefix = "/api/fn", endpoint = "grant")]
pub async fn grant_execution(
    id: ExecutionId,
    scope: String,
    #[server(default)] note: Option<String>,
    #[server(default)] exact: std::collections::BTreeMap<String, String>,
    #[server(default)] prefix: std::collections::BTreeMap<String, String>,
) -> Result<GrantId, ServerFnError> {
    use gatehouse_core::grants::{self, GrantError};
    use gatehouse_model::{ArgMatch, GrantRequest, GrantScope};
    let fail = |e: GrantError| {
        ctx::set_status(gatehouse_core::Status::status(&e));
        ServerFnError::new(e.to_string())
    };
    let scope =
        GrantScope::parse(&scope).ok_or_else(|| fail(GrantError::Invalid(format!("unknown scope {scope:?}"))))?;
    let note = grants::note_from(note.as_deref()).map_err(fail)?;
    let (user, core) = ctx::context()?;
    // An exact value is this call's own (the checkbox carries no value).
    let current = core.approvals.get(&id).map(|(e, _)| e.arguments.clone()).unwrap_or_default();
    let mut arguments = std::collections::BTreeMap::new();
    for name in exact.keys() {
        let value = current.get(name).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        arguments.insert(name.clone(), ArgMatch::Exact(value));
    }
    for (name, text) in prefix {
        if text.is_empty() {
            continue;
        }
        if arguments.contains_key(&name) {
            return Err(fail(GrantError::Invalid(format!(
                "choose either exactly or starts with for {name:?}, not both"
            ))));
        }
        arguments.insert(name, ArgMatch::Prefix(text));
    }
    let request = GrantRequest { scope, arguments };
    grants::approve_and_grant(&core.approvals, &core.grants, &user, &id, &request, note.as_deref())
        .await
        .map(|grant| grant.id)
        .map_err(fail)
}
