//! Scoped grants: a person's "allow this tool for this agent" — for the MCP
//! session the call came from, for a while, or until revoked — so the next
//! identical calls run without a pause.
//!
//! Who a grant covers: the agent, meaning every credential with the same
//! agent name **and** owner (a re-issued or second credential of the same
//! agent is covered; another owner's agent of the same name is not). A
//! session-scoped grant also needs the call to come from the same MCP
//! session, and ends with it.
//!
//! What it covers: exactly one exposed tool name, optionally narrowed by
//! exact-value or prefix constraints on named top-level string arguments.
//! It never covers a call the policy marks `human_only` (refused when made,
//! and skipped when matched, should the rule have become `human_only`
//! since), and only an admin may make one for a tool only admins decide.
//!
//! Every call checks for a grant, so lookups read an in-memory index
//! (loaded at start, changed with every write); use counts are kept in
//! memory and written to the database in batches on a blocking thread, as
//! increments, so replicas sharing a database add up rather than overwrite.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use gatehouse_model::{ArgMatch, Decision, GrantId, GrantRequest, GrantScope, GrantView, UserId, clean_note};
use serde_json::Value;

use crate::approvals::{AccessError, ApprovalStore, Decide, may_decide};
use crate::args;
use crate::changes::{Change, ChangeLog};
use crate::clock::Clock;
use crate::db::{Backend, Conn, Db};
use crate::error::CoreError;
use crate::live::{LiveEvent, LiveHub};
use crate::normalise;
use crate::secret;
use crate::users::User;

mod approve;
mod error;
pub mod suggest;
#[cfg(test)]
mod tests;

pub use approve::{approve_and_grant, describe, note_from};
pub use error::GrantError;

/// Longest constraint value, in characters (an argument shown on the page).
const MAX_CONSTRAINT_CHARS: usize = 4096;

/// A grant in the index, with its use counters.
struct Live {
    view: GrantView,
    uses: AtomicU64,
    /// How much of `uses` the database has (loaded, or added by a flush).
    flushed: AtomicU64,
    /// 0: never used.
    last_used_ms: AtomicI64,
}

impl Live {
    fn snapshot(&self) -> GrantView {
        let last = self.last_used_ms.load(Ordering::Relaxed);
        GrantView {
            uses: self.uses.load(Ordering::Relaxed),
            last_used_ms: (last != 0).then_some(last),
            ..self.view.clone()
        }
    }

    fn expired(&self, now_ms: i64) -> bool {
        self.view.expires_at_ms.is_some_and(|at| at <= now_ms)
    }

    /// Whether it covers a call with `arguments` from `session_id` (the
    /// agent and tool are the index key).
    fn covers(&self, session_id: Option<&str>, arguments: &Value, now_ms: i64) -> bool {
        if self.expired(now_ms) {
            return false;
        }
        if let Some(bound) = &self.view.session_id
            && session_id != Some(bound.as_str())
        {
            return false;
        }
        self.view.arguments.iter().all(|(name, want)| {
            arguments.get(name).and_then(Value::as_str).is_some_and(|v| normalise::arg_matches(want, v))
        })
    }
}

/// The index key: agent name, owner's id (never the name: see
/// [`crate::approvals::may_decide`]), exposed tool.
type Key = (String, Option<UserId>, String);

fn key_of(view: &GrantView) -> Key {
    (view.agent.clone(), view.owner_id, view.tool.clone())
}

struct Inner {
    index: RwLock<HashMap<Key, Vec<Arc<Live>>>>,
    /// Grants whose use counters changed since the last flush.
    dirty: Mutex<HashSet<GrantId>>,
    /// Whether a flush is already on its way (one at a time suffices).
    flush_pending: AtomicBool,
    /// Held through a flush, so two never add the same uses.
    flushing: Mutex<()>,
    /// The shared configuration version the index was read at (PostgreSQL).
    version: Mutex<Option<i64>>,
}

/// The grants, in the database and in memory.
#[derive(Clone)]
pub struct GrantStore {
    db: Db,
    clock: Arc<dyn Clock>,
    changes: ChangeLog,
    /// Told of every change, so `/grants` stays live.
    live: LiveHub,
    inner: Arc<Inner>,
    /// Live grants one user's agents may hold (`max_grants_per_user`).
    max_per_user: usize,
    /// When a call's page offers a grant.
    suggest: suggest::Suggest,
}

