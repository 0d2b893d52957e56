//! The `GATEHOUSE_*` environment variables, laid over the file's values with
//! figment (file < environment; the flags come later, in
//! [`super::validate`]).
//!
//! Why a table and not figment's `Env` provider: `Env` takes every
//! `GATEHOUSE_*` variable (scripts and tests set others, such as
//! `GATEHOUSE_CONFIG` or `GATEHOUSE_TEST_DATABASE_URL`, which the tree would
//! reject as unknown keys), matches names in any case, and re-reads values as
//! loose TOML (trimmed, unquoted, `1` as a number, no comma lists). The
//! variables have always been read exactly: upper-case names, an empty value
//! ignored, lists comma-separated, flags `true`/`1`/`false`/`0`, and a bad
//! value named by its variable. [`VARIABLES`] keeps that; figment merges the
//! layers (`GATEHOUSE_DATABASE_URL` nests into `[database] url`) and
//! deserializes the tree.

use std::net::SocketAddr;

use figment::Figment;
use figment::providers::Serialized;
use figment::value::Value;

use super::{ConfigError, FileConfig};

/// How a variable's text is read (the messages are those of earlier versions).
#[derive(Clone, Copy)]
enum Kind {
    /// Taken as is (a path, a database URL).
    Text,
    /// `host:port`.
    Address,
    /// An absolute URL.
    Url,
    /// Humantime, longer than zero.
    Duration,
    /// A count.
    Number,
    /// `true`/`1` or `false`/`0`.
    Flag,
    /// Comma-separated; blanks dropped.
    List,
    /// `human` or `json`.
    LogFormat,
    /// `elicit` or `error`.
    NativeUrl,
}

/// Every variable (after `GATEHOUSE_`), in the order they are read: each
/// sets the top-level key of its name in lower case, except `DATABASE_URL`,
/// which sets `[database] url`. Tables (`[[policy]]`, `[[upstream]]`,
/// `[[notify]]`, `[oauth]`) have no variables.
const VARIABLES: &[(&str, Kind)] = &[
    ("LISTEN", Kind::Address),
    ("DATA_DIR", Kind::Text),
    ("PUBLIC_URL", Kind::Url),
    ("DATABASE_URL", Kind::Text),
    ("LIVENESS_WINDOW", Kind::Duration),
    ("APPROVAL_TTL", Kind::Duration),
    ("MAX_BODY_BYTES", Kind::Number),
    ("LIST_PAGE_SIZE", Kind::Number),
    ("LOG_FORMAT", Kind::LogFormat),
    ("ALLOW_MODEL_DECISIONS", Kind::Flag),
    ("NATIVE_URL", Kind::NativeUrl),
    ("ALLOWED_HOSTS", Kind::List),
    ("TRUST_CLIENT_FORMS", Kind::Flag),
    ("RUN_WINDOW", Kind::Duration),
    ("HEADER_READ_TIMEOUT", Kind::Duration),
    ("IDLE_TIMEOUT", Kind::Duration),
    ("MAX_EXECUTIONS_PER_CREDENTIAL", Kind::Number),
    ("MAX_GATED_ARGUMENTS_BYTES", Kind::Number),
    ("MAX_SESSIONS_PER_CREDENTIAL", Kind::Number),
    ("MAX_SESSIONS", Kind::Number),
    ("SESSION_IDLE_TIMEOUT", Kind::Duration),
    ("MAX_CONNECTIONS", Kind::Number),
    ("MAX_REQUESTS_PER_CREDENTIAL", Kind::Number),
    ("RESERVED_CONNECTIONS", Kind::Number),
    ("MAX_CREDENTIALS_PER_USER", Kind::Number),
    ("MAX_BROWSER_SESSIONS_PER_USER", Kind::Number),
    ("MAX_OAUTH_CLIENTS_PER_USER", Kind::Number),
    ("MAX_GRANTS_PER_USER", Kind::Number),
    ("ALLOWED_ORIGINS", Kind::List),
    ("TRUSTED_PROXIES", Kind::List),
    ("AUDIT_RETENTION", Kind::Duration),
    ("AUDIT_MAX_ENTRIES", Kind::Number),
    ("METRICS_LISTEN", Kind::Address),
    ("TLS_CERT", Kind::Text),
    ("TLS_KEY", Kind::Text),
];

