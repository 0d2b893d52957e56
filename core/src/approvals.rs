//! Executions and the approval store: the bridge between a paused tool call
//! and the person who decides it.
//!
//! - `open` records a pending execution (and arms its expiry);
//! - `decide` records the first decision and wakes every waiter; a repeat of
//!   the same decision is idempotent, a conflicting one is refused;
//! - `wait` suspends until the state moves or a time slice ends;
//! - `start_run`/`finish` carry an approved call through running to its end;
//! - `forget`/`forget_session` cancel what a client or session abandoned.
//!
//! An entry leaves memory when it settles (completed, failed, declined,
//! expired, cancelled); from then on the audit log answers for it. Every
//! transition happens under one lock, so a decision racing a teardown either
//! lands first or finds the entry gone — it is never kept afterwards.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::audit::{self, AuditEvent, AuditLog};
use crate::clock::{Clock, rfc3339};
use crate::error::Result;
use crate::live::{LiveEvent, LiveHub};
use crate::secret;
use crate::users::User;

pub use gatehouse_model::{Decision, DecisionView, ExecutionView, State};

/// A gated call.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    /// `exec_<uuid>`.
    pub id: String,
    /// Exposed tool name.
    pub tool: String,
    /// The upstream server, for upstream tools.
    pub upstream: Option<String>,
    /// The tool's own name at its upstream (what runs once approved).
    pub upstream_tool: Option<String>,
    /// SHA-256 of the tool's definition when the call was paused; the
    /// approved call runs only if the definition is still the same.
    pub tool_digest: String,
    /// The call's arguments, exactly as sent.
    pub arguments: Value,
    /// SHA-256 (hex) of the canonical arguments.
    pub arguments_digest: String,
    /// Agent name of the calling credential.
    pub agent: String,
    /// The calling credential.
    pub credential_id: String,
    /// The calling credential's thread: a credential re-issued for the same
    /// thread (same agent and owner) may resume it.
    pub thread: Option<String>,
    /// The agent's owner (decides, with admins).
    pub owner: Option<String>,
    /// The MCP session it was made in, if any.
    pub session_id: Option<String>,
    /// Whether only a person may decide it.
    pub human_only: bool,
    /// Whether only an admin may decide it (tools that change the gate for everyone).
    pub admin_only: bool,
    /// Creation time (Unix ms).
    pub created_at_ms: i64,
    /// Expiry time (Unix ms).
    pub expires_at_ms: i64,
}

/// What the caller supplies to open an execution.
#[derive(Debug, Clone)]
pub struct NewExecution {
    /// Exposed tool name.
    pub tool: String,
    /// Upstream, if any.
    pub upstream: Option<String>,
    /// The tool's own name at its upstream.
    pub upstream_tool: Option<String>,
    /// Digest of the tool's definition ([`tool_digest`]).
    pub tool_digest: String,
    /// Arguments.
    pub arguments: Value,
    /// Agent.
    pub agent: String,
    /// Credential.
    pub credential_id: String,
    /// The credential's thread.
    pub thread: Option<String>,
    /// Owner.
    pub owner: Option<String>,
    /// MCP session.
    pub session_id: Option<String>,
    /// Only a person may decide.
    pub human_only: bool,
    /// Only an admin may decide.
    pub admin_only: bool,
}

/// Whether `credential` may resume, decide (model mode) or retry
/// `execution`: the credential that opened it, or the one that replaced it by
/// re-issue for the same thread (same agent and owner). Another credential
/// with the same agent name is someone else.
pub fn belongs_to(
    credential: &crate::credentials::Credential,
    credential_id: &str,
    thread: Option<&str>,
    agent: &str,
    owner: Option<&str>,
) -> bool {
    credential.id == credential_id
        || (thread.is_some()
            && credential.thread.as_deref() == thread
            && credential.agent == agent
            && credential.owner.as_deref() == owner)
}

impl Execution {
    /// Whether `credential` may resume it (see [`belongs_to`]).
    pub fn belongs_to(&self, credential: &crate::credentials::Credential) -> bool {
        belongs_to(credential, &self.credential_id, self.thread.as_deref(), &self.agent, self.owner.as_deref())
    }
}

