//! OAuth 2.1 for MCP clients, with Gatehouse as its own authorization server.
//!
//! A client (registered dynamically, RFC 7591, or known by its metadata
//! document URL) sends a person through the consent page; their approval
//! makes a one-time code. Exchanging it (with the PKCE verifier) creates an
//! ordinary agent credential owned by that person — so the gate, the inbox
//! and the audit treat it like any other — and hands the client a
//! short-lived access token and a refresh token that rotates on every use.
//! Both stand for the credential: they stop working when it is revoked or
//! lapses (no sign of life within the liveness window), whatever their own
//! expiry says. Every secret is stored as its SHA-256 only.

pub mod uris;

use std::sync::Arc;
use std::time::Duration;

use crate::args;
use crate::clock::Clock;
use crate::credentials::{Credential, CredentialStore, IssueRequest, IssuedVia, Rejection};
use crate::db::{Conn, Db};
use crate::error::CoreError;
use crate::live::{LiveEvent, LiveHub};
use crate::secret;

pub use uris::{check_redirect_uri, is_pkce_value, pkce_s256_matches, redirect_matches};

/// Access tokens start with this, so `/mcp` knows where to look them up.
pub const ACCESS_PREFIX: &str = "gat_";
/// Refresh tokens start with this.
pub const REFRESH_PREFIX: &str = "grt_";
/// The one scope there is: use this Gatehouse's `/mcp` as the agent.
pub const SCOPE: &str = "mcp";
/// How long an authorization code may wait for its exchange.
const CODE_TTL_MS: i64 = 2 * 60 * 1000;
/// At most this many never-used registrations (younger than
/// [`Registration::unused_ttl`]) are kept from all addresses together
/// (registration is open to anyone, so it must not fill the disk). One
/// address holds at most [`Registration::per_address`] of them, which
/// [`Registration::effective_per_address`] keeps far below this, so a flood
/// from one address never reaches it: only many addresses together could.
const MAX_UNUSED_CLIENTS: i64 = 10_000;

/// An OAuth error, with the code the RFCs give it (RFC 6749 §5.2, RFC 7591
/// §3.2.2, RFC 8707 §2).
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// The request is missing a parameter or malformed.
    #[error("{0}")]
    InvalidRequest(String),
    /// Client authentication failed (unknown client, wrong secret).
    #[error("{0}")]
    InvalidClient(String),
    /// The code or refresh token is unknown, used, expired, or not this client's.
    #[error("{0}")]
    InvalidGrant(String),
    /// Only `authorization_code` and `refresh_token`.
    #[error("{0}")]
    UnsupportedGrantType(String),
    /// The `resource` is not this Gatehouse's `/mcp`.
    #[error("{0}")]
    InvalidTarget(String),
    /// A registration's redirect URI is not acceptable.
    #[error("{0}")]
    InvalidRedirectUri(String),
    /// A registration's other metadata is not acceptable.
    #[error("{0}")]
    InvalidClientMetadata(String),
    /// Too many registrations are waiting to be used.
    #[error("{0}")]
    TemporarilyUnavailable(String),
    /// This address has registered as many clients as it may until one is
    /// used or expires (answered 429 with `Retry-After`).
    #[error("{message}")]
    TooManyRegistrations {
        /// What was refused and which limit did it.
        message: String,
        /// Seconds until the oldest of this address's registrations expires.
        retry_after_secs: u64,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] CoreError),
}

impl From<crate::db::DbError> for OAuthError {
    fn from(e: crate::db::DbError) -> Self {
        OAuthError::Store(CoreError::Db(e))
    }
}

