//! Notification targets for admins on `/upstreams`: their delivery status,
//! and the ones added on the console (add, edit, send a test, disable,
//! enable, remove). The config file's `[[notify]]` targets are shown
//! read-only (a test may be sent to them too).

#[cfg(feature = "ssr")]
use super::context as ctx;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

/// One notification target as the console shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NotifyTargetInfo {
    /// Its name (also the `/metrics` label).
    pub name: String,
    /// Scheme, host and port only: a path or query may hold a token.
    pub url: String,
    /// `json`, `slack` or `ntfy`.
    pub format: String,
    /// Messages the receiver accepted.
    pub delivered: u64,
    /// Messages given up on after retries.
    pub failed: u64,
    /// Messages dropped because its queue was full.
    pub dropped: u64,
    /// When a message was last accepted (Unix ms).
    pub last_success_ms: Option<i64>,
    /// When a message was last given up on (Unix ms).
    pub last_failure_ms: Option<i64>,
    /// Why that was (never the URL or secret).
    pub last_error: Option<String>,
    /// From the config file (read-only here), else added on the console.
    pub from_file: bool,
    /// `false`: shown, sent nothing but a test.
    pub enabled: bool,
    /// Whether it has a secret (its value is never shown).
    pub secret_set: bool,
    /// Agent patterns it hears about (empty: every agent).
    pub agents: Vec<String>,
    /// Tool patterns it hears about (empty: every tool).
    pub tools: Vec<String>,
    /// Longest wait for one attempt (`10s`).
    pub timeout: String,
}

/// Where the pages reach the targets through (the server implements it).
#[cfg(feature = "ssr")]
pub trait NotifyTargets: Send + Sync {
    /// Every target with its status: the file's, then the console's.
    fn notify_targets(&self) -> Vec<NotifyTargetInfo>;
    /// Checks what only the server can: the name is not the file's, the
    /// URL is one the HTTP client takes.
    fn check(&self, spec: &gatehouse_model::NotifySpec) -> Result<(), gatehouse_model::SpecError>;
    /// The config file's targets' names (read-only here).
    fn file_targets(&self) -> Vec<String>;
    /// Something was stored: apply it now, not at the next poll.
    fn changed(&self);
    /// Sends target `name` one test message now: `Err` says why it was not delivered.
    fn send_test(&self, name: String) -> std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
}

#[cfg(feature = "ssr")]
fn targets() -> Result<std::sync::Arc<dyn NotifyTargets>, ServerFnError> {
    use_context::<std::sync::Arc<dyn NotifyTargets>>().ok_or_else(|| ServerFnError::new("no notification targets"))
}

/// What the notifications section shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NotifyList {
    /// Server time when read (Unix ms), for relative times.
    pub now_ms: i64,
    /// Whether the viewer is an admin (targets are operator matters).
    pub is_admin: bool,
    /// Every target (empty for non-admins).
    pub targets: Vec<NotifyTargetInfo>,
    /// Targets added here that do not run: the config file took their name.
    pub idle: Vec<String>,
}

/// The notification targets and their delivery status: admins only (others
/// get an empty list).
#[server(prefix = "/api/fn", endpoint = "notify_targets")]
pub async fn list_notify_targets() -> Result<NotifyList, ServerFnError> {
    let targets = targets()?;
    ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Ok(NotifyList { now_ms: core.clock.now_ms(), ..Default::default() });
        }
        let from_file = targets.file_targets();
        let idle = core.notify.all()?.into_iter().filter_map(|s| s.name).filter(|n| from_file.contains(n)).collect();
        Ok(NotifyList { now_ms: core.clock.now_ms(), is_admin: true, targets: targets.notify_targets(), idle })
    })
    .await
}

