//! The one way a decision is made: [`ApprovalStore::decide`] with a
//! [`Decide`] request. A person's decision is checked (their agent's call,
//! or an admin; only an admin for a call that changes the gate) and reaches
//! the execution wherever it lives; the first decision wins, and repeating
//! it is a no-op.

use std::sync::atomic::Ordering;
use std::time::Duration;

use gatehouse_model::{Decision, ExecutionId, State};

use super::access::{AccessError, access_error};
use super::answers::{DecideError, Snapshot};
use super::store::ApprovalStore;
use crate::users::User;

/// One decision on an execution, as every caller hands it to
/// [`ApprovalStore::decide`].
#[derive(Debug, Clone, Copy)]
pub struct Decide<'a> {
    /// The execution.
    pub id: &'a ExecutionId,
    /// Accept, decline or cancel.
    pub decision: Decision,
    /// Who decides.
    pub by: By<'a>,
    /// The person's words, already cleaned ([`gatehouse_model::clean_note`]):
    /// a decline's reason (the agent receives it) or an approval's note;
    /// audited as the entry's detail.
    pub note: Option<&'a str>,
}

/// Who makes a decision.
#[derive(Debug, Clone, Copy)]
pub enum By<'a> {
    /// A signed-in person (the pages, the JSON API, a grant): checked against
    /// the execution, audited as `user:<name>`, and forwarded to the replica
    /// that owns the execution on a cluster.
    Person(&'a User),
    /// An actor the caller vouches for, audited as given: the agent deciding
    /// its own call (`agent:<name>`), its client's answer (`agent:<name> via
    /// client`). Not checked, and made on this replica's store: the gate
    /// decides where the agent is connected (it takes the execution over first).
    Actor(&'a str),
}

impl<'a> Decide<'a> {
    /// `user`'s decision on `id`.
    pub fn person(id: &'a ExecutionId, decision: Decision, user: &'a User) -> Self {
        Self { id, decision, by: By::Person(user), note: None }
    }

    /// `actor`'s decision on `id` (see [`By::Actor`]).
    pub fn actor(id: &'a ExecutionId, decision: Decision, actor: &'a str) -> Self {
        Self { id, decision, by: By::Actor(actor), note: None }
    }

    /// With the person's words (the `note` field).
    pub fn note(self, note: Option<&'a str>) -> Self {
        Self { note, ..self }
    }
}

impl ApprovalStore {
    /// Records a decision. First decision wins; repeating it is a no-op (the
    /// state it led to is returned); a conflicting one is refused with the
    /// state it found. A settled execution is answered from the audit log.
    ///
    /// The store work runs in the database's lane ([`crate::Db::run`]), to
    /// its end even if the caller stops waiting; a person's decision on
    /// another replica's execution waits for that replica's answer.
    pub async fn decide(&self, request: Decide<'_>) -> Result<Snapshot, AccessError> {
        let Decide { id, decision, by, note } = request;
        let (key, note) = (id.clone(), note.map(str::to_string));
        let user = match by {
            By::Actor(actor) => {
                let (store, actor) = (self.clone(), actor.to_string());
                let here = move || store.decide_here(&key, decision, &actor, note.as_deref());
                let decided = self.off_runtime(here).await.and_then(|d| d).map_err(access_error);
                self.flush().await;
                return decided;
            }
            By::Person(user) => user.clone(),
        };
        let view = {
            let (store, user, key) = (self.clone(), user.clone(), key.clone());
            self.off_runtime(move || store.view_for(&user, &key)).await.map_err(access_error)??
        };
        if view.admin_only && !user.is_admin {
            return Err(AccessError::AdminRequired);
        }
        let actor = user.actor().to_string();
        let decided = if self.cluster().is_some() && !self.is_local(id) {
            // Another replica's (or nobody's yet): forwarded to its owner.
            self.decide_at_owner(id, decision, &actor, note.as_deref()).await
        } else {
            let (store, by) = (self.clone(), actor.clone());
            self.off_runtime(move || store.decide_here(&key, decision, &by, note.as_deref())).await.and_then(|d| d)
        };
        let snapshot = decided.map_err(access_error)?;
        // Answered only once the decision is on disk.
        self.flush().await;
        tracing::info!(execution = %id, decision = decision.as_str(), by = %actor, "decision recorded");
        Ok(snapshot)
    }

    /// Runs store work in the database's lane; a panic is a storage error.
    pub(super) async fn off_runtime<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, DecideError> {
        self.inner.audit.db().run(work).await.map_err(|e| DecideError::Storage(e.to_string()))
    }

    /// The decision itself, on this replica's store: a live entry moves
    /// under the lock (an approval arms its run window); one that is not
    /// live here is answered from the audit log.
    pub(crate) fn decide_here(
        &self,
        id: &ExecutionId,
        decision: Decision,
        actor: &str,
        detail: Option<&str>,
    ) -> Result<Snapshot, DecideError> {
        let mut entries = self.entries();
        let Some(entry) = entries.get(id) else {
            drop(entries);
            return match self.inner.audit.latest(id).map_err(|e| DecideError::Storage(e.to_string()))? {
                None => Err(DecideError::NotFound),
                Some(last) => {
                    let state = last.state;
                    if decision.agrees_with(state) {
                        let decided_by = self.inner.audit.decided_by(id).ok().flatten();
                        Ok(Snapshot { state, actor: last.actor, detail: last.detail, decided_by })
                    } else {
                        Err(DecideError::Conflict(state))
                    }
                }
            };
        };
        let current = entry.tx.borrow().clone();
        if current.state != State::Pending {
            return if decision.agrees_with(current.state) {
                Ok(current)
            } else {
                Err(DecideError::Conflict(current.state))
            };
        }
        let waited = self.now_ms() - entry.execution.created_at_ms;
        let snapshot = self
            .transition(&mut entries, id, decision.state(), Some(actor), detail)
            .expect("entry is present under the lock");
        if decision == Decision::Accept
            && let Some(entry) = entries.get_mut(id)
        {
            entry.approved_at_ms = Some(self.now_ms());
        }
        let window = entries.get(id).map(|e| self.run_window_ms(&e.execution));
        drop(entries);
        if decision == Decision::Accept
            && let Some(window) = window
        {
            self.after(Duration::from_millis(window.max(0) as u64), id, |store, id| {
                store.expire_unrun(id, true);
            });
        }
        let m = &self.inner.metrics;
        m.decided(decision).fetch_add(1, Ordering::Relaxed);
        m.observe_wait(waited);
        Ok(snapshot)
    }
}
