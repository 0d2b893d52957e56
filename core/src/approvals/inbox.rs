//! Each person's inbox: the pending executions they may decide, soonest
//! expiry first — at most [`INBOX_LIMIT`] of them, with how many there are.
//!
//! Every open page stream is sent the viewer's inbox after each burst of
//! changes, so one viewer with many pages open over a long backlog would
//! otherwise cost a full scan and a large message per page. The listing is
//! computed once per viewer and change (the live hub's approvals counter)
//! and shared by every stream that sends it.

use std::sync::Arc;

use gatehouse_model::{ExecutionView, INBOX_LIMIT, InboxView, State, preview_of};

use super::access::{live_view, may_decide};
use super::inbox_cache::Listing;
use super::store::ApprovalStore;
use crate::users::User;

impl ApprovalStore {
    /// `user`'s inbox: from memory while nothing changed since it was last
    /// computed; otherwise computed once for every stream waiting on it, off
    /// the runtime's threads (on a cluster it reads the database: the other
    /// replicas' pending calls).
    pub async fn inbox(&self, user: &User) -> InboxView {
        if let Some(listing) = self.cached_listing(user) {
            return self.inbox_view(user, &listing);
        }
        let _one = self.inner.inbox.fill.lock().await;
        if let Some(listing) = self.cached_listing(user) {
            return self.inbox_view(user, &listing);
        }
        let (store, viewer) = (self.clone(), user.clone());
        let listing = match self.off_runtime(move || store.list(&viewer)).await {
            Ok(listing) => listing,
            Err(e) => {
                tracing::error!(error = %e, "reading an inbox failed");
                Arc::default()
            }
        };
        self.inbox_view(user, &listing)
    }

    fn inbox_view(&self, user: &User, listing: &Listing) -> InboxView {
        InboxView {
            now_ms: self.now_ms(),
            is_admin: user.is_admin,
            total: listing.total,
            pending: listing.pending.clone(),
        }
    }

    fn cached_listing(&self, user: &User) -> Option<Arc<Listing>> {
        self.inner.inbox.get(self.inner.live.approvals_version(), user, self.cluster().is_some())
    }

    /// Computes `user`'s listing and keeps it for the version it was read at.
    fn list(&self, user: &User) -> Arc<Listing> {
        // Read before the approvals: a change after this makes the listing
        // stale at once, never current with old contents.
        let version = self.inner.live.approvals_version();
        let mut pending = self.pending_for(user);
        let total = pending.len();
        pending.truncate(INBOX_LIMIT);
        self.inner.inbox.keep(version, user, Listing::new(total, pending))
    }

    /// Every pending execution `user` may decide, soonest expiry first.
    fn pending_for(&self, user: &User) -> Vec<ExecutionView> {
        let entries = self.entries();
        let mut all: Vec<ExecutionView> = entries
            .values()
            .filter(|e| may_decide(user, e.execution.owner_id))
            .filter(|e| e.tx.borrow().state == State::Pending)
            // The inbox lists many calls: arguments are shown on each call's own page.
            .map(|e| ExecutionView {
                arguments: None,
                preview: Some(preview_of(&e.execution.arguments)),
                suggestion: None,
                ..live_view(&e.execution, &e.tx.borrow())
            })
            .collect();
        drop(entries);
        // On a cluster, the other replicas' too (read from the database).
        all.extend(self.remote_pending_for(user).iter().map(|(e, snapshot)| ExecutionView {
            arguments: None,
            preview: Some(preview_of(&e.arguments)),
            suggestion: None,
            ..live_view(e, snapshot)
        }));
        all.sort_by(|a, b| a.expires_at_ms.cmp(&b.expires_at_ms).then(a.execution_id.cmp(&b.execution_id)));
        all
    }
}
