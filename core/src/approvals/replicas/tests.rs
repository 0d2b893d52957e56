//! Two replicas on one PostgreSQL schema: decisions forwarded to the owner,
//! raced from both sides, and an execution adopted from a replica that left.
//! Run only when `GATEHOUSE_TEST_DATABASE_URL` is set.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_model::{Decision, ExecutionId, State};

use super::super::{ApprovalStore, DecideError, Limits, NewExecution};
use crate::audit::AuditLog;
use crate::clock::{Clock, SystemClock};
use crate::cluster::Cluster;
use crate::db::Db;
use crate::live::LiveHub;

struct Pair {
    a: ApprovalStore,
    b: ApprovalStore,
    db: Db,
    followers: Vec<tokio::task::JoinHandle<()>>,
}

impl Pair {
    /// Stops both replicas; the stores (and their PostgreSQL pools) are
    /// dropped off the runtime, where a pool may be dropped.
    async fn close(self) {
        let Pair { a, b, db, followers } = self;
        for f in followers {
            f.abort();
            let _ = f.await;
        }
        tokio::task::spawn_blocking(move || {
            for store in [&a, &b] {
                if let Some(cluster) = store.cluster() {
                    cluster.leave();
                }
            }
            drop((a, b, db));
        })
        .await
        .unwrap();
    }
}

async fn pair(ttl: Duration) -> Option<Pair> {
    std::env::var("GATEHOUSE_TEST_DATABASE_URL").ok()?;
    let db = Db::for_tests().unwrap();
    let url = db.postgres_url().unwrap().to_string();
    let db_b = Db::connect(&url).unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let limits = Limits { ttl, run_window: ttl, per_credential: usize::MAX };
    let mut stores = Vec::new();
    let mut followers = Vec::new();
    for db in [&db, &db_b] {
        let live = LiveHub::new();
        let store =
            ApprovalStore::new(AuditLog::new(db.clone(), clock.clone()), clock.clone(), limits, live.clone()).unwrap();
        store.join(Cluster::join(db, clock.clone(), |c| live.join(c)).unwrap().unwrap());
        store.restore().await.unwrap();
        let follower = store.clone();
        followers.push(tokio::spawn(async move { follower.follow(std::future::pending()).await }));
        stores.push(store);
    }
    // Both listeners are LISTENing by then.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let b = stores.pop().unwrap();
    let a = stores.pop().unwrap();
    Some(Pair { a, b, db, followers })
}

fn new_execution() -> NewExecution {
    NewExecution {
        tool: "t".into(),
        upstream: None,
        upstream_tool: None,
        tool_digest: "d".into(),
        arguments: serde_json::json!({"x": 1}),
        agent: "agent".into(),
        credential_id: "cred_1".into(),
        thread: None,
        owner: Some("ada".into()),
        owner_id: Some(1.into()),
        session_id: Some("s".into()),
        human_only: false,
        admin_only: false,
        ttl: None,
        asked_by: None,
        kept_arguments: None,
    }
}