/// What a matched grant tells the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    /// The grant's id (`grant:<id>` is the audit's actor).
    pub id: GrantId,
    /// Whether its use counters wait to be written ([`GrantStore::flush_uses`]).
    pub flush_needed: bool,
}

impl GrantStore {
    /// Loads the live grants. Session-scoped ones are deleted: MCP sessions
    /// do not survive a restart, so neither do their grants; expired ones go too.
    pub fn load(db: Db, clock: Arc<dyn Clock>, changes: ChangeLog, live: LiveHub) -> Result<Self, CoreError> {
        let now = clock.now_ms();
        let views = {
            let mut conn = db.conn()?;
            // On SQLite every session is this process's and died with it; on
            // PostgreSQL other replicas' sessions live on, so only expired
            // grants go (a dead replica's session grants match no session).
            let stale = match conn.backend() {
                Backend::Sqlite => {
                    "DELETE FROM grants WHERE session_id IS NOT NULL OR (expires_at IS NOT NULL AND expires_at <= ?1)"
                }
                Backend::Postgres => "DELETE FROM grants WHERE expires_at IS NOT NULL AND expires_at <= ?1",
            };
            conn.execute(stale, args![now])?;
            read_views(&mut conn)?
        };
        let version = db.config_version()?;
        let store = Self {
            db,
            clock,
            changes,
            live,
            inner: Arc::new(Inner {
                index: RwLock::default(),
                dirty: Mutex::default(),
                flush_pending: AtomicBool::new(false),
                flushing: Mutex::default(),
                version: Mutex::new(version),
            }),
            max_per_user: crate::PerUser::default().grants,
            suggest: suggest::Suggest::default(),
        };
        for view in views {
            store.insert_live(view);
        }
        Ok(store)
    }

    /// The same store, holding at most `max` live grants for one user's
    /// agents (`max_grants_per_user`).
    pub fn with_max_per_user(self, max: usize) -> Self {
        Self { max_per_user: max, ..self }
    }

    /// The same store, offering grants when `suggest` says.
    pub fn with_suggest(self, suggest: suggest::Suggest) -> Self {
        Self { suggest, ..self }
    }

    /// Refused with [`GrantError::Limit`] when the grants of `owner`'s agents
    /// (or, for an owner-less agent, the ones `created_by` made) reach
    /// `max_grants_per_user`. Counted in the database, so replicas agree.
    fn check_room(&self, owner: Option<(&str, UserId)>, created_by: &str) -> Result<(), GrantError> {
        let now = self.clock.now_ms();
        let live = "(expires_at IS NULL OR expires_at > ?2)";
        let held: i64 = match owner {
            Some((_, id)) => self.db.conn()?.query_one(
                &format!("SELECT COUNT(*) FROM grants WHERE owner_id = ?1 AND {live}"),
                args![id, now],
                |r| r.get(0),
            )?,
            None => self.db.conn()?.query_one(
                &format!("SELECT COUNT(*) FROM grants WHERE owner IS NULL AND created_by = ?1 AND {live}"),
                args![created_by, now],
                |r| r.get(0),
            )?,
        };
        let max = self.max_per_user;
        if usize::try_from(held).unwrap_or(usize::MAX) >= max {
            let whose = owner.map_or_else(|| format!("{created_by} made"), |(o, _)| format!("{o}'s agents hold"));
            return Err(GrantError::Limit(format!(
                "{whose} {held} live grants, the most one user may have (max_grants_per_user = {max}); \
                 revoke some on the Grants page first"
            )));
        }
        Ok(())
    }

    fn insert_live(&self, view: GrantView) {
        let live = Arc::new(Live::new(view));
        let mut index = self.inner.index.write().unwrap_or_else(|p| p.into_inner());
        index.entry(key_of(&live.view)).or_default().push(live);
    }

    /// Removes grants from the index (by predicate); returns their ids.
    fn remove_live(&self, mut gone: impl FnMut(&Live) -> bool) -> Vec<GrantId> {
        let mut removed = Vec::new();
        let mut index = self.inner.index.write().unwrap_or_else(|p| p.into_inner());
        index.retain(|_, grants| {
            grants.retain(|g| {
                let drop = gone(g);
                if drop {
                    removed.push(g.view.id.clone());
                }
                !drop
            });
            !grants.is_empty()
        });
        drop(index);
        if !removed.is_empty() {
            self.live.publish(LiveEvent::GrantsChanged);
        }
        removed
    }

