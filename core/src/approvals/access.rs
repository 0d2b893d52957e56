//! Who may see and decide an execution (the owner of its agent, or an admin;
//! admins only for calls that change the gate), and the views they get. The
//! decision itself is [`ApprovalStore::decide`] (in `decide.rs`).

use gatehouse_model::{
    AuditEntry, CallsPage, DecisionView, ExecutionId, ExecutionView, HistoryFilter, HistoryPage, State, UserId,
};

use super::Execution;
use super::answers::{DecideError, Snapshot};
use super::store::ApprovalStore;
use crate::audit::HistoryScope;
use crate::clock::rfc3339;
use crate::error::CoreError;
use crate::users::User;

/// Why a person may not see or decide an execution.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// No such execution.
    #[error("execution not found")]
    NotFound,
    /// It belongs to another user's agent.
    #[error("this execution belongs to another user's agent")]
    Forbidden,
    /// Another decision came first: the state it left.
    #[error("execution is already {0}")]
    Conflict(State),
    /// Only an admin may decide it (it changes the gate for everyone).
    #[error("this call changes the gate for everyone: an admin must decide it")]
    AdminRequired,
    /// The request is malformed (a filter that names no state, a bad date).
    #[error("{0}")]
    Invalid(String),
    /// Storage failed.
    #[error("{0}")]
    Storage(String),
}

impl From<CoreError> for AccessError {
    fn from(e: CoreError) -> Self {
        match e {
            CoreError::Invalid { .. } => AccessError::Invalid(e.to_string()),
            // A per-user bound (minting past max_credentials_per_user): the
            // person can act on it, so it is theirs to read, not a 500.
            CoreError::Limit(message) => AccessError::Invalid(message),
            e => AccessError::Storage(e.to_string()),
        }
    }
}

impl crate::error::Status for AccessError {
    fn kind(&self) -> crate::error::StatusKind {
        use crate::error::StatusKind;
        match self {
            AccessError::NotFound => StatusKind::NotFound,
            AccessError::Forbidden => StatusKind::Forbidden,
            AccessError::AdminRequired => StatusKind::AdminRequired,
            AccessError::Conflict(_) => StatusKind::Conflict,
            AccessError::Invalid(_) => StatusKind::BadRequest,
            AccessError::Storage(_) => StatusKind::Internal,
        }
    }
}

/// A store's refusal as the pages' and the API's.
pub(crate) fn access_error(e: DecideError) -> AccessError {
    match e {
        DecideError::NotFound => AccessError::NotFound,
        DecideError::Conflict(s) => AccessError::Conflict(s),
        DecideError::Storage(s) => AccessError::Storage(s),
    }
}

/// Whether `user` may see and decide what belongs to the agents of the
/// user with id `owner_id`: an admin, or that user. By id, never by name: a
/// user added later under a removed user's name is someone else.
pub fn may_decide(user: &User, owner_id: Option<UserId>) -> bool {
    user.is_admin || owner_id == Some(user.id)
}

pub(super) fn live_view(execution: &Execution, snapshot: &Snapshot) -> ExecutionView {
    ExecutionView {
        execution_id: execution.id.clone(),
        state: snapshot.state,
        tool: execution.tool.clone(),
        upstream: execution.upstream.clone(),
        arguments: Some(execution.arguments.clone()),
        kept: None,
        arguments_digest: execution.arguments_digest.clone(),
        agent: execution.agent.clone(),
        owner: execution.owner.clone(),
        owner_id: execution.owner_id,
        session_id: execution.session_id.clone(),
        created_at: Some(rfc3339(execution.created_at_ms)),
        created_at_ms: Some(execution.created_at_ms),
        expires_at: Some(rfc3339(execution.expires_at_ms)),
        expires_at_ms: Some(execution.expires_at_ms),
        decision: snapshot.decided_by.clone().map(|by| DecisionView { state: snapshot.state, by }),
        admin_only: execution.admin_only,
        human_only: execution.human_only,
        preview: None,
        suggestion: None,
        failure: failure(snapshot.state, snapshot.detail.as_deref()),
    }
}

