//! Users (argon2id passwords), browser sessions (stored hashed), the
//! one-time setup token that creates the first admin, and the one-time
//! invite and reset links (stored hashed) with which a user chooses a password.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use serde::{Deserialize, Serialize};

use crate::args;
use crate::clock::Clock;
use crate::db::{Conn, Db};
use crate::error::{CoreError, Result};
use crate::live::{LiveEvent, LiveHub};
use crate::secret;

pub use gatehouse_model::{LinkPurpose, UserStatus, UserView};

/// How long a browser session lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(14 * 24 * 3600);

/// How long a setup link works after it was printed; a restart prints a new
/// one while no user exists.
pub const SETUP_TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// How long an invite or reset link works after an admin made it.
pub const PASSWORD_LINK_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// Which browser session a request signed in with (the stored hash of its
/// cookie), for limits that apply per session and for "sign out my other
/// sessions".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserSession(pub String);

/// What a presented invite or reset link is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkCheck {
    /// It may set `username`'s password now.
    Valid {
        /// Whose password it sets.
        username: String,
        /// Invite or reset.
        purpose: LinkPurpose,
    },
    /// It was right, but is older than [`PASSWORD_LINK_LIFETIME`].
    Expired,
    /// Unknown, already used, or replaced by a newer link.
    Invalid,
}

impl LinkCheck {
    /// `Ok` for a valid link, otherwise the refusal that says why.
    pub fn check(&self) -> Result<()> {
        match self {
            LinkCheck::Valid { .. } => Ok(()),
            other => Err(other.refusal()),
        }
    }

    fn refusal(&self) -> CoreError {
        let reason = match self {
            LinkCheck::Expired => "this link has expired (links work for 24 hours); ask an admin for a new one",
            _ => "this link is no longer valid (it was used, or replaced by a newer one)",
        };
        CoreError::Invalid { field: "token", reason: reason.into() }
    }
}

/// A one-time link just made: the only time its token is visible.
#[derive(Debug, Clone)]
pub struct IssuedLink {
    /// Whose password it sets.
    pub username: String,
    /// Invite or reset.
    pub purpose: LinkPurpose,
    /// The token (goes in the link; only its hash is stored).
    pub token: String,
    /// When it stops working (Unix ms).
    pub expires_ms: i64,
}

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
    live: LiveHub,
    max_sessions: usize,
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

