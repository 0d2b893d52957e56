//! Upstreams run from the browser: the ones admins added (their
//! [`UpstreamSpec`], JSON in `managed_upstreams`) and every upstream's
//! restart count (`upstream_restarts`, so "restart" reaches the config
//! file's upstreams too). Each write bumps the shared configuration version;
//! every replica's server reads the rows back and starts, stops or restarts
//! what changed. The caller checks who may, and records the change.

use std::sync::Arc;

use gatehouse_model::{SpecError, UpstreamSpec};

use crate::args;
use crate::clock::Clock;
use crate::db::Db;
use crate::error::{CoreError, Result};

/// Most upstreams the database may hold: each one is a connection (or a
/// child process) on every replica.
pub const MAX_MANAGED: usize = 100;

/// The stored upstreams and restart counts.
#[derive(Clone)]
pub struct UpstreamStore {
    db: Db,
    clock: Arc<dyn Clock>,
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

impl From<SpecError> for CoreError {
    fn from(e: SpecError) -> Self {
        CoreError::Invalid { field: e.field, reason: e.message }
    }
}

impl UpstreamStore {
    /// The store over `db`.
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock }
    }

    /// Everything the server runs from the database.
    pub fn stored(&self) -> Result<Stored> {
        let mut conn = self.db.conn()?;
        let specs = conn.query("SELECT spec FROM managed_upstreams ORDER BY name", args![], |r| {
            let text: String = r.get(0)?;
            Ok(text)
        })?;
        let specs = specs
            .into_iter()
            .filter_map(|text| match serde_json::from_str::<UpstreamSpec>(&text) {
                Ok(spec) => Some(spec),
                Err(e) => {
                    tracing::error!(error = %e, "a stored upstream does not read: left out");
                    None
                }
            })
            .collect();
        let restarts = conn.query("SELECT name, generation FROM upstream_restarts ORDER BY name", args![], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
        Ok(Stored { specs, restarts })
    }

    /// The stored upstream `name`, as stored (secrets included).
    pub fn get(&self, name: &str) -> Result<Option<UpstreamSpec>> {
        Ok(self.stored()?.specs.into_iter().find(|s| s.name == name))
    }

    /// Adds or replaces the upstream of `spec`'s name. A secret header
    /// given without a value keeps the value stored under its name (the
    /// form never shows it, so an edit that leaves it blank keeps it); one
    /// with no stored value to keep is refused. `adding`: refused when the
    /// name is taken (an edit replaces). Returns what is now stored.
    pub fn put(&self, mut spec: UpstreamSpec, adding: bool) -> Result<UpstreamSpec> {
        spec.check()?;
        let now = self.clock.now_ms();
        self.db.conn()?.transaction(|tx| {
            let before: Option<String> =
                tx.query_opt("SELECT spec FROM managed_upstreams WHERE name = ?1", args![spec.name.as_str()], |r| {
                    r.get(0)
                })?;
            if adding && before.is_some() {
                return Err(CoreError::Invalid {
                    field: "name",
                    reason: format!("an upstream named {} is already here: edit it, or choose another name", spec.name),
                });
            }
            let before: Option<UpstreamSpec> = before.and_then(|t| serde_json::from_str(&t).ok());
            // An edit keeps the stored switch (Disable is its own action).
            if let Some(before) = &before {
                spec.enabled = before.enabled;
            }
            // A secret kept goes only where it went before: a new host must be given it again.
            let same_origin = before
                .as_ref()
                .is_some_and(|b| gatehouse_model::origin(&b.transport) == gatehouse_model::origin(&spec.transport));
            for header in spec.headers.iter_mut().filter(|h| h.secret) {
                if header.value.as_deref().is_none_or(str::is_empty) {
                    let kept = before
                        .iter()
                        .filter(|_| same_origin)
                        .flat_map(|b| &b.headers)
                        .find(|h| h.secret && h.name.eq_ignore_ascii_case(&header.name))
                        .and_then(|h| h.value.clone());
                    let Some(kept) = kept else {
                        let why = if before.is_some() && !same_origin {
                            format!("give {}'s value again: the URL's host changed", header.name)
                        } else {
                            format!("give {}'s value", header.name)
                        };
                        return Err(CoreError::Invalid { field: "secret_headers", reason: why });
                    };
                    header.value = Some(kept);
                }
            }
            if before.is_none() {
                let count: i64 = tx.query_one("SELECT COUNT(*) FROM managed_upstreams", args![], |r| r.get(0))?;
                if count as usize >= MAX_MANAGED {
                    return Err(CoreError::Limit(format!("at most {MAX_MANAGED} upstreams may be added here")));
                }
            }
            let text = serde_json::to_string(&spec).map_err(|e| CoreError::Refused(e.to_string()))?;
            tx.execute(
                "INSERT INTO managed_upstreams (name, spec, changed_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, changed_at = excluded.changed_at",
                args![spec.name.as_str(), text, now],
            )?;
            Db::bump_config(tx)
        })?;
        Ok(spec)
    }

    /// Disables or enables the stored upstream `name` (read and written in
    /// one transaction: a concurrent edit is never undone); whether there was one.
    pub fn set_enabled(&self, name: &str, enabled: bool) -> Result<bool> {
        let now = self.clock.now_ms();
        self.db.conn()?.transaction(|tx| {
            let text: Option<String> =
                tx.query_opt("SELECT spec FROM managed_upstreams WHERE name = ?1", args![name], |r| r.get(0))?;
            let Some(mut spec) = text.and_then(|t| serde_json::from_str::<UpstreamSpec>(&t).ok()) else {
                return Ok(false);
            };
            spec.enabled = enabled;
            let text = serde_json::to_string(&spec).map_err(|e| CoreError::Refused(e.to_string()))?;
            tx.execute(
                "UPDATE managed_upstreams SET spec = ?2, changed_at = ?3 WHERE name = ?1",
                args![name, text, now],
            )?;
            Db::bump_config(tx)?;
            Ok(true)
        })
    }

    /// Removes the stored upstream `name` and its restart count; whether
    /// there was one. The caller never removes a name the config file uses,
    /// and forgets its trust ([`crate::policy::PolicyStore::clear_trust`]).
    pub fn remove(&self, name: &str) -> Result<bool> {
        self.db.conn()?.transaction(|tx| {
            let n = tx.execute("DELETE FROM managed_upstreams WHERE name = ?1", args![name])?;
            tx.execute("DELETE FROM upstream_restarts WHERE name = ?1", args![name])?;
            Db::bump_config(tx)?;
            Ok(n > 0)
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
