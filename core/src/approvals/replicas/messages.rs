//! What the replicas' approval stores tell each other on the bus
//! ([`ApprovalMessage`], the `approvals` topic). Refusals travel as the
//! store's own [`DecideError`], so the asking replica answers as a local
//! decision would. The owner's side is in [`super::follow`].

use gatehouse_model::{Decision, ExecutionId};
use serde::{Deserialize, Serialize};

use super::super::answers::{DecideError, Snapshot};
use crate::cluster::{Topic, cut};

/// What one replica's approval store tells another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ApprovalMessage {
    /// An execution the sender owns moved (mirrors on other replicas follow).
    Exec {
        /// The execution.
        id: ExecutionId,
        /// Its state now.
        snapshot: Snapshot,
    },
    /// Asks the owner of an execution to record a decision (a request:
    /// answered with [`ApprovalMessage::Decided`] or [`ApprovalMessage::Moved`]).
    Decide {
        /// The execution.
        id: ExecutionId,
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
        id: ExecutionId,
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
