//! Where messages come from: on each of the live hub's `ApprovalsChanged`
//! events, the audit log's entries since the last look. Every transition of
//! an execution is audited in order, so none is missed however late this task
//! looks (a call opened and decided between two looks still makes both
//! messages), and nothing is added to the gate's path: the gate publishes
//! and audits as it always did, and this task reads afterwards.
//!
//! Which transitions make a message:
//! - an execution opens (`pending`);
//! - it leaves `pending`: `approved`, `declined`, `expired`, `cancelled`, `revoked`;
//! - an approved execution ends any other way than `completed`: `failed`,
//!   `expired` (not run within the run window), `cancelled`, `revoked`.
//!
//! `running` and `completed` make none: the approval already said it.
//! Entries written before the server started (a previous run's, and the
//! `abandoned` ones it adds at start) are not sent.

use gatehouse_core::Core;
use gatehouse_core::audit::HistoryScope;
use gatehouse_core::clock::rfc3339;
use gatehouse_core::live::LiveEvent;
use gatehouse_core::model::{AuditEntry, HistoryFilter, State};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::config::Target;
use super::format::Notice;

/// Entries read per query while catching up.
const PAGE: usize = 500;

/// How far below the newest entry seen a PostgreSQL replica looks again
/// (entries committed out of id order by concurrent writers).
const LOOK_BACK: i64 = 256;

/// A target's queue, as the watcher feeds it.
pub struct Route {
    /// The target (for its filters).
    pub target: Arc<Target>,
    /// Its queue.
    pub tx: mpsc::Sender<Notice>,
    /// Its counters (drops are counted here).
    pub status: Arc<super::deliver::TargetStatus>,
}

/// Where the watchers of successive sets of targets are: the newest audit
/// entry looked at (0: none yet) and the first start's floor.
#[derive(Debug, Default)]
pub struct Mark {
    seen: AtomicI64,
    floor: AtomicI64,
    /// Whether the floor is taken (by the first watcher, or before a set
    /// starts: [`Mark::seed`]).
    started: AtomicBool,
}

impl Mark {
    /// Whether the floor is taken.
    pub fn started(&self) -> bool {
        self.started.load(Ordering::Acquire)
    }

    /// Takes the floor at `newest` (the newest audit entry now), unless it
    /// is taken: a set started after this sends what is written after it,
    /// whenever its watcher gets to look.
    pub fn seed(&self, newest: i64) {
        if !self.started.swap(true, Ordering::AcqRel) {
            self.floor.store(newest, Ordering::Release);
            self.seen.fetch_max(newest, Ordering::AcqRel);
        }
    }
}

/// Watches the hub until shutdown, handing each message to the targets that
/// want it; ends by dropping the queues, which lets the workers finish.
/// `mark` is kept across a reload's watchers: the next set goes on from
/// the newest entry this one looked at, above the first start's floor.
pub async fn run(core: Core, base_url: String, routes: Vec<Route>, shutdown: CancellationToken, mark: Arc<Mark>) {
    // Subscribed before the first look, so no change falls between them.
    let mut events = core.live.subscribe();
    if !mark.started() {
        // Nothing written before the first start is sent, looking back or not.
        match core.run(|core| newest_id(&core)).await {
            Ok(id) => mark.seed(id),
            Err(_) => return,
        }
    }
    let mut last_id = mark.seen.load(Ordering::Acquire);
    mark.seen.fetch_max(last_id, Ordering::AcqRel);
    let floor = mark.floor.load(Ordering::Acquire);
    // What a reload's gap left: looked at once, at once.
    let mut pending_look = true;
    loop {
        if !std::mem::take(&mut pending_look) {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                event = events.recv() => match event {
                    // A lagging receiver missed some events, not entries: read on.
                    Ok(LiveEvent::ApprovalsChanged) | Err(RecvError::Lagged(_)) => {}
                    Ok(_) => continue,
                    Err(RecvError::Closed) => break,
                }
            }
        }
        let base = base_url.clone();
        let stopped = shutdown.clone();
        // The audit log is in the database: in the stores' lane.
        let read = core.run(move |reader| {
            // Stopped by a reload while waiting for the lane: the next set
            // claims and sends what is new, not this one.
            if stopped.is_cancelled() {
                return None;
            }
            // On PostgreSQL ids are taken before commit, so an entry can land
            // below one already read: look back a little; the claims keep
            // anything from going out twice (here or from another replica).
            let from = match reader.db.backend() {
                gatehouse_core::db::Backend::Sqlite => last_id,
                gatehouse_core::db::Backend::Postgres => last_id.saturating_sub(LOOK_BACK),
            };
            let entries = since(&reader, from);
            let newest = entries.last().map_or(last_id, |e| e.id.max(last_id));
            let claimed = |e: &&AuditEntry| match reader.approvals.audit().claim_notice(e.id) {
                Ok(mine) => mine,
                Err(err) => {
                    tracing::error!(error = %err, "cannot claim a notification; not sent");
                    false
                }
            };
            let notices = entries
                .iter()
                .filter(|e| e.id > floor && notice_state(e.state))
                .filter(claimed)
                .filter_map(|e| notice(&reader, &base, e))
                .collect::<Vec<_>>();
            Some((newest, notices))
        });
        let Ok(Some((newest, notices))) = read.await else { break };
        last_id = newest;
        mark.seen.fetch_max(newest, Ordering::AcqRel);
        for notice in notices {
            for route in routes.iter().filter(|r| r.target.wants(&notice.agent, &notice.tool)) {
                if route.tx.try_send(notice.clone()).is_err() {
                    route.status.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(target_name = %route.target.name, execution = %notice.execution_id, "notification queue full: message dropped");
                }
            }
        }
    }
}

