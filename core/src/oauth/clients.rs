//! OAuth clients: dynamic registration (RFC 7591), client metadata
//! documents, and authenticating a client at the token endpoint.

use super::*;

/// How a client was made known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// Registered through `/oauth/register` (its name is self-declared).
    Registered,
    /// Its `client_id` is the HTTPS URL of its metadata document, fetched by us.
    MetadataDocument,
}

impl ClientKind {
    pub(super) fn as_str(self) -> &'static str {
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
pub(super) fn clean_name(name: Option<&str>) -> String {
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

    pub(super) fn unused_ms(&self) -> i64 {
        i64::try_from(self.unused_ttl.as_millis()).unwrap_or(i64::MAX)
    }
}

pub(super) fn is_confidential(method: AuthMethod) -> bool {
    method != AuthMethod::None
}

impl OAuthStore {
    /// Registers a client (RFC 7591) for someone at `from` (the client's
    /// address, an IPv6 address by its /64: see the server's `ClientAddr`);
    /// confidential ones get a secret.
    ///
    /// Counted in the database, so replicas agree. `from` holds at most
    /// [`Registration::per_address`] *unseen* registrations: never shown on a
    /// signed-in person's consent page ([`OAuthStore::seen`]), never used for
    /// a sign-in, younger than [`Registration::unused_ttl`]. At that bound the
    /// address's oldest unseen one older than [`FRESH_MS`] makes room (so a
    /// flood from a shared address delays nobody's sign-in for long, and
    /// evicts only registrations nobody has started to use); only when all
    /// are fresher is the registration refused
    /// ([`OAuthError::TooManyRegistrations`], retry within [`FRESH_MS`]). All
    /// addresses together hold at most [`MAX_UNUSED_CLIENTS`] unseen ones.
    /// Clients known by a metadata document are never counted nor evicted.
    /// The count, the eviction and the insert run in one transaction, which
    /// takes the write lock on both backends.
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
            Address { freshest_oldest: i64 },
            Everyone,
        }
        let registered = ClientKind::Registered.as_str();
        let (refused, evicted) = self
            .db
            .conn()?
            .transaction(|tx| {
                let (mine, oldest): (i64, Option<i64>) = tx.query_one(
                    "SELECT COUNT(*), MIN(created_at) FROM oauth_clients
                 WHERE kind = ?1 AND last_used_at IS NULL AND seen_at IS NULL AND registered_from = ?2
                   AND created_at > ?3",
                    args![registered, from, since],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                let mut evicted = None;
                if mine >= per_address {
                    let oldest = oldest.unwrap_or(now);
                    if oldest > now - FRESH_MS {
                        return Ok((Some(Refused::Address { freshest_oldest: oldest }), None));
                    }
                    let victim: String = tx.query_one(
                        "SELECT client_id FROM oauth_clients
                     WHERE kind = ?1 AND last_used_at IS NULL AND seen_at IS NULL AND registered_from = ?2
                       AND created_at > ?3
                     ORDER BY created_at, client_id LIMIT 1",
                        args![registered, from, since],
                        |r| r.get(0),
                    )?;
                    // Still unused and unseen (a consent page may have shown it since).
                    tx.execute(
                        "DELETE FROM oauth_clients WHERE client_id = ?1 AND seen_at IS NULL AND last_used_at IS NULL",
                        args![victim],
                    )?;
                    evicted = Some(victim);
                }
                let everyone: i64 = tx.query_one(
                    "SELECT COUNT(*) FROM oauth_clients
                 WHERE kind = ?1 AND last_used_at IS NULL AND seen_at IS NULL AND created_at > ?2",
                    args![registered, since],
                    |r| r.get(0),
                )?;
                if everyone >= MAX_UNUSED_CLIENTS {
                    // Rolls the eviction back with the rest.
                    return Err(CoreError::Limit(EVERYONE.into()));
                }
                tx.execute(
                "INSERT INTO oauth_clients (client_id, kind, name, redirect_uris, auth_method, secret_hash, created_at,
                                            registered_from)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                args![
                    client_id,
                    registered,
                    metadata.name,
                    uris,
                    metadata.auth_method.as_str(),
                    secret.as_deref().map(secret::hash),
                    now,
                    from
                ],
            )?;
                Ok((None, evicted))
            })
            .or_else(|e| match e {
                CoreError::Limit(m) if m == EVERYONE => Ok((Some(Refused::Everyone), None)),
                other => Err(other),
            })?;
        match refused {
            Some(Refused::Address { freshest_oldest }) => {
                let wait_ms = (freshest_oldest + FRESH_MS - now).max(1000);
                return Err(OAuthError::TooManyRegistrations {
                    message: format!(
                        "this address registered {per_address} clients within the last few minutes that have not \
                         been used yet (oauth.max_unused_registrations_per_address); use one of them, or register \
                         again in a few minutes"
                    ),
                    retry_after_secs: u64::try_from((wait_ms + 999) / 1000).unwrap_or(1),
                });
            }
            Some(Refused::Everyone) => {
                return Err(OAuthError::TemporarilyUnavailable(EVERYONE.into()));
            }
            None => {}
        }
        if let Some(victim) = evicted {
            tracing::info!(client = %victim, address = %from, "an unused client registration made room for a new one");
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

    /// Marks a registered client as shown on `person`'s consent page (they
    /// are signed in): someone has started to use it, so it no longer counts
    /// against its address nor can be evicted to make room (a seen client
    /// never used for a sign-in goes after [`SEEN_UNUSED_MS`]). Only a
    /// person's page marks it, and one person keeps at most
    /// [`SEEN_PER_PERSON`] such clients at once: neither a client nor a
    /// signed-in account can take registrations out of the count at will.
    pub fn seen(&self, client_id: &str, person: UserId) -> std::result::Result<(), CoreError> {
        let now = self.clock.now_ms();
        self.db.conn()?.execute(
            "UPDATE oauth_clients SET seen_at = ?1, seen_by = ?2
             WHERE client_id = ?3 AND seen_at IS NULL AND last_used_at IS NULL
               AND (SELECT COUNT(*) FROM oauth_clients
                    WHERE seen_by = ?2 AND last_used_at IS NULL AND seen_at > ?4) < ?5",
            args![now, person, client_id, now.saturating_sub(SEEN_UNUSED_MS), SEEN_PER_PERSON],
        )?;
        Ok(())
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
}
