//! The approval store: its types, the live executions with their state
//! channels and timers, and every transition but a decision (each audited,
//! all under one lock). Beside it: [`super::decide`] (the one way a decision
//! is made), [`super::queries`] (reading and watching the store),
//! [`super::restore`] (a previous run's pauses at start) and
//! [`super::replicas`] (the store across replicas).
//!
//! A pause the client was told about (browser and model mode, the `-32042`
//! error, a 2026-07-28 input-required answer) belongs to its credential: it
//! is stored durably ([`super::persist`]), outlives its MCP session and a
//! restart, and is bounded by its TTL and the per-credential cap. A pause
//! held inside a request (URL elicitation, a client form) is marked
//! [`ApprovalStore::hold`]: it ends with its request or session, and a
//! restart leaves it `abandoned`.
//!
//! Several replicas on one PostgreSQL ([`ApprovalStore::join`]): each
//! execution has one owner, the replica named in its row, and only the
//! owner's lock moves it, so "first decision wins" holds across replicas as
//! within one. Others show it from the database, follow it through a mirror
//! channel fed by the owner's [`ApprovalMessage::Exec`] messages, forward
//! decisions to the owner, and adopt it when the owner is gone (see
//! [`super::replicas`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use gatehouse_model::{ExecutionId, State};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};

use super::answers::{OpenError, RunError, Snapshot};
use super::inbox_cache::InboxCache;
use super::persist::Persist;
use super::replicas::messages::ApprovalMessage;
use super::{ApprovalMetrics, Execution, NewExecution, digest};
use crate::audit::{self, AuditLog};
use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::error::Result;
use crate::live::{LiveEvent, LiveHub};
use crate::secret;

pub(super) struct Entry {
    pub(super) execution: Arc<Execution>,
    pub(super) tx: watch::Sender<Snapshot>,
    /// When it was approved: it must start running within the run window.
    pub(super) approved_at_ms: Option<i64>,
    /// Held inside a request (it ends with the request or its session).
    pub(super) held: bool,
    /// Its timers (expiry, run window), aborted when it leaves the store.
    pub(super) timers: Timers,
}

/// An entry's armed timers, aborted when the entry is dropped (it settled or
/// was handed to another replica). A timer acts only on a live entry, so one
/// left waiting would do nothing but hold its task until its delay passed:
/// up to the approval TTL (7 days at most) for every call decided before it
/// expired.
#[derive(Default)]
pub(super) struct Timers(Vec<AbortHandle>);

impl Drop for Timers {
    fn drop(&mut self) {
        for timer in &self.0 {
            timer.abort();
        }
    }
}

/// How long an approval stays pending, and how much one credential may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Pending executions expire after this long.
    pub ttl: Duration,
    /// An approved execution must start running within this long (never longer than `ttl`).
    pub run_window: Duration,
    /// Live (pending, approved or running) executions per credential.
    pub per_credential: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { ttl: Duration::from_secs(600), run_window: Duration::from_secs(300), per_credential: 20 }
    }
}

/// The longest an execution may stay pending, whatever the configuration
/// says (a rule's `approval_ttl` or the global one).
pub const MAX_APPROVAL_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// A timer to arm once restored entries are in: after this long, on this
/// execution, do this.
pub(super) type Rearm = (Duration, ExecutionId, fn(&ApprovalStore, &ExecutionId));

pub(super) struct Inner {
    entries: Mutex<HashMap<ExecutionId, Entry>>,
    pub(super) audit: AuditLog,
    clock: Arc<dyn Clock>,
    limits: Limits,
    pub(super) live: LiveHub,
    pub(super) metrics: ApprovalMetrics,
    /// Expiry timers waiting to fire; aborted when the store is dropped
    /// (a `JoinSet` aborts its tasks on drop), so none outlives it.
    timers: Mutex<JoinSet<()>>,
    /// The durable copy of paused executions.
    pub(super) persist: Persist,
    /// The replicas this one shares the database with, once joined.
    pub(super) cluster: OnceLock<Cluster>,
    /// The runtime timers go on (set at join), whichever thread arms them.
    pub(super) runtime: OnceLock<tokio::runtime::Handle>,
    /// Local copies of other replicas' executions that someone here watches.
    pub(super) mirrors: Mutex<HashMap<ExecutionId, Mirror>>,
    /// Set by [`ApprovalStore::leave`]: this replica adopts nothing more.
    pub(super) left: AtomicBool,
    /// The inboxes computed since the last change.
    pub(super) inbox: InboxCache,
}

