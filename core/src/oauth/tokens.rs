//! Authorization codes and tokens: a consent becomes a one-time code
//! (PKCE-bound), the code becomes access and refresh tokens, refresh
//! rotates them, revoke and authenticate read them.

use super::*;
use crate::model::CredentialId;

/// What a person approved on the consent page.
#[derive(Debug, Clone)]
pub struct Consent {
    /// The client asking.
    pub client_id: String,
    /// The redirect URI the code goes to (already matched).
    pub redirect_uri: String,
    /// The PKCE S256 challenge.
    pub code_challenge: String,
    /// The resource the tokens are for (this Gatehouse's `/mcp`).
    pub resource: String,
    /// The approving user, who will own the credential.
    pub owner: String,
    /// The agent name they chose.
    pub agent: String,
}

/// What the token endpoint hands out.
#[derive(Debug, Clone)]
pub struct Tokens {
    /// The access token (`gat_…`).
    pub access_token: String,
    /// The refresh token (`grt_…`).
    pub refresh_token: String,
    /// Seconds the access token lives.
    pub expires_in: Duration,
    /// The credential both stand for.
    pub credential_id: CredentialId,
}

/// Lifetimes of what the authorization server issues, and the bounds of
/// open registration.
#[derive(Debug, Clone, Copy)]
pub struct Lifetimes {
    /// Access tokens.
    pub access: Duration,
    /// Refresh tokens.
    pub refresh: Duration,
    /// Dynamic registration's bounds.
    pub registration: Registration,
}

struct CodeRow {
    client_id: String,
    owner: String,
    agent: String,
    redirect_uri: String,
    code_challenge: String,
    resource: String,
    expires_at: i64,
    used_at: Option<i64>,
    credential_id: Option<String>,
}

/// Revokes a credential and drops its tokens, inside `tx`.
pub(super) fn revoke_in(tx: &mut Conn<'_>, credential: &str, reason: &str, now: i64) -> crate::error::Result<()> {
    tx.execute(
        "UPDATE credentials SET revoked_at = ?1, revoked_reason = ?2 WHERE id = ?3 AND revoked_at IS NULL",
        args![now, reason, credential],
    )?;
    tx.execute("DELETE FROM oauth_tokens WHERE credential_id = ?1 AND kind = 'access'", args![credential])?;
    Ok(())
}

impl OAuthStore {
    /// Makes the one-time code for an approved consent.
    pub fn create_code(&self, consent: &Consent) -> Result<String> {
        if !is_pkce_value(&consent.code_challenge) {
            return Err(OAuthError::InvalidRequest("code_challenge is not a PKCE S256 challenge".into()));
        }
        let now = self.clock.now_ms();
        let code = secret::new_token();
        let mut conn = self.db.conn()?;
        // Said on the consent page already, not only when the code is exchanged.
        self.credentials.check_room(&mut conn, &consent.owner, IssuedVia::OAuth).map_err(|e| match e {
            CoreError::Limit(message) => OAuthError::InvalidRequest(message),
            other => OAuthError::Store(other),
        })?;
        conn.execute(
            "INSERT INTO oauth_codes (code_hash, client_id, owner, agent, redirect_uri, code_challenge, resource,
                                      created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            args![
                secret::hash(&code),
                consent.client_id,
                consent.owner,
                consent.agent,
                consent.redirect_uri,
                consent.code_challenge,
                consent.resource,
                now,
                now + CODE_TTL_MS
            ],
        )?;
        Ok(code)
    }

