//! The audit log: every execution state change, who caused it and when, with
//! the argument digest (never the arguments themselves).

use std::sync::Arc;

use gatehouse_model::{
    Actor, AuditEntry, CallRow, CredentialId, ExecutionId, HistoryFilter, KeptArguments, State, UserId,
};

use crate::args;
use crate::clock::{Clock, rfc3339};
use crate::db::{Arg, Conn, Db, FromValue, Row as DbRow, Value};
use crate::error::CoreError;
use crate::error::Result;

/// What is written for one transition.
pub struct Entry<'a> {
    /// The execution.
    pub execution_id: &'a str,
    /// New state.
    pub state: State,
    /// Tool name.
    pub tool: &'a str,
    /// The upstream it goes to (none for Gatehouse's own tools).
    pub upstream: Option<&'a str>,
    /// Argument digest.
    pub arguments_digest: &'a str,
    /// Agent.
    pub agent: &'a str,
    /// Owner.
    pub owner: Option<&'a str>,
    /// The owner's user id (as the credential or execution carries it; an
    /// execution's later entries keep its first entry's).
    pub owner_id: Option<UserId>,
    /// The calling credential.
    pub credential_id: Option<&'a str>,
    /// Its thread.
    pub thread: Option<&'a str>,
    /// Actor.
    pub actor: Option<&'a str>,
    /// Detail.
    pub detail: Option<&'a str>,
    /// The call's arguments as kept (on its first entry, when they are).
    pub arguments: Option<&'a KeptArguments>,
}

/// The id prefix of a call that ran (or was refused) at once, without a
/// pause: one entry per call. A paused call's executions are `exec_…`.
pub const AT_ONCE_PREFIX: &str = "call";

/// Entries in flight past which [`AuditLog::append`] waits for room.
pub use crate::db::WRITE_CAPACITY as QUEUE_CAPACITY;

mod activity;

/// An entry as it is written (owned, stamped when it happened).
struct Row {
    execution_id: String,
    at_ms: i64,
    state: State,
    tool: String,
    upstream: Option<String>,
    arguments_digest: String,
    agent: String,
    owner: Option<String>,
    owner_id: Option<UserId>,
    credential_id: Option<String>,
    thread: Option<String>,
    actor: Option<String>,
    detail: Option<String>,
    arguments: Option<String>,
}

/// The longest name an entry keeps (tool, upstream, agent, owner, thread,
/// actor, ids; characters): every one of them is already bounded where it
/// is made, and this holds whatever a caller passes.
pub const MAX_NAME_CHARS: usize = 256;
/// The longest detail an entry keeps (a reason, an error; characters).
/// Longer text is cut with "…": a value an agent sent never fills the log.
pub const MAX_DETAIL_CHARS: usize = 1000;

/// `text` cut at `max` characters, with "…" where it was cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

impl Row {
    /// The entry, owned and bounded ([`MAX_NAME_CHARS`], [`MAX_DETAIL_CHARS`]).
    fn new(e: Entry<'_>, at_ms: i64) -> Self {
        let name = |s: &str| clip(s, MAX_NAME_CHARS);
        let owned = |s: Option<&str>| s.map(name);
        Self {
            execution_id: name(e.execution_id),
            at_ms,
            state: e.state,
            tool: name(e.tool),
            upstream: owned(e.upstream),
            arguments_digest: name(e.arguments_digest),
            agent: name(e.agent),
            owner: owned(e.owner),
            owner_id: e.owner_id,
            credential_id: owned(e.credential_id),
            thread: owned(e.thread),
            actor: owned(e.actor),
            detail: e.detail.map(|d| clip(d, MAX_DETAIL_CHARS)),
            // Bounded where they are kept (`keep_arguments_max_bytes`).
            arguments: e.arguments.and_then(|a| serde_json::to_string(a).ok()),
        }
    }
}

impl crate::db::Write for Row {
    fn write(&self, conn: &mut Conn<'_>) -> Result<()> {
        insert(conn, self)
    }
}

/// Appends `e` on `conn`.
fn insert(conn: &mut Conn<'_>, e: &Row) -> Result<()> {
    conn.execute(
        // The owner is kept by user id too (the name alone could be someone
        // else's later), the id the credential or execution carries, never
        // looked up by name (a call still running when its owner was removed
        // must not land in the history of a namesake added since). An
        // execution's later entries carry its first entry's id: a removal
        // clears it there, and what is written afterwards stays no one's.
        "INSERT INTO audit_events (execution_id, at, state, tool, arguments_digest, agent, owner, actor, detail, credential_id, thread, upstream, arguments, owner_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13,
           CASE WHEN EXISTS (SELECT 1 FROM audit_events WHERE execution_id = ?1)
             THEN (SELECT owner_id FROM audit_events WHERE execution_id = ?1 ORDER BY id LIMIT 1)
             ELSE (SELECT id FROM users WHERE id = ?14) END)",
        args![e.execution_id, e.at_ms, e.state, e.tool, e.arguments_digest, e.agent, e.owner, e.actor, e.detail, e.credential_id, e.thread, e.upstream, e.arguments, e.owner_id],
    )?;
    Ok(())
}

