//! Background housekeeping: deletes browser sessions that have expired and
//! audit entries older than `audit_retention` or past `audit_max_entries`, dead OAuth codes, tokens
//! and unused client registrations, expired task results, secrets never
//! shown, sign-in failures long quiet and spent single-use states, and ends approved calls
//! whose agent never answered their upstream's request for input, once at start and then every
//! [`EVERY`], until the server shuts down.

use std::time::Duration;

use gatehouse_core::approvals::TaskResults;
use gatehouse_core::audit::AuditLog;
use gatehouse_core::awaiting_input::AwaitingInput;
use gatehouse_core::sign_in_failures::SignInFailures;
use gatehouse_core::single_use::SingleUse;
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
    /// Calls whose kept arguments were forgotten (`keep_arguments_for`).
    pub arguments_forgotten: usize,
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
    /// Spent single-use states past their expiry.
    pub spent_states: usize,
    /// Approved calls ended as `expired`: their agent never answered the
    /// upstream's request for input.
    pub expired_calls: usize,
}

/// How long, and how much of, the audit log is kept.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// `audit_retention`: entries older than this go.
    pub age: Duration,
    /// `audit_max_entries`: past this many, the oldest go (at-once calls
    /// first, people's decisions last: [`AuditLog::prune_to`]).
    pub entries: u64,
    /// `keep_arguments_for`: kept arguments older than this are forgotten.
    pub arguments: Duration,
}

impl Retention {
    /// The configuration's.
    pub fn of(config: &crate::config::Config) -> Self {
        Self { age: config.audit_retention, entries: config.audit_max_entries, arguments: config.keep_arguments_for }
    }
}

/// One sweep, in the stores' lane (it may delete many rows).
pub async fn sweep(core: &Core, retention: Retention) -> Result<Swept, CoreError> {
    core.run(move |core| {
        // Replicas on one PostgreSQL sweep in turn, not all at once.
        let swept = core.db.exclusively(HOUSEKEEPING_JOB, || {
            let sessions = core.users.purge_expired_sessions()?;
            let log = AuditLog::new(core.db.clone(), core.clock.clone());
            let arguments_forgotten = log.forget_arguments_older_than(retention.arguments)?;
            let audit_events = log.prune_older_than(retention.age)? + log.prune_to(retention.entries)?;
            let entries = log.count()?;
            core.approvals.metrics().audit_entries.store(entries, std::sync::atomic::Ordering::Relaxed);
            if entries.saturating_mul(10) >= retention.entries.saturating_mul(9) {
                tracing::warn!(
                    entries,
                    max = retention.entries,
                    "the audit log is near its size bound (audit_max_entries): the oldest calls that ran at once \
                     go first when it is reached; raise the bound or shorten audit_retention to keep more"
                );
            }
            let oauth = core.oauth.purge()?;
            core.approvals.audit().prune_claims()?;
            let task_results = TaskResults::new(core.db.clone(), core.clock.clone()).purge_expired()?;
            let shown_once = core.show_once.purge_expired()?;
            let sign_in_failures = SignInFailures::new(core.db.clone(), core.clock.clone()).purge_forgotten()?;
            let spent_states = SingleUse::new(core.db.clone(), core.clock.clone()).purge_expired()?;
            let expired_calls =
                AwaitingInput::new(core.db.clone(), core.clock.clone()).expire_overdue(core.approvals.audit())?;
            Ok(Swept {
                arguments_forgotten,
                sessions,
                audit_events,
                oauth,
                task_results,
                shown_once,
                sign_in_failures,
                spent_states,
                expired_calls,
            })
        })?;
        Ok(swept.unwrap_or_default())
    })
    .await?
}

/// Sweeps at start and every [`EVERY`] until `shutdown` is cancelled; a
/// failed sweep is logged and tried again next time.
pub async fn run(core: Core, retention: Retention, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        match sweep(&core, retention).await {
            Ok(swept) if swept != Swept::default() => {
                tracing::info!(
                    sessions = swept.sessions,
                    arguments_forgotten = swept.arguments_forgotten,
                    audit_events = swept.audit_events,
                    oauth = swept.oauth,
                    task_results = swept.task_results,
                    shown_once = swept.shown_once,
                    sign_in_failures = swept.sign_in_failures,
                    spent_states = swept.spent_states,
                    "housekeeping deleted old rows"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "housekeeping failed; retrying at the next tick"),
        }
    }
}
