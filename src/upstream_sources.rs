//! Where the running upstreams come from: the config file's `[[upstream]]`
//! tables and the ones admins added on the console (the database's), merged
//! here, in one way, for start-up, a reloaded file and a console change
//! alike. A name the file uses wins over a stored one. A stored stdio
//! upstream runs the whole command its key names in the file's
//! `stdio_commands`, nothing else. Every upstream's restart count (the
//! console's Restart) is laid over its entry, so a new count restarts it.
//!
//! Every replica reads the database's side again each [`POLL`] (and at once
//! after a change made here), so an upstream added on one replica starts
//! on all of them without a restart.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use gatehouse_core::model::{SpecError, Transport, UpstreamSpec};
use gatehouse_core::upstreams::Stored;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, StdioCommand, UpstreamConfig};
use crate::mcp::McpState;
use crate::mcp::upstream::reconfigure::Reconfigured;

pub use crate::polled::POLL;

/// The running upstreams' two sources; cheap to clone.
#[derive(Clone)]
pub struct UpstreamSources(Arc<Inner>);

struct Inner {
    mcp: McpState,
    /// The config file's side, replaced by each reload.
    file: Mutex<FileSide>,
    /// One application at a time; holds what the database said last time.
    applied: tokio::sync::Mutex<Option<Stored>>,
    /// Wakes the watcher after a change made on this replica.
    wake: tokio::sync::Notify,
}

/// What the config file says of upstreams.
#[derive(Clone, Default)]
struct FileSide {
    upstreams: Vec<UpstreamConfig>,
    commands: BTreeMap<String, StdioCommand>,
}

impl UpstreamSources {
    /// What a server started with `config` runs first, `stored` being the
    /// database's side as read at start (so nothing restarts at the first poll).
    pub fn at_start(config: &Config, stored: &Stored) -> Vec<UpstreamConfig> {
        merge(&FileSide { upstreams: config.upstream.clone(), commands: config.stdio_commands.clone() }, stored)
    }

    /// The sources of a server started with `config` and the database's
    /// `stored` side (its upstreams already running, [`Self::at_start`];
    /// `None` if it could not be read: the first poll applies it).
    pub fn new(config: &Config, mcp: McpState, stored: Option<Stored>) -> Self {
        Self(Arc::new(Inner {
            mcp,
            file: Mutex::new(FileSide { upstreams: config.upstream.clone(), commands: config.stdio_commands.clone() }),
            applied: tokio::sync::Mutex::new(stored),
            wake: tokio::sync::Notify::new(),
        }))
    }

