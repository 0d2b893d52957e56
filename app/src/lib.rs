//! Gatehouse's site: Leptos pages rendered on the server (`ssr`) and hydrated
//! in the browser (`hydrate`). Pages read live state through server functions
//! and re-read it whenever the server's SSE stream says something changed.

#![recursion_limit = "256"]

pub mod components;
pub mod json;
pub mod outcome;
pub mod pages;
pub mod redirect;
pub mod reveal;
pub mod server_fns;
pub mod time_fmt;
pub mod words;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Title, provide_meta_context};
use leptos_router::{
    ParamSegment, SsrMode, StaticSegment,
    components::{Route, Router, Routes},
};

/// The HTML document around the app (server side only).
pub fn shell(options: LeptosOptions) -> impl IntoView {
    use_response_nonce();
    // The bundle's name carries its content hash (the server's `site`
    // module), so the stylesheet is named here, beside the scripts.
    let stylesheet = format!("/{}/{}.css", options.site_pkg_dir, options.output_name);
    let theme = requested_theme();
    // The two pages a phone opens from a notification load without the
    // console's wasm: light.js chooses (see there).
    // Their stylesheet is inline too (one round trip less on a slow network).
    let light = light_page();
    let inline_style = light.then(use_context::<InlineStyle>).flatten();
    let style = match inline_style {
        Some(InlineStyle(css)) => view! { <style nonce=leptos::nonce::use_nonce() inner_html=css></style> }.into_any(),
        None => view! { <link rel="stylesheet" id="gatehouse" href=stylesheet/> }.into_any(),
    };
    let scripts = if light {
        view! {
            <template id="console-scripts"><HydrationScripts options/></template>
            <script nonce=leptos::nonce::use_nonce() inner_html=LIGHT_JS></script>
        }
        .into_any()
    } else {
        view! { <HydrationScripts options/> }.into_any()
    };
    view! {
        <!DOCTYPE html>
        <html lang="en" data-theme=theme.as_str()>
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <meta name="color-scheme" content="light dark"/>
                {style}
                {scripts}
                <MetaTags/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

/// The site's stylesheet as text, which the server provides: the light
/// pages carry it inline.
#[derive(Clone, Copy, Debug)]
pub struct InlineStyle(pub &'static str);

/// What the approvals page and a call's page run in the browser first.
const LIGHT_JS: &str = include_str!("light.js");

/// Whether the request is for a page that loads light: the approvals page
/// or a call's page.
fn light_page() -> bool {
    #[cfg(feature = "ssr")]
    if let Some(parts) = use_context::<http::request::Parts>() {
        let path = parts.uri.path();
        return path == gatehouse_model::routes::APPROVALS
            || path.strip_prefix("/resume/").is_some_and(|id| !id.is_empty() && !id.contains('/'));
    }
    false
}

/// The theme the request's cookie chose (the system's when none).
fn requested_theme() -> gatehouse_model::Theme {
    #[cfg(feature = "ssr")]
    if let Some(parts) = use_context::<http::request::Parts>() {
        let header = parts.headers.get(http::header::COOKIE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        return gatehouse_model::Theme::from_cookie_header(header);
    }
    gatehouse_model::Theme::System
}

/// Hands the nonce the server put in the request (and in the response's
/// Content Security Policy) to Leptos, so the hydration script and the
/// serialized resources carry the nonce the policy allows.
fn use_response_nonce() {
    #[cfg(feature = "ssr")]
    if let Some(nonce) =
        use_context::<http::request::Parts>().and_then(|parts| parts.extensions.get::<leptos::nonce::Nonce>().cloned())
    {
        provide_context(nonce);
    }
}

/// The routed application.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    let inbox = components::live::provide_live_inbox();
    components::notify::notify_new_pending(inbox);
    // Every page's title carries the pending count once a live stream has told it.
    let formatter = move |text: String| match inbox.get().map(|i| i.total) {
        Some(n) if n > 0 => format!("({n}) {text}"),
        _ => text,
    };
    view! {
        <Title formatter/>
        <Router>
            <Routes fallback=pages::not_found::NotFound>
                // Async SSR: the HTML carries the data, so pages work before
                // (and without) hydration instead of showing a fallback.
                <Route path=StaticSegment("") view=pages::home::HomePage ssr=SsrMode::Async/>
                <Route path=StaticSegment("sign-in") view=pages::sign_in::SignInPage ssr=SsrMode::Async/>
                <Route path=StaticSegment("setup") view=pages::setup::SetupPage/>
                <Route path=StaticSegment("set-password") view=pages::set_password::SetPasswordPage ssr=SsrMode::Async/>
                <Route path=StaticSegment("approvals") view=pages::inbox::InboxPage ssr=SsrMode::Async/>
                <Route path=StaticSegment("agents") view=pages::agents::AgentsPage ssr=SsrMode::Async/>
                <Route path=StaticSegment("grants") view=pages::grants::GrantsPage ssr=SsrMode::Async/>
                <Route path=StaticSegment("policies") view=pages::policies::PoliciesPage ssr=SsrMode::Async/>
                <Route path=StaticSegment("history") view=pages::history::HistoryPage ssr=SsrMode::Async/>
                <Route path=StaticSegment("tools") view=pages::tools::ToolsPage ssr=SsrMode::Async/>
                <Route path=StaticSegment("upstreams") view=pages::upstreams::UpstreamsPage ssr=SsrMode::Async/>
                <Route path=StaticSegment("users") view=pages::users::UsersPage ssr=SsrMode::Async/>
                <Route path=StaticSegment("account") view=pages::account::AccountPage ssr=SsrMode::Async/>
                <Route path=(StaticSegment("oauth"), StaticSegment("authorize")) view=pages::consent::ConsentPage ssr=SsrMode::Async/>
                <Route path=(StaticSegment("resume"), ParamSegment("eid")) view=pages::resume::ResumePage ssr=SsrMode::Async/>
            </Routes>
        </Router>
    }
}

/// Entry point of the wasm bundle: hydrates the server-rendered page.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