/// The state of an execution at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// State.
    pub state: State,
    /// Who moved it there (`user:ada`, `agent`, `system`).
    pub actor: Option<String>,
    /// Extra words (error text).
    pub detail: Option<String>,
    /// Who took it out of pending (kept through running and completion).
    pub decided_by: Option<String>,
}

/// Why a decision was not recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// No such execution, live or in the audit log.
    #[error("execution not found")]
    NotFound,
    /// Another decision (or expiry) came first.
    #[error("execution is already {0}")]
    Conflict(&'static str),
    /// Storage failed.
    #[error("{0}")]
    Storage(String),
}

/// What waiting for a decision came to ([`ApprovalStore::wait_or_forget`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    /// The time slice ended with no decision.
    StillPending,
    /// It left `pending` (decided, expired, cancelled): its state then.
    Moved(Snapshot),
    /// It was not live when the wait began (settled: the audit log answers).
    NotLive,
    /// The client cancelled; the execution was forgotten.
    Cancelled,
}

/// Why an approved call could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// Not approved (pending or settled).
    #[error("execution is {0}, not approved")]
    NotApproved(&'static str),
    /// No live execution.
    #[error("execution not found")]
    NotFound,
}

/// Counters and a histogram for `/metrics`.
#[derive(Debug, Default)]
pub struct ApprovalMetrics {
    /// Decisions by kind: accept, decline, cancel, expire.
    pub decisions: [AtomicU64; 4],
    /// Histogram of seconds from pause to decision: bucket counts for
    /// [`WAIT_BUCKETS`], then +Inf; plus the sum in milliseconds.
    pub wait_buckets: [AtomicU64; 9],
    /// Sum of waits (ms).
    pub wait_sum_ms: AtomicU64,
}

/// Upper bounds (seconds) of the wait histogram's buckets.
pub const WAIT_BUCKETS: [f64; 8] = [1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0];

impl ApprovalMetrics {
    fn observe_wait(&self, ms: i64) {
        let secs = ms.max(0) as f64 / 1000.0;
        let i = WAIT_BUCKETS.iter().position(|b| secs <= *b).unwrap_or(WAIT_BUCKETS.len());
        self.wait_buckets[i].fetch_add(1, Ordering::Relaxed);
        self.wait_sum_ms.fetch_add(ms.max(0) as u64, Ordering::Relaxed);
    }
}

/// Why a person may not see or decide an execution.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// No such execution.
    #[error("execution not found")]
    NotFound,
    /// It belongs to another user's agent.
    #[error("this execution belongs to another user's agent")]
    Forbidden,
    /// Another decision came first.
    #[error("execution is already {0}")]
    Conflict(&'static str),
    /// Only an admin may decide it (it changes the gate for everyone).
    #[error("this call changes the gate for everyone: an admin must decide it")]
    AdminRequired,
    /// Storage failed.
    #[error("{0}")]
    Storage(String),
}

/// Why a new execution was not opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The credential already has as many live executions as allowed.
    #[error("this credential already has {limit} calls waiting or running (max_executions_per_credential)")]
    TooMany {
        /// The configured limit.
        limit: usize,
    },
}

/// Whether `user` may see and decide executions of `owner`'s agents.
pub fn may_decide(user: &User, owner: Option<&str>) -> bool {
    user.is_admin || owner == Some(user.username.as_str())
}

fn live_view(execution: &Execution, snapshot: &Snapshot) -> ExecutionView {
    ExecutionView {
        execution_id: execution.id.clone(),
        state: snapshot.state,
        tool: execution.tool.clone(),
        upstream: execution.upstream.clone(),
        arguments: Some(execution.arguments.clone()),
        arguments_digest: execution.arguments_digest.clone(),
        agent: execution.agent.clone(),
        owner: execution.owner.clone(),
        session_id: execution.session_id.clone(),
        created_at: Some(rfc3339(execution.created_at_ms)),
        expires_at: Some(rfc3339(execution.expires_at_ms)),
        expires_at_ms: Some(execution.expires_at_ms),
        decision: snapshot.decided_by.clone().map(|by| DecisionView { state: snapshot.state, by }),
        admin_only: execution.admin_only,
    }
}

