//! The approval store across replicas sharing one PostgreSQL.
//!
//! One owner per execution: the replica named in its `pending_executions`
//! row. Only the owner's lock moves an execution, so "first decision wins"
//! holds across replicas exactly as within one. The others:
//! - show it from the database ([`ApprovalStore::get`], `pending`) and watch
//!   it through a mirror channel fed by the owner's [`ApprovalMessage::Exec`]
//!   messages;
//! - forward a person's decision to the owner (`decide_at_owner`, a step of
//!   [`ApprovalStore::decide`]);
//! - ask the owner to hand it over when its agent resumes it here
//!   ([`ApprovalStore::take_over`]);
//! - adopt it when the owner is gone (a conditional `UPDATE`: exactly one
//!   adopter), so its timers, and its expiry, run exactly once.
//!
//! Nothing here holds the entries lock across an await or a message to
//! another replica. The messages and the owner's answers are in
//! `replicas/messages.rs`; the two-replica tests in `replicas/tests.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use gatehouse_model::{AuditEntry, Decision, ExecutionId, State};

use super::Execution;
use super::access::may_decide;
use super::answers::{DecideError, Restored, Snapshot};
use super::store::{ApprovalStore, Mirror, Rearm};
use crate::cluster::{Cluster, STALE_AFTER};
use crate::error::Result;
use crate::users::User;

mod follow;
pub(super) mod messages;
#[cfg(test)]
mod tests;

pub use messages::ApprovalMessage;

/// How often a replica adopts the executions of replicas that are gone and
/// re-reads the executions it mirrors (a lost message heals by then).
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// The advisory lock key of the start-up abandon pass ("ab" in ASCII).
const ABANDON_JOB: i32 = 0x6162;

/// How many times a decision or hand-over follows a moving owner.
const ATTEMPTS: usize = 3;

