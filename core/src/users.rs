//! Users (argon2id passwords), browser sessions (stored hashed) and the
//! one-time setup token that creates the first admin.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::db::Db;
use crate::error::{CoreError, Result};
use crate::secret;

/// How long a browser session lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(14 * 24 * 3600);

/// How long a setup link works after it was printed; a restart prints a new
/// one while no user exists.
pub const SETUP_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// What a presented setup token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupToken {
    /// It may create the first admin now.
    Valid,
    /// It was right, but is older than [`SETUP_TOKEN_LIFETIME`].
    Expired,
    /// Unknown, already used, or someone finished setup.
    Invalid,
}

impl SetupToken {
    /// `Ok` for a valid token, otherwise the refusal that says why.
    pub fn check(self) -> Result<()> {
        match self {
            SetupToken::Valid => Ok(()),
            other => Err(other.refusal()),
        }
    }

    fn refusal(self) -> CoreError {
        let reason = match self {
            SetupToken::Expired => {
                "this setup link has expired (links work for 24 hours); restart gatehouse to print a new one"
            }
            _ => "this setup link is no longer valid",
        };
        CoreError::Invalid { field: "token", reason: reason.into() }
    }
}

/// Bounds how many argon2 hashes run at once (each takes ~19 MiB and a core
/// for tens of milliseconds), so a flood of sign-ins queues instead of
/// exhausting memory and starving everything else.
#[derive(Debug)]
pub struct HashingGate {
    permits: Arc<tokio::sync::Semaphore>,
    limit: usize,
    running: AtomicUsize,
    peak: AtomicUsize,
}

impl HashingGate {
    /// At most `limit` hashes at once (at least one).
    pub fn new(limit: usize) -> Self {
        let limit = limit.max(1);
        Self {
            permits: Arc::new(tokio::sync::Semaphore::new(limit)),
            limit,
            running: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// Two per CPU core.
    pub fn per_core() -> Self {
        Self::new(2 * std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// How many hashes may run at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The most hashes that ever ran at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
}

/// A signed-in person.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct User {
    /// Row id.
    pub id: i64,
    /// Unique name.
    pub username: String,
    /// Admins see and decide everything.
    pub is_admin: bool,
}

/// Store of users and their browser sessions.
#[derive(Clone)]
pub struct UserStore {
    db: Db,
    clock: Arc<dyn Clock>,
    gate: Arc<HashingGate>,
}

fn validate_username(name: &str) -> Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'));
    if ok {
        Ok(())
    } else {
        Err(CoreError::Invalid {
            field: "username",
            reason: "use 1 to 64 letters, digits, '-', '_', '.' or '@'".into(),
        })
    }
}

fn validate_password(password: &str) -> Result<()> {
    if password.chars().count() < 8 || password.len() > 1024 {
        return Err(CoreError::Invalid { field: "password", reason: "must be 8 to 1024 characters".into() });
    }
    Ok(())
}

fn hash_password(password: &str) -> Result<String> {
    let mut salt_bytes = [0u8; 16];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut salt_bytes);
    let salt = SaltString::encode_b64(&salt_bytes).map_err(|e| CoreError::Password(e.to_string()))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| CoreError::Password(e.to_string()))
}

/// A hash to verify against when the user does not exist, so a wrong name and a
/// wrong password take the same time.
fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| hash_password("not-a-real-password").unwrap_or_default())
}

