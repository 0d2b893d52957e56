//! Limits on what one client can make the server do: failed sign-ins and
//! setup attempts (per address and per username, with exponential backoff),
//! and live streams per browser session. A limit hit is answered 429 with
//! `Retry-After` and a JSON `{error, message}` body, and logged; the server
//! keeps serving everyone else.
//!
//! On SQLite (one process) failures are counted in memory. On PostgreSQL
//! replicas share them ([`SignInFailures`]: read before each attempt, each
//! failure added atomically), so N replicas give no more attempts than one;
//! attempts in progress stay per replica (a dead one leaves no count behind).

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gatehouse_core::sign_in_failures::{Failures, SignInFailures};
use gatehouse_core::{Clock, Db, secret};
use serde_json::json;

/// Failed sign-ins for one username before it is locked for a while.
pub const USERNAME_FAILURES: u32 = 5;
/// Failed sign-ins and setup attempts from one address before it is locked
/// (higher: several people may share an address).
pub const ADDRESS_FAILURES: u32 = 20;
/// The first lockout; each further failure doubles it, up to [`MAX_LOCKOUT`].
pub const FIRST_LOCKOUT: Duration = Duration::from_secs(30);
/// The longest lockout.
pub const MAX_LOCKOUT: Duration = Duration::from_secs(3600);
/// Failures are forgotten after this long without one (counted from the end
/// of the last lockout).
pub const FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);
/// How many addresses, and how many usernames, are tracked at most; the
/// oldest quiet entries make room for new ones.
pub const MAX_TRACKED: usize = 10_000;
/// Live streams (`/api/live/events`, `/api/approvals/events`,
/// `/api/executions/{eid}/events`) one browser session may hold open at once.
pub const STREAMS_PER_SESSION: usize = 16;

/// A limit was hit: answered 429 with `Retry-After`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LimitExceeded {
    /// Too many failed sign-ins (or setup attempts) for this address or username.
    #[error("too many failed attempts {scope}; try again in {} s", retry_after.as_secs())]
    Attempts {
        /// `from this address` or `for this username`.
        scope: &'static str,
        /// When trying again may work.
        retry_after: Duration,
    },
    /// This browser session already holds the most live streams it may.
    #[error("this browser session already has {STREAMS_PER_SESSION} live streams open; close a tab and retry")]
    Streams,
}

impl LimitExceeded {
    /// Whole seconds to wait (at least one).
    pub fn retry_after_secs(&self) -> u64 {
        match self {
            LimitExceeded::Attempts { retry_after, .. } => retry_after.as_millis().div_ceil(1000).max(1) as u64,
            LimitExceeded::Streams => 5,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            LimitExceeded::Attempts { .. } => "too_many_attempts",
            LimitExceeded::Streams => "too_many_streams",
        }
    }
}

impl IntoResponse for LimitExceeded {
    fn into_response(self) -> Response {
        let retry = self.retry_after_secs();
        tracing::warn!(error = self.code(), retry_after_secs = retry, "limit hit, request refused");
        let message = match &self {
            LimitExceeded::Attempts { scope, .. } => {
                format!("too many failed attempts {scope}; try again in {retry} s")
            }
            LimitExceeded::Streams => self.to_string(),
        };
        let mut response =
            (StatusCode::TOO_MANY_REQUESTS, Json(json!({"error": self.code(), "message": message}))).into_response();
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry));
        response
    }
}

/// A short, stable tag for a username, for logs and counters: what was
/// typed (perhaps a password in the wrong field) is never kept or logged.
pub fn username_tag(username: &str) -> String {
    secret::hash(username)[..8].to_string()
}

fn username_key(username: &str) -> u64 {
    u64::from_str_radix(&secret::hash(username)[..16], 16).unwrap_or_default()
}

/// IPv4 addresses count one by one; IPv6 by /64, since one host usually
/// holds a whole /64 and could otherwise rotate through it.
pub fn address_key(ip: IpAddr) -> IpAddr {
    crate::addresses::network_key(ip, 64)
}

#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    failures: u32,
    in_flight: u32,
    last_failure_ms: i64,
    blocked_until_ms: i64,
}

