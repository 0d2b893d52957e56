//! The one-time setup token that creates the first admin (printed while
//! no user exists).

use super::*;

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

impl UserStore {
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
        Ok(User { id: id.into(), username: username.into(), is_admin: true })
    }
}
