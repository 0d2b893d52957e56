//! One agent's MCP session as the upstreams see it ([`Downstream`]): what an
//! upstream needs to reach that agent (its peer, log level, resource
//! subscriptions); and where a forwarded request came from ([`Origin`]).
//! (A "session" here is always the agent's MCP session; its own sessions at
//! HTTP upstreams are kept by the registry, a browser's sign-in session is
//! no concern of this side.)

// `logging/setLevel` is deprecated by SEP-2577 but still 2025-11-25.
#![allow(deprecated)]

use std::any::Any;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::RoleServer;
use rmcp::model::{ClientCapabilities, LoggingLevel, ProgressToken, ProtocolVersion, RequestId};
use rmcp::service::{Peer, RequestContext};
use tokio_util::sync::CancellationToken;

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// One agent's MCP session (or one stateless request), as upstreams see it.
pub struct Downstream {
    /// Process-unique key.
    pub(crate) key: u64,
    /// The agent's MCP session id; `None` for stateless requests, which then
    /// share each upstream's common client.
    mcp_session_id: OnceLock<String>,
    peer: OnceLock<Peer<RoleServer>>,
    level: Mutex<Option<LoggingLevel>>,
    /// A 2026-07-28 request's `io.modelcontextprotocol/logLevel` (set once,
    /// `None` inside when the request named none); replaces `level`.
    request_level: OnceLock<Option<LoggingLevel>>,
    subscriptions: Mutex<HashSet<String>>,
    /// What ends with this MCP session: the handle that closes its own
    /// sessions at HTTP upstreams when dropped. Opaque here: those are kept
    /// by the registry, above the relay that needs this type, so that
    /// imports run one way (this module needs nothing of the upstream side).
    ends_with: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl Downstream {
    /// A downstream with nothing bound yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Downstream {
            key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            mcp_session_id: OnceLock::new(),
            peer: OnceLock::new(),
            level: Mutex::new(None),
            request_level: OnceLock::new(),
            subscriptions: Mutex::new(HashSet::new()),
            ends_with: OnceLock::new(),
        })
    }

    /// Remembers the agent's peer and session id (the first ones seen win:
    /// both are fixed for a session's life).
    pub fn bind(&self, peer: &Peer<RoleServer>, mcp_session_id: Option<&str>) {
        if self.peer.get().is_none() {
            let _ = self.peer.set(peer.clone());
        }
        if let Some(sid) = mcp_session_id
            && self.mcp_session_id.get().is_none()
        {
            let _ = self.mcp_session_id.set(sid.to_string());
        }
    }

    /// The agent's peer, once a request has been seen.
    pub(crate) fn peer(&self) -> Option<&Peer<RoleServer>> {
        self.peer.get()
    }

    /// Whether this is a stateful session (it may own upstream sessions).
    pub(crate) fn stateful(&self) -> bool {
        self.mcp_session_id.get().is_some()
    }

    /// The agent's MCP session id (`None` for a stateless request).
    pub(crate) fn mcp_session_id(&self) -> Option<&str> {
        self.mcp_session_id.get().map(String::as_str)
    }

    /// What the agent's client declared it can do (sampling, elicitation, roots).
    pub(crate) fn capabilities(&self) -> ClientCapabilities {
        self.peer().and_then(|p| p.peer_info()).map(|i| i.capabilities.clone()).unwrap_or_default()
    }

    /// Sets the agent's `logging/setLevel`.
    pub fn set_level(&self, level: LoggingLevel) {
        *self.level.lock().unwrap_or_else(|p| p.into_inner()) = Some(level);
    }

    /// The level the agent asked for, if it asked.
    pub(crate) fn level(&self) -> Option<LoggingLevel> {
        *self.level.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes this (a 2026-07-28 request's) downstream hear log messages only
    /// at or above `level`, the request's `_meta` logLevel, and none when it
    /// named none: on 2026-07-28 a request asks for logs, or gets none.
    pub fn log_per_request(&self, level: Option<LoggingLevel>) {
        let _ = self.request_level.set(level);
    }

    /// Whether a message at `level` should reach the agent: at or above the
    /// request's logLevel on 2026-07-28; else at or above the session's
    /// `logging/setLevel` (default: info and up).
    pub(crate) fn wants_log(&self, level: LoggingLevel) -> bool {
        let floor = match self.request_level.get() {
            Some(None) => return false,
            Some(Some(asked)) => *asked,
            None => self.level().unwrap_or(LoggingLevel::Info),
        };
        severity(level) >= severity(floor)
    }

    /// Records a resource subscription; `false` if it was already there.
    pub(crate) fn subscribe(&self, uri: &str) -> bool {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).insert(uri.to_string())
    }

    /// Drops a resource subscription; `false` if there was none.
    pub(crate) fn unsubscribe(&self, uri: &str) -> bool {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).remove(uri)
    }

    /// Ties what `make` returns to this MCP session, dropped when the
    /// session ends; made at most once (later calls keep the first).
    pub(crate) fn end_with(&self, make: impl FnOnce() -> Box<dyn Any + Send + Sync>) {
        self.ends_with.get_or_init(make);
    }

    /// Every URI the agent subscribed to.
    pub(crate) fn subscriptions(&self) -> Vec<String> {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    /// Whether the agent subscribed to `uri`.
    pub(crate) fn subscribed(&self, uri: &str) -> bool {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).contains(uri)
    }
}

fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// Where a forwarded request came from: the agent's request, so that what the
/// upstream sends back while working on it (progress, sampling, elicitation)
/// reaches the same agent on the same stream, and its cancellation travels on.
#[derive(Clone)]
pub struct Origin {
    /// The agent's session.
    pub downstream: Arc<Downstream>,
    /// The agent's JSON-RPC request id.
    pub request_id: RequestId,
    /// The agent's progress token, if it asked for progress.
    pub progress: Option<ProgressToken>,
    /// Cancelled when the agent cancels its request.
    pub ct: CancellationToken,
    /// What the agent's client declared on this request (its `_meta` on
    /// 2026-07-28, else its session's `initialize`).
    pub capabilities: ClientCapabilities,
    /// The log level the request's `_meta` asked for (2026-07-28).
    pub log_level: Option<LoggingLevel>,
    /// Whether the agent speaks 2026-07-28 on this request: an upstream's
    /// input request then goes back to it as `input_required`, not as a
    /// server→client request (which rmcp refuses on that revision).
    pub modern: bool,
}

impl Origin {
    /// The origin of the request `ctx` is handling, for `downstream`.
    pub fn of(downstream: &Arc<Downstream>, ctx: &RequestContext<RoleServer>) -> Self {
        Origin {
            downstream: downstream.clone(),
            request_id: ctx.id.clone(),
            progress: ctx.meta.get_progress_token(),
            ct: ctx.ct.clone(),
            capabilities: ctx.client_capabilities().unwrap_or_else(|| downstream.capabilities()),
            log_level: ctx.meta.log_level(),
            modern: ctx.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_modern_request_hears_logs_only_when_it_asks_and_at_its_level() {
        let session = Downstream::new();
        assert!(session.wants_log(LoggingLevel::Info) && !session.wants_log(LoggingLevel::Debug), "2025: info and up");
        let silent = Downstream::new();
        silent.log_per_request(None);
        assert!(!silent.wants_log(LoggingLevel::Emergency), "2026 without logLevel: nothing");
        let asked = Downstream::new();
        asked.log_per_request(Some(LoggingLevel::Warning));
        assert!(asked.wants_log(LoggingLevel::Error) && !asked.wants_log(LoggingLevel::Info));
        asked.set_level(LoggingLevel::Debug);
        assert!(!asked.wants_log(LoggingLevel::Info), "the request's level stands");
    }
}
