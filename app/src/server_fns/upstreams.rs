//! The upstreams page.

#[cfg(feature = "ssr")]
use super::context as ctx;
use gatehouse_model::UpstreamInfo;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// What the upstreams page shows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UpstreamList {
    /// Whether errors are included (admins only: an upstream's error text
    /// may carry paths, hosts or secrets from its configuration).
    pub show_errors: bool,
    /// Every configured upstream, by name.
    pub upstreams: Vec<UpstreamInfo>,
    /// The same as other replicas on one PostgreSQL see them, by replica
    /// (each replica connects to its upstreams itself); empty on SQLite.
    pub elsewhere: Vec<(String, Vec<UpstreamInfo>)>,
    /// Whether each upstream's tool annotations are trusted, and whether an
    /// admin said so here (else the config file's `trust_annotations`), by name.
    pub trust: Vec<(String, bool, bool)>,
    /// Whether the viewer may change the trust (admins).
    pub is_admin: bool,
}

/// Every configured upstream and its health (any signed-in user); the last
/// error only for admins.
#[server(prefix = "/api/fn", endpoint = "upstreams")]
pub async fn list_upstreams() -> Result<UpstreamList, ServerFnError> {
    let (user, core) = ctx::context()?;
    let show_errors = user.is_admin;
    let shown = |list: Vec<UpstreamInfo>| -> Vec<UpstreamInfo> {
        list.into_iter()
            .map(|u| UpstreamInfo { last_error: if show_errors { u.last_error } else { None }, ..u })
            .collect()
    };
    let upstreams = shown(core.live.upstreams());
    let elsewhere = core
        .live
        .upstreams_elsewhere()
        .into_iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(replica, list)| (replica, shown(list)))
        .collect();
    let names: Vec<String> = upstreams.iter().map(|u| u.name.clone()).collect();
    let trust = ctx::blocking(move |_, core| {
        names
            .into_iter()
            .map(|name| {
                let trust = core.policy.trust(&name)?;
                let by_admin = matches!(trust, gatehouse_core::policy::Trust::Admin(_));
                Ok((name, trust.trusted(), by_admin))
            })
            .collect::<Result<Vec<_>, gatehouse_core::approvals::AccessError>>()
    })
    .await?;
    Ok(UpstreamList { show_errors, upstreams, elsewhere, trust, is_admin: user.is_admin })
}

/// Trusts (`trust = "on"`) or stops trusting (`"off"`) an upstream's tool
/// annotations: trusted, a tool it calls read-only runs at once when no
/// rule says otherwise. Admins only; recorded in the change log. Works as a
/// plain form post.
#[server(prefix = "/api/fn", endpoint = "upstream_trust")]
pub async fn set_upstream_trust(upstream: String, trust: String) -> Result<bool, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::changes::Change;
    let trusted = match trust.as_str() {
        "on" => true,
        "off" => false,
        other => {
            ctx::set_status(400);
            return Err(ServerFnError::new(format!("trust is on or off, not {other:?}")));
        }
    };
    let catalog = ctx::tool_catalog()?;
    ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Err(AccessError::Forbidden);
        }
        core.policy.set_trust(&upstream, trusted)?;
        let actor = user.actor().to_string();
        let action = if trusted { "trust annotations" } else { "distrust annotations" };
        core.changes.record(Change { actor: &actor, subject: "upstream", target: &upstream, action, detail: None })?;
        tracing::info!(upstream = %upstream, trusted, by = %user.username, "upstream annotations trust changed");
        Ok(())
    })
    .await?;
    // What agents may run at once changed: their lists may too.
    catalog.lists_changed();
    Ok(trusted)
}

