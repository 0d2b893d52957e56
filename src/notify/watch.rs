//! Where messages come from: the live hub's `ApprovalsChanged` events,
//! compared with what was seen before. Nothing is added to the gate's path:
//! the gate publishes its events as it always did, and this task reads the
//! approval store (and, for settled executions, the audit log) afterwards.
//!
//! Which changes make a message:
//! - an execution opens (`pending`);
//! - it leaves `pending`: `approved`, `declined`, `expired`, `cancelled` or
//!   `revoked` (if it already ran by the time this task looked, the state it
//!   reached: `completed` or `failed`);
//! - an approved execution ends any other way than `completed`: `failed`,
//!   `expired` (not run within the run window), `cancelled`, `revoked`.
//!   `running` and a `completed` after an announced approval make none: the
//!   approval already said it.

use std::collections::HashMap;
use std::sync::Arc;

use gatehouse_core::Core;
use gatehouse_core::approvals::Execution;
use gatehouse_core::clock::rfc3339;
use gatehouse_core::live::LiveEvent;
use gatehouse_core::model::State;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::config::Target;
use super::format::Notice;

/// A target's queue, as the watcher feeds it.
pub struct Route {
    /// The target (for its filters).
    pub target: Arc<Target>,
    /// Its queue.
    pub tx: mpsc::Sender<Notice>,
    /// Its counters (drops are counted here).
    pub status: Arc<super::deliver::TargetStatus>,
}

struct Seen {
    execution: Arc<Execution>,
    state: State,
}

/// Watches the hub until shutdown, handing each message to the targets that
/// want it; ends by dropping the queues, which lets the workers finish.
pub async fn run(core: Core, base_url: String, routes: Vec<Route>, shutdown: CancellationToken) {
    // Subscribed before the first look, so no change falls between them.
    let mut events = core.live.subscribe();
    // What is pending already (a restart's restored calls) was announced before.
    let mut seen: HashMap<String, Seen> = core
        .approvals
        .pending()
        .into_iter()
        .map(|e| (e.id.clone(), Seen { execution: e, state: State::Pending }))
        .collect();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            event = events.recv() => match event {
                // A lagging receiver missed some: a fresh comparison catches up.
                Ok(LiveEvent::ApprovalsChanged) | Err(RecvError::Lagged(_)) => {}
                Ok(_) => continue,
                Err(RecvError::Closed) => break,
            }
        }
        let core2 = core.clone();
        let previous = std::mem::take(&mut seen);
        // Reading settled executions touches the database: off the async threads.
        let Ok((next, notices)) = tokio::task::spawn_blocking(move || compare(&core2, previous)).await else {
            break;
        };
        seen = next;
        for (execution, state, by) in notices {
            let notice = notice(&base_url, &execution, state, by, core.clock.now_ms());
            for route in routes.iter().filter(|r| r.target.wants(&execution.agent, &execution.tool)) {
                if route.tx.try_send(notice.clone()).is_err() {
                    route.status.dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(target_name = %route.target.name, execution = %execution.id, "notification queue full: message dropped");
                }
            }
        }
    }
}

type Change = (Arc<Execution>, State, Option<String>);

/// What changed since `seen`: the new picture and the changes worth a message.
fn compare(core: &Core, mut seen: HashMap<String, Seen>) -> (HashMap<String, Seen>, Vec<Change>) {
    let mut changes = Vec::new();
    for execution in core.approvals.pending() {
        if !seen.contains_key(&execution.id) {
            changes.push((execution.clone(), State::Pending, None));
            seen.insert(execution.id.clone(), Seen { execution, state: State::Pending });
        }
    }
    seen.retain(|id, s| {
        let (state, by, live) = match core.approvals.get(id) {
            Some((_, snapshot)) => (snapshot.state, snapshot.decided_by.or(snapshot.actor), true),
            None => match core.approvals.settled(id) {
                Some(entry) => (entry.state, entry.actor, false),
                // Gone from the log too (retention): nothing more to say.
                None => return false,
            },
        };
        if state != s.state {
            let announce = match s.state {
                State::Pending => true,
                _ => !matches!(state, State::Running | State::Completed),
            };
            if announce {
                // A call already running reads as approved: that is the news.
                let shown = if state == State::Running { State::Approved } else { state };
                changes.push((s.execution.clone(), shown, by));
            }
            s.state = state;
        }
        live
    });
    (seen, changes)
}

fn notice(base_url: &str, e: &Execution, state: State, by: Option<String>, now_ms: i64) -> Notice {
    Notice {
        event: format!("execution.{}", state.as_str()),
        execution_id: e.id.clone(),
        state,
        tool: e.tool.clone(),
        upstream: e.upstream.clone(),
        agent: e.agent.clone(),
        owner: e.owner.clone(),
        by: if state == State::Pending { None } else { by },
        // No session id: the page resolves the execution through the directory.
        link: format!("{base_url}{}", gatehouse_core::model::routes::resume(&e.id, None)),
        created_at: rfc3339(e.created_at_ms),
        expires_at: rfc3339(e.expires_at_ms),
        occurred_at: rfc3339(now_ms),
    }
}
