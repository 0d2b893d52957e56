//! Admin API tokens: how orchestrators authenticate to the admin API without a
//! browser. Stored as SHA-256 only.

use std::sync::Arc;

use serde::Serialize;

use crate::args;
use crate::clock::{Clock, rfc3339};
use crate::db::Db;
use crate::error::{CoreError, Result};
use crate::secret;

/// A freshly issued admin API token (the only time the token is visible).
#[derive(Debug, Clone, Serialize)]
pub struct IssuedApiToken {
    /// `api_…`
    pub id: String,
    /// What it is for.
    pub name: String,
    /// The bearer token.
    pub token: String,
}

/// A stored admin API token.
#[derive(Debug, Clone, Serialize)]
pub struct ApiToken {
    /// `api_…`
    pub id: String,
    /// What it is for.
    pub name: String,
    /// RFC 3339 issue time.
    pub created_at: String,
    /// The same, in Unix ms.
    pub created_ms: i64,
    /// Whether it was revoked.
    pub revoked: bool,
}

/// Store of admin API tokens.
#[derive(Clone)]
pub struct ApiTokenStore {
    db: Db,
    clock: Arc<dyn Clock>,
}

impl ApiTokenStore {
    /// A store over `db`.
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock }
    }

    /// Issues a token named `name`.
    pub fn issue(&self, name: &str) -> Result<IssuedApiToken> {
        if name.trim().is_empty() || name.len() > 200 {
            return Err(CoreError::Invalid { field: "name", reason: "must be 1 to 200 characters".into() });
        }
        let token = secret::new_token();
        let id = secret::new_id("api");
        self.db.conn()?.execute(
            "INSERT INTO api_tokens (id, name, token_hash, created_at) VALUES (?1, ?2, ?3, ?4)",
            args![id, name, secret::hash(&token), self.clock.now_ms()],
        )?;
        Ok(IssuedApiToken { id, name: name.into(), token })
    }

    /// The id of a live token matching `token`.
    pub fn authenticate(&self, token: &str) -> Result<Option<String>> {
        self.db.conn()?.query_opt(
            "SELECT id FROM api_tokens WHERE token_hash = ?1 AND revoked_at IS NULL",
            args![secret::hash(token)],
            |r| r.get(0),
        )
    }

    /// Revokes a token; `false` if none was live under that id.
    pub fn revoke(&self, id: &str) -> Result<bool> {
        Ok(self.db.conn()?.execute(
            "UPDATE api_tokens SET revoked_at = ?1 WHERE id = ?2 AND revoked_at IS NULL",
            args![self.clock.now_ms(), id],
        )? > 0)
    }

    /// All tokens, newest first.
    pub fn list(&self) -> Result<Vec<ApiToken>> {
        self.db.conn()?.query(
            "SELECT id, name, created_at, revoked_at IS NOT NULL FROM api_tokens ORDER BY created_at DESC",
            args![],
            |r| {
                let created_ms: i64 = r.get(2)?;
                Ok(ApiToken {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    created_at: rfc3339(created_ms),
                    created_ms,
                    revoked: r.get(3)?,
                })
            },
        )
    }
}