impl Entry {
    /// When this entry may be forgotten if nothing else happens.
    fn quiet_since(&self) -> i64 {
        self.last_failure_ms.max(self.blocked_until_ms)
    }

    fn forgettable(&self, now: i64) -> bool {
        self.in_flight == 0 && now >= self.quiet_since() + FAILURE_WINDOW.as_millis() as i64
    }

    /// Counts one more failure, locking once `threshold` is reached (for
    /// twice as long with each failure after it).
    fn fail(&mut self, threshold: u32, now: i64) {
        self.failures = self.failures.saturating_add(1);
        self.last_failure_ms = now;
        if self.failures >= threshold {
            let doublings = (self.failures - threshold).min(20);
            let lockout = FIRST_LOCKOUT.saturating_mul(1 << doublings).min(MAX_LOCKOUT);
            self.blocked_until_ms = now + lockout.as_millis() as i64;
        }
    }

    /// The counts every replica shares (not the attempts in progress).
    fn counts(&self) -> Failures {
        Failures {
            count: self.failures,
            last_failure_ms: self.last_failure_ms,
            blocked_until_ms: self.blocked_until_ms,
        }
    }

    fn set_counts(&mut self, counts: Failures) {
        self.failures = counts.count;
        self.last_failure_ms = counts.last_failure_ms;
        self.blocked_until_ms = counts.blocked_until_ms;
    }
}

/// Failure counts for one kind of key, bounded in size.
#[derive(Debug)]
struct Tracker<K> {
    threshold: u32,
    capacity: usize,
    entries: HashMap<K, Entry>,
}

impl<K: Hash + Eq + Copy> Tracker<K> {
    fn new(threshold: u32, capacity: usize) -> Self {
        Self { threshold, capacity, entries: HashMap::new() }
    }

    /// Takes the counts the replicas share for `key` as this tracker's own.
    fn adopt(&mut self, key: K, counts: Failures, now: i64) {
        if !self.entries.contains_key(&key) {
            self.make_room(now);
        }
        self.entries.entry(key).or_default().set_counts(counts);
    }

    /// Reserves an attempt for `key`, or says how long to wait. Attempts in
    /// progress count, so a burst of parallel guesses gets no more tries
    /// than a sequence would.
    fn begin(&mut self, key: K, now: i64) -> Result<(), Duration> {
        if let Some(entry) = self.entries.get_mut(&key) {
            if entry.forgettable(now) {
                *entry = Entry::default();
            }
            if entry.blocked_until_ms > now {
                return Err(Duration::from_millis((entry.blocked_until_ms - now) as u64));
            }
            // Past the threshold, one attempt at a time (each failure locks
            // again, longer); below it, attempts in progress count as failures
            // until they are known not to be.
            let busy = if entry.failures >= self.threshold {
                entry.in_flight > 0
            } else {
                entry.failures + entry.in_flight >= self.threshold
            };
            if busy {
                return Err(Duration::from_secs(1));
            }
            entry.in_flight += 1;
            return Ok(());
        }
        self.make_room(now);
        self.entries.insert(key, Entry { in_flight: 1, ..Entry::default() });
        Ok(())
    }

    /// Frees the oldest quiet entries when full.
    fn make_room(&mut self, now: i64) {
        if self.entries.len() < self.capacity {
            return;
        }
        self.entries.retain(|_, e| !e.forgettable(now));
        while self.entries.len() >= self.capacity {
            // Prefer entries that are not locked, then the longest quiet.
            let oldest = self
                .entries
                .iter()
                .filter(|(_, e)| e.in_flight == 0)
                .min_by_key(|(_, e)| (e.blocked_until_ms > now, e.quiet_since()))
                .map(|(k, _)| *k);
            match oldest {
                Some(key) => {
                    self.entries.remove(&key);
                }
                None => return,
            }
        }
    }

