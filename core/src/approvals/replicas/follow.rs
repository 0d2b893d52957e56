//! The owner's side of the replicas' messages: the follow loop that keeps
//! mirrors current and answers forwarded decisions and hand-overs.

use gatehouse_model::{Decision, ExecutionId, State};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::super::answers::DecideError;
use super::super::store::{ApprovalStore, Mirror};
use super::SWEEP_EVERY;
use super::messages::ApprovalMessage;
use crate::cluster::{Cluster, Domain, Incoming};

/// How many messages wait for the follow loop; past it they are dropped and
/// the sweep heals what they would have told.
const INBOX: usize = 1024;

/// The approvals' domain on the bus while [`ApprovalStore::follow`] runs:
/// hands what arrives to the follow loop.
struct Inbox(mpsc::Sender<Incoming<ApprovalMessage>>);

impl Domain for Inbox {
    type Message = ApprovalMessage;

    fn receive(&self, incoming: Incoming<ApprovalMessage>) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.0.try_send(incoming) {
            tracing::debug!("the approvals' inbox is full; the next sweep re-reads what was dropped");
        }
    }
}

/// Takes the approvals' topic off the bus when the follow loop ends, however
/// it ends.
struct Unregister(Cluster);

impl Drop for Unregister {
    fn drop(&mut self) {
        self.0.unregister::<ApprovalMessage>();
    }
}

impl ApprovalStore {
    /// Follows the cluster until `shutdown`: answers other replicas'
    /// decisions and hand-overs, keeps mirrors current, and sweeps every
    /// [`SWEEP_EVERY`]. The server spawns it on its task tracker; returns at
    /// once without a cluster.
    pub async fn follow(&self, shutdown: impl Future<Output = ()>) {
        let Some(cluster) = self.inner.cluster.get().cloned() else { return };
        let (inbox, mut incoming) = mpsc::channel(INBOX);
        cluster.register(Inbox(inbox));
        let _unregister = Unregister(cluster.clone());
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Answers run beside the loop (a hand-over awaits the writer); they
        // end with it.
        let mut answering: JoinSet<()> = JoinSet::new();
        // The bus drops the inbox when this replica leaves the cluster; the
        // sweeps go on until shutdown.
        let mut listening = true;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = sweep.tick() => {
                    let store = self.clone();
                    let _ = self.off_runtime(move || store.sweep()).await;
                }
                message = incoming.recv(), if listening => match message {
                    Some(message) => self.on_message(&cluster, message, &mut answering),
                    None => listening = false,
                },
                Some(_) = answering.join_next(), if !answering.is_empty() => {}
            }
        }
    }

    fn on_message(&self, cluster: &Cluster, incoming: Incoming<ApprovalMessage>, answering: &mut JoinSet<()>) {
        let Incoming { from, ask, message } = incoming;
        match (message, ask) {
            (ApprovalMessage::Exec { id, snapshot }, _) => self.mirror(&id, snapshot),
            (ApprovalMessage::Decide { id, decision, actor, detail }, Some(ask)) => {
                let (store, cluster) = (self.clone(), cluster.clone());
                answering.spawn(async move {
                    let worker = store.clone();
                    let answer = store
                        .off_runtime(move || worker.answer_decide(&id, decision, &actor, detail.as_deref()))
                        .await
                        .unwrap_or_else(|e| ApprovalMessage::Decided {
                            outcome: Err(DecideError::Storage(e.to_string())),
                        });
                    cluster.answer(ask, answer);
                });
            }
            (ApprovalMessage::Release { id }, Some(ask)) => {
                let (store, cluster) = (self.clone(), cluster.clone());
                answering.spawn(async move {
                    // The row must be written before it can change hands.
                    store.flush().await;
                    let worker = store.clone();
                    let ok = store.off_runtime(move || worker.release(&id, &from)).await.unwrap_or(false);
                    cluster.answer(ask, ApprovalMessage::Released { ok });
                });
            }
            _ => {}
        }
    }

    /// The owner's side of a forwarded decision: [`ApprovalMessage::Decided`],
    /// or [`ApprovalMessage::Moved`] when it is not the owner now. Blocks.
    fn answer_decide(
        &self,
        id: &ExecutionId,
        decision: Decision,
        actor: &str,
        detail: Option<&str>,
    ) -> ApprovalMessage {
        let storage =
            |e: crate::error::CoreError| ApprovalMessage::Decided { outcome: Err(DecideError::Storage(e.to_string())) };
        if !self.is_local(id) {
            match self.inner.persist.owner_of(id) {
                // Handed to us but not loaded yet: load it first.
                Ok(Some(owner)) if owner.as_deref() == self.me().as_deref() => {
                    let me = self.me();
                    if let Err(e) = self.adopt(vec![(id.clone(), me)]) {
                        return storage(e);
                    }
                }
                Ok(Some(_)) => return ApprovalMessage::Moved,
                Ok(None) => {}
                Err(e) => return storage(e),
            }
        }
        ApprovalMessage::Decided { outcome: self.decide_here(id, decision, actor, detail) }
    }

    /// The owner's side of a hand-over: unless held inside a request here or
    /// running, the row becomes `asker`'s and the entry leaves this map; its
    /// channel stays as a mirror for whoever waits on it here. Blocks.
    fn release(&self, id: &ExecutionId, asker: &str) -> bool {
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
            self.mirrors().insert(id.clone(), Mirror { execution: entry.execution, tx: entry.tx });
        }
        tracing::info!(execution = %id, to = %asker, "handed an execution to the replica its agent resumed on");
        true
    }
}
