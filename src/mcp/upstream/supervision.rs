//! Keeping each upstream's shared connection up: start a supervisor per
//! enabled upstream, connect, list, wait for the connection to end, back off
//! and start again; and the health that shows for it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use gatehouse_core::live::LiveHub;
use gatehouse_core::pins::ToolPins;
use rmcp::model::{ClientCapabilities, ElicitationCapability, RootsCapabilities, SamplingCapability};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::errors::{error_chain, in_words, sanitize};
use super::link::{self, Link};
use super::listing::{UpstreamLists, list_upstream};
use super::relay::{Relay, RelayState};
use super::stdio::ChildWatch;
use super::{Inner, Slot, Upstreams};
use crate::config::UpstreamConfig;

/// Health of one upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Connected; its tools are exposed.
    Up,
    /// Not connected yet.
    Down,
    /// It failed or ended; waiting out the backoff, or starting again.
    Restarting,
    /// Disabled in the config.
    Disabled,
}

/// How long a failed stdio child's stderr is waited for, so its last line
/// is in the error it is reported with.
pub(super) const STDERR_GRACE: Duration = Duration::from_millis(500);

impl Health {
    /// The name shown in metrics and pages.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Up => "up",
            Health::Down => "down",
            Health::Restarting => "restarting",
            Health::Disabled => "disabled",
        }
    }
}

/// One upstream's health, for pages and metrics.
#[derive(Debug, Clone)]
pub struct Status {
    /// Name.
    pub name: String,
    /// Health.
    pub health: Health,
    /// Last error, if it failed.
    pub last_error: Option<String>,
    /// Tools it exposes now.
    pub tools: usize,
    /// Restarts since start.
    pub restarts: u64,
    /// The protocol revision its shared connection negotiated (while up).
    pub protocol: Option<String>,
    /// Process id of a stdio upstream while it runs.
    pub pid: Option<u32>,
    /// The latest of a stdio upstream's stderr (at most `stderr_tail_bytes`).
    pub stderr_tail: Option<String>,
}

/// Where `config`'s upstream is, as its errors name it: its URL
/// (sanitized) or its command.
pub(super) fn place(config: &UpstreamConfig) -> String {
    match (&config.url, &config.command) {
        (Some(url), _) => sanitize(url.as_str()),
        (None, Some(command)) => format!("{command:?}"),
        (None, None) => config.name.clone(),
    }
}

/// The longest wait between two attempts to start an upstream.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What a shared connection declares: everything an agent might answer;
/// requests that find no capable agent get an error.
pub(super) fn shared_capabilities() -> ClientCapabilities {
    let mut caps = ClientCapabilities::default();
    caps.sampling = Some(SamplingCapability::default());
    caps.elicitation = Some(ElicitationCapability::default());
    caps.roots = Some(RootsCapabilities::default());
    caps
}

/// A running supervisor: what stops it, and its task.
pub(super) struct Supervisor {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// How long a stopped supervisor may take to end before it is aborted
/// (it stops at its next wait; a listing in progress may hold it).
const STOP_WAIT: Duration = Duration::from_secs(5);

impl Upstreams {
    /// Starts a supervisor per enabled upstream; they stop at `shutdown`.
    /// Health changes are published to `live` for the upstreams page; tool
    /// definitions are pinned in `pins` (for upstreams that pin); no
    /// upstream tool is exposed under a name in `reserved` (the built-in
    /// tools, given so that this side needs nothing from the tool handlers).
    /// Every task the upstreams spawn, now or later, is tracked by `tasks`.
    pub fn start(
        configs: &[UpstreamConfig],
        reserved: HashSet<String>,
        live: LiveHub,
        pins: ToolPins,
        shutdown: CancellationToken,
        tasks: TaskTracker,
    ) -> Self {
        let inner = Inner { live: Some(live), pins: Some(pins), reserved, tasks, shutdown, ..Inner::default() };
        let upstreams = Upstreams { inner: Arc::new(inner) };
        for config in configs {
            upstreams.slots_mut().insert(config.name.clone(), Slot::new(config));
            if config.enabled {
                upstreams.spawn_supervisor(config);
            }
        }
        upstreams.publish();
        upstreams
    }

    fn supervisors(&self) -> std::sync::MutexGuard<'_, HashMap<String, Supervisor>> {
        self.inner.supervisors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the supervisor of `config`'s upstream, stopped by
    /// [`Upstreams::stop_supervisor`] or at shutdown.
    pub(super) fn spawn_supervisor(&self, config: &UpstreamConfig) {
        let stop = self.inner.shutdown.child_token();
        let task = self.inner.tasks.spawn(self.clone().supervise(config.clone(), stop.clone()));
        self.supervisors().insert(config.name.clone(), Supervisor { stop, task });
    }

