//! Where the running notification targets come from: the config file's
//! `[[notify]]` tables and the ones admins added on the console (the
//! database's), merged here, in one way, for start-up, a reloaded file and
//! a console change alike. A name the file uses wins over a stored one.
//! Every replica reads the database's side again each [`crate::polled::POLL`]
//! (and at once after a change made here).

use std::sync::{Arc, Mutex};

use gatehouse_core::Core;
use gatehouse_core::model::{NotifySpec, SpecError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Notifier;
use super::config::{Target, target};

/// The running targets' two sources; cheap to clone.
#[derive(Clone)]
pub struct NotifySources(Arc<Inner>);

struct Inner {
    core: Core,
    notifier: Notifier,
    /// The config file's targets, replaced by each reload.
    file: Mutex<Vec<Target>>,
    /// One application at a time; holds what the database said last time.
    applied: tokio::sync::Mutex<Option<Vec<NotifySpec>>>,
    /// Wakes the watcher after a change made on this replica.
    wake: tokio::sync::Notify,
}

impl NotifySources {
    /// What a server runs first: the file's `targets`, then the `stored` ones.
    pub fn at_start(file: &[Target], stored: &[NotifySpec]) -> Vec<Target> {
        merge(file, stored)
    }

    /// The sources of `notifier` (running [`Self::at_start`] of `file` and
    /// `stored`; `None` if the database could not be read: the first poll applies it).
    pub fn new(core: Core, notifier: Notifier, file: &[Target], stored: Option<Vec<NotifySpec>>) -> Self {
        Self(Arc::new(Inner {
            core,
            notifier,
            file: Mutex::new(file.to_vec()),
            applied: tokio::sync::Mutex::new(stored),
            wake: tokio::sync::Notify::new(),
        }))
    }

    fn file(&self) -> Vec<Target> {
        self.0.file.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The file was reloaded: its targets replace the old ones; whether the
    /// running set changed.
    pub async fn file_changed(&self, file: &[Target]) -> bool {
        *self.0.file.lock().unwrap_or_else(|p| p.into_inner()) = file.to_vec();
        self.apply(true).await
    }

    /// Reads the database's side and runs the merge of both, if the
    /// database changed since the last time (or `always`); whether the
    /// running set changed.
    async fn apply(&self, always: bool) -> bool {
        let mut applied = self.0.applied.lock().await;
        let stored = match self.0.core.run(|core| core.notify.all()).await {
            Ok(Ok(stored)) => stored,
            Ok(Err(e)) | Err(e) => {
                if applied.take().is_some() || always {
                    tracing::error!(error = %e, "the stored notification targets could not be read: the running ones are kept");
                }
                return false;
            }
        };
        if !always && applied.as_ref() == Some(&stored) {
            return false;
        }
        let merged = merge(&self.file(), &stored);
        if merged.iter().any(|t| t.enabled) {
            self.0.notifier.prepare(&self.0.core).await;
        }
        let changed = self.0.notifier.replace(&merged);
        *applied = Some(stored);
        changed
    }

    /// Applies the database's side now, then again on every change made
    /// here and every poll, until `shutdown`; owned by `tasks`.
    pub fn watch(&self, shutdown: CancellationToken, tasks: &TaskTracker) {
        crate::polled::follow(self.clone(), shutdown, tasks);
    }
}

impl crate::polled::Polled for NotifySources {
    fn wake(&self) -> &tokio::sync::Notify {
        &self.0.wake
    }

    async fn poll(&self) {
        if self.apply(false).await {
            tracing::info!("notification targets changed from the database");
        }
    }
}

/// What the console's server functions reach the targets through.
impl gatehouse_app::server_fns::NotifyTargets for NotifySources {
    fn notify_targets(&self) -> Vec<gatehouse_app::server_fns::NotifyTargetInfo> {
        self.0.notifier.notify_targets()
    }

    fn check(&self, spec: &NotifySpec) -> Result<(), SpecError> {
        let t = target(spec, false)?;
        if self.file().iter().any(|f| f.name == t.name) {
            return Err(SpecError::new(
                "name",
                format!("gatehouse.toml already has a notification target named {}: choose another name.", t.name),
            ));
        }
        Ok(())
    }

    fn file_targets(&self) -> Vec<String> {
        self.file().into_iter().map(|t| t.name).collect()
    }

    fn changed(&self) {
        self.0.wake.notify_one();
    }

    fn send_test(&self, name: String) -> std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send>> {
        let notifier = self.0.notifier.clone();
        Box::pin(async move { notifier.send_test(&name).await.map_err(|e| e.to_string()) })
    }
}

/// The running set: the file's targets, then each stored one whose name the
/// file does not use.
fn merge(file: &[Target], stored: &[NotifySpec]) -> Vec<Target> {
    let mut merged = file.to_vec();
    for spec in stored {
        match target(spec, false) {
            Ok(t) if file.iter().any(|f| f.name == t.name) => {
                tracing::warn!(target_name = %t.name, "a stored notification target has the name of one in gatehouse.toml: the file's runs");
            }
            Ok(t) => merged.push(t),
            Err(e) => tracing::warn!(target_name = ?spec.name, error = %e, "a stored notification target cannot run"),
        }
    }
    merged
}
