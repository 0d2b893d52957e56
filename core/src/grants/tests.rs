//! Unit tests of [`super`].

use super::*;
use crate::clock::ManualClock;
use serde_json::json;

/// Ada's and Bob's user ids: grants are matched by id, not by name.
const ADA: UserId = UserId::new(1);
const BOB: UserId = UserId::new(2);

fn store() -> (GrantStore, Arc<ManualClock>) {
    let db = Db::for_tests().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let changes = ChangeLog::new(db.clone(), clock.clone());
    (GrantStore::load(db, clock.clone(), changes, LiveHub::new()).unwrap(), clock)
}

fn grant(scope: GrantScope, session: Option<&str>, arguments: BTreeMap<String, ArgMatch>, now: i64) -> GrantView {
    GrantView {
        id: secret::new_id("grant").into(),
        agent: "claude".into(),
        owner: Some("ada".into()),
        owner_id: Some(ADA),
        tool: "fs_write".into(),
        arguments,
        scope,
        session_id: session.map(Into::into),
        created_by: "user:ada".into(),
        execution_id: "exec_1".into(),
        created_at_ms: now,
        expires_at_ms: scope.duration_ms().map(|d| now + d),
        uses: 0,
        last_used_ms: None,
    }
}

#[test]
fn a_grant_matches_exactly_its_agent_owner_tool_session_and_constraints() {
    let (store, clock) = store();
    let now = clock.now_ms();
    let only_tmp = BTreeMap::from([("path".to_string(), ArgMatch::Prefix("/tmp/".into()))]);
    store.insert(grant(GrantScope::OneHour, None, only_tmp, now), "user:ada").unwrap();
    let tmp = json!({"path": "/tmp/a", "mode": 1});
    assert!(store.find("claude", Some(ADA), "fs_write", None, &tmp).is_some());
    assert!(store.find("claude", Some(BOB), "fs_write", None, &tmp).is_none(), "another owner");
    assert!(store.find("claudette", Some(ADA), "fs_write", None, &tmp).is_none(), "another agent");
    assert!(store.find("claude", Some(ADA), "fs_write2", None, &tmp).is_none(), "another tool");
    assert!(store.find("claude", Some(ADA), "fs_write", None, &json!({"path": "/etc/a"})).is_none());
    assert!(store.find("claude", Some(ADA), "fs_write", None, &json!({"path": 5})).is_none());
    assert!(store.find("claude", Some(ADA), "fs_write", None, &json!({})).is_none());

    store.insert(grant(GrantScope::Session, Some("s1"), BTreeMap::new(), now), "user:ada").unwrap();
    let any = json!({"path": "/etc/a"});
    assert!(store.find("claude", Some(ADA), "fs_write", Some("s1"), &any).is_some());
    assert!(store.find("claude", Some(ADA), "fs_write", Some("s2"), &any).is_none());
    assert_eq!(store.end_session("s1"), 1);
    assert!(store.find("claude", Some(ADA), "fs_write", Some("s1"), &any).is_none());
    store.db.flush_writes();
    let rows: i64 = store
        .db
        .conn()
        .unwrap()
        .query_one("SELECT COUNT(*) FROM grants WHERE session_id = 's1'", crate::args![], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 0, "its row goes too, through the writer");

    clock.advance(std::time::Duration::from_secs(3600));
    assert!(store.find("claude", Some(ADA), "fs_write", None, &tmp).is_none(), "expired");
}

#[test]
fn a_prefix_grant_covers_no_value_a_parser_reads_outside_it() {
    let (store, clock) = store();
    let api = BTreeMap::from([("url".to_string(), ArgMatch::Prefix("https://api.example.com/v1/".into()))]);
    store.insert(grant(GrantScope::OneHour, None, api, clock.now_ms()), "user:ada").unwrap();
    let find = |url: &str| store.find("claude", Some(ADA), "fs_write", None, &json!({"url": url}));
    assert!(find("https://api.example.com/v1/items?q=1").is_some());
    for outside in [
        "https://api.example.com/v1/..?x",
        "https://api.example.com/v1/..#f",
        "https://api.example.com/v1/%2e%2e?x",
        "https://api.example.com/v1/.%2E#",
        "https://api.example.com/v1/\\..\\admin",
        "https://api.example.com/v1/\u{2025}/admin",
        "https://api.example.com/v1/\u{ff0e}\u{ff0e}\u{ff0f}admin",
    ] {
        assert!(find(outside).is_none(), "{outside:?}");
    }
}

