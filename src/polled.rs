//! What the console stores for every replica to run (upstreams,
//! notification targets) is followed one way: each replica reads it again
//! every [`POLL`], and at once after a change made on itself.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often every replica reads what the console stored again.
pub const POLL: Duration = Duration::from_secs(1);

/// Something that applies what the database holds.
pub trait Polled: Clone + Send + Sync + 'static {
    /// Notified after a change made on this replica.
    fn wake(&self) -> &tokio::sync::Notify;
    /// Reads the database and applies what changed.
    fn poll(&self) -> impl Future<Output = ()> + Send;
}

/// Polls `source` now, then after each wake and every [`POLL`], until
/// `shutdown`; owned by `tasks`.
pub fn follow<P: Polled>(source: P, shutdown: CancellationToken, tasks: &TaskTracker) {
    tasks.spawn(async move {
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = poll.tick() => {}
                _ = source.wake().notified() => {}
            }
            source.poll().await;
        }
    });
}