/// The id of the newest audit entry (0 for none).
pub(super) fn newest_id(core: &Core) -> i64 {
    match core.approvals.audit().search(&HistoryFilter::default(), &HistoryScope::All, 1) {
        Ok(rows) => rows.first().map_or(0, |e| e.id),
        Err(e) => {
            tracing::error!(error = %e, "notifications cannot read the audit log");
            0
        }
    }
}

/// Every audit entry after `last_id`, oldest first.
fn since(core: &Core, last_id: i64) -> Vec<AuditEntry> {
    let mut out = Vec::new();
    let mut filter = HistoryFilter::default();
    loop {
        let page = match core.approvals.audit().search(&filter, &HistoryScope::All, PAGE) {
            Ok(page) => page,
            Err(e) => {
                tracing::error!(error = %e, "notifications cannot read the audit log");
                break;
            }
        };
        let full = page.len() == PAGE;
        let oldest = page.last().map(|e| e.id);
        out.extend(page.into_iter().take_while(|e| e.id > last_id));
        match oldest {
            Some(id) if full && id > last_id + 1 => filter.before = Some(id),
            _ => break,
        }
    }
    out.sort_by_key(|e| e.id);
    out
}

/// Whether an entry in this state is worth a message.
fn notice_state(state: State) -> bool {
    match state {
        State::Pending
        | State::Approved
        | State::Declined
        | State::Expired
        | State::Cancelled
        | State::Revoked
        | State::Failed => true,
        State::Running | State::Completed | State::Allowed | State::Blocked | State::Limited | State::Shadow => false,
    }
}

/// The message for an audit entry, if it is worth one.
fn notice(core: &Core, base_url: &str, e: &AuditEntry) -> Option<Notice> {
    if !notice_state(e.state) {
        return None;
    }
    let (created_ms, expires_ms) = match core.approvals.get(&e.execution_id) {
        Some((execution, _)) => (execution.created_at_ms, execution.expires_at_ms),
        // Settled already: its opening entry says when it was made.
        None => {
            let created = core
                .approvals
                .audit()
                .timeline(&e.execution_id)
                .ok()
                .and_then(|t| t.first().map(|first| first.at_ms))
                .unwrap_or(e.at_ms);
            (created, created + core.approvals.ttl().as_millis() as i64)
        }
    };
    Some(Notice {
        event: format!("execution.{}", e.state.as_str()),
        execution_id: e.execution_id.clone(),
        state: e.state,
        tool: e.tool.clone(),
        upstream: e.upstream.clone(),
        agent: e.agent.clone(),
        owner: e.owner.clone(),
        by: if e.state == State::Pending { None } else { e.actor.clone() },
        // No session id: the page resolves the execution through the directory.
        link: format!("{base_url}{}", gatehouse_core::model::routes::resume(&e.execution_id, None)),
        created_at: rfc3339(created_ms),
        expires_at: rfc3339(expires_ms),
        occurred_at: rfc3339(e.at_ms),
    })
}