impl OAuthError {
    /// The `error` code on the wire.
    pub fn code(&self) -> &'static str {
        match self {
            OAuthError::InvalidRequest(_) => "invalid_request",
            OAuthError::InvalidClient(_) => "invalid_client",
            OAuthError::InvalidGrant(_) => "invalid_grant",
            OAuthError::UnsupportedGrantType(_) => "unsupported_grant_type",
            OAuthError::InvalidTarget(_) => "invalid_target",
            OAuthError::InvalidRedirectUri(_) => "invalid_redirect_uri",
            OAuthError::InvalidClientMetadata(_) => "invalid_client_metadata",
            OAuthError::TemporarilyUnavailable(_) => "temporarily_unavailable",
            // RFC 6749 §4.1.2.1's code for "cannot handle this now": the
            // 429 status and the description say it is this address's limit.
            OAuthError::TooManyRegistrations { .. } => "temporarily_unavailable",
            OAuthError::Store(_) => "server_error",
        }
    }
}

type Result<T> = std::result::Result<T, OAuthError>;

/// How a client was made known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// Registered through `/oauth/register` (its name is self-declared).
    Registered,
    /// Its `client_id` is the HTTPS URL of its metadata document, fetched by us.
    MetadataDocument,
}

impl ClientKind {
    fn as_str(self) -> &'static str {
        match self {
            ClientKind::Registered => "registered",
            ClientKind::MetadataDocument => "metadata_document",
        }
    }
}

/// How a client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// A public client (a native app): PKCE is its proof.
    None,
    /// `client_secret` in the form body.
    ClientSecretPost,
    /// `client_secret` in HTTP Basic authentication.
    ClientSecretBasic,
}

impl AuthMethod {
    /// The RFC 7591 name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::None => "none",
            AuthMethod::ClientSecretPost => "client_secret_post",
            AuthMethod::ClientSecretBasic => "client_secret_basic",
        }
    }

    /// From the RFC 7591 name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(AuthMethod::None),
            "client_secret_post" => Some(AuthMethod::ClientSecretPost),
            "client_secret_basic" => Some(AuthMethod::ClientSecretBasic),
            _ => None,
        }
    }
}

/// A known OAuth client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// Its `client_id`.
    pub client_id: String,
    /// How it was made known.
    pub kind: ClientKind,
    /// Its name as it gave it (self-declared unless from a metadata document).
    pub name: String,
    /// Where codes may be sent.
    pub redirect_uris: Vec<String>,
    /// How it authenticates at the token endpoint.
    pub auth_method: AuthMethod,
    /// When the metadata document was last fetched (Unix ms).
    pub fetched_at_ms: Option<i64>,
}

/// A client's metadata, checked: what registration or a document gives.
#[derive(Debug, Clone)]
pub struct ClientMetadata {
    /// `client_name` (cleaned; a placeholder if absent).
    pub name: String,
    /// `redirect_uris`, each acceptable.
    pub redirect_uris: Vec<String>,
    /// `token_endpoint_auth_method`.
    pub auth_method: AuthMethod,
}

impl ClientMetadata {
    /// Checks RFC 7591 metadata: 1–10 acceptable redirect URIs, only the
    /// code flow (with refresh), a supported authentication method.
    /// `auth_method` absent means `client_secret_basic` (RFC 7591 §2).
    pub fn check(
        name: Option<&str>,
        redirect_uris: &[String],
        auth_method: Option<&str>,
        grant_types: Option<&[String]>,
        response_types: Option<&[String]>,
    ) -> Result<Self> {
        if redirect_uris.is_empty() || redirect_uris.len() > 10 {
            return Err(OAuthError::InvalidRedirectUri("give between 1 and 10 redirect_uris".into()));
        }
        for uri in redirect_uris {
            check_redirect_uri(uri).map_err(OAuthError::InvalidRedirectUri)?;
        }
        let auth_method = match auth_method {
            None => AuthMethod::ClientSecretBasic,
            Some(m) => AuthMethod::parse(m).ok_or_else(|| {
                OAuthError::InvalidClientMetadata(format!(
                    "token_endpoint_auth_method {m:?} is not supported (none, client_secret_post, client_secret_basic)"
                ))
            })?,
        };
        if let Some(grants) = grant_types {
            if let Some(bad) = grants.iter().find(|g| !matches!(g.as_str(), "authorization_code" | "refresh_token")) {
                return Err(OAuthError::InvalidClientMetadata(format!("grant type {bad:?} is not supported")));
            }
            if !grants.iter().any(|g| g == "authorization_code") {
                return Err(OAuthError::InvalidClientMetadata("grant_types must include authorization_code".into()));
            }
        }
        if let Some(types) = response_types
            && types.iter().any(|t| t != "code")
        {
            return Err(OAuthError::InvalidClientMetadata("only the \"code\" response type is supported".into()));
        }
        Ok(Self { name: clean_name(name), redirect_uris: redirect_uris.to_vec(), auth_method })
    }
}

