//! Configuration that reloads without a restart: on SIGHUP, and when the
//! config file's text or mode changes (read every [`POLL`]; applied once two
//! reads agree, so a save in progress is never applied half written).
//!
//! What reloads: the `[[policy]]` rules, the `[[profile]]`s, which
//! upstreams' annotations are trusted, the `[[upstream]]`s themselves
//! (added, removed, or restarted when their entry changed; agents keep their
//! sessions and are told their lists changed), and the `[[notify]]` targets.
//! Every other key that changed is named, in the log and in the change log,
//! as taking effect at the next restart. Of the other keys, those in
//! [`LIVE_KEYS`] (what is kept of arguments, the session and request caps,
//! the trust switches, the page size) apply at once too: the running
//! configuration is swapped with them ([`crate::config::live::LiveConfig`]). A file that does not load is refused whole: the error is logged
//! and recorded, and the running configuration is kept. Every reload,
//! applied or refused, is in the change log (subject `config`).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use gatehouse_core::changes::Change;
use gatehouse_core::policy::FromFile;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::live::LIVE_KEYS;
use crate::config::{Config, Overrides};
use crate::mcp::McpState;
use crate::mcp::upstream::reconfigure::Reconfigured;
use crate::notify::NotifySources;
use crate::state::AppState;
use crate::upstream_sources::UpstreamSources;

/// How often the file is read to see whether it changed.
pub const POLL: Duration = Duration::from_secs(1);

/// The actor a reload is recorded as in the change log.
const ACTOR: &str = "config";

/// What started a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The process got SIGHUP.
    Signal,
    /// The file's text changed.
    FileChanged,
}

impl Cause {
    fn as_str(self) -> &'static str {
        match self {
            Cause::Signal => "SIGHUP",
            Cause::FileChanged => "the file changed",
        }
    }
}

/// What came of one reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// The file loaded; `applied` says whether the rules, profiles or trust
    /// changed; `at_restart` names the other keys that changed since start.
    Applied {
        /// The rules, profiles or trusted upstreams changed (and now hold).
        applied: bool,
        /// The upstreams added, removed and restarted.
        upstreams: Reconfigured,
        /// The `[[notify]]` targets changed (the new set now runs).
        notify: bool,
        /// The keys that apply at once ([`LIVE_KEYS`]) this reload changed.
        live: Vec<String>,
        /// Top-level keys that changed but take effect only at a restart.
        at_restart: Vec<String>,
    },
    /// The file did not load: why. Nothing changed.
    Refused(String),
}

/// Reloads one config file into a running server.
pub struct Reloader {
    path: PathBuf,
    overrides: Overrides,
    mcp: McpState,
    notify: NotifySources,
    sources: UpstreamSources,
    /// The file's keys as the server started with them (what only a restart applies).
    started: toml::Table,
    /// The file's keys as last applied (which live keys a reload changed).
    applied: Mutex<toml::Table>,
    /// The file as last reloaded (its text and mode), so an unchanged file
    /// is not reloaded again; and a changed one as last polled, so it is
    /// reloaded only once two polls read it alike (a save in progress,
    /// truncated and half written, is never applied).
    seen: Mutex<Seen>,
}

/// What the watcher knows of the file.
#[derive(Default)]
struct Seen {
    reloaded: Snapshot,
    polled: Option<Snapshot>,
}

impl Seen {
    /// Whether `now`, just polled, differs from what was reloaded and was
    /// polled alike the time before.
    fn settled(&mut self, now: Snapshot) -> bool {
        if now == self.reloaded {
            self.polled = None;
            return false;
        }
        let settled = self.polled.as_ref() == Some(&now);
        self.polled = Some(now);
        settled
    }
}

/// The file's text and permission bits as read once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Snapshot {
    text: String,
    mode: u32,
}

impl Snapshot {
    async fn of(path: &std::path::Path) -> Option<Snapshot> {
        let text = tokio::fs::read_to_string(path).await.ok()?;
        Some(Snapshot { text, mode: mode_of(path).await.unwrap_or(0) })
    }
}

