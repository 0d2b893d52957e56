//! Costly decisions, off the async threads. A decision whose conditions may
//! cost more than [`INLINE_COST`] ([`super::decide::condition_cost`]: up to
//! 100 ms of one core each, on large arguments) runs on tokio's blocking
//! pool behind a bound of its own, as password hashing does
//! (`users/hashing.rs`): not in the store's lane ([`crate::db::Db::run`]),
//! whose few slots are the database's connections, which a burst of costly
//! conditions must not hold from the people deciding. Most decisions (no
//! condition, or small arguments) stay where they are: handing one to
//! another thread costs more than it does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use serde_json::Value;
use tokio::sync::Semaphore;

use super::decide::{CallDetail, Facts, Hints, Who};
use crate::error::{CoreError, Result};

/// The most a decision's conditions may cost and still be evaluated on the
/// async thread that asks (about 100 µs).
pub const INLINE_COST: u64 = 100_000;

/// At most this many costly decisions wait for a thread at once; one more
/// is refused (the gate refuses the call: fail closed).
pub const MAX_WAITING: usize = 64;

/// Costly decisions running at once: half the cores (at least one, at most
/// four), so the async threads keep the rest.
static LANE: LazyLock<Arc<Semaphore>> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    Arc::new(Semaphore::new((cores / 2).clamp(1, 4)))
});

static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Runs `work` (a decision) on the blocking pool once the lane has room;
/// it runs to its end even if the caller stops waiting. `Err` if
/// [`MAX_WAITING`] are waiting already, or if it panicked.
pub(super) async fn run<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    // Counted out on drop: a caller that stops waiting leaves the line.
    let waiting = Waiting::join();
    if waiting.ahead >= MAX_WAITING {
        return Err(CoreError::Limit(format!(
            "{MAX_WAITING} decisions with costly conditions are waiting already; try again shortly"
        )));
    }
    let permit = LANE.clone().acquire_owned().await.map_err(|e| CoreError::Join(e.to_string()))?;
    drop(waiting);
    tokio::task::spawn_blocking(move || {
        let _room = permit;
        work()
    })
    .await
    .map_err(|e| CoreError::Join(e.to_string()))
}

/// One place in the line for the lane.
struct Waiting {
    /// How many were waiting before this one.
    ahead: usize,
}

impl Waiting {
    fn join() -> Self {
        Waiting { ahead: WAITING.fetch_add(1, Ordering::SeqCst) }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A decision's [`Facts`], owned, to be moved to another thread.
pub(super) struct OwnedFacts {
    tool: String,
    upstream: Option<String>,
    hints: Hints,
    who: Option<(String, Option<String>, Option<String>, bool)>,
    call: Option<(Value, Value, i64)>,
}

impl OwnedFacts {
    /// A copy of `facts`.
    pub(super) fn of(facts: &Facts<'_>) -> Self {
        OwnedFacts {
            tool: facts.tool.to_string(),
            upstream: facts.upstream.map(str::to_string),
            hints: facts.hints,
            who: facts
                .who
                .map(|w| (w.agent.to_string(), w.owner.map(str::to_string), w.thread.map(str::to_string), w.by_admin)),
            call: facts.call.map(|c| (c.arguments.clone(), c.annotations.clone(), c.now_ms)),
        }
    }

    /// The facts again, borrowed from the copy.
    pub(super) fn facts(&self) -> Facts<'_> {
        Facts {
            tool: &self.tool,
            upstream: self.upstream.as_deref(),
            hints: self.hints,
            who: self.who.as_ref().map(|(agent, owner, thread, by_admin)| Who {
                agent,
                owner: owner.as_deref(),
                thread: thread.as_deref(),
                by_admin: *by_admin,
            }),
            call: self.call.as_ref().map(|(arguments, annotations, now_ms)| CallDetail {
                arguments,
                annotations,
                now_ms: *now_ms,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::policy::decide::{RuleSet, condition_cost, decide_with};
    use crate::policy::{Action, Rule};

    fn facts<'a>(arguments: &'a Value, annotations: &'a Value) -> Facts<'a> {
        Facts {
            tool: "files__write",
            upstream: Some("files"),
            hints: Hints::default(),
            who: Some(Who { agent: "cursor", owner: Some("alice"), thread: Some("t1"), by_admin: true }),
            call: Some(CallDetail { arguments, annotations, now_ms: 1 }),
        }
    }

    fn rules() -> RuleSet {
        let when = r#"args.files.exists(f, path_under(f, "/srv/prod/"))"#;
        RuleSet::new(vec![Rule { when: Some(when.into()), ..Rule::new("files__*".parse().unwrap(), Action::Block) }])
    }

    #[test]
    fn the_cost_of_a_call_grows_with_its_arguments_and_counts_only_rules_in_scope() {
        let rules = rules();
        let annotations = json!({});
        let small = json!({"files": ["/tmp/a"]});
        let large = json!({"files": vec!["/tmp/a"; 5_000]});
        let (small_cost, large_cost) = (
            condition_cost(&rules, &facts(&small, &annotations)),
            condition_cost(&rules, &facts(&large, &annotations)),
        );
        assert!(small_cost <= INLINE_COST, "a small call is decided where it is asked: {small_cost}");
        assert!(large_cost > INLINE_COST, "a large one off the async threads: {large_cost}");
        let other_tool = Facts { tool: "git__push", ..facts(&large, &annotations) };
        assert_eq!(condition_cost(&rules, &other_tool), 0, "a rule for other tools costs nothing");
        assert_eq!(condition_cost(&rules, &Facts { call: None, ..facts(&large, &annotations) }), 0, "nor a listing");
    }

    #[test]
    fn owned_facts_are_the_same_facts() {
        let (arguments, annotations) = (json!({"files": ["/srv/./prod/db"]}), json!({"readOnlyHint": false}));
        let original = facts(&arguments, &annotations);
        let owned = OwnedFacts::of(&original);
        let copy = owned.facts();
        assert_eq!(format!("{original:?}"), format!("{copy:?}"));
        assert_eq!(decide_with(&rules(), &copy), decide_with(&rules(), &original));
        assert_eq!(decide_with(&rules(), &copy).action, Action::Block, "the escape is caught");
    }

    #[tokio::test]
    async fn decisions_run_off_the_async_threads_and_all_finish() {
        let rules = Arc::new(rules());
        let mut running = tokio::task::JoinSet::new();
        for n in 0..8 {
            let (rules, annotations) = (rules.clone(), json!({}));
            let arguments = json!({ "files": [if n % 2 == 0 { "/srv//prod/db" } else { "/tmp/db" }] });
            let owned = OwnedFacts::of(&facts(&arguments, &annotations));
            running.spawn(async move { (n, run(move || decide_with(&rules, &owned.facts()).action).await) });
        }
        while let Some(done) = running.join_next().await {
            let (n, action) = done.unwrap();
            let want = if n % 2 == 0 { Action::Block } else { Action::RequireApproval };
            assert_eq!(action.unwrap(), want, "call {n}");
        }
        assert_eq!(WAITING.load(Ordering::SeqCst), 0, "nobody is left in line");
    }
}
