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

/// The cookie that carries a refused sign-in back to the sign-in page,
/// once: what was typed as the name (kept in the field) and why it was
/// refused. A cookie, not the address, so the name never lands in the
/// browser's history or a log, and Back never shows a stale refusal.
pub const SIGN_IN_ATTEMPT_COOKIE: &str = "gatehouse_sign_in";

/// How long that cookie lives: the redirect's round trip, with room.
pub const SIGN_IN_ATTEMPT_SECS: u64 = 60;

/// A refused sign-in, as the sign-in page shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignInAttempt {
    /// What was typed as the name.
    pub username: String,
    /// Refused for too many failures: seconds until the next try; `None`:
    /// the name and password did not match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_secs: Option<u64>,
}

impl SignInAttempt {
    /// The cookie's value (form-encoded: only characters a cookie may hold).
    pub fn to_cookie_value(&self) -> String {
        serde_urlencoded::to_string(self).unwrap_or_default()
    }

    /// The attempt in a request's `Cookie` header, if there is a readable one.
    pub fn from_cookie_header(header: &str) -> Option<Self> {
        crate::cookie_value(header, SIGN_IN_ATTEMPT_COOKIE).and_then(|value| serde_urlencoded::from_str(value).ok())
    }
}

#[cfg(test)]
mod sign_in_attempt_tests {
    use super::*;

    #[test]
    fn an_attempt_survives_its_cookie_whatever_was_typed() {
        for typed in ["ada", "a b;c=d,\"e\"&%", "ünïcode ✓", ""] {
            let attempt = SignInAttempt { username: typed.into(), retry_after_secs: Some(30) };
            let value = attempt.to_cookie_value();
            assert!(!value.contains([';', ',', ' ', '"', '\\']), "{value}");
            let header = format!("theme=dark; {SIGN_IN_ATTEMPT_COOKIE}={value}; other=1");
            assert_eq!(SignInAttempt::from_cookie_header(&header), Some(attempt));
        }
        assert_eq!(SignInAttempt::from_cookie_header("theme=dark"), None);
    }
}