    /// Ends an attempt that failed: counted here, or `shared` (already
    /// counted in the database) taken as is.
    fn failed(&mut self, key: K, now: i64, shared: Option<Failures>) {
        let threshold = self.threshold;
        let Some(entry) = self.entries.get_mut(&key) else { return };
        entry.in_flight = entry.in_flight.saturating_sub(1);
        match shared {
            Some(counts) => entry.set_counts(counts),
            None => entry.fail(threshold, now),
        }
    }

    /// Ends an attempt without a verdict (`reset`: a success, forget failures).
    fn release(&mut self, key: K, reset: bool) {
        let Some(entry) = self.entries.get_mut(&key) else { return };
        entry.in_flight = entry.in_flight.saturating_sub(1);
        if reset {
            entry.failures = 0;
            entry.blocked_until_ms = 0;
        }
        if entry.in_flight == 0 && entry.failures == 0 {
            self.entries.remove(&key);
        }
    }
}

#[derive(Debug)]
struct Trackers {
    by_address: Tracker<IpAddr>,
    by_username: Tracker<u64>,
}

/// Counts failed sign-ins and setup attempts per client address and per
/// username, and refuses attempts while either is locked out. Cheap to clone.
#[derive(Clone)]
pub struct SignInThrottle {
    trackers: Arc<Mutex<Trackers>>,
    clock: Arc<dyn Clock>,
    /// The counts replicas share (PostgreSQL only).
    shared: Option<SignInFailures>,
}

/// The database's names for the two kinds of key.
const ADDRESS: &str = "address";
const USERNAME: &str = "username";

fn username_subject(key: u64) -> String {
    format!("{key:016x}")
}

impl SignInThrottle {
    /// A throttle with the default limits, timed by `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self::with_capacity(clock, MAX_TRACKED)
    }

    /// Tracks at most `capacity` addresses and as many usernames.
    pub fn with_capacity(clock: Arc<dyn Clock>, capacity: usize) -> Self {
        Self {
            trackers: Arc::new(Mutex::new(Trackers {
                by_address: Tracker::new(ADDRESS_FAILURES, capacity),
                by_username: Tracker::new(USERNAME_FAILURES, capacity),
            })),
            clock,
            shared: None,
        }
    }

    /// Shares the failure counts with the other replicas on `db` when it is
    /// PostgreSQL; on SQLite (one process) they stay in memory.
    pub fn shared_through(mut self, db: &Db) -> Self {
        if db.backend() == gatehouse_core::db::Backend::Postgres {
            self.shared = Some(SignInFailures::new(db.clone(), self.clock.clone()));
        }
        self
    }

    /// The shared counts of `subject`, if they are shared. A database that
    /// cannot answer leaves this replica's own counts in charge.
    fn load(&self, scope: &str, subject: impl FnOnce() -> String) -> Option<Failures> {
        let shared = self.shared.as_ref()?;
        shared
            .get(scope, &subject())
            .inspect_err(|e| tracing::warn!(error = %e, "shared sign-in counts unreadable"))
            .ok()
    }

    /// Adds one failure of `subject` to the shared counts (if shared), with
    /// the same arithmetic as in memory; the counts after it.
    fn record(&self, scope: &str, subject: String, threshold: u32, now: i64) -> Option<Failures> {
        let shared = self.shared.as_ref()?;
        let counted = shared.record(scope, &subject, |before| {
            let mut entry = Entry::default();
            entry.set_counts(before);
            if entry.forgettable(now) {
                entry = Entry::default();
            }
            entry.fail(threshold, now);
            (entry.counts(), entry.quiet_since() + FAILURE_WINDOW.as_millis() as i64)
        });
        counted.inspect_err(|e| tracing::warn!(error = %e, "shared sign-in failure not counted")).ok()
    }

    fn lock(&self) -> MutexGuard<'_, Trackers> {
        self.trackers.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts an attempt from `address` (unknown when served without
    /// connection info) for `username` (none for setup), or refuses it.
    pub fn begin(&self, address: Option<IpAddr>, username: Option<&str>) -> Result<Attempt, LimitExceeded> {
        let now = self.clock.now_ms();
        let address = address.map(address_key);
        let username = username.map(username_key);
        let shared_address = address.and_then(|ip| self.load(ADDRESS, || ip.to_string()));
        let shared_username = username.and_then(|user| self.load(USERNAME, || username_subject(user)));
        let mut t = self.lock();
        if let (Some(ip), Some(counts)) = (address, shared_address) {
            t.by_address.adopt(ip, counts, now);
        }
        if let (Some(user), Some(counts)) = (username, shared_username) {
            t.by_username.adopt(user, counts, now);
        }
        if let Some(ip) = address
            && let Err(retry_after) = t.by_address.begin(ip, now)
        {
            return Err(LimitExceeded::Attempts { scope: "from this address", retry_after });
        }
        if let Some(user) = username
            && let Err(retry_after) = t.by_username.begin(user, now)
        {
            if let Some(ip) = address {
                t.by_address.release(ip, false);
            }
            return Err(LimitExceeded::Attempts { scope: "for this username", retry_after });
        }
        Ok(Attempt { throttle: self.clone(), address, username, settled: false })
    }

    /// How many addresses and usernames are tracked now.
    pub fn tracked(&self) -> (usize, usize) {
        let t = self.lock();
        (t.by_address.entries.len(), t.by_username.entries.len())
    }
}

