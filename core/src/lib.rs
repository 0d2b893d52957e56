//! Gatehouse's domain: the SQLite store, agent credentials, users and browser
//! sessions, admin API tokens and the live event hub.
//!
//! Both the server (`gatehouse`) and the site's server functions
//! (`gatehouse-app` with `ssr`) depend on this crate, so neither depends on the
//! other.

pub mod api_tokens;
pub mod approvals;
pub mod audit;
pub mod awaiting_input;
pub mod changes;
pub mod clock;
pub mod cluster;
pub mod credentials;
pub mod db;
pub mod error;
pub mod grants;
pub mod live;
pub mod maintenance;
pub mod managed;
pub mod normalise;
pub mod oauth;
pub mod pins;
pub mod policy;
pub mod secret;
pub mod show_once;
pub mod sign_in_failures;
pub mod single_use;
pub mod upstreams;
pub mod users;

/// The shared model (states, views, live events, routes), re-exported.
pub use gatehouse_model as model;

pub use clock::{Clock, ManualClock, SystemClock};
pub use db::Db;
pub use error::{CoreError, Status, StatusKind};

use std::sync::Arc;
use std::time::Duration;

/// Everything the server and the site share: one `Arc`, so the per-request
/// clones axum and the handlers make cost one atomic increment, not one per
/// store (the profile showed the field-by-field clone and drop on the hot path).
#[derive(Clone)]
pub struct Core(Arc<Stores>);

impl std::ops::Deref for Core {
    type Target = Stores;
    fn deref(&self) -> &Stores {
        &self.0
    }
}

/// The shared stores, reached through [`Core`].
pub struct Stores {
    /// The embedded database.
    pub db: Db,
    /// Source of "now" (injected in tests).
    pub clock: Arc<dyn Clock>,
    /// Agent credentials for `/mcp`.
    pub credentials: credentials::CredentialStore,
    /// Users, browser sessions and the first-run setup token.
    pub users: users::UserStore,
    /// Admin API tokens for orchestrators.
    pub api_tokens: api_tokens::ApiTokenStore,
    /// Live MCP sessions and the event fan-out the pages subscribe to.
    pub live: live::LiveHub,
    /// Who changed the configuration (rules, tool pins, users) and when.
    pub changes: changes::ChangeLog,
    /// Policy rules (config and database).
    pub policy: policy::PolicyStore,
    /// The pinned definition of each upstream tool.
    pub pins: pins::ToolPins,
    /// Paused executions and their decisions.
    pub approvals: approvals::ApprovalStore,
    /// Scoped grants ("allow this tool for this agent"), indexed in memory.
    pub grants: grants::GrantStore,
    /// The OAuth authorization server's clients, codes and tokens.
    pub oauth: oauth::OAuthStore,
    /// Upstreams admins added on the console, and restarts asked for there.
    pub upstreams: upstreams::UpstreamStore,
    /// Notification targets admins added on the console.
    pub notify: managed::ManagedTable<gatehouse_model::NotifySpec>,
    /// Secrets a page shows once (minted tokens, invite and reset links).
    pub show_once: show_once::ShowOnce,
}

/// Settings the stores need.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A credential lapses after this long without a sign of life.
    pub liveness_window: Duration,
    /// A pending execution expires after this long.
    pub approval_ttl: Duration,
    /// Policy rules from the config file.
    pub policy_rules: Vec<policy::Rule>,
    /// The config file's tool profiles.
    pub profiles: Vec<gatehouse_model::Profile>,
    /// Upstreams whose tool annotations the config trusts (`trust_annotations`).
    pub trusted_upstreams: Vec<String>,
    /// An approved execution must start running within this long.
    pub run_window: Duration,
    /// Live executions one credential may hold.
    pub max_executions_per_credential: usize,
    /// Lifetimes of OAuth access and refresh tokens.
    pub oauth: oauth::Lifetimes,
    /// What one user may hold at once.
    pub per_user: PerUser,
    /// When a call's page offers a grant.
    pub suggest: grants::suggest::Suggest,
}

/// What one user may hold at once; each bound is a config key of the name
/// given, and hitting it is refused with a message naming the key (except
/// browser sessions: a sign-in past the bound ends the user's oldest one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerUser {
    /// `max_credentials_per_user`: live agent credentials a user owns
    /// (issued in the console, the API or the CLI; OAuth sign-ins count
    /// separately).
    pub credentials: usize,
    /// `max_browser_sessions_per_user`: a sign-in past it ends the oldest session.
    pub browser_sessions: usize,
    /// `max_oauth_clients_per_user`: OAuth clients signed in as a user's
    /// agents at once (live credentials issued through OAuth).
    pub oauth_clients: usize,
    /// `max_grants_per_user`: live grants for a user's agents.
    pub grants: usize,
}

impl Default for PerUser {
    fn default() -> Self {
        Self { credentials: 100, browser_sessions: 50, oauth_clients: 50, grants: 500 }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            liveness_window: Duration::from_secs(24 * 3600),
            approval_ttl: Duration::from_secs(600),
            policy_rules: Vec::new(),
            profiles: Vec::new(),
            trusted_upstreams: Vec::new(),
            run_window: Duration::from_secs(300),
            max_executions_per_credential: 20,
            oauth: oauth::Lifetimes {
                access: Duration::from_secs(15 * 60),
                refresh: Duration::from_secs(30 * 24 * 3600),
                registration: oauth::Registration::default(),
            },
            per_user: PerUser::default(),
            suggest: grants::suggest::Suggest::default(),
        }
    }
}