    /// On PostgreSQL, re-reads the grants when any replica changed them
    /// (the shared configuration version moved), keeping the use counters of
    /// grants already known. One indexed read; nothing on SQLite.
    pub fn sync(&self) -> Result<(), CoreError> {
        let Some(version) = self.db.config_version()? else { return Ok(()) };
        if *self.inner.version.lock().unwrap_or_else(|p| p.into_inner()) == Some(version) {
            return Ok(());
        }
        let views = read_views(&mut self.db.conn()?)?;
        let known: HashMap<GrantId, Arc<Live>> = {
            let index = self.inner.index.read().unwrap_or_else(|p| p.into_inner());
            index.values().flatten().map(|g| (g.view.id.clone(), g.clone())).collect()
        };
        let mut fresh: HashMap<Key, Vec<Arc<Live>>> = HashMap::new();
        for view in views {
            let live = known.get(&view.id).cloned().unwrap_or_else(|| Arc::new(Live::new(view)));
            fresh.entry(key_of(&live.view)).or_default().push(live);
        }
        *self.inner.index.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        *self.inner.version.lock().unwrap_or_else(|p| p.into_inner()) = Some(version);
        self.live.publish_local(LiveEvent::GrantsChanged);
        Ok(())
    }

    /// The grant that lets this call through now, if any; counts the use in
    /// memory. Pure memory on SQLite (called for every gated call); the
    /// caller runs [`GrantStore::sync`] first on PostgreSQL. The caller has
    /// checked that the call is not `human_only`.
    pub fn find(
        &self,
        agent: &str,
        owner_id: Option<UserId>,
        tool: &str,
        session_id: Option<&str>,
        arguments: &Value,
    ) -> Option<Matched> {
        let now = self.clock.now_ms();
        let key: Key = (agent.to_string(), owner_id, tool.to_string());
        let live = {
            let index = self.inner.index.read().unwrap_or_else(|p| p.into_inner());
            index.get(&key)?.iter().find(|g| g.covers(session_id, arguments, now))?.clone()
        };
        live.uses.fetch_add(1, Ordering::Relaxed);
        live.last_used_ms.store(now, Ordering::Relaxed);
        self.inner.dirty.lock().unwrap_or_else(|p| p.into_inner()).insert(live.view.id.clone());
        let flush_needed = !self.inner.flush_pending.swap(true, Ordering::AcqRel);
        Some(Matched { id: live.view.id.clone(), flush_needed })
    }

    /// Adds the uses counted since the last flush to the database (another
    /// replica's uses of the same grant add up, never overwrite), keeping the
    /// latest use time, and takes the database's totals as the counts here.
    /// Blocking: run it on a blocking thread (the gate does
    /// after a use, one flush at a time).
    pub fn flush_uses(&self) -> Result<usize, CoreError> {
        let _flushing = self.inner.flushing.lock().unwrap_or_else(|p| p.into_inner());
        self.inner.flush_pending.store(false, Ordering::Release);
        let ids: Vec<GrantId> =
            std::mem::take(&mut *self.inner.dirty.lock().unwrap_or_else(|p| p.into_inner())).into_iter().collect();
        if ids.is_empty() {
            return Ok(0);
        }
        // Each grant with the uses counted so far, of which `flushed` are written.
        let counters: Vec<(Arc<Live>, u64, i64)> = {
            let index = self.inner.index.read().unwrap_or_else(|p| p.into_inner());
            index
                .values()
                .flatten()
                .filter(|g| ids.contains(&g.view.id))
                .map(|g| (g.clone(), g.uses.load(Ordering::Relaxed), g.last_used_ms.load(Ordering::Relaxed)))
                .collect()
        };
        // The database's totals after adding, which include other replicas' uses.
        let written = self.db.conn()?.transaction(|tx| {
            let mut totals = Vec::with_capacity(counters.len());
            for (g, uses, last) in &counters {
                let delta = uses.saturating_sub(g.flushed.load(Ordering::Relaxed));
                totals.push(tx.query_opt(
                    "UPDATE grants SET uses = uses + ?2,
                         last_used_at = CASE WHEN last_used_at IS NULL OR last_used_at < ?3 THEN ?3 ELSE last_used_at END
                     WHERE id = ?1
                     RETURNING uses, last_used_at",
                    args![g.view.id, i64::try_from(delta).unwrap_or(i64::MAX), last],
                    |r| Ok((r.get::<i64>(0)?.max(0) as u64, r.get::<Option<i64>>(1)?)),
                )?);
            }
            Ok(totals)
        });
        let totals = match written {
            Ok(totals) => totals,
            Err(e) => {
                // Still unwritten: the next flush adds them.
                self.inner.dirty.lock().unwrap_or_else(|p| p.into_inner()).extend(ids);
                return Err(e);
            }
        };
        for ((g, uses, _), total) in counters.iter().zip(totals) {
            match total {
                // Uses counted here since `uses` was read stay on top of the total.
                Some((total, last)) => {
                    if total >= *uses {
                        g.uses.fetch_add(total - uses, Ordering::Relaxed);
                    } else {
                        g.uses.fetch_sub(uses - total, Ordering::Relaxed);
                    }
                    g.flushed.store(total, Ordering::Relaxed);
                    g.last_used_ms.fetch_max(last.unwrap_or(0), Ordering::Relaxed);
                }
                // Revoked meanwhile (by another replica): nothing left to add to.
                None => g.flushed.store(*uses, Ordering::Relaxed),
            }
        }
        self.live.publish(LiveEvent::GrantsChanged);
        Ok(counters.len())
    }

