//! The SQLite schema, one migration per step; PostgreSQL's twin is
//! `postgres_schema.rs` with the same numbering.

/// Applied in order by `rusqlite_migration` (which keeps the version in
/// `user_version`).
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: users, browser sessions, setup token, agent credentials, admin API tokens.
    r#"
    CREATE TABLE users (
        id            INTEGER PRIMARY KEY,
        username      TEXT NOT NULL UNIQUE,
        password_hash TEXT NOT NULL,
        is_admin      INTEGER NOT NULL DEFAULT 0,
        created_at    INTEGER NOT NULL
    );
    CREATE TABLE browser_sessions (
        token_hash  TEXT PRIMARY KEY,
        user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        created_at  INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL
    );
    CREATE TABLE setup_tokens (
        token_hash  TEXT PRIMARY KEY,
        created_at  INTEGER NOT NULL
    );
    CREATE TABLE credentials (
        id               TEXT PRIMARY KEY,
        token_hash       TEXT NOT NULL UNIQUE,
        agent            TEXT NOT NULL,
        thread           TEXT,
        provider_session TEXT,
        owner            TEXT,
        created_at       INTEGER NOT NULL,
        last_seen_at     INTEGER NOT NULL,
        revoked_at       INTEGER,
        revoked_reason   TEXT
    );
    CREATE INDEX credentials_thread ON credentials(thread) WHERE revoked_at IS NULL;
    CREATE INDEX credentials_provider ON credentials(provider_session) WHERE revoked_at IS NULL;
    CREATE TABLE api_tokens (
        id           TEXT PRIMARY KEY,
        name         TEXT NOT NULL,
        token_hash   TEXT NOT NULL UNIQUE,
        created_at   INTEGER NOT NULL,
        last_used_at INTEGER,
        revoked_at   INTEGER
    );
    "#,
    // 2: policy rules and the audit log of executions.
    r#"
    CREATE TABLE policy_rules (
        pattern     TEXT PRIMARY KEY,
        action      TEXT NOT NULL,
        human_only  INTEGER NOT NULL DEFAULT 0,
        updated_at  INTEGER NOT NULL
    );
    CREATE TABLE audit_events (
        id               INTEGER PRIMARY KEY,
        execution_id     TEXT NOT NULL,
        at               INTEGER NOT NULL,
        state            TEXT NOT NULL,
        tool             TEXT NOT NULL,
        arguments_digest TEXT NOT NULL,
        agent            TEXT NOT NULL,
        owner            TEXT,
        actor            TEXT,
        detail           TEXT
    );
    CREATE INDEX audit_execution ON audit_events(execution_id);
    "#,
    // 3: who made each call, so only that credential (or its successor on the
    // same thread) reads or resumes it.
    r#"
    ALTER TABLE audit_events ADD COLUMN credential_id TEXT;
    ALTER TABLE audit_events ADD COLUMN thread TEXT;
    CREATE INDEX audit_credential ON audit_events(credential_id);
    "#,
    // 4: the history page filters by upstream and pages a user's entries newest first.
    r#"
    ALTER TABLE audit_events ADD COLUMN upstream TEXT;
    CREATE INDEX audit_owner ON audit_events(owner, id);
    "#,
    // 5: who changed the configuration (rules, tool pins, users) and when.
    r#"
    CREATE TABLE changes (
        id      INTEGER PRIMARY KEY,
        at      INTEGER NOT NULL,
        actor   TEXT NOT NULL,
        subject TEXT NOT NULL,
        target  TEXT NOT NULL,
        action  TEXT NOT NULL,
        detail  TEXT
    );
    CREATE INDEX changes_subject ON changes(subject, id);
    "#,
    // 6: the pinned definition of each upstream tool, and the last change rejected.
    r#"
    CREATE TABLE tool_pins (
        upstream        TEXT NOT NULL,
        tool            TEXT NOT NULL,
        digest          TEXT NOT NULL,
        definition      TEXT NOT NULL,
        pinned_at       INTEGER NOT NULL,
        pinned_by       TEXT NOT NULL,
        rejected_digest TEXT,
        rejected_by     TEXT,
        rejected_at     INTEGER,
        PRIMARY KEY (upstream, tool)
    );
    "#,
    // 7: users managed in the browser: disabled users, invited users (no
    // password yet: an empty hash), one-time invite and reset links (hashed).
    r#"
    ALTER TABLE users ADD COLUMN disabled_at INTEGER;
    CREATE TABLE password_links (
        token_hash  TEXT PRIMARY KEY,
        user_id     INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        purpose     TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        expires_at  INTEGER NOT NULL
    );
    CREATE INDEX password_links_user ON password_links(user_id);
    CREATE INDEX browser_sessions_user ON browser_sessions(user_id);
    "#,
    // 8: scoped grants — "allow this tool for this agent" for a session, a
    // while, or until revoked — with their use counts.
    r#"
    CREATE TABLE grants (
        id            TEXT PRIMARY KEY,
        agent         TEXT NOT NULL,
        owner         TEXT,
        tool          TEXT NOT NULL,
        arguments     TEXT NOT NULL,
        scope         TEXT NOT NULL,
        session_id    TEXT,
        created_by    TEXT NOT NULL,
        execution_id  TEXT NOT NULL,
        created_at    INTEGER NOT NULL,
        expires_at    INTEGER,
        uses          INTEGER NOT NULL DEFAULT 0,
        last_used_at  INTEGER
    );
    CREATE INDEX grants_session ON grants(session_id) WHERE session_id IS NOT NULL;
    "#,
    // 9: paused executions as they were asked for, so a pause outlives a
    // restart. The audit log holds their state; a row is deleted once its
    // execution settles (the arguments go with it; the audit keeps the digest).
    r#"
    CREATE TABLE pending_executions (
        id               TEXT PRIMARY KEY,
        tool             TEXT NOT NULL,
        upstream         TEXT,
        upstream_tool    TEXT,
        tool_digest      TEXT NOT NULL,
        arguments        TEXT NOT NULL,
        arguments_digest TEXT NOT NULL,
        agent            TEXT NOT NULL,
        credential_id    TEXT NOT NULL,
        thread           TEXT,
        owner            TEXT,
        session_id       TEXT,
        human_only       INTEGER NOT NULL,
        admin_only       INTEGER NOT NULL,
        created_at       INTEGER NOT NULL,
        expires_at       INTEGER NOT NULL
    );
    "#,
    // 10: OAuth 2.1 for MCP clients: how a credential was issued, the clients
    // (registered dynamically or by a metadata document), one-time codes and
    // the access and refresh tokens (all secrets as hashes only).
    r#"
    ALTER TABLE credentials ADD COLUMN issued_via TEXT NOT NULL DEFAULT 'token';
    ALTER TABLE credentials ADD COLUMN oauth_client TEXT;
    CREATE TABLE oauth_clients (
        client_id     TEXT PRIMARY KEY,
        kind          TEXT NOT NULL,
        name          TEXT NOT NULL,
        redirect_uris TEXT NOT NULL,
        auth_method   TEXT NOT NULL,
        secret_hash   TEXT,
        created_at    INTEGER NOT NULL,
        fetched_at    INTEGER,
        last_used_at  INTEGER
    );
    CREATE TABLE oauth_codes (
        code_hash      TEXT PRIMARY KEY,
        client_id      TEXT NOT NULL,
        owner          TEXT NOT NULL,
        agent          TEXT NOT NULL,
        redirect_uri   TEXT NOT NULL,
        code_challenge TEXT NOT NULL,
        resource       TEXT NOT NULL,
        created_at     INTEGER NOT NULL,
        expires_at     INTEGER NOT NULL,
        used_at        INTEGER,
        credential_id  TEXT
    );
    CREATE TABLE oauth_tokens (
        token_hash    TEXT PRIMARY KEY,
        kind          TEXT NOT NULL,
        credential_id TEXT NOT NULL,
        client_id     TEXT NOT NULL,
        resource      TEXT NOT NULL,
        created_at    INTEGER NOT NULL,
        expires_at    INTEGER NOT NULL,
        used_at       INTEGER
    );
    CREATE INDEX oauth_tokens_credential ON oauth_tokens(credential_id);
    "#,
    // 11: replicas sharing one PostgreSQL (a heartbeat each), which of them
    // holds each paused execution, and a version of the gate's configuration
    // (rules, pins, grants) their caches compare with. Unused on SQLite (one process), kept
    // so both schemas have the same steps.
    r#"
    CREATE TABLE replicas (
        id         TEXT PRIMARY KEY,
        started_at INTEGER NOT NULL,
        seen_at    INTEGER NOT NULL
    );
    ALTER TABLE pending_executions ADD COLUMN replica TEXT;
    CREATE TABLE config_version (version INTEGER NOT NULL);
    INSERT INTO config_version (version) VALUES (0);
    "#,
    // 12: a pause held inside a request keeps its row on PostgreSQL (other
    // replicas show and decide it), marked held, so a restart or an adoption
    // still settles it as abandoned. Always 0 on SQLite.
    r#"
    ALTER TABLE pending_executions ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
    "#,
    // 13: secret keys every replica on one database shares (the sealing key
    // of 2026-07-28 request states; SQLite keeps its own in the data dir).
    r#"
    CREATE TABLE server_keys (
        name TEXT PRIMARY KEY,
        key  TEXT NOT NULL
    );
    "#,
    // 14: which replica sends the notifications of each audit entry (the
    // first to claim it), so a message goes out once. Unused on SQLite.
    r#"
    CREATE TABLE notify_claims (
        audit_id   INTEGER PRIMARY KEY,
        claimed_at INTEGER NOT NULL
    );
    "#,
    // 15: pins cover the whole tool as forwarded (digest format 2; the
    // pins made before are format 1, carried over at their next listing only
    // if they covered all of the tool), and the upstreams whose first listing
    // was pinned: a tool one of them adds later waits for an admin. A row of
    // tool_pins with an empty digest records only the rejection of a tool
    // never pinned.
    r#"
    ALTER TABLE tool_pins ADD COLUMN digest_format INTEGER NOT NULL DEFAULT 1;
    CREATE TABLE pinned_upstreams (
        upstream  TEXT PRIMARY KEY,
        listed_at INTEGER NOT NULL
    );
    INSERT INTO pinned_upstreams (upstream, listed_at)
        SELECT upstream, MIN(pinned_at) FROM tool_pins GROUP BY upstream;
    "#,
    // 16: history is kept by the owner's user id, not the name, so a user
    // created later with a removed user's name reads none of their history
    // (removing a user clears the id from their rows: never matched again).
    r#"
    ALTER TABLE audit_events ADD COLUMN owner_id INTEGER;
    UPDATE audit_events SET owner_id = (SELECT users.id FROM users WHERE users.username = audit_events.owner)
        WHERE owner IS NOT NULL;
    CREATE INDEX audit_owner_id ON audit_events(owner_id, id);
    "#,
    // 17: the address each dynamically registered client came from (an
    // IPv6 address by its /64), so registration is bounded per address on
    // every replica; and indexes for the per-user bounds (credentials and
    // grants by owner).
    r#"
    ALTER TABLE oauth_clients ADD COLUMN registered_from TEXT;
    CREATE INDEX oauth_clients_unused_from ON oauth_clients(registered_from, created_at) WHERE last_used_at IS NULL;
    CREATE INDEX credentials_owner ON credentials(owner) WHERE revoked_at IS NULL;
    CREATE INDEX grants_owner ON grants(owner);
    "#,
    // 18: the results of tasks (SEP-2663): a gated call a client made as a
    // task runs once approved, and its result waits here for the client's
    // `tasks/get` (after a restart, or on another replica) until it expires.
    r#"
    CREATE TABLE task_results (
        task_id       TEXT PRIMARY KEY,
        credential_id TEXT NOT NULL,
        thread        TEXT,
        agent         TEXT NOT NULL,
        owner         TEXT,
        tool          TEXT NOT NULL,
        status        TEXT NOT NULL,
        result        TEXT NOT NULL,
        created_at    INTEGER NOT NULL,
        finished_at   INTEGER NOT NULL,
        expires_at    INTEGER NOT NULL
    );
    CREATE INDEX task_results_credential ON task_results(credential_id, finished_at);
    CREATE INDEX task_results_expires ON task_results(expires_at);
    "#,
    // 19: what replicas on one PostgreSQL must share rather than keep in
    // memory: the secrets a page shows once (a token minted in the console,
    // an invite or reset link), held briefly for the one user who may see
    // them, taken (deleted) when shown and swept when expired; and failed
    // sign-ins per address and per username, so N replicas do not give N
    // times the attempts (unused on SQLite: one process counts in memory).
    r#"
    CREATE TABLE show_once (
        kind       TEXT NOT NULL,
        handle     TEXT NOT NULL,
        viewer     TEXT NOT NULL,
        payload    TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (kind, handle)
    );
    CREATE INDEX show_once_expires ON show_once(expires_at);
    CREATE TABLE sign_in_failures (
        scope           TEXT NOT NULL,
        subject         TEXT NOT NULL,
        failures        INTEGER NOT NULL,
        last_failure_at INTEGER NOT NULL,
        blocked_until   INTEGER NOT NULL,
        forget_at       INTEGER NOT NULL,
        PRIMARY KEY (scope, subject)
    );
    CREATE INDEX sign_in_failures_forget ON sign_in_failures(forget_at);
    "#,
    // 20: rules with a name, scopes (agents, owners, upstreams, as JSON
    // lists of patterns) and a condition (`when`, CEL): several rules may
    // share a pattern, so the name is the key (an old rule is named by its
    // pattern).
    r#"
    CREATE TABLE policy_rules_named (
        name        TEXT PRIMARY KEY,
        pattern     TEXT NOT NULL,
        action      TEXT NOT NULL,
        human_only  INTEGER NOT NULL DEFAULT 0,
        agents      TEXT NOT NULL DEFAULT '[]',
        owners      TEXT NOT NULL DEFAULT '[]',
        upstreams   TEXT NOT NULL DEFAULT '[]',
        when_expr   TEXT,
        updated_at  INTEGER NOT NULL
    );
    INSERT INTO policy_rules_named (name, pattern, action, human_only, updated_at)
        SELECT pattern, pattern, action, human_only, updated_at FROM policy_rules;
    DROP TABLE policy_rules;
    ALTER TABLE policy_rules_named RENAME TO policy_rules;
    "#,
    // 21: rate limits on rules (`rate = "10/min"`, counted per agent,
    // owner or tool), counted here so the limit holds across replicas: one
    // row per rule, subject and window.
    r#"
    ALTER TABLE policy_rules ADD COLUMN rate TEXT;
    ALTER TABLE policy_rules ADD COLUMN rate_per TEXT;
    CREATE TABLE rate_counts (
        rule         TEXT NOT NULL,
        subject      TEXT NOT NULL,
        window_start INTEGER NOT NULL,
        count        INTEGER NOT NULL,
        PRIMARY KEY (rule, subject, window_start)
    );
    "#,
    // 22: shadow rules: saved, matched and audited, deciding nothing.
    r#"
    ALTER TABLE policy_rules ADD COLUMN shadow INTEGER NOT NULL DEFAULT 0;
    "#,
    // 23: single-use states: a sealed state Gatehouse handed an agent (an
    // upstream's input round) is good for one retry, remembered here by its
    // hash until it would have expired anyway, so a replay is refused after a
    // restart and on every replica. And whether an admin minted each
    // credential (what a rule's bare agent name may match).
    r#"
    CREATE TABLE spent_states (
        hash       TEXT PRIMARY KEY,
        expires_at INTEGER NOT NULL
    );
    CREATE INDEX spent_states_expires ON spent_states(expires_at);
    -- An admin's word on an upstream's tool annotations (over the config's trust_annotations).
    CREATE TABLE upstream_trust (
        upstream   TEXT PRIMARY KEY,
        trusted    INTEGER NOT NULL,
        changed_at INTEGER NOT NULL
    );
    -- Whether an admin minted the credential (rules' bare agent names match only these).
    ALTER TABLE credentials ADD COLUMN by_admin INTEGER NOT NULL DEFAULT 0;
    UPDATE credentials SET by_admin = 1 WHERE issued_via IN ('cli', 'api') OR owner IS NULL
        OR owner IN (SELECT username FROM users WHERE is_admin = 1);
    "#,
    // 24: when a registered OAuth client was first shown on a signed-in
    // person's consent page: from then on it no longer counts against (nor
    // can be evicted for) its address's never-used registrations.
    r#"
    ALTER TABLE oauth_clients ADD COLUMN seen_at INTEGER;
    -- Who saw it (a user id): one person keeps only a few out of the count.
    ALTER TABLE oauth_clients ADD COLUMN seen_by INTEGER;
    "#,
    // 25: approved calls waiting on their agent's answers to an upstream's
    // request for input, with the deadline past which the sweep ends them.
    r#"
    CREATE TABLE awaiting_input (
        execution_id TEXT PRIMARY KEY,
        until        INTEGER NOT NULL
    );
    CREATE INDEX awaiting_input_until ON awaiting_input(until);
    "#,
    // 26: tool profiles (which tools the agents a profile names see at
    // all), each kept as its JSON (model::Profile), changed on the console.
    r#"
    CREATE TABLE tool_profiles (
        name       TEXT PRIMARY KEY,
        spec       TEXT NOT NULL,
        updated_at INTEGER NOT NULL
    );
    "#,
    // 27: arguments kept by choice (`keep_arguments`): a call's first
    // entry holds them (model::KeptArguments, as JSON), bounded and
    // redacted, and goes with the entry at retention; a rule may say whose.
    r#"
    ALTER TABLE audit_events ADD COLUMN arguments TEXT;
    ALTER TABLE policy_rules ADD COLUMN keep_arguments TEXT;
    "#,
    // 28: the owner's name index goes: every read scopes by `owner_id`
    // (audit_owner_id) since migration 22, and each index is one more
    // entry written per call on the record. Suggested grants: a person's
    // approvals found by agent and tool (a partial index: only approvals,
    // a few rows, not every call), and the offers a person turned down.
    r#"
    DROP INDEX IF EXISTS audit_owner;
    CREATE INDEX audit_approvals ON audit_events(agent, tool, at) WHERE state = 'approved';
    CREATE TABLE declined_suggestions (
        user_id    INTEGER NOT NULL,
        owner_id   INTEGER NOT NULL,
        agent      TEXT NOT NULL,
        tool       TEXT NOT NULL,
        declined_at INTEGER NOT NULL,
        PRIMARY KEY (user_id, owner_id, agent, tool)
    );
    "#,
    // 29: an owner is known by user id, not by name: a credential, a
    // waiting call, a grant and a task's result carry their owner's id beside the name (the
    // name is what pages show; the id is what access and matching compare),
    // so a user added later under a removed user's name, or a replica that
    // has not heard of the removal, never treats the old rows as theirs.
    r#"
    ALTER TABLE credentials ADD COLUMN owner_id INTEGER;
    ALTER TABLE pending_executions ADD COLUMN owner_id INTEGER;
    ALTER TABLE grants ADD COLUMN owner_id INTEGER;
    ALTER TABLE task_results ADD COLUMN owner_id INTEGER;
    UPDATE credentials SET owner_id = (SELECT id FROM users WHERE users.username = credentials.owner);
    UPDATE pending_executions SET owner_id = (SELECT id FROM users WHERE users.username = pending_executions.owner);
    UPDATE grants SET owner_id = (SELECT id FROM users WHERE users.username = grants.owner);
    DELETE FROM grants WHERE owner IS NOT NULL AND owner_id IS NULL;
    UPDATE task_results SET owner_id = (SELECT id FROM users WHERE users.username = task_results.owner);
    "#,
    // 30: upstreams run from the browser: the ones admins added (their
    // spec as JSON; secret headers included, the server sends them) and
    // every upstream's restart count, which each replica follows.
    r#"
    CREATE TABLE managed_upstreams (
        name       TEXT PRIMARY KEY,
        spec       TEXT NOT NULL,
        changed_at INTEGER NOT NULL
    );
    CREATE TABLE upstream_restarts (
        name         TEXT PRIMARY KEY,
        generation   INTEGER NOT NULL,
        restarted_at INTEGER NOT NULL
    );
    "#,
    // 31: notification targets admins added on the console (each its
    // spec as JSON; the secret included, the server signs with it).
    r#"
    CREATE TABLE managed_notify (
        name       TEXT PRIMARY KEY,
        spec       TEXT NOT NULL,
        changed_at INTEGER NOT NULL
    );
    "#,
];
