//! Ids that name one kind of thing, as types, so that one cannot be passed
//! where another kind is meant. Each is its text on the wire
//! (`#[serde(transparent)]`) and in the database, so the JSON and the rows
//! are what they were. Text becomes an id only by [`From`], where it
//! enters (a path, a form, a row); an id reads as its text wherever text
//! is wanted (a URL, a log line) through `Deref<Target = str>`.

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Declares a text id type with the conversions every id has.
macro_rules! text_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(id.to_string())
            }
        }

        impl From<&String> for $name {
            fn from(id: &String) -> Self {
                Self(id.clone())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        /// Maps keyed by id are looked up with the id's text too.
        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }
    };
}

text_id! {
    /// The id of a call as the gate and the audit log file it: `exec_…` for a
    /// call that paused (an execution), `req_…` for one that ran or was refused
    /// at once.
    ExecutionId
}

text_id! {
    /// The id of an agent credential (`cred_…`): what executions, audit
    /// entries, MCP sessions and OAuth tokens name their agent by.
    CredentialId
}

text_id! {
    /// The id of a scoped grant (`grant_…`).
    GrantId
}

/// The id of a user: their row's number. Kept by number, not by name,
/// wherever a user's things are found (a removed user's history is no one's,
/// whoever takes the name later).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UserId(i64);

impl UserId {
    /// The id numbered `id`.
    pub const fn new(id: i64) -> Self {
        Self(id)
    }

    /// The number.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl From<i64> for UserId {
    fn from(id: i64) -> Self {
        Self(id)
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