/// Append-only log in the database, written by the database's ordered
/// writer ([`Db::queue`]); every read here first waits for what was queued.
#[derive(Clone)]
pub struct AuditLog {
    db: Db,
    clock: Arc<dyn Clock>,
}

impl AuditLog {
    /// A log over `db`.
    pub fn new(db: Db, clock: Arc<dyn Clock>) -> Self {
        Self { db, clock }
    }

    /// The database the log is kept in.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Queues one entry, stamped now, without waiting: a paused execution's
    /// transition, queued under the approval store's lock (in transition
    /// order, before the row change it explains). The store waits for the
    /// writer before anything acts on the transition.
    pub fn record(&self, e: Entry<'_>) {
        self.db.queue(Box::new(Row::new(e, self.clock.now_ms())));
    }

    /// Queues one entry for the request path, where nothing waits on the
    /// entry but a later read, which sees it ([`AuditLog::flush`]). Returns
    /// at once, unless [`QUEUE_CAPACITY`] writes are in flight: then it
    /// waits for room.
    pub async fn append(&self, e: Entry<'_>) -> Result<()> {
        self.db.queue_bounded(Box::new(Row::new(e, self.clock.now_ms()))).await
    }

    /// Waits until every entry queued so far is written. Every read here
    /// does it first; shutdown does it before the process exits.
    pub fn flush(&self) {
        self.db.flush_writes();
    }

    /// How many entries `actor` caused at or after `since_ms` (a shadow
    /// rule's calls since it was saved). A scan of the log: for a page,
    /// not for the request path.
    pub fn count_by_actor_since(&self, actor: &str, since_ms: i64) -> Result<i64> {
        self.flush();
        self.db.conn()?.query_one(
            "SELECT COUNT(*) FROM audit_events WHERE actor = ?1 AND at >= ?2",
            args![actor, since_ms],
            |r| r.get(0),
        )
    }

    /// How many calls each rule decided at or after `since_ms`, among those
    /// `scope` may read: every call a rule let through, paused (its pending
    /// entry names the rule), blocked or held to its rate, each once however
    /// many of its entries name the rule (an input round). One scan of the
    /// window, for a page; rules that decided nothing are absent.
    pub fn decided_by_rules_since(&self, since_ms: i64, scope: &HistoryScope) -> Result<Vec<(String, i64)>> {
        self.flush();
        let (mut clauses, mut values) = matching(&HistoryFilter::default(), scope, "")?;
        clauses.push("at >= ?".into());
        values.push(Value::Int(since_ms));
        clauses.push("actor LIKE 'rule:%'".into());
        let sql = format!(
            "SELECT actor, COUNT(DISTINCT execution_id) FROM audit_events {} GROUP BY actor",
            where_sql(&clauses)
        );
        let counts: Vec<(String, i64)> = self.db.conn()?.query(&sql, &values, |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(counts
            .into_iter()
            .filter_map(|(actor, n)| match actor.parse::<Actor>() {
                Ok(Actor::Rule(name)) => Some((name, n)),
                _ => None,
            })
            .collect())
    }

    /// The arguments the record kept of a call (on its first entry that
    /// holds any), if it kept them.
    pub fn kept_arguments(&self, execution_id: &ExecutionId) -> Result<Option<KeptArguments>> {
        self.flush();
        let text: Option<String> = self.db.conn()?.query_opt(
            "SELECT arguments FROM audit_events WHERE execution_id = ?1 AND arguments IS NOT NULL ORDER BY id LIMIT 1",
            args![execution_id],
            |r| r.get(0),
        )?;
        Ok(text.and_then(|text| serde_json::from_str(&text).ok()))
    }

    /// The arguments the record kept of each call a person approved for
    /// agent `agent` of the owner with id `owner_id` (`None`: owner-less) to
    /// `tool` at or after `since_ms`: what a suggested grant is made from
    /// (`grants::suggest`). Found through the approvals' own index.
    pub fn approved_arguments(
        &self,
        owner_id: Option<gatehouse_model::UserId>,
        agent: &str,
        tool: &str,
        since_ms: i64,
        at_most: u32,
    ) -> Result<Vec<KeptArguments>> {
        self.flush();
        // Each approval once, with its call's first kept arguments; the
        // newest `at_most` (the partial index `audit_approvals` reads them).
        let texts: Vec<Option<String>> = self.db.conn()?.query(
            "SELECT (SELECT p.arguments FROM audit_events p WHERE p.execution_id = a.execution_id
                       AND p.arguments IS NOT NULL ORDER BY p.id LIMIT 1)
             FROM audit_events a
             WHERE a.state = 'approved' AND a.agent = ?1 AND a.tool = ?2 AND a.at >= ?3
               AND a.owner_id IS NOT DISTINCT FROM ?4 AND (?4 IS NOT NULL OR a.owner IS NULL)
               AND a.actor LIKE 'user:%'
             ORDER BY a.id DESC LIMIT ?5",
            args![agent, tool, since_ms, owner_id.map(|id| id.get()), i64::from(at_most)],
            |r| r.get(0),
        )?;
        Ok(texts.iter().flatten().filter_map(|text| serde_json::from_str(text).ok()).collect())
    }

