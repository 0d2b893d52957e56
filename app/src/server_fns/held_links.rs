//! One-time invite and reset links an admin made whose page has not shown
//! them yet. Like minted tokens, a link lives only here, in memory, until
//! the page shows it once to the admin who made it (at most ten minutes):
//! its token never reaches the database (only its hash does), a log, or
//! another URL, and a form posted without JavaScript still gets to see it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gatehouse_model::PasswordLink;

/// How long a made link waits to be shown.
const HOLD: Duration = Duration::from_secs(600);
/// The most links waiting at once (the oldest goes first).
const MOST: usize = 256;

/// Links waiting to be shown, each to the admin who made it. Cheap to clone.
#[derive(Clone)]
pub struct HeldLinks {
    base_url: Arc<str>,
    held: Arc<Mutex<HashMap<String, Held>>>,
}

struct Held {
    admin: String,
    link: PasswordLink,
    at: Instant,
}

impl HeldLinks {
    /// An empty store for a server reachable at `base_url`.
    pub fn new(base_url: &str) -> Self {
        Self { base_url: base_url.trim_end_matches('/').into(), held: Arc::default() }
    }

    /// The server's base URL (links start with it).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Keeps `link` for `admin` to see once.
    pub fn hold(&self, admin: &str, link: PasswordLink) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.retain(|_, h| h.at.elapsed() < HOLD);
        if held.len() >= MOST
            && let Some(oldest) = held.iter().min_by_key(|(_, h)| h.at).map(|(id, _)| id.clone())
        {
            held.remove(&oldest);
        }
        held.insert(link.id.clone(), Held { admin: admin.to_string(), link, at: Instant::now() });
    }

    /// The link held as `id`, if `admin` made it and it was not shown yet.
    pub fn take(&self, id: &str, admin: &str) -> Option<PasswordLink> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match held.get(id) {
            Some(h) if h.admin == admin && h.at.elapsed() < HOLD => held.remove(id).map(|h| h.link),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_model::LinkPurpose;

    #[test]
    fn a_link_is_shown_once_and_only_to_who_made_it() {
        let store = HeldLinks::new("http://gh.test/");
        assert_eq!(store.base_url(), "http://gh.test");
        let link = PasswordLink {
            id: "link_1".into(),
            username: "bob".into(),
            purpose: LinkPurpose::Invite,
            url: "http://gh.test/set-password?token=t".into(),
            expires_ms: 1,
        };
        store.hold("ada", link.clone());
        assert_eq!(store.take("link_1", "root"), None, "not another admin's");
        assert_eq!(store.take("link_1", "ada"), Some(link));
        assert_eq!(store.take("link_1", "ada"), None, "once");
    }
}
