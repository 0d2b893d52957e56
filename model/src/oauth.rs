//! What the OAuth consent page shows: which client asks, where the code
//! goes, who will own the agent, and the request's fields to send back.

use serde::{Deserialize, Serialize};

/// A sign-in request an MCP client sent a person to approve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsentView {
    /// The client's id (a registration id, or its metadata document URL).
    pub client_id: String,
    /// The client's name.
    pub client_name: String,
    /// For a client known by its metadata document: the host that serves it
    /// (so vouches for the name). `None`: the name is self-declared.
    pub verified_host: Option<String>,
    /// Where the browser goes afterwards.
    pub redirect_uri: String,
    /// That place in words ("this computer, port 5555", or a host name).
    pub redirect_to: String,
    /// The signed-in person, who will own the agent.
    pub user: String,
    /// The agent name the form suggests: one none of the person's agents
    /// goes by, so the client starts with no grants (or, after a refusal,
    /// the name the person typed).
    pub agent: String,
    /// Whether `agent` is the name of one of the person's existing agents:
    /// the client would act as that agent and inherit its grants, which the
    /// person must confirm.
    #[serde(default)]
    pub agent_exists: bool,
    /// How many live grants that existing agent holds.
    #[serde(default)]
    pub inherited_grants: usize,
    /// Why the last decision was refused (shown next to the name field).
    #[serde(default)]
    pub agent_error: Option<String>,
    /// The authorization request's fields, sent back with the decision.
    pub fields: Vec<(String, String)>,
}

/// What the consent page finds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsentInfo {
    /// A valid request to approve or deny.
    Ask(Box<ConsentView>),
    /// A request that cannot be approved, and why.
    Refused(String),
}
