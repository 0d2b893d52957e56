//! Replicas sharing one PostgreSQL: who they are, that they are alive, and
//! what they tell each other over `LISTEN`/`NOTIFY` (no other
//! infrastructure). On SQLite there is one process and no cluster.
//!
//! Each replica has an id, a heartbeat row in `replicas`, one thread that
//! sends (NOTIFYs and the heartbeat, from a queue, so nobody sends under a
//! lock or on a runtime thread) and one that listens on its own connection.
//! What arrives from the others goes to [`Cluster::subscribe`]rs; live
//! events are re-published on this replica's hub, so its pages see every
//! replica's changes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gatehouse_model::{Decision, LiveEvent, McpSessionInfo, UpstreamInfo};
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, oneshot};

use crate::approvals::Snapshot;
use crate::args;
use crate::clock::Clock;
use crate::db::Db;
use crate::error::Result;
use crate::live::LiveHub;

/// The NOTIFY channel's prefix; the rest names the schema, so deployments
/// sharing one database in separate schemas do not hear each other.
const CHANNEL_PREFIX: &str = "gatehouse_";

/// Messages are signed with this key (HMAC-SHA256), shared through the
/// database: any role that may connect can LISTEN and NOTIFY, but only one
/// that can read `server_keys` can make a message the replicas accept.
const KEY_NAME: &str = "cluster";

type Mac = hmac::Hmac<sha2::Sha256>;

/// How often a replica says it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// A replica not heard from for this long (three missed beats) is gone:
/// its executions may be adopted and its sessions forgotten.
pub const STALE_AFTER: Duration = Duration::from_secs(6);

/// How long a request to another replica waits for its answer.
pub const REPLY_WAIT: Duration = Duration::from_secs(3);

/// PostgreSQL's limit on a NOTIFY payload.
const MAX_PAYLOAD: usize = 8000;

/// Free text in a message is cut to this, to stay under [`MAX_PAYLOAD`].
const MAX_TEXT: usize = 1000;

/// What one replica tells the others.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Body {
    /// Something changed that pages re-read.
    Live {
        /// Which change.
        event: LiveEvent,
    },
    /// An MCP session opened on the sender.
    SessionOpened {
        /// The session.
        info: McpSessionInfo,
    },
    /// An MCP session closed on the sender.
    SessionClosed {
        /// Its id.
        session_id: String,
    },
    /// The sender's upstream health, whole.
    Upstreams {
        /// Each upstream.
        upstreams: Vec<UpstreamInfo>,
    },
    /// A replica started (or its listener reconnected): everyone re-sends
    /// their sessions and upstreams.
    Hello,
    /// An execution the sender owns moved (mirrors on other replicas follow).
    Exec {
        /// The execution.
        id: String,
        /// Its state now.
        snapshot: Snapshot,
    },
    /// Asks the owner of an execution to record a decision.
    Decide {
        /// Correlates the answer.
        reply: String,
        /// The execution.
        id: String,
        /// Accept or decline.
        decision: Decision,
        /// Who decides (`user:ada`).
        actor: String,
        /// Their words, if any.
        detail: Option<String>,
    },
    /// The owner's answer to [`Body::Decide`].
    Decided {
        /// The request's correlation id.
        reply: String,
        /// The state after, or why not (`not_found`, a conflicting state).
        outcome: std::result::Result<Snapshot, String>,
    },
    /// Asks the owner to hand an execution over (an agent resumes it here).
    Release {
        /// Correlates the answer.
        reply: String,
        /// The execution.
        id: String,
    },
    /// The owner's answer to [`Body::Release`]: whether the row is now the asker's.
    Released {
        /// The request's correlation id.
        reply: String,
        /// Handed over.
        ok: bool,
    },
}

impl Body {
    /// The correlation id of an answer.
    fn reply_id(&self) -> Option<&str> {
        match self {
            Body::Decided { reply, .. } | Body::Released { reply, .. } => Some(reply),
            _ => None,
        }
    }
}

/// A message on the wire: from whom, to whom (everyone when `None`), what.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Message {
    /// The sending replica.
    pub from: String,
    /// The one replica it is for, if not all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// What it says.
    #[serde(flatten)]
    pub body: Body,
}

/// This replica's place in the cluster; cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    replica: String,
    outbox: Mutex<Option<mpsc::Sender<Message>>>,
    incoming: broadcast::Sender<Arc<Message>>,
    waiting: Mutex<HashMap<String, oneshot::Sender<Body>>>,
    stop: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    db: Db,
    clock: Arc<dyn Clock>,
    /// This schema's channel.
    channel: String,
    /// The signing key.
    key: Vec<u8>,
    /// Sends at once on the caller's thread, with no queue and no listener
    /// (the command line, which has no runtime and lives for one command).
    direct: bool,
}

