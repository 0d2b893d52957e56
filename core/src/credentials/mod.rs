//! Agent credentials for `/mcp`, with t3code's McpSessionRegistry semantics:
//! a credential lives while its agent shows signs of life (MCP traffic on it,
//! or a touch of its thread) and lapses once `liveness_window` passes without
//! one. There is no absolute lifetime. Only the SHA-256 of a token is stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::args;
use crate::clock::{Clock, rfc3339};
use crate::db::{Conn, Db, Row, Value};
use crate::error::{CoreError, Result};
use crate::live::{LiveEvent, LiveHub};
use crate::model::{CredentialId, UserId};
use crate::secret;

pub use gatehouse_model::{CredentialStatus, CredentialView, IssuedVia, RevokeScope};

/// Whose credentials an action may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owned<'a> {
    /// Anyone's (an admin acting on every owner's).
    ByAnyone,
    /// Only those with exactly this owner (`None`: owner-less ones).
    By(Option<&'a str>),
}

/// What the caller asks for when issuing.
#[derive(Debug, Clone, Default)]
pub struct IssueRequest {
    /// The agent's name (shown to approvers).
    pub agent: String,
    /// The orchestrator's thread; issuing for a thread revokes its earlier credentials.
    pub thread: Option<String>,
    /// The provider session (e.g. a Claude Code session id) it belongs to.
    pub provider_session: Option<String>,
    /// The user who owns the agent (approves its calls).
    pub owner: Option<String>,
    /// How it is being issued (shown on the Agents page).
    pub via: IssuedVia,
    /// The OAuth client's name, when issued by OAuth.
    pub oauth_client: Option<String>,
}

/// A freshly issued credential: the only time the token itself is visible.
#[derive(Debug, Clone, Serialize)]
pub struct Issued {
    /// The credential id (not a secret).
    pub id: CredentialId,
    /// The bearer token (shown once).
    pub token: String,
    /// The credential as stored.
    #[serde(flatten)]
    pub credential: Credential,
}

/// What issuing returns: the token (shown once) and how to use it.
#[derive(Debug, Clone, Serialize)]
pub struct IssuedCredential {
    /// Credential id.
    pub id: CredentialId,
    /// Bearer token.
    pub token: String,
    /// Agent name.
    pub agent: String,
    /// Thread.
    pub thread: Option<String>,
    /// Owning user.
    pub owner: Option<String>,
    /// The `/mcp` URL to connect to.
    pub endpoint: String,
    /// The `Authorization` header value.
    pub authorization: String,
}

impl IssuedCredential {
    /// Shapes an issued credential for output (API and CLI print the same object).
    pub fn new(issued: Issued, base_url: &str) -> Self {
        Self {
            authorization: format!("Bearer {}", issued.token),
            endpoint: format!("{base_url}/mcp"),
            id: issued.id,
            token: issued.token,
            agent: issued.credential.agent,
            thread: issued.credential.thread,
            owner: issued.credential.owner,
        }
    }
}

/// A stored credential (never with its token).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Credential {
    /// `cred_…`
    pub id: CredentialId,
    /// The agent's name.
    pub agent: String,
    /// The orchestrator's thread, if any.
    pub thread: Option<String>,
    /// The provider session, if any.
    pub provider_session: Option<String>,
    /// The owning user, if any.
    pub owner: Option<String>,
    /// The owning user's id, which access compares (`None`: owner-less, or
    /// the owner was removed).
    pub owner_id: Option<UserId>,
    /// Issue time (Unix ms).
    #[serde(skip)]
    pub created_at_ms: i64,
    /// Last sign of life (Unix ms).
    #[serde(skip)]
    pub last_seen_ms: i64,
    /// When it was revoked, if it was.
    #[serde(skip)]
    pub revoked_at_ms: Option<i64>,
    /// Why it was revoked (`revoked`, `reissued`, …).
    pub revoked_reason: Option<String>,
    /// How it was issued.
    pub issued_via: IssuedVia,
    /// The OAuth client's name, when issued by OAuth.
    pub oauth_client: Option<String>,
    /// Whether an admin minted it: the command line, the admin API, an agent
    /// with no owner, or one whose owner was an admin when it was minted (in
    /// the console or by an OAuth sign-in). A rule's bare agent name matches
    /// only such agents: a plain user can name an agent anything.
    pub by_admin: bool,
}

/// Why a token was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// No `Authorization: Bearer` header at all.
    MissingBearerToken,
    /// The token is unknown, revoked or has lapsed.
    UnknownOrExpiredToken,
}