/// A target as the form holds it (`draft[name]`, … in a form). A blank URL
/// or secret on an edit keeps the stored one (the page never shows them).
#[derive(Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NotifyDraft {
    /// Its name.
    pub name: String,
    /// `json`, `slack` or `ntfy`.
    #[serde(default)]
    pub format: Option<String>,
    /// Where to POST (blank on an edit: the stored one).
    #[serde(default)]
    pub url: Option<String>,
    /// The signing key or access token (blank on an edit: the stored one).
    #[serde(default)]
    pub secret: Option<String>,
    /// Agent patterns, separated by commas or spaces.
    #[serde(default)]
    pub agents: Option<String>,
    /// Tool patterns, separated by commas or spaces.
    #[serde(default)]
    pub tools: Option<String>,
    /// Longest wait for one attempt (`5s`; blank: 10 s).
    #[serde(default)]
    pub timeout: Option<String>,
    /// Set when the form adds (a name already stored is refused); absent, it replaces.
    #[serde(default)]
    pub adding: Option<String>,
}

// The URL may hold a token and the secret is one: never in a debug print.
impl std::fmt::Debug for NotifyDraft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyDraft")
            .field("name", &self.name)
            .field("format", &self.format)
            .field("url", &self.url.as_ref().map(|_| "…"))
            .field("secret", &self.secret.as_ref().map(|_| "…"))
            .field("agents", &self.agents)
            .field("tools", &self.tools)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl NotifyDraft {
    /// The draft of a stored target (what Edit fills the form with): the
    /// URL and secret left blank, so they are kept.
    pub fn of(target: &NotifyTargetInfo) -> Self {
        let list = |patterns: &[String]| Some(patterns.join(", ")).filter(|t| !t.is_empty());
        NotifyDraft {
            name: target.name.clone(),
            format: Some(target.format.clone()),
            url: None,
            secret: None,
            agents: list(&target.agents),
            tools: list(&target.tools),
            timeout: Some(target.timeout.clone()).filter(|t| t != "10s"),
            adding: None,
        }
    }

    /// The spec it describes, every field read as typed.
    #[cfg(feature = "ssr")]
    fn spec(self) -> Result<gatehouse_model::NotifySpec, gatehouse_model::SpecError> {
        use gatehouse_model::{NotifyFormat, SpecError};
        let text = |v: Option<String>| v.map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let patterns = |v: Option<String>| -> Vec<String> {
            v.unwrap_or_default()
                .split([',', ' ', '\n'])
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect()
        };
        let format = text(self.format).unwrap_or_else(|| "json".into());
        let Some(format) = NotifyFormat::parse(&format) else {
            return Err(SpecError::new("format", format!("{format:?} is not json, slack or ntfy.")));
        };
        Ok(gatehouse_model::NotifySpec {
            name: Some(self.name.trim().to_string()),
            url: text(self.url).unwrap_or_default(),
            format,
            secret: text(self.secret),
            agents: patterns(self.agents),
            tools: patterns(self.tools),
            timeout: text(self.timeout),
            enabled: true,
        })
    }
}

/// What the change log says of a stored target: its URL's origin only (a
/// path or query may hold a token), never the secret's value.
#[cfg(feature = "ssr")]
fn describe(spec: &gatehouse_model::NotifySpec) -> String {
    let origin = gatehouse_model::origin_of(&spec.url).unwrap_or_default();
    let mut said = format!("{} to {origin}", spec.format.as_str());
    for (what, patterns) in [("agents", &spec.agents), ("tools", &spec.tools)] {
        if !patterns.is_empty() {
            said.push_str(&format!("; {what} {}", patterns.join(", ")));
        }
    }
    if spec.secret.is_some() {
        said.push_str("; secret set");
    }
    if let Some(timeout) = &spec.timeout {
        said.push_str(&format!("; timeout {timeout}"));
    }
    if !spec.enabled {
        said.push_str("; disabled");
    }
    said
}