/// One sign-in or setup attempt in progress. Say how it went with
/// [`Attempt::failed`] or [`Attempt::succeeded`]; dropped without either
/// (an internal error), it counts as neither.
pub struct Attempt {
    throttle: SignInThrottle,
    address: Option<IpAddr>,
    username: Option<u64>,
    settled: bool,
}

impl Attempt {
    /// The name or password (or setup token) was wrong.
    pub fn failed(mut self) {
        let now = self.throttle.clock.now_ms();
        let throttle = &self.throttle;
        let shared_address =
            self.address.and_then(|ip| throttle.record(ADDRESS, ip.to_string(), ADDRESS_FAILURES, now));
        let shared_username =
            self.username.and_then(|user| throttle.record(USERNAME, username_subject(user), USERNAME_FAILURES, now));
        let mut t = self.throttle.lock();
        if let Some(ip) = self.address {
            t.by_address.failed(ip, now, shared_address);
        }
        if let Some(user) = self.username {
            t.by_username.failed(user, now, shared_username);
        }
        self.settled = true;
    }

    /// Signed in: the username's failures are forgotten (the address's are
    /// not, or one good account would unlock guessing at others).
    pub fn succeeded(mut self) {
        if let (Some(shared), Some(user)) = (&self.throttle.shared, self.username)
            && let Err(e) = shared.forget(USERNAME, &username_subject(user))
        {
            tracing::warn!(error = %e, "shared sign-in failures not reset");
        }
        let mut t = self.throttle.lock();
        if let Some(ip) = self.address {
            t.by_address.release(ip, false);
        }
        if let Some(user) = self.username {
            t.by_username.release(user, true);
        }
        self.settled = true;
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut t = self.throttle.lock();
        if let Some(ip) = self.address {
            t.by_address.release(ip, false);
        }
        if let Some(user) = self.username {
            t.by_username.release(user, false);
        }
    }
}

/// Counts the live streams each browser session holds. Cheap to clone.
#[derive(Clone, Default)]
pub struct StreamLimiter {
    open: Arc<Mutex<HashMap<String, usize>>>,
}

impl StreamLimiter {
    /// Takes one of the session's [`STREAMS_PER_SESSION`] slots; the slot is
    /// given back when the returned guard is dropped (the stream ended).
    pub fn acquire(&self, session: &str) -> Result<StreamSlot, LimitExceeded> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(session.to_string()).or_default();
        if *count >= STREAMS_PER_SESSION {
            return Err(LimitExceeded::Streams);
        }
        *count += 1;
        Ok(StreamSlot { limiter: self.clone(), session: session.to_string() })
    }

    /// Streams open now, over all sessions.
    pub fn open_streams(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).values().sum()
    }
}

/// One live stream's place in its session's count (see [`StreamLimiter`]).
pub struct StreamSlot {
    limiter: StreamLimiter,
    session: String,
}

impl StreamSlot {
    /// The browser session (its stored hash) holding this slot.
    pub fn session(&self) -> &str {
        &self.session
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.limiter.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.session) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.session);
            }
        }
    }
}

