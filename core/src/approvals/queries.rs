//! Reading and watching the approval store: what is live (here, and on a
//! cluster at the other replicas), one execution's state and its changes,
//! waiting for a decision, and the audit log's word once settled.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_model::{AuditEntry, CredentialId, ExecutionId, State};
use tokio::sync::watch;

use super::Execution;
use super::answers::{Snapshot, Waited};
use super::store::{ApprovalStore, Mirror};

impl ApprovalStore {
    /// Live entries (the gauge that must return to zero).
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pending executions (for the inbox), oldest first.
    ///
    /// On a cluster, also those of the other live replicas (read from the
    /// database: may block).
    pub fn pending(&self) -> Vec<Arc<Execution>> {
        let mut all: Vec<_> = self
            .entries()
            .values()
            .filter(|e| e.tx.borrow().state == State::Pending)
            .map(|e| e.execution.clone())
            .collect();
        all.extend(self.remote_pending().into_iter().map(|(e, _)| e));
        all.sort_by_key(|e| (e.created_at_ms, e.id.clone()));
        all
    }

    /// The credentials that hold live executions.
    pub fn credential_ids(&self) -> Vec<CredentialId> {
        let mut ids: Vec<CredentialId> = self.entries().values().map(|e| e.execution.credential_id.clone()).collect();
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
    ///
    /// On a cluster, another replica's live execution too (read from the
    /// database: may block; pages call it, not the call path).
    pub fn get(&self, id: &ExecutionId) -> Option<(Arc<Execution>, Snapshot)> {
        let local = self.entries().get(id).map(|e| (e.execution.clone(), e.tx.borrow().clone()));
        local.or_else(|| self.remote(id))
    }

    /// Watches a live execution's state. On a cluster, another replica's
    /// execution is watched through a local mirror its owner's messages
    /// keep up to date (and the sweep, should a message be lost).
    pub fn subscribe(&self, id: &ExecutionId) -> Option<(Arc<Execution>, watch::Receiver<Snapshot>)> {
        if let Some(local) = self.entries().get(id).map(|e| (e.execution.clone(), e.tx.subscribe())) {
            return Some(local);
        }
        let (execution, snapshot) = self.remote(id)?;
        let mut mirrors = self.mirrors();
        let mirror = mirrors.entry(id.clone()).or_insert_with(|| Mirror { execution, tx: watch::channel(snapshot).0 });
        Some((mirror.execution.clone(), mirror.tx.subscribe()))
    }

    /// The audit log's last word on an execution that is no longer live,
    /// and who decided it (empty if nobody did), read in the stores' lane.
    pub async fn settled(&self, id: &ExecutionId) -> Option<(AuditEntry, String)> {
        let (audit, id) = (self.inner.audit.clone(), id.clone());
        let read = move || -> crate::error::Result<Option<(AuditEntry, String)>> {
            let Some(last) = audit.latest(&id)? else { return Ok(None) };
            let by = audit.decided_by(&id)?.unwrap_or_default();
            Ok(Some((last, by)))
        };
        self.off_runtime(read).await.ok()?.ok().flatten()
    }

    /// Waits up to `limit` for the execution to leave `pending`; returns the
    /// state then (still `pending` when the slice ended), or `None` if it is
    /// not live.
    pub async fn wait(&self, id: &ExecutionId, limit: Duration) -> Option<Snapshot> {
        let (_, mut rx) = self.subscribe(id)?;
        let _ = tokio::time::timeout(limit, rx.wait_for(|s| s.state != State::Pending)).await;
        // A closed channel still holds the last state it was sent.
        let last = rx.borrow().clone();
        if last.state != State::Pending {
            // Acted on only once the move is on disk.
            self.flush().await;
        }
        Some(last)
    }

    /// Waits up to `limit` for a decision, unless `cancelled` resolves first
    /// (the client cancelled the request holding the call): then the
    /// execution is forgotten, as its client abandoned it. The one place a
    /// held call waits.
    pub async fn wait_or_forget(
        &self,
        id: &ExecutionId,
        limit: Duration,
        cancelled: impl Future<Output = ()>,
    ) -> Waited {
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
}