impl Reloader {
    /// A reloader for `path`, which the server of `state` was started from
    /// (read now, as the baseline of what a restart would change).
    pub fn new(path: PathBuf, overrides: Overrides, state: &AppState) -> Self {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let started = keys(&text).unwrap_or_default();
        #[cfg(unix)]
        let mode =
            std::fs::metadata(&path).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions())).unwrap_or(0);
        #[cfg(not(unix))]
        let mode = 0;
        let seen = Seen { reloaded: Snapshot { text, mode }, polled: None };
        Self {
            path,
            overrides,
            mcp: state.mcp.clone(),
            notify: state.notify_sources.clone(),
            sources: state.upstream_sources.clone(),
            applied: Mutex::new(started.clone()),
            started,
            seen: Mutex::new(seen),
        }
    }

    /// Reads the file again and applies what reloads; records the outcome.
    pub async fn reload(&self, cause: Cause) -> Reloaded {
        let read = tokio::fs::read_to_string(&self.path).await;
        let text = read.as_ref().map(String::clone).unwrap_or_default();
        let mode = mode_of(&self.path).await.unwrap_or(0);
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) =
            Seen { reloaded: Snapshot { text: text.clone(), mode }, polled: None };
        let loaded = match read {
            Ok(text) => Config::from_text(&self.path, &text, &self.overrides).map_err(|e| e.to_string()),
            Err(source) => Err(crate::config::ConfigError::Read { path: self.path.clone(), source }.to_string()),
        };
        let loaded = match writable_by_others(&self.path).await {
            Some(why) => Err(why),
            None => loaded,
        };
        let outcome = match loaded {
            Err(e) => Reloaded::Refused(e),
            Ok(config) => {
                let trusted = config.upstream.iter().filter(|u| u.trust_annotations).map(|u| u.name.clone());
                let file = FromFile::new(config.policy_rules.clone(), trusted, config.profiles.clone());
                let applied = self.mcp.core.policy.replace_config(file);
                let now = self.mcp.config.apply(&config);
                let upstreams = self.sources.file_changed(&config).await;
                if applied && upstreams.is_empty() {
                    // A profile or rule may show or hide tools (a reconfiguration said so already).
                    self.mcp.upstreams.announce_lists_changed();
                }
                let notify = self.notify.file_changed(&config.notify_targets).await;
                self.mcp.mcp_sessions.set_caps(now.max_sessions_per_credential, now.max_sessions);
                self.mcp.slots.set_per_credential(now.max_requests_per_credential);
                let table = keys(&text).unwrap_or_default();
                let live = {
                    let mut last = self.applied.lock().unwrap_or_else(|p| p.into_inner());
                    let live = LIVE_KEYS.iter().filter(|k| last.get(**k) != table.get(**k)).map(|k| k.to_string());
                    let live = live.collect();
                    *last = table.clone();
                    live
                };
                let at_restart = changed_keys(&self.started, &table);
                Reloaded::Applied { applied, upstreams, notify, live, at_restart }
            }
        };
        let path = self.path.display().to_string();
        let (action, detail) = match &outcome {
            Reloaded::Refused(why) => {
                tracing::error!(config = %path, cause = cause.as_str(), error = %why, "configuration not reloaded: the running one is kept");
                ("reload refused", why.clone())
            }
            Reloaded::Applied { applied, upstreams, notify, live, at_restart } => {
                let mut said = if *applied {
                    "rules, profiles and trusted upstreams reloaded".to_string()
                } else {
                    "rules, profiles and trusted upstreams unchanged".to_string()
                };
                for (what, names) in
                    [("added", &upstreams.added), ("removed", &upstreams.removed), ("restarted", &upstreams.restarted)]
                {
                    if !names.is_empty() {
                        said.push_str(&format!("; upstreams {what}: {}", names.join(", ")));
                    }
                }
                if *notify {
                    said.push_str("; notification targets reloaded");
                }
                if !live.is_empty() {
                    said.push_str(&format!("; applied: {}", live.join(", ")));
                }
                if !at_restart.is_empty() {
                    said.push_str(&format!("; changed, at the next restart: {}", at_restart.join(", ")));
                    tracing::warn!(config = %path, keys = ?at_restart, "these keys changed and take effect at the next restart");
                }
                tracing::info!(config = %path, cause = cause.as_str(), applied, "configuration reloaded");
                ("reload", said)
            }
        };
        let detail = format!("{} ({})", detail, cause.as_str());
        let recorded = self
            .mcp
            .core
            .run(move |core| {
                core.changes.record(Change {
                    actor: ACTOR,
                    subject: "config",
                    target: &path,
                    action,
                    detail: Some(&detail),
                })
            })
            .await;
        if let Ok(Err(e)) | Err(e) = recorded {
            tracing::error!(error = %e, "could not record a configuration reload");
        }
        outcome
    }

    /// Whether the file (its text or its mode) differs from what was last
    /// reloaded and read the same on the poll before: settled.
    async fn changed(&self) -> bool {
        let Some(now) = Snapshot::of(&self.path).await else { return false };
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).settled(now)
    }
}

