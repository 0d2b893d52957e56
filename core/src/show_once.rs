//! Secrets a page shows once: the token of a credential minted in the
//! console, an invite or reset link an admin made. The server function that
//! makes one holds it here and redirects the browser to the page that shows
//! it (so a form posted without JavaScript sees it too, and the secret never
//! rides in a URL); that page takes it, once.
//!
//! Held in the database, not in memory, so the redirect may land on any
//! replica sharing it, and timed by the injected [`Clock`]. A take is one
//! `DELETE … RETURNING`: of two replicas asked at once, one gets the row and
//! the other nothing.
//!
//! The database holds the secret itself, briefly — every other secret it
//! holds is a hash. That is acceptable because a row lives only from the
//! mint to the page load right after it (it is deleted when shown), at most
//! [`HOLD`] when the page never loads (expired rows are never shown and are
//! deleted by the next hold of the same kind and by the housekeeping
//! sweep), and only the user who made it may take it. Sealing it would not
//! help: the only key the replicas share lives in this same database
//! (`server_keys`; on SQLite, in a file beside it), so whoever reads the row
//! can read the key too. A copy of the database taken within that window
//! holds a live secret; revoking the credential or making a new link ends it.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_model::{MintedCredential, PasswordLink};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::args;
use crate::clock::Clock;
use crate::db::Db;
use crate::error::{CoreError, Result};

/// How long a secret waits to be shown.
pub const HOLD: Duration = Duration::from_secs(600);
/// The most secrets of one kind waiting at once (the oldest goes first).
pub const MOST: usize = 256;

/// What can be held to be shown once: a serialisable value with the handle
/// its page asks for it by.
pub trait Shown: Serialize + DeserializeOwned {
    /// The kind of secret: each kind has its own handles and its own bound.
    const KIND: &'static str;
    /// The handle it is held under (random: a credential or link id).
    fn handle(&self) -> &str;
}

impl Shown for MintedCredential {
    const KIND: &'static str = "minted_token";
    fn handle(&self) -> &str {
        &self.id
    }
}

impl Shown for PasswordLink {
    const KIND: &'static str = "password_link";
    fn handle(&self) -> &str {
        &self.id
    }
}

impl Shown for gatehouse_model::MintedApiToken {
    const KIND: &'static str = "api_token";
    fn handle(&self) -> &str {
        &self.handle
    }
}

/// Secrets waiting to be shown, each to one user. Cheap to clone.
#[derive(Clone)]
pub struct ShowOnce {
    db: Db,
    clock: Arc<dyn Clock>,
}

