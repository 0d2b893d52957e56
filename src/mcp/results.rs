//! What every result Gatehouse serves carries: a `resultType` (required on
//! 2026-07-28) and, on lists and reads, caching hints (SEP-2549). The handler
//! passes each result through [`Served::served`] before rmcp sends it.
//!
//! rmcp drops `resultType: "complete"` again for agents on an older revision
//! and fills absent hints for newer ones, but it does not add an absent
//! `resultType`, which results passed through from a 2025-era upstream lack.
//!
//! # Caching hints
//!
//! - **`tools/list`** is `ttlMs: 0, cacheScope: private`: it is what policy
//!   rules and pins leave visible to this credential, and a new rule or a
//!   held-back tool must take effect at once: a hint must never let a client
//!   keep offering its model a tool that is now blocked.
//! - **`prompts/list`, `resources/list`, `resources/templates/list`** are
//!   merged from the upstreams' listings alone (no rule hides an entry from
//!   them): they carry what is left of the smallest `ttlMs` the upstreams
//!   gave when Gatehouse listed them (0 if one gave none), so the upstreams'
//!   word passes through. Private: Gatehouse answers each credential apart.
//! - **`resources/read`** keeps the upstream's `ttlMs` (0 when it gave none):
//!   the content is the upstream's to date. Its `cacheScope` is always
//!   `private`, whatever the upstream said: Gatehouse authenticates each
//!   agent and decides each read by rule, so a shared cache would hand one
//!   agent what only another was allowed to read.

use rmcp::model::{
    CacheScope, CallToolResponse, CallToolResult, CompleteResult, GetPromptResponse, GetPromptResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, ReadResourceResponse,
    ReadResourceResult, ResultType,
};

/// A result as Gatehouse serves it to agents.
pub trait Served: Sized {
    /// This result with `resultType` (`complete` where it had none) and the
    /// caching hints described in the [module docs](self).
    fn served(self) -> Self;
}

/// Gatehouse's merged lists: never cached, never shared.
macro_rules! own_list {
    ($($list:ty),*) => {$(
        impl Served for $list {
            fn served(mut self) -> Self {
                self.result_type.get_or_insert(ResultType::COMPLETE);
                self.ttl_ms = Some(0);
                self.cache_scope = Some(CacheScope::Private);
                self
            }
        }
    )*};
}

own_list!(ListToolsResult);

/// Lists merged from the upstreams' listings alone: the handler sets what is
/// left of the upstreams' `ttlMs` (0 where it does not); never shared.
macro_rules! merged_list {
    ($($list:ty),*) => {$(
        impl Served for $list {
            fn served(mut self) -> Self {
                self.result_type.get_or_insert(ResultType::COMPLETE);
                self.ttl_ms.get_or_insert(0);
                self.cache_scope = Some(CacheScope::Private);
                self
            }
        }
    )*};
}

merged_list!(ListPromptsResult, ListResourcesResult, ListResourceTemplatesResult);

impl Served for ReadResourceResult {
    fn served(mut self) -> Self {
        self.result_type.get_or_insert(ResultType::COMPLETE);
        self.ttl_ms.get_or_insert(0);
        self.cache_scope = Some(CacheScope::Private);
        self
    }
}

/// Results without caching hints: only `resultType`.
macro_rules! complete {
    ($($result:ty),*) => {$(
        impl Served for $result {
            fn served(mut self) -> Self {
                self.result_type.get_or_insert(ResultType::COMPLETE);
                self
            }
        }
    )*};
}

complete!(CallToolResult, GetPromptResult, CompleteResult);

/// The answers that may be `input_required` (or, for tools, a `task`): only a
/// complete result is touched, the others carry their own type.
macro_rules! response {
    ($($response:ident),*) => {$(
        impl Served for $response {
            fn served(self) -> Self {
                match self {
                    $response::Complete(result) => $response::Complete(result.served()),
                    other => other,
                }
            }
        }
    )*};
}

response!(CallToolResponse, GetPromptResponse, ReadResourceResponse);

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ResourceContents;

    #[test]
    fn an_upstream_read_is_never_shared_and_keeps_its_ttl() {
        let mut read = ReadResourceResult::new(vec![ResourceContents::text("x", "test://a")]);
        read.result_type = None;
        read.cache_scope = Some(CacheScope::Public);
        read.ttl_ms = Some(60_000);
        let served = read.served();
        assert_eq!(served.result_type, Some(ResultType::COMPLETE));
        assert_eq!(served.cache_scope, Some(CacheScope::Private));
        assert_eq!(served.ttl_ms, Some(60_000));
        let mut bare = ReadResourceResult::new(vec![]);
        bare.ttl_ms = None;
        assert_eq!(bare.served().ttl_ms, Some(0), "no hint from the upstream: stale at once");
    }

    #[test]
    fn own_lists_are_fresh_only_now_and_private() {
        let mut list = ListToolsResult::with_all_items(vec![]).with_ttl_ms(5_000).with_cache_scope(CacheScope::Public);
        list.result_type = None;
        let served = list.served();
        assert_eq!((served.ttl_ms, served.cache_scope), (Some(0), Some(CacheScope::Private)));
        assert_eq!(served.result_type, Some(ResultType::COMPLETE));
    }

    #[test]
    fn a_passed_through_prompt_gets_its_result_type() {
        let mut prompt = GetPromptResult::new(vec![]);
        prompt.result_type = None;
        assert_eq!(prompt.served().result_type, Some(ResultType::COMPLETE));
    }
}
