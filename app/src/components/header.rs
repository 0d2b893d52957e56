//! The header every signed-in page carries: navigation (with the live
//! pending count on "Approvals") and sign-out.

use leptos::prelude::*;
use leptos_router::hooks::use_location;

use gatehouse_model::routes;

use crate::components::live::use_inbox;
use crate::components::notify::NotifyButton;
use crate::server_fns::signed_in_as;

/// The console's sections, in the order the navigation shows them.
const SECTIONS: &[(&str, &str)] = &[
    (routes::APPROVALS, "Approvals"),
    (routes::AGENTS, "Agents"),
    (routes::GRANTS, "Grants"),
    (routes::HISTORY, "History"),
    (routes::POLICIES, "Policies"),
    (routes::TOOLS, "Tools"),
    (routes::UPSTREAMS, "Upstreams"),
    (routes::USERS, "Users"),
];

/// Header with the product name, navigation, who is signed in and sign-out,
/// on every page (the name is read once with the page, and serialized
/// into it, so hydration asks nothing more).
#[component]
pub fn Header() -> impl IntoView {
    let me = crate::json::resource(|| (), |_| signed_in_as());
    let username = move || me.get().and_then(Result::ok).flatten();
    let inbox = use_inbox();
    let pending = move || inbox.get().map(|i| i.total).filter(|n| *n > 0);
    let path = use_location().pathname;
    view! {
        <header class="top">
            <a class="brand" href=routes::HOME>"Gatehouse"</a>
            <nav aria-label="Main">
                {SECTIONS.iter().map(|(href, label)| {
                    let current = move || path.with(|p| p.starts_with(href)).then_some("page");
                    let is_approvals = *href == routes::APPROVALS;
                    view! {
                        <a href=*href aria-current=current>
                            {*label}
                            {is_approvals.then(|| view! {
                                <Show when=move || pending().is_some()>
                                    <span class="count" data-testid="pending-count"
                                        aria-label=move || format!("{} waiting", pending().unwrap_or(0))>
                                        {move || pending().unwrap_or(0)}
                                    </span>
                                </Show>
                            })}
                        </a>
                    }
                }).collect_view()}
            </nav>
            <NotifyButton/>
            <form method="post" action=routes::API_SIGN_OUT class="sign-out">
                <Suspense fallback=|| ()>
                    {move || username().map(|u| view! { <span class="who" data-testid="signed-in-as">{u}</span> })}
                </Suspense>
                <button type="submit" class="quiet">"Sign out"</button>
            </form>
        </header>
    }
}
