//! The gate: policy decides each call; a gated call becomes a paused
//! execution ([`engine`]), announced the session's way ([`announce`]): the
//! browser answer ([`browser`]), the agent's own decision ([`agent_decides`]), URL
//! elicitation ([`url_elicitation`]), a trusted client form ([`form`]) or a
//! 2026-07-28 input-required result ([`input_required`]) or a task for
//! clients that declare tasks ([`task`]); the `resume` tool ([`resume`])
//! waits for the decision and returns the real result; a retry of a call
//! whose upstream asked for input is checked again ([`upstream_round`]). What becomes of a
//! call once decided or settled ([`outcome`]) is shared by the engine and
//! every mode, and imports neither. Calls that run or are refused at once
//! are audited too ([`record`]).

pub mod admit;
pub mod agent_decides;
pub mod announce;
pub mod browser;
pub mod engine;
pub mod form;
pub mod granted;
pub mod input_required;
pub mod mode;
pub mod outcome;
pub mod record;
pub mod resume;
pub mod task;
pub mod tool_call;
pub mod upstream_round;
pub mod url_elicitation;

pub use engine::{call, list};
pub use mode::Mode;
pub use outcome::tool_digest;
pub use tool_call::Call;
