//! The one place that keeps MCP session bookkeeping: which credential each
//! agent's session belongs to, whether it is in use, how many sessions a
//! credential (and the server) may hold, which session makes room for a new
//! one, which idle ones end, and the sweep that ends what a revoked
//! credential left behind.
//!
//! A session is bound when the `initialize` response that carries its id
//! leaves the server, so no request can use the id before it is bound; any
//! request with an unbound or foreign id is told the session does not exist.
//!
//! A session is *in use* while any of its HTTP requests is in progress (a
//! POST until its response has ended, a GET stream while the client reads
//! it) or rmcp's handler still runs one of its requests (a call held inside
//! its request, a `resume` long-poll), even if the client dropped the
//! response stream: each holds a [`SessionUse`]. Only a session not in use is
//! closed to make room or for idleness, so nothing a client waits on is cut
//! off. A pause announced in browser mode, a task and a 2026-07-28
//! input-required pause belong to the credential, not the session, and
//! outlive it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gatehouse_core::Core;
use gatehouse_core::live::LiveEvent;
use gatehouse_core::model::CredentialId;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::upstream::listeners::Listeners;

/// Why a new session was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpSessionLimit {
    /// The credential holds as many sessions as allowed, each of them in use.
    #[error(
        "this credential already has {0} MCP sessions open (max_sessions_per_credential), each with a request \
         or stream in progress; end one with DELETE or wait for one to finish"
    )]
    PerCredential(usize),
    /// The server holds as many sessions as allowed, and none of this
    /// credential's is free to make room.
    #[error("the server already has {0} MCP sessions open (max_sessions); try again later")]
    Total(usize),
}

/// The session limits, from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// `max_sessions_per_credential`.
    pub per_credential: usize,
    /// `max_sessions`.
    pub total: usize,
    /// `session_idle_timeout`.
    pub idle_timeout: Duration,
}

/// Why Gatehouse closed a session on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closing {
    /// It made room for a new session of its credential.
    Evicted,
    /// It was not used for `session_idle_timeout`.
    Idle,
}

/// Sessions Gatehouse closed on its own, by why (exported at `/metrics`).
#[derive(Debug, Default)]
pub struct SessionMetrics {
    /// Closed to make room for a new session of the same credential.
    pub evicted: AtomicU64,
    /// Closed after `session_idle_timeout` unused.
    pub idle: AtomicU64,
}

/// One bound session.
struct Bound {
    credential_id: String,
    /// Its requests and streams in progress (each a [`SessionUse`]).
    in_use: usize,
    /// When one of them last began or ended: the least recent goes first.
    last_used: Instant,
}

#[derive(Default)]
struct Table {
    /// Session id → its owner and use.
    sessions: HashMap<String, Bound>,
    /// Credential id → sessions bound or being opened.
    held: HashMap<String, usize>,
    /// Sessions being opened (reserved, not yet bound).
    opening: usize,
}

impl Table {
    /// The credential's session not in use that was used least recently.
    fn least_recently_used_idle(&self, credential_id: &str) -> Option<String> {
        self.sessions
            .iter()
            .filter(|(_, b)| b.in_use == 0 && b.credential_id == credential_id)
            .min_by_key(|(_, b)| b.last_used)
            .map(|(sid, _)| sid.clone())
    }

    fn release(&mut self, credential_id: &str) {
        if let Some(n) = self.held.get_mut(credential_id) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(credential_id);
            }
        }
    }

    /// Forgets a session; its credential's place is given back.
    fn remove(&mut self, session_id: &str) -> Option<Bound> {
        let bound = self.sessions.remove(session_id)?;
        self.release(&bound.credential_id);
        Some(bound)
    }
}

/// The session → credential bindings, with the session caps.
pub struct McpSessionBindings {
    table: Mutex<Table>,
    /// `max_sessions_per_credential` and `max_sessions` (a reload sets them).
    per_credential: AtomicUsize,
    total: AtomicUsize,
    idle_timeout: Duration,
    metrics: SessionMetrics,
    /// rmcp's sessions, to close those of a revoked credential and to notice ended ones.
    manager: Arc<LocalSessionManager>,
}

/// A place held for a session being opened; given back unless bound.
pub struct Reservation {
    bindings: Arc<McpSessionBindings>,
    credential_id: String,
    done: bool,
}

impl Reservation {
    /// Binds the session the `initialize` response created.
    pub fn bind(mut self, session_id: &str) {
        let mut t = self.bindings.lock();
        t.opening -= 1;
        let bound = Bound { credential_id: self.credential_id.clone(), in_use: 0, last_used: Instant::now() };
        t.sessions.insert(session_id.to_string(), bound);
        self.done = true;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.done {
            let mut t = self.bindings.lock();
            t.opening -= 1;
            t.release(&self.credential_id);
        }
    }
}

