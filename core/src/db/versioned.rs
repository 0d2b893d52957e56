//! A cached copy of rows that every request consults (policy rules, tool
//! pins) and that change rarely.

use std::sync::{Arc, RwLock};

use super::Db;
use crate::error::Result;

/// The copy and the configuration version it was read at. This process drops
/// it on its own writes; on PostgreSQL a write by any replica bumps the
/// shared version ([`Db::bump_config`]) and the next read here refills it,
/// so a rule changed on one replica holds on every replica's next request.
pub struct Versioned<T> {
    slot: RwLock<Option<(Option<i64>, Arc<T>)>>,
}

impl<T> Default for Versioned<T> {
    fn default() -> Self {
        Self { slot: RwLock::new(None) }
    }
}

impl<T> Versioned<T> {
    /// The copy, refilled by `load` when missing or stale.
    pub fn get(&self, db: &Db, load: impl FnOnce() -> Result<T>) -> Result<Arc<T>> {
        let version = db.config_version()?;
        if let Some((seen, value)) = self.slot.read().unwrap_or_else(|p| p.into_inner()).as_ref()
            && *seen == version
        {
            return Ok(value.clone());
        }
        // Read after the version: a write in between leaves an older version
        // with newer rows, which only costs one more refill.
        let value = Arc::new(load()?);
        *self.slot.write().unwrap_or_else(|p| p.into_inner()) = Some((version, value.clone()));
        Ok(value)
    }

    /// Drops the copy (this process changed the rows).
    pub fn invalidate(&self) {
        *self.slot.write().unwrap_or_else(|p| p.into_inner()) = None;
    }
}