/// A watched execution another replica owns.
pub(super) struct Mirror {
    pub(super) execution: Arc<Execution>,
    pub(super) tx: watch::Sender<Snapshot>,
}

/// The shared in-process approval store.
#[derive(Clone)]
pub struct ApprovalStore {
    pub(super) inner: Arc<Inner>,
}

impl ApprovalStore {
    /// A store whose pending executions expire after `limits.ttl` (or their
    /// rule's TTL). It starts empty: the server calls [`ApprovalStore::restore`]
    /// once at start (the CLI, which shares the database with a running
    /// server, never does).
    pub fn new(audit: AuditLog, clock: Arc<dyn Clock>, limits: Limits, live: LiveHub) -> Result<Self> {
        let ttl = limits.ttl.min(MAX_APPROVAL_TTL);
        Ok(Self {
            inner: Arc::new(Inner {
                entries: Mutex::default(),
                persist: Persist::new(audit.db().clone()),
                audit,
                clock,
                limits: Limits { ttl, run_window: limits.run_window.min(ttl), ..limits },
                live,
                metrics: ApprovalMetrics::default(),
                timers: Mutex::default(),
                cluster: OnceLock::new(),
                runtime: OnceLock::new(),
                mirrors: Mutex::default(),
                left: AtomicBool::new(false),
                inbox: InboxCache::default(),
            }),
        })
    }

    /// Waits until every transition so far (its audit entry and its row) is
    /// on disk. The store awaits it before anything acts on a transition (a
    /// pause announced, a decision answered, an approved call run);
    /// shutdown awaits it before exiting.
    pub async fn flush(&self) {
        self.inner.persist.flush().await;
    }

    /// How long an approved `execution` may wait to run: the run window,
    /// never longer than the execution's own TTL.
    pub(super) fn run_window_ms(&self, execution: &Execution) -> i64 {
        let ttl = execution.expires_at_ms - execution.created_at_ms;
        (self.inner.limits.run_window.as_millis() as i64).min(ttl.max(0))
    }

    /// The approval TTL.
    pub fn ttl(&self) -> Duration {
        self.inner.limits.ttl
    }

    /// The limits this store enforces.
    pub fn limits(&self) -> Limits {
        self.inner.limits
    }

    /// Counters for `/metrics`.
    pub fn metrics(&self) -> &ApprovalMetrics {
        &self.inner.metrics
    }

    /// The audit log behind the store.
    pub fn audit(&self) -> &AuditLog {
        &self.inner.audit
    }

