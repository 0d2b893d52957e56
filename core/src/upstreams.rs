//! Upstreams run from the browser: the ones admins added (their
//! [`UpstreamSpec`], JSON in `managed_upstreams`, [`ManagedTable`]) and every upstream's
//! restart count (`upstream_restarts`, so "restart" reaches the config
//! file's upstreams too). Each write bumps the shared configuration version;
//! every replica's server reads the rows back and starts, stops or restarts
//! what changed. The caller checks who may, and records the change.

use std::sync::Arc;

use gatehouse_model::UpstreamSpec;

use crate::args;
use crate::clock::Clock;
use crate::db::Db;
use crate::error::{CoreError, Result};
use crate::managed::{Managed, ManagedTable};

/// Most upstreams the database may hold: each one is a connection (or a
/// child process) on every replica.
pub const MAX_MANAGED: usize = <UpstreamSpec as Managed>::MAX;

/// The stored upstreams and restart counts.
#[derive(Clone)]
pub struct UpstreamStore {
    db: Db,
    clock: Arc<dyn Clock>,
    /// The admins' upstreams.
    pub specs: ManagedTable<UpstreamSpec>,
}

/// What the server runs from the database: the specs (secrets included:
/// the server sends them) and each upstream's restart count, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stored {
    /// The admins' upstreams, by name.
    pub specs: Vec<UpstreamSpec>,
    /// How often each upstream was restarted from the console, by name.
    pub restarts: Vec<(String, i64)>,
}

impl UpstreamStore {
    /// The store over `db`.
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { specs: ManagedTable::new(db.clone(), clock.clone()), db, clock }
    }

    /// Everything the server runs from the database.
    pub fn stored(&self) -> Result<Stored> {
        let mut conn = self.db.conn()?;
        let specs = ManagedTable::<UpstreamSpec>::all_in(&mut conn)?;
        let restarts = conn.query("SELECT name, generation FROM upstream_restarts ORDER BY name", args![], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
        Ok(Stored { specs, restarts })
    }

    /// The stored upstream `name`, as stored (secrets included).
    pub fn get(&self, name: &str) -> Result<Option<UpstreamSpec>> {
        self.specs.get(name)
    }

    /// Adds or replaces the upstream of `spec`'s name ([`ManagedTable::put`]:
    /// a secret header left blank keeps its stored value, for the same
    /// origin only).
    pub fn put(&self, spec: UpstreamSpec, adding: bool) -> Result<UpstreamSpec> {
        self.specs.put(spec, adding)
    }

    /// Disables or enables the stored upstream `name`; whether there was one.
    pub fn set_enabled(&self, name: &str, enabled: bool) -> Result<bool> {
        self.specs.set_enabled(name, enabled)
    }

    /// Removes the stored upstream `name` and its restart count; whether
    /// there was one. The caller never removes a name the config file uses,
    /// and forgets its trust ([`crate::policy::PolicyStore::clear_trust`]).
    pub fn remove(&self, name: &str) -> Result<bool> {
        self.db.conn()?.transaction(|tx| {
            tx.execute("DELETE FROM upstream_restarts WHERE name = ?1", args![name])?;
            ManagedTable::<UpstreamSpec>::remove_in(tx, name)
        })
    }

    /// Counts one more restart of upstream `name` (stored or the file's):
    /// every replica running it stops and starts it again.
    pub fn restart(&self, name: &str) -> Result<i64> {
        if !gatehouse_model::valid_upstream_name(name) {
            return Err(CoreError::Invalid { field: "name", reason: "not an upstream's name".into() });
        }
        let now = self.clock.now_ms();
        self.db.conn()?.transaction(|tx| {
            tx.execute(
                "INSERT INTO upstream_restarts (name, generation, restarted_at) VALUES (?1, 1, ?2)
                 ON CONFLICT (name) DO UPDATE SET generation = upstream_restarts.generation + 1,
                 restarted_at = excluded.restarted_at",
                args![name, now],
            )?;
            let generation =
                tx.query_one("SELECT generation FROM upstream_restarts WHERE name = ?1", args![name], |r| r.get(0))?;
            Db::bump_config(tx)?;
            Ok(generation)
        })
    }
}

#[cfg(test)]
mod tests {
    use gatehouse_model::{Header, Transport};

    use super::*;
    use crate::clock::ManualClock;

    fn store() -> UpstreamStore {
        UpstreamStore::new(Db::for_tests().unwrap(), Arc::new(ManualClock::new(1_000)))
    }

    fn spec(secret: Option<&str>) -> UpstreamSpec {
        UpstreamSpec {
            name: "search".into(),
            transport: Transport::Http { url: "https://mcp.example.com/mcp".into() },
            prefix: None,
            enabled: true,
            headers: vec![
                Header { name: "Authorization".into(), value: secret.map(str::to_string), secret: true },
                Header { name: "X-Team".into(), value: Some("blue".into()), secret: false },
            ],
        }
    }

    #[test]
    fn a_secret_left_blank_keeps_the_stored_one_and_a_new_one_needs_a_value() {
        let store = store();
        let refused = store.put(spec(None), true).unwrap_err();
        assert!(matches!(refused, CoreError::Invalid { field: "secret_headers", .. }), "{refused:?}");
        store.put(spec(Some("Bearer s3cret")), true).unwrap();
        assert!(
            matches!(store.put(spec(Some("x")), true), Err(CoreError::Invalid { field: "name", .. })),
            "adding twice"
        );
        // An edit that leaves the secret blank keeps it; one that gives it replaces it.
        store.put(spec(Some("")), false).unwrap();
        assert_eq!(store.get("search").unwrap().unwrap().headers[0].value.as_deref(), Some("Bearer s3cret"));
        // Pointed elsewhere, a blank secret is not carried along.
        let mut moved = spec(Some(""));
        moved.transport = Transport::Http { url: "https://collector.example/mcp".into() };
        let refused = store.put(moved, false).unwrap_err();
        assert!(refused.to_string().contains("the URL's host changed"), "{refused}");
        // Disabled in one step; an edit keeps the switch.
        assert!(store.set_enabled("search", false).unwrap());
        store.put(spec(Some("")), false).unwrap();
        assert!(!store.get("search").unwrap().unwrap().enabled);
        store.put(spec(Some("Bearer other")), false).unwrap();
        assert_eq!(store.get("search").unwrap().unwrap().headers[0].value.as_deref(), Some("Bearer other"));
        assert!(store.remove("search").unwrap());
        assert!(!store.remove("search").unwrap());
        assert_eq!(store.stored().unwrap(), Stored::default());
    }

    #[test]
    fn restarts_count_per_name() {
        let store = store();
        assert_eq!(store.restart("files").unwrap(), 1);
        assert_eq!(store.restart("files").unwrap(), 2);
        assert_eq!(store.stored().unwrap().restarts, vec![("files".to_string(), 2)]);
        assert!(store.restart("a b").is_err());
    }
}