/// A client's name as shown on the consent page: control characters out,
/// at most 100 characters, a placeholder when it gave none.
fn clean_name(name: Option<&str>) -> String {
    let cleaned: String = name.unwrap_or_default().chars().filter(|c| !c.is_control()).take(100).collect();
    let cleaned = cleaned.trim();
    if cleaned.is_empty() { "Unnamed MCP client".to_string() } else { cleaned.to_string() }
}

/// A client just registered: the only time its secret (if any) is visible.
#[derive(Debug, Clone)]
pub struct Registered {
    /// The client as stored.
    pub client: Client,
    /// Its secret, for confidential clients.
    pub secret: Option<String>,
    /// Registration time (Unix seconds), for `client_id_issued_at`.
    pub issued_at_secs: i64,
}

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
    pub credential_id: String,
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

/// Bounds of dynamic client registration (RFC 7591), which anyone may use.
#[derive(Debug, Clone, Copy)]
pub struct Registration {
    /// A registered client not used for a sign-in within this long is
    /// forgotten (and no longer counts against its address).
    pub unused_ttl: Duration,
    /// Never-used registrations one address (an IPv6 /64) may hold at once.
    pub per_address: usize,
}

impl Default for Registration {
    fn default() -> Self {
        Self { unused_ttl: Duration::from_secs(10 * 60), per_address: 20 }
    }
}

impl Registration {
    /// [`Registration::per_address`], never more than a tenth of the global
    /// cap, so one address cannot fill it for the others.
    pub fn effective_per_address(&self) -> i64 {
        i64::try_from(self.per_address).unwrap_or(i64::MAX).clamp(1, MAX_UNUSED_CLIENTS / 10)
    }

