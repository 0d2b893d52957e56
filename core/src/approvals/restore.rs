//! Bringing back, at start, the pauses a previous run stored: pending ones
//! live again with their expiry re-armed, approved ones within their run
//! window, the rest expired or abandoned. On a cluster the same revival
//! serves adoption ([`super::replicas`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gatehouse_model::{ExecutionId, State};
use tokio::sync::watch;

use super::answers::{Restored, Snapshot};
use super::persist::Stored;
use super::store::{ApprovalStore, Entry, Rearm, Timers};
use crate::error::Result;
use crate::live::LiveEvent;

impl ApprovalStore {
    /// Brings back what a previous run left: stored pauses become live again
    /// (pending ones with their expiry re-armed from `expires_at`; approved
    /// ones within their run window), those whose time ran out while
    /// Gatehouse was stopped become `expired`, and executions that were held
    /// inside a request or running become `abandoned`. Needs the runtime (it
    /// arms timers); reads the database off its threads.
    pub async fn restore(&self) -> Result<Restored> {
        if self.inner.cluster.get().is_some() {
            // Other replicas may be serving: take only what nobody owns.
            return self.restore_orphans().await;
        }
        let started = std::time::Instant::now();
        let loader = self.clone();
        let stored = self.inner.audit.db().run(move || loader.inner.persist.load()).await??;
        let now = self.now_ms();
        let mut restored = Restored::default();
        let mut gone = Vec::new();
        let mut timers: Vec<Rearm> = Vec::new();
        {
            let mut entries = self.entries();
            for stored in stored {
                self.revive(&mut entries, stored, now, &mut restored, &mut gone, &mut timers);
            }
        }
        let persist_gone = self.clone();
        let abandoned = self
            .inner
            .audit
            .db()
            .run(move || {
                persist_gone.inner.persist.delete_now(&gone)?;
                persist_gone.inner.persist.abandon_unstored(now, now, None)
            })
            .await??;
        restored.abandoned = abandoned;
        for (delay, id, then) in timers {
            self.after(delay, &id, then);
        }
        self.announce_restored(&restored, started);
        Ok(restored)
    }

    pub(super) fn announce_restored(&self, restored: &Restored, started: std::time::Instant) {
        if *restored != Restored::default() {
            self.inner.live.publish(LiveEvent::ApprovalsChanged);
            tracing::info!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                pending = restored.pending,
                approved = restored.approved,
                expired = restored.expired,
                abandoned = restored.abandoned,
                "restored the executions a previous run left"
            );
        }
    }

    /// Makes one stored row live again (caller holds the lock): pending ones
    /// with their expiry to re-arm, approved ones within their run window;
    /// those whose time ran out become `expired`; held, running, settled or
    /// unknown ones go to `gone` (their rows are deleted, then what is left
    /// open is abandoned). A mirror of it, if any, becomes the entry's
    /// channel, so whoever watched it here keeps watching.
    pub(super) fn revive(
        &self,
        entries: &mut HashMap<ExecutionId, Entry>,
        stored: Stored,
        now: i64,
        restored: &mut Restored,
        gone: &mut Vec<ExecutionId>,
        timers: &mut Vec<Rearm>,
    ) {
        let Stored { execution, state, at_ms, actor, held, .. } = stored;
        if entries.contains_key(&execution.id) {
            return;
        }
        let execution = Arc::new(execution);
        let (snapshot_state, approved_at_ms) = match state {
            // Held inside a request that ended with its replica.
            _ if held => {
                gone.push(execution.id.clone());
                return;
            }
            Some(State::Pending) if execution.expires_at_ms > now => (State::Pending, None),
            Some(State::Pending) => {
                self.record(
                    &execution,
                    State::Expired,
                    Some("system"),
                    Some("no decision within the approval TTL (it ran out while Gatehouse was stopped)"),
                );
                self.publish_exec(&execution.id, State::Expired);
                restored.expired += 1;
                gone.push(execution.id.clone());
                return;
            }
            Some(State::Approved) => {
                let at = at_ms.unwrap_or(now);
                if at + self.run_window_ms(&execution) <= now {
                    self.record(
                        &execution,
                        State::Expired,
                        Some("system"),
                        Some("approved but not run within the run window (it ran out while Gatehouse was stopped)"),
                    );
                    self.publish_exec(&execution.id, State::Expired);
                    restored.expired += 1;
                    gone.push(execution.id.clone());
                    return;
                }
                (State::Approved, Some(at))
            }
            // Running (its request is gone), settled, or unknown: the row
            // goes; `abandon_unstored` then records what was left open.
            _ => {
                gone.push(execution.id.clone());
                return;
            }
        };
        let decided_by = approved_at_ms.and(actor.clone());
        let snapshot = Snapshot { state: snapshot_state, actor, detail: None, decided_by };
        match approved_at_ms {
            Some(at) => {
                restored.approved += 1;
                let left = (at + self.run_window_ms(&execution) - now).max(0) as u64;
                timers.push((Duration::from_millis(left), execution.id.clone(), |store, id| {
                    store.expire_unrun(id, true);
                }));
            }
            None => {
                restored.pending += 1;
                let left = (execution.expires_at_ms - now).max(0) as u64;
                timers.push((Duration::from_millis(left), execution.id.clone(), |store, id| {
                    store.expire(id);
                }));
            }
        }
        let tx = match self.mirrors().remove(&execution.id) {
            Some(mirror) => {
                mirror.tx.send_replace(snapshot);
                mirror.tx
            }
            None => watch::channel(snapshot).0,
        };
        entries.insert(
            execution.id.clone(),
            Entry { execution, tx, approved_at_ms, held: false, timers: Timers::default() },
        );
    }
}