#[test]
fn every_change_to_the_grants_is_told_to_the_live_pages() {
    let db = Db::for_tests().unwrap();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let live = LiveHub::new();
    let mut events = live.subscribe();
    let store = GrantStore::load(db.clone(), clock.clone(), ChangeLog::new(db, clock.clone()), live).unwrap();
    let mut told = || {
        let mut n = 0;
        while let Ok(event) = events.try_recv() {
            assert_eq!(event, LiveEvent::GrantsChanged);
            n += 1;
        }
        n
    };
    store.insert(grant(GrantScope::Session, Some("s1"), BTreeMap::new(), clock.now_ms()), "user:ada").unwrap();
    assert_eq!(told(), 1, "made");
    assert!(store.find("claude", Some(ADA), "fs_write", Some("s1"), &json!({})).is_some());
    store.flush_uses().unwrap();
    assert_eq!(told(), 1, "its use counted");
    assert_eq!(store.end_session("s1"), 1);
    assert_eq!(told(), 1, "ended with its session");
    assert_eq!(store.end_session("s1"), 0);
    assert_eq!(told(), 0, "nothing changed, nothing told");
}

#[test]
fn uses_are_counted_in_memory_and_flushed_in_a_batch_and_survive_a_reload() {
    let (store, clock) = store();
    let view = grant(GrantScope::UntilRevoked, None, BTreeMap::new(), clock.now_ms());
    store.insert(view.clone(), "user:ada").unwrap();
    let first = store.find("claude", Some(ADA), "fs_write", None, &json!({})).unwrap();
    assert!(first.flush_needed);
    let second = store.find("claude", Some(ADA), "fs_write", None, &json!({})).unwrap();
    assert!(!second.flush_needed, "one flush is already on its way");
    assert_eq!(store.flush_uses().unwrap(), 1);
    let reloaded =
        GrantStore::load(store.db.clone(), store.clock.clone(), store.changes.clone(), LiveHub::new()).unwrap();
    let ada = User { id: 1.into(), username: "ada".into(), is_admin: false };
    let listed = reloaded.list_for(&ada).unwrap();
    assert_eq!((listed.len(), listed[0].uses, listed[0].last_used_ms), (1, 2, Some(clock.now_ms())));
    let bob = User { id: 2.into(), username: "bob".into(), ..ada.clone() };
    let namesake = User { id: 3.into(), ..ada.clone() };
    assert!(reloaded.list_for(&namesake).unwrap().is_empty(), "a name is not an identity");
    assert!(reloaded.list_for(&bob).unwrap().is_empty());
    assert_eq!(reloaded.revoke_for(&bob, &view.id), Err(GrantError::Forbidden));
    reloaded.revoke_for(&ada, &view.id).unwrap();
    assert!(reloaded.find("claude", Some(ADA), "fs_write", None, &json!({})).is_none());
    assert_eq!(reloaded.revoke_for(&ada, &view.id), Err(GrantError::NotFound("no such grant".into())));
}

#[test]
fn two_stores_on_one_database_add_their_uses_up() {
    let (first, clock) = store();
    let view = grant(GrantScope::UntilRevoked, None, BTreeMap::new(), clock.now_ms());
    first.insert(view, "user:ada").unwrap();
    let second =
        GrantStore::load(first.db.clone(), first.clock.clone(), first.changes.clone(), LiveHub::new()).unwrap();
    let ada = User { id: 1.into(), username: "ada".into(), is_admin: false };
    for _ in 0..2 {
        first.find("claude", Some(ADA), "fs_write", None, &json!({})).unwrap();
    }
    first.flush_uses().unwrap();
    for _ in 0..3 {
        second.find("claude", Some(ADA), "fs_write", None, &json!({})).unwrap();
    }
    second.flush_uses().unwrap();
    assert_eq!(second.list_for(&ada).unwrap()[0].uses, 5, "the flush brings the other's uses");
    first.find("claude", Some(ADA), "fs_write", None, &json!({})).unwrap();
    first.flush_uses().unwrap();
    assert_eq!(first.list_for(&ada).unwrap()[0].uses, 6);
    let reloaded = GrantStore::load(first.db.clone(), clock.clone(), first.changes.clone(), LiveHub::new()).unwrap();
    assert_eq!(reloaded.list_for(&ada).unwrap()[0].uses, 6);
}
