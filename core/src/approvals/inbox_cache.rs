//! The inbox listings computed since the last change, by viewer (see
//! [`super::inbox`], which fills and reads it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gatehouse_model::ExecutionView;

use crate::users::User;

/// On a cluster the other replicas' pending calls are read from the
/// database, and a change there reaches this replica as a notification that
/// a reconnect can lose: a listing is re-read after this long even if no
/// change was told.
const CLUSTER_MAX_AGE: Duration = Duration::from_secs(2);

/// The listings computed since the last change, by viewer.
#[derive(Default)]
pub(super) struct InboxCache {
    /// One computation at a time: the streams of a burst wait for the first
    /// one's listing instead of each scanning the store (async, so waiters
    /// are tasks rather than threads).
    pub(super) fill: tokio::sync::Mutex<()>,
    listed: Mutex<Listed>,
}

#[derive(Default)]
struct Listed {
    /// The approvals counter the listings were computed at.
    version: u64,
    /// By user id (a name is not an identity), with the admin flag they
    /// were computed for.
    by_viewer: HashMap<gatehouse_model::UserId, (bool, Arc<Listing>)>,
}

/// One viewer's inbox without the time it is read at.
#[derive(Default)]
pub(super) struct Listing {
    pub(super) total: usize,
    pub(super) pending: Vec<ExecutionView>,
    at: Option<Instant>,
}

impl Listing {
    /// A listing read now.
    pub(super) fn new(total: usize, pending: Vec<ExecutionView>) -> Self {
        Self { total, pending, at: Some(Instant::now()) }
    }
}

impl InboxCache {
    /// `user`'s listing if it was computed at `version` for the same admin
    /// flag (and, on a `clustered` replica, recently enough).
    pub(super) fn get(&self, version: u64, user: &User, clustered: bool) -> Option<Arc<Listing>> {
        let listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        if listed.version != version {
            return None;
        }
        let (is_admin, listing) = listed.by_viewer.get(&user.id)?;
        let fresh = !clustered || listing.at.is_some_and(|at| at.elapsed() < CLUSTER_MAX_AGE);
        (*is_admin == user.is_admin && fresh).then(|| listing.clone())
    }

    /// Keeps `listing`, read at `version`, for `user` (a newer version
    /// forgets every older listing; an older one is not kept).
    pub(super) fn keep(&self, version: u64, user: &User, listing: Listing) -> Arc<Listing> {
        let listing = Arc::new(listing);
        let mut listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        if version > listed.version {
            *listed = Listed { version, by_viewer: HashMap::new() };
        }
        if version == listed.version {
            listed.by_viewer.insert(user.id, (user.is_admin, listing.clone()));
        }
        listing
    }
}
