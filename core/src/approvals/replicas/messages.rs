//! What the replicas' approval stores tell each other on the bus
//! ([`ApprovalMessage`], the `approvals` topic), and the owner's side of it:
//! the follow loop that keeps mirrors current and answers forwarded
//! decisions and hand-overs. Refusals travel as the store's own
//! [`DecideError`], so the asking replica answers as a local decision would.

use gatehouse_model::{Decision, State};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::super::store::{ApprovalStore, DecideError, Mirror, Snapshot};
use super::SWEEP_EVERY;
use crate::cluster::{Cluster, Domain, Incoming, Topic, cut};

/// How many messages wait for the follow loop; past it they are dropped and
/// the sweep heals what they would have told.
const INBOX: usize = 1024;

/// What one replica's approval store tells another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ApprovalMessage {
    /// An execution the sender owns moved (mirrors on other replicas follow).
    Exec {
        /// The execution.
        id: String,
        /// Its state now.
        snapshot: Snapshot,
    },
    /// Asks the owner of an execution to record a decision (a request:
    /// answered with [`ApprovalMessage::Decided`] or [`ApprovalMessage::Moved`]).
    Decide {
        /// The execution.
        id: String,
        /// Accept or decline.
        decision: Decision,
        /// Who decides (`user:ada`).
        actor: String,
        /// Their words, if any.
        detail: Option<String>,
    },
    /// The owner's answer to [`ApprovalMessage::Decide`]: the state after,
    /// or why not, as a local decision would say.
    Decided {
        /// The outcome.
        outcome: Result<Snapshot, DecideError>,
    },
    /// The answer to [`ApprovalMessage::Decide`] from a replica that no
    /// longer owns the execution (handed over meanwhile): the asker looks
    /// the owner up again.
    Moved,
    /// Asks the owner to hand an execution over (an agent resumes it here);
    /// answered with [`ApprovalMessage::Released`].
    Release {
        /// The execution.
        id: String,
    },
    /// The owner's answer to [`ApprovalMessage::Release`]: whether the row
    /// is now the asker's.
    Released {
        /// Handed over.
        ok: bool,
    },
}

impl Topic for ApprovalMessage {
    const TOPIC: &'static str = "approvals";

    fn fit(&mut self) {
        match self {
            ApprovalMessage::Exec { snapshot, .. } | ApprovalMessage::Decided { outcome: Ok(snapshot) } => {
                cut(&mut snapshot.detail)
            }
            ApprovalMessage::Decide { detail, .. } => cut(detail),
            _ => {}
        }
    }
}

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
    fn answer_decide(&self, id: &str, decision: Decision, actor: &str, detail: Option<&str>) -> ApprovalMessage {
        let storage =
            |e: crate::error::CoreError| ApprovalMessage::Decided { outcome: Err(DecideError::Storage(e.to_string())) };
        if !self.is_local(id) {
            match self.inner.persist.owner_of(id) {
                // Handed to us but not loaded yet: load it first.
                Ok(Some(owner)) if owner.as_deref() == self.me().as_deref() => {
                    let me = self.me();
                    if let Err(e) = self.adopt(vec![(id.to_string(), me)]) {
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
}
