//! Ids that name one kind of thing, as types, so that one cannot be passed
//! where another kind is meant. Each is its text on the wire
//! (`#[serde(transparent)]`) and in the database, so the JSON and the rows
//! are what they were. So far: [`ExecutionId`] (credentials' and grants'
//! ids are still text).

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The id of a call as the gate and the audit log file it: `exec_…` for a
/// call that paused (an execution), `req_…` for one that ran or was refused
/// at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExecutionId(String);

impl ExecutionId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The text, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl From<String> for ExecutionId {
    fn from(id: String) -> Self {
        Self(id)
    }
}

impl From<&str> for ExecutionId {
    fn from(id: &str) -> Self {
        Self(id.to_string())
    }
}

impl From<ExecutionId> for String {
    fn from(id: ExecutionId) -> Self {
        id.0
    }
}

impl fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Read as its text wherever text is wanted (a URL, a log line); text
/// becomes an id only by [`From`], where it enters (a path, a form, a row).
impl std::ops::Deref for ExecutionId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for ExecutionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Maps keyed by id are looked up with the id's text too.
impl Borrow<str> for ExecutionId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for ExecutionId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for ExecutionId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}