impl Credential {
    /// Who may continue this credential's calls (retry a sealed
    /// `requestState`, resume a pause): the credential itself, or its
    /// thread's line of credentials (a re-issued credential continues its
    /// predecessor's calls). Sealed states are bound to it.
    pub fn principal(&self) -> String {
        match &self.thread {
            Some(thread) => serde_json::to_string(&("thread", thread, &self.agent, &self.owner)),
            None => serde_json::to_string(&("credential", &self.id)),
        }
        .unwrap_or_default()
    }
}

impl Rejection {
    /// The `reason` logged and counted.
    pub fn reason(self) -> &'static str {
        match self {
            Rejection::MissingBearerToken => "missing_bearer_token",
            Rejection::UnknownOrExpiredToken => "unknown_or_expired_token",
        }
    }
}

/// Store of agent credentials.
#[derive(Clone)]
pub struct CredentialStore {
    db: Db,
    clock: Arc<dyn Clock>,
    window_ms: i64,
    live: LiveHub,
    accepted: Arc<Mutex<Accepted>>,
    per_user: crate::PerUser,
}

/// Credentials accepted since the table last changed, by token hash: a
/// request whose token is here needs no row lookup. Valid only while the
/// database's change marker ([`Db::credentials_marker`]) is the one they
/// were read under, so a revocation (this process's or the CLI's) holds on
/// the very next request. Unknown tokens are never kept.
#[derive(Default)]
struct Accepted {
    marker: Option<(i64, u64)>,
    by_hash: HashMap<String, Credential>,
}

/// Most credentials remembered at once (then the memory starts over).
const ACCEPTED_MAX: usize = 4096;

impl Accepted {
    fn get(&mut self, marker: (i64, u64), hash: &str) -> Option<Credential> {
        if self.marker != Some(marker) {
            self.marker = Some(marker);
            self.by_hash.clear();
            return None;
        }
        self.by_hash.get(hash).cloned()
    }

    fn put(&mut self, marker: (i64, u64), hash: String, credential: &Credential) {
        if self.marker != Some(marker) {
            return;
        }
        if self.by_hash.len() >= ACCEPTED_MAX {
            self.by_hash.clear();
        }
        self.by_hash.insert(hash, credential.clone());
    }
}

const COLUMNS: &str = "id, agent, thread, provider_session, owner, created_at, last_seen_at, revoked_at, \
     revoked_reason, issued_via, oauth_client, by_admin, owner_id";

fn from_row(row: &Row<'_>) -> Result<Credential> {
    Ok(Credential {
        id: row.get(0)?,
        agent: row.get(1)?,
        thread: row.get(2)?,
        provider_session: row.get(3)?,
        owner: row.get(4)?,
        created_at_ms: row.get(5)?,
        last_seen_ms: row.get(6)?,
        revoked_at_ms: row.get(7)?,
        revoked_reason: row.get(8)?,
        issued_via: IssuedVia::parse(&row.get::<String>(9)?),
        oauth_client: row.get(10)?,
        by_admin: row.get::<i64>(11)? != 0,
        owner_id: row.get::<Option<i64>>(12)?.map(UserId::from),
    })
}

fn non_empty(field: &'static str, value: &str) -> Result<()> {
    if value.trim().is_empty() || value.len() > 200 || value.chars().any(char::is_control) {
        return Err(CoreError::Invalid {
            field,
            reason: "must be 1 to 200 characters without control characters".into(),
        });
    }
    Ok(())
}

impl CredentialStore {
    /// A store whose credentials lapse after `liveness_window` without a sign of life.
    pub fn new(db: Db, clock: Arc<dyn Clock>, liveness_window: Duration, live: LiveHub) -> Self {
        Self {
            db,
            clock,
            window_ms: liveness_window.as_millis() as i64,
            live,
            accepted: Arc::default(),
            per_user: crate::PerUser::default(),
        }
    }

    /// The same store, bounding what one owner may hold by `per_user`
    /// (credentials, and OAuth sign-ins).
    pub fn with_per_user(self, per_user: crate::PerUser) -> Self {
        Self { per_user, ..self }
    }

