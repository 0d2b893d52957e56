//! From the tree to the running [`Config`]: the command-line flags laid
//! over it, every value checked (errors name the key), and the tables turned
//! into what the server uses (policy rules, proxy networks, notify targets).
//! The checks run in a fixed order, so a file with several mistakes always
//! reports the same one first.

use gatehouse_core::policy::{Rule, Source};

use super::{Config, ConfigError, FileConfig, Overrides};

/// Lays `overrides` over `tree`, checks the result and resolves it.
pub(super) fn resolve(tree: FileConfig, overrides: &Overrides) -> Result<Config, ConfigError> {
    let tree = overrides.apply(tree);
    let trusted_proxies = tree
        .trusted_proxies
        .iter()
        .enumerate()
        .map(|(i, text)| {
            crate::addresses::parse_network(text)
                .map_err(|message| ConfigError::Value { key: format!("trusted_proxies[{i}]"), message })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let notify = crate::notify::config::resolve(tree.notify.clone())?;
    check_bounds(&tree)?;
    super::upstreams::check(&tree.upstream)?;
    super::upstreams::check_commands(&tree.stdio_commands)?;
    let policy = policy_rules(&tree)?;
    let profiles = profiles(&tree)?;
    if let Some(url) = &tree.public_url
        && (!matches!(url.scheme(), "http" | "https") || url.host_str().is_none())
    {
        return Err(value("public_url", "must be an http(s) URL with a host"));
    }
    match (&tree.tls_cert, &tree.tls_key) {
        (Some(_), None) => return Err(value("tls_key", "must be set with tls_cert")),
        (None, Some(_)) => return Err(value("tls_cert", "must be set with tls_key")),
        _ => {}
    }
    if tree.max_body_bytes < 1024 {
        return Err(value("max_body_bytes", "must be at least 1024"));
    }
    Ok(Config { tree, proxy_networks: trusted_proxies, policy_rules: policy, profiles, notify_targets: notify })
}

fn value(key: &str, message: &str) -> ConfigError {
    ConfigError::Value { key: key.into(), message: message.into() }
}

/// Counts that must be at least 1 and waits that must be longer than zero.
fn check_bounds(t: &FileConfig) -> Result<(), ConfigError> {
    if t.list_page_size == 0 {
        return Err(value("list_page_size", "must be at least 1"));
    }
    for (key, count) in [
        ("max_executions_per_credential", t.max_executions_per_credential),
        ("max_gated_arguments_bytes", t.max_gated_arguments_bytes),
        ("keep_arguments_max_bytes", t.keep_arguments_max_bytes),
        ("max_sessions_per_credential", t.max_sessions_per_credential),
        ("max_sessions", t.max_sessions),
        ("max_connections", t.max_connections),
        ("max_requests_per_credential", t.max_requests_per_credential),
        ("max_credentials_per_user", t.max_credentials_per_user),
        ("max_browser_sessions_per_user", t.max_browser_sessions_per_user),
        ("max_oauth_clients_per_user", t.max_oauth_clients_per_user),
        ("max_grants_per_user", t.max_grants_per_user),
        ("oauth.max_unused_registrations_per_address", t.oauth.max_unused_registrations_per_address),
        ("audit_max_entries", usize::try_from(t.audit_max_entries).unwrap_or(usize::MAX)),
    ] {
        if count == 0 {
            return Err(value(key, "must be at least 1"));
        }
    }
    for (key, wait) in [
        ("header_read_timeout", t.header_read_timeout),
        ("idle_timeout", t.idle_timeout),
        ("session_idle_timeout", t.session_idle_timeout),
        ("oauth.unused_registration_ttl", t.oauth.unused_registration_ttl),
        ("keep_arguments_for", t.keep_arguments_for),
        ("suggest_grants_window", t.suggest_grants_window),
    ] {
        if wait.is_zero() {
            return Err(value(key, "must be longer than 0s"));
        }
    }
    Ok(())
}

/// Each `[[profile]]` table, checked, its names unique.
fn profiles(t: &FileConfig) -> Result<Vec<gatehouse_core::model::Profile>, ConfigError> {
    let mut profiles: Vec<gatehouse_core::model::Profile> = Vec::with_capacity(t.profile.len());
    for (i, profile) in t.profile.iter().enumerate() {
        let checked = gatehouse_core::model::Profile { source: Source::Config, ..profile.clone() }.normalised();
        checked.check().map_err(|e| ConfigError::Value {
            key: format!("profile[{i}].{} (profile {:?})", e.field, checked.name),
            message: e.reason,
        })?;
        if profiles.iter().any(|p| p.name == checked.name) {
            return Err(ConfigError::Value {
                key: format!("profile[{i}].name"),
                message: format!("another profile is named {:?}", checked.name),
            });
        }
        profiles.push(checked);
    }
    Ok(profiles)
}

/// `approval_ttl` and each `[[policy]]` table (its own `approval_ttl`, its
/// action and pattern), as the core's rules.
fn policy_rules(t: &FileConfig) -> Result<Vec<Rule>, ConfigError> {
    let max_ttl = gatehouse_core::approvals::MAX_APPROVAL_TTL;
    let too_long = |key: String| ConfigError::Value {
        key,
        message: format!("must be at most {}", humantime::format_duration(max_ttl)),
    };
    if t.approval_ttl > max_ttl {
        return Err(too_long("approval_ttl".into()));
    }
    let mut rules = Vec::with_capacity(t.policy.len());
    for (i, rule) in t.policy.iter().enumerate() {
        let key = format!("policy[{i}]");
        if rule.approval_ttl.is_some_and(|ttl| ttl > max_ttl) {
            return Err(too_long(format!("{key}.approval_ttl")));
        }
        let checked = Rule { source: Source::Config, ..rule.clone() }.normalised();
        // The error names the rule's key and field (and, for `when`, where in it).
        gatehouse_core::policy::validate_rule(&checked).map_err(|e| match e {
            gatehouse_core::error::CoreError::Invalid { field, reason } => {
                ConfigError::Value { key: format!("{key}.{field} (rule {:?})", checked.name), message: reason }
            }
            other => ConfigError::Value { key, message: other.to_string() },
        })?;
        rules.push(checked);
    }
    Ok(rules)
}
