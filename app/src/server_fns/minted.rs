//! Credentials minted in the browser whose token has not been shown yet.
//! The token lives only here, in memory, until the page that minted it
//! shows it once (at most ten minutes): it never reaches the database or a
//! URL, and a form posted without JavaScript still gets to see it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gatehouse_model::MintedCredential;

/// How long a minted token waits to be shown.
const HOLD: Duration = Duration::from_secs(600);
/// The most tokens waiting at once (the oldest goes first).
const MOST: usize = 256;

/// Tokens waiting to be shown, each to the user who minted it. Cheap to clone.
#[derive(Clone)]
pub struct MintedTokens {
    base_url: Arc<str>,
    held: Arc<Mutex<HashMap<String, Held>>>,
}

struct Held {
    username: String,
    minted: MintedCredential,
    at: Instant,
}

impl MintedTokens {
    /// An empty store for a server reachable at `base_url`.
    pub fn new(base_url: &str) -> Self {
        Self { base_url: base_url.trim_end_matches('/').into(), held: Arc::default() }
    }

    /// The `/mcp` URL agents connect to.
    pub fn endpoint(&self) -> String {
        format!("{}/mcp", self.base_url)
    }

    /// Keeps `minted` for `username` to see once.
    pub fn hold(&self, username: &str, minted: MintedCredential) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.retain(|_, h| h.at.elapsed() < HOLD);
        if held.len() >= MOST
            && let Some(oldest) = held.iter().min_by_key(|(_, h)| h.at).map(|(id, _)| id.clone())
        {
            held.remove(&oldest);
        }
        held.insert(minted.id.clone(), Held { username: username.to_string(), minted, at: Instant::now() });
    }

    /// The token minted as `id`, if `username` minted it and it was not shown yet.
    pub fn take(&self, id: &str, username: &str) -> Option<MintedCredential> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match held.get(id) {
            Some(h) if h.username == username && h.at.elapsed() < HOLD => held.remove(id).map(|h| h.minted),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_shown_once_and_only_to_who_minted_it() {
        let store = MintedTokens::new("http://gh.test/");
        assert_eq!(store.endpoint(), "http://gh.test/mcp");
        let minted = MintedCredential {
            id: "cred_1".into(),
            agent: "a".into(),
            thread: None,
            owner: Some("ada".into()),
            token: "t".into(),
            endpoint: store.endpoint(),
        };
        store.hold("ada", minted.clone());
        assert_eq!(store.take("cred_1", "bob"), None, "not another user's");
        assert_eq!(store.take("cred_1", "ada"), Some(minted));
        assert_eq!(store.take("cred_1", "ada"), None, "once");
    }
}
