//! Users (argon2id passwords), browser sessions (stored hashed), the
//! one-time setup token that creates the first admin, and the one-time
//! invite and reset links (stored hashed) with which a user chooses a password.

mod browser_sessions;
mod hashing;
mod links;
mod setup;
#[cfg(test)]
mod tests;

pub use browser_sessions::{BrowserSession, SESSION_LIFETIME};
pub use hashing::{HashingGate, after_each_hash};
use hashing::{hash_password, validate_password};
pub use links::{IssuedLink, LinkCheck, PASSWORD_LINK_LIFETIME};
pub use setup::{SETUP_TOKEN_LIFETIME, SetupToken};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use serde::{Deserialize, Serialize};

use gatehouse_model::Actor;

use crate::args;
use crate::clock::Clock;
use crate::db::{Conn, Db};
use crate::error::{CoreError, Result};
use crate::live::{LiveEvent, LiveHub};
use crate::secret;

pub use gatehouse_model::{LinkPurpose, UserId, UserStatus, UserView};

/// A signed-in person.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct User {
    /// Row id.
    pub id: UserId,
    /// Unique name.
    pub username: String,
    /// Admins see and decide everything.
    pub is_admin: bool,
}

impl User {
    /// How the record names them: by id and name ([`Actor::Person`]).
    pub fn actor(&self) -> Actor {
        Actor::person(self.id, &self.username)
    }
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
        // The entries still queued for the log are the user's too.
        self.db.flush_writes();
        self.db.conn()?.transaction(|tx| {
            let (id, _, _) = user_row(tx, username)?;
            keep_an_admin(tx, id, username, "remove")?;
            // What is theirs is found by owner id: once cleared, no one's
            // (SQLite may give a later user this id again).
            for table in ["audit_events", "credentials", "task_results", "pending_executions"] {
                tx.execute(&format!("UPDATE {table} SET owner_id = NULL WHERE owner_id = ?1"), args![id])?;
            }
            // A grant is matched by owner id: one left without it would be
            // an owner-less agent's. Their grants end here, whatever ended
            // them before.
            tx.execute("DELETE FROM grants WHERE owner_id = ?1", args![id])?;
            // Whatever still names them names them as no user can be named
            // (a username has no space, parenthesis or '#'): a later user
            // who takes the name, even on an old thread with an old agent
            // name, is not their credentials' successor, does not read their
            // calls or task results, and inherits no rate count or secret.
            let tomb = removed_name(username, id);
            for table in ["credentials", "audit_events", "task_results", "grants"] {
                tx.execute(&format!("UPDATE {table} SET owner = ?1 WHERE owner = ?2"), args![tomb.as_str(), username])?;
            }
            // Their decisions and changes stay on the record under the tomb
            // name, with their id (and any entry written before ids were).
            let was = [
                Actor::person(id.into(), username).to_string(),
                Actor::Person { id: None, name: username.into() }.to_string(),
            ];
            let now = Actor::person(id.into(), &tomb).to_string();
            for (table, column) in
                [("audit_events", "actor"), ("changes", "actor"), ("grants", "created_by"), ("tool_pins", "pinned_by")]
            {
                tx.execute(
                    &format!("UPDATE {table} SET {column} = ?1 WHERE {column} = ?2 OR {column} = ?3"),
                    args![now.as_str(), was[0].as_str(), was[1].as_str()],
                )?;
            }
            tx.execute("DELETE FROM show_once WHERE viewer = ?1", args![username])?;
            let agents = format!("agent:{username}/");
            tx.execute(
                "DELETE FROM rate_counts WHERE subject = ?1 OR substr(subject, 1, ?3) = ?2",
                args![format!("owner:{username}"), agents.as_str(), agents.chars().count() as i64],
            )?;
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
}

/// What a removed user's name becomes wherever it was kept: `ada (removed
/// #7)`, which [`validate_username`] refuses, so it is no one's to take.
pub fn removed_name(username: &str, id: i64) -> String {
    format!("{username} (removed #{id})")
}

impl UserStore {
    /// `username`'s id, unless removing them would be refused (as
    /// [`UserStore::remove`] would be): the last admin who can sign in, or
    /// no such user. Checked before what goes with a user is ended.
    pub fn removable(&self, username: &str) -> Result<UserId> {
        self.db.conn()?.transaction(|tx| {
            let (id, _, _) = user_row(tx, username)?;
            keep_an_admin(tx, id, username, "remove")?;
            Ok(UserId::from(id))
        })
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
