//! Replicas sharing one PostgreSQL: who they are, that they are alive, and
//! a signed message bus between them over `LISTEN`/`NOTIFY` (no other
//! infrastructure). On SQLite there is one process and no cluster.
//!
//! Each replica has an id, a heartbeat row in `replicas`, one thread that
//! sends (NOTIFYs and the heartbeat, from a queue, so nobody sends under a
//! lock or on a runtime thread) and one that listens on its own connection.
//!
//! The bus knows no domain. A message is an envelope (sender, recipient,
//! topic, a serde body, request/answer correlation), signed with a key
//! shared through the database. Domains (the live hub, the approval store)
//! [`Cluster::register`] a [`Domain`] for their [`Topic`]; what arrives for a
//! topic nobody here handles is dropped with a log line.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

mod domain;
use domain::Handler;
pub use domain::{Ask, Domain, Incoming, MAX_TEXT, Topic, cut};

use crate::args;
use crate::clock::Clock;
use crate::db::Db;
use crate::error::Result;

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

/// The bus's own topic: a replica started (or its listener reconnected), and
/// every domain re-sends what the newcomer should know ([`Domain::greeted`]).
const HELLO: &str = "hello";

/// A message on the wire: from whom, to whom (everyone when `None`), on
/// which topic, what; and, for a request or its answer, the correlation id.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Envelope {
    /// The sending replica.
    from: String,
    /// The one replica it is for, if not all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    to: Option<String>,
    /// Which domain's message the body is.
    topic: String,
    /// A request: the answer carries this back in `re`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ask: Option<String>,
    /// An answer: to the request that carried this `ask`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    re: Option<String>,
    /// The domain's message.
    #[serde(default)]
    body: serde_json::Value,
}

/// What became of an arriving message (for the tests; the bus logs the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// Our own, or for another replica: ignored.
    NotOurs,
    /// An answer, handed to its request (or to nobody: it gave up waiting).
    Answer,
    /// A hello, passed to every domain.
    Hello,
    /// Handed to its topic's domain.
    Handled,
    /// No domain here handles its topic: dropped.
    Unknown,
    /// Its body is not its topic's message: dropped.
    Unreadable,
}