struct Entry {
    execution: Arc<Execution>,
    tx: watch::Sender<Snapshot>,
    /// When it was approved: it must start running within the run window.
    approved_at_ms: Option<i64>,
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

struct Inner {
    entries: Mutex<HashMap<String, Entry>>,
    audit: AuditLog,
    clock: Arc<dyn Clock>,
    limits: Limits,
    live: LiveHub,
    metrics: ApprovalMetrics,
}

/// The shared in-process approval store.
#[derive(Clone)]
pub struct ApprovalStore {
    inner: Arc<Inner>,
}

/// SHA-256 (hex) of the canonical JSON of `arguments` (object keys sorted).
pub fn digest(arguments: &Value) -> String {
    fn canonical(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let sorted: std::collections::BTreeMap<_, _> =
                    map.iter().map(|(k, v)| (k.clone(), canonical(v))).collect();
                Value::Object(sorted.into_iter().collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }
    hex::encode(Sha256::digest(canonical(arguments).to_string().as_bytes()))
}

impl ApprovalStore {
    /// A store whose pending executions expire after `limits.ttl`. Marks
    /// executions a previous run left unsettled as `abandoned`.
    pub fn new(audit: AuditLog, clock: Arc<dyn Clock>, limits: Limits, live: LiveHub) -> Result<Self> {
        let abandoned = audit.abandon_unsettled()?;
        if abandoned > 0 {
            tracing::warn!(abandoned, "executions left unsettled by a previous run are now abandoned");
        }
        Ok(Self {
            inner: Arc::new(Inner {
                entries: Mutex::default(),
                audit,
                clock,
                limits: Limits { run_window: limits.run_window.min(limits.ttl), ..limits },
                live,
                metrics: ApprovalMetrics::default(),
            }),
        })
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

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.inner.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Live entries (the gauge that must return to zero).
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pending executions (for the inbox), oldest first.
    pub fn pending(&self) -> Vec<Arc<Execution>> {
        let mut all: Vec<_> = self
            .entries()
            .values()
            .filter(|e| e.tx.borrow().state == State::Pending)
            .map(|e| e.execution.clone())
            .collect();
        all.sort_by_key(|e| (e.created_at_ms, e.id.clone()));
        all
    }

    fn record(&self, execution: &Execution, state: State, actor: Option<&str>, detail: Option<&str>) {
        let result = self.inner.audit.record(audit::Entry {
            execution_id: &execution.id,
            state: state.as_str(),
            tool: &execution.tool,
            arguments_digest: &execution.arguments_digest,
            agent: &execution.agent,
            owner: execution.owner.as_deref(),
            credential_id: Some(&execution.credential_id),
            thread: execution.thread.as_deref(),
            actor,
            detail,
        });
        if let Err(e) = result {
            tracing::error!(execution = %execution.id, error = %e, "audit write failed");
        }
    }

    /// Moves a live entry to `state` (caller holds the lock); removes it when settled.
    fn transition(
        &self,
        entries: &mut HashMap<String, Entry>,
        id: &str,
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
        if state.is_settled() {
            entries.remove(id);
        }
        self.inner.live.publish(LiveEvent::ApprovalsChanged);
        Some(snapshot)
    }

    /// Records a new pending execution and arms its expiry; refused when the
    /// credential already holds as many live executions as allowed.
    pub fn open(&self, new: NewExecution) -> std::result::Result<Arc<Execution>, OpenError> {
        let now = self.inner.clock.now_ms();
        let ttl = self.inner.limits.ttl;
        let execution = Arc::new(Execution {
            id: secret::new_id("exec"),
            arguments_digest: digest(&new.arguments),
            tool: new.tool,
            upstream: new.upstream,
            upstream_tool: new.upstream_tool,
            tool_digest: new.tool_digest,
            arguments: new.arguments,
            agent: new.agent,
            credential_id: new.credential_id,
            thread: new.thread,
            owner: new.owner,
            session_id: new.session_id,
            human_only: new.human_only,
            admin_only: new.admin_only,
            created_at_ms: now,
            expires_at_ms: now + ttl.as_millis() as i64,
        });
        let snapshot = Snapshot { state: State::Pending, actor: Some("agent".into()), detail: None, decided_by: None };
        {
            let mut entries = self.entries();
            let limit = self.inner.limits.per_credential;
            let held = entries.values().filter(|e| e.execution.credential_id == execution.credential_id).count();
            if held >= limit {
                return Err(OpenError::TooMany { limit });
            }
            self.record(&execution, State::Pending, Some("agent"), None);
            entries.insert(
                execution.id.clone(),
                Entry { execution: execution.clone(), tx: watch::channel(snapshot).0, approved_at_ms: None },
            );
        }
        self.inner.live.publish(LiveEvent::ApprovalsChanged);
        self.after(ttl, &execution.id, |store, id| {
            store.expire(id);
        });
        Ok(execution)
    }

    /// Runs `then` on this store after `delay`, unless the store is gone by
    /// then. Each timer is bounded by its delay and holds no strong reference.
    fn after(&self, delay: Duration, id: &str, then: fn(&ApprovalStore, &str)) {
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        let id = id.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(inner) = weak.upgrade() {
                then(&ApprovalStore { inner }, &id);
            }
        });
    }

    /// Expires a still-pending execution (the TTL passed).
    pub fn expire(&self, id: &str) -> bool {
        let mut entries = self.entries();
        if entries.get(id).is_some_and(|e| e.tx.borrow().state == State::Pending) {
            self.transition(
                &mut entries,
                id,
                State::Expired,
                Some("system"),
                Some("no decision within the approval TTL"),
            );
            self.inner.metrics.decisions[3].fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Expires an approved execution that did not start within the run
    /// window: when its timer fires (`timer`), or when a run is asked for too late.
    fn expire_unrun(&self, id: &str, timer: bool) -> bool {
        let mut entries = self.entries();
        let now = self.inner.clock.now_ms();
        let window = self.inner.limits.run_window.as_millis() as i64;
        let overdue = entries.get(id).is_some_and(|e| {
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
        let ids: Vec<String> = entries
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

    /// The credentials that hold live executions.
    pub fn credential_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.entries().values().map(|e| e.execution.credential_id.clone()).collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The live execution a retried call continues: same credential, tool and arguments.
    pub fn find_live(&self, credential_id: &str, tool: &str, arguments_digest: &str) -> Option<Arc<Execution>> {
        self.entries()
            .values()
            .map(|e| &e.execution)
            .filter(|e| e.credential_id == credential_id && e.tool == tool && e.arguments_digest == arguments_digest)
            .min_by_key(|e| e.created_at_ms)
            .cloned()
    }

    /// The live execution and its state.
    pub fn get(&self, id: &str) -> Option<(Arc<Execution>, Snapshot)> {
        self.entries().get(id).map(|e| (e.execution.clone(), e.tx.borrow().clone()))
    }

    /// Watches a live execution's state.
    pub fn subscribe(&self, id: &str) -> Option<(Arc<Execution>, watch::Receiver<Snapshot>)> {
        self.entries().get(id).map(|e| (e.execution.clone(), e.tx.subscribe()))
    }

    /// An execution as `user` may see it: live first, then the audit log.
    pub fn view_for(&self, user: &User, id: &str) -> std::result::Result<ExecutionView, AccessError> {
        if let Some((execution, snapshot)) = self.get(id) {
            if !may_decide(user, execution.owner.as_deref()) {
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
        if !may_decide(user, last.owner.as_deref()) {
            return Err(AccessError::Forbidden);
        }
        let state = last.execution_state();
        Ok(ExecutionView {
            execution_id: last.execution_id,
            state,
            tool: last.tool,
            upstream: None,
            arguments: None,
            arguments_digest: last.arguments_digest,
            agent: last.agent,
            owner: last.owner,
            session_id: None,
            created_at: None,
            expires_at: None,
            expires_at_ms: None,
            decision: self.inner.audit.decided_by(id).ok().flatten().map(|by| DecisionView { state, by }),
            admin_only: false,
        })
    }

    /// Records `user`'s decision, after checking they may make it.
    pub fn decide_for(&self, user: &User, id: &str, decision: Decision) -> std::result::Result<Snapshot, AccessError> {
        let view = self.view_for(user, id)?;
        if view.admin_only && !user.is_admin {
            return Err(AccessError::AdminRequired);
        }
        let actor = format!("user:{}", user.username);
        let snapshot = self.decide(id, decision, &actor).map_err(|e| match e {
            DecideError::NotFound => AccessError::NotFound,
            DecideError::Conflict(s) => AccessError::Conflict(s),
            DecideError::Storage(s) => AccessError::Storage(s),
        })?;
        tracing::info!(execution = %id, decision = decision.as_str(), by = %actor, "decision recorded");
        Ok(snapshot)
    }

    /// Pending executions `user` may decide, oldest first.
    pub fn pending_for(&self, user: &User) -> Vec<ExecutionView> {
        let entries = self.entries();
        let mut all: Vec<ExecutionView> = entries
            .values()
            .filter(|e| may_decide(user, e.execution.owner.as_deref()))
            .filter(|e| e.tx.borrow().state == State::Pending)
            // The inbox lists many calls: arguments are shown on each call's own page.
            .map(|e| ExecutionView { arguments: None, ..live_view(&e.execution, &e.tx.borrow()) })
            .collect();
        all.sort_by(|a, b| a.expires_at_ms.cmp(&b.expires_at_ms).then(a.execution_id.cmp(&b.execution_id)));
        all
    }

    /// The audit log's last word on an execution that is no longer live.
    pub fn settled(&self, id: &str) -> Option<AuditEvent> {
        self.inner.audit.latest(id).ok().flatten()
    }

    /// Records a decision. First decision wins; repeating it is a no-op.
    pub fn decide(&self, id: &str, decision: Decision, actor: &str) -> std::result::Result<Snapshot, DecideError> {
        let mut entries = self.entries();
        let Some(entry) = entries.get(id) else {
            drop(entries);
            return match self.inner.audit.latest(id).map_err(|e| DecideError::Storage(e.to_string()))? {
                None => Err(DecideError::NotFound),
                Some(last) => {
                    let state = last.execution_state();
                    if decision.agrees_with(state) {
                        let decided_by = self.inner.audit.decided_by(id).ok().flatten();
                        Ok(Snapshot { state, actor: last.actor, detail: last.detail, decided_by })
                    } else {
                        Err(DecideError::Conflict(state.as_str()))
                    }
                }
            };
        };
        let current = entry.tx.borrow().clone();
        if current.state != State::Pending {
            return if decision.agrees_with(current.state) {
                Ok(current)
            } else {
                Err(DecideError::Conflict(current.state.as_str()))
            };
        }
        let waited = self.inner.clock.now_ms() - entry.execution.created_at_ms;
        let snapshot = self
            .transition(&mut entries, id, decision.state(), Some(actor), None)
            .expect("entry is present under the lock");
        if decision == Decision::Accept
            && let Some(entry) = entries.get_mut(id)
        {
            entry.approved_at_ms = Some(self.inner.clock.now_ms());
        }
        drop(entries);
        if decision == Decision::Accept {
            self.after(self.inner.limits.run_window, id, |store, id| {
                store.expire_unrun(id, true);
            });
        }
        let m = &self.inner.metrics;
        m.decisions[decision as usize].fetch_add(1, Ordering::Relaxed);
        m.observe_wait(waited);
        Ok(snapshot)
    }

    /// Waits up to `limit` for the execution to leave `pending`; returns the
    /// state then (still `pending` when the slice ended), or `None` if it is
    /// not live.
    pub async fn wait(&self, id: &str, limit: Duration) -> Option<Snapshot> {
        let (_, mut rx) = self.subscribe(id)?;
        let _ = tokio::time::timeout(limit, rx.wait_for(|s| s.state != State::Pending)).await;
        // A closed channel still holds the last state it was sent.
        let last = rx.borrow().clone();
        Some(last)
    }

    /// Waits up to `limit` for a decision, unless `cancelled` resolves first
    /// (the client cancelled the request holding the call): then the
    /// execution is forgotten, as its client abandoned it. The one place a
    /// held call waits.
    pub async fn wait_or_forget(&self, id: &str, limit: Duration, cancelled: impl Future<Output = ()>) -> Waited {
        tokio::select! {
            seen = self.wait(id, limit) => match seen {
                None => Waited::NotLive,
                Some(s) if s.state == State::Pending => Waited::StillPending,
                Some(s) => Waited::Moved(s),
            },
            _ = cancelled => {
                self.forget(id, "the client cancelled its request");
                Waited::Cancelled
            }
        }
    }

    /// Moves an approved execution to running; the caller then runs the tool
    /// and calls [`ApprovalStore::finish`].
    pub fn start_run(&self, id: &str) -> std::result::Result<Arc<Execution>, RunError> {
        if self.expire_unrun(id, false) {
            return Err(RunError::NotApproved(State::Expired.as_str()));
        }
        let mut entries = self.entries();
        let entry = entries.get(id).ok_or(RunError::NotFound)?;
        let state = entry.tx.borrow().state;
        if state != State::Approved {
            return Err(RunError::NotApproved(state.as_str()));
        }
        let execution = entry.execution.clone();
        self.transition(&mut entries, id, State::Running, Some("agent"), None);
        Ok(execution)
    }

    /// Settles a running execution.
    pub fn finish(&self, id: &str, succeeded: bool, detail: Option<&str>) {
        let mut entries = self.entries();
        if entries.get(id).is_some_and(|e| e.tx.borrow().state == State::Running) {
            let state = if succeeded { State::Completed } else { State::Failed };
            self.transition(&mut entries, id, state, Some("agent"), detail);
        }
    }

    /// Drops an execution its client abandoned (cancelled request). A running
    /// call is left to finish and settle itself.
    pub fn forget(&self, id: &str, reason: &str) -> bool {
        let mut entries = self.entries();
        let live = entries.get(id).is_some_and(|e| matches!(e.tx.borrow().state, State::Pending | State::Approved));
        if live {
            self.transition(&mut entries, id, State::Cancelled, Some("system"), Some(reason));
        }
        live
    }

    /// Drops every not-yet-running execution of an ended MCP session.
    pub fn forget_session(&self, session_id: &str) -> usize {
        let mut entries = self.entries();
        let ids: Vec<String> = entries
            .values()
            .filter(|e| e.execution.session_id.as_deref() == Some(session_id))
            .filter(|e| matches!(e.tx.borrow().state, State::Pending | State::Approved))
            .map(|e| e.execution.id.clone())
            .collect();
        for id in &ids {
            self.transition(&mut entries, id, State::Cancelled, Some("system"), Some("the MCP session ended"));
        }
        ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::db::Db;

    fn limits(ttl: Duration) -> Limits {
        Limits { ttl, run_window: ttl, per_credential: usize::MAX }
    }

    fn store(ttl: Duration) -> ApprovalStore {
        store_with(limits(ttl))
    }

    fn store_with(limits: Limits) -> ApprovalStore {
        let db = Db::open_in_memory().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        ApprovalStore::new(AuditLog::new(db, clock.clone()), clock, limits, LiveHub::new()).unwrap()
    }

    fn new_execution(session: &str) -> NewExecution {
        NewExecution {
            tool: "gatehouse_policy_set".into(),
            upstream: None,
            upstream_tool: None,
            tool_digest: "d".into(),
            arguments: serde_json::json!({"pattern": "x", "action": "allow"}),
            agent: "agent".into(),
            credential_id: "cred_1".into(),
            thread: None,
            owner: Some("ada".into()),
            session_id: Some(session.into()),
            human_only: false,
            admin_only: false,
        }
    }

    #[tokio::test]
    async fn first_decision_wins_and_repeats_are_idempotent() {
        let store = store(Duration::from_secs(60));
        let e = store.open(new_execution("s")).unwrap();
        assert_eq!(store.decide(&e.id, Decision::Accept, "user:ada").unwrap().state, State::Approved);
        assert_eq!(store.decide(&e.id, Decision::Accept, "user:ada").unwrap().state, State::Approved);
        assert_eq!(store.decide(&e.id, Decision::Decline, "user:bob"), Err(DecideError::Conflict("approved")));
        store.start_run(&e.id).unwrap();
        store.finish(&e.id, true, None);
        assert!(store.is_empty());
        // Settled: the audit log answers.
        assert_eq!(store.decide(&e.id, Decision::Accept, "user:ada").unwrap().state, State::Completed);
        assert_eq!(store.decide(&e.id, Decision::Decline, "user:ada"), Err(DecideError::Conflict("completed")));
        assert_eq!(store.decide("exec_nope", Decision::Accept, "user:ada"), Err(DecideError::NotFound));
    }

    #[tokio::test]
    async fn pending_executions_expire() {
        let store = store(Duration::from_millis(50));
        let e = store.open(new_execution("s")).unwrap();
        let seen = store.wait(&e.id, Duration::from_secs(5)).await.unwrap();
        assert_eq!(seen.state, State::Expired);
        assert!(store.is_empty());
        assert_eq!(store.decide(&e.id, Decision::Accept, "user:ada"), Err(DecideError::Conflict("expired")));
    }

    #[tokio::test]
    async fn a_wait_slice_ends_pending() {
        let store = store(Duration::from_secs(60));
        let e = store.open(new_execution("s")).unwrap();
        assert_eq!(store.wait(&e.id, Duration::from_millis(20)).await.unwrap().state, State::Pending);
        assert_eq!(store.forget_session("s"), 1);
        assert!(store.is_empty());
        assert_eq!(store.audit().latest(&e.id).unwrap().unwrap().state, "cancelled");
    }

    #[tokio::test]
    async fn restart_marks_unsettled_executions_abandoned() {
        let db = Db::open_in_memory().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let first = ApprovalStore::new(
            AuditLog::new(db.clone(), clock.clone()),
            clock.clone(),
            limits(Duration::from_secs(60)),
            LiveHub::new(),
        )
        .unwrap();
        let e = first.open(new_execution("s")).unwrap();
        let second = ApprovalStore::new(
            AuditLog::new(db, clock.clone()),
            clock,
            limits(Duration::from_secs(60)),
            LiveHub::new(),
        )
        .unwrap();
        assert_eq!(second.audit().latest(&e.id).unwrap().unwrap().state, "abandoned");
    }

    #[tokio::test]
    async fn a_credential_holds_a_bounded_number_of_live_executions() {
        let store = store_with(Limits { per_credential: 2, ..limits(Duration::from_secs(60)) });
        let a = store.open(new_execution("s")).unwrap();
        store.open(new_execution("s")).unwrap();
        assert_eq!(store.open(new_execution("s")).unwrap_err(), OpenError::TooMany { limit: 2 });
        let other = NewExecution { credential_id: "cred_2".into(), ..new_execution("t") };
        store.open(other).expect("another credential has its own allowance");
        store.forget(&a.id, "test");
        store.open(new_execution("s")).expect("a settled execution frees its place");
    }

    #[tokio::test]
    async fn revoking_a_credential_settles_its_executions_as_revoked() {
        let store = store(Duration::from_secs(60));
        let a = store.open(new_execution("s")).unwrap();
        let other = store.open(NewExecution { credential_id: "cred_2".into(), ..new_execution("t") }).unwrap();
        assert_eq!(store.credential_ids(), vec!["cred_1".to_string(), "cred_2".to_string()]);
        assert_eq!(store.forget_credential("cred_1"), 1);
        assert_eq!(store.audit().latest(&a.id).unwrap().unwrap().state, "revoked");
        assert!(store.get(&other.id).is_some(), "another credential's execution is untouched");
        assert_eq!(store.decide(&a.id, Decision::Accept, "user:ada"), Err(DecideError::Conflict("revoked")));
    }

    #[tokio::test]
    async fn an_approval_not_run_within_the_run_window_expires() {
        let store = store_with(Limits { run_window: Duration::from_millis(30), ..limits(Duration::from_secs(60)) });
        let e = store.open(new_execution("s")).unwrap();
        store.decide(&e.id, Decision::Accept, "user:ada").unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(store.start_run(&e.id).is_err(), "an approval past its run window does not run");
        assert_eq!(store.audit().latest(&e.id).unwrap().unwrap().state, "expired");
        assert!(store.is_empty());
    }

    #[test]
    fn only_the_opening_credential_or_its_thread_successor_may_resume() {
        use crate::credentials::Credential;
        let cred = |id: &str, agent: &str, thread: Option<&str>, owner: Option<&str>| Credential {
            id: id.into(),
            agent: agent.into(),
            thread: thread.map(Into::into),
            provider_session: None,
            owner: owner.map(Into::into),
            created_at_ms: 0,
            last_seen_ms: 0,
            revoked_at_ms: None,
            revoked_reason: None,
        };
        let opener = cred("cred_1", "claude", Some("t1"), Some("ada"));
        let e = |thread: Option<&str>| Execution {
            id: "exec_1".into(),
            tool: "t".into(),
            upstream: None,
            upstream_tool: None,
            tool_digest: String::new(),
            arguments: Value::Null,
            arguments_digest: String::new(),
            agent: "claude".into(),
            credential_id: opener.id.clone(),
            thread: thread.map(Into::into),
            owner: Some("ada".into()),
            session_id: None,
            human_only: false,
            admin_only: false,
            created_at_ms: 0,
            expires_at_ms: 0,
        };
        assert!(e(Some("t1")).belongs_to(&opener));
        assert!(
            e(Some("t1")).belongs_to(&cred("cred_2", "claude", Some("t1"), Some("ada"))),
            "re-issued for the thread"
        );
        assert!(!e(Some("t1")).belongs_to(&cred("cred_3", "claude", None, Some("ada"))), "same agent name, no thread");
        assert!(!e(Some("t1")).belongs_to(&cred("cred_4", "claude", Some("t2"), Some("ada"))), "another thread");
        assert!(!e(Some("t1")).belongs_to(&cred("cred_5", "claude", Some("t1"), Some("bob"))), "another owner");
        assert!(!e(None).belongs_to(&cred("cred_6", "claude", None, Some("ada"))), "no thread: only the opener");
    }

    /// 10,000 rounds of a decision racing teardown, expiry or cancellation:
    /// every waiter gets exactly one outcome, every execution settles exactly
    /// once, and no entry is left behind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn decisions_racing_teardown_expiry_and_cancellation_leave_nothing_behind() {
        let store = store(Duration::from_secs(3600));
        let mut rounds = Vec::new();
        for round in 0..10_000u32 {
            let store = store.clone();
            rounds.push(tokio::spawn(async move {
                let session = format!("s{round}");
                let e = store.open(new_execution(&session)).unwrap();
                let waiter = {
                    let (store, id) = (store.clone(), e.id.clone());
                    tokio::spawn(async move {
                        let seen = store.wait(&id, Duration::from_secs(30)).await;
                        // An approved call is run by its waiter, as resume does.
                        if let Some(Snapshot { state: State::Approved, .. }) = seen
                            && store.start_run(&id).is_ok()
                        {
                            store.finish(&id, true, None);
                        }
                        seen
                    })
                };
                let decider = {
                    let (store, id) = (store.clone(), e.id.clone());
                    let decision = if round % 2 == 0 { Decision::Accept } else { Decision::Decline };
                    tokio::spawn(async move { store.decide(&id, decision, "user:ada") })
                };
                let racer = {
                    let (store, id) = (store.clone(), e.id.clone());
                    tokio::spawn(async move {
                        match round % 3 {
                            0 => store.forget_session(&session) > 0,
                            1 => store.expire(&id),
                            _ => store.forget(&id, "client cancelled"),
                        }
                    })
                };
                let seen = waiter.await.unwrap();
                let decided = decider.await.unwrap();
                let _ = racer.await.unwrap();
                (e.id.clone(), seen, decided)
            }));
        }
        for round in rounds {
            let (id, seen, decided) = round.await.unwrap();
            let last = store.audit().latest(&id).unwrap().unwrap();
            // A waiter that arrived after the execution settled reads the audit log, as resume does.
            let seen = seen.map(|s| s.state).unwrap_or_else(|| State::parse(&last.state).unwrap());
            assert_ne!(seen, State::Pending, "the waiter got an outcome");
            let final_state = State::parse(&last.state).unwrap();
            assert!(final_state.is_settled(), "{id} ended {final_state:?}");
            match decided {
                Ok(s) => {
                    assert!(matches!(s.state, State::Approved | State::Declined | State::Running | State::Completed))
                }
                Err(DecideError::Conflict(_)) => {}
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        assert_eq!(store.len(), 0, "no entry leaked");
    }
}
