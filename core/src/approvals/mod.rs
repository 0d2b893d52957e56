//! Executions and the approval store: the bridge between a paused tool call
//! and the person who decides it.
//!
//! - `open` records a pending execution (and arms its expiry);
//! - `decide` records the first decision and wakes every waiter; a repeat of
//!   the same decision is idempotent, a conflicting one is refused;
//! - `wait` suspends until the state moves or a time slice ends;
//! - `start_run`/`finish` carry an approved call through running to its end;
//! - `forget`/`forget_session` cancel what a client or session abandoned.
//!
//! An entry leaves memory when it settles (completed, failed, declined,
//! expired, cancelled); from then on the audit log answers for it. Every
//! transition happens under one lock, so a decision racing a teardown either
//! lands first or finds the entry gone — it is never kept afterwards.

mod access;
mod execution;
mod metrics;
mod store;

pub use access::{AccessError, may_decide};
pub use execution::{Execution, NewExecution, belongs_to, digest};
pub use gatehouse_model::{Decision, DecisionView, ExecutionView, InboxView, State};
pub use metrics::{ApprovalMetrics, WAIT_BUCKETS};
pub use store::{ApprovalStore, DecideError, Limits, OpenError, RunError, Snapshot, Waited};

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::Value;

    use super::*;
    use crate::audit::AuditLog;
    use crate::clock::Clock;
    use crate::clock::SystemClock;
    use crate::db::Db;
    use crate::live::LiveHub;

    fn limits(ttl: Duration) -> Limits {
        Limits { ttl, run_window: ttl, per_credential: usize::MAX }
    }

    fn store(ttl: Duration) -> ApprovalStore {
        store_with(limits(ttl))
    }

    fn store_with(limits: Limits) -> ApprovalStore {
        let db = Db::open_in_memory().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        ApprovalStore::new(AuditLog::new(db, clock.clone()), clock, limits, LiveHub::new()).unwrap()
    }

    fn new_execution(session: &str) -> NewExecution {
        NewExecution {
            tool: "gatehouse_policy_set".into(),
            upstream: None,
            upstream_tool: None,
            tool_digest: "d".into(),
            arguments: serde_json::json!({"pattern": "x", "action": "allow"}),
            agent: "agent".into(),
            credential_id: "cred_1".into(),
            thread: None,
            owner: Some("ada".into()),
            session_id: Some(session.into()),
            human_only: false,
            admin_only: false,
        }
    }

    #[tokio::test]
    async fn first_decision_wins_and_repeats_are_idempotent() {
        let store = store(Duration::from_secs(60));
        let e = store.open(new_execution("s")).unwrap();
        assert_eq!(store.decide(&e.id, Decision::Accept, "user:ada").unwrap().state, State::Approved);
        assert_eq!(store.decide(&e.id, Decision::Accept, "user:ada").unwrap().state, State::Approved);
        assert_eq!(store.decide(&e.id, Decision::Decline, "user:bob"), Err(DecideError::Conflict("approved")));
        store.start_run(&e.id).unwrap();
        store.finish(&e.id, true, None);
        assert!(store.is_empty());
        // Settled: the audit log answers.
        assert_eq!(store.decide(&e.id, Decision::Accept, "user:ada").unwrap().state, State::Completed);
        assert_eq!(store.decide(&e.id, Decision::Decline, "user:ada"), Err(DecideError::Conflict("completed")));
        assert_eq!(store.decide("exec_nope", Decision::Accept, "user:ada"), Err(DecideError::NotFound));
    }

    #[tokio::test]
    async fn pending_executions_expire() {
        let store = store(Duration::from_millis(50));
        let e = store.open(new_execution("s")).unwrap();
        let seen = store.wait(&e.id, Duration::from_secs(5)).await.unwrap();
        assert_eq!(seen.state, State::Expired);
        assert!(store.is_empty());
        assert_eq!(store.decide(&e.id, Decision::Accept, "user:ada"), Err(DecideError::Conflict("expired")));
    }

    #[tokio::test]
    async fn a_wait_slice_ends_pending() {
        let store = store(Duration::from_secs(60));
        let e = store.open(new_execution("s")).unwrap();
        assert_eq!(store.wait(&e.id, Duration::from_millis(20)).await.unwrap().state, State::Pending);
        assert_eq!(store.forget_session("s"), 1);
        assert!(store.is_empty());
        assert_eq!(store.audit().latest(&e.id).unwrap().unwrap().state, State::Cancelled);
    }

    #[tokio::test]
    async fn no_expiry_timer_outlives_its_store() {
        let tasks = || tokio::runtime::Handle::current().metrics().num_alive_tasks();
        let before = tasks();
        let store = store(Duration::from_secs(3600));
        store.open(new_execution("s")).unwrap();
        let e = store.open(new_execution("s")).unwrap();
        store.decide(&e.id, Decision::Accept, "user:ada").unwrap();
        assert_eq!(tasks(), before + 3, "two expiry timers and a run-window timer wait");
        drop(store);
        // An aborted task ends when the runtime next polls it.
        for _ in 0..100 {
            if tasks() == before {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("{} timers still wait after their store was dropped", tasks() - before);
    }

    #[tokio::test]
    async fn restart_marks_unsettled_executions_abandoned() {
        let db = Db::open_in_memory().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let first = ApprovalStore::new(
            AuditLog::new(db.clone(), clock.clone()),
            clock.clone(),
            limits(Duration::from_secs(60)),
            LiveHub::new(),
        )
        .unwrap();
        let e = first.open(new_execution("s")).unwrap();
        let second = ApprovalStore::new(
            AuditLog::new(db, clock.clone()),
            clock,
            limits(Duration::from_secs(60)),
            LiveHub::new(),
        )
        .unwrap();
        let last = second.audit().latest(&e.id).unwrap().unwrap();
        assert_eq!((last.state, last.detail.as_deref()), (State::Cancelled, Some("the server restarted")));
    }

    #[tokio::test]
    async fn a_credential_holds_a_bounded_number_of_live_executions() {
        let store = store_with(Limits { per_credential: 2, ..limits(Duration::from_secs(60)) });
        let a = store.open(new_execution("s")).unwrap();
        store.open(new_execution("s")).unwrap();
        assert_eq!(store.open(new_execution("s")).unwrap_err(), OpenError::TooMany { limit: 2 });
        let other = NewExecution { credential_id: "cred_2".into(), ..new_execution("t") };
        store.open(other).expect("another credential has its own allowance");
        store.forget(&a.id, "test");
        store.open(new_execution("s")).expect("a settled execution frees its place");
    }

    #[tokio::test]
    async fn revoking_a_credential_settles_its_executions_as_revoked() {
        let store = store(Duration::from_secs(60));
        let a = store.open(new_execution("s")).unwrap();
        let other = store.open(NewExecution { credential_id: "cred_2".into(), ..new_execution("t") }).unwrap();
        assert_eq!(store.credential_ids(), vec!["cred_1".to_string(), "cred_2".to_string()]);
        assert_eq!(store.forget_credential("cred_1"), 1);
        assert_eq!(store.audit().latest(&a.id).unwrap().unwrap().state, State::Revoked);
        assert!(store.get(&other.id).is_some(), "another credential's execution is untouched");
        assert_eq!(store.decide(&a.id, Decision::Accept, "user:ada"), Err(DecideError::Conflict("revoked")));
    }

    #[tokio::test]
    async fn an_approval_not_run_within_the_run_window_expires() {
        let store = store_with(Limits { run_window: Duration::from_millis(30), ..limits(Duration::from_secs(60)) });
        let e = store.open(new_execution("s")).unwrap();
        store.decide(&e.id, Decision::Accept, "user:ada").unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(store.start_run(&e.id).is_err(), "an approval past its run window does not run");
        assert_eq!(store.audit().latest(&e.id).unwrap().unwrap().state, State::Expired);
        assert!(store.is_empty());
    }

    #[test]
    fn only_the_opening_credential_or_its_thread_successor_may_resume() {
        use crate::credentials::Credential;
        let cred = |id: &str, agent: &str, thread: Option<&str>, owner: Option<&str>| Credential {
            id: id.into(),
            agent: agent.into(),
            thread: thread.map(Into::into),
            provider_session: None,
            owner: owner.map(Into::into),
            created_at_ms: 0,
            last_seen_ms: 0,
            revoked_at_ms: None,
            revoked_reason: None,
        };
        let opener = cred("cred_1", "claude", Some("t1"), Some("ada"));
        let e = |thread: Option<&str>| Execution {
            id: "exec_1".into(),
            tool: "t".into(),
            upstream: None,
            upstream_tool: None,
            tool_digest: String::new(),
            arguments: Value::Null,
            arguments_digest: String::new(),
            agent: "claude".into(),
            credential_id: opener.id.clone(),
            thread: thread.map(Into::into),
            owner: Some("ada".into()),
            session_id: None,
            human_only: false,
            admin_only: false,
            created_at_ms: 0,
            expires_at_ms: 0,
        };
        assert!(e(Some("t1")).belongs_to(&opener));
        assert!(
            e(Some("t1")).belongs_to(&cred("cred_2", "claude", Some("t1"), Some("ada"))),
            "re-issued for the thread"
        );
        assert!(!e(Some("t1")).belongs_to(&cred("cred_3", "claude", None, Some("ada"))), "same agent name, no thread");
        assert!(!e(Some("t1")).belongs_to(&cred("cred_4", "claude", Some("t2"), Some("ada"))), "another thread");
        assert!(!e(Some("t1")).belongs_to(&cred("cred_5", "claude", Some("t1"), Some("bob"))), "another owner");
        assert!(!e(None).belongs_to(&cred("cred_6", "claude", None, Some("ada"))), "no thread: only the opener");
    }

    /// 10,000 rounds of a decision racing teardown, expiry or cancellation:
    /// every waiter gets exactly one outcome, every execution settles exactly
    /// once, and no entry is left behind.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn decisions_racing_teardown_expiry_and_cancellation_leave_nothing_behind() {
        let store = store(Duration::from_secs(3600));
        let mut rounds = Vec::new();
        for round in 0..10_000u32 {
            let store = store.clone();
            rounds.push(tokio::spawn(async move {
                let session = format!("s{round}");
                let e = store.open(new_execution(&session)).unwrap();
                let waiter = {
                    let (store, id) = (store.clone(), e.id.clone());
                    tokio::spawn(async move {
                        let seen = store.wait(&id, Duration::from_secs(30)).await;
                        // An approved call is run by its waiter, as resume does.
                        if let Some(Snapshot { state: State::Approved, .. }) = seen
                            && store.start_run(&id).is_ok()
                        {
                            store.finish(&id, true, None);
                        }
                        seen
                    })
                };
                let decider = {
                    let (store, id) = (store.clone(), e.id.clone());
                    let decision = if round % 2 == 0 { Decision::Accept } else { Decision::Decline };
                    tokio::spawn(async move { store.decide(&id, decision, "user:ada") })
                };
                let racer = {
                    let (store, id) = (store.clone(), e.id.clone());
                    tokio::spawn(async move {
                        match round % 3 {
                            0 => store.forget_session(&session) > 0,
                            1 => store.expire(&id),
                            _ => store.forget(&id, "client cancelled"),
                        }
                    })
                };
                let seen = waiter.await.unwrap();
                let decided = decider.await.unwrap();
                let _ = racer.await.unwrap();
                (e.id.clone(), seen, decided)
            }));
        }
        for round in rounds {
            let (id, seen, decided) = round.await.unwrap();
            let last = store.audit().latest(&id).unwrap().unwrap();
            // A waiter that arrived after the execution settled reads the audit log, as resume does.
            let seen = seen.map(|s| s.state).unwrap_or(last.state);
            assert_ne!(seen, State::Pending, "the waiter got an outcome");
            let final_state = last.state;
            assert!(final_state.is_settled(), "{id} ended {final_state:?}");
            match decided {
                Ok(s) => {
                    assert!(matches!(s.state, State::Approved | State::Declined | State::Running | State::Completed))
                }
                Err(DecideError::Conflict(_)) => {}
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        assert_eq!(store.len(), 0, "no entry leaked");
    }
}
