//! A user as the users page lists them (never a password or a link token).

use serde::{Deserialize, Serialize};

/// Whether a user can sign in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserStatus {
    /// Has a password and may sign in.
    Active,
    /// Invited: has not chosen a password yet.
    Invited,
    /// Disabled by an admin: cannot sign in, has no sessions.
    Disabled,
}

impl UserStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            UserStatus::Active => "active",
            UserStatus::Invited => "invited",
            UserStatus::Disabled => "disabled",
        }
    }
}

impl std::fmt::Display for UserStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a one-time password link is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkPurpose {
    /// A new user chooses their first password.
    Invite,
    /// A user chooses a new password (an admin reset it).
    Reset,
}

impl LinkPurpose {
    /// The wire name (also the change log's action).
    pub fn as_str(self) -> &'static str {
        match self {
            LinkPurpose::Invite => "invite",
            LinkPurpose::Reset => "reset",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "invite" => Some(LinkPurpose::Invite),
            "reset" => Some(LinkPurpose::Reset),
            _ => None,
        }
    }
}

/// One user, for the users page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserView {
    /// Unique name.
    pub username: String,
    /// Admins see and decide everything and manage users.
    pub is_admin: bool,
    /// Active, invited or disabled.
    pub status: UserStatus,
    /// When the user was added (Unix ms).
    pub created_ms: i64,
    /// When an unused invite or reset link stops working (Unix ms), if one is out.
    pub link_expires_ms: Option<i64>,
    /// Live browser sessions.
    pub sessions: usize,
}

/// A one-time password link just made: shown once, to the admin who made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PasswordLink {
    /// An id to show it by (not the token).
    pub id: String,
    /// Whose password it sets.
    pub username: String,
    /// Invite or reset.
    pub purpose: LinkPurpose,
    /// The full link, token included.
    pub url: String,
    /// When it stops working (Unix ms).
    pub expires_ms: i64,
}
