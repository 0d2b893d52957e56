//! An agent credential as listed (never its token).

use serde::{Deserialize, Serialize};

/// Whether a credential can still be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialStatus {
    /// Usable: not revoked, and its agent showed life within the window.
    Active,
    /// Lapsed: no sign of life within the window.
    Expired,
    /// Revoked by a person, an orchestrator or a re-issue.
    Revoked,
}

impl CredentialStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialStatus::Active => "active",
            CredentialStatus::Expired => "expired",
            CredentialStatus::Revoked => "revoked",
        }
    }
}

impl std::fmt::Display for CredentialStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A credential with its liveness worked out against the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialView {
    /// `cred_…`
    pub id: String,
    /// The agent's name.
    pub agent: String,
    /// The orchestrator's thread, if any.
    pub thread: Option<String>,
    /// The provider session, if any.
    pub provider_session: Option<String>,
    /// The owning user, if any.
    pub owner: Option<String>,
    /// Why it was revoked (`revoked`, `reissued`, …).
    pub revoked_reason: Option<String>,
    /// Active, expired or revoked.
    pub status: CredentialStatus,
    /// RFC 3339 issue time.
    pub created_at: String,
    /// RFC 3339 time of the last sign of life.
    pub last_seen_at: String,
    /// RFC 3339 time it lapses unless it shows life again.
    pub expires_at: String,
    /// Last sign of life (Unix ms), for relative times.
    pub last_seen_ms: i64,
    /// When it lapses (Unix ms), for relative times.
    pub expires_ms: i64,
}