impl Cluster {
    /// Joins the cluster on `db` (PostgreSQL only: `None` on SQLite): writes
    /// the heartbeat and starts the sending and listening threads. `live`
    /// gets the other replicas' events; its own events go to them.
    pub fn join(db: &Db, clock: Arc<dyn Clock>, live: &LiveHub) -> Result<Option<Self>> {
        let Some(url) = db.postgres_url() else { return Ok(None) };
        let config = crate::db::postgres_config(url)?;
        let replica = crate::secret::new_id("replica");
        let (channel, key) = channel_and_key(db)?;
        let (outbox, queue) = mpsc::channel::<Message>();
        let (incoming, _) = broadcast::channel(1024);
        let cluster = Self {
            inner: Arc::new(Inner {
                replica,
                outbox: Mutex::new(Some(outbox)),
                incoming,
                waiting: Mutex::default(),
                stop: AtomicBool::new(false),
                threads: Mutex::default(),
                db: db.clone(),
                clock,
                channel,
                key,
                direct: false,
            }),
        };
        cluster.beat()?;
        let sender = cluster.clone();
        let listener = cluster.clone();
        let hub = live.clone();
        let pruned = live.clone();
        let threads = vec![
            std::thread::Builder::new()
                .name("gatehouse-cluster-send".into())
                .spawn(move || sender.send_loop(&queue, &pruned))
                .map_err(|e| crate::error::CoreError::Join(e.to_string()))?,
            std::thread::Builder::new()
                .name("gatehouse-cluster-listen".into())
                .spawn(move || listener.listen_loop(&config, &hub))
                .map_err(|e| crate::error::CoreError::Join(e.to_string()))?,
        ];
        *cluster.inner.threads.lock().unwrap_or_else(|p| p.into_inner()) = threads;
        live.relay_to(cluster.clone());
        tracing::info!(replica = %cluster.replica(), "joined the cluster of replicas on PostgreSQL");
        Ok(Some(cluster))
    }