impl ApprovalStore {
    /// Joins the cluster of replicas (after [`Cluster::join`], before
    /// [`ApprovalStore::restore`]): rows are then written as this replica's,
    /// held pauses keep theirs, transitions are announced, and `restore`
    /// takes only what no live replica owns. Once only; needs the runtime.
    pub fn join(&self, cluster: Cluster) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let _ = self.inner.runtime.set(runtime);
        }
        if self.inner.cluster.set(cluster).is_err() {
            tracing::warn!("the approval store joined the cluster twice; the second is ignored");
        }
    }

    /// The cluster this store has joined, if any.
    pub fn cluster(&self) -> Option<&Cluster> {
        self.inner.cluster.get()
    }

    /// This replica's id on a cluster.
    pub(super) fn me(&self) -> Option<String> {
        self.inner.cluster.get().map(|c| c.replica().to_string())
    }

    pub(super) fn mirrors(&self) -> std::sync::MutexGuard<'_, HashMap<ExecutionId, Mirror>> {
        self.inner.mirrors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `id` is live in this replica's store.
    pub(crate) fn is_local(&self, id: &ExecutionId) -> bool {
        self.entries().contains_key(id)
    }

    /// Tells the other replicas' mirrors of a state reached outside a
    /// transition (an adopter's expiry).
    pub(super) fn publish_exec(&self, id: &ExecutionId, state: State) {
        if let Some(cluster) = self.inner.cluster.get() {
            let snapshot = Snapshot { state, actor: Some("system".into()), detail: None, decided_by: None };
            cluster.send(None, ApprovalMessage::Exec { id: id.clone(), snapshot });
        }
    }

    /// Heard-from cutoff: replicas seen before it are gone.
    fn cutoff_ms(&self) -> i64 {
        self.now_ms() - STALE_AFTER.as_millis() as i64
    }

    /// Another replica's live execution: its mirror, or its row. Blocks on
    /// the database.
    pub(super) fn remote(&self, id: &ExecutionId) -> Option<(Arc<Execution>, Snapshot)> {
        self.inner.cluster.get()?;
        if let Some(mirror) = self.mirrors().get(id) {
            return Some((mirror.execution.clone(), mirror.tx.borrow().clone()));
        }
        let stored = self.inner.persist.load_one(id).ok()??;
        let state = stored.state?;
        if state.is_settled() {
            return None;
        }
        let snapshot = self.snapshot_of(id, state, stored.actor.clone(), None);
        Some((Arc::new(stored.execution), snapshot))
    }

    /// A state read from the audit log as a snapshot.
    fn snapshot_of(&self, id: &ExecutionId, state: State, actor: Option<String>, detail: Option<String>) -> Snapshot {
        let decided_by = if state == State::Pending { None } else { self.inner.audit.decided_by(id).ok().flatten() };
        Snapshot { state, actor, detail, decided_by }
    }

    /// The pending executions of the other live replicas. Blocks on the
    /// database; empty without a cluster.
    pub(super) fn remote_pending(&self) -> Vec<(Arc<Execution>, Snapshot)> {
        let Some(me) = self.me() else { return Vec::new() };
        let rows = match self.inner.persist.load_remote(&me, self.cutoff_ms()) {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the other replicas' pending executions");
                return Vec::new();
            }
        };
        let entries = self.entries();
        rows.into_iter()
            .filter(|r| r.state == Some(State::Pending) && !entries.contains_key(&r.execution.id))
            .map(|r| {
                let snapshot = Snapshot { state: State::Pending, actor: r.actor, detail: None, decided_by: None };
                (Arc::new(r.execution), snapshot)
            })
            .collect()
    }

    /// Pending executions `user` may decide on the other live replicas.
    pub(super) fn remote_pending_for(&self, user: &User) -> Vec<(Arc<Execution>, Snapshot)> {
        self.remote_pending().into_iter().filter(|(e, _)| may_decide(user, e.owner_id)).collect()
    }

    /// At start on a cluster: adopts the rows nobody alive owns (a previous
    /// run's, or a dead replica's), and abandons what was left open without
    /// a row long enough ago that no live replica can still be writing it.
    pub(super) async fn restore_orphans(&self) -> Result<Restored> {
        let started = std::time::Instant::now();
        let store = self.clone();
        let restored = self
            .inner
            .audit
            .db()
            .run(move || -> Result<Restored> {
                let mut restored = store.adopt_orphans()?;
                let now = store.now_ms();
                // One replica at a time: two starting together would each record
                // the same executions as abandoned.
                let db = store.inner.audit.db().clone();
                let abandoned =
                    db.exclusively(ABANDON_JOB, || store.inner.persist.abandon_unstored(now, store.cutoff_ms(), None))?;
                restored.abandoned += abandoned.unwrap_or(0);
                Ok(restored)
            })
            .await??;
        self.announce_restored(&restored, started);
        Ok(restored)
    }

    fn adopt_orphans(&self) -> Result<Restored> {
        let Some(me) = self.me() else { return Ok(Restored::default()) };
        if self.inner.left.load(Ordering::SeqCst) {
            return Ok(Restored::default());
        }
        let orphans = self.inner.persist.orphans(&me, self.cutoff_ms())?;
        self.adopt(orphans)
    }

    /// Claims each `(id, previous owner)` (lost races are skipped) and
    /// makes it live here as `restore` does. Blocks on the database; arms
    /// timers on the runtime.
    pub(super) fn adopt(&self, candidates: Vec<(ExecutionId, Option<String>)>) -> Result<Restored> {
        let mut restored = Restored::default();
        let Some(me) = self.me() else { return Ok(restored) };
        let now = self.now_ms();
        let mut gone = Vec::new();
        let mut timers: Vec<Rearm> = Vec::new();
        for (id, old) in candidates {
            if self.is_local(&id) {
                continue;
            }
            if old.as_deref() != Some(me.as_str()) && !self.inner.persist.claim(&id, &me, old.as_deref())? {
                continue;
            }
            let Some(stored) = self.inner.persist.load_one(&id)? else { continue };
            if stored.replica.as_deref() != Some(me.as_str()) {
                // Handed on again meanwhile.
                continue;
            }
            tracing::info!(execution = %id, from = old.as_deref().unwrap_or("nobody"), "adopted an execution");
            let mut entries = self.entries();
            self.revive(&mut entries, stored, now, &mut restored, &mut gone, &mut timers);
        }
        self.inner.persist.delete_now(&gone)?;
        for id in &gone {
            restored.abandoned += self.inner.persist.abandon_unstored(now, now, Some(id.as_str()))?;
        }
        for (delay, id, then) in timers {
            self.after(delay, &id, then);
        }
        if restored != Restored::default() {
            self.inner.live.publish(crate::live::LiveEvent::ApprovalsChanged);
        }
        Ok(restored)
    }

    /// One sweep: adopts what dead replicas left and re-reads mirrored
    /// executions (a lost message, or an owner that died). Blocks.
    fn sweep(&self) {
        match self.adopt_orphans() {
            Ok(r) if r != Restored::default() => tracing::info!(
                pending = r.pending,
                approved = r.approved,
                expired = r.expired,
                abandoned = r.abandoned,
                "adopted executions of replicas that are gone"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "adopting the executions of replicas that are gone failed"),
        }
        let ids: Vec<ExecutionId> = {
            let mut mirrors = self.mirrors();
            mirrors.retain(|_, m| m.tx.receiver_count() > 0);
            mirrors.keys().cloned().collect()
        };
        for id in ids {
            if let Ok(Some(last)) = self.inner.audit.latest(&id) {
                self.mirror(&id, self.snapshot_from(&id, last));
            }
        }
    }

    fn snapshot_from(&self, id: &ExecutionId, last: AuditEntry) -> Snapshot {
        self.snapshot_of(id, last.state, last.actor, last.detail)
    }

    /// Updates a mirror; drops it once settled or unwatched.
    fn mirror(&self, id: &ExecutionId, snapshot: Snapshot) {
        let mut mirrors = self.mirrors();
        let Some(mirror) = mirrors.get(id) else { return };
        let settled = snapshot.state.is_settled();
        if *mirror.tx.borrow() != snapshot {
            mirror.tx.send_replace(snapshot);
        }
        if settled || mirror.tx.receiver_count() == 0 {
            mirrors.remove(id);
        }
    }

    /// Runs blocking store work in the database's lane.
    async fn blocking<T: Send + 'static>(&self, work: impl FnOnce(&ApprovalStore) -> T + Send + 'static) -> Option<T> {
        let store = self.clone();
        self.off_runtime(move || work(&store)).await.ok()
    }

    /// Whether replica `owner` (none: nobody) is alive. Blocks.
    /// After an owner failed to answer: whether its heartbeat goes stale
    /// within [`STALE_AFTER`] (it died: adopt) or keeps beating (it is slow:
    /// it keeps the call, as two owners would mean two outcomes).
    async fn goes_stale(&self, owner: &str) -> bool {
        let deadline = tokio::time::Instant::now() + STALE_AFTER + Duration::from_secs(1);
        loop {
            let probe = Some(owner.to_string());
            // A failed lookup counts as alive: adopting is the step that needs certainty.
            if !self.blocking(move |s| s.owner_alive_checked(probe.as_deref())).await.unwrap_or(true) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Like `owner_alive`, but a failed lookup says alive.
    fn owner_alive_checked(&self, owner: Option<&str>) -> bool {
        match (owner, self.inner.cluster.get()) {
            (Some(owner), Some(cluster)) => cluster.is_alive(owner).unwrap_or(true),
            _ => false,
        }
    }

    fn owner_alive(&self, owner: Option<&str>) -> bool {
        match (owner, self.inner.cluster.get()) {
            (Some(owner), Some(cluster)) => cluster.is_alive(owner).unwrap_or(false),
            _ => false,
        }
    }

    /// Makes `id` this replica's when its agent resumes it here: asks a
    /// live owner to hand it over, adopts it from a dead one. Does nothing
    /// without a cluster, for a local execution, or when the owner refuses
    /// (held inside its request there, or running): then it is followed
    /// through its mirror.
    pub async fn take_over(&self, id: &ExecutionId) {
        let Some(cluster) = self.inner.cluster.get().cloned() else { return };
        for _ in 0..ATTEMPTS {
            if self.is_local(id) {
                return;
            }
            let key = id.clone();
            let Some(Ok(Some(owner))) = self.blocking(move |s| s.inner.persist.owner_of(&key)).await else {
                return;
            };
            let me = cluster.replica().to_string();
            // Whom the row is claimed from: ourselves once handed over (or
            // already ours), otherwise the owner that is gone.
            let mut from = owner.clone();
            if owner.as_deref() != Some(me.as_str()) {
                let probe = owner.clone();
                let alive = self.blocking(move |s| s.owner_alive(probe.as_deref())).await.unwrap_or(false);
                if let (true, Some(owner)) = (alive, owner.as_deref()) {
                    let key = id.clone();
                    match cluster.request(owner, ApprovalMessage::Release { id: key }).await {
                        Some(ApprovalMessage::Released { ok: true }) => from = Some(me),
                        // Refused: it stays there.
                        Some(_) => return,
                        // No answer: adopt only if it is gone; a slow owner keeps
                        // its execution (two owners would mean two outcomes).
                        None => {
                            if !self.goes_stale(owner).await {
                                tracing::warn!(execution = %id, owner = %owner, "the owner did not answer in time; it keeps the call");
                                return;
                            }
                            tracing::warn!(execution = %id, owner = %owner, "the owner did not answer and is gone; adopting");
                        }
                    }
                }
            }
            let key = id.clone();
            if let Some(Err(e)) = self.blocking(move |s| s.adopt(vec![(key, from)])).await {
                tracing::warn!(execution = %id, error = %e, "cannot take over an execution");
                return;
            }
        }
    }

    /// [`ApprovalStore::decide`]'s step for an execution that is not live
    /// here: records the decision wherever it lives — here, or at its owner
    /// (forwarded; the owner's lock decides, so the first decision wins
    /// across replicas); a dead owner's is adopted first. Same outcomes as
    /// `decide_here`, which it is without a cluster.
    pub(super) async fn decide_at_owner(
        &self,
        id: &ExecutionId,
        decision: Decision,
        actor: &str,
        detail: Option<&str>,
    ) -> std::result::Result<Snapshot, DecideError> {
        let Some(cluster) = self.inner.cluster.get().cloned() else {
            let (store, key, actor, detail) = (self.clone(), id.clone(), actor.to_string(), detail.map(str::to_string));
            return self
                .off_runtime(move || store.decide_here(&key, decision, &actor, detail.as_deref()))
                .await
                .and_then(|d| d);
        };
        let storage = |e: String| DecideError::Storage(e);
        for _ in 0..ATTEMPTS {
            if self.is_local(id) {
                break;
            }
            let key = id.clone();
            let owner = match self.blocking(move |s| s.inner.persist.owner_of(&key)).await {
                Some(Ok(owner)) => owner,
                Some(Err(e)) => return Err(storage(e.to_string())),
                None => return Err(storage("the decision was interrupted".into())),
            };
            // No row: settled or unknown; the audit log answers here.
            let Some(owner) = owner else { break };
            let me = cluster.replica();
            if owner.as_deref() != Some(me) {
                let probe = owner.clone();
                let alive = self.blocking(move |s| s.owner_alive(probe.as_deref())).await.unwrap_or(false);
                if let (true, Some(to)) = (alive, owner.as_deref()) {
                    let (key, actor, detail) = (id.clone(), actor.to_string(), detail.map(str::to_string));
                    let asked = cluster.request(to, ApprovalMessage::Decide { id: key, decision, actor, detail }).await;
                    match asked {
                        // The owner's outcome, its refusal as it is.
                        Some(ApprovalMessage::Decided { outcome }) => return outcome,
                        Some(ApprovalMessage::Moved) => continue,
                        // No answer: adopt below only if the owner is gone; a
                        // slow owner keeps its execution (two owners would mean
                        // two outcomes), and the person may try again.
                        _ => {
                            if !self.goes_stale(to).await {
                                return Err(storage(
                                    "the replica holding this call did not answer in time; try again".into(),
                                ));
                            }
                            tracing::warn!(execution = %id, owner = %to, "the owner did not answer and is gone; adopting");
                        }
                    }
                }
            }
            let (key, from) = (id.clone(), owner);
            match self.blocking(move |s| s.adopt(vec![(key, from)])).await {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(storage(e.to_string())),
                None => return Err(storage("the adoption was interrupted".into())),
            }
        }
        let (key, actor, detail) = (id.clone(), actor.to_string(), detail.map(str::to_string));
        self.blocking(move |s| s.decide_here(&key, decision, &actor, detail.as_deref()))
            .await
            .unwrap_or_else(|| Err(storage("the decision was interrupted".into())))
    }

    /// Leaves the cluster's executions to the others (graceful shutdown):
    /// the rows this replica owns become nobody's, so another replica adopts
    /// them at its next sweep, and this one stops adopting. Their channels
    /// stay as mirrors for anyone still waiting here. Pauses held inside a
    /// request here stay ours (their requests end with this process); the
    /// adopter abandons them once this replica is gone.
    pub async fn leave(&self) {
        let Some(me) = self.me() else { return };
        self.inner.left.store(true, Ordering::SeqCst);
        {
            let mut entries = self.entries();
            let ids: Vec<ExecutionId> = entries.iter().filter(|(_, e)| !e.held).map(|(id, _)| id.clone()).collect();
            let mut mirrors = self.mirrors();
            for id in ids {
                if let Some(entry) = entries.remove(&id) {
                    mirrors.insert(id, Mirror { execution: entry.execution, tx: entry.tx });
                }
            }
        }
        // Queued rows first: one written after the hand-back would be ours again.
        self.flush().await;
        let store = self.clone();
        match self.off_runtime(move || store.inner.persist.disown(&me)).await {
            Ok(Ok(n)) if n > 0 => tracing::info!(executions = n, "left this replica's executions to the others"),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot leave this replica's executions to the others"),
            Err(e) => tracing::warn!(error = %e, "cannot leave this replica's executions to the others"),
        }
    }
}
