//! Background housekeeping: deletes browser sessions that have expired and
//! audit entries older than `audit_retention`, dead OAuth codes, tokens
//! and unused client registrations, expired task results, secrets never
//! shown and sign-in failures long quiet, once at start and then every
//! [`EVERY`], until the server shuts down.

use std::time::Duration;

use gatehouse_core::approvals::TaskResults;
use gatehouse_core::audit::AuditLog;
use gatehouse_core::sign_in_failures::SignInFailures;
use gatehouse_core::{Core, CoreError};
use tokio_util::sync::CancellationToken;

/// How often the sweep runs.
pub const EVERY: Duration = Duration::from_secs(10 * 60);

/// The advisory lock key of the sweep ("hk" in ASCII): one replica at a time.
const HOUSEKEEPING_JOB: i32 = 0x686b;

/// What one sweep deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Expired browser sessions.
    pub sessions: usize,
    /// Audit entries past the retention.
    pub audit_events: usize,
    /// Expired OAuth codes and tokens, and registrations never used.
    pub oauth: usize,
    /// Task results past their retention.
    pub task_results: usize,
    /// Secrets never shown (minted tokens, links) past their time.
    pub shown_once: usize,
    /// Shared sign-in failure counts quiet long enough to forget (PostgreSQL).
    pub sign_in_failures: usize,
}

/// One sweep, in the stores' lane (it may delete many rows).
pub async fn sweep(core: &Core, audit_retention: Duration) -> Result<Swept, CoreError> {
    core.run(move |core| {
        // Replicas on one PostgreSQL sweep in turn, not all at once.
        let swept = core.db.exclusively(HOUSEKEEPING_JOB, || {
            let sessions = core.users.purge_expired_sessions()?;
            let audit_events = AuditLog::new(core.db.clone(), core.clock.clone()).prune_older_than(audit_retention)?;
            let oauth = core.oauth.purge()?;
            core.approvals.audit().prune_claims()?;
            let task_results = TaskResults::new(core.db.clone(), core.clock.clone()).purge_expired()?;
            let shown_once = core.show_once.purge_expired()?;
            let sign_in_failures = SignInFailures::new(core.db.clone(), core.clock.clone()).purge_forgotten()?;
            Ok(Swept { sessions, audit_events, oauth, task_results, shown_once, sign_in_failures })
        })?;
        Ok(swept.unwrap_or_default())
    })
    .await?
}

/// Sweeps at start and every [`EVERY`] until `shutdown` is cancelled; a
/// failed sweep is logged and tried again next time.
pub async fn run(core: Core, audit_retention: Duration, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        match sweep(&core, audit_retention).await {
            Ok(swept) if swept != Swept::default() => {
                tracing::info!(
                    sessions = swept.sessions,
                    audit_events = swept.audit_events,
                    oauth = swept.oauth,
                    task_results = swept.task_results,
                    shown_once = swept.shown_once,
                    sign_in_failures = swept.sign_in_failures,
                    "housekeeping deleted old rows"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "housekeeping failed; retrying at the next tick"),
        }
    }
}
