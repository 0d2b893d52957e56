//! Unit tests of [`super`].

use super::*;
use crate::clock::ManualClock;

const WINDOW: Duration = Duration::from_secs(60);

fn store() -> (CredentialStore, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let store = CredentialStore::new(Db::for_tests().unwrap(), clock.clone(), WINDOW, LiveHub::new());
    (store, clock)
}

fn issue(store: &CredentialStore, thread: Option<&str>) -> Issued {
    store.issue(IssueRequest { agent: "claude".into(), thread: thread.map(Into::into), ..Default::default() }).unwrap()
}

fn accepted(store: &CredentialStore, token: &str) -> bool {
    store.authenticate(token).unwrap().is_ok()
}

#[test]
fn only_the_hash_is_stored() {
    let (store, _) = store();
    let issued = issue(&store, None);
    let stored: String = store
        .db
        .conn()
        .unwrap()
        .query_one("SELECT token_hash FROM credentials WHERE id = ?1", args![issued.id], |r| r.get(0))
        .unwrap();
    assert_eq!(stored, secret::hash(&issued.token));
    assert_ne!(stored, issued.token);
    assert_eq!(issued.token.len(), 43, "32 bytes base64url without padding");
}

#[test]
fn expires_once_signs_of_life_stop() {
    let (store, clock) = store();
    let issued = issue(&store, Some("t1"));
    clock.advance(WINDOW - Duration::from_secs(1));
    assert!(accepted(&store, &issued.token), "alive just inside the window");
    // That use was a sign of life: a full window from it, it lapses.
    clock.advance(WINDOW);
    assert!(!accepted(&store, &issued.token));
    assert_eq!(store.authenticate(&issued.token).unwrap(), Err(Rejection::UnknownOrExpiredToken));
    assert_eq!(store.touch_thread("t1").unwrap(), 0, "a lapsed credential is not revived");
    assert!(!accepted(&store, &issued.token));
}

#[test]
fn stays_alive_across_ten_touches_spanning_more_than_the_window() {
    let (store, clock) = store();
    let issued = issue(&store, Some("t1"));
    for _ in 0..10 {
        clock.advance(WINDOW / 2);
        assert_eq!(store.touch_thread("t1").unwrap(), 1);
    }
    // Five windows have passed since issue; no absolute lifetime applies.
    assert!(accepted(&store, &issued.token));
}

#[test]
fn touching_another_thread_does_not_keep_it_alive() {
    let (store, clock) = store();
    let a = issue(&store, Some("a"));
    let b = issue(&store, Some("b"));
    for _ in 0..3 {
        clock.advance(WINDOW / 2);
        store.touch_thread("b").unwrap();
    }
    assert!(!accepted(&store, &a.token));
    assert!(accepted(&store, &b.token));
}

#[test]
fn reissuing_for_a_thread_revokes_its_earlier_credentials() {
    let (store, _) = store();
    let first = issue(&store, Some("t"));
    let other = issue(&store, Some("u"));
    let second = issue(&store, Some("t"));
    assert!(!accepted(&store, &first.token));
    assert!(accepted(&store, &second.token));
    assert!(accepted(&store, &other.token));
    assert_eq!(store.get(&first.id).unwrap().unwrap().revoked_reason.as_deref(), Some("reissued"));
}

#[test]
fn revokes_by_id_thread_provider_session_and_all() {
    let (store, _) = store();
    let by_id = issue(&store, None);
    assert!(store.revoke(&by_id.id).unwrap());
    assert!(!store.revoke(&by_id.id).unwrap(), "second revoke finds nothing live");
    assert!(!accepted(&store, &by_id.token));

    let t = issue(&store, Some("t"));
    assert_eq!(store.revoke_thread("t").unwrap(), 1);
    assert!(!accepted(&store, &t.token));

    let p = store
        .issue(IssueRequest { agent: "codex".into(), provider_session: Some("ps".into()), ..Default::default() })
        .unwrap();
    let keep = issue(&store, None);
    assert_eq!(store.revoke_provider_session("ps").unwrap(), 1);
    assert!(!accepted(&store, &p.token));
    assert!(accepted(&store, &keep.token));

    assert_eq!(store.revoked_among(&[keep.id.clone(), t.id.clone()]).unwrap(), vec![(t.id.clone(), false)]);
    assert_eq!(store.revoke_all().unwrap(), 1);
    assert!(!accepted(&store, &keep.token));
    assert!(store.list().unwrap().iter().all(|c| c.status == CredentialStatus::Revoked));
}

