//! The gate: policy decides each call; a gated call becomes a paused
//! execution ([`engine`]), announced the session's way ([`announce`]): the
//! browser answer ([`browser`]), the model's own decision ([`model`]), URL
//! elicitation ([`url_elicitation`]), a trusted client form ([`form`]) or a
//! 2026-07-28 input-required result ([`input_required`]) or a task for
//! clients that declare tasks ([`task`]); the `resume` tool ([`resume`])
//! waits for the decision and returns the real result.

pub mod announce;
pub mod browser;
pub mod engine;
pub mod form;
pub mod granted;
pub mod input_required;
pub mod mode;
pub mod model;
pub mod resume;
pub mod task;
pub mod url_elicitation;

pub use engine::{Call, call, list, tool_digest};
pub use mode::Mode;
