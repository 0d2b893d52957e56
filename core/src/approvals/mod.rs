//! Executions and the approval store: the bridge between a paused tool call
//! and the person who decides it.
//!
//! - `open` records a pending execution (and arms its expiry);
//! - `decide` (one [`Decide`] request, whoever decides) records the first
//!   decision and wakes every waiter; a repeat of the same decision is
//!   idempotent, a conflicting one is refused;
//! - `wait` suspends until the state moves or a time slice ends;
//! - `start_run`/`finish` carry an approved call through running to its end;
//! - `forget`/`forget_session` cancel what a client or session abandoned
//!   (a session's end cancels only the pauses held inside its requests);
//! - `restore` brings back, at start, the pauses a previous run stored.
//!
//! An entry leaves memory (and its durable row, arguments and all, leaves the
//! database) when it settles (completed, failed, declined, expired,
//! cancelled); from then on the audit log answers for it. Every
//! transition happens under one lock, so a decision racing a teardown either
//! lands first or finds the entry gone — it is never kept afterwards.

mod access;
mod answers;
mod decide;
mod execution;
mod inbox;
mod inbox_cache;
mod metrics;
mod persist;
mod queries;
mod replicas;
mod restore;
mod store;
mod task_results;

pub(crate) use access::access_error;
pub use access::{AccessError, may_decide};
pub use answers::{DecideError, OpenError, Restored, RunError, Snapshot, Waited};
pub use decide::{By, Decide};
pub use execution::{Execution, NewExecution, belongs_to, digest};
pub use gatehouse_model::{Decision, DecisionView, ExecutionId, ExecutionView, InboxView, State};
pub use metrics::{ApprovalMetrics, WAIT_BUCKETS};
pub use replicas::SWEEP_EVERY;
pub use store::{ApprovalStore, Limits, MAX_APPROVAL_TTL};
pub use task_results::{RESULT_RETENTION, RESULTS_PER_CREDENTIAL, TaskResult, TaskResults};

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
    use crate::model::CredentialId;

    fn limits(ttl: Duration) -> Limits {
        Limits { ttl, run_window: ttl, per_credential: usize::MAX }
    }

    fn store(ttl: Duration) -> ApprovalStore {
        store_with(limits(ttl))
    }

    fn store_with(limits: Limits) -> ApprovalStore {
        let db = Db::for_tests().unwrap();
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
            owner_id: Some(1.into()),
            session_id: Some(session.into()),
            human_only: false,
            admin_only: false,
            ttl: None,
            asked_by: None,
            kept_arguments: None,
        }
    }

    /// The store's lock never waits for the disk, and nothing acts on a
    /// transition before its audit entry is written.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_decision_waits_for_its_audit_entry_without_holding_the_store() {
        // SQLite on both suites: holding its one connection is how this
        // test makes the disk wait.
        let db = Db::open_in_memory().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let limits = limits(Duration::from_secs(60));
        let store =
            ApprovalStore::new(AuditLog::new(db.clone(), clock.clone()), clock, limits, LiveHub::new()).unwrap();
        let (first, second) =
            (store.open(new_execution("a")).await.unwrap(), store.open(new_execution("b")).await.unwrap());
        let busy = db.conn().unwrap();
        let waiter = tokio::spawn({
            let (store, id) = (store.clone(), first.id.clone());
            async move { store.wait(&id, Duration::from_secs(60)).await }
        });
        let decider = tokio::spawn({
            let (store, id) = (store.clone(), first.id.clone());
            async move { store.decide(Decide::actor(&id, Decision::Accept, "user:ada")).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Another transition goes through meanwhile: the lock is free.
        let expiring = tokio::task::spawn_blocking({
            let (store, id) = (store.clone(), second.id.clone());
            move || store.expire(&id)
        });
        let expired = tokio::time::timeout(Duration::from_secs(30), expiring).await;
        assert!(matches!(expired, Ok(Ok(true))), "the store's lock is not held while the disk waits");
        assert_eq!(store.get(&first.id).map(|(_, s)| s.state), Some(State::Approved), "decided in memory");
        assert!(!decider.is_finished(), "the decision is not answered before its entry is on disk");
        assert!(!waiter.is_finished(), "the waiting call does not go on before the entry is on disk");
        drop(busy);
        assert_eq!(decider.await.unwrap().unwrap().state, State::Approved);
        assert_eq!(waiter.await.unwrap().unwrap().state, State::Approved);
        let audit = store.audit();
        assert_eq!(audit.latest(&first.id).unwrap().unwrap().state, State::Approved);
        assert_eq!(audit.latest(&second.id).unwrap().unwrap().state, State::Expired);
    }

    #[tokio::test]
    async fn first_decision_wins_and_repeats_are_idempotent() {
        let store = store(Duration::from_secs(60));
        let e = store.open(new_execution("s")).await.unwrap();
        assert_eq!(
            store.decide(Decide::actor(&e.id, Decision::Accept, "user:ada")).await.unwrap().state,
            State::Approved
        );
        assert_eq!(
            store.decide(Decide::actor(&e.id, Decision::Accept, "user:ada")).await.unwrap().state,
            State::Approved
        );
        assert_eq!(
            store.decide(Decide::actor(&e.id, Decision::Decline, "user:bob")).await,
            Err(AccessError::Conflict(State::Approved))
        );
        store.start_run(&e.id).await.unwrap();
        store.finish(&e.id, true, None);
        assert!(store.is_empty());
        // Settled: the audit log answers.
        assert_eq!(
            store.decide(Decide::actor(&e.id, Decision::Accept, "user:ada")).await.unwrap().state,
            State::Completed
        );
        assert_eq!(
            store.decide(Decide::actor(&e.id, Decision::Decline, "user:ada")).await,
            Err(AccessError::Conflict(State::Completed))
        );
        assert_eq!(
            store.decide(Decide::actor(&"exec_nope".into(), Decision::Accept, "user:ada")).await,
            Err(AccessError::NotFound)
        );
    }

    #[tokio::test]
    async fn pending_executions_expire() {
        let store = store(Duration::from_millis(50));
        let e = store.open(new_execution("s")).await.unwrap();
        let seen = store.wait(&e.id, Duration::from_secs(5)).await.unwrap();
        assert_eq!(seen.state, State::Expired);
        assert!(store.is_empty());
        assert_eq!(
            store.decide(Decide::actor(&e.id, Decision::Accept, "user:ada")).await,
            Err(AccessError::Conflict(State::Expired))
        );
    }

    #[tokio::test]
    async fn a_wait_slice_ends_pending() {
        let store = store(Duration::from_secs(60));
        let e = store.open(new_execution("s")).await.unwrap();
        assert_eq!(store.wait(&e.id, Duration::from_millis(20)).await.unwrap().state, State::Pending);
        store.hold(&e.id);
        assert_eq!(store.forget_session("s"), 1);
        assert!(store.is_empty());
        assert_eq!(store.audit().latest(&e.id).unwrap().unwrap().state, State::Cancelled);
    }

    #[tokio::test]
    async fn no_expiry_timer_outlives_its_store() {
        let tasks = || tokio::runtime::Handle::current().metrics().num_alive_tasks();
        let before = tasks();
        let store = store(Duration::from_secs(3600));
        store.open(new_execution("s")).await.unwrap();
        let e = store.open(new_execution("s")).await.unwrap();
        store.decide(Decide::actor(&e.id, Decision::Accept, "user:ada")).await.unwrap();
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
    async fn a_settled_execution_leaves_no_timer_waiting() {
        let tasks = || tokio::runtime::Handle::current().metrics().num_alive_tasks();
        let before = tasks();
        let store = store(Duration::from_secs(3600));
        let declined = store.open(new_execution("s")).await.unwrap();
        let ran = store.open(new_execution("s")).await.unwrap();
        store.decide(Decide::actor(&ran.id, Decision::Accept, "user:ada")).await.unwrap();
        assert_eq!(tasks(), before + 3, "two expiry timers and a run-window timer wait");
        store.decide(Decide::actor(&declined.id, Decision::Decline, "user:ada")).await.unwrap();
        store.start_run(&ran.id).await.unwrap();
        store.finish(&ran.id, true, None);
        assert!(store.is_empty());
        // An aborted task ends when the runtime next polls it.
        for _ in 0..100 {
            if tasks() == before {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("{} timers still wait after their executions settled", tasks() - before);
    }

    fn store_on(db: &Db, clock: Arc<dyn Clock>, limits: Limits) -> ApprovalStore {
        ApprovalStore::new(AuditLog::new(db.clone(), clock.clone()), clock, limits, LiveHub::new()).unwrap()
    }

    #[tokio::test]
    async fn a_pending_execution_survives_a_restart_and_runs_once_approved() {
        let db = Db::for_tests().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let first = store_on(&db, clock.clone(), limits(Duration::from_secs(60)));
        let e = first.open(new_execution("s")).await.unwrap();
        first.flush().await;
        assert!(first.inner.persist.is_stored(&e.id), "written before the client hears of it");
        drop(first);
        let second = store_on(&db, clock, limits(Duration::from_secs(60)));
        assert!(second.is_empty(), "a new store starts empty (the CLI never restores)");
        assert_eq!(second.restore().await.unwrap(), Restored { pending: 1, ..Default::default() });
        let (again, snapshot) = second.get(&e.id).expect("pending again");
        assert_eq!(
            (snapshot.state, &again.arguments, again.expires_at_ms),
            (State::Pending, &e.arguments, e.expires_at_ms)
        );
        second.decide(Decide::actor(&e.id, Decision::Accept, "user:ada")).await.unwrap();
        second.start_run(&e.id).await.unwrap();
        second.finish(&e.id, true, None);
        second.flush().await;
        assert!(!second.inner.persist.is_stored(&e.id), "the arguments go once it settles");
        assert_eq!(second.audit().latest(&e.id).unwrap().unwrap().state, State::Completed);
    }

    #[tokio::test]
    async fn what_ran_out_or_was_held_while_stopped_settles_at_start() {
        let db = Db::for_tests().unwrap();
        let clock = Arc::new(crate::clock::ManualClock::new(1_700_000_000_000));
        let first = store_on(
            &db,
            clock.clone(),
            Limits { run_window: Duration::from_secs(30), ..limits(Duration::from_secs(60)) },
        );
        let expiring = first.open(new_execution("s")).await.unwrap();
        let approved = first.open(new_execution("s")).await.unwrap();
        first.decide(Decide::actor(&approved.id, Decision::Accept, "user:ada")).await.unwrap();
        let approved_late = first.open(new_execution("s")).await.unwrap();
        let held = first.open(new_execution("s")).await.unwrap();
        first.hold(&held.id);
        let long =
            first.open(NewExecution { ttl: Some(Duration::from_secs(3600)), ..new_execution("s") }).await.unwrap();
        let declined = first.open(new_execution("s")).await.unwrap();
        first.decide(Decide::actor(&declined.id, Decision::Decline, "user:ada")).await.unwrap();
        first.flush().await;
        drop(first);
        // 20 s later `approved` is still in its run window; then `approved_late`
        // is approved, and the store stops for 50 s more.
        clock.advance(Duration::from_secs(20));
        {
            let mid = store_on(
                &db,
                clock.clone(),
                Limits { run_window: Duration::from_secs(30), ..limits(Duration::from_secs(60)) },
            );
            mid.restore().await.unwrap();
            mid.decide(Decide::actor(&approved_late.id, Decision::Accept, "user:ada")).await.unwrap();
            mid.flush().await;
        }
        clock.advance(Duration::from_secs(5));
        let second = store_on(
            &db,
            clock.clone(),
            Limits { run_window: Duration::from_secs(30), ..limits(Duration::from_secs(60)) },
        );
        let restored = second.restore().await.unwrap();
        assert_eq!(
            restored,
            Restored { pending: 2, approved: 2, expired: 0, abandoned: 0 },
            "25 s in, nothing ran out"
        );
        drop(second);
        clock.advance(Duration::from_secs(45));
        let third = store_on(
            &db,
            clock.clone(),
            Limits { run_window: Duration::from_secs(30), ..limits(Duration::from_secs(60)) },
        );
        let restored = third.restore().await.unwrap();
        assert_eq!(restored, Restored { pending: 1, approved: 0, expired: 3, abandoned: 0 });
        let state = |id: &ExecutionId| third.audit().latest(id).unwrap().unwrap();
        assert_eq!(state(&expiring.id).state, State::Expired);
        assert!(state(&expiring.id).detail.unwrap().contains("while Gatehouse was stopped"));
        assert_eq!(state(&approved.id).state, State::Expired, "past its run window");
        assert_eq!(state(&approved_late.id).state, State::Expired, "approved 50 s ago, window 30 s");
        assert_eq!(third.get(&long.id).unwrap().1.state, State::Pending, "its rule's TTL is an hour");
        assert_eq!(state(&declined.id).state, State::Declined);
        // The held one was abandoned by the first restart (its request ended with the process).
        let held_last = state(&held.id);
        assert_eq!((held_last.state, held_last.detail.as_deref()), (State::Cancelled, Some("the server restarted")));
        third.flush().await;
        let rows: i64 = db
            .conn()
            .unwrap()
            .query_one("SELECT COUNT(*) FROM pending_executions", crate::args![], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1, "only the live one keeps its arguments");
    }

    #[tokio::test]
    async fn an_approved_execution_restored_in_its_run_window_runs() {
        let db = Db::for_tests().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let first = store_on(&db, clock.clone(), limits(Duration::from_secs(60)));
        let e = first.open(new_execution("s")).await.unwrap();
        first.decide(Decide::actor(&e.id, Decision::Accept, "user:ada")).await.unwrap();
        first.flush().await;
        drop(first);
        let second = store_on(&db, clock, limits(Duration::from_secs(60)));
        assert_eq!(second.restore().await.unwrap().approved, 1);
        assert_eq!(second.get(&e.id).unwrap().1.decided_by.as_deref(), Some("user:ada"));
        second.start_run(&e.id).await.expect("still within its run window");
        second.finish(&e.id, true, None);
    }

    #[tokio::test]
    async fn a_sessions_end_leaves_announced_pauses_and_cancels_held_ones() {
        let store = store(Duration::from_secs(60));
        let announced = store.open(new_execution("s")).await.unwrap();
        let held = store.open(new_execution("s")).await.unwrap();
        store.hold(&held.id);
        assert_eq!(store.forget_session("s"), 1);
        assert_eq!(store.get(&announced.id).unwrap().1.state, State::Pending);
        assert_eq!(store.audit().latest(&held.id).unwrap().unwrap().state, State::Cancelled);
    }

    #[tokio::test]
    async fn a_rules_ttl_overrides_the_global_one_within_the_cap_and_bounds_the_run_window() {
        let store = store_with(Limits { run_window: Duration::from_secs(300), ..limits(Duration::from_secs(600)) });
        let short =
            store.open(NewExecution { ttl: Some(Duration::from_secs(30)), ..new_execution("s") }).await.unwrap();
        assert_eq!(short.expires_at_ms - short.created_at_ms, 30_000);
        assert_eq!(store.run_window_ms(&short), 30_000, "the run window never outlasts the TTL");
        let huge = store
            .open(NewExecution { ttl: Some(Duration::from_secs(365 * 24 * 3600)), ..new_execution("s") })
            .await
            .unwrap();
        assert_eq!(huge.expires_at_ms - huge.created_at_ms, MAX_APPROVAL_TTL.as_millis() as i64);
        let default = store.open(new_execution("s")).await.unwrap();
        assert_eq!(default.expires_at_ms - default.created_at_ms, 600_000);
    }

    #[tokio::test]
    async fn a_credential_holds_a_bounded_number_of_live_executions() {
        let store = store_with(Limits { per_credential: 2, ..limits(Duration::from_secs(60)) });
        let a = store.open(new_execution("s")).await.unwrap();
        store.open(new_execution("s")).await.unwrap();
        assert_eq!(store.open(new_execution("s")).await.unwrap_err(), OpenError::TooMany { limit: 2 });
        let other = NewExecution { credential_id: "cred_2".into(), ..new_execution("t") };
        store.open(other).await.expect("another credential has its own allowance");
        store.forget(&a.id, "test");
        store.open(new_execution("s")).await.expect("a settled execution frees its place");
    }

    #[tokio::test]
    async fn revoking_a_credential_settles_its_executions_as_revoked() {
        let store = store(Duration::from_secs(60));
        let a = store.open(new_execution("s")).await.unwrap();
        let other = store.open(NewExecution { credential_id: "cred_2".into(), ..new_execution("t") }).await.unwrap();
        assert_eq!(store.credential_ids(), vec![CredentialId::from("cred_1"), CredentialId::from("cred_2")]);
        assert_eq!(store.forget_credential("cred_1"), 1);
        assert_eq!(store.audit().latest(&a.id).unwrap().unwrap().state, State::Revoked);
        assert!(store.get(&other.id).is_some(), "another credential's execution is untouched");
        assert_eq!(
            store.decide(Decide::actor(&a.id, Decision::Accept, "user:ada")).await,
            Err(AccessError::Conflict(State::Revoked))
        );
    }

    #[tokio::test]
    async fn an_approval_not_run_within_the_run_window_expires() {
        let store = store_with(Limits { run_window: Duration::from_millis(30), ..limits(Duration::from_secs(60)) });
        let e = store.open(new_execution("s")).await.unwrap();
        store.decide(Decide::actor(&e.id, Decision::Accept, "user:ada")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(store.start_run(&e.id).await.is_err(), "an approval past its run window does not run");
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
            owner_id: owner.map(|name| if name == "ada" { 1.into() } else { 3.into() }),
            created_at_ms: 0,
            last_seen_ms: 0,
            revoked_at_ms: None,
            revoked_reason: None,
            issued_via: Default::default(),
            oauth_client: None,
            by_admin: false,
        };
        let opener = cred("cred_1", "claude", Some("t1"), Some("ada"));
        let e = |thread: Option<&str>| Execution {
            id: "exec_1".into(),
            request: NewExecution {
                tool: "t".into(),
                upstream: None,
                upstream_tool: None,
                tool_digest: String::new(),
                arguments: Value::Null,
                agent: "claude".into(),
                credential_id: opener.id.clone(),
                thread: thread.map(Into::into),
                owner: Some("ada".into()),
                owner_id: Some(1.into()),
                session_id: None,
                human_only: false,
                admin_only: false,
                ttl: None,
                asked_by: None,
                kept_arguments: None,
            },
            arguments_digest: String::new(),
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
        let namesake = Credential { owner_id: Some(7.into()), ..cred("cred_7", "claude", Some("t1"), Some("ada")) };
        assert!(!e(Some("t1")).belongs_to(&namesake), "a later user of the same name is another owner");
        // Ada removed: the call keeps her name, without an id. An owner-less
        // credential on the same thread and agent name is not her successor.
        let removed =
            Execution { request: NewExecution { owner_id: None, ..e(Some("t1")).request.clone() }, ..e(Some("t1")) };
        assert!(!removed.belongs_to(&cred("cred_8", "claude", Some("t1"), None)), "no owner is not a removed owner");
        let ownerless = Execution {
            request: NewExecution { owner: None, owner_id: None, ..e(Some("t1")).request.clone() },
            ..e(Some("t1"))
        };
        assert!(ownerless.belongs_to(&cred("cred_9", "claude", Some("t1"), None)), "owner-less to owner-less");
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
                let e = store.open(new_execution(&session)).await.unwrap();
                if round % 3 == 0 {
                    // Only a pause held inside a request ends with its session.
                    store.hold(&e.id);
                }
                let waiter = {
                    let (store, id) = (store.clone(), e.id.clone());
                    tokio::spawn(async move {
                        let seen = store.wait(&id, Duration::from_secs(30)).await;
                        // An approved call is run by its waiter, as resume does.
                        if let Some(Snapshot { state: State::Approved, .. }) = seen
                            && store.start_run(&id).await.is_ok()
                        {
                            store.finish(&id, true, None);
                        }
                        seen
                    })
                };
                let decider = {
                    let (store, id) = (store.clone(), e.id.clone());
                    let decision = if round % 2 == 0 { Decision::Accept } else { Decision::Decline };
                    tokio::spawn(async move { store.decide(Decide::actor(&id, decision, "user:ada")).await })
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
                Err(AccessError::Conflict(_)) => {}
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        assert_eq!(store.len(), 0, "no entry leaked");
    }

    #[tokio::test]
    async fn an_inbox_counts_every_pending_call_lists_the_soonest_and_follows_each_change() {
        use crate::users::User;
        use gatehouse_model::INBOX_LIMIT;
        let store = store(Duration::from_secs(60));
        let ada = User { id: 1.into(), username: "ada".into(), is_admin: false };
        let root = User { id: 2.into(), username: "root".into(), is_admin: true };
        let mut ids: Vec<ExecutionId> = Vec::new();
        for i in 0..INBOX_LIMIT + 10 {
            ids.push(store.open(new_execution(&format!("s{i}"))).await.unwrap().id.clone());
        }
        store
            .open(NewExecution { owner: Some("bob".into()), owner_id: Some(3.into()), ..new_execution("b") })
            .await
            .unwrap();
        // Ada removed and someone else added under her name: another id.
        let namesake = User { id: 4.into(), username: "ada".into(), is_admin: false };
        assert_eq!(store.inbox(&namesake).await.total, 0, "a name is not an identity");

        let inbox = store.inbox(&ada).await;
        assert_eq!(
            (inbox.total, inbox.pending.len()),
            (INBOX_LIMIT + 10, INBOX_LIMIT),
            "counted whole, listed in part"
        );
        assert!(inbox.truncated());
        assert!(inbox.pending.windows(2).all(|w| w[0].expires_at_ms <= w[1].expires_at_ms), "soonest expiry first");
        assert!(inbox.pending.iter().all(|e| e.owner.as_deref() == Some("ada")), "only what ada may decide");
        assert_eq!(store.inbox(&root).await.total, INBOX_LIMIT + 11, "an admin counts everyone's");
        let again = store.inbox(&ada).await;
        assert_eq!(InboxView { now_ms: inbox.now_ms, ..again }, inbox, "read again: the same");

        // A decision is seen by the very next read, though the last one was kept.
        store.decide(Decide::actor(&ids[0], Decision::Decline, "user:ada")).await.unwrap();
        let after = store.inbox(&ada).await;
        assert_eq!(after.total, INBOX_LIMIT + 9);
        assert!(after.pending.iter().all(|e| e.execution_id != ids[0]));
        // A listing made for ada as a user is not reused once she is an admin.
        assert_eq!(store.inbox(&User { is_admin: true, ..ada.clone() }).await.total, INBOX_LIMIT + 10);
    }
}
