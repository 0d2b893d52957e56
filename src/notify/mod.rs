//! Outbound notifications: `[[notify]]` targets hear when an execution
//! opens and when it settles (JSON signed with HMAC-SHA256, Slack incoming
//! webhooks, ntfy). Built on the live hub, delivered in the background: a
//! slow or failing receiver never delays the gate.

pub mod config;
pub mod deliver;
pub mod format;
pub mod sources;
pub mod watch;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use gatehouse_core::Core;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::{Format, NotifyConfig, Target};
pub use deliver::{Last, TargetStatus};
pub use format::{Notice, sign};
pub use sources::NotifySources;

/// The configured targets and their delivery status; cheap to clone. A
/// reload ([`Notifier::replace`]) stops the running set's watcher and
/// workers (each sends what it has queued, within
/// [`deliver::SHUTDOWN_GRACE`]) and starts the new set; a target whose
/// entry is unchanged keeps its counters.
#[derive(Clone, Default)]
pub struct Notifier {
    inner: Arc<Mutex<Inner>>,
}

type Targets = Arc<Vec<(Arc<Target>, Arc<TargetStatus>)>>;

#[derive(Default)]
struct Inner {
    targets: Targets,
    /// What [`Notifier::start`] was given, to start a reloaded set with.
    started: Option<Started>,
    /// Stops the running set (a child of the server's shutdown).
    running: Option<CancellationToken>,
    /// Where the watchers are: a reloaded set goes on from there, so a call
    /// opened during the reload is still announced.
    mark: Arc<watch::Mark>,
}