#[test]
fn a_remembered_credential_is_refused_on_the_next_request_after_any_revocation() {
    // Two handles on one file: the server's, and another process's (the CLI).
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let server = CredentialStore::new(Db::open(dir.path()).unwrap(), clock.clone(), WINDOW, LiveHub::new());
    let cli = CredentialStore::new(Db::open(dir.path()).unwrap(), clock.clone(), WINDOW, LiveHub::new());
    let (a, b, c) = (issue(&server, None), issue(&server, None), issue(&server, None));
    for issued in [&a, &b, &c] {
        assert!(accepted(&server, &issued.token));
        assert!(accepted(&server, &issued.token), "remembered");
    }
    // Revoked by the other process.
    assert!(cli.revoke(&a.id).unwrap());
    assert!(!accepted(&server, &a.token), "the CLI's revocation holds on the next request");
    assert!(accepted(&server, &b.token) && accepted(&server, &b.token), "remembered again");
    // Revoked in this process by any statement, not only the store's own.
    server.db.conn().unwrap().execute("UPDATE credentials SET revoked_at = 1 WHERE id = ?1", args![b.id]).unwrap();
    assert!(!accepted(&server, &b.token), "any change to the table holds on the next request");
    assert!(accepted(&server, &c.token));
    // This process's own commits move the WAL index but not data_version;
    // a revocation by the other process after them still holds.
    let d = issue(&server, None);
    assert!(accepted(&server, &c.token) && accepted(&server, &d.token) && accepted(&server, &d.token));
    assert!(cli.revoke(&c.id).unwrap());
    assert!(!accepted(&server, &c.token), "the CLI's revocation after our own write");
    // A lapse needs no change to the table.
    assert!(accepted(&server, &d.token));
    clock.advance(WINDOW * 2);
    assert!(!accepted(&server, &d.token), "a remembered credential still lapses");
}

#[test]
fn traffic_is_a_sign_of_life() {
    let (store, clock) = store();
    let issued = issue(&store, None);
    for _ in 0..5 {
        clock.advance(WINDOW * 9 / 10);
        assert!(accepted(&store, &issued.token));
    }
}

#[test]
fn unknown_tokens_and_bad_input_are_refused() {
    let (store, _) = store();
    assert_eq!(store.authenticate("nope").unwrap(), Err(Rejection::UnknownOrExpiredToken));
    assert!(matches!(
        store.issue(IssueRequest { agent: " ".into(), ..Default::default() }),
        Err(CoreError::Invalid { field: "agent", .. })
    ));
    assert!(matches!(
        store.issue(IssueRequest { agent: "a".into(), owner: Some("ghost".into()), ..Default::default() }),
        Err(CoreError::Invalid { field: "owner", .. })
    ));
}

#[test]
fn revoking_and_reissuing_never_reach_another_owners_credentials() {
    let (store, _) = store();
    for user in ["ada", "bob"] {
        store
            .db
            .conn()
            .unwrap()
            .execute(
                "INSERT INTO users (username, password_hash, is_admin, created_at) VALUES (?1, 'x', 0, 0)",
                args![user],
            )
            .unwrap();
    }
    let mint = |agent: &str, thread: Option<&str>, owner: &str| {
        store
            .issue(IssueRequest {
                agent: agent.into(),
                thread: thread.map(Into::into),
                owner: Some(owner.into()),
                ..Default::default()
            })
            .unwrap()
    };
    let adas = mint("claude", Some("main"), "ada");
    // Bob naming ada's thread gets his own credential; ada's lives on.
    let bobs = mint("claude", Some("main"), "bob");
    assert!(store.get(&adas.id).unwrap().unwrap().revoked_at_ms.is_none(), "re-issue stays within one owner");
    assert_eq!(store.revoke_owned(RevokeScope::Credential, &adas.id, Owned::By(Some("bob"))).unwrap(), 0);
    assert_eq!(store.revoke_owned(RevokeScope::Thread, "main", Owned::By(Some("bob"))).unwrap(), 1);
    assert!(store.get(&bobs.id).unwrap().unwrap().revoked_at_ms.is_some());
    assert!(store.get(&adas.id).unwrap().unwrap().revoked_at_ms.is_none(), "ada's thread is hers");
    let second = mint("claude", None, "ada");
    let other = mint("claude", None, "bob");
    assert_eq!(store.revoke_owned(RevokeScope::Agent, "claude", Owned::By(Some("ada"))).unwrap(), 2);
    assert!(store.get(&other.id).unwrap().unwrap().revoked_at_ms.is_none(), "bob's claude is another agent");
    assert!(store.get(&second.id).unwrap().unwrap().revoked_at_ms.is_some());
    assert_eq!(store.revoke_owned(RevokeScope::Agent, "claude", Owned::ByAnyone).unwrap(), 1);
    // A user who leaves takes all their agents' credentials with them.
    let third = mint("codex", Some("other"), "bob");
    let adas_codex = mint("codex", Some("other"), "ada");
    assert_eq!(store.revoke_by_owner("bob").unwrap(), 1);
    assert!(store.get(&third.id).unwrap().unwrap().revoked_at_ms.is_some());
    assert!(store.get(&adas_codex.id).unwrap().unwrap().revoked_at_ms.is_none(), "only bob's");
}
