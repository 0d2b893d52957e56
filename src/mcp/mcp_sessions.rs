//! Which credential each agent's MCP session belongs to, how many sessions a
//! credential may hold, and the sweep that ends what a revoked credential
//! left behind.
//!
//! A session is bound when the `initialize` response that carries its id
//! leaves the server, so no request can use the id before it is bound; any
//! request with an unbound or foreign id is told the session does not exist.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gatehouse_core::Core;
use gatehouse_core::live::LiveEvent;
use gatehouse_core::model::CredentialId;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;

use super::upstream::listeners::Listeners;

/// Why a new session was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpSessionLimit {
    /// The credential holds as many sessions as allowed.
    #[error("this credential already has {0} MCP sessions open (max_sessions_per_credential); end one with DELETE")]
    PerCredential(usize),
    /// The server holds as many sessions as allowed.
    #[error("the server already has {0} MCP sessions open (max_sessions); try again later")]
    Total(usize),
}

#[derive(Default)]
struct Table {
    /// Session id → credential id.
    owner: HashMap<String, String>,
    /// Credential id → sessions bound or being opened.
    held: HashMap<String, usize>,
    /// Sessions being opened (reserved, not yet bound).
    opening: usize,
}

/// The session → credential bindings, with the session caps.
pub struct McpSessionBindings {
    table: Mutex<Table>,
    per_credential: usize,
    total: usize,
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
        t.owner.insert(session_id.to_string(), self.credential_id.clone());
        self.done = true;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.done {
            let mut t = self.bindings.lock();
            t.opening -= 1;
            release(&mut t, &self.credential_id);
        }
    }
}

fn release(t: &mut Table, credential_id: &str) {
    if let Some(n) = t.held.get_mut(credential_id) {
        *n -= 1;
        if *n == 0 {
            t.held.remove(credential_id);
        }
    }
}

impl McpSessionBindings {
    /// Bindings over rmcp's session manager, with the configured caps.
    pub fn new(manager: Arc<LocalSessionManager>, per_credential: usize, total: usize) -> Arc<Self> {
        Arc::new(Self { table: Mutex::default(), per_credential, total, manager })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// rmcp's session manager.
    pub fn manager(&self) -> &Arc<LocalSessionManager> {
        &self.manager
    }

    /// Holds a place for a new session of `credential_id`, or says which cap it hits.
    pub fn reserve(self: &Arc<Self>, credential_id: &str) -> Result<Reservation, McpSessionLimit> {
        let mut t = self.lock();
        if t.owner.len() + t.opening >= self.total {
            return Err(McpSessionLimit::Total(self.total));
        }
        let held = t.held.get(credential_id).copied().unwrap_or(0);
        if held >= self.per_credential {
            return Err(McpSessionLimit::PerCredential(self.per_credential));
        }
        t.held.insert(credential_id.to_string(), held + 1);
        t.opening += 1;
        Ok(Reservation { bindings: self.clone(), credential_id: credential_id.to_string(), done: false })
    }

    /// The credential a session belongs to, if it is bound.
    pub fn owner(&self, session_id: &str) -> Option<String> {
        self.lock().owner.get(session_id).cloned()
    }

    /// Forgets an ended session.
    pub fn unbind(&self, session_id: &str) {
        let mut t = self.lock();
        if let Some(credential_id) = t.owner.remove(session_id) {
            release(&mut t, &credential_id);
        }
    }

    /// Bound sessions in all.
    pub fn len(&self) -> usize {
        self.lock().owner.len()
    }

    /// Whether no session is bound.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn snapshot(&self) -> Vec<(String, String)> {
        self.lock().owner.iter().map(|(s, c)| (s.clone(), c.clone())).collect()
    }

    /// Drops bindings of sessions rmcp has ended (idle timeout, a failed
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
        let mut ids: Vec<CredentialId> = self.lock().owner.values().map(CredentialId::from).collect();
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

/// Runs [`sweep`] after every credential change and every [`SWEEP_EVERY`]
/// until shutdown (one owned task).
pub async fn sweeper(
    core: Core,
    bindings: Arc<McpSessionBindings>,
    listeners: Arc<Listeners>,
    shutdown: CancellationToken,
) {
    let mut events = core.live.subscribe();
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
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