    fn file(&self) -> FileSide {
        self.0.file.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The file was reloaded: its upstreams and commands replace the old
    /// ones, and the running set follows.
    pub async fn file_changed(&self, config: &Config) -> Reconfigured {
        *self.0.file.lock().unwrap_or_else(|p| p.into_inner()) =
            FileSide { upstreams: config.upstream.clone(), commands: config.stdio_commands.clone() };
        self.apply(true).await
    }

    /// Reads the database's side and makes the running upstreams the merge
    /// of both, if the database changed since the last time (or `always`).
    async fn apply(&self, always: bool) -> Reconfigured {
        let mut applied = self.0.applied.lock().await;
        let stored = match self.0.mcp.core.run(|core| core.upstreams.stored()).await {
            Ok(Ok(stored)) => stored,
            Ok(Err(e)) | Err(e) => {
                // Applied again at the next poll that reads them (a reload's
                // file side included); said once, not every second.
                if applied.take().is_some() || always {
                    tracing::error!(error = %e, "the stored upstreams could not be read: the running ones are kept");
                }
                return Reconfigured::default();
            }
        };
        if !always && applied.as_ref() == Some(&stored) {
            return Reconfigured::default();
        }
        let merged = merge(&self.file(), &stored);
        let done = self.0.mcp.upstreams.reconfigure(&merged).await;
        self.0.mcp.config.set_upstreams(merged);
        *applied = Some(stored);
        done
    }

    /// Something was stored on this replica: apply it now, not at the next poll.
    pub fn changed(&self) {
        self.0.wake.notify_one();
    }

    /// Checks what only the server knows of a spec: its name is not the
    /// file's, its URL is one the HTTP client takes, a stdio one names a
    /// command the file allows, and its tool prefix does not overlap
    /// another upstream's (the file's, or `others` stored), so no tool
    /// name, and no rule written for one upstream, could reach the other's.
    pub fn check(&self, spec: &UpstreamSpec, others: &[UpstreamSpec]) -> Result<(), SpecError> {
        let file = self.file();
        if let Transport::Http { url } = &spec.transport {
            match url::Url::parse(url.trim()) {
                Ok(parsed) if parsed.host_str().is_some_and(|h| !h.is_empty()) => {}
                Ok(_) => return Err(SpecError::new("url", "The URL needs a host.")),
                Err(e) => return Err(SpecError::new("url", format!("This is not a URL Gatehouse can reach ({e})."))),
            }
        }
        let prefix = spec.prefix();
        let overlapping = file
            .upstreams
            .iter()
            .map(|u| (u.name.clone(), u.prefix()))
            .chain(others.iter().filter(|o| o.name != spec.name).map(|o| (o.name.clone(), o.prefix())))
            .find(|(other, theirs)| {
                *other != spec.name && (theirs.starts_with(&prefix) || prefix.starts_with(theirs.as_str()))
            });
        if let Some((other, theirs)) = overlapping {
            return Err(SpecError::new(
                "prefix",
                format!("The prefix {prefix:?} overlaps {other}'s ({theirs:?}): give each upstream its own."),
            ));
        }
        if file.upstreams.iter().any(|u| u.name == spec.name) {
            return Err(SpecError::new(
                "name",
                format!("gatehouse.toml already has an upstream named {}: choose another name.", spec.name),
            ));
        }
        if let Transport::Stdio { command } = &spec.transport
            && !file.commands.contains_key(command)
        {
            return Err(SpecError::new(
                "command",
                format!("{command:?} is not one of the commands gatehouse.toml allows (stdio_commands)."),
            ));
        }
        Ok(())
    }

    /// The commands an admin may pick for a stdio upstream: key and command line.
    pub fn commands(&self) -> Vec<(String, String)> {
        self.file().commands.iter().map(|(key, c)| (key.clone(), c.shown())).collect()
    }

    /// The names of the config file's upstreams (read-only on the console).
    pub fn file_names(&self) -> Vec<String> {
        self.file().upstreams.iter().map(|u| u.name.clone()).collect()
    }

    /// Applies the database's side now, then again on every change made
    /// here and every [`POLL`], until `shutdown`; owned by `tasks`.
    pub fn watch(&self, shutdown: CancellationToken, tasks: &TaskTracker) {
        crate::polled::follow(self.clone(), shutdown, tasks);
    }
}

impl crate::polled::Polled for UpstreamSources {
    fn wake(&self) -> &tokio::sync::Notify {
        &self.0.wake
    }

    async fn poll(&self) {
        let done = self.apply(false).await;
        if !done.is_empty() {
            tracing::info!(added = ?done.added, removed = ?done.removed, restarted = ?done.restarted, "upstreams changed from the database");
        }
    }
}

/// What the console's server functions reach the sources through.
impl gatehouse_app::server_fns::UpstreamSources for UpstreamSources {
    fn check(&self, spec: &UpstreamSpec, others: &[UpstreamSpec]) -> Result<(), SpecError> {
        UpstreamSources::check(self, spec, others)
    }

    fn stdio_commands(&self) -> Vec<(String, String)> {
        self.commands()
    }

    fn file_upstreams(&self) -> Vec<String> {
        self.file_names()
    }

    fn changed(&self) {
        UpstreamSources::changed(self)
    }