const PREFIX: &str = "GATEHOUSE_";

/// The tree of `text` (a config file's, already checked by
/// [`FileConfig::parse`], or empty) with the set variables laid over it.
pub(super) fn overlay(text: &str) -> Result<FileConfig, ConfigError> {
    let mut layers = file_layer(text)?;
    for &(name, kind) in VARIABLES {
        let variable = format!("{PREFIX}{name}");
        if let Some(value) = read(&variable, kind)? {
            layers = layers.merge(Serialized::default(&key(name), value));
        }
    }
    layers.extract().map_err(|e| {
        // The file and each variable were checked above; name what failed all the same.
        let path = e.path.join(".");
        let key =
            VARIABLES.iter().find(|(name, _)| key(name) == path).map_or(path, |(name, _)| format!("{PREFIX}{name}"));
        ConfigError::Value { key, message: e.kind.to_string() }
    })
}

/// The file's values as figment's first layer (the defaults come from
/// `#[serde(default)]` when the tree is deserialized).
fn file_layer(text: &str) -> Result<Figment, ConfigError> {
    let file: toml::Table = toml::from_str(text)
        .map_err(|e| ConfigError::Value { key: "config".into(), message: e.to_string().trim_end().to_string() })?;
    Ok(Figment::from(Serialized::defaults(file)))
}

/// The tree key a variable sets.
fn key(name: &str) -> String {
    match name {
        "DATABASE_URL" => "database.url".into(),
        other => other.to_ascii_lowercase(),
    }
}

/// The variable's value, if it is set and not empty.
fn read(variable: &str, kind: Kind) -> Result<Option<Value>, ConfigError> {
    match std::env::var(variable) {
        Ok(text) if !text.is_empty() => {
            value(kind, &text).map(Some).map_err(|message| ConfigError::Value { key: variable.into(), message })
        }
        _ => Ok(None),
    }
}

