//! The approval store across replicas sharing one PostgreSQL.
//!
//! One owner per execution: the replica named in its `pending_executions`
//! row. Only the owner's lock moves an execution, so "first decision wins"
//! holds across replicas exactly as within one. The others:
//! - show it from the database ([`ApprovalStore::get`], `pending`) and watch
//!   it through a mirror channel fed by the owner's [`Body::Exec`] messages;
//! - forward a person's decision to the owner (`decide_at_owner`, a step of
//!   [`ApprovalStore::decide`]);
//! - ask the owner to hand it over when its agent resumes it here
//!   ([`ApprovalStore::take_over`]);
//! - adopt it when the owner is gone (a conditional `UPDATE`: exactly one
//!   adopter), so its timers, and its expiry, run exactly once.
//!
//! Nothing here holds the entries lock across an await or a message to
//! another replica.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use gatehouse_model::{AuditEntry, Decision, State};
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinSet;

use super::Execution;
use super::access::may_decide;
use super::store::{ApprovalStore, DecideError, Mirror, Rearm, Restored, Snapshot};
use crate::cluster::{Body, Cluster, Message, STALE_AFTER};
use crate::error::{CoreError, Result};
use crate::users::User;

/// How often a replica adopts the executions of replicas that are gone and
/// re-reads the executions it mirrors (a lost message heals by then).
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// The answer an owner gives when the execution is no longer its own (handed
/// over meanwhile): the asker looks the owner up again.
const MOVED: &str = "moved";
/// The answer for an execution neither live nor in the audit log.
const NOT_FOUND: &str = "not_found";
/// Prefix of the answer for a storage failure.
const STORAGE: &str = "storage: ";

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

    pub(super) fn mirrors(&self) -> std::sync::MutexGuard<'_, HashMap<String, Mirror>> {
        self.inner.mirrors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `id` is live in this replica's store.
    pub(super) fn is_local(&self, id: &str) -> bool {
        self.entries().contains_key(id)
    }

    /// Tells the other replicas' mirrors of a state reached outside a
    /// transition (an adopter's expiry).
    pub(super) fn publish_exec(&self, id: &str, state: State) {
        if let Some(cluster) = self.inner.cluster.get() {
            let snapshot = Snapshot { state, actor: Some("system".into()), detail: None, decided_by: None };
            cluster.send(None, Body::Exec { id: id.to_string(), snapshot });
        }
    }

    /// Heard-from cutoff: replicas seen before it are gone.
    fn cutoff_ms(&self) -> i64 {
        self.now_ms() - STALE_AFTER.as_millis() as i64
    }

    /// Another replica's live execution: its mirror, or its row. Blocks on
    /// the database.
    pub(super) fn remote(&self, id: &str) -> Option<(Arc<Execution>, Snapshot)> {
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
    fn snapshot_of(&self, id: &str, state: State, actor: Option<String>, detail: Option<String>) -> Snapshot {
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
        self.remote_pending().into_iter().filter(|(e, _)| may_decide(user, e.owner.as_deref())).collect()
    }

    /// At start on a cluster: adopts the rows nobody alive owns (a previous
    /// run's, or a dead replica's), and abandons what was left open without
    /// a row long enough ago that no live replica can still be writing it.
    pub(super) async fn restore_orphans(&self) -> Result<Restored> {
        let started = std::time::Instant::now();
        let store = self.clone();
        let restored = tokio::task::spawn_blocking(move || -> Result<Restored> {
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
        .await
        .map_err(|e| CoreError::Join(e.to_string()))??;
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
    pub(super) fn adopt(&self, candidates: Vec<(String, Option<String>)>) -> Result<Restored> {
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
            restored.abandoned += self.inner.persist.abandon_unstored(now, now, Some(id))?;
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
        let ids: Vec<String> = {
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

    fn snapshot_from(&self, id: &str, last: AuditEntry) -> Snapshot {
        self.snapshot_of(id, last.state, last.actor, last.detail)
    }

    /// Updates a mirror; drops it once settled or unwatched.
    fn mirror(&self, id: &str, snapshot: Snapshot) {
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

    /// Follows the cluster until `shutdown`: answers other replicas'
    /// decisions and hand-overs, keeps mirrors current, and sweeps every
    /// [`SWEEP_EVERY`]. The server spawns it on its task tracker; returns at
    /// once without a cluster.
    pub async fn follow(&self, shutdown: impl Future<Output = ()>) {
        let Some(cluster) = self.inner.cluster.get().cloned() else { return };
        let mut incoming = cluster.subscribe();
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Answers run beside the loop (a hand-over awaits the writer); they
        // end with it.
        let mut answering: JoinSet<()> = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = sweep.tick() => {
                    let store = self.clone();
                    let _ = tokio::task::spawn_blocking(move || store.sweep()).await;
                }
                message = incoming.recv() => match message {
                    Ok(message) => self.on_message(&cluster, &message, &mut answering),
                    // Lost messages: the sweep re-reads the mirrors.
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => break,
                },
                Some(_) = answering.join_next(), if !answering.is_empty() => {}
            }
        }
    }

    fn on_message(&self, cluster: &Cluster, message: &Arc<Message>, answering: &mut JoinSet<()>) {
        let from = message.from.clone();
        match &message.body {
            Body::Exec { id, snapshot } => self.mirror(id, snapshot.clone()),
            Body::Decide { reply, id, decision, actor, detail } => {
                let (store, cluster, reply, id, decision, actor, detail) = (
                    self.clone(),
                    cluster.clone(),
                    reply.clone(),
                    id.clone(),
                    *decision,
                    actor.clone(),
                    detail.clone(),
                );
                answering.spawn(async move {
                    let outcome = {
                        let store = store.clone();
                        tokio::task::spawn_blocking(move || {
                            store.answer_decide(&id, decision, &actor, detail.as_deref())
                        })
                        .await
                        .unwrap_or_else(|e| Err(format!("{STORAGE}{e}")))
                    };
                    cluster.send(Some(&from), Body::Decided { reply, outcome });
                });
            }
            Body::Release { reply, id } => {
                let (store, cluster, reply, id) = (self.clone(), cluster.clone(), reply.clone(), id.clone());
                answering.spawn(async move {
                    // The row must be written before it can change hands.
                    store.flush().await;
                    let asker = from.clone();
                    let worker = store.clone();
                    let ok = tokio::task::spawn_blocking(move || worker.release(&id, &asker)).await.unwrap_or(false);
                    cluster.send(Some(&from), Body::Released { reply, ok });
                });
            }
            _ => {}
        }
    }

    /// The owner's side of a forwarded decision. Blocks.
    fn answer_decide(
        &self,
        id: &str,
        decision: Decision,
        actor: &str,
        detail: Option<&str>,
    ) -> std::result::Result<Snapshot, String> {
        if !self.is_local(id) {
            match self.inner.persist.owner_of(id) {
                // Handed to us but not loaded yet: load it first.
                Ok(Some(owner)) if owner.as_deref() == self.me().as_deref() => {
                    let me = self.me();
                    self.adopt(vec![(id.to_string(), me)]).map_err(|e| format!("{STORAGE}{e}"))?;
                }
                Ok(Some(_)) => return Err(MOVED.into()),
                Ok(None) => {}
                Err(e) => return Err(format!("{STORAGE}{e}")),
            }
        }
        self.decide_here(id, decision, actor, detail).map_err(|e| match e {
            DecideError::NotFound => NOT_FOUND.into(),
            DecideError::Conflict(state) => state.as_str().into(),
            DecideError::Storage(e) => format!("{STORAGE}{e}"),
        })
    }

    /// The owner's side of a hand-over: unless held inside a request here or
    /// running, the row becomes `asker`'s and the entry leaves this map; its
    /// channel stays as a mirror for whoever waits on it here. Blocks.
    fn release(&self, id: &str, asker: &str) -> bool {
        let Some(me) = self.me() else { return false };
        let mut entries = self.entries();
        let Some(entry) = entries.get(id) else {
            drop(entries);
            // Not loaded here (or gone): hand over the row if it is ours.
            return self.inner.persist.claim(id, asker, Some(&me)).unwrap_or(false);
        };
        let state = entry.tx.borrow().state;
        if entry.held || !matches!(state, State::Pending | State::Approved) {
            return false;
        }
        // One short statement under the lock: no transition may slip
        // between the check and the change of owner.
        if !self.inner.persist.claim(id, asker, Some(&me)).unwrap_or(false) {
            return false;
        }
        if let Some(entry) = entries.remove(id) {
            self.mirrors().insert(id.to_string(), Mirror { execution: entry.execution, tx: entry.tx });
        }
        tracing::info!(execution = %id, to = %asker, "handed an execution to the replica its agent resumed on");
        true
    }

    /// Runs blocking store work off the runtime's threads.
    async fn blocking<T: Send + 'static>(&self, work: impl FnOnce(&ApprovalStore) -> T + Send + 'static) -> Option<T> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(&store)).await.ok()
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
    pub async fn take_over(&self, id: &str) {
        let Some(cluster) = self.inner.cluster.get().cloned() else { return };
        for _ in 0..ATTEMPTS {
            if self.is_local(id) {
                return;
            }
            let key = id.to_string();
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
                    let key = id.to_string();
                    match cluster.request(owner, |reply| Body::Release { reply, id: key }).await {
                        Some(Body::Released { ok: true, .. }) => from = Some(me),
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
            let key = id.to_string();
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
        id: &str,
        decision: Decision,
        actor: &str,
        detail: Option<&str>,
    ) -> std::result::Result<Snapshot, DecideError> {
        let Some(cluster) = self.inner.cluster.get().cloned() else {
            return self.decide_here(id, decision, actor, detail);
        };
        let storage = |e: String| DecideError::Storage(e);
        for _ in 0..ATTEMPTS {
            if self.is_local(id) {
                break;
            }
            let key = id.to_string();
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
                    let (key, actor, detail) = (id.to_string(), actor.to_string(), detail.map(str::to_string));
                    let asked =
                        cluster.request(to, |reply| Body::Decide { reply, id: key, decision, actor, detail }).await;
                    match asked {
                        Some(Body::Decided { outcome: Ok(snapshot), .. }) => return Ok(snapshot),
                        Some(Body::Decided { outcome: Err(e), .. }) => match e.as_str() {
                            MOVED => continue,
                            NOT_FOUND => return Err(DecideError::NotFound),
                            e if e.starts_with(STORAGE) => return Err(storage(e[STORAGE.len()..].to_string())),
                            state => {
                                return Err(match State::parse(state) {
                                    Some(state) => DecideError::Conflict(state),
                                    None => storage(format!("the owner answered {state:?}")),
                                });
                            }
                        },
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
            let (key, from) = (id.to_string(), owner);
            match self.blocking(move |s| s.adopt(vec![(key, from)])).await {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(storage(e.to_string())),
                None => return Err(storage("the adoption was interrupted".into())),
            }
        }
        let (key, actor, detail) = (id.to_string(), actor.to_string(), detail.map(str::to_string));
        self.blocking(move |s| s.decide_here(&key, decision, &actor, detail.as_deref()))
            .await
            .unwrap_or_else(|| Err(storage("the decision was interrupted".into())))
    }

    /// Runs `work` to completion from synchronous code (a person's decision
    /// on another replica's execution, on a blocking thread): on a helper thread, driven by the runtime the store
    /// joined on, so timers it arms outlive it. `None` without a runtime.
    pub(super) fn block_on<T: Send>(&self, work: impl Future<Output = T> + Send) -> Option<T> {
        let runtime = self.inner.runtime.get()?.clone();
        std::thread::scope(|scope| scope.spawn(move || runtime.block_on(work)).join().ok())
    }

    /// Leaves the cluster's executions to the others (graceful shutdown):
    /// the rows this replica owns become nobody's, so another replica adopts
    /// them at its next sweep, and this one stops adopting. Their channels
    /// stay as mirrors for anyone still waiting here. Pauses held inside a
    /// request here stay ours (their requests end with this process); the
    /// adopter abandons them once this replica is gone. Blocks briefly.
    pub fn leave(&self) {
        let Some(me) = self.me() else { return };
        self.inner.left.store(true, Ordering::SeqCst);
        {
            let mut entries = self.entries();
            let ids: Vec<String> = entries.iter().filter(|(_, e)| !e.held).map(|(id, _)| id.clone()).collect();
            let mut mirrors = self.mirrors();
            for id in ids {
                if let Some(entry) = entries.remove(&id) {
                    mirrors.insert(id, Mirror { execution: entry.execution, tx: entry.tx });
                }
            }
        }
        // Queued rows first: one written after the hand-back would be ours again.
        if let Some(runtime) = self.inner.runtime.get().cloned() {
            let store = self.clone();
            let _ = std::thread::scope(|scope| scope.spawn(move || runtime.block_on(store.flush())).join());
        }
        match self.inner.persist.disown(&me) {
            Ok(n) if n > 0 => tracing::info!(executions = n, "left this replica's executions to the others"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot leave this replica's executions to the others"),
        }
    }
}

/// Two replicas on one PostgreSQL schema; run only when
/// `GATEHOUSE_TEST_DATABASE_URL` is set.
#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use gatehouse_model::{Decision, State};

    use super::super::{ApprovalStore, DecideError, Limits, NewExecution};
    use crate::audit::AuditLog;
    use crate::clock::{Clock, SystemClock};
    use crate::cluster::Cluster;
    use crate::db::Db;
    use crate::live::LiveHub;

    struct Pair {
        a: ApprovalStore,
        b: ApprovalStore,
        db: Db,
        followers: Vec<tokio::task::JoinHandle<()>>,
    }

    impl Pair {
        /// Stops both replicas; the stores (and their PostgreSQL pools) are
        /// dropped off the runtime, where a pool may be dropped.
        async fn close(self) {
            let Pair { a, b, db, followers } = self;
            for f in followers {
                f.abort();
                let _ = f.await;
            }
            tokio::task::spawn_blocking(move || {
                for store in [&a, &b] {
                    if let Some(cluster) = store.cluster() {
                        cluster.leave();
                    }
                }
                drop((a, b, db));
            })
            .await
            .unwrap();
        }
    }

    async fn pair(ttl: Duration) -> Option<Pair> {
        std::env::var("GATEHOUSE_TEST_DATABASE_URL").ok()?;
        let db = Db::for_tests().unwrap();
        let url = db.postgres_url().unwrap().to_string();
        let db_b = Db::connect(&url).unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let limits = Limits { ttl, run_window: ttl, per_credential: usize::MAX };
        let mut stores = Vec::new();
        let mut followers = Vec::new();
        for db in [&db, &db_b] {
            let live = LiveHub::new();
            let store =
                ApprovalStore::new(AuditLog::new(db.clone(), clock.clone()), clock.clone(), limits, live.clone())
                    .unwrap();
            store.join(Cluster::join(db, clock.clone(), &live).unwrap().unwrap());
            store.restore().await.unwrap();
            let follower = store.clone();
            followers.push(tokio::spawn(async move { follower.follow(std::future::pending()).await }));
            stores.push(store);
        }
        // Both listeners are LISTENing by then.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let b = stores.pop().unwrap();
        let a = stores.pop().unwrap();
        Some(Pair { a, b, db, followers })
    }

    fn new_execution() -> NewExecution {
        NewExecution {
            tool: "t".into(),
            upstream: None,
            upstream_tool: None,
            tool_digest: "d".into(),
            arguments: serde_json::json!({"x": 1}),
            agent: "agent".into(),
            credential_id: "cred_1".into(),
            thread: None,
            owner: Some("ada".into()),
            session_id: Some("s".into()),
            human_only: false,
            admin_only: false,
            ttl: None,
        }
    }

    fn count(db: &Db, id: &str, states: &str) -> i64 {
        let sql = format!("SELECT COUNT(*) FROM audit_events WHERE execution_id = ?1 AND state IN ({states})");
        db.conn().unwrap().query_one(&sql, crate::args![id], |r| r.get(0)).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_decision_on_another_replica_wakes_the_owner_and_the_first_wins() {
        let Some(p) = pair(Duration::from_secs(60)).await else { return };
        let e = p.a.open(new_execution()).unwrap();
        p.a.flush().await;
        let waiter = {
            let (a, id) = (p.a.clone(), e.id.clone());
            tokio::spawn(async move { a.wait(&id, Duration::from_secs(10)).await })
        };
        let (b, id) = (p.b.clone(), e.id.clone());
        let (seen, pending) = tokio::task::spawn_blocking(move || (b.get(&id), b.pending())).await.unwrap();
        assert_eq!(seen.unwrap().1.state, State::Pending, "B shows A's execution");
        assert!(pending.iter().any(|x| x.id == e.id), "and lists it as pending");
        // B watches it through a mirror.
        let (b, id) = (p.b.clone(), e.id.clone());
        let (_, mut mirror) = tokio::task::spawn_blocking(move || b.subscribe(&id)).await.unwrap().unwrap();
        let decided = p.b.decide_at_owner(&e.id, Decision::Decline, "user:bob", Some("no")).await.unwrap();
        assert_eq!(decided.state, State::Declined);
        assert_eq!(waiter.await.unwrap().unwrap().state, State::Declined, "A's waiter woke");
        tokio::time::timeout(Duration::from_secs(5), mirror.wait_for(|s| s.state == State::Declined))
            .await
            .expect("B's mirror followed")
            .unwrap();
        assert_eq!(
            p.b.decide_at_owner(&e.id, Decision::Accept, "user:ada", None).await,
            Err(DecideError::Conflict(State::Declined))
        );
        assert_eq!(
            p.a.decide_at_owner(&e.id, Decision::Accept, "user:ada", None).await,
            Err(DecideError::Conflict(State::Declined))
        );
        // Repeating the winning decision on either is a no-op.
        assert_eq!(
            p.b.decide_at_owner(&e.id, Decision::Decline, "user:bob", None).await.unwrap().state,
            State::Declined
        );
        let (db, id) = (p.db.clone(), e.id.clone());
        assert_eq!(tokio::task::spawn_blocking(move || count(&db, &id, "'declined'")).await.unwrap(), 1);
        drop(mirror);
        p.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn decisions_raced_from_two_replicas_have_one_outcome_each() {
        let Some(p) = pair(Duration::from_secs(60)).await else { return };
        let executions: Vec<_> = (0..50).map(|_| p.a.open(new_execution()).unwrap()).collect();
        p.a.flush().await;
        let mut races = Vec::new();
        for (i, e) in executions.iter().enumerate() {
            let (on_a, on_b) =
                if i % 2 == 0 { (Decision::Accept, Decision::Decline) } else { (Decision::Decline, Decision::Accept) };
            let (a, b, id) = (p.a.clone(), p.b.clone(), e.id.clone());
            races.push(tokio::spawn(async move {
                let from_a = {
                    let (a, id) = (a.clone(), id.clone());
                    tokio::spawn(async move { a.decide_at_owner(&id, on_a, "user:ada", None).await })
                };
                let from_b = {
                    let (b, id) = (b.clone(), id.clone());
                    tokio::spawn(async move { b.decide_at_owner(&id, on_b, "user:bob", None).await })
                };
                (id, from_a.await.unwrap(), from_b.await.unwrap())
            }));
        }
        for race in races {
            let (id, from_a, from_b) = race.await.unwrap();
            let won = [&from_a, &from_b].iter().filter(|r| r.is_ok()).count();
            assert_eq!(won, 1, "{id}: {from_a:?} / {from_b:?}");
            for lost in [&from_a, &from_b].into_iter().filter_map(|r| r.as_ref().err()) {
                assert!(matches!(lost, DecideError::Conflict(_)), "{id}: {lost:?}");
            }
            let (db, key) = (p.db.clone(), id.clone());
            let decisions =
                tokio::task::spawn_blocking(move || count(&db, &key, "'approved', 'declined'")).await.unwrap();
            assert_eq!(decisions, 1, "{id}: one decision audited");
            let winner = from_a.or(from_b).unwrap();
            if winner.state == State::Approved {
                p.a.start_run(&id).unwrap();
                p.a.finish(&id, true, None);
            }
        }
        assert_eq!((p.a.len(), p.b.len()), (0, 0), "nothing left behind on either replica");
        p.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_replica_that_leaves_has_its_execution_adopted_and_expired_once() {
        let Some(p) = pair(Duration::from_secs(3)).await else { return };
        let e = p.a.open(new_execution()).unwrap();
        p.a.flush().await;
        let a = p.a.clone();
        tokio::task::spawn_blocking(move || {
            a.leave();
            a.cluster().unwrap().leave();
        })
        .await
        .unwrap();
        assert_eq!(p.a.len(), 0, "A owns nothing after leaving");
        // B's next sweep adopts it (run it now rather than wait for the tick).
        let b = p.b.clone();
        tokio::task::spawn_blocking(move || b.sweep()).await.unwrap();
        assert_eq!(p.b.get(&e.id).map(|(_, s)| s.state), Some(State::Pending), "B adopted it, still pending");
        let seen = p.b.wait(&e.id, Duration::from_secs(10)).await.unwrap();
        assert_eq!(seen.state, State::Expired, "B's timer expired it");
        // Past A's own (former) timer too: still exactly one expiry.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (db, id) = (p.db.clone(), e.id.clone());
        assert_eq!(tokio::task::spawn_blocking(move || count(&db, &id, "'expired'")).await.unwrap(), 1);
        assert_eq!((p.a.len(), p.b.len()), (0, 0));
        p.close().await;
    }
}
