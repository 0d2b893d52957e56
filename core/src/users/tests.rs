//! The user store's unit tests.

use super::*;
use crate::clock::ManualClock;

fn store() -> (UserStore, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    (UserStore::new(Db::for_tests().unwrap(), clock.clone()), clock)
}

#[test]
fn passwords_verify_and_are_not_stored_plainly() {
    let (users, _) = store();
    users.add("ada", "correct horse", false).unwrap();
    assert!(users.verify_password("ada", "correct horse").unwrap().is_some());
    assert!(users.verify_password("ada", "wrong horse!").unwrap().is_none());
    assert!(users.verify_password("bob", "correct horse").unwrap().is_none());
    let stored: String =
        users.db.conn().unwrap().query_one("SELECT password_hash FROM users", args![], |r| r.get(0)).unwrap();
    assert!(stored.starts_with("$argon2id$"));
    assert!(matches!(users.add("ada", "another one", false), Err(CoreError::Conflict(_))));
}

#[test]
fn sessions_are_hashed_and_expire() {
    let (users, clock) = store();
    let ada = users.add("ada", "correct horse", true).unwrap();
    let cookie = users.create_session(&ada).unwrap();
    assert_eq!(users.session_user(&cookie).unwrap(), Some(ada));
    let stored: String =
        users.db.conn().unwrap().query_one("SELECT token_hash FROM browser_sessions", args![], |r| r.get(0)).unwrap();
    assert_eq!(stored, secret::hash(&cookie));
    clock.advance(SESSION_LIFETIME);
    assert_eq!(users.session_user(&cookie).unwrap(), None);
}

#[test]
fn setup_token_is_one_time() {
    let (users, _) = store();
    let token = users.new_setup_token().unwrap().unwrap();
    assert!(users.setup_token_valid(&token).unwrap());
    assert!(users.complete_setup("wrong", "root", "password1").is_err());
    let admin = users.complete_setup(&token, "root", "password1").unwrap();
    assert!(admin.is_admin);
    assert!(!users.setup_token_valid(&token).unwrap());
    assert!(users.complete_setup(&token, "root2", "password1").is_err());
    assert_eq!(users.new_setup_token().unwrap(), None);
}

#[test]
fn setup_token_expires_after_a_day() {
    let (users, clock) = store();
    let token = users.new_setup_token().unwrap().unwrap();
    clock.advance(SETUP_TOKEN_LIFETIME - Duration::from_secs(1));
    assert_eq!(users.setup_token(&token).unwrap(), SetupToken::Valid);
    clock.advance(Duration::from_secs(1));
    assert_eq!(users.setup_token(&token).unwrap(), SetupToken::Expired);
    let err = users.complete_setup(&token, "root", "password1").unwrap_err().to_string();
    assert!(err.contains("expired"), "{err}");
    assert_eq!(users.count().unwrap(), 0);
    // A restart prints a fresh link that works.
    let fresh = users.new_setup_token().unwrap().unwrap();
    assert!(users.complete_setup(&fresh, "root", "password1").unwrap().is_admin);
}

#[test]
fn expired_sessions_are_purged_and_live_ones_kept() {
    let (users, clock) = store();
    let ada = users.add("ada", "correct horse", false).unwrap();
    let old = users.create_session(&ada).unwrap();
    clock.advance(SESSION_LIFETIME / 2);
    let newer = users.create_session(&ada).unwrap();
    clock.advance(SESSION_LIFETIME / 2);
    assert_eq!(users.purge_expired_sessions().unwrap(), 1);
    assert_eq!(users.stored_sessions().unwrap(), 1);
    assert_eq!(users.session_user(&old).unwrap(), None);
    assert!(users.session_user(&newer).unwrap().is_some());
}

