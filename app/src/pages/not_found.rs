//! Any unknown path: 404.

use leptos::prelude::*;
use leptos_meta::Title;

use crate::components::header::Header;
use crate::server_fns::get_viewer;

/// Unknown path.
#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    {
        if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
            response.set_status(http::StatusCode::NOT_FOUND);
        }
    }
    let me = crate::json::resource(|| (), |_| get_viewer());
    view! {
        <Title text="Not found — Gatehouse"/>
        // The console's header for someone signed in: the way back is one click.
        <Suspense fallback=|| ()>
            {move || me.get().and_then(Result::ok).and_then(|v| v.username).map(|_| view! { <Header/> })}
        </Suspense>
        <main class="narrow">
            <h1>"Not found"</h1>
            <p>"There is no page at this address. Check the link, or start from the home page."</p>
            <p><a href="/">"Home"</a></p>
        </main>
    }
}