fn count(db: &Db, id: &ExecutionId, states: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM audit_events WHERE execution_id = ?1 AND state IN ({states})");
    db.conn().unwrap().query_one(&sql, crate::args![id], |r| r.get(0)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_decision_on_another_replica_wakes_the_owner_and_the_first_wins() {
    let Some(p) = pair(Duration::from_secs(60)).await else { return };
    let e = p.a.open(new_execution()).await.unwrap();
    p.a.flush().await;
    let waiter = {
        let (a, id) = (p.a.clone(), e.id.clone());
        tokio::spawn(async move { a.wait(&id, Duration::from_secs(10)).await })
    };
    let (b, id) = (p.b.clone(), e.id.clone());
    let (seen, pending) = tokio::task::spawn_blocking(move || (b.get(&id), b.pending())).await.unwrap();
    assert_eq!(seen.unwrap().1.state, State::Pending, "B shows A's execution");
    assert!(pending.iter().any(|x| x.id == e.id), "and lists it as pending");
    // B watches it through a mirror.
    let (b, id) = (p.b.clone(), e.id.clone());
    let (_, mut mirror) = tokio::task::spawn_blocking(move || b.subscribe(&id)).await.unwrap().unwrap();
    let decided = p.b.decide_at_owner(&e.id, Decision::Decline, "user:bob", Some("no")).await.unwrap();
    assert_eq!(decided.state, State::Declined);
    assert_eq!(waiter.await.unwrap().unwrap().state, State::Declined, "A's waiter woke");
    tokio::time::timeout(Duration::from_secs(5), mirror.wait_for(|s| s.state == State::Declined))
        .await
        .expect("B's mirror followed")
        .unwrap();
    assert_eq!(
        p.b.decide_at_owner(&e.id, Decision::Accept, "user:ada", None).await,
        Err(DecideError::Conflict(State::Declined))
    );
    assert_eq!(
        p.a.decide_at_owner(&e.id, Decision::Accept, "user:ada", None).await,
        Err(DecideError::Conflict(State::Declined))
    );
    // Repeating the winning decision on either is a no-op.
    assert_eq!(p.b.decide_at_owner(&e.id, Decision::Decline, "user:bob", None).await.unwrap().state, State::Declined);
    let (db, id) = (p.db.clone(), e.id.clone());
    assert_eq!(tokio::task::spawn_blocking(move || count(&db, &id, "'declined'")).await.unwrap(), 1);
    drop(mirror);
    p.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn decisions_raced_from_two_replicas_have_one_outcome_each() {
    let Some(p) = pair(Duration::from_secs(60)).await else { return };
    let mut executions = Vec::new();
    for _ in 0..50 {
        executions.push(p.a.open(new_execution()).await.unwrap());
    }
    p.a.flush().await;
    let mut races = Vec::new();
    for (i, e) in executions.iter().enumerate() {
        let (on_a, on_b) =
            if i % 2 == 0 { (Decision::Accept, Decision::Decline) } else { (Decision::Decline, Decision::Accept) };
        let (a, b, id) = (p.a.clone(), p.b.clone(), e.id.clone());
        races.push(tokio::spawn(async move {
            let from_a = {
                let (a, id) = (a.clone(), id.clone());
                tokio::spawn(async move { a.decide_at_owner(&id, on_a, "user:ada", None).await })
            };
            let from_b = {
                let (b, id) = (b.clone(), id.clone());
                tokio::spawn(async move { b.decide_at_owner(&id, on_b, "user:bob", None).await })
            };
            (id, from_a.await.unwrap(), from_b.await.unwrap())
        }));
    }
    for race in races {
        let (id, from_a, from_b) = race.await.unwrap();
        let won = [&from_a, &from_b].iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "{id}: {from_a:?} / {from_b:?}");
        for lost in [&from_a, &from_b].into_iter().filter_map(|r| r.as_ref().err()) {
            assert!(matches!(lost, DecideError::Conflict(_)), "{id}: {lost:?}");
        }
        let (db, key) = (p.db.clone(), id.clone());
        let decisions = tokio::task::spawn_blocking(move || count(&db, &key, "'approved', 'declined'")).await.unwrap();
        assert_eq!(decisions, 1, "{id}: one decision audited");
        let winner = from_a.or(from_b).unwrap();
        if winner.state == State::Approved {
            p.a.start_run(&id).await.unwrap();
            p.a.finish(&id, true, None);
        }
    }
    assert_eq!((p.a.len(), p.b.len()), (0, 0), "nothing left behind on either replica");
    p.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_that_leaves_has_its_execution_adopted_and_expired_once() {
    let Some(p) = pair(Duration::from_secs(3)).await else { return };
    let e = p.a.open(new_execution()).await.unwrap();
    p.a.flush().await;
    p.a.leave().await;
    let a = p.a.clone();
    tokio::task::spawn_blocking(move || {
        a.cluster().unwrap().leave();
    })
    .await
    .unwrap();
    assert_eq!(p.a.len(), 0, "A owns nothing after leaving");
    // B's next sweep adopts it (run it now rather than wait for the tick).
    let b = p.b.clone();
    tokio::task::spawn_blocking(move || b.sweep()).await.unwrap();
    assert_eq!(p.b.get(&e.id).map(|(_, s)| s.state), Some(State::Pending), "B adopted it, still pending");
    let seen = p.b.wait(&e.id, Duration::from_secs(10)).await.unwrap();
    assert_eq!(seen.state, State::Expired, "B's timer expired it");
    // Past A's own (former) timer too: still exactly one expiry.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (db, id) = (p.db.clone(), e.id.clone());
    assert_eq!(tokio::task::spawn_blocking(move || count(&db, &id, "'expired'")).await.unwrap(), 1);
    assert_eq!((p.a.len(), p.b.len()), (0, 0));
    p.close().await;
}

#[test]
fn a_refusal_travels_as_the_stores_own_error() {
    use super::ApprovalMessage;
    use crate::cluster::Topic;
    for error in
        [DecideError::NotFound, DecideError::Conflict(State::Declined), DecideError::Storage("the disk is full".into())]
    {
        let answer = ApprovalMessage::Decided { outcome: Err(error) };
        let json = serde_json::to_value(&answer).unwrap();
        assert_eq!(serde_json::from_value::<ApprovalMessage>(json).unwrap(), answer);
    }
    // A state this replica does not know is not read as some other state:
    // the message is refused (and dropped with a warning by the bus).
    let json = serde_json::json!({"kind": "decided", "outcome": {"Err": {"Conflict": "somewhere_new"}}});
    assert!(serde_json::from_value::<ApprovalMessage>(json).is_err());
    // Free text is cut before sending; the outcome's state is not.
    let mut long = ApprovalMessage::Decide {
        id: "exec_1".into(),
        decision: Decision::Decline,
        actor: "user:ada".into(),
        detail: Some("x".repeat(5000)),
    };
    long.fit();
    let ApprovalMessage::Decide { detail, .. } = long else { unreachable!() };
    assert_eq!(detail.unwrap().len(), crate::cluster::MAX_TEXT);
}