    fn unused_ms(&self) -> i64 {
        i64::try_from(self.unused_ttl.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The authorization server's store: clients, codes, tokens.
#[derive(Clone)]
pub struct OAuthStore {
    db: Db,
    clock: Arc<dyn Clock>,
    credentials: CredentialStore,
    live: LiveHub,
    lifetimes: Lifetimes,
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

impl OAuthStore {
    /// A store issuing tokens with `lifetimes`; credentials go to `credentials`.
    pub fn new(
        db: Db,
        clock: Arc<dyn Clock>,
        credentials: CredentialStore,
        live: LiveHub,
        lifetimes: Lifetimes,
    ) -> Self {
        Self { db, clock, credentials, live, lifetimes }
    }

    /// Registers a client (RFC 7591) for someone at `from` (the client's
    /// address, an IPv6 address by its /64: see the server's `ClientAddr`);
    /// confidential ones get a secret.
    ///
    /// Counted in the database, so replicas agree: `from` may hold at most
    /// [`Registration::per_address`] never-used registrations younger than
    /// [`Registration::unused_ttl`] (refused with
    /// [`OAuthError::TooManyRegistrations`]); all addresses together at most
    /// [`MAX_UNUSED_CLIENTS`]. The count and the insert run in one
    /// transaction, which takes the write lock on both backends.
    pub fn register(&self, metadata: ClientMetadata, from: &str) -> Result<Registered> {
        let now = self.clock.now_ms();
        let limits = self.lifetimes.registration;
        let since = now.saturating_sub(limits.unused_ms());
        let per_address = limits.effective_per_address();
        let client_id = secret::new_id("client");
        let secret = (is_confidential(metadata.auth_method)).then(secret::new_token);
        let uris = serde_json::to_string(&metadata.redirect_uris)
            .map_err(|e| CoreError::Invalid { field: "redirect_uris", reason: e.to_string() })?;
        enum Refused {
            Address { oldest: i64 },
            Everyone,
        }
        let refused = self.db.conn()?.transaction(|tx| {
            let (mine, oldest): (i64, Option<i64>) = tx.query_one(
                "SELECT COUNT(*), MIN(created_at) FROM oauth_clients
                 WHERE last_used_at IS NULL AND registered_from = ?1 AND created_at > ?2",
                args![from, since],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            if mine >= per_address {
                return Ok(Some(Refused::Address { oldest: oldest.unwrap_or(now) }));
            }
            let everyone: i64 = tx.query_one(
                "SELECT COUNT(*) FROM oauth_clients WHERE last_used_at IS NULL AND created_at > ?1",
                args![since],
                |r| r.get(0),
            )?;
            if everyone >= MAX_UNUSED_CLIENTS {
                return Ok(Some(Refused::Everyone));
            }
            tx.execute(
                "INSERT INTO oauth_clients (client_id, kind, name, redirect_uris, auth_method, secret_hash, created_at,
                                            registered_from)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                args![
                    client_id,
                    ClientKind::Registered.as_str(),
                    metadata.name,
                    uris,
                    metadata.auth_method.as_str(),
                    secret.as_deref().map(secret::hash),
                    now,
                    from
                ],
            )?;
            Ok(None)
        })?;
        match refused {
            Some(Refused::Address { oldest }) => {
                let wait_ms = (oldest + limits.unused_ms() - now).max(1000);
                return Err(OAuthError::TooManyRegistrations {
                    message: format!(
                        "this address already has {per_address} registered clients that have not been used for a \
                         sign-in (oauth.max_unused_registrations_per_address); use one of them, or register again \
                         when they expire (oauth.unused_registration_ttl)"
                    ),
                    retry_after_secs: u64::try_from((wait_ms + 999) / 1000).unwrap_or(1),
                });
            }
            Some(Refused::Everyone) => {
                return Err(OAuthError::TemporarilyUnavailable(
                    "too many registered clients have not been used yet; try again later".into(),
                ));
            }
            None => {}
        }
        let client = Client {
            client_id,
            kind: ClientKind::Registered,
            name: metadata.name,
            redirect_uris: metadata.redirect_uris,
            auth_method: metadata.auth_method,
            fetched_at_ms: None,
        };
        Ok(Registered { client, secret, issued_at_secs: now / 1000 })
    }

    /// Stores (or refreshes) a client known by its metadata document, just fetched.
    pub fn save_document_client(&self, client_id: &str, metadata: ClientMetadata) -> Result<Client> {
        if metadata.auth_method != AuthMethod::None {
            return Err(OAuthError::InvalidClientMetadata(
                "a client metadata document must use token_endpoint_auth_method \"none\"".into(),
            ));
        }
        let now = self.clock.now_ms();
        let uris = serde_json::to_string(&metadata.redirect_uris)
            .map_err(|e| CoreError::Invalid { field: "redirect_uris", reason: e.to_string() })?;
        // The existing row's `kind` is named with its table: PostgreSQL finds
        // a bare column ambiguous beside `excluded`.
        self.db.conn()?.execute(
            "INSERT INTO oauth_clients (client_id, kind, name, redirect_uris, auth_method, created_at, fetched_at)
             VALUES (?1, ?2, ?3, ?4, 'none', ?5, ?5)
             ON CONFLICT(client_id) DO UPDATE SET name = ?3, redirect_uris = ?4, fetched_at = ?5
             WHERE oauth_clients.kind = ?2",
            args![client_id, ClientKind::MetadataDocument.as_str(), metadata.name, uris, now],
        )?;
        self.client(client_id)?.ok_or_else(|| OAuthError::InvalidClient("unknown client".into()))
    }

    /// A client by id.
    pub fn client(&self, client_id: &str) -> Result<Option<Client>> {
        let row = self.db.conn()?.query_opt(
            "SELECT kind, name, redirect_uris, auth_method, fetched_at FROM oauth_clients WHERE client_id = ?1",
            args![client_id],
            |r| {
                Ok((
                    r.get::<String>(0)?,
                    r.get::<String>(1)?,
                    r.get::<String>(2)?,
                    r.get::<String>(3)?,
                    r.get::<Option<i64>>(4)?,
                ))
            },
        )?;
        Ok(row.map(|(kind, name, uris, method, fetched)| Client {
            client_id: client_id.to_string(),
            kind: if kind == "metadata_document" { ClientKind::MetadataDocument } else { ClientKind::Registered },
            name,
            redirect_uris: serde_json::from_str(&uris).unwrap_or_default(),
            auth_method: AuthMethod::parse(&method).unwrap_or(AuthMethod::None),
            fetched_at_ms: fetched,
        }))
    }

    /// Authenticates a client at the token or revocation endpoint: a known
    /// client, with its secret if it has one (given the way it registered).
    pub fn authenticate_client(&self, client_id: &str, secret: Option<&str>, via: AuthMethod) -> Result<Client> {
        let unknown = || OAuthError::InvalidClient("unknown client or wrong client secret".into());
        let client = self.client(client_id)?.ok_or_else(unknown)?;
        if client.auth_method == AuthMethod::None {
            return Ok(client);
        }
        let stored: Option<String> = self.db.conn()?.query_one(
            "SELECT secret_hash FROM oauth_clients WHERE client_id = ?1",
            args![client_id],
            |r| r.get(0),
        )?;
        let given = secret.map(secret::hash);
        // A confidential client must prove itself the way it registered.
        if via != client.auth_method || stored.is_none() || given != stored {
            return Err(unknown());
        }
        Ok(client)
    }

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

    fn insert_tokens(
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

    /// Deletes expired codes and tokens, tokens of revoked credentials, and
    /// registrations not used within [`Registration::unused_ttl`]; returns
    /// how many rows went.
    pub fn purge(&self) -> std::result::Result<usize, CoreError> {
        let now = self.clock.now_ms();
        let mut conn = self.db.conn()?;
        let mut n = conn.execute("DELETE FROM oauth_codes WHERE expires_at <= ?1", args![now])?;
        n += conn.execute(
            "DELETE FROM oauth_tokens WHERE expires_at <= ?1
             OR credential_id IN (SELECT id FROM credentials WHERE revoked_at IS NOT NULL)",
            args![now],
        )?;
        n += conn.execute(
            "DELETE FROM oauth_clients WHERE last_used_at IS NULL AND created_at <= ?1",
            args![now.saturating_sub(self.lifetimes.registration.unused_ms())],
        )?;
        Ok(n)
    }
}

fn is_confidential(method: AuthMethod) -> bool {
    method != AuthMethod::None
}

/// Revokes a credential and drops its tokens, inside `tx`.
fn revoke_in(tx: &mut Conn<'_>, credential: &str, reason: &str, now: i64) -> crate::error::Result<()> {
    tx.execute(
        "UPDATE credentials SET revoked_at = ?1, revoked_reason = ?2 WHERE id = ?3 AND revoked_at IS NULL",
        args![now, reason, credential],
    )?;
    tx.execute("DELETE FROM oauth_tokens WHERE credential_id = ?1 AND kind = 'access'", args![credential])?;
    Ok(())
}

#[cfg(test)]
mod tests;
