//! Listing one upstream: its tools, prompts, resources and templates, page
//! by page within `list_timeout`, `max_list_pages` and `max_list_items`,
//! tool and prompt names checked and put under the upstream's prefix; and
//! how long the upstream said its lists stay fresh (`ttlMs`), for the merged
//! lists' caching hints. What is exposed of them is decided above, in
//! `merged.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rmcp::RoleClient;
use rmcp::model::{PaginatedRequestParams, Prompt, Resource, ResourceTemplate, Tool};
use rmcp::service::Peer;

use super::errors::{error_chain, quoted, sanitize, summary};
use crate::config::UpstreamConfig;

/// One upstream's lists as offered, tool and prompt names prefixed.
#[derive(Default, Clone)]
pub(super) struct UpstreamLists {
    pub(super) tools: Vec<Tool>,
    pub(super) prompts: Vec<Prompt>,
    pub(super) resources: Vec<Resource>,
    pub(super) templates: Vec<ResourceTemplate>,
    /// How long the upstream said these lists stay fresh.
    pub(super) hints: ListHints,
}

/// An upstream's `ttlMs` for its prompt, resource and template lists (the
/// smallest over their pages; a page without one counts as 0), and when
/// Gatehouse listed them: what is left of it may be passed on to agents.
#[derive(Default, Clone, Copy, Debug)]
pub(super) struct ListHints {
    prompts: Option<u64>,
    resources: Option<u64>,
    templates: Option<u64>,
    listed_at: Option<Instant>,
}

/// Which list a caching hint is asked for.
#[derive(Clone, Copy, Debug)]
pub enum Listed {
    /// `prompts/list`.
    Prompts,
    /// `resources/list`.
    Resources,
    /// `resources/templates/list`.
    Templates,
}

impl ListHints {
    /// What is left of the upstream's `ttlMs` for `list`, if it listed one.
    pub(super) fn left(&self, list: Listed) -> Option<u64> {
        let ttl = match list {
            Listed::Prompts => self.prompts,
            Listed::Resources => self.resources,
            Listed::Templates => self.templates,
        }?;
        let age = self.listed_at.map_or(u64::MAX, |at| at.elapsed().as_millis() as u64);
        Some(ttl.saturating_sub(age))
    }
}

/// The smallest `ttlMs` of the pages seen (`u64::MAX`: none yet).
fn fresh_for(seen: &AtomicU64) -> Option<u64> {
    Some(seen.load(Ordering::Relaxed)).filter(|ttl| *ttl != u64::MAX)
}

/// Longest exposed tool or prompt name.
const MAX_NAME_LEN: usize = 128;

/// Whether an upstream's tool or prompt may be exposed under `exposed`:
/// 1 to 128 of `A-Z a-z 0-9 _ . -` (its own name not empty).
fn valid_name(own: &str, exposed: &str) -> bool {
    !own.is_empty()
        && exposed.len() <= MAX_NAME_LEN
        && exposed.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Why an upstream's lists could not be listed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ListError {
    /// `tools/list` failed.
    #[error("tools/list failed: {0}")]
    Tools(String),
    /// The whole listing took longer than `list_timeout`.
    #[error("no complete catalogue within list_timeout ({})", humantime::format_duration(*.0))]
    Timeout(Duration),
}

/// An upstream's lists as listed, and what the listing refused or cut short.
pub(super) struct Listing {
    pub(super) lists: UpstreamLists,
    pub(super) problems: Vec<String>,
}

/// Everything an upstream offers, within `list_timeout`, with tool and
/// prompt names under its prefix; names that may not be exposed are refused
/// and long lists cut at `max_list_pages` / `max_list_items`.
pub(super) async fn list_upstream(config: &UpstreamConfig, peer: &Peer<RoleClient>) -> Result<Listing, ListError> {
    tokio::time::timeout(config.list_timeout, list_all(config, peer))
        .await
        .map_err(|_| ListError::Timeout(config.list_timeout))?
}