/// Run on the hashing thread after every password hash; see [`after_each_hash`].
static AFTER_HASH: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets what runs on the hashing thread after every password hash (once per
/// process; later calls are ignored). The binary hands each hash's working
/// memory (19 MiB, argon2's default) back to the operating system with it:
/// its allocator would otherwise keep what a burst of sign-ins freed.
pub fn after_each_hash(release: fn()) {
    let _ = AFTER_HASH.set(release);
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
        Self {
            db,
            clock,
            gate: Arc::new(HashingGate::per_core()),
            live: LiveHub::new(),
            max_sessions: crate::PerUser::default().browser_sessions,
        }
    }

    /// The same store, keeping at most `max` browser sessions per user
    /// (`max_browser_sessions_per_user`): a sign-in past it ends the oldest.
    pub fn with_max_sessions(self, max: usize) -> Self {
        Self { max_sessions: max.max(1), ..self }
    }

    /// The same store, announcing user changes and ended sessions on `live`
    /// (so pages re-read, and live streams of an ended session close).
    pub fn with_live(self, live: LiveHub) -> Self {
        Self { live, ..self }
    }

    fn changed<T>(&self, result: T) -> T {
        self.live.publish(LiveEvent::UsersChanged);
        result
    }

    /// Whether the browser session stored as `hash` still signs its user in
    /// (live, and the user not disabled).
    pub fn session_live(&self, session: &BrowserSession) -> Result<bool> {
        self.db.conn()?.query_one(
            "SELECT EXISTS(SELECT 1 FROM browser_sessions s JOIN users u ON u.id = s.user_id
             WHERE s.token_hash = ?1 AND s.expires_at > ?2 AND u.disabled_at IS NULL)",
            args![session.0, self.clock.now_ms()],
            |r| r.get(0),
        )
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
            if let Some(release) = AFTER_HASH.get() {
                release();
            }
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
        self.db.conn()?.query_one("SELECT COUNT(*) FROM users", args![], |r| r.get(0))
    }

    /// Creates a user. Hashing is slow on purpose: call from a blocking context.
    pub fn add(&self, username: &str, password: &str, is_admin: bool) -> Result<User> {
        validate_username(username)?;
        validate_password(password)?;
        let hash = hash_password(password)?;
        let now = self.clock.now_ms();
        match self.db.conn()?.query_one(
            "INSERT INTO users (username, password_hash, is_admin, created_at) VALUES (?1, ?2, ?3, ?4) RETURNING id",
            args![username, hash, is_admin, now],
            |r| r.get(0),
        ) {
            Ok(id) => Ok(User { id, username: username.into(), is_admin }),
            Err(CoreError::Db(e)) if e.is_unique_violation() => Err(CoreError::Conflict(format!("user {username:?}"))),
            Err(e) => Err(e),
        }
    }

    /// Checks a name and password (slow on purpose: call from a blocking
    /// context). A disabled user, or an invited one without a password yet,
    /// never matches; every refusal costs the same hash.
    pub fn verify_password(&self, username: &str, password: &str) -> Result<Option<User>> {
        let row: Option<(i64, String, bool)> = self.db.conn()?.query_opt(
            "SELECT id, password_hash, is_admin FROM users
             WHERE username = ?1 AND disabled_at IS NULL AND password_hash != ''",
            args![username],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let stored = row.as_ref().map(|(_, h, _)| h.as_str()).unwrap_or_else(|| dummy_hash());
        let parsed = PasswordHash::new(stored).map_err(|e| CoreError::Password(e.to_string()))?;
        let ok = Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok();
        Ok(match (ok, row) {
            (true, Some((id, _, is_admin))) => Some(User { id, username: username.into(), is_admin }),
            _ => None,
        })
    }

    /// Opens a browser session for `user`; returns the cookie value (shown
    /// once). A user keeps at most `max_browser_sessions_per_user` sessions:
    /// signing in past it ends their oldest one(s) rather than refusing the
    /// person at the keyboard (expired ones go first, being the oldest).
    pub fn create_session(&self, user: &User) -> Result<String> {
        let token = secret::new_token();
        let hash = secret::hash(&token);
        let now = self.clock.now_ms();
        let keep_others = self.max_sessions.saturating_sub(1);
        let evicted = self.db.conn()?.transaction(|tx| {
            tx.execute(
                "INSERT INTO browser_sessions (token_hash, user_id, created_at, expires_at) VALUES (?1, ?2, ?3, ?4)",
                args![hash, user.id, now, now + SESSION_LIFETIME.as_millis() as i64],
            )?;
            tx.execute(
                "DELETE FROM browser_sessions WHERE user_id = ?1 AND token_hash != ?2 AND token_hash NOT IN (
                     SELECT token_hash FROM browser_sessions WHERE user_id = ?1 AND token_hash != ?2
                     ORDER BY created_at DESC, token_hash DESC LIMIT ?3)",
                args![user.id, hash, keep_others],
            )
        })?;
        if evicted > 0 {
            tracing::info!(
                user = %user.username,
                ended = evicted,
                "sign-in past max_browser_sessions_per_user ended the oldest browser session(s)"
            );
            self.live.publish(LiveEvent::UsersChanged);
        }
        Ok(token)
    }

    /// The user behind a session cookie, if the session is live.
    pub fn session_user(&self, token: &str) -> Result<Option<User>> {
        self.db.conn()?.query_opt(
            "SELECT u.id, u.username, u.is_admin FROM browser_sessions s JOIN users u ON u.id = s.user_id
             WHERE s.token_hash = ?1 AND s.expires_at > ?2 AND u.disabled_at IS NULL",
            args![secret::hash(token), self.clock.now_ms()],
            |r| Ok(User { id: r.get(0)?, username: r.get(1)?, is_admin: r.get(2)? }),
        )
    }

    /// Ends a browser session.
    pub fn end_session(&self, token: &str) -> Result<()> {
        self.db.conn()?.execute("DELETE FROM browser_sessions WHERE token_hash = ?1", args![secret::hash(token)])?;
        self.changed(());
        Ok(())
    }

    /// Deletes browser sessions that have expired (they no longer sign anyone
    /// in, but their rows would pile up); returns how many.
    pub fn purge_expired_sessions(&self) -> Result<usize> {
        let n = self
            .db
            .conn()?
            .execute("DELETE FROM browser_sessions WHERE expires_at <= ?1", args![self.clock.now_ms()])?;
        if n > 0 {
            // Live streams of an expired session close.
            self.changed(());
        }
        Ok(n)
    }

    /// How many browser sessions are stored (live or not yet purged).
    pub fn stored_sessions(&self) -> Result<i64> {
        self.db.conn()?.query_one("SELECT COUNT(*) FROM browser_sessions", args![], |r| r.get(0))
    }

    /// Ends every browser session of `user_id` but the one whose cookie
    /// hashes to `keep`; returns how many ended.
    pub fn end_other_sessions(&self, user_id: i64, keep: &BrowserSession) -> Result<usize> {
        let n = self
            .db
            .conn()?
            .execute("DELETE FROM browser_sessions WHERE user_id = ?1 AND token_hash != ?2", args![user_id, keep.0])?;
        Ok(self.changed(n))
    }

    /// How many live browser sessions `user_id` has.
    pub fn live_sessions(&self, user_id: i64) -> Result<usize> {
        self.db.conn()?.query_one(
            "SELECT COUNT(*) FROM browser_sessions WHERE user_id = ?1 AND expires_at > ?2",
            args![user_id, self.clock.now_ms()],
            |r| r.get(0),
        )
    }

    /// Every user, by name, with their status, sessions and any unused link.
    pub fn list(&self) -> Result<Vec<UserView>> {
        self.db.conn()?.query(
            "SELECT u.username, u.is_admin, u.password_hash = '', u.disabled_at IS NOT NULL, u.created_at,
                    (SELECT MAX(l.expires_at) FROM password_links l WHERE l.user_id = u.id AND l.expires_at > ?1),
                    (SELECT COUNT(*) FROM browser_sessions s WHERE s.user_id = u.id AND s.expires_at > ?1)
             FROM users u ORDER BY u.username",
            args![self.clock.now_ms()],
            |r| {
                let (invited, disabled): (bool, bool) = (r.get(2)?, r.get(3)?);
                Ok(UserView {
                    username: r.get(0)?,
                    is_admin: r.get(1)?,
                    status: if disabled {
                        UserStatus::Disabled
                    } else if invited {
                        UserStatus::Invited
                    } else {
                        UserStatus::Active
                    },
                    created_ms: r.get(4)?,
                    link_expires_ms: r.get(5)?,
                    sessions: r.get(6)?,
                })
            },
        )
    }

    /// Adds a user without a password and makes the one-time link with
    /// which they choose one (an invite).
    pub fn invite(&self, username: &str, is_admin: bool) -> Result<IssuedLink> {
        validate_username(username)?;
        let link = self.db.conn()?.transaction(|tx| {
            let id: i64 = match tx.query_one(
                "INSERT INTO users (username, password_hash, is_admin, created_at) VALUES (?1, '', ?2, ?3) RETURNING id",
                args![username, is_admin, self.clock.now_ms()],
                |r| r.get(0),
            ) {
                Ok(id) => id,
                Err(CoreError::Db(e)) if e.is_unique_violation() => {
                    return Err(CoreError::Conflict(format!("user {username:?}")));
                }
                Err(e) => return Err(e),
            };
            self.make_link(tx, id, username, LinkPurpose::Invite)
        })?;
        Ok(self.changed(link))
    }

    /// A new one-time link for `username` (an invite again if they never
    /// chose a password, otherwise a reset), replacing any earlier one. The
    /// current password keeps working until the link is used.
    pub fn new_link(&self, username: &str) -> Result<IssuedLink> {
        let link = self.db.conn()?.transaction(|tx| {
            let (id, invited, disabled) = user_row(tx, username)?;
            if disabled {
                return Err(CoreError::Refused(format!("{username} is disabled: enable them first")));
            }
            let purpose = if invited { LinkPurpose::Invite } else { LinkPurpose::Reset };
            self.make_link(tx, id, username, purpose)
        })?;
        Ok(self.changed(link))
    }

    fn make_link(&self, tx: &mut Conn<'_>, user_id: i64, username: &str, purpose: LinkPurpose) -> Result<IssuedLink> {
        let token = secret::new_token();
        let now = self.clock.now_ms();
        let expires_ms = now + PASSWORD_LINK_LIFETIME.as_millis() as i64;
        tx.execute("DELETE FROM password_links WHERE user_id = ?1", args![user_id])?;
        tx.execute(
            "INSERT INTO password_links (token_hash, user_id, purpose, created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            args![secret::hash(&token), user_id, purpose.as_str(), now, expires_ms],
        )?;
        Ok(IssuedLink { username: username.into(), purpose, token, expires_ms })
    }

    /// What the link `token` is: valid (for whom), expired, or invalid.
    /// Cheap (no password hashing), so callers check it before hashing.
    pub fn password_link(&self, token: &str) -> Result<LinkCheck> {
        let row: Option<(String, String, i64)> = self.db.conn()?.query_opt(
            "SELECT u.username, l.purpose, l.expires_at FROM password_links l JOIN users u ON u.id = l.user_id
             WHERE l.token_hash = ?1 AND u.disabled_at IS NULL",
            args![secret::hash(token)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        Ok(match row {
            None => LinkCheck::Invalid,
            Some((_, _, expires)) if expires <= self.clock.now_ms() => LinkCheck::Expired,
            Some((username, purpose, _)) => match LinkPurpose::parse(&purpose) {
                Some(purpose) => LinkCheck::Valid { username, purpose },
                None => LinkCheck::Invalid,
            },
        })
    }

    /// Sets a password with a one-time link, consuming it; every browser
    /// session the user had ends (a reset may follow a stolen password).
    /// The link is checked before the password is hashed and again, inside
    /// the transaction, after.
    pub fn use_password_link(&self, token: &str, password: &str) -> Result<User> {
        self.password_link(token)?.check()?;
        validate_password(password)?;
        let hash = hash_password(password)?;
        let user = self.db.conn()?.transaction(|tx| {
            let row: Option<(i64, String, bool)> = tx.query_opt(
                "SELECT u.id, u.username, u.is_admin FROM password_links l JOIN users u ON u.id = l.user_id
                 WHERE l.token_hash = ?1 AND l.expires_at > ?2 AND u.disabled_at IS NULL",
                args![secret::hash(token), self.clock.now_ms()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            let Some((id, username, is_admin)) = row else {
                return Err(LinkCheck::Invalid.refusal());
            };
            tx.execute("UPDATE users SET password_hash = ?1 WHERE id = ?2", args![hash, id])?;
            tx.execute("DELETE FROM password_links WHERE user_id = ?1", args![id])?;
            tx.execute("DELETE FROM browser_sessions WHERE user_id = ?1", args![id])?;
            Ok(User { id, username, is_admin })
        })?;
        Ok(self.changed(user))
    }

    /// [`UserStore::use_password_link`] through the hashing gate, off the async workers.
    pub async fn set_password_with_link(&self, token: String, password: String) -> Result<User> {
        self.hashed(move |users| users.use_password_link(&token, &password)).await
    }

    /// Changes `user`'s own password if `current` is right (`false` if not),
    /// and ends their other browser sessions (`keep` stays signed in).
    pub fn change_password(&self, user: &User, current: &str, new: &str, keep: &BrowserSession) -> Result<bool> {
        validate_password(new)?;
        if self.verify_password(&user.username, current)?.is_none_or(|u| u.id != user.id) {
            return Ok(false);
        }
        let hash = hash_password(new)?;
        self.db.conn()?.transaction(|tx| {
            tx.execute("UPDATE users SET password_hash = ?1 WHERE id = ?2", args![hash, user.id])?;
            tx.execute("DELETE FROM browser_sessions WHERE user_id = ?1 AND token_hash != ?2", args![user.id, keep.0])?;
            tx.execute("DELETE FROM password_links WHERE user_id = ?1", args![user.id])?;
            Ok(())
        })?;
        Ok(self.changed(true))
    }

    /// [`UserStore::change_password`] through the hashing gate, off the async workers.
    pub async fn change_own_password(
        &self,
        user: User,
        current: String,
        new: String,
        keep: BrowserSession,
    ) -> Result<bool> {
        self.hashed(move |users| users.change_password(&user, &current, &new, &keep)).await
    }

    /// Disables `username` (they cannot sign in; their browser sessions and
    /// any unused link end at once) or enables them again. Returns whether
    /// anything changed. The last admin who can sign in is never disabled.
    pub fn set_disabled(&self, username: &str, disabled: bool) -> Result<bool> {
        let changed = self.db.conn()?.transaction(|tx| {
            let (id, _, was_disabled) = user_row(tx, username)?;
            if was_disabled == disabled {
                return Ok(false);
            }
            if disabled {
                keep_an_admin(tx, id, username, "disable")?;
                tx.execute("UPDATE users SET disabled_at = ?1 WHERE id = ?2", args![self.clock.now_ms(), id])?;
                tx.execute("DELETE FROM browser_sessions WHERE user_id = ?1", args![id])?;
                tx.execute("DELETE FROM password_links WHERE user_id = ?1", args![id])?;
            } else {
                tx.execute("UPDATE users SET disabled_at = NULL WHERE id = ?1", args![id])?;
            }
            Ok(true)
        })?;
        Ok(if changed { self.changed(true) } else { false })
    }

    /// Makes `username` an admin or not; returns whether anything changed.
    /// The last admin who can sign in is never demoted.
    pub fn set_admin(&self, username: &str, admin: bool) -> Result<bool> {
        let changed = self.db.conn()?.transaction(|tx| {
            let (id, _, _) = user_row(tx, username)?;
            let was: bool = tx.query_one("SELECT is_admin FROM users WHERE id = ?1", args![id], |r| r.get(0))?;
            if was == admin {
                return Ok(false);
            }
            if !admin {
                keep_an_admin(tx, id, username, "demote")?;
            }
            tx.execute("UPDATE users SET is_admin = ?1 WHERE id = ?2", args![admin, id])?;
            Ok(true)
        })?;
        Ok(if changed { self.changed(true) } else { false })
    }

    /// Removes `username`, their browser sessions and links, their OAuth
    /// codes not yet exchanged and their agents' OAuth tokens; their history
    /// stays (admins read it under the name) but is no user's any more, so
    /// a user added later with the same name never reads it. Their agents'
    /// credentials are the credential store's (revoke them by owner), their
    /// grants the grant store's. The last admin who can sign in is never removed.
    pub fn remove(&self, username: &str) -> Result<()> {
        self.db.conn()?.transaction(|tx| {
            let (id, _, _) = user_row(tx, username)?;
            keep_an_admin(tx, id, username, "remove")?;
            // History is read by owner id: once cleared, no one's (SQLite
            // may give a later user this id again).
            tx.execute("UPDATE audit_events SET owner_id = NULL WHERE owner_id = ?1", args![id])?;
            tx.execute("DELETE FROM oauth_codes WHERE owner = ?1", args![username])?;
            tx.execute(
                "DELETE FROM oauth_tokens WHERE credential_id IN (SELECT id FROM credentials WHERE owner = ?1)",
                args![username],
            )?;
            // Sessions and links go with the row (ON DELETE CASCADE).
            tx.execute("DELETE FROM users WHERE id = ?1", args![id])?;
            Ok(())
        })?;
        self.changed(());
        Ok(())
    }

    /// Makes a fresh one-time setup token if no user exists yet (replacing any
    /// earlier one); `None` once set up.
    pub fn new_setup_token(&self) -> Result<Option<String>> {
        if self.count()? > 0 {
            return Ok(None);
        }
        let token = secret::new_token();
        let mut conn = self.db.conn()?;
        conn.execute("DELETE FROM setup_tokens", args![])?;
        conn.execute(
            "INSERT INTO setup_tokens (token_hash, created_at) VALUES (?1, ?2)",
            args![secret::hash(&token), self.clock.now_ms()],
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
        let created: Option<i64> = self.db.conn()?.query_opt(
            "SELECT created_at FROM setup_tokens WHERE token_hash = ?1 AND NOT EXISTS(SELECT 1 FROM users)",
            args![secret::hash(token)],
            |r| r.get(0),
        )?;
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
        let id = self.db.conn()?.transaction(|tx| {
            // Checked again inside the transaction: another request may have
            // finished setup, or the link expired, while the password was hashed.
            let fresh_since = self.clock.now_ms() - SETUP_TOKEN_LIFETIME.as_millis() as i64;
            let consumed = tx.execute(
                "DELETE FROM setup_tokens WHERE token_hash = ?1 AND created_at > ?2 AND NOT EXISTS(SELECT 1 FROM users)",
                args![secret::hash(token), fresh_since],
            )?;
            if consumed == 0 {
                return Err(SetupToken::Invalid.refusal());
            }
            let id: i64 = tx.query_one(
                "INSERT INTO users (username, password_hash, is_admin, created_at) VALUES (?1, ?2, 1, ?3) RETURNING id",
                args![username, hash, self.clock.now_ms()],
                |r| r.get(0),
            )?;
            tx.execute("DELETE FROM setup_tokens", args![])?;
            Ok(id)
        })?;
        Ok(User { id, username: username.into(), is_admin: true })
    }
}

/// `username`'s id, whether they are only invited (no password), and whether disabled.
fn user_row(tx: &mut Conn<'_>, username: &str) -> Result<(i64, bool, bool)> {
    tx.query_opt(
        "SELECT id, password_hash = '', disabled_at IS NOT NULL FROM users WHERE username = ?1",
        args![username],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?
    .ok_or_else(|| CoreError::NotFound(format!("user {username:?}")))
}

/// Refuses to `what` (disable, demote, remove) user `id` when no other
/// admin could still sign in afterwards.
fn keep_an_admin(tx: &mut Conn<'_>, id: i64, username: &str, what: &str) -> Result<()> {
    const CAN_SIGN_IN: &str = "is_admin = 1 AND disabled_at IS NULL AND password_hash != ''";
    let is_one: bool =
        tx.query_one(&format!("SELECT EXISTS(SELECT 1 FROM users WHERE id = ?1 AND {CAN_SIGN_IN})"), args![id], |r| {
            r.get(0)
        })?;
    let others: i64 =
        tx.query_one(&format!("SELECT COUNT(*) FROM users WHERE id != ?1 AND {CAN_SIGN_IN}"), args![id], |r| r.get(0))?;
    if is_one && others == 0 {
        return Err(CoreError::Refused(format!(
            "cannot {what} {username}: they are the last admin who can sign in; make another user an admin first"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn store() -> (UserStore, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        (UserStore::new(Db::for_tests().unwrap(), clock.clone()), clock)
    }

    #[test]
    fn passwords_verify_and_are_not_stored_plainly() {
        let (users, _) = store();
        users.add("ada", "correct horse", false).unwrap();
        assert!(users.verify_password("ada", "correct horse").unwrap().is_some());
        assert!(users.verify_password("ada", "wrong horse!").unwrap().is_none());
        assert!(users.verify_password("bob", "correct horse").unwrap().is_none());
        let stored: String =
            users.db.conn().unwrap().query_one("SELECT password_hash FROM users", args![], |r| r.get(0)).unwrap();
        assert!(stored.starts_with("$argon2id$"));
        assert!(matches!(users.add("ada", "another one", false), Err(CoreError::Conflict(_))));
    }

    #[test]
    fn sessions_are_hashed_and_expire() {
        let (users, clock) = store();
        let ada = users.add("ada", "correct horse", true).unwrap();
        let cookie = users.create_session(&ada).unwrap();
        assert_eq!(users.session_user(&cookie).unwrap(), Some(ada));
        let stored: String = users
            .db
            .conn()
            .unwrap()
            .query_one("SELECT token_hash FROM browser_sessions", args![], |r| r.get(0))
            .unwrap();
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

    #[test]
    fn an_invite_link_sets_the_first_password_once() {
        let (users, _) = store();
        let link = users.invite("bob", false).unwrap();
        assert_eq!(link.purpose, LinkPurpose::Invite);
        let stored: String =
            users.db.conn().unwrap().query_one("SELECT token_hash FROM password_links", args![], |r| r.get(0)).unwrap();
        assert_eq!(stored, secret::hash(&link.token), "only the hash is kept");
        assert_eq!(users.list().unwrap()[0].status, UserStatus::Invited);
        assert!(users.verify_password("bob", "").unwrap().is_none(), "no password yet signs nobody in");
        assert_eq!(
            users.password_link(&link.token).unwrap(),
            LinkCheck::Valid { username: "bob".into(), purpose: LinkPurpose::Invite }
        );
        assert!(matches!(
            users.use_password_link(&link.token, "short"),
            Err(CoreError::Invalid { field: "password", .. })
        ));
        let bob = users.use_password_link(&link.token, "bobs password").unwrap();
        assert!(!bob.is_admin);
        assert_eq!(users.verify_password("bob", "bobs password").unwrap(), Some(bob));
        assert_eq!(users.password_link(&link.token).unwrap(), LinkCheck::Invalid);
        assert!(users.use_password_link(&link.token, "another password").is_err(), "used once");
        assert!(matches!(users.invite("bob", true), Err(CoreError::Conflict(_))));
        assert_eq!(users.list().unwrap()[0].status, UserStatus::Active);
    }

    #[test]
    fn links_expire_and_a_newer_link_replaces_the_older() {
        let (users, clock) = store();
        let first = users.invite("bob", false).unwrap();
        let second = users.new_link("bob").unwrap();
        assert_eq!(second.purpose, LinkPurpose::Invite, "still an invite: no password yet");
        assert_eq!(users.password_link(&first.token).unwrap(), LinkCheck::Invalid);
        clock.advance(PASSWORD_LINK_LIFETIME);
        assert_eq!(users.password_link(&second.token).unwrap(), LinkCheck::Expired);
        let err = users.use_password_link(&second.token, "bobs password").unwrap_err().to_string();
        assert!(err.contains("expired"), "{err}");
        assert_eq!(users.list().unwrap()[0].link_expires_ms, None);
    }

    #[test]
    fn a_reset_link_replaces_the_password_and_ends_every_session() {
        let (users, _) = store();
        let ada = users.add("ada", "old password", false).unwrap();
        let cookie = users.create_session(&ada).unwrap();
        let link = users.new_link("ada").unwrap();
        assert_eq!(link.purpose, LinkPurpose::Reset);
        assert!(users.verify_password("ada", "old password").unwrap().is_some(), "works until the link is used");
        users.use_password_link(&link.token, "new password").unwrap();
        assert!(users.verify_password("ada", "old password").unwrap().is_none());
        assert!(users.verify_password("ada", "new password").unwrap().is_some());
        assert_eq!(users.session_user(&cookie).unwrap(), None);
    }

    #[test]
    fn disabling_ends_sessions_and_sign_in_until_enabled() {
        let (users, _) = store();
        users.add("root", "root password", true).unwrap();
        let bob = users.add("bob", "bobs password", false).unwrap();
        let cookie = users.create_session(&bob).unwrap();
        let link = users.new_link("bob").unwrap();
        assert!(users.set_disabled("bob", true).unwrap());
        assert!(!users.set_disabled("bob", true).unwrap(), "already disabled");
        assert_eq!(users.session_user(&cookie).unwrap(), None);
        assert_eq!(users.stored_sessions().unwrap(), 0, "the rows are gone, not just refused");
        assert!(users.verify_password("bob", "bobs password").unwrap().is_none());
        assert_eq!(users.password_link(&link.token).unwrap(), LinkCheck::Invalid, "links end too");
        assert!(matches!(users.new_link("bob"), Err(CoreError::Refused(_))));
        assert_eq!(users.list().unwrap()[0].status, UserStatus::Disabled);
        assert!(users.set_disabled("bob", false).unwrap());
        assert!(users.verify_password("bob", "bobs password").unwrap().is_some());
        assert!(matches!(users.set_disabled("nobody", true), Err(CoreError::NotFound(_))));
    }

    #[test]
    fn the_last_admin_who_can_sign_in_is_kept() {
        let (users, _) = store();
        users.add("root", "root password", true).unwrap();
        // An invited admin cannot sign in yet, so does not count.
        users.invite("pending", true).unwrap();
        for refused in
            [users.set_disabled("root", true), users.set_admin("root", false), users.remove("root").map(|_| true)]
        {
            let err = refused.unwrap_err();
            assert!(matches!(err, CoreError::Refused(_)) && err.to_string().contains("last admin"), "{err}");
        }
        users.add("ada", "ada password", false).unwrap();
        assert!(users.set_admin("ada", true).unwrap());
        assert!(users.set_admin("root", false).unwrap(), "ada is an admin now");
        assert!(matches!(users.set_disabled("ada", true), Err(CoreError::Refused(_))));
        users.remove("pending").unwrap();
        assert!(users.set_admin("root", true).unwrap());
        users.remove("ada").unwrap();
        assert_eq!(users.list().unwrap().iter().map(|u| u.username.as_str()).collect::<Vec<_>>(), ["root"]);
    }

    #[test]
    fn removing_a_user_removes_their_sessions_and_links() {
        let (users, _) = store();
        users.add("root", "root password", true).unwrap();
        let bob = users.add("bob", "bobs password", false).unwrap();
        let cookie = users.create_session(&bob).unwrap();
        let link = users.new_link("bob").unwrap();
        users.remove("bob").unwrap();
        assert_eq!(users.session_user(&cookie).unwrap(), None);
        assert_eq!(users.stored_sessions().unwrap(), 0);
        assert_eq!(users.password_link(&link.token).unwrap(), LinkCheck::Invalid);
        assert!(matches!(users.remove("bob"), Err(CoreError::NotFound(_))));
    }

    #[test]
    fn a_sign_in_past_max_browser_sessions_ends_the_oldest_session() {
        let (users, clock) = store();
        let users = users.with_max_sessions(2);
        let ada = users.add("ada", "a password", false).unwrap();
        let bob = users.add("bob", "a password", false).unwrap();
        let bobs = users.create_session(&bob).unwrap();
        let first = users.create_session(&ada).unwrap();
        clock.advance(Duration::from_secs(1));
        let second = users.create_session(&ada).unwrap();
        clock.advance(Duration::from_secs(1));
        let third = users.create_session(&ada).unwrap();
        assert_eq!(users.session_user(&first).unwrap(), None, "the oldest ended");
        assert!(users.session_user(&second).unwrap().is_some());
        assert!(users.session_user(&third).unwrap().is_some());
        assert_eq!(users.live_sessions(ada.id).unwrap(), 2);
        assert!(users.session_user(&bobs).unwrap().is_some(), "another user's sessions are not touched");
    }

    #[test]
    fn own_password_changes_need_the_current_one_and_keep_this_session_only() {
        let (users, _) = store();
        let ada = users.add("ada", "old password", false).unwrap();
        let here = users.create_session(&ada).unwrap();
        let elsewhere = users.create_session(&ada).unwrap();
        let keep = BrowserSession(secret::hash(&here));
        assert!(!users.change_password(&ada, "wrong password", "new password", &keep).unwrap());
        assert!(users.session_user(&elsewhere).unwrap().is_some(), "a wrong current password changes nothing");
        assert!(users.change_password(&ada, "old password", "new password", &keep).unwrap());
        assert!(users.verify_password("ada", "new password").unwrap().is_some());
        assert!(users.session_user(&here).unwrap().is_some());
        assert_eq!(users.session_user(&elsewhere).unwrap(), None);
        let third = users.create_session(&ada).unwrap();
        assert_eq!(users.live_sessions(ada.id).unwrap(), 2);
        assert_eq!(users.end_other_sessions(ada.id, &keep).unwrap(), 1);
        assert_eq!(users.session_user(&third).unwrap(), None);
        assert!(users.session_user(&here).unwrap().is_some());
    }

    // The store is made, filled and dropped outside the runtime: on
    // PostgreSQL those calls block, which async workers must not do.
    #[test]
    fn hashing_gate_bounds_concurrent_hashes() {
        // The only test that sets the hook: it counts every hash in this process.
        static RELEASED: AtomicUsize = AtomicUsize::new(0);
        after_each_hash(|| {
            RELEASED.fetch_add(1, Ordering::SeqCst);
        });
        let (users, _) = store();
        users.add("ada", "correct horse", false).unwrap();
        let users = UserStore { gate: Arc::new(HashingGate::new(2)), ..users };
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async {
            let mut attempts = tokio::task::JoinSet::new();
            for _ in 0..8 {
                let users = users.clone();
                attempts.spawn(async move { users.sign_in("ada".into(), "correct horse".into()).await });
            }
            while let Some(result) = attempts.join_next().await {
                assert!(result.unwrap().unwrap().is_some());
            }
        });
        assert!((1..=2).contains(&users.hashing().peak()), "peak {}", users.hashing().peak());
        assert!(RELEASED.load(Ordering::SeqCst) >= 8, "the release hook runs after every sign-in's hash");
    }
}