/// The server's throttles, shared by the handlers. Cheap to clone.
#[derive(Clone)]
pub struct Throttles {
    /// Failed sign-in and setup attempts.
    pub sign_in: SignInThrottle,
    /// Live streams per browser session.
    pub streams: StreamLimiter,
}

impl Throttles {
    /// The default limits, timed by `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { sign_in: SignInThrottle::new(clock), streams: StreamLimiter::default() }
    }

    /// Failed sign-ins counted with the other replicas on `db` (PostgreSQL;
    /// see [`SignInThrottle::shared_through`]).
    pub fn shared_through(self, db: &Db) -> Self {
        Self { sign_in: self.sign_in.shared_through(db), ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_core::ManualClock;

    fn throttle(capacity: usize) -> (SignInThrottle, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        (SignInThrottle::with_capacity(clock.clone(), capacity), clock)
    }

    fn ip(n: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, n]))
    }

    #[test]
    fn lockouts_double_and_success_resets_the_username() {
        let (t, clock) = throttle(100);
        for _ in 0..USERNAME_FAILURES {
            t.begin(ip(1), Some("ada")).unwrap().failed();
        }
        let first = t.begin(ip(1), Some("ada")).err().unwrap().retry_after_secs();
        assert_eq!(first, FIRST_LOCKOUT.as_secs());
        clock.advance(FIRST_LOCKOUT);
        t.begin(ip(1), Some("ada")).unwrap().failed();
        let second = t.begin(ip(1), Some("ada")).err().unwrap().retry_after_secs();
        assert_eq!(second, 2 * first);
        clock.advance(Duration::from_secs(second));
        t.begin(ip(1), Some("ada")).unwrap().succeeded();
        for _ in 0..USERNAME_FAILURES - 1 {
            t.begin(ip(2), Some("ada")).unwrap().failed();
        }
        assert!(t.begin(ip(2), Some("ada")).is_ok(), "the success reset the count");
    }

    #[test]
    fn parallel_attempts_count_while_in_flight() {
        let (t, _) = throttle(100);
        let held: Vec<_> = (0..USERNAME_FAILURES).map(|_| t.begin(ip(1), Some("ada")).unwrap()).collect();
        assert!(t.begin(ip(1), Some("ada")).is_err());
        drop(held);
        assert!(t.begin(ip(1), Some("ada")).is_ok(), "abandoned attempts give their place back");
    }

    #[test]
    fn memory_is_bounded_and_lockouts_outlive_quiet_entries() {
        let (t, _) = throttle(8);
        for _ in 0..USERNAME_FAILURES {
            t.begin(None, Some("victim")).unwrap().failed();
        }
        for n in 0..100 {
            t.begin(None, Some(&format!("spray{n}"))).unwrap().failed();
        }
        let (_, users) = t.tracked();
        assert!(users <= 8, "{users} usernames tracked");
        assert!(t.begin(None, Some("victim")).is_err(), "the lockout was not evicted");
        let (t, clock) = throttle(8);
        for n in 0..8 {
            t.begin(ip(n), None).unwrap().failed();
        }
        clock.advance(FAILURE_WINDOW);
        t.begin(ip(100), None).unwrap().failed();
        assert_eq!(t.tracked().0, 1, "quiet entries were dropped first");
    }

    #[test]
    fn ipv6_addresses_count_by_slash_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_eq!(address_key(a), address_key(b));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(address_key(mapped), IpAddr::from([10, 0, 0, 1]));
    }

    #[test]
    fn streams_per_session_are_capped_and_given_back() {
        let limiter = StreamLimiter::default();
        let slots: Vec<_> = (0..STREAMS_PER_SESSION).map(|_| limiter.acquire("s1").unwrap()).collect();
        assert!(matches!(limiter.acquire("s1"), Err(LimitExceeded::Streams)));
        assert!(limiter.acquire("s2").is_ok());
        drop(slots);
        assert_eq!(limiter.open_streams(), 0);
        assert!(limiter.acquire("s1").is_ok());
    }
}
