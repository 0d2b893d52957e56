//! `/approvals`: the inbox.

use leptos::prelude::*;
use leptos_meta::Title;

use gatehouse_model::{InboxView, routes};

use crate::components::clock::use_now;
use crate::components::header::Header;
use crate::components::live::{LiveStatus, use_inbox, use_live_events};
use crate::components::name::Name;
use crate::server_fns::list_pending;
use crate::time_fmt::{exact, iso, relative};

/// `/approvals`: pending calls, arriving and leaving live (the stream's
/// `inbox` events replace the list the server rendered).
#[component]
pub fn InboxPage() -> impl IntoView {
    let rendered = crate::json::resource(|| (), |_| list_pending());
    let latest = use_inbox();
    let live = use_live_events(routes::APPROVAL_EVENTS.to_string(), |_| {});
    view! {
        <Title text="Approvals — Gatehouse"/>
        <Header/>
        <main class="page">
            <h1>"Waiting for approval"</h1>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || rendered.get().map(|result| match result {
                    Ok(first) => {
                        let current = Signal::derive(move || latest.get().unwrap_or_else(|| first.clone()));
                        view! { <Pending current/> }.into_any()
                    }
                    Err(e) => view! { <p role="alert">"Could not load: " {crate::outcome::message(&e)}</p> }.into_any(),
                })}
            </Suspense>
            <LiveStatus state=live/>
        </main>
    }
}

#[component]
fn Pending(current: Signal<InboxView>) -> impl IntoView {
    // Ticks once hydrated, so "expires soon" and the relative times move
    // with the clock without refetching; the server renders its own now.
    let now = use_now(current.get_untracked().now_ms);
    move || {
        let inbox = current.get();
        if inbox.pending.is_empty() {
            return view! { <p class="empty">"No call is waiting for a decision. When an agent's call needs you, it appears here at once."</p> }.into_any();
        }
        // A long backlog lists only the soonest to expire (INBOX_LIMIT).
        let more = inbox.truncated().then(|| {
            let text = format!(
                "Showing the {} that expire soonest of {} waiting; the next ones appear as these are decided.",
                inbox.pending.len(),
                inbox.total
            );
            view! { <p class="more" data-testid="inbox-more">{text}</p> }
        });
        view! {
            {more}
            <ul class="cards" aria-label="Pending approvals">
                {inbox.pending.into_iter().map(|e| {
                    let soon = {
                        let e = e.clone();
                        move || e.expires_soon(now.get())
                    };
                    let soon_class = soon.clone();
                    let expires = e.expires_at_ms;
                    view! {
                    <li class="card" class:expiring=soon_class data-execution-id=e.execution_id.to_string()
                        data-expiring=move || soon().to_string()>
                        <a class="tool-link" href=routes::resume(&e.execution_id, None)>
                            <strong><Name text=e.tool.clone()/></strong>
                        </a>
                        {e.admin_only.then(|| view! {
                            <span class="tag admin-only" title="It changes the gate for everyone">
                                {if e.decidable_by(inbox.is_admin) { "admin decision" } else { "needs an admin" }}
                            </span>
                        })}
                        <div class="meta">"from " <Name text=e.agent.clone()/>
                            {expires.map(|x| view! { " · expires " <time datetime=iso(x) title=exact(x)>{move || relative(x, now.get())}</time> })}
                        </div>
                    </li>
                    }
                }).collect_view()}
            </ul>
        }.into_any()
    }
}