    /// The latest entry of an execution.
    pub fn latest(&self, execution_id: &ExecutionId) -> Result<Option<AuditEntry>> {
        self.flush();
        self.db.conn()?.query_opt(
            &format!("SELECT {COLUMNS} FROM audit_events WHERE execution_id = ?1 ORDER BY id DESC LIMIT 1"),
            args![execution_id],
            row,
        )
    }

    /// Every entry of an execution, oldest first: its timeline.
    pub fn timeline(&self, execution_id: &ExecutionId) -> Result<Vec<AuditEntry>> {
        self.flush();
        self.db.conn()?.query(
            &format!("SELECT {COLUMNS} FROM audit_events WHERE execution_id = ?1 ORDER BY id"),
            args![execution_id],
            row,
        )
    }

    /// Who took an execution out of pending (the approve, decline, expiry or
    /// cancellation entry's actor).
    pub fn decided_by(&self, execution_id: &ExecutionId) -> Result<Option<String>> {
        self.flush();
        Ok(self
            .db
            .conn()?
            .query_opt(
                "SELECT actor FROM audit_events WHERE execution_id = ?1
                 AND state IN ('approved', 'declined', 'expired', 'cancelled', 'abandoned') ORDER BY id LIMIT 1",
                args![execution_id],
                |r| r.get::<Option<String>>(0),
            )?
            .flatten())
    }

    /// Up to `limit` entries `scope` may read that `filter` lets through,
    /// newest first (older than `filter.before`, when set).
    pub fn search(&self, filter: &HistoryFilter, scope: &HistoryScope, limit: usize) -> Result<Vec<AuditEntry>> {
        self.flush();
        let (mut clauses, mut values) = matching(filter, scope, "")?;
        if let Some(before) = filter.before {
            clauses.push("id < ?".into());
            values.push(Value::Int(before));
        }
        values.push(Value::Int(i64::try_from(limit).unwrap_or(i64::MAX)));
        let sql = format!("SELECT {COLUMNS} FROM audit_events {} ORDER BY id DESC LIMIT ?", where_sql(&clauses));
        self.db.conn()?.query(&sql, &values, row)
    }

    /// Up to `limit` calls `scope` may read with an entry `filter` lets
    /// through, newest first, one row each with every step of the call
    /// folded in (oldest first). A call is placed by its latest matching
    /// entry, whose id is the cursor: `filter.before` takes calls placed
    /// before it. The one way a history is read by calls: the history page,
    /// `/api/history` and `gatehouse_audit_recent`.
    pub fn calls(&self, filter: &HistoryFilter, scope: &HistoryScope, limit: usize) -> Result<Vec<(i64, CallRow)>> {
        let found = self.search_calls(filter, scope, limit)?;
        let ids: Vec<ExecutionId> = found.iter().map(|e| e.execution_id.clone()).collect();
        let mut steps: std::collections::HashMap<ExecutionId, Vec<AuditEntry>> = std::collections::HashMap::new();
        for entry in self.timelines(&ids)? {
            steps.entry(entry.execution_id.clone()).or_default().push(entry);
        }
        Ok(found
            .into_iter()
            .map(|matched| {
                let placed = matched.id;
                let steps = steps.remove(&matched.execution_id).unwrap_or_else(|| vec![matched.clone()]);
                let latest = steps.last().cloned().unwrap_or(matched);
                (placed, CallRow { latest, steps })
            })
            .collect())
    }

    /// Each call's latest entry that `filter` lets through (see [`AuditLog::calls`]).
    fn search_calls(&self, filter: &HistoryFilter, scope: &HistoryScope, limit: usize) -> Result<Vec<AuditEntry>> {
        self.flush();
        let (mut clauses, mut values) = matching(filter, scope, "e.")?;
        // A call is listed at its latest matching entry: none later matches.
        let (later, later_values) = matching(filter, scope, "later.")?;
        let mut not_later = vec!["later.execution_id = e.execution_id".to_string(), "later.id > e.id".to_string()];
        not_later.extend(later);
        clauses.push(format!("NOT EXISTS (SELECT 1 FROM audit_events later {})", where_sql(&not_later)));
        values.extend(later_values);
        if let Some(before) = filter.before {
            clauses.push("e.id < ?".into());
            values.push(Value::Int(before));
        }
        values.push(Value::Int(i64::try_from(limit).unwrap_or(i64::MAX)));
        let columns: Vec<String> = COLUMNS.split(", ").map(|c| format!("e.{c}")).collect();
        let sql = format!(
            "SELECT {} FROM audit_events e {} ORDER BY e.id DESC LIMIT ?",
            columns.join(", "),
            where_sql(&clauses)
        );
        self.db.conn()?.query(&sql, &values, row)
    }