#[test]
fn an_invite_link_sets_the_first_password_once() {
    let (users, _) = store();
    let link = users.invite("bob", false).unwrap();
    assert_eq!(link.purpose, LinkPurpose::Invite);
    let stored: String =
        users.db.conn().unwrap().query_one("SELECT token_hash FROM password_links", args![], |r| r.get(0)).unwrap();
    assert_eq!(stored, secret::hash(&link.token), "only the hash is kept");
    assert_eq!(users.list().unwrap()[0].status, UserStatus::Invited);
    assert!(users.verify_password("bob", "").unwrap().is_none(), "no password yet signs nobody in");
    assert_eq!(
        users.password_link(&link.token).unwrap(),
        LinkCheck::Valid { username: "bob".into(), purpose: LinkPurpose::Invite }
    );
    assert!(matches!(users.use_password_link(&link.token, "short"), Err(CoreError::Invalid { field: "password", .. })));
    let bob = users.use_password_link(&link.token, "bobs password").unwrap();
    assert!(!bob.is_admin);
    assert_eq!(users.verify_password("bob", "bobs password").unwrap(), Some(bob));
    assert_eq!(users.password_link(&link.token).unwrap(), LinkCheck::Invalid);
    assert!(users.use_password_link(&link.token, "another password").is_err(), "used once");
    assert!(matches!(users.invite("bob", true), Err(CoreError::Conflict(_))));
    assert_eq!(users.list().unwrap()[0].status, UserStatus::Active);
}

#[test]
fn links_expire_and_a_newer_link_replaces_the_older() {
    let (users, clock) = store();
    let first = users.invite("bob", false).unwrap();
    let second = users.new_link("bob").unwrap();
    assert_eq!(second.purpose, LinkPurpose::Invite, "still an invite: no password yet");
    assert_eq!(users.password_link(&first.token).unwrap(), LinkCheck::Invalid);
    clock.advance(PASSWORD_LINK_LIFETIME);
    assert_eq!(users.password_link(&second.token).unwrap(), LinkCheck::Expired);
    let err = users.use_password_link(&second.token, "bobs password").unwrap_err().to_string();
    assert!(err.contains("expired"), "{err}");
    assert_eq!(users.list().unwrap()[0].link_expires_ms, None);
}

#[test]
fn a_reset_link_replaces_the_password_and_ends_every_session() {
    let (users, _) = store();
    let ada = users.add("ada", "old password", false).unwrap();
    let cookie = users.create_session(&ada).unwrap();
    let link = users.new_link("ada").unwrap();
    assert_eq!(link.purpose, LinkPurpose::Reset);
    assert!(users.verify_password("ada", "old password").unwrap().is_some(), "works until the link is used");
    users.use_password_link(&link.token, "new password").unwrap();
    assert!(users.verify_password("ada", "old password").unwrap().is_none());
    assert!(users.verify_password("ada", "new password").unwrap().is_some());
    assert_eq!(users.session_user(&cookie).unwrap(), None);
}

#[test]
fn disabling_ends_sessions_and_sign_in_until_enabled() {
    let (users, _) = store();
    users.add("root", "root password", true).unwrap();
    let bob = users.add("bob", "bobs password", false).unwrap();
    let cookie = users.create_session(&bob).unwrap();
    let link = users.new_link("bob").unwrap();
    assert!(users.set_disabled("bob", true).unwrap());
    assert!(!users.set_disabled("bob", true).unwrap(), "already disabled");
    assert_eq!(users.session_user(&cookie).unwrap(), None);
    assert_eq!(users.stored_sessions().unwrap(), 0, "the rows are gone, not just refused");
    assert!(users.verify_password("bob", "bobs password").unwrap().is_none());
    assert_eq!(users.password_link(&link.token).unwrap(), LinkCheck::Invalid, "links end too");
    assert!(matches!(users.new_link("bob"), Err(CoreError::Refused(_))));
    assert_eq!(users.list().unwrap()[0].status, UserStatus::Disabled);
    assert!(users.set_disabled("bob", false).unwrap());
    assert!(users.verify_password("bob", "bobs password").unwrap().is_some());
    assert!(matches!(users.set_disabled("nobody", true), Err(CoreError::NotFound(_))));
}

#[test]
fn the_last_admin_who_can_sign_in_is_kept() {
    let (users, _) = store();
    users.add("root", "root password", true).unwrap();
    // An invited admin cannot sign in yet, so does not count.
    users.invite("pending", true).unwrap();
    for refused in
        [users.set_disabled("root", true), users.set_admin("root", false), users.remove("root").map(|_| true)]
    {
        let err = refused.unwrap_err();
        assert!(matches!(err, CoreError::Refused(_)) && err.to_string().contains("last admin"), "{err}");
    }
    users.add("ada", "ada password", false).unwrap();
    assert!(users.set_admin("ada", true).unwrap());
    assert!(users.set_admin("root", false).unwrap(), "ada is an admin now");
    assert!(matches!(users.set_disabled("ada", true), Err(CoreError::Refused(_))));
    users.remove("pending").unwrap();
    assert!(users.set_admin("root", true).unwrap());
    users.remove("ada").unwrap();
    assert_eq!(users.list().unwrap().iter().map(|u| u.username.as_str()).collect::<Vec<_>>(), ["root"]);
}