    /// For the command line on PostgreSQL (`None` on SQLite): what it
    /// changes (a revoked credential, a new user) is told to the running
    /// replicas, whose pages and sweepers react at once. Not a replica: no
    /// heartbeat, no listener; each message is sent as it is made.
    pub fn announcer(db: &Db, clock: Arc<dyn Clock>, live: &LiveHub) -> Option<Self> {
        db.postgres_url()?;
        let (channel, key) = match channel_and_key(db) {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "cannot tell the running replicas; they see the change on their next read");
                return None;
            }
        };
        let (incoming, _) = broadcast::channel(1);
        let cluster = Self {
            inner: Arc::new(Inner {
                replica: "cli".into(),
                outbox: Mutex::new(None),
                incoming,
                waiting: Mutex::default(),
                stop: AtomicBool::new(true),
                threads: Mutex::default(),
                db: db.clone(),
                clock,
                channel,
                key,
                direct: true,
            }),
        };
        live.relay_to(cluster.clone());
        Some(cluster)
    }

    /// This replica's id.
    pub fn replica(&self) -> &str {
        &self.inner.replica
    }

    /// Queues a message to every other replica (`to: None`) or one.
    pub fn send(&self, to: Option<&str>, mut body: Body) {
        trim(&mut body);
        let message = Message { from: self.inner.replica.clone(), to: to.map(Into::into), body };
        if self.inner.direct {
            return self.notify(&message);
        }
        let outbox = self.inner.outbox.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(outbox) = outbox.as_ref() {
            let _ = outbox.send(message);
        }
    }

    /// Asks replica `to` something and waits (up to [`REPLY_WAIT`]) for the
    /// answer; `None` if none came (the replica is gone or busy).
    pub async fn request(&self, to: &str, make: impl FnOnce(String) -> Body) -> Option<Body> {
        /// Forgets the waiter however the request ends, dropped midway included.
        struct Waiting<'a>(&'a Cluster, String);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.waiting().remove(&self.1);
            }
        }
        let reply = uuid::Uuid::new_v4().simple().to_string();
        let (tx, rx) = oneshot::channel();
        self.waiting().insert(reply.clone(), tx);
        let _forget = Waiting(self, reply.clone());
        self.send(Some(to), make(reply));
        tokio::time::timeout(REPLY_WAIT, rx).await.ok().and_then(|r| r.ok())
    }

    /// Messages from the other replicas (answers to [`Cluster::request`] excepted).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Message>> {
        self.inner.incoming.subscribe()
    }

    /// Whether replica `id` has been heard from within [`STALE_AFTER`].
    /// Blocks on the database: call from a blocking thread.
    pub fn is_alive(&self, id: &str) -> Result<bool> {
        if id == self.inner.replica {
            return Ok(true);
        }
        let cutoff = self.inner.clock.now_ms() - STALE_AFTER.as_millis() as i64;
        self.inner.db.conn()?.query_one(
            "SELECT EXISTS(SELECT 1 FROM replicas WHERE id = ?1 AND seen_at > ?2)",
            args![id, cutoff],
            |r| r.get(0),
        )
    }

    /// The replicas heard from within [`STALE_AFTER`], this one included.
    pub fn alive(&self) -> Result<Vec<String>> {
        let cutoff = self.inner.clock.now_ms() - STALE_AFTER.as_millis() as i64;
        self.inner
            .db
            .conn()?
            .query("SELECT id FROM replicas WHERE seen_at > ?1 ORDER BY id", args![cutoff], |r| r.get(0))
    }

    /// Leaves the cluster: stops both threads (sending what is queued first)
    /// and removes the heartbeat row, so others need not wait for it to go
    /// stale. Blocks up to a second or two.
    pub fn leave(&self) {
        self.inner.outbox.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.inner.stop.store(true, Ordering::SeqCst);
        let threads = std::mem::take(&mut *self.inner.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for thread in threads {
            let _ = thread.join();
        }
        let gone = self
            .inner
            .db
            .conn()
            .and_then(|mut c| c.execute("DELETE FROM replicas WHERE id = ?1", args![self.inner.replica]));
        if let Err(e) = gone {
            tracing::warn!(error = %e, "could not remove this replica's heartbeat");
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<Body>>> {
        self.inner.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn beat(&self) -> Result<()> {
        let now = self.inner.clock.now_ms();
        self.inner.db.conn()?.execute(
            "INSERT INTO replicas (id, started_at, seen_at) VALUES (?1, ?2, ?2)
             ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at",
            args![self.inner.replica, now],
        )?;
        Ok(())
    }

    /// Sends queued messages and beats the heart, until the outbox closes.
    /// Every few beats it also forgets what stale replicas said.
    fn send_loop(&self, queue: &mpsc::Receiver<Message>, live: &LiveHub) {
        let mut next_beat = Instant::now() + HEARTBEAT;
        let mut beats = 0u32;
        loop {
            let wait = next_beat.saturating_duration_since(Instant::now());
            match queue.recv_timeout(wait) {
                Ok(message) => self.notify(&message),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
            if Instant::now() >= next_beat {
                if let Err(e) = self.beat() {
                    tracing::warn!(error = %e, "heartbeat failed");
                }
                beats = beats.wrapping_add(1);
                if beats.is_multiple_of(3)
                    && let Ok(alive) = self.alive()
                {
                    live.forget_replicas_except(&alive);
                }
                next_beat = Instant::now() + HEARTBEAT;
            }
        }
    }

    fn notify(&self, message: &Message) {
        let json = match serde_json::to_string(message) {
            Ok(json) => json,
            Err(e) => return tracing::error!(error = %e, "cannot encode a cluster message"),
        };
        let payload = format!("{}.{json}", self.sign(&json));
        if payload.len() >= MAX_PAYLOAD {
            // PostgreSQL refuses it; the others re-read at their next sweep or page load.
            return tracing::warn!(bytes = payload.len(), "a cluster message is too long to send; dropped");
        }
        let sent = self.inner.db.conn().and_then(|mut c| {
            c.query_one("SELECT CAST(pg_notify(?1, ?2) AS TEXT)", args![self.inner.channel, payload], |r| {
                r.get::<crate::db::Value>(0)
            })
        });
        if let Err(e) = sent {
            tracing::warn!(error = %e, "cannot tell the other replicas");
        }
    }

    fn mac(&self) -> Mac {
        <Mac as hmac::Mac>::new_from_slice(&self.inner.key).expect("HMAC takes a key of any length")
    }

    fn sign(&self, json: &str) -> String {
        let mut mac = self.mac();
        hmac::Mac::update(&mut mac, json.as_bytes());
        hex::encode(hmac::Mac::finalize(mac).into_bytes())
    }

    /// The message in a payload, if its signature is this cluster's.
    fn open(&self, payload: &str) -> Option<Message> {
        let (signature, json) = payload.split_once('.')?;
        let mut mac = self.mac();
        hmac::Mac::update(&mut mac, json.as_bytes());
        hmac::Mac::verify_slice(mac, &hex::decode(signature).ok()?).ok()?;
        serde_json::from_str(json).ok()
    }

    /// Listens on a connection of its own, reconnecting after a failure; on
    /// every (re)connect says hello and tells local pages to re-read, since
    /// what passed while disconnected is lost.
    fn listen_loop(&self, config: &postgres::Config, live: &LiveHub) {
        while !self.inner.stop.load(Ordering::SeqCst) {
            match config.connect(postgres::NoTls) {
                Ok(mut client) => {
                    if let Err(e) = client.batch_execute(&format!("LISTEN {}", self.inner.channel)) {
                        tracing::warn!(error = %e, "LISTEN failed");
                    } else {
                        self.send(None, Body::Hello);
                        self.deliver_local(live, Message { from: String::new(), to: None, body: Body::Hello });
                        self.drain(&mut client, live);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot connect the cluster listener; retrying"),
            }
            // Wait a second before reconnecting, watching the stop flag.
            for _ in 0..10 {
                if self.inner.stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Hands on notifications until the connection fails or the cluster stops.
    fn drain(&self, client: &mut postgres::Client, live: &LiveHub) {
        while !self.inner.stop.load(Ordering::SeqCst) {
            {
                let mut notifications = client.notifications();
                let mut batch = notifications.timeout_iter(Duration::from_millis(250));
                loop {
                    use postgres::fallible_iterator::FallibleIterator;
                    match batch.next() {
                        Ok(Some(n)) => match self.open(n.payload()) {
                            Some(message) => self.deliver_local(live, message),
                            None => tracing::warn!("dropped a cluster message that is unsigned, forged or unreadable"),
                        },
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!(error = %e, "the cluster listener lost its connection; reconnecting");
                            return;
                        }
                    }
                }
            }
            if client.is_closed() {
                return;
            }
        }
    }

    fn deliver_local(&self, live: &LiveHub, message: Message) {
        if message.from == self.inner.replica || message.to.as_deref().is_some_and(|to| to != self.inner.replica) {
            return;
        }
        if let Some(reply) = message.body.reply_id() {
            if let Some(waiter) = self.waiting().remove(reply) {
                let _ = waiter.send(message.body);
            }
            return;
        }
        match &message.body {
            Body::Live { event } => live.publish_local(*event),
            Body::SessionOpened { info } => live.remote_session_opened(&message.from, info.clone()),
            Body::SessionClosed { session_id } => live.remote_session_closed(&message.from, session_id),
            Body::Upstreams { upstreams } => live.remote_upstreams(&message.from, upstreams.clone()),
            Body::Hello => {
                // Whoever just (re)connected wants our picture; and whatever
                // we missed meanwhile, local pages re-read.
                if !message.from.is_empty() {
                    for info in live.sessions_here() {
                        self.send(Some(&message.from), Body::SessionOpened { info });
                    }
                    self.send(Some(&message.from), Body::Upstreams { upstreams: live.upstreams_here() });
                } else {
                    for event in ALL_EVENTS {
                        live.publish_local(event);
                    }
                }
            }
            _ => {}
        }
        let _ = self.inner.incoming.send(Arc::new(message));
    }
}

/// This schema's channel name and the cluster's signing key. Blocks on the database.
fn channel_and_key(db: &Db) -> Result<(String, Vec<u8>)> {
    let schema: String = db.conn()?.query_one("SELECT current_schema()", args![], |r| r.get(0))?;
    let digest = <sha2::Sha256 as sha2::Digest>::digest(schema.as_bytes());
    let channel = format!("{CHANNEL_PREFIX}{}", &hex::encode(digest)[..16]);
    Ok((channel, crate::secret::shared_key(db, KEY_NAME, 32)?))
}

/// Every live event (a reconnected listener re-announces them all).
const ALL_EVENTS: [LiveEvent; 6] = [
    LiveEvent::SessionsChanged,
    LiveEvent::CredentialsChanged,
    LiveEvent::ApprovalsChanged,
    LiveEvent::UpstreamsChanged,
    LiveEvent::UsersChanged,
    LiveEvent::GrantsChanged,
];

/// Cuts free text so a message fits a NOTIFY payload.
fn trim(body: &mut Body) {
    let cut = |text: &mut Option<String>| {
        if let Some(t) = text
            && t.len() > MAX_TEXT
        {
            let mut end = MAX_TEXT;
            while !t.is_char_boundary(end) {
                end -= 1;
            }
            t.truncate(end);
        }
    };
    match body {
        Body::Exec { snapshot, .. } | Body::Decided { outcome: Ok(snapshot), .. } => cut(&mut snapshot.detail),
        Body::Decide { detail, .. } => cut(detail),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn only_messages_signed_with_the_clusters_key_are_accepted() {
        let db = Db::for_tests().unwrap();
        if db.postgres_url().is_none() {
            return; // A cluster needs PostgreSQL (GATEHOUSE_TEST_DATABASE_URL).
        }
        let live = LiveHub::new();
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let cluster = Cluster::announcer(&db, clock, &live).unwrap();
        let message = Message {
            from: "replica_x".into(),
            to: None,
            body: Body::Decide {
                reply: "r".into(),
                id: "exec_1".into(),
                decision: Decision::Accept,
                actor: "user:admin".into(),
                detail: None,
            },
        };
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
}