    /// Every entry of each of `executions`, oldest first.
    fn timelines(&self, executions: &[ExecutionId]) -> Result<Vec<AuditEntry>> {
        if executions.is_empty() {
            return Ok(Vec::new());
        }
        self.flush();
        let marks = vec!["?"; executions.len()].join(", ");
        let values: Vec<Value> = executions.iter().map(|id| Value::Text(id.to_string())).collect();
        let sql = format!("SELECT {COLUMNS} FROM audit_events WHERE execution_id IN ({marks}) ORDER BY id");
        self.db.conn()?.query(&sql, &values, row)
    }
}

/// `WHERE a AND b`, or nothing.
fn where_sql(clauses: &[String]) -> String {
    if clauses.is_empty() { String::new() } else { format!("WHERE {}", clauses.join(" AND ")) }
}

/// The clauses (over the columns of table alias `t`, `""` or `"e."`) and
/// their values that keep what `scope` may read and `filter` lets through,
/// its cursor aside.
fn matching(filter: &HistoryFilter, scope: &HistoryScope, t: &str) -> Result<(Vec<String>, Vec<Value>)> {
    let mut clauses: Vec<String> = Vec::new();
    let mut values: Vec<Value> = Vec::new();
    let mut add = |clause: String, value: Value| {
        clauses.push(clause);
        values.push(value);
    };
    match scope {
        HistoryScope::All => {}
        // By the user's id: a removed user's entries are no one's.
        HistoryScope::User(id) => add(format!("{t}owner_id = ?"), Value::Int(id.get())),
        HistoryScope::Owner(owner) => {
            add(format!("{t}owner_id = (SELECT id FROM users WHERE username = ?)"), Value::Text(owner.clone()))
        }
        // Another credential is someone else, whatever its agent name
        // and owner; only a thread's successor continues its line.
        HistoryScope::Agent(id) => add(
            format!(
                "{t}credential_id IN (SELECT c.id FROM credentials c, credentials me WHERE me.id = ?
                 AND (c.id = me.id OR (me.thread IS NOT NULL AND c.thread = me.thread
                                       AND c.owner IS NOT DISTINCT FROM me.owner)))"
            ),
            Value::Text(id.to_string()),
        ),
    }
    if !filter.agent.is_empty() {
        add(format!("{t}agent = ?"), Value::Text(filter.agent.clone()));
    }
    match filter.kind.as_str() {
        "" => {}
        "gated" => add(format!("substr({t}execution_id, 1, 5) = ?"), Value::Text("exec_".into())),
        "at_once" => add(format!("substr({t}execution_id, 1, 5) = ?"), Value::Text(format!("{AT_ONCE_PREFIX}_"))),
        other => {
            return Err(CoreError::Invalid { field: "kind", reason: format!("{other:?} is not gated or at_once") });
        }
    }
    if !filter.tool.is_empty() {
        add(format!("{t}tool = ?"), Value::Text(filter.tool.clone()));
    }
    match filter.upstream.as_str() {
        "" => {}
        // Gatehouse's own tools have no upstream.
        "gatehouse" => add(format!("{t}upstream IS NOT DISTINCT FROM ?"), Value::Null),
        name => add(format!("{t}upstream = ?"), Value::Text(name.to_string())),
    }
    if !filter.outcome.is_empty() {
        let state = filter.outcome_state().ok_or_else(|| CoreError::Invalid {
            field: "outcome",
            reason: format!("{:?} is not a state", filter.outcome),
        })?;
        // What a restart left open is stored as `abandoned` and reads as cancelled.
        let clause =
            if state == State::Cancelled { format!("{t}state IN (?, 'abandoned')") } else { format!("{t}state = ?") };
        add(clause, state.value());
    }
    if !filter.from.is_empty() {
        add(format!("{t}at >= ?"), Value::Int(day_start_ms("from", &filter.from)?));
    }
    if !filter.to.is_empty() {
        add(format!("{t}at < ?"), Value::Int(day_start_ms("to", &filter.to)? + DAY_MS));
    }
    if !filter.decider.is_empty() {
        if filter.decider.contains(':') {
            // An actor as written: a person by name and id is that person only.
            clauses.push(format!("{t}actor = ?"));
            values.push(Value::Text(filter.decider.clone()));
        } else {
            // A bare name: whoever had that name (`user:ada`, `user:ada#7`).
            let person = format!("user:{}", filter.decider);
            let with_id = format!("{person}#");
            let len = with_id.chars().count() as i64;
            clauses.push(format!("({t}actor = ? OR substr({t}actor, 1, ?) = ?)"));
            values.extend([Value::Text(person), Value::Int(len), Value::Text(with_id)]);
        }
    }
    Ok((clauses, values))
}

impl AuditLog {
    /// Whether this process is the one to send the notifications of entry
    /// `id`: always on SQLite (one process); on PostgreSQL the first replica
    /// to claim it, so a message goes out once, not once per replica.
    pub fn claim_notice(&self, id: i64) -> Result<bool> {
        let mut conn = self.db.conn()?;
        if conn.backend() == crate::db::Backend::Sqlite {
            return Ok(true);
        }
        let claimed = conn.execute(
            "INSERT INTO notify_claims (audit_id, claimed_at) VALUES (?1, ?2) ON CONFLICT (audit_id) DO NOTHING",
            args![id, self.clock.now_ms()],
        )?;
        Ok(claimed == 1)
    }