    /// Exchanges a code (RFC 6749 §4.1.3 with PKCE): creates the owner's
    /// credential and its first tokens. A code works once; presenting it
    /// again revokes what it made (RFC 6749 §4.1.2).
    pub fn exchange_code(
        &self,
        client: &Client,
        code: &str,
        redirect_uri: &str,
        verifier: &str,
        resource: &str,
    ) -> Result<Tokens> {
        let now = self.clock.now_ms();
        let code_hash = secret::hash(code);
        // A refusal comes back inside `Ok`: a reused code's revocation must
        // be committed, and every other refusal has written nothing.
        let mut reused: Option<String> = None;
        let outcome = self
            .db
            .conn()?
            .transaction(|tx| -> crate::error::Result<Result<Tokens>> {
                let row = tx.query_opt(
                    "SELECT client_id, owner, agent, redirect_uri, code_challenge, resource, expires_at, used_at,
                            credential_id
                     FROM oauth_codes WHERE code_hash = ?1",
                    args![code_hash],
                    |r| {
                        Ok(CodeRow {
                            client_id: r.get(0)?,
                            owner: r.get(1)?,
                            agent: r.get(2)?,
                            redirect_uri: r.get(3)?,
                            code_challenge: r.get(4)?,
                            resource: r.get(5)?,
                            expires_at: r.get(6)?,
                            used_at: r.get(7)?,
                            credential_id: r.get(8)?,
                        })
                    },
                )?;
                let Some(row) = row else {
                    return Ok(Err(OAuthError::InvalidGrant("unknown authorization code".into())));
                };
                let used = || OAuthError::InvalidGrant("the authorization code was already used".into());
                if row.client_id != client.client_id {
                    return Ok(Err(OAuthError::InvalidGrant("the code was issued to another client".into())));
                }
                if row.used_at.is_some() {
                    if let Some(credential) = row.credential_id {
                        revoke_in(tx, &credential, "code_reused", now)?;
                        reused = Some(credential);
                    }
                    return Ok(Err(used()));
                }
                if row.expires_at <= now {
                    return Ok(Err(OAuthError::InvalidGrant("the authorization code has expired".into())));
                }
                if row.redirect_uri != redirect_uri {
                    return Ok(Err(OAuthError::InvalidGrant(
                        "redirect_uri differs from the authorization request's".into(),
                    )));
                }
                if !pkce_s256_matches(&row.code_challenge, verifier) {
                    return Ok(Err(OAuthError::InvalidGrant("code_verifier does not match the code_challenge".into())));
                }
                if row.resource != resource {
                    return Ok(Err(OAuthError::InvalidTarget("the code was issued for another resource".into())));
                }
                let may_sign_in: bool = tx
                    .query_opt("SELECT disabled_at IS NULL FROM users WHERE username = ?1", args![row.owner], |r| {
                        r.get(0)
                    })?
                    .unwrap_or(false);
                if !may_sign_in {
                    return Ok(Err(OAuthError::InvalidGrant(
                        "the person who approved this can no longer sign in".into(),
                    )));
                }
                // Claim the code before using it. On SQLite the transaction's
                // write lock already makes this exchange the only one; on
                // PostgreSQL a concurrent exchange of the same code waits
                // here and then finds it used, which is a reuse.
                let claimed = tx.execute(
                    "UPDATE oauth_codes SET used_at = ?1 WHERE code_hash = ?2 AND used_at IS NULL",
                    args![now, code_hash],
                )?;
                if claimed == 0 {
                    let winner: Option<String> = tx
                        .query_opt(
                            "SELECT credential_id FROM oauth_codes WHERE code_hash = ?1",
                            args![code_hash],
                            |r| r.get(0),
                        )?
                        .flatten();
                    if let Some(credential) = winner {
                        revoke_in(tx, &credential, "code_reused", now)?;
                        reused = Some(credential);
                    }
                    return Ok(Err(used()));
                }
                // An `Invalid` error (what was approved cannot become a
                // credential) rolls the transaction back and is mapped below.
                let (credential_id, _unused_bearer) = self.credentials.insert(
                    tx,
                    &IssueRequest {
                        agent: row.agent,
                        owner: Some(row.owner),
                        via: IssuedVia::OAuth,
                        oauth_client: Some(client.name.clone()),
                        ..Default::default()
                    },
                )?;
                tx.execute(
                    "UPDATE oauth_codes SET credential_id = ?1 WHERE code_hash = ?2",
                    args![credential_id, code_hash],
                )?;
                tx.execute(
                    "UPDATE oauth_clients SET last_used_at = ?1 WHERE client_id = ?2",
                    args![now, client.client_id],
                )?;
                Ok(Ok(self.insert_tokens(tx, &credential_id, &client.client_id, &row.resource, now)?))
            })
            .map_err(|e| match e {
                // What was approved cannot become a credential (or its owner
                // holds as many as they may): the grant is bad, not the server.
                CoreError::Invalid { .. } | CoreError::Limit(_) => OAuthError::InvalidGrant(e.to_string()),
                other => OAuthError::Store(other),
            })?;
        if let Some(credential) = reused {
            self.live.publish(LiveEvent::CredentialsChanged);
            tracing::warn!(credential = %credential, "authorization code reused: its credential is revoked");
        }
        let tokens = outcome?;
        self.live.publish(LiveEvent::CredentialsChanged);
        Ok(tokens)
    }

