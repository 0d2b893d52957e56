//! Browser sign-in sessions (the console's cookie, stored as its hash):
//! made at sign-in, bounded per user, ended at sign-out, by an admin or by
//! expiry. (Not an MCP session: those are `src/mcp/mcp_sessions.rs`.)

use super::*;

/// How long a browser session lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(14 * 24 * 3600);

/// Which browser session a request signed in with (the stored hash of its
/// cookie), for limits that apply per session and for "sign out my other
/// sessions".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserSession(pub String);

impl UserStore {
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
    pub fn end_other_sessions(&self, user_id: UserId, keep: &BrowserSession) -> Result<usize> {
        let n = self
            .db
            .conn()?
            .execute("DELETE FROM browser_sessions WHERE user_id = ?1 AND token_hash != ?2", args![user_id, keep.0])?;
        Ok(self.changed(n))
    }

    /// How many live browser sessions `user_id` has.
    pub fn live_sessions(&self, user_id: UserId) -> Result<usize> {
        self.db.conn()?.query_one(
            "SELECT COUNT(*) FROM browser_sessions WHERE user_id = ?1 AND expires_at > ?2",
            args![user_id, self.clock.now_ms()],
            |r| r.get(0),
        )
    }
}
