//! The one place store work leaves the async runtime. The stores are
//! synchronous (SQLite behind a mutex, a pooled synchronous PostgreSQL
//! client); async code reaches them through [`Db::run`] (or
//! [`crate::Core::run`]), which runs the work on tokio's blocking pool behind
//! a bound: at most as many at once as there are connections to run them
//! on, so a burst of requests waits here, in the runtime, instead of parking
//! hundreds of blocking threads on the pool's checkout.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::Db;
use crate::error::{CoreError, Result};

/// At most this many store calls run at once on SQLite: one connection
/// serves them all, so more would only queue on its mutex (a few overlap
/// the lock with their own work: hashing, serialising).
pub(super) const SQLITE_LANE: usize = 4;

/// The bound on store work running at once (see the module doc).
#[derive(Clone)]
pub(super) struct Lane(Arc<Semaphore>);

impl Lane {
    pub(super) fn new(width: usize) -> Self {
        Self(Arc::new(Semaphore::new(width)))
    }
}

impl Db {
    /// Runs `work` (synchronous store calls) off the async threads, once
    /// there is room in the lane. It runs to its end even if the caller
    /// stops waiting (a request that went away): a decision or a write
    /// is never left half made. `Err` only if it panicked.
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Result<T> {
        let permit = self.lane.0.clone().acquire_owned().await.map_err(|e| CoreError::Join(e.to_string()))?;
        tokio::task::spawn_blocking(move || {
            let _room = permit;
            work()
        })
        .await
        .map_err(|e| CoreError::Join(e.to_string()))
    }

    /// Runs `work`, one short indexed lookup on the hot path (a credential by
    /// its token), where it costs least: at once on SQLite, whose one
    /// connection answers in microseconds (handing it to another thread
    /// costs more than the query: measured in BENCHMARKS.md), in the lane
    /// on PostgreSQL (a network round trip). Anything longer uses
    /// [`Db::run`].
    pub async fn quick<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Result<T> {
        match self.backend() {
            super::Backend::Sqlite => Ok(work()),
            super::Backend::Postgres => self.run(work).await,
        }
    }
}
