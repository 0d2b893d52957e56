//! What admins add on the console to what the config file runs (upstreams,
//! notification targets): each kept as its spec's JSON in a table of
//! `(name, spec, changed_at)`, read and written one way here. Each write
//! bumps the shared configuration version; every replica's server reads
//! the rows back and runs what changed. The caller checks who may, and
//! records the change.

use std::marker::PhantomData;
use std::sync::Arc;

use gatehouse_model::{NotifySpec, SpecError, UpstreamSpec};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::args;
use crate::clock::Clock;
use crate::db::{Conn, Db};
use crate::error::{CoreError, Result};

/// A spec kept in its own table.
pub trait Managed: Serialize + DeserializeOwned + Clone {
    /// Its table (`name TEXT PRIMARY KEY, spec TEXT, changed_at`).
    const TABLE: &'static str;
    /// What one is called in a refusal ("an upstream").
    const NOUN: &'static str;
    /// Most the table may hold: each runs on every replica.
    const MAX: usize;
    /// Its name (unique).
    fn name(&self) -> String;
    /// Every field's refusal.
    fn problems(&self) -> Vec<SpecError>;
    /// Fills what an edit left blank (write-only values) from the stored one.
    fn keep_from(&mut self, before: Option<&Self>) -> std::result::Result<(), SpecError>;
    /// Switches it on or off.
    fn set_enabled(&mut self, enabled: bool);
}

impl Managed for UpstreamSpec {
    const TABLE: &'static str = "managed_upstreams";
    const NOUN: &'static str = "an upstream";
    const MAX: usize = 100;
    fn name(&self) -> String {
        self.name.clone()
    }
    fn problems(&self) -> Vec<SpecError> {
        UpstreamSpec::problems(self)
    }
    fn keep_from(&mut self, before: Option<&Self>) -> std::result::Result<(), SpecError> {
        UpstreamSpec::keep_from(self, before)
    }
    fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
    }
}

impl Managed for NotifySpec {
    const TABLE: &'static str = "managed_notify";
    const NOUN: &'static str = "a notification target";
    const MAX: usize = 50;
    fn name(&self) -> String {
        self.name.clone().unwrap_or_default()
    }
    fn problems(&self) -> Vec<SpecError> {
        let mut problems = NotifySpec::problems(self);
        // The file may leave the name to the URL's host; a stored target names itself.
        if self.name.is_none() && !problems.iter().any(|p| p.field == "name") {
            problems.insert(0, SpecError::new("name", "Give it a name."));
        }
        problems
    }
    fn keep_from(&mut self, before: Option<&Self>) -> std::result::Result<(), SpecError> {
        NotifySpec::keep_from(self, before)
    }
    fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
    }
}

impl From<SpecError> for CoreError {
    fn from(e: SpecError) -> Self {
        CoreError::Invalid { field: e.field, reason: e.message }
    }
}

/// The table of one kind of [`Managed`] spec.
pub struct ManagedTable<T> {
    db: Db,
    clock: Arc<dyn Clock>,
    kind: PhantomData<fn() -> T>,
}

impl<T> Clone for ManagedTable<T> {
    fn clone(&self) -> Self {
        Self { db: self.db.clone(), clock: self.clock.clone(), kind: PhantomData }
    }
}

