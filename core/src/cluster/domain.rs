//! What the replica bus carries and who receives it: a [`Topic`] names a
//! message type on the wire, a [`Domain`] handles one topic on this replica.
//! The bus ([`super::Cluster`]) knows only these traits, never a domain.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Free text in a message is cut to this ([`cut`]), to stay under the
/// NOTIFY payload limit.
pub const MAX_TEXT: usize = 1000;

/// A kind of message the replicas exchange: its type names its topic.
pub trait Topic: Serialize + DeserializeOwned + Send + 'static {
    /// Names the messages on the wire; one domain per topic.
    const TOPIC: &'static str;

    /// Cuts free text (with [`cut`]) so the message fits a NOTIFY payload;
    /// called before every send. Nothing to cut by default.
    fn fit(&mut self) {}
}

/// A message from another replica, as a domain receives it.
#[derive(Debug)]
pub struct Incoming<M> {
    /// The sending replica.
    pub from: String,
    /// Set when the sender waits for an answer ([`super::Cluster::answer`]).
    pub ask: Option<Ask>,
    /// What it says.
    pub message: M,
}

/// A request waiting for its answer: whom to answer, and the correlation id
/// that routes the answer to the waiting [`super::Cluster::request`].
#[derive(Debug)]
pub struct Ask {
    pub(super) to: String,
    pub(super) id: String,
}

/// What handles one topic on this replica ([`super::Cluster::register`]).
/// A domain that answers or sends keeps its own handle on the cluster.
///
/// Its methods run on the listener thread, in the order messages arrive:
/// they must not block for long (hand slow work to a task).
pub trait Domain: Send + Sync + 'static {
    /// The messages it handles.
    type Message: Topic;

    /// A message for this topic from another replica.
    fn receive(&self, incoming: Incoming<Self::Message>);

    /// Replica `replica` started or reconnected: tell it what it should know
    /// of this one. Nothing by default.
    fn greeted(&self, _replica: &str) {}

    /// This replica's listener (re)connected: what passed meanwhile is lost,
    /// so whatever depends on it re-reads. Nothing by default.
    fn reconnected(&self) {}

    /// Every few heartbeats: the replicas alive now (this one included), so
    /// what the others said can be forgotten once they are gone. Nothing by
    /// default.
    fn alive(&self, _replicas: &[String]) {}
}

/// A domain with its message type erased, as the bus's registry keeps it.
pub(super) trait Handler: Send + Sync {
    /// Decodes and hands on a body; `false` if it is not this topic's message.
    fn receive(&self, from: String, ask: Option<Ask>, body: serde_json::Value) -> bool;
    fn greeted(&self, replica: &str);
    fn reconnected(&self);
    fn alive(&self, replicas: &[String]);
}

impl<D: Domain> Handler for D {
    fn receive(&self, from: String, ask: Option<Ask>, body: serde_json::Value) -> bool {
        match serde_json::from_value::<D::Message>(body) {
            Ok(message) => {
                Domain::receive(self, Incoming { from, ask, message });
                true
            }
            Err(_) => false,
        }
    }

    fn greeted(&self, replica: &str) {
        Domain::greeted(self, replica);
    }

    fn reconnected(&self) {
        Domain::reconnected(self);
    }

    fn alive(&self, replicas: &[String]) {
        Domain::alive(self, replicas);
    }
}

/// Cuts free text to [`MAX_TEXT`] bytes (on a character boundary), so a
/// message fits a NOTIFY payload; for [`Topic::fit`].
pub fn cut(text: &mut Option<String>) {
    if let Some(t) = text
        && t.len() > MAX_TEXT
    {
        let mut end = MAX_TEXT;
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        t.truncate(end);
    }
}
