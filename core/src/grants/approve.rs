//! Approving a paused call and granting the like in one step (the call
//! page's "allow this tool …"), and the checks a new grant passes.

use super::*;
use gatehouse_model::ExecutionId;

/// One line saying what a grant covers (change log, audit detail).
pub fn describe(view: &GrantView) -> String {
    let mut text = format!("{} for agent {} {}", view.tool, view.agent, view.scope.label());
    if !view.arguments.is_empty() {
        let only: Vec<String> = view.arguments.iter().map(|(name, m)| m.describe(name)).collect();
        text.push_str(&format!(", only when {}", only.join(" and ")));
    }
    text
}

/// Checks `request`'s constraints against the call being approved: each
/// names a top-level string argument of this call that it accepts (a grant
/// made from a call covers that call).
fn check_constraints(arguments: &Value, constraints: &BTreeMap<String, ArgMatch>) -> Result<(), GrantError> {
    for (name, want) in constraints {
        let Some(value) = arguments.get(name).and_then(Value::as_str) else {
            return Err(GrantError::Invalid(format!("{name:?} is not a string argument of this call")));
        };
        let (ArgMatch::Exact(text) | ArgMatch::Prefix(text)) = want;
        if text.is_empty() {
            return Err(GrantError::Invalid(format!("the constraint on {name:?} is empty")));
        }
        if text.chars().count() > MAX_CONSTRAINT_CHARS {
            return Err(GrantError::Invalid(format!("the constraint on {name:?} is too long")));
        }
        let held = match want {
            ArgMatch::Exact(_) if normalise::arg_matches(want, value) => Ok(()),
            ArgMatch::Exact(_) => Err(String::new()),
            ArgMatch::Prefix(prefix) => normalise::check_under(value, prefix).map_err(|e| format!(": {e}")),
        };
        if let Err(why) = held {
            return Err(GrantError::Invalid(format!("{} does not hold for this call{why}", want.describe(name))));
        }
    }
    Ok(())
}

/// Approves execution `id` as `user` and stores a grant for its agent and
/// tool, as `request` says; `note` (cleaned) is audited with the approval.
/// Refused without approving when the call is `human_only`, when only
/// admins decide it and `user` is not one, or when the request does not fit
/// the call. The store work runs in the database's lane; for a call held
/// on this replica, all of it at once, finished even if the caller stops
/// waiting (never approved without its grant).
pub async fn approve_and_grant(
    approvals: &ApprovalStore,
    grants: &GrantStore,
    user: &User,
    id: &ExecutionId,
    request: &GrantRequest,
    note: Option<&str>,
) -> Result<GrantView, GrantError> {
    let db = grants.db.clone();
    let (store, index, person, key, request, note) =
        (approvals.clone(), grants.clone(), user.clone(), id.clone(), request.clone(), note.map(str::to_string));
    let view = if approvals.cluster().is_none() || approvals.is_local(id) {
        db.run(move || {
            let (view, detail) = prepare_grant(&store, &index, &person, &key, &request, note.as_deref())?;
            let actor = person.actor().to_string();
            store.decide_here(&key, Decision::Accept, &actor, Some(&detail)).map_err(crate::approvals::access_error)?;
            tracing::info!(execution = %key, decision = "accept", by = %actor, "decision recorded");
            index.insert(view.clone(), &view.created_by)?;
            Ok::<_, GrantError>(view)
        })
        .await??
    } else {
        // Held on another replica: the decision is forwarded to it.
        let (view, detail) =
            db.run(move || prepare_grant(&store, &index, &person, &key, &request, note.as_deref())).await??;
        approvals.decide(Decide::person(id, Decision::Accept, user).note(Some(&detail))).await?;
        let (index, made) = (grants.clone(), view.clone());
        db.run(move || index.insert(made.clone(), &made.created_by)).await??;
        view
    };
    tracing::info!(grant = %view.id, execution = %id, by = %view.created_by, "grant made");
    Ok(view)
}

/// The grant `request` would make for execution `id`, and the approval's
/// audit detail, or why not (nothing is approved or stored yet). Blocking.
fn prepare_grant(
    approvals: &ApprovalStore,
    grants: &GrantStore,
    user: &User,
    id: &ExecutionId,
    request: &GrantRequest,
    note: Option<&str>,
) -> Result<(GrantView, String), GrantError> {
    let Some((execution, _)) = approvals.get(id) else {
        // Settled or unknown: the ordinary lookup says which (404, 403, 409).
        let view = approvals.view_for(user, id)?;
        return Err(GrantError::Conflict(view.state.as_str().into()));
    };
    if !may_decide(user, execution.owner_id) {
        return Err(GrantError::Forbidden);
    }
    // Admin-only first: a plain user hears that an admin must decide it.
    if execution.admin_only && !user.is_admin {
        return Err(GrantError::AdminRequired);
    }
    if execution.human_only {
        return Err(GrantError::HumanOnly(execution.tool.clone()));
    }
    // An owner who was removed (a name, no id): a grant would be keyed as an
    // owner-less agent's.
    if execution.owner.is_some() && execution.owner_id.is_none() {
        return Err(GrantError::Forbidden);
    }
    check_constraints(&execution.arguments, &request.arguments)?;
    let session_id = match request.scope {
        GrantScope::Session => Some(execution.session_id.clone().ok_or_else(|| {
            GrantError::Invalid("this call came without an MCP session: choose a duration instead".into())
        })?),
        _ => None,
    };
    let now = grants.clock.now_ms();
    let view = GrantView {
        id: secret::new_id("grant").into(),
        agent: execution.agent.clone(),
        owner: execution.owner.clone(),
        owner_id: execution.owner_id,
        tool: execution.tool.clone(),
        arguments: request.arguments.clone(),
        scope: request.scope,
        session_id,
        created_by: user.actor().to_string(),
        execution_id: execution.id.clone(),
        created_at_ms: now,
        expires_at_ms: request.scope.duration_ms().map(|d| now + d),
        uses: 0,
        last_used_ms: None,
    };
    // Before approving: a refused grant leaves the call waiting for another decision.
    grants.check_room(view.owner.as_deref().zip(view.owner_id), &view.created_by)?;
    let mut detail = format!("and allowed by grant:{}: {}", view.id, describe(&view));
    if let Some(note) = note {
        detail.push_str(&format!(" — {note}"));
    }
    Ok((view, detail))
}

/// A reason or note from a form or the API, cleaned, or why not (400).
pub fn note_from(text: Option<&str>) -> Result<Option<String>, GrantError> {
    clean_note(text.unwrap_or_default()).map_err(|e| GrantError::Invalid(e.to_string()))
}
