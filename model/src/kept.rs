//! A call's arguments as the record keeps them: whose are kept is the
//! operator's choice ([`Keep`]: globally, per rule, per upstream), and what
//! is kept is bounded and redacted ([`KeptArguments`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Whose calls' arguments the record keeps (`keep_arguments`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Keep {
    /// No call's: a paused call's arguments go once it is settled.
    None,
    /// The calls that waited for a person (who saw them anyway).
    #[default]
    Gated,
    /// Every call on the record, at once or refused too.
    All,
}

impl Keep {
    /// The word the config file and the console use.
    pub fn as_str(self) -> &'static str {
        match self {
            Keep::None => "none",
            Keep::Gated => "gated",
            Keep::All => "all",
        }
    }

    /// What holds for one call: the deciding rule's and its upstream's
    /// choices override `global`; when both say, the one that keeps less
    /// wins (an upstream set to `none` is never kept by a broad rule).
    pub fn of(global: Keep, rule: Option<Keep>, upstream: Option<Keep>) -> Keep {
        match (rule, upstream) {
            (Some(r), Some(u)) => r.min(u),
            (Some(one), None) | (None, Some(one)) => one,
            (None, None) => global,
        }
    }

    /// Whether a call's arguments are kept: `waited` says it paused for a person.
    pub fn keeps(self, waited: bool) -> bool {
        match self {
            Keep::None => false,
            Keep::Gated => waited,
            Keep::All => true,
        }
    }
}

impl std::str::FromStr for Keep {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "none" => Ok(Keep::None),
            "gated" => Ok(Keep::Gated),
            "all" => Ok(Keep::All),
            other => Err(format!("{other:?} is not one of gated, all or none")),
        }
    }
}

/// What a redacted value is kept as.
pub const REDACTED: &str = "•••";

/// A call's arguments as the record keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kept", rename_all = "camelCase")]
pub enum KeptArguments {
    /// All of them (the redacted names' values as [`REDACTED`]).
    #[serde(rename_all = "camelCase")]
    Whole {
        /// The arguments.
        arguments: Value,
        /// The argument names whose values were redacted.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        redacted: Vec<String>,
    },
    /// Past the size bound: how large they were and their first bytes
    /// (the entry's digest identifies them whole).
    #[serde(rename_all = "camelCase")]
    Cut {
        /// Their size as JSON, in bytes (after redaction).
        size: usize,
        /// The first bytes of that JSON, cut on a character boundary.
        first: String,
        /// The argument names whose values were redacted.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        redacted: Vec<String>,
    },
}

impl KeptArguments {
    /// `arguments` as kept: every value under a name in `redact` (at any
    /// depth, case-insensitively) replaced by [`REDACTED`], then whole if
    /// its JSON is at most `max_bytes`, else cut to that many bytes.
    pub fn keep(arguments: &Value, redact: &[String], max_bytes: usize) -> Self {
        let mut arguments = arguments.clone();
        let mut redacted = Vec::new();
        redact_in(&mut arguments, redact, &mut redacted);
        redacted.sort();
        redacted.dedup();
        let text = arguments.to_string();
        if text.len() <= max_bytes {
            return KeptArguments::Whole { arguments, redacted };
        }
        let mut cut = max_bytes;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        KeptArguments::Cut { size: text.len(), first: text[..cut].to_string(), redacted }
    }

    /// The arguments whole (for a condition), unless they were cut.
    pub fn whole(&self) -> Option<&Value> {
        match self {
            KeptArguments::Whole { arguments, .. } => Some(arguments),
            KeptArguments::Cut { .. } => None,
        }
    }

    /// The names whose values were redacted.
    pub fn redacted(&self) -> &[String] {
        match self {
            KeptArguments::Whole { redacted, .. } | KeptArguments::Cut { redacted, .. } => redacted,
        }
    }

    /// What to show a person: the JSON, pretty when whole; the first
    /// bytes followed by "…" when cut.
    pub fn shown(&self) -> String {
        match self {
            KeptArguments::Whole { arguments, .. } => {
                serde_json::to_string_pretty(arguments).unwrap_or_else(|_| arguments.to_string())
            }
            KeptArguments::Cut { first, .. } => format!("{first}…"),
        }
    }
}

fn redact_in(value: &mut Value, redact: &[String], redacted: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (name, inner) in map.iter_mut() {
                if redact.iter().any(|r| r.eq_ignore_ascii_case(name)) {
                    *inner = Value::String(REDACTED.into());
                    redacted.push(name.clone());
                } else {
                    redact_in(inner, redact, redacted);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| redact_in(item, redact, redacted)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_narrower_override_wins_and_gated_keeps_what_waited() {
        assert_eq!(Keep::of(Keep::Gated, None, None), Keep::Gated);
        assert_eq!(Keep::of(Keep::Gated, Some(Keep::All), None), Keep::All);
        assert_eq!(Keep::of(Keep::All, None, Some(Keep::None)), Keep::None);
        assert_eq!(Keep::of(Keep::Gated, Some(Keep::All), Some(Keep::None)), Keep::None);
        assert!(Keep::Gated.keeps(true) && !Keep::Gated.keeps(false));
        assert!(Keep::All.keeps(false) && !Keep::None.keeps(true));
        assert_eq!("all".parse::<Keep>(), Ok(Keep::All));
        assert!("some".parse::<Keep>().unwrap_err().contains("gated, all or none"));
    }

    #[test]
    fn names_are_redacted_at_any_depth_and_a_large_call_is_cut_on_a_character() {
        let redact = vec!["password".to_string(), "token".to_string()];
        let kept = KeptArguments::keep(
            &json!({"user": "ada", "Password": "hunter22", "nested": [{"token": "t"}]}),
            &redact,
            1000,
        );
        assert_eq!(
            kept,
            KeptArguments::Whole {
                arguments: json!({"user": "ada", "Password": REDACTED, "nested": [{"token": REDACTED}]}),
                redacted: vec!["Password".into(), "token".into()],
            }
        );
        let big = json!({"text": "é".repeat(100)});
        let cut = KeptArguments::keep(&big, &redact, 20);
        let KeptArguments::Cut { size, first, .. } = &cut else { panic!("{cut:?}") };
        assert_eq!(*size, big.to_string().len());
        assert!(first.len() <= 20 && first.starts_with(r#"{"text":"é"#), "{first}");
        assert_eq!(cut.whole(), None);
        let round: KeptArguments = serde_json::from_str(&serde_json::to_string(&cut).unwrap()).unwrap();
        assert_eq!(round, cut);
    }
}
