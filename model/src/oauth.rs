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
    /// The agent name the form suggests.
    pub agent: String,
    /// The authorization request's fields, sent back with the decision.
    pub fields: Vec<(String, String)>,
}

/// What the consent page finds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsentInfo {
    /// A valid request to approve or deny.
    Ask(ConsentView),
    /// A request that cannot be approved, and why.
    Refused(String),
}