    /// Stops upstream `name`'s supervisor (its connection closes, a stdio
    /// child is killed) and waits for it to end, at most [`STOP_WAIT`]
    /// before it is aborted: once this returns it writes nothing more.
    pub(super) async fn stop_supervisor(&self, name: &str) {
        let Some(Supervisor { stop, mut task }) = self.supervisors().remove(name) else { return };
        stop.cancel();
        if tokio::time::timeout(STOP_WAIT, &mut task).await.is_err() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Health of every upstream, by name.
    pub fn status(&self) -> Vec<Status> {
        let mut all: Vec<Status> = self
            .slots()
            .iter()
            .map(|(name, s)| Status {
                name: name.clone(),
                health: s.health,
                last_error: s.shown_error(),
                tools: s.exposed.tools.len(),
                restarts: s.restarts,
                protocol: s.protocol.clone(),
                pid: s.pid,
                stderr_tail: s.child.as_ref().map(ChildWatch::stderr_tail),
            })
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Records why upstream `name` failed (in words, sanitized) and logs it.
    fn fail(&self, config: &UpstreamConfig, watch: Option<&ChildWatch>, what: &str, error: String) {
        let name = &config.name;
        let at = place(config);
        let stderr = watch.and_then(ChildWatch::last_line);
        let error = sanitize(&in_words(&error, &at, stderr.as_deref()));
        tracing::warn!(upstream = %name, %error, "{what}");
        self.update(name, |s| s.last_error = Some(error));
    }

    /// Keeps one upstream connected: connect, list what it offers, wait for
    /// it to end, back off (1 s doubling to 30 s, reset after a healthy
    /// minute), repeat. The first attempt asks with `server/discover` (and
    /// falls back to `initialize`); after a failed attempt the next one tries
    /// the other way ([`link::Lifecycle::other`]).
    async fn supervise(self, config: UpstreamConfig, shutdown: CancellationToken) {
        let mut backoff = Duration::from_secs(1);
        let mut lifecycle = link::Lifecycle::Auto;
        loop {
            let started = tokio::time::Instant::now();
            let relay = RelayState::new(&config.name, None, &self, config.call_timeout);
            let watch = config.command.is_some().then(|| ChildWatch::new(&config));
            self.update(&config.name, |s| s.child = watch.clone());
            let relay_handler = Relay::new(relay.clone(), shared_capabilities());
            let connecting = link::connect(&config, relay_handler, watch.as_ref(), lifecycle);
            let connected = tokio::select! {
                connected = connecting => connected,
                _ = shutdown.cancelled() => return,
            };
            match connected {
                Ok(connection) => {
                    let service = connection.service;
                    let peer = service.peer().clone();
                    let protocol = peer.peer_info().map(|i| i.protocol_version.to_string());
                    tracing::info!(upstream = %config.name, protocol = ?protocol, "upstream connected");
                    self.update(&config.name, |s| {
                        s.pid = connection.pid;
                        s.protocol = protocol;
                    });
                    match list_upstream(&config, &peer).await {
                        Ok(listing) => {
                            self.record_listing(&config, &listing.lists);
                            let lists = listing.lists;
                            tracing::info!(upstream = %config.name, tools = lists.tools.len(), prompts = lists.prompts.len(), resources = lists.resources.len(), "upstream up");
                            let link = Link {
                                peer: peer.clone(),
                                relay,
                                agent_service: None,
                                call_timeout: config.call_timeout,
                                watch: watch.clone(),
                            };
                            // A 2026-07-28 upstream is heard on a listen of Gatehouse's,
                            // held while this connection lives.
                            // (Started once what it serves is known, so the resources it
                            // routes to it are watched from the first listen.)
                            let listening = shutdown.child_token();
                            let listened = link.clone();
                            self.update(&config.name, |s| {
                                s.health = Health::Up;
                                s.offered = lists;
                                s.list_problems = listing.problems;
                                s.link = Some(link);
                                s.last_error = None;
                            });
                            self.start_listening(&config.name, &listened, listening.clone());
                            let _listening = listening.drop_guard();
                            self.announce_lists_changed();
                            // After a restart: what agents had subscribed to on the
                            // shared connection (their own HTTP sessions renew theirs).
                            let shared_subscriptions: Vec<String> = self
                                .downstreams()
                                .iter()
                                .filter(|d| config.url.is_none() || !d.stateful())
                                .flat_map(|d| d.subscriptions())
                                .chain(self.inner.listeners.resources())
                                .collect();
                            // (A 2026-07-28 upstream's listen carries them instead.)
                            if !link::is_modern(&peer) {
                                self.resubscribe(&config.name, &peer, shared_subscriptions, config.call_timeout).await;
                            }
                            tokio::select! {
                                quit = service.waiting() => {
                                    if let Some(watch) = &watch {
                                        watch.stderr_read(STDERR_GRACE).await;
                                    }
                                    let reason = watch.as_ref().and_then(ChildWatch::violation).unwrap_or_else(|| format!("{quit:?}"));
                                    self.fail(&config, watch.as_ref(), "upstream ended", format!("ended: {reason}"));
                                }
                                _ = shutdown.cancelled() => return,
                            }
                        }
                        Err(e) => {
                            self.fail(&config, watch.as_ref(), "upstream listing failed", e.to_string());
                            let _ = service.cancel().await;
                        }
                    }
                }
                Err(e) => {
                    if let Some(watch) = &watch {
                        watch.stderr_read(STDERR_GRACE).await;
                    }
                    self.fail(&config, watch.as_ref(), "upstream failed to start", error_chain(&e));
                    lifecycle = lifecycle.other();
                }
            }
            if let Some(line) = watch.as_ref().and_then(ChildWatch::last_line) {
                tracing::warn!(upstream = %config.name, stderr = %sanitize(&line), "upstream's last stderr line");
            }
            let mut was_up = false;
            self.update(&config.name, |s| {
                was_up = s.health == Health::Up;
                s.health = Health::Restarting;
                s.offered = UpstreamLists::default();
                s.held.clear();
                s.list_problems.clear();
                s.link = None;
                s.pid = None;
                s.protocol = None;
                s.restarts += 1;
            });
            if was_up {
                self.announce_lists_changed();
            }
            if started.elapsed() > Duration::from_secs(60) {
                backoff = Duration::from_secs(1);
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.cancelled() => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}
