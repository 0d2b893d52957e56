//! Users (argon2id passwords), browser sessions (stored hashed) and the
//! one-time setup token that creates the first admin.

use std::sync::Arc;
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
        Self { db, clock }
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
        Ok(self.db.conn().query_row(
            "SELECT NOT EXISTS(SELECT 1 FROM users) AND EXISTS(SELECT 1 FROM setup_tokens WHERE token_hash = ?1)",
            [secret::hash(token)],
            |r| r.get(0),
        )?)
    }

    /// Creates the first admin with a setup token, consuming it. Fails if the
    /// token is wrong or someone already finished setup.
    pub fn complete_setup(&self, token: &str, username: &str, password: &str) -> Result<User> {
        validate_username(username)?;
        validate_password(password)?;
        let hash = hash_password(password)?;
        let mut conn = self.db.conn();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let consumed = tx.execute(
            "DELETE FROM setup_tokens WHERE token_hash = ?1 AND NOT EXISTS(SELECT 1 FROM users)",
            [secret::hash(token)],
        )?;
        if consumed == 0 {
            return Err(CoreError::Invalid { field: "token", reason: "this setup link is no longer valid".into() });
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
}
