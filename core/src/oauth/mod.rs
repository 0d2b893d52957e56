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
use gatehouse_model::UserId;

pub use uris::{check_redirect_uri, is_pkce_value, pkce_s256_matches, redirect_matches};

mod clients;
mod tokens;

pub use clients::{AuthMethod, Client, ClientKind, ClientMetadata, Registered, Registration};
pub use tokens::{Consent, Lifetimes, Tokens};

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

/// A registration younger than this is never evicted to make room for
/// another from its address: a client that registers and opens the browser
/// has three minutes (time to sign in) before anyone at its address can
/// take its place; a flood from its address refuses others at most as long.
pub const FRESH_MS: i64 = 3 * 60_000;

/// At most this many clients one person has seen on a consent page and not
/// used are kept out of their address's count.
pub const SEEN_PER_PERSON: i64 = 5;

/// A registration shown on a consent page but never used for a sign-in is
/// forgotten after a day.
pub const SEEN_UNUSED_MS: i64 = 24 * 60 * 60 * 1000;

/// Why a registration is refused when every address together is at
/// [`MAX_UNUSED_CLIENTS`].
const EVERYONE: &str = "too many registered clients have not been used yet; try again later";

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

/// The authorization server's store: clients, codes, tokens.
#[derive(Clone)]
pub struct OAuthStore {
    db: Db,
    clock: Arc<dyn Clock>,
    credentials: CredentialStore,
    live: LiveHub,
    lifetimes: Lifetimes,
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

    /// Deletes expired codes and tokens, tokens of revoked credentials, and
    /// registrations not used within [`Registration::unused_ttl`] (a day once
    /// seen on a consent page); returns
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
            "DELETE FROM oauth_clients WHERE last_used_at IS NULL
             AND ((seen_at IS NULL AND created_at <= ?1) OR seen_at <= ?2)",
            args![now.saturating_sub(self.lifetimes.registration.unused_ms()), now.saturating_sub(SEEN_UNUSED_MS)],
        )?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