/// One request or stream of a session in progress: the session is in use
/// (neither evicted nor closed for idleness) until every one is dropped.
pub struct SessionUse {
    bindings: Arc<McpSessionBindings>,
    session_id: String,
}

impl Drop for SessionUse {
    fn drop(&mut self) {
        let mut t = self.bindings.lock();
        // Gone already if it was ended (DELETE, revocation) meanwhile.
        if let Some(bound) = t.sessions.get_mut(&self.session_id) {
            bound.in_use -= 1;
            bound.last_used = Instant::now();
        }
    }
}

impl McpSessionBindings {
    /// Bindings over rmcp's session manager, with the configured limits.
    pub fn new(manager: Arc<LocalSessionManager>, limits: SessionLimits) -> Arc<Self> {
        Arc::new(Self {
            table: Mutex::default(),
            per_credential: AtomicUsize::new(limits.per_credential),
            total: AtomicUsize::new(limits.total),
            idle_timeout: limits.idle_timeout,
            metrics: SessionMetrics::default(),
            manager,
        })
    }

    /// Sets the caps (a reload): sessions already open stay; a credential
    /// over a lowered cap gives up its least recently used idle session
    /// when it opens the next.
    pub fn set_caps(&self, per_credential: usize, total: usize) {
        self.per_credential.store(per_credential, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// rmcp's session manager.
    pub fn manager(&self) -> &Arc<LocalSessionManager> {
        &self.manager
    }

    /// Sessions Gatehouse closed on its own.
    pub fn metrics(&self) -> &SessionMetrics {
        &self.metrics
    }

    /// Holds a place for a new session of `credential_id`. At a cap, the
    /// credential's own least recently used session not in use is closed to
    /// make room (never another credential's: the total cap is shared, the
    /// room is not); only if each of its sessions is in use is it refused.
    pub async fn reserve(self: &Arc<Self>, credential_id: &str) -> Result<Reservation, McpSessionLimit> {
        let (per_credential, total) = (self.per_credential.load(Ordering::Relaxed), self.total.load(Ordering::Relaxed));
        let evicted = {
            let mut t = self.lock();
            let held = t.held.get(credential_id).copied().unwrap_or(0);
            let full = t.sessions.len() + t.opening >= total;
            let evicted = if full || held >= per_credential {
                // The victim's place passes to the new session at once, under
                // the lock, so no one else can take it meanwhile.
                match t.least_recently_used_idle(credential_id) {
                    Some(sid) => t.remove(&sid).map(|bound| (sid, bound)),
                    None if full => return Err(McpSessionLimit::Total(total)),
                    None => return Err(McpSessionLimit::PerCredential(per_credential)),
                }
            } else {
                None
            };
            *t.held.entry(credential_id.to_string()).or_default() += 1;
            t.opening += 1;
            evicted
        };
        let reservation = Reservation { bindings: self.clone(), credential_id: credential_id.to_string(), done: false };
        if let Some((sid, bound)) = evicted {
            self.close(&sid, &bound, Closing::Evicted).await;
        }
        Ok(reservation)
    }

    /// Marks a request or stream of `session_id` in progress, if the session
    /// is bound to `credential_id`; `None` means it does not exist for this caller.
    pub fn enter(self: &Arc<Self>, session_id: &str, credential_id: &str) -> Option<SessionUse> {
        let mut t = self.lock();
        let bound = t.sessions.get_mut(session_id).filter(|b| b.credential_id == credential_id)?;
        bound.in_use += 1;
        bound.last_used = Instant::now();
        Some(SessionUse { bindings: self.clone(), session_id: session_id.to_string() })
    }

    /// The credential a session belongs to, if it is bound.
    pub fn owner(&self, session_id: &str) -> Option<String> {
        self.lock().sessions.get(session_id).map(|b| b.credential_id.clone())
    }

    /// Forgets an ended session.
    pub fn unbind(&self, session_id: &str) {
        self.lock().remove(session_id);
    }

    /// Bound sessions in all.
    pub fn len(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Whether no session is bound.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn snapshot(&self) -> Vec<(String, String)> {
        self.lock().sessions.iter().map(|(s, b)| (s.clone(), b.credential_id.clone())).collect()
    }

    /// Ends a session already taken out of the table in rmcp (its handler
    /// goes, and with it the session's live entry and its held calls, of
    /// which a session not in use has none), logged and counted.
    async fn close(&self, session_id: &str, bound: &Bound, why: Closing) {
        let unused_for = bound.last_used.elapsed();
        match why {
            Closing::Evicted => {
                self.metrics.evicted.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    session = %session_id, credential = %bound.credential_id, ?unused_for,
                    "MCP session evicted: its credential opened a new one at max_sessions_per_credential \
                     (or max_sessions), and this was its least recently used session not in use"
                );
            }
            Closing::Idle => {
                self.metrics.idle.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    session = %session_id, credential = %bound.credential_id, ?unused_for,
                    "MCP session closed: no request or stream for session_idle_timeout"
                );
            }
        }
        if let Err(e) = self.manager.close_session(&session_id.into()).await {
            tracing::warn!(session = %session_id, error = %e, "closing an MCP session failed");
        }
    }

    /// Closes every session not in use for `session_idle_timeout`.
    pub async fn close_idle(&self) -> usize {
        let idle: Vec<(String, Bound)> = {
            let mut t = self.lock();
            let now = Instant::now();
            let sids: Vec<String> = t
                .sessions
                .iter()
                .filter(|(_, b)| b.in_use == 0 && now.duration_since(b.last_used) >= self.idle_timeout)
                .map(|(sid, _)| sid.clone())
                .collect();
            sids.into_iter().filter_map(|sid| t.remove(&sid).map(|bound| (sid, bound))).collect()
        };
        for (sid, bound) in &idle {
            self.close(sid, bound, Closing::Idle).await;
        }
        idle.len()
    }

    /// How often [`Self::close_idle`] runs: often enough that a session
    /// ends within a quarter of its timeout after it, at most every
    /// [`SWEEP_EVERY`].
    fn idle_check_every(&self) -> Duration {
        (self.idle_timeout / 4).clamp(Duration::from_millis(10), SWEEP_EVERY)
    }

    /// Drops bindings of sessions rmcp has ended (its keep-alive, a failed
    /// handshake) without a DELETE.
    async fn prune_ended(&self) {
        for (sid, _) in self.snapshot() {
            if !self.manager.has_session(&sid.as_str().into()).await.unwrap_or(false) {
                self.unbind(&sid);
            }
        }
    }

    /// Ends every session of `credential_id`.
    pub async fn close_credential(&self, credential_id: &str) -> usize {
        let sessions: Vec<String> =
            self.snapshot().into_iter().filter(|(_, c)| c == credential_id).map(|(s, _)| s).collect();
        for sid in &sessions {
            if let Err(e) = self.manager.close_session(&sid.as_str().into()).await {
                tracing::warn!(session = %sid, error = %e, "closing a revoked credential's session failed");
            }
            self.unbind(sid);
        }
        sessions.len()
    }

    fn credential_ids(&self) -> Vec<CredentialId> {
        let mut ids: Vec<CredentialId> =
            self.lock().sessions.values().map(|b| CredentialId::from(&b.credential_id)).collect();
        ids.sort();
        ids.dedup();
        ids
    }
}

/// How often the sweep runs when nothing prompts it (a CLI in another
/// process revokes without telling this one).
pub const SWEEP_EVERY: Duration = Duration::from_secs(2);

/// One pass: sessions rmcp ended are unbound; a revoked credential's pending
/// executions settle as `revoked` and its sessions and listen streams end.
pub async fn sweep(core: &Core, bindings: &McpSessionBindings, listeners: &Listeners) {
    bindings.prune_ended().await;
    let mut ids = bindings.credential_ids();
    ids.extend(listeners.credential_ids());
    ids.extend(core.approvals.credential_ids());
    ids.sort();
    ids.dedup();
    if ids.is_empty() {
        return;
    }
    let revoked = match core.run(move |core| core.credentials.revoked_among(&ids)).await {
        Ok(Ok(revoked)) => revoked,
        Ok(Err(e)) => return tracing::error!(error = %e, "credential sweep failed"),
        Err(e) => return tracing::error!(error = %e, "credential sweep panicked"),
    };
    for (id, reissued) in revoked {
        if reissued {
            // Replaced by a re-issue for its thread: its successor carries its
            // calls on, so they (and the sessions they were made in) stay; the
            // old token itself no longer authenticates.
            continue;
        }
        let executions = core.approvals.forget_credential(&id);
        let sessions = bindings.close_credential(&id).await;
        let listens = listeners.close_credential(&id);
        if executions + sessions + listens > 0 {
            tracing::info!(credential = %id, executions, sessions, listens, "revoked credential: pending calls settled, sessions and listens closed");
        }
    }
}

/// Runs [`sweep`] after every credential change and every [`SWEEP_EVERY`],
/// and closes idle sessions ([`McpSessionBindings::close_idle`]) as they
/// lapse, until shutdown (one owned task).
pub async fn sweeper(
    core: Core,
    bindings: Arc<McpSessionBindings>,
    listeners: Arc<Listeners>,
    shutdown: CancellationToken,
) {
    let mut events = core.live.subscribe();
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle_tick = tokio::time::interval(bindings.idle_check_every());
    idle_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = idle_tick.tick() => {
                bindings.close_idle().await;
                continue;
            }
            _ = tick.tick() => {}
            event = events.recv() => match event {
                Ok(LiveEvent::CredentialsChanged) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
        }
        sweep(&core, &bindings, &listeners).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bindings(per_credential: usize, total: usize, idle_timeout: Duration) -> Arc<McpSessionBindings> {
        let limits = SessionLimits { per_credential, total, idle_timeout };
        McpSessionBindings::new(Arc::new(LocalSessionManager::default()), limits)
    }

    /// A bound session `sid` of `credential`.
    async fn open(b: &Arc<McpSessionBindings>, credential: &str, sid: &str) -> Result<(), McpSessionLimit> {
        b.reserve(credential).await.map(|r| r.bind(sid))
    }

    #[tokio::test]
    async fn at_its_cap_a_credential_gives_up_its_least_recently_used_idle_session() {
        let b = bindings(2, 10, Duration::from_secs(300));
        open(&b, "a", "a1").await.unwrap();
        open(&b, "a", "a2").await.unwrap();
        // a1 was used after a2: a2 is the least recently used.
        drop(b.enter("a1", "a").unwrap());
        open(&b, "a", "a3").await.unwrap();
        assert_eq!((b.owner("a1").as_deref(), b.owner("a2"), b.owner("a3").as_deref()), (Some("a"), None, Some("a")));
        assert_eq!(b.metrics().evicted.load(Ordering::Relaxed), 1);
        assert!(b.enter("a2", "a").is_none(), "an evicted session no longer exists");

        // Busy sessions are never taken: with both in use, the next is refused.
        let _busy1 = b.enter("a1", "a").unwrap();
        let _busy3 = b.enter("a3", "a").unwrap();
        assert_eq!(open(&b, "a", "a4").await.unwrap_err(), McpSessionLimit::PerCredential(2));
        assert!(b.owner("a1").is_some() && b.owner("a3").is_some());
        assert!(open(&b, "b", "b1").await.is_ok(), "another credential has its own places");
        assert!(b.enter("a1", "b").is_none(), "nor may it use another's session");
    }

    #[tokio::test]
    async fn the_total_is_a_hard_bound_and_one_credential_never_evicts_another() {
        let b = bindings(5, 3, Duration::from_secs(300));
        open(&b, "a", "a1").await.unwrap();
        open(&b, "a", "a2").await.unwrap();
        open(&b, "b", "b1").await.unwrap();
        // Full: b makes room with its own idle session, never with a's.
        open(&b, "b", "b2").await.unwrap();
        assert!(b.owner("b1").is_none() && b.owner("a1").is_some() && b.owner("a2").is_some());
        let _busy = b.enter("b2", "b").unwrap();
        assert_eq!(open(&b, "b", "b3").await.unwrap_err(), McpSessionLimit::Total(3));
        assert_eq!(open(&b, "c", "c1").await.unwrap_err(), McpSessionLimit::Total(3), "c has nothing to give up");
        assert_eq!(b.len(), 3);
        // A session being opened holds its place too.
        b.unbind("a1");
        let opening = b.reserve("c").await.unwrap();
        assert_eq!(b.reserve("d").await.err(), Some(McpSessionLimit::Total(3)));
        drop(opening);
        assert!(b.reserve("d").await.is_ok(), "an unbound reservation gives its place back");
    }

    #[tokio::test]
    async fn only_sessions_unused_for_the_idle_timeout_are_closed() {
        let b = bindings(4, 10, Duration::from_millis(100));
        open(&b, "a", "idle").await.unwrap();
        open(&b, "a", "streaming").await.unwrap();
        let stream = b.enter("streaming", "a").unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(b.close_idle().await, 1);
        assert_eq!((b.owner("idle"), b.owner("streaming").as_deref()), (None, Some("a")));
        // Unused from the moment its last request or stream ended.
        drop(stream);
        assert_eq!(b.close_idle().await, 0);
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(b.close_idle().await, 1);
        assert!(b.is_empty());
        assert_eq!(b.metrics().idle.load(Ordering::Relaxed), 2);
        assert!(b.lock().held.is_empty(), "every place is given back");
    }
}
