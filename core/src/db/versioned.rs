//! A cached copy of rows that every request consults (policy rules, tool
//! pins) and that change rarely.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::Db;
use crate::error::Result;

/// The copy and the configuration version it was read at. This process drops
/// it on its own writes; on PostgreSQL a write by any replica bumps the
/// shared version ([`Db::bump_config`]) and the next read here refills it,
/// so a rule changed on one replica holds on every replica's next request.
pub struct Versioned<T> {
    slot: RwLock<Option<Kept<T>>>,
    /// Counts this process's drops: a refill that began before a drop is
    /// not kept as current (it may have read what the drop replaced).
    generation: AtomicU64,
}

/// One copy: the shared version and this process's generation it was read at.
struct Kept<T> {
    version: Option<i64>,
    generation: u64,
    value: Arc<T>,
}

impl<T> Default for Versioned<T> {
    fn default() -> Self {
        Self { slot: RwLock::new(None), generation: AtomicU64::new(0) }
    }
}

impl<T> Versioned<T> {
    /// The copy, refilled by `load` when missing or stale.
    pub fn get(&self, db: &Db, load: impl FnOnce() -> Result<T>) -> Result<Arc<T>> {
        let version = db.config_version()?;
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(kept) = self.slot.read().unwrap_or_else(|p| p.into_inner()).as_ref()
            && kept.version == version
            && kept.generation == generation
        {
            return Ok(kept.value.clone());
        }
        // Read after the version: a write in between leaves an older version
        // with newer rows, which only costs one more refill.
        let value = Arc::new(load()?);
        *self.slot.write().unwrap_or_else(|p| p.into_inner()) =
            Some(Kept { version, generation, value: value.clone() });
        Ok(value)
    }

    /// Drops the copy (this process changed the rows, or what they are read with).
    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        *self.slot.write().unwrap_or_else(|p| p.into_inner()) = None;
    }
}