/// This replica's place in the cluster; cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    replica: String,
    outbox: Mutex<Option<mpsc::Sender<Envelope>>>,
    /// The domains, by topic.
    domains: RwLock<HashMap<&'static str, Arc<dyn Handler>>>,
    /// Requests waiting for their answers, by correlation id.
    waiting: Mutex<HashMap<String, oneshot::Sender<serde_json::Value>>>,
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
    /// the heartbeat and starts the sending and listening threads. `register`
    /// runs first, so the domains it registers hear every answer to this
    /// replica's hello.
    pub fn join(db: &Db, clock: Arc<dyn Clock>, register: impl FnOnce(&Cluster)) -> Result<Option<Self>> {
        let Some(url) = db.postgres_url() else { return Ok(None) };
        let config = crate::db::postgres_config(url)?;
        let replica = crate::secret::new_id("replica");
        let (channel, key) = channel_and_key(db)?;
        let (outbox, queue) = mpsc::channel::<Envelope>();
        let cluster = Self::with(replica, Some(outbox), db, clock, channel, key, false);
        cluster.beat()?;
        register(&cluster);
        let sender = cluster.clone();
        let listener = cluster.clone();
        let threads = vec![
            std::thread::Builder::new()
                .name("gatehouse-cluster-send".into())
                .spawn(move || sender.send_loop(&queue))
                .map_err(|e| crate::error::CoreError::Join(e.to_string()))?,
            std::thread::Builder::new()
                .name("gatehouse-cluster-listen".into())
                .spawn(move || listener.listen_loop(&config))
                .map_err(|e| crate::error::CoreError::Join(e.to_string()))?,
        ];
        *cluster.inner.threads.lock().unwrap_or_else(|p| p.into_inner()) = threads;
        tracing::info!(replica = %cluster.replica(), "joined the cluster of replicas on PostgreSQL");
        Ok(Some(cluster))
    }

    /// For the command line on PostgreSQL (`None` on SQLite): what it
    /// changes (a revoked credential, a new user) is told to the running
    /// replicas, whose pages and sweepers react at once. Not a replica: no
    /// heartbeat, no listener (so no domains); each message is sent as it
    /// is made.
    pub fn announcer(db: &Db, clock: Arc<dyn Clock>) -> Option<Self> {
        db.postgres_url()?;
        let (channel, key) = match channel_and_key(db) {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "cannot tell the running replicas; they see the change on their next read");
                return None;
            }
        };
        let cluster = Self::with("cli".into(), None, db, clock, channel, key, true);
        cluster.inner.stop.store(true, Ordering::SeqCst);
        Some(cluster)
    }

    fn with(
        replica: String,
        outbox: Option<mpsc::Sender<Envelope>>,
        db: &Db,
        clock: Arc<dyn Clock>,
        channel: String,
        key: Vec<u8>,
        direct: bool,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                replica,
                outbox: Mutex::new(outbox),
                domains: RwLock::default(),
                waiting: Mutex::default(),
                stop: AtomicBool::new(false),
                threads: Mutex::default(),
                db: db.clone(),
                clock,
                channel,
                key,
                direct,
            }),
        }
    }

    /// This replica's id.
    pub fn replica(&self) -> &str {
        &self.inner.replica
    }

    /// From now on, messages on `D::Message`'s topic go to `domain` (in
    /// place of any domain registered for it before).
    pub fn register<D: Domain>(&self, domain: D) {
        let topic = <D::Message as Topic>::TOPIC;
        debug_assert_ne!(topic, HELLO, "the bus's own topic");
        let before = self.domains().insert(topic, Arc::new(domain));
        if before.is_some() {
            tracing::warn!(topic, "a cluster topic was registered twice; the later domain handles it");
        }
    }

    /// Stops handing `M`'s topic to its domain (its messages are dropped).
    pub fn unregister<M: Topic>(&self) {
        self.domains().remove(M::TOPIC);
    }

    /// Queues a message to every other replica (`to: None`) or one.
    pub fn send<M: Topic>(&self, to: Option<&str>, message: M) {
        self.post(to, message, None, None);
    }

    /// Asks replica `to` something and waits (up to [`REPLY_WAIT`]) for the
    /// answer; `None` if none came (the replica is gone or busy) or it is
    /// not an `M`.
    pub async fn request<M: Topic>(&self, to: &str, message: M) -> Option<M> {
        /// Forgets the waiter however the request ends, dropped midway included.
        struct Waiting<'a>(&'a Cluster, String);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.waiting().remove(&self.1);
            }
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let (tx, rx) = oneshot::channel();
        self.waiting().insert(id.clone(), tx);
        let _forget = Waiting(self, id.clone());
        self.post(Some(to), message, Some(id), None);
        let body = tokio::time::timeout(REPLY_WAIT, rx).await.ok()?.ok()?;
        match serde_json::from_value(body) {
            Ok(answer) => Some(answer),
            Err(e) => {
                tracing::warn!(topic = M::TOPIC, error = %e, "an answer from another replica is unreadable");
                None
            }
        }
    }

    /// Answers a request ([`Incoming::ask`]) with `message`.
    pub fn answer<M: Topic>(&self, ask: Ask, message: M) {
        self.post(Some(&ask.to), message, None, Some(ask.id));
    }

    fn post<M: Topic>(&self, to: Option<&str>, mut message: M, ask: Option<String>, re: Option<String>) {
        message.fit();
        let body = match serde_json::to_value(&message) {
            Ok(body) => body,
            Err(e) => return tracing::error!(topic = M::TOPIC, error = %e, "cannot encode a cluster message"),
        };
        self.enqueue(Envelope {
            from: self.inner.replica.clone(),
            to: to.map(Into::into),
            topic: M::TOPIC.into(),
            ask,
            re,
            body,
        });
    }

    fn enqueue(&self, envelope: Envelope) {
        if self.inner.direct {
            return self.notify(&envelope);
        }
        let outbox = self.inner.outbox.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(outbox) = outbox.as_ref() {
            let _ = outbox.send(envelope);
        }
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

    /// Leaves the cluster: stops both threads (sending what is queued first),
    /// forgets the domains (which hold this cluster in turn) and removes the
    /// heartbeat row, so others need not wait for it to go stale. Blocks up
    /// to a second or two.
    pub fn leave(&self) {
        self.inner.outbox.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.inner.stop.store(true, Ordering::SeqCst);
        let threads = std::mem::take(&mut *self.inner.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for thread in threads {
            let _ = thread.join();
        }
        self.domains().clear();
        let gone = self
            .inner
            .db
            .conn()
            .and_then(|mut c| c.execute("DELETE FROM replicas WHERE id = ?1", args![self.inner.replica]));
        if let Err(e) = gone {
            tracing::warn!(error = %e, "could not remove this replica's heartbeat");
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<serde_json::Value>>> {
        self.inner.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn domains(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<&'static str, Arc<dyn Handler>>> {
        self.inner.domains.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The domains registered now: called outside the registry's lock, so a
    /// domain may send, register or unregister.
    fn handlers(&self) -> Vec<Arc<dyn Handler>> {
        self.inner.domains.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    fn handler(&self, topic: &str) -> Option<Arc<dyn Handler>> {
        self.inner.domains.read().unwrap_or_else(|p| p.into_inner()).get(topic).cloned()
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
    /// Every few beats it also tells the domains who is alive, so they
    /// forget what stale replicas said.
    fn send_loop(&self, queue: &mpsc::Receiver<Envelope>) {
        let mut next_beat = Instant::now() + HEARTBEAT;
        let mut beats = 0u32;
        loop {
            let wait = next_beat.saturating_duration_since(Instant::now());
            match queue.recv_timeout(wait) {
                Ok(envelope) => self.notify(&envelope),
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
                    for domain in self.handlers() {
                        domain.alive(&alive);
                    }
                }
                next_beat = Instant::now() + HEARTBEAT;
            }
        }
    }

    fn notify(&self, envelope: &Envelope) {
        // No replica hears of anything this one has not written yet (a
        // transition's audit entry and row are queued to the writer).
        self.inner.db.flush_writes();
        let json = match serde_json::to_string(envelope) {
            Ok(json) => json,
            Err(e) => return tracing::error!(error = %e, "cannot encode a cluster message"),
        };
        let payload = format!("{}.{json}", self.sign(&json));
        if payload.len() >= MAX_PAYLOAD {
            // PostgreSQL refuses it; the others re-read at their next sweep or page load.
            return tracing::warn!(
                bytes = payload.len(),
                topic = %envelope.topic,
                "a cluster message is too long to send; dropped"
            );
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

    /// The envelope in a payload, if its signature is this cluster's.
    fn open(&self, payload: &str) -> Option<Envelope> {
        let (signature, json) = payload.split_once('.')?;
        let mut mac = self.mac();
        hmac::Mac::update(&mut mac, json.as_bytes());
        hmac::Mac::verify_slice(mac, &hex::decode(signature).ok()?).ok()?;
        serde_json::from_str(json).ok()
    }

    /// Listens on a connection of its own, reconnecting after a failure; on
    /// every (re)connect says hello and tells the local domains to re-read,
    /// since what passed while disconnected is lost.
    fn listen_loop(&self, config: &postgres::Config) {
        while !self.inner.stop.load(Ordering::SeqCst) {
            match config.connect(postgres::NoTls) {
                Ok(mut client) => {
                    if let Err(e) = client.batch_execute(&format!("LISTEN {}", self.inner.channel)) {
                        tracing::warn!(error = %e, "LISTEN failed");
                    } else {
                        self.hello();
                        for domain in self.handlers() {
                            domain.reconnected();
                        }
                        self.drain(&mut client);
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

    /// Tells every other replica this one is (back) here.
    fn hello(&self) {
        self.enqueue(Envelope {
            from: self.inner.replica.clone(),
            to: None,
            topic: HELLO.into(),
            ask: None,
            re: None,
            body: serde_json::Value::Null,
        });
    }

    /// Hands on notifications until the connection fails or the cluster stops.
    fn drain(&self, client: &mut postgres::Client) {
        while !self.inner.stop.load(Ordering::SeqCst) {
            {
                let mut notifications = client.notifications();
                let mut batch = notifications.timeout_iter(Duration::from_millis(250));
                loop {
                    use postgres::fallible_iterator::FallibleIterator;
                    match batch.next() {
                        Ok(Some(n)) => match self.open(n.payload()) {
                            Some(envelope) => {
                                self.deliver_local(envelope);
                            }
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

    /// Hands an opened envelope to its waiting request or its topic's domain.
    fn deliver_local(&self, envelope: Envelope) -> Delivery {
        let Envelope { from, to, topic, ask, re, body } = envelope;
        if from == self.inner.replica || to.as_deref().is_some_and(|to| to != self.inner.replica) {
            return Delivery::NotOurs;
        }
        if let Some(re) = re {
            if let Some(waiter) = self.waiting().remove(&re) {
                let _ = waiter.send(body);
            }
            return Delivery::Answer;
        }
        if topic == HELLO {
            // Whoever just (re)connected wants our picture.
            for domain in self.handlers() {
                domain.greeted(&from);
            }
            return Delivery::Hello;
        }
        let Some(domain) = self.handler(&topic) else {
            // A domain not (yet) listening here, or a newer replica's topic.
            tracing::debug!(%topic, %from, "dropped a cluster message on a topic nobody here handles");
            return Delivery::Unknown;
        };
        let ask = ask.map(|id| Ask { to: from.clone(), id });
        if domain.receive(from, ask, body) {
            Delivery::Handled
        } else {
            tracing::warn!(%topic, "dropped a cluster message that is not its topic's");
            Delivery::Unreadable
        }
    }
}

/// This schema's channel name and the cluster's signing key. Blocks on the database.
fn channel_and_key(db: &Db) -> Result<(String, Vec<u8>)> {
    let schema: String = db.conn()?.query_one("SELECT current_schema()", args![], |r| r.get(0))?;
    let digest = <sha2::Sha256 as sha2::Digest>::digest(schema.as_bytes());
    let channel = format!("{CHANNEL_PREFIX}{}", &hex::encode(digest)[..16]);
    Ok((channel, crate::secret::shared_key(db, KEY_NAME, 32)?))
}

#[cfg(test)]
mod tests;