struct Started {
    core: Core,
    base_url: String,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

impl Notifier {
    /// Targets that have not started yet ([`Notifier::start`]).
    pub fn new(targets: &[Target]) -> Self {
        let notifier = Self::default();
        notifier.lock().targets = Arc::new(with_status(targets, &[]));
        notifier
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every target with its status, in config order.
    pub fn targets(&self) -> Targets {
        self.lock().targets.clone()
    }

    /// Starts the watcher and one worker per target on `tasks` (nothing
    /// when no target is configured). They end at `shutdown`, the workers
    /// after sending what is queued (within [`deliver::SHUTDOWN_GRACE`]).
    pub fn start(&self, core: &Core, base_url: &str, tasks: &TaskTracker, shutdown: &CancellationToken) {
        let mut inner = self.lock();
        let started = Started {
            core: core.clone(),
            base_url: base_url.to_string(),
            tasks: tasks.clone(),
            shutdown: shutdown.clone(),
        };
        inner.running = spawn(&started, &inner.targets, &inner.mark);
        inner.started = Some(started);
    }

    /// Takes the watchers' floor now if no set has yet, so a set started
    /// next announces every call opened after this returns (not only after
    /// its watcher first looks).
    pub async fn prepare(&self, core: &Core) {
        if self.lock().mark.started() {
            return;
        }
        if let Ok(newest) = core.run(|core| watch::newest_id(&core)).await {
            self.lock().mark.seed(newest);
        }
    }

    /// Runs `targets` from now on, in place of the running ones; `false`
    /// when they are the same (nothing is restarted).
    pub fn replace(&self, targets: &[Target]) -> bool {
        let mut inner = self.lock();
        if inner.targets.len() == targets.len() && inner.targets.iter().zip(targets).all(|((t, _), new)| **t == *new) {
            return false;
        }
        if let Some(running) = inner.running.take() {
            running.cancel();
        }
        inner.targets = Arc::new(with_status(targets, &inner.targets));
        if !targets.iter().any(|t| t.enabled) {
            // No set runs until the next: that one starts from its own start
            // (not from here, with the whole gap behind it).
            inner.mark = Arc::default();
        }
        if let Some(started) = &inner.started {
            inner.running = spawn(started, &inner.targets, &inner.mark);
        }
        true
    }

    /// Sends target `name` one test message now (a disabled one too),
    /// once, without retries: what the receiver said. Counted nowhere:
    /// the counters are the executions'.
    pub async fn send_test(&self, name: &str) -> Result<(), deliver::DeliveryError> {
        let (target, base_url) = {
            let inner = self.lock();
            let target = inner.targets.iter().find(|(t, _)| t.name == name).map(|(t, _)| t.clone());
            (target, inner.started.as_ref().map(|s| s.base_url.clone()).unwrap_or_default())
        };
        let Some(target) = target else {
            return Err(deliver::DeliveryError::Request(format!("there is no target named {name}")));
        };
        let outgoing = format::render_test(&target, &base_url);
        deliver::send_once(&deliver::client(), &target, &outgoing, &uuid::Uuid::new_v4().to_string()).await
    }

    /// The `/metrics` lines of every target.
    pub fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write;
        let targets = self.targets();
        if targets.is_empty() {
            return;
        }
        out.push_str(
            "# HELP gatehouse_notify_messages_total Notification messages per [[notify]] target and outcome.\n\
             # TYPE gatehouse_notify_messages_total counter\n",
        );
        for (target, status) in targets.iter() {
            for (outcome, counter) in
                [("delivered", &status.delivered), ("failed", &status.failed), ("dropped", &status.dropped)]
            {
                let _ = writeln!(
                    out,
                    "gatehouse_notify_messages_total{{target=\"{}\",outcome=\"{outcome}\"}} {}",
                    target.name,
                    counter.load(Ordering::Relaxed)
                );
            }
        }
    }
}

/// `targets`, each with its status: kept from `before` for an entry that
/// did not change, new otherwise.
fn with_status(
    targets: &[Target],
    before: &[(Arc<Target>, Arc<TargetStatus>)],
) -> Vec<(Arc<Target>, Arc<TargetStatus>)> {
    targets
        .iter()
        .map(|t| {
            // Disable and Enable keep the counters; any other change starts them again.
            let kept = before
                .iter()
                .find(|(old, _)| Target { enabled: t.enabled, ..(**old).clone() } == *t)
                .map(|(_, status)| status.clone());
            (Arc::new(t.clone()), kept.unwrap_or_default())
        })
        .collect()
}

/// Spawns the watcher and the workers of `targets`; the token that stops
/// them (`None` when there is nothing to run).
fn spawn(
    started: &Started,
    targets: &[(Arc<Target>, Arc<TargetStatus>)],
    mark: &Arc<watch::Mark>,
) -> Option<CancellationToken> {
    // A disabled target is shown with its counters, and sent nothing.
    let running: Vec<_> = targets.iter().filter(|(t, _)| t.enabled).collect();
    if running.is_empty() {
        return None;
    }
    let stop = started.shutdown.child_token();
    let client = deliver::client();
    let mut routes = Vec::with_capacity(running.len());
    for (target, status) in running {
        let (tx, rx) = mpsc::channel(deliver::QUEUE_CAPACITY);
        routes.push(watch::Route { target: target.clone(), tx, status: status.clone() });
        started.tasks.spawn(
            deliver::Worker {
                target: target.clone(),
                status: status.clone(),
                rx,
                client: client.clone(),
                clock: started.core.clock.clone(),
                shutdown: stop.clone(),
            }
            .run(),
        );
    }
    started.tasks.spawn(watch::run(started.core.clone(), started.base_url.clone(), routes, stop.clone(), mark.clone()));
    Some(stop)
}

impl Notifier {
    /// Every target with its status, as the console shows it.
    pub fn notify_targets(&self) -> Vec<gatehouse_app::server_fns::NotifyTargetInfo> {
        self.targets()
            .iter()
            .map(|(t, s)| {
                let last = s.last();
                gatehouse_app::server_fns::NotifyTargetInfo {
                    name: t.name.clone(),
                    url: t.shown_url(),
                    format: t.format.as_str().to_string(),
                    delivered: s.delivered.load(Ordering::Relaxed),
                    failed: s.failed.load(Ordering::Relaxed),
                    dropped: s.dropped.load(Ordering::Relaxed),
                    last_success_ms: last.success_ms,
                    last_failure_ms: last.failure_ms,
                    last_error: last.error,
                    from_file: t.from_file,
                    enabled: t.enabled,
                    secret_set: t.secret.is_some(),
                    agents: t.agents.clone(),
                    tools: t.tools.clone(),
                    timeout: humantime::format_duration(t.timeout).to_string(),
                }
            })
            .collect()
    }
}
