//! Upstreams added, removed or restarted while the server runs (a reloaded
//! config file): each entry that left is stopped, each new one started, and
//! each whose entry changed is stopped and started again with its new one.
//! Agents keep their MCP sessions and are told the lists changed.

use std::collections::HashMap;

use super::{Slot, Upstreams};
use crate::config::UpstreamConfig;

/// What a reconfiguration did, by upstream name (each sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconfigured {
    /// Started: new entries.
    pub added: Vec<String>,
    /// Stopped and forgotten: entries that left.
    pub removed: Vec<String>,
    /// Stopped and started again: entries that changed.
    pub restarted: Vec<String>,
}

impl Reconfigured {
    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.restarted.is_empty()
    }
}

impl Upstreams {
    /// Makes the running upstreams those of `configs`.
    pub async fn reconfigure(&self, configs: &[UpstreamConfig]) -> Reconfigured {
        let running: HashMap<String, UpstreamConfig> =
            self.slots().iter().map(|(name, slot)| (name.clone(), slot.config.clone())).collect();
        let mut done = Reconfigured::default();
        for (name, was) in &running {
            match configs.iter().find(|c| c.name == *name) {
                None => done.removed.push(name.clone()),
                Some(now) if now != was => done.restarted.push(name.clone()),
                Some(_) => {}
            }
        }
        done.added = configs.iter().filter(|c| !running.contains_key(&c.name)).map(|c| c.name.clone()).collect();
        if done.is_empty() {
            return done;
        }
        for name in done.removed.iter().chain(&done.restarted) {
            // Ended before its slot goes: a stopped supervisor writes nothing after.
            self.stop_supervisor(name).await;
            self.forget_links(name);
            self.slots_mut().remove(name);
            tracing::info!(upstream = %name, "upstream stopped: its config entry left or changed");
        }
        for config in configs.iter().filter(|c| done.added.contains(&c.name) || done.restarted.contains(&c.name)) {
            self.slots_mut().insert(config.name.clone(), Slot::new(config));
            if config.enabled {
                self.spawn_supervisor(config);
            }
        }
        // What each exposes depends on the others' names: recompute, show, tell.
        self.update("", |_| {});
        self.announce_lists_changed();
        for list in [&mut done.added, &mut done.removed, &mut done.restarted] {
            list.sort();
        }
        done
    }
}
