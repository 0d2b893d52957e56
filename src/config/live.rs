//! The configuration a running server reads, swapped by a reload: the keys
//! that apply at once ([`LIVE_KEYS`]) are taken from the reloaded file, every
//! other key stays as the server started with it (the listener, the data
//! directory, timeouts fixed when something was built), so what a request
//! reads is never half one file and half another.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{Config, FileConfig};

/// Declares the keys a reload applies at once, once: their names (what a
/// reload does not name as waiting for a restart) and the copy.
macro_rules! live_keys {
    ($($key:ident),* $(,)?) => {
        /// The top-level keys a reload applies at once (the tables that
        /// reload, `[[policy]]` and the rest, are the reloader's).
        pub const LIVE_KEYS: &[&str] = &[$(stringify!($key)),*];

        fn take_live(to: &mut FileConfig, from: &FileConfig) {
            $(to.$key = from.$key.clone();)*
        }
    };
}

live_keys!(
    keep_arguments,
    keep_arguments_max_bytes,
    redact_arguments,
    list_page_size,
    allow_model_decisions,
    trust_client_forms,
    native_url,
    max_gated_arguments_bytes,
    max_requests_per_credential,
    max_sessions_per_credential,
    max_sessions,
);

/// The running configuration; read with [`LiveConfig::load`] (cheap, no
/// lock), replaced by [`LiveConfig::apply`].
pub struct LiveConfig(ArcSwap<Config>);

impl LiveConfig {
    /// The configuration the server starts with.
    pub fn new(config: Config) -> Self {
        Self(ArcSwap::from_pointee(config))
    }

    /// The configuration now.
    pub fn load(&self) -> arc_swap::Guard<Arc<Config>> {
        self.0.load()
    }

    /// Takes [`LIVE_KEYS`] from `file` (a reloaded file, checked); the
    /// configuration now.
    pub fn apply(&self, file: &Config) -> Arc<Config> {
        let mut next = Config::clone(&self.0.load());
        take_live(&mut next, file);
        let next = Arc::new(next);
        self.0.store(next.clone());
        next
    }

    /// The upstreams now running (the file's and the database's,
    /// [`crate::upstream_sources`]): what a request reads of their entries
    /// (`keep_arguments`) follows them.
    pub fn set_upstreams(&self, upstreams: Vec<crate::config::UpstreamConfig>) {
        self.0.rcu(|now| {
            Arc::new(Config {
                tree: FileConfig { upstream: upstreams.clone(), ..now.tree.clone() },
                ..Config::clone(now)
            })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The live keys are what a reload takes from the file (each by the
    /// name the file spells it), and nothing else is: a file setting every
    /// live key and the listener runs as the started file with only the
    /// live keys set.
    #[test]
    fn a_reload_takes_the_live_keys_from_the_file_and_no_other() {
        let live_lines = "keep_arguments = \"all\"\nkeep_arguments_max_bytes = 7\nredact_arguments = [\"pin\"]\n\
             list_page_size = 3\nallow_model_decisions = true\ntrust_client_forms = true\n\
             native_url = \"error\"\nmax_gated_arguments_bytes = 9\nmax_requests_per_credential = 5\n\
             max_sessions_per_credential = 2\nmax_sessions = 11\n";
        let read =
            |text: &str| Config::from_text(std::path::Path::new("gatehouse.toml"), text, &Default::default()).unwrap();
        for key in LIVE_KEYS {
            assert!(live_lines.contains(&format!("{key} = ")), "the test sets {key}");
        }
        let started = read("");
        let file = read(&format!("{live_lines}listen = \"127.0.0.1:9999\"\n"));
        let live = LiveConfig::new(started.clone());
        let now = live.apply(&file);
        assert_eq!(format!("{:?}", &**now), format!("{:?}", &*read(live_lines)));
        assert_eq!(live.load().listen, started.listen, "the listener waits for a restart");
        assert_ne!(format!("{:?}", &*started), format!("{:?}", &*now));
    }
}
