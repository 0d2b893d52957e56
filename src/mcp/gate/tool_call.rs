//! One `tools/call` as the handler received it: what the engine and every
//! mode read of it.

use rmcp::model::InputResponses;
use serde_json::Value;

use super::Mode;

/// One `tools/call`, as the handler received it.
pub struct Call<'a> {
    /// Exposed tool name.
    pub name: &'a str,
    /// Arguments (`Null` when none were sent).
    pub arguments: Value,
    /// The `requestState` echoed by a 2026-07-28 retry.
    pub request_state: Option<&'a str>,
    /// The answers a 2026-07-28 retry carries (to an upstream's input requests).
    pub input_responses: Option<InputResponses>,
    /// The session's announcement mode.
    pub mode: Mode,
}
