//! `/setup`: the first-run page.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

/// First-run setup: the one-time link printed at start creates the admin.
#[component]
pub fn SetupPage() -> impl IntoView {
    let query = use_query_map();
    let token = move || query.read().get("token").unwrap_or_default();
    let error = move || query.read().get("error");
    view! {
        <Title text="Set up — Gatehouse"/>
        <main class="narrow">
            <h1>"Welcome to Gatehouse"</h1>
            <p>"Create the admin account. This link works once."</p>
            {move || error().map(|e| view! { <p role="alert" class="error">{e}</p> })}
            <form method="post" action="/api/auth/setup" class="stack">
                <input type="hidden" name="token" value=token/>
                <label>"Admin username" <input name="username" autocomplete="username" required/></label>
                <label>"Password (8 characters or more)"
                    <input name="password" type="password" autocomplete="new-password" minlength="8" required/>
                </label>
                <button type="submit" class="primary">"Create admin"</button>
            </form>
        </main>
    }
}