/// What the server knows of upstreams that the pages do not: the config
/// file's side (its upstreams' names, the stdio commands it allows) and how
/// to apply a stored change at once (the server implements it).
#[cfg(feature = "ssr")]
pub trait UpstreamSources: Send + Sync {
    /// Checks what only the server can: the name is not the file's, a stdio
    /// spec names an allowed command.
    /// `others`: the stored upstreams (a prefix must not overlap theirs).
    fn check(
        &self,
        spec: &gatehouse_model::UpstreamSpec,
        others: &[gatehouse_model::UpstreamSpec],
    ) -> Result<(), gatehouse_model::SpecError>;
    /// The stdio commands an admin may pick: key and command line.
    fn stdio_commands(&self) -> Vec<(String, String)>;
    /// The config file's upstreams' names (read-only here).
    fn file_upstreams(&self) -> Vec<String>;
    /// Something was stored: apply it now, not at the next poll.
    fn changed(&self);
    /// Connects to `spec`'s upstream (checked, secrets as they would be
    /// saved) on a connection of its own, lists what it offers and closes
    /// it; nothing is stored or started. Why it failed, in words.
    fn test(
        &self,
        spec: gatehouse_model::UpstreamSpec,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<gatehouse_model::UpstreamTested, gatehouse_model::TestFailed>>
                + Send,
        >,
    >;
}

#[cfg(feature = "ssr")]
fn sources() -> Result<std::sync::Arc<dyn UpstreamSources>, ServerFnError> {
    use_context::<std::sync::Arc<dyn UpstreamSources>>().ok_or_else(|| ServerFnError::new("no upstream sources"))
}

/// What the admins' part of the upstreams page shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ManagedUpstreams {
    /// The upstreams added here, secret headers' values left out.
    pub specs: Vec<gatehouse_model::UpstreamSpec>,
    /// The config file's upstreams' names.
    pub from_file: Vec<String>,
    /// The stdio commands an admin may pick: key and command line.
    pub commands: Vec<(String, String)>,
}

/// The upstreams added on the console and what the form offers (admins
/// only: others get nothing).
#[server(prefix = "/api/fn", endpoint = "managed_upstreams")]
pub async fn list_managed_upstreams() -> Result<ManagedUpstreams, ServerFnError> {
    let sources = sources()?;
    ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Ok(ManagedUpstreams::default());
        }
        let specs = core.upstreams.stored()?.specs.into_iter().map(gatehouse_model::UpstreamSpec::shown).collect();
        Ok(ManagedUpstreams { specs, from_file: sources.file_upstreams(), commands: sources.stdio_commands() })
    })
    .await
}

/// An upstream as the form holds it (`draft[name]`, … in a form).
/// Headers are lines of `Name: value`; a secret header given with no value
/// keeps the one stored (the form lists their names, never their values).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UpstreamDraft {
    /// Its name.
    pub name: String,
    /// `http` or `stdio`.
    #[serde(default)]
    pub kind: Option<String>,
    /// The URL (`http`).
    #[serde(default)]
    pub url: Option<String>,
    /// The allowed command's key (`stdio`).
    #[serde(default)]
    pub command: Option<String>,
    /// The tool prefix (empty: `<name>__`).
    #[serde(default)]
    pub prefix: Option<String>,
    /// Headers, one `Name: value` per line.
    #[serde(default)]
    pub headers: Option<String>,
    /// Secret headers, one `Name: value` per line (`Name:` keeps the stored value).
    #[serde(default)]
    pub secret_headers: Option<String>,
    /// Set when the form adds (a name already stored is refused); absent, it replaces.
    #[serde(default)]
    pub adding: Option<String>,
    /// Set by the form's Test button: connect and list, save nothing.
    #[serde(default)]
    pub test: Option<String>,
}

impl UpstreamDraft {
    /// The draft of a stored upstream (what Edit fills the form with).
    pub fn of(spec: &gatehouse_model::UpstreamSpec) -> Self {
        use gatehouse_model::Transport;
        // A secret header's line is its name alone: left so, it keeps its value.
        let lines = |secret: bool| {
            let text: Vec<String> = spec
                .headers
                .iter()
                .filter(|h| h.secret == secret)
                .map(|h| match (&h.value, secret) {
                    (Some(value), false) => format!("{}: {value}", h.name),
                    _ => format!("{}:", h.name),
                })
                .collect();
            Some(text.join("\n")).filter(|t| !t.is_empty())
        };
        let (url, command) = match &spec.transport {
            Transport::Http { url } => (Some(url.clone()), None),
            Transport::Stdio { command } => (None, Some(command.clone())),
        };
        UpstreamDraft {
            name: spec.name.clone(),
            kind: Some(spec.transport.kind().to_string()),
            url,
            command,
            prefix: spec.prefix.clone(),
            headers: lines(false),
            secret_headers: lines(true),
            adding: None,
            test: None,
        }
    }