    /// Refused if `owner` already holds as many live credentials issued
    /// `via` as it may (`max_oauth_clients_per_user` for OAuth sign-ins,
    /// `max_credentials_per_user` for the rest); `tx` may be a transaction.
    pub(crate) fn check_room(&self, tx: &mut Conn<'_>, owner: &str, via: IssuedVia) -> Result<()> {
        let oauth = via == IssuedVia::OAuth;
        let (max, key, what) = if oauth {
            (self.per_user.oauth_clients, "max_oauth_clients_per_user", "OAuth clients signed in")
        } else {
            (self.per_user.credentials, "max_credentials_per_user", "live agent credentials")
        };
        let alive_since = self.clock.now_ms() - self.window_ms;
        let sql = if oauth {
            "SELECT COUNT(*) FROM credentials WHERE owner = ?1 AND revoked_at IS NULL AND last_seen_at > ?2
             AND issued_via = 'oauth'"
        } else {
            "SELECT COUNT(*) FROM credentials WHERE owner = ?1 AND revoked_at IS NULL AND last_seen_at > ?2
             AND issued_via != 'oauth'"
        };
        let held: i64 = tx.query_one(sql, args![owner, alive_since], |r| r.get(0))?;
        if usize::try_from(held).unwrap_or(usize::MAX) >= max {
            return Err(CoreError::Limit(format!(
                "{owner} already has {held} {what}, the most one user may have ({key} = {max}); revoke some first"
            )));
        }
        Ok(())
    }

    /// The liveness window.
    pub fn liveness_window(&self) -> Duration {
        Duration::from_millis(self.window_ms as u64)
    }

    /// How stale a stored sign of life may get before traffic rewrites it. Writing
    /// on every request would make each MCP call a disk write; a hundredth of the
    /// window (at most 5 s) changes no lapse time that matters.
    fn touch_granularity_ms(&self) -> i64 {
        (self.window_ms / 100).min(5_000)
    }

    /// Issues a credential. Issuing for a thread revokes that thread's earlier ones.
    pub fn issue(&self, request: IssueRequest) -> Result<Issued> {
        let (id, token) = self.db.conn()?.transaction(|tx| self.insert(tx, &request))?;
        self.live.publish(LiveEvent::CredentialsChanged);
        let credential = self.get(&id)?.ok_or_else(|| CoreError::NotFound(id.clone()))?;
        Ok(Issued { id: id.into(), token, credential })
    }

    /// Inserts a credential inside the caller's transaction (an OAuth code
    /// exchange makes the credential and its tokens together); returns its
    /// id and token. The caller publishes `CredentialsChanged` after commit.
    pub(crate) fn insert(&self, tx: &mut Conn<'_>, request: &IssueRequest) -> Result<(String, String)> {
        non_empty("agent", &request.agent)?;
        for (field, value) in
            [("thread", &request.thread), ("provider_session", &request.provider_session), ("owner", &request.owner)]
        {
            if let Some(value) = value {
                non_empty(field, value)?;
            }
        }
        let now = self.clock.now_ms();
        let token = secret::new_token();
        let id = secret::new_id("cred");
        // The command line and the admin API are an admin's; otherwise the
        // owner's standing now (the console and OAuth mint for the signed-in owner).
        let mut by_admin = matches!(request.via, IssuedVia::Cli | IssuedVia::Api) || request.owner.is_none();
        let mut owner_id: Option<i64> = None;
        if let Some(owner) = &request.owner {
            let found: Option<(i64, i64)> =
                tx.query_opt("SELECT id, is_admin FROM users WHERE username = ?1", args![owner], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
            let Some((id, admin)) = found else {
                return Err(CoreError::Invalid { field: "owner", reason: format!("no user named {owner:?}") });
            };
            owner_id = Some(id);
            by_admin |= admin != 0;
        }
        if let Some(thread) = &request.thread {
            // Only the same owner's thread: a user naming another user's
            // thread must not revoke that user's agents.
            tx.execute(
                "UPDATE credentials SET revoked_at = ?1, revoked_reason = 'reissued'
                 WHERE thread = ?2 AND owner IS NOT DISTINCT FROM ?3 AND revoked_at IS NULL",
                args![now, thread, request.owner],
            )?;
        }
        // After a thread's re-issue revoked its predecessor, which then no
        // longer counts. Owner-less credentials are an admin's to issue.
        if let Some(owner) = &request.owner {
            self.check_room(tx, owner, request.via)?;
        }
        tx.execute(
            "INSERT INTO credentials (id, token_hash, agent, thread, provider_session, owner, created_at, last_seen_at,
                                      issued_via, oauth_client, by_admin, owner_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10, ?11)",
            args![
                id,
                secret::hash(&token),
                request.agent,
                request.thread,
                request.provider_session,
                request.owner,
                now,
                request.via.as_str(),
                request.oauth_client,
                i64::from(by_admin),
                owner_id,
            ],
        )?;
        Ok((id, token))
    }

    /// One credential by id, whatever its state.
    pub fn get(&self, id: &str) -> Result<Option<Credential>> {
        self.db.conn()?.query_opt(&format!("SELECT {COLUMNS} FROM credentials WHERE id = ?1"), args![id], from_row)
    }