/// Why the file may not be reloaded if someone other than the server's own
/// user (or root) could have written it: whoever writes it changes the gate
/// within a second (an agent's user in the same group, say). Refused when
/// the file is writable by its group or everyone, when it belongs to
/// another user, or when its folder lets others than its owner replace it
/// (a folder with the sticky bit, like `/tmp`, lets each replace only
/// their own files) or belongs to another user. `None` when only the
/// server's user or root may.
async fn writable_by_others(path: &std::path::Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // The file a link leads to, in the folder it is in: what is read.
        let Ok(real) = tokio::fs::canonicalize(path).await else {
            return Some(format!("{} cannot be resolved: its owner and folder cannot be checked", path.display()));
        };
        let path = real.as_path();
        let file = tokio::fs::metadata(path).await.ok()?;
        let mode = file.mode();
        let fix = "whoever writes it would change the gate";
        if mode & 0o022 != 0 {
            return Some(format!(
                "{} is writable by its group or by everyone (mode {:o}): {fix}; make it writable by its owner only (chmod go-w)",
                path.display(),
                mode & 0o777
            ));
        }
        let me = rustix::process::geteuid().as_raw();
        if file.uid() != me && file.uid() != 0 {
            return Some(format!(
                "{} belongs to user {}, not to the user the server runs as ({me}) or root: {fix}; chown it",
                path.display(),
                file.uid()
            ));
        }
        let folder = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        let Ok(dir) = tokio::fs::metadata(folder).await else {
            return Some(format!(
                "its folder {} cannot be read: who may replace the file cannot be checked",
                folder.display()
            ));
        };
        let sticky = dir.mode() & 0o1000 != 0;
        if dir.mode() & 0o022 != 0 && !sticky {
            return Some(format!(
                "its folder {} is writable by its group or by everyone (mode {:o}): anyone who may write there could replace the file; chmod go-w the folder",
                folder.display(),
                dir.mode() & 0o777
            ));
        }
        if dir.uid() != me && dir.uid() != 0 {
            return Some(format!(
                "its folder {} belongs to user {}, who could replace the file: keep it in a folder of the server's user or root",
                folder.display(),
                dir.uid()
            ));
        }
        None
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// The file's permission bits (`None` where there are none to read).
async fn mode_of(path: &std::path::Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        Some(tokio::fs::metadata(path).await.ok()?.permissions().mode())
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Reloads on SIGHUP and when the file changes, until `shutdown`; owned by
/// `tasks`, so it is drained with the rest.
pub fn watch(reloader: Reloader, shutdown: CancellationToken, tasks: &TaskTracker) {
    tasks.spawn(async move {
        #[cfg(unix)]
        let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "SIGHUP cannot be listened for: the file is still watched");
                None
            }
        };
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            #[cfg(unix)]
            let signalled = async {
                match hangup.as_mut() {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let signalled = std::future::pending::<Option<()>>();
            tokio::select! {
                _ = shutdown.cancelled() => return,
                Some(()) = signalled => { reloader.reload(Cause::Signal).await; }
                _ = poll.tick() => {
                    if reloader.changed().await {
                        reloader.reload(Cause::FileChanged).await;
                    }
                }
            }
        }
    });
}

/// The file's top-level keys and their values (`None` if it does not parse).
fn keys(text: &str) -> Option<toml::Table> {
    text.parse::<toml::Table>().ok()
}

/// What a reload applies: these keys' changes never wait for a restart.
const RELOADED: &[&str] = &["policy", "profile", "upstream", "stdio_commands", "notify"];

/// The top-level keys whose values differ between `before` and `after`,
/// leaving out what reloads ([`RELOADED`], [`LIVE_KEYS`]), sorted.
fn changed_keys(before: &toml::Table, after: &toml::Table) -> Vec<String> {
    let mut all: Vec<&String> = before.keys().chain(after.keys()).collect();
    all.sort();
    all.dedup();
    all.into_iter()
        .filter(|key| {
            !RELOADED.contains(&key.as_str())
                && !LIVE_KEYS.contains(&key.as_str())
                && before.get(*key) != after.get(*key)
        })
        .map(|key| key.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_file_is_reloaded_once_two_polls_read_it_alike() {
        let at = |text: &str, mode: u32| Snapshot { text: text.into(), mode };
        let mut seen = Seen { reloaded: at("a", 0o644), polled: None };
        assert!(!seen.settled(at("a", 0o644)), "unchanged");
        assert!(!seen.settled(at("", 0o644)), "a save in progress: truncated");
        assert!(!seen.settled(at("a\nb", 0o644)), "written since: not settled yet");
        assert!(seen.settled(at("a\nb", 0o644)), "read alike twice");
        // Only the mode changed (`chmod go-w` after a refusal): that reloads too.
        let mut seen = Seen { reloaded: at("a", 0o664), polled: None };
        assert!(!seen.settled(at("a", 0o644)));
        assert!(seen.settled(at("a", 0o644)));
    }

    #[test]
    fn what_reloads_is_not_named_as_waiting_for_a_restart() {
        let before = keys(
            "listen = \"127.0.0.1:8080\"\n[[policy]]\npattern = \"a*\"\naction = \"block\"\n\
             [[upstream]]\nname = \"git\"\ncommand = \"git-mcp\"\n",
        )
        .unwrap();
        let after = keys(
            "listen = \"127.0.0.1:9090\"\n[[policy]]\npattern = \"b*\"\naction = \"allow\"\n\
             [[profile]]\nname = \"p\"\ntools = [\"x\"]\nagents = [\"a/b\"]\n\
             [[upstream]]\nname = \"git\"\ncommand = \"git-mcp\"\ntrust_annotations = true\n",
        )
        .unwrap();
        assert_eq!(changed_keys(&before, &after), ["listen"]);
        let more = keys("listen = \"127.0.0.1:8080\"\nkeep_arguments = \"all\"\napproval_ttl = \"5m\"\n").unwrap();
        assert_eq!(
            changed_keys(&before, &more),
            ["approval_ttl"],
            "the upstream's leaving reloads, keep_arguments too"
        );
    }
}