    /// Forgets notification claims older than a day (their entries were sent
    /// long ago); returns how many.
    pub fn prune_claims(&self) -> Result<usize> {
        let cutoff = self.clock.now_ms() - 24 * 3600 * 1000;
        self.db.conn()?.execute("DELETE FROM notify_claims WHERE claimed_at < ?1", args![cutoff])
    }

    /// How many entries the log holds.
    pub fn count(&self) -> Result<u64> {
        self.flush();
        let n: i64 = self.db.conn()?.query_one("SELECT COUNT(*) FROM audit_events", args![], |r| r.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Deletes the oldest entries while the log holds more than `max`, in
    /// this order, so what people decided goes last: first the entries of
    /// calls that ran or were refused at once (`call_…`: the bulk an agent
    /// can make on its own), then paused calls' entries that no person
    /// caused (pauses, runs, expiries), and only then people's decisions.
    /// Returns how many went. Works in batches, as [`Self::prune_older_than`].
    pub fn prune_to(&self, max: u64) -> Result<usize> {
        const BATCH: i64 = 5_000;
        let at_once = format!("{AT_ONCE_PREFIX}_%");
        let kinds = [
            "execution_id LIKE ?2",
            "execution_id NOT LIKE ?2 AND (actor IS NULL OR actor NOT LIKE 'user:%')",
            "execution_id LIKE ?2 OR execution_id NOT LIKE ?2",
        ];
        let mut total = 0;
        for kind in kinds {
            loop {
                let over = i64::try_from(self.count()?.saturating_sub(max)).unwrap_or(i64::MAX);
                if over == 0 {
                    return Ok(total);
                }
                let n = self.db.conn()?.execute(
                    &format!(
                        "DELETE FROM audit_events WHERE id IN \
                         (SELECT id FROM audit_events WHERE {kind} ORDER BY id LIMIT ?1)"
                    ),
                    args![over.min(BATCH), at_once.as_str()],
                )?;
                total += n;
                if n == 0 {
                    break;
                }
            }
        }
        Ok(total)
    }

    /// Forgets the kept arguments of entries older than `age`
    /// (`keep_arguments_for`); the entries themselves stay. How many.
    pub fn forget_arguments_older_than(&self, age: std::time::Duration) -> Result<usize> {
        let cutoff = self.clock.now_ms().saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX));
        self.flush();
        self.db
            .conn()?
            .execute("UPDATE audit_events SET arguments = NULL WHERE arguments IS NOT NULL AND at < ?1", args![cutoff])
    }

    /// Deletes entries older than `retention` (audit retention); returns how
    /// many. Works in batches so a large backlog never holds the database
    /// for long at a time.
    pub fn prune_older_than(&self, retention: std::time::Duration) -> Result<usize> {
        const BATCH: i64 = 5_000;
        let cutoff = self.clock.now_ms().saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        let mut total = 0;
        loop {
            let n = self.db.conn()?.execute(
                "DELETE FROM audit_events WHERE id IN (SELECT id FROM audit_events WHERE at < ?1 LIMIT ?2)",
                args![cutoff, BATCH],
            )?;
            total += n;
            if (n as i64) < BATCH {
                return Ok(total);
            }
        }
    }
}

/// Whose entries a reader may see.
#[derive(Debug, Clone)]
pub enum HistoryScope {
    /// Everyone's (admins).
    All,
    /// Those of the agents this user (by id) owns.
    User(UserId),
    /// Those of the agents this user (by name, looked up as their id) owns.
    Owner(String),
    /// Those of one agent, reading its own: its credential's and, if it
    /// has a thread, those of the credentials it succeeded in that thread
    /// (same thread, same owner or none) — never its owner's other agents'.
    Agent(CredentialId),
}

impl HistoryScope {
    /// What a signed-in person may read: everyone's for an admin, their
    /// own agents' otherwise.
    pub fn of(user: &crate::users::User) -> Self {
        if user.is_admin { HistoryScope::All } else { HistoryScope::User(user.id) }
    }
}

const DAY_MS: i64 = 24 * 3600 * 1000;

const COLUMNS: &str = "id, execution_id, at, state, tool, arguments_digest, agent, owner, actor, detail, credential_id, thread, upstream, arguments, owner_id";

/// Midnight UTC of a `YYYY-MM-DD` day, in Unix ms.
fn day_start_ms(field: &'static str, day: &str) -> Result<i64> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let date = time::Date::parse(day, &format)
        .map_err(|_| CoreError::Invalid { field, reason: format!("{day:?} is not a YYYY-MM-DD date") })?;
    Ok(date.midnight().assume_utc().unix_timestamp() * 1000)
}

/// A state is stored as its wire name.
impl Arg for State {
    fn value(&self) -> Value {
        Value::Text(self.as_str().to_string())
    }
}

