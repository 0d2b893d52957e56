//! The types that cross Gatehouse's crates: what the store records, the
//! server sends and the pages show. Serde only, so the same definitions
//! compile into the server and into the browser's wasm bundle.

#![warn(missing_docs)]

pub mod activity;
pub mod actor;
pub mod api_token;
pub mod cookie;
pub mod credential;
pub mod execution;
pub mod grants;
pub mod history;
pub mod ids;
pub mod kept;
pub mod live;
pub mod note;
pub mod notify;
pub mod oauth;
pub mod profile;
pub mod routes;
pub mod rule;
pub mod state;
pub mod theme;
pub mod tools;
pub mod upstream;
pub mod user;

pub use activity::{ACTIVITY_DAYS, Activity, Busiest, DayDecisions};
pub use actor::{Actor, Hint, Via};
pub use api_token::{ApiTokenView, MintedApiToken};
pub use cookie::cookie_value;
pub use credential::{ClientConfig, CredentialStatus, CredentialView, IssuedVia, MintedCredential, RevokeScope};
pub use execution::{DecisionView, ExecutionView, INBOX_EVENT, INBOX_LIMIT, InboxView, PREVIEW_CHARS, preview_of};
pub use grants::{
    ArgMatch, GrantRequest, GrantScope, GrantSuggestion, GrantView, GrantsView, SUGGEST_AFTER, SUGGEST_FROM_AT_MOST,
    SUGGEST_WINDOW_MS, form_field_name,
};
pub use history::{
    AuditEntry, CallRow, CallsPage, ChangeEntry, ExportFormat, HISTORY_PAGE_SIZE, HistoryFilter, HistoryPage,
    HistoryPickers,
};
pub use ids::{CredentialId, ExecutionId, GrantId, UserId};
pub use kept::{Keep, KeptArguments};
pub use live::{LiveEvent, McpSessionInfo, SIGNED_OUT_EVENT, StreamEvent, UpstreamInfo};
pub use note::{MAX_NOTE_CHARS, NoteError, clean_note};
pub use notify::{MIN_SIGNING_SECRET, NotifyFormat, NotifySpec, valid_notify_name};
pub use oauth::{ConsentInfo, ConsentView};
pub use profile::{MAX_PROFILE_PATTERNS, Member, Profile};
pub use rule::{Per, Rate, Rule, RuleError, Source, Target, TargetKind};
pub use state::{Decision, State};
pub use theme::{THEME_COOKIE, Theme};
pub use tools::{
    Action, Basis, DiffLine, PINNED_FIELDS, PinView, ToolChange, ToolGate, ToolInfo, definition_field,
    definition_fields, line_diff,
};
pub use upstream::{
    Header, SpecError, TestFailed, Transport, UpstreamSpec, UpstreamTested, origin, origin_of, valid_upstream_name,
};
pub use user::{
    LinkPurpose, PasswordLink, SIGN_IN_ATTEMPT_COOKIE, SIGN_IN_ATTEMPT_SECS, SignInAttempt, UserStatus, UserView,
};
