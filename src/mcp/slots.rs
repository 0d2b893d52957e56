//! How many `/mcp` requests run at once, per credential and in all. A held
//! wait (a `resume` long-poll, a held `input_required` retry, a call waiting
//! on its upstream, a GET stream) keeps its slot until its response has
//! ended, so one credential cannot hold every connection, and agents together
//! never take the places kept for the console, sign-in and `/healthz`
//! (`reserved_connections`). A held call ends, and gives its slot back, when
//! its upstream answers or gives up, when the agent cancels it (rmcp then
//! closes the call's stream), or when the upstream's `call_timeout` passes;
//! a request relayed to the agent for it is bounded by the same.
//!
//! What an agent posts back takes no slot (`auth.rs`): its answers to
//! relayed requests and its notifications (`notifications/cancelled`
//! included) are taken at once, and the calls waiting for them already hold
//! slots; making them wait for a free one could wait for ever.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why a request got no slot; each names the config key that bounds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SlotRefused {
    /// The credential has as many requests in progress as it may.
    #[error(
        "this credential already has {0} requests in progress (max_requests_per_credential); \
         wait for one to finish before sending another"
    )]
    Credential(usize),
    /// All agents together have as many requests in progress as they may.
    #[error(
        "Gatehouse is serving {0} MCP requests at once, all it serves to agents \
         (max_connections minus reserved_connections); retry shortly"
    )]
    Full(usize),
}

/// The counts; one per process (each replica bounds its own connections).
#[derive(Debug)]
pub struct RequestSlots {
    /// `max_requests_per_credential` (a reload sets it).
    per_credential: AtomicUsize,
    total: usize,
    all: Arc<Semaphore>,
    held: Mutex<HashMap<String, usize>>,
}

/// One request's place; given back when dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<RequestSlots>,
    credential: String,
    _all: OwnedSemaphorePermit,
}

impl RequestSlots {
    /// At most `per_credential` requests per credential and `total` in all.
    pub fn new(per_credential: usize, total: usize) -> Arc<Self> {
        Arc::new(Self {
            per_credential: AtomicUsize::new(per_credential),
            total,
            all: Arc::new(Semaphore::new(total)),
            held: Mutex::default(),
        })
    }

    /// Sets the per-credential bound (a reload); requests in progress keep
    /// their slots.
    pub fn set_per_credential(&self, per_credential: usize) {
        self.per_credential.store(per_credential, Ordering::Relaxed);
    }

    /// A slot for one request of `credential`, or why there is none.
    pub fn claim(self: &Arc<Self>, credential: &str) -> Result<Slot, SlotRefused> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let per_credential = self.per_credential.load(Ordering::Relaxed);
        if held.get(credential).is_some_and(|&count| count >= per_credential) {
            return Err(SlotRefused::Credential(per_credential));
        }
        let all = self.all.clone().try_acquire_owned().map_err(|_| SlotRefused::Full(self.total))?;
        match held.get_mut(credential) {
            Some(count) => *count += 1,
            None => {
                held.insert(credential.to_string(), 1);
            }
        }
        Ok(Slot { slots: self.clone(), credential: credential.to_string(), _all: all })
    }

    /// Requests `credential` has in progress.
    pub fn in_progress(&self, credential: &str) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).get(credential).copied().unwrap_or(0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&self.credential) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.credential);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_gets_its_share_and_all_together_no_more_than_the_total() {
        let slots = RequestSlots::new(2, 3);
        let a1 = slots.claim("a").unwrap();
        let _a2 = slots.claim("a").unwrap();
        assert_eq!(slots.claim("a").unwrap_err(), SlotRefused::Credential(2));
        let _b1 = slots.claim("b").unwrap();
        assert_eq!(slots.claim("b").unwrap_err(), SlotRefused::Full(3), "the total holds across credentials");
        drop(a1);
        assert_eq!(slots.in_progress("a"), 1);
        let _b2 = slots.claim("b").unwrap();
        assert!(slots.claim("a").is_err());
    }

    #[test]
    fn a_refused_claim_takes_nothing() {
        let slots = RequestSlots::new(1, 1);
        let held = slots.claim("a").unwrap();
        for _ in 0..5 {
            assert!(slots.claim("a").is_err());
            assert!(slots.claim("b").is_err());
        }
        drop(held);
        assert_eq!(slots.in_progress("a"), 0);
        assert!(slots.held.lock().unwrap().is_empty(), "no entry is left for an idle credential");
        slots.claim("b").unwrap();
    }
}
