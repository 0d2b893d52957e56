//! The bus's tests: delivery to registered domains without PostgreSQL, and
//! signing on PostgreSQL (when `GATEHOUSE_TEST_DATABASE_URL` is set).

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::*;
use crate::clock::ManualClock;

/// A topic of the tests' own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Note {
    text: String,
}

impl Topic for Note {
    const TOPIC: &'static str = "note";
}

/// Records what it is told.
#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<Vec<(String, Note, bool)>>>,
    greeted: Arc<Mutex<Vec<String>>>,
}

impl Domain for Recorder {
    type Message = Note;

    fn receive(&self, incoming: Incoming<Note>) {
        self.seen.lock().unwrap().push((incoming.from, incoming.message, incoming.ask.is_some()));
    }

    fn greeted(&self, replica: &str) {
        self.greeted.lock().unwrap().push(replica.to_string());
    }
}

/// A cluster with no threads, no queue and no PostgreSQL: only delivery.
fn detached(replica: &str) -> Cluster {
    let db = Db::open_in_memory().unwrap();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    Cluster::with(replica.into(), None, &db, clock, "gatehouse_test".into(), b"key".to_vec(), false)
}

fn envelope(from: &str, to: Option<&str>, topic: &str, body: serde_json::Value) -> Envelope {
    Envelope { from: from.into(), to: to.map(Into::into), topic: topic.into(), ask: None, re: None, body }
}

#[test]
fn a_registered_domain_receives_its_messages_and_an_unknown_topic_is_dropped() {
    let cluster = detached("replica_a");
    let recorder = Recorder::default();
    cluster.register(recorder.clone());
    let note = serde_json::json!({"text": "hi"});

    assert_eq!(cluster.deliver_local(envelope("replica_b", None, "note", note.clone())), Delivery::Handled);
    let mut asked = envelope("replica_b", Some("replica_a"), "note", note.clone());
    asked.ask = Some("r1".into());
    assert_eq!(cluster.deliver_local(asked), Delivery::Handled);
    assert_eq!(
        *recorder.seen.lock().unwrap(),
        vec![
            ("replica_b".into(), Note { text: "hi".into() }, false),
            ("replica_b".into(), Note { text: "hi".into() }, true)
        ]
    );

    // Nobody handles it here: dropped (with a log line), nothing received.
    assert_eq!(cluster.deliver_local(envelope("replica_b", None, "elsewhere", note.clone())), Delivery::Unknown);
    // Not a note: dropped.
    let wrong = serde_json::json!({"words": 1});
    assert_eq!(cluster.deliver_local(envelope("replica_b", None, "note", wrong)), Delivery::Unreadable);
    // Our own echo, and one for another replica: ignored.
    assert_eq!(cluster.deliver_local(envelope("replica_a", None, "note", note.clone())), Delivery::NotOurs);
    assert_eq!(
        cluster.deliver_local(envelope("replica_b", Some("replica_c"), "note", note.clone())),
        Delivery::NotOurs
    );
    assert_eq!(recorder.seen.lock().unwrap().len(), 2);

    // A hello reaches every domain.
    let hello = envelope("replica_b", None, HELLO, serde_json::Value::Null);
    assert_eq!(cluster.deliver_local(hello), Delivery::Hello);
    assert_eq!(*recorder.greeted.lock().unwrap(), vec!["replica_b".to_string()]);

    // Unregistered, the topic is unknown again.
    cluster.unregister::<Note>();
    assert_eq!(cluster.deliver_local(envelope("replica_b", None, "note", note)), Delivery::Unknown);
    assert_eq!(recorder.seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn an_answer_reaches_the_request_that_waits_for_it_and_not_the_domain() {
    let cluster = detached("replica_a");
    let recorder = Recorder::default();
    cluster.register(recorder.clone());
    let asking = {
        let cluster = cluster.clone();
        tokio::spawn(async move { cluster.request("replica_b", Note { text: "ping".into() }).await })
    };
    // The request is queued nowhere (no outbox); find its correlation id.
    let id = loop {
        if let Some(id) = cluster.waiting().keys().next().cloned() {
            break id;
        }
        tokio::task::yield_now().await;
    };
    let mut answer = envelope("replica_b", Some("replica_a"), "note", serde_json::json!({"text": "pong"}));
    answer.re = Some(id);
    assert_eq!(cluster.deliver_local(answer), Delivery::Answer);
    assert_eq!(asking.await.unwrap(), Some(Note { text: "pong".into() }));
    assert!(recorder.seen.lock().unwrap().is_empty(), "an answer is not a message for the domain");
    assert!(cluster.waiting().is_empty(), "the waiter is forgotten");
}

#[test]
fn free_text_is_cut_on_a_character_boundary() {
    let mut long = Some("é".repeat(MAX_TEXT));
    cut(&mut long);
    let long = long.unwrap();
    assert!(long.len() <= MAX_TEXT && long.chars().all(|c| c == 'é'));
    let mut short = Some("short".to_string());
    cut(&mut short);
    assert_eq!(short.as_deref(), Some("short"));
}

#[test]
fn only_messages_signed_with_the_clusters_key_are_accepted() {
    let db = Db::for_tests().unwrap();
    if db.postgres_url().is_none() {
        return; // A cluster needs PostgreSQL (GATEHOUSE_TEST_DATABASE_URL).
    }
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let cluster = Cluster::announcer(&db, clock).unwrap();
    let message =
        envelope("replica_x", None, "approvals", serde_json::json!({"kind": "decide", "actor": "user:admin"}));
    let json = serde_json::to_string(&message).unwrap();
    let signed = format!("{}.{json}", cluster.sign(&json));
    assert!(cluster.open(&signed).is_some(), "a signed message is read");
    // What any role that may connect could send: unsigned, or signed with a guess.
    assert!(cluster.open(&json).is_none());
    assert!(cluster.open(&format!("{}.{json}", "00".repeat(32))).is_none());
    let tampered = signed.replace("user:admin", "user:mallory");
    assert!(cluster.open(&tampered).is_none(), "a changed message is refused");
    // The channel is this schema's, not the database's.
    let schema: String = db.conn().unwrap().query_one("SELECT current_schema()", &[], |r| r.get(0)).unwrap();
    assert!(schema.starts_with("t_"));
    assert!(cluster.inner.channel.starts_with(CHANNEL_PREFIX) && cluster.inner.channel != "gatehouse");
    drop(cluster);
    // Close the pool off any runtime (a PostgreSQL client says goodbye on its own).
    drop(db);
}