    /// The spec it describes, every field read as typed; a refusal names the field.
    #[cfg(feature = "ssr")]
    fn spec(self, enabled: bool) -> Result<gatehouse_model::UpstreamSpec, gatehouse_model::SpecError> {
        use gatehouse_model::{SpecError, Transport};
        let text = |v: Option<String>| v.map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        // An empty URL or command is the spec's own check to refuse (with the other fields).
        let transport = match text(self.kind).as_deref().unwrap_or("http") {
            "http" => Transport::Http { url: text(self.url).unwrap_or_default() },
            "stdio" => Transport::Stdio { command: text(self.command).unwrap_or_default() },
            other => return Err(SpecError::new("kind", format!("{other:?} is neither http nor stdio."))),
        };
        let mut headers = header_lines(self.headers, false, "headers")?;
        headers.extend(header_lines(self.secret_headers, true, "secret_headers")?);
        Ok(gatehouse_model::UpstreamSpec {
            name: self.name.trim().to_string(),
            transport,
            prefix: self.prefix.map(|p| p.trim().to_string()).filter(|p| !p.is_empty()),
            enabled,
            headers,
        })
    }
}

/// `Name: value` lines as headers (a secret one may leave its value empty: kept).
#[cfg(feature = "ssr")]
fn header_lines(
    text: Option<String>,
    secret: bool,
    field: &'static str,
) -> Result<Vec<gatehouse_model::Header>, gatehouse_model::SpecError> {
    let text = text.unwrap_or_default();
    let mut headers = Vec::new();
    for (i, line) in text.lines().map(str::trim).enumerate().filter(|(_, l)| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            return Err(gatehouse_model::SpecError::new(field, format!("Line {} is not \"Name: value\".", i + 1)));
        };
        let value = value.trim();
        if value.is_empty() && !secret {
            return Err(gatehouse_model::SpecError::new(field, format!("Line {} has no value.", i + 1)));
        }
        headers.push(gatehouse_model::Header {
            name: name.trim().to_string(),
            value: Some(value.to_string()).filter(|v| !v.is_empty()),
            secret,
        });
    }
    Ok(headers)
}

/// What the change log says of a stored upstream: never a secret's value,
/// nor a URL's query (it may carry a token).
#[cfg(feature = "ssr")]
fn describe(spec: &gatehouse_model::UpstreamSpec) -> String {
    use gatehouse_model::Transport;
    let mut said = match &spec.transport {
        Transport::Http { url } => format!("http {}", url.split(['?', '#']).next().unwrap_or_default()),
        Transport::Stdio { command } => format!("stdio command {command}"),
    };
    if let Some(prefix) = &spec.prefix {
        said.push_str(&format!("; prefix {prefix:?}"));
    }
    if !spec.headers.is_empty() {
        let names: Vec<String> = spec
            .headers
            .iter()
            .map(|h| if h.secret { format!("{} (secret)", h.name) } else { h.name.clone() })
            .collect();
        said.push_str(&format!("; headers {}", names.join(", ")));
    }
    if !spec.enabled {
        said.push_str("; disabled");
    }
    said
}

