//! Outbound notifications: `[[notify]]` targets hear when an execution
//! opens and when it settles (JSON signed with HMAC-SHA256, Slack incoming
//! webhooks, ntfy). Built on the live hub, delivered in the background: a
//! slow or failing receiver never delays the gate.

pub mod config;
pub mod deliver;
pub mod format;
pub mod watch;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use gatehouse_core::Core;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::{Format, NotifyConfig, Target};
pub use deliver::{Last, TargetStatus};
pub use format::{Notice, sign};

/// The configured targets and their delivery status; cheap to clone.
#[derive(Clone, Default)]
pub struct Notifier {
    targets: Arc<Vec<(Arc<Target>, Arc<TargetStatus>)>>,
}

impl Notifier {
    /// Targets that have not started yet ([`Notifier::start`]).
    pub fn new(targets: &[Target]) -> Self {
        Self {
            targets: Arc::new(
                targets.iter().map(|t| (Arc::new(t.clone()), Arc::new(TargetStatus::default()))).collect(),
            ),
        }
    }

    /// Every target with its status, in config order.
    pub fn targets(&self) -> &[(Arc<Target>, Arc<TargetStatus>)] {
        &self.targets
    }

    /// Starts the watcher and one worker per target on `tasks` (nothing
    /// when no target is configured). They end at `shutdown`, the workers
    /// after sending what is queued (within [`deliver::SHUTDOWN_GRACE`]).
    pub fn start(&self, core: &Core, base_url: &str, tasks: &TaskTracker, shutdown: &CancellationToken) {
        if self.targets.is_empty() {
            return;
        }
        let client = deliver::client();
        let mut routes = Vec::with_capacity(self.targets.len());
        for (target, status) in self.targets.iter() {
            let (tx, rx) = mpsc::channel(deliver::QUEUE_CAPACITY);
            routes.push(watch::Route { target: target.clone(), tx, status: status.clone() });
            tasks.spawn(
                deliver::Worker {
                    target: target.clone(),
                    status: status.clone(),
                    rx,
                    client: client.clone(),
                    clock: core.clock.clone(),
                    shutdown: shutdown.clone(),
                }
                .run(),
            );
        }
        tasks.spawn(watch::run(core.clone(), base_url.to_string(), routes, shutdown.clone()));
    }

    /// The `/metrics` lines of every target.
    pub fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write;
        if self.targets.is_empty() {
            return;
        }
        out.push_str(
            "# HELP gatehouse_notify_messages_total Notification messages per [[notify]] target and outcome.\n\
             # TYPE gatehouse_notify_messages_total counter\n",
        );
        for (target, status) in self.targets.iter() {
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

impl gatehouse_app::server_fns::NotifyTargets for Notifier {
    fn notify_targets(&self) -> Vec<gatehouse_app::server_fns::NotifyTargetInfo> {
        self.targets
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
                }
            })
            .collect()
    }
}