    /// Accepts a presented token if it is known, not revoked and alive; the use
    /// itself is a sign of life and keeps it alive.
    pub fn authenticate(&self, token: &str) -> Result<std::result::Result<Credential, Rejection>> {
        let now = self.clock.now_ms();
        let hash = secret::hash(token);
        let mut conn = self.db.conn()?;
        // Read before the row, under the same lock: a change after it moves the marker.
        let marker = self.db.credentials_marker(&conn)?;
        let remembered = marker.and_then(|m| self.accepted().get(m, &hash));
        let credential = match remembered {
            Some(credential) => credential,
            None => {
                let Some(credential) = conn.query_opt(
                    &format!("SELECT {COLUMNS} FROM credentials WHERE token_hash = ?1 AND revoked_at IS NULL"),
                    args![hash],
                    from_row,
                )?
                else {
                    return Ok(Err(Rejection::UnknownOrExpiredToken));
                };
                if let Some(marker) = marker {
                    self.accepted().put(marker, hash, &credential);
                }
                credential
            }
        };
        self.accept(conn, credential, now)
    }

    fn accepted(&self) -> std::sync::MutexGuard<'_, Accepted> {
        self.accepted.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Accepts the live credential `id` (an OAuth access token stands for
    /// it), with the same liveness rule and sign of life as a bearer token.
    pub fn authenticate_id(&self, id: &str) -> Result<std::result::Result<Credential, Rejection>> {
        let now = self.clock.now_ms();
        let mut conn = self.db.conn()?;
        let Some(credential) = conn.query_opt(
            &format!("SELECT {COLUMNS} FROM credentials WHERE id = ?1 AND revoked_at IS NULL"),
            args![id],
            from_row,
        )?
        else {
            return Ok(Err(Rejection::UnknownOrExpiredToken));
        };
        self.accept(conn, credential, now)
    }

    /// Whether a credential is still alive at `now` (not revoked, not lapsed).
    pub fn is_alive(&self, credential: &Credential, now: i64) -> bool {
        credential.revoked_at_ms.is_none() && credential.last_seen_ms + self.window_ms > now
    }

    fn accept(
        &self,
        mut conn: Conn<'_>,
        mut credential: Credential,
        now: i64,
    ) -> Result<std::result::Result<Credential, Rejection>> {
        if credential.last_seen_ms + self.window_ms <= now {
            return Ok(Err(Rejection::UnknownOrExpiredToken));
        }
        if now - credential.last_seen_ms >= self.touch_granularity_ms() {
            conn.execute("UPDATE credentials SET last_seen_at = ?1 WHERE id = ?2", args![now, credential.id])?;
            credential.last_seen_ms = now;
            drop(conn);
            self.live.publish(LiveEvent::CredentialsChanged);
        }
        Ok(Ok(credential))
    }

    /// A sign of life for every live credential of `thread`; returns how many it
    /// kept alive. A credential that has already lapsed is not revived.
    pub fn touch_thread(&self, thread: &str) -> Result<usize> {
        let now = self.clock.now_ms();
        let n = self.db.conn()?.execute(
            "UPDATE credentials SET last_seen_at = ?1
             WHERE thread = ?2 AND revoked_at IS NULL AND last_seen_at + ?3 > ?1",
            args![now, thread, self.window_ms],
        )?;
        if n > 0 {
            self.live.publish(LiveEvent::CredentialsChanged);
        }
        Ok(n)
    }

    fn revoke_where(&self, condition: &str, arg: Option<&str>) -> Result<usize> {
        match arg {
            Some(arg) => self.revoke_matching(condition, args![arg]),
            None => self.revoke_matching(condition, args![]),
        }
    }

    /// Revokes the live credentials `condition` matches (`?1` is now, the
    /// rest are `args` from `?2` on).
    fn revoke_matching(&self, condition: &str, args: &[Value]) -> Result<usize> {
        let now = self.clock.now_ms();
        let sql = format!(
            "UPDATE credentials SET revoked_at = ?1, revoked_reason = 'revoked' WHERE revoked_at IS NULL AND {condition}"
        );
        let mut all = vec![Value::Int(now)];
        all.extend_from_slice(args);
        let n = self.db.conn()?.execute(&sql, &all)?;
        if n > 0 {
            self.live.publish(LiveEvent::CredentialsChanged);
        }
        Ok(n)
    }

    /// Revokes one credential; `false` if there was no live one with that id.
    pub fn revoke(&self, id: &str) -> Result<bool> {
        Ok(self.revoke_where("id = ?2", Some(id))? > 0)
    }

    /// Revokes every credential of a thread.
    pub fn revoke_thread(&self, thread: &str) -> Result<usize> {
        self.revoke_where("thread = ?2", Some(thread))
    }

    /// Revokes every credential of a provider session.
    pub fn revoke_provider_session(&self, provider_session: &str) -> Result<usize> {
        self.revoke_where("provider_session = ?2", Some(provider_session))
    }

    /// Revokes what `scope` and `target` name (one credential, a thread, or
    /// an agent's) among the credentials `owned` lets through. Returns how
    /// many were revoked.
    pub fn revoke_owned(&self, scope: RevokeScope, target: &str, owned: Owned<'_>) -> Result<usize> {
        let column = match scope {
            RevokeScope::Credential => "id",
            RevokeScope::Thread => "thread",
            RevokeScope::Agent => "agent",
        };
        match owned {
            Owned::ByAnyone => self.revoke_matching(&format!("{column} = ?2"), args![target]),
            Owned::By(owner) => {
                self.revoke_matching(&format!("{column} = ?2 AND owner IS NOT DISTINCT FROM ?3"), args![target, owner])
            }
        }
    }

    /// Revokes every live credential `owner` owns (a user removed or
    /// disabled); returns how many.
    pub fn revoke_by_owner(&self, owner: &str) -> Result<usize> {
        self.revoke_where("owner = ?2", Some(owner))
    }

    /// The names `owner`'s agents go by: those of their credentials (live or
    /// not, OAuth-issued or not) and of OAuth codes not yet exchanged.
    pub fn agent_names_of(&self, owner: &str) -> Result<Vec<String>> {
        self.db.conn()?.query(
            "SELECT agent FROM credentials WHERE owner = ?1
             UNION SELECT agent FROM oauth_codes WHERE owner = ?1 AND used_at IS NULL AND expires_at > ?2",
            args![owner, self.clock.now_ms()],
            |r| r.get(0),
        )
    }

    /// Revokes every credential.
    pub fn revoke_all(&self) -> Result<usize> {
        self.revoke_where("1 = 1", None)
    }

    /// Every credential, newest first, with its liveness worked out.
    pub fn list(&self) -> Result<Vec<CredentialView>> {
        let rows = self.db.conn()?.query(
            &format!("SELECT {COLUMNS} FROM credentials ORDER BY created_at DESC, id"),
            args![],
            from_row,
        )?;
        Ok(rows.into_iter().map(|c| self.view(c)).collect())
    }

    /// Works out a credential's status and times.
    /// Of `ids`, those revoked (by anyone: this process, the CLI in another
    /// process, an orchestrator), each with whether it was replaced by a
    /// re-issue for its thread (its successor carries its calls on). The
    /// server sweeps its sessions and pending executions with it.
    pub fn revoked_among(&self, ids: &[CredentialId]) -> Result<Vec<(CredentialId, bool)>> {
        let mut conn = self.db.conn()?;
        let mut revoked = Vec::new();
        for id in ids {
            // A credential that no longer exists is as good as revoked.
            let (gone, reissued): (bool, bool) = conn
                .query_opt(
                    "SELECT revoked_at IS NOT NULL, revoked_reason IS NOT DISTINCT FROM 'reissued' FROM credentials
                     WHERE id = ?1",
                    args![id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?
                .unwrap_or((true, false));
            if gone {
                revoked.push((id.clone(), reissued));
            }
        }
        Ok(revoked)
    }

    /// A credential as listed, with its liveness worked out.
    pub fn view(&self, credential: Credential) -> CredentialView {
        let now = self.clock.now_ms();
        let expires = credential.last_seen_ms + self.window_ms;
        let status = if credential.revoked_at_ms.is_some() {
            CredentialStatus::Revoked
        } else if expires <= now {
            CredentialStatus::Expired
        } else {
            CredentialStatus::Active
        };
        CredentialView {
            status,
            created_at: rfc3339(credential.created_at_ms),
            created_ms: credential.created_at_ms,
            last_seen_at: rfc3339(credential.last_seen_ms),
            expires_at: rfc3339(expires),
            last_seen_ms: credential.last_seen_ms,
            expires_ms: expires,
            id: credential.id,
            agent: credential.agent,
            thread: credential.thread,
            provider_session: credential.provider_session,
            owner: credential.owner,
            owner_id: credential.owner_id,
            revoked_reason: credential.revoked_reason,
            issued_via: credential.issued_via,
            oauth_client: credential.oauth_client,
            by_admin: credential.by_admin,
        }
    }
}

#[cfg(test)]
mod tests;