    /// Refreshes (RFC 6749 §6): the old refresh token is used up and a new
    /// pair is issued, while the credential is alive. Presenting a used
    /// refresh token again means it leaked: the credential is revoked.
    /// The refresh is a sign of life of the agent.
    pub fn refresh(&self, client: &Client, refresh_token: &str, resource: Option<&str>) -> Result<Tokens> {
        let now = self.clock.now_ms();
        let token_hash = secret::hash(refresh_token);
        let invalid = || OAuthError::InvalidGrant("unknown, used or expired refresh token".into());
        let window_ms = self.credentials.liveness_window().as_millis() as i64;
        // As in `exchange_code`: refusals come back inside `Ok`, so a reused
        // token's revocation is committed.
        let mut reused: Option<String> = None;
        let outcome = self.db.conn()?.transaction(|tx| -> crate::error::Result<Result<Tokens>> {
            let token = tx.query_opt(
                "SELECT credential_id, client_id, resource, expires_at, used_at FROM oauth_tokens
                 WHERE token_hash = ?1 AND kind = 'refresh'",
                args![token_hash],
                |r| {
                    Ok((
                        r.get::<String>(0)?,
                        r.get::<String>(1)?,
                        r.get::<String>(2)?,
                        r.get::<i64>(3)?,
                        r.get::<Option<i64>>(4)?,
                    ))
                },
            )?;
            let Some((credential_id, client_id, token_resource, expires_at, used_at)) = token else {
                return Ok(Err(invalid()));
            };
            if client_id != client.client_id {
                return Ok(Err(invalid()));
            }
            if used_at.is_some() {
                revoke_in(tx, &credential_id, "refresh_reused", now)?;
                reused = Some(credential_id);
                return Ok(Err(invalid()));
            }
            if expires_at <= now {
                return Ok(Err(invalid()));
            }
            if resource.is_some_and(|r| r != token_resource) {
                return Ok(Err(OAuthError::InvalidTarget("the refresh token was issued for another resource".into())));
            }
            let alive: bool = tx
                .query_opt(
                    "SELECT revoked_at IS NULL AND last_seen_at + ?2 > ?3 FROM credentials WHERE id = ?1",
                    args![credential_id, window_ms, now],
                    |r| r.get(0),
                )?
                .unwrap_or(false);
            if !alive {
                return Ok(Err(OAuthError::InvalidGrant("the agent's credential was revoked or has lapsed".into())));
            }
            // Only an unused token is used up: on PostgreSQL a concurrent
            // refresh with the same token waits here and then finds it used,
            // which is a reuse (SQLite's write lock rules that out already).
            let claimed = tx.execute(
                "UPDATE oauth_tokens SET used_at = ?1 WHERE token_hash = ?2 AND used_at IS NULL",
                args![now, token_hash],
            )?;
            if claimed == 0 {
                revoke_in(tx, &credential_id, "refresh_reused", now)?;
                reused = Some(credential_id);
                return Ok(Err(invalid()));
            }
            tx.execute("UPDATE credentials SET last_seen_at = ?1 WHERE id = ?2", args![now, credential_id])?;
            Ok(Ok(self.insert_tokens(tx, &credential_id, &client_id, &token_resource, now)?))
        })?;
        if let Some(credential_id) = reused {
            self.live.publish(LiveEvent::CredentialsChanged);
            tracing::warn!(credential = %credential_id, "refresh token reused: its credential is revoked");
        }
        let tokens = outcome?;
        self.live.publish(LiveEvent::CredentialsChanged);
        Ok(tokens)
    }

    pub(super) fn insert_tokens(
        &self,
        tx: &mut Conn<'_>,
        credential_id: &str,
        client_id: &str,
        resource: &str,
        now: i64,
    ) -> crate::error::Result<Tokens> {
        let access_token = format!("{ACCESS_PREFIX}{}", secret::new_token());
        let refresh_token = format!("{REFRESH_PREFIX}{}", secret::new_token());
        let insert =
            "INSERT INTO oauth_tokens (token_hash, kind, credential_id, client_id, resource, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
        let access_ms = self.lifetimes.access.as_millis() as i64;
        let refresh_ms = self.lifetimes.refresh.as_millis() as i64;
        tx.execute(
            insert,
            args![secret::hash(&access_token), "access", credential_id, client_id, resource, now, now + access_ms],
        )?;
        tx.execute(
            insert,
            args![secret::hash(&refresh_token), "refresh", credential_id, client_id, resource, now, now + refresh_ms],
        )?;
        Ok(Tokens {
            access_token,
            refresh_token,
            expires_in: self.lifetimes.access,
            credential_id: credential_id.into(),
        })
    }

    /// Revokes a token (RFC 7009): if it is this client's, the credential it
    /// stands for is revoked with all its tokens. Unknown tokens, and other
    /// clients' tokens, change nothing (`false`).
    pub fn revoke(&self, client: &Client, token: &str) -> Result<bool> {
        let now = self.clock.now_ms();
        let revoked = self.db.conn()?.transaction(|tx| {
            let credential: Option<String> = tx.query_opt(
                "SELECT credential_id FROM oauth_tokens WHERE token_hash = ?1 AND client_id = ?2",
                args![secret::hash(token), client.client_id],
                |r| r.get(0),
            )?;
            let Some(credential) = credential else { return Ok(false) };
            revoke_in(tx, &credential, "revoked", now)?;
            Ok(true)
        })?;
        if revoked {
            self.live.publish(LiveEvent::CredentialsChanged);
        }
        Ok(revoked)
    }

    /// Accepts an access token for `resource`: unexpired, for this resource,
    /// and standing for a live credential (which the use keeps alive).
    pub fn authenticate(&self, token: &str, resource: &str) -> Result<std::result::Result<Credential, Rejection>> {
        let now = self.clock.now_ms();
        let credential: Option<String> = self.db.conn()?.query_opt(
            "SELECT credential_id FROM oauth_tokens
             WHERE token_hash = ?1 AND kind = 'access' AND expires_at > ?2 AND resource = ?3",
            args![secret::hash(token), now, resource],
            |r| r.get(0),
        )?;
        match credential {
            Some(id) => Ok(self.credentials.authenticate_id(&id)?),
            None => Ok(Err(Rejection::UnknownOrExpiredToken)),
        }
    }
}
