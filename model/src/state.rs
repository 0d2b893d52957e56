//! Where an execution is in its life, and the answers that move it.

use serde::{Deserialize, Serialize};

/// Where an execution is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Waiting for a person.
    Pending,
    /// Approved, about to run.
    Approved,
    /// The tool is running.
    Running,
    /// Ran and succeeded.
    Completed,
    /// Ran and failed.
    Failed,
    /// A person declined it.
    Declined,
    /// Nobody decided within the TTL.
    Expired,
    /// The client, its session or a person cancelled it.
    Cancelled,
    /// Its credential was revoked before it ran.
    Revoked,
    /// Audit only: a request (a resource read, a prompt) the policy let
    /// through at once; it never pauses.
    Allowed,
    /// Audit only: a request the policy refused at once.
    Blocked,
    /// Audit only: a call refused because a rule's rate limit was reached.
    Limited,
    /// Audit only: what a shadow rule would have done to a call (the call
    /// itself is recorded as it went).
    Shadow,
}

impl State {
    /// Every state, in the order an execution can move through them.
    pub const ALL: [State; 13] = [
        State::Pending,
        State::Approved,
        State::Running,
        State::Completed,
        State::Failed,
        State::Declined,
        State::Expired,
        State::Cancelled,
        State::Revoked,
        State::Allowed,
        State::Blocked,
        State::Limited,
        State::Shadow,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Approved => "approved",
            State::Running => "running",
            State::Completed => "completed",
            State::Failed => "failed",
            State::Declined => "declined",
            State::Expired => "expired",
            State::Cancelled => "cancelled",
            State::Revoked => "revoked",
            State::Allowed => "allowed",
            State::Blocked => "blocked",
            State::Limited => "limited",
            State::Shadow => "shadow",
        }
    }

    /// Parses a wire name (also `abandoned`, which reads as cancelled).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => State::Pending,
            "approved" => State::Approved,
            "running" => State::Running,
            "completed" => State::Completed,
            "failed" => State::Failed,
            "declined" => State::Declined,
            "expired" => State::Expired,
            "cancelled" | "abandoned" => State::Cancelled,
            "revoked" => State::Revoked,
            "allowed" => State::Allowed,
            "blocked" => State::Blocked,
            "limited" => State::Limited,
            "shadow" => State::Shadow,
            _ => return None,
        })
    }

    /// Whether nothing more will happen.
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            State::Completed
                | State::Failed
                | State::Declined
                | State::Expired
                | State::Cancelled
                | State::Revoked
                | State::Allowed
                | State::Blocked
        )
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A person's (or client's) answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Run it.
    Accept,
    /// Do not run it.
    Decline,
    /// Drop it.
    Cancel,
}

impl Decision {
    /// The state a decision leads to.
    pub fn state(self) -> State {
        match self {
            Decision::Accept => State::Approved,
            Decision::Decline => State::Declined,
            Decision::Cancel => State::Cancelled,
        }
    }

    /// Whether `state` is where this decision leads (so repeating it is a no-op).
    pub fn agrees_with(self, state: State) -> bool {
        match self {
            Decision::Accept => matches!(state, State::Approved | State::Running | State::Completed | State::Failed),
            Decision::Decline => state == State::Declined,
            Decision::Cancel => state == State::Cancelled,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Accept => "accept",
            Decision::Decline => "decline",
            Decision::Cancel => "cancel",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "accept" => Decision::Accept,
            "decline" => Decision::Decline,
            "cancel" => Decision::Cancel,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip() {
        for s in State::ALL {
            assert_eq!(State::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert_eq!(State::parse("abandoned"), Some(State::Cancelled));
        for d in [Decision::Accept, Decision::Decline, Decision::Cancel] {
            assert_eq!(Decision::parse(d.as_str()), Some(d));
            assert!(d.agrees_with(d.state()));
        }
    }
}