    /// The store's "now" (Unix ms).
    pub(super) fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    pub(super) fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<ExecutionId, Entry>> {
        self.inner.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues the audit entry of `execution`'s move to `state` (no I/O: it
    /// is called under the lock; see `persist`'s crash consistency).
    pub(super) fn record(&self, execution: &Execution, state: State, actor: Option<&str>, detail: Option<&str>) {
        self.record_with(execution, state, actor, detail, None);
    }

    /// [`Self::record`], with the arguments as kept (the pending entry).
    fn record_with(
        &self,
        execution: &Execution,
        state: State,
        actor: Option<&str>,
        detail: Option<&str>,
        arguments: Option<&gatehouse_model::KeptArguments>,
    ) {
        self.inner.audit.record(audit::Entry {
            execution_id: execution.id.as_str(),
            state,
            tool: &execution.tool,
            upstream: execution.upstream.as_deref(),
            arguments_digest: &execution.arguments_digest,
            agent: &execution.agent,
            owner: execution.owner.as_deref(),
            owner_id: execution.owner_id,
            credential_id: Some(&execution.credential_id),
            thread: execution.thread.as_deref(),
            actor,
            detail,
            arguments,
        });
    }

    /// Moves a live entry to `state` (caller holds the lock); removes it when settled.
    pub(super) fn transition(
        &self,
        entries: &mut HashMap<ExecutionId, Entry>,
        id: &ExecutionId,
        state: State,
        actor: Option<&str>,
        detail: Option<&str>,
    ) -> Option<Snapshot> {
        let entry = entries.get(id)?;
        self.record(&entry.execution, state, actor, detail);
        let previous = entry.tx.borrow().clone();
        let decided_by = if previous.state == State::Pending { actor.map(Into::into) } else { previous.decided_by };
        let snapshot = Snapshot { state, actor: actor.map(Into::into), detail: detail.map(Into::into), decided_by };
        entry.tx.send_replace(snapshot.clone());
        if let Some(cluster) = self.inner.cluster.get() {
            // Queued, never sent under the lock.
            cluster.send(None, ApprovalMessage::Exec { id: id.clone(), snapshot: snapshot.clone() });
        }
        if state.is_settled() {
            // A held pause has a row only on a cluster.
            if !entry.held || self.inner.cluster.get().is_some() {
                self.inner.persist.delete(id);
            }
            entries.remove(id);
        }
        self.inner.live.publish(LiveEvent::ApprovalsChanged);
        Some(snapshot)
    }

    /// Records a new pending execution and arms its expiry; refused when the
    /// credential already holds as many live executions as allowed. Returns
    /// once the pause would survive a restart (its audit entry and row are
    /// written), so the caller may announce it.
    pub async fn open(&self, new: NewExecution) -> std::result::Result<Arc<Execution>, OpenError> {
        let now = self.inner.clock.now_ms();
        // A rule's own TTL, within the cap; the global one otherwise.
        let ttl = new.ttl.unwrap_or(self.inner.limits.ttl).min(MAX_APPROVAL_TTL);
        let execution = Arc::new(Execution {
            id: ExecutionId::from(secret::new_id("exec")),
            arguments_digest: digest(&new.arguments),
            request: new,
            created_at_ms: now,
            expires_at_ms: now + ttl.as_millis() as i64,
        });
        let snapshot = Snapshot { state: State::Pending, actor: Some("agent".into()), detail: None, decided_by: None };
        let limit = self.inner.limits.per_credential;
        // On a cluster the credential's executions on every replica count
        // (read before the lock: a database round trip must not hold it).
        let elsewhere = match self.inner.cluster.get() {
            Some(_) if limit != usize::MAX => {
                let (store, credential) = (self.clone(), execution.credential_id.clone());
                let count = move || store.inner.persist.count_credential(&credential).unwrap_or(0);
                self.off_runtime(count).await.unwrap_or(0)
            }
            _ => 0,
        };
        {
            let mut entries = self.entries();
            let here = entries.values().filter(|e| e.execution.credential_id == execution.credential_id).count();
            if here.max(elsewhere) >= limit {
                return Err(OpenError::TooMany { limit });
            }
            let asked_by = execution.asked_by.as_deref().unwrap_or("agent");
            self.record_with(&execution, State::Pending, Some(asked_by), None, execution.kept_arguments.as_ref());
            self.inner.persist.insert(execution.clone(), self.me());
            entries.insert(
                execution.id.clone(),
                Entry {
                    execution: execution.clone(),
                    tx: watch::channel(snapshot).0,
                    approved_at_ms: None,
                    held: false,
                    timers: Timers::default(),
                },
            );
        }
        self.inner.live.publish(LiveEvent::ApprovalsChanged);
        self.after(ttl, &execution.id, |store, id| {
            store.expire(id);
        });
        self.flush().await;
        Ok(execution)
    }

    /// Runs `then` on this store after `delay`, while entry `id` is live
    /// (call it without the entries' lock). The timer holds no strong
    /// reference (a waiting timer never keeps the store alive) and is one of
    /// the store's `timers`, so it is aborted when the store goes; and one of
    /// the entry's, so it is aborted when the entry leaves the store.
    pub(super) fn after(&self, delay: Duration, id: &ExecutionId, then: fn(&ApprovalStore, &ExecutionId)) {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let timer = {
            let id = id.clone();
            async move {
                tokio::time::sleep(delay).await;
                if let Some(inner) = weak.upgrade() {
                    then(&ApprovalStore { inner }, &id);
                }
            }
        };
        let handle = {
            let mut timers = self.inner.timers.lock().unwrap_or_else(|p| p.into_inner());
            // Let go of timers that have ended: the set holds only waiting ones.
            while timers.try_join_next().is_some() {}
            match self.inner.runtime.get() {
                Some(runtime) => timers.spawn_on(timer, runtime),
                None => timers.spawn(timer),
            }
        };
        match self.entries().get_mut(id) {
            Some(entry) => entry.timers.0.push(handle),
            // Settled (or handed on) meanwhile: nothing left to time.
            None => handle.abort(),
        }
    }

    /// Expires a still-pending execution (the TTL passed).
    pub fn expire(&self, id: &ExecutionId) -> bool {
        let mut entries = self.entries();
        if entries.get(id).is_some_and(|e| e.tx.borrow().state == State::Pending) {
            self.transition(
                &mut entries,
                id,
                State::Expired,
                Some("system"),
                Some("no decision within the approval TTL"),
            );
            self.inner.metrics.expired.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Expires an approved execution that did not start within the run
    /// window: when its timer fires (`timer`), or when a run is asked for too late.
    pub(super) fn expire_unrun(&self, id: &ExecutionId, timer: bool) -> bool {
        let mut entries = self.entries();
        let now = self.inner.clock.now_ms();
        let overdue = entries.get(id).is_some_and(|e| {
            let window = self.run_window_ms(&e.execution);
            e.tx.borrow().state == State::Approved && (timer || e.approved_at_ms.is_some_and(|at| at + window <= now))
        });
        if overdue {
            self.transition(
                &mut entries,
                id,
                State::Expired,
                Some("system"),
                Some("approved but not run within the run window"),
            );
        }
        overdue
    }

    /// Settles every not-yet-running execution of a revoked credential as `revoked`.
    pub fn forget_credential(&self, credential_id: &str) -> usize {
        let mut entries = self.entries();
        let ids: Vec<ExecutionId> = entries
            .values()
            .filter(|e| e.execution.credential_id == credential_id)
            .filter(|e| matches!(e.tx.borrow().state, State::Pending | State::Approved))
            .map(|e| e.execution.id.clone())
            .collect();
        for id in &ids {
            self.transition(&mut entries, id, State::Revoked, Some("system"), Some("the credential was revoked"));
        }
        ids.len()
    }

    /// Settles every not-yet-running execution of the agents of the user
    /// with id `owner` as `revoked`: the user is being removed.
    pub fn forget_owner(&self, owner: gatehouse_model::UserId) -> usize {
        let mut entries = self.entries();
        let ids: Vec<ExecutionId> = entries
            .values()
            .filter(|e| e.execution.owner_id == Some(owner))
            .filter(|e| matches!(e.tx.borrow().state, State::Pending | State::Approved))
            .map(|e| e.execution.id.clone())
            .collect();
        for id in &ids {
            self.transition(&mut entries, id, State::Revoked, Some("system"), Some("the owner was removed"));
        }
        ids.len()
    }

    /// Moves an approved execution to running; the caller then runs the tool
    /// and calls [`ApprovalStore::finish`]. Returns once `running` is on
    /// disk: a restart during the run leaves the call `abandoned`, never
    /// approved and runnable again.
    pub async fn start_run(&self, id: &ExecutionId) -> std::result::Result<Arc<Execution>, RunError> {
        let execution = self.start_run_here(id)?;
        self.flush().await;
        Ok(execution)
    }

    fn start_run_here(&self, id: &ExecutionId) -> std::result::Result<Arc<Execution>, RunError> {
        if self.expire_unrun(id, false) {
            return Err(RunError::NotApproved(State::Expired));
        }
        let mut entries = self.entries();
        let entry = entries.get(id).ok_or(RunError::NotFound)?;
        let state = entry.tx.borrow().state;
        if state != State::Approved {
            return Err(RunError::NotApproved(state));
        }
        let execution = entry.execution.clone();
        self.transition(&mut entries, id, State::Running, Some("agent"), None);
        Ok(execution)
    }

    /// Settles a running execution.
    pub fn finish(&self, id: &ExecutionId, succeeded: bool, detail: Option<&str>) {
        let mut entries = self.entries();
        if entries.get(id).is_some_and(|e| e.tx.borrow().state == State::Running) {
            let state = if succeeded { State::Completed } else { State::Failed };
            self.transition(&mut entries, id, state, Some("agent"), detail);
        }
    }

    /// Hands a running execution over to its upstream's input rounds: the
    /// upstream asked the agent for input, and the agent's answers carry the
    /// call on ([`crate::single_use`]: each round's state once). The entry
    /// leaves the store (its place, its row) as a settled one does; the audit
    /// log says `running` with `detail`, and each round adds its own entry.
    pub fn suspend(&self, id: &ExecutionId, detail: &str) {
        let mut entries = self.entries();
        let Some(entry) = entries.get(id) else { return };
        if entry.tx.borrow().state != State::Running {
            return;
        }
        self.record(&entry.execution, State::Running, Some("agent"), Some(detail));
        if !entry.held || self.inner.cluster.get().is_some() {
            self.inner.persist.delete(id);
        }
        entries.remove(id);
        self.inner.live.publish(LiveEvent::ApprovalsChanged);
    }

    /// Drops an execution its client abandoned (cancelled request). A running
    /// call is left to finish and settle itself.
    pub fn forget(&self, id: &ExecutionId, reason: &str) -> bool {
        let mut entries = self.entries();
        let live = entries.get(id).is_some_and(|e| matches!(e.tx.borrow().state, State::Pending | State::Approved));
        if live {
            self.transition(&mut entries, id, State::Cancelled, Some("system"), Some(reason));
        }
        live
    }

    /// Marks a pause as held inside the request that made it (URL
    /// elicitation, a client form): it ends with that request or its session,
    /// so it is not kept on disk (on a cluster its row stays, marked held, so
    /// other replicas can show and decide it), and a restart leaves it
    /// `abandoned`.
    pub fn hold(&self, id: &ExecutionId) {
        let mut entries = self.entries();
        if let Some(entry) = entries.get_mut(id)
            && !entry.held
        {
            entry.held = true;
            if self.inner.cluster.get().is_some() {
                // Kept, marked: other replicas show and decide it; an
                // adopter abandons it once this replica is gone.
                self.inner.persist.hold(id);
            } else {
                self.inner.persist.delete(id);
            }
        }
    }

    /// Drops every not-yet-running execution of an ended MCP session that
    /// was held inside one of its requests. A pause the client was told
    /// about belongs to its credential and stays (its TTL bounds it).
    pub fn forget_session(&self, session_id: &str) -> usize {
        let mut entries = self.entries();
        let ids: Vec<ExecutionId> = entries
            .values()
            .filter(|e| e.held && e.execution.session_id.as_deref() == Some(session_id))
            .filter(|e| matches!(e.tx.borrow().state, State::Pending | State::Approved))
            .map(|e| e.execution.id.clone())
            .collect();
        for id in &ids {
            self.transition(&mut entries, id, State::Cancelled, Some("system"), Some("the MCP session ended"));
        }
        ids.len()
    }
}