impl<T: Managed> ManagedTable<T> {
    /// The table over `db`.
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock, kind: PhantomData }
    }

    /// Every stored spec, by name (secrets included: the server uses them).
    /// A row that no longer reads is left out, and said.
    pub fn all(&self) -> Result<Vec<T>> {
        Self::all_in(&mut self.db.conn()?)
    }

    /// [`Self::all`] on `conn` (inside a caller's transaction).
    pub fn all_in(conn: &mut Conn<'_>) -> Result<Vec<T>> {
        let rows = conn.query(&format!("SELECT spec FROM {} ORDER BY name", T::TABLE), args![], |r| {
            let text: String = r.get(0)?;
            Ok(text)
        })?;
        Ok(rows.into_iter().filter_map(|text| read::<T>(&text)).collect())
    }

    /// The stored spec `name`, as stored.
    pub fn get(&self, name: &str) -> Result<Option<T>> {
        let text: Option<String> =
            self.db
                .conn()?
                .query_opt(&format!("SELECT spec FROM {} WHERE name = ?1", T::TABLE), args![name], |r| r.get(0))?;
        Ok(text.and_then(|t| read(&t)))
    }

    /// Adds or replaces the spec of `spec`'s name, what an edit left blank
    /// kept from the stored one ([`Managed::keep_from`]). `adding`: refused
    /// when the name is taken (an edit replaces). Returns what is now stored.
    pub fn put(&self, mut spec: T, adding: bool) -> Result<T> {
        let name = spec.name();
        let now = self.clock.now_ms();
        self.db.conn()?.transaction(|tx| {
            let before: Option<String> =
                tx.query_opt(&format!("SELECT spec FROM {} WHERE name = ?1", T::TABLE), args![name.as_str()], |r| {
                    r.get(0)
                })?;
            if adding && before.is_some() {
                return Err(CoreError::Invalid {
                    field: "name",
                    reason: format!("{} named {name} is already here: edit it, or choose another name", T::NOUN),
                });
            }
            let before: Option<T> = before.and_then(|t| read(&t));
            spec.keep_from(before.as_ref())?;
            if let Some(problem) = spec.problems().into_iter().next() {
                return Err(problem.into());
            }
            if before.is_none() {
                let count: i64 = tx.query_one(&format!("SELECT COUNT(*) FROM {}", T::TABLE), args![], |r| r.get(0))?;
                if count as usize >= T::MAX {
                    return Err(CoreError::Limit(format!("at most {} of these may be added here", T::MAX)));
                }
            }
            write(tx, &spec, now)?;
            Db::bump_config(tx)
        })?;
        Ok(spec)
    }

    /// Disables or enables the stored spec `name` (read and written in one
    /// transaction: a concurrent edit is never undone); whether there was one.
    pub fn set_enabled(&self, name: &str, enabled: bool) -> Result<bool> {
        let now = self.clock.now_ms();
        self.db.conn()?.transaction(|tx| {
            let text: Option<String> =
                tx.query_opt(&format!("SELECT spec FROM {} WHERE name = ?1", T::TABLE), args![name], |r| r.get(0))?;
            let Some(mut spec) = text.and_then(|t| read::<T>(&t)) else {
                return Ok(false);
            };
            spec.set_enabled(enabled);
            write(tx, &spec, now)?;
            Db::bump_config(tx)?;
            Ok(true)
        })
    }

    /// Removes the stored spec `name` on `tx`; whether there was one.
    pub fn remove_in(tx: &mut Conn<'_>, name: &str) -> Result<bool> {
        let n = tx.execute(&format!("DELETE FROM {} WHERE name = ?1", T::TABLE), args![name])?;
        Db::bump_config(tx)?;
        Ok(n > 0)
    }

    /// Removes the stored spec `name`; whether there was one.
    pub fn remove(&self, name: &str) -> Result<bool> {
        self.db.conn()?.transaction(|tx| Self::remove_in(tx, name))
    }
}

fn read<T: Managed>(text: &str) -> Option<T> {
    match serde_json::from_str::<T>(text) {
        Ok(spec) => Some(spec),
        Err(e) => {
            tracing::error!(error = %e, table = T::TABLE, "a stored row does not read: left out");
            None
        }
    }
}

fn write<T: Managed>(tx: &mut Conn<'_>, spec: &T, now: i64) -> Result<()> {
    let text = serde_json::to_string(spec).map_err(|e| CoreError::Refused(e.to_string()))?;
    tx.execute(
        &format!(
            "INSERT INTO {} (name, spec, changed_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, changed_at = excluded.changed_at",
            T::TABLE
        ),
        args![spec.name(), text, now],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn a_target_is_stored_with_its_secret_kept_on_an_edit_and_removed() {
        let table = ManagedTable::<NotifySpec>::new(Db::for_tests().unwrap(), Arc::new(ManualClock::new(1_000)));
        let spec = |json: serde_json::Value| serde_json::from_value::<NotifySpec>(json).unwrap();
        let unnamed = table.put(spec(serde_json::json!({"url": "https://ntfy.example/ops"})), true).unwrap_err();
        assert!(matches!(unnamed, CoreError::Invalid { field: "name", .. }), "{unnamed:?}");
        let ops =
            serde_json::json!({"name": "ops", "url": "https://ntfy.example/ops", "format": "ntfy", "secret": "tk_1"});
        table.put(spec(ops), true).unwrap();
        let twice =
            table.put(spec(serde_json::json!({"name": "ops", "url": "https://ntfy.example/x"})), true).unwrap_err();
        assert!(matches!(twice, CoreError::Invalid { field: "name", .. }), "{twice:?}");
        assert!(table.set_enabled("ops", false).unwrap());
        let edit = serde_json::json!({"name": "ops", "url": "", "format": "ntfy", "tools": ["files__*"]});
        table.put(spec(edit), false).unwrap();
        let stored = table.get("ops").unwrap().unwrap();
        assert_eq!(stored.url, "https://ntfy.example/ops");
        assert_eq!(stored.secret.as_deref(), Some("tk_1"));
        assert!(!stored.enabled, "an edit keeps the switch");
        assert_eq!(stored.tools, ["files__*"]);
        assert!(table.remove("ops").unwrap());
        assert!(!table.remove("ops").unwrap());
        assert!(table.all().unwrap().is_empty());
    }
}