    /// Live grants `user` may see (everyone's for admins, their agents'
    /// otherwise), newest first. Expired ones are swept first (database
    /// work: call it off the async threads).
    pub fn list_for(&self, user: &User) -> Result<Vec<GrantView>, CoreError> {
        self.sweep_expired()?;
        let index = self.inner.index.read().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<GrantView> =
            index.values().flatten().filter(|g| may_decide(user, g.view.owner_id)).map(|g| g.snapshot()).collect();
        all.sort_by(|a, b| b.created_at_ms.cmp(&a.created_at_ms).then(a.id.cmp(&b.id)));
        Ok(all)
    }

    /// Drops grants past their expiry from memory and the database.
    pub fn sweep_expired(&self) -> Result<usize, CoreError> {
        let now = self.clock.now_ms();
        let gone = self.remove_live(|g| g.expired(now));
        self.db.conn()?.execute("DELETE FROM grants WHERE expires_at IS NOT NULL AND expires_at <= ?1", args![now])?;
        Ok(gone.len())
    }

    /// Ends the grants bound to an MCP session that closed: at once in
    /// memory; in the database through its one ordered writer (no I/O here:
    /// a session's end is a destructor), flushed before shutdown like every
    /// queued write.
    pub fn end_session(&self, session_id: &str) -> usize {
        let gone = self.remove_live(|g| g.view.session_id.as_deref() == Some(session_id));
        if gone.is_empty() {
            return 0;
        }
        self.db.queue(Box::new(EndSession(session_id.to_string())));
        gone.len()
    }

    /// Revokes a grant at once, if `user` owns its agent or is an admin;
    /// recorded in the change log.
    pub fn revoke_for(&self, user: &User, id: &str) -> Result<GrantView, GrantError> {
        let found = {
            let index = self.inner.index.read().unwrap_or_else(|p| p.into_inner());
            index.values().flatten().find(|g| g.view.id == id).map(|g| g.snapshot())
        };
        let view = found.ok_or_else(|| GrantError::NotFound("no such grant".into()))?;
        if !may_decide(user, view.owner_id) {
            return Err(GrantError::Forbidden);
        }
        self.remove_live(|g| g.view.id == id);
        self.db.conn()?.transaction(|tx| {
            tx.execute("DELETE FROM grants WHERE id = ?1", args![id])?;
            Db::bump_config(tx)
        })?;
        let actor = user.actor().to_string();
        self.changes.record(Change {
            actor: &actor,
            subject: "grant",
            target: id,
            action: "revoke",
            detail: Some(&describe(&view)),
        })?;
        tracing::info!(grant = %id, by = %actor, "grant revoked");
        Ok(view)
    }