impl ShowOnce {
    /// The store over `db`, timed by `clock`.
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock }
    }

    /// Keeps `value` for `viewer` (a username) to see once, for [`HOLD`].
    /// Expired secrets of its kind go first, then the oldest while more than
    /// [`MOST`] would wait.
    pub fn hold<T: Shown>(&self, viewer: &str, value: &T) -> Result<()> {
        let payload = serde_json::to_string(value)
            .map_err(|e| CoreError::Invalid { field: "show_once", reason: e.to_string() })?;
        let now = self.clock.now_ms();
        let expires = now + HOLD.as_millis() as i64;
        self.db.conn()?.transaction(|conn| {
            conn.execute("DELETE FROM show_once WHERE kind = ?1 AND expires_at <= ?2", args![T::KIND, now])?;
            let held: i64 =
                conn.query_one("SELECT COUNT(*) FROM show_once WHERE kind = ?1", args![T::KIND], |r| r.get(0))?;
            let over = held + 1 - MOST as i64;
            if over > 0 {
                conn.execute(
                    "DELETE FROM show_once WHERE kind = ?1 AND handle IN \
                     (SELECT handle FROM show_once WHERE kind = ?1 ORDER BY created_at, handle LIMIT ?2)",
                    args![T::KIND, over],
                )?;
            }
            conn.execute(
                "INSERT INTO show_once (kind, handle, viewer, payload, created_at, expires_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                 ON CONFLICT (kind, handle) DO UPDATE SET viewer = excluded.viewer, payload = excluded.payload, \
                 created_at = excluded.created_at, expires_at = excluded.expires_at",
                args![T::KIND, value.handle(), viewer, payload, now, expires],
            )?;
            Ok(())
        })
    }

    /// The secret held as `handle`, if `viewer` may see it and it has not
    /// been shown or expired; taking it deletes it. Another viewer's attempt
    /// leaves it in place.
    pub fn take<T: Shown>(&self, handle: &str, viewer: &str) -> Result<Option<T>> {
        let now = self.clock.now_ms();
        let payload: Option<String> = self.db.conn()?.query_opt(
            "DELETE FROM show_once WHERE kind = ?1 AND handle = ?2 AND viewer = ?3 AND expires_at > ?4 \
             RETURNING payload",
            args![T::KIND, handle, viewer, now],
            |r| r.get(0),
        )?;
        payload
            .map(|p| serde_json::from_str(&p))
            .transpose()
            .map_err(|e| CoreError::Invalid { field: "show_once", reason: e.to_string() })
    }

    /// Deletes every expired secret (the housekeeping sweep); how many.
    pub fn purge_expired(&self) -> Result<usize> {
        self.db.conn()?.execute("DELETE FROM show_once WHERE expires_at <= ?1", args![self.clock.now_ms()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;
    use gatehouse_model::LinkPurpose;

    fn store() -> (ShowOnce, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        (ShowOnce::new(Db::for_tests().unwrap(), clock.clone()), clock)
    }

    fn minted(id: &str) -> MintedCredential {
        MintedCredential {
            id: id.into(),
            agent: "a".into(),
            thread: None,
            owner: Some("ada".into()),
            token: format!("token of {id}"),
            endpoint: "http://gh.test/mcp".into(),
        }
    }

    fn link(id: &str) -> PasswordLink {
        PasswordLink {
            id: id.into(),
            username: "bob".into(),
            purpose: LinkPurpose::Invite,
            url: "http://gh.test/set-password?token=t".into(),
            expires_ms: 1,
        }
    }

    #[test]
    fn a_secret_is_taken_once_and_only_by_its_viewer() {
        let (store, _) = store();
        store.hold("ada", &minted("cred_1")).unwrap();
        assert_eq!(store.take::<MintedCredential>("cred_1", "bob").unwrap(), None, "not another user's");
        assert_eq!(store.take::<MintedCredential>("cred_1", "ada").unwrap(), Some(minted("cred_1")), "still there");
        assert_eq!(store.take::<MintedCredential>("cred_1", "ada").unwrap(), None, "once");

        store.hold("ada", &link("link_1")).unwrap();
        assert_eq!(store.take::<PasswordLink>("link_1", "root").unwrap(), None, "not another admin's");
        assert_eq!(store.take::<MintedCredential>("link_1", "ada").unwrap(), None, "kinds do not mix");
        assert_eq!(store.take::<PasswordLink>("link_1", "ada").unwrap(), Some(link("link_1")));
        assert_eq!(store.take::<PasswordLink>("link_1", "ada").unwrap(), None, "once");
    }

    #[test]
    fn a_secret_expires_on_the_injected_clock_and_is_swept() {
        let (store, clock) = store();
        store.hold("ada", &minted("cred_1")).unwrap();
        store.hold("ada", &minted("cred_2")).unwrap();
        clock.advance(HOLD - Duration::from_millis(1));
        assert!(store.take::<MintedCredential>("cred_1", "ada").unwrap().is_some(), "just in time");
        clock.advance(Duration::from_millis(1));
        assert_eq!(store.take::<MintedCredential>("cred_2", "ada").unwrap(), None, "expired");
        assert_eq!(store.purge_expired().unwrap(), 1, "the expired one is swept");
        assert_eq!(store.purge_expired().unwrap(), 0);
    }

    #[test]
    fn at_most_most_wait_and_the_oldest_goes_first() {
        let (store, clock) = store();
        for n in 0..=MOST {
            store.hold("ada", &minted(&format!("cred_{n}"))).unwrap();
            clock.advance(Duration::from_millis(1));
        }
        assert_eq!(store.take::<MintedCredential>("cred_0", "ada").unwrap(), None, "the oldest made room");
        assert!(store.take::<MintedCredential>("cred_1", "ada").unwrap().is_some());
        assert!(store.take::<MintedCredential>(&format!("cred_{MOST}"), "ada").unwrap().is_some());
        // Another kind has a bound of its own.
        store.hold("ada", &link("link_1")).unwrap();
        assert!(store.take::<MintedCredential>("cred_2", "ada").unwrap().is_some());
    }
}