async fn list_all(config: &UpstreamConfig, peer: &Peer<RoleClient>) -> Result<Listing, ListError> {
    let caps = peer.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
    let mut problems = Vec::new();
    let tools = list_pages(config, "tools", &mut problems, |p| async move {
        peer.list_tools(p).await.map(|r| (r.tools, r.next_cursor))
    })
    .await
    .map_err(|e| ListError::Tools(error_chain(&e)))?;
    let tools = checked_names(
        config,
        "tool",
        tools,
        &mut problems,
        |t| t.name.to_string(),
        |t, exposed| {
            t.name = exposed.into();
        },
    );
    let listed_at = Instant::now();
    let ttls = [AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)];
    let prompts = if caps.prompts.is_some() {
        let ttl = &ttls[0];
        let listed = list_pages(config, "prompts", &mut problems, |p| async move {
            peer.list_prompts(p).await.map(|r| {
                ttl.fetch_min(r.ttl_ms.unwrap_or(0), Ordering::Relaxed);
                (r.prompts, r.next_cursor)
            })
        })
        .await;
        let prompts = optional(config, "prompts", listed, &mut problems);
        checked_names(config, "prompt", prompts, &mut problems, |p| p.name.clone(), |p, exposed| p.name = exposed)
    } else {
        Vec::new()
    };
    let (resources, templates) = if caps.resources.is_some() {
        let ttl = &ttls[1];
        let listed = list_pages(config, "resources", &mut problems, |p| async move {
            peer.list_resources(p).await.map(|r| {
                ttl.fetch_min(r.ttl_ms.unwrap_or(0), Ordering::Relaxed);
                (r.resources, r.next_cursor)
            })
        })
        .await;
        let resources = optional(config, "resources", listed, &mut problems);
        let ttl = &ttls[2];
        let listed = list_pages(config, "resource templates", &mut problems, |p| async move {
            peer.list_resource_templates(p).await.map(|r| {
                ttl.fetch_min(r.ttl_ms.unwrap_or(0), Ordering::Relaxed);
                (r.resource_templates, r.next_cursor)
            })
        })
        .await;
        (resources, optional(config, "resources/templates", listed, &mut problems))
    } else {
        (Vec::new(), Vec::new())
    };
    let hints = ListHints {
        prompts: fresh_for(&ttls[0]),
        resources: fresh_for(&ttls[1]),
        templates: fresh_for(&ttls[2]),
        listed_at: Some(listed_at),
    };
    Ok(Listing { lists: UpstreamLists { tools, prompts, resources, templates, hints }, problems })
}

/// A list an upstream may fail to give (prompts, resources): its failure
/// is noted, and nothing listed.
fn optional<T>(
    config: &UpstreamConfig,
    what: &str,
    listed: Result<Vec<T>, rmcp::service::ServiceError>,
    problems: &mut Vec<String>,
) -> Vec<T> {
    listed.unwrap_or_else(|e| {
        let problem = sanitize(&format!("{what}/list failed: {}", error_chain(&e)));
        tracing::warn!(upstream = %config.name, "{problem}");
        problems.push(problem);
        Vec::new()
    })
}

/// Follows one list's pages, stopping (with a problem noted) after
/// `max_list_pages` pages or `max_list_items` items.
async fn list_pages<T, F, Fut>(
    config: &UpstreamConfig,
    what: &str,
    problems: &mut Vec<String>,
    mut page: F,
) -> Result<Vec<T>, rmcp::service::ServiceError>
where
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), rmcp::service::ServiceError>>,
{
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for pages in 1.. {
        let params = cursor.take().map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let (got, next) = page(params).await?;
        items.extend(got);
        let cut = if items.len() > config.max_list_items {
            items.truncate(config.max_list_items);
            Some(format!("max_list_items ({})", config.max_list_items))
        } else if next.is_some() && pages >= config.max_list_pages {
            Some(format!("max_list_pages ({})", config.max_list_pages))
        } else {
            None
        };
        if let Some(limit) = cut {
            let problem = format!("{what} list cut at {limit}; the rest is not exposed");
            tracing::warn!(upstream = %config.name, "{problem}");
            problems.push(problem);
            break;
        }
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(items)
}

/// Puts `items` under the upstream's prefix, refusing those whose name may
/// not be exposed ([`valid_name`]) or that the upstream lists twice.
fn checked_names<T>(
    config: &UpstreamConfig,
    kind: &str,
    items: Vec<T>,
    problems: &mut Vec<String>,
    name: impl Fn(&T) -> String,
    rename: impl Fn(&mut T, String),
) -> Vec<T> {
    let prefix = config.prefix();
    let mut seen = std::collections::HashSet::new();
    let mut refused = Vec::new();
    let mut kept = Vec::new();
    for mut item in items {
        let own = name(&item);
        let exposed = format!("{prefix}{own}");
        if !valid_name(&own, &exposed) || !seen.insert(exposed.clone()) {
            refused.push(quoted(&own));
            continue;
        }
        rename(&mut item, exposed);
        kept.push(item);
    }
    if !refused.is_empty() {
        let problem = format!(
            "{kind} names refused (not 1 to {MAX_NAME_LEN} of A-Z a-z 0-9 _ . -, or listed twice): {}",
            summary(&refused, ", ")
        );
        // One line however many: a hostile list must not flood the log.
        tracing::warn!(upstream = %config.name, refused = refused.len(), "{problem}");
        problems.push(problem);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_short_and_plain() {
        assert!(valid_name("read_file", "files__read_file"));
        assert!(valid_name("a.b-c", "a.b-c"));
        assert!(!valid_name("", "files__"));
        assert!(!valid_name("read file", "files__read file"));
        assert!(!valid_name("naïve", "naïve"));
        assert!(!valid_name("x\n", "x\n"));
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert!(!valid_name(&long, &long));
        assert!(valid_name(&long[1..], &long[1..]));
    }
}