/// Adds or replaces a notification target (admins only); every replica
/// sends to it within a second, and the change log records who.
#[server(prefix = "/api/fn", endpoint = "notify_save")]
pub async fn save_notify(draft: NotifyDraft) -> Result<(), ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::changes::Change;
    use gatehouse_core::error::CoreError;
    use gatehouse_core::managed::Managed;
    let targets = targets()?;
    let applier = targets.clone();
    ctx::blocking(move |user, core| {
        if !user.is_admin {
            return Err(AccessError::Forbidden);
        }
        let adding = draft.adding.is_some();
        let mut spec = draft.spec().map_err(CoreError::from)?;
        // Every bad field is said beside it, once: what an edit left blank
        // is filled from the stored target first, so it is checked too.
        let mut problems = Vec::new();
        let before = core.notify.get(&Managed::name(&spec))?;
        if let Err(e) = spec.keep_from(before.as_ref().filter(|_| !adding)) {
            problems.push(e);
        }
        Managed::problems(&spec).into_iter().for_each(|e| e.add_to(&mut problems));
        if let Err(e) = targets.check(&spec) {
            e.add_to(&mut problems);
        }
        // Messages to a JSON receiver added here are always signed.
        if spec.format == gatehouse_model::NotifyFormat::Json && spec.secret.is_none() {
            gatehouse_model::SpecError::new(
                "secret",
                format!(
                    "Give a signing key of at least {} characters: the receiver checks messages with it.",
                    gatehouse_model::MIN_SIGNING_SECRET
                ),
            )
            .add_to(&mut problems);
        }
        if !problems.is_empty() {
            return Err(AccessError::Invalid(gatehouse_model::SpecError::lines(&problems)));
        }
        let spec = core.notify.put(spec, adding)?;
        let name = Managed::name(&spec);
        let detail = describe(&spec);
        let actor = user.actor().to_string();
        let action = if adding { "add" } else { "edit" };
        core.changes.record(Change { actor: &actor, subject: "notify", target: &name, action, detail: Some(&detail) })?;
        tracing::info!(target_name = %name, detail, by = %user.username, "notification target {action}ed on the console");
        Ok(())
    })
    .await?;
    applier.changed();
    Ok(())
}

/// Sends a test to, disables, enables or removes a notification target
/// (`action` = `test`, `disable`, `enable` or `remove`; admins only). Only
/// a test reaches the config file's targets.
#[server(prefix = "/api/fn", endpoint = "notify_action")]
pub async fn notify_action(name: String, action: String) -> Result<String, ServerFnError> {
    use gatehouse_core::approvals::AccessError;
    use gatehouse_core::changes::Change;
    let targets = targets()?;
    let (user, _) = ctx::context()?;
    if !user.is_admin {
        ctx::set_status(403);
        return Err(ServerFnError::new(AccessError::Forbidden.to_string()));
    }
    if action == "test" {
        if !targets.notify_targets().iter().any(|t| t.name == name) {
            ctx::set_status(400);
            return Err(ServerFnError::new(format!("invalid name: there is no notification target named {name}")));
        }
        tracing::info!(target_name = %name, by = %user.username, "test notification sent from the console");
        return match targets.send_test(name.clone()).await {
            Ok(()) => Ok(format!("Test sent: {name}'s receiver accepted it.")),
            Err(why) => {
                ctx::set_status(502);
                Err(ServerFnError::new(format!("The test did not reach {name}: {why}.")))
            }
        };
    }
    let applier = targets.clone();
    let done = ctx::blocking(move |user, core| {
        // The file's target is the file's: Remove reaches only a stored one
        // of its name (which does not run), the switch not even that.
        let from_file = targets.file_targets().contains(&name);
        let found = match action.as_str() {
            "remove" => core.notify.remove(&name)?,
            "disable" | "enable" if from_file => false,
            "disable" | "enable" => core.notify.set_enabled(&name, action == "enable")?,
            other => return Err(AccessError::Invalid(format!("invalid action: {other:?} is not an action"))),
        };
        if !found && from_file {
            return Err(AccessError::Invalid(format!(
                "{name} is in gatehouse.toml: change it there (only a test works here)"
            )));
        }
        if !found {
            return Err(AccessError::Invalid(format!("invalid name: there is no notification target named {name}")));
        }
        let actor = user.actor().to_string();
        core.changes.record(Change {
            actor: &actor,
            subject: "notify",
            target: &name,
            action: &action,
            detail: None,
        })?;
        tracing::info!(target_name = %name, action, by = %user.username, "notification target changed on the console");
        Ok(match action.as_str() {
            "remove" => format!("{name} removed."),
            _ => format!("{name} {action}d."),
        })
    })
    .await?;
    applier.changed();
    Ok(done)
}