    /// Ends every grant of the agents of the user with id `owner`, at once
    /// in memory and in the database: the user is being removed. Returns
    /// how many ended.
    pub fn end_owner(&self, owner: UserId) -> Result<usize, CoreError> {
        let gone = self.remove_live(|g| g.view.owner_id == Some(owner));
        let deleted = self.db.conn()?.transaction(|tx| {
            let n = tx.execute("DELETE FROM grants WHERE owner_id = ?1", args![owner])?;
            Db::bump_config(tx)?;
            Ok(n)
        })?;
        Ok(gone.len().max(deleted))
    }

    /// How many live grants agent `agent` of the user with id `owner` holds
    /// (what a client that takes its name inherits).
    pub fn count_for_agent(&self, agent: &str, owner: UserId) -> usize {
        let now = self.clock.now_ms();
        let index = self.inner.index.read().unwrap_or_else(|p| p.into_inner());
        index
            .iter()
            .filter(|((a, o, _), _)| a == agent && *o == Some(owner))
            .map(|(_, grants)| grants.iter().filter(|g| !g.expired(now)).count())
            .sum()
    }

    /// The names of the agents of the user with id `owner` that hold live grants.
    pub fn agents_of(&self, owner: UserId) -> Vec<String> {
        let index = self.inner.index.read().unwrap_or_else(|p| p.into_inner());
        let mut names: Vec<String> =
            index.keys().filter(|(_, o, _)| *o == Some(owner)).map(|(a, _, _)| a.clone()).collect();
        names.sort();
        names.dedup();
        names
    }

    fn insert(&self, view: GrantView, actor: &str) -> Result<(), CoreError> {
        let arguments = serde_json::to_string(&view.arguments).unwrap_or_else(|_| "{}".into());
        self.db.conn()?.transaction(|tx| {
            tx.execute(
                "INSERT INTO grants (id, agent, owner, tool, arguments, scope, session_id, created_by, execution_id,
                                     created_at, expires_at, uses, last_used_at, owner_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0, NULL, ?12)",
                args![
                    view.id,
                    view.agent,
                    view.owner,
                    view.tool,
                    arguments,
                    view.scope.as_str(),
                    view.session_id,
                    view.created_by,
                    view.execution_id,
                    view.created_at_ms,
                    view.expires_at_ms,
                    view.owner_id,
                ],
            )?;
            Db::bump_config(tx)
        })?;
        self.changes.record(Change {
            actor,
            subject: "grant",
            target: &view.id,
            action: "grant",
            detail: Some(&describe(&view)),
        })?;
        self.insert_live(view);
        self.live.publish(LiveEvent::GrantsChanged);
        Ok(())
    }
}

/// Every grant row (but one whose owner has a name and no id: that owner was
/// removed, and it would read as an owner-less agent's).
fn read_views(conn: &mut Conn<'_>) -> Result<Vec<GrantView>, CoreError> {
    conn.query(
        "SELECT id, agent, owner, tool, arguments, scope, session_id, created_by, execution_id, created_at,
                expires_at, uses, last_used_at, owner_id FROM grants WHERE owner IS NULL OR owner_id IS NOT NULL",
        args![],
        |r| {
            let arguments: String = r.get(4)?;
            let scope: String = r.get(5)?;
            Ok(GrantView {
                id: r.get(0)?,
                agent: r.get(1)?,
                owner: r.get(2)?,
                owner_id: r.get(13)?,
                tool: r.get(3)?,
                arguments: serde_json::from_str(&arguments).unwrap_or_default(),
                scope: GrantScope::parse(&scope).unwrap_or(GrantScope::Session),
                session_id: r.get(6)?,
                created_by: r.get(7)?,
                execution_id: r.get(8)?,
                created_at_ms: r.get(9)?,
                expires_at_ms: r.get(10)?,
                uses: r.get::<i64>(11)?.max(0) as u64,
                last_used_ms: r.get(12)?,
            })
        },
    )
}

impl Live {
    fn new(view: GrantView) -> Self {
        Self {
            uses: AtomicU64::new(view.uses),
            flushed: AtomicU64::new(view.uses),
            last_used_ms: AtomicI64::new(view.last_used_ms.unwrap_or(0)),
            view,
        }
    }
}

/// The rows of a closed MCP session's grants, deleted by the writer.
struct EndSession(String);

impl crate::db::Write for EndSession {
    fn write(&self, conn: &mut crate::db::Conn<'_>) -> crate::error::Result<()> {
        conn.execute("DELETE FROM grants WHERE session_id = ?1", args![self.0])?;
        Db::bump_config(conn)
    }
}
