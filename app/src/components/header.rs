//! The header every signed-in page carries: navigation (with the live
//! pending count on "Approvals") and sign-out.

use leptos::prelude::*;
use leptos_router::hooks::use_location;

use gatehouse_model::routes;

use crate::components::live::use_inbox;
use crate::components::notify::NotifyButton;
use crate::server_fns::{Viewer, get_viewer};
use gatehouse_model::Theme;

/// The console's sections, in the order the navigation shows them (the
/// last, users, only to admins).
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
///
/// The viewer is read under one `<Suspense>` only: a resource read under
/// several boundaries can leave a server-rendered page unfinished, its
/// body never ending (leptos issue 4851, seen here under load about once
/// in a few thousand pages).
#[component]
pub fn Header() -> impl IntoView {
    let me = crate::json::resource(|| (), |_| get_viewer());
    view! {
        <Suspense fallback=|| view! { <Top viewer=None/> }>
            {move || me.get().map(|viewer| view! { <Top viewer=viewer.ok()/> })}
        </Suspense>
    }
}

/// A theme's symbol, for the phone's compact header.
fn theme_symbol(theme: Theme) -> &'static str {
    match theme {
        Theme::System => "◐",
        Theme::Light => "☀",
        Theme::Dark => "☾",
    }
}

/// The header as drawn for `viewer` (`None` while it loads, or if it could not be read).
#[component]
fn Top(viewer: Option<Viewer>) -> impl IntoView {
    let username = viewer.as_ref().and_then(|v| v.username.clone());
    let theme = viewer.as_ref().map(|v| v.theme).unwrap_or_default();
    let held = viewer.as_ref().map(|v| v.held).filter(|n| *n > 0);
    let is_admin = viewer.as_ref().is_some_and(|v| v.is_admin);
    let inbox = use_inbox();
    let pending = move || inbox.get().map(|i| i.total).filter(|n| *n > 0);
    let location = use_location();
    let path = location.pathname;
    // Where the theme form comes back to: this page, as it is.
    let here = move || match location.search.get() {
        q if q.is_empty() => path.get(),
        q => format!("{}?{q}", path.get()),
    };
    // On a phone the sections are a strip that scrolls on its own: bring
    // the current one into it.
    let strip = NodeRef::<leptos::html::Nav>::new();
    Effect::new(move |_| {
        path.track();
        #[cfg(feature = "hydrate")]
        if let Some(nav) = strip.get() {
            use wasm_bindgen::JsCast;
            if let Some(current) = nav
                .query_selector("a[aria-current=page]")
                .ok()
                .flatten()
                .and_then(|a| a.dyn_into::<web_sys::HtmlElement>().ok())
            {
                nav.set_scroll_left(current.offset_left() - nav.offset_left() - 12);
            }
        }
    });
    view! {
        <header class="top">
            <a class="brand" href=routes::HOME>"Gatehouse"</a>
            <nav aria-label="Main" node_ref=strip>
                {SECTIONS.iter().filter(|(href, _)| is_admin || *href != routes::USERS).map(|(href, label)| {
                    let current = move || path.with(|p| p.starts_with(href)).then_some("page");
                    let is_approvals = *href == routes::APPROVALS;
                    let is_tools = *href == routes::TOOLS;
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
                            // An admin learns here that a tool waits for their review.
                            {is_tools.then_some(held).flatten().map(|n| view! {
                                <span class="count held" data-testid="held-count" aria-label=format!("{n} held back for review")>{n}</span>
                            })}
                        </a>
                    }
                }).collect_view()}
            </nav>
            <NotifyButton/>
            // A plain form: it works before the script, and the choice is
            // kept in a cookie so every page is drawn in it from the start.
            <form method="post" action=routes::API_THEME class="theme" aria-label="Colours">
                <input type="hidden" name="next" value=here/>
                // A symbol on phones (the header stays two rows), the word
                // elsewhere; its name is the word either way.
                {Theme::ALL.into_iter().map(|t| view! {
                    <button type="submit" name="theme" value=t.as_str() class="quiet"
                        aria-pressed=(theme == t).to_string() aria-label=t.label() title=t.label()>
                        <span class="wide-only" aria-hidden="true">{t.label()}</span>
                        <span class="narrow-only" aria-hidden="true">{theme_symbol(t)}</span>
                    </button>
                }).collect_view()}
            </form>
            <form method="post" action=routes::API_SIGN_OUT class="sign-out">
                {username.map(|u| {
                    let current = move || path.with(|p| p == routes::ACCOUNT).then_some("page");
                    view! {
                        <a class="who" href=routes::ACCOUNT aria-current=current data-testid="signed-in-as"
                            title="Your account: password, sessions, agents, notifications">{u}</a>
                    }
                })}
                <button type="submit" class="quiet">"Sign out"</button>
            </form>
        </header>
    }
}