impl UserStore {
    /// A store over `db`.
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock, gate: Arc::new(HashingGate::per_core()) }
    }

    /// The gate every password hash of the server passes.
    pub fn hashing(&self) -> &HashingGate {
        &self.gate
    }

    /// Runs `work` (which hashes a password) on a blocking thread once the
    /// gate lets it; waits in line otherwise.
    async fn hashed<T: Send + 'static>(
        &self,
        work: impl FnOnce(&UserStore) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let permit = self.gate.permits.clone().acquire_owned().await.map_err(|e| CoreError::Join(e.to_string()))?;
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            let gate = &store.gate;
            let now = gate.running.fetch_add(1, Ordering::SeqCst) + 1;
            gate.peak.fetch_max(now, Ordering::SeqCst);
            let result = work(&store);
            gate.running.fetch_sub(1, Ordering::SeqCst);
            drop(permit);
            result
        })
        .await
        .map_err(|e| CoreError::Join(e.to_string()))?
    }

    /// [`UserStore::verify_password`] through the hashing gate, off the async workers.
    pub async fn sign_in(&self, username: String, password: String) -> Result<Option<User>> {
        self.hashed(move |users| users.verify_password(&username, &password)).await
    }

    /// [`UserStore::complete_setup`] through the hashing gate, off the async workers.
    pub async fn finish_setup(&self, token: String, username: String, password: String) -> Result<User> {
        self.hashed(move |users| users.complete_setup(&token, &username, &password)).await
    }

    /// How many users exist.
    pub fn count(&self) -> Result<i64> {
        Ok(self.db.conn().query_row("SELECT COUNT(*) FROM users", [], |r| r.get(0))?)
    }

    /// Creates a user. Hashing is slow on purpose: call from a blocking context.
    pub fn add(&self, username: &str, password: &str, is_admin: bool) -> Result<User> {
        validate_username(username)?;
        validate_password(password)?;
        let hash = hash_password(password)?;
        let now = self.clock.now_ms();
        let conn = self.db.conn();
        match conn.execute(
            "INSERT INTO users (username, password_hash, is_admin, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![username, hash, is_admin, now],
        ) {
            Ok(_) => Ok(User { id: conn.last_insert_rowid(), username: username.into(), is_admin }),
            Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::ConstraintViolation => {
                Err(CoreError::Conflict(format!("user {username:?}")))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Checks a name and password (slow on purpose: call from a blocking context).
    pub fn verify_password(&self, username: &str, password: &str) -> Result<Option<User>> {
        let row: Option<(i64, String, bool)> = self
            .db
            .conn()
            .query_row("SELECT id, password_hash, is_admin FROM users WHERE username = ?1", [username], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()?;
        let stored = row.as_ref().map(|(_, h, _)| h.as_str()).unwrap_or_else(|| dummy_hash());
        let parsed = PasswordHash::new(stored).map_err(|e| CoreError::Password(e.to_string()))?;
        let ok = Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok();
        Ok(match (ok, row) {
            (true, Some((id, _, is_admin))) => Some(User { id, username: username.into(), is_admin }),
            _ => None,
        })
    }

    /// Opens a browser session for `user`; returns the cookie value (shown once).
    pub fn create_session(&self, user: &User) -> Result<String> {
        let token = secret::new_token();
        let now = self.clock.now_ms();
        self.db.conn().execute(
            "INSERT INTO browser_sessions (token_hash, user_id, created_at, expires_at) VALUES (?1, ?2, ?3, ?4)",
            params![secret::hash(&token), user.id, now, now + SESSION_LIFETIME.as_millis() as i64],
        )?;
        Ok(token)
    }

    /// The user behind a session cookie, if the session is live.
    pub fn session_user(&self, token: &str) -> Result<Option<User>> {
        let conn = self.db.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT u.id, u.username, u.is_admin FROM browser_sessions s JOIN users u ON u.id = s.user_id
             WHERE s.token_hash = ?1 AND s.expires_at > ?2",
        )?;
        Ok(stmt
            .query_row(params![secret::hash(token), self.clock.now_ms()], |r| {
                Ok(User { id: r.get(0)?, username: r.get(1)?, is_admin: r.get(2)? })
            })
            .optional()?)
    }

    /// Ends a browser session.
    pub fn end_session(&self, token: &str) -> Result<()> {
        self.db.conn().execute("DELETE FROM browser_sessions WHERE token_hash = ?1", [secret::hash(token)])?;
        Ok(())
    }

    /// Deletes browser sessions that have expired (they no longer sign anyone
    /// in, but their rows would pile up); returns how many.
    pub fn purge_expired_sessions(&self) -> Result<usize> {
        Ok(self.db.conn().execute("DELETE FROM browser_sessions WHERE expires_at <= ?1", [self.clock.now_ms()])?)
    }

    /// How many browser sessions are stored (live or not yet purged).
    pub fn stored_sessions(&self) -> Result<i64> {
        Ok(self.db.conn().query_row("SELECT COUNT(*) FROM browser_sessions", [], |r| r.get(0))?)
    }

    /// Makes a fresh one-time setup token if no user exists yet (replacing any
    /// earlier one); `None` once set up.
    pub fn new_setup_token(&self) -> Result<Option<String>> {
        if self.count()? > 0 {
            return Ok(None);
        }
        let token = secret::new_token();
        let conn = self.db.conn();
        conn.execute("DELETE FROM setup_tokens", [])?;
        conn.execute(
            "INSERT INTO setup_tokens (token_hash, created_at) VALUES (?1, ?2)",
            params![secret::hash(&token), self.clock.now_ms()],
        )?;
        Ok(Some(token))
    }

    /// Whether a setup token is valid now (no user yet, token matches).
    pub fn setup_token_valid(&self, token: &str) -> Result<bool> {
        Ok(self.setup_token(token)? == SetupToken::Valid)
    }

    /// What `token` is: valid, expired, or invalid. Cheap (no hashing), so
    /// callers check it before spending a password hash on a request.
    pub fn setup_token(&self, token: &str) -> Result<SetupToken> {
        let created: Option<i64> = self
            .db
            .conn()
            .query_row(
                "SELECT created_at FROM setup_tokens WHERE token_hash = ?1 AND NOT EXISTS(SELECT 1 FROM users)",
                [secret::hash(token)],
                |r| r.get(0),
            )
            .optional()?;
        Ok(match created {
            None => SetupToken::Invalid,
            Some(at) if self.clock.now_ms() - at >= SETUP_TOKEN_LIFETIME.as_millis() as i64 => SetupToken::Expired,
            Some(_) => SetupToken::Valid,
        })
    }

    /// Creates the first admin with a setup token, consuming it. Fails if the
    /// token is wrong or expired, or someone already finished setup. The token
    /// is checked before the password is hashed, so guesses cost no hashing.
    pub fn complete_setup(&self, token: &str, username: &str, password: &str) -> Result<User> {
        self.setup_token(token)?.check()?;
        validate_username(username)?;
        validate_password(password)?;
        let hash = hash_password(password)?;
        let mut conn = self.db.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Checked again inside the transaction: another request may have
        // finished setup, or the link expired, while the password was hashed.
        let fresh_since = self.clock.now_ms() - SETUP_TOKEN_LIFETIME.as_millis() as i64;
        let consumed = tx.execute(
            "DELETE FROM setup_tokens WHERE token_hash = ?1 AND created_at > ?2 AND NOT EXISTS(SELECT 1 FROM users)",
            params![secret::hash(token), fresh_since],
        )?;
        if consumed == 0 {
            return Err(SetupToken::Invalid.refusal());
        }
        tx.execute(
            "INSERT INTO users (username, password_hash, is_admin, created_at) VALUES (?1, ?2, 1, ?3)",
            params![username, hash, self.clock.now_ms()],
        )?;
        let id = tx.last_insert_rowid();
        tx.execute("DELETE FROM setup_tokens", [])?;
        tx.commit()?;
        Ok(User { id, username: username.into(), is_admin: true })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn store() -> (UserStore, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        (UserStore::new(Db::open_in_memory().unwrap(), clock.clone()), clock)
    }

    #[test]
    fn passwords_verify_and_are_not_stored_plainly() {
        let (users, _) = store();
        users.add("ada", "correct horse", false).unwrap();
        assert!(users.verify_password("ada", "correct horse").unwrap().is_some());
        assert!(users.verify_password("ada", "wrong horse!").unwrap().is_none());
        assert!(users.verify_password("bob", "correct horse").unwrap().is_none());
        let stored: String = users.db.conn().query_row("SELECT password_hash FROM users", [], |r| r.get(0)).unwrap();
        assert!(stored.starts_with("$argon2id$"));
        assert!(matches!(users.add("ada", "another one", false), Err(CoreError::Conflict(_))));
    }

    #[test]
    fn sessions_are_hashed_and_expire() {
        let (users, clock) = store();
        let ada = users.add("ada", "correct horse", true).unwrap();
        let cookie = users.create_session(&ada).unwrap();
        assert_eq!(users.session_user(&cookie).unwrap(), Some(ada));
        let stored: String =
            users.db.conn().query_row("SELECT token_hash FROM browser_sessions", [], |r| r.get(0)).unwrap();
        assert_eq!(stored, secret::hash(&cookie));
        clock.advance(SESSION_LIFETIME);
        assert_eq!(users.session_user(&cookie).unwrap(), None);
    }

    #[test]
    fn setup_token_is_one_time() {
        let (users, _) = store();
        let token = users.new_setup_token().unwrap().unwrap();
        assert!(users.setup_token_valid(&token).unwrap());
        assert!(users.complete_setup("wrong", "root", "password1").is_err());
        let admin = users.complete_setup(&token, "root", "password1").unwrap();
        assert!(admin.is_admin);
        assert!(!users.setup_token_valid(&token).unwrap());
        assert!(users.complete_setup(&token, "root2", "password1").is_err());
        assert_eq!(users.new_setup_token().unwrap(), None);
    }

    #[test]
    fn setup_token_expires_after_a_day() {
        let (users, clock) = store();
        let token = users.new_setup_token().unwrap().unwrap();
        clock.advance(SETUP_TOKEN_LIFETIME - Duration::from_secs(1));
        assert_eq!(users.setup_token(&token).unwrap(), SetupToken::Valid);
        clock.advance(Duration::from_secs(1));
        assert_eq!(users.setup_token(&token).unwrap(), SetupToken::Expired);
        let err = users.complete_setup(&token, "root", "password1").unwrap_err().to_string();
        assert!(err.contains("expired"), "{err}");
        assert_eq!(users.count().unwrap(), 0);
        // A restart prints a fresh link that works.
        let fresh = users.new_setup_token().unwrap().unwrap();
        assert!(users.complete_setup(&fresh, "root", "password1").unwrap().is_admin);
    }

    #[test]
    fn expired_sessions_are_purged_and_live_ones_kept() {
        let (users, clock) = store();
        let ada = users.add("ada", "correct horse", false).unwrap();
        let old = users.create_session(&ada).unwrap();
        clock.advance(SESSION_LIFETIME / 2);
        let newer = users.create_session(&ada).unwrap();
        clock.advance(SESSION_LIFETIME / 2);
        assert_eq!(users.purge_expired_sessions().unwrap(), 1);
        assert_eq!(users.stored_sessions().unwrap(), 1);
        assert_eq!(users.session_user(&old).unwrap(), None);
        assert!(users.session_user(&newer).unwrap().is_some());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hashing_gate_bounds_concurrent_hashes() {
        let (users, _) = store();
        users.add("ada", "correct horse", false).unwrap();
        let users = UserStore { gate: Arc::new(HashingGate::new(2)), ..users };
        let mut attempts = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let users = users.clone();
            attempts.spawn(async move { users.sign_in("ada".into(), "correct horse".into()).await });
        }
        while let Some(result) = attempts.join_next().await {
            assert!(result.unwrap().unwrap().is_some());
        }
        assert!((1..=2).contains(&users.hashing().peak()), "peak {}", users.hashing().peak());
    }
}