/// The one place stored names become states: `abandoned`, written at start
/// for what a previous run left open, reads as cancelled; a name no state
/// has is an error, never a guess.
impl FromValue for State {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        let name = String::from_value(value)?;
        State::parse(&name).ok_or_else(|| format!("{name:?} is not a state"))
    }
}

fn row(r: &DbRow<'_>) -> Result<AuditEntry> {
    let at_ms: i64 = r.get(2)?;
    Ok(AuditEntry {
        id: r.get(0)?,
        execution_id: r.get(1)?,
        at_ms,
        at: rfc3339(at_ms),
        state: r.get(3)?,
        tool: r.get(4)?,
        arguments_digest: r.get(5)?,
        agent: r.get(6)?,
        owner: r.get(7)?,
        actor: r.get(8)?,
        detail: r.get(9)?,
        credential_id: r.get(10)?,
        thread: r.get(11)?,
        upstream: r.get(12)?,
        // Written here from a KeptArguments; anything else reads as not kept.
        arguments: r.get::<Option<String>>(13)?.and_then(|text| serde_json::from_str(&text).ok()),
        owner_id: r.get(14)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::time::Duration;

    fn allowed(execution_id: &str) -> Entry<'_> {
        Entry {
            execution_id,
            state: State::Allowed,
            tool: "fs_read",
            upstream: None,
            arguments_digest: "d",
            agent: "claude",
            owner: None,
            owner_id: None,
            credential_id: Some("cred_1"),
            thread: None,
            actor: Some("grant:g"),
            detail: None,
            arguments: None,
        }
    }

    #[tokio::test]
    async fn queued_entries_are_written_in_order_and_seen_by_the_next_read() {
        let log = AuditLog::new(Db::for_tests().unwrap(), Arc::new(ManualClock::new(1_764_460_800_000)));
        for n in 0..1_000 {
            log.append(allowed(&format!("exec_{n:04}"))).await.unwrap();
        }
        // No wait: the read itself waits for what was queued before it.
        let newest_first = log.search(&HistoryFilter::default(), &HistoryScope::All, 2_000).unwrap();
        let ids: Vec<&str> = newest_first.iter().rev().map(|e| e.execution_id.as_str()).collect();
        let expected: Vec<String> = (0..1_000).map(|n| format!("exec_{n:04}")).collect();
        assert_eq!(ids, expected.iter().map(String::as_str).collect::<Vec<_>>(), "every entry, in queue order");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn past_the_queues_bound_the_caller_waits_and_no_entry_is_dropped() {
        // SQLite on both suites: holding its one connection is how this test
        // makes the database busy (the queue's bound is the same on both).
        let log = AuditLog::new(Db::open_in_memory().unwrap(), Arc::new(ManualClock::new(1_764_460_800_000)));
        let total = QUEUE_CAPACITY + 300;
        // The database is busy (its one connection held here): the writer
        // can take at most one batch off the queue, so the queue fills.
        let busy = log.db.conn().unwrap();
        let appending = {
            let log = log.clone();
            tokio::spawn(async move {
                for n in 0..total {
                    log.append(allowed(&format!("exec_{n:05}"))).await.unwrap();
                }
            })
        };
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!appending.is_finished(), "the caller waits for room while the queue is full");
        drop(busy);
        appending.await.unwrap();
        let written = log.search(&HistoryFilter::default(), &HistoryScope::All, total + 10).unwrap();
        assert_eq!(written.len(), total, "every entry written once the database is free");
    }

    #[tokio::test]
    async fn an_entry_is_bounded_whatever_it_is_given() {
        let log = AuditLog::new(Db::for_tests().unwrap(), Arc::new(ManualClock::new(1_764_460_800_000)));
        let long = "x".repeat(100_000);
        log.append(Entry { detail: Some(&long), agent: &long, ..allowed("call_1") }).await.unwrap();
        let e = log.latest(&"call_1".into()).unwrap().unwrap();
        assert_eq!(e.detail.unwrap().chars().count(), MAX_DETAIL_CHARS + 1, "cut, with an ellipsis");
        assert_eq!(e.agent.chars().count(), MAX_NAME_CHARS + 1);
    }

    #[tokio::test]
    async fn a_log_over_its_size_loses_at_once_calls_first_and_peoples_decisions_last() {
        let log = AuditLog::new(Db::for_tests().unwrap(), Arc::new(ManualClock::new(1_764_460_800_000)));
        let decided = Entry { state: State::Declined, actor: Some("user:ada"), ..allowed("exec_a") };
        log.append(decided).await.unwrap();
        log.append(Entry { state: State::Pending, actor: None, ..allowed("exec_a") }).await.unwrap();
        for n in 0..20 {
            log.append(allowed(&format!("call_{n}"))).await.unwrap();
        }
        assert_eq!(log.count().unwrap(), 22);
        assert_eq!(log.prune_to(12).unwrap(), 10);
        let left = log.search(&HistoryFilter::default(), &HistoryScope::All, 100).unwrap();
        assert_eq!(left.len(), 12);
        assert!(left.iter().any(|e| e.execution_id.as_str() == "call_19"), "the newest at-once calls stay");
        assert!(!left.iter().any(|e| e.execution_id.as_str() == "call_0"), "the oldest go first");
        assert_eq!(log.prune_to(1).unwrap(), 11);
        let left = log.search(&HistoryFilter::default(), &HistoryScope::All, 100).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].actor.as_deref(), Some("user:ada"), "a person's decision goes last");
        assert_eq!(log.prune_to(0).unwrap(), 1);
    }

    #[tokio::test]
    async fn kept_arguments_are_read_back_and_forgotten_after_their_time_while_the_entry_stays() {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let log = AuditLog::new(Db::for_tests().unwrap(), clock.clone());
        let kept = KeptArguments::keep(&serde_json::json!({"path": "/tmp/a", "token": "t"}), &["token".into()], 100);
        log.append(Entry { arguments: Some(&kept), ..allowed("call_1") }).await.unwrap();
        log.append(Entry { state: State::Completed, ..allowed("call_1") }).await.unwrap();
        assert_eq!(log.kept_arguments(&"call_1".into()).unwrap(), Some(kept.clone()));
        let steps = log.timeline(&"call_1".into()).unwrap();
        assert_eq!((steps[0].arguments.as_ref(), steps[1].arguments.as_ref()), (Some(&kept), None));
        clock.advance(Duration::from_secs(10 * 24 * 3600));
        assert_eq!(log.forget_arguments_older_than(Duration::from_secs(30 * 24 * 3600)).unwrap(), 0);
        clock.advance(Duration::from_secs(21 * 24 * 3600));
        assert_eq!(log.forget_arguments_older_than(Duration::from_secs(30 * 24 * 3600)).unwrap(), 1);
        assert_eq!(log.kept_arguments(&"call_1".into()).unwrap(), None);
        assert_eq!(log.timeline(&"call_1".into()).unwrap().len(), 2, "the entries stay");
    }

    #[test]
    fn entries_older_than_the_retention_are_pruned() {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let log = AuditLog::new(Db::for_tests().unwrap(), clock.clone());
        // Plain SQL rather than `Entry`, so this test does not care which
        // columns entries gain.
        let record = |id: &str| {
            log.db
                .conn()
                .unwrap()
                .execute(
                    "INSERT INTO audit_events (execution_id, at, state, tool, arguments_digest, agent)
                     VALUES (?1, ?2, 'pending', 't', 'd', 'a')",
                    args![id, clock.now_ms()],
                )
                .unwrap()
        };
        record("exec_old");
        clock.advance(Duration::from_secs(60 * 24 * 3600));
        record("exec_new");
        clock.advance(Duration::from_secs(31 * 24 * 3600));
        assert_eq!(log.prune_older_than(Duration::from_secs(90 * 24 * 3600)).unwrap(), 1);
        assert!(log.latest(&"exec_old".into()).unwrap().is_none());
        assert!(log.latest(&"exec_new".into()).unwrap().is_some());
    }

    #[test]
    fn an_executions_later_entries_keep_its_first_owner_id_not_a_namesakes() {
        let clock = Arc::new(ManualClock::new(1_764_460_800_000));
        let log = AuditLog::new(Db::for_tests().unwrap(), clock.clone());
        // After what was queued: the writer keeps the order, raw SQL does not.
        let sql = |q: &str| {
            log.flush();
            log.db.conn().unwrap().execute(q, args![]).unwrap()
        };
        sql("INSERT INTO users (username, password_hash, created_at) VALUES ('ada', '', 0)");
        let id_of_ada =
            || log.db.conn().unwrap().query_opt("SELECT id FROM users", args![], |r| r.get::<i64>(0)).unwrap();
        let first_ada = id_of_ada().map(UserId::from);
        let write = |eid: &str, state: State, owner_id: Option<UserId>| {
            log.record(Entry {
                execution_id: eid,
                state,
                tool: "fs_write",
                upstream: None,
                arguments_digest: "d",
                agent: "claude",
                owner: Some("ada"),
                // As the credential minted for that ada carries it.
                owner_id,
                credential_id: Some("cred_1"),
                thread: None,
                actor: Some("agent:claude"),
                detail: None,
                arguments: None,
            })
        };
        write("e1", State::Pending, first_ada);
        write("e1", State::Approved, first_ada);
        // Ada is removed (her rows lose their id), a new "ada" is added, and
        // the call that was running finishes.
        sql("UPDATE audit_events SET owner_id = NULL");
        sql("DELETE FROM users");
        sql("INSERT INTO users (username, password_hash, created_at) VALUES ('ada', '', 0)");
        write("e1", State::Completed, first_ada);
        let new_ada = id_of_ada().map(UserId::from);
        write("e2", State::Pending, new_ada);
        let mine = log.search(&HistoryFilter::default(), &HistoryScope::User(new_ada.unwrap()), 100).unwrap();
        let ids: Vec<_> = mine.iter().map(|e| e.execution_id.as_str()).collect();
        assert_eq!(ids, vec!["e2"], "the new ada sees only her own call, not the old one's completion");
    }

    #[test]
    fn search_narrows_by_scope_and_filters_and_pages_by_id() {
        let clock = Arc::new(ManualClock::new(1_764_460_800_000)); // 2025-11-30T00:00:00Z
        let log = AuditLog::new(Db::for_tests().unwrap(), clock.clone());
        // Owners are users: their entries are kept by user id.
        log.db
            .conn()
            .unwrap()
            .execute(
                "INSERT INTO users (username, password_hash, created_at) VALUES ('ada', '', 0), ('bob', '', 0)",
                args![],
            )
            .unwrap();
        let write = |eid: &str, state: State, tool: &str, upstream: Option<&str>, owner: Option<&str>, actor: &str| {
            log.record(Entry {
                execution_id: eid,
                state,
                tool,
                upstream,
                arguments_digest: "d",
                agent: "claude",
                owner,
                owner_id: owner.map(|name| if name == "ada" { 1.into() } else { 2.into() }),
                credential_id: Some("cred_1"),
                thread: None,
                actor: Some(actor),
                detail: None,
                arguments: None,
            })
        };
        write("e1", State::Pending, "fs_write", Some("fs"), Some("ada"), "agent:claude");
        write("e1", State::Approved, "fs_write", Some("fs"), Some("ada"), "user:ada#1");
        clock.advance(Duration::from_secs(24 * 3600));
        write("e2", State::Pending, "gatehouse_policy_set", None, Some("bob"), "agent:claude");
        write("e2", State::Declined, "gatehouse_policy_set", None, Some("bob"), "user:root");
        // `abandoned` is no state an entry is written with: the start-up
        // pass writes it in SQL, as here (after what was queued).
        log.flush();
        log.db
            .conn()
            .unwrap()
            .execute(
                "INSERT INTO audit_events (execution_id, at, state, tool, arguments_digest, agent, actor, credential_id, upstream)
                 VALUES ('e3', ?1, 'abandoned', 'fs_write', 'd', 'claude', 'system', 'cred_1', 'fs')",
                args![clock.now_ms()],
            )
            .unwrap();

        let all = |f: &HistoryFilter| log.search(f, &HistoryScope::All, 100).unwrap();
        let ids = |v: Vec<AuditEntry>| v.into_iter().map(|e| e.id).collect::<Vec<_>>();
        assert_eq!(ids(all(&HistoryFilter::default())), vec![5, 4, 3, 2, 1], "newest first");
        let ada = log.search(&HistoryFilter::default(), &HistoryScope::Owner("ada".into()), 100).unwrap();
        assert_eq!(ids(ada), vec![2, 1], "an owner sees their own agents only");
        let by_id = log.search(&HistoryFilter::default(), &HistoryScope::User(2.into()), 100).unwrap();
        assert_eq!(ids(by_id), vec![4, 3], "bob, by his user id");
        let f = |build: fn(&mut HistoryFilter)| {
            let mut f = HistoryFilter::default();
            build(&mut f);
            f
        };
        assert_eq!(ids(all(&f(|f| f.upstream = "fs".into()))), vec![5, 2, 1]);
        assert_eq!(ids(all(&f(|f| f.upstream = "gatehouse".into()))), vec![4, 3], "own tools have no upstream");
        assert_eq!(ids(all(&f(|f| f.outcome = "declined".into()))), vec![4]);
        assert_eq!(ids(all(&f(|f| f.outcome = "cancelled".into()))), vec![5], "a restart's abandoned reads cancelled");
        assert_eq!(all(&f(|f| f.outcome = "cancelled".into()))[0].state, State::Cancelled);
        assert_eq!(ids(all(&f(|f| f.decider = "ada".into()))), vec![2], "a bare name is a user");
        assert_eq!(ids(all(&f(|f| f.decider = "user:ada#1".into()))), vec![2], "a person by id");
        assert_eq!(ids(all(&f(|f| f.decider = "user:ada#9".into()))), Vec::<i64>::new(), "a namesake is not them");
        assert_eq!(ids(all(&f(|f| f.decider = "system".into()))), Vec::<i64>::new());
        assert_eq!(ids(all(&f(|f| f.decider = "user:root".into()))), vec![4]);
        assert_eq!(ids(all(&f(|f| f.to = "2025-11-30".into()))), vec![2, 1], "to includes the whole day");
        assert_eq!(ids(all(&f(|f| f.from = "2025-12-01".into()))), vec![5, 4, 3]);
        assert_eq!(ids(all(&f(|f| f.tool = "fs_write".into()))), vec![5, 2, 1]);
        let page = log.search(&HistoryFilter { before: Some(4), ..Default::default() }, &HistoryScope::All, 2).unwrap();
        assert_eq!(ids(page), vec![3, 2], "keyset: older than the cursor");
        for bad in [f(|f| f.outcome = "maybe".into()), f(|f| f.from = "yesterday".into())] {
            assert!(matches!(log.search(&bad, &HistoryScope::All, 10), Err(CoreError::Invalid { .. })), "{bad:?}");
        }
        assert_eq!(
            log.timeline(&"e1".into()).unwrap().iter().map(|e| e.state).collect::<Vec<_>>(),
            vec![State::Pending, State::Approved]
        );
    }
}
