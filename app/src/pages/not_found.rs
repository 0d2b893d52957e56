//! Any unknown path: 404.

use leptos::prelude::*;
use leptos_meta::Title;

/// Unknown path.
#[component]
pub fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    {
        if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
            response.set_status(http::StatusCode::NOT_FOUND);
        }
    }
    view! {
        <Title text="Not found — Gatehouse"/>
        <main class="narrow"><h1>"Not found"</h1><p><a href="/">"Home"</a></p></main>
    }
}