/// Adds or replaces an upstream (admins only); it starts on every replica
/// within a second, and the change log records who. With the form's Test
/// button (`draft[test]`), the same checks (but for a name already taken),
/// then a connection of its own that lists what it offers; nothing is
/// saved, and the change log records the test. What was done, in words.
#[server(prefix = "/api/fn", endpoint = "upstream_save")]
pub async fn save_upstream(draft: UpstreamDraft) -> Result<String, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::changes::Change;
    use gatehouse_core::error::CoreError;
    let sources = sources()?;
    let applier = sources.clone();
    let testing = draft.test.is_some();
    let checked = ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Err(AccessError::Forbidden);
        }
        let adding = draft.adding.is_some();
        // Every bad field is said beside it, once (an edit keeps the stored switch: the store's).
        let mut spec = draft.spec(true).map_err(CoreError::from)?;
        let mut problems = spec.problems();
        let others = core.upstreams.stored()?.specs;
        if let Err(e) = sources.check(&spec, &others) {
            e.add_to(&mut problems);
        }
        if !problems.is_empty() {
            return Err(AccessError::Invalid(gatehouse_model::SpecError::lines(&problems)));
        }
        let (spec, action) = if testing {
            // Tested as it would be saved: an edit's blank secrets are the
            // stored ones, sent where the admin typed (same origin only); so
            // a test is in the change log too.
            if !adding {
                let stored = core.upstreams.get(&spec.name)?;
                spec.keep_from(stored.as_ref()).map_err(CoreError::from)?;
            }
            (spec, "test")
        } else {
            (core.upstreams.put(spec, adding)?, if adding { "add" } else { "edit" })
        };
        let detail = describe(&spec);
        let actor = user.actor().to_string();
        core.changes.record(Change {
            actor: &actor,
            subject: "upstream",
            target: &spec.name,
            action,
            detail: Some(&detail),
        })?;
        tracing::info!(upstream = %spec.name, detail, by = %user.username, "upstream {action}ed on the console");
        Ok(testing.then_some(spec))
    })
    .await?;
    match checked {
        Some(spec) => {
            let name = spec.name.clone();
            match applier.test(spec).await {
                Ok(found) => Ok(found.said(&name)),
                Err(why) => {
                    let busy = why == gatehouse_model::TestFailed::Busy;
                    ctx::set_status(if busy { 503 } else { 502 });
                    Err(ServerFnError::new(format!("The test did not reach {name}: {why}. Nothing was saved.")))
                }
            }
        }
        None => {
            applier.changed();
            Ok("Saved: it starts on every replica within a second, and its health shows here.".into())
        }
    }
}

/// Removes, disables, enables or restarts an upstream (`action` = `remove`,
/// `disable`, `enable` or `restart`; admins only). Only Restart reaches the
/// config file's upstreams (the file's other entries are the file's).
#[server(prefix = "/api/fn", endpoint = "upstream_action")]
pub async fn upstream_action(name: String, action: String) -> Result<String, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::changes::Change;
    let sources = sources()?;
    let applier = sources.clone();
    let done = ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Err(AccessError::Forbidden);
        }
        // The file's name is the file's: only Restart reaches it here (a
        // stored upstream of that name does not run, and is not touched).
        let from_file = sources.file_upstreams().contains(&name);
        let stored = core.upstreams.get(&name)?;
        if !from_file && stored.is_none() {
            return Err(AccessError::Invalid(format!("invalid name: there is no upstream named {name}")));
        }
        let done = match action.as_str() {
            "restart" => {
                core.upstreams.restart(&name)?;
                format!("{name} restarts.")
            }
            // A stored upstream the file's took the name of does not run: it
            // may go, and the trust (the running file upstream's) stays.
            "remove" if from_file && stored.is_some() => {
                // The stored spec only: the restart count is the running file upstream's too.
                core.upstreams.specs.remove(&name)?;
                format!("{name} (added here) removed; gatehouse.toml's runs on.")
            }
            "remove" | "disable" | "enable" if from_file => {
                return Err(AccessError::Invalid(format!(
                    "{name} is in gatehouse.toml: change it there (only Restart works here)"
                )));
            }
            "remove" => {
                core.upstreams.remove(&name)?;
                // A later upstream of this name is another server: it starts untrusted.
                core.policy.clear_trust(&name)?;
                format!("{name} removed.")
            }
            "disable" | "enable" => {
                core.upstreams.set_enabled(&name, action == "enable")?;
                format!("{name} {action}d.")
            }
            other => return Err(AccessError::Invalid(format!("invalid action: {other:?} is not an action"))),
        };
        let actor = user.actor().to_string();
        core.changes.record(Change {
            actor: &actor,
            subject: "upstream",
            target: &name,
            action: &action,
            detail: None,
        })?;
        tracing::info!(upstream = %name, action, by = %user.username, "upstream changed on the console");
        Ok(done)
    })
    .await?;
    applier.changed();
    Ok(done)
}
