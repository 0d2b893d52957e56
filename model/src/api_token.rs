//! Admin API tokens as the users page shows them: the list, and a token
//! just minted (shown once, to the admin who minted it).

use serde::{Deserialize, Serialize};

/// An admin API token, without its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiTokenView {
    /// `api_…`
    pub id: String,
    /// What it is for.
    pub name: String,
    /// When it was minted (Unix ms).
    pub created_ms: i64,
    /// Whether it was revoked.
    pub revoked: bool,
}

/// A token just minted in the browser: shown once, under a handle of its
/// own (never the token), to the admin who minted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MintedApiToken {
    /// The handle it is shown by (`/users?api_token=…`).
    pub handle: String,
    /// The token's id (`api_…`).
    pub id: String,
    /// What it is for.
    pub name: String,
    /// The bearer token.
    pub token: String,
}