    fn test(
        &self,
        spec: UpstreamSpec,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<gatehouse_core::model::UpstreamTested, gatehouse_core::model::TestFailed>,
                > + Send,
        >,
    > {
        let this = self.clone();
        Box::pin(async move {
            let commands = this.file().commands;
            // A test runs what saving would: the same entry, enabled.
            let config = config_of(&UpstreamSpec { enabled: true, ..spec }, &commands)
                .map_err(|e| gatehouse_core::model::TestFailed::Connect(e.message))?;
            this.0.mcp.upstreams.probe(&config).await
        })
    }
}

/// The running set: the file's entries, then each stored spec whose name
/// the file does not use, each with its restart count.
fn merge(file: &FileSide, stored: &Stored) -> Vec<UpstreamConfig> {
    let restarts = |name: &str| stored.restarts.iter().find(|(n, _)| n == name).map(|(_, r)| *r).unwrap_or(0);
    let mut merged: Vec<UpstreamConfig> =
        file.upstreams.iter().map(|u| UpstreamConfig { restarts: restarts(&u.name), ..u.clone() }).collect();
    for spec in &stored.specs {
        if file.upstreams.iter().any(|u| u.name == spec.name) {
            tracing::warn!(upstream = %spec.name, "a stored upstream has the name of one in gatehouse.toml: the file's runs");
            continue;
        }
        match config_of(spec, &file.commands) {
            Ok(config) => merged.push(UpstreamConfig { restarts: restarts(&spec.name), ..config }),
            Err(e) => tracing::warn!(upstream = %spec.name, error = %e, "a stored upstream cannot run"),
        }
    }
    merged
}

/// The `[[upstream]]` entry a stored spec stands for (the file's defaults for the rest).
fn config_of(spec: &UpstreamSpec, commands: &BTreeMap<String, StdioCommand>) -> Result<UpstreamConfig, SpecError> {
    let base = UpstreamConfig {
        name: spec.name.clone(),
        prefix: spec.prefix.clone(),
        enabled: spec.enabled,
        ..Default::default()
    };
    match &spec.transport {
        Transport::Http { url } => {
            let url = url::Url::parse(url.trim()).map_err(|e| SpecError::new("url", format!("{e}")))?;
            let headers = spec.headers.iter().map(|h| (h.name.clone(), h.value.clone().unwrap_or_default())).collect();
            Ok(UpstreamConfig { url: Some(url), headers, ..base })
        }
        Transport::Stdio { command } => {
            let Some(allowed) = commands.get(command) else {
                return Err(SpecError::new("command", format!("{command:?} is no longer in stdio_commands")));
            };
            Ok(UpstreamConfig {
                command: Some(allowed.command.clone()),
                args: allowed.args.clone(),
                env: allowed.env.clone(),
                cwd: allowed.cwd.clone(),
                ..base
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use gatehouse_core::model::Header;

    use super::*;

    fn spec(name: &str, transport: Transport) -> UpstreamSpec {
        UpstreamSpec { name: name.into(), transport, prefix: None, enabled: true, headers: Vec::new() }
    }

    #[test]
    fn the_file_wins_a_name_and_a_stdio_spec_runs_only_its_allowed_command() {
        let file = FileSide {
            upstreams: vec![UpstreamConfig {
                name: "files".into(),
                command: Some("fs-mcp".into()),
                ..Default::default()
            }],
            commands: BTreeMap::from([(
                "everything".to_string(),
                StdioCommand { command: "node".into(), args: vec!["e.mjs".into()], env: Default::default(), cwd: None },
            )]),
        };
        let mut search = spec("search", Transport::Http { url: "https://mcp.example.com/mcp".into() });
        search.headers.push(Header { name: "Authorization".into(), value: Some("Bearer s".into()), secret: true });
        let stored = Stored {
            specs: vec![
                spec("files", Transport::Http { url: "https://evil.example/mcp".into() }),
                search,
                spec("demo", Transport::Stdio { command: "everything".into() }),
                spec("gone", Transport::Stdio { command: "removed-from-the-file".into() }),
            ],
            restarts: vec![("files".into(), 3), ("demo".into(), 1)],
        };
        let merged = merge(&file, &stored);
        let names: Vec<&str> = merged.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["files", "search", "demo"]);
        assert_eq!(merged[0].command.as_deref(), Some("fs-mcp"), "the file's entry, not the stored one");
        assert_eq!(merged[0].restarts, 3);
        assert_eq!(merged[1].headers.get("Authorization").map(String::as_str), Some("Bearer s"));
        assert_eq!((merged[2].command.as_deref(), merged[2].args.clone()), (Some("node"), vec!["e.mjs".to_string()]));
        assert_eq!(merged[2].restarts, 1);
    }
}