/// A variable's text, checked as its kind and typed for the tree.
fn value(kind: Kind, text: &str) -> Result<Value, String> {
    let checked = |result: Result<(), String>| result.map(|()| Value::from(text));
    match kind {
        Kind::Text => Ok(Value::from(text)),
        Kind::Address => checked(text.parse::<SocketAddr>().map(drop).map_err(|e| e.to_string())),
        Kind::Url => checked(url::Url::parse(text).map(drop).map_err(|e| e.to_string())),
        Kind::Duration => checked(super::tree::parse_duration(text).map(drop)),
        Kind::Number => text.parse::<usize>().map(Value::from).map_err(|e| e.to_string()),
        Kind::Flag => match text {
            "true" | "1" => Ok(Value::from(true)),
            "false" | "0" => Ok(Value::from(false)),
            other => Err(format!("{other:?} is not true or false")),
        },
        Kind::List => Ok(Value::from(
            text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect::<Vec<_>>(),
        )),
        Kind::LogFormat => match text {
            "human" | "json" => Ok(Value::from(text)),
            other => Err(format!("unknown log format {other:?} (human or json)")),
        },
        Kind::NativeUrl => match text {
            "elicit" | "error" => Ok(Value::from(text)),
            other => Err(format!("{other:?} is not elicit or error")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variables earlier versions read (README: every key can be set by
    /// `GATEHOUSE_<KEY>`); none may go missing.
    #[test]
    fn every_variable_is_still_read() {
        let names: Vec<&str> = VARIABLES.iter().map(|(name, _)| *name).collect();
        for expected in [
            "LISTEN",
            "DATA_DIR",
            "PUBLIC_URL",
            "DATABASE_URL",
            "LIVENESS_WINDOW",
            "APPROVAL_TTL",
            "MAX_BODY_BYTES",
            "LIST_PAGE_SIZE",
            "LOG_FORMAT",
            "ALLOW_MODEL_DECISIONS",
            "NATIVE_URL",
            "ALLOWED_HOSTS",
            "TRUST_CLIENT_FORMS",
            "RUN_WINDOW",
            "HEADER_READ_TIMEOUT",
            "IDLE_TIMEOUT",
            "MAX_EXECUTIONS_PER_CREDENTIAL",
            "MAX_GATED_ARGUMENTS_BYTES",
            "MAX_SESSIONS_PER_CREDENTIAL",
            "MAX_SESSIONS",
            "SESSION_IDLE_TIMEOUT",
            "MAX_CONNECTIONS",
            "MAX_REQUESTS_PER_CREDENTIAL",
            "RESERVED_CONNECTIONS",
            "MAX_CREDENTIALS_PER_USER",
            "MAX_BROWSER_SESSIONS_PER_USER",
            "MAX_OAUTH_CLIENTS_PER_USER",
            "MAX_GRANTS_PER_USER",
            "ALLOWED_ORIGINS",
            "TRUSTED_PROXIES",
            "AUDIT_RETENTION",
            "METRICS_LISTEN",
            "TLS_CERT",
            "TLS_KEY",
        ] {
            assert!(names.contains(&expected), "GATEHOUSE_{expected}");
        }
        assert_eq!(names.len(), 35);
    }

    /// Each variable's key is a key of the tree: a variable set to a valid
    /// value is taken, not refused as an unknown key.
    #[test]
    fn each_variable_sets_a_key_of_the_tree() {
        let sample = |kind| match kind {
            Kind::Text => Value::from("x"),
            Kind::Address => Value::from("127.0.0.1:1"),
            Kind::Url => Value::from("https://gate.example.com"),
            Kind::Duration => Value::from("2m"),
            Kind::Number => Value::from(7usize),
            Kind::Flag => Value::from(true),
            Kind::List => Value::from(vec!["10.0.0.0/8".to_string()]),
            Kind::LogFormat => Value::from("json"),
            Kind::NativeUrl => Value::from("error"),
        };
        let mut layers = Figment::new();
        for &(name, kind) in VARIABLES {
            layers = layers.merge(Serialized::default(&key(name), sample(kind)));
        }
        let tree: FileConfig = layers.extract().unwrap();
        assert_eq!(tree.database.url.as_deref(), Some("x"));
        assert_eq!((tree.max_grants_per_user, tree.trust_client_forms), (7, true));
        assert_eq!(tree.run_window, std::time::Duration::from_secs(120));
        assert_eq!(tree.native_url, super::super::NativeUrl::Error);
    }

    #[test]
    fn values_are_read_as_before() {
        assert_eq!(value(Kind::Number, "abc").unwrap_err(), "invalid digit found in string");
        assert_eq!(value(Kind::Flag, "1"), Ok(Value::from(true)));
        assert_eq!(value(Kind::Flag, "0"), Ok(Value::from(false)));
        assert!(value(Kind::Flag, "yes").unwrap_err().contains("not true or false"));
        assert_eq!(value(Kind::List, " a, ,b "), Ok(Value::from(vec!["a".to_string(), "b".to_string()])));
        assert_eq!(value(Kind::Text, " 123 "), Ok(Value::from(" 123 ")), "taken as is");
        assert_eq!(value(Kind::Address, "x").unwrap_err(), "invalid socket address syntax");
        assert!(value(Kind::Duration, "0s").unwrap_err().contains("longer than zero"));
        assert!(value(Kind::LogFormat, "xml").unwrap_err().contains("(human or json)"));
        assert!(value(Kind::NativeUrl, "ask").unwrap_err().contains("is not elicit or error"));
        assert_eq!(key("DATABASE_URL"), "database.url");
        assert_eq!(key("MAX_GRANTS_PER_USER"), "max_grants_per_user");
    }

    #[test]
    fn the_file_layer_keeps_every_table() {
        let text = "listen = \"127.0.0.1:9\"\n[database]\nurl = \"postgres://db/g\"\n\
                    [[upstream]]\nname = \"a\"\ncommand = \"x\"\nargs = [\"--port\", \"8080\"]\ncall_timeout = \"2s\"\n\
                    [[policy]]\npattern = \"a__*\"\naction = \"allow\"\n[oauth]\nenabled = false\n";
        let tree: FileConfig = file_layer(text).unwrap().extract().unwrap();
        assert_eq!(tree.listen.port(), 9);
        assert_eq!(tree.database.url.as_deref(), Some("postgres://db/g"));
        assert_eq!(tree.upstream[0].args, ["--port", "8080"]);
        assert_eq!(tree.upstream[0].call_timeout, std::time::Duration::from_secs(2));
        assert_eq!(tree.policy[0].action, gatehouse_core::policy::Action::Allow);
        assert!(!tree.oauth.enabled);
    }
}
