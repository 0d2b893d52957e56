//! Invite and reset links: one-time, stored as hashes, with which a user
//! chooses a password.

use super::*;

/// How long an invite or reset link works after an admin made it.
pub const PASSWORD_LINK_LIFETIME: Duration = Duration::from_secs(24 * 3600);

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

impl UserStore {
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

    pub(super) fn make_link(
        &self,
        tx: &mut Conn<'_>,
        user_id: i64,
        username: &str,
        purpose: LinkPurpose,
    ) -> Result<IssuedLink> {
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
            Ok(User { id: id.into(), username, is_admin })
        })?;
        Ok(self.changed(user))
    }

    /// [`UserStore::use_password_link`] through the hashing gate, off the async workers.
    pub async fn set_password_with_link(&self, token: String, password: String) -> Result<User> {
        self.hashed(move |users| users.use_password_link(&token, &password)).await
    }
}