#[test]
fn removing_a_user_removes_their_sessions_and_links() {
    let (users, _) = store();
    users.add("root", "root password", true).unwrap();
    let bob = users.add("bob", "bobs password", false).unwrap();
    let cookie = users.create_session(&bob).unwrap();
    let link = users.new_link("bob").unwrap();
    users.remove("bob").unwrap();
    assert_eq!(users.session_user(&cookie).unwrap(), None);
    assert_eq!(users.stored_sessions().unwrap(), 0);
    assert_eq!(users.password_link(&link.token).unwrap(), LinkCheck::Invalid);
    assert!(matches!(users.remove("bob"), Err(CoreError::NotFound(_))));
}

#[test]
fn a_sign_in_past_max_browser_sessions_ends_the_oldest_session() {
    let (users, clock) = store();
    let users = users.with_max_sessions(2);
    let ada = users.add("ada", "a password", false).unwrap();
    let bob = users.add("bob", "a password", false).unwrap();
    let bobs = users.create_session(&bob).unwrap();
    let first = users.create_session(&ada).unwrap();
    clock.advance(Duration::from_secs(1));
    let second = users.create_session(&ada).unwrap();
    clock.advance(Duration::from_secs(1));
    let third = users.create_session(&ada).unwrap();
    assert_eq!(users.session_user(&first).unwrap(), None, "the oldest ended");
    assert!(users.session_user(&second).unwrap().is_some());
    assert!(users.session_user(&third).unwrap().is_some());
    assert_eq!(users.live_sessions(ada.id).unwrap(), 2);
    assert!(users.session_user(&bobs).unwrap().is_some(), "another user's sessions are not touched");
}

#[test]
fn own_password_changes_need_the_current_one_and_keep_this_session_only() {
    let (users, _) = store();
    let ada = users.add("ada", "old password", false).unwrap();
    let here = users.create_session(&ada).unwrap();
    let elsewhere = users.create_session(&ada).unwrap();
    let keep = BrowserSession(secret::hash(&here));
    assert!(!users.change_password(&ada, "wrong password", "new password", &keep).unwrap());
    assert!(users.session_user(&elsewhere).unwrap().is_some(), "a wrong current password changes nothing");
    assert!(users.change_password(&ada, "old password", "new password", &keep).unwrap());
    assert!(users.verify_password("ada", "new password").unwrap().is_some());
    assert!(users.session_user(&here).unwrap().is_some());
    assert_eq!(users.session_user(&elsewhere).unwrap(), None);
    let third = users.create_session(&ada).unwrap();
    assert_eq!(users.live_sessions(ada.id).unwrap(), 2);
    assert_eq!(users.end_other_sessions(ada.id, &keep).unwrap(), 1);
    assert_eq!(users.session_user(&third).unwrap(), None);
    assert!(users.session_user(&here).unwrap().is_some());
}

// The store is made, filled and dropped outside the runtime: on
// PostgreSQL those calls block, which async workers must not do.
#[test]
fn hashing_gate_bounds_concurrent_hashes() {
    // The only test that sets the hook: it counts every hash in this process.
    static RELEASED: AtomicUsize = AtomicUsize::new(0);
    after_each_hash(|| {
        RELEASED.fetch_add(1, Ordering::SeqCst);
    });
    let (users, _) = store();
    users.add("ada", "correct horse", false).unwrap();
    let users = UserStore { gate: Arc::new(HashingGate::new(2)), ..users };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let mut attempts = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let users = users.clone();
            attempts.spawn(async move { users.sign_in("ada".into(), "correct horse".into()).await });
        }
        while let Some(result) = attempts.join_next().await {
            assert!(result.unwrap().unwrap().is_some());
        }
    });
    assert!((1..=2).contains(&users.hashing().peak()), "peak {}", users.hashing().peak());
    assert!(RELEASED.load(Ordering::SeqCst) >= 8, "the release hook runs after every sign-in's hash");
}