impl Core {
    /// Runs `work` on the stores off the async threads: the one way async
    /// code (handlers, server functions, the gate) calls a store, through
    /// the database's bounded lane ([`Db::run`]). `Err` only if it panicked.
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce(Core) -> T + Send + 'static) -> Result<T, CoreError> {
        let core = self.clone();
        self.db.run(move || work(core)).await
    }

    /// Like [`Core::run`] for one short lookup on the hot path ([`Db::quick`]).
    pub async fn quick<T: Send + 'static>(
        &self,
        work: impl FnOnce(Core) -> T + Send + 'static,
    ) -> Result<T, CoreError> {
        let core = self.clone();
        self.db.quick(move || work(core)).await
    }

    /// Execution `id` as `user` sees it on its page and in the API: its
    /// view, with the grant offered to them if one fits
    /// ([`grants::suggest`]; an offer that cannot be read is left out, not
    /// an error). Reads the database: call it through [`Core::run`].
    pub fn execution_for(
        &self,
        user: &users::User,
        id: &gatehouse_model::ExecutionId,
    ) -> Result<gatehouse_model::ExecutionView, approvals::AccessError> {
        let mut view = self.approvals.view_for(user, id)?;
        match self.grants.suggestion_for(self.approvals.audit(), user, &view) {
            Ok(suggestion) => view.suggestion = suggestion,
            Err(e) => tracing::warn!(error = %e, execution = %id, "could not read whether to suggest a grant"),
        }
        Ok(view)
    }

    /// `user` turns down the grant offered on execution `id`'s page: it is
    /// not offered to them for that agent and tool again. Only someone who
    /// may see the call may (one path for the page's form and the API).
    /// Reads and writes the database: call it through [`Core::run`].
    pub fn decline_suggestion(
        &self,
        user: &users::User,
        id: &gatehouse_model::ExecutionId,
    ) -> Result<(), approvals::AccessError> {
        let view = self.approvals.view_for(user, id)?;
        self.grants.decline_suggestion(user, &view).map_err(|e| approvals::AccessError::Storage(e.to_string()))
    }

    /// One page (`limit` calls, newest first) of the history `user` may
    /// read: a row per call with its steps folded in, and what each grant
    /// that decided a call on it allows, in words ("grant: read_file for 8
    /// hours, made by alice"). What the history page and `/api/history`
    /// both answer. Reads the database: call it through [`Core::run`].
    pub fn calls_page(
        &self,
        user: &users::User,
        filter: &gatehouse_model::HistoryFilter,
        limit: usize,
    ) -> Result<gatehouse_model::CallsPage, approvals::AccessError> {
        let mut page = self.approvals.calls_for(user, filter, limit)?;
        let named: Vec<String> = page
            .calls
            .iter()
            .filter_map(|c| match c.decider()?.parse::<gatehouse_model::Actor>() {
                Ok(gatehouse_model::Actor::Grant(id)) => Some(id),
                _ => None,
            })
            .collect();
        if !named.is_empty() {
            let live = self.grants.list_for(user)?;
            page.grants = named
                .into_iter()
                .map(|id| {
                    let words = match live.iter().find(|g| g.id.as_str() == id) {
                        Some(g) => {
                            let by = g.created_by.parse::<gatehouse_model::Actor>().map(|a| a.words(&[]));
                            format!("grant: {}, made by {}", grants::describe(g), by.unwrap_or_default())
                        }
                        None => "a grant that has since ended".to_string(),
                    };
                    (id, words)
                })
                .collect();
        }
        Ok(page)
    }

    /// Builds the shared stores over an open database. The server then brings
    /// back a previous run's paused executions ([`approvals::ApprovalStore::restore`]).
    pub fn new(db: Db, clock: Arc<dyn Clock>, settings: Settings) -> Result<Self, CoreError> {
        let live = live::LiveHub::new();
        let audit = audit::AuditLog::new(db.clone(), clock.clone());
        let credentials =
            credentials::CredentialStore::new(db.clone(), clock.clone(), settings.liveness_window, live.clone())
                .with_per_user(settings.per_user);
        let oauth =
            oauth::OAuthStore::new(db.clone(), clock.clone(), credentials.clone(), live.clone(), settings.oauth);
        Ok(Self(Arc::new(Stores {
            approvals: approvals::ApprovalStore::new(
                audit,
                clock.clone(),
                approvals::Limits {
                    ttl: settings.approval_ttl,
                    run_window: settings.run_window,
                    per_credential: settings.max_executions_per_credential,
                },
                live.clone(),
            )?,
            policy: policy::PolicyStore::new(db.clone(), clock.clone(), settings.policy_rules)
                .trusting(settings.trusted_upstreams)
                .with_profiles(settings.profiles),
            changes: changes::ChangeLog::new(db.clone(), clock.clone()),
            grants: grants::GrantStore::load(
                db.clone(),
                clock.clone(),
                changes::ChangeLog::new(db.clone(), clock.clone()),
                live.clone(),
            )?
            .with_max_per_user(settings.per_user.grants)
            .with_suggest(settings.suggest),
            pins: pins::ToolPins::new(db.clone(), clock.clone()),
            credentials,
            oauth,
            users: users::UserStore::new(db.clone(), clock.clone())
                .with_live(live.clone())
                .with_max_sessions(settings.per_user.browser_sessions),
            api_tokens: api_tokens::ApiTokenStore::new(db.clone(), clock.clone()),
            show_once: show_once::ShowOnce::new(db.clone(), clock.clone()),
            upstreams: upstreams::UpstreamStore::new(db.clone(), clock.clone()),
            notify: managed::ManagedTable::new(db.clone(), clock.clone()),
            live,
            db,
            clock,
        })))
    }
}