/// What a failed call's page says of why: its last entry's detail.
fn failure(state: State, detail: Option<&str>) -> Option<String> {
    (state == State::Failed).then(|| detail.map(str::to_string)).flatten()
}

impl ApprovalStore {
    /// An execution as `user` may see it: live first, then the audit log.
    pub fn view_for(&self, user: &User, id: &ExecutionId) -> std::result::Result<ExecutionView, AccessError> {
        if let Some((execution, snapshot)) = self.get(id) {
            if !may_decide(user, execution.owner_id) {
                return Err(AccessError::Forbidden);
            }
            return Ok(live_view(&execution, &snapshot));
        }
        let last = self
            .inner
            .audit
            .latest(id)
            .map_err(|e| AccessError::Storage(e.to_string()))?
            .ok_or(AccessError::NotFound)?;
        may_see_settled(user, last.owner_id)?;
        let state = last.state;
        Ok(ExecutionView {
            execution_id: last.execution_id,
            state,
            tool: last.tool,
            upstream: last.upstream,
            arguments: None,
            kept: self.inner.audit.kept_arguments(id).map_err(|e| AccessError::Storage(e.to_string()))?,
            arguments_digest: last.arguments_digest,
            agent: last.agent,
            owner: last.owner,
            owner_id: last.owner_id,
            session_id: None,
            created_at: None,
            created_at_ms: None,
            expires_at: None,
            expires_at_ms: None,
            decision: self.inner.audit.decided_by(id).ok().flatten().map(|by| DecisionView { state, by }),
            admin_only: false,
            human_only: false,
            preview: None,
            suggestion: None,
            failure: failure(state, last.detail.as_deref()),
        })
    }

    /// One page (`limit` entries, newest first) of the history `user` may
    /// read: everyone's for admins, their own agents' otherwise. Reads the
    /// database: call it off the async runtime's threads.
    pub fn history_for(
        &self,
        user: &User,
        filter: &HistoryFilter,
        limit: usize,
    ) -> std::result::Result<HistoryPage, AccessError> {
        let scope = HistoryScope::of(user);
        // One more than shown tells whether an older page exists.
        let mut entries = self.inner.audit.search(filter, &scope, limit + 1)?;
        let next_before = (entries.len() > limit).then(|| {
            entries.truncate(limit);
            entries.last().map(|e| e.id)
        });
        Ok(HistoryPage { now_ms: self.now_ms(), entries, next_before: next_before.flatten() })
    }

    /// One page (`limit` calls, newest first) of the history `user` may
    /// read, a row per call with its steps folded in (see
    /// [`crate::audit::AuditLog::calls`]). The grants' words are
    /// left for the caller. Reads the database: call it off the
    /// async runtime's threads.
    pub fn calls_for(
        &self,
        user: &User,
        filter: &HistoryFilter,
        limit: usize,
    ) -> std::result::Result<CallsPage, AccessError> {
        let scope = HistoryScope::of(user);
        // One more than shown tells whether an older page exists.
        let mut found = self.inner.audit.calls(filter, &scope, limit + 1)?;
        let next_before = (found.len() > limit).then(|| {
            found.truncate(limit);
            found.last().map(|(placed, _)| *placed)
        });
        let calls = found.into_iter().map(|(_, call)| call).collect();
        Ok(CallsPage { now_ms: self.now_ms(), calls, next_before: next_before.flatten(), grants: Vec::new() })
    }

    /// Every audit entry of one execution, oldest first, if `user` may see
    /// it. Reads the database: call it off the async runtime's threads.
    pub fn timeline_for(&self, user: &User, id: &ExecutionId) -> std::result::Result<Vec<AuditEntry>, AccessError> {
        let timeline = self.inner.audit.timeline(id)?;
        let first = timeline.first().ok_or(AccessError::NotFound)?;
        may_see_settled(user, first.owner_id)?;
        Ok(timeline)
    }
}

/// Refused unless `user` may see a settled execution whose entries carry
/// `owner_id`: an admin, or that user (not a user added later under a
/// removed user's name: a removed user's entries carry none).
fn may_see_settled(user: &User, owner_id: Option<UserId>) -> std::result::Result<(), AccessError> {
    if may_decide(user, owner_id) { Ok(()) } else { Err(AccessError::Forbidden) }
}
