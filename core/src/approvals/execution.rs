//! An execution: a gated call as it was asked for, with the digests that bind
//! an approval to exactly what runs, and the rule of who may resume it.

use gatehouse_model::{CredentialId, ExecutionId};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A gated call: the call as asked for ([`NewExecution`], each field written
/// once there) and what opening it fixed (its id, the arguments' digest, its
/// times). Its request's fields read as its own (`execution.tool`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    /// `exec_<uuid>`.
    pub id: ExecutionId,
    /// The call as it was asked for.
    #[serde(flatten)]
    pub request: NewExecution,
    /// SHA-256 (hex) of the canonical arguments.
    pub arguments_digest: String,
    /// Creation time (Unix ms).
    pub created_at_ms: i64,
    /// Expiry time (Unix ms).
    pub expires_at_ms: i64,
}

impl std::ops::Deref for Execution {
    type Target = NewExecution;

    /// An execution is its request plus what opening it fixed: the request's
    /// fields are read through it, so none is declared twice.
    fn deref(&self) -> &NewExecution {
        &self.request
    }
}

/// What the caller supplies to open an execution.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewExecution {
    /// Exposed tool name.
    pub tool: String,
    /// The upstream server, for upstream tools.
    pub upstream: Option<String>,
    /// The tool's own name at its upstream (what runs once approved).
    pub upstream_tool: Option<String>,
    /// SHA-256 of the tool's definition when the call was paused; the
    /// approved call runs only if the definition is still the same.
    pub tool_digest: String,
    /// The call's arguments, exactly as sent.
    pub arguments: Value,
    /// Agent name of the calling credential.
    pub agent: String,
    /// The calling credential.
    pub credential_id: CredentialId,
    /// The calling credential's thread: a credential re-issued for the same
    /// thread (same agent and owner) may resume it.
    pub thread: Option<String>,
    /// The agent's owner (decides, with admins), by name for pages.
    pub owner: Option<String>,
    /// The owner's id: what access compares (its credential's).
    pub owner_id: Option<gatehouse_model::UserId>,
    /// The MCP session it was made in, if any.
    pub session_id: Option<String>,
    /// Whether only a person may decide it.
    pub human_only: bool,
    /// Whether only an admin may decide it (tools that change the gate for everyone).
    pub admin_only: bool,
    /// How long it may stay pending, when a rule says (`approval_ttl` on a
    /// `[[policy]]` entry); the store's TTL otherwise. Capped at
    /// [`super::MAX_APPROVAL_TTL`]. Read once, when the execution opens
    /// (its `expires_at_ms` holds from then on; a stored row has none).
    #[serde(skip)]
    pub ttl: Option<std::time::Duration>,
    /// Who asked for a person: the verdict's actor (a rule, the tool's
    /// annotations, the gate-changing rule), which its pending entry names,
    /// so a rule's decisions can be counted. Read once, when the execution
    /// opens; `None` reads as the agent.
    #[serde(skip)]
    pub asked_by: Option<String>,
    /// Its arguments as the record keeps them (`keep_arguments`), if it
    /// does: its pending entry holds them, past the call's settling.
    #[serde(skip)]
    pub kept_arguments: Option<gatehouse_model::KeptArguments>,
}

/// Whether `credential` may resume, decide (model mode) or retry
/// `execution`: the credential that opened it, or the one that replaced it by
/// re-issue for the same thread (same agent and owner). Another credential
/// with the same agent name is someone else.
pub fn belongs_to(
    credential: &crate::credentials::Credential,
    credential_id: &str,
    thread: Option<&str>,
    agent: &str,
    owner: (Option<&str>, Option<gatehouse_model::UserId>),
) -> bool {
    credential.id == credential_id
        || (thread.is_some()
            && credential.thread.as_deref() == thread
            && credential.agent == agent
            && same_owner((credential.owner.as_deref(), credential.owner_id), owner))
}

/// Whether two (owner name, owner id) pairs are one owner: the same user
/// id, or no owner at all on both sides. An owner who was removed (a name,
/// no id) is no one's, not even an owner-less agent's.
pub fn same_owner(
    a: (Option<&str>, Option<gatehouse_model::UserId>),
    b: (Option<&str>, Option<gatehouse_model::UserId>),
) -> bool {
    match (a, b) {
        ((_, Some(x)), (_, Some(y))) => x == y,
        ((None, None), (None, None)) => true,
        _ => false,
    }
}

impl Execution {
    /// Whether `credential` may resume it (see [`belongs_to`]).
    pub fn belongs_to(&self, credential: &crate::credentials::Credential) -> bool {
        belongs_to(
            credential,
            &self.credential_id,
            self.thread.as_deref(),
            &self.agent,
            (self.owner.as_deref(), self.owner_id),
        )
    }
}

/// SHA-256 (hex) of the canonical JSON of `arguments` (object keys sorted).
pub fn digest(arguments: &Value) -> String {
    fn canonical(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let sorted: std::collections::BTreeMap<_, _> =
                    map.iter().map(|(k, v)| (k.clone(), canonical(v))).collect();
                Value::Object(sorted.into_iter().collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }
    hex::encode(Sha256::digest(canonical(arguments).to_string().as_bytes()))
}
